//! The list of sweeps, with the form that starts one.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use llmwatch_store::Store;

use crate::auth::CsrfToken;
use crate::pages::format;
use crate::pages::{store_error, PagesConfig};
use crate::AppState;

pub struct SweepListRow {
    pub id: i64,
    pub target: String,
    pub started: String,
    pub status: String,
    pub stop_reason: String,
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "sweeps.html")]
pub struct SweepListPage {
    pub sweeps: Vec<SweepListRow>,
    pub targets: Vec<String>,
    pub enabled: bool,
    pub running: bool,
    pub message: Option<String>,
    pub slo_ttft: String,
    pub slo_itl: String,
    /// The CSRF token the start form carries (set by the handler).
    pub csrf: String,
}

pub async fn sweep_list_page(
    store: &Store,
    config: &PagesConfig,
    running: bool,
    message: Option<String>,
) -> Result<SweepListPage, llmwatch_store::StoreError> {
    let sweeps = store
        .sweeps(100)
        .await?
        .into_iter()
        .map(|s| SweepListRow {
            id: s.id,
            target: s.target_name.unwrap_or(s.target_url),
            started: format::datetime(s.started_ms),
            status: s.status.as_str().to_string(),
            stop_reason: s.stop_reason.unwrap_or_default(),
        })
        .collect();
    Ok(SweepListPage {
        sweeps,
        targets: config.sweepable_targets(),
        enabled: config.sweeps_enabled,
        running,
        message,
        slo_ttft: format!("{}ms", config.slo_ttft_p95.unwrap_or(1.0) * 1000.0),
        slo_itl: format!("{}ms", config.slo_itl_p95.unwrap_or(0.05) * 1000.0),
        csrf: String::new(),
    })
}

pub async fn list_handler(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
) -> Response {
    // The daemon's one sweep slot (shared with the API and schedules).
    let running = state.api.sweeps.is_running();
    match sweep_list_page(&state.store, &state.pages, running, None).await {
        Ok(mut page) => {
            page.csrf = crate::auth::form_token(csrf);
            page.into_response()
        }
        Err(err) => store_error(err),
    }
}
