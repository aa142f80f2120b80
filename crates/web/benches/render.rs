//! Server-side render time of a target page over 24 h of 5-second data:
//! a temp store holds 17 280 scrapes of a vLLM-like engine, 17 280 scrapes
//! of its 8-GPU dcgm source and a canary probe every 15 s; the page is
//! rendered for the 24 h range (5-minute step) the way the handler does it.
//!
//! `cargo bench -p llmwatch-web --bench render -- --warm-up-time 1 --measurement-time 5`
//!
//! Three measurements split the cost: the whole page (store queries, charts,
//! SVG, template), the store queries alone, and charts + SVG + template from
//! data already read.

use askama::Template;
use criterion::{criterion_group, criterion_main, Criterion};
use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
use llmwatch_store::{ProbeRow, ScrapeRecord, Store, TargetKind};
use llmwatch_web::pages::target::{
    build_charts, probe_series, range_of, target_page, GPU_SIGNALS, TARGET_SIGNALS,
};
use llmwatch_web::pages::{charts, PageTarget, PagesConfig};

const STEP_MS: i64 = 5000;
const SCRAPES: i64 = 24 * 3600 * 1000 / STEP_MS;
/// Data ends here (any fixed instant: the page is asked "as of" it).
const END_MS: i64 = 1_800_000_000_000;
const START_MS: i64 = END_MS - (SCRAPES - 1) * STEP_MS;

fn plain(metric: CatalogMetric, value: f64) -> NormalizedSample {
    NormalizedSample {
        metric,
        labels: Vec::new().into(),
        part: Part::Value,
        value,
    }
}

/// A vLLM-like scrape: gauges, counters, seven histograms of 30 buckets
/// (TTFT, ITL, e2e and vLLM's phase histograms, whose means the TTFT
/// breakdown chart splits the canaries' TTFT by).
fn engine_samples(i: i64) -> Vec<NormalizedSample> {
    let r = i as f64;
    let wave = (r / 200.0).sin() * 0.5 + 0.5;
    let mut s = vec![
        plain(CatalogMetric::KvCacheUsage, 0.3 + 0.6 * wave),
        plain(CatalogMetric::RequestsRunning, (8.0 + 24.0 * wave).round()),
        plain(CatalogMetric::RequestsWaiting, (6.0 * wave).round()),
        plain(CatalogMetric::PreemptionsTotal, (r * 0.1).floor()),
        plain(CatalogMetric::PrefixCacheHitsTotal, r * 300.0),
        plain(CatalogMetric::PrefixCacheQueriesTotal, r * 1000.0),
        plain(CatalogMetric::PromptTokensTotal, r * 20_000.0),
        plain(CatalogMetric::GenerationTokensTotal, r * 5_000.0),
        plain(CatalogMetric::RequestsSuccessTotal, r * 20.0),
    ];
    // (histogram, its mean in seconds): phases that add up as an engine's do.
    for (metric, mean) in [
        (CatalogMetric::TtftSeconds, 0.04),
        (CatalogMetric::ItlSeconds, 0.012),
        (CatalogMetric::E2eSeconds, 0.22),
        (CatalogMetric::QueueTimeSeconds, 0.005),
        (CatalogMetric::PrefillTimeSeconds, 0.03),
        (CatalogMetric::DecodeTimeSeconds, 0.18),
        (CatalogMetric::InferenceTimeSeconds, 0.21),
    ] {
        let count = r * 20.0;
        for b in 0..30 {
            let le = 0.001 * 1.5f64.powi(b);
            let frac = (le / (le + 0.2 + wave)).min(1.0);
            s.push(NormalizedSample {
                metric,
                labels: Vec::new().into(),
                part: Part::Bucket(le),
                value: (count * frac).floor(),
            });
        }
        s.push(NormalizedSample {
            metric,
            labels: Vec::new().into(),
            part: Part::Bucket(f64::INFINITY),
            value: count,
        });
        s.push(NormalizedSample {
            metric,
            labels: Vec::new().into(),
            part: Part::Sum,
            value: count * mean,
        });
        s.push(NormalizedSample {
            metric,
            labels: Vec::new().into(),
            part: Part::Count,
            value: count,
        });
    }
    s
}

