//! llmwatch's own HTTP server, with the limits a server beside production
//! needs: a deadline for a request's headers (a slowloris client that
//! trickles them in is cut off, and never holds the dashboard), a deadline
//! for each response, a cap on requests in flight (past it: 503 at once),
//! a body limit, and graceful shutdown that lets answers in flight finish.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower_http::timeout::TimeoutLayer;

/// The limits of the daemon's HTTP server.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Time allowed to send a request's headers.
    pub header_read_timeout: Duration,
    /// Time allowed to produce a response's headers (an SSE stream may then
    /// run on).
    pub request_timeout: Duration,
    /// Requests handled at once; more are answered 503 at once.
    pub max_in_flight: usize,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for answers in flight.
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_in_flight: 256,
            max_body_bytes: 64 * 1024,
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

/// `app` with the per-request limits applied.
pub fn limited(app: Router, limits: &ServeLimits) -> Router {
    let in_flight = Arc::new(Semaphore::new(limits.max_in_flight));
    app.layer(middleware::from_fn(move |request: Request, next: Next| {
        let in_flight = in_flight.clone();
        async move { shed_load(&in_flight, request, next).await }
    }))
    .layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        limits.request_timeout,
    ))
    .layer(DefaultBodyLimit::max(limits.max_body_bytes))
}

async fn shed_load(in_flight: &Semaphore, request: Request, next: Next) -> Response {
    match in_flight.try_acquire() {
        Ok(_permit) => next.run(request).await,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "1")],
            "too many requests in flight; try again\n",
        )
            .into_response(),
    }
}

/// Serves `app` on `listener` until `shutdown` turns true, then lets the
/// answers in flight finish (up to `limits.shutdown_grace`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let app = limited(app, &limits);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => break,
        };
        let (stream, _peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors, say: wait a moment, keep serving.
                tracing::warn!(error = %err, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // The dashboard's live updates stream (SSE): send each event at once.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("answers still in flight at shutdown were cut off");
    }
}
