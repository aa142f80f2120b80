//! The daemon: registers targets, starts one scrape loop per target and GPU
//! source, the batched writer, retention, and the web server. Returns a
//! handle so tests and `llmwatch demo` can run it in-process.

use llmwatch_core::redact::redact_url;
use llmwatch_store::{Pruned, RetentionCutoffs};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use llmwatch_store::{ScrapeRecord, Store, TargetKind};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use llmwatch_config::{Config, EngineChoice};
use llmwatch_engine::runners::supervisor::{start_supervisor, TargetTasks};
use llmwatch_engine::runners::sweep::schedule::{run_schedule, SweepSlots};
use llmwatch_engine::sources::discovery::{run_discovery, DiscoveryCounters, DiscoveryJob};
use llmwatch_engine::sources::gpu_nvml::{readings_to_samples, NvmlSource};
use llmwatch_engine::sources::scrape::{self, now_ms, ScrapeCounters, ScrapeJob};
use llmwatch_engine::targets::TargetSet;
use llmwatch_engine::ticker::JitteredTicker;
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
    // Fail closed before anything runs: a token that should be there and is
    // not, or a network-facing listener without one, stops the start here.
    let token = config.access_token()?;
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
    let store = Store::open(&config.server.database)
        .await
        .with_context(|| format!("opening database {}", config.server.database.display()))?;
    let client = scrape::scrape_client().context("building the HTTP client")?;
    let counters = Arc::new(ScrapeCounters::default());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (records_tx, records_rx) = mpsc::channel::<ScrapeRecord>(1024);
    let mut tasks = Vec::new();
    let now = now_ms();
    // No sweep runs yet: one still `running` in the store died with the
    // previous process.
    let interrupted = store.mark_interrupted_sweeps(now).await?;
    // GPU sources (their series stay at retention; targets come from the set).
    let mut gpu_sources = Vec::new();
    if interrupted > 0 {
        tracing::warn!(
            sweeps = interrupted,
            "sweeps cut off by the last stop marked interrupted"
        );
    }

    // Configured targets now, discovered ones as discovery finds them: the
    // supervisor keeps one scrape (and canary) loop per target of the set.
    let targets = TargetSet::new(config.targets.clone());
    let discovery_counters = Arc::new(DiscoveryCounters::default());
    for (discovery, token) in config.discovery.iter().zip(discovery_tokens) {
        tracing::info!(discovery = %discovery.name, files = ?discovery.files, url = ?discovery.http_url.as_deref().map(redact_url), shard = ?config.server.shard.map(|s| s.to_string()), "service discovery");
        tasks.push(tokio::spawn(run_discovery(
            DiscoveryJob {
                config: discovery.clone(),
                token,
                shard: config.server.shard,
            },
            client.clone(),
            targets.clone(),
            discovery_counters.clone(),
            shutdown_rx.clone(),
        )));
    }
    tasks.push(
        start_supervisor(
            TargetTasks {
                store: store.clone(),
                client: client.clone(),
                records: records_tx.clone(),
                counters: counters.clone(),
                max_body_bytes: config.server.max_body_bytes,
            },
            targets.clone(),
            shutdown_rx.clone(),
        )
        .await,
    );

    let mut nvml_wanted = None;
    for gpu in &config.gpus {
        match &gpu.dcgm_url {
            Some(url) => {
                let target_id = store
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
                tasks.push(tokio::spawn(scrape::run_scrape_loop(
                    client.clone(),
                    job,
                    records_tx.clone(),
                    counters.clone(),
                    shutdown_rx.clone(),
                )));
            }
            None => nvml_wanted = Some(gpu.clone()),
        }
    }
    if let Some(gpu) = nvml_wanted {
        if let Some(source) = tokio::task::spawn_blocking(NvmlSource::init).await? {
            let target_id = store
                .upsert_target(&gpu.name, TargetKind::Gpu, "nvml://local", now)
                .await?;
            gpu_sources.push(target_id);
            tasks.push(tokio::spawn(run_nvml_loop(
                Arc::new(source),
                target_id,
                gpu.interval,
                records_tx.clone(),
                shutdown_rx.clone(),
            )));
        }
    }
    drop(records_tx);
    tasks.push(tokio::spawn(
        llmwatch_engine::runners::live_diagnosis::run_live_diagnosis(
            store.clone(),
            targets.clone(),
            config.server.live_interval,
            config.server.live_window,
            shutdown_rx.clone(),
        ),
    ));
    tasks.push(tokio::spawn(scrape::run_writer(
        store.clone(),
        records_rx,
        counters.clone(),
    )));
    tasks.push(tokio::spawn(run_retention(
        store.clone(),
        Retention {
            keep: config.server.retention,
            probes: config.server.probe_retention,
            sweeps: config.server.sweep_retention,
            alert_history: config.server.alert_history_retention,
            gpu_sources: gpu_sources.clone(),
            targets: targets.clone(),
            downsample_after: config.server.downsample_after,
            downsample_interval: config.server.downsample_interval,
        },
        shutdown_rx.clone(),
    )));

    // Scheduled sweeps share one slot with API sweeps: one sweep at a time.
    let sweep_slots = SweepSlots::default();
    let shared_config = Arc::new(config.clone());
    for target in &config.targets {
        if let Some(schedule) = &target.sweep {
            tracing::info!(target = %target.name, every = ?schedule.every, "scheduled sweeps");
            tasks.push(tokio::spawn(run_schedule(
                shared_config.clone(),
                target.clone(),
                schedule.clone(),
                store.clone(),
                sweep_slots.clone(),
                shutdown_rx.clone(),
            )));
        }
    }

    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let listen_addr = listener.local_addr()?;
    let alerts = llmwatch_engine::alerts::start(
        &config,
        targets.clone(),
        listen_addr,
        store.clone(),
        shutdown_rx.clone(),
        &mut tasks,
    )
    .await
    .context("starting the alert engine")?;
    let mut api = llmwatch_web::api::ApiContext::new(
        &config,
        store.clone(),
        counters.clone(),
        alerts.clone(),
        targets.clone(),
    )
    .await
    .context("preparing the API")?;
    api.sweeps = sweep_slots.clone();
    let remote_write =
        llmwatch_engine::sinks::remote_write::spawn_all(&config, &store, &shutdown_rx, &mut tasks)?;
    if let Ok(mut slot) = api.own_metrics.discovery.lock() {
        *slot = (!config.discovery.is_empty()).then(|| discovery_counters.clone());
    }
    if let Ok(mut slot) = api.own_metrics.remote_write.lock() {
        *slot = remote_write;
    }
    let app = web::router(web::AppState {
        store: store.clone(),
        auth: Arc::new(llmwatch_web::auth::Auth::new(token)),
        pages: Arc::new(llmwatch_web::pages::PagesConfig {
            shutdown: Some(shutdown_rx.clone()),
            watched: Some(targets.clone()),
            ..llmwatch_web::pages::PagesConfig::from_config(&config)
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
    tasks.push(tokio::spawn(llmwatch_web::serve::serve(
        listener,
        app,
        limits,
        shutdown_rx.clone(),
    )));

    Ok(Daemon {
        store,
        listen_addr,
        counters,
        targets,
        discovery: discovery_counters,
        alerts,
        sweeps: sweep_slots,
        shutdown: shutdown_tx,
        tasks,
    })
}

async fn run_nvml_loop(
    source: Arc<NvmlSource>,
    target_id: i64,
    interval: Duration,
    records: mpsc::Sender<ScrapeRecord>,
    mut shutdown: watch::Receiver<bool>,
) {
    // One local source: nothing to spread out, so no phase and no jitter.
    let mut ticker = JitteredTicker::starting_now(interval);
    while ticker.tick(&mut shutdown).await {
        let ts_ms = now_ms();
        let started = std::time::Instant::now();
        let reader = source.clone();
        let read = tokio::task::spawn_blocking(move || reader.read()).await;
        let mut record = ScrapeRecord {
            target_id,
            ts_ms,
            up: false,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            body_bytes: 0,
            error: None,
            engine: Some("nvml".to_string()),
            samples: Vec::new(),
            raw: Vec::new(),
        };
        match read {
            Ok(Ok(readings)) => {
                record.up = true;
                record.samples = readings_to_samples(&readings);
            }
            Ok(Err(err)) => record.error = Some(err),
            Err(err) => record.error = Some(format!("NVML reader task failed: {err}")),
        }
        if records.send(record).await.is_err() {
            return;
        }
    }
}

/// What the hourly maintenance does to old scrapes.
#[derive(Debug, Clone)]
struct Retention {
    keep: Duration,
    probes: Duration,
    sweeps: Duration,
    alert_history: Duration,
    /// The GPU sources and the watched targets: their series stay.
    gpu_sources: Vec<i64>,
    targets: TargetSet,
    downsample_after: Duration,
    /// Zero: never thin.
    downsample_interval: Duration,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Once an hour (and once at start): deletes scrapes past the retention,
/// then thins those past `downsample_after`.
async fn run_retention(store: Store, retention: Retention, mut shutdown: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let now = now_ms();
        let before = |keep: Duration| now.saturating_sub(ms(keep));
        let cutoffs = RetentionCutoffs {
            scrapes_before_ms: before(retention.keep),
            probes_before_ms: before(retention.probes),
            sweeps_before_ms: before(retention.sweeps),
            alert_events_before_ms: before(retention.alert_history),
        };
        let mut active = retention.gpu_sources.clone();
        for name in retention.targets.names() {
            match store.target_by_name(&name).await {
                Ok(Some(row)) => active.push(row.id),
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(target = %name, error = %err, "retention: reading a target failed")
                }
            }
        }
        match store.run_retention(&cutoffs, &active).await {
            Ok(pruned) if pruned == Pruned::default() => {}
            Ok(pruned) => tracing::info!(?pruned, "retention: old rows deleted"),
            Err(err) => tracing::error!(error = %err, "retention failed"),
        }
        if retention.downsample_interval.is_zero() {
            continue;
        }
        let cutoff = now.saturating_sub(ms(retention.downsample_after));
        match store
            .downsample(cutoff, ms(retention.downsample_interval))
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "downsampling: old scrapes thinned"),
            Err(err) => tracing::error!(error = %err, "downsampling failed"),
        }
    }
}
