//! The dashboard: server-rendered pages (askama templates from the top-level
//! `templates/`), SVG charts drawn with plotters, live updates over SSE at
//! `/events`, and the static assets (top-level `static/`) embedded in the
//! binary. Every page reads with JavaScript off; `static/live.js` only makes
//! it live.
//!
//! Handlers are thin: each page has a pure-ish `*_page(store, config, …)`
//! function that reads the store and returns the template value (tests and
//! the render benchmark call those), and the handler renders it.

pub mod alerts;
pub mod charts;
pub mod events;
pub mod experiment;
pub mod format;
pub use crate::state::live_cache;
pub mod live_card;
pub mod observed;
pub mod overview;
pub mod passive;
pub mod predict;
pub mod sweep;
pub mod target;

use std::sync::Arc;

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

pub use crate::state::pages_config::{PageTarget, PagesConfig, TargetObjectives};
use crate::AppState;

/// The page routes (mounted behind the bearer-token layer by `web::router`).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::handler))
        .route("/events", get(events::handler))
        .route("/targets/{name}", get(target::handler))
        .route("/targets/{name}/charts/{file}", get(target::chart_download))
        .route(
            "/targets/{name}/passive/{file}",
            get(passive::chart_download),
        )
        .route(
            "/sweeps",
            get(sweep::list_handler).post(sweep::start_handler),
        )
        .route("/sweeps/{id}", get(sweep::handler))
        .route(
            "/sweeps/{id}/cancel",
            axum::routing::post(sweep::cancel_handler),
        )
        .route("/sweeps/{id}/charts/{file}", get(sweep::chart_download))
        .route(
            "/sweeps/{id}/predict",
            axum::routing::post(predict::start_handler),
        )
        .route("/predictions/{id}", get(predict::handler))
        .route("/compare", get(sweep::compare_handler))
        .route("/compare/charts/{file}", get(sweep::compare_chart_download))
        .route("/alerts", get(alerts::handler))
        .route("/experiments/{id}", get(experiment::handler))
}

/// Static assets, embedded from the top-level `static/` (no token needed:
/// a stylesheet and a script, nothing about the targets).
pub fn static_router() -> Router<AppState> {
    Router::new().route("/static/{file}", get(static_file))
}

#[derive(rust_embed::RustEmbed)]
#[folder = "../../static/"]
struct Assets;

async fn static_file(Path(file): Path<String>) -> Response {
    let Some(asset) = Assets::get(&file) else {
        return (StatusCode::NOT_FOUND, "no such asset\n").into_response();
    };
    let mime = match file.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    };
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        asset.data.into_owned(),
    )
        .into_response()
}

/// An error page: status, message in plain words, escaped by askama.
#[derive(askama::Template, askama_web::WebTemplate)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub title: String,
    pub message: String,
}

/// The refusal of a form whose CSRF token is missing or wrong, if it is.
pub fn expired_form(
    csrf: Option<&axum::Extension<crate::auth::CsrfToken>>,
    presented: &str,
) -> Option<Response> {
    (!crate::auth::csrf_ok(csrf, presented)).then(|| {
        error_response(
            StatusCode::FORBIDDEN,
            "Form expired",
            "the form's CSRF token is missing or wrong: reload the page and try again",
        )
    })
}

pub fn error_response(status: StatusCode, title: &str, message: impl Into<String>) -> Response {
    let page = ErrorPage {
        title: title.to_string(),
        message: message.into(),
    };
    (status, page).into_response()
}

pub fn store_error(err: impl std::fmt::Display) -> Response {
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Store error",
        format!("cannot read the store: {err}"),
    )
}

/// A chart download: `NAME.svg`, `NAME.csv` or `NAME.json`.
pub fn chart_file_response(chart: &charts::Chart, ext: &str) -> Response {
    let disposition = format!("inline; filename=\"{}.{ext}\"", chart.id);
    match ext {
        "svg" => (
            [
                (header::CONTENT_TYPE, "image/svg+xml".to_string()),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            charts::render_svg(chart),
        )
            .into_response(),
        "csv" => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            chart.to_csv(),
        )
            .into_response(),
        "json" => match serde_json::to_string(chart) {
            Ok(body) => (
                [
                    (header::CONTENT_TYPE, "application/json".to_string()),
                    (header::CONTENT_DISPOSITION, disposition),
                ],
                body,
            )
                .into_response(),
            Err(err) => store_error(err),
        },
        _ => error_response(
            StatusCode::NOT_FOUND,
            "Not found",
            "charts download as .svg, .csv or .json",
        ),
    }
}

/// Splits `ttft.svg` into (`ttft`, `svg`).
pub fn split_file(file: &str) -> Option<(&str, &str)> {
    file.rsplit_once('.')
}

/// A chart on a page: its SVG (trusted: drawn here, text escaped by the
/// SVG backend) and its download links.
pub struct ChartView {
    pub id: String,
    pub title: String,
    pub svg: String,
    /// Base of the download URLs, e.g. `/targets/a/charts/ttft`; the
    /// template adds `.svg`, `.csv`, `.json` and `query`.
    pub href: String,
    /// Query string for the downloads (`?range=1h`), or empty.
    pub query: String,
}

impl ChartView {
    pub fn new(chart: &charts::Chart, href: String, query: String) -> ChartView {
        ChartView {
            id: chart.id.clone(),
            title: chart.title.clone(),
            svg: charts::render_svg(chart),
            href,
            query,
        }
    }
}

pub use format::escape_text;

pub use crate::urls::{path_segment, query_path};

/// Shared state for pages, built once.
pub type SharedPages = Arc<PagesConfig>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_objective_overrides_the_servers() {
        let toml = "[server]\nslo_ttft_p95 = \"1s\"\nslo_itl_p95 = \"50ms\"\n\
                    [[targets]]\nname = \"big\"\nurl = \"http://a\"\nslo_ttft_p95 = \"3s\"\n\
                    [[targets]]\nname = \"small\"\nurl = \"http://b\"\n";
        let config = llmwatch_config::Config::parse(toml, std::path::Path::new("t.toml")).unwrap();
        let pages = PagesConfig::from_config(&config);
        let big = pages.objectives_for("big");
        assert_eq!(big.ttft_p95, Some(3.0));
        assert_eq!(big.itl_p95, Some(0.05), "unset: the server's");
        let small = pages.objectives_for("small");
        assert_eq!(small.ttft_p95, Some(1.0));
        assert_eq!(pages.objectives_for("unknown"), small);
    }

    #[test]
    fn assets_are_embedded() {
        assert!(Assets::get("style.css").is_some());
        assert!(Assets::get("live.js").is_some());
    }
}
