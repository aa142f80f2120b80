//! Server evidence of a step: the target's `/metrics` (and a dcgm-exporter
//! page) scraped on a short interval while the step runs, kept as normalised
//! snapshots, then reduced to a [`ServerEvidence`] for the step's window.
//!
//! Gauges (KV-cache usage, waiting, running, GPU memory and utilisation) are
//! read at every scrape inside the window and summarised as mean and max;
//! counters and histograms (preemptions, prefix hits, server TTFT/ITL) are
//! read as the difference between the last scrape before the window and the
//! last scrape after it, through [`signals_between`], the one definition of
//! every signal.

use std::collections::BTreeMap;
use std::time::Duration;

use llmwatch_core::analysis::{ServerEvidence, ServerPhases};
use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
use llmwatch_core::signals::{signals_between, Signal, Snapshot};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::sources::scrape::{fetch_page, now_ms, understand, FetchError};
use llmwatch_config::EngineChoice;

/// Largest metrics page a sweep reads (a vLLM page is ~100 KiB; a big
/// dcgm-exporter host a few MiB).
const MAX_PAGE_BYTES: u64 = 16 << 20;

/// One scrape's normalised samples and when it was taken.
#[derive(Debug, Clone)]
pub struct Snap {
    /// Unix milliseconds at the start of the scrape.
    pub ts_ms: i64,
    pub samples: Vec<NormalizedSample>,
}

impl Snap {
    fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            ts: self.ts_ms as f64 / 1000.0,
            samples: &self.samples,
        }
    }
}

/// What the scraper kept for one step.
#[derive(Debug, Clone, Default)]
pub struct Scraped {
    pub engine: Vec<Snap>,
    pub gpu: Vec<Snap>,
    /// Scrapes that failed, with the reason (the step still runs: missing
    /// evidence is `None`, never an error).
    pub failures: Vec<String>,
}

/// A background task scraping the engine (and GPU) pages every `interval`
/// until stopped; it scrapes once at start and once more when stopped, so the
/// window's counters are bracketed.
pub struct Scraper {
    stop: oneshot::Sender<()>,
    handle: JoinHandle<Scraped>,
}

impl Scraper {
    /// Starts scraping and returns once the first scrape is done (or failed),
    /// so the counters are read before the load it brackets begins: a short
    /// run could otherwise end before its first scrape and show no deltas.
    pub async fn start(
        http: reqwest::Client,
        metrics_url: String,
        gpu_url: Option<String>,
        interval: Duration,
    ) -> Scraper {
        let (stop, mut stopped) = oneshot::channel();
        let (first_done, first_scrape) = oneshot::channel::<()>();
        let mut first_done = Some(first_done);
        // A scrape may take up to one interval, but never less than 2 s: a
        // loaded server answers /metrics slowly, and a missed scrape only
        // thins the evidence.
        let timeout = interval.max(Duration::from_secs(2));
        let handle = tokio::spawn(async move {
            let mut out = Scraped::default();
            loop {
                scrape_into(&http, &metrics_url, gpu_url.as_deref(), timeout, &mut out).await;
                if let Some(first_done) = first_done.take() {
                    let _ = first_done.send(());
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = &mut stopped => break,
                }
            }
            scrape_into(&http, &metrics_url, gpu_url.as_deref(), timeout, &mut out).await;
            out
        });
        // An error means the task ended early; `finish` returns what it kept.
        let _ = first_scrape.await;
        Scraper { stop, handle }
    }

    /// Stops the loop after one last scrape and returns what was kept.
    pub async fn finish(self) -> Scraped {
        // The task may already have ended (it never does on its own); either
        // way the join below returns what it has.
        let _ = self.stop.send(());
        self.handle.await.unwrap_or_default()
    }
}

async fn scrape_into(
    http: &reqwest::Client,
    metrics_url: &str,
    gpu_url: Option<&str>,
    timeout: Duration,
    out: &mut Scraped,
) {
    let engine = scrape_one(http, metrics_url, timeout);
    match gpu_url {
        Some(gpu_url) => {
            let (e, g) = tokio::join!(engine, scrape_one(http, gpu_url, timeout));
            push(e, &mut out.engine, &mut out.failures);
            push(g, &mut out.gpu, &mut out.failures);
        }
        None => push(engine.await, &mut out.engine, &mut out.failures),
    }
}

/// A page the sweep could not read as evidence (kept, as text, with the
/// step's evidence).
#[derive(Debug, thiserror::Error)]
#[error("{url}: {source}")]
struct ScrapeFailure {
    url: String,
    source: FetchError,
}

