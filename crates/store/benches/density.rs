//! Storage density and speed on realistic pages (issue 13), a fixed workload
//! printed as a table:
//!
//! 1. **simulator**: the llmwatch simulator (`balanced`, 8 GPUs, engine
//!    clock 50× faster) under load that rises and falls (0–48 concurrent
//!    requests over loopback HTTP), its `/metrics` and dcgm page scraped
//!    every 100 ms wall = 5 s engine time, for `SIM_SCRAPES` scrapes
//!    (default 1 440 = 2 h of 5 s scrapes).
//! 2. **vLLM replay**: `VLLM_TARGETS` (20) targets, each a page sequence
//!    built from the real capture in `fixtures/vllm-live/` with counters and
//!    histograms advancing under varying load, `VLLM_SCRAPES` (1 440) scrapes
//!    each at 5 s, written a round (one scrape per target) per transaction:
//!    the ingest rate is samples / time spent in `write_scrapes`.
//! 3. **queries** on one vLLM target + its dcgm page over 24 h of 5 s
//!    scrapes: 10 signals at a 5 min step, the latest signals, a whole
//!    stored page.
//!
//! Each store is sealed (as a clean shutdown does) and measured with
//! `Store::db_stats`, the figures of `llmwatch db stats`.
//!
//! `cargo bench -p llmwatch-store --bench density`
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

#[path = "../tests/common/loaded.rs"]
mod loaded;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch_core::exposition::{detect_format, parse_lenient};
use llmwatch_core::signals::Signal;
use llmwatch_sim::{Profile, Sim, SimConfig};
use llmwatch_store::{DbStats, Range, RawSample, ScrapeRecord, Store, TargetKind};
use loaded::LoadedVllm;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STEP_MS: i64 = 5_000;
const T0: i64 = 1_750_000_000_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures")
            .join(path),
    )
    .expect("fixture")
}

fn raw_of(text: &[u8]) -> Vec<RawSample> {
    let (page, _) = parse_lenient(text, detect_format(None, text));
    RawSample::all_of(&page)
}

fn record(target_id: i64, ts_ms: i64, engine: &str, raw: Vec<RawSample>) -> ScrapeRecord {
    ScrapeRecord {
        target_id,
        ts_ms,
        up: true,
        duration_ms: 3.0 + (ts_ms % 7) as f64 * 0.13,
        body_bytes: 40_000,
        error: None,
        engine: Some(engine.into()),
        samples: Vec::new(),
        raw,
    }
}

fn print_stats(label: &str, stats: &DbStats) {
    println!(
        "{label}: {} samples, {} scrapes, {} series; sample tables {:.2} MiB = {:.3} B/sample \
         (file {:.2} MiB, {:.2} MiB free)",
        stats.samples,
        stats.scrapes,
        stats.series,
        stats.sample_bytes as f64 / 1048576.0,
        stats.bytes_per_sample.unwrap_or(f64::NAN),
        stats.file_bytes as f64 / 1048576.0,
        stats.free_bytes as f64 / 1048576.0,
    );
    for t in &stats.targets {
        println!(
            "  {:<12} {:>10} samples {:>7} scrapes {:>6} series {:>10} bytes = {:.3} B/sample",
            t.name,
            t.samples,
            t.scrapes,
            t.series,
            t.bytes,
            t.bytes_per_sample.unwrap_or(f64::NAN)
        );
    }
}

/// One non-streamed completion over a raw HTTP/1.1 connection.
async fn complete(addr: std::net::SocketAddr, max_tokens: u32) {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let body = format!(
        r#"{{"model":"sim-llama","prompt":"the quick brown fox jumps over the lazy dog again and again","max_tokens":{max_tokens}}}"#
    );
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).await.is_ok() {
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    }
}

