//! Whole pages in, whole pages out: every line of every fixture page is
//! stored as the server wrote it and read back bit for bit, from the head
//! and from sealed blocks; signals derived from stored pages equal the
//! catalog's own reading of the live pages; an older database (catalog
//! samples packed per scrape) is moved into blocks with its signals intact;
//! retention and thinning cut blocks exactly.

mod common;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::loaded::LoadedVllm;
use llmwatch_core::catalog::{normalize, CatalogMetric, Engine, NormalizedSample, Part};
use llmwatch_core::exposition::{
    detect_format, parse_lenient, Exposition, Format, Label, MetricFamily, MetricType, Sample,
};
use llmwatch_core::signals::{signals_between, Signal, Snapshot};
use llmwatch_store::{codec, Range, RawSample, ScrapeRecord, Store, TargetKind, BLOCK_SCRAPES};

const T0: i64 = 1_750_000_000_000;
const STEP: i64 = 5_000;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Every metrics page among the fixtures: engine and exporter captures, the
/// Prometheus parser's test pages, and the OpenMetrics suite's valid pages.
fn fixture_pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    let mut stack = vec![fixtures()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if !name.starts_with("bad_") && name != "fuzz-corpus" {
                    stack.push(path);
                }
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name == "metrics" || (name.ends_with(".txt") && !name.starts_with("sse_")) {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

fn parse_page(body: &[u8]) -> Vec<RawSample> {
    let (page, _) = parse_lenient(body, detect_format(None, body));
    RawSample::all_of(&page)
}

fn record(target_id: i64, ts_ms: i64, raw: Vec<RawSample>) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms,
        up: true,
        duration_ms: 4.5,
        body_bytes: 30_000,
        error: None,
        engine: Some("vllm".into()),
        samples: Vec::new(),
        raw,
    }
}

type Lines = BTreeMap<(String, Vec<(String, String)>), u64>;

/// Lines by (name, labels) → value bits; a repeated line keeps its last value.
fn lines(samples: &[RawSample]) -> Lines {
    samples
        .iter()
        .map(|s| ((s.name.to_string(), s.labels.to_vec()), s.value.to_bits()))
        .collect()
}

async fn open(dir: &tempfile::TempDir) -> (Store, i64) {
    let store = Store::open(&dir.path().join("llmwatch.db")).await.unwrap();
    let target = store
        .upsert_target("t", TargetKind::Engine, "http://127.0.0.1:9", 0)
        .await
        .unwrap();
    (store, target)
}

/// A page parsed after another shares the strings of its unchanged lines
/// (what the scrape loop does), allocates the changed ones, and the store
/// keeps every line of both exactly.
#[tokio::test]
async fn a_page_shares_the_strings_of_the_last_pages_unchanged_lines() {
    let first_body =
        "# TYPE req counter\nreq_total{code=\"200\"} 1\nreq_total{code=\"500\"} 2\nup 1\n";
    let second_body =
        "# TYPE req counter\nreq_total{code=\"200\"} 5\nreq_total{code=\"404\"} 6\nup 1\n";
    let first = parse_page(first_body.as_bytes());
    let (page, _) = parse_lenient(
        second_body.as_bytes(),
        detect_format(None, second_body.as_bytes()),
    );
    let second = RawSample::all_of_like(&page, &first);
    assert_eq!(second, parse_page(second_body.as_bytes()));
    assert!(std::sync::Arc::ptr_eq(&first[0].labels, &second[0].labels));
    assert!(!std::sync::Arc::ptr_eq(&first[1].labels, &second[1].labels));
    assert!(std::sync::Arc::ptr_eq(&first[2].name, &second[2].name));
    // A histogram's lines of one name share it within a page too.
    assert!(std::sync::Arc::ptr_eq(&second[0].name, &second[1].name));

    let dir = tempfile::tempdir().unwrap();
    let (store, target) = open(&dir).await;
    store
        .write_scrapes(&[record(target, 1_000, first.clone())])
        .await
        .unwrap();
    store
        .write_scrapes(&[record(target, 2_000, second.clone())])
        .await
        .unwrap();
    for (ts_ms, lines) in [(1_000, &first), (2_000, &second)] {
        let stored = store.page_at(target, ts_ms).await.unwrap().unwrap();
        let mut got: Vec<_> = stored
            .raw
            .iter()
            .map(|s| (s.name.to_string(), s.labels.to_vec(), s.value))
            .collect();
        let mut want: Vec<_> = lines
            .iter()
            .map(|s| (s.name.to_string(), s.labels.to_vec(), s.value))
            .collect();
        got.sort_by(|a, b| a.partial_cmp(b).unwrap());
        want.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert_eq!(got, want, "page at {ts_ms}");
    }
}