fn push(result: Result<Snap, ScrapeFailure>, snaps: &mut Vec<Snap>, failures: &mut Vec<String>) {
    match result {
        Ok(snap) => snaps.push(snap),
        Err(err) => failures.push(err.to_string()),
    }
}

async fn scrape_one(
    http: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<Snap, ScrapeFailure> {
    let ts_ms = now_ms();
    let page = fetch_page(http, url, timeout, MAX_PAGE_BYTES)
        .await
        .map_err(|source| ScrapeFailure {
            url: url.to_string(),
            source,
        })?;
    let understood = understand(&page, EngineChoice::Auto);
    Ok(Snap {
        ts_ms,
        samples: understood.samples,
    })
}

/// Mean and max of a series of gauge readings.
#[derive(Default)]
struct Stat {
    sum: f64,
    n: usize,
    max: Option<f64>,
}

impl Stat {
    fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.sum += v;
            self.n += 1;
            self.max = Some(self.max.map_or(v, |m| m.max(v)));
        }
    }

    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

fn get(signals: &[(Signal, f64)], signal: Signal) -> Option<f64> {
    signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v)
}

/// Scrapes taken inside `[start_ms, end_ms]`; when none were (a step shorter
/// than the scrape interval), every scrape but the closing one, so a short
/// step still gets the nearest reading rather than none.
fn in_window(snaps: &[Snap], start_ms: i64, end_ms: i64) -> Vec<&Snap> {
    let inside: Vec<&Snap> = snaps
        .iter()
        .filter(|s| s.ts_ms >= start_ms && s.ts_ms <= end_ms)
        .collect();
    if !inside.is_empty() {
        return inside;
    }
    let n = snaps.len().saturating_sub(1).max(1).min(snaps.len());
    snaps[..n].iter().collect()
}

/// Scrapes for the gauges: those while the load was applied
/// (`[start_ms, load_end_ms]`, from the first to the last measured send),
/// else those of the whole window.
fn gauge_window(snaps: &[Snap], start_ms: i64, load_end_ms: i64, end_ms: i64) -> Vec<&Snap> {
    let loaded: Vec<&Snap> = snaps
        .iter()
        .filter(|s| s.ts_ms >= start_ms && s.ts_ms <= load_end_ms)
        .collect();
    if loaded.is_empty() {
        in_window(snaps, start_ms, end_ms)
    } else {
        loaded
    }
}

