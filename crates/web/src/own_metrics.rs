//! llmwatch's own `/metrics`, in the Prometheus text format 0.0.4: probe
//! latency histograms per target and shape (folded in from the store as new
//! probes arrive, so they are cumulative since the daemon started), the
//! latest sweep verdict per target, scrape health, alert states, notifier
//! outcomes, store size and write latency, and the autoscaling gauges per
//! engine target (`llmwatch_autoscale_*`, see `llmwatch_core::autoscale`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use llmwatch_core::alerts::AlertState;
use llmwatch_store::{ProbeRow, Store, StoreError, SweepStatus, TargetKind, TargetRow};

use llmwatch_engine::alerts::AlertsHandle;
use llmwatch_engine::autoscale::CapacityReferences;
use llmwatch_engine::events::failure_counts;
use llmwatch_engine::sinks::remote_write::RemoteWriteCounters;
use llmwatch_engine::sources::discovery::DiscoveryCounters;
use llmwatch_engine::sources::scrape::ScrapeCounters;
use llmwatch_engine::telemetry::HistogramSnapshot;

/// Bounds (seconds) of the TTFT and e2e histograms.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Bounds (seconds) of the ITL histogram.
pub const ITL_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
/// A histogram with per-bucket (not cumulative) counts.
#[derive(Debug, Clone)]
struct Hist {
    bounds: &'static [f64],
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl From<HistogramSnapshot> for Hist {
    fn from(snapshot: HistogramSnapshot) -> Hist {
        Hist {
            bounds: snapshot.bounds,
            buckets: snapshot.buckets,
            count: snapshot.count,
            sum: snapshot.sum,
        }
    }
}

impl Hist {
    fn new(bounds: &'static [f64]) -> Hist {
        Hist {
            bounds,
            buckets: vec![0; bounds.len()],
            count: 0,
            sum: 0.0,
        }
    }

    fn observe(&mut self, value: f64) {
        if !value.is_finite() || value < 0.0 {
            return;
        }
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += value;
    }
}

#[derive(Debug, Clone)]
struct ProbeHists {
    ttft: Hist,
    itl: Hist,
    e2e: Hist,
    ok: u64,
    failed: u64,
}

impl ProbeHists {
    fn new() -> ProbeHists {
        ProbeHists {
            ttft: Hist::new(LATENCY_BUCKETS),
            itl: Hist::new(ITL_BUCKETS),
            e2e: Hist::new(LATENCY_BUCKETS),
            ok: 0,
            failed: 0,
        }
    }

    fn add(&mut self, probe: &ProbeRow) {
        if probe.ok {
            self.ok += 1;
            self.e2e.observe(probe.e2e_s);
        } else {
            self.failed += 1;
        }
        if let Some(ttft) = probe.ttft_s {
            self.ttft.observe(ttft);
        }
        for itl in &probe.itl_s {
            self.itl.observe(*itl);
        }
    }
}

#[derive(Debug)]
struct Folded {
    last_id: i64,
    /// (target id, shape) → histograms.
    by_key: BTreeMap<(i64, String), ProbeHists>,
}

/// The state behind `/metrics`.
#[derive(Debug)]
pub struct OwnMetrics {
    folded: tokio::sync::Mutex<Folded>,
    /// Failures to read the store while rendering.
    pub render_failures: AtomicU64,
    /// The `[[remote_write]]` endpoints' counters (set once they start).
    pub remote_write: std::sync::Mutex<Vec<std::sync::Arc<RemoteWriteCounters>>>,
    /// Service discovery's counters, when `[[discovery]]` groups run.
    pub discovery: std::sync::Mutex<Option<std::sync::Arc<DiscoveryCounters>>>,
    /// The targets' capacity references for the autoscaling gauges.
    capacity: CapacityReferences,
}

/// A target's p95 TTFT objective in seconds, by target name.
pub type TtftObjectiveOf<'a> = &'a (dyn Fn(&str) -> Option<f64> + Sync);

/// Probes folded per render at most (the rest on the next one).
const FOLD_LIMIT: u32 = 50_000;

impl OwnMetrics {
    /// Starts counting probes stored after now.
    pub async fn new(store: &Store) -> Result<OwnMetrics, StoreError> {
        Ok(OwnMetrics {
            folded: tokio::sync::Mutex::new(Folded {
                last_id: store.last_probe_id().await?,
                by_key: BTreeMap::new(),
            }),
            render_failures: AtomicU64::new(0),
            remote_write: Default::default(),
            discovery: Default::default(),
            capacity: CapacityReferences::default(),
        })
    }

