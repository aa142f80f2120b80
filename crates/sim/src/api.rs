//! The HTTP surface: thin handlers that parse a request into a sequence for
//! the engine and turn its token events into vLLM-shaped JSON or SSE.
//!
//! Wire shapes follow the vLLM 0.32 captures in `fixtures/vllm-live/`
//! field for field (key order included), so clients' SSE parsers see what a
//! real server sends. Errors use vLLM's current (≥ 0.10) shape
//! `{"error":{"message","type","param","code"}}`:
//! - malformed JSON / wrong field types → 400, `type: "Bad Request"` (vLLM's
//!   `RequestValidationError` handler uses `HTTPStatus.BAD_REQUEST.phrase`);
//! - unknown model → 404, `type: "NotFoundError"`, `param: "model"`;
//! - prompt + max_tokens past `max_model_len` → 400, `type: "BadRequestError"`;
//! - `Sim::set_failing(true)` → 500, `type: "InternalServerError"`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::{NewSeq, TokenEvent};
use crate::stats::FinishReason;
use crate::tokenizer::{self, ChatMessage};
use crate::{Flavor, SimInner};

mod llamacpp;

type AppState = Arc<SimInner>;

const SYSTEM_FINGERPRINT: &str = "vllm-0.32.0-sim";
const VERSION: &str = "0.32.0-sim";

pub(crate) fn router(inner: AppState) -> Router {
    let flavor = inner.config.flavor;
    let mut r = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/metrics", get(metrics));
    r = match flavor {
        Flavor::Vllm | Flavor::Nim => r
            .route("/v1/models", get(models))
            .route("/tokenize", post(tokenize))
            .route("/version", get(version))
            .route("/health", get(health)),
        Flavor::Llamacpp => r
            .route("/v1/models", get(llamacpp::models))
            .route("/tokenize", post(llamacpp::tokenize))
            .route("/apply-template", post(llamacpp::apply_template))
            .route("/props", get(llamacpp::props))
            .route("/health", get(llamacpp::health)),
    };
    if flavor == Flavor::Vllm {
        r = r.route(
            "/reset_prefix_cache",
            post(crate::graded::reset_prefix_cache),
        );
    }
    if flavor == Flavor::Nim {
        r = r
            .route("/v1/metrics", get(metrics))
            .route("/v1/health/ready", get(health))
            .route("/v1/health/live", get(health));
    }
    r.fallback(not_found).with_state(inner)
}

pub(crate) fn gpu_router(inner: AppState) -> Router {
    Router::new()
        .route("/metrics", get(gpu_metrics))
        .fallback(not_found)
        .with_state(inner)
}

pub(crate) fn render_metrics(inner: &SimInner) -> String {
    let st = inner.shared.lock_stats();
    let mut page = inner.template.render(&st, &inner.page);
    if inner.config.flavor == Flavor::Vllm {
        page.push_str(&crate::disagg::render(inner, &st));
    }
    page
}

const PROM_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn metrics(State(inner): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, PROM_CONTENT_TYPE)],
        render_metrics(&inner),
    )
        .into_response()
}

async fn gpu_metrics(State(inner): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, PROM_CONTENT_TYPE)],
        crate::gpu::render(&inner),
    )
        .into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        r#"{"detail":"Not Found"}"#.to_string(),
    )
}

async fn version() -> Response {
    json_response(StatusCode::OK, format!(r#"{{"version":"{VERSION}"}}"#))
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// An error answered in vLLM's JSON shape.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<&'static str>,
    /// A whole body in another engine's error shape, answered as is.
    body: Option<String>,
}

impl ApiError {
    fn bad_json(e: &serde_json::Error) -> ApiError {
        let kind = if e.is_syntax() || e.is_eof() {
            "json_invalid"
        } else {
            "value_error"
        };
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "Bad Request",
            message: format!(
                "[{{'type': '{kind}', 'loc': ('body', {}), 'msg': '{}'}}]",
                e.column(),
                e.to_string().replace('\'', "\"")
            ),
            param: None,
            body: None,
        }
    }

    fn bad_request(message: String) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "BadRequestError",
            message,
            param: None,
            body: None,
        }
    }

    fn model_not_found(model: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "NotFoundError",
            message: format!("The model `{model}` does not exist."),
            param: Some("model"),
            body: None,
        }
    }

    fn failing() -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "InternalServerError",
            message: "The simulated engine is failing (Sim::set_failing).".to_string(),
            param: None,
            body: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(body) = self.body {
            return json_response(self.status, body);
        }
        let param = match self.param {
            Some(p) => js(p),
            None => "null".to_string(),
        };
        let body = format!(
            r#"{{"error":{{"message":{},"type":{},"param":{},"code":{}}}}}"#,
            js(&self.message),
            js(self.kind),
            param,
            self.status.as_u16()
        );
        json_response(self.status, body)
    }
}

