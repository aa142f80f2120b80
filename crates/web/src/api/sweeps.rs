//! Sweeps through the API: starting one (the body becomes the one
//! `SweepRequest` the page's form also becomes) and cancelling it here;
//! the list, one sweep and its runs in [`read`].

mod read;

pub(super) use read::stored_sweep;
pub use read::SweepSummary;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use llmwatch_config::SweepLimits;
use llmwatch_engine::runners::sweep::start::{
    parse_workload, RequestError, StartError, SweepRequest,
};
use llmwatch_engine::runners::sweep::{
    Ladder, SweepError, DEFAULT_CONCURRENCY_LADDER, DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MIN_STEP_DURATION, DEFAULT_REQUESTS_PER_STEP,
};
use llmwatch_probe::Shape;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::api::params::{params, parse_id, RawQuery};
use crate::api::route_doc::{path, request_schema, Route, RouteDoc, BAD, ID, UNKNOWN_TARGET};
use crate::api::ApiError;
use crate::AppState;

// `POST /api/v1/sweeps` body. Its schema is derived from this type, then
// bounded by the daemon's `[server.sweep_limits]` (`start_sweep_schema`).
/// A sweep to start: a watched target, the request shape, the load ladder.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StartSweep {
    /// A watched target's name.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]{1,64}$"))]
    target: String,
    /// INPUTxOUTPUT tokens; at most the model's context in all.
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^[1-9][0-9]{0,2}x[1-9][0-9]{0,2}$"))]
    shape: Option<String>,
    /// `multi-turn:TURNS[,think=DUR]`: each concurrency level is that many
    /// conversations, each resending its history with a new turn of the
    /// shape (TURNS × the shape within the model's context); per step and
    /// turn the run reports input and cached tokens, TTFT and the
    /// prefix-cache hit ratio. A concurrency ladder only.
    /// `observed:TARGET[:RANGE]`: every step sends the prompt and output
    /// lengths that watched target served over RANGE (default 1h), drawn
    /// from its stored length histograms.
    #[serde(default)]
    #[schemars(
        with = "String",
        regex(
            pattern = r"^(multi-turn:[1-4](,think=[1-9][0-9]{0,2}ms)?|observed:[a-z][a-z0-9-]{0,30}(:[1-9][0-9]?[mh])?)$"
        )
    )]
    workload: Option<String>,
    /// Concurrency levels, one per step.
    // Numbers, not `u32`s: JSON Schema's integers include `37.0`.
    #[serde(default)]
    #[schemars(
        with = "Vec<u32>",
        length(min = 1),
        inner(range(min = 1, max = DEFAULT_MAX_CONCURRENCY))
    )]
    concurrency: Option<Vec<f64>>,
    /// Request rates (per second), one per step, instead of concurrency.
    #[serde(default)]
    #[schemars(with = "Vec<f64>", length(min = 1))]
    rate: Option<Vec<f64>>,
    #[serde(default)]
    #[schemars(with = "u64", range(min = 1))]
    requests_per_step: Option<f64>,
    #[serde(default)]
    #[schemars(with = "String")]
    min_step_duration: Option<String>,
    /// Accepted (the first served model by default) but left out of the
    /// schema: a model the server does not serve fails the sweep at start.
    #[serde(default)]
    #[schemars(skip)]
    model: Option<String>,
    /// Repeat earlier sweeps' prompts (deliberate cache experiments); left
    /// out of the schema, as the page leaves it out of its form.
    #[serde(default)]
    #[schemars(skip)]
    reuse_prompts: Option<bool>,
}

