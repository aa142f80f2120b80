//! The store against a real SQLite file: write scrapes, read signals and raw
//! series back, reopen, and refuse bad ranges.

mod common;

use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
use llmwatch_core::signals::Signal;
use llmwatch_store::{Range, ScrapeRecord, Store, StoreError, TargetKind};

fn sample(metric: CatalogMetric, part: Part, value: f64) -> NormalizedSample {
    NormalizedSample {
        metric,
        labels: Vec::new().into(),
        part,
        value,
    }
}

/// A vLLM-like scrape at `ts_ms`: KV usage, a generation counter and a TTFT
/// histogram with `fast` observations under 0.1 s and `slow` under 1 s.
fn scrape(target_id: i64, ts_ms: i64, kv: f64, tokens: f64, fast: f64, slow: f64) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms,
        up: true,
        duration_ms: 3.0,
        body_bytes: 1234,
        error: None,
        engine: Some("vllm".into()),
        samples: vec![
            sample(CatalogMetric::KvCacheUsage, Part::Value, kv),
            sample(CatalogMetric::GenerationTokensTotal, Part::Value, tokens),
            sample(CatalogMetric::TtftSeconds, Part::Bucket(0.1), fast),
            sample(CatalogMetric::TtftSeconds, Part::Bucket(1.0), fast + slow),
            sample(
                CatalogMetric::TtftSeconds,
                Part::Bucket(f64::INFINITY),
                fast + slow,
            ),
            sample(CatalogMetric::TtftSeconds, Part::Count, fast + slow),
            sample(
                CatalogMetric::TtftSeconds,
                Part::Sum,
                fast * 0.05 + slow * 0.5,
            ),
        ],
        raw: Vec::new(),
    }
}

fn value_of(signals: &[(Signal, f64)], signal: Signal) -> Option<f64> {
    signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v)
}

#[tokio::test]
async fn writes_and_reads_back_signals_and_series() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llmwatch.db");
    let store = Store::open(&path).await.unwrap();
    let target = store
        .upsert_target("vllm-a", TargetKind::Engine, "http://127.0.0.1:8000", 0)
        .await
        .unwrap();
    assert_eq!(
        store
            .upsert_target("vllm-a", TargetKind::Engine, "http://127.0.0.1:8001", 0)
            .await
            .unwrap(),
        target,
        "upsert keeps the id"
    );

    let base = 1_800_000_000_000;
    // Ten scrapes 5 s apart: 50 tokens/s, all new TTFT observations fast.
    let batch: Vec<_> = (0..10)
        .map(|i| {
            let i = i as i64;
            scrape(
                target,
                base + i * 5000,
                0.1 * i as f64,
                250.0 * i as f64,
                10.0 * i as f64,
                2.0,
            )
        })
        .collect();
    assert_eq!(store.write_scrapes(&batch).await.unwrap(), 70);
    // A failed scrape is recorded with its reason and no samples.
    let down = ScrapeRecord {
        target_id: target,
        ts_ms: base + 50_000,
        up: false,
        duration_ms: 10_000.0,
        body_bytes: 0,
        error: Some("timed out after 10s".into()),
        engine: None,
        samples: Vec::new(),
        raw: Vec::new(),
    };
    store.write_scrapes(&[down]).await.unwrap();

    let health = store.scrape_health(target, 2).await.unwrap();
    assert!(!health[0].up);
    assert_eq!(health[0].error.as_deref(), Some("timed out after 10s"));
    assert!(health[1].up);
    assert_eq!(health[1].sample_count, 7);

    let latest = store.latest_signals(target).await.unwrap();
    assert!((value_of(&latest, Signal::KvCacheUsage).unwrap() - 0.9).abs() < 1e-12);
    assert!((value_of(&latest, Signal::GenerationTokensRate).unwrap() - 50.0).abs() < 1e-9);
    // The 10 new observations between the last two scrapes all sit in
    // (0, 0.1]: p95 interpolates to 0.095.
    assert!((value_of(&latest, Signal::ServerTtftP95).unwrap() - 0.095).abs() < 1e-9);

    let range = Range::checked(base + 10_000, base + 45_000, 10_000).unwrap();
    let rate = store
        .signal_series(target, Signal::GenerationTokensRate, range)
        .await
        .unwrap();
    assert_eq!(rate.len(), 4);
    for point in &rate {
        assert!((point.value - 50.0).abs() < 1e-9, "{point:?}");
    }
    let kv = store
        .signal_series(target, Signal::KvCacheUsage, range)
        .await
        .unwrap();
    let kv_values: Vec<f64> = kv.iter().map(|p| (p.value * 10.0).round() / 10.0).collect();
    assert_eq!(kv_values, vec![0.2, 0.4, 0.6, 0.8]);

    let raw = store
        .metric_series(target, CatalogMetric::TtftSeconds, base, base + 60_000)
        .await
        .unwrap();
    assert_eq!(raw.len(), 5, "three buckets, sum and count");
    let inf = raw.iter().find(|s| s.part == "bucket:+Inf").unwrap();
    assert_eq!(inf.points.len(), 10);
    assert_eq!(inf.points[9].value, 92.0);

    // Reopening keeps targets, series and samples.
    drop(store);
    let store = Store::open(&path).await.unwrap();
    let targets = store.targets().await.unwrap();
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].engine.as_deref(), Some("vllm"));
    assert_eq!(targets[0].url, "http://127.0.0.1:8001");
    let latest_again = store.latest_signals(target).await.unwrap();
    assert_eq!(latest, latest_again);
    // New writes after a reopen reuse the stored series ids.
    store
        .write_scrapes(&[scrape(target, base + 55_000, 0.5, 3000.0, 200.0, 2.0)])
        .await
        .unwrap();
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM series")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(count, 7);

    assert_eq!(store.prune(base + 25_000).await.unwrap(), 5);
    assert!(store.size_bytes().await.unwrap() > 0);
}

