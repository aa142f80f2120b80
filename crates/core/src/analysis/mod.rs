//! Pure analysis of a load sweep: where throughput saturates, the highest load
//! that still meets the objectives, and which bottleneck the evidence names.
//!
//! The I/O side (running the steps, scraping the servers and GPUs) fills one
//! [`StepResult`] per step; everything here is a function of those tables, so
//! a sweep stored months ago can be re-judged with new thresholds.
//!
//! Method (DESIGN.md, "Method: why sweeps, and how to read them"): the lowest
//! load — normally concurrency 1 — is the *floor*, the best latency this
//! system can give. Each rising step is read against the floor and against
//! the objectives, together with the server's own state during that step's
//! window.
//!
//! Validity: a step labelled `client_bound` measured the load generator, not
//! the server, so it never feeds a latency or throughput verdict. Server
//! configuration facts that do not depend on the client (an unbalanced
//! memory split, the prefix-cache hit rate) are still read from it.
//!
//! Invariant: no function here returns NaN or an infinity, and no rendered
//! text contains "NaN" or "inf": non-finite inputs are treated as missing.

mod breakdown;
mod card;
mod diagnosis;
mod economics;
pub mod experiment;
mod fmt;
mod live;
mod passive;
mod saturation;

pub use crate::catalog::EngineCapacity;
pub use breakdown::{
    latency_breakdown, per_request_breakdown, ClientMeans, DominantPart, E2eBreakdown,
    LatencyBreakdown, NoBreakdown, PerRequestPhases, ServerPhases, TtftBreakdown, WaitingGauge,
};
pub use card::{card_from_info, compare_cards, CardDiff, ExperimentCard, DERIVED_CARD_FIELDS};
pub use diagnosis::{diagnose, Confidence, Finding, Verdict};
pub use economics::{step_economics, Price, StepEconomics};
pub use live::{
    band_steps, live_diagnosis, LiveKind, LiveSample, LiveVerdict, DEFAULT_LIVE_WINDOW_S,
    LIVE_ENGINE_SIGNALS, LIVE_GPU_SIGNALS, MIN_SAMPLES_PER_BAND,
};
pub use passive::{
    assemble_windows, bin_of, passive_curve, NoKnee, PassiveCurve, PassiveKnee, PassivePoint,
    PassiveSustainable, PassiveWindow, BINS_PER_DOUBLING, DEFAULT_PASSIVE_RANGE_S,
    DEFAULT_PASSIVE_WINDOW_S, GAUGE_SAMPLES_PER_WINDOW, LINEAR_BINS_UP_TO, MAX_PASSIVE_WINDOWS,
    MIN_POINTS_FOR_KNEE, MIN_WINDOWS_FOR_KNEE, MIN_WINDOWS_PER_POINT, PASSIVE_GAUGE_SIGNALS,
    PASSIVE_WINDOW_SIGNALS,
};
pub use saturation::{
    check_objectives, max_sustainable, saturation_point, ExcludedStep, ObjectiveMiss, Saturation,
    StepMisses, Sustainable, ThroughputMetric,
};

use std::fmt as stdfmt;

