//! Targets through the API: each with its live status, latest signals,
//! firing alerts, live verdict and latency breakdown; the breakdown over a
//! range; and the workload it served over a range.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Json;
use llmwatch_core::alerts::AlertState;
use llmwatch_core::analysis::LatencyBreakdown;
use llmwatch_core::catalog::{engine_may_expose, CatalogMetric, Engine};
use llmwatch_core::observed::DECILE_NAMES;
use llmwatch_core::redact::redact_url;
use llmwatch_engine::observed::{observed_workload, ObservedError};
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::{Range, Store, TargetKind, TargetRow, PROBE_WINDOW_MIN_MS};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;

use super::fields::Source;
use super::live::{live_beside_sweep, LiveBesideSweep};
use super::params::{params, time_range, RawQuery};
use super::route_doc::{path, query, Route, RouteDoc, FROM, NAME, TARGET_ERRORS, TO};
use super::ApiError;
use crate::latency_breakdown::breakdown_series;
use crate::state::api_context::ApiContext;
use crate::{AppState, PROBE_WINDOW_MS};

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TargetList {
    pub targets: Vec<Target>,
}

/// One target: what it is, whether it is up, its latest signals.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Target {
    pub name: String,
    pub kind: Kind,
    /// Without credentials.
    pub url: String,
    pub engine: Option<String>,
    /// Watched now (configured or discovered); otherwise only its history remains.
    pub watched: bool,
    pub discovered_by: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub status: ScrapeStatus,
    /// The latest value of every signal the target has, by signal name.
    pub signals: BTreeMap<&'static str, SignalValue>,
    pub probe_window_s: i64,
    /// Rules firing for this target.
    pub firing_alerts: Vec<String>,
    /// The live verdict, `null` before the first evaluation.
    pub live: Option<LiveBesideSweep>,
    /// Engine targets: the breakdown over the probe window, or why none.
    pub latency_breakdown: Option<BreakdownNow>,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Engine,
    Gpu,
}

impl From<TargetKind> for Kind {
    fn from(kind: TargetKind) -> Kind {
        match kind {
            TargetKind::Engine => Kind::Engine,
            TargetKind::Gpu => Kind::Gpu,
        }
    }
}

/// The last scrape; before the first one, only its state (`unknown`).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ScrapeStatus {
    pub state: ScrapeState,
    #[serde(flatten)]
    pub last: Option<LastScrape>,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScrapeState {
    Up,
    Down,
    Unknown,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LastScrape {
    pub last_scrape_ms: i64,
    pub last_scrape: String,
    #[schemars(with = "Option<f64>")]
    pub scrape_duration_ms: f64,
    pub error: Option<String>,
}

// In the order the answer always had (ci/schemathesis.sh waits for it).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SignalValue {
    pub source: Source,
    pub unit: &'static str,
    #[schemars(with = "Option<f64>")]
    pub value: f64,
}

/// The latency breakdown over the probe window ending now: the breakdown,
/// or why there is none.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BreakdownNow {
    pub window_s: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "breakdown_schema")]
    pub breakdown: Option<LatencyBreakdown>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<&'static str>,
}

/// A `LatencyBreakdown` of `llmwatch-core` (TTFT and e2e by phase, the
/// dominant part); its fields are documented there.
fn breakdown_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "required": ["ttft"] })
}

/// The breakdown over a range, one point per step.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BreakdownSeries {
    pub target: String,
    pub from: String,
    pub to: String,
    pub step_s: f64,
    pub points: Vec<BreakdownPoint>,
    /// Why there are no points.
    pub missing: Option<&'static str>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BreakdownPoint {
    pub t: f64,
    #[schemars(schema_with = "breakdown_schema")]
    pub breakdown: LatencyBreakdown,
}

/// What a target served over a range, from its own request-length
/// histograms: the mix `--workload observed:` draws from.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ServedWorkload {
    pub target: String,
    pub from: String,
    pub to: String,
    /// Requests finished in the range (the prompt-length histogram's count).
    pub requests: Option<f64>,
    /// Finished requests per second over the seconds the scrapes span.
    pub rate_per_second: Option<f64>,
    /// Prompt tokens at p10 … p90, `null` when `missing`.
    pub prompt_tokens: Option<BTreeMap<&'static str, f64>>,
    /// Output tokens at p10 … p90, `null` when `missing`.
    pub output_tokens: Option<BTreeMap<&'static str, f64>>,
    /// Why there are no lengths: the engine has no length histograms, or
    /// no request finished in the range.
    pub missing: Option<String>,
}

fn deciles(values: [f64; 9]) -> BTreeMap<&'static str, f64> {
    DECILE_NAMES.into_iter().zip(values).collect()
}

