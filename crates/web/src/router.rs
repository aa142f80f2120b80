//! The HTTP surface of the daemon, composed here: `/healthz`, the dashboard
//! pages and their live updates ([`crate::pages`]), the embedded static
//! assets. Everything but `/healthz`, the static assets and the login page
//! is guarded by [`crate::auth`]; every state-changing request from another
//! site is refused.

use axum::middleware;
use axum::routing::get;
use axum::Router;

use crate::auth;
use crate::pages;
use crate::AppState;

pub fn router(state: AppState) -> Router {
    let guarded = Router::new()
        .merge(pages::router())
        .merge(crate::api::router())
        // Grafana's Prometheus data source: http://HOST:PORT/prometheus
        .merge(crate::prometheus::router())
        .route("/logout", get(auth::logout_page).post(auth::logout))
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