#[tokio::test]
async fn bad_ranges_are_refused_with_a_reason() {
    assert!(
        matches!(Range::checked(10, 0, 1), Err(StoreError::BadRange(m)) if m.contains("before"))
    );
    assert!(matches!(Range::checked(0, 10, 0), Err(StoreError::BadRange(m)) if m.contains("step")));
    assert!(
        matches!(Range::checked(0, 1_000_000_000, 1), Err(StoreError::BadRange(m)) if m.contains("points"))
    );
}

#[tokio::test]
async fn wal_mode_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("x.db")).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn probes_are_stored_in_full_and_roll_into_signals() {
    use llmwatch_store::ProbeRow;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("p.db")).await.unwrap();
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:1", 0)
        .await
        .unwrap();
    let probe = |ts_ms: i64, ttft: f64, ok: bool| ProbeRow {
        target_id: target,
        run_id: None,
        ts_ms,
        api: "chat".into(),
        model: "m".into(),
        shape: "64x16".into(),
        ok,
        error_kind: (!ok).then(|| "http_status".to_string()),
        error: (!ok).then(|| "HTTP 500 from server: boom".to_string()),
        http_status: Some(if ok { 200 } else { 500 }),
        ttfb_s: Some(0.001),
        ttft_s: ok.then_some(ttft),
        tpot_s: ok.then_some(0.02),
        e2e_s: ttft + 0.3,
        itl_s: if ok { vec![0.02; 15] } else { Vec::new() },
        prompt_tokens: Some(64),
        output_tokens: if ok { 16 } else { 0 },
        cached_tokens: Some(0),
        finish_reason: ok.then(|| "length".to_string()),
        record_json: "{\"events\":[]}".into(),
    };
    for i in 0..10 {
        store
            .write_probe(&probe(1_000_000 + i * 15_000, 0.1 * (i + 1) as f64, i != 9))
            .await
            .unwrap();
    }
    // A sweep step's probes in the same window: slow, stored, queryable,
    // but never part of the canary signals.
    for i in 0..20 {
        let mut sweep_probe = probe(1_000_000 + 80_000 + i * 1_000, 5.0, true);
        sweep_probe.run_id = Some(7);
        store.write_probe(&sweep_probe).await.unwrap();
    }
    let rows = store.probes(target, 0, i64::MAX, 100).await.unwrap();
    assert_eq!(rows.len(), 30);
    assert_eq!(rows.iter().filter(|r| r.run_id == Some(7)).count(), 20);
    let rows: Vec<ProbeRow> = rows.into_iter().filter(|r| r.run_id.is_none()).collect();
    assert_eq!(rows.len(), 10);
    assert_eq!(rows[0], probe(1_000_000, 0.1, true));
    assert_eq!(rows[9].error.as_deref(), Some("HTTP 500 from server: boom"));

    // The last 60 s hold probes 6..=9 (one failed).
    let now = 1_000_000 + 9 * 15_000;
    let signals = store.probe_signals(target, now, 60_000).await.unwrap();
    assert_eq!(value_of(&signals, Signal::ProbeErrorRate), Some(0.25));
    let ttft_p50 = value_of(&signals, Signal::ProbeTtftP50).unwrap();
    assert!((ttft_p50 - 0.8).abs() < 1e-9, "{ttft_p50}");
    // p95 of the canaries alone (ttft 0.7, 0.8, 0.9; the failed one has none).
    let canary_ttfts = [0.7, 0.8, 0.9];
    let expected_p95 = llmwatch_core::stats::percentile(&canary_ttfts, 0.95).unwrap();
    let ttft_p95 = value_of(&signals, Signal::ProbeTtftP95).unwrap();
    assert!((ttft_p95 - expected_p95).abs() < 1e-9, "{ttft_p95}");
    assert!(
        ttft_p95 < 1.0,
        "sweep probes leaked into the canary p95: {ttft_p95}"
    );
    assert_eq!(value_of(&signals, Signal::ProbeItlP95), Some(0.02));

    let range = Range::checked(1_000_000, now, 45_000).unwrap();
    let series = store
        .probe_signal_series(target, Signal::ProbeErrorRate, range, 45_000)
        .await
        .unwrap();
    let values: Vec<f64> = series.iter().map(|p| p.value).collect();
    assert_eq!(values, vec![0.0, 0.0, 0.0, 1.0 / 3.0]);
}

