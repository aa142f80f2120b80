//! The REST API under `/api/v1` (JSON) and the service's own `/metrics`.
//!
//! Handlers are thin: parse the query into valid values ([`params`]), ask
//! the store or the alert engine, shape JSON. Every route is declared once in
//! [`routes`] with its documentation beside its handler, so the router and
//! the OpenAPI document ([`openapi`]) cannot drift apart.
//!
//! Errors are `{"error": {"status": 400, "message": "…"}}` with the status
//! that fits. Long lists take `limit` and `cursor` and answer `next_cursor`
//! (null on the last page). Times are RFC 3339 or Unix seconds in requests;
//! answers carry both (`…_ms` and an RFC 3339 string).

pub mod experiments;
mod live;
pub mod openapi;
pub mod params;
mod passive;
pub mod predictions;
pub mod schemas;
mod sweeps;

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use llmwatch_core::alerts::AlertState;
use llmwatch_core::catalog::{engine_may_expose, CatalogMetric, Engine};
use llmwatch_core::redact::redact_url;
use llmwatch_core::signals::Signal;
use llmwatch_store::{
    is_probe_signal, ProbeOrigin, ProbeRow, Range, Store, StoreError, TargetKind, TargetRow,
    PROBE_WINDOW_MIN_MS,
};
use serde_json::{json, Value};

use self::params::{parse_id, Params};
use crate::latency_breakdown::breakdown_series;
pub use crate::state::api_context::ApiContext;
use crate::{AppState, PROBE_WINDOW_MS};
use llmwatch_engine::alerts::CurrentAlert;
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_engine::sources::scrape::now_ms;

/// An error answer: a status and a message for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> ApiError {
        match err {
            StoreError::BadRange(message) => ApiError::bad_request(message),
            other => {
                tracing::error!(error = %other, "API: store error");
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message: format!("cannot read the store: {other}"),
                }
            }
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(err: QueryRejection) -> ApiError {
        ApiError::bad_request(format!("malformed query string: {}", err.body_text()))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(self.status, &self.message)
    }
}

/// A JSON error answer.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({ "error": { "status": status.as_u16(), "message": message } })),
    )
        .into_response()
}

type ApiResult = Result<Json<Value>, ApiError>;
type RawQuery = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn params(query: RawQuery, allowed: &[&str]) -> Result<Params, ApiError> {
    let Query(pairs) = query?;
    Params::new(pairs, allowed)
}

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum In {
    Path,
    Query,
}

/// One documented parameter.
#[derive(Debug, Clone, Copy)]
pub struct ParamDoc {
    pub name: &'static str,
    pub location: In,
    pub required: bool,
    /// The parameter's JSON schema: a bare type (`string`, `integer`) or a
    /// whole schema object as JSON text (bounds, enums, patterns).
    pub schema: &'static str,
    pub description: &'static str,
}

/// One route's documentation.
#[derive(Debug, Clone)]
pub struct RouteDoc {
    pub method: &'static str,
    /// In axum and OpenAPI syntax alike: `/api/v1/targets/{name}`.
    pub path: &'static str,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub params: Vec<ParamDoc>,
    /// Statuses besides 200 (or 202) this route answers, with why.
    pub errors: &'static [(u16, &'static str)],
    pub success: u16,
    pub request_body: Option<&'static str>,
    /// The request body's JSON schema, within the daemon's sweep limits.
    pub request_schema: Option<fn(&llmwatch_config::SweepLimits) -> Value>,
    /// The JSON Schema of the success answer, field by field
    /// (`schemas.rs`; the API test checks its required fields are there).
    pub response: fn() -> Value,
}

const fn query(name: &'static str, schema: &'static str, description: &'static str) -> ParamDoc {
    ParamDoc {
        name,
        location: In::Query,
        required: false,
        schema,
        description,
    }
}

const fn required_query(
    name: &'static str,
    schema: &'static str,
    description: &'static str,
) -> ParamDoc {
    ParamDoc {
        required: true,
        ..query(name, schema, description)
    }
}

const fn path(name: &'static str, schema: &'static str, description: &'static str) -> ParamDoc {
    ParamDoc {
        name,
        location: In::Path,
        required: true,
        schema,
        description,
    }
}