/// The body of `POST /api/v1/sweeps` as the OpenAPI document states it:
/// [`StartSweep`]'s schema within this daemon's `[server.sweep_limits]`,
/// so every request the schema allows is one the daemon accepts (shapes
/// stay within a 2 048-token context).
pub fn start_sweep_schema(limits: &SweepLimits) -> Value {
    let steps = limits.max_steps;
    // Every step may last its minimum duration without passing the sweep's.
    let step_cap_s = (limits.max_sweep_duration.as_secs_f64() / steps.max(1) as f64)
        .min(limits.max_step_duration.as_secs_f64())
        .floor()
        .max(1.0);
    let mut schema = request_schema::<StartSweep>();
    let properties = &mut schema["properties"];
    properties["concurrency"]["maxItems"] = json!(steps);
    properties["rate"]["maxItems"] = json!(steps);
    properties["rate"]["items"] =
        json!({ "type": "number", "exclusiveMinimum": 0, "maximum": limits.max_rate });
    properties["requests_per_step"]["maximum"] = json!(limits.max_requests_per_step);
    properties["min_step_duration"]["pattern"] = json!(whole_seconds_pattern(step_cap_s as u64));
    properties["min_step_duration"]["description"] = json!(format!(
        "Under a second in ms, or 1 to {step_cap_s} whole seconds."
    ));
    schema["allOf"] = json!([
        { "not": { "required": ["concurrency", "rate"] } },
        { "not": { "required": ["workload", "rate"] } },
        // A conversation's last turn carries every earlier one: with a
        // workload the shape is given and small enough that four turns
        // fit the same context.
        { "anyOf": [
            { "not": { "required": ["workload"] } },
            { "required": ["workload", "shape"],
              "properties": { "shape": { "pattern": "^[1-9][0-9]{0,1}x[1-9][0-9]{0,1}$" } } },
        ] },
    ]);
    // A default the limits refuse must be given: the request size and the
    // step duration where the limits are below them, and a ladder where the
    // default one has more steps than allowed.
    let mut required = vec!["target"];
    if DEFAULT_REQUESTS_PER_STEP > limits.max_requests_per_step {
        required.push("requests_per_step");
    }
    if DEFAULT_MIN_STEP_DURATION > limits.max_step_duration {
        required.push("min_step_duration");
    }
    schema["required"] = json!(required);
    if DEFAULT_CONCURRENCY_LADDER.len() > steps {
        schema["anyOf"] = json!([{ "required": ["concurrency"] }, { "required": ["rate"] }]);
    }
    schema
}

/// `NNNms` under a second, or `Ns` for 1..=`max` seconds, exactly.
fn whole_seconds_pattern(max: u64) -> String {
    let seconds: Vec<String> = (1..=max.max(1)).map(|s| s.to_string()).collect();
    format!("^([1-9][0-9]{{0,2}}ms|({})s)$", seconds.join("|"))
}

/// `n` as a whole number, if it is one (`37` and `37.0` alike).
fn whole_number(n: f64) -> Option<u64> {
    (n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= u64::MAX as f64).then_some(n as u64)
}

/// The body as the one sweep request (see `runners::sweep::start`).
impl TryFrom<StartSweep> for SweepRequest {
    type Error = RequestError;

