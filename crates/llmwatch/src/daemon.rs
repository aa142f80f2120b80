//! The daemon: registers targets, starts one scrape loop per target and GPU
//! source, the batched writer, retention, and the web server. Returns a
//! handle so tests and `llmwatch demo` can run it in-process.

use llmwatch_core::redact::redact_url;
use llmwatch_store::{Pruned, RetentionCutoffs};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use llmwatch_probe::MeasuringThread;
use llmwatch_store::{ScrapeRecord, Store, TargetKind};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use llmwatch_config::{Config, EngineChoice};
use llmwatch_engine::runners::canary::{run_canary_loop, CanaryJob};
use llmwatch_engine::runners::sweep::schedule::{run_schedule, SweepSlots};
use llmwatch_engine::sources::gpu_nvml::{readings_to_samples, NvmlSource};
use llmwatch_engine::sources::scrape::{self, now_ms, ScrapeCounters, ScrapeJob};
use llmwatch_engine::ticker::JitteredTicker;
use llmwatch_web as web;

/// A running daemon.
pub struct Daemon {
    pub store: Store,
    pub listen_addr: SocketAddr,
    pub counters: Arc<ScrapeCounters>,
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
    // Every target's canaries run on one measuring thread, out of reach of
    // scrapes, page renders and alert evaluation on this runtime.
    let mut canary_thread: Option<Arc<MeasuringThread>> = None;
    let now = now_ms();
    // No sweep runs yet: one still `running` in the store died with the
    // previous process.
    let interrupted = store.mark_interrupted_sweeps(now).await?;
    let mut active_targets = Vec::new();
    if interrupted > 0 {
        tracing::warn!(
            sweeps = interrupted,
            "sweeps cut off by the last stop marked interrupted"
        );
    }

    for target in &config.targets {
        let target_id = store
            .upsert_target(&target.name, TargetKind::Engine, &target.url, now)
            .await?;
        active_targets.push(target_id);
        let job = ScrapeJob {
            target_id,
            name: target.name.clone(),
            url: target.metrics_url(),
            engine: target.engine,
            interval: target.scrape_interval,
            timeout: target.scrape_timeout(),
            max_body_bytes: config.server.max_body_bytes,
        };
        tracing::info!(target = %job.name, url = %redact_url(&job.url), interval = ?job.interval, "scraping");
        if let Some(canary) = CanaryJob::from_config(target_id, target) {
            tracing::info!(target = %canary.name, shape = %canary.probe.shape, interval = ?canary.probe.interval, "canary probes");
            let thread = match &canary_thread {
                Some(thread) => thread.clone(),
                None => {
                    // Never spinning: canaries are one request at a time.
                    let thread = Arc::new(MeasuringThread::start(false)?);
                    canary_thread = Some(thread.clone());
                    thread
                }
            };
            tasks.push(tokio::spawn(run_canary_loop(
                canary,
                thread,
                store.clone(),
                shutdown_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(scrape::run_scrape_loop(
            client.clone(),
            job,
            records_tx.clone(),
            counters.clone(),
            shutdown_rx.clone(),
        )));
    }

    let mut nvml_wanted = None;
    for gpu in &config.gpus {
        match &gpu.dcgm_url {
            Some(url) => {
                let target_id = store
                    .upsert_target(&gpu.name, TargetKind::Gpu, url, now)
                    .await?;
                active_targets.push(target_id);
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
            active_targets.push(target_id);
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
    let live_jobs = llmwatch_engine::runners::live_diagnosis::jobs_for(&config, &store).await?;
    tasks.push(tokio::spawn(
        llmwatch_engine::runners::live_diagnosis::run_live_diagnosis(
            store.clone(),
            live_jobs,
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
            active_targets: active_targets.clone(),
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
    )
    .await
    .context("preparing the API")?;
    api.sweeps = sweep_slots.clone();
    let remote_write =
        llmwatch_engine::sinks::remote_write::spawn_all(&config, &store, &shutdown_rx, &mut tasks)?;
    if let Ok(mut slot) = api.own_metrics.remote_write.lock() {
        *slot = remote_write;
    }
    let app = web::router(web::AppState {
        store: store.clone(),
        auth: Arc::new(llmwatch_web::auth::Auth::new(token)),
        pages: Arc::new(llmwatch_web::pages::PagesConfig {
            shutdown: Some(shutdown_rx.clone()),
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
    /// The targets this config scrapes: their series stay.
    active_targets: Vec<i64>,
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
        match store
            .run_retention(&cutoffs, &retention.active_targets)
            .await
        {
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
