//! The HTTP surface of the daemon, composed here: `/healthz`, the dashboard
//! pages and their live updates ([`crate::pages`]), the embedded static
//! assets. Everything but `/healthz` and the static assets is guarded by an
//! optional bearer token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use llmwatch_store::Store;

use crate::pages::{self, PagesConfig};

/// The window of the rolling probe signals shown on pages.
pub const PROBE_WINDOW_MS: i64 = 5 * 60 * 1000;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub token: Option<Arc<str>>,
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
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(pages::static_router())
        .merge(guarded)
        .with_state(state)
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(expected) = &state.token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => {
            next.run(request).await
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token\n",
        )
            .into_response(),
    }
}

/// Compares without an early exit, so timing does not leak the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