/// The canaries' hour cache never serves what SQLite no longer holds: a
/// canary written into an hour already read, a sweep probe beside it, and
/// retention deleting an hour all show in the next read, which equals a
/// read of a store opened afresh (no cache) on the same file.
#[tokio::test]
async fn canary_reads_follow_writes_and_retention_through_the_hour_cache() {
    use common::probes::ok_probe;
    use llmwatch_store::RetentionCutoffs;
    const HOUR: i64 = 3_600_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let store = Store::open(&path).await.unwrap();
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:1", 0)
        .await
        .unwrap();
    let probe = |ts_ms: i64, ttft: f64, run_id: Option<i64>| ok_probe(target, ts_ms, run_id, ttft);
    // Three whole hours of a canary a minute, then half of a fourth.
    let base = 100 * HOUR;
    for minute in 0..210 {
        store
            .write_probe(&probe(base + minute * 60_000, 0.1, None))
            .await
            .unwrap();
    }
    let (from, to) = (base, base + 210 * 60_000);
    let ttfts = |rows: Vec<(i64, llmwatch_core::probe_signals::ProbeTimings)>| -> Vec<(i64, f64)> {
        rows.into_iter()
            .map(|(ts, t)| (ts, t.ttft_s.unwrap()))
            .collect()
    };
    assert_eq!(
        ttfts(store.probe_timings(target, from, to).await.unwrap()).len(),
        210
    );
    // Into hour 1 (read, so kept), a canary and a sweep probe.
    let late = base + HOUR + 30_500;
    store.write_probe(&probe(late, 9.0, None)).await.unwrap();
    store
        .write_probe(&probe(late + 1, 7.0, Some(3)))
        .await
        .unwrap();
    let after_write = ttfts(store.probe_timings(target, from, to).await.unwrap());
    assert_eq!(after_write.len(), 211);
    assert!(after_write.contains(&(late, 9.0)));
    assert!(!after_write.iter().any(|(_, ttft)| *ttft == 7.0));
    let signals = store
        .probe_signals(target, base + HOUR + 59_999, 60_000)
        .await
        .unwrap();
    assert_eq!(
        value_of(&signals, Signal::ProbeTtftP50),
        Some((0.1 + 9.0) / 2.0)
    );
    // Retention takes hour 0.
    let pruned = store
        .run_retention(
            &RetentionCutoffs {
                scrapes_before_ms: 0,
                probes_before_ms: base + HOUR,
                sweeps_before_ms: 0,
                alert_events_before_ms: 0,
            },
            &[target],
        )
        .await
        .unwrap();
    assert_eq!(pruned.probes, 60);
    let after_retention = ttfts(store.probe_timings(target, from, to).await.unwrap());
    assert_eq!(after_retention.len(), 151);
    let fresh = Store::open(&path).await.unwrap();
    assert_eq!(
        after_retention,
        ttfts(fresh.probe_timings(target, from, to).await.unwrap())
    );
    // A range from 1970 to far ahead reads only where the canaries are
    // (it once walked every hour in between), the same twice.
    for _ in 0..2 {
        let wide = store
            .probe_timings(target, 0, to + 10_000 * HOUR)
            .await
            .unwrap();
        assert_eq!(ttfts(wide), after_retention);
    }
}

