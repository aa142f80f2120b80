//! "Predict a change" on the sweep page: the form's handler and the page of
//! one prediction (progress, then the predicted steps and verdict beside
//! the fit's own error). The book and the runner: `state::predictions`.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use serde_json::Value;

use super::{error_response, format};
use crate::auth::CsrfToken;
use crate::state::predictions::{Prediction, PredictionStatus};
use crate::AppState;

/// A prediction of the sweep page, as a link.
pub struct PredictionLink {
    pub id: u64,
    pub change: String,
    pub status: String,
}

impl PredictionLink {
    pub fn of(p: &Prediction) -> PredictionLink {
        PredictionLink {
            id: p.id,
            change: p.vllm_args.join(" "),
            status: p.status.as_str().to_string(),
        }
    }
}

/// The form on the sweep page.
#[derive(Debug, Deserialize)]
pub struct PredictForm {
    pub csrf: String,
    pub vllm_args: String,
    #[serde(default)]
    pub served_args: String,
}

/// `POST /sweeps/{id}/predict`: starts a prediction, then shows it.
pub async fn start_handler(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
    Form(form): Form<PredictForm>,
) -> Response {
    if let Some(expired) = super::expired_form(csrf.as_ref(), &form.csrf) {
        return expired;
    }
    let Ok(id) = id.parse::<i64>() else {
        return error_response(
            StatusCode::NOT_FOUND,
            "No such sweep",
            "sweep ids are numbers",
        );
    };
    match state.store.sweep(id).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return error_response(
                StatusCode::NOT_FOUND,
                "No such sweep",
                format!("no sweep has id {id}"),
            )
        }
        Err(err) => return super::store_error(err),
    }
    match state
        .api
        .predictions
        .start(id, &form.served_args, &form.vllm_args)
    {
        Ok(p) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, format!("/predictions/{}", p.id))],
        )
            .into_response(),
        Err(err) => error_response(err.status(), "Prediction not started", err.to_string()),
    }
}

/// One predicted step, as text.
pub struct PredictedStep {
    pub load: String,
    pub req_s: String,
    pub tok_s: String,
    pub ttft: String,
    pub itl: String,
    pub running: String,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "prediction.html")]
pub struct PredictionPage {
    pub id: u64,
    pub sweep_id: i64,
    pub change: String,
    pub served: String,
    pub status: String,
    pub running: bool,
    pub error: Option<String>,
    pub started: String,
    pub saturation: String,
    pub sustainable: String,
    pub summary: Vec<String>,
    pub fit_error: String,
    pub ignored: String,
    pub steps: Vec<PredictedStep>,
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

fn load_text(load: &Value) -> String {
    if let Some(c) = load.get("concurrency").and_then(Value::as_u64) {
        format!("concurrency {c}")
    } else if let Some(r) = load.get("rate").and_then(num) {
        format!("{} req/s", format::number(r))
    } else {
        "–".into()
    }
}

fn pair(q: &Value) -> String {
    let s = |key: &str| {
        q.get(key)
            .and_then(num)
            .map(format::seconds)
            .unwrap_or_else(|| "–".into())
    };
    format!("{} / {}", s("p50"), s("p95"))
}

fn step_of(step: &Value) -> PredictedStep {
    let s = &step["step"];
    let n = |v: &Value| v.as_f64().map(format::number).unwrap_or_else(|| "–".into());
    PredictedStep {
        load: load_text(&s["load"]),
        req_s: n(&s["request_throughput"]),
        tok_s: n(&s["output_token_throughput"]),
        ttft: pair(&s["ttft_s"]),
        itl: pair(&s["itl_s"]),
        running: n(&s["server"]["requests_running_max"]),
    }
}

fn headline(v: &Value) -> String {
    if v.is_null() {
        return "not reached".into();
    }
    load_text(&v["load"])
}

impl PredictionPage {
    fn of(p: &Prediction) -> PredictionPage {
        let result = p.result.clone().unwrap_or(Value::Null);
        let verdict = &result["verdict"];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let prediction = &result["prediction"];
        PredictionPage {
            id: p.id,
            sweep_id: p.sweep_id,
            change: if p.vllm_args.is_empty() {
                "no change".into()
            } else {
                p.vllm_args.join(" ")
            },
            served: p.served_args.join(" "),
            status: p.status.as_str().into(),
            running: p.status == PredictionStatus::Running,
            error: p.error.clone(),
            started: format::datetime(p.started_ms),
            saturation: headline(&verdict["saturation"]),
            sustainable: headline(&verdict["sustainable"]),
            summary: strings(&verdict["summary"]),
            fit_error: prediction["fit_error"]
                .as_str()
                .unwrap_or("unknown (no fit)")
                .to_string(),
            ignored: strings(&prediction["ignored"]).join(" "),
            steps: result["steps"]
                .as_array()
                .map(|steps| steps.iter().map(step_of).collect())
                .unwrap_or_default(),
        }
    }
}

/// `/predictions/{id}`
pub async fn handler(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match id
        .parse::<u64>()
        .ok()
        .and_then(|id| state.api.predictions.get(id))
    {
        Some(p) => PredictionPage::of(&p).into_response(),
        None => error_response(
            StatusCode::NOT_FOUND,
            "No such prediction",
            format!("no prediction has id {id} (the last 16 are kept, until a restart)"),
        ),
    }
}
