//! llmwatch's own `/metrics`, in the Prometheus text format 0.0.4: probe
//! latency histograms per target and shape (folded in from the store as new
//! probes arrive, so they are cumulative since the daemon started), the
//! latest sweep verdict per target, scrape health, alert states, notifier
//! outcomes, store size and write latency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use llmwatch_core::alerts::AlertState;
use llmwatch_store::{ProbeRow, Store, StoreError, SweepStatus};

use crate::alerts::AlertsHandle;
use crate::scrape::ScrapeCounters;

/// Bounds (seconds) of the TTFT and e2e histograms.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Bounds (seconds) of the ITL histogram.
pub const ITL_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
/// Bounds (seconds) of the store write latency histogram.
pub const WRITE_BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A lock-free latency histogram (for the writer's hot path).
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; WRITE_BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(i) = WRITE_BUCKETS.iter().position(|b| seconds <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn snapshot(&self) -> Hist {
        Hist {
            bounds: &WRITE_BUCKETS,
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            count: self.count.load(Ordering::Relaxed),
            sum: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A histogram with per-bucket (not cumulative) counts.
#[derive(Debug, Clone)]
struct Hist {
    bounds: &'static [f64],
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
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
}

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
        })
    }

    /// Renders the whole page.
    pub async fn render(
        &self,
        store: &Store,
        counters: &ScrapeCounters,
        alerts: &AlertsHandle,
    ) -> Result<String, StoreError> {
        let result = self.render_inner(store, counters, alerts).await;
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
    ) -> Result<String, StoreError> {
        let targets = store.targets().await?;
        let name_of = |id: i64| {
            targets
                .iter()
                .find(|t| t.id == id)
                .map(|t| t.name.clone())
                .unwrap_or_else(|| id.to_string())
        };
        let mut out = String::with_capacity(16 * 1024);

        // Probe histograms.
        let probe_hists = {
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
            folded.by_key.clone()
        };
        let labelled: Vec<(String, &ProbeHists)> = probe_hists
            .iter()
            .map(|((target, shape), h)| {
                (
                    format!(
                        "target=\"{}\",shape=\"{}\"",
                        esc(&name_of(*target)),
                        esc(shape)
                    ),
                    h,
                )
            })
            .collect();
        for (name, help, pick) in [
            (
                "llmwatch_probe_ttft_seconds",
                "Time to first token of llmwatch's canary probes.",
                (|h: &ProbeHists| &h.ttft) as fn(&ProbeHists) -> &Hist,
            ),
            (
                "llmwatch_probe_itl_seconds",
                "Per-token inter-token latency of llmwatch's canary probes.",
                |h: &ProbeHists| &h.itl,
            ),
            (
                "llmwatch_probe_e2e_seconds",
                "End-to-end latency of llmwatch's successful canary probes.",
                |h: &ProbeHists| &h.e2e,
            ),
        ] {
            header(&mut out, name, help, "histogram");
            for (labels, h) in &labelled {
                histogram(&mut out, name, labels, pick(h));
            }
        }
        header(
            &mut out,
            "llmwatch_probes_total",
            "Canary probes stored since start, by outcome.",
            "counter",
        );
        for (labels, h) in &labelled {
            let _ = writeln!(
                out,
                "llmwatch_probes_total{{{labels},outcome=\"ok\"}} {}",
                h.ok
            );
            let _ = writeln!(
                out,
                "llmwatch_probes_total{{{labels},outcome=\"error\"}} {}",
                h.failed
            );
        }

        // Scrape health per target.
        header(
            &mut out,
            "llmwatch_target_up",
            "1 if the last scrape of the target succeeded.",
            "gauge",
        );
        let mut durations = Vec::new();
        for target in &targets {
            if let Some(last) = store.scrape_health(target.id, 1).await?.first() {
                let labels = format!("target=\"{}\"", esc(&target.name));
                let _ = writeln!(out, "llmwatch_target_up{{{labels}}} {}", u8::from(last.up));
                durations.push((labels, last.duration_ms / 1000.0, last.ts_ms));
            }
        }
        header(
            &mut out,
            "llmwatch_target_scrape_duration_seconds",
            "Duration of the last scrape of the target.",
            "gauge",
        );
        for (labels, seconds, _) in &durations {
            let _ = writeln!(
                out,
                "llmwatch_target_scrape_duration_seconds{{{labels}}} {}",
                num(*seconds)
            );
        }
        header(
            &mut out,
            "llmwatch_target_last_scrape_timestamp_seconds",
            "Unix time of the last scrape of the target.",
            "gauge",
        );
        for (labels, _, ts) in &durations {
            let _ = writeln!(
                out,
                "llmwatch_target_last_scrape_timestamp_seconds{{{labels}}} {}",
                num(*ts as f64 / 1000.0)
            );
        }
        let per_target: Vec<(String, (u64, u64))> = counters
            .per_target
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default();
        header(
            &mut out,
            "llmwatch_target_scrapes_total",
            "Scrapes of the target since start.",
            "counter",
        );
        for (target, (scrapes, _)) in &per_target {
            let _ = writeln!(
                out,
                "llmwatch_target_scrapes_total{{target=\"{}\"}} {scrapes}",
                esc(target)
            );
        }
        header(
            &mut out,
            "llmwatch_target_scrape_failures_total",
            "Failed scrapes of the target since start (down, timed out, unreadable).",
            "counter",
        );
        for (target, (_, failures)) in &per_target {
            let _ = writeln!(
                out,
                "llmwatch_target_scrape_failures_total{{target=\"{}\"}} {failures}",
                esc(target)
            );
        }
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
            header(&mut out, name, help, "counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }

        // The latest sweep verdict per target.
        let mut sweeps_seen = std::collections::HashSet::new();
        let mut saturation = Vec::new();
        let mut sustainable = Vec::new();
        for sweep in store.sweeps(200).await? {
            let Some(target) = sweep.target_name.clone() else {
                continue;
            };
            if sweep.status == SweepStatus::Running || sweeps_seen.contains(&target) {
                continue;
            }
            let Some(verdict) = sweep
                .verdict_json
                .as_deref()
                .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
            else {
                continue;
            };
            sweeps_seen.insert(target.clone());
            let labels = |load: &serde_json::Value| {
                let kind = if load.get("rate").is_some() {
                    "rate"
                } else {
                    "concurrency"
                };
                let value = load.get(kind).and_then(serde_json::Value::as_f64);
                (
                    format!("target=\"{}\",load=\"{kind}\"", esc(&target)),
                    value,
                )
            };
            if let Some(s) = verdict.get("saturation").filter(|s| !s.is_null()) {
                let (l, value) = labels(&s["load"]);
                saturation.push((l, value, s["request_throughput"].as_f64()));
            }
            if let Some(s) = verdict.get("sustainable").filter(|s| !s.is_null()) {
                let (l, value) = labels(&s["load"]);
                sustainable.push((l, value, s["request_throughput"].as_f64()));
            }
        }
        header(
            &mut out,
            "llmwatch_saturation_load",
            "Load (concurrency or requests/s) at the saturation point of the target's latest sweep.",
            "gauge",
        );
        for (labels, value, _) in &saturation {
            if let Some(v) = value {
                let _ = writeln!(out, "llmwatch_saturation_load{{{labels}}} {}", num(*v));
            }
        }
        header(
            &mut out,
            "llmwatch_saturation_throughput_requests_per_second",
            "Request throughput at the saturation point of the target's latest sweep.",
            "gauge",
        );
        for (labels, _, rps) in &saturation {
            if let Some(v) = rps {
                let _ = writeln!(
                    out,
                    "llmwatch_saturation_throughput_requests_per_second{{{labels}}} {}",
                    num(*v)
                );
            }
        }
        header(
            &mut out,
            "llmwatch_max_sustainable_load",
            "Highest load of the target's latest sweep that met every objective.",
            "gauge",
        );
        for (labels, value, _) in &sustainable {
            if let Some(v) = value {
                let _ = writeln!(out, "llmwatch_max_sustainable_load{{{labels}}} {}", num(*v));
            }
        }

        // Alerts.
        header(
            &mut out,
            "llmwatch_alerts",
            "Alerts that are not inactive, by rule, target and state (1 = in that state).",
            "gauge",
        );
        for alert in alerts.current() {
            if alert.alert.state == AlertState::Inactive {
                continue;
            }
            let _ = writeln!(
                out,
                "llmwatch_alerts{{alertname=\"{}\",target=\"{}\",state=\"{}\"}} 1",
                esc(&alert.rule),
                esc(&alert.target),
                alert.alert.state.as_str()
            );
        }
        header(
            &mut out,
            "llmwatch_alert_rules",
            "Alert rules configured.",
            "gauge",
        );
        let _ = writeln!(out, "llmwatch_alert_rules {}", alerts.rules.len());
        let c = &alerts.counters;
        header(
            &mut out,
            "llmwatch_alert_evaluations_total",
            "Alert evaluation rounds run.",
            "counter",
        );
        let _ = writeln!(
            out,
            "llmwatch_alert_evaluations_total {}",
            c.evaluations.load(Ordering::Relaxed)
        );
        header(
            &mut out,
            "llmwatch_alert_evaluation_failures_total",
            "Alert evaluations whose signal or state could not be read or written.",
            "counter",
        );
        let _ = writeln!(
            out,
            "llmwatch_alert_evaluation_failures_total {}",
            c.failures.load(Ordering::Relaxed)
        );
        header(
            &mut out,
            "llmwatch_alert_evaluation_duration_seconds",
            "Duration of the last alert evaluation round.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "llmwatch_alert_evaluation_duration_seconds {}",
            num(c.last_duration_us.load(Ordering::Relaxed) as f64 / 1e6)
        );
        header(
            &mut out,
            "llmwatch_notifications_total",
            "Notification batches by notifier and outcome (sent, failed after retries, dropped on a full queue).",
            "counter",
        );
        for n in alerts.notifiers.iter() {
            for (outcome, value) in [
                ("sent", &n.sent),
                ("failed", &n.failed),
                ("dropped", &n.dropped),
            ] {
                let _ = writeln!(
                    out,
                    "llmwatch_notifications_total{{notifier=\"{}\",kind=\"{}\",outcome=\"{outcome}\"}} {}",
                    esc(&n.name),
                    n.kind.as_str(),
                    value.load(Ordering::Relaxed)
                );
            }
        }

        // Store.
        header(
            &mut out,
            "llmwatch_store_size_bytes",
            "Size of the SQLite database.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "llmwatch_store_size_bytes {}",
            store.size_bytes().await?
        );
        header(
            &mut out,
            "llmwatch_store_write_duration_seconds",
            "Duration of one batched scrape write (one transaction).",
            "histogram",
        );
        histogram(
            &mut out,
            "llmwatch_store_write_duration_seconds",
            "",
            &counters.write_latency.snapshot(),
        );
        header(
            &mut out,
            "llmwatch_metrics_render_failures_total",
            "Renders of this page that failed.",
            "counter",
        );
        let _ = writeln!(
            out,
            "llmwatch_metrics_render_failures_total {}",
            self.render_failures.load(Ordering::Relaxed)
        );
        Ok(out)
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Hist) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (bound, count) in h.bounds.iter().zip(&h.buckets) {
        cumulative += count;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{}\"}} {cumulative}",
            num(*bound)
        );
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("{{{s}}}")
        }
    };
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), num(h.sum));
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), h.count);
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
        let mut out = String::new();
        histogram(&mut out, "x", "a=\"b\"", &h);
        assert_eq!(
            out,
            "x_bucket{a=\"b\",le=\"0.1\"} 1\nx_bucket{a=\"b\",le=\"1\"} 3\nx_bucket{a=\"b\",le=\"+Inf\"} 4\n\
             x_sum{a=\"b\"} 6.05\nx_count{a=\"b\"} 4\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
