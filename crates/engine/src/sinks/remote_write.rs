//! Remote write out: one task per `[[remote_write]]` endpoint reads the
//! store in time order after its durable cursor and POSTs Prometheus
//! remote-write 1.0 requests (see `llmwatch-remote-write` for the wire
//! format). What is sent, per scrape of every target:
//!
//! - every stored sample line, under its own name and labels, plus `job`
//!   (the target's kind, `engine` or `gpu`), `instance` (host:port of the
//!   target URL) and `target` (the llmwatch target name); a clashing page
//!   label becomes `exported_…`;
//! - catalog series stored normalised (NVML readings) as `llmwatch_<metric>`;
//! - `up` and `scrape_duration_seconds`, as Prometheus records its scrapes;
//! - every signal derivable at that scrape as
//!   `llmwatch_signal{signal="<name>", job="llmwatch"}`;
//!
//! - per engine-target scrape, the autoscaling gauges
//!   (`llmwatch_autoscale_*{target, source}`, `job="llmwatch"`: load
//!   against measured capacity, queue, predicted TTFT against the
//!   objective; `llmwatch_core::autoscale`) from that scrape's running and
//!   waiting counts and the target's capacity reference as of sending;
//!
//! and per canary probe `llmwatch_canary_{ttfb,ttft,tpot,e2e}_seconds`,
//! `llmwatch_canary_success`, `llmwatch_canary_output_tokens` (`job="llmwatch"`,
//! `target`, `api`, `model`), with the canary signals over the minute up to
//! it (`llmwatch_signal{signal="probe_ttft_p95"}`, …). The names and labels are those of the
//! Prometheus API at `/prometheus` (`llmwatch_store::prom_source`), so the
//! shipped Grafana dashboards read either.
//!
//! Delivery: 2xx advances the cursor; 4xx other than 429 is dropped (the
//! receiver will never take it), counted, and the cursor advances; 5xx, 429,
//! timeouts and connection failures are retried with capped exponential
//! backoff, the cursor held, so a receiver that is down for minutes gets
//! the backlog when it returns (as far back as retention keeps). The cursor
//! is saved after every request, so a restart resumes there.
//!
//! Secrets (bearer token, basic-auth password) are only ever in the request
//! headers: never logged, never stored. The URL is never logged either.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmwatch_config::{RemoteWriteAuth, RemoteWriteConfig};
use llmwatch_core::catalog::{NormalizedSample, Part};
use llmwatch_core::signals::{signals_between, Signal, Snapshot};
use llmwatch_remote_write::{series_labels, EncodedLabels, WriteRequestBuilder};
use llmwatch_store::prom_source::attached_labels;
use llmwatch_store::{
    ExportCursor, ExportedProbe, ExportedScrape, RemoteWriteCursor, SeriesKind, Store, StoreError,
    TargetKind, TargetRow, PROBE_WINDOW_MIN_MS,
};
use tokio::sync::watch;

use crate::autoscale::CapacityReferences;
use crate::clock::now_ms;
use llmwatch_core::autoscale::autoscale_signals;

/// The `job` label of what llmwatch derives itself (signals, canaries).
pub const JOB: &str = "llmwatch";
/// The most of an error answer's body read (for the log line).
const MAX_ERROR_BODY: usize = 512;
/// A previous scrape further back than this is not diffed against (as the
/// store's own signal queries: five minutes of staleness).
const SIGNAL_LOOKBACK_MS: i64 = 5 * 60 * 1000;
/// Canary probes per request at most.
const MAX_PROBES: usize = 500;
/// Requests' worth of samples read from the store at once.
const REQUESTS_PER_READ: usize = 16;
/// Bit set on the keys of series that are not stored series (signals,
/// health, probes), so they never meet a store series id.
const DERIVED: u64 = 1 << 63;

/// Counters of one endpoint, for llmwatch's own `/metrics`.
#[derive(Debug, Default)]
pub struct RemoteWriteCounters {
    pub name: String,
    pub samples_sent: AtomicU64,
    /// Refused for good (4xx but 429): never retried.
    pub samples_dropped: AtomicU64,
    /// Samples of attempts that failed and were retried.
    pub samples_failed: AtomicU64,
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    /// Unix ms of the newest scrape sent (the cursor).
    pub cursor_ms: AtomicI64,
    /// Milliseconds between the newest stored scrape and the cursor.
    pub lag_ms: AtomicI64,
}

