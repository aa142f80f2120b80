//! The passive saturation curve through the API: production windows grouped
//! by concurrency, the knee (or why none) and the highest concurrency that
//! met the objectives, beside the last finished sweep's verdict.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Json;
use llmwatch_core::analysis::{
    Objectives, PassiveCurve, PassivePoint, DEFAULT_PASSIVE_RANGE_S, DEFAULT_PASSIVE_WINDOW_S,
    MIN_POINTS_FOR_KNEE, MIN_WINDOWS_FOR_KNEE, MIN_WINDOWS_PER_POINT,
};
use llmwatch_engine::now_ms;
use llmwatch_engine::passive::{read_passive_curve, PassiveQuery};
use llmwatch_engine::sinks::notify::rfc3339_ms;
use schemars::JsonSchema;
use serde::Serialize;

use super::params::{params, RawQuery};
use super::route_doc::{path, query, Route, RouteDoc, DURATION, NAME, TARGET_ERRORS, TIME};
use super::sweeps::SweepSummary;
use super::targets::find_target;
use super::ApiError;
use crate::AppState;

/// The passive saturation curve of a target over a range.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PassiveAnswer {
    pub target: String,
    pub from_ms: i64,
    pub from: String,
    pub to_ms: i64,
    pub to: String,
    pub window_s: f64,
    pub objectives: PassiveObjectives,
    pub minimums: Minimums,
    #[serde(flatten)]
    pub curve: Curve,
    /// The last finished sweep, to read beside the curve.
    pub last_sweep: Option<SweepSummary>,
}

/// The target's objectives the points are judged against.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PassiveObjectives {
    pub ttft_p95_s: Option<f64>,
    pub itl_p95_s: Option<f64>,
}

/// The fewest windows and points behind a point and a knee.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Minimums {
    pub windows_per_point: usize,
    pub points_for_knee: usize,
    pub windows_for_knee: usize,
}

/// The curve: windows grouped by concurrency, its knee or why none, the
/// highest concurrency that met the objectives.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Curve {
    pub windows: usize,
    pub idle_windows: usize,
    pub points: Vec<CurvePoint>,
    pub knee: Option<Knee>,
    pub no_knee: Option<NoKneeAnswer>,
    pub max_sustainable: Option<Sustainable>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CurvePoint {
    pub concurrency: f64,
    pub low: f64,
    pub high: f64,
    pub windows: usize,
    pub supported: bool,
    pub generation_tokens_per_s: Option<f64>,
    pub requests_per_s: Option<f64>,
    pub server_ttft_p95_s: Option<f64>,
    pub server_itl_p95_s: Option<f64>,
    pub meets_objectives: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Knee {
    pub concurrency: f64,
    pub windows: usize,
    pub generation_tokens_per_s: Option<f64>,
    #[schemars(with = "Option<f64>")]
    pub gain_per_doubling: f64,
    pub description: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "NoKnee", deny_unknown_fields)]
pub struct NoKneeAnswer {
    pub reason: &'static str,
    pub description: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Sustainable {
    pub concurrency: f64,
    pub windows: usize,
}

/// A finite value, else `None` (`null`).
fn finite(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite())
}

impl From<&PassivePoint> for CurvePoint {
    fn from(p: &PassivePoint) -> CurvePoint {
        CurvePoint {
            concurrency: p.concurrency,
            low: p.low,
            high: p.high,
            windows: p.windows,
            supported: p.supported,
            generation_tokens_per_s: finite(p.generation_tps),
            requests_per_s: finite(p.request_rate),
            server_ttft_p95_s: finite(p.ttft_p95),
            server_itl_p95_s: finite(p.itl_p95),
            meets_objectives: p.meets_objectives,
        }
    }
}