/// Default minimum throughput gain per doubling of load; below it the curve
/// counts as flat (DESIGN.md: "gain per doubling < 10 %").
pub const DEFAULT_SATURATION_GAIN: f64 = 0.10;
/// A latency "rises" between two steps when it grows by at least this
/// fraction. Past saturation a closed-loop sweep roughly doubles latency per
/// doubling of concurrency (Little's law), so 10 % is far above noise yet far
/// below the real effect.
pub const DEFAULT_LATENCY_RISE: f64 = 0.10;
/// Without an objective, a latency is "high" when it is at least this many
/// times the floor (the lowest-load step's value).
pub const DEFAULT_HIGH_VS_FLOOR: f64 = 3.0;
/// Without an ITL objective, the p95 ITL above which decode counts as slow at
/// the floor (the floor cannot be judged against itself). 50 ms is the chat
/// objective of DESIGN.md (≈ 20 tokens/s, about reading speed).
pub const DEFAULT_FALLBACK_ITL_P95_S: f64 = 0.050;
/// p95 TTFT growing by at least this factor from one step to the next counts
/// as a jump, even when it is not yet "high".
pub const DEFAULT_TTFT_JUMP_RATIO: f64 = 2.0;
/// KV-cache usage (0..1) above which the cache counts as full (DESIGN.md:
/// "> 90 %").
pub const DEFAULT_KV_USAGE_HIGH: f64 = 0.90;
/// Mean KV-cache usage (0..1) at or above which a cache whose size is not
/// reported counts as full. vLLM reserves blocks as sequences grow and frees
/// them as they finish, so a cache that binds shows a mean near 0.85, not 1
/// (real vLLM 0.32, 40 blocks: mean 0.85–0.86 while it was the limit).
pub const DEFAULT_KV_USAGE_MEAN_FULL: f64 = 0.75;
/// Max KV-cache usage (0..1) below which a cache whose size is not reported
/// has room: a scheduler cap, not memory, holds the running count.
pub const DEFAULT_KV_USAGE_ROOM: f64 = 0.60;
/// GPU utilisation (0..1) below which the GPU counts as idle. DCGM's
/// `GPU_UTIL` reports "a kernel was running", which overstates real work, so
/// a value under one half is idle beyond doubt.
pub const DEFAULT_GPU_UTIL_LOW: f64 = 0.50;
/// Memory (KV-cache usage, else GPU memory used ratio) below this has room.
/// KV-cache usage is preferred because vLLM pre-allocates
/// `gpu_memory_utilization` (0.9 by default) of GPU memory at start, so GPU
/// memory looks full even when the cache is empty.
pub const DEFAULT_MEMORY_ROOM_BELOW: f64 = 0.90;
/// A GPU whose peak memory used ratio reaches this is full.
pub const DEFAULT_GPU_MEM_FULL: f64 = 0.95;
/// For an unbalanced split, the least-used GPU must be at least this far
/// (in used ratio) below the fullest.
pub const DEFAULT_GPU_MEM_SPLIT_GAP: f64 = 0.15;
/// Prefix-cache hit rate under which a shared-prefix workload counts as not
/// hitting, when the expected share is unknown.
pub const DEFAULT_PREFIX_HIT_LOW: f64 = 0.20;
/// When the expected shared fraction is known, a hit rate under this
/// fraction of it counts as low.
pub const DEFAULT_PREFIX_HIT_FRACTION_OF_EXPECTED: f64 = 0.5;
/// Default error-rate objective (1 %).
pub const DEFAULT_MAX_ERROR_RATE: f64 = 0.01;

/// The load of one step: closed-loop concurrency or open-loop request rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Requests kept in flight at once (closed loop).
    Concurrency(u32),
    /// Requests started per second (open loop, e.g. Poisson arrivals).
    RequestRate(f64),
}

impl Load {
    /// The load as a number, for ratios between steps.
    pub fn value(&self) -> f64 {
        match *self {
            Load::Concurrency(c) => f64::from(c),
            Load::RequestRate(r) => r,
        }
    }

    /// Whether two loads are of the same kind (only those can be compared).
    pub fn same_kind(&self, other: &Load) -> bool {
        matches!(
            (self, other),
            (Load::Concurrency(_), Load::Concurrency(_))
                | (Load::RequestRate(_), Load::RequestRate(_))
        )
    }

    /// A usable load is finite and positive: log2 of a ratio needs that.
    pub(crate) fn is_valid(&self) -> bool {
        let v = self.value();
        v.is_finite() && v > 0.0
    }
}

impl stdfmt::Display for Load {
    fn fmt(&self, f: &mut stdfmt::Formatter<'_>) -> stdfmt::Result {
        match *self {
            Load::Concurrency(c) => write!(f, "concurrency {c}"),
            Load::RequestRate(r) => write!(f, "rate {} req/s", fmt::num(r)),
        }
    }
}

