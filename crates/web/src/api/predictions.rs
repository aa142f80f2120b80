//! "Predict a change" through the API: start a prediction of a stored
//! sweep under a change of vLLM flags, and read it back (see
//! `state::predictions`).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Json;
use llmwatch_config::SweepLimits;
use serde::Deserialize;
use serde_json::{json, Value};

use super::params::parse_id;
use super::RouteDoc;
use super::{params, path, time_fields, ApiError, RawQuery, BAD, ID};
use crate::state::predictions::{PredictRefusal, Prediction};
use crate::AppState;

/// The longest flag string taken (a change is a few flags).
const MAX_FLAGS_LEN: usize = 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartPrediction {
    /// The change, as `vllm serve` flags in one string.
    vllm_args: String,
    /// The flags the swept server was started with, where its page does
    /// not show them (e.g. `--max-num-seqs 128`).
    #[serde(default)]
    served_args: String,
}

/// A prediction as the API answers it.
pub fn prediction_json(p: &Prediction) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("id".into(), json!(p.id));
    out.insert("sweep_id".into(), json!(p.sweep_id));
    out.insert("served_args".into(), json!(p.served_args));
    out.insert("vllm_args".into(), json!(p.vllm_args));
    out.insert("status".into(), json!(p.status.as_str()));
    out.insert("error".into(), json!(p.error));
    time_fields(&mut out, "started", Some(p.started_ms));
    time_fields(&mut out, "ended", p.ended_ms);
    out.insert("result".into(), p.result.clone().unwrap_or(Value::Null));
    out.insert(
        "href".into(),
        json!(format!("/api/v1/predictions/{}", p.id)),
    );
    Value::Object(out)
}

fn start_schema(_limits: &SweepLimits) -> Value {
    let flags = json!({ "type": "string", "maxLength": MAX_FLAGS_LEN });
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["vllm_args"],
        "properties": { "vllm_args": flags, "served_args": flags },
    })
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
    state
        .api
        .store
        .sweep(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no sweep with id {id}")))?;
    let prediction = state
        .api
        .predictions
        .start(id, &request.served_args, &request.vllm_args)
        .map_err(refusal)?;
    Ok((StatusCode::ACCEPTED, Json(prediction_json(&prediction))).into_response())
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
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(prediction_json(&prediction)))
}

pub(super) fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    vec![
        (
            RouteDoc {
                method: "post",
                path: "/api/v1/sweeps/{id}/predictions",
                operation_id: "predictChange",
                summary: "Predicts a stored sweep under a change of vLLM flags: the simulator fitted to that sweep, with the change, runs the same sweep (minutes; one at a time). Answers the prediction, running.",
                params: vec![path("id", ID, "Sweep id.")],
                errors: &[
                    BAD,
                    (404, "No such sweep."),
                    (409, "A prediction is still running."),
                    (413, "The body is over the size limit."),
                    (415, "The body is not `application/json`."),
                    (503, "This process cannot run predictions."),
                ],
                success: 202,
                response: super::schemas::prediction,
                request_body: Some(
                    "{\"vllm_args\": \"--max-num-seqs 8\", \"served_args\": \"--max-num-seqs 128\"?}",
                ),
                request_schema: Some(start_schema),
            },
            post(start_prediction),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/predictions/{id}",
                operation_id: "getPrediction",
                summary: "One prediction: its change, status and, once done, the predicted sweep with the fit's own error.",
                params: vec![path("id", ID, "Prediction id.")],
                errors: &[BAD, (404, "No such prediction (kept in memory, the last 16).")],
                success: 200,
                response: super::schemas::prediction,
                request_body: None,
                request_schema: None,
            },
            get(get_prediction),
        ),
    ]
}
