//! Probe records through the API: a target's canaries and sweep steps'
//! probes, oldest first, paginated.

use axum::extract::State;
use axum::routing::get;
use axum::Json;
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_store::{ProbeOrigin, ProbeRow};
use schemars::JsonSchema;
use serde::Serialize;

use super::params::{params, parse_id, time_range, RawQuery};
use super::route_doc::{
    query, required_query, Route, RouteDoc, CURSOR, FROM, LIMIT, NAME, TARGET_ERRORS, TO,
};
use super::targets::find_target;
use super::ApiError;
use crate::AppState;

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ProbePage {
    pub target: String,
    pub probes: Vec<Probe>,
    /// The next page's cursor, `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One probe request as the client measured it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Probe {
    pub id: i64,
    pub sent_ms: i64,
    pub sent: String,
    /// The sweep step it belongs to; `null` for a canary.
    pub run_id: Option<i64>,
    pub api: String,
    pub model: String,
    pub shape: String,
    pub ok: bool,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub http_status: Option<u16>,
    pub ttfb_s: Option<f64>,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    #[schemars(with = "Option<f64>")]
    pub e2e_s: f64,
    #[schemars(with = "Vec<Option<f64>>")]
    pub itl_s: Vec<f64>,
    pub prompt_tokens: Option<i64>,
    pub output_tokens: i64,
    pub cached_tokens: Option<i64>,
    pub finish_reason: Option<String>,
}

impl Probe {
    fn new(id: i64, probe: ProbeRow) -> Probe {
        Probe {
            id,
            sent_ms: probe.ts_ms,
            sent: rfc3339_ms(probe.ts_ms),
            run_id: probe.run_id,
            api: probe.api,
            model: probe.model,
            shape: probe.shape,
            ok: probe.ok,
            error_kind: probe.error_kind,
            error: probe.error,
            http_status: probe.http_status,
            ttfb_s: probe.ttfb_s,
            ttft_s: probe.ttft_s,
            tpot_s: probe.tpot_s,
            e2e_s: probe.e2e_s,
            itl_s: probe.itl_s,
            prompt_tokens: probe.prompt_tokens,
            output_tokens: probe.output_tokens,
            cached_tokens: probe.cached_tokens,
            finish_reason: probe.finish_reason,
        }
    }
}

async fn list_probes(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<ProbePage>, ApiError> {
    let p = params(query, &["target", "run", "from", "to", "limit", "cursor"])?;
    let name = p.required("target")?;
    let origin = match p.get("run") {
        None => ProbeOrigin::Any,
        Some("canary") => ProbeOrigin::Canary,
        Some(run) => ProbeOrigin::Run(parse_id(run, "run", "sweep step")?),
    };
    let (from, to) = time_range(&p)?;
    let limit = p.limit(100, 1000)?;
    let cursor = p.cursor()?;
    let target = find_target(&state.api.store, name).await?;
    let mut page = state
        .api
        .store
        .probes_page(target.id, origin, from, to, cursor, limit + 1)
        .await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let next_cursor = more
        .then(|| page.last().map(|(id, _)| id.to_string()))
        .flatten();
    Ok(Json(ProbePage {
        target: target.name,
        probes: page
            .into_iter()
            .map(|(id, probe)| Probe::new(id, probe))
            .collect(),
        next_cursor,
    }))
}

pub(super) fn routes() -> Vec<Route> {
    vec![(
        RouteDoc::get::<ProbePage>(
            "/api/v1/probes",
            "listProbes",
            "Probe records of a target, oldest first, paginated: canaries and sweep steps' probes, or one kind.",
        )
        .params(vec![
            required_query("target", NAME, "Target name."),
            query(
                "run",
                r#"{"anyOf": [{"type": "string", "enum": ["canary"]}, {"type": "string", "pattern": "^[1-9][0-9]{0,14}$"}]}"#,
                "Only the probes of one sweep step (its `id` in `/api/v1/runs`), or `canary` for the daemon's canaries alone (default: all).",
            ),
            FROM,
            TO,
            LIMIT,
            CURSOR,
        ])
        .errors(TARGET_ERRORS),
        get(list_probes),
    )]
}
