//! One probe's raw timings and what is derived from them.
//!
//! All offsets are nanoseconds on the monotonic clock, measured from the
//! probe's *sent* instant (the moment the client handed the request to the
//! HTTP stack); `dispatch_lag_ns` links them to the *scheduled* instant, so
//! every "from scheduled" figure is `dispatch_lag_ns + x`. Raw event times
//! are kept so any peer tool's variant of a metric can be recomputed.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Which OpenAI-compatible endpoint a probe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/completions` (raw prompt, no chat template).
    Completions,
    /// `POST /v1/chat/completions` (one user message).
    Chat,
}

impl Api {
    /// The request path under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        }
    }

    /// Parses `completions` / `chat` (the config's `api` values).
    pub fn parse(s: &str) -> Option<Api> {
        match s.trim().to_ascii_lowercase().as_str() {
            "completions" | "completion" => Some(Api::Completions),
            "chat" | "chat-completions" | "chat_completions" => Some(Api::Chat),
            _ => None,
        }
    }
}

/// Token accounting as the server reported it in a `usage` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`: prefix-cache hits, the
    /// evidence for cache hygiene.
    pub cached_tokens: Option<u64>,
    /// `usage.completion_tokens_details.reasoning_tokens` (vLLM with a
    /// reasoning parser; OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// Which server clock a [`ServerTiming`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerTimingSource {
    /// vLLM ≥ 0.30 with `--enable-per-request-metrics`: the `metrics`
    /// object of the final usage chunk (needs `stream_options.include_usage`,
    /// which every probe sends; there is no request field to ask for it).
    VllmMetrics,
    /// llama.cpp's `timings` object on its final chunk (always sent).
    LlamacppTimings,
}

/// The server's own account of one request, in its clock, milliseconds.
/// Lined up with the client's timings of the same request it splits the
/// client's latency exactly: what the server does not account for is the
/// network, the HTTP front end, tokenization and the client.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerTiming {
    pub source: ServerTimingSource,
    /// Waiting for the scheduler (vLLM `queue_time_ms`; llama.cpp has none).
    pub queue_ms: Option<f64>,
    /// Scheduled → first token: prompt processing (vLLM
    /// `time_to_first_token_ms`, which excludes the queue; llama.cpp
    /// `prompt_ms`).
    pub prefill_ms: Option<f64>,
    /// First → last token (vLLM `generation_time_ms`; llama.cpp
    /// `predicted_ms`).
    pub decode_ms: Option<f64>,
    /// vLLM `mean_itl_ms`; llama.cpp `predicted_per_token_ms`.
    pub mean_itl_ms: Option<f64>,
    /// Prompt tokens the server took from its cache (llama.cpp `cache_n`).
    pub cached_tokens: Option<u64>,
}

impl ServerTiming {
    /// Queue + prefill: the server's time to the first token, from the
    /// moment its engine saw the request.
    pub fn to_first_token_ms(&self) -> Option<f64> {
        Some(self.queue_ms.unwrap_or(0.0) + self.prefill_ms?)
    }

    /// Queue + prefill + decode: the time the engine held the request.
    pub fn total_ms(&self) -> Option<f64> {
        Some(self.to_first_token_ms()? + self.decode_ms?)
    }
}

/// One streamed event that carried generated output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputEvent {
    /// When the event was parsed, ns after sent.
    pub at_ns: u64,
    /// Tokens it carried: the growth of `usage.completion_tokens` since the
    /// previous output event when the server streams continuous usage, else
    /// 1 (an assumption, flagged by `ProbeRecord::output_tokens_estimated`
    /// only when the server never sends usage at all).
    pub tokens: u32,
    /// The event carried reasoning (`reasoning_content` / `reasoning`) and
    /// nothing the user sees: a reasoning model thinking before it answers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning: bool,
}

/// What was asked, kept with the timings (temperature and the fixed-length
/// switches change what the numbers mean).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestInfo {
    pub api: Api,
    pub model: String,
    pub max_tokens: u32,
    pub min_tokens: Option<u32>,
    pub ignore_eos: bool,
    pub temperature: f32,
    pub prompt_chars: usize,
}

/// Which phase a timeout hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutPhase {
    Headers,
    FirstToken,
    Stream,
}

impl std::fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Headers => "waiting for response headers",
            TimeoutPhase::FirstToken => "waiting for the first token",
            TimeoutPhase::Stream => "while streaming, before the stream ended",
        })
    }
}