/// Reduces a step's scrapes to its evidence for the window
/// `[start_ms, end_ms]`. Pure.
///
/// Gauges are read while the load was applied, `[start_ms, load_end_ms]`
/// (from the first to the last measured send): after the last send a closed
/// loop drains — slots empty one by one, the queue and the cache with them —
/// and averaging the drain in would understate the pressure the step put on
/// the server. Counters and histograms cover the whole window, so every
/// measured request's server-side timings are in.
pub fn evidence_for_window(
    scraped: &Scraped,
    start_ms: i64,
    load_end_ms: i64,
    end_ms: i64,
) -> ServerEvidence {
    let mut ev = ServerEvidence::default();

    // Engine gauges.
    let mut kv = Stat::default();
    let mut waiting = Stat::default();
    let mut running = Stat::default();
    for snap in gauge_window(&scraped.engine, start_ms, load_end_ms, end_ms) {
        let signals = signals_between(None, snap.snapshot());
        kv.add(get(&signals, Signal::KvCacheUsage));
        waiting.add(get(&signals, Signal::RequestsWaiting));
        running.add(get(&signals, Signal::RequestsRunning));
    }
    ev.kv_cache_usage_mean = kv.mean();
    ev.kv_cache_usage_max = kv.max;
    ev.requests_waiting_mean = waiting.mean();
    ev.requests_waiting_max = waiting.max;
    ev.requests_running_mean = running.mean();
    ev.requests_running_max = running.max;

    // Engine counters and histograms over the window: from the last scrape
    // at or before the window's start (else the first) to the last scrape.
    let base = scraped
        .engine
        .iter()
        .rev()
        .find(|s| s.ts_ms <= start_ms)
        .or(scraped.engine.first());
    if let (Some(base), Some(last)) = (base, scraped.engine.last()) {
        if last.ts_ms > base.ts_ms {
            let w = signals_between(Some(base.snapshot()), last.snapshot());
            let dt = (last.ts_ms - base.ts_ms) as f64 / 1000.0;
            ev.preemptions = get(&w, Signal::PreemptionsRate)
                .map(|rate| (rate * dt).round())
                .filter(|n| *n >= 0.0 && *n < u64::MAX as f64)
                .map(|n| n as u64);
            ev.prefix_cache_hit_rate = get(&w, Signal::PrefixCacheHitRate);
            ev.server_ttft_p50 = get(&w, Signal::ServerTtftP50);
            ev.server_ttft_p95 = get(&w, Signal::ServerTtftP95);
            ev.server_itl_p50 = get(&w, Signal::ServerItlP50);
            ev.server_itl_p95 = get(&w, Signal::ServerItlP95);
            ev.phases = ServerPhases::from_signals(&w);
            ev.prompt_tokens_rate = get(&w, Signal::PromptTokensRate);
            ev.spec_decode_acceptance_rate = get(&w, Signal::SpecDecodeAcceptanceRate);
            ev.spec_decode_accept_length = get(&w, Signal::SpecDecodeAcceptLength);
            ev.kv_transfer_time_mean = get(&w, Signal::KvTransferTimeMean);
        }
    }

    // GPUs.
    let mut mem = Stat::default();
    let mut mem_max = Stat::default();
    let mut util = Stat::default();
    let mut bw = Stat::default();
    let mut power = Stat::default();
    let mut peaks: BTreeMap<Vec<(String, String)>, f64> = BTreeMap::new();
    let mut count: Option<u32> = None;
    for snap in gauge_window(&scraped.gpu, start_ms, load_end_ms, end_ms) {
        let signals = signals_between(None, snap.snapshot());
        mem.add(get(&signals, Signal::GpuMemUsedRatio));
        mem_max.add(get(&signals, Signal::GpuMemUsedRatioMax));
        util.add(get(&signals, Signal::GpuUtil));
        bw.add(get(&signals, Signal::GpuMemBwUtil));
        power.add(get(&signals, Signal::GpuPowerW));
        if let Some(n) = get(&signals, Signal::GpuCount) {
            let n = n.round().clamp(0.0, f64::from(u32::MAX)) as u32;
            count = Some(count.map_or(n, |c| c.max(n)));
        }
        for (gpu, ratio) in per_gpu_mem_ratio(&snap.samples) {
            let peak = peaks.entry(gpu).or_insert(ratio);
            *peak = peak.max(ratio);
        }
    }
    ev.gpu_mem_used_ratio_mean = mem.mean();
    ev.gpu_mem_used_ratio_max = mem_max.max;
    ev.gpu_util_mean = util.mean();
    ev.gpu_mem_bw_util_mean = bw.mean();
    ev.gpu_power_w_mean = power.mean();
    ev.per_gpu_peak_mem_ratio_min = peaks.values().copied().reduce(f64::min);
    ev.per_gpu_peak_mem_ratio_max = peaks.values().copied().reduce(f64::max);
    ev.gpu_count = count;
    ev
}

/// Whether the engine's pages carry the queue and prefill histograms at all,
/// so a window without them reads "no such histograms", not "no traffic".
pub fn has_phase_histograms(scraped: &Scraped) -> bool {
    let has = |metric: CatalogMetric| {
        scraped
            .engine
            .iter()
            .any(|snap| snap.samples.iter().any(|s| s.metric == metric))
    };
    has(CatalogMetric::QueueTimeSeconds) && has(CatalogMetric::PrefillTimeSeconds)
}

/// Used / total memory per GPU (keyed by its label set, as
/// [`signals_between`] keys GPUs).
fn per_gpu_mem_ratio(samples: &[NormalizedSample]) -> Vec<(Vec<(String, String)>, f64)> {
    // (used bytes, total bytes) of each GPU.
    type UsedTotal = (Option<f64>, Option<f64>);
    let mut by_gpu: BTreeMap<&[(String, String)], UsedTotal> = BTreeMap::new();
    for s in samples {
        if s.part != Part::Value || !s.value.is_finite() {
            continue;
        }
        let slot = by_gpu.entry(&s.labels).or_default();
        match s.metric {
            CatalogMetric::GpuMemUsedBytes => slot.0 = Some(s.value),
            CatalogMetric::GpuMemTotalBytes => slot.1 = Some(s.value),
            _ => {}
        }
    }
    by_gpu
        .into_iter()
        .filter_map(|(labels, (used, total))| {
            let (used, total) = (used?, total?);
            (total > 0.0).then(|| (labels.to_vec(), used / total))
        })
        .collect()
}
