//! The JSON Schema of every `/api/v1` answer, field by field, for the
//! OpenAPI document. Each function describes what one handler builds; the
//! API test checks every answer has its schema's required fields, and CI's
//! schemathesis run (`--checks all`) validates real answers against these.
//!
//! Objects llmwatch builds itself are closed (`additionalProperties:
//! false`), so a field added to a handler without its schema fails CI.
//! Stored analysis documents (a sweep's card, settings, verdict, a step's
//! run and evidence) are described as objects: their fields are the serde
//! types of `llmwatch-core` and `llmwatch-probe`, documented there.

use serde_json::{json, Map, Value};

/// A closed object whose every listed property is required.
fn object(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": required,
        "properties": properties,
    })
}

fn nullable(type_name: &str) -> Value {
    json!({ "type": [type_name, "null"] })
}

fn string() -> Value {
    json!({ "type": "string" })
}

fn integer() -> Value {
    json!({ "type": "integer" })
}

/// A float: `null` where it is not a finite number (JSON has no NaN).
fn number() -> Value {
    nullable("number")
}

fn enumeration(values: &[&str]) -> Value {
    json!({ "type": "string", "enum": values })
}

fn array(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}

/// Label or annotation names to values.
fn string_map() -> Value {
    json!({ "type": "object", "additionalProperties": { "type": "string" } })
}

/// A stored analysis document (see the module docs), `null` if absent.
fn document() -> Value {
    nullable("object")
}

/// `{name}_ms` (Unix ms) and `{name}` (RFC 3339), as `time_fields` writes.
fn time_pair(properties: &mut Map<String, Value>, name: &str, optional: bool) {
    let (ms, text) = if optional {
        (nullable("integer"), nullable("string"))
    } else {
        (integer(), string())
    };
    properties.insert(format!("{name}_ms"), ms);
    properties.insert(name.to_string(), text);
}

fn with_times(mut properties: Value, times: &[(&str, bool)]) -> Value {
    if let Some(map) = properties.as_object_mut() {
        for (name, optional) in times {
            time_pair(map, name, *optional);
        }
    }
    object(properties)
}

/// `next_cursor`: the next page's cursor, `null` on the last page.
fn cursor() -> Value {
    nullable("string")
}

/// `[unix seconds, value]` pairs (the value `null` where not finite).
fn points() -> Value {
    array(json!({
        "type": "array",
        "items": { "type": ["number", "null"] },
        "minItems": 2,
        "maxItems": 2,
    }))
}

const ALERT_STATES: &[&str] = &["pending", "firing", "resolved"];
const SWEEP_STATUSES: &[&str] = &[
    "running",
    "completed",
    "stopped",
    "failed",
    "cancelled",
    "interrupted",
];

/// A live verdict's fields.
fn live_fields() -> Value {
    with_times(
        json!({
            "verdict": string(),
            "confidence": string(),
            "evidence": string(),
            "what_to_try": nullable("string"),
            "samples": integer(),
        }),
        &[("evaluated", false)],
    )
}

/// A live verdict, `null` before the first evaluation.
fn live_verdict() -> Value {
    json!({ "anyOf": [live_fields(), { "type": "null" }] })
}

/// The live verdict inside a target's answer: with its last finished
/// sweep's verdict beside it (`null` without one).
fn live_verdict_with_sweep() -> Value {
    let sweep = with_times(
        json!({
            "id": integer(),
            "verdict": nullable("string"),
            "agrees": { "type": "boolean" },
            "note": string(),
        }),
        &[("ended", true)],
    );
    let mut verdict = live_fields();
    if let Some(props) = verdict.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "sweep".into(),
            json!({ "anyOf": [sweep, { "type": "null" }] }),
        );
    }
    json!({ "anyOf": [verdict, { "type": "null" }] })
}

/// One target as `target_json` builds it.
pub fn target() -> Value {
    let status = with_times(
        json!({
            "state": enumeration(&["up", "down", "unknown"]),
            "scrape_duration_ms": number(),
            "error": nullable("string"),
        }),
        &[("last_scrape", false)],
    );
    // Before the first scrape the status holds only its state.
    let mut status = status;
    status["required"] = json!(["state"]);
    object(json!({
        "name": string(),
        "kind": enumeration(&["engine", "gpu"]),
        "url": string(),
        "engine": nullable("string"),
        "watched": { "type": "boolean" },
        "discovered_by": nullable("string"),
        "labels": string_map(),
        "status": status,
        "signals": {
            "type": "object",
            "description": "The latest value of every signal the target has, by signal name.",
            "additionalProperties": object(json!({
                "value": number(),
                "unit": string(),
                "source": enumeration(&["server", "probe"]),
            })),
        },
        "probe_window_s": integer(),
        "firing_alerts": array(string()),
        "live": live_verdict_with_sweep(),
        // Engine targets: the breakdown over the probe window, or why none.
        "latency_breakdown": {
            "type": ["object", "null"],
            "additionalProperties": false,
            "required": ["window_s"],
            "properties": {
                "window_s": integer(),
                "breakdown": breakdown(),
                "missing": string(),
            },
        },
    }))
}

