//! The live diagnosis through the API: the current verdict (also inside
//! `/api/v1/targets/{name}`) and the timeline of its changes.

use axum::extract::{Path, State};
use axum::routing::{get, MethodRouter};
use axum::Json;
use llmwatch_core::analysis::{LiveKind, Verdict};
use llmwatch_store::{LiveVerdictRow, Store, SweepRow, TargetRow};
use serde_json::{json, Value};

use super::{
    find_target, params, path, time_fields, time_range, ApiError, ApiResult, RawQuery, RouteDoc,
    BAD, FROM, LIMIT, TO, UNKNOWN_TARGET,
};
use crate::AppState;

/// A stored verdict as JSON (`null` before the first evaluation).
fn verdict_json(row: Option<&LiveVerdictRow>) -> Value {
    let Some(row) = row else {
        return Value::Null;
    };
    let mut out = serde_json::Map::new();
    out.insert("verdict".into(), json!(row.verdict));
    out.insert("confidence".into(), json!(row.confidence));
    out.insert("evidence".into(), json!(row.evidence));
    out.insert(
        "what_to_try".into(),
        json!(Some(&row.what_to_try).filter(|t| !t.is_empty())),
    );
    out.insert("samples".into(), json!(row.samples));
    time_fields(&mut out, "evaluated", Some(row.ts_ms));
    Value::Object(out)
}

/// The target's current live verdict, for `/api/v1/targets/{name}`, with
/// its last finished sweep's verdict beside it (`sweep`): one story, or
/// why the two differ.
pub(super) async fn live_json(store: &Store, target: &TargetRow) -> Result<Value, ApiError> {
    let live = store.live_verdict(target.id).await?;
    let mut out = verdict_json(live.as_ref());
    if let (Some(row), Some(map)) = (live.as_ref(), out.as_object_mut()) {
        let sweep = store.last_finished_sweep_of(&target.name).await?;
        map.insert("sweep".into(), sweep_beside(row, sweep.as_ref()));
    }
    Ok(out)
}

/// The sweep's leading verdict (its first finding that is not about the
/// client) beside the live one: `null` without a finished sweep.
fn sweep_beside(live: &LiveVerdictRow, sweep: Option<&SweepRow>) -> Value {
    let Some(sweep) = sweep else {
        return Value::Null;
    };
    let verdict: Option<String> = sweep
        .verdict_json
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|v| {
            v.get("findings")?
                .as_array()?
                .iter()
                .filter_map(|f| f.get("verdict")?.as_str())
                .find(|name| *name != Verdict::ClientBound.name())
                .map(str::to_string)
        });
    let live_name = LiveKind::from_code(&live.verdict).map(LiveKind::name);
    let agrees = match (&verdict, live_name) {
        (Some(sweep), Some(live)) => sweep == live,
        (None, Some(live)) => live == LiveKind::Healthy.name(),
        _ => false,
    };
    let sweep_words = verdict
        .clone()
        .unwrap_or_else(|| "no bottleneck".to_string());
    let note = if agrees {
        format!(
            "the last sweep (#{}) found the same: {sweep_words}",
            sweep.id
        )
    } else {
        let live_words = live_name.unwrap_or(live.verdict.as_str());
        format!(
            "the last sweep (#{}) found {sweep_words}, the live window says {live_words}: the \
             sweep read a controlled ramp to its highest load, the live window reads the traffic \
             of its last minutes, so a limit the traffic has not reached shows only in the sweep, \
             and a change of the server's settings since the sweep (compare its card with the \
             server's) shows only live",
            sweep.id
        )
    };
    let mut out = serde_json::Map::new();
    out.insert("id".into(), json!(sweep.id));
    out.insert("verdict".into(), json!(verdict));
    out.insert("agrees".into(), json!(agrees));
    out.insert("note".into(), json!(note));
    time_fields(&mut out, "ended", sweep.ended_ms);
    Value::Object(out)
}

async fn live_timeline(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> ApiResult {
    let p = params(query, &["from", "to", "limit"])?;
    let (from, to) = time_range(&p)?;
    let limit = p.limit(100, 1000)?;
    let store = &state.api.store;
    let target = find_target(store, &name).await?;
    let current = store.live_verdict(target.id).await?;
    let changes: Vec<Value> = store
        .live_changes(target.id, from, to, i64::from(limit))
        .await?
        .into_iter()
        .map(|c| {
            let mut out = serde_json::Map::new();
            time_fields(&mut out, "at", Some(c.ts_ms));
            out.insert("verdict".into(), json!(c.verdict));
            out.insert("previous".into(), json!(c.previous));
            out.insert("confidence".into(), json!(c.confidence));
            out.insert("evidence".into(), json!(c.evidence));
            Value::Object(out)
        })
        .collect();
    Ok(Json(json!({
        "target": target.name,
        "window_s": state.api.config.server.live_window.as_secs(),
        "current": verdict_json(current.as_ref()),
        "changes": changes,
    })))
}

/// The timeline route, with its documentation.
pub(super) fn route() -> (RouteDoc, MethodRouter<AppState>) {
    (
        RouteDoc {
            method: "get",
            path: "/api/v1/targets/{name}/live",
            operation_id: "getLiveDiagnosis",
            summary: "A target's live verdict (what limits it now, over the sliding window) and the timeline of verdict changes.",
            params: vec![path("name", "string", "Target name."), FROM, TO, LIMIT],
            errors: &[BAD, UNKNOWN_TARGET],
            success: 200,
            response: super::schemas::live_timeline,
            request_body: None,
            request_schema: None,
        },
        get(live_timeline),
    )
}
