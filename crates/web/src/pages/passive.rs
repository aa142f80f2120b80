//! The target page's passive saturation curve: production windows of the
//! last 7 days grouped by concurrency, drawn beside the last finished
//! sweep's curve on the same axes, with the windows behind each point and
//! the knee (or why none is drawn).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use llmwatch_core::analysis::{
    Objectives, PassiveCurve, StepResult, SweepVerdict, DEFAULT_PASSIVE_RANGE_S,
    DEFAULT_PASSIVE_WINDOW_S, MIN_WINDOWS_PER_POINT,
};
use llmwatch_engine::passive::{read_passive_curve, PassiveQuery};
use llmwatch_engine::runners::sweep::{load_sweep, SweepError};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::{Store, StoreError, TargetKind};

use super::charts::{Chart, Dash, Marker, Rule, Series, Style, XAxis};
use super::sweep::verdict_of;
use super::{
    chart_file_response, error_response, format, path_segment, split_file, store_error, ChartView,
    PagesConfig, TargetObjectives,
};
use crate::state::passive_cache::CurveRead;
pub use crate::state::passive_cache::{PassiveCurveCache, PASSIVE_CURVE_TTL_MS};
use crate::AppState;

const PASSIVE: Style = Style::new(4, Dash::Solid, Marker::Circle);
const SWEEP: Style = Style::new(1, Dash::Dashed, Marker::Triangle);
const KNEE: Style = Style::new(4, Dash::Dashed, Marker::None);
const SWEEP_KNEE: Style = Style::new(1, Dash::Dotted, Marker::None);
const SUSTAINABLE: Style = Style::new(3, Dash::Dashed, Marker::None);
const OBJECTIVE: Style = Style::new(5, Dash::Dashed, Marker::None);

/// One row of the points table.
pub struct PointRow {
    pub concurrency: String,
    pub bin: String,
    pub windows: usize,
    pub supported: bool,
    pub tok_s: String,
    pub ttft: String,
    pub itl: String,
    pub meets: &'static str,
}

/// The last finished sweep, as the section links it.
pub struct SweepLink {
    pub id: i64,
    pub started: String,
    pub saturation: String,
}

/// The section of the target page.
pub struct PassiveSection {
    pub from: String,
    pub to: String,
    pub window: String,
    pub windows: usize,
    pub idle_windows: usize,
    /// [`MIN_WINDOWS_PER_POINT`].
    pub min_windows: usize,
    /// `found` or the reason code (a data attribute for tests and CSS).
    pub knee_code: &'static str,
    pub knee: String,
    pub sustainable: String,
    pub points: Vec<PointRow>,
    pub sweep: Option<SweepLink>,
    pub charts: Vec<ChartView>,
    pub api: String,
}

/// A stored sweep's steps and verdict.
type SweepCurve = (i64, i64, Vec<StepResult>, SweepVerdict);

/// The last finished sweep of a target, re-judged from its steps; a sweep
/// that cannot be read (corrupt JSON) is left out, not an error.
async fn last_sweep(store: &Store, name: &str) -> Result<Option<SweepCurve>, StoreError> {
    let Some(row) = store.last_finished_sweep_of(name).await? else {
        return Ok(None);
    };
    match load_sweep(store, row.id).await {
        Ok(stored) => {
            let (_, verdict) = verdict_of(&stored);
            Ok(Some((row.id, row.started_ms, stored.steps, verdict)))
        }
        Err(SweepError::Store(err)) => Err(err),
        Err(err) => {
            tracing::warn!(sweep = row.id, error = %err, "last sweep unreadable");
            Ok(None)
        }
    }
}

/// The curve of the last 7 days (1-minute windows) as of `now`, computed
/// at most once a [`PASSIVE_CURVE_TTL_MS`] per target and objectives.
async fn curve_of(
    store: &Store,
    cache: &PassiveCurveCache,
    target_id: i64,
    objectives: TargetObjectives,
    now: i64,
) -> Result<Arc<CurveRead>, StoreError> {
    let key = (
        target_id,
        objectives.ttft_p95.map(f64::to_bits),
        objectives.itl_p95.map(f64::to_bits),
    );
    if let Some(read) = cache.fresh(&key, now) {
        return Ok(read);
    }
    let from = now.saturating_sub(i64::try_from(DEFAULT_PASSIVE_RANGE_S * 1000).unwrap_or(0));
    let query = PassiveQuery {
        target_id,
        from_ms: from,
        to_ms: now,
        window: Duration::from_secs(DEFAULT_PASSIVE_WINDOW_S),
    };
    let objectives = Objectives {
        ttft_p95: objectives.ttft_p95,
        itl_p95: objectives.itl_p95,
        ..Objectives::default()
    };
    let (curve, window_ms) = read_passive_curve(store, &query, &objectives).await?;
    let read = Arc::new((curve, window_ms, from));
    cache.keep(key, now, Arc::clone(&read));
    Ok(read)
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.filter(|v| v.is_finite())
        .map(f)
        .unwrap_or_else(|| "–".into())
}