/// A `LatencyBreakdown` of `llmwatch-core` (TTFT and e2e by phase, the
/// dominant part); its fields are documented there.
fn breakdown() -> Value {
    json!({ "type": "object", "required": ["ttft"] })
}

pub fn latency_breakdown_series() -> Value {
    object(json!({
        "target": string(),
        "from": string(),
        "to": string(),
        "step_s": { "type": "number" },
        "points": array(object(json!({
            "t": { "type": "number" },
            "breakdown": breakdown(),
        }))),
        "missing": nullable("string"),
    }))
}

pub fn list_targets() -> Value {
    object(json!({ "targets": array(target()) }))
}

pub fn signal_series() -> Value {
    object(json!({
        "target": string(),
        "from": string(),
        "to": string(),
        "step_s": { "type": "number" },
        "series": array(object(json!({
            "signal": string(),
            "unit": string(),
            "source": enumeration(&["server", "probe"]),
            "points": points(),
        }))),
    }))
}

pub fn raw_series() -> Value {
    object(json!({
        "target": string(),
        "metric": string(),
        "from": string(),
        "to": string(),
        "series": array(object(json!({
            "labels": string_map(),
            "part": string(),
            "points": points(),
        }))),
    }))
}

fn probe() -> Value {
    with_times(
        json!({
            "id": integer(),
            "run_id": nullable("integer"),
            "api": string(),
            "model": string(),
            "shape": string(),
            "ok": { "type": "boolean" },
            "error_kind": nullable("string"),
            "error": nullable("string"),
            "http_status": nullable("integer"),
            "ttfb_s": number(),
            "ttft_s": number(),
            "tpot_s": number(),
            "e2e_s": number(),
            "itl_s": array(number()),
            "prompt_tokens": nullable("integer"),
            "output_tokens": integer(),
            "cached_tokens": nullable("integer"),
            "finish_reason": nullable("string"),
        }),
        &[("sent", false)],
    )
}

pub fn list_probes() -> Value {
    object(json!({
        "target": string(),
        "probes": array(probe()),
        "next_cursor": cursor(),
    }))
}

/// One measured step of a sweep.
fn step() -> Value {
    with_times(
        json!({
            "id": integer(),
            "sweep_id": integer(),
            "index": integer(),
            "load": object(json!({
                "kind": enumeration(&["concurrency", "rate"]),
                "value": { "type": "number" },
            })),
            "run": document(),
            "evidence": document(),
        }),
        &[("start", false), ("end", false)],
    )
}

pub fn list_runs() -> Value {
    object(json!({ "sweep_id": integer(), "runs": array(step()) }))
}

fn sweep_summary_properties() -> Value {
    json!({
        "id": integer(),
        "target": nullable("string"),
        "url": string(),
        "status": enumeration(SWEEP_STATUSES),
        "stop_reason": nullable("string"),
        "saturation": document(),
        "sustainable": document(),
    })
}

/// A sweep as the list shows it.
fn sweep_summary() -> Value {
    with_times(
        sweep_summary_properties(),
        &[("started", false), ("ended", true)],
    )
}

pub fn list_sweeps() -> Value {
    object(json!({ "sweeps": array(sweep_summary()), "next_cursor": cursor() }))
}

pub fn prediction() -> Value {
    let flags = array(string());
    with_times(
        json!({
            "id": integer(),
            "sweep_id": integer(),
            "served_args": flags,
            "vllm_args": flags,
            "status": enumeration(&["running", "done", "failed"]),
            "error": nullable("string"),
            "result": document(),
            "href": string(),
        }),
        &[("started", false), ("ended", true)],
    )
}

pub fn get_sweep() -> Value {
    let mut properties = sweep_summary_properties();
    if let Some(map) = properties.as_object_mut() {
        map.insert("settings".into(), document());
        map.insert("card".into(), document());
        map.insert("verdict".into(), document());
        map.insert("steps".into(), array(step()));
    }
    with_times(properties, &[("started", false), ("ended", true)])
}

/// `202` of a sweep start: the id is `null` when the sweep had not been
/// stored yet when the answer was due.
pub fn start_sweep() -> Value {
    object(json!({
        "id": integer(),
        "status": enumeration(&["running"]),
        "href": string(),
    }))
}