/// A dcgm-like scrape of 8 GPUs, each series with dcgm's label set.
fn gpu_samples(i: i64) -> Vec<NormalizedSample> {
    let wave = ((i as f64) / 150.0).cos() * 0.5 + 0.5;
    let mut s = Vec::new();
    for gpu in 0..8 {
        let labels = vec![
            ("gpu".to_string(), gpu.to_string()),
            (
                "UUID".to_string(),
                format!("GPU-5f1c9a0e-0000-4000-8000-00000000000{gpu}"),
            ),
            ("device".to_string(), format!("nvidia{gpu}")),
            ("modelName".to_string(), "NVIDIA H100 80GB HBM3".to_string()),
            ("Hostname".to_string(), "node-1".to_string()),
            (
                "DCGM_FI_DRIVER_VERSION".to_string(),
                "570.124.06".to_string(),
            ),
        ];
        for (metric, value) in [
            (CatalogMetric::GpuUtil, 0.5 + 0.4 * wave),
            (CatalogMetric::GpuMemUsedBytes, 60e9 + 15e9 * wave),
            (CatalogMetric::GpuMemTotalBytes, 80e9),
            (CatalogMetric::GpuPowerWatts, 400.0 + 200.0 * wave),
        ] {
            s.push(NormalizedSample {
                metric,
                labels: labels.clone().into(),
                part: Part::Value,
                value,
            });
        }
    }
    s
}

fn record(target_id: i64, i: i64, samples: Vec<NormalizedSample>) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms: START_MS + i * STEP_MS,
        up: true,
        duration_ms: 3.0,
        body_bytes: 40_000,
        error: None,
        engine: Some("vllm".to_string()),
        samples,
        raw: Vec::new(),
    }
}