/// Why a probe failed. A failed probe is still a record: it counts against
/// goodput and in the error rate.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProbeError {
    #[error("cannot connect to {url}: {message}")]
    Connect { url: String, message: String },
    #[error("TLS failure talking to {url}: {message}")]
    Tls { url: String, message: String },
    #[error("timed out after {after_ms} ms {phase}")]
    Timeout { after_ms: u64, phase: TimeoutPhase },
    #[error("HTTP {status} from server: {message}")]
    HttpStatus { status: u16, message: String },
    #[error("invalid SSE stream: {message}")]
    InvalidSse { message: String },
    #[error("invalid JSON in stream event #{event}: {message}; data was: {snippet}")]
    InvalidJson {
        event: u32,
        message: String,
        snippet: String,
    },
    #[error("stream cut after {events} events, before [DONE] or a finish reason{}", detail_suffix(.detail))]
    StreamCut { events: u32, detail: Option<String> },
    #[error("response body exceeded the limit of {limit_bytes} bytes")]
    BodyTooLarge { limit_bytes: u64 },
    #[error("server reported an error inside the stream: {message}")]
    ServerError { message: String },
    #[error("request failed: {message}")]
    Request { message: String },
}

fn detail_suffix(d: &Option<String>) -> String {
    d.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
}

/// The error kinds, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Connect,
    Tls,
    Timeout,
    HttpStatus,
    InvalidSse,
    InvalidJson,
    StreamCut,
    BodyTooLarge,
    ServerError,
    Request,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::Timeout => "timeout",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::InvalidSse => "invalid_sse",
            ErrorKind::InvalidJson => "invalid_json",
            ErrorKind::StreamCut => "stream_cut",
            ErrorKind::BodyTooLarge => "body_too_large",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Request => "request",
        }
    }
}

impl ProbeError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProbeError::Connect { .. } => ErrorKind::Connect,
            ProbeError::Tls { .. } => ErrorKind::Tls,
            ProbeError::Timeout { .. } => ErrorKind::Timeout,
            ProbeError::HttpStatus { .. } => ErrorKind::HttpStatus,
            ProbeError::InvalidSse { .. } => ErrorKind::InvalidSse,
            ProbeError::InvalidJson { .. } => ErrorKind::InvalidJson,
            ProbeError::StreamCut { .. } => ErrorKind::StreamCut,
            ProbeError::BodyTooLarge { .. } => ErrorKind::BodyTooLarge,
            ProbeError::ServerError { .. } => ErrorKind::ServerError,
            ProbeError::Request { .. } => ErrorKind::Request,
        }
    }
}

/// Everything one probe measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// The request's number within its run (warm-ups first), or the
    /// canary's sequence number; `None` for a lone probe.
    pub seq: Option<u64>,
    pub request: RequestInfo,
    /// Wall-clock send time (Unix ms), only to place the probe on the
    /// server-metrics time axis; never used for a duration.
    pub wall_sent_unix_ms: u64,
    /// The monotonic send instant, for in-process comparison (tests, the
    /// capacity benchmark); not serialized, instants mean nothing elsewhere.
    #[serde(skip)]
    pub sent_at: Option<Instant>,
    /// sent − scheduled.
    pub dispatch_lag_ns: u64,
    /// The scheduled instant, ns after the run's schedule started: equal,
    /// request for request, in every part of a shared schedule and in one
    /// run of it (open loop). `None` outside a load run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_ns: Option<u64>,
    /// The request's turn in a conversation (from 1); `None` for a
    /// one-shot request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Response headers received.
    pub ttfb_ns: Option<u64>,
    /// First event with generated output.
    pub ttft_ns: Option<u64>,
    /// First event with visible output: the first *answer* token (differs
    /// from TTFT for reasoning).
    pub ttfo_ns: Option<u64>,
    /// First event that carried only reasoning: the first *reasoning*
    /// token; `None` when the model did not reason in the stream.
    #[serde(default)]
    pub ttfr_ns: Option<u64>,
    /// Until `[DONE]`, the close of a finished stream, or the failure.
    pub e2e_ns: u64,
    /// Every output event, in order.
    pub events: Vec<OutputEvent>,
    /// All `data:` events received, including role-only and usage-only.
    pub total_events: u32,
    pub body_bytes: u64,
    /// The last `usage` block seen.
    pub usage: Option<Usage>,
    /// The server's own timing of this request, where it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<ServerTiming>,
    /// `usage.completion_tokens`, else the sum of counted event tokens.
    pub output_tokens: u64,
    /// True when `output_tokens` was counted by the client, not reported.
    pub output_tokens_estimated: bool,
    pub finish_reason: Option<String>,
    pub http_status: Option<u16>,
    pub error: Option<ProbeError>,
}

