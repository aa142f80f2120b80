//! Store benchmarks: ingest (samples/s through `write_scrapes`, one
//! transaction per batch) and a 24-hour signal range query.
//!
//! `cargo bench -p llmwatch-store --bench ingest`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
use llmwatch_core::signals::Signal;
use llmwatch_store::{Range, ScrapeRecord, Store, TargetKind};

const TARGETS: i64 = 20;
const SAMPLES_PER_SCRAPE: usize = 500;

/// A vLLM-sized scrape: gauges, counters and four 40-bucket histograms,
/// with per-GPU series to reach `SAMPLES_PER_SCRAPE`.
fn scrape_samples(round: u64) -> Vec<NormalizedSample> {
    let mut samples = Vec::with_capacity(SAMPLES_PER_SCRAPE);
    let plain = |metric, value| NormalizedSample {
        metric,
        labels: Vec::new().into(),
        part: Part::Value,
        value,
    };
    samples.push(plain(CatalogMetric::KvCacheUsage, 0.5));
    samples.push(plain(CatalogMetric::RequestsRunning, 12.0));
    samples.push(plain(CatalogMetric::RequestsWaiting, 3.0));
    samples.push(plain(
        CatalogMetric::GenerationTokensTotal,
        round as f64 * 1000.0,
    ));
    samples.push(plain(
        CatalogMetric::PromptTokensTotal,
        round as f64 * 4000.0,
    ));
    for metric in [
        CatalogMetric::TtftSeconds,
        CatalogMetric::ItlSeconds,
        CatalogMetric::E2eSeconds,
        CatalogMetric::QueueTimeSeconds,
    ] {
        for b in 0..40 {
            samples.push(NormalizedSample {
                metric,
                labels: Vec::new().into(),
                part: Part::Bucket(0.001 * 1.4f64.powi(b)),
                value: (round * b as u64) as f64,
            });
        }
    }
    let mut gpu = 0;
    while samples.len() < SAMPLES_PER_SCRAPE {
        for metric in [CatalogMetric::GpuUtil, CatalogMetric::GpuMemUsedBytes] {
            samples.push(NormalizedSample {
                metric,
                labels: vec![("gpu".into(), gpu.to_string())].into(),
                part: Part::Value,
                value: gpu as f64,
            });
        }
        gpu += 1;
    }
    samples.truncate(SAMPLES_PER_SCRAPE);
    samples
}

fn ingest(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = runtime
        .block_on(Store::open(&dir.path().join("bench.db")))
        .expect("open");
    let ids: Vec<i64> = (0..TARGETS)
        .map(|i| {
            runtime
                .block_on(store.upsert_target(&format!("t{i}"), TargetKind::Engine, "http://x", 0))
                .expect("target")
        })
        .collect();
    let mut round = 0u64;
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(
        (TARGETS as usize * SAMPLES_PER_SCRAPE) as u64,
    ));
    group.bench_function("ingest_round_20x500", |b| {
        b.iter_batched(
            || {
                round += 1;
                ids.iter()
                    .map(|&target_id| ScrapeRecord {
                        target_id,
                        ts_ms: round as i64 * 5000,
                        up: true,
                        duration_ms: 1.0,
                        body_bytes: 0,
                        error: None,
                        engine: None,
                        samples: scrape_samples(round),
                        raw: Vec::new(),
                    })
                    .collect::<Vec<ScrapeRecord>>()
            },
            |batch| {
                runtime
                    .block_on(store.write_scrapes(&batch))
                    .expect("write")
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();

    // 24 h of 5-second scrapes for one target, then a 24 h query at a 5 min step.
    let day_store = runtime
        .block_on(Store::open(&dir.path().join("day.db")))
        .expect("open");
    let target = runtime
        .block_on(day_store.upsert_target("day", TargetKind::Engine, "http://x", 0))
        .expect("target");
    let scrapes_per_day = 24 * 3600 / 5;
    for chunk in (0..scrapes_per_day).collect::<Vec<_>>().chunks(720) {
        let batch: Vec<ScrapeRecord> = chunk
            .iter()
            .map(|&i| ScrapeRecord {
                target_id: target,
                ts_ms: i as i64 * 5000,
                up: true,
                duration_ms: 1.0,
                body_bytes: 0,
                error: None,
                engine: None,
                samples: scrape_samples(i as u64),
                raw: Vec::new(),
            })
            .collect();
        runtime
            .block_on(day_store.write_scrapes(&batch))
            .expect("write");
    }
    let range = Range::checked(0, (scrapes_per_day as i64 - 1) * 5000, 300_000).expect("range");
    let mut query = c.benchmark_group("store_query");
    query.bench_function("signal_series_24h_step_5m", |b| {
        b.iter(|| {
            runtime
                .block_on(day_store.signal_series(target, Signal::GenerationTokensRate, range))
                .expect("query")
        })
    });
    let page_signals = [
        Signal::KvCacheUsage,
        Signal::RequestsRunning,
        Signal::RequestsWaiting,
        Signal::ServerTtftP50,
        Signal::ServerTtftP95,
        Signal::ServerItlP50,
        Signal::ServerItlP95,
        Signal::GenerationTokensRate,
        Signal::PromptTokensRate,
        Signal::GpuUtil,
    ];
    query.bench_function("signals_series_10_signals_24h_step_5m", |b| {
        b.iter(|| {
            runtime
                .block_on(day_store.signals_series(target, &page_signals, range))
                .expect("query")
        })
    });
    // The same with the cache of decoded blocks off: a range never asked
    // before, or the first request after a restart.
    day_store.set_block_cache_bytes(0);
    query.bench_function("signals_series_10_signals_24h_step_5m_uncached", |b| {
        b.iter(|| {
            runtime
                .block_on(day_store.signals_series(target, &page_signals, range))
                .expect("query")
        })
    });
    day_store.set_block_cache_bytes(llmwatch_store::DEFAULT_CACHE_BYTES);
    query.finish();

    // Downsampling the day to one scrape a minute: a one-off (it deletes),
    // so timed once and printed, then the same query on what is left.
    let used_bytes = |store: &Store| {
        runtime
            .block_on(
                sqlx::query_scalar::<_, i64>(
                    "SELECT (page_count - freelist_count) * page_size
                     FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
                )
                .fetch_one(store.pool()),
            )
            .expect("size")
    };
    let before = used_bytes(&day_store);
    let started = std::time::Instant::now();
    let deleted = runtime
        .block_on(day_store.downsample(i64::MAX, 60_000))
        .expect("downsample");
    let took = started.elapsed();
    let after = used_bytes(&day_store);
    println!(
        "downsample 24 h of 5 s scrapes to 1/min: {deleted} rows deleted in {took:?}; \
         data {:.1} MiB -> {:.1} MiB ({:.1}x smaller)",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        before as f64 / after.max(1) as f64
    );
    let mut thinned = c.benchmark_group("store_query_downsampled");
    thinned.bench_function("signals_series_10_signals_24h_step_5m", |b| {
        b.iter(|| {
            runtime
                .block_on(day_store.signals_series(target, &page_signals, range))
                .expect("query")
        })
    });
    thinned.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);