/// What one endpoint's task needs.
#[derive(Debug, Clone)]
pub struct RemoteWriteJob {
    pub config: RemoteWriteConfig,
    pub auth: Option<RemoteWriteAuth>,
    /// How far behind now scrapes are read: a scrape is stamped when it
    /// starts and stored when it ends, so nothing newer than the longest
    /// scrape timeout (plus the writer's batch) is final yet.
    pub settle: Duration,
    /// The TTFT objective of each target, for the autoscaling gauges.
    pub ttft_objectives: TtftObjectives,
    /// Unix ms the daemon started at: a new endpoint's cursor starts here
    /// (less `backfill`), not when its task first runs, so the scrapes and
    /// probes stored before the task got to run are sent too.
    pub started_ms: i64,
}

/// p95 TTFT objectives in seconds: per configured target, else the
/// server's (as the pages read them).
#[derive(Debug, Clone, Default)]
pub struct TtftObjectives {
    pub by_target: HashMap<String, f64>,
    pub default: Option<f64>,
}

impl TtftObjectives {
    pub fn of_config(config: &llmwatch_config::Config) -> TtftObjectives {
        TtftObjectives {
            by_target: config
                .targets
                .iter()
                .filter_map(|t| Some((t.name.clone(), t.slo_ttft_p95?.as_secs_f64())))
                .collect(),
            default: Some(config.server.slo_ttft_p95.as_secs_f64()),
        }
    }

    pub fn of(&self, target: &str) -> Option<f64> {
        self.by_target.get(target).copied().or(self.default)
    }
}

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Sent,
    /// Never to be retried (4xx but 429).
    Refused(u16),
    /// 5xx, 429, timeout, connection failure.
    Retry(String),
}

/// The sender's memory across requests: label sets per series, each
/// target's previous scrape (for rates), target labels.
#[derive(Default)]
struct State {
    /// Each series' label set in wire form, encoded the first time. Looked
    /// up once a sample: hashed with Fx, the keys being ids and FNV sums.
    labels: rustc_hash::FxHashMap<u64, EncodedLabels>,
    previous: HashMap<i64, (i64, Vec<NormalizedSample>)>,
    targets: HashMap<i64, TargetRow>,
    capacity: CapacityReferences,
}

fn fnv(parts: &[&str]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    hash | DERIVED
}

/// The name a catalog part is sent under.
fn catalog_name(sample: &NormalizedSample) -> (String, Option<String>) {
    let base = format!("llmwatch_{}", sample.metric.name());
    match sample.part {
        Part::Value => (base, None),
        Part::Sum => (format!("{base}_sum"), None),
        Part::Count => (format!("{base}_count"), None),
        Part::Bucket(le) => (
            format!("{base}_bucket"),
            Some(if le.is_infinite() {
                "+Inf".to_string()
            } else {
                le.to_string()
            }),
        ),
    }
}

impl State {
    async fn target(&mut self, store: &Store, id: i64) -> Result<TargetRow, StoreError> {
        if let Some(target) = self.targets.get(&id) {
            return Ok(target.clone());
        }
        for row in store.targets().await? {
            self.targets.insert(row.id, row);
        }
        Ok(self.targets.get(&id).cloned().unwrap_or(TargetRow {
            id,
            name: id.to_string(),
            kind: TargetKind::Engine,
            url: String::new(),
            engine: None,
            labels: Default::default(),
        }))
    }

    /// Adds a sample of a series that is not a store series.
    #[allow(clippy::too_many_arguments)]
    fn push_derived(
        &mut self,
        builder: &mut WriteRequestBuilder,
        target: &TargetRow,
        job: &str,
        name: &str,
        extra: &[(String, String)],
        ts_ms: i64,
        value: f64,
    ) {
        let mut parts = vec![name, target.name.as_str(), job];
        for (k, v) in extra {
            parts.push(k);
            parts.push(v);
        }
        let key = fnv(&parts);
        let labels = self
            .labels
            .entry(key)
            .or_insert_with(|| attach(name, extra, target, job))
            .clone();
        builder.push(key, || labels, ts_ms, value);
    }

