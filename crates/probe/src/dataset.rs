//! Datasets of conversations as a bench source (`--dataset
//! sharegpt:FILE.json`): ShareGPT's JSON — an array of
//! `{"conversations": [{"from": "human", "value": …}, {"from": "gpt",
//! "value": …}, …]}` — where every human turn followed by an assistant
//! turn is one request: the human text is the prompt, as written, and the
//! assistant's reply length (in the target's tokens) is the output length.
//!
//! Each turn is sent on its own (no history), through `/v1/completions`
//! so the prompt is counted without a chat template; its length and the
//! reply's are counted by the target's own `/tokenize`.

use serde_json::Value;
use thiserror::Error;

use crate::client::{ProbeClient, ProbeRequest};
use crate::record::Api;
use crate::shape::tokenize_count;
use crate::trace::ScheduledRequest;

/// The largest dataset file read (ShareGPT's own V3 file is 0.7 GB:
/// take a slice of it).
pub const MAX_DATASET_BYTES: u64 = 64 << 20;

/// One human turn and the assistant's reply to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetTurn {
    pub prompt: String,
    pub reply: String,
}

#[derive(Debug, Error)]
pub enum DatasetError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("expected a JSON array of conversations at the top, found {found}")]
    NotAnArray { found: &'static str },
    #[error("conversation {index}: {message}")]
    Conversation { index: usize, message: String },
    #[error("no human turn followed by an assistant turn in {conversations} conversation(s)")]
    NoTurns { conversations: usize },
    #[error("the target's /tokenize did not answer: prompt and reply lengths cannot be counted")]
    NoTokenizer,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses ShareGPT JSON into turns, in file order; errors name the
/// conversation (from 0) and the turn.
pub fn parse_sharegpt(text: &str) -> Result<Vec<DatasetTurn>, DatasetError> {
    let doc: Value = serde_json::from_str(text)?;
    let Value::Array(conversations) = &doc else {
        return Err(DatasetError::NotAnArray { found: kind(&doc) });
    };
    let mut turns = Vec::new();
    for (index, conversation) in conversations.iter().enumerate() {
        let bad = |message: String| DatasetError::Conversation { index, message };
        let Some(messages) = conversation
            .get("conversations")
            .or_else(|| conversation.get("conversation"))
        else {
            return Err(bad("no \"conversations\" field".into()));
        };
        let Value::Array(messages) = messages else {
            return Err(bad(format!(
                "\"conversations\" is {}, expected an array",
                kind(messages)
            )));
        };
        let mut previous: Option<(&str, &str)> = None;
        for (t, message) in messages.iter().enumerate() {
            let field = |name: &str| match message.get(name) {
                Some(Value::String(s)) => Ok(s.as_str()),
                Some(other) => Err(bad(format!(
                    "turn {t}: \"{name}\" is {}, expected a string",
                    kind(other)
                ))),
                None => Err(bad(format!("turn {t}: no \"{name}\""))),
            };
            let (from, value) = (field("from")?, field("value")?);
            if let Some(("human" | "user", prompt)) = previous {
                if matches!(from, "gpt" | "assistant" | "chatgpt" | "bard" | "bing")
                    && !prompt.trim().is_empty()
                    && !value.trim().is_empty()
                {
                    turns.push(DatasetTurn {
                        prompt: prompt.to_string(),
                        reply: value.to_string(),
                    });
                }
            }
            previous = Some((from, value));
        }
    }
    if turns.is_empty() {
        return Err(DatasetError::NoTurns {
            conversations: conversations.len(),
        });
    }
    Ok(turns)
}

/// A turn counted in the target's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedTurn {
    pub prompt: String,
    /// The prompt's tokens as the server counts a completion's prompt
    /// (special tokens included).
    pub input_tokens: u32,
    /// The reply's tokens (without special tokens), at least 1.
    pub output_tokens: u32,
}

/// Counts `turns` with the target's `/tokenize` (two requests a turn).
pub async fn count_turns(
    client: &ProbeClient,
    model: &str,
    turns: &[DatasetTurn],
) -> Result<Vec<CountedTurn>, DatasetError> {
    let count = |text: String| async move {
        tokenize_count(client, Api::Completions, model, &text)
            .await
            .ok_or(DatasetError::NoTokenizer)
    };
    // The special tokens a prompt gets (BOS), measured as the trace does.
    let one = count(" the".into()).await?;
    let two = count(" the the".into()).await?;
    let specials = (2 * one).saturating_sub(two);
    let mut out = Vec::with_capacity(turns.len());
    for turn in turns {
        let input_tokens = count(turn.prompt.clone()).await?;
        let reply = count(turn.reply.clone()).await?;
        out.push(CountedTurn {
            prompt: turn.prompt.clone(),
            input_tokens,
            output_tokens: reply.saturating_sub(specials).max(1),
        });
    }
    Ok(out)
}

/// The turns as requests arriving at `arrivals_ms` (one per turn, in
/// order; the shorter of the two decides how many).
pub fn schedule(model: &str, turns: &[CountedTurn], arrivals_ms: &[u64]) -> Vec<ScheduledRequest> {
    turns
        .iter()
        .zip(arrivals_ms)
        .map(|(turn, &at_ms)| ScheduledRequest {
            at_ms,
            input_length: turn.input_tokens,
            request: ProbeRequest::fixed(
                Api::Completions,
                model,
                turn.prompt.clone(),
                turn.output_tokens,
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_turns_answered_by_the_assistant_are_requests() {
        let text = r#"[
            {"id": "a", "conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "human", "value": "hello"},
                {"from": "gpt", "value": "hi there"},
                {"from": "human", "value": "and then?"},
                {"from": "gpt", "value": ""},
                {"from": "human", "value": "unanswered"}
            ]},
            {"id": "b", "conversation": [
                {"from": "user", "value": "second"},
                {"from": "assistant", "value": "reply"}
            ]}
        ]"#;
        let turns = parse_sharegpt(text).unwrap();
        let pairs: Vec<(&str, &str)> = turns
            .iter()
            .map(|t| (t.prompt.as_str(), t.reply.as_str()))
            .collect();
        assert_eq!(pairs, [("hello", "hi there"), ("second", "reply")]);
    }

    #[test]
    fn bad_files_are_named() {
        let e = parse_sharegpt("{\"conversations\": []}").unwrap_err();
        assert!(e.to_string().contains("array"), "{e}");
        let e = parse_sharegpt("[{\"id\": 1}]").unwrap_err();
        assert!(e.to_string().contains("conversation 0"), "{e}");
        let e =
            parse_sharegpt(r#"[{"conversations": [{"from": "human", "value": 3}]}]"#).unwrap_err();
        assert!(
            e.to_string().contains("turn 0") && e.to_string().contains("\"value\" is a number"),
            "{e}"
        );
        let e = parse_sharegpt(r#"[{"conversations": [{"from": "human", "value": "x"}]}]"#)
            .unwrap_err();
        assert!(
            matches!(e, DatasetError::NoTurns { conversations: 1 }),
            "{e}"
        );
        assert!(matches!(parse_sharegpt("[1,"), Err(DatasetError::Json(_))));
    }
}
