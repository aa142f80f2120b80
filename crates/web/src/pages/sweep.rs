//! Sweep pages: the list with a form to start one, one sweep (the method's
//! three charts with GPU memory and KV-cache usage overlaid, objectives,
//! saturation point and max sustainable load marked, the diagnosis with its
//! evidence, the experiment card, the per-step table), and two sweeps
//! compared.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use llmwatch_core::analysis::{
    analyze_sweep, summary_lines, AnalysisConfig, EngineCapacity, Load, Objectives, StepResult,
    SweepVerdict, TtftBreakdown, WorkloadHints,
};
use llmwatch_probe::{PromptKind, RunResult, Shape};
use llmwatch_store::Store;
use serde::Deserialize;
use serde_json::Value;

use super::charts::{ttft_breakdown_series, Chart, Dash, Marker, Rule, Series, Style, XAxis};
use super::format;
use super::{chart_file_response, error_response, split_file, store_error, ChartView, PagesConfig};
use crate::auth::CsrfToken;
use crate::urls::path_segment;
use crate::AppState;
use llmwatch_engine::runners::sweep::card::card_from_json;
use llmwatch_engine::runners::sweep::start::{RequestError, StartError, SweepRequest};
use llmwatch_engine::runners::sweep::{
    compare_sweeps, load_sweep, Ladder, StoredSweep, SweepError,
};

const SATURATION: Style = Style::new(4, Dash::Dashed, Marker::None);
const SUSTAINABLE: Style = Style::new(3, Dash::Dashed, Marker::None);
const OBJECTIVE: Style = Style::new(5, Dash::Dashed, Marker::None);
const GPU_MEM: Style = Style::new(6, Dash::Dotted, Marker::Square);
const KV: Style = Style::new(1, Dash::Dotted, Marker::Cross);

/// The settings a stored sweep ran with, as far as its page needs them.
#[derive(Debug, Clone, Default)]
pub struct StoredSettings {
    pub objectives: Objectives,
    /// The thresholds it was judged with (defaults for older sweeps).
    pub analysis: AnalysisConfig,
    pub hints: WorkloadHints,
    pub shape: String,
    pub prompt: String,
    pub model: Option<String>,
}

/// Reads the stored settings JSON; missing or odd fields fall back to
/// "unknown", never to an error.
pub fn stored_settings(json: &str) -> StoredSettings {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let f = |path: &[&str]| {
        let mut cur = &v;
        for p in path {
            cur = cur.get(p)?;
        }
        cur.as_f64().filter(|x| x.is_finite())
    };
    let mut objectives = Objectives {
        ttft_p95: f(&["objectives", "ttft_p95_s"]),
        itl_p95: f(&["objectives", "itl_p95_s"]),
        e2e_p95: f(&["objectives", "e2e_p95_s"]),
        ..Objectives::default()
    };
    if let Some(e) = f(&["objectives", "max_error_rate"]) {
        objectives.max_error_rate = e;
    }
    let shape = v.get("shape").and_then(Value::as_str).unwrap_or("");
    let prompt = v.get("prompt").and_then(Value::as_str).unwrap_or("");
    let parsed_shape = Shape::parse(shape).ok();
    let kind = PromptKind::parse(prompt).ok();
    let hints = WorkloadHints {
        shared_prefix: matches!(kind, Some(PromptKind::SharedPrefix { .. })),
        expected_prefix_hit_rate: match kind {
            Some(PromptKind::SharedPrefix { hit_ratio }) => Some(hit_ratio),
            _ => None,
        },
        input_tokens: parsed_shape.map(|s| u64::from(s.input_tokens)),
        output_tokens: parsed_shape.map(|s| u64::from(s.output_tokens)),
        capacity: EngineCapacity::default(),
    };
    StoredSettings {
        objectives,
        analysis: v
            .get("analysis")
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default(),
        hints,
        shape: shape.to_string(),
        prompt: prompt.to_string(),
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
    }
}

fn load_label(steps: &[StepResult]) -> (&'static str, &'static str) {
    match steps.first().map(|s| s.load) {
        Some(Load::RequestRate(_)) => ("request rate (req/s, log2 scale)", "rate"),
        _ => ("concurrency (requests in flight, log2 scale)", "c"),
    }
}

fn load_axis(steps: &[StepResult]) -> XAxis {
    let values = steps.iter().map(|s| s.load.value()).filter(|v| *v > 0.0);
    let min = values.clone().fold(f64::INFINITY, f64::min);
    let max = values.fold(0.0f64, f64::max);
    if min.is_finite() && max > 0.0 {
        XAxis::Load { min, max }
    } else {
        XAxis::Load { min: 1.0, max: 2.0 }
    }
}

