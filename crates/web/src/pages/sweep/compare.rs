//! Two sweeps compared: both curves and the card fields that differ.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use llmwatch_core::analysis::{summary_lines, StepResult};
use llmwatch_store::Store;
use serde::Deserialize;

use crate::pages::charts::{Chart, Dash, Marker, Style};
use crate::pages::format;
use crate::pages::{chart_file_response, error_response, split_file, store_error, ChartView};
use crate::AppState;
use llmwatch_engine::runners::sweep::{compare_sweeps, StoredSweep, SweepError};

use super::{charts::*, stored::*};

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
            svg: crate::pages::charts::render_svg(c),
            href: format!("/compare/charts/{}", c.id),
            query: format!("?a={ia}&b={ib}"),
        })
        .collect();
    Ok(page)
}

pub(super) fn parse_id(v: &Option<String>) -> Result<Option<i64>, String> {
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
