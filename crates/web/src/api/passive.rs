//! The passive saturation curve through the API: production windows grouped
//! by concurrency, the knee (or why none) and the highest concurrency that
//! met the objectives, beside the last finished sweep's verdict.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::{get, MethodRouter};
use axum::Json;
use llmwatch_core::analysis::{
    Objectives, PassiveCurve, DEFAULT_PASSIVE_RANGE_S, DEFAULT_PASSIVE_WINDOW_S,
    MIN_POINTS_FOR_KNEE, MIN_WINDOWS_FOR_KNEE, MIN_WINDOWS_PER_POINT,
};
use llmwatch_engine::now_ms;
use llmwatch_engine::passive::{read_passive_curve, PassiveQuery};
use serde_json::{json, Value};

use super::sweeps::sweep_summary;
use super::{
    find_target, params, path, query, time_fields, ApiResult, RawQuery, RouteDoc, BAD, DURATION,
    NAME, TIME, UNKNOWN_TARGET,
};
use crate::AppState;

fn finite(v: Option<f64>) -> Value {
    json!(v.filter(|v| v.is_finite()))
}

/// The curve as JSON (pages and tests read the same fields).
pub fn curve_json(curve: &PassiveCurve) -> Value {
    let points: Vec<Value> = curve
        .points
        .iter()
        .map(|p| {
            json!({
                "concurrency": p.concurrency,
                "low": p.low,
                "high": p.high,
                "windows": p.windows,
                "supported": p.supported,
                "generation_tokens_per_s": finite(p.generation_tps),
                "requests_per_s": finite(p.request_rate),
                "server_ttft_p95_s": finite(p.ttft_p95),
                "server_itl_p95_s": finite(p.itl_p95),
                "meets_objectives": p.meets_objectives,
            })
        })
        .collect();
    let (knee, no_knee) = match &curve.knee {
        Ok(k) => {
            let point = &curve.points[k.point];
            (
                json!({
                    "concurrency": k.concurrency,
                    "windows": point.windows,
                    "generation_tokens_per_s": finite(point.generation_tps),
                    "gain_per_doubling": k.saturation.gain_per_doubling,
                    "description": k.saturation.describe(),
                }),
                Value::Null,
            )
        }
        Err(why) => (
            Value::Null,
            json!({"reason": why.code(), "description": why.describe()}),
        ),
    };
    let sustainable = curve.sustainable.map(|s| {
        json!({
            "concurrency": s.concurrency,
            "windows": curve.points[s.point].windows,
        })
    });
    json!({
        "windows": curve.windows,
        "idle_windows": curve.idle_windows,
        "points": points,
        "knee": knee,
        "no_knee": no_knee,
        "max_sustainable": sustainable,
    })
}

async fn passive(
    State(state): State<AppState>,
    Path(name): Path<String>,
    raw: RawQuery,
) -> ApiResult {
    let p = params(raw, &["from", "to", "window"])?;
    let to = p.time("to")?.unwrap_or_else(now_ms);
    let range_ms = i64::try_from(DEFAULT_PASSIVE_RANGE_S * 1000).unwrap_or(i64::MAX);
    let from = p
        .time("from")?
        .unwrap_or(to.saturating_sub(range_ms))
        .min(to);
    let window = match p.duration_ms("window")? {
        Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(1)),
        None => Duration::from_secs(DEFAULT_PASSIVE_WINDOW_S),
    };
    let store = &state.api.store;
    let target = find_target(store, &name).await?;
    let own = state.pages.objectives_for(&target.name);
    let objectives = Objectives {
        ttft_p95: own.ttft_p95,
        itl_p95: own.itl_p95,
        ..Objectives::default()
    };
    let query = PassiveQuery {
        target_id: target.id,
        from_ms: from,
        to_ms: to,
        window,
    };
    let (curve, window_ms) = read_passive_curve(store, &query, &objectives).await?;
    let last_sweep = store.last_finished_sweep_of(&target.name).await?;
    let mut out = serde_json::Map::new();
    out.insert("target".into(), json!(target.name));
    time_fields(&mut out, "from", Some(from));
    time_fields(&mut out, "to", Some(to));
    out.insert("window_s".into(), json!(window_ms as f64 / 1000.0));
    out.insert(
        "objectives".into(),
        json!({"ttft_p95_s": objectives.ttft_p95, "itl_p95_s": objectives.itl_p95}),
    );
    out.insert(
        "minimums".into(),
        json!({
            "windows_per_point": MIN_WINDOWS_PER_POINT,
            "points_for_knee": MIN_POINTS_FOR_KNEE,
            "windows_for_knee": MIN_WINDOWS_FOR_KNEE,
        }),
    );
    if let Value::Object(curve) = curve_json(&curve) {
        out.extend(curve);
    }
    out.insert(
        "last_sweep".into(),
        last_sweep
            .as_ref()
            .map(sweep_summary)
            .unwrap_or(Value::Null),
    );
    Ok(Json(Value::Object(out)))
}

/// The passive-curve route, with its documentation.
pub(super) fn route() -> (RouteDoc, MethodRouter<AppState>) {
    (
        RouteDoc {
            method: "get",
            path: "/api/v1/targets/{name}/passive",
            operation_id: "getPassiveCurve",
            summary: "A target's passive saturation curve from production traffic: windows grouped by concurrency (running + waiting), generation tokens/s and server p95 TTFT/ITL per level with the windows behind each, the knee (or why none) and the highest concurrency that met the objectives, beside the last finished sweep's verdict.",
            params: vec![
                path("name", NAME, "Target name."),
                query(
                    "from",
                    TIME,
                    "Start, RFC 3339 or Unix seconds (default: 7 days before `to`).",
                ),
                query("to", TIME, "End, RFC 3339 or Unix seconds (default: now)."),
                query(
                    "window",
                    DURATION,
                    "Window length, e.g. `60s` or seconds (default 60 s; raised so the range holds at most 10 080 windows).",
                ),
            ],
            errors: &[BAD, UNKNOWN_TARGET],
            success: 200,
            response: super::schemas::passive_curve,
            request_body: None,
            request_schema: None,
        },
        get(passive),
    )
}
