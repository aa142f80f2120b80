//! The streaming OpenAI-compatible client that measures one probe.
//!
//! Timing discipline: the send instant is read just before the request is
//! handed to the HTTP stack (so connection setup counts, as a user feels
//! it); each SSE event is stamped right after [`SseReader`] yields it; the
//! whole probe runs under one deadline, and whatever was measured before a
//! failure stays in the record.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use serde::Serialize;
use thiserror::Error;

use crate::chunk::{error_message, parse_chunk, truncate};
use crate::record::{Api, OutputEvent, ProbeError, ProbeRecord, RequestInfo, TimeoutPhase, Usage};
use crate::sse::SseReader;

/// An API key. Its `Debug` and `Display` print `***`, so a key inside a
/// config or error struct can never reach a log line or a page.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The key itself, for the one place that needs it: the header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How to reach one target.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted).
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// Deadline for a whole probe, from sent to the end of the stream.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Cap on one response body: a runaway stream cannot eat memory.
    pub max_body_bytes: u64,
    /// Cap on one SSE event.
    pub max_event_bytes: usize,
    /// Honour `HTTP(S)_PROXY`. Off by default: a proxy in the path would be
    /// measured as the server.
    pub use_env_proxy: bool,
}

impl ClientConfig {
    /// Defaults: 10 min per probe (long outputs), 5 s connect, 64 MiB body,
    /// 1 MiB per event.
    pub fn new(base_url: impl Into<String>) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            api_key: None,
            timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(5),
            max_body_bytes: 64 << 20,
            max_event_bytes: 1 << 20,
            use_env_proxy: false,
        }
    }
}

/// A client that cannot be built.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("invalid base URL {url:?}: {message}")]
    InvalidUrl { url: String, message: String },
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
}

/// One streaming request to send.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRequest {
    pub api: Api,
    pub model: String,
    pub prompt: String,
    pub max_tokens: u32,
    /// Sent as `min_tokens` where set (vLLM, SGLang honour it).
    pub min_tokens: Option<u32>,
    /// Sent as `ignore_eos` when true, so output length is fixed.
    pub ignore_eos: bool,
    pub temperature: f32,
    /// Ask for `stream_options.continuous_usage_stats` (vLLM): usage in
    /// every chunk, the only way to know how many tokens an event carried.
    pub continuous_usage_stats: bool,
    /// Earlier turns of a conversation, oldest first, alternating user and
    /// assistant (chat: sent as messages before `prompt`; completions:
    /// prepended to it). Empty for a one-shot request.
    pub history: Vec<String>,
}

impl ProbeRequest {
    /// A fixed-length request: `max_tokens = min_tokens = N`,
    /// `ignore_eos`, temperature 0, continuous usage requested.
    pub fn fixed(
        api: Api,
        model: impl Into<String>,
        prompt: impl Into<String>,
        max_tokens: u32,
    ) -> ProbeRequest {
        ProbeRequest {
            api,
            model: model.into(),
            prompt: prompt.into(),
            max_tokens,
            min_tokens: Some(max_tokens),
            ignore_eos: true,
            temperature: 0.0,
            continuous_usage_stats: true,
            history: Vec::new(),
        }
    }

