//! The daemon: registers targets, starts one scrape loop per target and GPU
//! source, the batched writer, retention, and the web server. Returns a
//! handle so tests and `llmwatch demo` can run it in-process.

use llmwatch_core::redact::redact_url;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use llmwatch_store::{ScrapeRecord, Store, TargetKind};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use llmwatch_config::{Config, EngineChoice};
use llmwatch_engine::runners::retention::{run_retention, Retention};
use llmwatch_engine::runners::supervisor::{start_supervisor, TargetTasks};
use llmwatch_engine::runners::sweep::schedule::{run_schedule, SweepSlots};
use llmwatch_engine::sources::discovery::{run_discovery, DiscoveryCounters, DiscoveryJob};
use llmwatch_engine::sources::gpu_nvml::{run_nvml_loop, NvmlSource};
use llmwatch_engine::sources::scrape::{self, now_ms, ScrapeCounters, ScrapeJob};
use llmwatch_engine::targets::TargetSet;
use llmwatch_web as web;

/// A running daemon.
pub struct Daemon {
    pub store: Store,
    pub listen_addr: SocketAddr,
    pub counters: Arc<ScrapeCounters>,
    /// The watched targets now, configured and discovered.
    pub targets: TargetSet,
    /// Service discovery's refreshes, failures and targets found.
    pub discovery: Arc<DiscoveryCounters>,
    pub alerts: llmwatch_engine::alerts::AlertsHandle,
    /// The one sweep slot (API, page and scheduled sweeps).
    pub sweeps: SweepSlots,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Daemon {
    /// Stops every loop, cancels a running sweep (it ends `cancelled` with
    /// what it measured) and waits for the writer to commit what it holds.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        if self.sweeps.cancel_running() {
            tracing::info!("shutdown: cancelling the running sweep");
            // A cancelled sweep stores its end within moments; do not wait forever.
            if !self.sweeps.wait_idle(SWEEP_CANCEL_WAIT).await {
                tracing::warn!("shutdown: the cancelled sweep did not end in time");
            }
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Waits for SIGTERM or SIGINT (Ctrl-C); returns which came.
pub async fn stop_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    })
}

/// The most a graceful shutdown may take before the process exits anyway.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(9);

/// Runs the daemon until SIGTERM or SIGINT, then shuts it down within
/// [`SHUTDOWN_LIMIT`]: stops accepting, ends the loops, cancels a running
/// sweep (marked `cancelled`), lets the writer commit its last batch.
pub async fn run_until_stopped(daemon: Daemon) -> anyhow::Result<()> {
    let signal = stop_signal().await?;
    tracing::info!(signal, "shutting down");
    match tokio::time::timeout(SHUTDOWN_LIMIT, daemon.shutdown()).await {
        Ok(()) => tracing::info!("stopped cleanly"),
        Err(_) => tracing::warn!(limit = ?SHUTDOWN_LIMIT, "shutdown took too long; exiting anyway"),
    }
    Ok(())
}