#[tokio::test]
async fn every_line_of_every_fixture_page_comes_back_from_head_and_block() {
    let pages = fixture_pages();
    assert!(pages.len() >= 20, "fixture pages found: {pages:?}");
    let dir = tempfile::tempdir().unwrap();
    let (store, target) = open(&dir).await;
    let mut written = Vec::new();
    for (i, path) in pages.iter().enumerate() {
        let samples = parse_page(&std::fs::read(path).unwrap());
        let ts = T0 + i as i64 * STEP;
        store
            .write_scrapes(&[record(target, ts, samples.clone())])
            .await
            .unwrap();
        written.push((path, ts, lines(&samples)));
    }
    let check = |when: &'static str| {
        let store = store.clone();
        let written = &written;
        async move {
            for (path, ts, expected) in written {
                let page = store.page_at(target, *ts).await.unwrap().unwrap();
                assert_eq!(page.ts_ms, *ts, "{when}: {}", path.display());
                assert_eq!(
                    lines(&page.raw),
                    *expected,
                    "{when}: {} read back differs",
                    path.display()
                );
            }
        }
    };
    check("head").await;
    store.seal_heads().await.unwrap();
    let stats = store.db_stats().await.unwrap();
    assert_eq!(stats.head_scrapes, 0, "{stats:?}");
    check("block").await;
    // And after reopening.
    drop(store);
    let (store, _) = open(&dir).await;
    let page = store.page_at(target, written[0].1).await.unwrap().unwrap();
    assert_eq!(lines(&page.raw), written[0].2);
}

fn loaded_pages(count: usize) -> Vec<Vec<RawSample>> {
    let body = std::fs::read(fixtures().join("vllm-live/metrics_vllm_idle.txt")).unwrap();
    let mut pages = LoadedVllm::new(&body);
    (0..count).map(|_| pages.next_page()).collect()
}

/// The catalog's reading of a page, built the way the parser builds one
/// (a family per name).
fn normalized(raw: &[RawSample]) -> Vec<NormalizedSample> {
    let mut families: Vec<MetricFamily> = Vec::new();
    for s in raw {
        let sample = Sample {
            name: Cow::Borrowed(&*s.name),
            labels: s
                .labels
                .iter()
                .map(|(k, v)| Label {
                    name: Cow::Borrowed(k.as_str()),
                    value: Cow::Borrowed(v.as_str()),
                })
                .collect(),
            value: s.value,
            timestamp: None,
            exemplar: None,
        };
        match families.iter_mut().find(|f| *f.name == *s.name) {
            Some(family) => family.samples.push(sample),
            None => families.push(MetricFamily {
                name: Cow::Borrowed(&*s.name),
                metric_type: MetricType::Unknown,
                help: None,
                unit: None,
                samples: vec![sample],
            }),
        }
    }
    normalize(
        Engine::Vllm,
        &Exposition {
            format: Format::PrometheusText,
            families,
        },
    )
}

/// The signals between scrapes `i - step` and `i` of `pages`, computed from
/// the pages themselves.
fn expected_signals(pages: &[Vec<RawSample>], i: usize, step: usize) -> Vec<(Signal, f64)> {
    let cur = normalized(&pages[i]);
    let prev = (i >= step).then(|| normalized(&pages[i - step]));
    let ts = |j: usize| (T0 + j as i64 * STEP) as f64 / 1000.0;
    signals_between(
        prev.as_deref().map(|samples| Snapshot {
            ts: ts(i - step),
            samples,
        }),
        Snapshot {
            ts: ts(i),
            samples: &cur,
        },
    )
}

fn bits_of(values: &[(Signal, f64)]) -> Vec<(Signal, u64)> {
    let mut out: Vec<(Signal, u64)> = values.iter().map(|(s, v)| (*s, v.to_bits())).collect();
    out.sort_by_key(|(s, _)| s.to_string());
    out
}