    /// The JSON body: `stream: true` with `include_usage`.
    pub fn body(&self) -> serde_json::Value {
        let mut stream_options = serde_json::json!({ "include_usage": true });
        if self.continuous_usage_stats {
            stream_options["continuous_usage_stats"] = true.into();
        }
        let mut body = serde_json::json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": true,
            "stream_options": stream_options,
        });
        match self.api {
            Api::Completions if self.history.is_empty() => {
                body["prompt"] = self.prompt.clone().into()
            }
            Api::Completions => {
                let mut text = self.history.join("\n\n");
                text.push_str("\n\n");
                text.push_str(&self.prompt);
                body["prompt"] = text.into();
            }
            Api::Chat => {
                let roles = ["user", "assistant"].into_iter().cycle();
                let mut messages: Vec<serde_json::Value> = self
                    .history
                    .iter()
                    .zip(roles)
                    .map(|(content, role)| serde_json::json!({ "role": role, "content": content }))
                    .collect();
                messages.push(serde_json::json!({ "role": "user", "content": self.prompt }));
                body["messages"] = messages.into();
            }
        }
        if self.ignore_eos {
            body["ignore_eos"] = true.into();
        }
        if let Some(m) = self.min_tokens {
            body["min_tokens"] = m.into();
        }
        body
    }

    /// The request with its JSON body encoded now, for a sender whose send
    /// must follow its timer at once (a trace replay): encoding a
    /// 1 000-token prompt after the wake-up was most of the median arrival
    /// error.
    pub fn encode(&self) -> EncodedRequest {
        EncodedRequest {
            info: self.info(),
            body: serde_json::to_vec(&self.body()).map_err(|e| e.to_string()),
        }
    }

    pub fn info(&self) -> RequestInfo {
        RequestInfo {
            api: self.api,
            model: self.model.clone(),
            max_tokens: self.max_tokens,
            min_tokens: self.min_tokens,
            ignore_eos: self.ignore_eos,
            temperature: self.temperature,
            prompt_chars: self.prompt.chars().count(),
        }
    }
}

/// A request whose body is encoded (see [`ProbeRequest::encode`]).
#[derive(Debug, Clone)]
pub struct EncodedRequest {
    info: RequestInfo,
    /// The JSON body, or why it could not be encoded.
    body: Result<Vec<u8>, String>,
}

/// The probe client of one target. Cheap to clone (shared connection pool).
#[derive(Clone)]
pub struct ProbeClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// The lean client and the base's path, where the base is plain HTTP
    /// without a proxy: every probe goes through it, reqwest keeps the rest.
    lean: Option<(llmwatch_http::Client, String)>,
    base: String,
    https: bool,
    config: ClientConfig,
}

impl fmt::Debug for ProbeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeClient")
            .field("base", &self.inner.base)
            .field("config", &self.inner.config)
            .finish()
    }
}

/// Reads at most this much of an error response, for its message.
const ERROR_BODY_LIMIT: usize = 64 << 10;

