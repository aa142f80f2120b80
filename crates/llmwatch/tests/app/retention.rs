//! Every table has a lifecycle: the daemon's maintenance (run at start, then
//! hourly) deletes scrapes, probes, finished sweeps with their steps and
//! alert history past their retention, drops the series of targets that are
//! gone, and hands freed pages back, so the file stops growing.

use crate::common;

use common::app::TestApp;
use llmwatch_core::alerts::AlertState;
use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::{
    AlertChanges, AlertEventRow, LiveVerdictRow, ProbeRow, RetentionCutoffs, ScrapeRecord, Store,
    SweepEnd, SweepStatus, TargetKind,
};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

fn scrape(target_id: i64, ts_ms: i64, labels: usize) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms,
        up: true,
        duration_ms: 5.0,
        body_bytes: 100,
        error: None,
        engine: Some("vllm".into()),
        samples: (0..labels)
            .map(|i| NormalizedSample {
                metric: CatalogMetric::KvCacheUsage,
                labels: vec![("engine".to_string(), i.to_string())].into(),
                part: Part::Value,
                value: ts_ms as f64,
            })
            .collect(),
        raw: Vec::new(),
    }
}

fn probe(target_id: i64, ts_ms: i64) -> ProbeRow {
    ProbeRow {
        target_id,
        run_id: None,
        ts_ms,
        api: "chat".into(),
        model: "m".into(),
        shape: "16x2".into(),
        ok: true,
        error_kind: None,
        error: None,
        http_status: Some(200),
        ttfb_s: Some(0.01),
        ttft_s: Some(0.02),
        tpot_s: Some(0.01),
        e2e_s: 0.03,
        itl_s: vec![0.01],
        prompt_tokens: Some(16),
        output_tokens: 2,
        cached_tokens: None,
        finish_reason: Some("length".into()),
        record_json: "{}".into(),
    }
}

async fn sweep(store: &Store, started_ms: i64) -> i64 {
    let id = common::insert_running_sweep(store, "live", started_ms).await;
    store
        .finish_sweep(
            id,
            &SweepEnd {
                ended_ms: started_ms + 2000,
                verdict_json: None,
                stop_reason: None,
                status: SweepStatus::Completed,
            },
        )
        .await
        .unwrap();
    id
}