/// Two hours of 5 s scrapes (a 3-minute outage in the first hour), thinned
/// to one per minute past the one-hour mark: the old hour keeps one up row
/// per minute and one down row per minute of the outage, the recent hour is
/// untouched, rates and quantiles read the same before and after, and a
/// second pass deletes nothing.
#[tokio::test]
async fn downsampling_thins_old_scrapes_and_keeps_signals_right() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("llmwatch.db")).await.unwrap();
    let target = store
        .upsert_target("vllm-a", TargetKind::Engine, "http://127.0.0.1:8000", 0)
        .await
        .unwrap();
    // A whole minute (1.8e12 ms = 30e6 min), so each bucket holds 12 scrapes.
    let base: i64 = 1_800_000_000_000;
    assert_eq!(base % 60_000, 0);
    let outage = (base + 20 * 60_000)..(base + 23 * 60_000);
    let batch: Vec<ScrapeRecord> = (0..1440)
        .map(|i| {
            let ts = base + i * 5000;
            let secs = (i * 5) as f64;
            let mut s = scrape(target, ts, 0.5, 10.0 * secs, 2.0 * secs, 0.0);
            if outage.contains(&ts) {
                s.up = false;
                s.error = Some("connection refused".into());
                s.samples.clear();
            }
            s
        })
        .collect();
    store.write_scrapes(&batch).await.unwrap();
    let cutoff = base + 3_600_000;
    let old_range = Range::checked(base + 30 * 60_000, cutoff - 60_000, 300_000).unwrap();
    let new_range = Range::checked(cutoff + 300_000, base + 7_140_000, 300_000).unwrap();
    let wanted = [Signal::GenerationTokensRate, Signal::ServerTtftP95];
    let before = store
        .signals_series(target, &wanted, old_range)
        .await
        .unwrap();

    let deleted = store.downsample(cutoff, 60_000).await.unwrap();
    let health = store.scrape_health(target, 10_000).await.unwrap();
    let old: Vec<_> = health.iter().filter(|h| h.ts_ms < cutoff).collect();
    let old_down = old.iter().filter(|h| !h.up).count();
    assert_eq!(old_down, 3, "one down row per minute of the outage");
    assert_eq!(old.len() - old_down, 57, "one up row per minute with data");
    assert_eq!(deleted, 720 - 60);
    assert_eq!(health.iter().filter(|h| h.ts_ms >= cutoff).count(), 720);
    assert_eq!(
        old.iter()
            .filter(|h| !h.up)
            .map(|h| h.error.as_deref())
            .collect::<Vec<_>>(),
        vec![Some("connection refused"); 3]
    );

    let after = store
        .signals_series(target, &wanted, old_range)
        .await
        .unwrap();
    for ((signal, was), (_, now)) in before.iter().zip(&after) {
        assert_eq!(was.len(), now.len(), "{signal:?}");
        for (a, b) in was.iter().zip(now) {
            assert!(
                (a.value - b.value).abs() < 1e-9,
                "{signal:?}: {a:?} vs {b:?}"
            );
        }
    }
    let rate = &after[0].1;
    assert!(!rate.is_empty());
    assert!(
        rate.iter().all(|p| (p.value - 10.0).abs() < 1e-9),
        "{rate:?}"
    );
    let recent = store
        .signals_series(target, &wanted, new_range)
        .await
        .unwrap();
    assert!(recent[0].1.iter().all(|p| (p.value - 10.0).abs() < 1e-9));

    assert_eq!(store.downsample(cutoff, 60_000).await.unwrap(), 0);
    // A cutoff far past the data thins what is there and stops (it once
    // walked every hour up to the cutoff, one DELETE each: forever here).
    let everything = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        store.downsample(i64::MAX, 60_000),
    )
    .await
    .expect("a downsample to i64::MAX visits only hours that hold data")
    .unwrap();
    assert_eq!(everything, 720 - 60);
    assert!(matches!(
        store.downsample(cutoff, 0).await,
        Err(StoreError::BadRange(_))
    ));
    assert!(matches!(
        store.downsample(cutoff, 3_600_000).await,
        Err(StoreError::BadRange(_))
    ));
}