impl ProbeClient {
    pub fn new(config: ClientConfig) -> Result<ProbeClient, ClientError> {
        let base = normalize_base(&config.base_url)?;
        let https = base.starts_with("https://");
        let mut b = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30));
        if !config.use_env_proxy {
            b = b.no_proxy();
        }
        let http = b.build().map_err(|e| ClientError::Build(error_chain(&e)))?;
        let lean = if config.use_env_proxy {
            None
        } else {
            llmwatch_http::split_url(&base).map(|(origin, path)| {
                let lean_config = llmwatch_http::ClientConfig {
                    connect_timeout: config.connect_timeout,
                    idle_timeout: Duration::from_secs(30),
                    // The pool holds only connections that were in use at
                    // once, so the load's concurrency bounds it.
                    max_idle: usize::MAX,
                    ..llmwatch_http::ClientConfig::default()
                };
                let prefix = path.trim_end_matches('/').to_string();
                (llmwatch_http::Client::new(origin, lean_config), prefix)
            })
        };
        Ok(ProbeClient {
            inner: Arc::new(Inner {
                http,
                lean,
                base,
                https,
                config,
            }),
        })
    }

    /// The normalized base URL (no trailing `/` or `/v1`).
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The underlying HTTP client (shared pool), e.g. for `/tokenize`.
    pub fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Sends one streaming request and measures it. Never fails: a failure
    /// is a record with `error` set and whatever was measured before it.
    /// `scheduled_at` is when the load generator meant to send it.
    pub async fn probe(&self, req: &ProbeRequest, scheduled_at: Instant) -> ProbeRecord {
        self.probe_encoded(req.encode(), scheduled_at).await
    }

    /// [`ProbeClient::probe`] of a request encoded beforehand.
    pub async fn probe_encoded(&self, req: EncodedRequest, scheduled_at: Instant) -> ProbeRecord {
        let url = format!("{}{}", self.inner.base, req.info.api.path());
        let mut rec = ProbeRecord::new(req.info);
        let body = match req.body {
            Ok(b) => b,
            Err(e) => {
                rec.error = Some(ProbeError::Request {
                    message: format!("cannot encode the request: {e}"),
                });
                return rec;
            }
        };
        // The probe's own wall-clock stamp of the send (what the record
        // says it measured), next to the monotonic clock it times with.
        #[allow(clippy::disallowed_methods)]
        let wall_now = SystemTime::now();
        rec.wall_sent_unix_ms = wall_now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let sent = Instant::now();
        crate::spin::note_activity();
        rec.sent_at = Some(sent);
        rec.dispatch_lag_ns = ns(sent.saturating_duration_since(scheduled_at));
        let timeout = self.inner.config.timeout;
        let outcome =
            tokio::time::timeout(timeout, self.exchange(&mut rec, &url, body, sent)).await;
        match outcome {
            Ok(Ok(end)) => rec.e2e_ns = ns(end.saturating_duration_since(sent)),
            Ok(Err(e)) => {
                rec.e2e_ns = ns(sent.elapsed());
                rec.error = Some(e);
            }
            Err(_) => {
                rec.e2e_ns = ns(sent.elapsed());
                let phase = if rec.ttfb_ns.is_none() {
                    TimeoutPhase::Headers
                } else if rec.ttft_ns.is_none() {
                    TimeoutPhase::FirstToken
                } else {
                    TimeoutPhase::Stream
                };
                rec.error = Some(ProbeError::Timeout {
                    after_ms: timeout.as_millis() as u64,
                    phase,
                });
            }
        }
        finalize_tokens(&mut rec);
        rec
    }

    /// The request/response exchange; returns the instant the stream ended.
    async fn exchange(
        &self,
        rec: &mut ProbeRecord,
        url: &str,
        body: Vec<u8>,
        sent: Instant,
    ) -> Result<Instant, ProbeError> {
        let cfg = &self.inner.config;
        let mut answer = match &self.inner.lean {
            Some((client, prefix)) => self.send_lean(client, prefix, rec, url, &body).await?,
            None => self.send_reqwest(url, body).await?,
        };
        rec.ttfb_ns = Some(ns(sent.elapsed()));
        crate::spin::note_activity();
        let status = answer.status();
        rec.http_status = Some(status);
        if !(200..300).contains(&status) {
            let message = answer.error_message().await;
            return Err(ProbeError::HttpStatus { status, message });
        }
        let mut reader = SseReader::new(cfg.max_event_bytes);
        let mut state = StreamState::default();
        let mut body_bytes = 0u64;
        loop {
            let chunk = match answer.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(detail) => {
                    rec.body_bytes = body_bytes;
                    return Err(ProbeError::StreamCut {
                        events: rec.total_events,
                        detail: Some(detail),
                    });
                }
            };
            crate::spin::note_activity();
            body_bytes += chunk.len() as u64;
            rec.body_bytes = body_bytes;
            if body_bytes > cfg.max_body_bytes {
                return Err(ProbeError::BodyTooLarge {
                    limit_bytes: cfg.max_body_bytes,
                });
            }
            reader.feed(chunk);
            if let Some(end) = drain_events(&mut reader, rec, &mut state, sent)? {
                // Let the connection go back to the pool: read the chunked
                // terminator that follows [DONE], but never wait long for it.
                let _ = tokio::time::timeout(Duration::from_millis(20), async {
                    while let Ok(Some(_)) = answer.chunk().await {}
                })
                .await;
                return Ok(end);
            }
        }
        reader.finish();
        let closed = Instant::now();
        if let Some(end) = drain_events(&mut reader, rec, &mut state, sent)? {
            return Ok(end);
        }
        if rec.finish_reason.is_some() {
            // No [DONE] but a finish reason: the stream ended properly.
            return Ok(closed);
        }
        Err(ProbeError::StreamCut {
            events: rec.total_events,
            detail: None,
        })
    }

    /// Sends through the lean client (plain HTTP): one write, the answer
    /// read in place. A pooled connection the server had closed is
    /// replaced inside the client, the time lost staying in this request.
    async fn send_lean(
        &self,
        client: &llmwatch_http::Client,
        prefix: &str,
        rec: &ProbeRecord,
        url: &str,
        body: &[u8],
    ) -> Result<Answer, ProbeError> {
        let target = format!("{prefix}{}", rec.request.api.path());
        let authorization = self
            .inner
            .config
            .api_key
            .as_ref()
            .map(|key| format!("Bearer {}", key.expose()));
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "text/event-stream"),
        ];
        if let Some(value) = &authorization {
            headers.push(("Authorization", value));
        }
        let request = llmwatch_http::Request {
            method: "POST",
            target: &target,
            headers: &headers,
            body,
        };
        match client.send(&request).await {
            Ok(response) => Ok(Answer::Lean(response)),
            Err(e) if e.is_connect() => Err(ProbeError::Connect {
                url: url.to_string(),
                message: e.to_string(),
            }),
            Err(e) => Err(ProbeError::Request {
                message: e.to_string(),
            }),
        }
    }

    /// Sends through reqwest (TLS, proxies).
    async fn send_reqwest(&self, url: &str, body: Vec<u8>) -> Result<Answer, ProbeError> {
        let cfg = &self.inner.config;
        let body = bytes::Bytes::from(body);
        let mut resends = 0;
        loop {
            let mut rb = self
                .inner
                .http
                .post(url)
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
                .body(body.clone());
            if let Some(key) = &cfg.api_key {
                rb = rb.bearer_auth(key.expose());
            }
            match rb.send().await {
                Ok(response) => {
                    return Ok(Answer::Reqwest {
                        response,
                        current: bytes::Bytes::new(),
                    })
                }
                Err(e) if resends < MAX_RESENDS && closed_before_any_response(&e) => {
                    // As in the lean client: a pooled connection the server
                    // closed; resent at once on another.
                    resends += 1;
                }
                Err(e) => return Err(classify(&e, url, self.inner.https)),
            }
        }
    }
}

