//! The daemon: registers targets, starts one scrape loop per target and GPU
//! source, the batched writer, retention, and the web server. Returns a
//! handle so tests and `llmwatch demo` can run it in-process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use llmwatch_probe::MeasuringThread;
use llmwatch_store::{ScrapeRecord, Store, TargetKind};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::canary::{run_canary_loop, CanaryJob};
use crate::config::{Config, EngineChoice};
use crate::gpu_nvml::{readings_to_samples, NvmlSource};
use crate::scrape::{self, now_ms, ScrapeCounters, ScrapeJob};
use crate::sweep::schedule::{run_schedule, SweepSlots};
use crate::web;

/// A running daemon.
pub struct Daemon {
    pub store: Store,
    pub listen_addr: SocketAddr,
    pub counters: Arc<ScrapeCounters>,
    pub alerts: crate::alerts::AlertsHandle,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Daemon {
    /// Stops every loop and waits for the writer to commit what it holds.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Starts the daemon for `config` on the current runtime.
pub async fn start(config: Config) -> anyhow::Result<Daemon> {
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

    for target in &config.targets {
        let target_id = store
            .upsert_target(&target.name, TargetKind::Engine, &target.url, now)
            .await?;
        let job = ScrapeJob {
            target_id,
            name: target.name.clone(),
            url: target.metrics_url(),
            engine: target.engine,
            interval: target.scrape_interval,
            timeout: target.scrape_timeout(),
            max_body_bytes: config.server.max_body_bytes,
        };
        tracing::info!(target = %job.name, url = %job.url, interval = ?job.interval, "scraping");
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
                let job = ScrapeJob {
                    target_id,
                    name: gpu.name.clone(),
                    url: url.clone(),
                    engine: EngineChoice::Fixed(llmwatch_core::catalog::Engine::Dcgm),
                    interval: gpu.interval,
                    timeout: gpu.interval.min(Duration::from_secs(10)),
                    max_body_bytes: config.server.max_body_bytes,
                };
                tracing::info!(gpu_source = %job.name, url = %job.url, "scraping dcgm-exporter");
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
    let live_jobs = crate::live_diagnosis::jobs_for(&config, &store).await?;
    tasks.push(tokio::spawn(crate::live_diagnosis::run_live_diagnosis(
        store.clone(),
        live_jobs,
        config.server.live_interval,
        config.server.live_window,
        shutdown_rx.clone(),
    )));
    tasks.push(tokio::spawn(scrape::run_writer(
        store.clone(),
        records_rx,
        counters.clone(),
    )));
    tasks.push(tokio::spawn(run_retention(
        store.clone(),
        Retention {
            keep: config.server.retention,
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
    let alerts = crate::alerts::start(
        &config,
        listen_addr,
        store.clone(),
        shutdown_rx.clone(),
        &mut tasks,
    )
    .await
    .context("starting the alert engine")?;
    // The dashboard's live updates stream (SSE): send each event at once.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
    });
    let mut api =
        crate::api::ApiContext::new(&config, store.clone(), counters.clone(), alerts.clone())
            .await
            .context("preparing the API")?;
    api.sweeps = sweep_slots.clone();
    let app = web::router(web::AppState {
        store: store.clone(),
        token: config.bearer_token().map(Arc::from),
        pages: Arc::new(crate::pages::PagesConfig {
            shutdown: Some(shutdown_rx.clone()),
            ..crate::pages::PagesConfig::from_config(&config)
        }),
        api: Arc::new(api),
        live: Default::default(),
    });
    let mut web_shutdown = shutdown_rx.clone();
    tasks.push(tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = web_shutdown.changed().await;
        });
        if let Err(err) = serve.await {
            tracing::error!(error = %err, "web server stopped");
        }
    }));

    Ok(Daemon {
        store,
        listen_addr,
        counters,
        alerts,
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
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
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
#[derive(Debug, Clone, Copy)]
struct Retention {
    keep: Duration,
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
        match store.prune(now.saturating_sub(ms(retention.keep))).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "retention: old scrapes deleted"),
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
