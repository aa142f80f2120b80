//! The HTTP surface of the daemon: `/healthz` and a plain server-rendered
//! status page at `/` (every target, up/down, its latest signals). Guarded by
//! an optional bearer token.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use llmwatch_store::Store;

/// The window of the rolling probe signals shown on pages.
pub const PROBE_WINDOW_MS: i64 = 5 * 60 * 1000;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub token: Option<Arc<str>>,
}

pub fn router(state: AppState) -> Router {
    let guarded = Router::new()
        .route("/", get(overview))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
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

async fn overview(State(state): State<AppState>) -> Response {
    match render_overview(&state.store).await {
        Ok(html) => Html(html).into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the store: {err}\n"),
        )
            .into_response(),
    }
}

async fn render_overview(store: &Store) -> Result<String, llmwatch_store::StoreError> {
    let mut html = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"5\"><title>llmwatch</title>\
         <style>body{font-family:system-ui,sans-serif;margin:1rem}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}.up{color:#0a6}.down{color:#c33}</style>\
         </head><body><h1>llmwatch</h1>",
    );
    for target in store.targets().await? {
        let health = store.scrape_health(target.id, 1).await?;
        let (state, class, error) = match health.first() {
            Some(h) if h.up => ("up", "up", h.error.clone()),
            Some(h) => ("down", "down", h.error.clone()),
            None => ("pending", "", None),
        };
        let _ = write!(
            html,
            "<section><h2>{} <small class=\"{class}\">{state}</small></h2><p>{} · {} · engine {}</p>",
            escape(&target.name),
            escape(target.kind.as_str()),
            escape(&target.url),
            escape(target.engine.as_deref().unwrap_or("unknown")),
        );
        if let Some(error) = error {
            let _ = write!(html, "<p>last error: {}</p>", escape(&error));
        }
        html.push_str("<table><tr><th>signal</th><th>value</th><th>unit</th></tr>");
        let mut signals = store.latest_signals(target.id).await?;
        signals.extend(
            store
                .probe_signals(target.id, crate::scrape::now_ms(), PROBE_WINDOW_MS)
                .await?,
        );
        for (signal, value) in signals {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                signal.as_str(),
                format_value(value),
                signal.unit()
            );
        }
        html.push_str("</table></section>");
    }
    html.push_str("</body></html>");
    Ok(html)
}

fn format_value(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.4}")
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

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
