//! Live diagnosis: the sweep's diagnosis rules ([`diagnose`]) applied to a
//! sliding window of the stored signals, so a target has a standing answer
//! to "what is slow, and why" without a load test.
//!
//! Production traffic is not a sweep, but it visits several concurrency
//! levels over a few minutes. The window's samples are grouped by the
//! concurrency the server saw (running + waiting, in power-of-two bands);
//! each band becomes one pseudo-step whose evidence is the band's means and
//! maxima, and the unchanged rules read those steps as they read a sweep's.
//! No threshold is repeated here: [`AnalysisConfig`] is the one place.

use super::diagnosis::{diagnose, Confidence, Verdict};
use super::{
    fin, fmt, latency_breakdown, AnalysisConfig, ClientMeans, DominantPart, Load, Objectives,
    Quantiles, ServerEvidence, ServerPhases, StepResult,
};
use super::{StepEconomics, WorkloadHints};
use crate::signals::Signal;

/// Default length of the live window, seconds (5 minutes).
pub const DEFAULT_LIVE_WINDOW_S: u64 = 300;
/// A concurrency band needs this many samples to become a step: one sample
/// is one scrape, too thin to call a level.
pub const MIN_SAMPLES_PER_BAND: usize = 2;

/// One instant of the window: every signal the store computed there.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LiveSample {
    /// Unix milliseconds.
    pub ts_ms: i64,
    pub signals: Vec<(Signal, f64)>,
}

impl LiveSample {
    /// The sample's finite value of `signal`.
    pub fn get(&self, signal: Signal) -> Option<f64> {
        self.signals
            .iter()
            .find(|(s, _)| *s == signal)
            .map(|(_, v)| *v)
            .filter(|v| v.is_finite())
    }

    /// Requests the server held at this instant (running + waiting).
    pub fn concurrency(&self) -> Option<f64> {
        let running = self.get(Signal::RequestsRunning)?;
        Some(running + self.get(Signal::RequestsWaiting).unwrap_or(0.0))
    }
}

/// What the live verdict says limits the target now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LiveKind {
    /// No rule fired over a window with load: nothing is limiting.
    Healthy,
    /// The window held no load (or too few samples) to judge.
    Idle,
    Bottleneck(Verdict),
}

impl LiveKind {
    /// The stable machine name, as used by the API and alert rules
    /// (`threshold = "kv_cache_capacity"`).
    pub fn code(self) -> &'static str {
        match self {
            LiveKind::Healthy => "healthy",
            LiveKind::Idle => "idle",
            LiveKind::Bottleneck(v) => match v {
                Verdict::PrefillBound => "prefill_bound",
                Verdict::DecodeBound => "decode_bound",
                Verdict::KvCacheCapacity => "kv_cache_capacity",
                Verdict::SchedulerLimit => "scheduler_limit",
                Verdict::OutsideGpu => "outside_gpu",
                Verdict::UnbalancedSplit => "unbalanced_split",
                Verdict::PrefixCachingIneffective => "prefix_caching",
                Verdict::ObjectiveBreached => "objective_breached",
                Verdict::ClientBound => "client_bound",
            },
        }
    }

    /// Every code [`LiveKind::code`] can return, for validating rules.
    pub const CODES: [&'static str; 11] = [
        "healthy",
        "idle",
        "prefill_bound",
        "decode_bound",
        "kv_cache_capacity",
        "scheduler_limit",
        "outside_gpu",
        "unbalanced_split",
        "prefix_caching",
        "objective_breached",
        "client_bound",
    ];

    /// The kind a [`LiveKind::code`] names.
    pub fn from_code(code: &str) -> Option<LiveKind> {
        let verdicts = [
            Verdict::PrefillBound,
            Verdict::DecodeBound,
            Verdict::KvCacheCapacity,
            Verdict::SchedulerLimit,
            Verdict::OutsideGpu,
            Verdict::UnbalancedSplit,
            Verdict::PrefixCachingIneffective,
            Verdict::ObjectiveBreached,
            Verdict::ClientBound,
        ];
        [LiveKind::Healthy, LiveKind::Idle]
            .into_iter()
            .chain(verdicts.into_iter().map(LiveKind::Bottleneck))
            .find(|k| k.code() == code)
    }

    /// The verdict in words.
    pub fn name(self) -> &'static str {
        match self {
            LiveKind::Healthy => "healthy",
            LiveKind::Idle => "idle (no load to judge)",
            LiveKind::Bottleneck(v) => v.name(),
        }
    }
}