    /// Renders the whole page.
    pub async fn render(
        &self,
        store: &Store,
        counters: &ScrapeCounters,
        alerts: &AlertsHandle,
        ttft_objective: TtftObjectiveOf<'_>,
    ) -> Result<String, StoreError> {
        let result = self
            .render_inner(store, counters, alerts, ttft_objective)
            .await;
        if let Err(err) = &result {
            self.render_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %err, "rendering /metrics failed");
        }
        result
    }

    async fn render_inner(
        &self,
        store: &Store,
        counters: &ScrapeCounters,
        alerts: &AlertsHandle,
        ttft_objective: TtftObjectiveOf<'_>,
    ) -> Result<String, StoreError> {
        let targets = store.targets().await?;
        let names: BTreeMap<i64, String> = targets.iter().map(|t| (t.id, t.name.clone())).collect();
        let mut page = Exposition::default();
        self.write_probes(&mut page, store, &names).await?;
        write_scrape_health(&mut page, store, &targets).await?;
        write_scrape_counters(&mut page, counters);
        write_sweep_verdicts(&mut page, store).await?;
        self.write_autoscale(&mut page, store, &targets, ttft_objective)
            .await?;
        write_alerts(&mut page, alerts);
        if let Ok(endpoints) = self.remote_write.lock() {
            write_remote_write(&mut page, &endpoints);
        }
        if let Ok(Some(discovery)) = self.discovery.lock().as_deref() {
            write_discovery(&mut page, discovery);
        }
        page.gauge(
            "llmwatch_store_size_bytes",
            "Size of the SQLite database.",
            [(Vec::new(), store.size_bytes().await? as f64)],
        );
        page.histogram(
            "llmwatch_store_write_duration_seconds",
            "Duration of one batched scrape write (one transaction).",
            [(Vec::new(), &Hist::from(counters.write_latency.snapshot()))],
        );
        page.counter(
            "llmwatch_failures_total",
            "Failures the daemon survived, by event (each is logged too): retention, canaries, live diagnosis, sweeps, scrape writes, alerts, store reads.",
            failure_counts()
                .into_iter()
                .map(|(event, n)| (vec![("event", event.to_string())], n)),
        );
        page.counter(
            "llmwatch_metrics_render_failures_total",
            "Renders of this page that failed.",
            [(Vec::new(), self.render_failures.load(Ordering::Relaxed))],
        );
        Ok(page.out)
    }

    /// Each engine target's autoscaling gauges, from its latest scrape and
    /// its capacity reference (a target without one gets the queue and the
    /// in-flight count only).
    async fn write_autoscale(
        &self,
        page: &mut Exposition,
        store: &Store,
        targets: &[TargetRow],
        ttft_objective: TtftObjectiveOf<'_>,
    ) -> Result<(), StoreError> {
        let now = llmwatch_engine::clock::now_ms();
        let mut rows = Vec::new();
        for target in targets.iter().filter(|t| t.kind == TargetKind::Engine) {
            let (signals, source) = self
                .capacity
                .signals_now(
                    store,
                    target.id,
                    &target.name,
                    ttft_objective(&target.name),
                    now,
                )
                .await?;
            rows.push((target.name.clone(), signals.named(), source));
        }
        for gauge in 0..5 {
            let Some((_, (name, help, _, _), _)) = rows.first().map(|(n, g, s)| (n, g[gauge], s))
            else {
                return Ok(());
            };
            page.gauge(
                name,
                help,
                rows.iter().filter_map(|(target, gauges, source)| {
                    let (_, _, sourced, value) = gauges[gauge];
                    let mut labels: Labels = vec![("target", target.clone())];
                    if sourced {
                        labels.push(("source", (*source)?.as_str().to_string()));
                    }
                    Some((labels, value?))
                }),
            );
        }
        Ok(())
    }