fn render(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, engine, gpu) = runtime.block_on(async {
        let store = Store::open(&dir.path().join("render.db"))
            .await
            .expect("open");
        let engine = store
            .upsert_target("vllm-a", TargetKind::Engine, "http://127.0.0.1:8000", 0)
            .await
            .expect("target");
        let gpu = store
            .upsert_target(
                "node-1",
                TargetKind::Gpu,
                "http://127.0.0.1:9400/metrics",
                0,
            )
            .await
            .expect("target");
        let all: Vec<i64> = (0..SCRAPES).collect();
        for chunk in all.chunks(720) {
            let batch: Vec<ScrapeRecord> = chunk
                .iter()
                .flat_map(|&i| {
                    [
                        record(engine, i, engine_samples(i)),
                        record(gpu, i, gpu_samples(i)),
                    ]
                })
                .collect();
            store.write_scrapes(&batch).await.expect("write");
        }
        // A canary every 15 s.
        for i in (0..SCRAPES).step_by(3) {
            let ttft = 0.05 + 0.01 * ((i % 17) as f64);
            store
                .write_probe(&ProbeRow {
                    target_id: engine,
                    run_id: None,
                    ts_ms: START_MS + i * STEP_MS,
                    api: "chat".into(),
                    model: "llama-3-8b".into(),
                    shape: "64x16".into(),
                    ok: true,
                    error_kind: None,
                    error: None,
                    http_status: Some(200),
                    ttfb_s: Some(ttft * 0.5),
                    ttft_s: Some(ttft),
                    tpot_s: Some(0.012),
                    e2e_s: ttft + 15.0 * 0.012,
                    itl_s: vec![0.012; 15],
                    prompt_tokens: Some(64),
                    output_tokens: 16,
                    cached_tokens: None,
                    finish_reason: Some("length".into()),
                    record_json: "{}".into(),
                })
                .await
                .expect("probe");
        }
        (store, engine, gpu)
    });
    let config = PagesConfig {
        targets: vec![PageTarget {
            name: "vllm-a".into(),
            url: "http://127.0.0.1:8000".into(),
            metrics_url: "http://127.0.0.1:8000/metrics".into(),
            gpus: Some("node-1".into()),
            gpu_url: None,
            api_key_env: None,
            objectives: Default::default(),
        }],
        ..PagesConfig::default()
    };
    let range = range_of("24h", END_MS).expect("range");
    let scrape_signals: Vec<_> = TARGET_SIGNALS
        .iter()
        .copied()
        .filter(|s| !llmwatch_store::is_probe_signal(*s))
        .collect();
    let probe_signals: Vec<_> = TARGET_SIGNALS
        .iter()
        .copied()
        .filter(|s| llmwatch_store::is_probe_signal(*s))
        .collect();

    // Sanity: the page has data in every chart but preemptions-free ones.
    let page = runtime
        .block_on(target_page(&store, &config, "vllm-a", "24h", END_MS))
        .expect("page")
        .expect("target");
    let html = page.render().expect("html");
    assert!(html.contains("KV-cache usage") && !html.contains("no data in this range"));
    eprintln!(
        "target page: {} KiB of HTML, {} charts",
        html.len() / 1024,
        page.charts.len()
    );

    let mut group = c.benchmark_group("render");
    group.sample_size(20);
    // A page viewed again within a minute: its passive curve is kept.
    group.bench_function("target_page_24h_5s_data", |b| {
        b.iter(|| {
            let page = runtime
                .block_on(target_page(&store, &config, "vllm-a", "24h", END_MS))
                .expect("page")
                .expect("target");
            page.render().expect("html")
        })
    });
    group.bench_function("store_queries_only", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut s = store
                    .signals_series(engine, &scrape_signals, range)
                    .await
                    .expect("engine");
                s.extend(
                    probe_series(&store, engine, range, &[])
                        .await
                        .expect("probes"),
                );
                s.extend(
                    store
                        .signals_series(gpu, GPU_SIGNALS, range)
                        .await
                        .expect("gpu"),
                );
                s
            })
        })
    });
    group.bench_function("store_engine_scrape_signals", |b| {
        b.iter(|| runtime.block_on(store.signals_series(engine, &scrape_signals, range)))
    });
    group.bench_function("store_engine_probe_signals", |b| {
        b.iter(|| runtime.block_on(store.signals_series(engine, &probe_signals, range)))
    });
    group.bench_function("page_probe_series_one_read", |b| {
        b.iter(|| runtime.block_on(probe_series(&store, engine, range, &[])))
    });
    group.bench_function("store_gpu_signals", |b| {
        b.iter(|| runtime.block_on(store.signals_series(gpu, GPU_SIGNALS, range)))
    });
    group.finish();

    // The same page with the store's cache of decoded blocks off: what the
    // first request after a restart (or a range never asked before) costs.
    store.set_block_cache_bytes(0);
    let mut cold = c.benchmark_group("render_uncached");
    cold.sample_size(10);
    cold.bench_function("target_page_24h_5s_data", |b| {
        b.iter(|| {
            // No passive curve computed yet either.
            let config = PagesConfig {
                passive_curves: Default::default(),
                ..config.clone()
            };
            let page = runtime
                .block_on(target_page(&store, &config, "vllm-a", "24h", END_MS))
                .expect("page")
                .expect("target");
            page.render().expect("html")
        })
    });
    cold.bench_function("store_engine_scrape_signals", |b| {
        b.iter(|| runtime.block_on(store.signals_series(engine, &scrape_signals, range)))
    });
    cold.bench_function("store_gpu_signals", |b| {
        b.iter(|| runtime.block_on(store.signals_series(gpu, GPU_SIGNALS, range)))
    });
    cold.finish();
    store.set_block_cache_bytes(llmwatch_store::DEFAULT_CACHE_BYTES);

    let mut group = c.benchmark_group("render");
    let mut series = runtime
        .block_on(store.signals_series(engine, TARGET_SIGNALS, range))
        .expect("engine");
    series.extend(
        runtime
            .block_on(store.signals_series(gpu, GPU_SIGNALS, range))
            .expect("gpu"),
    );
    group.bench_function("charts_svg_only", |b| {
        b.iter(|| {
            build_charts(&series, &[], &[], config.objectives_for("vllm-a"), range)
                .iter()
                .map(|c| charts::render_svg(c).len())
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