/// The standing answer for one target over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveVerdict {
    pub kind: LiveKind,
    pub confidence: Confidence,
    /// The numbers the verdict rests on.
    pub evidence: String,
    pub what_to_try: &'static str,
    /// Samples in the window, and concurrency bands they formed.
    pub samples: usize,
    pub bands: usize,
}

impl LiveVerdict {
    /// One line in words.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "{} ({} confidence): {}.",
            self.kind.name(),
            self.confidence.word(),
            self.evidence
        );
        if !self.what_to_try.is_empty() {
            line.push_str(&format!(" Try: {}.", self.what_to_try));
        }
        line
    }
}

/// The live verdict for a window of samples (any order). Pure.
pub fn live_diagnosis(
    samples: &[LiveSample],
    objectives: &Objectives,
    workload: &WorkloadHints,
    config: &AnalysisConfig,
) -> LiveVerdict {
    let steps = band_steps(samples);
    let workload = observed_workload(&steps, workload, config);
    let findings = diagnose(&steps, objectives, &workload, config);
    if let Some(top) = findings
        .into_iter()
        .find(|f| f.verdict != Verdict::ClientBound)
    {
        return LiveVerdict {
            kind: LiveKind::Bottleneck(top.verdict),
            confidence: top.confidence,
            evidence: top.evidence,
            what_to_try: top.what_to_try,
            samples: samples.len(),
            bands: steps.len(),
        };
    }
    if steps.is_empty() {
        return LiveVerdict {
            kind: LiveKind::Idle,
            confidence: Confidence::High,
            evidence: format!(
                "{} samples in the window, none with enough requests in flight to judge",
                samples.len()
            ),
            what_to_try: "",
            samples: samples.len(),
            bands: 0,
        };
    }
    healthy(samples.len(), &steps)
}

/// Production traffic comes with no workload description, but it shows
/// one: when the lowest band already hits the prefix cache (at least
/// `prefix_hit_low`), the traffic shares prefixes, and that hit rate is
/// what the busier bands should keep. A fall below a fraction of it under
/// load is eviction. Hints the caller gives win.
fn observed_workload(
    steps: &[StepResult],
    given: &WorkloadHints,
    config: &AnalysisConfig,
) -> WorkloadHints {
    if given.shared_prefix {
        return *given;
    }
    let config = config.sanitized();
    match steps
        .iter()
        .find_map(|s| fin(s.server.prefix_cache_hit_rate))
    {
        Some(rate) if rate >= config.prefix_hit_low && rate <= 1.0 => WorkloadHints {
            shared_prefix: true,
            expected_prefix_hit_rate: Some(rate),
            ..*given
        },
        _ => *given,
    }
}

fn healthy(samples: usize, steps: &[StepResult]) -> LiveVerdict {
    let top = &steps[steps.len() - 1];
    let mut parts = vec![format!("up to {} in flight", top.load)];
    if let Some(t) = fin(top.ttft.p95) {
        parts.push(format!("p95 TTFT {}", fmt::secs(t)));
    }
    if let Some(t) = fin(top.itl.p95) {
        parts.push(format!("p95 ITL {}", fmt::secs(t)));
    }
    if let Some(kv) = fin(top.server.kv_cache_usage_max) {
        parts.push(format!("KV-cache usage at most {}", fmt::ratio(kv)));
    }
    let waiting = fin(top.server.requests_waiting_mean);
    if let Some(w) = waiting {
        parts.push(format!("waiting {} on average", fmt::num(w)));
    }
    // Sure when the queue and cache were both measured and the window
    // visited more than one level; one level says less about headroom.
    let measured = waiting.is_some() && fin(top.server.kv_cache_usage_max).is_some();
    let confidence = match (measured, steps.len() > 1) {
        (true, true) => Confidence::High,
        (true, false) => Confidence::Medium,
        _ => Confidence::Low,
    };
    LiveVerdict {
        kind: LiveKind::Healthy,
        confidence,
        evidence: parts.join(", "),
        what_to_try: "",
        samples,
        bands: steps.len(),
    }
}

/// The power-of-two band a concurrency falls in (1, 2, 4, …); `None` when
/// nothing was in flight.
fn band_of(concurrency: f64) -> Option<u32> {
    if concurrency.is_nan() || concurrency < 0.5 {
        return None;
    }
    let c = concurrency.round().min(f64::from(1u32 << 20)) as u32;
    Some(c.next_power_of_two())
}