/// The concurrency axis spanning the supported points and the sweep's steps.
fn load_axis(
    supported: &[&llmwatch_core::analysis::PassivePoint],
    sweep: Option<(&[StepResult], &SweepVerdict)>,
) -> XAxis {
    let xs = supported
        .iter()
        .map(|p| p.concurrency)
        .chain(
            sweep
                .iter()
                .flat_map(|(steps, _)| steps.iter().map(|s| s.load.value())),
        )
        .filter(|x| x.is_finite() && *x > 0.0);
    let min = xs.clone().fold(f64::INFINITY, f64::min);
    let max = xs.fold(0.0f64, f64::max);
    if min.is_finite() && max > min {
        XAxis::Load { min, max }
    } else {
        XAxis::Load { min: 1.0, max: 2.0 }
    }
}

/// The vertical marks: the passive knee, the highest concurrency meeting
/// the objectives, and the sweep's saturation point.
fn knee_rules(curve: &PassiveCurve, sweep: Option<(&[StepResult], &SweepVerdict)>) -> Vec<Rule> {
    let mut vlines = Vec::new();
    if let Ok(k) = &curve.knee {
        vlines.push(Rule {
            label: format!("passive knee (c {})", format::number(k.concurrency)),
            value: k.concurrency,
            style: KNEE,
        });
    }
    if let Some(s) = &curve.sustainable {
        vlines.push(Rule {
            label: format!(
                "passive max meeting objectives (c {})",
                format::number(s.concurrency)
            ),
            value: s.concurrency,
            style: SUSTAINABLE,
        });
    }
    if let Some(sat) = sweep.and_then(|(_, v)| v.saturation.as_ref()) {
        vlines.push(Rule {
            label: format!("sweep saturation (c {})", format::number(sat.load.value())),
            value: sat.load.value(),
            style: SWEEP_KNEE,
        });
    }
    vlines
}

/// Pure: the passive curve's charts, the sweep's curve on the same axes.
pub fn passive_charts(
    curve: &PassiveCurve,
    sweep: Option<(&[StepResult], &SweepVerdict)>,
    objectives: TargetObjectives,
) -> Vec<Chart> {
    let supported: Vec<_> = curve.points.iter().filter(|p| p.supported).collect();
    let x = load_axis(&supported, sweep);
    let vlines = knee_rules(curve, sweep);
    let chart = |id: &str, title: &str, y: &str, pick: &dyn Fn(&Which) -> Option<f64>, hline| {
        let mut series = vec![Series {
            name: "production (passive)".to_string(),
            unit: y.to_string(),
            style: PASSIVE,
            secondary: false,
            points: supported
                .iter()
                .filter_map(|p| Some([p.concurrency, pick(&Which::Point(p))?]))
                .filter(|[_, v]| v.is_finite())
                .collect(),
        }];
        if let Some((steps, _)) = sweep {
            series.push(Series {
                name: "last sweep (active)".to_string(),
                unit: y.to_string(),
                style: SWEEP,
                secondary: false,
                points: steps
                    .iter()
                    .filter(|s| s.client_bound.is_none())
                    .filter_map(|s| Some([s.load.value(), pick(&Which::Step(s))?]))
                    .filter(|[_, v]| v.is_finite())
                    .collect(),
            });
        }
        Chart {
            id: id.to_string(),
            title: title.to_string(),
            x,
            x_label: "concurrency (running + waiting requests, log2 scale)".to_string(),
            y_label: y.to_string(),
            y2_label: None,
            series,
            hlines: hline,
            vlines: vlines.clone(),
            bands: Vec::new(),
            stacked: false,
        }
    };
    let rule = |what: &str, slo: Option<f64>, scale: f64| -> Vec<Rule> {
        slo.map(|t| Rule {
            label: format!("objective p95 {what} ≤ {}", format::seconds(t)),
            value: t * scale,
            style: OBJECTIVE,
        })
        .into_iter()
        .collect()
    };
    vec![
        chart(
            "throughput",
            "Generation throughput vs concurrency: production and last sweep",
            "output tokens per second",
            &|w| match w {
                Which::Point(p) => p.generation_tps,
                Which::Step(s) => Some(s.output_token_throughput),
            },
            Vec::new(),
        ),
        chart(
            "ttft",
            "p95 TTFT vs concurrency: server histograms (production) and last sweep",
            "p95 TTFT (s)",
            &|w| match w {
                Which::Point(p) => p.ttft_p95,
                Which::Step(s) => s.ttft.p95,
            },
            rule("TTFT", objectives.ttft_p95, 1.0),
        ),
        chart(
            "itl",
            "p95 ITL vs concurrency: server histograms (production) and last sweep",
            "p95 ITL (ms)",
            &|w| match w {
                Which::Point(p) => p.itl_p95.map(|v| v * 1000.0),
                Which::Step(s) => s.itl.p95.map(|v| v * 1000.0),
            },
            rule("ITL", objectives.itl_p95, 1000.0),
        ),
    ]
}

