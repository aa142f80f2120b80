//! The live diagnosis through the API: the current verdict (also inside
//! `/api/v1/targets/{name}`) and the timeline of its changes.

use axum::extract::{Path, State};
use axum::routing::{get, MethodRouter};
use axum::Json;
use llmwatch_store::{LiveVerdictRow, Store, TargetRow};
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

/// The target's current live verdict, for `/api/v1/targets/{name}`.
pub(super) async fn live_json(store: &Store, target: &TargetRow) -> Result<Value, ApiError> {
    Ok(verdict_json(store.live_verdict(target.id).await?.as_ref()))
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
