//! llama.cpp's `llama-server` on the wire, field for field as the captures
//! in `fixtures/llamacpp-live/` show it (key order included): its
//! `/tokenize`, `/apply-template`, `/props`, `/v1/models` and `/health`, its
//! chunk shapes and `timings`, its error shape, and streams in which a token
//! is now and then held back and sent with the next one (llama-server holds
//! a piece that is not yet valid UTF-8), so one event carries two tokens.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::time::Instant;

use super::{js, json_response, messages_text, parse, Api, ApiError, AppState, InMessage, Out};
use super::{StreamState, TokenEvent};
use crate::stats::FinishReason;

/// `build_info` / `system_fingerprint` of the simulated server.
const BUILD: &str = "b1-sim";

/// One token in this many (on average) is held back and sent with the next.
const HOLD_ONE_IN: u64 = 3;

/// `/tokenize`: counts the raw text of `content` (no chat template), with
/// BOS only when `add_special` (default false, as llama-server). Any other
/// body — vLLM's `{"prompt"}` or `{"messages"}` — gets `{"tokens":[]}`, as
/// the real server answers it.
pub(super) async fn tokenize(
    State(inner): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    #[derive(Deserialize)]
    struct Request {
        content: Option<String>,
        add_special: Option<bool>,
    }
    let req: Request = parse(&body)?;
    let tokens = match &req.content {
        Some(text) => inner
            .config
            .tokenizer
            .encode(text, req.add_special.unwrap_or(false)),
        None => Vec::new(),
    };
    let ids: Vec<String> = tokens.iter().map(u32::to_string).collect();
    Ok(json_response(
        StatusCode::OK,
        format!(r#"{{"tokens":[{}]}}"#, ids.join(",")),
    ))
}

/// `/apply-template`: the chat template rendered, generation prompt
/// included, as `{"prompt"}`.
pub(super) async fn apply_template(body: Bytes) -> Result<Response, ApiError> {
    #[derive(Deserialize)]
    struct Request {
        messages: Vec<InMessage>,
    }
    let req: Request = parse(&body)?;
    Ok(json_response(
        StatusCode::OK,
        format!(r#"{{"prompt":{}}}"#, js(&messages_text(&req.messages))),
    ))
}

/// `/props`: the context of one slot (`n_ctx`) and the number of slots.
pub(super) async fn props(State(inner): State<AppState>) -> Response {
    let p = &inner.config.profile;
    let model = js(&inner.config.model);
    json_response(
        StatusCode::OK,
        format!(
            r#"{{"default_generation_settings":{{"id":0,"id_task":-1,"n_ctx":{},"speculative":false,"is_processing":false,"params":{{"n_predict":-1,"temperature":0.800000011920929}},"prompt":""}},"total_slots":{},"model_alias":{model},"model_path":{model},"modalities":{{"vision":false,"audio":false}},"bos_token":"<s>","eos_token":"</s>","build_info":"{BUILD}"}}"#,
            p.max_model_len, p.max_num_seqs
        ),
    )
}

/// `/v1/models`: llama-server's list, which states the training context of
/// the model (`n_ctx_train`) but not the context a request gets.
pub(super) async fn models(State(inner): State<AppState>) -> Response {
    let p = &inner.config.profile;
    let m = js(&inner.config.model);
    let created = inner.start_unix as u64;
    json_response(
        StatusCode::OK,
        format!(
            r#"{{"models":[{{"name":{m},"model":{m},"modified_at":"","size":"","digest":"","type":"model","description":"","tags":[""],"capabilities":["completion"],"parameters":"","details":{{"parent_model":"","format":"gguf","family":"","families":[""],"parameter_size":"","quantization_level":""}}}}],"object":"list","data":[{{"id":{m},"object":"model","created":{created},"owned_by":"llamacpp","meta":{{"vocab_type":1,"n_vocab":32000,"n_ctx_train":{},"n_embd":64,"n_params":4194304,"size":8388608}}}}]}}"#,
            p.max_model_len * p.max_num_seqs
        ),
    )
}

pub(super) async fn health() -> Response {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#.to_string())
}

/// A prompt longer than a slot's context, as llama-server refuses it.
pub(super) fn context_exceeded(n_prompt: usize, n_ctx: usize) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        kind: "exceed_context_size_error",
        message: String::new(),
        param: None,
        body: Some(format!(
            r#"{{"error":{{"code":400,"message":"request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":{n_prompt},"n_ctx":{n_ctx}}}}}"#
        )),
    }
}