/// An answer being read, from either client.
enum Answer {
    Lean(llmwatch_http::Response),
    Reqwest {
        response: reqwest::Response,
        /// The piece last handed out (reqwest gives owned pieces).
        current: bytes::Bytes,
    },
}

impl Answer {
    fn status(&self) -> u16 {
        match self {
            Answer::Lean(response) => response.status(),
            Answer::Reqwest { response, .. } => response.status().as_u16(),
        }
    }

    /// The next piece of the body; `None` at its end; the reason it broke.
    async fn chunk(&mut self) -> Result<Option<&[u8]>, String> {
        match self {
            Answer::Lean(response) => response.chunk().await.map_err(|e| e.to_string()),
            Answer::Reqwest { response, current } => match response.chunk().await {
                Ok(Some(piece)) => {
                    *current = piece;
                    let current: &bytes::Bytes = current;
                    Ok(Some(current.as_ref()))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(reqwest_chain(&e)),
            },
        }
    }

    /// What an error answer says, from at most [`ERROR_BODY_LIMIT`] bytes.
    async fn error_message(&mut self) -> String {
        let mut buf = Vec::new();
        while buf.len() < ERROR_BODY_LIMIT {
            match self.chunk().await {
                Ok(Some(piece)) => buf.extend_from_slice(piece),
                _ => break,
            }
        }
        buf.truncate(ERROR_BODY_LIMIT);
        let text = String::from_utf8_lossy(&buf);
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) => error_message(&v),
            Err(_) if text.trim().is_empty() => "(empty body)".to_string(),
            Err(_) => truncate(text.trim(), 300),
        }
    }
}

/// Per-stream bookkeeping for token counts.
#[derive(Default)]
struct StreamState {
    /// `completion_tokens` as of the last output event, while the server
    /// streams continuous usage.
    accounted: Option<u64>,
}

