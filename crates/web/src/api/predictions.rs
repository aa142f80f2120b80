//! "Predict a change" through the API: start a prediction of a stored
//! sweep under a change of vLLM flags, and read it back (see
//! `state::predictions`).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use llmwatch_config::SweepLimits;
use llmwatch_engine::sinks::notify::rfc3339_ms;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::stored_document;
use super::params::{params, parse_id, RawQuery};
use super::route_doc::{path, request_schema, Route, RouteDoc, BAD, ID};
use super::ApiError;
use crate::state::predictions::{PredictRefusal, Prediction, PredictionStatus};
use crate::AppState;

/// The longest flag string taken (a change is a few flags).
const MAX_FLAGS_LEN: usize = 1024;

/// A change to predict a stored sweep under.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StartPrediction {
    /// The change, as `vllm serve` flags in one string.
    #[schemars(length(max = MAX_FLAGS_LEN))]
    vllm_args: String,
    /// The flags the swept server was started with, where its page does
    /// not show them (e.g. `--max-num-seqs 128`).
    #[serde(default)]
    #[schemars(length(max = MAX_FLAGS_LEN))]
    served_args: String,
}

fn start_schema(_limits: &SweepLimits) -> Value {
    request_schema::<StartPrediction>()
}

/// A prediction as the API answers it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "Prediction", deny_unknown_fields)]
pub struct PredictionAnswer {
    pub id: u64,
    pub sweep_id: i64,
    /// The flags the server ran with, where the page does not show them.
    pub served_args: Vec<String>,
    /// The change predicted.
    pub vllm_args: Vec<String>,
    pub status: PredictionState,
    pub error: Option<String>,
    pub started_ms: i64,
    pub started: String,
    pub ended_ms: Option<i64>,
    pub ended: Option<String>,
    /// The predicted sweep (real time) with the fit's own error, once done.
    #[schemars(schema_with = "stored_document")]
    pub result: Option<Value>,
    pub href: String,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PredictionState {
    Running,
    Done,
    Failed,
}

impl From<PredictionStatus> for PredictionState {
    fn from(status: PredictionStatus) -> PredictionState {
        match status {
            PredictionStatus::Running => PredictionState::Running,
            PredictionStatus::Done => PredictionState::Done,
            PredictionStatus::Failed => PredictionState::Failed,
        }
    }
}

impl From<Prediction> for PredictionAnswer {
    fn from(p: Prediction) -> PredictionAnswer {
        PredictionAnswer {
            href: format!("/api/v1/predictions/{}", p.id),
            id: p.id,
            sweep_id: p.sweep_id,
            served_args: p.served_args,
            vllm_args: p.vllm_args,
            status: p.status.into(),
            error: p.error,
            started_ms: p.started_ms,
            started: rfc3339_ms(p.started_ms),
            ended_ms: p.ended_ms,
            ended: p.ended_ms.map(rfc3339_ms),
            result: p.result,
        }
    }
}

async fn start_prediction(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "sweep")?;
    let Json(body) = body.map_err(|err| ApiError {
        status: err.status(),
        message: format!("body: {}", err.body_text()),
    })?;
    let request: StartPrediction = serde_json::from_value(body)
        .map_err(|err| ApiError::bad_request(format!("body: {err}")))?;
    for (field, text) in [
        ("vllm_args", &request.vllm_args),
        ("served_args", &request.served_args),
    ] {
        if text.len() > MAX_FLAGS_LEN {
            return Err(ApiError::bad_request(format!(
                "{field}: over {MAX_FLAGS_LEN} bytes"
            )));
        }
    }
    super::sweeps::stored_sweep(&state, id).await?;
    let prediction = state
        .api
        .predictions
        .start(id, &request.served_args, &request.vllm_args)
        .map_err(refusal)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(PredictionAnswer::from(prediction)),
    )
        .into_response())
}

fn refusal(err: PredictRefusal) -> ApiError {
    ApiError {
        status: err.status(),
        message: err.to_string(),
    }
}

async fn get_prediction(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> Result<Json<PredictionAnswer>, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "prediction")?;
    let prediction = u64::try_from(id)
        .ok()
        .and_then(|id| state.api.predictions.get(id))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no prediction with id {id} (predictions are kept in memory, the last few)"
            ))
        })?;
    Ok(Json(prediction.into()))
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            RouteDoc::post::<PredictionAnswer>(
                "/api/v1/sweeps/{id}/predictions",
                "predictChange",
                "Predicts a stored sweep under a change of vLLM flags: the simulator fitted to that sweep, with the change, runs the same sweep (minutes; one at a time). Answers the prediction, running.",
            )
            .params(vec![path("id", ID, "Sweep id.")])
            .errors(&[
                BAD,
                (404, "No such sweep."),
                (409, "A prediction is still running."),
                (413, "The body is over the size limit."),
                (415, "The body is not `application/json`."),
                (503, "This process cannot run predictions."),
            ])
            .body(
                "{\"vllm_args\": \"--max-num-seqs 8\", \"served_args\": \"--max-num-seqs 128\"?}",
                start_schema,
            ),
            post(start_prediction),
        ),
        (
            RouteDoc::get::<PredictionAnswer>(
                "/api/v1/predictions/{id}",
                "getPrediction",
                "One prediction: its change, status and, once done, the predicted sweep with the fit's own error.",
            )
            .params(vec![path("id", ID, "Prediction id.")])
            .errors(&[BAD, (404, "No such prediction (kept in memory, the last 16).")]),
            get(get_prediction),
        ),
    ]
}