fn points(steps: &[StepResult], f: impl Fn(&StepResult) -> Option<f64>) -> Vec<[f64; 2]> {
    steps
        .iter()
        .filter_map(|s| f(s).filter(|v| v.is_finite()).map(|v| [s.load.value(), v]))
        .collect()
}

fn series(name: &str, unit: &str, style: Style, secondary: bool, points: Vec<[f64; 2]>) -> Series {
    Series {
        name: name.to_string(),
        unit: unit.to_string(),
        style,
        secondary,
        points,
    }
}

/// GPU memory (peak) and KV-cache usage (peak), on the right-hand axis.
fn overlays(steps: &[StepResult]) -> Vec<Series> {
    vec![
        series(
            "GPU memory used, peak (%)",
            "%",
            GPU_MEM,
            true,
            points(steps, |s| {
                s.server.gpu_mem_used_ratio_max.map(|v| v * 100.0)
            }),
        ),
        series(
            "KV-cache usage, peak (%)",
            "%",
            KV,
            true,
            points(steps, |s| s.server.kv_cache_usage_max.map(|v| v * 100.0)),
        ),
    ]
}

/// The saturation and max-sustainable loads, as vertical lines.
fn verdict_marks(verdict: &SweepVerdict, short: &str) -> Vec<Rule> {
    let mut vlines = Vec::new();
    if let Some(s) = &verdict.saturation {
        vlines.push(Rule {
            label: format!(
                "saturation point ({short} {})",
                format::number(s.load.value())
            ),
            value: s.load.value(),
            style: SATURATION,
        });
    }
    if let Some(s) = &verdict.sustainable {
        vlines.push(Rule {
            label: format!(
                "max sustainable ({short} {})",
                format::number(s.load.value())
            ),
            value: s.load.value(),
            style: SUSTAINABLE,
        });
    }
    vlines
}

/// A p95 objective as a horizontal line (`scale`: seconds to the chart's unit).
fn objective_rule(what: &str, objective: Option<f64>, scale: f64) -> Vec<Rule> {
    objective
        .map(|t| Rule {
            label: format!("objective p95 {what} ≤ {}", format::seconds(t)),
            value: t * scale,
            style: OBJECTIVE,
        })
        .into_iter()
        .collect()
}

/// The three charts of the method for one sweep.
pub fn sweep_charts(steps: &[StepResult], verdict: &SweepVerdict) -> Vec<Chart> {
    let (x_label, short) = load_label(steps);
    let x = load_axis(steps);
    let vlines = verdict_marks(verdict, short);
    let chart = |id: &str, title: &str, y_label: &str, mut s: Vec<Series>, hlines: Vec<Rule>| {
        s.extend(overlays(steps));
        Chart {
            id: id.to_string(),
            title: title.to_string(),
            x,
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            y2_label: Some("GPU memory, KV cache (%)".to_string()),
            series: s,
            hlines,
            vlines: vlines.clone(),
            bands: Vec::new(),
            stacked: false,
        }
    };
    let ttft_obj = objective_rule("TTFT", verdict.objectives.ttft_p95, 1.0);
    let itl_obj = objective_rule("ITL", verdict.objectives.itl_p95, 1000.0);
    let mut charts = vec![
        chart(
            "throughput",
            "Throughput vs load",
            "output tokens per second",
            vec![series(
                "output tokens/s",
                "tokens/s",
                Style::new(0, Dash::Solid, Marker::Circle),
                false,
                points(steps, |s| Some(s.output_token_throughput)),
            )],
            Vec::new(),
        ),
        chart(
            "ttft",
            "Time to first token vs load",
            "TTFT (s)",
            vec![
                series(
                    "p95 TTFT",
                    "s",
                    Style::new(0, Dash::Solid, Marker::Circle),
                    false,
                    points(steps, |s| s.ttft.p95),
                ),
                series(
                    "p50 TTFT",
                    "s",
                    Style::new(2, Dash::Dashed, Marker::Triangle),
                    false,
                    points(steps, |s| s.ttft.p50),
                ),
            ],
            ttft_obj,
        ),
        chart(
            "itl",
            "Inter-token latency vs load",
            "ITL (ms)",
            vec![
                series(
                    "p95 ITL",
                    "ms",
                    Style::new(0, Dash::Solid, Marker::Circle),
                    false,
                    points(steps, |s| s.itl.p95.map(|v| v * 1000.0)),
                ),
                series(
                    "p50 ITL",
                    "ms",
                    Style::new(2, Dash::Dashed, Marker::Triangle),
                    false,
                    points(steps, |s| s.itl.p50.map(|v| v * 1000.0)),
                ),
            ],
            itl_obj,
        ),
    ];
    if steps.iter().any(|s| s.server.latency_breakdown.is_some()) {
        charts.push(breakdown_chart(steps, x, x_label, vlines));
    }
    charts
}