    /// Folds probes stored since the last render into the histograms and
    /// returns a copy of them.
    async fn fold_new_probes(
        &self,
        store: &Store,
    ) -> Result<BTreeMap<(i64, String), ProbeHists>, StoreError> {
        let mut folded = self.folded.lock().await;
        let mut budget = FOLD_LIMIT;
        while budget > 0 {
            let page = store
                .probes_after_id(folded.last_id, budget.min(5000))
                .await?;
            let Some((last, _)) = page.last() else {
                break;
            };
            folded.last_id = *last;
            budget = budget.saturating_sub(u32::try_from(page.len()).unwrap_or(u32::MAX));
            // Canary histograms: sweep probes (run_id set) stay out.
            for (_, probe) in page.iter().filter(|(_, p)| p.run_id.is_none()) {
                folded
                    .by_key
                    .entry((probe.target_id, probe.shape.clone()))
                    .or_insert_with(ProbeHists::new)
                    .add(probe);
            }
            if page.len() < 5000 {
                break;
            }
        }
        Ok(folded.by_key.clone())
    }

    async fn write_probes(
        &self,
        page: &mut Exposition,
        store: &Store,
        names: &BTreeMap<i64, String>,
    ) -> Result<(), StoreError> {
        let hists = self.fold_new_probes(store).await?;
        let labelled: Vec<(Labels, &ProbeHists)> = hists
            .iter()
            .map(|((target, shape), h)| {
                let target = names
                    .get(target)
                    .cloned()
                    .unwrap_or_else(|| target.to_string());
                (vec![("target", target), ("shape", shape.clone())], h)
            })
            .collect();
        let pick =
            |f: fn(&ProbeHists) -> &Hist| labelled.iter().map(move |(l, h)| (l.clone(), f(h)));
        page.histogram(
            "llmwatch_probe_ttft_seconds",
            "Time to first token of llmwatch's canary probes.",
            pick(|h| &h.ttft),
        );
        page.histogram(
            "llmwatch_probe_itl_seconds",
            "Per-token inter-token latency of llmwatch's canary probes.",
            pick(|h| &h.itl),
        );
        page.histogram(
            "llmwatch_probe_e2e_seconds",
            "End-to-end latency of llmwatch's successful canary probes.",
            pick(|h| &h.e2e),
        );
        page.counter(
            "llmwatch_probes_total",
            "Canary probes stored since start, by outcome.",
            labelled.iter().flat_map(|(labels, h)| {
                [("ok", h.ok), ("error", h.failed)]
                    .map(|(outcome, n)| (with(labels, "outcome", outcome), n))
            }),
        );
        Ok(())
    }
}

async fn write_scrape_health(
    page: &mut Exposition,
    store: &Store,
    targets: &[TargetRow],
) -> Result<(), StoreError> {
    let mut last_scrapes = Vec::new();
    for target in targets {
        if let Some(last) = store.scrape_health(target.id, 1).await?.first() {
            last_scrapes.push((vec![("target", target.name.clone())], last.clone()));
        }
    }
    page.gauge(
        "llmwatch_target_up",
        "1 if the last scrape of the target succeeded.",
        last_scrapes
            .iter()
            .map(|(l, h)| (l.clone(), f64::from(u8::from(h.up)))),
    );
    page.gauge(
        "llmwatch_target_scrape_duration_seconds",
        "Duration of the last scrape of the target.",
        last_scrapes
            .iter()
            .map(|(l, h)| (l.clone(), h.duration_ms / 1000.0)),
    );
    page.gauge(
        "llmwatch_target_last_scrape_timestamp_seconds",
        "Unix time of the last scrape of the target.",
        last_scrapes
            .iter()
            .map(|(l, h)| (l.clone(), h.ts_ms as f64 / 1000.0)),
    );
    Ok(())
}

