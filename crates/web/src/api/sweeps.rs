//! Sweeps and their runs through the API: list, detail, start.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::Shape;
use llmwatch_store::SweepRow;
use serde_json::{json, Value};

use llmwatch_core::redact::redact_url;

use super::params::parse_id;
use super::{params, time_fields, ApiError, ApiResult, RawQuery};
use crate::AppState;
use llmwatch_config::SweepLimits;
use llmwatch_engine::runners::sweep::start::{RequestError, StartError, SweepRequest};
use llmwatch_engine::runners::sweep::{Ladder, SweepError, DEFAULT_CONCURRENCY_LADDER};

fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

pub(super) fn sweep_summary(row: &SweepRow) -> Value {
    let verdict = row.verdict_json.as_deref().map(parse_json);
    let mut out = serde_json::Map::new();
    out.insert("id".into(), json!(row.id));
    out.insert("target".into(), json!(row.target_name));
    out.insert("url".into(), json!(redact_url(&row.target_url)));
    time_fields(&mut out, "started", Some(row.started_ms));
    time_fields(&mut out, "ended", row.ended_ms);
    out.insert("status".into(), json!(row.status.as_str()));
    out.insert("stop_reason".into(), json!(row.stop_reason));
    out.insert(
        "saturation".into(),
        verdict
            .as_ref()
            .map(|v| v["saturation"].clone())
            .unwrap_or(Value::Null),
    );
    out.insert(
        "sustainable".into(),
        verdict
            .as_ref()
            .map(|v| v["sustainable"].clone())
            .unwrap_or(Value::Null),
    );
    Value::Object(out)
}

pub(super) async fn list_sweeps(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    let p = params(query, &["limit", "cursor"])?;
    let limit = p.limit(100, 1000)?;
    let offset = p.cursor()?.unwrap_or(0);
    // An offset past any plausible number of sweeps is simply an empty page.
    let wanted = u32::try_from(offset)
        .ok()
        .and_then(|o| o.checked_add(limit + 1))
        .unwrap_or(u32::MAX);
    let rows = state.api.store.sweeps(wanted).await?;
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(rows.len());
    let page: Vec<&SweepRow> = rows[start..].iter().take(limit as usize).collect();
    let more = rows.len() > start + page.len();
    let next = more.then(|| (offset + i64::from(limit)).to_string());
    Ok(Json(json!({
        "sweeps": page.iter().map(|r| sweep_summary(r)).collect::<Vec<_>>(),
        "next_cursor": next,
    })))
}