/// Client-side latency quantiles of one step, in seconds. `None` where no
/// request produced the value (e.g. TPOT of one-token outputs).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Quantiles {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Quantiles {
    /// Convenience constructor for three known values.
    pub fn new(p50: f64, p95: f64, p99: f64) -> Self {
        Quantiles {
            p50: Some(p50),
            p95: Some(p95),
            p99: Some(p99),
        }
    }
}

/// What the server and its GPUs reported during one step's window. Every
/// field is optional: engines expose different metrics, and GPU counters may
/// be absent (no dcgm-exporter, no NVML). Stored as JSON with each step;
/// the server quantiles keep the unit in their stored names (`…_s`).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ServerEvidence {
    /// Mean KV-cache usage over the window, 0..1.
    pub kv_cache_usage_mean: Option<f64>,
    /// Max KV-cache usage over the window, 0..1.
    pub kv_cache_usage_max: Option<f64>,
    pub requests_waiting_mean: Option<f64>,
    pub requests_waiting_max: Option<f64>,
    pub requests_running_mean: Option<f64>,
    pub requests_running_max: Option<f64>,
    /// Preemptions during the step (counter delta over the window).
    pub preemptions: Option<u64>,
    /// Prompt tokens the server processed per second over the window: with
    /// the request rate, tokens per request where the workload is unknown.
    pub prompt_tokens_rate: Option<f64>,
    /// Prefix-cache hits / queries over the window, 0..1.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Speculative decoding over the window: accepted ÷ proposed draft
    /// tokens, 0..1 (issue 38; the diagnosis cites it where ITL is high).
    pub spec_decode_acceptance_rate: Option<f64>,
    /// Tokens per draft step over the window (1 + accepted ÷ drafts).
    pub spec_decode_accept_length: Option<f64>,
    /// Mean prefill→decode KV-cache transfer time over the window, seconds
    /// (P/D disaggregation; the TTFT split carves it out).
    #[serde(rename = "kv_transfer_time_mean_s")]
    pub kv_transfer_time_mean: Option<f64>,
    /// Server-side TTFT / ITL quantiles from histogram bucket deltas over the
    /// window, in seconds. These are interpolated inside coarse buckets
    /// (vLLM's TTFT buckets jump 1.0 → 2.5 s), so they are guesses within a
    /// bucket; the client's values in [`StepResult`] are exact.
    #[serde(rename = "server_ttft_p50_s")]
    pub server_ttft_p50: Option<f64>,
    #[serde(rename = "server_ttft_p95_s")]
    pub server_ttft_p95: Option<f64>,
    #[serde(rename = "server_itl_p50_s")]
    pub server_itl_p50: Option<f64>,
    #[serde(rename = "server_itl_p95_s")]
    pub server_itl_p95: Option<f64>,
    /// GPU memory used / total, averaged over GPUs and the window, 0..1.
    pub gpu_mem_used_ratio_mean: Option<f64>,
    /// GPU memory used / total, max over GPUs and the window, 0..1.
    pub gpu_mem_used_ratio_max: Option<f64>,
    /// Each GPU's peak memory used ratio over the window; the lowest of those
    /// peaks. Together with [`Self::per_gpu_peak_mem_ratio_max`] it shows an
    /// unbalanced split (one GPU full, another with room).
    pub per_gpu_peak_mem_ratio_min: Option<f64>,
    /// Each GPU's peak memory used ratio over the window; the highest.
    pub per_gpu_peak_mem_ratio_max: Option<f64>,
    /// GPU utilisation, mean over GPUs and the window, 0..1.
    pub gpu_util_mean: Option<f64>,
    /// Memory-bandwidth utilisation (DCGM `DRAM_ACTIVE`), mean, 0..1.
    pub gpu_mem_bw_util_mean: Option<f64>,
    /// GPUs seen in the window.
    pub gpu_count: Option<u32>,
    /// GPU power over the window, watts summed over the GPUs, mean (dcgm
    /// `DCGM_FI_DEV_POWER_USAGE`, NVML).
    pub gpu_power_w_mean: Option<f64>,
    /// Energy per output token and cost per million output tokens at this
    /// load (see [`step_economics`]).
    pub economics: StepEconomics,
    /// The engine's phase means (queue, prefill, decode, inference, TTFT,
    /// e2e) over the window, from histogram deltas.
    pub phases: ServerPhases,
    /// The client's mean TTFT/e2e split by [`Self::phases`]; `None` with
    /// [`Self::latency_breakdown_missing`] saying why. Steps stored before
    /// the breakdown existed read as `None` with no reason.
    pub latency_breakdown: Option<LatencyBreakdown>,
    pub latency_breakdown_missing: Option<String>,
}