/// A passive point or a sweep step, for the charts' value pickers.
enum Which<'a> {
    Point(&'a llmwatch_core::analysis::PassivePoint),
    Step(&'a StepResult),
}

/// The section for a target as of `now`.
pub async fn passive_section(
    store: &Store,
    config: &PagesConfig,
    target_id: i64,
    name: &str,
    now: i64,
) -> Result<PassiveSection, StoreError> {
    let objectives = config.objectives_for(name);
    let (read, sweep) = tokio::try_join!(
        curve_of(store, &config.passive_curves, target_id, objectives, now),
        last_sweep(store, name)
    )?;
    let (curve, window_ms, from) = &*read;
    let charts = passive_charts(
        curve,
        sweep.as_ref().map(|(_, _, s, v)| (s.as_slice(), v)),
        objectives,
    );
    let base = format!("/targets/{}/passive", path_segment(name));
    let (knee_code, knee) = match &curve.knee {
        Ok(k) => (
            "found",
            format!(
                "Knee at concurrency {} ({} windows): {}",
                format::number(k.concurrency),
                curve.points[k.point].windows,
                k.saturation.describe()
            ),
        ),
        Err(why) => (why.code(), format!("No knee drawn: {}.", why.describe())),
    };
    let judged = objectives.ttft_p95.is_some() || objectives.itl_p95.is_some();
    let sustainable = match (&curve.sustainable, judged) {
        (Some(s), _) => format!(
            "Highest concurrency that met the objectives: {} ({} windows).",
            format::number(s.concurrency),
            curve.points[s.point].windows
        ),
        (None, true) => {
            "No supported concurrency level met the objectives (from the lowest up).".to_string()
        }
        (None, false) => "No objectives set: nothing to meet.".to_string(),
    };
    Ok(PassiveSection {
        from: format::datetime(*from),
        to: format::datetime(now),
        window: format::seconds(*window_ms as f64 / 1000.0),
        windows: curve.windows,
        idle_windows: curve.idle_windows,
        min_windows: MIN_WINDOWS_PER_POINT,
        knee_code,
        knee,
        sustainable,
        points: curve
            .points
            .iter()
            .map(|p| PointRow {
                concurrency: format::number(p.concurrency),
                bin: format!("{}–{}", format::number(p.low), format::number(p.high)),
                windows: p.windows,
                supported: p.supported,
                tok_s: opt(p.generation_tps, format::number),
                ttft: opt(p.ttft_p95, format::seconds),
                itl: opt(p.itl_p95, format::seconds),
                meets: match p.meets_objectives {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "–",
                },
            })
            .collect(),
        sweep: sweep.as_ref().map(|(id, started, _, verdict)| SweepLink {
            id: *id,
            started: format::datetime(*started),
            saturation: verdict
                .saturation
                .as_ref()
                .map(|s| format!("saturation at {}", s.load))
                .unwrap_or_else(|| "no saturation point".to_string()),
        }),
        charts: charts
            .iter()
            .map(|c| ChartView::new(c, format!("{base}/{}", c.id), String::new()))
            .collect(),
        api: format!("/api/v1/targets/{}/passive", path_segment(name)),
    })
}

/// `/targets/{name}/passive/{chart}.{svg,csv,json}`
pub async fn chart_download(
    State(state): State<AppState>,
    Path((name, file)): Path<(String, String)>,
) -> Response {
    let Some((id, ext)) = split_file(&file) else {
        return error_response(StatusCode::NOT_FOUND, "Not found", "no such chart");
    };
    let target = match state.store.target_by_name(&name).await {
        Ok(Some(t)) if t.kind == TargetKind::Engine => t,
        Ok(_) => {
            return error_response(
                StatusCode::NOT_FOUND,
                "No such target",
                format!("no target is named {name:?}"),
            )
        }
        Err(err) => return store_error(err),
    };
    let objectives = state.pages.objectives_for(&name);
    let read = tokio::try_join!(
        curve_of(
            &state.store,
            &state.pages.passive_curves,
            target.id,
            objectives,
            now_ms()
        ),
        last_sweep(&state.store, &name)
    );
    match read {
        Ok((read, sweep)) => {
            let charts = passive_charts(
                &read.0,
                sweep.as_ref().map(|(_, _, s, v)| (s.as_slice(), v)),
                objectives,
            );
            match charts.iter().find(|c| c.id == id) {
                Some(chart) => chart_file_response(chart, ext),
                None => error_response(StatusCode::NOT_FOUND, "Not found", "no such chart"),
            }
        }
        Err(err) => store_error(err),
    }
}