async fn simulator(dir: &Path, scrapes: usize) -> DbStats {
    let mut config = SimConfig::new(Profile::named("balanced").expect("profile"));
    config.time_scale = 50.0;
    config.gpus = 8;
    config.model = "sim-llama".into();
    let sim = Sim::start(config).expect("sim");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(llmwatch_sim::serve(listener, sim.router()));
    // Load: worker k runs while the level is above k; the level follows a
    // slow wave with bursts.
    let level = Arc::new(AtomicUsize::new(0));
    for worker in 0..48 {
        let level = level.clone();
        tokio::spawn(async move {
            loop {
                if worker < level.load(Ordering::Relaxed) {
                    complete(addr, 16 + (worker as u32 * 7) % 96).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
    }
    let store = Store::open(&dir.join("sim.db")).await.expect("open");
    let engine = store
        .upsert_target("sim", TargetKind::Engine, "http://sim", 0)
        .await
        .expect("target");
    let gpu = store
        .upsert_target("sim-dcgm", TargetKind::Gpu, "http://sim-gpu", 0)
        .await
        .expect("target");
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    for i in 0..scrapes {
        ticker.tick().await;
        let wave = (i as f64 / 200.0).sin() * 0.5 + 0.5;
        let burst = if (i / 37) % 5 == 0 { 0.3 } else { 0.0 };
        level.store(((wave + burst).min(1.0) * 48.0) as usize, Ordering::Relaxed);
        let ts = T0 + i as i64 * STEP_MS;
        let batch = [
            record(engine, ts, "vllm", raw_of(sim.metrics_text().as_bytes())),
            record(gpu, ts, "dcgm", raw_of(sim.gpu_metrics_text().as_bytes())),
        ];
        store.write_scrapes(&batch).await.expect("write");
    }
    level.store(0, Ordering::Relaxed);
    store.seal_heads().await.expect("seal");
    store.db_stats().await.expect("stats")
}

async fn vllm_replay(dir: &Path, targets: usize, scrapes: usize) -> (DbStats, f64) {
    let body = fixture("vllm-live/metrics_vllm_idle.txt");
    let store = Store::open(&dir.join("vllm.db")).await.expect("open");
    let mut ids = Vec::new();
    let mut pages = Vec::new();
    for t in 0..targets {
        ids.push(
            store
                .upsert_target(&format!("vllm-{t:02}"), TargetKind::Engine, "http://v", 0)
                .await
                .expect("target"),
        );
        let mut generator = LoadedVllm::new(&body);
        for _ in 0..t * 37 {
            generator.next_page();
        }
        pages.push(generator);
    }
    let mut writing = Duration::ZERO;
    let mut samples = 0u64;
    for i in 0..scrapes {
        let batch: Vec<ScrapeRecord> = ids
            .iter()
            .zip(pages.iter_mut())
            .map(|(id, generator)| {
                record(*id, T0 + i as i64 * STEP_MS, "vllm", generator.next_page())
            })
            .collect();
        let started = Instant::now();
        samples += store.write_scrapes(&batch).await.expect("write");
        writing += started.elapsed();
    }
    store.seal_heads().await.expect("seal");
    let rate = samples as f64 / writing.as_secs_f64();
    (store.db_stats().await.expect("stats"), rate)
}

fn time<T>(label: &str, runs: usize, mut f: impl FnMut() -> T) {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(f());
            started.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "{label}: median {:.2?} (min {:.2?}, max {:.2?}, {runs} runs)",
        times[runs / 2],
        times[0],
        times[runs - 1]
    );
}

fn queries(runtime: &tokio::runtime::Runtime, dir: &Path) {
    let body = fixture("vllm-live/metrics_vllm_idle.txt");
    let dcgm = fixture("dcgm-exporter/metrics_example.txt");
    let dcgm_raw = raw_of(&dcgm);
    let (store, engine, gpu) = runtime.block_on(async {
        let store = Store::open(&dir.join("day.db")).await.expect("open");
        let engine = store
            .upsert_target("vllm", TargetKind::Engine, "http://v", 0)
            .await
            .expect("target");
        let gpu = store
            .upsert_target("dcgm", TargetKind::Gpu, "http://g", 0)
            .await
            .expect("target");
        let mut generator = LoadedVllm::new(&body);
        let day = 24 * 3600 * 1000 / STEP_MS;
        let started = Instant::now();
        for chunk in (0..day).collect::<Vec<_>>().chunks(60) {
            let mut batch = Vec::new();
            for &i in chunk {
                let ts = T0 + i * STEP_MS;
                batch.push(record(engine, ts, "vllm", generator.next_page()));
                let mut gpu_page = dcgm_raw.clone();
                for (k, s) in gpu_page.iter_mut().enumerate() {
                    if s.name.contains("UTIL")
                        || s.name.contains("POWER")
                        || s.name.contains("TEMP")
                    {
                        s.value = ((i as f64 / 50.0 + k as f64).sin() * 40.0 + 50.0).round();
                    }
                }
                batch.push(record(gpu, ts, "dcgm", gpu_page));
            }
            store.write_scrapes(&batch).await.expect("write");
        }
        store.seal_heads().await.expect("seal");
        println!(
            "wrote 24 h of a vLLM page + a dcgm page in {:.1?}",
            started.elapsed()
        );
        print_stats(
            "24 h, vLLM replay + dcgm fixture",
            &store.db_stats().await.expect("stats"),
        );
        (store, engine, gpu)
    });
    let to = T0 + (24 * 3600 * 1000 - STEP_MS);
    let range = Range::checked(T0, to, 300_000).expect("range");
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
        Signal::RequestRate,
    ];
    time(
        "signals_series: 10 engine signals, 24 h, 5 min step",
        15,
        || {
            runtime
                .block_on(store.signals_series(engine, &page_signals, range))
                .expect("query")
        },
    );
    store.set_block_cache_bytes(0);
    time(
        "signals_series: 10 engine signals, 24 h, 5 min step, block cache off",
        15,
        || {
            runtime
                .block_on(store.signals_series(engine, &page_signals, range))
                .expect("query")
        },
    );
    store.set_block_cache_bytes(llmwatch_store::DEFAULT_CACHE_BYTES);
    time(
        "signals_series: GPU util + memory, 24 h, 5 min step",
        15,
        || {
            runtime
                .block_on(store.signals_series(
                    gpu,
                    &[Signal::GpuUtil, Signal::GpuMemUsedRatio],
                    range,
                ))
                .expect("query")
        },
    );
    time("latest_signals (engine)", 50, || {
        runtime
            .block_on(store.latest_signals(engine))
            .expect("query")
    });
    time("page_at: the whole page at one instant", 50, || {
        runtime
            .block_on(store.page_at(engine, T0 + 12 * 3600 * 1000))
            .expect("query")
    });
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let sim_scrapes = env_or("SIM_SCRAPES", 1440);
    let started = Instant::now();
    let stats = runtime.block_on(simulator(dir.path(), sim_scrapes));
    println!(
        "simulator: {sim_scrapes} scrapes in {:.1?}",
        started.elapsed()
    );
    print_stats("simulator + dcgm page (sealed)", &stats);

    let targets = env_or("VLLM_TARGETS", 20);
    let scrapes = env_or("VLLM_SCRAPES", 1440);
    let (stats, rate) = runtime.block_on(vllm_replay(dir.path(), targets, scrapes));
    println!(
        "vLLM replay: {targets} targets x {scrapes} scrapes; ingest {:.2} M samples/s (time in write_scrapes, seals included)",
        rate / 1e6
    );
    print_stats("vLLM replay (sealed)", &stats);
    queries(&runtime, dir.path());
}