/// A target's name (as `check_name` allows).
const NAME: &str = r#"{"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}"#;
/// Filled by the OpenAPI document from the signal catalog.
pub const SIGNAL_LIST: &str = "signal-list";
/// Filled by the OpenAPI document from the metric catalog.
pub const METRIC_NAME: &str = "metric-name";
/// A sweep or step id.
const ID: &str = r#"{"type": "integer", "minimum": 1, "maximum": 9007199254740991}"#;
/// What `parse_time` takes: Unix seconds or an RFC 3339 date-time.
const TIME: &str = r#"{"anyOf": [{"type": "string", "pattern": "^[0-9]{1,10}(\\.[0-9]{1,3})?$"}, {"type": "string", "format": "date-time"}]}"#;
/// What `parse_step` takes: seconds or a humantime duration.
const DURATION: &str = r#"{"type": "string", "pattern": "^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?|0\\.(00[1-9]|0[1-9][0-9]?|[1-9][0-9]{0,2})|[1-9][0-9]{0,4}(ms|s|m|h))$"}"#;

const FROM: ParamDoc = query(
    "from",
    TIME,
    "Start, RFC 3339 or Unix seconds (default: 1 h before `to`).",
);
const TO: ParamDoc = query("to", TIME, "End, RFC 3339 or Unix seconds (default: now).");
const LIMIT: ParamDoc = query(
    "limit",
    r#"{"type": "integer", "minimum": 1, "maximum": 1000}"#,
    "Page size, 1..1000 (default 100).",
);
const CURSOR: ParamDoc = query(
    "cursor",
    r#"{"type": "string", "pattern": "^[0-9]{1,15}$"}"#,
    "`next_cursor` of the previous page.",
);
const BAD: (u16, &str) = (
    400,
    "A parameter is missing or invalid; the message names it.",
);
const UNKNOWN_TARGET: (u16, &str) = (404, "No such target.");