/// One step of a sweep: one load level, its client measurements and the
/// server evidence of its window.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    pub load: Load,
    /// Window start, unix milliseconds.
    pub start_unix_ms: i64,
    /// Window end, unix milliseconds.
    pub end_unix_ms: i64,
    pub requests_ok: u64,
    pub requests_failed: u64,
    /// Wall time of the step, seconds.
    pub wall_time_s: f64,
    /// Completed requests per second over the wall time.
    pub request_throughput: f64,
    /// Output tokens per second over the wall time.
    pub output_token_throughput: f64,
    pub ttft: Quantiles,
    pub itl: Quantiles,
    pub tpot: Quantiles,
    pub e2e: Quantiles,
    /// failed / (ok + failed), 0..1.
    pub error_rate: f64,
    /// Why the client was the bottleneck (CPU, scheduler lag, dispatch lag),
    /// or `None` when the client self-check passed. A client-bound step is
    /// never used for a saturation or latency verdict.
    pub client_bound: Option<String>,
    /// Why the step's prefix-cache hits contradict its workload (random
    /// prompts that hit the cache), or `None`. Such a step measured a warm
    /// cache, not the server under this load, and is left out of verdicts.
    pub cache_contaminated: Option<String>,
    pub server: ServerEvidence,
}

/// Hit ratio beyond the intended one that a run may show before its cache
/// hits contradict its workload: room for the blocks a chat template's
/// common opening fills.
pub const CACHE_HIT_ALLOWANCE: f64 = 0.10;

/// The cache-hygiene verdict of a run: `Some(reason)` when the observed
/// prefix-cache hit ratio (`cached_tokens / input_tokens`, from
/// `usage.prompt_tokens_details.cached_tokens`) exceeds the `intended` one
/// (0 for random prompts, the chosen ratio for shared-prefix) by more than
/// [`CACHE_HIT_ALLOWANCE`]. `None` without input tokens to judge by.
pub fn cache_hygiene(intended: f64, input_tokens: u64, cached_tokens: u64) -> Option<String> {
    if input_tokens == 0 {
        return None;
    }
    let observed = cached_tokens as f64 / input_tokens as f64;
    (observed > intended + CACHE_HIT_ALLOWANCE).then(|| {
        format!(
            "prefix-cache hit ratio {observed:.2} observed, {intended:.2} intended: \
             the prompts hit the cache ({cached_tokens} of {input_tokens} input tokens)"
        )
    })
}

/// The cache-hygiene verdict from the server's own prefix-cache counters
/// (hits / queries over the run's window), for servers that do not report
/// cached tokens per request (vLLM without `--enable-prompt-tokens-details`).
/// The counters see every client of the server, so the reason says so.
pub fn cache_hygiene_from_counters(intended: f64, hit_rate: f64) -> Option<String> {
    (hit_rate.is_finite() && hit_rate > intended + CACHE_HIT_ALLOWANCE).then(|| {
        format!(
            "prefix-cache hit ratio {hit_rate:.2} on the server's counters over the run \
             (all its clients), {intended:.2} intended: the prompts hit the cache"
        )
    })
}