/// Groups samples into concurrency bands and turns each band with enough
/// samples into a pseudo-step, lowest band first.
pub fn band_steps(samples: &[LiveSample]) -> Vec<StepResult> {
    let mut bands: std::collections::BTreeMap<u32, Vec<&LiveSample>> = Default::default();
    for s in samples {
        if let Some(b) = s.concurrency().and_then(band_of) {
            bands.entry(b).or_default().push(s);
        }
    }
    bands
        .into_iter()
        .filter(|(_, members)| members.len() >= MIN_SAMPLES_PER_BAND)
        .map(|(band, members)| band_step(band, &members))
        .collect()
}

fn band_step(band: u32, members: &[&LiveSample]) -> StepResult {
    let stat = |signal: Signal| Stat::of(members.iter().filter_map(|s| s.get(signal)));
    let mut step = StepResult::at(Load::Concurrency(band));
    step.start_unix_ms = members.iter().map(|s| s.ts_ms).min().unwrap_or(0);
    step.end_unix_ms = members.iter().map(|s| s.ts_ms).max().unwrap_or(0);
    step.requests_ok = members.len() as u64;
    let gen = stat(Signal::GenerationTokensRate);
    step.output_token_throughput = gen.mean.unwrap_or(0.0).max(0.0);
    step.request_throughput = stat(Signal::RequestRate).mean.unwrap_or(0.0).max(0.0);
    step.server = band_evidence(members, &stat);
    // The server's histograms see all traffic; the canaries are a thin
    // sample of it, used where the engine has no histograms, and where the
    // band's breakdown says most of what a user feels (the canary) is spent
    // outside the engine (a proxy, a slow frontend), which only they see.
    let server_ttft = quantiles(&stat(Signal::ServerTtftP50), &stat(Signal::ServerTtftP95));
    let probe_ttft = quantiles(&stat(Signal::ProbeTtftP50), &stat(Signal::ProbeTtftP95));
    let outside = step
        .server
        .latency_breakdown
        .as_ref()
        .is_some_and(|b| b.dominant == DominantPart::OutsideEngine);
    step.ttft = match (server_ttft, probe_ttft) {
        (Some(server), Some(probe)) if outside && probe.p95 > server.p95 => probe,
        (server, probe) => server.or(probe).unwrap_or_default(),
    };
    step.itl = quantiles(&stat(Signal::ServerItlP50), &stat(Signal::ServerItlP95))
        .or_else(|| quantiles(&stat(Signal::ProbeItlP50), &stat(Signal::ProbeItlP95)))
        .unwrap_or_default();
    step
}

