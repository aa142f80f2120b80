//! The graded set of an experiment: loaded (built in, or a JSONL file of
//! `{"prompt": …, "answer": …}`), then asked of a variant's server at
//! temperature 0, non-streamed, a few at a time, and graded by exact match.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use llmwatch_core::analysis::experiment::{accuracy, builtin_set, grade, Accuracy, GradedItem};

/// Largest JSONL set file read.
const MAX_SET_BYTES: u64 = 16 * 1024 * 1024;
/// Most items of a set.
const MAX_ITEMS: usize = 5_000;
/// Largest reply read per question.
const MAX_REPLY_BYTES: usize = 1024 * 1024;
/// Questions in flight at once.
const PARALLEL: usize = 8;
/// Per question.
const QUESTION_TIMEOUT: Duration = Duration::from_secs(120);

/// A set that cannot be used; the message names the line.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("quality.set: cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("quality.set: {path} line {line}: {message}")]
    Line {
        path: String,
        line: usize,
        message: String,
    },
    #[error("quality.set: {0}")]
    Invalid(String),
}

/// The items of `set`: `builtin:NAME`, or a JSONL path (relative to
/// `base_dir`, the plan's folder).
pub fn load_set(set: &str, base_dir: &Path) -> Result<Vec<GradedItem>, SetError> {
    if set.starts_with("builtin:") {
        return builtin_set(set).ok_or_else(|| {
            SetError::Invalid(format!(
                "unknown built-in set {set:?} (known: builtin:arith-50)"
            ))
        });
    }
    let path = base_dir.join(set);
    let shown = path.display().to_string();
    let read_err = |message: String| SetError::Read {
        path: shown.clone(),
        message,
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| read_err(e.to_string()))?
        .len();
    if len > MAX_SET_BYTES {
        return Err(read_err(format!("{len} bytes, more than {MAX_SET_BYTES}")));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| read_err(e.to_string()))?;
    let mut items = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item: GradedItem = serde_json::from_str(line).map_err(|e| SetError::Line {
            path: shown.clone(),
            line: i + 1,
            message: format!("expected {{\"prompt\": …, \"answer\": …}}: {e}"),
        })?;
        items.push(item);
        if items.len() > MAX_ITEMS {
            return Err(SetError::Invalid(format!(
                "{shown}: more than {MAX_ITEMS} items"
            )));
        }
    }
    if items.is_empty() {
        return Err(SetError::Invalid(format!("{shown} has no items")));
    }
    Ok(items)
}

/// Asks every item of `items` at temperature 0 and grades the replies; a
/// failed request counts as wrong.
pub async fn evaluate(
    http: &reqwest::Client,
    base_url: &str,
    model: &str,
    items: &[GradedItem],
    max_tokens: u32,
) -> Accuracy {
    let url = format!("{}/v1/completions", base_url.trim_end_matches('/'));
    let gate = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut tasks = tokio::task::JoinSet::new();
    for item in items.iter().cloned() {
        let (http, url, gate) = (http.clone(), url.clone(), gate.clone());
        let body = serde_json::json!({
            "model": model,
            "prompt": item.prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": false,
        });
        tasks.spawn(async move {
            let _turn = gate.acquire_owned().await.ok()?;
            let reply = ask(&http, &url, &body).await?;
            Some(grade(&reply, &item.answer))
        });
    }
    let (mut correct, mut failed) = (0u32, 0u32);
    while let Some(done) = tasks.join_next().await {
        match done.ok().flatten() {
            Some(true) => correct += 1,
            Some(false) => {}
            None => failed += 1,
        }
    }
    accuracy(correct, items.len() as u32, failed)
}

/// The reply text of one non-streamed completion, or `None` on any error.
async fn ask(http: &reqwest::Client, url: &str, body: &serde_json::Value) -> Option<String> {
    let response = http
        .post(url)
        .timeout(QUESTION_TIMEOUT)
        .json(body)
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_REPLY_BYTES as u64)
    {
        return None;
    }
    let bytes = response.bytes().await.ok()?;
    if bytes.len() > MAX_REPLY_BYTES {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value["choices"][0]["text"].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_sets_load_and_errors_name_the_line() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("set.jsonl"),
            "{\"prompt\": \"Capital of France?\", \"answer\": \"Paris\"}\n\n",
        )
        .expect("write");
        let items = load_set("set.jsonl", dir.path()).expect("loads");
        assert_eq!(items[0].answer, "Paris");
        std::fs::write(dir.path().join("bad.jsonl"), "{\"prompt\": 1}\n").expect("write");
        let err = load_set("bad.jsonl", dir.path())
            .expect_err("bad")
            .to_string();
        assert!(err.contains("line 1"), "{err}");
        assert_eq!(
            load_set("builtin:arith-50", dir.path())
                .expect("built in")
                .len(),
            50
        );
        assert!(load_set("builtin:nope", dir.path()).is_err());
    }
}