    fn try_from(body: StartSweep) -> Result<SweepRequest, RequestError> {
        let shape = body
            .shape
            .as_deref()
            .map(|text| {
                Shape::parse(text).map_err(|err| RequestError::new("shape", err.to_string()))
            })
            .transpose()?;
        let (conversation, observed) = match body.workload.as_deref() {
            Some(text) => parse_workload(text)?,
            None => (None, None),
        };
        let concurrency = body
            .concurrency
            .map(|levels| {
                levels
                    .iter()
                    .map(|&c| whole_number(c).and_then(|c| u32::try_from(c).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or_else(|| RequestError::new("concurrency", "expected whole numbers"))
            })
            .transpose()?;
        let ladder = match (concurrency, body.rate) {
            (Some(c), None) => Some(Ladder::Concurrency(c)),
            (None, Some(r)) => Some(Ladder::Rate(r)),
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(RequestError::new(
                    "concurrency",
                    "give either concurrency or rate, not both",
                ))
            }
        };
        let requests_per_step = body
            .requests_per_step
            .map(|n| {
                whole_number(n).ok_or_else(|| {
                    RequestError::new("requests_per_step", "expected a whole number")
                })
            })
            .transpose()?;
        let min_step_duration = body
            .min_step_duration
            .as_deref()
            .map(|text| {
                llmwatch_config::parse_duration(text)
                    .map_err(|err| RequestError::new("min_step_duration", err.to_string()))
            })
            .transpose()?;
        Ok(SweepRequest {
            target: body.target,
            model: body.model,
            shape,
            conversation,
            observed,
            ladder,
            reuse_prompts: body.reuse_prompts,
            requests_per_step,
            min_step_duration,
            ttft_p95: None,
            itl_p95: None,
        })
    }
}

async fn start_sweep(
    State(state): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    // 400 for JSON that does not parse, 413 for a body over the limit, 415
    // for another content type: the rejection knows which.
    let Json(body) = body.map_err(|err| ApiError {
        status: err.status(),
        message: format!("body: {}", err.body_text()),
    })?;
    let body: StartSweep = serde_json::from_value(body)
        .map_err(|err| ApiError::bad_request(format!("body: {err}")))?;
    let request =
        SweepRequest::try_from(body).map_err(|err| ApiError::bad_request(err.to_string()))?;
    let target = state.api.targets.find(&request.target).ok_or_else(|| {
        ApiError::not_found(format!("no watched target named {:?}", request.target))
    })?;
    let id = state
        .api
        .sweep_starter()
        .start(&state.api.config, &target, &request)
        .await
        .map_err(start_error)?;
    Ok(accepted(id))
}

/// `202` of a start: the sweep runs.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SweepStarted {
    pub id: i64,
    pub status: Running,
    pub href: String,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Running {
    Running,
}

/// `202` of a cancel: the sweep stops at once.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SweepCancelling {
    pub id: i64,
    pub status: Cancelling,
    pub href: String,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Cancelling {
    Cancelling,
}

fn sweep_href(id: i64) -> String {
    format!("/api/v1/sweeps/{id}")
}

fn accepted(id: i64) -> Response {
    let answer = SweepStarted {
        id,
        status: Running::Running,
        href: sweep_href(id),
    };
    (StatusCode::ACCEPTED, Json(answer)).into_response()
}

fn start_error(err: StartError) -> ApiError {
    let status = match &err {
        StartError::UnknownTarget(_) => StatusCode::NOT_FOUND,
        StartError::Refused(_) => StatusCode::BAD_REQUEST,
        StartError::Busy => StatusCode::CONFLICT,
        StartError::Failed(
            SweepError::Ladder(_)
            | SweepError::AboveCap { .. }
            | SweepError::Settings(_)
            | SweepError::Card(_),
        ) => StatusCode::BAD_REQUEST,
        StartError::Failed(_) => StatusCode::BAD_GATEWAY,
        StartError::Task(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError {
        status,
        message: err.to_string(),
    }
}

/// `POST /api/v1/sweeps/{id}/cancel`: stops the running sweep `id`; its
/// requests in flight are aborted, the steps measured so far are kept, and
/// it ends `cancelled`.
async fn cancel_sweep(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> Result<Response, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "sweep")?;
    let row = read::stored_sweep(&state, id).await?;
    if row.status != llmwatch_store::SweepStatus::Running || !state.api.sweeps.cancel_running() {
        return Err(ApiError::conflict(format!(
            "sweep {id} is not running (status {})",
            row.status.as_str()
        )));
    }
    let answer = SweepCancelling {
        id,
        status: Cancelling::Cancelling,
        href: sweep_href(id),
    };
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

pub(super) fn routes() -> Vec<Route> {
    let start_and_cancel = vec![
        (
            RouteDoc::post::<SweepStarted>(
                "/api/v1/sweeps",
                "startSweep",
                "Starts a sweep of a configured target in the background (one at a time, capped); answers its id.",
            )
            .errors(&[
                BAD,
                UNKNOWN_TARGET,
                (409, "A sweep started through the API is still running."),
                (413, "The body is over the size limit."),
                (415, "The body is not `application/json`."),
                (502, "The sweep could not start (e.g. the target is down)."),
            ])
            .body(
                "{\"target\": NAME, \"shape\": \"512x128\", \"concurrency\": [1,2,4], \"requests_per_step\": 100, \"min_step_duration\": \"10s\", \"model\": NAME?}",
                start_sweep_schema,
            ),
            post(start_sweep),
        ),
        (
            RouteDoc::post::<SweepCancelling>(
                "/api/v1/sweeps/{id}/cancel",
                "cancelSweep",
                "Cancel the running sweep: requests in flight are aborted, measured steps kept, status `cancelled`.",
            )
            .params(vec![path("id", ID, "Sweep id.")])
            .errors(&[BAD, (404, "No such sweep."), (409, "The sweep is not running.")]),
            post(cancel_sweep),
        ),
    ];
    read::routes().into_iter().chain(start_and_cancel).collect()
}
