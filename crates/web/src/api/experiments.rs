//! Experiments through the API: start one from a plan (TOML text), follow
//! it, read its result. The same runner as `llmwatch experiment`.
//!
//! Starting server processes from a web request is guarded three ways
//! besides the login/token and the same-origin rule every state-changing
//! request passes (`crate::auth`): the plan's program (its command's first
//! word) must be listed exactly in `[server] experiment_programs` (empty by
//! default: the API starts nothing), the environment it may set is limited
//! to engine variables (`VLLM_`, `CUDA_`, `HF_`, `NCCL_`, `OMP_`, `TORCH_`;
//! never `LD_PRELOAD` or `PATH`), and a graded set must be built in (a file
//! path would read the daemon's disk). `url` plans need a person at a
//! terminal and are the CLI's. One experiment runs at a time.

use std::path::PathBuf;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Json;
use llmwatch_config::experiment::{ExperimentPlan, PlanTarget};
use llmwatch_config::SweepLimits;
use llmwatch_store::ExperimentRow;
use serde_json::{json, Value};

use super::params::parse_id;
use super::{params, path, time_fields, ApiError, RawQuery, RouteDoc, BAD, ID};
use crate::AppState;

/// The largest plan taken.
/// The largest plan taken: below the body limit (64 KiB), so a longer
/// plan is answered 400 naming the field rather than 413.
const MAX_PLAN_BYTES: usize = 32 * 1024;
/// Environment variables an API plan may set: the engines' own.
const ENV_PREFIXES: [&str; 6] = ["VLLM_", "CUDA_", "HF_", "NCCL_", "OMP_", "TORCH_"];

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StartExperiment {
    /// The plan, as the TOML `llmwatch experiment PLAN.toml` reads.
    plan: String,
}

fn forbidden(message: String) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message,
    }
}

/// What an API plan may not do (see the module docs).
pub fn check_api_plan(plan: &ExperimentPlan, programs: &[String]) -> Result<(), ApiError> {
    let PlanTarget::Command(server) = &plan.target else {
        return Err(ApiError::bad_request(
            "url: a plan whose server is restarted by hand needs a person at a terminal: run it with `llmwatch experiment`",
        ));
    };
    let program = server.command.first().map(String::as_str).unwrap_or("");
    if !programs.iter().any(|p| p == program) {
        return Err(forbidden(format!(
            "server.command: {program:?} is not listed in [server] experiment_programs of this daemon's config (empty by default: the API starts no program)"
        )));
    }
    let envs = server
        .env
        .keys()
        .chain(plan.variants.iter().flat_map(|v| v.env.keys()));
    for name in envs {
        if !ENV_PREFIXES.iter().any(|p| name.starts_with(p)) {
            return Err(ApiError::bad_request(format!(
                "env.{name}: the API sets only engine variables ({})",
                ENV_PREFIXES.join(", ")
            )));
        }
    }
    if let Some(q) = &plan.quality {
        if !q.set.starts_with("builtin:") {
            return Err(ApiError::bad_request(
                "quality.set: the API takes built-in sets only (a file path would read the daemon's disk)",
            ));
        }
    }
    Ok(())
}

fn summary(row: &ExperimentRow) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    out.insert("id".into(), json!(row.id));
    out.insert("name".into(), json!(row.name));
    out.insert("status".into(), json!(row.status));
    time_fields(&mut out, "created", Some(row.created_ms));
    time_fields(&mut out, "updated", Some(row.updated_ms));
    out.insert(
        "href".into(),
        json!(format!("/api/v1/experiments/{}", row.id)),
    );
    out.insert("page".into(), json!(format!("/experiments/{}", row.id)));
    out
}

async fn start_experiment(
    State(state): State<AppState>,
    query: RawQuery,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    params(query, &[])?;
    // Off (no program listed): refused before the body is read at all.
    if state.api.config.server.experiment_programs.is_empty() {
        return Err(forbidden(
            "experiments through the API are off: list the server programs they may start in [server] experiment_programs".into(),
        ));
    }
    let Json(body) = body.map_err(|err| ApiError {
        status: err.status(),
        message: format!("body: {}", err.body_text()),
    })?;
    let request: StartExperiment = serde_json::from_value(body)
        .map_err(|err| ApiError::bad_request(format!("body: {err}")))?;
    if request.plan.len() > MAX_PLAN_BYTES {
        return Err(ApiError::bad_request(format!(
            "plan: over {MAX_PLAN_BYTES} bytes"
        )));
    }
    let plan = ExperimentPlan::parse(&request.plan, std::path::Path::new("plan"))
        .map_err(|err| ApiError::bad_request(err.to_string()))?;
    check_api_plan(&plan, &state.api.config.server.experiment_programs)?;
    let guard = state.api.experiments.try_take().ok_or_else(|| ApiError {
        status: StatusCode::CONFLICT,
        message: "another experiment is still running; try again when it ends".into(),
    })?;
    let store = state.api.store.clone();
    let base = state
        .api
        .config
        .server
        .database
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let log_dir = base.join("experiment-logs").join(format!(
        "{}-{}",
        plan.name
            .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"),
        llmwatch_engine::sources::scrape::now_ms()
    ));
    let options = llmwatch_engine::runners::experiment::ExperimentOptions::new(log_dir, base);
    let (id_tx, id_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _guard = guard;
        let mut id_tx = Some(id_tx);
        let run = llmwatch_engine::runners::experiment::run_experiment(
            &plan,
            &options,
            Some(&store),
            |r| {
                if let (Some(id), Some(tx)) = (r.id, id_tx.take()) {
                    let _ = tx.send(id);
                }
            },
        )
        .await;
        if let Err(err) = run {
            tracing::warn!(experiment = %plan.name, error = %err, "API experiment failed");
        }
    });
    let id = id_rx.await.map_err(|_| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: "the experiment could not be stored".into(),
    })?;
    let row = state
        .api
        .store
        .experiment(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("experiment {id} vanished")))?;
    Ok((StatusCode::ACCEPTED, Json(Value::Object(summary(&row)))).into_response())
}

