//! Scrape-schedule lateness while maintenance prunes and thins a 30-day
//! database. A fixed workload: one target with 30 days of 5 s scrapes (40
//! samples each, 518 400 scrapes), then 10 targets scraped every 250 ms
//! while `run_retention` (7 days kept) and `downsample` (older than 2 days
//! to one a minute) run on the same store. Lateness of a scrape write =
//! when its transaction committed − when its tick was due; reported at
//! p50/p99/max, idle and during maintenance.
//!
//! `cargo bench -p llmwatch --bench maintenance`

use std::time::{Duration, Instant};

use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
use llmwatch_store::{RetentionCutoffs, ScrapeRecord, Store, TargetKind};

const DAY_MS: i64 = 24 * 3600 * 1000;
const TICK: Duration = Duration::from_millis(250);

fn scrape(target_id: i64, ts_ms: i64, samples: usize) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms,
        up: true,
        duration_ms: 3.0,
        body_bytes: 20_000,
        error: None,
        engine: Some("vllm".into()),
        samples: (0..samples)
            .map(|i| NormalizedSample {
                metric: CatalogMetric::KvCacheUsage,
                labels: vec![("engine".to_string(), i.to_string())].into(),
                part: Part::Value,
                value: (ts_ms % 1000) as f64 + i as f64,
            })
            .collect(),
        raw: Vec::new(),
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

/// Scrapes 10 targets every tick until `stop` is set; returns each tick's lateness.
async fn scrape_schedule(
    store: Store,
    targets: Vec<i64>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Duration> {
    let mut ticker = tokio::time::interval(TICK);
    let mut lateness = Vec::new();
    while !*stop.borrow() {
        let due = ticker.tick().await;
        let now_ms = llmwatch_engine::now_ms();
        let batch: Vec<ScrapeRecord> = targets.iter().map(|t| scrape(*t, now_ms, 40)).collect();
        store.write_scrapes(&batch).await.expect("write");
        lateness.push(Instant::now().saturating_duration_since(due.into_std()));
    }
    lateness.sort();
    lateness
}

fn report(label: &str, lateness: &[Duration]) {
    println!(
        "{label:<28} {:>6} writes  p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}",
        lateness.len(),
        percentile(lateness, 0.5),
        percentile(lateness, 0.99),
        lateness.last().copied().unwrap_or_default()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("bench.db"))
        .await
        .expect("store");
    let now = llmwatch_engine::now_ms();
    let old = store
        .upsert_target("history", TargetKind::Engine, "http://127.0.0.1:9", 0)
        .await
        .expect("target");
    let started = Instant::now();
    let mut ts = now - 30 * DAY_MS;
    while ts < now - 60_000 {
        let batch: Vec<ScrapeRecord> = (0..5000)
            .map(|i| scrape(old, ts + i * 5000, 40))
            .take_while(|s| s.ts_ms < now - 60_000)
            .collect();
        ts += 5000 * 5000;
        store.write_scrapes(&batch).await.expect("fill");
    }
    println!(
        "filled 30 days of 5 s scrapes in {:.1?}; database {} MiB",
        started.elapsed(),
        store.size_bytes().await.expect("size") >> 20
    );
    let mut live = Vec::new();
    for i in 0..10 {
        let id = store
            .upsert_target(
                &format!("live-{i}"),
                TargetKind::Engine,
                "http://127.0.0.1:9",
                now,
            )
            .await
            .expect("target");
        live.push(id);
    }

    // Idle: 10 s of the schedule alone.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let idle = tokio::spawn(scrape_schedule(store.clone(), live.clone(), stop_rx));
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop_tx.send(true).expect("stop");
    report("scrape lateness, idle", &idle.await.expect("idle"));

    // During maintenance: retention (7 days kept) then thinning.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let busy = tokio::spawn(scrape_schedule(store.clone(), live.clone(), stop_rx));
    let maintenance = Instant::now();
    let mut active = live.clone();
    active.push(old);
    let pruned = store
        .run_retention(
            &RetentionCutoffs {
                scrapes_before_ms: now - 7 * DAY_MS,
                probes_before_ms: now - 7 * DAY_MS,
                sweeps_before_ms: now - 7 * DAY_MS,
                alert_events_before_ms: now - 7 * DAY_MS,
            },
            &active,
        )
        .await
        .expect("retention");
    let thinned = store
        .downsample(now - 2 * DAY_MS, 60_000)
        .await
        .expect("downsample");
    let took = maintenance.elapsed();
    stop_tx.send(true).expect("stop");
    println!(
        "maintenance: {} scrapes pruned, {} thinned, {} pages freed in {took:.1?}",
        pruned.scrapes, thinned, pruned.freed_pages
    );
    report("scrape lateness, maintenance", &busy.await.expect("busy"));
}
