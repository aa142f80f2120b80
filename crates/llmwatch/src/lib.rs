//! The llmwatch binary's library half: config, scraping, the daemon, the web
//! server and the commands. Kept as a library so integration tests drive the
//! same code the binary runs.

pub mod alerts;
pub mod api;
pub mod auth;
pub mod bench_cmd;
pub mod canary;
pub mod config;
pub mod daemon;
pub mod db_cmd;
pub mod demo;
pub mod gpu_nvml;
pub mod inspect;
pub mod live_diagnosis;
pub mod logging;
pub mod own_metrics;
pub mod pages;
pub mod scrape;
pub mod serve;
pub mod sim_cmd;
pub mod sweep;
pub mod ticker;
pub mod web;