/// The client's mean TTFT per step, split by the engine's phase times
/// (stacked bars; `analysis::latency_breakdown`).
fn breakdown_chart(steps: &[StepResult], x: XAxis, x_label: &str, vlines: Vec<Rule>) -> Chart {
    let points: Vec<(f64, &TtftBreakdown)> = steps
        .iter()
        .filter_map(|s| Some((s.load.value(), &s.server.latency_breakdown.as_ref()?.ttft)))
        .collect();
    Chart {
        id: "ttft_breakdown".to_string(),
        title: "Mean TTFT by phase vs load".to_string(),
        x,
        x_label: x_label.to_string(),
        y_label: "mean TTFT (s)".to_string(),
        y2_label: None,
        series: ttft_breakdown_series(&points),
        hlines: Vec::new(),
        vlines,
        bands: Vec::new(),
        stacked: true,
    }
}

/// One row of the per-step table.
pub struct StepRow {
    pub index: usize,
    pub load: String,
    pub requests: String,
    pub req_s: String,
    pub tok_s: String,
    /// Requests/s meeting every objective.
    pub goodput: String,
    /// Joules per output token and dollars per million output tokens (GPU
    /// page; a configured price).
    pub energy: String,
    pub cost: String,
    pub ttft: String,
    pub itl: String,
    pub errors: String,
    pub kv: String,
    pub waiting: String,
    pub gpu_mem: String,
    pub gpu_util: String,
    /// Where the step's mean TTFT went (the latency breakdown's line), or
    /// why there is no breakdown.
    pub breakdown: String,
    /// Server-reported prompt tokens per request, min / median / max.
    pub input_tokens: String,
    /// Cached prompt tokens and the hit ratio they make.
    pub cached: String,
    /// The step's probes in the API (`?run=` its id).
    pub probes_href: String,
    pub note: String,
    /// `saturation`, `sustainable` or empty (a CSS class).
    pub mark: &'static str,
}

pub struct FindingView {
    pub verdict: String,
    pub confidence: String,
    pub evidence: String,
    pub what_to_try: String,
    pub step: String,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "sweep.html")]
pub struct SweepPage {
    pub id: i64,
    pub target: String,
    pub status: String,
    /// The CSRF token of the Cancel form (set by the handler).
    pub csrf: String,
    pub started: String,
    pub ended: String,
    pub stop_reason: Option<String>,
    pub shape: String,
    pub prompt: String,
    pub objectives: String,
    pub saturation: String,
    pub sustainable: String,
    pub summary: Vec<String>,
    pub findings: Vec<FindingView>,
    pub card: Vec<(String, String)>,
    pub steps: Vec<StepRow>,
    pub charts: Vec<ChartView>,
    /// Still running: the page refreshes itself.
    pub running: bool,
    /// "Predict a change": whether this process can, and the kept
    /// predictions of this sweep (set by the handler).
    pub can_predict: bool,
    pub predictions: Vec<super::predict::PredictionLink>,
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.filter(|v| v.is_finite())
        .map(f)
        .unwrap_or_else(|| "–".into())
}

/// The verdict of a stored sweep, judged again from its steps with its own
/// objectives, card and thresholds: the stored verdict's analysis, exactly
/// (a pure function of those), with the typed values the charts mark.
pub fn verdict_of(sweep: &StoredSweep) -> (StoredSettings, SweepVerdict) {
    let mut settings = stored_settings(&sweep.row.settings_json);
    // The same capacity the runner judged with: the card it stored.
    if let Ok(card) = serde_json::from_str::<Value>(&sweep.row.card_json) {
        settings.hints.capacity = EngineCapacity::from_card(&card_from_json(&card));
    }
    let verdict = analyze_sweep(
        &sweep.steps,
        &settings.objectives,
        &settings.hints,
        &settings.analysis,
    );
    (settings, verdict)
}

/// The summary stored with the sweep's verdict, if any.
fn stored_summary(sweep: &StoredSweep) -> Option<Vec<String>> {
    sweep
        .row
        .verdict_json
        .as_deref()
        .and_then(|j| serde_json::from_str::<Value>(j).ok())
        .and_then(|v| {
            v.get("summary")?.as_array().map(|a| {
                a.iter()
                    .filter_map(|l| l.as_str().map(str::to_string))
                    .collect()
            })
        })
}

