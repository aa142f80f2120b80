//! The alerts page: the configured rules, every alert's current state
//! (inactive, pending, firing, resolved) and the history of state changes.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use llmwatch_store::{Store, StoreError};

use super::format;
use super::{store_error, PagesConfig};
pub use crate::state::pages_config::RuleView;
use crate::AppState;

pub struct StateRow {
    pub rule: String,
    pub target: String,
    pub state: String,
    pub value: String,
    pub active_since: String,
    pub fired_at: String,
    pub last_eval: String,
}

pub struct EventRow {
    pub when: String,
    pub rule: String,
    pub target: String,
    pub state: String,
    pub value: String,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "alerts.html")]
pub struct AlertsPage {
    pub rules: Vec<RuleView>,
    pub states: Vec<StateRow>,
    pub events: Vec<EventRow>,
}

fn when(ms: Option<i64>) -> String {
    ms.map(format::datetime).unwrap_or_else(|| "–".into())
}

pub async fn alerts_page(store: &Store, config: &PagesConfig) -> Result<AlertsPage, StoreError> {
    let states = store
        .alert_states()
        .await?
        .into_iter()
        .map(|a| StateRow {
            rule: a.rule,
            target: a.target,
            state: a.alert.state.as_str().to_string(),
            value: a
                .alert
                .value
                .map(format::number)
                .unwrap_or_else(|| "–".into()),
            active_since: when(a.alert.active_at_ms),
            fired_at: when(a.alert.fired_at_ms),
            last_eval: format::datetime(a.last_eval_ms),
        })
        .collect();
    let events = store
        .alert_events(None, None, None, 200)
        .await?
        .into_iter()
        .map(|e| EventRow {
            when: format::datetime(e.ts_ms),
            rule: e.rule,
            target: e.target,
            state: e.state.as_str().to_string(),
            value: e.value.map(format::number).unwrap_or_else(|| "–".into()),
        })
        .collect();
    Ok(AlertsPage {
        rules: config.rules.clone(),
        states,
        events,
    })
}

pub async fn handler(State(state): State<AppState>) -> Response {
    match alerts_page(&state.store, &state.pages).await {
        Ok(page) => page.into_response(),
        Err(err) => store_error(err),
    }
}