fn band_evidence(members: &[&LiveSample], stat: &dyn Fn(Signal) -> Stat) -> ServerEvidence {
    let kv = stat(Signal::KvCacheUsage);
    let waiting = stat(Signal::RequestsWaiting);
    let running = stat(Signal::RequestsRunning);
    let mem = stat(Signal::GpuMemUsedRatio);
    // The band's phase means: each sample's mean is over one scrape
    // interval's histogram deltas.
    let phases = ServerPhases {
        queue_s: stat(Signal::ServerQueueTimeMean).mean,
        prefill_s: stat(Signal::ServerPrefillTimeMean).mean,
        decode_s: stat(Signal::ServerDecodeTimeMean).mean,
        inference_s: stat(Signal::ServerInferenceTimeMean).mean,
        ttft_s: stat(Signal::ServerTtftMean).mean,
        e2e_s: stat(Signal::ServerE2eMean).mean,
    };
    // Preemptions: each sample's rate times the gap to the sample before.
    let mut ordered: Vec<&LiveSample> = members.to_vec();
    ordered.sort_by_key(|s| s.ts_ms);
    let preempted: Option<f64> = ordered
        .windows(2)
        .filter_map(|w| {
            let rate = w[1].get(Signal::PreemptionsRate)?;
            Some(rate.max(0.0) * (w[1].ts_ms - w[0].ts_ms) as f64 / 1000.0)
        })
        .reduce(|a, b| a + b);
    ServerEvidence {
        kv_cache_usage_mean: kv.mean,
        kv_cache_usage_max: kv.max,
        requests_waiting_mean: waiting.mean,
        requests_waiting_max: waiting.max,
        requests_running_mean: running.mean,
        requests_running_max: running.max,
        preemptions: preempted.map(|p| p.round().min(u64::MAX as f64) as u64),
        prefix_cache_hit_rate: stat(Signal::PrefixCacheHitRate).mean,
        spec_decode_acceptance_rate: stat(Signal::SpecDecodeAcceptanceRate).mean,
        spec_decode_accept_length: stat(Signal::SpecDecodeAcceptLength).mean,
        kv_transfer_time_mean: stat(Signal::KvTransferTimeMean).mean,
        server_ttft_p50: stat(Signal::ServerTtftP50).mean,
        server_ttft_p95: stat(Signal::ServerTtftP95).mean,
        server_itl_p50: stat(Signal::ServerItlP50).mean,
        server_itl_p95: stat(Signal::ServerItlP95).mean,
        gpu_mem_used_ratio_mean: mem.mean,
        gpu_mem_used_ratio_max: stat(Signal::GpuMemUsedRatioMax).max.or(mem.max),
        per_gpu_peak_mem_ratio_min: stat(Signal::GpuMemUsedRatioMin).max,
        per_gpu_peak_mem_ratio_max: stat(Signal::GpuMemUsedRatioMax).max,
        gpu_util_mean: stat(Signal::GpuUtil).mean,
        gpu_mem_bw_util_mean: stat(Signal::GpuMemBwUtil).mean,
        gpu_count: stat(Signal::GpuCount)
            .max
            .map(|n| n.round().clamp(0.0, f64::from(u32::MAX)) as u32),
        latency_breakdown: latency_breakdown(
            &phases,
            &ClientMeans {
                ttft_s: stat(Signal::ProbeTtftMean).mean,
                e2e_s: stat(Signal::ProbeE2eMean).mean,
            },
            true,
        )
        .ok(),
        phases,
        latency_breakdown_missing: None,
        prompt_tokens_rate: stat(Signal::PromptTokensRate).mean,
        gpu_power_w_mean: stat(Signal::GpuPowerW).mean,
        economics: StepEconomics::default(),
    }
}

/// A band's quantiles: the mean of each sample's p50 and p95 (a sample's
/// quantile is already over one scrape interval's histogram deltas).
fn quantiles(p50: &Stat, p95: &Stat) -> Option<Quantiles> {
    let p95 = p95.mean?;
    Some(Quantiles {
        p50: p50.mean,
        p95: Some(p95),
        p99: None,
    })
}

#[derive(Debug, Default, Clone, Copy)]
struct Stat {
    mean: Option<f64>,
    max: Option<f64>,
}

impl Stat {
    fn of(values: impl Iterator<Item = f64>) -> Stat {
        let (mut sum, mut n, mut max) = (0.0, 0usize, None::<f64>);
        for v in values {
            sum += v;
            n += 1;
            max = Some(max.map_or(v, |m| m.max(v)));
        }
        Stat {
            mean: (n > 0).then(|| sum / n as f64),
            max,
        }
    }
}

/// The engine and probe signals [`live_diagnosis`] reads.
pub const LIVE_ENGINE_SIGNALS: [Signal; 27] = [
    Signal::KvCacheUsage,
    Signal::RequestsRunning,
    Signal::RequestsWaiting,
    Signal::PrefixCacheHitRate,
    Signal::PreemptionsRate,
    Signal::ServerTtftP50,
    Signal::ServerTtftP95,
    Signal::ServerItlP50,
    Signal::ServerItlP95,
    Signal::GenerationTokensRate,
    Signal::RequestRate,
    Signal::ProbeTtftP95,
    Signal::ProbeItlP95,
    Signal::ProbeTtftP50,
    Signal::ProbeItlP50,
    Signal::ProbeTtftMean,
    Signal::ProbeE2eMean,
    Signal::ServerTtftMean,
    Signal::ServerE2eMean,
    Signal::ServerQueueTimeMean,
    Signal::ServerPrefillTimeMean,
    Signal::ServerDecodeTimeMean,
    Signal::ServerInferenceTimeMean,
    Signal::PromptTokensRate,
    Signal::SpecDecodeAcceptanceRate,
    Signal::SpecDecodeAcceptLength,
    Signal::KvTransferTimeMean,
];

/// The GPU signals [`live_diagnosis`] reads (from the target's GPU source).
pub const LIVE_GPU_SIGNALS: [Signal; 6] = [
    Signal::GpuUtil,
    Signal::GpuMemUsedRatio,
    Signal::GpuMemUsedRatioMax,
    Signal::GpuMemUsedRatioMin,
    Signal::GpuMemBwUtil,
    Signal::GpuCount,
];