/// A streamed response with llama-server's headers: `Keep-Alive` although
/// the connection is closed after it (see `crate::wire`).
pub(super) fn stream_response(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::SERVER, "llama.cpp"),
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, ""),
        (header::HeaderName::from_static("x-accel-buffering"), "no"),
        (header::CONTENT_TYPE, "text/event-stream"),
        (
            header::HeaderName::from_static("keep-alive"),
            "timeout=5, max=100",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The fields every chunk carries after `choices`, without the closing
/// brace. Completions put `id` last (after `usage` on the final chunk), so
/// it is left out here and added by [`close_chunk`].
pub(super) fn chunk_tail(out: &Out) -> String {
    match out.api {
        Api::Chat => format!(
            r#""created":{},"id":"{}","model":{},"system_fingerprint":"{BUILD}","object":"chat.completion.chunk""#,
            out.created, out.id, out.model
        ),
        Api::Completions => format!(
            r#""created":{},"model":{},"system_fingerprint":"{BUILD}","object":"text_completion""#,
            out.created, out.model
        ),
    }
}

/// `usage` and `timings` of a finished request. llama-server times a
/// request from when a slot takes it (`t_start_process_prompt`), so a wait
/// for a slot is not in `prompt_ms` (the real server with 2 slots at
/// concurrency 8: TTFT 702 ms, `prompt_ms` 27 ms).
fn usage_and_timings(
    out: &Out,
    completion: usize,
    cached: usize,
    first_token_at: Option<Instant>,
    slot_taken_at: Option<Instant>,
) -> (String, String) {
    let cached = if out.all_cached {
        out.prompt_tokens
    } else {
        cached
    };
    let usage = format!(
        r#"{{"completion_tokens":{completion},"prompt_tokens":{},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}"#,
        out.prompt_tokens,
        out.prompt_tokens + completion
    );
    let now = Instant::now();
    let first = first_token_at.unwrap_or(now);
    let started = slot_taken_at.unwrap_or(out.arrival).min(first);
    let prompt_ms = (first - started).as_secs_f64() * 1e3;
    let predicted_ms = (now - first).as_secs_f64() * 1e3;
    let prompt_n = out.prompt_tokens - cached.min(out.prompt_tokens);
    let per = |n: usize, ms: f64| {
        if n == 0 || ms <= 0.0 {
            (0.0, 0.0)
        } else {
            (ms / n as f64, n as f64 / ms * 1e3)
        }
    };
    let (prompt_per_token_ms, prompt_per_second) = per(prompt_n, prompt_ms);
    let (predicted_per_token_ms, predicted_per_second) = per(completion, predicted_ms);
    let timings = format!(
        r#"{{"cache_n":{cached},"prompt_n":{prompt_n},"prompt_ms":{prompt_ms},"prompt_per_token_ms":{prompt_per_token_ms},"prompt_per_second":{prompt_per_second},"predicted_n":{completion},"predicted_ms":{predicted_ms},"predicted_per_token_ms":{predicted_per_token_ms},"predicted_per_second":{predicted_per_second}}}"#
    );
    (usage, timings)
}

/// Closes a chunk begun with `{"choices":[…],` + [`chunk_tail`]; `extra` is
/// `,"usage":…` on the final completions chunk.
fn close_chunk(out: &Out, tail: &str, extra: &str, timings: Option<&str>) -> String {
    let mut s = String::from(tail);
    s.push_str(extra);
    if out.api == Api::Completions {
        s.push_str(&format!(r#","id":"{}""#, out.id));
    }
    if let Some(t) = timings {
        s.push_str(&format!(r#","timings":{t}"#));
    }
    s.push('}');
    s
}

/// Whether the `index`-th token of a stream seeded by `seed` is held back.
fn holds_back(seed: u64, index: usize) -> bool {
    crate::tokenizer::mix(seed ^ (index as u64).wrapping_mul(0x2545_f491_4f6c_dd1d))
        .is_multiple_of(HOLD_ONE_IN)
}

impl StreamState {
    /// One engine token, llama-server style: a role chunk before the first
    /// (chat), text chunks that may carry a held-back token too, then a
    /// finish chunk with no text and, for completions always and for chat
    /// when asked, `usage` and `timings`.
    pub(super) fn on_llamacpp_event(&mut self, ev: TokenEvent) {
        let chat = self.out.api == Api::Chat;
        if self.first_token_at.is_none() {
            self.first_token_at = Some(Instant::now());
            if chat {
                let json = format!(
                    r#"{{"choices":[{{"finish_reason":null,"index":0,"delta":{{"role":"assistant","content":null}}}}],{}"#,
                    close_chunk(&self.out, &self.chunk_head, "", None)
                );
                self.push(json);
            }
        }
        self.completion_tokens += 1;
        self.held.push_str(ev.text);
        let hold = ev.finish.is_none() && holds_back(self.out.seed, self.completion_tokens);
        if !hold && !self.held.is_empty() {
            let text = js(&std::mem::take(&mut self.held));
            let choice = if chat {
                format!(r#"{{"finish_reason":null,"index":0,"delta":{{"content":{text}}}}}"#)
            } else {
                format!(r#"{{"text":{text},"index":0,"logprobs":null,"finish_reason":null}}"#)
            };
            let json = format!(
                r#"{{"choices":[{choice}],{}"#,
                close_chunk(&self.out, &self.chunk_head, "", None)
            );
            self.push(json);
        }
        let Some(finish) = ev.finish else {
            return;
        };
        let f = finish.as_str();
        let (usage, timings) = usage_and_timings(
            &self.out,
            self.completion_tokens,
            ev.cached_tokens,
            self.first_token_at,
            ev.scheduled,
        );
        // Completions carry usage on the finish chunk; chat after it, when asked.
        let with_usage = close_chunk(
            &self.out,
            &self.chunk_head,
            &format!(r#","usage":{usage}"#),
            Some(&timings),
        );
        if chat {
            let json = format!(
                r#"{{"choices":[{{"finish_reason":"{f}","index":0,"delta":{{}}}}],{}"#,
                close_chunk(&self.out, &self.chunk_head, "", None)
            );
            self.push(json);
            if self.include_usage {
                self.push(format!(r#"{{"choices":[],{with_usage}"#));
            }
        } else {
            self.push(format!(
                r#"{{"choices":[{{"text":"","index":0,"logprobs":null,"finish_reason":"{f}"}}],{with_usage}"#
            ));
        }
        self.pending
            .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
        self.done = true;
    }
}

/// A non-streamed answer in llama-server's shape.
pub(super) fn whole_body(
    out: &Out,
    text: &str,
    completion: usize,
    cached: usize,
    finish: FinishReason,
    first_token_at: Option<Instant>,
    slot_taken_at: Option<Instant>,
) -> String {
    let (usage, timings) =
        usage_and_timings(out, completion, cached, first_token_at, slot_taken_at);
    let f = finish.as_str();
    let text = js(text);
    let (m, created, id) = (&out.model, out.created, &out.id);
    match out.api {
        Api::Chat => format!(
            r#"{{"choices":[{{"finish_reason":"{f}","index":0,"message":{{"role":"assistant","content":{text}}}}}],"created":{created},"model":{m},"system_fingerprint":"{BUILD}","object":"chat.completion","usage":{usage},"id":"{id}","timings":{timings}}}"#
        ),
        Api::Completions => format!(
            r#"{{"choices":[{{"text":{text},"index":0,"logprobs":null,"finish_reason":"{f}"}}],"created":{created},"model":{m},"system_fingerprint":"{BUILD}","object":"text_completion","usage":{usage},"id":"{id}","timings":{timings}}}"#
        ),
    }
}
