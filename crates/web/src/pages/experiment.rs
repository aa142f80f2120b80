//! `/experiments/{id}`: an experiment's progress and, once done, its
//! report — the same self-contained HTML `llmwatch experiment` writes,
//! reloading itself every few seconds while the experiment runs.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use llmwatch_core::analysis::experiment::ExperimentResult;
use llmwatch_engine::runners::experiment::render::render_html;

use super::error_response;
use crate::AppState;

/// Seconds between reloads of a running experiment's page.
const RELOAD_S: u32 = 5;

pub async fn handler(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let Some(id) = id.parse::<i64>().ok().filter(|id| *id > 0) else {
        return error_response(
            StatusCode::NOT_FOUND,
            "No such experiment",
            format!("{id:?} is not an experiment id"),
        );
    };
    let row = match state.api.store.experiment(id).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return error_response(
                StatusCode::NOT_FOUND,
                "No such experiment",
                format!("no experiment has id {id}"),
            )
        }
        Err(err) => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Store error",
                err.to_string(),
            )
        }
    };
    let result: ExperimentResult = match serde_json::from_str(&row.result_json) {
        Ok(r) => r,
        Err(err) => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Unreadable experiment",
                format!("experiment {id}: {err}"),
            )
        }
    };
    let mut html = render_html(&ExperimentResult {
        status: row.status.clone(),
        ..result
    });
    if row.status == "running" {
        html = html.replacen(
            "<meta charset=\"utf-8\">",
            &format!(
                "<meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{RELOAD_S}\">"
            ),
            1,
        );
    }
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}