#[tokio::test]
async fn signals_from_stored_pages_equal_the_catalogs_reading_of_the_live_pages() {
    let scrapes = BLOCK_SCRAPES + 300;
    let pages = loaded_pages(scrapes);
    let dir = tempfile::tempdir().unwrap();
    let (store, target) = open(&dir).await;
    for chunk in pages.chunks(64).enumerate() {
        let batch: Vec<ScrapeRecord> = chunk
            .1
            .iter()
            .enumerate()
            .map(|(j, raw)| record(target, T0 + (chunk.0 * 64 + j) as i64 * STEP, raw.clone()))
            .collect();
        store.write_scrapes(&batch).await.unwrap();
    }
    let stats = store.db_stats().await.unwrap();
    assert!(stats.blocks >= 1 && stats.head_scrapes > 0, "{stats:?}");
    // Instants on scrapes, a minute apart, across the block and the head.
    let signals: Vec<Signal> = Signal::all()
        .iter()
        .copied()
        .filter(|s| !llmwatch_store::is_probe_signal(*s))
        .collect();
    let range =
        Range::checked(T0 + 12 * STEP, T0 + (scrapes as i64 - 1) * STEP, 12 * STEP).unwrap();
    let series = store.signals_series(target, &signals, range).await.unwrap();
    let mut compared = 0;
    for (n, t) in (range.from_ms..=range.to_ms)
        .step_by(range.step_ms as usize)
        .enumerate()
    {
        let i = ((t - T0) / STEP) as usize;
        let want = bits_of(&expected_signals(&pages, i, 12));
        let got: Vec<(Signal, f64)> = series
            .iter()
            .filter_map(|(s, points)| points.iter().find(|p| p.ts_ms == t).map(|p| (*s, p.value)))
            .collect();
        assert_eq!(bits_of(&got), want, "instant {n} (scrape {i})");
        compared += want.len();
    }
    assert!(compared > 1000, "{compared} values compared");
    let latest = store.latest_signals(target).await.unwrap();
    assert_eq!(
        bits_of(&latest),
        bits_of(&expected_signals(&pages, scrapes - 1, 1))
    );
}

fn catalog_scrape(i: i64) -> Vec<NormalizedSample> {
    let sample = |metric, part, value| NormalizedSample {
        metric,
        labels: Vec::new().into(),
        part,
        value,
    };
    let n = i as f64;
    vec![
        sample(
            CatalogMetric::KvCacheUsage,
            Part::Value,
            (n / 50.0).sin().abs(),
        ),
        sample(CatalogMetric::GenerationTokensTotal, Part::Value, n * 431.0),
        sample(CatalogMetric::TtftSeconds, Part::Bucket(0.1), n * 3.0),
        sample(CatalogMetric::TtftSeconds, Part::Bucket(1.0), n * 5.0),
        sample(
            CatalogMetric::TtftSeconds,
            Part::Bucket(f64::INFINITY),
            n * 5.0,
        ),
        sample(CatalogMetric::TtftSeconds, Part::Count, n * 5.0),
        sample(CatalogMetric::TtftSeconds, Part::Sum, n * 1.37),
    ]
}

/// A database file in `dir` migrated by the repository's migrations up to
/// `version` only, as an older release left it.
async fn database_at_migration(dir: &tempfile::TempDir, version: u32) -> sqlx::SqlitePool {
    let repo_migrations = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let older = dir.path().join("migrations");
    std::fs::create_dir(&older).unwrap();
    for entry in std::fs::read_dir(&repo_migrations).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let number: u32 = name.split('_').next().unwrap().parse().unwrap();
        if number <= version {
            std::fs::copy(&path, older.join(&name)).unwrap();
        }
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("llmwatch.db"))
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    sqlx::migrate::Migrator::new(older.as_path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    pool
}

