//! The Prometheus view of the store: scraped lines under Prometheus' labels,
//! staleness markers where a line or a scrape went missing, values read back
//! from the head and from sealed blocks alike, `up`, and the limits.

use llmwatch_store::prom_source::{PromLimits, STALE_MARKER_BITS};
use llmwatch_store::{PromLabels, RawSample, ScrapeRecord, Store, TargetKind, BLOCK_SCRAPES};

const T0: i64 = 1_750_000_000_000;
const STEP: i64 = 5_000;
const LIMITS: PromLimits = PromLimits {
    max_series: 1_000,
    max_samples: 1_000_000,
};

fn line(name: &str, labels: &[(&str, &str)], value: f64) -> RawSample {
    RawSample {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        value,
    }
}

fn scrape(target_id: i64, i: i64, up: bool) -> ScrapeRecord {
    // `gone` is on the page at every scrape but #3; the scrape #6 fails.
    let mut raw = vec![
        line(
            "requests_total",
            &[("job", "theirs"), ("model", "m")],
            i as f64,
        ),
        line("temperature", &[("gpu", "0")], 40.0 + i as f64 / 2.0),
    ];
    if i != 3 {
        raw.push(line("gone", &[], 1.0));
    }
    ScrapeRecord {
        target_id,
        ts_ms: T0 + i * STEP,
        up,
        duration_ms: 2.0,
        body_bytes: 10,
        error: (!up).then(|| "connection refused".into()),
        engine: None,
        samples: Vec::new(),
        raw: if up { raw } else { Vec::new() },
    }
}

fn get<'a>(labels: &'a PromLabels, name: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

async fn store_with(scrapes: i64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let id = store
        .upsert_target(
            "sim",
            TargetKind::Engine,
            "http://user:pw@10.0.0.1:8000/metrics",
            T0,
        )
        .await
        .unwrap();
    let batch: Vec<ScrapeRecord> = (0..scrapes).map(|i| scrape(id, i, i != 6)).collect();
    for chunk in batch.chunks(100) {
        store.write_scrapes(chunk).await.unwrap();
    }
    (dir, store)
}

#[tokio::test]
async fn scraped_lines_carry_prometheus_labels_and_staleness() {
    let (_dir, store) = store_with(10).await;
    let all = |_: &PromLabels| true;
    let found = store
        .prom_select(&all, T0, T0 + 9 * STEP, LIMITS)
        .await
        .unwrap();
    let counter = found
        .iter()
        .find(|s| get(&s.labels, "__name__") == Some("requests_total"))
        .expect("the counter");
    assert_eq!(get(&counter.labels, "job"), Some("engine"));
    assert_eq!(get(&counter.labels, "exported_job"), Some("theirs"));
    assert_eq!(get(&counter.labels, "instance"), Some("10.0.0.1:8000"));
    assert_eq!(get(&counter.labels, "target"), Some("sim"));
    assert!(
        found
            .iter()
            .all(|s| s.labels.iter().all(|(_, v)| !v.contains("pw"))),
        "no secret in any label"
    );
    // Values at every up scrape; a staleness marker at the failed scrape #6.
    let times: Vec<i64> = counter
        .points
        .iter()
        .map(|p| (p.ts_ms - T0) / STEP)
        .collect();
    assert_eq!(times, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(counter.points[6].value.to_bits(), STALE_MARKER_BITS);
    assert_eq!(counter.points[7].value, 7.0);
    // `gone` missed scrape #3: a marker there, back at #4.
    let gone = found
        .iter()
        .find(|s| get(&s.labels, "__name__") == Some("gone"))
        .unwrap();
    assert_eq!(gone.points[3].ts_ms, T0 + 3 * STEP);
    assert_eq!(gone.points[3].value.to_bits(), STALE_MARKER_BITS);
    assert_eq!(gone.points[4].value, 1.0);
    // `up` per scrape.
    let up = found
        .iter()
        .find(|s| get(&s.labels, "__name__") == Some("up"))
        .unwrap();
    let ups: Vec<f64> = up.points.iter().map(|p| p.value).collect();
    assert_eq!(ups, vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]);
    // Sorted by label set, and a window cuts the points.
    assert!(found.windows(2).all(|w| w[0].labels < w[1].labels));
    let narrow = store
        .prom_select(&all, T0 + 2 * STEP, T0 + 4 * STEP, LIMITS)
        .await
        .unwrap();
    let counter = narrow
        .iter()
        .find(|s| get(&s.labels, "__name__") == Some("requests_total"))
        .unwrap();
    let values: Vec<f64> = counter.points.iter().map(|p| p.value).collect();
    assert_eq!(values, vec![2.0, 3.0, 4.0]);
}

#[tokio::test]
async fn sealed_blocks_read_like_the_head_and_limits_hold() {
    let scrapes = BLOCK_SCRAPES as i64 + 40;
    let (_dir, store) = store_with(scrapes).await;
    let is_temperature = |l: &PromLabels| get(l, "__name__") == Some("temperature");
    let found = store
        .prom_select(&is_temperature, T0, T0 + scrapes * STEP, LIMITS)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let points = &found[0].points;
    // Every up scrape, from blocks and the head, plus the marker at #6.
    assert_eq!(points.len() as i64, scrapes);
    for p in points.iter().filter(|p| !p.value.is_nan()) {
        let i = (p.ts_ms - T0) / STEP;
        assert_eq!(p.value, 40.0 + i as f64 / 2.0);
    }
    let tight = PromLimits {
        max_series: 1_000,
        max_samples: 100,
    };
    let err = store
        .prom_select(&is_temperature, T0, T0 + scrapes * STEP, tight)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("100 samples"), "{err}");
    // Listing: names without decoding values.
    let all = |_: &PromLabels| true;
    let listed = store
        .prom_series(&all, T0, T0 + STEP, LIMITS)
        .await
        .unwrap();
    let names: Vec<&str> = listed.iter().filter_map(|l| get(l, "__name__")).collect();
    for name in [
        "requests_total",
        "temperature",
        "gone",
        "up",
        "scrape_duration_seconds",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let before = store
        .prom_series(&all, T0 - 100 * STEP, T0 - STEP, LIMITS)
        .await
        .unwrap();
    assert!(
        before.is_empty(),
        "nothing before the first scrape: {before:?}"
    );
}
