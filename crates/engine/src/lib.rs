//! llmwatch's daemon engine: everything that runs on a clock against the
//! watched servers and the store.
//!
//! - `sources`: engine and GPU scrapes (HTTP, NVML) into the store.
//! - `runners`: the canary prober, load sweeps and their schedule, the live
//!   diagnosis.
//! - `alerts`: rule evaluation over stored signals and verdicts.
//! - `sinks`: where alerts go (webhooks, Alertmanager), and remote write.
//! - `targets`: the watched targets now (configured and discovered).
//!
//! It never serves HTTP or renders pages (that is `llmwatch-web`) and never
//! parses command lines (the binary). Domain decisions are made by the pure
//! functions of `llmwatch-core`; this crate only moves data between them,
//! the network and the store.

pub mod alerts;
pub mod autoscale;
pub mod clock;
pub mod events;
pub mod observed;
pub mod passive;
pub mod runners;
pub mod sinks;
pub mod sources;
pub mod targets;
pub mod telemetry;
pub mod ticker;

pub use clock::now_ms;

/// Why part of the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The alert rules do not hold together (the message names the rule).
    #[error("{0}")]
    Rules(String),
    #[error("{field}: {message}")]
    Notifier { field: String, message: String },
    #[error("{field}: {message}")]
    RemoteWrite { field: String, message: String },
}