impl StepResult {
    /// A step at `load` with no measurements yet; the I/O side and tests fill
    /// in the fields they have.
    pub fn at(load: Load) -> Self {
        StepResult {
            load,
            start_unix_ms: 0,
            end_unix_ms: 0,
            requests_ok: 0,
            requests_failed: 0,
            wall_time_s: 0.0,
            request_throughput: 0.0,
            output_token_throughput: 0.0,
            ttft: Quantiles::default(),
            itl: Quantiles::default(),
            tpot: Quantiles::default(),
            e2e: Quantiles::default(),
            error_rate: 0.0,
            client_bound: None,
            cache_contaminated: None,
            server: ServerEvidence::default(),
        }
    }

    /// The error rate, from the field when it is a valid fraction, else from
    /// the request counts (so a NaN upstream does not hide failures).
    pub fn effective_error_rate(&self) -> f64 {
        if self.error_rate.is_finite() && (0.0..=1.0).contains(&self.error_rate) {
            return self.error_rate;
        }
        let total = self.requests_ok.saturating_add(self.requests_failed);
        if total == 0 {
            0.0
        } else {
            self.requests_failed as f64 / total as f64
        }
    }
}

/// Service-level objectives a step must meet to count as sustainable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Objectives {
    /// p95 TTFT ceiling, seconds.
    pub ttft_p95: Option<f64>,
    /// p95 ITL ceiling, seconds.
    pub itl_p95: Option<f64>,
    /// p95 end-to-end ceiling, seconds: what batch jobs and agents, which
    /// wait for whole answers, care about.
    pub e2e_p95: Option<f64>,
    /// Highest acceptable error rate, 0..1.
    pub max_error_rate: f64,
}

impl Default for Objectives {
    fn default() -> Self {
        Objectives {
            ttft_p95: None,
            itl_p95: None,
            e2e_p95: None,
            max_error_rate: DEFAULT_MAX_ERROR_RATE,
        }
    }
}

impl EngineCapacity {
    /// The capacity an experiment card records.
    pub fn from_card(card: &ExperimentCard) -> EngineCapacity {
        // Each data-parallel engine reports (and has) the same cache.
        let engines = u64::from(card.data_parallel.unwrap_or(1).max(1));
        EngineCapacity {
            kv_blocks: card.num_gpu_blocks.map(|blocks| blocks * engines),
            block_size: card.kv_block_size.map(u64::from),
            kv_tokens: card.kv_cache_tokens,
            max_num_seqs: card.max_num_seqs,
            engines: if card.num_gpu_blocks.is_some() {
                engines
            } else {
                0
            },
            engine: card.engine.as_deref().and_then(|e| e.parse().ok()),
        }
    }

    /// Whether anything of the capacity is known (the engine alone is not).
    pub fn is_known(&self) -> bool {
        EngineCapacity {
            engine: None,
            ..*self
        } != EngineCapacity::default()
    }
}

/// What the sweep's workload was, as far as the diagnosis needs it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WorkloadHints {
    /// Prompts share a common prefix on purpose (shared-prefix workload).
    pub shared_prefix: bool,
    /// The expected prefix-cache hit rate of that workload (the fraction of
    /// prompt tokens shared), where the load generator knows it.
    pub expected_prefix_hit_rate: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// The engine's KV-cache size and running cap, for the arithmetic that
    /// tells a full cache from a scheduler cap.
    pub capacity: EngineCapacity,
}

