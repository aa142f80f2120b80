//! Reading the store out for remote write: every scrape of every target
//! once, in (time, target) order, in bounded batches, from sealed blocks
//! and head rows alike, with the values exactly as stored; canary probes
//! only; the per-endpoint cursor survives a reopen.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::loaded::LoadedVllm;
use common::probes::ok_probe;
use llmwatch_store::{
    ExportCursor, RawSample, RemoteWriteCursor, ScrapeRecord, SeriesKind, Store, TargetKind,
    BLOCK_SCRAPES,
};

const T0: i64 = 1_750_000_000_000;
const STEP: i64 = 1_000;

fn pages() -> LoadedVllm {
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/vllm-live/metrics_vllm_idle.txt"),
    )
    .unwrap();
    LoadedVllm::new(&body)
}

fn record(target_id: i64, ts_ms: i64, up: bool, raw: Vec<RawSample>) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms,
        up,
        duration_ms: 3.0,
        body_bytes: 1000,
        error: (!up).then(|| "connection refused".to_string()),
        engine: Some("vllm".into()),
        samples: Vec::new(),
        raw: if up { raw } else { Vec::new() },
    }
}

type Written = BTreeMap<(i64, i64), Vec<RawSample>>;

/// Two targets scraped each second, target b offset by half a second and
/// down every 50th scrape; enough scrapes that the oldest are sealed.
async fn filled(store: &Store) -> (i64, i64, Written) {
    let a = store
        .upsert_target("a", TargetKind::Engine, "http://127.0.0.1:1", 0)
        .await
        .unwrap();
    let b = store
        .upsert_target("b", TargetKind::Engine, "http://127.0.0.1:2", 0)
        .await
        .unwrap();
    let mut written = Written::new();
    let mut pages_a = pages();
    let mut pages_b = pages();
    let scrapes = BLOCK_SCRAPES + 40;
    for i in 0..scrapes as i64 {
        let ts_a = T0 + i * STEP;
        let ts_b = ts_a + STEP / 2;
        let up_b = i % 50 != 7;
        let page_a = pages_a.next_page();
        let page_b = pages_b.next_page();
        store
            .write_scrapes(&[
                record(a, ts_a, true, page_a.clone()),
                record(b, ts_b, up_b, page_b.clone()),
            ])
            .await
            .unwrap();
        written.insert((ts_a, a), page_a);
        written.insert((ts_b, b), if up_b { page_b } else { Vec::new() });
    }
    (a, b, written)
}

fn as_lines(samples: &[RawSample]) -> BTreeMap<(String, Vec<(String, String)>), u64> {
    samples
        .iter()
        .map(|s| ((s.name.to_string(), s.labels.to_vec()), s.value.to_bits()))
        .collect()
}

#[tokio::test]
async fn every_scrape_once_in_order_in_bounded_batches() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let (_, _, written) = filled(&store).await;
    let page_len = written.values().map(Vec::len).max().unwrap();
    let max_samples = 60 * page_len + 10;
    let until = T0 + 10_000_000;
    let mut cursor = ExportCursor {
        ts_ms: T0 - 1,
        target_id: 0,
    };
    let mut seen = Vec::new();
    loop {
        let batch = store
            .export_scrapes(cursor, until, max_samples, false)
            .await
            .unwrap();
        let Some(last) = batch.last() else { break };
        let samples: usize = batch.iter().map(|s| s.samples.len()).sum();
        assert!(samples <= max_samples, "{samples} samples in one batch");
        cursor = last.cursor();
        for scrape in batch {
            let raw: Vec<RawSample> = scrape
                .samples
                .iter()
                .map(|(_, def, value)| {
                    assert_eq!(def.kind, SeriesKind::Raw);
                    RawSample {
                        name: def.name.as_str().into(),
                        labels: def.labels.clone(),
                        value: *value,
                    }
                })
                .collect();
            let expected = &written[&(scrape.ts_ms, scrape.target_id)];
            assert_eq!(scrape.up, !expected.is_empty());
            assert_eq!(
                as_lines(&raw),
                as_lines(expected),
                "scrape at {}",
                scrape.ts_ms
            );
            seen.push((scrape.ts_ms, scrape.target_id));
        }
    }
    // Every scrape once, strictly in (time, target) order.
    let expected: Vec<(i64, i64)> = written.keys().copied().collect();
    assert_eq!(seen, expected);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn a_batch_stops_at_until_and_resumes_after_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let (a, b, _) = filled(&store).await;
    let start = ExportCursor {
        ts_ms: T0 + 100 * STEP,
        target_id: a,
    };
    let until = T0 + 102 * STEP;
    let batch = store
        .export_scrapes(start, until, 1_000_000, true)
        .await
        .unwrap();
    let at: Vec<(i64, i64)> = batch.iter().map(|s| (s.ts_ms, s.target_id)).collect();
    assert_eq!(
        at,
        vec![
            (T0 + 100 * STEP + STEP / 2, b),
            (T0 + 101 * STEP, a),
            (T0 + 101 * STEP + STEP / 2, b),
            (T0 + 102 * STEP, a),
        ]
    );
    // Catalog samples come with the batch when asked for (signals need them).
    assert!(batch.iter().all(|s| !s.catalog.is_empty()));
    // Nothing after the newest scrape; a long gap is jumped over.
    let newest = store.newest_scrape_ms().await.unwrap().unwrap();
    let after_all = ExportCursor {
        ts_ms: newest,
        target_id: b,
    };
    assert!(store
        .export_scrapes(after_all, newest + 86_400_000, 100, false)
        .await
        .unwrap()
        .is_empty());
    let far = newest + 3_600_000;
    store
        .write_scrapes(&[record(a, far, true, pages().next_page())])
        .await
        .unwrap();
    let batch = store
        .export_scrapes(after_all, far, 100, false)
        .await
        .unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].ts_ms, far);
}

#[tokio::test]
async fn canary_probes_are_exported_and_cursors_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let store = Store::open(&path).await.unwrap();
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:1", 0)
        .await
        .unwrap();
    let probe = |ts_ms: i64, run_id: Option<i64>| ok_probe(target, ts_ms, run_id, 0.1);
    let first = store.write_probe(&probe(T0, None)).await.unwrap();
    store.write_probe(&probe(T0 + 10, Some(1))).await.unwrap();
    let third = store.write_probe(&probe(T0 + 20, None)).await.unwrap();
    store.write_probe(&probe(T0 + 60_000, None)).await.unwrap();
    let probes = store.export_probes(0, T0 + 30, 10).await.unwrap();
    let ids: Vec<i64> = probes.iter().map(|p| p.id).collect();
    assert_eq!(
        ids,
        vec![first, third],
        "sweep requests and later probes left out"
    );
    assert_eq!(probes[0].ttft_s, Some(0.1));
    assert_eq!(
        store.export_probes(third, T0 + 30, 10).await.unwrap(),
        vec![]
    );

    assert_eq!(store.remote_write_cursor("prom").await.unwrap(), None);
    let cursor = RemoteWriteCursor {
        scrapes: ExportCursor {
            ts_ms: T0 + 5,
            target_id: target,
        },
        probe_id: third,
    };
    store
        .save_remote_write_cursor("prom", cursor, T0)
        .await
        .unwrap();
    drop(store);
    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        store.remote_write_cursor("prom").await.unwrap(),
        Some(cursor)
    );
    assert_eq!(store.remote_write_cursor("other").await.unwrap(), None);
}