#[tokio::test]
async fn an_older_database_moves_into_blocks_with_its_signals_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let scrapes = 2 * BLOCK_SCRAPES as i64 + 100;
    let signals = [
        Signal::KvCacheUsage,
        Signal::GenerationTokensRate,
        Signal::ServerTtftP50,
        Signal::ServerTtftP95,
        Signal::ServerTtftMean,
    ];
    let range = Range::checked(T0, T0 + scrapes * STEP, 60_000).unwrap();
    let before = {
        // A database as the release before blocks left it: migrated up to
        // 0007 by the same files, holding the older layout (catalog series,
        // every scrape one packed row).
        let pool = database_at_migration(&dir, 7).await;
        let target: i64 = sqlx::query_scalar(
            "INSERT INTO targets (name, kind, url, engine, created_ms)
             VALUES ('t', 'engine', 'http://127.0.0.1:9', 'vllm', 0) RETURNING id",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        let mut ids = Vec::new();
        for (k, s) in catalog_scrape(0).iter().enumerate() {
            let part = llmwatch_store::part_key(s.part);
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO series (target_id, metric, labels, part) VALUES (?, ?, '[]', ?) RETURNING id",
            )
            .bind(target)
            .bind(s.metric.name())
            .bind(part)
            .fetch_one(&pool)
            .await
            .unwrap();
            assert_eq!(ids.len(), k);
            ids.push(u32::try_from(id).unwrap());
        }
        for i in 0..scrapes {
            let pairs: Vec<(u32, f64)> = ids
                .iter()
                .zip(catalog_scrape(i))
                .map(|(id, s)| (*id, s.value))
                .collect();
            sqlx::query(
                "INSERT INTO scrapes (target_id, ts_ms, up, duration_ms, body_bytes, error, sample_count, samples)
                 VALUES (?, ?, 1, 2.0, 100, NULL, ?, ?)",
            )
            .bind(target)
            .bind(T0 + i * STEP)
            .bind(pairs.len() as i64)
            .bind(codec::encode(&pairs))
            .execute(&pool)
            .await
            .unwrap();
        }
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scrapes")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rows, scrapes);
        pool.close().await;
        // What these samples mean, from the signal definitions themselves.
        let mut expected: Vec<(Signal, Vec<(i64, u64)>)> =
            signals.iter().map(|s| (*s, Vec::new())).collect();
        let mut t = range.from_ms;
        while t <= range.to_ms {
            let i = ((t - T0) / STEP).min(scrapes - 1);
            let bound = (t - range.step_ms).min(T0 + i * STEP - 1);
            let cur = catalog_scrape(i);
            let prev =
                (bound >= T0).then(|| ((bound - T0) / STEP, catalog_scrape((bound - T0) / STEP)));
            let values = signals_between(
                prev.as_ref().map(|(j, samples)| Snapshot {
                    ts: (T0 + j * STEP) as f64 / 1000.0,
                    samples,
                }),
                Snapshot {
                    ts: (T0 + i * STEP) as f64 / 1000.0,
                    samples: &cur,
                },
            );
            for (signal, points) in expected.iter_mut() {
                if let Some((_, v)) = values.iter().find(|(s, _)| s == signal) {
                    points.push((t, v.to_bits()));
                }
            }
            t += range.step_ms;
        }
        expected
    };
    // Opening moves it.
    let (store, target) = open(&dir).await;
    let stats = store.db_stats().await.unwrap();
    assert_eq!(stats.blocks, 2, "{stats:?}");
    assert_eq!(stats.scrapes, scrapes as u64);
    assert!(stats.head_scrapes < BLOCK_SCRAPES as u64 + 3, "{stats:?}");
    let after = store.signals_series(target, &signals, range).await.unwrap();
    let as_bits = |s: &[(Signal, Vec<llmwatch_store::Point>)]| -> Vec<(Signal, Vec<(i64, u64)>)> {
        s.iter()
            .map(|(sig, p)| {
                (
                    *sig,
                    p.iter().map(|p| (p.ts_ms, p.value.to_bits())).collect(),
                )
            })
            .collect()
    };
    assert!(before.iter().all(|(_, p)| p.len() > 100), "{before:?}");
    assert_eq!(as_bits(&after), before);
    // The stored values themselves are unchanged.
    let kv = store
        .metric_series(target, CatalogMetric::KvCacheUsage, T0, T0 + scrapes * STEP)
        .await
        .unwrap();
    let values: Vec<u64> = kv[0].points.iter().map(|p| p.value.to_bits()).collect();
    let want: Vec<u64> = (0..scrapes)
        .map(|i| catalog_scrape(i)[0].value.to_bits())
        .collect();
    assert_eq!(values, want);
}