/// How long shutdown waits for a cancelled sweep to store its end.
const SWEEP_CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Starts the daemon for `config` on the current runtime.
pub async fn start(config: Config) -> anyhow::Result<Daemon> {
    let (token, discovery_tokens) = check_access(&config)?;
    let store = Store::open(&config.server.database)
        .await
        .with_context(|| format!("opening database {}", config.server.database.display()))?;
    let client = scrape::scrape_client().context("building the HTTP client")?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (records_tx, records_rx) = mpsc::channel::<ScrapeRecord>(1024);
    let now = now_ms();
    let mut wiring = Wiring {
        store,
        client,
        counters: Arc::new(ScrapeCounters::default()),
        shutdown: shutdown_rx,
        tasks: Vec::new(),
        started_ms: now,
    };
    mark_interrupted_sweeps(&wiring.store, now).await?;

    // Configured targets now, discovered ones as discovery finds them: the
    // supervisor keeps one scrape (and canary) loop per target of the set.
    let targets = TargetSet::new(config.targets.clone());
    let discovery_counters = Arc::new(DiscoveryCounters::default());
    spawn_discovery(
        &config,
        discovery_tokens,
        &targets,
        &discovery_counters,
        &mut wiring,
    )?;
    let supervisor = start_supervisor(
        TargetTasks {
            store: wiring.store.clone(),
            client: wiring.client.clone(),
            records: records_tx.clone(),
            counters: wiring.counters.clone(),
            max_body_bytes: config.server.max_body_bytes,
        },
        targets.clone(),
        wiring.shutdown.clone(),
    )
    .await;
    wiring.tasks.push(supervisor);
    let gpu_sources = start_gpu_sources(&config, &records_tx, now, &mut wiring).await?;
    // The writer ends when every sender is gone: the loops hold the rest.
    drop(records_tx);
    spawn_housekeeping(&config, &targets, gpu_sources, records_rx, &mut wiring);
    // Scheduled sweeps share one slot with API sweeps: one sweep at a time.
    let sweep_slots = SweepSlots::default();
    spawn_sweep_schedules(&config, &sweep_slots, &mut wiring);
    let web = start_web(
        &config,
        token,
        &targets,
        &discovery_counters,
        &sweep_slots,
        &mut wiring,
    )
    .await?;

    Ok(Daemon {
        store: wiring.store,
        listen_addr: web.listen_addr,
        counters: wiring.counters,
        targets,
        discovery: discovery_counters,
        alerts: web.alerts,
        sweeps: sweep_slots,
        shutdown: shutdown_tx,
        tasks: wiring.tasks,
    })
}

/// What the daemon's loops share, and the tasks started so far (shutdown
/// waits for each).
struct Wiring {
    store: Store,
    /// The scrape client, shared by scrapes and discovery.
    client: reqwest::Client,
    counters: Arc<ScrapeCounters>,
    shutdown: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Unix ms before the first loop started.
    started_ms: i64,
}

/// The tokens the daemon needs: its own (serving) and each discovery
/// source's. Fails closed before anything runs: a token that should be
/// there and is not, or a network-facing listener without one, stops the
/// start here.
fn check_access(config: &Config) -> anyhow::Result<(Option<String>, Vec<Option<String>>)> {
    let token = config.access_token()?;
    config.check_target_secrets()?;
    let discovery_tokens = config
        .discovery
        .iter()
        .enumerate()
        .map(|(index, discovery)| discovery.http_token(index))
        .collect::<Result<Vec<_>, _>>()?;
    if token.is_none() && !config.server.listen.ip().is_loopback() {
        tracing::warn!(
            listen = %config.server.listen,
            "serving without a token on a network address (allow_unauthenticated = true): \
             anyone who reaches it can read everything and start sweeps"
        );
    }
    Ok((token, discovery_tokens))
}

/// No sweep runs yet: one still `running` in the store died with the
/// previous process.
async fn mark_interrupted_sweeps(store: &Store, now: i64) -> anyhow::Result<()> {
    let interrupted = store.mark_interrupted_sweeps(now).await?;
    let experiments = store.mark_interrupted_experiments(now).await?;
    if experiments > 0 {
        tracing::warn!(
            experiments,
            "experiments cut off by the last stop marked interrupted"
        );
    }
    if interrupted > 0 {
        tracing::warn!(
            sweeps = interrupted,
            "sweeps cut off by the last stop marked interrupted"
        );
    }
    Ok(())
}

/// One service-discovery loop per `[[discovery]]` source, feeding `targets`.
fn spawn_discovery(
    config: &Config,
    tokens: Vec<Option<String>>,
    targets: &TargetSet,
    counters: &Arc<DiscoveryCounters>,
    wiring: &mut Wiring,
) -> anyhow::Result<()> {
    for (index, (discovery, token)) in config.discovery.iter().zip(tokens).enumerate() {
        let job = DiscoveryJob {
            config: discovery.clone(),
            token,
            shard: config.server.shard,
        };
        if let Some(kubernetes) = &discovery.kubernetes {
            // In-cluster settings come from the environment: missing ones
            // stop the start here, naming the section.
            let connection = kubernetes
                .connection(llmwatch_config::env_var)
                .map_err(|m| anyhow::anyhow!("discovery[{index}].kubernetes: {m}"))?;
            tracing::info!(discovery = %discovery.name, role = ?kubernetes.role, namespaces = ?kubernetes.namespaces, api_server = %redact_url(&connection.api_server), "kubernetes service discovery");
            wiring.tasks.push(tokio::spawn(
                llmwatch_engine::sources::kubernetes::run_kubernetes_discovery(
                    job,
                    connection,
                    targets.clone(),
                    counters.clone(),
                    wiring.shutdown.clone(),
                ),
            ));
            continue;
        }
        tracing::info!(discovery = %discovery.name, files = ?discovery.files, url = ?discovery.http_url.as_deref().map(redact_url), shard = ?config.server.shard.map(|s| s.to_string()), "service discovery");
        wiring.tasks.push(tokio::spawn(run_discovery(
            job,
            wiring.client.clone(),
            targets.clone(),
            counters.clone(),
            wiring.shutdown.clone(),
        )));
    }
    Ok(())
}