/// Thresholds of the analysis; [`Default`] gives the documented constants
/// (also for a field missing from a stored sweep's settings).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AnalysisConfig {
    /// See [`DEFAULT_SATURATION_GAIN`].
    pub saturation_gain_threshold: f64,
    /// See [`DEFAULT_LATENCY_RISE`].
    pub latency_rise: f64,
    /// See [`DEFAULT_HIGH_VS_FLOOR`].
    pub high_vs_floor: f64,
    /// See [`DEFAULT_FALLBACK_ITL_P95_S`].
    pub fallback_itl_p95_s: f64,
    /// See [`DEFAULT_TTFT_JUMP_RATIO`].
    pub ttft_jump_ratio: f64,
    /// See [`DEFAULT_KV_USAGE_HIGH`].
    pub kv_usage_high: f64,
    /// See [`DEFAULT_KV_USAGE_MEAN_FULL`].
    pub kv_usage_mean_full: f64,
    /// See [`DEFAULT_KV_USAGE_ROOM`].
    pub kv_usage_room: f64,
    /// See [`DEFAULT_GPU_UTIL_LOW`].
    pub gpu_util_low: f64,
    /// See [`DEFAULT_MEMORY_ROOM_BELOW`].
    pub memory_room_below: f64,
    /// See [`DEFAULT_GPU_MEM_FULL`].
    pub gpu_mem_full: f64,
    /// See [`DEFAULT_GPU_MEM_SPLIT_GAP`].
    pub gpu_mem_split_gap: f64,
    /// See [`DEFAULT_PREFIX_HIT_LOW`].
    pub prefix_hit_low: f64,
    /// See [`DEFAULT_PREFIX_HIT_FRACTION_OF_EXPECTED`].
    pub prefix_hit_fraction_of_expected: f64,
}

impl AnalysisConfig {
    /// This config with every non-finite threshold replaced by its default,
    /// so a bad config cannot turn comparisons into silent "never" or
    /// "always".
    pub fn sanitized(&self) -> AnalysisConfig {
        let d = AnalysisConfig::default();
        let pick = |v: f64, dv: f64| if v.is_finite() { v } else { dv };
        AnalysisConfig {
            saturation_gain_threshold: pick(
                self.saturation_gain_threshold,
                d.saturation_gain_threshold,
            ),
            latency_rise: pick(self.latency_rise, d.latency_rise),
            high_vs_floor: pick(self.high_vs_floor, d.high_vs_floor),
            fallback_itl_p95_s: pick(self.fallback_itl_p95_s, d.fallback_itl_p95_s),
            ttft_jump_ratio: pick(self.ttft_jump_ratio, d.ttft_jump_ratio),
            kv_usage_high: pick(self.kv_usage_high, d.kv_usage_high),
            kv_usage_mean_full: pick(self.kv_usage_mean_full, d.kv_usage_mean_full),
            kv_usage_room: pick(self.kv_usage_room, d.kv_usage_room),
            gpu_util_low: pick(self.gpu_util_low, d.gpu_util_low),
            memory_room_below: pick(self.memory_room_below, d.memory_room_below),
            gpu_mem_full: pick(self.gpu_mem_full, d.gpu_mem_full),
            gpu_mem_split_gap: pick(self.gpu_mem_split_gap, d.gpu_mem_split_gap),
            prefix_hit_low: pick(self.prefix_hit_low, d.prefix_hit_low),
            prefix_hit_fraction_of_expected: pick(
                self.prefix_hit_fraction_of_expected,
                d.prefix_hit_fraction_of_expected,
            ),
        }
    }
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        AnalysisConfig {
            saturation_gain_threshold: DEFAULT_SATURATION_GAIN,
            latency_rise: DEFAULT_LATENCY_RISE,
            high_vs_floor: DEFAULT_HIGH_VS_FLOOR,
            fallback_itl_p95_s: DEFAULT_FALLBACK_ITL_P95_S,
            ttft_jump_ratio: DEFAULT_TTFT_JUMP_RATIO,
            kv_usage_high: DEFAULT_KV_USAGE_HIGH,
            kv_usage_mean_full: DEFAULT_KV_USAGE_MEAN_FULL,
            kv_usage_room: DEFAULT_KV_USAGE_ROOM,
            gpu_util_low: DEFAULT_GPU_UTIL_LOW,
            memory_room_below: DEFAULT_MEMORY_ROOM_BELOW,
            gpu_mem_full: DEFAULT_GPU_MEM_FULL,
            gpu_mem_split_gap: DEFAULT_GPU_MEM_SPLIT_GAP,
            prefix_hit_low: DEFAULT_PREFIX_HIT_LOW,
            prefix_hit_fraction_of_expected: DEFAULT_PREFIX_HIT_FRACTION_OF_EXPECTED,
        }
    }
}

