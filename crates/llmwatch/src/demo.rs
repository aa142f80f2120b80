//! `llmwatch demo`: two simulated engines (one healthy, one KV-starved), each
//! with a simulated dcgm-exporter page, a background load on both whose
//! concurrency steps through several levels (so the target pages' passive
//! saturation curves fill in from it: a point per level within a cycle, a
//! knee on the KV-starved target after a cycle or two), and the daemon
//! watching them. Prints the dashboard URL and runs until Ctrl-C.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;

use crate::cli::sim::{self, SimArgs};
use crate::daemon;
use llmwatch_config::Config;

/// One simulated target of the demo.
struct DemoTarget {
    name: &'static str,
    profile: &'static str,
    /// Concurrent background streams, one level per [`LEVEL_HOLD`], in a
    /// cycle; and their prompt/output sizes in words/tokens.
    levels: &'static [usize],
    prompt_words: usize,
    max_tokens: u32,
}

const TARGETS: &[DemoTarget] = &[
    DemoTarget {
        name: "healthy",
        profile: "balanced",
        levels: &[4, 2, 1, 2, 4, 8],
        prompt_words: 200,
        max_tokens: 128,
    },
    DemoTarget {
        name: "kv-starved",
        profile: "kv-starved",
        // Starts full (the live verdict names the KV cache within a
        // minute), then walks down and up across its knee (~4 sequences of
        // 856 tokens fill its 256-block cache).
        levels: &[24, 12, 6, 4, 3, 2, 1, 2, 3, 4, 6, 12],
        prompt_words: 600,
        max_tokens: 256,
    },
];

const MODEL: &str = "sim-llama-8b";

/// How long the background load stays at one level: a few of the passive
/// curve's 1-minute windows.
const LEVEL_HOLD: Duration = Duration::from_secs(120);

/// Everything the demo started, for tests to drive and stop.
pub struct RunningDemo {
    pub daemon: daemon::Daemon,
    pub engine_urls: Vec<(String, String)>,
    _sims: Vec<llmwatch_sim::Sim>,
    load: Vec<tokio::task::JoinHandle<()>>,
    _tempdir: Option<tempfile::TempDir>,
}

impl RunningDemo {
    pub async fn shutdown(self) {
        for task in &self.load {
            task.abort();
        }
        self.daemon.shutdown().await;
    }
}

/// Starts the demo: sims on loopback ports, background load, the daemon.
pub async fn start(listen: SocketAddr, database: Option<PathBuf>) -> anyhow::Result<RunningDemo> {
    let (tempdir, database) = match database {
        Some(path) => (None, path),
        None => {
            let dir = tempfile::Builder::new().prefix("llmwatch-demo").tempdir()?;
            let path = dir.path().join("llmwatch.db");
            (Some(dir), path)
        }
    };
    let mut sims = Vec::new();
    let mut engine_urls = Vec::new();
    let mut toml = format!(
        "[server]\nlisten = \"{listen}\"\ndatabase = {:?}\n",
        database.display().to_string()
    );
    let mut load = Vec::new();
    let mut sweep_targets = Vec::new();
    for target in TARGETS {
        let started = start_target(target).await?;
        toml.push_str(&started.toml);
        load.extend(started.load);
        sweep_targets.push((
            target.name,
            started.url.clone(),
            started.gpu_url,
            started.background,
        ));
        engine_urls.push((target.name.to_string(), started.url));
        sims.push(started.sim);
    }
    toml.push_str(ALERTS_TOML);
    let config = Config::parse(&toml, Path::new("<demo>")).context("demo config")?;
    let daemon = daemon::start(config).await?;
    // Short sweeps at start, stored like any sweep: the healthy target's,
    // then the KV-starved one's, with its background load paused (a sweep
    // measures the server alone); it finds the knee and names the KV cache.
    let store = daemon.store.clone();
    load.push(tokio::spawn(async move {
        for (name, url, gpu_url, background) in sweep_targets {
            background.pause_until_idle().await;
            demo_sweep(store.clone(), name, url, gpu_url).await;
            background.paused.store(false, Ordering::Relaxed);
        }
    }));
    Ok(RunningDemo {
        daemon,
        engine_urls,
        _sims: sims,
        load,
        _tempdir: tempdir,
    })
}