/// A scrape loop per dcgm-exporter page, and the NVML reader when a GPU
/// source names no page (and the library loads). Returns the GPU sources'
/// target ids: their series stay at retention.
async fn start_gpu_sources(
    config: &Config,
    records: &mpsc::Sender<ScrapeRecord>,
    now: i64,
    wiring: &mut Wiring,
) -> anyhow::Result<Vec<i64>> {
    let mut gpu_sources = Vec::new();
    let mut nvml_wanted = None;
    for gpu in &config.gpus {
        let Some(url) = &gpu.dcgm_url else {
            nvml_wanted = Some(gpu.clone());
            continue;
        };
        let target_id = wiring
            .store
            .upsert_target(&gpu.name, TargetKind::Gpu, url, now)
            .await?;
        gpu_sources.push(target_id);
        let job = ScrapeJob {
            target_id,
            name: gpu.name.clone(),
            url: url.clone(),
            engine: EngineChoice::Fixed(llmwatch_core::catalog::Engine::Dcgm),
            interval: gpu.interval,
            timeout: gpu.interval.min(Duration::from_secs(10)),
            max_body_bytes: config.server.max_body_bytes,
        };
        tracing::info!(gpu_source = %job.name, url = %redact_url(&job.url), "scraping dcgm-exporter");
        wiring.tasks.push(tokio::spawn(scrape::run_scrape_loop(
            wiring.client.clone(),
            job,
            records.clone(),
            wiring.counters.clone(),
            wiring.shutdown.clone(),
        )));
    }
    if let Some(gpu) = nvml_wanted {
        if let Some(source) = tokio::task::spawn_blocking(NvmlSource::init).await? {
            let target_id = wiring
                .store
                .upsert_target(&gpu.name, TargetKind::Gpu, "nvml://local", now)
                .await?;
            gpu_sources.push(target_id);
            wiring.tasks.push(tokio::spawn(run_nvml_loop(
                Arc::new(source),
                target_id,
                gpu.interval,
                records.clone(),
                wiring.shutdown.clone(),
            )));
        }
    }
    Ok(gpu_sources)
}

/// The loops that keep the store: the live diagnosis, the batched writer of
/// scrapes and the hourly retention.
fn spawn_housekeeping(
    config: &Config,
    targets: &TargetSet,
    gpu_sources: Vec<i64>,
    records: mpsc::Receiver<ScrapeRecord>,
    wiring: &mut Wiring,
) {
    wiring.tasks.push(tokio::spawn(
        llmwatch_engine::runners::live_diagnosis::run_live_diagnosis(
            wiring.store.clone(),
            targets.clone(),
            config.server.live_interval,
            config.server.live_window,
            wiring.shutdown.clone(),
        ),
    ));
    wiring.tasks.push(tokio::spawn(scrape::run_writer(
        wiring.store.clone(),
        records,
        wiring.counters.clone(),
    )));
    wiring.tasks.push(tokio::spawn(run_retention(
        wiring.store.clone(),
        Retention {
            keep: config.server.retention,
            probes: config.server.probe_retention,
            sweeps: config.server.sweep_retention,
            alert_history: config.server.alert_history_retention,
            gpu_sources,
            targets: targets.clone(),
            downsample_after: config.server.downsample_after,
            downsample_interval: config.server.downsample_interval,
        },
        wiring.shutdown.clone(),
    )));
}