/// A server that ran long before llmwatch watched it: its histograms hold
/// history nobody observed. A window longer than the watching so far is
/// diffed against the first scrape, never taken whole since the server
/// started (the latency breakdown compared a day of a server's history
/// with the canaries of the last minutes on a real vLLM).
#[tokio::test]
async fn a_window_older_than_the_watching_starts_at_the_first_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("llmwatch.db")).await.unwrap();
    let target = store
        .upsert_target("vllm-a", TargetKind::Engine, "http://127.0.0.1:8000", 0)
        .await
        .unwrap();
    let base: i64 = 1_800_000_000_000;
    // Before watching: 1 000 slow first tokens (0.5 s each), 10 000 tokens.
    // While watched (12 scrapes, 5 s apart): 10 fast ones (0.05 s) a scrape.
    let batch: Vec<ScrapeRecord> = (0..12)
        .map(|i| {
            let fast = 10.0 * i as f64;
            scrape(
                target,
                base + i * 5000,
                0.5,
                10_000.0 + 100.0 * i as f64,
                fast,
                1000.0,
            )
        })
        .collect();
    store.write_scrapes(&batch).await.unwrap();
    let now = base + 11 * 5000;
    // A 5-minute window at the last scrape: only 55 s of it were watched.
    let range = Range::checked(now, now, 300_000).unwrap();
    let wanted = [Signal::ServerTtftP95, Signal::GenerationTokensRate];
    let series = store.signals_series(target, &wanted, range).await.unwrap();
    let at = |signal: Signal| {
        series
            .iter()
            .find(|(s, _)| *s == signal)
            .and_then(|(_, points)| points.first())
            .map(|p| p.value)
    };
    // 110 fast first tokens observed: p95 within the 0.1 s bucket, not the
    // slow history's 1 s one.
    let p95 = at(Signal::ServerTtftP95).expect("a p95 over the watched part");
    assert!(p95 <= 0.1, "p95 {p95} s includes the unobserved history");
    // 1 100 tokens over 55 s.
    let rate = at(Signal::GenerationTokensRate).expect("a rate");
    assert!((rate - 20.0).abs() < 1e-6, "{rate} tokens/s");
}

/// A verdict recorded while scrapes are written on another connection:
/// neither may fail. A deferred transaction that reads and then writes got
/// "database is locked" at once, whatever the busy timeout, whenever the
/// writer committed in between (seen in the demo's live diagnosis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_recorded_beside_a_busy_writer_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(&dir.path().join("x.db")).await.unwrap());
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:9", 0)
        .await
        .unwrap();
    const ROUNDS: i64 = 300;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..ROUNDS {
                let record = scrape(target, 1_000 + i * 5_000, 0.5, i as f64, 1.0, 1.0);
                store.write_scrapes(&[record]).await?;
            }
            Ok::<_, StoreError>(())
        })
    };
    for i in 0..ROUNDS {
        let row = llmwatch_store::LiveVerdictRow {
            ts_ms: 1_000 + i * 5_000,
            // A change every time, so each round also appends a change.
            verdict: if i % 2 == 0 { "healthy" } else { "idle" }.into(),
            confidence: "high".into(),
            evidence: String::new(),
            what_to_try: String::new(),
            samples: 1,
        };
        store
            .record_live_verdict(target, &row)
            .await
            .unwrap_or_else(|err| panic!("round {i}: {err}"));
    }
    writer
        .await
        .unwrap()
        .expect("the writer beside the verdicts");
}
