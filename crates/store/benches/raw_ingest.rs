//! Raw-page ingest, a fixed workload (issue 13: ≥ 2 M samples/s on one
//! core): `TARGETS` (20) targets, each a page sequence built from the real
//! vLLM capture in `fixtures/vllm-live/` (415 lines a page, counters and
//! histograms advancing under load), `ROUNDS` (1 500) rounds of one scrape
//! per target, one `write_scrapes` transaction a round. Pages are made before
//! the clock starts; the time is the time spent in `write_scrapes`, seals of
//! full heads into blocks included (each target seals twice), then the
//! final `seal_heads` of a clean shutdown reported apart.
//!
//! `taskset -c 0 cargo bench -p llmwatch-store --bench raw_ingest`
//! (one core: the runtime is single-threaded; SQLite's work runs on sqlx's
//! connection thread, pinned to the same core by `taskset`).
//! For instruction counts: `ROUNDS=760 valgrind --tool=callgrind
//! target/release/deps/raw_ingest-*`.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

#[path = "../tests/common/loaded.rs"]
mod loaded;

use std::path::Path;
use std::time::{Duration, Instant};

use llmwatch_store::{ScrapeRecord, Store, TargetKind};
use loaded::LoadedVllm;

const STEP_MS: i64 = 5_000;
const T0: i64 = 1_750_000_000_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let targets = env_or("TARGETS", 20);
    let rounds = env_or("ROUNDS", 1500);
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/vllm-live/metrics_vllm_idle.txt"),
    )
    .expect("fixture");
    let mut batches: Vec<Vec<ScrapeRecord>> = Vec::with_capacity(rounds);
    let mut generators: Vec<LoadedVllm> = (0..targets)
        .map(|t| {
            let mut generator = LoadedVllm::new(&body);
            for _ in 0..t * 37 {
                generator.next_page();
            }
            generator
        })
        .collect();
    for i in 0..rounds {
        batches.push(
            generators
                .iter_mut()
                .enumerate()
                .map(|(t, generator)| ScrapeRecord {
                    target_id: t as i64 + 1,
                    ts_ms: T0 + i as i64 * STEP_MS,
                    up: true,
                    duration_ms: 3.0 + (i % 7) as f64 * 0.13,
                    body_bytes: 40_000,
                    error: None,
                    engine: Some("vllm".into()),
                    samples: Vec::new(),
                    raw: generator.next_page(),
                })
                .collect(),
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    runtime.block_on(async {
        let store = Store::open(&dir.path().join("ingest.db"))
            .await
            .expect("open");
        for t in 0..targets {
            let id = store
                .upsert_target(&format!("vllm-{t:02}"), TargetKind::Engine, "http://v", 0)
                .await
                .expect("target");
            assert_eq!(id, t as i64 + 1);
        }
        let mut writing = Duration::ZERO;
        let mut samples = 0u64;
        for batch in &batches {
            let started = Instant::now();
            samples += store.write_scrapes(batch).await.expect("write");
            writing += started.elapsed();
        }
        let started = Instant::now();
        store.seal_heads().await.expect("seal");
        let sealing = started.elapsed();
        println!(
            "raw ingest: {targets} targets x {rounds} rounds, {samples} samples in {writing:.2?} \
             = {:.2} M samples/s (seals of full heads included); final seal_heads {sealing:.2?}",
            samples as f64 / writing.as_secs_f64() / 1e6
        );
    });
}