#[tokio::test]
async fn retention_and_thinning_cut_blocks_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (store, target) = open(&dir).await;
    let pages = loaded_pages(3 * BLOCK_SCRAPES);
    let mut batch = Vec::new();
    for (i, raw) in pages.iter().enumerate() {
        let mut r = record(target, T0 + i as i64 * STEP, raw.clone());
        if i % 97 == 5 {
            r.up = false;
            r.raw.clear();
            r.error = Some("connection refused".into());
        }
        batch.push(r);
    }
    store.write_scrapes(&batch).await.unwrap();
    let cut = T0 + (BLOCK_SCRAPES as i64 + 100) * STEP;
    let pruned = store.prune(cut).await.unwrap();
    assert_eq!(pruned, BLOCK_SCRAPES as u64 + 100);
    let health = store.scrape_health(target, 10_000).await.unwrap();
    assert_eq!(health.len(), 2 * BLOCK_SCRAPES - 100);
    assert_eq!(health.last().unwrap().ts_ms, cut);
    let page = store
        .page_at(target, cut + 3 * STEP)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lines(&page.raw), lines(&pages[BLOCK_SCRAPES + 103]));
    // Thinning to a minute keeps one up (and one down) scrape per minute.
    let thin_before = T0 + 2 * BLOCK_SCRAPES as i64 * STEP;
    store.downsample(thin_before, 60_000).await.unwrap();
    let health = store.scrape_health(target, 10_000).await.unwrap();
    let old: Vec<_> = health.iter().filter(|h| h.ts_ms < thin_before).collect();
    let minutes: std::collections::HashSet<(bool, i64)> = old
        .iter()
        .map(|h| (h.up, h.ts_ms.div_euclid(60_000)))
        .collect();
    assert_eq!(old.len(), minutes.len(), "one per minute and health");
    let kept = old.iter().find(|h| h.up).unwrap();
    let i = ((kept.ts_ms - T0) / STEP) as usize;
    let page = store.page_at(target, kept.ts_ms).await.unwrap().unwrap();
    assert_eq!(lines(&page.raw), lines(&pages[i]));
}

/// (labels, time) → value bits of every line named `name` in `pages`
/// scraped at `T0 + i * STEP`, for the times `keep` accepts.
fn expected_points(
    pages: &[Vec<RawSample>],
    name: &str,
    keep: impl Fn(i64) -> bool,
) -> BTreeMap<(Vec<(String, String)>, i64), u64> {
    let mut out = BTreeMap::new();
    for (i, page) in pages.iter().enumerate() {
        let ts = T0 + i as i64 * STEP;
        if keep(ts) {
            for line in page.iter().filter(|l| *l.name == *name) {
                out.insert((line.labels.to_vec(), ts), line.value.to_bits());
            }
        }
    }
    out
}

async fn stored_points(
    store: &Store,
    target: i64,
    name: &str,
) -> BTreeMap<(Vec<(String, String)>, i64), u64> {
    let mut out = BTreeMap::new();
    for series in store.raw_series(target, name, 0, i64::MAX).await.unwrap() {
        for point in series.points {
            out.insert((series.labels.clone(), point.ts_ms), point.value.to_bits());
        }
    }
    out
}

#[tokio::test]
async fn range_reads_served_from_the_block_cache_follow_retention_and_thinning() {
    let dir = tempfile::tempdir().unwrap();
    let (store, target) = open(&dir).await;
    let pages = loaded_pages(3 * BLOCK_SCRAPES);
    let batch: Vec<ScrapeRecord> = pages
        .iter()
        .enumerate()
        .map(|(i, raw)| record(target, T0 + i as i64 * STEP, raw.clone()))
        .collect();
    store.write_scrapes(&batch).await.unwrap();
    let name = "vllm:e2e_request_latency_seconds_bucket";
    let all = expected_points(&pages, name, |_| true);
    assert!(
        all.len() > 3 * BLOCK_SCRAPES,
        "the histogram is on the page"
    );
    // Twice: decoded from the blocks, then from the cache.
    assert_eq!(stored_points(&store, target, name).await, all);
    assert_eq!(stored_points(&store, target, name).await, all);
    // Retention deletes a block and rewrites the one straddling the cut;
    // nothing of them may still come from the cache.
    let cut = T0 + (BLOCK_SCRAPES as i64 + 100) * STEP;
    store.prune(cut).await.unwrap();
    let kept = expected_points(&pages, name, |ts| ts >= cut);
    assert_eq!(stored_points(&store, target, name).await, kept);
    // Thinning rewrites the older blocks, one scrape a minute kept.
    let thin_before = T0 + 2 * BLOCK_SCRAPES as i64 * STEP;
    store.downsample(thin_before, 60_000).await.unwrap();
    let stored = stored_points(&store, target, name).await;
    let times: std::collections::BTreeSet<i64> = stored.keys().map(|(_, ts)| *ts).collect();
    let expected = expected_points(&pages, name, |ts| times.contains(&ts) && ts >= cut);
    assert_eq!(stored, expected);
    assert!(
        times.iter().filter(|ts| **ts < thin_before).count() < 2 * (BLOCK_SCRAPES - 100) / 12 + 4,
        "the old part is thinned to a minute"
    );
    // With the cache off the same answer comes from the blocks.
    store.set_block_cache_bytes(0);
    assert_eq!(stored_points(&store, target, name).await, expected);
}