/// Every route of the API, with its documentation and handler.
pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    vec![
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/targets",
                operation_id: "listTargets",
                summary: "Every target with its live status and latest signals.",
                params: vec![],
                errors: &[BAD],
                success: 200,
                response: schemas::list_targets,
                request_body: None,
                request_schema: None,
            },
            get(list_targets),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/targets/{name}",
                operation_id: "getTarget",
                summary: "One target with its live status and latest signals.",
                params: vec![path("name", NAME, "Target name.")],
                errors: &[BAD, UNKNOWN_TARGET],
                success: 200,
                response: schemas::target,
                request_body: None,
                request_schema: None,
            },
            get(get_target),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/targets/{name}/signals",
                operation_id: "getSignalSeries",
                summary: "Signal series of a target over a range, one point per step.",
                params: vec![
                    path("name", NAME, "Target name."),
                    query(
                        "signal",
                        SIGNAL_LIST,
                        "Comma-separated signal names (default: every signal).",
                    ),
                    FROM,
                    TO,
                    query(
                        "step",
                        DURATION,
                        "Step, e.g. `15s` or seconds (default: range / 240, at least 1 s).",
                    ),
                ],
                errors: &[BAD, UNKNOWN_TARGET],
                success: 200,
                response: schemas::signal_series,
                request_body: None,
                request_schema: None,
            },
            get(signal_series),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/targets/{name}/latency_breakdown",
                operation_id: "getLatencyBreakdown",
                summary: "The canaries' mean TTFT and e2e over a range, split by the engine's phase times (queue, prefill, decode, time in the server outside the engine core, network/client), one point per step.",
                params: vec![
                    path("name", NAME, "Target name."),
                    FROM,
                    TO,
                    query(
                        "step",
                        DURATION,
                        "Window of each point, e.g. `5m` or seconds (default: range / 60; at least 60 s, the shortest window probe means are taken over).",
                    ),
                ],
                errors: &[BAD, UNKNOWN_TARGET],
                success: 200,
                response: schemas::latency_breakdown_series,
                request_body: None,
                request_schema: None,
            },
            get(latency_breakdown_series),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/series",
                operation_id: "getRawSeries",
                summary: "Raw stored series of one catalog metric of a target (every label set and histogram part).",
                params: vec![
                    required_query("target", NAME, "Target name."),
                    required_query("metric", METRIC_NAME, "Catalog metric, e.g. `kv_cache_usage`."),
                    FROM,
                    TO,
                ],
                errors: &[BAD, UNKNOWN_TARGET],
                success: 200,
                response: schemas::raw_series,
                request_body: None,
                request_schema: None,
            },
            get(raw_series),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/probes",
                operation_id: "listProbes",
                summary: "Probe records of a target, oldest first, paginated: canaries and sweep steps' probes, or one kind.",
                params: vec![
                    required_query("target", NAME, "Target name."),
                    query(
                        "run",
                        r#"{"anyOf": [{"type": "string", "enum": ["canary"]}, {"type": "string", "pattern": "^[1-9][0-9]{0,14}$"}]}"#,
                        "Only the probes of one sweep step (its `id` in `/api/v1/runs`), or `canary` for the daemon's canaries alone (default: all).",
                    ),
                    FROM,
                    TO,
                    LIMIT,
                    CURSOR,
                ],
                errors: &[BAD, UNKNOWN_TARGET],
                success: 200,
                response: schemas::list_probes,
                request_body: None,
                request_schema: None,
            },
            get(list_probes),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/runs",
                operation_id: "listRuns",
                summary: "Runs (the measured steps) of a sweep.",
                params: vec![required_query("sweep", ID, "Sweep id.")],
                errors: &[BAD, (404, "No such sweep.")],
                success: 200,
                response: schemas::list_runs,
                request_body: None,
                request_schema: None,
            },
            get(sweeps::list_runs),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/sweeps",
                operation_id: "listSweeps",
                summary: "Sweeps, newest first, with their headline verdict; paginated.",
                params: vec![LIMIT, CURSOR],
                errors: &[BAD],
                success: 200,
                response: schemas::list_sweeps,
                request_body: None,
                request_schema: None,
            },
            get(sweeps::list_sweeps),
        ),
        (
            RouteDoc {
                method: "post",
                path: "/api/v1/sweeps",
                operation_id: "startSweep",
                summary: "Starts a sweep of a configured target in the background (one at a time, capped); answers its id.",
                params: vec![],
                errors: &[
                    BAD,
                    UNKNOWN_TARGET,
                    (409, "A sweep started through the API is still running."),
                    (413, "The body is over the size limit."),
                    (415, "The body is not `application/json`."),
                    (502, "The sweep could not start (e.g. the target is down)."),
                ],
                success: 202,
                response: schemas::start_sweep,
                request_body: Some(
                    "{\"target\": NAME, \"shape\": \"512x128\", \"concurrency\": [1,2,4], \"requests_per_step\": 100, \"min_step_duration\": \"10s\", \"model\": NAME?}",
                ),
                request_schema: Some(sweeps::start_sweep_schema),
            },
            post(sweeps::start_sweep),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/sweeps/{id}",
                operation_id: "getSweep",
                summary: "One sweep: settings, experiment card, steps, verdict.",
                params: vec![path("id", ID, "Sweep id.")],
                errors: &[BAD, (404, "No such sweep.")],
                success: 200,
                response: schemas::get_sweep,
                request_body: None,
                request_schema: None,
            },
            get(sweeps::get_sweep),
        ),
        (
            RouteDoc {
                method: "post",
                path: "/api/v1/sweeps/{id}/cancel",
                operation_id: "cancelSweep",
                summary: "Cancel the running sweep: requests in flight are aborted, measured steps kept, status `cancelled`.",
                params: vec![path("id", ID, "Sweep id.")],
                errors: &[BAD, (404, "No such sweep."), (409, "The sweep is not running.")],
                success: 202,
                response: schemas::cancel_sweep,
                request_body: None,
                request_schema: None,
            },
            post(sweeps::cancel_sweep),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/alerts",
                operation_id: "listAlerts",
                summary: "Current alerts (pending, firing, recently resolved).",
                params: vec![query(
                    "state",
                    r#"{"type": "string", "enum": ["pending", "firing", "resolved"]}"#,
                    "Only alerts in this state: pending, firing or resolved.",
                )],
                errors: &[BAD],
                success: 200,
                response: schemas::list_alerts,
                request_body: None,
                request_schema: None,
            },
            get(list_alerts),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/alerts/history",
                operation_id: "alertHistory",
                summary: "Alert state changes, newest first, paginated.",
                params: vec![
                    query("rule", "string", "Only this rule."),
                    query("target", NAME, "Only this target."),
                    LIMIT,
                    CURSOR,
                ],
                errors: &[BAD],
                success: 200,
                response: schemas::alert_history,
                request_body: None,
                request_schema: None,
            },
            get(alert_history),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/rules",
                operation_id: "listRules",
                summary: "Alert rules with the state of each of their alerts.",
                params: vec![],
                errors: &[BAD],
                success: 200,
                response: schemas::list_rules,
                request_body: None,
                request_schema: None,
            },
            get(list_rules),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/openapi.json",
                operation_id: "openapi",
                summary: "This document.",
                params: vec![],
                errors: &[],
                success: 200,
                response: schemas::openapi,
                request_body: None,
                request_schema: None,
            },
            get(openapi_json),
        ),
        live::route(),
        passive::route(),
    ]
    .into_iter()
    .chain(predictions::routes())
    .chain(experiments::routes())
    .collect()
}