/// Takes every complete event off the reader, stamping each as it comes.
/// Returns `Some(end)` at `[DONE]`.
fn drain_events(
    reader: &mut SseReader,
    rec: &mut ProbeRecord,
    state: &mut StreamState,
    sent: Instant,
) -> Result<Option<Instant>, ProbeError> {
    while let Some(ev) = reader.next_borrowed() {
        let at = Instant::now();
        let ev = ev.map_err(|e| ProbeError::InvalidSse {
            message: e.to_string(),
        })?;
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(Some(at));
        }
        if data.is_empty() {
            // An empty event (a keep-alive some proxies send) carries nothing.
            continue;
        }
        rec.total_events += 1;
        if ev.event == Some("error") {
            let message = serde_json::from_str::<serde_json::Value>(data)
                .map(|v| error_message(&v))
                .unwrap_or_else(|_| truncate(data, 300));
            return Err(ProbeError::ServerError { message });
        }
        let info = parse_chunk(&ev.data).map_err(|e| ProbeError::InvalidJson {
            event: rec.total_events,
            message: e.to_string(),
            snippet: truncate(&ev.data, 200),
        })?;
        if let Some(message) = info.error {
            return Err(ProbeError::ServerError { message });
        }
        let reported_here = info.usage.as_ref().and_then(|u| u.completion_tokens);
        if let Some(u) = info.usage {
            rec.usage = Some(merge_usage(rec.usage.take(), u));
        }
        if info.server_timing.is_some() {
            rec.server_timing = info.server_timing;
        }
        let at_ns = ns(at.saturating_duration_since(sent));
        if info.output {
            // Continuous usage: this event's tokens are the growth of the
            // cumulative count since the previous output event (tokens of
            // empty-text events in between belong to this one). Used only
            // if the server has done so since the first output event.
            let tokens = match reported_here {
                Some(now) if rec.events.is_empty() || state.accounted.is_some() => {
                    let before = state.accounted.unwrap_or(0);
                    state.accounted = Some(now);
                    u32::try_from(now.saturating_sub(before)).unwrap_or(u32::MAX)
                }
                _ => {
                    state.accounted = None;
                    1
                }
            };
            let reasoning = !info.visible;
            rec.events.push(OutputEvent {
                at_ns,
                tokens,
                reasoning,
            });
            rec.ttft_ns.get_or_insert(at_ns);
            if reasoning {
                rec.ttfr_ns.get_or_insert(at_ns);
            }
        }
        if info.visible {
            rec.ttfo_ns.get_or_insert(at_ns);
        }
        if let Some(f) = info.finish_reason {
            rec.finish_reason = Some(f);
        }
    }
    Ok(None)
}

/// A later usage block replaces an earlier one field by field (a final
/// block may omit the cached-token details an earlier one had).
fn merge_usage(old: Option<Usage>, new: Usage) -> Usage {
    match old {
        None => new,
        Some(o) => Usage {
            prompt_tokens: new.prompt_tokens.or(o.prompt_tokens),
            completion_tokens: new.completion_tokens.or(o.completion_tokens),
            total_tokens: new.total_tokens.or(o.total_tokens),
            cached_tokens: new.cached_tokens.or(o.cached_tokens),
            reasoning_tokens: new.reasoning_tokens.or(o.reasoning_tokens),
        },
    }
}

/// Output tokens: the server's count where reported, else counted events.
fn finalize_tokens(rec: &mut ProbeRecord) {
    match rec.usage.as_ref().and_then(|u| u.completion_tokens) {
        Some(c) => {
            rec.output_tokens = c;
            rec.output_tokens_estimated = false;
        }
        None => {
            rec.output_tokens = rec.events.iter().map(|e| u64::from(e.tokens)).sum();
            rec.output_tokens_estimated = true;
        }
    }
}

/// How often a request is resent after its pooled connection turned out to
/// be closed (one per idle connection the server may have dropped at once).
const MAX_RESENDS: u32 = 3;

