//! llmwatch's web layer: the HTTP server (`serve`), the router and its
//! login/CSRF guard (`router`, `auth`), the dashboard pages with their
//! server-side charts and live updates (`pages`), the REST API with its
//! OpenAPI document (`api`) and llmwatch's own `/metrics` (`own_metrics`).
//!
//! It reads the store and the engine's shared state and starts sweeps
//! through the engine; it never scrapes, probes or evaluates alerts itself,
//! and never holds a secret in a page or an answer.

pub mod api;
pub mod auth;
pub mod latency_breakdown;
pub mod own_metrics;
pub mod pages;
pub mod prometheus;
pub mod router;
pub mod serve;
pub mod state;
pub mod urls;

pub use router::router;
pub use state::{AppState, PROBE_WINDOW_MS};