#[derive(Debug, Deserialize, Default)]
struct StreamOptions {
    include_usage: Option<bool>,
    continuous_usage_stats: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: Option<String>,
    prompt: PromptInput,
    max_tokens: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct ContentPart {
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct InMessage {
    role: String,
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: Option<String>,
    messages: Vec<InMessage>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    model: Option<String>,
    prompt: Option<String>,
    messages: Option<Vec<InMessage>>,
    add_special_tokens: Option<bool>,
}

fn messages_text(messages: &[InMessage]) -> String {
    let msgs: Vec<ChatMessage> = messages
        .iter()
        .map(|m| ChatMessage {
            role: m.role.clone(),
            content: match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => parts
                    .iter()
                    .filter_map(|p| p.text.as_deref())
                    .collect::<Vec<_>>()
                    .join("\n"),
            },
        })
        .collect();
    tokenizer::render_chat(&msgs)
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_json(&e))
}

fn check_model(inner: &SimInner, model: Option<&str>) -> Result<(), ApiError> {
    if inner.config.flavor == Flavor::Llamacpp {
        // llama-server serves its one model under any name.
        return Ok(());
    }
    match model {
        Some(m) if m != inner.config.model => Err(ApiError::model_not_found(m)),
        _ => Ok(()),
    }
}

fn check_n(n: Option<i64>) -> Result<(), ApiError> {
    match n {
        None | Some(1) => Ok(()),
        Some(n) => Err(ApiError::bad_request(format!(
            "n={n} is not supported by the simulator (only n=1)."
        ))),
    }
}

async fn tokenize(State(inner): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let req: TokenizeRequest = parse(&body)?;
    check_model(&inner, req.model.as_deref())?;
    let tokens = match (&req.prompt, &req.messages) {
        (Some(p), _) => inner
            .config
            .tokenizer
            .encode(p, req.add_special_tokens.unwrap_or(true)),
        (None, Some(m)) => inner.config.tokenizer.encode(&messages_text(m), true),
        (None, None) => {
            return Err(ApiError::bad_request(
                "Either `prompt` or `messages` is required.".to_string(),
            ))
        }
    };
    let ids: Vec<String> = tokens.iter().map(u32::to_string).collect();
    Ok(json_response(
        StatusCode::OK,
        format!(
            r#"{{"count":{},"max_model_len":{},"tokens":[{}],"token_strs":null}}"#,
            tokens.len(),
            inner.config.profile.max_model_len,
            ids.join(",")
        ),
    ))
}