/// The API router (under the caller's auth layer).
pub fn router() -> Router<AppState> {
    let mut router = Router::new();
    for (doc, handler) in routes() {
        router = router.route(doc.path, handler);
    }
    router.route("/metrics", get(own_metrics)).route(
        "/api/v1/{*rest}",
        axum::routing::any(|| async {
            error_response(
                StatusCode::NOT_FOUND,
                "no such API route (see /api/v1/openapi.json)",
            )
        }),
    )
}

async fn openapi_json(State(state): State<AppState>) -> Json<Value> {
    Json(openapi::document(&state.api.config.server.sweep_limits))
}

async fn own_metrics(State(state): State<AppState>) -> Response {
    let ctx = &state.api;
    match ctx
        .own_metrics
        .render(&ctx.store, &ctx.counters, &ctx.alerts, &|name| {
            state.pages.objectives_for(name).ttft_p95
        })
        .await
    {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the store: {err}\n"),
        )
            .into_response(),
    }
}

/// `ms` as `{…_ms: ms, …: "RFC 3339"}` fields.
fn time_fields(out: &mut serde_json::Map<String, Value>, name: &str, ms: Option<i64>) {
    out.insert(format!("{name}_ms"), json!(ms));
    out.insert(name.to_string(), json!(ms.map(rfc3339_ms)));
}

async fn find_target(store: &Store, name: &str) -> Result<TargetRow, ApiError> {
    store
        .target_by_name(name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no target named {name:?}")))
}

async fn target_json(ctx: &ApiContext, target: &TargetRow, now: i64) -> Result<Value, ApiError> {
    let health = ctx.store.scrape_health(target.id, 1).await?;
    let mut status = serde_json::Map::new();
    match health.first() {
        Some(h) => {
            status.insert("state".into(), json!(if h.up { "up" } else { "down" }));
            time_fields(&mut status, "last_scrape", Some(h.ts_ms));
            status.insert("scrape_duration_ms".into(), json!(h.duration_ms));
            status.insert("error".into(), json!(h.error));
        }
        None => {
            status.insert("state".into(), json!("unknown"));
        }
    }
    let mut signals = serde_json::Map::new();
    let scrape_signals = ctx.store.latest_signals(target.id).await?;
    let probe_signals = ctx
        .store
        .probe_signals(target.id, now, PROBE_WINDOW_MS)
        .await?;
    for (signal, value) in scrape_signals.into_iter().chain(probe_signals) {
        signals.insert(
            signal.as_str().to_string(),
            json!({
                "value": value,
                "unit": signal.unit(),
                "source": if is_probe_signal(signal) { "probe" } else { "server" },
            }),
        );
    }
    let firing: Vec<String> = ctx
        .alerts
        .current()
        .into_iter()
        .filter(|a| a.target == target.name && a.alert.state == AlertState::Firing)
        .map(|a| a.rule)
        .collect();
    // Watched now: a configured GPU source, or a target of the set
    // (configured or discovered); otherwise only its history remains.
    let watched = ctx.targets.find(&target.name);
    let is_gpu_source = ctx.config.gpus.iter().any(|g| g.name == target.name);
    Ok(json!({
        "name": target.name,
        "kind": target.kind.as_str(),
        "url": redact_url(&target.url),
        "engine": target.engine,
        "watched": watched.is_some() || is_gpu_source,
        "discovered_by": watched.as_ref().and_then(|t| t.discovered_by.clone()),
        "labels": watched.map(|t| t.labels).unwrap_or_default(),
        "status": status,
        "signals": signals,
        "probe_window_s": PROBE_WINDOW_MS / 1000,
        "firing_alerts": firing,
        "live": live::live_json(&ctx.store, target).await?,
        "latency_breakdown": latency_breakdown_now(&ctx.store, target, now).await?,
    }))
}

/// Why a target has no latency breakdown in a range: its engine has no
/// phase histograms at all, or nothing was measured on both sides.
fn breakdown_missing(target: &TargetRow) -> &'static str {
    let engine = target
        .engine
        .as_deref()
        .and_then(|e| e.parse::<Engine>().ok());
    match engine {
        Some(engine) if !engine_may_expose(engine, CatalogMetric::PrefillTimeSeconds) => {
            "the engine exposes no queue/prefill phase histograms"
        }
        _ => "no window with both canary probes and requests finished on the server",
    }
}

