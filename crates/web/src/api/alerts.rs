//! Alerts through the API: the current ones, the history of their state
//! changes, and the rules with the state of each of their alerts.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::routing::get;
use axum::Json;
use llmwatch_core::alerts::{AlertState, Op};
use llmwatch_engine::alerts::{CurrentAlert, Rule};
use llmwatch_engine::sinks::notify::rfc3339_ms;
use llmwatch_store::AlertEventRow;
use schemars::JsonSchema;
use serde::Serialize;

use super::params::{params, RawQuery};
use super::route_doc::{query, Route, RouteDoc, CURSOR, LIMIT, NAME};
use super::ApiError;
use crate::AppState;

/// An alert's state as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateName {
    /// Only in the history: the condition stopped holding before `for`.
    Inactive,
    Pending,
    Firing,
    Resolved,
}

impl From<AlertState> for StateName {
    fn from(state: AlertState) -> StateName {
        match state {
            AlertState::Inactive => StateName::Inactive,
            AlertState::Pending => StateName::Pending,
            AlertState::Firing => StateName::Firing,
            AlertState::Resolved => StateName::Resolved,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AlertList {
    pub alerts: Vec<Alert>,
}

/// One rule on one target, pending, firing or recently resolved.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Alert {
    pub rule: String,
    pub target: String,
    pub state: StateName,
    /// The last value seen.
    pub value: Option<f64>,
    pub active_at_ms: Option<i64>,
    pub active_at: Option<String>,
    pub fired_at_ms: Option<i64>,
    pub fired_at: Option<String>,
    pub resolved_at_ms: Option<i64>,
    pub resolved_at: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl Alert {
    fn new(current: CurrentAlert) -> Alert {
        let alert = current.alert;
        Alert {
            rule: current.rule,
            target: current.target,
            state: alert.state.into(),
            value: alert.value,
            active_at_ms: alert.active_at_ms,
            active_at: alert.active_at_ms.map(rfc3339_ms),
            fired_at_ms: alert.fired_at_ms,
            fired_at: alert.fired_at_ms.map(rfc3339_ms),
            resolved_at_ms: alert.resolved_at_ms,
            resolved_at: alert.resolved_at_ms.map(rfc3339_ms),
            labels: current.labels,
            annotations: current.annotations,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AlertHistory {
    /// Newest first.
    pub events: Vec<AlertEvent>,
    /// The next page's cursor, `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One state change of an alert.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AlertEvent {
    pub id: i64,
    pub at_ms: i64,
    pub at: String,
    pub rule: String,
    pub target: String,
    pub state: StateName,
    pub value: Option<f64>,
    /// As stored with the event; `null` if unreadable.
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
}

impl AlertEvent {
    fn new(event: AlertEventRow) -> AlertEvent {
        AlertEvent {
            id: event.id,
            at_ms: event.ts_ms,
            at: rfc3339_ms(event.ts_ms),
            rule: event.rule,
            target: event.target,
            state: event.state.into(),
            value: event.value,
            labels: serde_json::from_str(&event.labels_json).ok(),
            annotations: serde_json::from_str(&event.annotations_json).ok(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RuleList {
    pub rules: Vec<RuleAnswer>,
    /// Evaluations of every rule since the daemon started.
    pub evaluations: u64,
}

/// A rule as configured, with the state of each of its alerts.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "Rule", deny_unknown_fields)]
pub struct RuleAnswer {
    pub name: String,
    pub signal: &'static str,
    pub unit: &'static str,
    pub op: Comparison,
    #[schemars(with = "Option<f64>")]
    pub threshold: f64,
    pub window_s: f64,
    pub for_s: f64,
    pub keep_firing_for_s: f64,
    /// Only this target; `null` for every target.
    pub target: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub alerts: Vec<RuleAlert>,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub enum Comparison {
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

impl From<Op> for Comparison {
    fn from(op: Op) -> Comparison {
        match op {
            Op::Gt => Comparison::Gt,
            Op::Ge => Comparison::Ge,
            Op::Lt => Comparison::Lt,
            Op::Le => Comparison::Le,
            Op::Eq => Comparison::Eq,
            Op::Ne => Comparison::Ne,
        }
    }
}

/// One of a rule's alerts that is not inactive.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RuleAlert {
    pub target: String,
    pub state: StateName,
    pub value: Option<f64>,
}

impl RuleAnswer {
    fn new(rule: &Rule, current: &[CurrentAlert]) -> RuleAnswer {
        RuleAnswer {
            name: rule.name.clone(),
            signal: rule.signal.as_str(),
            unit: rule.signal.unit(),
            op: rule.condition.op.into(),
            threshold: rule.condition.threshold,
            window_s: rule.window.as_secs_f64(),
            for_s: rule.condition.for_ms as f64 / 1000.0,
            keep_firing_for_s: rule.condition.keep_firing_for_ms as f64 / 1000.0,
            target: rule.target.clone(),
            labels: rule.labels.clone(),
            annotations: rule.annotations.clone(),
            alerts: current
                .iter()
                .filter(|a| a.rule == rule.name && a.alert.state != AlertState::Inactive)
                .map(|a| RuleAlert {
                    target: a.target.clone(),
                    state: a.alert.state.into(),
                    value: a.alert.value,
                })
                .collect(),
        }
    }
}

async fn list_alerts(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<AlertList>, ApiError> {
    let p = params(query, &["state"])?;
    let wanted = p
        .get("state")
        .map(|s| match s.parse::<AlertState>() {
            Ok(state) if state != AlertState::Inactive => Ok(state),
            _ => Err(ApiError::bad_request(format!(
                "state: expected pending, firing or resolved, found {s:?}"
            ))),
        })
        .transpose()?;
    let alerts = state
        .api
        .alerts
        .current()
        .into_iter()
        .filter(|a| a.alert.state != AlertState::Inactive)
        .filter(|a| wanted.is_none_or(|w| a.alert.state == w))
        .map(Alert::new)
        .collect();
    Ok(Json(AlertList { alerts }))
}

async fn alert_history(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<AlertHistory>, ApiError> {
    let p = params(query, &["rule", "target", "limit", "cursor"])?;
    let limit = p.limit(100, 1000)?;
    let cursor = p.cursor()?;
    let target = p.get("target");
    if let Some(Err(why)) = target.map(llmwatch_config::check_name) {
        return Err(ApiError::bad_request(format!("target: {why}")));
    }
    let mut events = state
        .api
        .store
        .alert_events(p.get("rule"), target, cursor, limit + 1)
        .await?;
    let more = events.len() > limit as usize;
    events.truncate(limit as usize);
    let next_cursor = more
        .then(|| events.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(Json(AlertHistory {
        events: events.into_iter().map(AlertEvent::new).collect(),
        next_cursor,
    }))
}

async fn list_rules(
    State(state): State<AppState>,
    query: RawQuery,
) -> Result<Json<RuleList>, ApiError> {
    params(query, &[])?;
    let current = state.api.alerts.current();
    let rules = state
        .api
        .alerts
        .rules
        .iter()
        .map(|rule| RuleAnswer::new(rule, &current))
        .collect();
    Ok(Json(RuleList {
        rules,
        evaluations: state.api.alerts.evaluations(),
    }))
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            RouteDoc::get::<AlertList>(
                "/api/v1/alerts",
                "listAlerts",
                "Current alerts (pending, firing, recently resolved).",
            )
            .params(vec![query(
                "state",
                r#"{"type": "string", "enum": ["pending", "firing", "resolved"]}"#,
                "Only alerts in this state: pending, firing or resolved.",
            )]),
            get(list_alerts),
        ),
        (
            RouteDoc::get::<AlertHistory>(
                "/api/v1/alerts/history",
                "alertHistory",
                "Alert state changes, newest first, paginated.",
            )
            .params(vec![
                query("rule", "string", "Only this rule."),
                query("target", NAME, "Only this target."),
                LIMIT,
                CURSOR,
            ]),
            get(alert_history),
        ),
        (
            RouteDoc::get::<RuleList>(
                "/api/v1/rules",
                "listRules",
                "Alert rules with the state of each of their alerts.",
            ),
            get(list_rules),
        ),
    ]
}
