//! Starting and cancelling a sweep from a page (the one entry point:
//! `runners::sweep::start`).

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use llmwatch_probe::Shape;
use serde::Deserialize;

use crate::auth::CsrfToken;
use crate::pages::error_response;
use crate::AppState;
use llmwatch_engine::runners::sweep::start::{
    parse_workload, RequestError, StartError, SweepRequest,
};
use llmwatch_engine::runners::sweep::Ladder;

/// The start form.
#[derive(Debug, Deserialize)]
pub struct StartForm {
    pub target: String,
    pub concurrency: String,
    pub shape: String,
    /// Empty: one-shot requests; else `multi-turn:TURNS[,think=DUR]`.
    #[serde(default)]
    pub workload: String,
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
    if let Some(expired) = crate::pages::expired_form(csrf.as_ref(), &form.csrf) {
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
        let (conversation, observed) = match form.workload.trim() {
            "" => (None, None),
            text => parse_workload(text)?,
        };
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
            conversation,
            observed,
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
    if let Some(expired) = crate::pages::expired_form(csrf.as_ref(), &form.csrf) {
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
