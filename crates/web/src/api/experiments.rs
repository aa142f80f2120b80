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
use axum::routing::{get, post};
use axum::Json;
use llmwatch_config::experiment::{ExperimentPlan, PlanTarget};
use llmwatch_config::SweepLimits;
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_store::ExperimentRow;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::{parse_document, stored_document};
use super::params::{params, parse_id, RawQuery};
use super::route_doc::{path, request_schema, Route, RouteDoc, BAD, ID, LIMIT};
use super::ApiError;
use crate::AppState;

/// The largest plan taken: below the body limit (64 KiB), so a longer
/// plan is answered 400 naming the field rather than 413.
const MAX_PLAN_BYTES: usize = 32 * 1024;
/// Environment variables an API plan may set: the engines' own.
const ENV_PREFIXES: [&str; 6] = ["VLLM_", "CUDA_", "HF_", "NCCL_", "OMP_", "TORCH_"];

/// An experiment plan to run.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StartExperiment {
    /// The plan as TOML (see docs/EXPERIMENTS.md), as `llmwatch experiment PLAN.toml` reads it.
    #[schemars(length(max = MAX_PLAN_BYTES))]
    plan: String,
}

fn start_schema(_limits: &SweepLimits) -> Value {
    request_schema::<StartExperiment>()
}

/// An experiment as a start answers it and the list shows it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExperimentSummary {
    pub id: i64,
    pub name: String,
    #[schemars(extend("enum" = ["running", "completed", "failed", "interrupted"]))]
    pub status: String,
    pub created_ms: i64,
    pub created: String,
    pub updated_ms: i64,
    pub updated: String,
    pub href: String,
    /// Its page.
    pub page: String,
}

impl ExperimentSummary {
    fn new(row: &ExperimentRow) -> ExperimentSummary {
        ExperimentSummary {
            id: row.id,
            name: row.name.clone(),
            status: row.status.clone(),
            created_ms: row.created_ms,
            created: rfc3339_ms(row.created_ms),
            updated_ms: row.updated_ms,
            updated: rfc3339_ms(row.updated_ms),
            href: format!("/api/v1/experiments/{}", row.id),
            page: format!("/experiments/{}", row.id),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExperimentList {
    /// Newest first.
    pub experiments: Vec<ExperimentSummary>,
}

/// One experiment: its summary and its result document (variants, curves,
/// intervals, ranking, answer; `llmwatch_core`'s `ExperimentResult`).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExperimentDetail {
    #[serde(flatten)]
    pub summary: ExperimentSummary,
    #[schemars(schema_with = "stored_document")]
    pub result: Value,
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
    Ok((StatusCode::ACCEPTED, Json(ExperimentSummary::new(&row))).into_response())
}

async fn list_experiments(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<ExperimentList>, ApiError> {
    let p = params(query, &["limit"])?;
    let limit = p.limit(100, 1000)?;
    let rows = state.api.store.experiments(limit).await?;
    Ok(Json(ExperimentList {
        experiments: rows.iter().map(ExperimentSummary::new).collect(),
    }))
}

async fn get_experiment(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> Result<Json<ExperimentDetail>, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "experiment")?;
    let row = state
        .api
        .store
        .experiment(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no experiment with id {id}")))?;
    Ok(Json(ExperimentDetail {
        summary: ExperimentSummary::new(&row),
        result: parse_document(&row.result_json),
    }))
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            RouteDoc::post::<ExperimentSummary>(
                "/api/v1/experiments",
                "startExperiment",
                "Starts an experiment plan in the background: each variant's server started (only programs listed in [server] experiment_programs), swept and graded; answers it, running.",
            )
            .errors(&[
                BAD,
                (403, "Experiments through the API are off (no [server] experiment_programs), or the plan's program is not listed there."),
                (409, "Another experiment is still running."),
                (413, "The body is over the size limit."),
                (415, "The body is not `application/json`."),
            ])
            .body("{\"plan\": \"[experiment]\\nname = ...\"}", start_schema),
            post(start_experiment),
        ),
        (
            RouteDoc::get::<ExperimentList>(
                "/api/v1/experiments",
                "listExperiments",
                "Experiments, newest first.",
            )
            .params(vec![LIMIT]),
            get(list_experiments),
        ),
        (
            RouteDoc::get::<ExperimentDetail>(
                "/api/v1/experiments/{id}",
                "getExperiment",
                "One experiment: status, progress and, once done, the ranking and the answer.",
            )
            .params(vec![path("id", ID, "Experiment id.")])
            .errors(&[BAD, (404, "No such experiment.")]),
            get(get_experiment),
        ),
    ]
}