/// The latency breakdown over the probe window ending `now`, for engine
/// targets: `{window_s, breakdown}` or `{window_s, missing}`.
async fn latency_breakdown_now(
    store: &Store,
    target: &TargetRow,
    now: i64,
) -> Result<Value, ApiError> {
    if target.kind != TargetKind::Engine {
        return Ok(Value::Null);
    }
    let range = Range::checked(now, now, PROBE_WINDOW_MS)?;
    let points = breakdown_series(store, target.id, range).await?;
    Ok(match points.last() {
        Some((_, breakdown)) => json!({
            "window_s": PROBE_WINDOW_MS / 1000,
            "breakdown": breakdown,
        }),
        None => json!({
            "window_s": PROBE_WINDOW_MS / 1000,
            "missing": breakdown_missing(target),
        }),
    })
}

async fn latency_breakdown_series(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> ApiResult {
    let p = params(query, &["from", "to", "step"])?;
    let (from, to) = time_range(&p)?;
    let step = p
        .duration_ms("step")?
        .unwrap_or((to - from) / 60)
        .max(PROBE_WINDOW_MIN_MS);
    let fitting = (to - from + llmwatch_store::MAX_POINTS - 2) / (llmwatch_store::MAX_POINTS - 1);
    let step = step.max(fitting);
    let range = Range::checked(from, to, step)?;
    let target = find_target(&state.api.store, &name).await?;
    let points = breakdown_series(&state.api.store, target.id, range).await?;
    let missing = points.is_empty().then(|| breakdown_missing(&target));
    let points: Vec<Value> = points
        .iter()
        .map(|(ts_ms, breakdown)| json!({ "t": *ts_ms as f64 / 1000.0, "breakdown": breakdown }))
        .collect();
    Ok(Json(json!({
        "target": target.name,
        "from": rfc3339_ms(from),
        "to": rfc3339_ms(to),
        "step_s": step as f64 / 1000.0,
        "points": points,
        "missing": missing,
    })))
}

async fn list_targets(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    params(query, &[])?;
    let ctx = &state.api;
    let now = now_ms();
    let mut targets = Vec::new();
    for target in ctx.store.targets().await? {
        targets.push(target_json(ctx, &target, now).await?);
    }
    Ok(Json(json!({ "targets": targets })))
}

async fn get_target(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> ApiResult {
    params(query, &[])?;
    let target = find_target(&state.api.store, &name).await?;
    Ok(Json(target_json(&state.api, &target, now_ms()).await?))
}

/// `[from, to]` from the query: defaults to the last hour; `from` ≤ `to`.
fn time_range(p: &Params) -> Result<(i64, i64), ApiError> {
    let to = p.time("to")?.unwrap_or_else(now_ms);
    let from = p.time("from")?.unwrap_or(to - 3600 * 1000);
    // A range that ends before it starts holds nothing: answered empty.
    Ok((from.min(to), to))
}

fn parse_signals(text: Option<&str>) -> Result<Vec<Signal>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(Signal::all().to_vec());
    };
    text.split(',')
        .map(|name| {
            name.trim().parse::<Signal>().map_err(|_| {
                let known: Vec<&str> = Signal::all().iter().map(|s| s.as_str()).collect();
                ApiError::bad_request(format!(
                    "signal: unknown signal {name:?}; known: {}",
                    known.join(", ")
                ))
            })
        })
        .collect()
}

fn points_json(points: &[llmwatch_store::Point]) -> Vec<Value> {
    points
        .iter()
        .map(|p| json!([p.ts_ms as f64 / 1000.0, p.value]))
        .collect()
}