/// The objectives of DESIGN.md, watched on every target.
const ALERTS_TOML: &str =
    "[[alerts]]\nname = \"probe-ttft-p95\"\nsignal = \"probe_ttft_p95\"\nop = \">\"\n\
     threshold = \"1s\"\nwindow = \"5m\"\nfor = \"1m\"\n\
     annotations = { summary = \"p95 TTFT {{ $value }}s on {{ $labels.target }}\" }\n\
     [[alerts]]\nname = \"kv-cache-full\"\nsignal = \"kv_cache_usage\"\nop = \">\"\n\
     threshold = 0.9\nwindow = \"1m\"\nfor = \"1m\"\n";

/// One demo target, started: its sim, what it adds to the daemon's config,
/// and its background load.
struct StartedTarget {
    sim: llmwatch_sim::Sim,
    url: String,
    /// Its simulated dcgm-exporter page.
    gpu_url: Option<String>,
    toml: String,
    background: Background,
    load: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts a target's sim (with its GPU page) and its background load.
async fn start_target(target: &'static DemoTarget) -> anyhow::Result<StartedTarget> {
    let (sim, engine, gpu) =
        sim::start(&SimArgs::loopback(target.profile, MODEL, 1.0).with_gpu_page()).await?;
    let url = format!("http://{engine}");
    let toml = target_toml(target, &url, gpu);
    let background = Background {
        paused: Arc::new(AtomicBool::new(false)),
        active: Arc::new(AtomicUsize::new(
            target.levels.first().copied().unwrap_or(1),
        )),
        sim: sim.clone(),
    };
    let load = start_background_load(target, &url, &background)?;
    Ok(StartedTarget {
        sim,
        url,
        gpu_url: gpu.map(|g| format!("http://{g}/metrics")),
        toml,
        background,
        load,
    })
}

/// The target's `[[targets]]` block (scrapes, probes, objectives) and, with
/// a GPU page, its `[[gpus]]` block.
fn target_toml(target: &DemoTarget, url: &str, gpu: Option<SocketAddr>) -> String {
    let gpus_line = match gpu {
        Some(_) => format!("gpus = \"{}-gpus\"\n", target.name),
        None => String::new(),
    };
    let mut toml = format!(
        "[[targets]]\nname = \"{}\"\nurl = \"{url}\"\nscrape_interval = \"2s\"\n{gpus_line}\
         slo_ttft_p95 = \"1s\"\nslo_itl_p95 = \"50ms\"\n\
         [targets.probe]\ninterval = \"5s\"\nshape = \"64x16\"\napi = \"chat\"\n",
        target.name
    );
    if let Some(gpu) = gpu {
        toml.push_str(&format!(
            "[[gpus]]\nname = \"{}-gpus\"\ndcgm_url = \"http://{gpu}/metrics\"\ninterval = \"2s\"\n",
            target.name
        ));
    }
    toml
}

/// A stream worker per slot of the target's highest level (those numbered
/// past the current level idle), and the task that steps the level.
fn start_background_load(
    target: &'static DemoTarget,
    url: &str,
    background: &Background,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(300))
        .build()?;
    let most = target.levels.iter().copied().max().unwrap_or(1);
    let mut load = Vec::new();
    for worker in 0..most {
        load.push(tokio::spawn(background_stream_loop(
            client.clone(),
            url.to_string(),
            target.prompt_words,
            target.max_tokens,
            worker,
            background.clone(),
        )));
    }
    load.push(tokio::spawn(cycle_levels(
        target.levels,
        background.active.clone(),
    )));
    Ok(load)
}

pub async fn run(listen: SocketAddr, database: Option<PathBuf>) -> anyhow::Result<()> {
    let demo = start(listen, database).await?;
    for (name, url) in &demo.engine_urls {
        let profile = TARGETS
            .iter()
            .find(|t| t.name == name)
            .map_or("?", |t| t.profile);
        println!("simulated engine {name:<12} {url}  (profile {profile}: hand-made, not fitted)");
    }
    println!(
        "the demo's profiles are hand-made; one fitted to a real vLLM 0.32: \
         llmwatch sim --profile-file fixtures/vllm-real-sweeps/default.fitted-profile.json"
    );
    println!(
        "\nllmwatch dashboard: http://{}/\n(Ctrl-C to stop)",
        demo.daemon.listen_addr
    );
    let signal = crate::daemon::stop_signal().await?;
    tracing::info!(signal, "stopping the demo");
    demo.shutdown().await;
    Ok(())
}

