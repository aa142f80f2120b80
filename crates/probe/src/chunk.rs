//! What one OpenAI-compatible stream chunk (`data:` JSON) means for timing.
//!
//! Only the fields the measurements need are read, borrowed where possible
//! so a chunk costs no allocation in the common case; everything else is
//! ignored, since every engine adds its own extras (`timings`,
//! `prompt_token_ids`, `system_fingerprint`, …).

use std::borrow::Cow;

use serde::Deserialize;

use crate::record::Usage;

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(crate) struct UsageWire {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub total_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
pub(crate) struct Details {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl From<UsageWire> for Usage {
    fn from(u: UsageWire) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}

/// The timing-relevant content of one chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkInfo {
    /// Carries generated output: non-empty text, content, reasoning or
    /// tool-call text. Only such an event can set TTFT or end an ITL gap.
    pub output: bool,
    /// Carries output the user sees (text, content or a tool call, not
    /// reasoning): sets TTFO.
    pub visible: bool,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// An in-stream error object (some servers report failures mid-stream).
    pub error: Option<String>,
}

fn non_empty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

/// Reads one chunk's JSON. Errors are the caller's `InvalidJson`.
pub fn parse_chunk(data: &str) -> Result<ChunkInfo, serde_json::Error> {
    let chunk: Chunk<'_> = serde_json::from_str(data)?;
    let mut info = ChunkInfo {
        usage: chunk.usage.map(Usage::from),
        error: chunk.error.map(|e| error_message(&e)),
        ..ChunkInfo::default()
    };
    for choice in chunk.choices.iter().flatten() {
        if non_empty(&choice.text) {
            info.output = true;
            info.visible = true;
        }
        if let Some(d) = &choice.delta {
            if non_empty(&d.content) {
                info.output = true;
                info.visible = true;
            }
            if non_empty(&d.reasoning_content) || non_empty(&d.reasoning) {
                info.output = true;
            }
            let tool_text = d.tool_calls.iter().flatten().any(|t| {
                t.function
                    .as_ref()
                    .is_some_and(|f| non_empty(&f.name) || non_empty(&f.arguments))
            });
            if tool_text {
                info.output = true;
                info.visible = true;
            }
        }
        if let Some(f) = &choice.finish_reason {
            info.finish_reason = Some(f.to_string());
        }
    }
    Ok(info)
}

/// The human message inside an error JSON, whatever the engine's shape:
/// OpenAI/vLLM/llama.cpp `{"error":{"message":…}}`, vLLM's older
/// `{"object":"error","message":…}`, TGI `{"error":"…"}`, FastAPI
/// `{"detail":…}`.
pub fn error_message(v: &serde_json::Value) -> String {
    let pick = |v: &serde_json::Value| -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(m) => m
                .get("message")
                .and_then(|m| m.as_str().map(str::to_string)),
            _ => None,
        }
    };
    if let Some(e) = v.get("error").and_then(pick) {
        return e;
    }
    if let Some(m) = v.get("message").and_then(|m| m.as_str()) {
        return m.to_string();
    }
    if let Some(d) = v.get("detail") {
        return match d {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    truncate(&v.to_string(), 300)
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_only_and_empty_are_not_output() {
        let c =
            parse_chunk(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).unwrap();
        assert!(!c.output);
        let c =
            parse_chunk(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#).unwrap();
        assert!(!c.output);
        let c = parse_chunk(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}"#).unwrap();
        assert!(!c.output);
        let u = c.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (Some(3), Some(2), Some(1))
        );
    }

    #[test]
    fn kinds_of_output() {
        let c = parse_chunk(r#"{"choices":[{"text":"hi","finish_reason":null}]}"#).unwrap();
        assert!(c.output && c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).unwrap();
        assert!(c.output && !c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#).unwrap();
        assert!(c.output && !c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}}]}"#).unwrap();
        assert!(c.output && c.visible);
        let c = parse_chunk(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#).unwrap();
        assert!(!c.output);
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        let c = parse_chunk(r#"{"choices":[{"delta":{"content":"a\"b\u00e9"}}]}"#).unwrap();
        assert!(c.output);
    }

    #[test]
    fn error_shapes() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"error":{"message":"bad model","type":"x"}}"#).unwrap();
        assert_eq!(error_message(&v), "bad model");
        let v: serde_json::Value =
            serde_json::from_str(r#"{"object":"error","message":"too long"}"#).unwrap();
        assert_eq!(error_message(&v), "too long");
        let v: serde_json::Value = serde_json::from_str(r#"{"error":"overloaded"}"#).unwrap();
        assert_eq!(error_message(&v), "overloaded");
        let v: serde_json::Value = serde_json::from_str(r#"{"detail":"Not Found"}"#).unwrap();
        assert_eq!(error_message(&v), "Not Found");
        assert_eq!(truncate("héllo", 2), "h…");
    }
}