fn event(ts_ms: i64) -> AlertEventRow {
    AlertEventRow {
        id: 0,
        ts_ms,
        rule: "r".into(),
        target: "live".into(),
        state: AlertState::Firing,
        value: Some(1.0),
        labels_json: "{}".into(),
        annotations_json: "{}".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_bounds_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llmwatch.db");
    let now = now_ms();
    let (old_sweep, new_sweep);
    {
        let store = Store::open(&db).await.unwrap();
        let live = store
            .upsert_target("live", TargetKind::Engine, "http://127.0.0.1:9", 0)
            .await
            .unwrap();
        let gone = store
            .upsert_target("gone", TargetKind::Engine, "http://127.0.0.1:8", 0)
            .await
            .unwrap();
        let mut batch = vec![scrape(live, now - 40 * DAY, 3), scrape(live, now - HOUR, 3)];
        batch.push(scrape(gone, now - 40 * DAY, 5));
        store.write_scrapes(&batch).await.unwrap();
        for ts in [now - 40 * DAY, now - HOUR] {
            store.write_probe(&probe(live, ts)).await.unwrap();
        }
        old_sweep = sweep(&store, now - 400 * DAY).await;
        new_sweep = sweep(&store, now - DAY).await;
        store
            .apply_alert_changes(&AlertChanges {
                events: vec![event(now - 100 * DAY), event(now - HOUR)],
                ..AlertChanges::default()
            })
            .await
            .unwrap();
        for (target, ts_ms, verdict) in [
            (live, now - 100 * DAY, "healthy"),
            (live, now - HOUR, "kv_cache_capacity"),
            (gone, now - HOUR, "healthy"),
        ] {
            store
                .record_live_verdict(target, &verdict_row(ts_ms, verdict))
                .await
                .unwrap();
        }
    }
    // `live` stays configured, `gone` was removed from the config.
    let app = TestApp::builder()
        .config("[[targets]]\nname = \"live\"\nurl = \"http://127.0.0.1:9\"\nscrape_interval = \"1h\"\n")
        .dir(dir)
        .spawn()
        .await;
    let store = app.daemon.store.clone();
    common::wait_for(
        "maintenance at start",
        std::time::Duration::from_secs(20),
        || async {
            let probes = store.probes(1, 0, i64::MAX, 10).await.unwrap();
            (probes.len() == 1).then_some(())
        },
    )
    .await;
    let (_dir, _) = app.stop().await;

    let store = Store::open(&db).await.unwrap();
    let live = store.target_by_name("live").await.unwrap().unwrap().id;
    let gone = store.target_by_name("gone").await.unwrap().unwrap().id;
    let scrapes = store.scrape_health(live, 100).await.unwrap();
    assert_eq!(scrapes.len(), 1, "only the recent scrape of live stays");
    assert!(store.scrape_health(gone, 100).await.unwrap().is_empty());
    assert_eq!(store.probes(live, 0, i64::MAX, 10).await.unwrap().len(), 1);
    assert!(
        store.sweep(old_sweep).await.unwrap().is_none(),
        "a year-old sweep goes"
    );
    assert!(
        store.sweep_steps(old_sweep).await.unwrap().is_empty(),
        "with its steps"
    );
    assert!(store.sweep(new_sweep).await.unwrap().is_some());
    let events = store.alert_events(None, None, None, 100).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    let series_of = |target: i64| {
        let store = store.clone();
        async move { store.series_count(target).await.unwrap() }
    };
    assert_eq!(series_of(gone).await, 0, "the removed target's series went");
    assert_eq!(series_of(live).await, 3, "the configured target's stay");
    let changes = store.live_changes(live, 0, i64::MAX, 100).await.unwrap();
    assert!(
        changes.iter().all(|c| c.ts_ms > now - 90 * DAY),
        "verdict changes past alert_history_retention go: {changes:?}"
    );
    assert!(
        changes.iter().any(|c| c.ts_ms == now - HOUR),
        "the recent change stays: {changes:?}"
    );
    assert!(
        store.live_verdict(gone).await.unwrap().is_none(),
        "a removed target has no standing verdict"
    );
    assert!(store.live_verdict(live).await.unwrap().is_some());
}

fn verdict_row(ts_ms: i64, verdict: &str) -> LiveVerdictRow {
    LiveVerdictRow {
        ts_ms,
        verdict: verdict.into(),
        confidence: "high".into(),
        evidence: "test".into(),
        what_to_try: String::new(),
        samples: 10,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_stops_growing_once_retention_is_reached() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llmwatch.db");
    let store = Store::open(&db).await.unwrap();
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:9", 0)
        .await
        .unwrap();
    // Days of 5 s scrapes, one day at a time, keeping two days.
    let day_of = |day: i64| -> Vec<ScrapeRecord> {
        (0..DAY / 5000 / 4)
            .map(|i| scrape(target, day * DAY + i * 20_000, 50))
            .collect()
    };
    let mut sizes = Vec::new();
    let mut wal_max = 0;
    for day in 0..8 {
        store.write_scrapes(&day_of(day)).await.unwrap();
        let cutoffs = RetentionCutoffs {
            scrapes_before_ms: (day - 1) * DAY,
            probes_before_ms: 0,
            sweeps_before_ms: 0,
            alert_events_before_ms: 0,
        };
        let pruned = store.run_retention(&cutoffs, &[target]).await.unwrap();
        if day >= 2 {
            assert!(pruned.scrapes > 0, "day {day}: {pruned:?}");
            assert!(pruned.freed_pages > 0, "freed pages go back: {pruned:?}");
        }
        // The database's own size (its pages, wherever they stand: the WAL
        // or the main file), which retention bounds; the WAL file's length
        // is when SQLite's passive checkpoints got to run (under a busy
        // machine, later), bounded separately below.
        sizes.push(store.size_bytes().await.unwrap() as u64);
        wal_max = wal_max.max(wal_size(&db));
    }
    // After the window fills (day 2: two days kept), the database holds
    // steady.
    let steady = sizes[3];
    eprintln!("database bytes by day: {sizes:?}; WAL file at most {wal_max}");
    // The WAL is reused after each checkpoint: it never holds the history
    // (eight days here are 8 × 17 280 scrapes of 50 samples).
    assert!(wal_max <= 16 << 20, "WAL {wal_max} bytes");
    for (day, size) in sizes.iter().enumerate().skip(4) {
        assert!(
            *size <= steady + steady / 10,
            "day {day}: {size} bytes, {steady} at day 3: {sizes:?}"
        );
    }
}

fn wal_size(db: &std::path::Path) -> u64 {
    let wal = db.with_extension("db-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_values_of_a_long_down_target_skip_its_down_rows_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("llmwatch.db")).await.unwrap();
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:9", 0)
        .await
        .unwrap();
    let mut batch = vec![scrape(target, 0, 3)];
    batch.extend((1..20_000).map(|i| ScrapeRecord {
        up: false,
        samples: Vec::new(),
        error: Some("connection refused".into()),
        ..scrape(target, i * 5000, 0)
    }));
    store.write_scrapes(&batch).await.unwrap();
    let plan = store
        .explain_latest_up_scrape(target)
        .await
        .unwrap()
        .join("\n");
    assert!(plan.contains("scrapes_up_by_target_time"), "{plan}");
    let signals = store.latest_signals(target).await.unwrap();
    assert!(!signals.is_empty(), "the last good scrape is found");
}