async fn served_workload(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> Result<Json<ServedWorkload>, ApiError> {
    let p = params(query, &["from", "to"])?;
    let (from, to) = time_range(&p)?;
    let target = find_target(&state.api.store, &name).await?;
    let mut answer = ServedWorkload {
        target: target.name.clone(),
        from: rfc3339_ms(from),
        to: rfc3339_ms(to),
        requests: None,
        rate_per_second: None,
        prompt_tokens: None,
        output_tokens: None,
        missing: None,
    };
    match observed_workload(&state.api.store, &target.name, from, to).await {
        Ok(served) => {
            answer.requests = Some(served.requests);
            answer.rate_per_second = served.rate_per_second();
            answer.prompt_tokens = Some(deciles(served.prompt.deciles()));
            answer.output_tokens = Some(deciles(served.generation.deciles()));
        }
        Err(ObservedError::Store(err)) => return Err(err.into()),
        Err(err) => answer.missing = Some(err.to_string()),
    }
    Ok(Json(answer))
}

pub(super) async fn find_target(store: &Store, name: &str) -> Result<TargetRow, ApiError> {
    store
        .target_by_name(name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no target named {name:?}")))
}

async fn scrape_status(store: &Store, target: &TargetRow) -> Result<ScrapeStatus, ApiError> {
    let health = store.scrape_health(target.id, 1).await?;
    Ok(match health.first() {
        Some(h) => ScrapeStatus {
            state: if h.up {
                ScrapeState::Up
            } else {
                ScrapeState::Down
            },
            last: Some(LastScrape {
                last_scrape_ms: h.ts_ms,
                last_scrape: rfc3339_ms(h.ts_ms),
                scrape_duration_ms: h.duration_ms,
                error: h.error.clone(),
            }),
        },
        None => ScrapeStatus {
            state: ScrapeState::Unknown,
            last: None,
        },
    })
}

async fn latest_signals(
    store: &Store,
    target: &TargetRow,
    now: i64,
) -> Result<BTreeMap<&'static str, SignalValue>, ApiError> {
    let scrape_signals = store.latest_signals(target.id).await?;
    let probe_signals = store.probe_signals(target.id, now, PROBE_WINDOW_MS).await?;
    Ok(scrape_signals
        .into_iter()
        .chain(probe_signals)
        .map(|(signal, value)| {
            let answer = SignalValue {
                source: Source::of(signal),
                unit: signal.unit(),
                value,
            };
            (signal.as_str(), answer)
        })
        .collect())
}

async fn target_answer(ctx: &ApiContext, target: &TargetRow, now: i64) -> Result<Target, ApiError> {
    let firing_alerts: Vec<String> = ctx
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
    Ok(Target {
        name: target.name.clone(),
        kind: target.kind.into(),
        url: redact_url(&target.url),
        engine: target.engine.clone(),
        watched: watched.is_some() || is_gpu_source,
        discovered_by: watched.as_ref().and_then(|t| t.discovered_by.clone()),
        labels: watched.map(|t| t.labels).unwrap_or_default(),
        status: scrape_status(&ctx.store, target).await?,
        signals: latest_signals(&ctx.store, target, now).await?,
        probe_window_s: PROBE_WINDOW_MS / 1000,
        firing_alerts,
        live: live_beside_sweep(&ctx.store, target).await?,
        latency_breakdown: latency_breakdown_now(&ctx.store, target, now).await?,
    })
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
/// targets.
async fn latency_breakdown_now(
    store: &Store,
    target: &TargetRow,
    now: i64,
) -> Result<Option<BreakdownNow>, ApiError> {
    if target.kind != TargetKind::Engine {
        return Ok(None);
    }
    let range = Range::checked(now, now, PROBE_WINDOW_MS)?;
    let points = breakdown_series(store, target.id, range).await?;
    let breakdown = points.into_iter().last().map(|(_, breakdown)| breakdown);
    Ok(Some(BreakdownNow {
        window_s: PROBE_WINDOW_MS / 1000,
        missing: breakdown.is_none().then(|| breakdown_missing(target)),
        breakdown,
    }))
}

async fn latency_breakdown_series(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> Result<Json<BreakdownSeries>, ApiError> {
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
    Ok(Json(BreakdownSeries {
        from: rfc3339_ms(from),
        to: rfc3339_ms(to),
        step_s: step as f64 / 1000.0,
        points: points
            .into_iter()
            .map(|(ts_ms, breakdown)| BreakdownPoint {
                t: ts_ms as f64 / 1000.0,
                breakdown,
            })
            .collect(),
        missing,
        target: target.name,
    }))
}

async fn list_targets(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<TargetList>, ApiError> {
    params(query, &[])?;
    let ctx = &state.api;
    let now = now_ms();
    let mut targets = Vec::new();
    for target in ctx.store.targets().await? {
        targets.push(target_answer(ctx, &target, now).await?);
    }
    Ok(Json(TargetList { targets }))
}

async fn get_target(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> Result<Json<Target>, ApiError> {
    params(query, &[])?;
    let target = find_target(&state.api.store, &name).await?;
    Ok(Json(target_answer(&state.api, &target, now_ms()).await?))
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            RouteDoc::get::<TargetList>(
                "/api/v1/targets",
                "listTargets",
                "Every target with its live status and latest signals.",
            ),
            get(list_targets),
        ),
        (
            RouteDoc::get::<Target>(
                "/api/v1/targets/{name}",
                "getTarget",
                "One target with its live status and latest signals.",
            )
            .params(vec![path("name", NAME, "Target name.")])
            .errors(TARGET_ERRORS),
            get(get_target),
        ),
        (
            RouteDoc::get::<BreakdownSeries>(
                "/api/v1/targets/{name}/latency_breakdown",
                "getLatencyBreakdown",
                "The canaries' mean TTFT and e2e over a range, split by the engine's phase times (queue, prefill, decode, time in the server outside the engine core, network/client), one point per step.",
            )
            .params(vec![
                path("name", NAME, "Target name."),
                FROM,
                TO,
                query(
                    "step",
                    super::route_doc::DURATION,
                    "Window of each point, e.g. `5m` or seconds (default: range / 60; at least 60 s, the shortest window probe means are taken over).",
                ),
            ])
            .errors(TARGET_ERRORS),
            get(latency_breakdown_series),
        ),
        (
            RouteDoc::get::<ServedWorkload>(
                "/api/v1/targets/{name}/served_workload",
                "getServedWorkload",
                "What the target served over a range, from its own request-length histograms (vLLM, NIM, SGLang, TGI, Dynamo): the requests finished, their rate, and the prompt and output token deciles; the mix that `--workload observed:TARGET` sends again.",
            )
            .params(vec![path("name", NAME, "Target name."), FROM, TO])
            .errors(TARGET_ERRORS),
            get(served_workload),
        ),
    ]
}