/// The per-step table, marking the saturation and sustainable steps.
fn step_rows(sweep: &StoredSweep, verdict: &SweepVerdict) -> Vec<StepRow> {
    let target = sweep.row.target_name.as_deref().unwrap_or_default();
    sweep
        .steps
        .iter()
        .zip(&sweep.runs)
        .zip(&sweep.step_ids)
        .enumerate()
        .map(|(i, ((s, run), step_id))| StepRow {
            index: i,
            load: s.load.to_string(),
            requests: format!("{} ok / {} failed", s.requests_ok, s.requests_failed),
            req_s: format!("{:.2}", s.request_throughput),
            tok_s: format!("{:.0}", s.output_token_throughput),
            goodput: format!("{:.2}", run.goodput),
            energy: opt(s.server.economics.energy_j_per_output_token, |j| {
                format!("{j:.3} J")
            }),
            cost: opt(s.server.economics.cost_per_million_output_tokens, |c| {
                format!("${c:.3}")
            }),
            ttft: format!(
                "{} / {}",
                opt(s.ttft.p50, format::seconds),
                opt(s.ttft.p95, format::seconds)
            ),
            itl: format!(
                "{} / {}",
                opt(s.itl.p50, format::seconds),
                opt(s.itl.p95, format::seconds)
            ),
            errors: format::percent(s.effective_error_rate()),
            kv: opt(s.server.kv_cache_usage_max, format::percent),
            waiting: opt(s.server.requests_waiting_max, format::number),
            gpu_mem: opt(s.server.gpu_mem_used_ratio_max, format::percent),
            gpu_util: opt(s.server.gpu_util_mean, format::percent),
            breakdown: match (
                &s.server.latency_breakdown,
                &s.server.latency_breakdown_missing,
            ) {
                (Some(b), _) => b.reason.clone(),
                (None, Some(why)) => why.clone(),
                (None, None) => "—".to_string(),
            },
            input_tokens: run
                .input_tokens_min_median_max()
                .map(|(min, median, max)| format!("{min:.0} / {median:.0} / {max:.0}"))
                .unwrap_or_else(|| "not reported".into()),
            cached: cached_cell(run),
            probes_href: format!(
                "/api/v1/probes?target={}&run={step_id}&from={}&to={}&limit=1000",
                path_segment(target),
                s.start_unix_ms / 1000,
                (s.end_unix_ms + 999) / 1000
            ),
            note: s
                .client_bound
                .as_ref()
                .map(|why| format!("client-bound: {why}"))
                .or_else(|| {
                    s.cache_contaminated
                        .as_ref()
                        .map(|why| format!("cache-contaminated: {why}"))
                })
                .unwrap_or_default(),
            mark: if verdict.saturation.as_ref().is_some_and(|x| x.step == i) {
                "saturation"
            } else if verdict.sustainable.as_ref().is_some_and(|x| x.step == i) {
                "sustainable"
            } else {
                ""
            },
        })
        .collect()
}

/// A step's cached prompt tokens and hit ratio: from the requests' usage,
/// else the server's counters (which count every client), else why not.
fn cached_cell(run: &RunResult) -> String {
    match (run.cache_hit_ratio(), run.server_prefix_cache_hit_ratio) {
        (Some(ratio), _) => format!("{} ({ratio:.2} hit)", run.total_cached_tokens),
        (None, Some(ratio)) => format!("not per request ({ratio:.2} hit, server counters)"),
        (None, None) => "not reported".into(),
    }
}

/// The saturation and max-sustainable lines, in the sweep's load unit.
fn saturation_texts(verdict: &SweepVerdict, short: &str) -> (String, String) {
    let saturation = match &verdict.saturation {
        Some(s) => format!(
            "{short} {} — {:.0} output tokens/s ({:.2} req/s); gain per doubling after it {:.1} %; {}",
            format::number(s.load.value()),
            s.output_token_throughput,
            s.request_throughput,
            s.gain_per_doubling * 100.0,
            s.latency_rise
        ),
        None => "not reached in this sweep".to_string(),
    };
    let sustainable = match &verdict.sustainable {
        Some(s) => format!(
            "{short} {} — {:.0} output tokens/s ({:.2} req/s), p95 TTFT {}, p95 ITL {}",
            format::number(s.load.value()),
            s.output_token_throughput,
            s.request_throughput,
            opt(s.ttft_p95, format::seconds),
            opt(s.itl_p95, format::seconds)
        ),
        None => "no step met every objective".to_string(),
    };
    (saturation, sustainable)
}