fn write_scrape_counters(page: &mut Exposition, counters: &ScrapeCounters) {
    let per_target: Vec<(String, (u64, u64))> = counters
        .per_target
        .lock()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect())
        .unwrap_or_default();
    page.counter(
        "llmwatch_target_scrapes_total",
        "Scrapes of the target since start.",
        per_target
            .iter()
            .map(|(t, (n, _))| (vec![("target", t.clone())], *n)),
    );
    page.counter(
        "llmwatch_target_scrape_failures_total",
        "Failed scrapes of the target since start (down, timed out, unreadable).",
        per_target
            .iter()
            .map(|(t, (_, n))| (vec![("target", t.clone())], *n)),
    );
    for (name, help, value) in [
        (
            "llmwatch_scrapes_total",
            "Scrapes done since start.",
            &counters.scrapes,
        ),
        (
            "llmwatch_scrape_failures_total",
            "Scrapes that failed since start.",
            &counters.failures,
        ),
        (
            "llmwatch_samples_written_total",
            "Samples written to the store since start.",
            &counters.samples_written,
        ),
        (
            "llmwatch_store_write_failures_total",
            "Scrape batches the store could not write.",
            &counters.write_failures,
        ),
    ] {
        page.counter(name, help, [(Vec::new(), value.load(Ordering::Relaxed))]);
    }
}

/// One point of a finished sweep's verdict: the load and the request
/// throughput there.
struct VerdictPoint {
    labels: Labels,
    load: Option<f64>,
    request_throughput: Option<f64>,
}

impl VerdictPoint {
    fn from_json(target: &str, point: &serde_json::Value) -> VerdictPoint {
        let load = &point["load"];
        let kind = if load.get("rate").is_some() {
            "rate"
        } else {
            "concurrency"
        };
        VerdictPoint {
            labels: vec![("target", target.to_string()), ("load", kind.to_string())],
            load: load.get(kind).and_then(serde_json::Value::as_f64),
            request_throughput: point["request_throughput"].as_f64(),
        }
    }
}

/// The saturation and max-sustainable points of each target's latest
/// finished sweep with a verdict.
async fn latest_verdicts(
    store: &Store,
) -> Result<(Vec<VerdictPoint>, Vec<VerdictPoint>), StoreError> {
    let mut seen = std::collections::HashSet::new();
    let (mut saturation, mut sustainable) = (Vec::new(), Vec::new());
    for sweep in store.sweeps(200).await? {
        let Some(target) = sweep.target_name.clone() else {
            continue;
        };
        if sweep.status == SweepStatus::Running || seen.contains(&target) {
            continue;
        }
        let Some(verdict) = sweep
            .verdict_json
            .as_deref()
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        else {
            continue;
        };
        seen.insert(target.clone());
        if let Some(point) = verdict.get("saturation").filter(|s| !s.is_null()) {
            saturation.push(VerdictPoint::from_json(&target, point));
        }
        if let Some(point) = verdict.get("sustainable").filter(|s| !s.is_null()) {
            sustainable.push(VerdictPoint::from_json(&target, point));
        }
    }
    Ok((saturation, sustainable))
}

async fn write_sweep_verdicts(page: &mut Exposition, store: &Store) -> Result<(), StoreError> {
    let (saturation, sustainable) = latest_verdicts(store).await?;
    let present = |points: &[VerdictPoint], pick: fn(&VerdictPoint) -> Option<f64>| {
        points
            .iter()
            .filter_map(|p| pick(p).map(|v| (p.labels.clone(), v)))
            .collect::<Vec<_>>()
    };
    page.gauge(
        "llmwatch_saturation_load",
        "Load (concurrency or requests/s) at the saturation point of the target's latest sweep.",
        present(&saturation, |p| p.load),
    );
    page.gauge(
        "llmwatch_saturation_throughput_requests_per_second",
        "Request throughput at the saturation point of the target's latest sweep.",
        present(&saturation, |p| p.request_throughput),
    );
    page.gauge(
        "llmwatch_max_sustainable_load",
        "Highest load of the target's latest sweep that met every objective.",
        present(&sustainable, |p| p.load),
    );
    Ok(())
}