    /// Adds everything sent for one scrape; its running and waiting
    /// counts when it succeeded.
    fn push_scrape(
        &mut self,
        builder: &mut WriteRequestBuilder,
        target: &TargetRow,
        scrape: &ExportedScrape,
    ) -> Option<(Option<f64>, Option<f64>)> {
        let ts = scrape.ts_ms;
        let scraped_job = target.kind.as_str();
        self.push_derived(
            builder,
            target,
            scraped_job,
            "up",
            &[],
            ts,
            f64::from(u8::from(scrape.up)),
        );
        self.push_derived(
            builder,
            target,
            scraped_job,
            "scrape_duration_seconds",
            &[],
            ts,
            scrape.duration_ms / 1000.0,
        );
        for (id, def, value) in &scrape.samples {
            match def.kind {
                SeriesKind::Raw => {
                    let key = u64::from(*id);
                    let labels = self
                        .labels
                        .entry(key)
                        .or_insert_with(|| attach(&def.name, &def.labels, target, scraped_job))
                        .clone();
                    builder.push(key, || labels, ts, *value);
                }
                SeriesKind::Catalog { .. } => {
                    if let Some(sample) = def.catalog_sample(*value) {
                        let (name, le) = catalog_name(&sample);
                        let mut extra = sample.labels.to_vec();
                        extra.extend(le.map(|le| ("le".to_string(), le)));
                        self.push_derived(
                            builder,
                            target,
                            scraped_job,
                            &name,
                            &extra,
                            ts,
                            sample.value,
                        );
                    }
                }
            }
        }
        if !scrape.up {
            return None;
        }
        let previous = self
            .previous
            .remove(&scrape.target_id)
            .filter(|(prev_ts, _)| ts - prev_ts <= SIGNAL_LOOKBACK_MS && *prev_ts < ts);
        let signals = signals_between(
            previous.as_ref().map(|(t, s)| Snapshot {
                ts: *t as f64 / 1000.0,
                samples: s.as_slice(),
            }),
            Snapshot {
                ts: ts as f64 / 1000.0,
                samples: &scrape.catalog,
            },
        );
        let get = |wanted: Signal| signals.iter().find(|(s, _)| *s == wanted).map(|(_, v)| *v);
        let load = (get(Signal::RequestsRunning), get(Signal::RequestsWaiting));
        for (signal, value) in &signals {
            let extra = [("signal".to_string(), signal.as_str().to_string())];
            self.push_derived(builder, target, JOB, "llmwatch_signal", &extra, ts, *value);
        }
        self.previous
            .insert(scrape.target_id, (ts, scrape.catalog.clone()));
        Some(load)
    }

    /// Adds the autoscaling gauges of one engine-target scrape.
    async fn push_autoscale(
        &mut self,
        store: &Store,
        builder: &mut WriteRequestBuilder,
        target: &TargetRow,
        ts_ms: i64,
        (running, waiting): (Option<f64>, Option<f64>),
        ttft_objective: Option<f64>,
    ) -> Result<(), StoreError> {
        let reference = self
            .capacity
            .reference(store, target.id, &target.name, ttft_objective, now_ms())
            .await?;
        let gauges = autoscale_signals(reference.as_deref(), running, waiting, ttft_objective);
        for (name, _, sourced, value) in gauges.named() {
            let Some(value) = value else { continue };
            let extra: Vec<(String, String)> = match (sourced, reference.as_deref()) {
                (false, _) => Vec::new(),
                (true, Some(r)) => vec![("source".to_string(), r.source.as_str().to_string())],
                (true, None) => continue,
            };
            self.push_derived(builder, target, JOB, name, &extra, ts_ms, value);
        }
        Ok(())
    }