pub(super) async fn get_sweep(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> ApiResult {
    params(query, &[])?;
    let id = parse_id(&id, "id", "sweep")?;
    let store = &state.api.store;
    let row = store
        .sweep(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no sweep with id {id}")))?;
    let mut out = sweep_summary(&row);
    out["settings"] = parse_json(&row.settings_json);
    out["card"] = parse_json(&row.card_json);
    out["verdict"] = row
        .verdict_json
        .as_deref()
        .map(parse_json)
        .unwrap_or(Value::Null);
    out["steps"] = Value::Array(run_list(&state, id).await?);
    Ok(Json(out))
}

async fn run_list(state: &AppState, sweep_id: i64) -> Result<Vec<Value>, ApiError> {
    Ok(state
        .api
        .store
        .sweep_steps_with_ids(sweep_id)
        .await?
        .iter()
        .map(|(id, s)| {
            let mut out = serde_json::Map::new();
            out.insert("id".into(), json!(id));
            out.insert("sweep_id".into(), json!(s.sweep_id));
            out.insert("index".into(), json!(s.step_index));
            out.insert(
                "load".into(),
                json!({ "kind": s.load_kind, "value": s.load_value }),
            );
            time_fields(&mut out, "start", Some(s.start_ms));
            time_fields(&mut out, "end", Some(s.end_ms));
            out.insert("run".into(), parse_json(&s.run_json));
            out.insert("evidence".into(), parse_json(&s.evidence_json));
            Value::Object(out)
        })
        .collect())
}

pub(super) async fn list_runs(State(state): State<AppState>, query: RawQuery) -> ApiResult {
    let p = params(query, &["sweep"])?;
    let id = parse_id(p.required("sweep")?, "sweep", "sweep")?;
    if state.api.store.sweep(id).await?.is_none() {
        return Err(ApiError::not_found(format!("no sweep with id {id}")));
    }
    Ok(Json(
        json!({ "sweep_id": id, "runs": run_list(&state, id).await? }),
    ))
}

/// `POST /api/v1/sweeps` body.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StartSweep {
    target: String,
    #[serde(default)]
    shape: Option<String>,
    /// `multi-turn:TURNS[,think=DUR]`: conversations instead of one-shot
    /// requests (a concurrency ladder only).
    #[serde(default)]
    workload: Option<String>,
    /// Numbers, not `u32`s: JSON Schema's integers include `37.0`.
    #[serde(default)]
    concurrency: Option<Vec<f64>>,
    #[serde(default)]
    rate: Option<Vec<f64>>,
    #[serde(default)]
    requests_per_step: Option<f64>,
    #[serde(default)]
    min_step_duration: Option<String>,
    #[serde(default)]
    model: Option<String>,
    /// Repeat earlier sweeps' prompts (deliberate cache experiments).
    #[serde(default)]
    reuse_prompts: Option<bool>,
}

/// The body of `POST /api/v1/sweeps` as the OpenAPI document states it,
/// within this daemon's `[server.sweep_limits]`: every request the schema
/// allows is one the daemon accepts (shapes stay within a 2 048-token
/// context). `model` is accepted too (the first served model by default)
/// but left out: a model the server does not serve fails the sweep at start.
pub fn start_sweep_schema(limits: &SweepLimits) -> Value {
    let steps = limits.max_steps;
    // Every step may last its minimum duration without passing the sweep's.
    let step_cap_s = (limits.max_sweep_duration.as_secs_f64() / steps.max(1) as f64)
        .min(limits.max_step_duration.as_secs_f64())
        .floor()
        .max(1.0);
    let mut schema = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["target"],
        "allOf": [
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
        ],
        "properties": {
            "target": { "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$" },
            "shape": { "type": "string", "pattern": "^[1-9][0-9]{0,2}x[1-9][0-9]{0,2}$",
                       "description": "INPUTxOUTPUT tokens; at most the model's context in all." },
            "workload": { "type": "string", "pattern": "^multi-turn:[1-4](,think=[1-9][0-9]{0,2}ms)?$",
                          "description": "multi-turn:TURNS[,think=DUR]: each concurrency level is that many conversations, each resending its history with a new turn of the shape (TURNS × the shape within the model's context); per step and turn the run reports input and cached tokens, TTFT and the prefix-cache hit ratio." },
            "concurrency": { "type": "array", "minItems": 1, "maxItems": steps,
                             "items": { "type": "integer", "minimum": 1,
                                        "maximum": llmwatch_engine::runners::sweep::DEFAULT_MAX_CONCURRENCY } },
            "rate": { "type": "array", "minItems": 1, "maxItems": steps,
                      "items": { "type": "number", "exclusiveMinimum": 0, "maximum": limits.max_rate } },
            "requests_per_step": { "type": "integer", "minimum": 1,
                                   "maximum": limits.max_requests_per_step },
            "min_step_duration": { "type": "string", "pattern": whole_seconds_pattern(step_cap_s as u64),
                                   "description": format!("Under a second in ms, or 1 to {step_cap_s} whole seconds.") },
        }
    });
    // The default ladder does not fit a tighter step limit: a ladder must
    // then be given.
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
        let conversation = body
            .workload
            .as_deref()
            .map(|text| {
                MultiTurn::parse(text).map_err(|err| RequestError::new("workload", err.why))
            })
            .transpose()?;
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
            ladder,
            reuse_prompts: body.reuse_prompts,
            requests_per_step,
            min_step_duration,
            ttft_p95: None,
            itl_p95: None,
        })
    }
}

pub(super) async fn start_sweep(
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

fn accepted(id: i64) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "id": id,
            "status": "running",
            "href": format!("/api/v1/sweeps/{id}"),
        })),
    )
        .into_response()
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
pub(super) async fn cancel_sweep(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> Result<Response, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "sweep")?;
    let row = state
        .api
        .store
        .sweep(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no sweep with id {id}")))?;
    if row.status != llmwatch_store::SweepStatus::Running || !state.api.sweeps.cancel_running() {
        return Err(ApiError {
            status: StatusCode::CONFLICT,
            message: format!("sweep {id} is not running (status {})", row.status.as_str()),
        });
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "status": "cancelling", "href": format!("/api/v1/sweeps/{id}")})),
    )
        .into_response())
}