/// A schedule loop per target with `[targets.sweep]`.
fn spawn_sweep_schedules(config: &Config, sweep_slots: &SweepSlots, wiring: &mut Wiring) {
    let shared_config = Arc::new(config.clone());
    for target in &config.targets {
        if let Some(schedule) = &target.sweep {
            tracing::info!(target = %target.name, every = ?schedule.every, "scheduled sweeps");
            wiring.tasks.push(tokio::spawn(run_schedule(
                shared_config.clone(),
                target.clone(),
                schedule.clone(),
                wiring.store.clone(),
                sweep_slots.clone(),
                wiring.shutdown.clone(),
            )));
        }
    }
}

/// What the web side hands back to the daemon.
struct Web {
    listen_addr: SocketAddr,
    alerts: llmwatch_engine::alerts::AlertsHandle,
}

/// Binds the listener, starts the alert engine and remote_write (they need
/// the bound address and feed the API's own metrics), and serves the pages
/// and the API.
async fn start_web(
    config: &Config,
    token: Option<String>,
    targets: &TargetSet,
    discovery_counters: &Arc<DiscoveryCounters>,
    sweep_slots: &SweepSlots,
    wiring: &mut Wiring,
) -> anyhow::Result<Web> {
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let listen_addr = listener.local_addr()?;
    let alerts = llmwatch_engine::alerts::start(
        config,
        targets.clone(),
        listen_addr,
        wiring.store.clone(),
        wiring.shutdown.clone(),
        &mut wiring.tasks,
    )
    .await
    .context("starting the alert engine")?;
    let api = api_context(
        config,
        targets,
        &alerts,
        discovery_counters,
        sweep_slots,
        wiring,
    )
    .await?;
    let app = web::router(web::AppState {
        store: wiring.store.clone(),
        auth: Arc::new(llmwatch_web::auth::Auth::new(token)),
        pages: Arc::new(llmwatch_web::pages::PagesConfig {
            shutdown: Some(wiring.shutdown.clone()),
            watched: Some(targets.clone()),
            ..llmwatch_web::pages::PagesConfig::from_config(config)
        }),
        api: Arc::new(api),
        live: Default::default(),
    });
    let limits = llmwatch_web::serve::ServeLimits {
        header_read_timeout: config.server.http_header_timeout,
        request_timeout: config.server.http_request_timeout,
        max_in_flight: config.server.http_max_in_flight,
        ..llmwatch_web::serve::ServeLimits::default()
    };
    wiring.tasks.push(tokio::spawn(llmwatch_web::serve::serve(
        listener,
        app,
        limits,
        wiring.shutdown.clone(),
    )));
    Ok(Web {
        listen_addr,
        alerts,
    })
}

/// The API's context, with the sweep slot and the counters its own
/// `/metrics` reports (discovery's, and remote_write's, whose tasks start
/// here).
async fn api_context(
    config: &Config,
    targets: &TargetSet,
    alerts: &llmwatch_engine::alerts::AlertsHandle,
    discovery_counters: &Arc<DiscoveryCounters>,
    sweep_slots: &SweepSlots,
    wiring: &mut Wiring,
) -> anyhow::Result<llmwatch_web::api::ApiContext> {
    let mut api = llmwatch_web::api::ApiContext::new(
        config,
        wiring.store.clone(),
        wiring.counters.clone(),
        alerts.clone(),
        targets.clone(),
    )
    .await
    .context("preparing the API")?;
    api.sweeps = sweep_slots.clone();
    api.predictions = llmwatch_web::state::predictions::Predictions::with_runner(
        std::sync::Arc::new(crate::twin::TwinRunner {
            store: wiring.store.clone(),
        }),
    );
    let remote_write = llmwatch_engine::sinks::remote_write::spawn_all(
        config,
        wiring.started_ms,
        &wiring.store,
        &wiring.shutdown,
        &mut wiring.tasks,
    )?;
    if let Ok(mut slot) = api.own_metrics.discovery.lock() {
        *slot = (!config.discovery.is_empty()).then(|| discovery_counters.clone());
    }
    if let Ok(mut slot) = api.own_metrics.remote_write.lock() {
        *slot = remote_write;
    }
    Ok(api)
}
