//! kill -9 loses at most the batch in flight: a child process writes loaded
//! vLLM pages in batches (sealing blocks on the way) and reports each
//! commit; it is killed with SIGKILL mid-stream; every reported scrape must
//! then be readable, bit for bit, and nothing past the batch in flight.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::loaded::LoadedVllm;
use llmwatch_store::{RawSample, ScrapeRecord, Store, TargetKind, BLOCK_SCRAPES};

const CHILD_ENV: &str = "LLMWATCH_STORE_CRASH_DB";
const T0: i64 = 1_750_000_000_000;
const STEP: i64 = 5_000;
const BATCH: usize = 8;

fn pages() -> LoadedVllm {
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/vllm-live/metrics_vllm_idle.txt"),
    )
    .unwrap();
    LoadedVllm::new(&body)
}

fn record(target_id: i64, i: usize, raw: Vec<RawSample>) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms: T0 + i as i64 * STEP,
        up: true,
        duration_ms: 3.0,
        body_bytes: 40_000,
        error: None,
        engine: Some("vllm".into()),
        samples: Vec::new(),
        raw,
    }
}

/// The writer, run only as the child of the test below (ignored in a
/// normal run, so it never reports a pass for work it did not do).
#[test]
#[ignore = "the child process of kill_9_loses_at_most_the_batch_in_flight"]
fn crash_writer_child() {
    let db = std::env::var_os(CHILD_ENV).unwrap_or_else(|| {
        panic!("run only by kill_9_loses_at_most_the_batch_in_flight ({CHILD_ENV} unset)")
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Store::open(&PathBuf::from(db)).await.unwrap();
        let target = store
            .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:9", 0)
            .await
            .unwrap();
        let mut pages = pages();
        let mut next = 0;
        loop {
            let batch: Vec<ScrapeRecord> = (next..next + BATCH)
                .map(|i| record(target, i, pages.next_page()))
                .collect();
            store.write_scrapes(&batch).await.unwrap();
            next += BATCH;
            // The parent reads this only after the commit returned.
            println!("committed {next}");
        }
    });
}

#[test]
fn kill_9_loses_at_most_the_batch_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llmwatch.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_writer_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Past two seals, then kill at whatever point the next batch is at.
    let wanted = 2 * BLOCK_SCRAPES + 5 * BATCH;
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut committed = 0;
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("committed ") {
            committed = n.parse().unwrap();
        }
        if committed >= wanted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {committed} scrapes in 240 s"
        );
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(committed >= wanted, "the child stopped at {committed}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = Store::open(&db).await.unwrap();
        let target = store.target_by_name("t").await.unwrap().unwrap().id;
        let health = store.scrape_health(target, u32::MAX).await.unwrap();
        let stored = health.len();
        assert!(
            (committed..=committed + 2 * BATCH).contains(&stored),
            "{committed} committed, {stored} stored"
        );
        let newest = health[0].ts_ms;
        assert_eq!(newest, T0 + (stored as i64 - 1) * STEP);
        let stats = store.db_stats().await.unwrap();
        assert!(stats.blocks >= 2, "{stats:?}");
        // Every stored scrape reads back as written, sealed or not.
        let mut pages = pages();
        for i in 0..stored {
            let page = pages.next_page();
            if i % 97 == 0 || i + 1 == stored {
                let back = store
                    .page_at(target, T0 + i as i64 * STEP)
                    .await
                    .unwrap()
                    .unwrap();
                let bits = |p: &[RawSample]| -> Vec<(String, u64)> {
                    p.iter()
                        .map(|s| (s.name.to_string(), s.value.to_bits()))
                        .collect()
                };
                let mut want = bits(&page);
                let mut got = bits(&back.raw);
                want.sort();
                got.sort();
                assert_eq!(got, want, "scrape {i}");
            }
        }
    });
}