impl Curve {
    /// The curve as the API answers it (pages and tests read the same fields).
    pub fn new(curve: &PassiveCurve) -> Curve {
        let (knee, no_knee) = match &curve.knee {
            Ok(k) => {
                let point = &curve.points[k.point];
                let knee = Knee {
                    concurrency: k.concurrency,
                    windows: point.windows,
                    generation_tokens_per_s: finite(point.generation_tps),
                    gain_per_doubling: k.saturation.gain_per_doubling,
                    description: k.saturation.describe(),
                };
                (Some(knee), None)
            }
            Err(why) => {
                let no_knee = NoKneeAnswer {
                    reason: why.code(),
                    description: why.describe(),
                };
                (None, Some(no_knee))
            }
        };
        Curve {
            windows: curve.windows,
            idle_windows: curve.idle_windows,
            points: curve.points.iter().map(CurvePoint::from).collect(),
            knee,
            no_knee,
            max_sustainable: curve.sustainable.map(|s| Sustainable {
                concurrency: s.concurrency,
                windows: curve.points[s.point].windows,
            }),
        }
    }
}

async fn passive(
    State(state): State<AppState>,
    Path(name): Path<String>,
    raw: RawQuery,
) -> Result<Json<PassiveAnswer>, ApiError> {
    let p = params(raw, &["from", "to", "window"])?;
    let to = p.time("to")?.unwrap_or_else(now_ms);
    let range_ms = i64::try_from(DEFAULT_PASSIVE_RANGE_S * 1000).unwrap_or(i64::MAX);
    let from = p
        .time("from")?
        .unwrap_or(to.saturating_sub(range_ms))
        .min(to);
    let window = match p.duration_ms("window")? {
        Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(1)),
        None => Duration::from_secs(DEFAULT_PASSIVE_WINDOW_S),
    };
    let store = &state.api.store;
    let target = find_target(store, &name).await?;
    let own = state.pages.objectives_for(&target.name);
    let objectives = Objectives {
        ttft_p95: own.ttft_p95,
        itl_p95: own.itl_p95,
        ..Objectives::default()
    };
    let query = PassiveQuery {
        target_id: target.id,
        from_ms: from,
        to_ms: to,
        window,
    };
    let (curve, window_ms) = read_passive_curve(store, &query, &objectives).await?;
    let last_sweep = store.last_finished_sweep_of(&target.name).await?;
    Ok(Json(PassiveAnswer {
        target: target.name,
        from_ms: from,
        from: rfc3339_ms(from),
        to_ms: to,
        to: rfc3339_ms(to),
        window_s: window_ms as f64 / 1000.0,
        objectives: PassiveObjectives {
            ttft_p95_s: objectives.ttft_p95,
            itl_p95_s: objectives.itl_p95,
        },
        minimums: Minimums {
            windows_per_point: MIN_WINDOWS_PER_POINT,
            points_for_knee: MIN_POINTS_FOR_KNEE,
            windows_for_knee: MIN_WINDOWS_FOR_KNEE,
        },
        curve: Curve::new(&curve),
        last_sweep: last_sweep.as_ref().map(SweepSummary::new),
    }))
}

/// The passive-curve route, with its documentation.
pub(super) fn routes() -> Vec<Route> {
    vec![(
        RouteDoc::get::<PassiveAnswer>(
            "/api/v1/targets/{name}/passive",
            "getPassiveCurve",
            "A target's passive saturation curve from production traffic: windows grouped by concurrency (running + waiting), generation tokens/s and server p95 TTFT/ITL per level with the windows behind each, the knee (or why none) and the highest concurrency that met the objectives, beside the last finished sweep's verdict.",
        )
        .params(vec![
            path("name", NAME, "Target name."),
            query(
                "from",
                TIME,
                "Start, RFC 3339 or Unix seconds (default: 7 days before `to`).",
            ),
            query("to", TIME, "End, RFC 3339 or Unix seconds (default: now)."),
            query(
                "window",
                DURATION,
                "Window length, e.g. `60s` or seconds (default 60 s; raised so the range holds at most 10 080 windows).",
            ),
        ])
        .errors(TARGET_ERRORS),
        get(passive),
    )]
}