fn write_alerts(page: &mut Exposition, alerts: &AlertsHandle) {
    let active: Vec<(Labels, f64)> = alerts
        .current()
        .iter()
        .filter(|a| a.alert.state != AlertState::Inactive)
        .map(|a| {
            let labels = vec![
                ("alertname", a.rule.clone()),
                ("target", a.target.clone()),
                ("state", a.alert.state.as_str().to_string()),
            ];
            (labels, 1.0)
        })
        .collect();
    page.gauge(
        "llmwatch_alerts",
        "Alerts that are not inactive, by rule, target and state (1 = in that state).",
        active,
    );
    page.gauge(
        "llmwatch_alert_rules",
        "Alert rules configured.",
        [(Vec::new(), alerts.rules.len() as f64)],
    );
    let c = &alerts.counters;
    page.counter(
        "llmwatch_alert_evaluations_total",
        "Alert evaluation rounds run.",
        [(Vec::new(), c.evaluations.load(Ordering::Relaxed))],
    );
    page.counter(
        "llmwatch_alert_evaluation_failures_total",
        "Alert evaluations whose signal or state could not be read or written.",
        [(Vec::new(), c.failures.load(Ordering::Relaxed))],
    );
    page.gauge(
        "llmwatch_alert_evaluation_duration_seconds",
        "Duration of the last alert evaluation round.",
        [(
            Vec::new(),
            c.last_duration_us.load(Ordering::Relaxed) as f64 / 1e6,
        )],
    );
    page.counter(
        "llmwatch_notifications_total",
        "Notification batches by notifier and outcome (sent, failed after retries, dropped on a full queue).",
        alerts.notifiers.iter().flat_map(|n| {
            [("sent", &n.sent), ("failed", &n.failed), ("dropped", &n.dropped)].map(
                |(outcome, value)| {
                    let labels = vec![
                        ("notifier", n.name.clone()),
                        ("kind", n.kind.as_str().to_string()),
                        ("outcome", outcome.to_string()),
                    ];
                    (labels, value.load(Ordering::Relaxed))
                },
            )
        }),
    );
}

/// Service discovery: refreshes, unreadable sources, targets found.
fn write_discovery(page: &mut Exposition, discovery: &DiscoveryCounters) {
    page.counter(
        "llmwatch_discovery_refreshes_total",
        "Refreshes of the [[discovery]] groups (file_sd and http_sd).",
        [(Vec::new(), discovery.refreshes.load(Ordering::Relaxed))],
    );
    page.counter(
        "llmwatch_discovery_failures_total",
        "Discovery sources that could not be read or parsed (the last good list was kept).",
        [(Vec::new(), discovery.failures.load(Ordering::Relaxed))],
    );
    page.gauge(
        "llmwatch_discovery_targets",
        "Targets the discovery groups found for this shard in their last refresh.",
        [(Vec::new(), discovery.targets.load(Ordering::Relaxed) as f64)],
    );
}

/// A counter of an endpoint: its name, help, and where it is kept.
type EndpointCounter = (
    &'static str,
    &'static str,
    fn(&RemoteWriteCounters) -> &AtomicU64,
);