/// One of the demo's sweeps: concurrency 1…64 on the healthy target, 1…8
/// on the busy KV-starved one; short steps.
async fn demo_sweep(
    store: llmwatch_store::Store,
    name: &'static str,
    url: String,
    gpu_url: Option<String>,
) {
    let mut settings = llmwatch_engine::runners::sweep::SweepSettings::new(url);
    settings.target_name = Some(name.to_string());
    settings.gpu_url = gpu_url;
    settings.model = Some(MODEL.to_string());
    settings.api = llmwatch_probe::Api::Completions;
    let kv_starved = TARGETS
        .iter()
        .any(|t| t.name == name && t.profile == "kv-starved");
    if kv_starved {
        // Long prompts fill its small KV cache from concurrency 8 on.
        settings.shape = llmwatch_probe::Shape {
            input_tokens: 512,
            output_tokens: 128,
        };
        settings.ladder =
            llmwatch_engine::runners::sweep::Ladder::Concurrency(vec![1, 2, 4, 8, 16]);
        settings.requests_per_step = 8;
        settings.requests_per_slot = 1;
    } else {
        settings.shape = llmwatch_probe::Shape {
            input_tokens: 128,
            output_tokens: 32,
        };
        settings.ladder =
            llmwatch_engine::runners::sweep::Ladder::Concurrency(vec![1, 2, 4, 8, 16, 32, 64]);
        settings.requests_per_step = 12;
        settings.requests_per_slot = 2;
    }
    settings.min_step_duration = Duration::from_secs(2);
    settings.scrape_interval = Duration::from_millis(500);
    // The simulated engines share this machine's cores with the measuring
    // thread: do not let their scheduling jitter label steps client-bound.
    settings.self_check = llmwatch_probe::SelfCheckLimits {
        max_cpu_cores: 64.0,
        max_scheduler_lag_p99_ms: 1000.0,
        max_dispatch_lag_p99_ms: 1000.0,
        ..Default::default()
    };
    match llmwatch_engine::runners::sweep::run_sweep(settings, Some(&store), |_| {}).await {
        Ok(report) => tracing::info!(sweep = ?report.sweep_id, "demo sweep finished"),
        Err(err) => tracing::warn!(error = %err, "demo sweep failed"),
    }
}

/// A target's background load: paused while its sweep runs; workers
/// numbered `active` and above idle.
#[derive(Clone)]
struct Background {
    paused: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    sim: llmwatch_sim::Sim,
}

/// Steps `active` through `levels`, [`LEVEL_HOLD`] each, forever.
async fn cycle_levels(levels: &'static [usize], active: Arc<AtomicUsize>) {
    for level in levels.iter().cycle() {
        active.store(*level, Ordering::Relaxed);
        tokio::time::sleep(LEVEL_HOLD).await;
    }
}

impl Background {
    /// Pauses the load and waits (at most a minute) until the engine has
    /// finished what it was running.
    async fn pause_until_idle(&self) {
        self.paused.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            let now = self.sim.snapshot();
            if now.running == 0 && now.waiting == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One client that streams completions back to back, so the simulated
/// engines have something to show; it idles while paused or while the
/// level is at or below its number.
async fn background_stream_loop(
    client: reqwest::Client,
    base_url: String,
    prompt_words: usize,
    max_tokens: u32,
    worker: usize,
    background: Background,
) {
    let mut round = 0usize;
    loop {
        if background.paused.load(Ordering::Relaxed)
            || worker >= background.active.load(Ordering::Relaxed)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        round += 1;
        // A unique first word keeps these prompts out of the prefix cache.
        let prompt = format!(
            "demo-{worker}-{round} {}",
            "the quick brown fox jumps over the lazy dog ".repeat(prompt_words / 9 + 1)
        );
        let body = serde_json::json!({
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": true,
            "stream": true,
        });
        let sent = client
            .post(format!("{base_url}/v1/completions"))
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(response) => {
                let mut stream = response.bytes_stream();
                while let Some(chunk) = stream.next().await {
                    if chunk.is_err() {
                        break;
                    }
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