async fn list_experiments(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<Value>, ApiError> {
    let p = params(query, &["limit"])?;
    let limit = p.limit(100, 1000)?;
    let rows = state.api.store.experiments(limit).await?;
    Ok(Json(json!({
        "experiments": rows.iter().map(|r| Value::Object(summary(r))).collect::<Vec<_>>(),
    })))
}

async fn get_experiment(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> Result<Json<Value>, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "experiment")?;
    let row = state
        .api
        .store
        .experiment(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no experiment with id {id}")))?;
    let mut out = summary(&row);
    out.insert(
        "result".into(),
        serde_json::from_str(&row.result_json).unwrap_or(Value::Null),
    );
    Ok(Json(Value::Object(out)))
}

fn start_schema(_limits: &SweepLimits) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["plan"],
        "properties": { "plan": { "type": "string", "maxLength": MAX_PLAN_BYTES,
                                  "description": "The plan as TOML (see docs/EXPERIMENTS.md)." } },
    })
}

fn summary_properties() -> serde_json::Map<String, Value> {
    let mut p = serde_json::Map::new();
    p.insert("id".into(), json!({ "type": "integer" }));
    p.insert("name".into(), json!({ "type": "string" }));
    p.insert(
        "status".into(),
        json!({ "type": "string", "enum": ["running", "completed", "failed", "interrupted"] }),
    );
    for name in ["created", "updated"] {
        p.insert(format!("{name}_ms"), json!({ "type": "integer" }));
        p.insert(name.into(), json!({ "type": "string" }));
    }
    p.insert("href".into(), json!({ "type": "string" }));
    p.insert("page".into(), json!({ "type": "string" }));
    p
}

fn closed(properties: serde_json::Map<String, Value>) -> Value {
    let required: Vec<String> = properties.keys().cloned().collect();
    json!({ "type": "object", "additionalProperties": false, "required": required, "properties": properties })
}

/// `202` of a start, and each item of the list.
pub fn experiment_summary_schema() -> Value {
    closed(summary_properties())
}

pub fn list_experiments_schema() -> Value {
    closed(
        [(
            "experiments".to_string(),
            json!({ "type": "array", "items": experiment_summary_schema() }),
        )]
        .into_iter()
        .collect(),
    )
}

/// One experiment: its summary and its result document (variants, curves,
/// intervals, ranking, answer; `llmwatch_core`'s `ExperimentResult`).
pub fn get_experiment_schema() -> Value {
    let mut p = summary_properties();
    p.insert("result".into(), json!({ "type": ["object", "null"] }));
    closed(p)
}

pub(super) fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    vec![
        (
            RouteDoc {
                method: "post",
                path: "/api/v1/experiments",
                operation_id: "startExperiment",
                summary: "Starts an experiment plan in the background: each variant's server started (only programs listed in [server] experiment_programs), swept and graded; answers it, running.",
                params: vec![],
                errors: &[
                    BAD,
                    (403, "Experiments through the API are off (no [server] experiment_programs), or the plan's program is not listed there."),
                    (409, "Another experiment is still running."),
                    (413, "The body is over the size limit."),
                    (415, "The body is not `application/json`."),
                ],
                success: 202,
                response: experiment_summary_schema,
                request_body: Some("{\"plan\": \"[experiment]\\nname = ...\"}"),
                request_schema: Some(start_schema),
            },
            post(start_experiment),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/experiments",
                operation_id: "listExperiments",
                summary: "Experiments, newest first.",
                params: vec![super::LIMIT],
                errors: &[BAD],
                success: 200,
                response: list_experiments_schema,
                request_body: None,
                request_schema: None,
            },
            get(list_experiments),
        ),
        (
            RouteDoc {
                method: "get",
                path: "/api/v1/experiments/{id}",
                operation_id: "getExperiment",
                summary: "One experiment: status, progress and, once done, the ranking and the answer.",
                params: vec![path("id", ID, "Experiment id.")],
                errors: &[BAD, (404, "No such experiment.")],
                success: 200,
                response: get_experiment_schema,
                request_body: None,
                request_schema: None,
            },
            get(get_experiment),
        ),
    ]
}