async fn signal_series(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> ApiResult {
    let p = params(query, &["signal", "from", "to", "step"])?;
    let signals = parse_signals(p.get("signal"))?;
    let (from, to) = time_range(&p)?;
    let asked = match p.duration_ms("step")? {
        Some(step) => step,
        None => ((to - from) / 240).max(1000),
    };
    // Too fine a step for the range is raised to fit, as Grafana would ask;
    // `step_s` in the answer says which step was used.
    let fitting = (to - from + llmwatch_store::MAX_POINTS - 2) / (llmwatch_store::MAX_POINTS - 1);
    let step = asked.max(fitting).max(1);
    let range = Range::checked(from, to, step)?;
    let target = find_target(&state.api.store, &name).await?;
    let series = state
        .api
        .store
        .signals_series(target.id, &signals, range)
        .await?;
    let series: Vec<Value> = series
        .iter()
        .map(|(signal, points)| {
            json!({
                "signal": signal.as_str(),
                "unit": signal.unit(),
                "source": if is_probe_signal(*signal) { "probe" } else { "server" },
                "points": points_json(points),
            })
        })
        .collect();
    Ok(Json(json!({
        "target": target.name,
        "from": rfc3339_ms(from),
        "to": rfc3339_ms(to),
        "step_s": step as f64 / 1000.0,
        "series": series,
    })))
}

/// The longest range a raw series query may cover.
const MAX_RAW_RANGE_MS: i64 = 24 * 3600 * 1000;

async fn raw_series(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    let p = params(query, &["target", "metric", "from", "to"])?;
    let name = p.required("target")?;
    let metric_name = p.required("metric")?;
    let metric = CatalogMetric::from_name(metric_name).ok_or_else(|| {
        let mut known: Vec<&str> = Signal::all()
            .iter()
            .flat_map(|s| s.inputs().iter().map(|m| m.name()))
            .collect();
        known.sort_unstable();
        known.dedup();
        ApiError::bad_request(format!(
            "metric: unknown catalog metric {metric_name:?}; known: {}",
            known.join(", ")
        ))
    })?;
    let (from, to) = time_range(&p)?;
    // Raw series cover at most 24 h: a longer range keeps its last 24 h
    // (`from` in the answer says so); longer views use the signal series.
    let from = from.max(to - MAX_RAW_RANGE_MS);
    let target = find_target(&state.api.store, name).await?;
    let series = state
        .api
        .store
        .metric_series(target.id, metric, from, to)
        .await?;
    let series: Vec<Value> = series
        .iter()
        .map(|s| {
            let labels: BTreeMap<&str, &str> = s
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            json!({ "labels": labels, "part": s.part, "points": points_json(&s.points) })
        })
        .collect();
    Ok(Json(json!({
        "target": target.name,
        "metric": metric.name(),
        "from": rfc3339_ms(from),
        "to": rfc3339_ms(to),
        "series": series,
    })))
}

fn probe_json(id: i64, probe: &ProbeRow) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("id".into(), json!(id));
    time_fields(&mut out, "sent", Some(probe.ts_ms));
    for (key, value) in [
        ("run_id", json!(probe.run_id)),
        ("api", json!(probe.api)),
        ("model", json!(probe.model)),
        ("shape", json!(probe.shape.to_string())),
        ("ok", json!(probe.ok)),
        ("error_kind", json!(probe.error_kind)),
        ("error", json!(probe.error)),
        ("http_status", json!(probe.http_status)),
        ("ttfb_s", json!(probe.ttfb_s)),
        ("ttft_s", json!(probe.ttft_s)),
        ("tpot_s", json!(probe.tpot_s)),
        ("e2e_s", json!(probe.e2e_s)),
        ("itl_s", json!(probe.itl_s)),
        ("prompt_tokens", json!(probe.prompt_tokens)),
        ("output_tokens", json!(probe.output_tokens)),
        ("cached_tokens", json!(probe.cached_tokens)),
        ("finish_reason", json!(probe.finish_reason)),
    ] {
        out.insert(key.into(), value);
    }
    Value::Object(out)
}

async fn list_probes(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    let p = params(query, &["target", "run", "from", "to", "limit", "cursor"])?;
    let name = p.required("target")?;
    let origin = match p.get("run") {
        None => ProbeOrigin::Any,
        Some("canary") => ProbeOrigin::Canary,
        Some(run) => ProbeOrigin::Run(parse_id(run, "run", "sweep step")?),
    };
    let (from, to) = time_range(&p)?;
    let limit = p.limit(100, 1000)?;
    let cursor = p.cursor()?;
    let target = find_target(&state.api.store, name).await?;
    let mut page = state
        .api
        .store
        .probes_page(target.id, origin, from, to, cursor, limit + 1)
        .await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let next = more
        .then(|| page.last().map(|(id, _)| id.to_string()))
        .flatten();
    Ok(Json(json!({
        "target": target.name,
        "probes": page.iter().map(|(id, p)| probe_json(*id, p)).collect::<Vec<_>>(),
        "next_cursor": next,
    })))
}

