//! What every handler shares: the store, the login guard, the pages'
//! config and the API context.

use std::sync::Arc;

use axum::extract::FromRef;
use llmwatch_store::Store;

pub mod api_context;
pub mod experiment_slot;
pub mod live_cache;
pub mod pages_config;
pub mod passive_cache;
pub mod predictions;
pub mod session;

use api_context::ApiContext;
use live_cache::LiveCache;
use pages_config::PagesConfig;
use session::Auth;

/// The window of the rolling probe signals shown on pages.
pub const PROBE_WINDOW_MS: i64 = 5 * 60 * 1000;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// Who may use the HTTP surface: token, browser sessions, CSRF.
    pub auth: Arc<Auth>,
    /// What the pages need from the config (objectives, GPU links, …).
    pub pages: Arc<PagesConfig>,
    /// The REST API, `/metrics` and the alert engine's view.
    pub api: Arc<ApiContext>,
    /// The live overview every `/events` client shares.
    pub live: LiveCache,
}

/// Handlers that need only the store (the Prometheus API) take `State<Store>`.
impl FromRef<AppState> for Store {
    fn from_ref(state: &AppState) -> Store {
        state.store.clone()
    }
}