fn finding_views(verdict: &SweepVerdict, steps: &[StepResult]) -> Vec<FindingView> {
    verdict
        .findings
        .iter()
        .map(|f| FindingView {
            verdict: f.verdict.name().to_string(),
            confidence: format!("{:?}", f.confidence).to_ascii_lowercase(),
            evidence: f.evidence.clone(),
            what_to_try: f.what_to_try.to_string(),
            step: f
                .step
                .and_then(|i| steps.get(i))
                .map(|s| s.load.to_string())
                .unwrap_or_default(),
        })
        .collect()
}

/// The sweep page as data; `None` when there is no such sweep.
pub async fn sweep_page(store: &Store, id: i64) -> Result<Option<SweepPage>, SweepError> {
    let sweep = match load_sweep(store, id).await {
        Ok(s) => s,
        Err(SweepError::NotFound(_)) => return Ok(None),
        Err(err) => return Err(err),
    };
    let (settings, verdict) = verdict_of(&sweep);
    let summary = stored_summary(&sweep).unwrap_or_else(|| summary_lines(&verdict));
    let (_, short) = load_label(&sweep.steps);
    let steps = step_rows(&sweep, &verdict);
    let (saturation, sustainable) = saturation_texts(&verdict, short);
    let charts = sweep_charts(&sweep.steps, &verdict)
        .iter()
        .map(|c| ChartView::new(c, format!("/sweeps/{id}/charts/{}", c.id), String::new()))
        .collect();
    let o = &settings.objectives;
    Ok(Some(SweepPage {
        id,
        csrf: String::new(),
        target: sweep
            .row
            .target_name
            .clone()
            .unwrap_or_else(|| sweep.row.target_url.clone()),
        status: sweep.row.status.as_str().to_string(),
        started: format::datetime(sweep.row.started_ms),
        ended: sweep
            .row
            .ended_ms
            .map(format::datetime)
            .unwrap_or_else(|| "still running".into()),
        running: sweep.row.ended_ms.is_none(),
        can_predict: false,
        predictions: Vec::new(),
        stop_reason: sweep.row.stop_reason.clone(),
        shape: settings.shape.clone(),
        prompt: settings.prompt.clone(),
        objectives: format!(
            "p95 TTFT ≤ {}, p95 ITL ≤ {}{}, errors ≤ {}",
            opt(o.ttft_p95, format::seconds),
            opt(o.itl_p95, format::seconds),
            o.e2e_p95
                .map(|e| format!(", p95 e2e ≤ {}", format::seconds(e)))
                .unwrap_or_default(),
            format::percent(o.max_error_rate)
        ),
        saturation,
        sustainable,
        summary,
        findings: finding_views(&verdict, &sweep.steps),
        card: sweep
            .card
            .fields()
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or_else(|| "unknown".into())))
            .collect(),
        steps,
        charts,
    }))
}

pub async fn handler(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return error_response(
            StatusCode::NOT_FOUND,
            "No such sweep",
            "sweep ids are numbers",
        );
    };
    match sweep_page(&state.store, id).await {
        Ok(Some(mut page)) => {
            page.csrf = crate::auth::form_token(csrf);
            let predictions = &state.api.predictions;
            page.can_predict = predictions.available() && !page.running;
            page.predictions = predictions
                .of_sweep(id)
                .iter()
                .map(super::predict::PredictionLink::of)
                .collect();
            page.into_response()
        }
        Ok(None) => error_response(
            StatusCode::NOT_FOUND,
            "No such sweep",
            format!("no sweep has id {id}"),
        ),
        Err(err) => store_error(err),
    }
}

/// `/sweeps/{id}/charts/{chart}.{svg,csv,json}`
pub async fn chart_download(
    State(state): State<AppState>,
    Path((id, file)): Path<(String, String)>,
) -> Response {
    let (Ok(id), Some((chart_id, ext))) = (id.parse::<i64>(), split_file(&file)) else {
        return error_response(StatusCode::NOT_FOUND, "Not found", "no such chart");
    };
    let sweep = match load_sweep(&state.store, id).await {
        Ok(s) => s,
        Err(SweepError::NotFound(_)) => {
            return error_response(StatusCode::NOT_FOUND, "No such sweep", "no such sweep")
        }
        Err(err) => return store_error(err),
    };
    let (_, verdict) = verdict_of(&sweep);
    match sweep_charts(&sweep.steps, &verdict)
        .iter()
        .find(|c| c.id == chart_id)
    {
        Some(chart) => chart_file_response(chart, ext),
        None => error_response(StatusCode::NOT_FOUND, "Not found", "no such chart"),
    }
}

pub struct SweepListRow {
    pub id: i64,
    pub target: String,
    pub started: String,
    pub status: String,
    pub stop_reason: String,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "sweeps.html")]
