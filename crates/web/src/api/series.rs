//! Series over a range: a target's signals, one point per step, and the
//! raw stored series of one catalog metric.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Json;
use llmwatch_core::catalog::CatalogMetric;
use llmwatch_core::signals::Signal;
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_store::Range;
use schemars::JsonSchema;
use serde::Serialize;

use super::fields::{points, Point, Source};
use super::params::{params, time_range, RawQuery};
use super::route_doc::{
    path, query, required_query, Route, RouteDoc, DURATION, FROM, METRIC_NAME, NAME, SIGNAL_LIST,
    TARGET_ERRORS, TO,
};
use super::targets::find_target;
use super::ApiError;
use crate::AppState;

/// Signal series of a target over a range.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SignalSeries {
    pub target: String,
    pub from: String,
    pub to: String,
    /// The step used: the one asked for, raised to fit the point limit.
    pub step_s: f64,
    pub series: Vec<OneSignal>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OneSignal {
    pub signal: &'static str,
    pub unit: &'static str,
    pub source: Source,
    pub points: Vec<Point>,
}

/// Raw stored series of one catalog metric of a target.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSeries {
    pub target: String,
    pub metric: &'static str,
    pub from: String,
    pub to: String,
    pub series: Vec<OneRawSeries>,
}

/// One label set (and histogram part) as the server wrote it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OneRawSeries {
    pub labels: BTreeMap<String, String>,
    pub part: String,
    pub points: Vec<Point>,
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

async fn signal_series(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> Result<Json<SignalSeries>, ApiError> {
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
    Ok(Json(SignalSeries {
        target: target.name,
        from: rfc3339_ms(from),
        to: rfc3339_ms(to),
        step_s: step as f64 / 1000.0,
        series: series
            .iter()
            .map(|(signal, signal_points)| OneSignal {
                signal: signal.as_str(),
                unit: signal.unit(),
                source: Source::of(*signal),
                points: points(signal_points),
            })
            .collect(),
    }))
}

/// The longest range a raw series query may cover.
const MAX_RAW_RANGE_MS: i64 = 24 * 3600 * 1000;

fn parse_metric(name: &str) -> Result<CatalogMetric, ApiError> {
    CatalogMetric::from_name(name).ok_or_else(|| {
        let mut known: Vec<&str> = Signal::all()
            .iter()
            .flat_map(|s| s.inputs().iter().map(|m| m.name()))
            .collect();
        known.sort_unstable();
        known.dedup();
        ApiError::bad_request(format!(
            "metric: unknown catalog metric {name:?}; known: {}",
            known.join(", ")
        ))
    })
}

async fn raw_series(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<RawSeries>, ApiError> {
    let p = params(query, &["target", "metric", "from", "to"])?;
    let name = p.required("target")?;
    let metric = parse_metric(p.required("metric")?)?;
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
    Ok(Json(RawSeries {
        target: target.name,
        metric: metric.name(),
        from: rfc3339_ms(from),
        to: rfc3339_ms(to),
        series: series
            .into_iter()
            .map(|s| OneRawSeries {
                points: points(&s.points),
                labels: s.labels.into_iter().collect(),
                part: s.part,
            })
            .collect(),
    }))
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            RouteDoc::get::<SignalSeries>(
                "/api/v1/targets/{name}/signals",
                "getSignalSeries",
                "Signal series of a target over a range, one point per step.",
            )
            .params(vec![
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
            ])
            .errors(TARGET_ERRORS),
            get(signal_series),
        ),
        (
            RouteDoc::get::<RawSeries>(
                "/api/v1/series",
                "getRawSeries",
                "Raw stored series of one catalog metric of a target (every label set and histogram part).",
            )
            .params(vec![
                required_query("target", NAME, "Target name."),
                required_query("metric", METRIC_NAME, "Catalog metric, e.g. `kv_cache_usage`."),
                FROM,
                TO,
            ])
            .errors(TARGET_ERRORS),
            get(raw_series),
        ),
    ]
}