fn alert_json(alert: &CurrentAlert) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("rule".into(), json!(alert.rule));
    out.insert("target".into(), json!(alert.target));
    out.insert("state".into(), json!(alert.alert.state.as_str()));
    out.insert("value".into(), json!(alert.alert.value));
    time_fields(&mut out, "active_at", alert.alert.active_at_ms);
    time_fields(&mut out, "fired_at", alert.alert.fired_at_ms);
    time_fields(&mut out, "resolved_at", alert.alert.resolved_at_ms);
    out.insert("labels".into(), json!(alert.labels));
    out.insert("annotations".into(), json!(alert.annotations));
    Value::Object(out)
}

async fn list_alerts(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    let p = params(query, &["state"])?;
    let wanted = p
        .get("state")
        .map(|s| match s.parse::<AlertState>() {
            Ok(state) if state != AlertState::Inactive => Ok(state),
            _ => Err(ApiError::bad_request(format!(
                "state: expected pending, firing or resolved, found {s:?}"
            ))),
        })
        .transpose()?;
    let alerts: Vec<Value> = state
        .api
        .alerts
        .current()
        .iter()
        .filter(|a| a.alert.state != AlertState::Inactive)
        .filter(|a| wanted.is_none_or(|w| a.alert.state == w))
        .map(alert_json)
        .collect();
    Ok(Json(json!({ "alerts": alerts })))
}

async fn alert_history(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    let p = params(query, &["rule", "target", "limit", "cursor"])?;
    let limit = p.limit(100, 1000)?;
    let cursor = p.cursor()?;
    let target = p.get("target");
    if let Some(Err(why)) = target.map(llmwatch_config::check_name) {
        return Err(ApiError::bad_request(format!("target: {why}")));
    }
    let mut events = state
        .api
        .store
        .alert_events(p.get("rule"), target, cursor, limit + 1)
        .await?;
    let more = events.len() > limit as usize;
    events.truncate(limit as usize);
    let next = more
        .then(|| events.last().map(|e| e.id.to_string()))
        .flatten();
    let events: Vec<Value> = events
        .iter()
        .map(|e| {
            let mut out = serde_json::Map::new();
            out.insert("id".into(), json!(e.id));
            time_fields(&mut out, "at", Some(e.ts_ms));
            out.insert("rule".into(), json!(e.rule));
            out.insert("target".into(), json!(e.target));
            out.insert("state".into(), json!(e.state.as_str()));
            out.insert("value".into(), json!(e.value));
            out.insert(
                "labels".into(),
                serde_json::from_str(&e.labels_json).unwrap_or(Value::Null),
            );
            out.insert(
                "annotations".into(),
                serde_json::from_str(&e.annotations_json).unwrap_or(Value::Null),
            );
            Value::Object(out)
        })
        .collect();
    Ok(Json(json!({ "events": events, "next_cursor": next })))
}

async fn list_rules(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    params(query, &[])?;
    let current = state.api.alerts.current();
    let rules: Vec<Value> = state
        .api
        .alerts
        .rules
        .iter()
        .map(|rule| {
            let alerts: Vec<Value> = current
                .iter()
                .filter(|a| a.rule == rule.name && a.alert.state != AlertState::Inactive)
                .map(|a| json!({ "target": a.target, "state": a.alert.state.as_str(), "value": a.alert.value }))
                .collect();
            json!({
                "name": rule.name,
                "signal": rule.signal.as_str(),
                "unit": rule.signal.unit(),
                "op": rule.condition.op.as_str(),
                "threshold": rule.condition.threshold,
                "window_s": rule.window.as_secs_f64(),
                "for_s": rule.condition.for_ms as f64 / 1000.0,
                "keep_firing_for_s": rule.condition.keep_firing_for_ms as f64 / 1000.0,
                "target": rule.target,
                "labels": rule.labels,
                "annotations": rule.annotations,
                "alerts": alerts,
            })
        })
        .collect();
    Ok(Json(json!({
        "rules": rules,
        "evaluations": state.api.alerts.evaluations(),
    })))
}
