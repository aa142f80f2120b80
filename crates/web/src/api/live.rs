//! The live diagnosis through the API: the current verdict (also inside
//! `/api/v1/targets/{name}`) and the timeline of its changes.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Json;
use llmwatch_core::analysis::{LiveKind, Verdict};
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_store::{LiveChangeRow, LiveVerdictRow, Store, SweepRow, TargetRow};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::params::{params, time_range, RawQuery};
use super::route_doc::{path, Route, RouteDoc, FROM, LIMIT, TARGET_ERRORS, TO};
use super::targets::find_target;
use super::ApiError;
use crate::AppState;

/// A stored live verdict: what limits the target now, over the window.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LiveVerdict {
    pub verdict: String,
    pub confidence: String,
    pub evidence: String,
    pub what_to_try: Option<String>,
    /// Windows behind the verdict.
    pub samples: i64,
    pub evaluated_ms: i64,
    pub evaluated: String,
}

impl LiveVerdict {
    fn new(row: &LiveVerdictRow) -> LiveVerdict {
        LiveVerdict {
            verdict: row.verdict.clone(),
            confidence: row.confidence.clone(),
            evidence: row.evidence.clone(),
            what_to_try: Some(row.what_to_try.clone()).filter(|t| !t.is_empty()),
            samples: row.samples,
            evaluated_ms: row.ts_ms,
            evaluated: rfc3339_ms(row.ts_ms),
        }
    }
}

/// The live verdict inside a target's answer, with its last finished
/// sweep's verdict beside it: one story, or why the two differ.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LiveBesideSweep {
    #[serde(flatten)]
    pub live: LiveVerdict,
    /// `null` without a finished sweep.
    pub sweep: Option<SweepBeside>,
}

/// A finished sweep's leading verdict beside the live one.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SweepBeside {
    pub id: i64,
    /// Its first finding that is not about the client; `null` for none.
    pub verdict: Option<String>,
    pub agrees: bool,
    pub note: String,
    pub ended_ms: Option<i64>,
    pub ended: Option<String>,
}

/// The live verdict and the timeline of its changes.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LiveTimeline {
    pub target: String,
    pub window_s: u64,
    /// `null` before the first evaluation.
    pub current: Option<LiveVerdict>,
    pub changes: Vec<LiveChange>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LiveChange {
    pub at_ms: i64,
    pub at: String,
    pub verdict: String,
    pub previous: Option<String>,
    pub confidence: String,
    pub evidence: String,
}

impl From<LiveChangeRow> for LiveChange {
    fn from(change: LiveChangeRow) -> LiveChange {
        LiveChange {
            at_ms: change.ts_ms,
            at: rfc3339_ms(change.ts_ms),
            verdict: change.verdict,
            previous: change.previous,
            confidence: change.confidence,
            evidence: change.evidence,
        }
    }
}

/// The target's current live verdict, for `/api/v1/targets/{name}`, with
/// its last finished sweep's verdict beside it (`null` before the first
/// evaluation).
pub(super) async fn live_beside_sweep(
    store: &Store,
    target: &TargetRow,
) -> Result<Option<LiveBesideSweep>, ApiError> {
    let Some(live) = store.live_verdict(target.id).await? else {
        return Ok(None);
    };
    let sweep = store.last_finished_sweep_of(&target.name).await?;
    Ok(Some(LiveBesideSweep {
        live: LiveVerdict::new(&live),
        sweep: sweep.as_ref().map(|sweep| sweep_beside(&live, sweep)),
    }))
}

/// The sweep's leading verdict (its first finding that is not about the
/// client) beside the live one.
fn sweep_beside(live: &LiveVerdictRow, sweep: &SweepRow) -> SweepBeside {
    let verdict: Option<String> = sweep
        .verdict_json
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|v| {
            v.get("findings")?
                .as_array()?
                .iter()
                .filter_map(|f| f.get("verdict")?.as_str())
                .find(|name| *name != Verdict::ClientBound.name())
                .map(str::to_string)
        });
    let live_name = LiveKind::from_code(&live.verdict).map(LiveKind::name);
    let agrees = match (&verdict, live_name) {
        (Some(sweep), Some(live)) => sweep == live,
        (None, Some(live)) => live == LiveKind::Healthy.name(),
        _ => false,
    };
    let sweep_words = verdict
        .clone()
        .unwrap_or_else(|| "no bottleneck".to_string());
    let note = if agrees {
        format!(
            "the last sweep (#{}) found the same: {sweep_words}",
            sweep.id
        )
    } else {
        let live_words = live_name.unwrap_or(live.verdict.as_str());
        format!(
            "the last sweep (#{}) found {sweep_words}, the live window says {live_words}: the \
             sweep read a controlled ramp to its highest load, the live window reads the traffic \
             of its last minutes, so a limit the traffic has not reached shows only in the sweep, \
             and a change of the server's settings since the sweep (compare its card with the \
             server's) shows only live",
            sweep.id
        )
    };
    SweepBeside {
        id: sweep.id,
        verdict,
        agrees,
        note,
        ended_ms: sweep.ended_ms,
        ended: sweep.ended_ms.map(rfc3339_ms),
    }
}

async fn live_timeline(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: RawQuery,
) -> Result<Json<LiveTimeline>, ApiError> {
    let p = params(query, &["from", "to", "limit"])?;
    let (from, to) = time_range(&p)?;
    let limit = p.limit(100, 1000)?;
    let store = &state.api.store;
    let target = find_target(store, &name).await?;
    let current = store.live_verdict(target.id).await?;
    let changes = store
        .live_changes(target.id, from, to, i64::from(limit))
        .await?
        .into_iter()
        .map(LiveChange::from)
        .collect();
    Ok(Json(LiveTimeline {
        target: target.name,
        window_s: state.api.config.server.live_window.as_secs(),
        current: current.as_ref().map(LiveVerdict::new),
        changes,
    }))
}

/// The timeline route, with its documentation.
pub(super) fn routes() -> Vec<Route> {
    vec![(
        RouteDoc::get::<LiveTimeline>(
            "/api/v1/targets/{name}/live",
            "getLiveDiagnosis",
            "A target's live verdict (what limits it now, over the sliding window) and the timeline of verdict changes.",
        )
        .params(vec![path("name", "string", "Target name."), FROM, TO, LIMIT])
        .errors(TARGET_ERRORS),
        get(live_timeline),
    )]
}