    fn push_probe(
        &mut self,
        builder: &mut WriteRequestBuilder,
        target: &TargetRow,
        probe: &ExportedProbe,
        signals: &[(Signal, f64)],
    ) {
        let extra = vec![
            ("api".to_string(), probe.api.clone()),
            ("model".to_string(), probe.model.clone()),
        ];
        let ts = probe.ts_ms;
        let values = [
            (
                "llmwatch_canary_success",
                Some(f64::from(u8::from(probe.ok))),
            ),
            ("llmwatch_canary_ttfb_seconds", probe.ttfb_s),
            ("llmwatch_canary_ttft_seconds", probe.ttft_s),
            ("llmwatch_canary_tpot_seconds", probe.tpot_s),
            (
                "llmwatch_canary_e2e_seconds",
                probe.ok.then_some(probe.e2e_s),
            ),
            (
                "llmwatch_canary_output_tokens",
                Some(probe.output_tokens as f64),
            ),
        ];
        for (name, value) in values {
            if let Some(value) = value {
                self.push_derived(builder, target, JOB, name, &extra, ts, value);
            }
        }
        for (signal, value) in signals.iter().filter(|(_, v)| v.is_finite()) {
            let extra = [("signal".to_string(), signal.as_str().to_string())];
            self.push_derived(builder, target, JOB, "llmwatch_signal", &extra, ts, *value);
        }
    }
}

/// The label set of a series of `target`: its own labels plus the labels
/// attached to all its series (`job`, `instance`, `target`, its discovery
/// labels), named as the Prometheus API names them.
fn attach(name: &str, own: &[(String, String)], target: &TargetRow, job: &str) -> EncodedLabels {
    let attached = attached_labels(target, job);
    let attached: Vec<(&str, &str)> = attached
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    EncodedLabels::new(&series_labels(name, own, &attached))
}

