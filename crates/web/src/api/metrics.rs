//! llmwatch's own `/metrics` (Prometheus text), served beside the API
//! under the same auth.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::AppState;

pub(super) async fn own_metrics(State(state): State<AppState>) -> Response {
    let ctx = &state.api;
    match ctx
        .own_metrics
        .render(&ctx.store, &ctx.counters, &ctx.alerts, &|name| {
            state.pages.objectives_for(name).ttft_p95
        })
        .await
    {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the store: {err}\n"),
        )
            .into_response(),
    }
}