pub struct SweepListPage {
    pub sweeps: Vec<SweepListRow>,
    pub targets: Vec<String>,
    pub enabled: bool,
    pub running: bool,
    pub message: Option<String>,
    pub slo_ttft: String,
    pub slo_itl: String,
    /// The CSRF token the start form carries (set by the handler).
    pub csrf: String,
}

pub async fn sweep_list_page(
    store: &Store,
    config: &PagesConfig,
    running: bool,
    message: Option<String>,
) -> Result<SweepListPage, llmwatch_store::StoreError> {
    let sweeps = store
        .sweeps(100)
        .await?
        .into_iter()
        .map(|s| SweepListRow {
            id: s.id,
            target: s.target_name.unwrap_or(s.target_url),
            started: format::datetime(s.started_ms),
            status: s.status.as_str().to_string(),
            stop_reason: s.stop_reason.unwrap_or_default(),
        })
        .collect();
    Ok(SweepListPage {
        sweeps,
        targets: config.sweepable_targets(),
        enabled: config.sweeps_enabled,
        running,
        message,
        slo_ttft: format!("{}ms", config.slo_ttft_p95.unwrap_or(1.0) * 1000.0),
        slo_itl: format!("{}ms", config.slo_itl_p95.unwrap_or(0.05) * 1000.0),
        csrf: String::new(),
    })
}

pub async fn list_handler(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
) -> Response {
    // The daemon's one sweep slot (shared with the API and schedules).
    let running = state.api.sweeps.is_running();
    match sweep_list_page(&state.store, &state.pages, running, None).await {
        Ok(mut page) => {
            page.csrf = crate::auth::form_token(csrf);
            page.into_response()
        }
        Err(err) => store_error(err),
    }
}

/// The refusal of a form whose CSRF token is missing or wrong, if it is.
fn expired_form(csrf: Option<&Extension<CsrfToken>>, presented: &str) -> Option<Response> {
    (!crate::auth::csrf_ok(csrf, presented)).then(|| {
        error_response(
            StatusCode::FORBIDDEN,
            "Form expired",
            "the form's CSRF token is missing or wrong: reload the page and try again",
        )
    })
}

/// The start form.
#[derive(Debug, Deserialize)]
pub struct StartForm {
    pub target: String,
    pub concurrency: String,
    pub shape: String,
    pub requests_per_step: u64,
    pub slo_ttft_p95: String,
    pub slo_itl_p95: String,
    #[serde(default)]
    pub csrf: String,
}

/// `POST /sweeps`: starts a sweep of a configured target in the background
/// (one at a time), then redirects to the list.
pub async fn start_handler(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
    Form(form): Form<StartForm>,
) -> Response {
    if let Some(expired) = expired_form(csrf.as_ref(), &form.csrf) {
        return expired;
    }
    let config = &state.pages;
    if !config.sweeps_enabled {
        return error_response(
            StatusCode::FORBIDDEN,
            "Sweeps are off",
            "this server does not start sweeps from the page",
        );
    }
    let request = match SweepRequest::try_from(form) {
        Ok(request) => request,
        Err(err) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "Cannot start the sweep",
                err.to_string(),
            )
        }
    };
    let Some(target) = state.api.targets.find(&request.target) else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "Unknown target",
            format!("no watched target is named {:?}", request.target),
        );
    };
    // The same entry point as the API's: one sweep at a time across the
    // daemon (the API's and the schedules' slot).
    match state
        .api
        .sweep_starter()
        .start(&state.api.config, &target, &request)
        .await
    {
        Ok(id) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, format!("/sweeps/{id}"))],
        )
            .into_response(),
        Err(StartError::Busy) => error_response(
            StatusCode::CONFLICT,
            "A sweep is running",
            "one sweep at a time: wait for the running one to finish",
        ),
        Err(StartError::Failed(err)) => error_response(
            StatusCode::BAD_GATEWAY,
            "The sweep could not start",
            err.to_string(),
        ),
        Err(err) => error_response(
            StatusCode::BAD_REQUEST,
            "Cannot start the sweep",
            err.to_string(),
        ),
    }
}

/// The form as the one sweep request (see `runners::sweep::start`): a
/// concurrency ladder, a shape, requests per step and both objectives.
impl TryFrom<StartForm> for SweepRequest {
    type Error = RequestError;