/// Everything the analysis says about one sweep, ready to store or render.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepVerdict {
    /// Number of steps in the sweep.
    pub step_count: usize,
    /// Indices of the steps used for latency and throughput verdicts.
    pub usable_steps: Vec<usize>,
    /// Steps left out of those verdicts, with the reason.
    pub excluded_steps: Vec<ExcludedStep>,
    /// The lowest and highest usable load.
    pub load_range: Option<(Load, Load)>,
    pub saturation: Option<Saturation>,
    /// When there is no saturation point but usable steps exist: the highest
    /// usable step, so the summary can say "still growing" (or why a flat top
    /// is not called saturation).
    pub highest_step: Option<TopStep>,
    pub sustainable: Option<Sustainable>,
    /// The lowest usable step that misses an objective, and how.
    pub first_miss: Option<StepMisses>,
    pub objectives: Objectives,
    pub findings: Vec<Finding>,
}

/// The highest usable step of a sweep without a saturation point.
#[derive(Debug, Clone, PartialEq)]
pub struct TopStep {
    /// Index into the input slice.
    pub step: usize,
    pub load: Load,
    /// Throughput there, in `metric`.
    pub throughput: f64,
    pub metric: ThroughputMetric,
    /// Gain per doubling from the next lower usable step, if there is one.
    pub gain_per_doubling: Option<f64>,
    /// The gain is under the saturation threshold: throughput is flat at the
    /// top, but latency did not rise, so it was not called saturation.
    pub flat: bool,
}

/// Runs the whole analysis of one sweep: saturation, max sustainable load,
/// diagnosis.
pub fn analyze_sweep(
    steps: &[StepResult],
    objectives: &Objectives,
    workload: &WorkloadHints,
    config: &AnalysisConfig,
) -> SweepVerdict {
    let sel = saturation::select(steps);
    let usable_steps: Vec<usize> = sel.usable.iter().map(|(i, _)| *i).collect();
    let load_range = match (sel.usable.first(), sel.usable.last()) {
        (Some((_, lo)), Some((_, hi))) => Some((lo.load, hi.load)),
        _ => None,
    };
    let config = &config.sanitized();
    let saturation = saturation_point(steps, config);
    let highest_step = if saturation.is_none() {
        saturation::highest_step(&sel, config)
    } else {
        None
    };
    let first_miss = sel.usable.iter().find_map(|(i, s)| {
        let misses = check_objectives(s, objectives);
        (!misses.is_empty()).then_some(StepMisses {
            step: *i,
            load: s.load,
            misses,
        })
    });
    SweepVerdict {
        step_count: steps.len(),
        usable_steps,
        excluded_steps: sel.excluded.clone(),
        load_range,
        saturation,
        highest_step,
        sustainable: max_sustainable(steps, objectives),
        first_miss,
        objectives: *objectives,
        findings: diagnose(steps, objectives, workload, config),
    }
}

/// Renders a verdict in words, one line per statement: the range tested,
/// saturation, max sustainable load, then each finding with what to try.
pub fn summary_lines(verdict: &SweepVerdict) -> Vec<String> {
    if verdict.step_count == 0 {
        return vec!["The sweep has no steps: nothing to judge.".to_string()];
    }
    let mut lines = scope_lines(verdict);
    lines.extend(saturation_line(verdict));
    lines.extend(sustainable_line(verdict));
    for f in &verdict.findings {
        lines.push(f.describe());
    }
    if verdict
        .findings
        .iter()
        .any(|f| f.evidence.contains("server p95"))
    {
        lines.push(
            "Server-side quantiles are interpolated inside coarse histogram buckets: a guess \
             within the bucket; the client's values are exact."
                .to_string(),
        );
    }
    lines
}

