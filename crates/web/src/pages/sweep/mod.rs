//! Sweep pages, one module per job: one sweep's page (here), its charts,
//! its stored settings and verdict, the list, starting and cancelling, and
//! two sweeps compared.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use llmwatch_core::analysis::{summary_lines, StepResult, SweepVerdict};
use llmwatch_probe::RunResult;
use llmwatch_store::Store;
use serde_json::Value;

use crate::auth::CsrfToken;
use crate::pages::format;
use crate::pages::{chart_file_response, error_response, split_file, store_error, ChartView};
use crate::urls::path_segment;
use crate::AppState;
use llmwatch_engine::runners::sweep::{load_sweep, StoredSweep, SweepError};

mod charts;
mod compare;
mod list;
mod start;
mod stored;

pub use self::charts::sweep_charts;
use self::charts::*;
pub use self::compare::{
    compare_chart_download, compare_charts, compare_handler, compare_page, CompareChoice,
    ComparePage, CompareQuery, DiffRow,
};
pub use self::list::{list_handler, sweep_list_page, SweepListPage, SweepListRow};
pub use self::start::{cancel_handler, start_handler, CancelForm, StartForm};
pub use self::stored::{stored_settings, verdict_of, StoredSettings};

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

/// A conversation step's figures per turn (`workload = multi-turn:…`):
/// the prefix cache's benefit turn by turn.
pub struct TurnTable {
    pub step: usize,
    pub load: String,
    pub rows: Vec<TurnRow>,
}

pub struct TurnRow {
    pub turn: u32,
    pub requests: String,
    pub input_tokens: String,
    pub cached_tokens: String,
    pub hit_ratio: String,
    pub ttft: String,
}

/// The per-turn tables of the steps that ran conversations.
pub(super) fn turn_tables(sweep: &StoredSweep) -> Vec<TurnTable> {
    let num = |v: Option<f64>| opt(v, |v| format!("{v:.1}"));
    sweep
        .steps
        .iter()
        .zip(&sweep.runs)
        .enumerate()
        .filter(|(_, (_, run))| !run.turns.is_empty())
        .map(|(i, (s, run))| TurnTable {
            step: i,
            load: s.load.to_string(),
            rows: run
                .turns
                .iter()
                .map(|t| TurnRow {
                    turn: t.turn,
                    requests: format!("{} ({} failed)", t.requests, t.failed),
                    input_tokens: num(t.input_tokens_mean),
                    cached_tokens: num(t.cached_tokens_mean),
                    hit_ratio: opt(t.hit_ratio, |r| format!("{r:.3}")),
                    ttft: format!(
                        "{} / {}",
                        opt(t.ttft_ms.p50.map(|ms| ms / 1000.0), format::seconds),
                        opt(t.ttft_ms.p95.map(|ms| ms / 1000.0), format::seconds)
                    ),
                })
                .collect(),
        })
        .collect()
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
    /// Steps of conversations, per turn (empty for one-shot sweeps).
    pub conversations: Vec<TurnTable>,
    pub charts: Vec<ChartView>,
    /// Still running: the page refreshes itself.
    pub running: bool,
    /// "Predict a change": whether this process can, and the kept
    /// predictions of this sweep (set by the handler).
    pub can_predict: bool,
    pub predictions: Vec<super::predict::PredictionLink>,
}

pub(super) fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.filter(|v| v.is_finite())
        .map(f)
        .unwrap_or_else(|| "–".into())
}

/// The summary stored with the sweep's verdict, if any.
pub(super) fn stored_summary(sweep: &StoredSweep) -> Option<Vec<String>> {
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
pub(super) fn step_rows(sweep: &StoredSweep, verdict: &SweepVerdict) -> Vec<StepRow> {
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
pub(super) fn cached_cell(run: &RunResult) -> String {
    match (run.cache_hit_ratio(), run.server_prefix_cache_hit_ratio) {
        (Some(ratio), _) => format!("{} ({ratio:.2} hit)", run.total_cached_tokens),
        (None, Some(ratio)) => format!("not per request ({ratio:.2} hit, server counters)"),
        (None, None) => "not reported".into(),
    }
}

/// The saturation and max-sustainable lines, in the sweep's load unit.
pub(super) fn saturation_texts(verdict: &SweepVerdict, short: &str) -> (String, String) {
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

pub(super) fn finding_views(verdict: &SweepVerdict, steps: &[StepResult]) -> Vec<FindingView> {
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
        conversations: turn_tables(&sweep),
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