    fn try_from(form: StartForm) -> Result<SweepRequest, RequestError> {
        let ladder = Ladder::parse_concurrency(&form.concurrency)
            .map_err(|err| RequestError::new("concurrency", err.to_string()))?;
        let shape =
            Shape::parse(&form.shape).map_err(|err| RequestError::new("shape", err.to_string()))?;
        let objective =
            |field: &'static str, text: &str| match llmwatch_config::parse_duration(text) {
                Ok(d) if !d.is_zero() => Ok(d.as_secs_f64()),
                Ok(_) => Err(RequestError::new(field, "must be positive")),
                Err(err) => Err(RequestError::new(field, err.to_string())),
            };
        Ok(SweepRequest {
            ttft_p95: Some(objective("p95 TTFT objective", &form.slo_ttft_p95)?),
            itl_p95: Some(objective("p95 ITL objective", &form.slo_itl_p95)?),
            target: form.target,
            shape: Some(shape),
            ladder: Some(ladder),
            requests_per_step: Some(form.requests_per_step),
            ..SweepRequest::default()
        })
    }
}

#[derive(Debug, Deserialize)]
pub struct CancelForm {
    #[serde(default)]
    pub csrf: String,
}

/// `POST /sweeps/{id}/cancel`: the Cancel button of a running sweep.
pub async fn cancel_handler(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
    Form(form): Form<CancelForm>,
) -> Response {
    if let Some(expired) = expired_form(csrf.as_ref(), &form.csrf) {
        return expired;
    }
    let Ok(id) = id.parse::<i64>() else {
        return error_response(
            StatusCode::NOT_FOUND,
            "No such sweep",
            "sweep ids are numbers",
        );
    };
    let running = matches!(
        state.store.sweep(id).await,
        Ok(Some(row)) if row.status == llmwatch_store::SweepStatus::Running
    );
    if !running || !state.api.sweeps.cancel_running() {
        return error_response(
            StatusCode::CONFLICT,
            "Not running",
            format!("sweep {id} is not running"),
        );
    }
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/sweeps/{id}"))],
    )
        .into_response()
}

#[derive(Debug, Deserialize, Default)]
pub struct CompareQuery {
    pub a: Option<String>,
    pub b: Option<String>,
}

pub struct CompareChoice {
    pub id: i64,
    pub label: String,
    pub is_a: bool,
    pub is_b: bool,
}

pub struct DiffRow {
    pub field: String,
    pub a: String,
    pub b: String,
    pub changed: bool,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "compare.html")]
pub struct ComparePage {
    pub a: Option<i64>,
    pub b: Option<i64>,
    pub choices: Vec<CompareChoice>,
    pub label_a: String,
    pub label_b: String,
    pub rows: Vec<DiffRow>,
    pub changed: usize,
    pub warning: Option<String>,
    pub summary_a: Vec<String>,
    pub summary_b: Vec<String>,
    pub charts: Vec<ChartView>,
}

/// Two sweeps' curves overlaid: throughput, p95 TTFT, p95 ITL.
pub fn compare_charts(a: &StoredSweep, b: &StoredSweep) -> Vec<Chart> {
    let (x_label, _) = load_label(&a.steps);
    let all: Vec<StepResult> = a.steps.iter().chain(&b.steps).cloned().collect();
    let x = load_axis(&all);
    let la = format!("sweep {}", a.row.id);
    let lb = format!("sweep {}", b.row.id);
    let sa = Style::new(4, Dash::Solid, Marker::Circle);
    let sb = Style::new(5, Dash::Dashed, Marker::Triangle);
    let chart =
        |id: &str, title: &str, y: &str, unit: &str, f: &dyn Fn(&StepResult) -> Option<f64>| {
            Chart {
                id: id.to_string(),
                title: title.to_string(),
                x,
                x_label: x_label.to_string(),
                y_label: y.to_string(),
                y2_label: None,
                series: vec![
                    series(&la, unit, sa, false, points(&a.steps, f)),
                    series(&lb, unit, sb, false, points(&b.steps, f)),
                ],
                hlines: Vec::new(),
                vlines: Vec::new(),
                bands: Vec::new(),
                stacked: false,
            }
        };
    vec![
        chart(
            "throughput",
            "Throughput vs load",
            "output tokens per second",
            "tokens/s",
            &|s| Some(s.output_token_throughput),
        ),
        chart("ttft", "p95 TTFT vs load", "p95 TTFT (s)", "s", &|s| {
            s.ttft.p95
        }),
        chart("itl", "p95 ITL vs load", "p95 ITL (ms)", "ms", &|s| {
            s.itl.p95.map(|v| v * 1000.0)
        }),
    ]
}

