//! The API's error answer, `{"error": {"status": 400, "message": "…"}}`,
//! and how store and query failures become one.

use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use llmwatch_store::StoreError;
use schemars::JsonSchema;
use serde::Serialize;

/// An error answer: a status and a message for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::CONFLICT,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> ApiError {
        match err {
            StoreError::BadRange(message) => ApiError::bad_request(message),
            other => {
                tracing::error!(error = %other, "API: store error");
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message: format!("cannot read the store: {other}"),
                }
            }
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(err: QueryRejection) -> ApiError {
        ApiError::bad_request(format!("malformed query string: {}", err.body_text()))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(self.status, &self.message)
    }
}

/// Every `/api/v1` error answer (the OpenAPI document's `Error`).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorAnswer<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorDetail<'a> {
    /// The HTTP status, repeated for clients that lost it.
    pub status: u16,
    pub message: &'a str,
}

/// A JSON error answer.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    let answer = ErrorAnswer {
        error: ErrorDetail {
            status: status.as_u16(),
            message,
        },
    };
    (status, Json(answer)).into_response()
}