async fn models(State(inner): State<AppState>) -> Response {
    let m = js(&inner.config.model);
    let created = inner.start_unix as u64;
    json_response(
        StatusCode::OK,
        format!(
            r#"{{"object":"list","data":[{{"id":{m},"object":"model","created":{created},"owned_by":"vllm","root":{m},"parent":null,"max_model_len":{},"permission":[{{"id":"modelperm-{:016x}","object":"model_permission","created":{created},"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}}]}}]}}"#,
            inner.config.profile.max_model_len,
            crate::tokenizer::mix(inner.config.seed ^ 0x7065_726d)
        ),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Completions,
    Chat,
}

struct GenParams {
    api: Api,
    /// A graded prompt's answer (see `crate::graded`).
    answer: Option<String>,
    prompt: Vec<u32>,
    max_tokens: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: bool,
    stream: bool,
    options: StreamOptions,
}

async fn completions(State(inner): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let req: CompletionRequest = parse(&body)?;
    check_model(&inner, req.model.as_deref())?;
    check_n(req.n)?;
    let answer = match &req.prompt {
        PromptInput::Text(t) => inner.graded(t),
        PromptInput::Texts(v) if v.len() == 1 => inner.graded(&v[0]),
        _ => None,
    };
    let prompt =
        match req.prompt {
            PromptInput::Text(t) => inner.config.tokenizer.encode(&t, true),
            PromptInput::Ids(ids) => ids,
            PromptInput::Texts(mut v) if v.len() == 1 => {
                inner.config.tokenizer.encode(&v.remove(0), true)
            }
            PromptInput::IdLists(mut v) if v.len() == 1 => v.remove(0),
            _ => return Err(ApiError::bad_request(
                "Batched prompts are not supported by the simulator; send one prompt per request."
                    .to_string(),
            )),
        };
    generate(
        inner,
        arrival,
        GenParams {
            api: Api::Completions,
            answer,
            prompt,
            // vLLM's completions default.
            max_tokens: Some(req.max_tokens.unwrap_or(16)),
            min_tokens: req.min_tokens,
            ignore_eos: req.ignore_eos.unwrap_or(false),
            stream: req.stream.unwrap_or(false),
            options: req.stream_options.unwrap_or_default(),
        },
    )
}

async fn chat_completions(
    State(inner): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let req: ChatRequest = parse(&body)?;
    check_model(&inner, req.model.as_deref())?;
    check_n(req.n)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` must not be empty.".to_string(),
        ));
    }
    let text = messages_text(&req.messages);
    let answer = inner.graded(&text);
    let prompt = inner.config.tokenizer.encode(&text, true);
    generate(
        inner,
        arrival,
        GenParams {
            api: Api::Chat,
            answer,
            prompt,
            max_tokens: req.max_completion_tokens.or(req.max_tokens),
            min_tokens: req.min_tokens,
            ignore_eos: req.ignore_eos.unwrap_or(false),
            stream: req.stream.unwrap_or(false),
            options: req.stream_options.unwrap_or_default(),
        },
    )
}

fn generate(inner: AppState, arrival: Instant, p: GenParams) -> Result<Response, ApiError> {
    if inner.shared.failing.load(Ordering::Relaxed) {
        inner.shared.lock_stats().finished(FinishReason::Error);
        return Err(ApiError::failing());
    }
    let prompt_len = p.prompt.len();
    check_prompt_len(&inner, prompt_len)?;
    let max_tokens = max_tokens_for(&inner, p.max_tokens, prompt_len)?;
    let min_tokens = min_tokens_for(p.min_tokens, max_tokens)?;

    let (tx, rx) = mpsc::unbounded_channel();
    let seq = NewSeq {
        prompt: p.prompt,
        max_tokens,
        min_tokens,
        ignore_eos: p.ignore_eos,
        arrival,
        tx,
    };
    let frontend_s = inner.config.profile.frontend_per_request_s / inner.config.time_scale;
    if frontend_s > 0.0 {
        // The engine's clocks start once the serial frontend lets the
        // request through; a send that fails then drops `tx`, which ends
        // the client's stream.
        let gate = inner.clone();
        tokio::spawn(async move {
            let _turn = gate.frontend.lock().await;
            tokio::time::sleep(std::time::Duration::from_secs_f64(frontend_s)).await;
            let _ = gate.tx.send(NewSeq {
                arrival: Instant::now(),
                ..seq
            });
        });
    } else if let Some(seq) = crate::disagg::after_transfer(&inner, seq) {
        if inner.tx.send(seq).is_err() {
            return Err(ApiError::failing());
        }
    }
    let mut out = response_identity(&inner, p.api, prompt_len, arrival);
    out.answer = p.answer;
    if p.stream {
        Ok(streaming_response(out, rx, &p.options))
    } else {
        Ok(
            Body::from_stream(futures_util::stream::once(collect(out, rx)))
                .into_response()
                .with_json_type(),
        )
    }
}

/// Refuses an empty prompt, or one that leaves no room in the context, with
/// the server's own error.
fn check_prompt_len(inner: &SimInner, prompt_len: usize) -> Result<(), ApiError> {
    let max_len = inner.config.profile.max_model_len;
    if prompt_len == 0 {
        return Err(ApiError::bad_request(
            "The prompt cannot be empty.".to_string(),
        ));
    }
    if inner.config.flavor == Flavor::Llamacpp {
        if prompt_len >= max_len {
            return Err(llamacpp::context_exceeded(prompt_len, max_len));
        }
    } else if prompt_len >= max_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, your request has {prompt_len} input tokens. Please reduce the length of the input messages."
        )));
    }
    Ok(())
}

/// The most tokens to generate: what was asked for, or the rest of the
/// context when nothing was.
fn max_tokens_for(
    inner: &SimInner,
    asked: Option<i64>,
    prompt_len: usize,
) -> Result<usize, ApiError> {
    let max_len = inner.config.profile.max_model_len;
    match asked {
        None => Ok(max_len - prompt_len),
        Some(m) if m < 1 => Err(ApiError::bad_request(format!(
            "max_tokens must be at least 1, got {m}."
        ))),
        // llama-server stops a sequence at the slot's context instead of
        // refusing it.
        Some(m) if inner.config.flavor == Flavor::Llamacpp => Ok(usize::try_from(m)
            .unwrap_or(usize::MAX)
            .min(max_len - prompt_len)),
        Some(m) => {
            let m = usize::try_from(m).unwrap_or(usize::MAX);
            if m > max_len - prompt_len {
                return Err(ApiError::bad_request(format!(
                    "'max_tokens' or 'max_completion_tokens' is too large: {m}. This model's maximum context length is {max_len} tokens and your request has {prompt_len} input tokens ({m} > {max_len} - {prompt_len})."
                )));
            }
            Ok(m)
        }
    }
}

/// The fewest tokens to generate (at most `max_tokens`).
fn min_tokens_for(asked: Option<i64>, max_tokens: usize) -> Result<usize, ApiError> {
    match asked {
        None => Ok(0),
        Some(m) if m < 0 => Err(ApiError::bad_request(format!(
            "min_tokens must be greater than or equal to 0, got {m}."
        ))),
        Some(m) => Ok(usize::try_from(m).unwrap_or(usize::MAX).min(max_tokens)),
    }
}

/// What identifies this request's response: an id seeded from the request's
/// number (so a seeded sim gives the same ids run after run), the creation
/// time and the model.
fn response_identity(inner: &SimInner, api: Api, prompt_len: usize, arrival: Instant) -> Out {
    let n = inner.request_counter.fetch_add(1, Ordering::Relaxed);
    let hex = format!(
        "{:016x}",
        crate::tokenizer::mix(inner.config.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    );
    let id = match (api, inner.config.flavor) {
        // llama-server names completions `chatcmpl-` too.
        (_, Flavor::Llamacpp) | (Api::Chat, _) => format!("chatcmpl-{hex}"),
        (Api::Completions, _) => format!("cmpl-{hex}"),
    };
    // The simulator is a server of its own: its answers carry its clock.
    #[allow(clippy::disallowed_methods)]
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Out {
        answer: None,
        api,
        id,
        created,
        model: js(&inner.config.model),
        prompt_tokens: prompt_len,
        details: inner.config.prompt_tokens_details,
        all_cached: inner.config.report_all_cached,
        per_request_metrics: inner.config.per_request_metrics,
        reasoning: match api {
            Api::Chat => inner.config.reasoning_tokens,
            Api::Completions => 0,
        },
        flavor: inner.config.flavor,
        arrival,
        seed: inner.config.seed ^ n,
    }
}

/// The SSE response of a streamed request, in the flavor's framing.
fn streaming_response(
    out: Out,
    rx: mpsc::UnboundedReceiver<TokenEvent>,
    options: &StreamOptions,
) -> Response {
    let flavor = out.flavor;
    let chunk_head = match out.flavor {
        Flavor::Llamacpp => llamacpp::chunk_tail(&out),
        Flavor::Vllm | Flavor::Nim => out.head(match out.api {
            Api::Chat => "chat.completion.chunk",
            Api::Completions => "text_completion",
        }),
    };
    let state = StreamState {
        chunk_head,
        out,
        rx,
        pending: VecDeque::new(),
        completion_tokens: 0,
        include_usage: options.include_usage.unwrap_or(false),
        continuous: options.continuous_usage_stats.unwrap_or(false),
        done: false,
        held: String::new(),
        first_token_at: None,
    };
    let body = Body::from_stream(sse_frames(state));
    if flavor == Flavor::Llamacpp {
        return llamacpp::stream_response(body);
    }
    (
        [(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")],
        body,
    )
        .into_response()
}

/// One frame per wake-up: every event already produced is sent in one write
/// (a chat's role chunk and first token, or a backlog), and nothing is held
/// back waiting for more.
fn sse_frames(state: StreamState) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if !s.pending.is_empty() {
                let frame = if s.pending.len() == 1 {
                    s.pending.pop_front().unwrap_or_default()
                } else {
                    let mut buf = Vec::new();
                    for b in s.pending.drain(..) {
                        buf.extend_from_slice(&b);
                    }
                    Bytes::from(buf)
                };
                return Some((Ok::<Bytes, Infallible>(frame), s));
            }
            if s.done {
                return None;
            }
            match s.rx.recv().await {
                Some(ev) => {
                    s.on_event(ev);
                    while !s.done {
                        match s.rx.try_recv() {
                            Ok(ev) => s.on_event(ev),
                            Err(_) => break,
                        }
                    }
                }
                None => s.done = true,
            }
        }
    })
}

trait WithJsonType {
    fn with_json_type(self) -> Response;
}

impl WithJsonType for Response {
    fn with_json_type(mut self) -> Response {
        self.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        self
    }
}

/// Response identity shared by every chunk of one request.
struct Out {
    /// A graded prompt's answer: the text of a non-streamed reply.
    answer: Option<String>,
    api: Api,
    id: String,
    created: u64,
    /// JSON-encoded model name.
    model: String,
    prompt_tokens: usize,
    details: bool,
    /// Report every prompt token as cached (see `SimConfig::report_all_cached`).
    all_cached: bool,
    /// Leading tokens that are reasoning (see `SimConfig::reasoning_tokens`).
    reasoning: usize,
    /// Send vLLM's per-request `metrics` (see `SimConfig::per_request_metrics`).
    per_request_metrics: bool,
    flavor: Flavor,
    /// When the request arrived (llama-server's `timings`).
    arrival: Instant,
    /// Seeds which tokens llama-server-like streams hold back.
    seed: u64,
}

impl Out {
    fn usage(&self, completion: usize, cached: usize, with_details: bool) -> String {
        let cached = if self.all_cached {
            self.prompt_tokens
        } else {
            cached
        };
        let mut base = format!(
            r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{}"#,
            self.prompt_tokens,
            self.prompt_tokens + completion,
            completion
        );
        if self.reasoning > 0 {
            let reasoning = completion.min(self.reasoning);
            base.push_str(&format!(
                r#","completion_tokens_details":{{"reasoning_tokens":{reasoning}}}"#
            ));
        }
        if with_details && self.details {
            format!(r#"{base},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}"#)
        } else {
            format!("{base}}}")
        }
    }

    fn head(&self, object: &str) -> String {
        format!(
            r#"{{"id":"{}","object":"{object}","created":{},"model":{}"#,
            self.id, self.created, self.model
        )
    }
}

struct StreamState {
    out: Out,
    /// `{"id":…,"object":…,"created":…,"model":…` of every chunk, built once
    /// (llama-server: the fields after `choices`, see `llamacpp::chunk_tail`).
    chunk_head: String,
    rx: mpsc::UnboundedReceiver<TokenEvent>,
    pending: VecDeque<Bytes>,
    completion_tokens: usize,
    include_usage: bool,
    continuous: bool,
    done: bool,
    /// llama-server: text of tokens held back, sent with the next event.
    held: String,
    /// llama-server: when the first token arrived (its `timings`).
    first_token_at: Option<Instant>,
}

impl StreamState {
    fn push(&mut self, json: String) {
        let mut s = String::with_capacity(json.len() + 8);
        s.push_str("data: ");
        s.push_str(&json);
        s.push_str("\n\n");
        self.pending.push_back(Bytes::from(s));
    }

    fn cont_usage(&self) -> String {
        if self.continuous {
            format!(
                r#","usage":{}"#,
                self.out.usage(self.completion_tokens, 0, false)
            )
        } else {
            String::new()
        }
    }

    fn on_event(&mut self, ev: TokenEvent) {
        if self.out.flavor == Flavor::Llamacpp {
            self.on_llamacpp_event(ev);
            return;
        }
        let first = self.completion_tokens == 0;
        if first {
            self.first_token_at = Some(ev.at);
        }
        let text = js(ev.text);
        let finish = ev.finish.map(FinishReason::as_str);
        match self.out.api {
            Api::Chat => {
                if first {
                    // vLLM sends a role-only chunk with empty content first.
                    let json = format!(
                        r#"{},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]{},"prompt_token_ids":null,"prompt_text":null}}"#,
                        self.chunk_head,
                        self.cont_usage()
                    );
                    self.push(json);
                }
                // Reasoning first, then the answer (`SimConfig::reasoning_tokens`).
                let field = if self.completion_tokens < self.out.reasoning {
                    "reasoning"
                } else {
                    "content"
                };
                self.completion_tokens += 1;
                let tail = match finish {
                    Some(f) => {
                        format!(r#""finish_reason":"{f}","stop_reason":null,"token_ids":null"#)
                    }
                    None => r#""finish_reason":null,"token_ids":null"#.to_string(),
                };
                let json = format!(
                    r#"{},"choices":[{{"index":0,"delta":{{"{field}":{text}}},"logprobs":null,{tail}}}]{}}}"#,
                    self.chunk_head,
                    self.cont_usage()
                );
                self.push(json);
            }
            Api::Completions => {
                self.completion_tokens += 1;
                let f = match finish {
                    Some(f) => format!("\"{f}\""),
                    None => "null".to_string(),
                };
                let json = format!(
                    r#"{},"choices":[{{"index":0,"text":{text},"logprobs":null,"finish_reason":{f},"stop_reason":null,"prompt_token_ids":null,"token_ids":null}}]{}}}"#,
                    self.chunk_head,
                    self.cont_usage()
                );
                self.push(json);
            }
        }
        if ev.finish.is_some() {
            if self.include_usage {
                let metrics = if self.out.per_request_metrics {
                    self.per_request_metrics(&ev)
                } else {
                    String::new()
                };
                let json = format!(
                    r#"{},"choices":[],"usage":{},"system_fingerprint":"{SYSTEM_FINGERPRINT}"{metrics}}}"#,
                    self.chunk_head,
                    self.out
                        .usage(self.completion_tokens, ev.cached_tokens, true)
                );
                self.push(json);
            }
            self.pending
                .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
            self.done = true;
        }
    }
}

impl StreamState {
    /// `,"metrics":{…}` as vLLM 0.32's `build_per_request_timing_metrics`
    /// makes it from the engine's timestamps (`ev` is the last token).
    fn per_request_metrics(&self, ev: &TokenEvent) -> String {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let (Some(scheduled), Some(first)) = (ev.scheduled, self.first_token_at) else {
            return r#","metrics":{}"#.to_string();
        };
        let n = self.completion_tokens;
        let generation = ms(ev.at - first);
        let mut fields = vec![
            format!(r#""time_to_first_token_ms":{}"#, ms(first - scheduled)),
            format!(r#""generation_time_ms":{generation}"#),
            format!(r#""queue_time_ms":{}"#, ms(scheduled - ev.queued)),
        ];
        if n > 1 {
            fields.push(format!(r#""mean_itl_ms":{}"#, generation / (n - 1) as f64));
        }
        let inference = ms(ev.at - scheduled);
        if inference > 0.0 {
            fields.push(format!(
                r#""tokens_per_second":{}"#,
                n as f64 / inference * 1e3
            ));
        }
        format!(r#","metrics":{{{}}}"#, fields.join(","))
    }
}

/// Non-streaming: waits for the last token and builds one JSON body.
async fn collect(
    out: Out,
    mut rx: mpsc::UnboundedReceiver<TokenEvent>,
) -> Result<Bytes, Infallible> {
    let mut text = String::new();
    let mut n = 0;
    let mut finish = FinishReason::Abort;
    let mut cached = 0;
    let mut first_token_at = None;
    let mut scheduled = None;
    while let Some(ev) = rx.recv().await {
        first_token_at.get_or_insert_with(Instant::now);
        scheduled = scheduled.or(ev.scheduled);
        text.push_str(ev.text);
        n += 1;
        cached = ev.cached_tokens;
        if let Some(f) = ev.finish {
            finish = f;
            break;
        }
    }
    let usage = if out.details {
        out.usage(n, cached, true)
    } else {
        let u = out.usage(n, cached, false);
        format!(
            r#"{},"prompt_tokens_details":null}}"#,
            u.trim_end_matches('}')
        )
    };
    if out.flavor == Flavor::Llamacpp {
        return Ok(Bytes::from(llamacpp::whole_body(
            &out,
            &text,
            n,
            cached,
            finish,
            first_token_at,
            scheduled,
        )));
    }
    let f = finish.as_str();
    let text = js(out.answer.as_deref().unwrap_or(&text));
    let body = match out.api {
        Api::Completions => format!(
            r#"{},"choices":[{{"index":0,"text":{text},"logprobs":null,"finish_reason":"{f}","stop_reason":null,"prompt_logprobs":null}}],"service_tier":null,"system_fingerprint":null,"usage":{usage},"kv_transfer_params":null}}"#,
            out.head("text_completion")
        ),
        Api::Chat => format!(
            r#"{},"choices":[{{"index":0,"message":{{"role":"assistant","content":{text},"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null}},"logprobs":null,"finish_reason":"{f}","stop_reason":null}}],"service_tier":null,"system_fingerprint":null,"usage":{usage},"prompt_logprobs":null,"kv_transfer_params":null}}"#,
            out.head("chat.completion")
        ),
    };
    Ok(Bytes::from(body))
}