pub async fn compare_page(
    store: &Store,
    a: Option<i64>,
    b: Option<i64>,
) -> Result<ComparePage, SweepError> {
    let choices = store
        .sweeps(100)
        .await?
        .into_iter()
        .map(|s| CompareChoice {
            id: s.id,
            label: format!(
                "sweep {} · {} · {}",
                s.id,
                s.target_name.unwrap_or(s.target_url),
                format::datetime(s.started_ms)
            ),
            is_a: a == Some(s.id),
            is_b: b == Some(s.id),
        })
        .collect();
    let mut page = ComparePage {
        a,
        b,
        choices,
        label_a: String::new(),
        label_b: String::new(),
        rows: Vec::new(),
        changed: 0,
        warning: None,
        summary_a: Vec::new(),
        summary_b: Vec::new(),
        charts: Vec::new(),
    };
    let (Some(ia), Some(ib)) = (a, b) else {
        return Ok(page);
    };
    let cmp = compare_sweeps(store, ia, ib).await?;
    let fa = cmp.a.card.fields();
    let fb = cmp.b.card.fields();
    let differing: Vec<&String> = cmp.diff.differing.iter().map(|(f, _, _)| f).collect();
    let mut names: Vec<String> = fa.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &fb {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let get = |fields: &[(String, Option<String>)], n: &str| {
        fields
            .iter()
            .find(|(k, _)| k == n)
            .and_then(|(_, v)| v.clone())
            .unwrap_or_else(|| "unknown".into())
    };
    page.rows = names
        .iter()
        .map(|n| DiffRow {
            field: n.clone(),
            a: get(&fa, n),
            b: get(&fb, n),
            changed: differing.contains(&n),
        })
        .collect();
    page.changed = differing.len();
    page.warning = cmp.diff.warning.clone();
    page.label_a = format!(
        "sweep {} ({})",
        ia,
        cmp.a.row.target_name.clone().unwrap_or_default()
    );
    page.label_b = format!(
        "sweep {} ({})",
        ib,
        cmp.b.row.target_name.clone().unwrap_or_default()
    );
    page.summary_a = summary_lines(&verdict_of(&cmp.a).1);
    page.summary_b = summary_lines(&verdict_of(&cmp.b).1);
    page.charts = compare_charts(&cmp.a, &cmp.b)
        .iter()
        .map(|c| ChartView {
            id: c.id.clone(),
            title: c.title.clone(),
            svg: super::charts::render_svg(c),
            href: format!("/compare/charts/{}", c.id),
            query: format!("?a={ia}&b={ib}"),
        })
        .collect();
    Ok(page)
}

fn parse_id(v: &Option<String>) -> Result<Option<i64>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => t
            .parse::<i64>()
            .map(Some)
            .map_err(|_| format!("{t:?} is not a sweep id")),
    }
}

pub async fn compare_handler(
    State(state): State<AppState>,
    Query(q): Query<CompareQuery>,
) -> Response {
    let (a, b) = match (parse_id(&q.a), parse_id(&q.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return error_response(StatusCode::BAD_REQUEST, "Bad sweep id", e)
        }
    };
    match compare_page(&state.store, a, b).await {
        Ok(page) => page.into_response(),
        Err(SweepError::NotFound(id)) => error_response(
            StatusCode::NOT_FOUND,
            "No such sweep",
            format!("no sweep has id {id}"),
        ),
        Err(err) => store_error(err),
    }
}

/// `/compare/charts/{chart}.{svg,csv,json}?a=…&b=…`
pub async fn compare_chart_download(
    State(state): State<AppState>,
    Path(file): Path<String>,
    Query(q): Query<CompareQuery>,
) -> Response {
    let (Ok(Some(a)), Ok(Some(b)), Some((chart_id, ext))) =
        (parse_id(&q.a), parse_id(&q.b), split_file(&file))
    else {
        return error_response(StatusCode::NOT_FOUND, "Not found", "no such chart");
    };
    match compare_sweeps(&state.store, a, b).await {
        Ok(cmp) => match compare_charts(&cmp.a, &cmp.b)
            .iter()
            .find(|c| c.id == chart_id)
        {
            Some(chart) => chart_file_response(chart, ext),
            None => error_response(StatusCode::NOT_FOUND, "Not found", "no such chart"),
        },
        Err(SweepError::NotFound(_)) => {
            error_response(StatusCode::NOT_FOUND, "No such sweep", "no such sweep")
        }
        Err(err) => store_error(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_fall_back_when_fields_are_missing() {
        let s = stored_settings("not json");
        assert_eq!(s.objectives.ttft_p95, None);
        let s = stored_settings(
            r#"{"shape":"512x128","prompt":"shared-prefix:0.5","objectives":{"ttft_p95_s":1.0,"itl_p95_s":0.05,"max_error_rate":0.02}}"#,
        );
        assert_eq!(s.objectives.ttft_p95, Some(1.0));
        assert_eq!(s.objectives.max_error_rate, 0.02);
        assert!(s.hints.shared_prefix);
        assert_eq!(s.hints.input_tokens, Some(512));
    }
}
