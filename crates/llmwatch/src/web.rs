//! The HTTP surface of the daemon, composed here: `/healthz`, the dashboard
//! pages and their live updates ([`crate::pages`]), the embedded static
//! assets. Everything but `/healthz`, the static assets and the login page
//! is guarded by [`crate::auth`]; every state-changing request from another
//! site is refused.

use std::sync::Arc;

use axum::extract::State;
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Router};
use llmwatch_store::Store;

use crate::auth::{self, Auth, CsrfToken};
use crate::pages::{self, PagesConfig};

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
    pub api: Arc<crate::api::ApiContext>,
    /// The live overview every `/events` client shares.
    pub live: pages::events::LiveCache,
}

pub fn router(state: AppState) -> Router {
    let guarded = Router::new()
        .merge(pages::router())
        .merge(crate::api::router())
        .route("/logout", get(logout_page).post(auth::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_login,
        ));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/login", get(auth::login_page).post(auth::login))
        .merge(pages::static_router())
        .merge(guarded)
        .layer(middleware::from_fn(auth::reject_cross_site))
        .with_state(state)
}

#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "logout.html")]
struct LogoutPage {
    csrf: String,
}

async fn logout_page(
    State(state): State<AppState>,
    csrf: Option<Extension<CsrfToken>>,
) -> Response {
    match csrf {
        Some(Extension(CsrfToken(csrf))) if state.auth.token_required() => LogoutPage {
            csrf: csrf.to_string(),
        }
        .into_response(),
        _ => Redirect::to("/").into_response(),
    }
}

/// Escapes text for HTML element and attribute content.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