/// Each `[[remote_write]]` endpoint's progress, lag and failures.
fn write_remote_write(page: &mut Exposition, endpoints: &[std::sync::Arc<RemoteWriteCounters>]) {
    if endpoints.is_empty() {
        return;
    }
    let label = |c: &RemoteWriteCounters| vec![("endpoint", c.name.clone())];
    let counters: [EndpointCounter; 5] = [
        (
            "llmwatch_remote_write_samples_sent_total",
            "Samples the remote-write receiver accepted.",
            |c| &c.samples_sent,
        ),
        (
            "llmwatch_remote_write_samples_dropped_total",
            "Samples refused for good (HTTP 4xx but 429) and not retried.",
            |c| &c.samples_dropped,
        ),
        (
            "llmwatch_remote_write_samples_failed_total",
            "Samples of attempts that failed (5xx, 429, timeout, connection) and were retried.",
            |c| &c.samples_failed,
        ),
        (
            "llmwatch_remote_write_requests_total",
            "Remote-write requests made, retries included.",
            |c| &c.requests,
        ),
        (
            "llmwatch_remote_write_retries_total",
            "Remote-write requests retried after a failure.",
            |c| &c.retries,
        ),
    ];
    for (name, help, field) in counters {
        page.counter(
            name,
            help,
            endpoints
                .iter()
                .map(|c| (label(c), field(c).load(Ordering::Relaxed))),
        );
    }
    page.gauge(
        "llmwatch_remote_write_cursor_timestamp_seconds",
        "Unix time of the newest scrape sent (the endpoint's durable cursor).",
        endpoints.iter().map(|c| {
            (
                label(c),
                c.cursor_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            )
        }),
    );
    page.gauge(
        "llmwatch_remote_write_lag_seconds",
        "How far the cursor is behind the newest stored scrape.",
        endpoints
            .iter()
            .map(|c| (label(c), c.lag_ms.load(Ordering::Relaxed) as f64 / 1000.0)),
    );
}

/// A sample's labels, in order; values are escaped when written.
type Labels = Vec<(&'static str, String)>;

fn with(labels: &Labels, name: &'static str, value: &str) -> Labels {
    let mut labels = labels.clone();
    labels.push((name, value.to_string()));
    labels
}

/// The text format 0.0.4, written family by family: each family's HELP and
/// TYPE come with its samples, and every label value is escaped here.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    fn gauge(&mut self, name: &str, help: &str, samples: impl IntoIterator<Item = (Labels, f64)>) {
        self.header(name, help, "gauge");
        for (labels, value) in samples {
            self.sample(name, &labels, &num(value));
        }
    }

    fn counter(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        self.header(name, help, "counter");
        for (labels, value) in samples {
            self.sample(name, &labels, &value.to_string());
        }
    }

    fn histogram<'h>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Labels, &'h Hist)>,
    ) {
        self.header(name, help, "histogram");
        for (labels, h) in series {
            let bucket = format!("{name}_bucket");
            let mut cumulative = 0;
            for (bound, count) in h.bounds.iter().zip(&h.buckets) {
                cumulative += count;
                let le = with(&labels, "le", &num(*bound));
                self.sample(&bucket, &le, &cumulative.to_string());
            }
            self.sample(&bucket, &with(&labels, "le", "+Inf"), &h.count.to_string());
            self.sample(&format!("{name}_sum"), &labels, &num(h.sum));
            self.sample(&format!("{name}_count"), &labels, &h.count.to_string());
        }
    }

    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &Labels, value: &str) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, text)) in labels.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                let _ = write!(self.out, "{comma}{label}=\"{}\"", esc(text));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A sample value as Prometheus writes it.
fn num(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{value}")
    }
}

/// Escapes a label value.
fn esc(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative() {
        let mut h = Hist::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.5, 5.0, f64::NAN] {
            h.observe(v);
        }
        let mut page = Exposition::default();
        page.histogram("x", "An x.", [(vec![("a", "b".to_string())], &h)]);
        assert_eq!(
            page.out,
            "# HELP x An x.\n# TYPE x histogram\n\
             x_bucket{a=\"b\",le=\"0.1\"} 1\nx_bucket{a=\"b\",le=\"1\"} 3\nx_bucket{a=\"b\",le=\"+Inf\"} 4\n\
             x_sum{a=\"b\"} 6.05\nx_count{a=\"b\"} 4\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
