//! Sweeps and their runs through the API: list, detail, the runs (steps)
//! of one.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Json;
use llmwatch_core::redact::redact_url;
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_store::{SweepRow, SweepStatus};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::api::fields::{parse_document, stored_document};
use crate::api::params::{params, parse_id, RawQuery};
use crate::api::route_doc::{path, required_query, Route, RouteDoc, BAD, CURSOR, ID, LIMIT};
use crate::api::ApiError;
use crate::AppState;

const UNKNOWN_SWEEP: &[(u16, &str)] = &[BAD, (404, "No such sweep.")];

/// A sweep's status as the API names it.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SweepState {
    Running,
    Completed,
    Stopped,
    Failed,
    Cancelled,
    Interrupted,
}

impl From<SweepStatus> for SweepState {
    fn from(status: SweepStatus) -> SweepState {
        match status {
            SweepStatus::Running => SweepState::Running,
            SweepStatus::Completed => SweepState::Completed,
            SweepStatus::Stopped => SweepState::Stopped,
            SweepStatus::Failed => SweepState::Failed,
            SweepStatus::Cancelled => SweepState::Cancelled,
            SweepStatus::Interrupted => SweepState::Interrupted,
        }
    }
}

/// A sweep as the list shows it, with its headline verdict.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SweepSummary {
    pub id: i64,
    pub target: Option<String>,
    /// Without credentials.
    pub url: String,
    pub started_ms: i64,
    pub started: String,
    pub ended_ms: Option<i64>,
    pub ended: Option<String>,
    pub status: SweepState,
    pub stop_reason: Option<String>,
    /// The verdict's saturation point, `null` before it has one.
    #[schemars(schema_with = "stored_document")]
    pub saturation: Value,
    /// The verdict's highest sustainable load.
    #[schemars(schema_with = "stored_document")]
    pub sustainable: Value,
}

impl SweepSummary {
    pub fn new(row: &SweepRow) -> SweepSummary {
        let verdict = row.verdict_json.as_deref().map(parse_document);
        let part = |name: &str| {
            verdict
                .as_ref()
                .map(|v| v[name].clone())
                .unwrap_or(Value::Null)
        };
        SweepSummary {
            id: row.id,
            target: row.target_name.clone(),
            url: redact_url(&row.target_url),
            started_ms: row.started_ms,
            started: rfc3339_ms(row.started_ms),
            ended_ms: row.ended_ms,
            ended: row.ended_ms.map(rfc3339_ms),
            status: row.status.into(),
            stop_reason: row.stop_reason.clone(),
            saturation: part("saturation"),
            sustainable: part("sustainable"),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SweepList {
    /// Newest first.
    pub sweeps: Vec<SweepSummary>,
    /// The next page's cursor, `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One sweep whole: its summary, the stored settings, card and verdict,
/// and its steps.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SweepDetail {
    #[serde(flatten)]
    pub summary: SweepSummary,
    #[schemars(schema_with = "stored_document")]
    pub settings: Value,
    #[schemars(schema_with = "stored_document")]
    pub card: Value,
    #[schemars(schema_with = "stored_document")]
    pub verdict: Value,
    pub steps: Vec<Step>,
}

/// One measured step (a run) of a sweep.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Step {
    pub id: i64,
    pub sweep_id: i64,
    pub index: i64,
    pub load: Load,
    pub start_ms: i64,
    pub start: String,
    pub end_ms: i64,
    pub end: String,
    #[schemars(schema_with = "stored_document")]
    pub run: Value,
    #[schemars(schema_with = "stored_document")]
    pub evidence: Value,
}

/// The load a step held: a concurrency or a request rate.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Load {
    #[schemars(extend("enum" = ["concurrency", "rate"]))]
    pub kind: String,
    pub value: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunList {
    pub sweep_id: i64,
    pub runs: Vec<Step>,
}

async fn list_sweeps(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<SweepList>, ApiError> {
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
    Ok(Json(SweepList {
        sweeps: page.into_iter().map(SweepSummary::new).collect(),
        next_cursor: more.then(|| (offset + i64::from(limit)).to_string()),
    }))
}

/// The stored sweep `id`, or the 404 naming it.
pub(in crate::api) async fn stored_sweep(state: &AppState, id: i64) -> Result<SweepRow, ApiError> {
    state
        .api
        .store
        .sweep(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no sweep with id {id}")))
}

async fn get_sweep(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: RawQuery,
) -> Result<Json<SweepDetail>, ApiError> {
    params(query, &[])?;
    let id = parse_id(&id, "id", "sweep")?;
    let row = stored_sweep(&state, id).await?;
    Ok(Json(SweepDetail {
        summary: SweepSummary::new(&row),
        settings: parse_document(&row.settings_json),
        card: parse_document(&row.card_json),
        verdict: row
            .verdict_json
            .as_deref()
            .map(parse_document)
            .unwrap_or(Value::Null),
        steps: steps(&state, id).await?,
    }))
}

async fn steps(state: &AppState, sweep_id: i64) -> Result<Vec<Step>, ApiError> {
    Ok(state
        .api
        .store
        .sweep_steps_with_ids(sweep_id)
        .await?
        .into_iter()
        .map(|(id, s)| Step {
            id,
            sweep_id: s.sweep_id,
            index: s.step_index,
            load: Load {
                kind: s.load_kind,
                value: s.load_value,
            },
            start_ms: s.start_ms,
            start: rfc3339_ms(s.start_ms),
            end_ms: s.end_ms,
            end: rfc3339_ms(s.end_ms),
            run: parse_document(&s.run_json),
            evidence: parse_document(&s.evidence_json),
        })
        .collect())
}

async fn list_runs(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<RunList>, ApiError> {
    let p = params(query, &["sweep"])?;
    let id = parse_id(p.required("sweep")?, "sweep", "sweep")?;
    stored_sweep(&state, id).await?;
    Ok(Json(RunList {
        sweep_id: id,
        runs: steps(&state, id).await?,
    }))
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            RouteDoc::get::<RunList>(
                "/api/v1/runs",
                "listRuns",
                "Runs (the measured steps) of a sweep.",
            )
            .params(vec![required_query("sweep", ID, "Sweep id.")])
            .errors(UNKNOWN_SWEEP),
            get(list_runs),
        ),
        (
            RouteDoc::get::<SweepList>(
                "/api/v1/sweeps",
                "listSweeps",
                "Sweeps, newest first, with their headline verdict; paginated.",
            )
            .params(vec![LIMIT, CURSOR]),
            get(list_sweeps),
        ),
        (
            RouteDoc::get::<SweepDetail>(
                "/api/v1/sweeps/{id}",
                "getSweep",
                "One sweep: settings, experiment card, steps, verdict.",
            )
            .params(vec![path("id", ID, "Sweep id.")])
            .errors(UNKNOWN_SWEEP),
            get(get_sweep),
        ),
    ]
}