pub fn cancel_sweep() -> Value {
    object(json!({
        "id": integer(),
        "status": enumeration(&["cancelling"]),
        "href": string(),
    }))
}

pub fn list_alerts() -> Value {
    let alert = with_times(
        json!({
            "rule": string(),
            "target": string(),
            "state": enumeration(ALERT_STATES),
            "value": number(),
            "labels": string_map(),
            "annotations": string_map(),
        }),
        &[
            ("active_at", true),
            ("fired_at", true),
            ("resolved_at", true),
        ],
    );
    object(json!({ "alerts": array(alert) }))
}

pub fn alert_history() -> Value {
    let event = with_times(
        json!({
            "id": integer(),
            "rule": string(),
            "target": string(),
            "state": enumeration(&["inactive", "pending", "firing", "resolved"]),
            "value": number(),
            "labels": { "type": ["object", "null"], "additionalProperties": { "type": "string" } },
            "annotations": { "type": ["object", "null"], "additionalProperties": { "type": "string" } },
        }),
        &[("at", false)],
    );
    object(json!({ "events": array(event), "next_cursor": cursor() }))
}

pub fn list_rules() -> Value {
    let rule = object(json!({
        "name": string(),
        "signal": string(),
        "unit": string(),
        "op": enumeration(&[">", ">=", "<", "<=", "==", "!="]),
        "threshold": number(),
        "window_s": { "type": "number" },
        "for_s": { "type": "number" },
        "keep_firing_for_s": { "type": "number" },
        "target": nullable("string"),
        "labels": string_map(),
        "annotations": string_map(),
        "alerts": array(object(json!({
            "target": string(),
            "state": enumeration(ALERT_STATES),
            "value": number(),
        }))),
    }));
    object(json!({ "rules": array(rule), "evaluations": integer() }))
}

pub fn live_timeline() -> Value {
    let change = with_times(
        json!({
            "verdict": string(),
            "previous": nullable("string"),
            "confidence": string(),
            "evidence": string(),
        }),
        &[("at", false)],
    );
    object(json!({
        "target": string(),
        "window_s": integer(),
        "current": live_verdict(),
        "changes": array(change),
    }))
}

/// The passive saturation curve of a target over a range.
pub fn passive_curve() -> Value {
    let point = object(json!({
        "concurrency": { "type": "number" },
        "low": { "type": "number" },
        "high": { "type": "number" },
        "windows": integer(),
        "supported": { "type": "boolean" },
        "generation_tokens_per_s": number(),
        "requests_per_s": number(),
        "server_ttft_p95_s": number(),
        "server_itl_p95_s": number(),
        "meets_objectives": nullable("boolean"),
    }));
    let knee = object(json!({
        "concurrency": { "type": "number" },
        "windows": integer(),
        "generation_tokens_per_s": number(),
        "gain_per_doubling": number(),
        "description": string(),
    }));
    let no_knee = object(json!({ "reason": string(), "description": string() }));
    let sustainable = object(json!({ "concurrency": { "type": "number" }, "windows": integer() }));
    let or_null = |schema: Value| json!({ "anyOf": [schema, { "type": "null" }] });
    with_times(
        json!({
            "target": string(),
            "window_s": { "type": "number" },
            "objectives": object(json!({ "ttft_p95_s": number(), "itl_p95_s": number() })),
            "minimums": object(json!({
                "windows_per_point": integer(),
                "points_for_knee": integer(),
                "windows_for_knee": integer(),
            })),
            "windows": integer(),
            "idle_windows": integer(),
            "points": array(point),
            "knee": or_null(knee),
            "no_knee": or_null(no_knee),
            "max_sustainable": or_null(sustainable),
            "last_sweep": or_null(sweep_summary()),
        }),
        &[("from", false), ("to", false)],
    )
}

/// The OpenAPI document itself (described loosely: it is its own schema).
pub fn openapi() -> Value {
    json!({
        "type": "object",
        "required": ["openapi", "info", "paths", "components"],
        "properties": {
            "openapi": { "type": "string" },
            "info": { "type": "object" },
            "paths": { "type": "object" },
            "components": { "type": "object" },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_objects_require_every_property() {
        let schema = cancel_sweep();
        assert_eq!(schema["additionalProperties"], false);
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["href", "id", "status"]);
        let sweep = get_sweep();
        let required: Vec<&str> = sweep["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for field in [
            "started",
            "started_ms",
            "ended",
            "ended_ms",
            "steps",
            "card",
        ] {
            assert!(required.contains(&field), "{field} in {required:?}");
        }
    }
}
