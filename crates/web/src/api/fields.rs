//! Pieces several answers share: a series' points, where a signal comes
//! from, and the stored analysis documents that are passed through whole.
//!
//! A float that may not be finite (a rate over no time, a ratio of
//! nothing) is `null` in JSON (serde_json writes NaN that way), so its
//! field is declared `#[schemars(with = "Option<f64>")]`.

use llmwatch_core::signals::Signal;
use llmwatch_store::is_probe_signal;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::Value;

/// `[Unix seconds, value]`, the value `null` where it is not finite.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Point(pub f64, #[schemars(with = "Option<f64>")] pub f64);

/// A stored series' points as the API answers them.
pub fn points(points: &[llmwatch_store::Point]) -> Vec<Point> {
    points
        .iter()
        .map(|p| Point(p.ts_ms as f64 / 1000.0, p.value))
        .collect()
}

/// Who measured a signal: the server's own page or llmwatch's canaries.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Server,
    Probe,
}

impl Source {
    pub fn of(signal: Signal) -> Source {
        if is_probe_signal(signal) {
            Source::Probe
        } else {
            Source::Server
        }
    }
}

/// The schema of a stored analysis document (a sweep's card, settings and
/// verdict, a step's run and evidence, an experiment's or a prediction's
/// result): an object, `null` if absent. Its fields are the serde types of
/// `llmwatch-core` and `llmwatch-probe`, documented there; the API passes
/// the stored JSON through.
pub fn stored_document(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": ["object", "null"] })
}

/// A stored document's text as JSON (`null` if it does not parse).
pub fn parse_document(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}