/// A send that failed on a connection the server had closed, before any
/// response byte: hyper's `SendRequest` errors that say the connection was
/// closed, reset or its pipe broken (matched on their messages, since hyper
/// is not a direct dependency to downcast to). Which one a dead pooled
/// connection gives depends on timing: EOF before the write, or an RST after.
fn closed_before_any_response(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() {
        return false;
    }
    let chain = reqwest_chain(e).to_ascii_lowercase();
    chain.contains("(sendrequest)")
        && [
            "connection closed before message completed",
            "connection reset by peer",
            "broken pipe",
        ]
        .iter()
        .any(|closed| chain.contains(closed))
}

/// Maps a transport error to what a user can act on. TLS failures surface
/// from rustls inside hyper's connect error, so they are recognized by the
/// error chain's text (rustls is not a direct dependency to downcast to).
fn classify(e: &reqwest::Error, url: &str, https: bool) -> ProbeError {
    let message = reqwest_chain(e);
    let lower = format!("{message} {e:?}").to_ascii_lowercase();
    let tls_words = [
        "tls",
        "certificate",
        "handshake",
        "invalidcontenttype",
        "corrupt message",
        "invalidmessage",
        "peer is incompatible",
    ];
    if https && tls_words.iter().any(|w| lower.contains(w)) {
        return ProbeError::Tls {
            url: url.to_string(),
            message,
        };
    }
    if e.is_connect() {
        return ProbeError::Connect {
            url: url.to_string(),
            message,
        };
    }
    if e.is_timeout() {
        return ProbeError::Timeout {
            after_ms: 0,
            phase: TimeoutPhase::Headers,
        };
    }
    ProbeError::Request { message }
}

/// A reqwest error's causes, without its "error sending request for url
/// (…)" head: the record already names the URL.
fn reqwest_chain(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    match e.source() {
        Some(src) if e.url().is_some() => error_chain(src),
        _ => error_chain(e),
    }
}

/// The error and its sources, joined.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        src = s.source();
    }
    parts.join(": ")
}

fn normalize_base(raw: &str) -> Result<String, ClientError> {
    let invalid = |message: &str| ClientError::InvalidUrl {
        url: raw.to_string(),
        message: message.to_string(),
    };
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.host_str().is_none() {
        return Err(invalid("no host"));
    }
    let mut s = url.as_str().trim_end_matches('/').to_string();
    if s.ends_with("/v1") {
        s.truncate(s.len() - 3);
    }
    Ok(s)
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_prints() {
        let s = Secret::new("sk-live-123");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        let mut c = ClientConfig::new("http://x");
        c.api_key = Some(s);
        assert!(!format!("{c:?}").contains("sk-live"));
    }

    #[test]
    fn base_url_normalized() {
        assert_eq!(
            normalize_base("http://h:8000/v1/").unwrap(),
            "http://h:8000"
        );
        assert_eq!(normalize_base("https://h/api").unwrap(), "https://h/api");
        assert!(normalize_base("ftp://h").is_err());
        assert!(normalize_base("not a url").is_err());
    }

    #[test]
    fn body_has_stream_options() {
        let r = ProbeRequest::fixed(Api::Chat, "m", "hi", 16);
        let b = r.body();
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["stream_options"]["continuous_usage_stats"], true);
        assert_eq!(b["messages"][0]["content"], "hi");
        assert_eq!(b["min_tokens"], 16);
        assert_eq!(b["ignore_eos"], true);
        let r = ProbeRequest::fixed(Api::Completions, "m", "hi", 4);
        assert_eq!(r.body()["prompt"], "hi");
        // A conversation's history goes before the new turn.
        let mut r = ProbeRequest::fixed(Api::Chat, "m", "3?", 4);
        r.history = vec!["1?".into(), "one".into()];
        let roles: Vec<_> = r.body()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].clone(), m["content"].clone()))
            .collect();
        assert_eq!(
            roles,
            [("user", "1?"), ("assistant", "one"), ("user", "3?")]
                .map(|(r, c)| (r.into(), c.into()))
        );
        r.api = Api::Completions;
        assert_eq!(r.body()["prompt"], "1?\n\none\n\n3?");
    }
}
