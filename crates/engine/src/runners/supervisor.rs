//! Keeps one scrape loop (and canary loop, when probes are configured) per
//! target of the [`TargetSet`] running: starts them for a new target, stops
//! them for a removed one (its stored history stays), restarts them for one
//! whose settings changed. The only place per-target tasks are spawned.

use std::collections::HashMap;
use std::sync::Arc;

use llmwatch_config::TargetConfig;
use llmwatch_core::redact::redact_url;
use llmwatch_probe::MeasuringThread;
use llmwatch_store::{ScrapeRecord, Store, StoreError, TargetKind};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::now_ms;
use crate::events::Failure;
use crate::runners::canary::{run_canary_loop, CanaryJob};
use crate::sources::scrape::{run_scrape_loop, ScrapeCounters, ScrapeJob};
use crate::targets::TargetSet;

/// What every target's tasks share.
pub struct TargetTasks {
    pub store: Store,
    pub client: reqwest::Client,
    pub records: mpsc::Sender<ScrapeRecord>,
    pub counters: Arc<ScrapeCounters>,
    pub max_body_bytes: u64,
}

/// One target's running tasks and the switch that stops them.
struct Running {
    config: TargetConfig,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

struct Supervisor {
    shared: TargetTasks,
    running: HashMap<String, Running>,
    /// Every target's canaries run on one measuring thread, out of reach
    /// of scrapes, page renders and alert evaluation on this runtime.
    canary_thread: Option<Arc<MeasuringThread>>,
}

impl Supervisor {
    /// Makes the running tasks match `wanted`.
    async fn reconcile(&mut self, wanted: &[TargetConfig]) {
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(name, run)| !wanted.iter().any(|t| &t.name == *name && *t == run.config))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(run) = self.running.remove(&name) {
                tracing::info!(target = %name, "target left (or changed): stopping its tasks");
                run.stop().await;
            }
        }
        for target in wanted {
            if self.running.contains_key(&target.name) {
                continue;
            }
            match self.start(target).await {
                Ok(run) => {
                    self.running.insert(target.name.clone(), run);
                }
                Err(err) => {
                    // Retried at the next change of the set.
                    Failure::TargetStart.emit(Some(&target.name), &err);
                }
            }
        }
    }

    async fn start(&mut self, target: &TargetConfig) -> Result<Running, StoreError> {
        let store = self.shared.store.clone();
        let target_id = store
            .upsert_target(&target.name, TargetKind::Engine, &target.url, now_ms())
            .await?;
        // Discovery's labels (or the config's) label the target's series in
        // the Prometheus API and remote_write; a change restarts the target.
        store.set_target_labels(target_id, &target.labels).await?;
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        let job = ScrapeJob {
            target_id,
            name: target.name.clone(),
            url: target.metrics_url(),
            engine: target.engine,
            interval: target.scrape_interval,
            timeout: target.scrape_timeout(),
            max_body_bytes: self.shared.max_body_bytes,
        };
        tracing::info!(target = %job.name, url = %redact_url(&job.url), interval = ?job.interval, discovered_by = ?target.discovered_by, "scraping");
        if let Some(canary) = CanaryJob::from_config(target_id, target) {
            tracing::info!(target = %canary.name, shape = %canary.probe.shape, interval = ?canary.probe.interval, "canary probes");
            match self.canary_thread() {
                Ok(thread) => tasks.push(tokio::spawn(run_canary_loop(
                    canary,
                    thread,
                    store.clone(),
                    stopped.clone(),
                ))),
                Err(err) => Failure::TargetStart.emit(Some(&target.name), &err),
            }
        }
        tasks.push(tokio::spawn(run_scrape_loop(
            self.shared.client.clone(),
            job,
            self.shared.records.clone(),
            self.shared.counters.clone(),
            stopped,
        )));
        Ok(Running {
            config: target.clone(),
            stop,
            tasks,
        })
    }

    fn canary_thread(&mut self) -> std::io::Result<Arc<MeasuringThread>> {
        if let Some(thread) = &self.canary_thread {
            return Ok(thread.clone());
        }
        // Never spinning: canaries are one request at a time.
        let thread = Arc::new(MeasuringThread::start(false)?);
        self.canary_thread = Some(thread.clone());
        Ok(thread)
    }
}

/// Starts the tasks of every target in `targets` now (so a caller that
/// awaits this sees them registered in the store), then follows the set
/// until shutdown, when it stops every task and waits for them.
pub async fn start_supervisor(
    shared: TargetTasks,
    targets: TargetSet,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut supervisor = Supervisor {
        shared,
        running: HashMap::new(),
        canary_thread: None,
    };
    let mut changes = targets.subscribe();
    let first = changes.borrow_and_update().clone();
    supervisor.reconcile(&first).await;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let wanted = changes.borrow_and_update().clone();
                    supervisor.reconcile(&wanted).await;
                }
                _ = shutdown.changed() => break,
            }
        }
        for (_, run) in supervisor.running.drain() {
            run.stop().await;
        }
    })
}