/// Starts a task per `[[remote_write]]` endpoint of `config`; their
/// counters, for `/metrics`. Scrapes are read `settle` behind now: the
/// longest scrape timeout of the config plus two seconds for the writer.
pub fn spawn_all(
    config: &llmwatch_config::Config,
    started_ms: i64,
    store: &Store,
    shutdown: &watch::Receiver<bool>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Vec<Arc<RemoteWriteCounters>>, crate::StartError> {
    let longest_scrape = config
        .targets
        .iter()
        .map(|t| t.scrape_timeout())
        .chain(
            config
                .gpus
                .iter()
                .map(|g| g.interval.min(Duration::from_secs(10))),
        )
        .max()
        .unwrap_or_default();
    let mut all = Vec::new();
    for (i, endpoint) in config.remote_write.iter().enumerate() {
        let auth = endpoint
            .auth()
            .map_err(|(field, message)| crate::StartError::RemoteWrite {
                field: format!("remote_write[{i}].{field}"),
                message,
            })?;
        let counters = Arc::new(RemoteWriteCounters {
            name: endpoint.name.clone(),
            ..RemoteWriteCounters::default()
        });
        let job = RemoteWriteJob {
            config: endpoint.clone(),
            auth,
            settle: longest_scrape + Duration::from_secs(2),
            ttft_objectives: TtftObjectives::of_config(config),
            started_ms,
        };
        tracing::info!(endpoint = %endpoint.name, "remote write");
        tasks.push(tokio::spawn(run_remote_write(
            store.clone(),
            job,
            counters.clone(),
            shutdown.clone(),
        )));
        all.push(counters);
    }
    Ok(all)
}

/// Runs one endpoint until `shutdown` turns true.
pub async fn run_remote_write(
    store: Store,
    job: RemoteWriteJob,
    counters: Arc<RemoteWriteCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let client = match reqwest::Client::builder()
        .connect_timeout(job.config.timeout.min(Duration::from_secs(10)))
        .timeout(job.config.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("llmwatch/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(endpoint = %job.config.name, error = %err, "remote write: cannot build the HTTP client");
            return;
        }
    };
    let mut cursor = loop {
        match start_cursor(&store, &job).await {
            Ok(cursor) => break cursor,
            Err(err) => {
                tracing::error!(endpoint = %job.config.name, error = %err, "remote write: reading the cursor failed");
                if wait_or_stop(&mut shutdown, job.config.queue.poll_interval).await {
                    return;
                }
            }
        }
    };
    counters
        .cursor_ms
        .store(cursor.scrapes.ts_ms, Ordering::Relaxed);
    let mut state = State::default();
    while !*shutdown.borrow() {
        match send_next(
            &store,
            &client,
            &job,
            &counters,
            &mut state,
            &mut cursor,
            &mut shutdown,
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => {
                if wait_or_stop(&mut shutdown, job.config.queue.poll_interval).await {
                    return;
                }
            }
            Err(err) => {
                tracing::error!(endpoint = %job.config.name, error = %err, "remote write: reading the store failed");
                if wait_or_stop(&mut shutdown, job.config.queue.poll_interval).await {
                    return;
                }
            }
        }
        update_lag(&store, &counters).await;
    }
}

/// The saved cursor, or a new one at the daemon's start (less
/// `backfill`): just before the first scrape it stored, however late this
/// task ran.
async fn start_cursor(
    store: &Store,
    job: &RemoteWriteJob,
) -> Result<RemoteWriteCursor, StoreError> {
    if let Some(cursor) = store.remote_write_cursor(&job.config.name).await? {
        return Ok(cursor);
    }
    let backfill = job.config.queue.backfill.unwrap_or_default();
    let from = job.started_ms - i64::try_from(backfill.as_millis()).unwrap_or(i64::MAX / 2);
    let cursor = RemoteWriteCursor {
        scrapes: ExportCursor {
            // Scrapes strictly after the cursor are sent: one before `from`.
            ts_ms: from.saturating_sub(1),
            target_id: i64::MAX,
        },
        probe_id: if backfill.is_zero() {
            store.newest_probe_id_before(from).await?
        } else {
            0
        },
    };
    store
        .save_remote_write_cursor(&job.config.name, cursor, now_ms())
        .await?;
    Ok(cursor)
}

/// The lag gauge: the newest stored scrape against the cursor as last
/// published (`cursor_ms`). Also refreshed between retries, so an outage
/// shows as a growing lag rather than the value from before it.
async fn update_lag(store: &Store, counters: &RemoteWriteCounters) {
    if let Ok(Some(newest)) = store.newest_scrape_ms().await {
        let cursor = counters.cursor_ms.load(Ordering::Relaxed);
        counters
            .lag_ms
            .store((newest - cursor).max(0), Ordering::Relaxed);
    }
}

/// Sends what is new, if anything, one request at a time; `Ok(false)`
/// when caught up (or stopped). The store is read in chunks of several
/// requests, so a sealed block is decoded once per chunk, not per request.
async fn send_next(
    store: &Store,
    client: &reqwest::Client,
    job: &RemoteWriteJob,
    counters: &RemoteWriteCounters,
    state: &mut State,
    cursor: &mut RemoteWriteCursor,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<bool, StoreError> {
    let until = now_ms() - i64::try_from(job.settle.as_millis()).unwrap_or(0);
    let per_request = job.config.queue.max_samples_per_send;
    let scrapes = store
        .export_scrapes(
            cursor.scrapes,
            until,
            per_request.saturating_mul(REQUESTS_PER_READ),
            true,
        )
        .await?;
    let mut probes = store
        .export_probes(cursor.probe_id, until, MAX_PROBES)
        .await?;
    if scrapes.is_empty() && probes.is_empty() {
        return Ok(false);
    }
    let mut rest = scrapes.as_slice();
    while !rest.is_empty() || !probes.is_empty() {
        // Whole scrapes up to the request size (at least one).
        let mut take = 0;
        let mut samples = 0;
        while take < rest.len() && (take == 0 || samples + rest[take].samples.len() <= per_request)
        {
            samples += rest[take].samples.len();
            take += 1;
        }
        let (now, later) = rest.split_at(take);
        let mut builder = WriteRequestBuilder::new();
        for scrape in now {
            let target = state.target(store, scrape.target_id).await?;
            let load = state.push_scrape(&mut builder, &target, scrape);
            if let (Some(load), TargetKind::Engine) = (load, target.kind) {
                let objective = job.ttft_objectives.of(&target.name);
                state
                    .push_autoscale(store, &mut builder, &target, scrape.ts_ms, load, objective)
                    .await?;
            }
        }
        for probe in &probes {
            let target = state.target(store, probe.target_id).await?;
            // The canary signals as the Prometheus API serves them at the
            // probe's instant, so the shipped dashboards read them here too.
            let signals = store
                .probe_signals(probe.target_id, probe.ts_ms, PROBE_WINDOW_MIN_MS)
                .await?;
            state.push_probe(&mut builder, &target, probe, &signals);
        }
        let samples = builder.samples() as u64;
        let body = bytes::Bytes::from(builder.finish());
        if !deliver(store, client, job, counters, body, samples, shutdown).await {
            return Ok(false);
        }
        let next = RemoteWriteCursor {
            scrapes: now
                .last()
                .map(ExportedScrape::cursor)
                .unwrap_or(cursor.scrapes),
            probe_id: probes.last().map(|p| p.id).unwrap_or(cursor.probe_id),
        };
        store
            .save_remote_write_cursor(&job.config.name, next, now_ms())
            .await?;
        *cursor = next;
        counters
            .cursor_ms
            .store(cursor.scrapes.ts_ms, Ordering::Relaxed);
        probes.clear();
        rest = later;
    }
    Ok(true)
}

/// Posts `body` until it is taken or refused for good; `false` when
/// shutdown came first (the cursor then stays where it was).
async fn deliver(
    store: &Store,
    client: &reqwest::Client,
    job: &RemoteWriteJob,
    counters: &RemoteWriteCounters,
    body: bytes::Bytes,
    samples: u64,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let queue = &job.config.queue;
    let mut backoff = queue.min_backoff;
    loop {
        counters.requests.fetch_add(1, Ordering::Relaxed);
        match post(client, job, body.clone()).await {
            Outcome::Sent => {
                counters.samples_sent.fetch_add(samples, Ordering::Relaxed);
                return true;
            }
            Outcome::Refused(status) => {
                counters
                    .samples_dropped
                    .fetch_add(samples, Ordering::Relaxed);
                tracing::warn!(endpoint = %job.config.name, status, samples, "remote write refused (4xx): samples dropped");
                return true;
            }
            Outcome::Retry(why) => {
                counters
                    .samples_failed
                    .fetch_add(samples, Ordering::Relaxed);
                counters.retries.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(endpoint = %job.config.name, error = %why, retry_in = ?backoff, "remote write failed; retrying");
                update_lag(store, counters).await;
                if wait_or_stop(shutdown, backoff).await {
                    return false;
                }
                backoff = (backoff * 2).min(queue.max_backoff);
            }
        }
    }
}

/// One POST, with every header remote write 1.0 asks for.
async fn post(client: &reqwest::Client, job: &RemoteWriteJob, body: bytes::Bytes) -> Outcome {
    use llmwatch_remote_write::{CONTENT_ENCODING, CONTENT_TYPE, VERSION, VERSION_HEADER};
    let mut request = client
        .post(&job.config.url)
        .header(reqwest::header::CONTENT_ENCODING, CONTENT_ENCODING)
        .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
        .header(VERSION_HEADER, VERSION);
    for (name, value) in &job.config.headers {
        request = request.header(name, value);
    }
    request = match &job.auth {
        Some(RemoteWriteAuth::Bearer(token)) => request.bearer_auth(token),
        Some(RemoteWriteAuth::Basic { username, password }) => {
            request.basic_auth(username, Some(password))
        }
        None => request,
    };
    let response = match request.body(body).send().await {
        Ok(response) => response,
        // reqwest's error names the URL; say only what kind of failure.
        Err(err) if err.is_timeout() => return Outcome::Retry("timed out".to_string()),
        Err(err) if err.is_connect() => return Outcome::Retry("connection failed".to_string()),
        Err(_) => return Outcome::Retry("request failed".to_string()),
    };
    let status = response.status();
    if status.is_success() {
        return Outcome::Sent;
    }
    let text = bounded_text(response).await;
    if status.as_u16() == 429 || status.is_server_error() {
        Outcome::Retry(format!("HTTP {}: {text}", status.as_u16()))
    } else {
        tracing::warn!(endpoint = %job.config.name, status = status.as_u16(), answer = %text, "remote write refused");
        Outcome::Refused(status.as_u16())
    }
}

/// The start of an error answer, for the log: at most [`MAX_ERROR_BODY`]
/// bytes are read, however long it is.
async fn bounded_text(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&body).trim().to_string()
}

/// Sleeps `wait`; `true` when shutdown came first.
async fn wait_or_stop(shutdown: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(wait) => *shutdown.borrow(),
        changed = shutdown.changed() => changed.is_err() || *shutdown.borrow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_never_meet_store_ids() {
        let key = fnv(&["up", "a"]);
        assert!(key & DERIVED != 0);
        assert_ne!(key, fnv(&["up", "b"]));
        assert_ne!(fnv(&["ab", "c"]), fnv(&["a", "bc"]));
    }
}