impl ProbeRecord {
    /// A record with no timings yet.
    pub fn new(request: RequestInfo) -> ProbeRecord {
        ProbeRecord {
            seq: None,
            request,
            wall_sent_unix_ms: 0,
            sent_at: None,
            dispatch_lag_ns: 0,
            scheduled_ns: None,
            turn: None,
            ttfb_ns: None,
            ttft_ns: None,
            ttfo_ns: None,
            ttfr_ns: None,
            e2e_ns: 0,
            events: Vec::new(),
            total_events: 0,
            body_bytes: 0,
            usage: None,
            server_timing: None,
            output_tokens: 0,
            output_tokens_estimated: true,
            finish_reason: None,
            http_status: None,
            error: None,
        }
    }

    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    pub fn error_kind(&self) -> Option<ErrorKind> {
        self.error.as_ref().map(ProbeError::kind)
    }

    /// Tokens carried by the first output event (1 unless the server said
    /// otherwise through continuous usage).
    pub fn tokens_in_first_event(&self) -> Option<u32> {
        self.events.first().map(|e| e.tokens)
    }

    /// Gaps between successive output events: (ns, tokens of the later event).
    pub fn gaps(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.events
            .windows(2)
            .map(|w| (w[1].at_ns.saturating_sub(w[0].at_ns), w[1].tokens))
    }

    /// ITL per event gap, ns (what a per-chunk tool reports).
    pub fn itl_ns(&self) -> Vec<u64> {
        self.gaps().map(|(g, _)| g).collect()
    }

    /// ITL per token, ns: a gap closing an event of `t` tokens gives `t`
    /// values of `gap / t`. A gap closing an event the server says carried
    /// no new token is carried into the next gap, so time is never lost.
    pub fn per_token_itl_ns(&self) -> Vec<f64> {
        per_token_itl_of(&self.events)
    }

    /// TPOT = (e2e − TTFT) / (output_tokens − tokens_in_first_event), ns.
    /// `None` for a failed probe (its e2e is not an end-to-end time), when no
    /// token arrived, or when all output came in the first event.
    pub fn tpot_ns(&self) -> Option<f64> {
        if !self.is_ok() {
            return None;
        }
        let ttft = self.ttft_ns?;
        let first = u64::from(self.tokens_in_first_event()?);
        let rest = self.output_tokens.checked_sub(first)?;
        if rest == 0 {
            return None;
        }
        Some(self.e2e_ns.saturating_sub(ttft) as f64 / rest as f64)
    }

    pub fn ttft_from_scheduled_ns(&self) -> Option<u64> {
        self.ttft_ns.map(|t| t + self.dispatch_lag_ns)
    }

    pub fn e2e_from_scheduled_ns(&self) -> u64 {
        self.e2e_ns + self.dispatch_lag_ns
    }

    /// Reasoning tokens: the server's count where its usage has one, else
    /// the tokens of the reasoning events (exact where the server streams
    /// continuous usage, else one per event).
    pub fn reasoning_tokens(&self) -> u64 {
        if let Some(n) = self.usage.as_ref().and_then(|u| u.reasoning_tokens) {
            return n;
        }
        self.events
            .iter()
            .filter(|e| e.reasoning)
            .map(|e| u64::from(e.tokens))
            .sum()
    }

    /// Output tokens of the answer: all output but the reasoning.
    pub fn answer_tokens(&self) -> u64 {
        self.output_tokens.saturating_sub(self.reasoning_tokens())
    }

    /// Per-token ITL of the answer alone (gaps between answer events; the
    /// wait from the last reasoning event to the first answer event is the
    /// answer's first-token time, not an ITL). Equals
    /// [`per_token_itl_ns`](Self::per_token_itl_ns) for a stream without
    /// reasoning.
    pub fn answer_itl_ns(&self) -> Vec<f64> {
        if !self.events.iter().any(|e| e.reasoning) {
            return self.per_token_itl_ns();
        }
        let answer: Vec<OutputEvent> = self
            .events
            .iter()
            .filter(|e| !e.reasoning)
            .copied()
            .collect();
        per_token_itl_of(&answer)
    }

    /// Client TTFT − the server's queue + prefill, ms: the network, the
    /// HTTP front end and tokenization before the first token, exactly, for
    /// this request (`None` without a server timing).
    pub fn outside_server_ttft_ms(&self) -> Option<f64> {
        let server = self.server_timing?.to_first_token_ms()?;
        Some(self.ttft_ns? as f64 / 1e6 - server)
    }

