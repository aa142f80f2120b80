//! The REST API under `/api/v1` (JSON) and the service's own `/metrics`.
//!
//! Each resource's module owns its routes (`routes()`: documentation and
//! handler together, [`route_doc`]) and its answer types, whose JSON Schemas
//! are derived from them; [`routes`] gathers them for the router and the
//! OpenAPI document ([`openapi`]), so neither can drift from the handlers.
//! Handlers are thin: parse the query into valid values ([`params`]), ask
//! the store or the engine, answer a typed value.
//!
//! Errors are `{"error": {"status": 400, "message": "…"}}` with the status
//! that fits ([`error`]). Long lists take `limit` and `cursor` and answer
//! `next_cursor` (null on the last page). Times are RFC 3339 or Unix
//! seconds in requests; answers carry both (`…_ms` and an RFC 3339 string).

mod alerts;
pub mod error;
pub mod experiments;
pub mod fields;
mod live;
mod metrics;
pub mod openapi;
pub mod params;
mod passive;
pub mod predictions;
mod probes;
pub mod route_doc;
mod series;
mod sweeps;
mod targets;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

pub use self::error::{error_response, ApiError};
pub use self::route_doc::{In, ParamDoc, Route, RouteDoc};
pub use crate::state::api_context::ApiContext;
use crate::AppState;

/// Every route of the API, with its documentation and handler.
pub fn routes() -> Vec<Route> {
    [
        targets::routes(),
        series::routes(),
        probes::routes(),
        sweeps::routes(),
        alerts::routes(),
        openapi::routes(),
        live::routes(),
        passive::routes(),
        predictions::routes(),
        experiments::routes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The API router (under the caller's auth layer).
pub fn router() -> Router<AppState> {
    let mut router = Router::new();
    for (doc, handler) in routes() {
        router = router.route(doc.path, handler);
    }
    router.route("/metrics", get(metrics::own_metrics)).route(
        "/api/v1/{*rest}",
        axum::routing::any(|| async {
            error_response(
                StatusCode::NOT_FOUND,
                "no such API route (see /api/v1/openapi.json)",
            )
        }),
    )
}
