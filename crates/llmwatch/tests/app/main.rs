//! llmwatch's integration tests, one binary: each module was a test binary
//! of its own, and each linked the whole daemon; one binary links it once.
//! Shared helpers (spawning a daemon, polling a condition with a deadline,
//! Chromium, Prometheus, background load) live in `common`.

mod common;

mod alerts;
mod api;
mod bench;
mod browser;
mod cli;
mod conversations;
mod daemon_probes;
mod daemon_scrape;
mod deploy;
mod discovery;
mod live_diagnosis;
mod observed;
mod own_metrics;
mod pages;
mod passive;
mod process;
mod prometheus_api;
mod prometheus_differential;
mod remote_write;
mod retention;
mod safety;
mod sweep;
mod sweep_schedule;
mod verdict_matrix;