/// What was judged: the steps and their range, the objectives, and each
/// step left out with why.
fn scope_lines(verdict: &SweepVerdict) -> Vec<String> {
    let range = match verdict.load_range {
        Some((lo, hi)) if lo == hi => format!(" at {lo}"),
        Some((lo, hi)) => format!(" from {lo} to {hi}"),
        None => String::new(),
    };
    let mut lines = vec![format!(
        "{} step(s){}; {} usable, {} left out.",
        verdict.step_count,
        range,
        verdict.usable_steps.len(),
        verdict.excluded_steps.len()
    )];
    // Stated even when no step is usable, so a reader knows what the
    // verdicts would have been judged against.
    lines.push(format!(
        "Judged against {}.",
        describe_objectives(&verdict.objectives)
    ));
    for ex in &verdict.excluded_steps {
        lines.push(format!(
            "Step {} ({}) left out of the verdicts: {}.",
            ex.step, ex.load, ex.reason
        ));
    }
    lines
}

/// The saturation point, or why there is none.
fn saturation_line(verdict: &SweepVerdict) -> Option<String> {
    if verdict.usable_steps.is_empty() {
        return Some(
            "No saturation verdict: no step is usable (a client-bound step measures the load \
             generator, not the server)."
                .to_string(),
        );
    }
    if let Some(sat) = &verdict.saturation {
        return Some(sat.describe());
    }
    let top = verdict.highest_step.as_ref()?;
    let reached = format!(
        "the highest step ({}) reached {} {}",
        top.load,
        fmt::num(top.throughput),
        top.metric.unit()
    );
    Some(match top.gain_per_doubling {
        Some(g) if top.flat => format!(
            "No saturation point: {reached}, gaining only {} per doubling, but latency did \
             not rise; the added load may not have reached the server (check the client \
             self-check).",
            fmt::pct(g)
        ),
        Some(g) => format!(
            "No saturation point within the tested range: {reached}, still gaining {} per \
             doubling; extend the sweep to find the knee.",
            fmt::pct(g)
        ),
        None => format!(
            "No saturation point within the tested range: {reached}; extend the sweep to \
             find the knee."
        ),
    })
}

/// The highest load that meets the objectives and the first that misses,
/// or that none meets them.
fn sustainable_line(verdict: &SweepVerdict) -> Option<String> {
    let objective_txt = describe_objectives(&verdict.objectives);
    match (&verdict.sustainable, &verdict.first_miss) {
        (Some(sus), miss) => {
            let mut line = format!(
                "Max sustainable load: {} ({} output tok/s, {} req/s) meets {objective_txt}",
                sus.load,
                fmt::num(sus.output_token_throughput),
                fmt::num(sus.request_throughput)
            );
            if let Some(m) = miss {
                line.push_str(&format!("; {} misses: {}", m.load, m.describe()));
            } else {
                line.push_str(" at every usable step");
            }
            line.push('.');
            Some(line)
        }
        (None, Some(m)) => Some(format!(
            "No step meets {objective_txt}: already at {} {}.",
            m.load,
            m.describe()
        )),
        (None, None) => None,
    }
}

fn describe_objectives(o: &Objectives) -> String {
    let mut parts = Vec::new();
    if let Some(t) = o.ttft_p95.filter(|t| t.is_finite()) {
        parts.push(format!("p95 TTFT ≤ {}", fmt::secs(t)));
    }
    if let Some(t) = o.itl_p95.filter(|t| t.is_finite()) {
        parts.push(format!("p95 ITL ≤ {}", fmt::secs(t)));
    }
    if let Some(t) = o.e2e_p95.filter(|t| t.is_finite()) {
        parts.push(format!("p95 e2e ≤ {}", fmt::secs(t)));
    }
    let e = if o.max_error_rate.is_finite() {
        o.max_error_rate
    } else {
        DEFAULT_MAX_ERROR_RATE
    };
    parts.push(format!("error rate ≤ {}", fmt::pct(e)));
    format!("the objectives ({})", parts.join(", "))
}

/// A finite value, or `None`: the analysis treats NaN and infinities as
/// missing evidence rather than letting them leak into verdicts.
pub(crate) fn fin(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite())
}