    /// Client e2e − the server's queue + prefill + decode, ms (a successful
    /// request with a server timing only).
    pub fn outside_server_e2e_ms(&self) -> Option<f64> {
        if !self.is_ok() {
            return None;
        }
        let server = self.server_timing?.total_ms()?;
        Some(self.e2e_ns as f64 / 1e6 - server)
    }

    pub fn ttfo_from_scheduled_ns(&self) -> Option<u64> {
        self.ttfo_ns.map(|t| t + self.dispatch_lag_ns)
    }

    /// Tokens per output event (server-reported where streamed).
    pub fn tokens_per_event(&self) -> Option<f64> {
        if self.events.is_empty() {
            return None;
        }
        let t: u64 = self.events.iter().map(|e| u64::from(e.tokens)).sum();
        Some(t as f64 / self.events.len() as f64)
    }
}

/// Per-token ITL over successive `events`: a gap closing an event of `t`
/// tokens gives `t` values of `gap / t`; a gap closing an event of no new
/// token is carried into the next gap, so time is never lost.
fn per_token_itl_of(events: &[OutputEvent]) -> Vec<f64> {
    let mut out = Vec::with_capacity(events.len());
    let mut carry = 0u64;
    for w in events.windows(2) {
        let (gap, tokens) = (w[1].at_ns.saturating_sub(w[0].at_ns), w[1].tokens);
        let gap = gap + carry;
        if tokens == 0 {
            carry = gap;
            continue;
        }
        carry = 0;
        let per = gap as f64 / f64::from(tokens);
        out.extend(std::iter::repeat_n(per, tokens as usize));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(events: &[(u64, u32)], output: u64, e2e: u64) -> ProbeRecord {
        let mut r = ProbeRecord::new(RequestInfo {
            api: Api::Chat,
            model: "m".into(),
            max_tokens: 8,
            min_tokens: None,
            ignore_eos: true,
            temperature: 0.0,
            prompt_chars: 1,
        });
        r.events = events
            .iter()
            .map(|&(at_ns, tokens)| OutputEvent {
                at_ns,
                tokens,
                reasoning: false,
            })
            .collect();
        r.ttft_ns = r.events.first().map(|e| e.at_ns);
        r.output_tokens = output;
        r.e2e_ns = e2e;
        r
    }

    #[test]
    fn tpot_excludes_first_event_tokens() {
        let r = rec(&[(100, 2), (130, 3), (160, 1)], 6, 200);
        assert_eq!(r.tpot_ns(), Some(25.0));
        assert_eq!(r.itl_ns(), vec![30, 30]);
        assert_eq!(r.per_token_itl_ns(), vec![10.0, 10.0, 10.0, 30.0]);
        assert_eq!(rec(&[(100, 1)], 1, 120).tpot_ns(), None);
    }

    #[test]
    fn reasoning_events_split_tokens_and_answer_itl() {
        // Two reasoning events, then three answer events.
        let mut r = rec(&[(100, 1), (110, 2), (200, 1), (230, 3), (260, 1)], 8, 300);
        r.events[0].reasoning = true;
        r.events[1].reasoning = true;
        assert_eq!(r.reasoning_tokens(), 3);
        assert_eq!(r.answer_tokens(), 5);
        // The 90 ns wait for the first answer event is not an answer ITL.
        assert_eq!(r.answer_itl_ns(), vec![10.0, 10.0, 10.0, 30.0]);
        let plain = rec(&[(100, 2), (130, 3)], 5, 200);
        assert_eq!(plain.answer_itl_ns(), plain.per_token_itl_ns());
        assert_eq!((plain.reasoning_tokens(), plain.answer_tokens()), (0, 5));
    }

    #[test]
    fn zero_token_gap_carries() {
        let r = rec(&[(0, 1), (10, 0), (30, 1)], 2, 30);
        assert_eq!(r.per_token_itl_ns(), vec![30.0]);
    }

    #[test]
    fn errors_display_clearly() {
        let e = ProbeError::StreamCut {
            events: 3,
            detail: None,
        };
        assert_eq!(
            e.to_string(),
            "stream cut after 3 events, before [DONE] or a finish reason"
        );
        let e = ProbeError::Timeout {
            after_ms: 500,
            phase: TimeoutPhase::FirstToken,
        };
        assert_eq!(
            e.to_string(),
            "timed out after 500 ms waiting for the first token"
        );
        let j = serde_json::to_string(&ProbeError::HttpStatus {
            status: 404,
            message: "no".into(),
        })
        .unwrap();
        assert_eq!(j, r#"{"kind":"http_status","status":404,"message":"no"}"#);
    }
}
