//! Engine-neutral signals (DESIGN.md's vocabulary) derived from normalised
//! samples of one scrape, or of two scrapes of the same target.
//!
//! Pure: the caller supplies the scrape times; nothing here reads a clock.
//! No function returns NaN or an infinity: an undefined signal is omitted.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::catalog::{CatalogMetric, NormalizedSample, Part};
use crate::stats::{bucket_deltas, counter_delta, histogram_quantile};

/// A signal name from DESIGN.md. `as_str` is the stable API/store spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// KV-cache usage, 0..1 (max over ranks).
    KvCacheUsage,
    RequestsRunning,
    RequestsWaiting,
    /// Prefix-cache hit rate, 0..1: Δhits/Δqueries (tokens) where the engine
    /// has the counters, else the engine's own ratio gauge.
    PrefixCacheHitRate,
    PreemptionsRate,
    ServerTtftP50,
    ServerTtftP95,
    ServerTtftMean,
    ServerItlP50,
    ServerItlP95,
    ServerItlMean,
    ServerE2eP95,
    ServerE2eMean,
    ServerQueueTimeP95,
    /// Mean engine queue time (scheduler wait) over the window.
    ServerQueueTimeMean,
    /// Mean engine-core prefill time (scheduled → first token).
    ServerPrefillTimeMean,
    /// Mean engine-core decode time (first token → last).
    ServerDecodeTimeMean,
    /// Mean engine-core inference time (scheduled → last token).
    ServerInferenceTimeMean,
    PromptTokensRate,
    GenerationTokensRate,
    /// Finished requests per second.
    RequestRate,
    /// Prompt tokens per second served from a cache (local or external).
    PromptCachedTokensRate,
    /// Prompt tokens per second the engine computed itself.
    PromptComputedTokensRate,
    /// Cached prompt tokens per second computed again.
    PromptRecomputedTokensRate,
    /// Prompt tokens per second whose KV arrived from a prefill instance.
    PromptTransferredTokensRate,
    /// Δhits/Δqueries of the external (connector) prefix cache, 0..1.
    ExternalPrefixCacheHitRate,
    /// Mean preemptions per finished request.
    PreemptionsPerRequestMean,
    /// Mean prompt tokens a finished request's prefill computed.
    PrefillComputedTokensMean,
    /// KV cache loaded from the offload tier into the GPU, bytes/s.
    KvOffloadLoadBytesRate,
    /// KV cache stored from the GPU to the offload tier, bytes/s.
    KvOffloadStoreBytesRate,
    /// Seconds spent in offload loads and stores per second of wall time
    /// (above 1 when transfers overlap).
    KvOffloadTimeRatio,
    /// Mean P/D KV-transfer time (histogram mean, else SGLang's last-transfer
    /// gauge).
    KvTransferTimeMean,
    /// p95 P/D KV-transfer time from the transfer histogram.
    KvTransferTimeP95,
    /// Bytes moved by P/D KV transfers per second of wall time.
    KvTransferBytesRate,
    /// Bytes per second while transferring: Δbytes/Δtransfer time (vLLM
    /// NIXL), else SGLang's speed gauge summed over ranks.
    KvTransferSpeed,
    /// Failed P/D KV transfers per second.
    KvTransferFailuresRate,
    /// Requests in the P/D hand-off queues.
    KvTransferQueueRequests,
    /// Accepted ÷ proposed draft tokens, 0..1 (else the engine's gauge).
    SpecDecodeAcceptanceRate,
    /// Tokens per draft step: 1 + accepted ÷ drafts (else the engine's gauge).
    SpecDecodeAcceptLength,
    /// The share of drafts whose first token was accepted, 0..1.
    SpecDecodeFirstAcceptance,
    /// Achieved TFLOP/s per GPU from the engine's FLOP counter.
    AchievedTflops,
    /// Achieved GPU-memory GB/s (read + write) per GPU from the engine's byte
    /// counters.
    AchievedMemBandwidth,
    /// Share of the target's engines asleep (vLLM sleep mode), 0..1.
    EngineSleeping,
    /// Tokens of retracted requests per second (SGLang), work to redo.
    RetractedTokensRate,
    /// Mean KV hit rate the router predicted per request (Dynamo), 0..1.
    RouterKvHitRateMean,
    /// Mean GPU utilisation over GPUs, 0..1.
    GpuUtil,
    /// Σ used / Σ total memory over GPUs.
    GpuMemUsedRatio,
    /// The fullest GPU's used/total (unbalanced-split diagnosis).
    GpuMemUsedRatioMax,
    /// The emptiest GPU's used/total.
    GpuMemUsedRatioMin,
    /// Σ used memory over GPUs.
    GpuMemUsedBytes,
    /// Mean memory-bandwidth utilisation over GPUs, 0..1.
    GpuMemBwUtil,
    /// Σ power over GPUs.
    GpuPowerW,
    /// Number of distinct GPUs on the page.
    GpuCount,
    /// Hottest GPU.
    GpuTempMax,
    /// Mean tensor-pipe activity over GPUs, 0..1.
    GpuTensorActive,
    /// Client-side signals from llmwatch's own probes over a rolling window
    /// (see [`crate::probe_signals`]); `signals_between` never returns them.
    ProbeTtftP50,
    ProbeTtftP95,
    /// Per-token inter-token latency over every gap of the window's probes.
    ProbeItlP50,
    ProbeItlP95,
    ProbeTpotP95,
    ProbeE2eP95,
    /// Mean TTFT of the window's successful probes (the client side of the
    /// latency breakdown).
    ProbeTtftMean,
    /// Mean end-to-end latency of the window's successful probes.
    ProbeE2eMean,
    /// Failed probes / all probes in the window, 0..1.
    ProbeErrorRate,
}

impl Signal {
    const ALL: [Signal; 64] = [
        Signal::KvCacheUsage,
        Signal::RequestsRunning,
        Signal::RequestsWaiting,
        Signal::PrefixCacheHitRate,
        Signal::PreemptionsRate,
        Signal::ServerTtftP50,
        Signal::ServerTtftP95,
        Signal::ServerTtftMean,
        Signal::ServerItlP50,
        Signal::ServerItlP95,
        Signal::ServerItlMean,
        Signal::ServerE2eP95,
        Signal::ServerE2eMean,
        Signal::ServerQueueTimeP95,
        Signal::ServerQueueTimeMean,
        Signal::ServerPrefillTimeMean,
        Signal::ServerDecodeTimeMean,
        Signal::ServerInferenceTimeMean,
        Signal::PromptTokensRate,
        Signal::GenerationTokensRate,
        Signal::RequestRate,
        Signal::PromptCachedTokensRate,
        Signal::PromptComputedTokensRate,
        Signal::PromptRecomputedTokensRate,
        Signal::PromptTransferredTokensRate,
        Signal::ExternalPrefixCacheHitRate,
        Signal::PreemptionsPerRequestMean,
        Signal::PrefillComputedTokensMean,
        Signal::KvOffloadLoadBytesRate,
        Signal::KvOffloadStoreBytesRate,
        Signal::KvOffloadTimeRatio,
        Signal::KvTransferTimeMean,
        Signal::KvTransferTimeP95,
        Signal::KvTransferBytesRate,
        Signal::KvTransferSpeed,
        Signal::KvTransferFailuresRate,
        Signal::KvTransferQueueRequests,
        Signal::SpecDecodeAcceptanceRate,
        Signal::SpecDecodeAcceptLength,
        Signal::SpecDecodeFirstAcceptance,
        Signal::AchievedTflops,
        Signal::AchievedMemBandwidth,
        Signal::EngineSleeping,
        Signal::RetractedTokensRate,
        Signal::RouterKvHitRateMean,
        Signal::GpuUtil,
        Signal::GpuMemUsedRatio,
        Signal::GpuMemUsedRatioMax,
        Signal::GpuMemUsedRatioMin,
        Signal::GpuMemUsedBytes,
        Signal::GpuMemBwUtil,
        Signal::GpuPowerW,
        Signal::GpuCount,
        Signal::GpuTempMax,
        Signal::GpuTensorActive,
        Signal::ProbeTtftP50,
        Signal::ProbeTtftP95,
        Signal::ProbeItlP50,
        Signal::ProbeItlP95,
        Signal::ProbeTpotP95,
        Signal::ProbeE2eP95,
        Signal::ProbeTtftMean,
        Signal::ProbeE2eMean,
        Signal::ProbeErrorRate,
    ];

    /// Every signal, in output order of [`signals_between`].
    pub fn all() -> &'static [Signal] {
        &Self::ALL
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Signal::KvCacheUsage => "kv_cache_usage",
            Signal::RequestsRunning => "requests_running",
            Signal::RequestsWaiting => "requests_waiting",
            Signal::PrefixCacheHitRate => "prefix_cache_hit_rate",
            Signal::PreemptionsRate => "preemptions_rate",
            Signal::ServerTtftP50 => "server_ttft_p50",
            Signal::ServerTtftP95 => "server_ttft_p95",
            Signal::ServerTtftMean => "server_ttft_mean",
            Signal::ServerItlP50 => "server_itl_p50",
            Signal::ServerItlP95 => "server_itl_p95",
            Signal::ServerItlMean => "server_itl_mean",
            Signal::ServerE2eP95 => "server_e2e_p95",
            Signal::ServerE2eMean => "server_e2e_mean",
            Signal::ServerQueueTimeP95 => "server_queue_time_p95",
            Signal::ServerQueueTimeMean => "server_queue_time_mean",
            Signal::ServerPrefillTimeMean => "server_prefill_time_mean",
            Signal::ServerDecodeTimeMean => "server_decode_time_mean",
            Signal::ServerInferenceTimeMean => "server_inference_time_mean",
            Signal::PromptTokensRate => "prompt_tokens_rate",
            Signal::GenerationTokensRate => "generation_tokens_rate",
            Signal::RequestRate => "request_rate",
            Signal::PromptCachedTokensRate => "prompt_cached_tokens_rate",
            Signal::PromptComputedTokensRate => "prompt_computed_tokens_rate",
            Signal::PromptRecomputedTokensRate => "prompt_recomputed_tokens_rate",
            Signal::PromptTransferredTokensRate => "prompt_transferred_tokens_rate",
            Signal::ExternalPrefixCacheHitRate => "external_prefix_cache_hit_rate",
            Signal::PreemptionsPerRequestMean => "preemptions_per_request_mean",
            Signal::PrefillComputedTokensMean => "prefill_computed_tokens_mean",
            Signal::KvOffloadLoadBytesRate => "kv_offload_load_bytes_rate",
            Signal::KvOffloadStoreBytesRate => "kv_offload_store_bytes_rate",
            Signal::KvOffloadTimeRatio => "kv_offload_time_ratio",
            Signal::KvTransferTimeMean => "kv_transfer_time_mean",
            Signal::KvTransferTimeP95 => "kv_transfer_time_p95",
            Signal::KvTransferBytesRate => "kv_transfer_bytes_rate",
            Signal::KvTransferSpeed => "kv_transfer_speed",
            Signal::KvTransferFailuresRate => "kv_transfer_failures_rate",
            Signal::KvTransferQueueRequests => "kv_transfer_queue_requests",
            Signal::SpecDecodeAcceptanceRate => "spec_decode_acceptance_rate",
            Signal::SpecDecodeAcceptLength => "spec_decode_accept_length",
            Signal::SpecDecodeFirstAcceptance => "spec_decode_first_acceptance",
            Signal::AchievedTflops => "achieved_tflops",
            Signal::AchievedMemBandwidth => "achieved_mem_bandwidth",
            Signal::EngineSleeping => "engine_sleeping",
            Signal::RetractedTokensRate => "retracted_tokens_rate",
            Signal::RouterKvHitRateMean => "router_kv_hit_rate_mean",
            Signal::GpuUtil => "gpu_util",
            Signal::GpuMemUsedRatio => "gpu_mem_used_ratio",
            Signal::GpuMemUsedRatioMax => "gpu_mem_used_ratio_max",
            Signal::GpuMemUsedRatioMin => "gpu_mem_used_ratio_min",
            Signal::GpuMemUsedBytes => "gpu_mem_used_bytes",
            Signal::GpuMemBwUtil => "gpu_mem_bw_util",
            Signal::GpuPowerW => "gpu_power_w",
            Signal::GpuCount => "gpu_count",
            Signal::GpuTempMax => "gpu_temp_max",
            Signal::GpuTensorActive => "gpu_tensor_active",
            Signal::ProbeTtftP50 => "probe_ttft_p50",
            Signal::ProbeTtftP95 => "probe_ttft_p95",
            Signal::ProbeItlP50 => "probe_itl_p50",
            Signal::ProbeItlP95 => "probe_itl_p95",
            Signal::ProbeTpotP95 => "probe_tpot_p95",
            Signal::ProbeE2eP95 => "probe_e2e_p95",
            Signal::ProbeTtftMean => "probe_ttft_mean",
            Signal::ProbeE2eMean => "probe_e2e_mean",
            Signal::ProbeErrorRate => "probe_error_rate",
        }
    }

    /// Unit of the value: `ratio` (0..1), `requests`, `1/s` (tokens,
    /// requests or preemptions per second), `s`, `W`, `bytes`, `bytes/s`,
    /// `count`, `tokens`, `TFLOP/s`, `GB/s`, `celsius`.
    pub fn unit(&self) -> &'static str {
        match self {
            Signal::KvCacheUsage
            | Signal::PrefixCacheHitRate
            | Signal::GpuUtil
            | Signal::GpuMemUsedRatio
            | Signal::GpuMemUsedRatioMax
            | Signal::GpuMemUsedRatioMin
            | Signal::GpuMemBwUtil
            | Signal::GpuTensorActive
            | Signal::ProbeErrorRate => "ratio",
            Signal::RequestsRunning | Signal::RequestsWaiting => "requests",
            Signal::PreemptionsRate
            | Signal::PromptTokensRate
            | Signal::GenerationTokensRate
            | Signal::RequestRate => "1/s",
            Signal::ServerTtftP50
            | Signal::ServerTtftP95
            | Signal::ServerTtftMean
            | Signal::ServerItlP50
            | Signal::ServerItlP95
            | Signal::ServerItlMean
            | Signal::ServerE2eP95
            | Signal::ServerE2eMean
            | Signal::ServerQueueTimeP95
            | Signal::ServerQueueTimeMean
            | Signal::ServerPrefillTimeMean
            | Signal::ServerDecodeTimeMean
            | Signal::ServerInferenceTimeMean
            | Signal::ProbeTtftP50
            | Signal::ProbeTtftP95
            | Signal::ProbeItlP50
            | Signal::ProbeItlP95
            | Signal::ProbeTpotP95
            | Signal::ProbeE2eP95
            | Signal::ProbeTtftMean
            | Signal::ProbeE2eMean => "s",
            Signal::GpuMemUsedBytes => "bytes",
            Signal::GpuPowerW => "W",
            Signal::GpuCount => "count",
            Signal::GpuTempMax => "celsius",
            Signal::PromptCachedTokensRate => "1/s",
            Signal::PromptComputedTokensRate => "1/s",
            Signal::PromptRecomputedTokensRate => "1/s",
            Signal::PromptTransferredTokensRate => "1/s",
            Signal::ExternalPrefixCacheHitRate => "ratio",
            Signal::PreemptionsPerRequestMean => "count",
            Signal::PrefillComputedTokensMean => "tokens",
            Signal::KvOffloadLoadBytesRate => "bytes/s",
            Signal::KvOffloadStoreBytesRate => "bytes/s",
            Signal::KvOffloadTimeRatio => "ratio",
            Signal::KvTransferTimeMean => "s",
            Signal::KvTransferTimeP95 => "s",
            Signal::KvTransferBytesRate => "bytes/s",
            Signal::KvTransferSpeed => "bytes/s",
            Signal::KvTransferFailuresRate => "1/s",
            Signal::KvTransferQueueRequests => "requests",
            Signal::SpecDecodeAcceptanceRate => "ratio",
            Signal::SpecDecodeAcceptLength => "tokens",
            Signal::SpecDecodeFirstAcceptance => "ratio",
            Signal::AchievedTflops => "TFLOP/s",
            Signal::AchievedMemBandwidth => "GB/s",
            Signal::EngineSleeping => "ratio",
            Signal::RetractedTokensRate => "1/s",
            Signal::RouterKvHitRateMean => "ratio",
        }
    }
}

impl Signal {
    /// The catalog metrics this signal is computed from: a query for one
    /// signal only needs to decode these. Probe signals come from probe
    /// records and need none.
    pub fn inputs(&self) -> &'static [CatalogMetric] {
        use CatalogMetric as M;
        const GPU: &[CatalogMetric] = &[
            M::GpuUtil,
            M::GpuMemUsedBytes,
            M::GpuMemTotalBytes,
            M::GpuMemBwUtil,
            M::GpuPowerWatts,
            M::GpuTempCelsius,
            M::GpuTensorActive,
        ];
        match self {
            Signal::KvCacheUsage => &[M::KvCacheUsage],
            Signal::RequestsRunning => &[M::RequestsRunning],
            Signal::RequestsWaiting => &[M::RequestsWaiting],
            Signal::PrefixCacheHitRate => &[
                M::PrefixCacheHitsTotal,
                M::PrefixCacheQueriesTotal,
                M::PrefixCacheHitRate,
            ],
            Signal::PreemptionsRate => &[M::PreemptionsTotal],
            Signal::ServerTtftP50 | Signal::ServerTtftP95 | Signal::ServerTtftMean => {
                &[M::TtftSeconds]
            }
            Signal::ServerItlP50 | Signal::ServerItlP95 | Signal::ServerItlMean => &[M::ItlSeconds],
            Signal::ServerE2eP95 | Signal::ServerE2eMean => &[M::E2eSeconds],
            Signal::ServerQueueTimeP95 | Signal::ServerQueueTimeMean => &[M::QueueTimeSeconds],
            Signal::ServerPrefillTimeMean => &[M::PrefillTimeSeconds],
            Signal::ServerDecodeTimeMean => &[M::DecodeTimeSeconds],
            Signal::ServerInferenceTimeMean => &[M::InferenceTimeSeconds],
            Signal::PromptTokensRate => &[M::PromptTokensTotal],
            Signal::GenerationTokensRate => &[M::GenerationTokensTotal],
            Signal::RequestRate => &[M::RequestsSuccessTotal],
            Signal::PromptCachedTokensRate => &[M::PromptTokensCachedTotal],
            Signal::PromptComputedTokensRate => &[M::PromptTokensComputedTotal],
            Signal::PromptRecomputedTokensRate => &[M::PromptTokensRecomputedTotal],
            Signal::PromptTransferredTokensRate => &[M::PromptTokensTransferredTotal],
            Signal::ExternalPrefixCacheHitRate => &[
                M::ExternalPrefixCacheHitsTotal,
                M::ExternalPrefixCacheQueriesTotal,
            ],
            Signal::PreemptionsPerRequestMean => &[M::RequestPreemptions],
            Signal::PrefillComputedTokensMean => &[M::PrefillComputedTokens],
            Signal::KvOffloadLoadBytesRate => &[M::KvOffloadLoadBytesTotal],
            Signal::KvOffloadStoreBytesRate => &[M::KvOffloadStoreBytesTotal],
            Signal::KvOffloadTimeRatio => {
                &[M::KvOffloadLoadSecondsTotal, M::KvOffloadStoreSecondsTotal]
            }
            Signal::KvTransferTimeMean => &[M::KvTransferTimeSeconds, M::KvTransferLatencySeconds],
            Signal::KvTransferTimeP95 => &[M::KvTransferTimeSeconds],
            Signal::KvTransferBytesRate => &[M::KvTransferBytesTotal],
            Signal::KvTransferSpeed => &[
                M::KvTransferBytesTotal,
                M::KvTransferTimeSeconds,
                M::KvTransferSpeedBytesPerSecond,
            ],
            Signal::KvTransferFailuresRate => &[M::KvTransferFailuresTotal],
            Signal::KvTransferQueueRequests => &[M::KvTransferQueueRequests],
            Signal::SpecDecodeAcceptanceRate => &[
                M::SpecDecodeAcceptedTokensTotal,
                M::SpecDecodeDraftTokensTotal,
                M::SpecDecodeAcceptRate,
            ],
            Signal::SpecDecodeAcceptLength => &[
                M::SpecDecodeAcceptedTokensTotal,
                M::SpecDecodeDraftsTotal,
                M::SpecDecodeAcceptLength,
            ],
            Signal::SpecDecodeFirstAcceptance => {
                &[M::SpecDecodeAcceptedFirstTotal, M::SpecDecodeDraftsTotal]
            }
            Signal::AchievedTflops => &[M::EstimatedFlopsTotal],
            Signal::AchievedMemBandwidth => {
                &[M::EstimatedReadBytesTotal, M::EstimatedWriteBytesTotal]
            }
            Signal::EngineSleeping => &[M::EngineAwake],
            Signal::RetractedTokensRate => &[M::RetractedTokensTotal],
            Signal::RouterKvHitRateMean => &[M::RouterKvHitRate],

            Signal::GpuUtil
            | Signal::GpuMemUsedRatio
            | Signal::GpuMemUsedRatioMax
            | Signal::GpuMemUsedRatioMin
            | Signal::GpuMemUsedBytes
            | Signal::GpuMemBwUtil
            | Signal::GpuPowerW
            | Signal::GpuCount
            | Signal::GpuTempMax
            | Signal::GpuTensorActive => GPU,
            Signal::ProbeTtftP50
            | Signal::ProbeTtftP95
            | Signal::ProbeItlP50
            | Signal::ProbeItlP95
            | Signal::ProbeTpotP95
            | Signal::ProbeE2eP95
            | Signal::ProbeTtftMean
            | Signal::ProbeE2eMean
            | Signal::ProbeErrorRate => &[],
        }
    }

    /// Computed from llmwatch's own probes rather than from scrapes.
    pub fn is_probe(&self) -> bool {
        self.inputs().is_empty()
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A signal name that is not one of [`Signal::as_str`]'s spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signal {value:?}: expected one of {expected}")]
pub struct ParseSignalError {
    pub value: String,
    /// The accepted names, comma-separated.
    pub expected: String,
}

impl FromStr for Signal {
    type Err = ParseSignalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Signal::ALL
            .into_iter()
            .find(|signal| signal.as_str() == s)
            .ok_or_else(|| ParseSignalError {
                value: s.to_owned(),
                expected: Signal::ALL.map(|signal| signal.as_str()).join(", "),
            })
    }
}

/// The normalised samples of one scrape and when it was taken.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Scrape time, Unix seconds (only differences matter).
    pub ts: f64,
    pub samples: &'a [NormalizedSample],
}

/// Derives the signals of `cur`, over the window since `prev` when given.
///
/// Semantics:
/// * **Gauges** (`kv_cache_usage`, running/waiting, GPU) always come from
///   `cur`. GPU gauges are aggregated over GPUs: utilisation, bandwidth and
///   tensor activity → mean; used bytes and power → sum; temperature → max;
///   `gpu_mem_used_ratio` = Σused/Σtotal over GPUs that report both, with
///   `_max`/`_min` the extreme per-GPU ratios; `gpu_count` = distinct GPU
///   label sets.
/// * **With `prev`** (a window): counter rates = Δ/Δt with reset handling (a
///   decrease means restart: Δ = current value), omitted when Δt ≤ 0 or the
///   counter is missing from either side. Prefix hit rate = Δhits/Δqueries,
///   omitted when Δqueries = 0 (both re-baselined if either went down).
///   Server quantiles come from the bucket-wise difference of the merged
///   histograms ([`bucket_deltas`], reset-aware) and are omitted when the
///   window holds no new observation; means are Δsum/Δcount likewise.
/// * **Without `prev`** (one page, `llmwatch inspect`): rates are omitted;
///   hit rate and quantiles/means are over the server's lifetime
///   (cumulative values), omitted when nothing was observed yet.
/// * Engines without hit/query counters but with a ratio gauge (SGLang,
///   Dynamo, vLLM V0) report that gauge as the hit rate, in both modes.
///
/// Output follows [`Signal::all`] order; every value is finite.
pub fn signals_between(prev: Option<Snapshot>, cur: Snapshot) -> Vec<(Signal, f64)> {
    let prev = prev.map(Digest::of);
    signals_between_digests(prev.as_ref(), &Digest::of(cur))
}

/// [`signals_between`] over snapshots already digested: a series reader
/// digests each stored scrape once, though it is the `cur` of one window
/// and the `prev` of the next.
pub fn signals_between_digests(prev: Option<&Digest>, cur: &Digest) -> Vec<(Signal, f64)> {
    use CatalogMetric as M;
    let mut out: Vec<(Signal, f64)> = Vec::new();
    let mut put = |signal: Signal, value: Option<f64>| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            out.push((signal, value));
        }
    };
    let dt = prev
        .map(|prev| cur.ts - prev.ts)
        .filter(|dt| dt.is_finite() && *dt > 0.0);

    put(Signal::KvCacheUsage, cur.max(M::KvCacheUsage));
    put(Signal::RequestsRunning, cur.sum(M::RequestsRunning));
    put(Signal::RequestsWaiting, cur.sum(M::RequestsWaiting));
    put(Signal::PrefixCacheHitRate, prefix_hit_rate(prev, cur));
    let rate = |metric: CatalogMetric| -> Option<f64> {
        let dt = dt?;
        let before = prev?.sum(metric)?;
        let after = cur.sum(metric)?;
        Some(counter_delta(before, after) / dt)
    };
    put(Signal::PreemptionsRate, rate(M::PreemptionsTotal));
    let ttft = Hist::window(prev, cur, M::TtftSeconds);
    let itl = Hist::window(prev, cur, M::ItlSeconds);
    let e2e = Hist::window(prev, cur, M::E2eSeconds);
    let queue = Hist::window(prev, cur, M::QueueTimeSeconds);
    put(Signal::ServerTtftP50, ttft.quantile(0.50));
    put(Signal::ServerTtftP95, ttft.quantile(0.95));
    put(Signal::ServerTtftMean, ttft.mean());
    put(Signal::ServerItlP50, itl.quantile(0.50));
    put(Signal::ServerItlP95, itl.quantile(0.95));
    put(Signal::ServerItlMean, itl.mean());
    put(Signal::ServerE2eP95, e2e.quantile(0.95));
    put(Signal::ServerE2eMean, e2e.mean());
    put(Signal::ServerQueueTimeP95, queue.quantile(0.95));
    put(Signal::ServerQueueTimeMean, queue.mean());
    put(
        Signal::ServerPrefillTimeMean,
        Hist::window(prev, cur, M::PrefillTimeSeconds).mean(),
    );
    put(
        Signal::ServerDecodeTimeMean,
        Hist::window(prev, cur, M::DecodeTimeSeconds).mean(),
    );
    put(
        Signal::ServerInferenceTimeMean,
        Hist::window(prev, cur, M::InferenceTimeSeconds).mean(),
    );
    put(Signal::PromptTokensRate, rate(M::PromptTokensTotal));
    put(Signal::GenerationTokensRate, rate(M::GenerationTokensTotal));
    put(Signal::RequestRate, rate(M::RequestsSuccessTotal));
    cache_offload_and_transfer_signals(prev, cur, dt, &mut put);
    speculation_and_efficiency_signals(prev, cur, dt, &mut put);

    let gpus = &cur.gpus;
    put(Signal::GpuUtil, gpus.mean(M::GpuUtil));
    let ratios = gpus.memory_ratios();
    put(Signal::GpuMemUsedRatio, ratios.map(|r| r.aggregate));
    put(Signal::GpuMemUsedRatioMax, ratios.map(|r| r.max));
    put(Signal::GpuMemUsedRatioMin, ratios.map(|r| r.min));
    put(
        Signal::GpuMemUsedBytes,
        gpus.fold(M::GpuMemUsedBytes, |a, b| a + b),
    );
    put(Signal::GpuMemBwUtil, gpus.mean(M::GpuMemBwUtil));
    put(Signal::GpuPowerW, gpus.fold(M::GpuPowerWatts, |a, b| a + b));
    put(
        Signal::GpuCount,
        (!gpus.by_gpu.is_empty()).then_some(gpus.by_gpu.len() as f64),
    );
    put(Signal::GpuTempMax, gpus.fold(M::GpuTempCelsius, f64::max));
    put(Signal::GpuTensorActive, gpus.mean(M::GpuTensorActive));
    out
}

/// Counter growth over the window (reset-aware), or the lifetime value
/// without `prev`: the numerator or denominator of a ratio.
fn growth(prev: Option<&Digest>, cur: &Digest, metric: CatalogMetric) -> Option<f64> {
    let after = cur.sum(metric)?;
    match prev {
        None => Some(after),
        Some(prev) => Some(counter_delta(prev.sum(metric)?, after)),
    }
}

/// Counter growth per second; needs a window.
fn per_second(
    prev: Option<&Digest>,
    cur: &Digest,
    dt: Option<f64>,
    metric: CatalogMetric,
) -> Option<f64> {
    let dt = dt?;
    Some(counter_delta(prev?.sum(metric)?, cur.sum(metric)?) / dt)
}

/// `num / den` over the window, omitted when nothing was counted.
fn window_ratio(
    prev: Option<&Digest>,
    cur: &Digest,
    num: CatalogMetric,
    den: CatalogMetric,
) -> Option<f64> {
    let den = growth(prev, cur, den)?;
    (den > 0.0).then_some(growth(prev, cur, num)? / den)
}

/// The 2026 families of prompt-token sources, KV offloading and P/D
/// transfer (issue 38), in [`Signal::all`] order.
fn cache_offload_and_transfer_signals(
    prev: Option<&Digest>,
    cur: &Digest,
    dt: Option<f64>,
    put: &mut impl FnMut(Signal, Option<f64>),
) {
    use CatalogMetric as M;
    let rate = |metric| per_second(prev, cur, dt, metric);
    put(
        Signal::PromptCachedTokensRate,
        rate(M::PromptTokensCachedTotal),
    );
    put(
        Signal::PromptComputedTokensRate,
        rate(M::PromptTokensComputedTotal),
    );
    put(
        Signal::PromptRecomputedTokensRate,
        rate(M::PromptTokensRecomputedTotal),
    );
    put(
        Signal::PromptTransferredTokensRate,
        rate(M::PromptTokensTransferredTotal),
    );
    put(
        Signal::ExternalPrefixCacheHitRate,
        window_ratio(
            prev,
            cur,
            M::ExternalPrefixCacheHitsTotal,
            M::ExternalPrefixCacheQueriesTotal,
        ),
    );
    put(
        Signal::PreemptionsPerRequestMean,
        Hist::window(prev, cur, M::RequestPreemptions).mean(),
    );
    put(
        Signal::PrefillComputedTokensMean,
        Hist::window(prev, cur, M::PrefillComputedTokens).mean(),
    );
    put(
        Signal::KvOffloadLoadBytesRate,
        rate(M::KvOffloadLoadBytesTotal),
    );
    put(
        Signal::KvOffloadStoreBytesRate,
        rate(M::KvOffloadStoreBytesTotal),
    );
    let offload_time = match (
        rate(M::KvOffloadLoadSecondsTotal),
        rate(M::KvOffloadStoreSecondsTotal),
    ) {
        (None, None) => None,
        (load, store) => Some(load.unwrap_or(0.0) + store.unwrap_or(0.0)),
    };
    put(Signal::KvOffloadTimeRatio, offload_time);
    let transfer = Hist::window(prev, cur, M::KvTransferTimeSeconds);
    put(
        Signal::KvTransferTimeMean,
        transfer
            .mean()
            .or_else(|| cur.max(M::KvTransferLatencySeconds)),
    );
    put(Signal::KvTransferTimeP95, transfer.quantile(0.95));
    put(Signal::KvTransferBytesRate, rate(M::KvTransferBytesTotal));
    let busy_seconds = transfer.as_ref().and_then(|hist| hist.sum);
    let speed = match (growth(prev, cur, M::KvTransferBytesTotal), busy_seconds) {
        (Some(bytes), Some(seconds)) if seconds > 0.0 => Some(bytes / seconds),
        _ => cur.sum(M::KvTransferSpeedBytesPerSecond),
    };
    put(Signal::KvTransferSpeed, speed);
    put(
        Signal::KvTransferFailuresRate,
        rate(M::KvTransferFailuresTotal),
    );
    put(
        Signal::KvTransferQueueRequests,
        cur.sum(M::KvTransferQueueRequests),
    );
}

/// Speculative decoding, achieved FLOP/s and bandwidth, sleep, retractions
/// and the router's predicted hit rate, in [`Signal::all`] order.
fn speculation_and_efficiency_signals(
    prev: Option<&Digest>,
    cur: &Digest,
    dt: Option<f64>,
    put: &mut impl FnMut(Signal, Option<f64>),
) {
    use CatalogMetric as M;
    let rate = |metric| per_second(prev, cur, dt, metric);
    // The engines' own gauges read 0 with speculation off (a length is at
    // least 1 with it on): no signal then.
    let gauge_length = cur.mean(M::SpecDecodeAcceptLength).filter(|l| *l > 0.0);
    put(
        Signal::SpecDecodeAcceptanceRate,
        window_ratio(
            prev,
            cur,
            M::SpecDecodeAcceptedTokensTotal,
            M::SpecDecodeDraftTokensTotal,
        )
        .or_else(|| gauge_length.and(cur.mean(M::SpecDecodeAcceptRate))),
    );
    put(
        Signal::SpecDecodeAcceptLength,
        window_ratio(
            prev,
            cur,
            M::SpecDecodeAcceptedTokensTotal,
            M::SpecDecodeDraftsTotal,
        )
        .map(|accepted_per_draft| 1.0 + accepted_per_draft)
        .or(gauge_length),
    );
    put(
        Signal::SpecDecodeFirstAcceptance,
        window_ratio(
            prev,
            cur,
            M::SpecDecodeAcceptedFirstTotal,
            M::SpecDecodeDraftsTotal,
        ),
    );
    put(
        Signal::AchievedTflops,
        rate(M::EstimatedFlopsTotal).map(|flops| flops / 1e12),
    );
    let bandwidth = rate(M::EstimatedReadBytesTotal)
        .map(|read| read + rate(M::EstimatedWriteBytesTotal).unwrap_or(0.0));
    put(Signal::AchievedMemBandwidth, bandwidth.map(|b| b / 1e9));
    put(
        Signal::EngineSleeping,
        cur.mean(M::EngineAwake).map(|awake| 1.0 - awake),
    );
    put(Signal::RetractedTokensRate, rate(M::RetractedTokensTotal));
    put(
        Signal::RouterKvHitRateMean,
        Hist::window(prev, cur, M::RouterKvHitRate).mean(),
    );
}

const METRICS: usize = CatalogMetric::ALL.len();

/// What [`signals_between`] reads from one snapshot, gathered in one pass
/// over its samples: per catalog metric the finite plain values folded in
/// page order (sum, max, count), each histogram merged over its series, and
/// the GPU gauges per GPU.
pub struct Digest<'a> {
    ts: f64,
    sums: [Option<f64>; METRICS],
    maxes: [Option<f64>; METRICS],
    counts: [u32; METRICS],
    hists: [Option<Hist>; METRICS],
    gpus: Gpus<'a>,
}

impl<'a> Digest<'a> {
    pub fn of(snapshot: Snapshot<'a>) -> Digest<'a> {
        let mut digest = Digest {
            ts: snapshot.ts,
            sums: [None; METRICS],
            maxes: [None; METRICS],
            counts: [0; METRICS],
            hists: std::array::from_fn(|_| None),
            gpus: Gpus { by_gpu: Vec::new() },
        };
        let mut any_gpu = false;
        for s in snapshot.samples.iter().filter(|s| s.value.is_finite()) {
            let i = s.metric as usize;
            let v = s.value;
            fn hist(slot: &mut Option<Hist>) -> &mut Hist {
                slot.get_or_insert_with(Hist::empty)
            }
            match s.part {
                Part::Value => {
                    digest.sums[i] = Some(digest.sums[i].map_or(v, |a| a + v));
                    digest.maxes[i] = Some(digest.maxes[i].map_or(v, |a| a.max(v)));
                    digest.counts[i] += 1;
                    any_gpu |= s.metric.is_gpu();
                }
                Part::Bucket(le) => {
                    let buckets = &mut hist(&mut digest.hists[i]).buckets;
                    // A normalised page lists a histogram's buckets by
                    // ascending `le`: the last bucket is the only one to
                    // look at, unless series of one metric interleave.
                    match buckets.last_mut().map(|last| (last.0.total_cmp(&le), last)) {
                        None | Some((std::cmp::Ordering::Less, _)) => buckets.push((le, v)),
                        Some((std::cmp::Ordering::Equal, last)) => last.1 += v,
                        Some((std::cmp::Ordering::Greater, _)) => {
                            match buckets.iter_mut().find(|(b, _)| b.total_cmp(&le).is_eq()) {
                                Some(bucket) => bucket.1 += v,
                                None => buckets.push((le, v)),
                            }
                        }
                    }
                }
                Part::Sum => *hist(&mut digest.hists[i]).sum.get_or_insert(0.0) += v,
                Part::Count => *hist(&mut digest.hists[i]).count.get_or_insert(0.0) += v,
            }
        }
        for hist in digest.hists.iter_mut().flatten() {
            hist.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        if any_gpu {
            digest.gpus = Gpus::collect(snapshot.samples);
        }
        digest
    }

    /// Sum over series (engine metrics have one series after normalisation).
    fn sum(&self, metric: CatalogMetric) -> Option<f64> {
        self.sums[metric as usize]
    }

    fn max(&self, metric: CatalogMetric) -> Option<f64> {
        self.maxes[metric as usize]
    }

    fn mean(&self, metric: CatalogMetric) -> Option<f64> {
        let n = self.counts[metric as usize];
        (n > 0).then(|| self.sums[metric as usize].unwrap_or(0.0) / f64::from(n))
    }

    fn hist(&self, metric: CatalogMetric) -> Option<&Hist> {
        self.hists[metric as usize].as_ref()
    }
}

fn prefix_hit_rate(prev: Option<&Digest>, cur: &Digest) -> Option<f64> {
    use CatalogMetric as M;
    let counters = |digest: &Digest| {
        Some((
            digest.sum(M::PrefixCacheHitsTotal)?,
            digest.sum(M::PrefixCacheQueriesTotal)?,
        ))
    };
    let Some((hits, queries)) = counters(cur) else {
        return cur.mean(M::PrefixCacheHitRate);
    };
    let (d_hits, d_queries) = match prev {
        None => (hits, queries),
        Some(prev) => {
            let (hits0, queries0) = counters(prev)?;
            if hits < hits0 || queries < queries0 {
                (hits, queries)
            } else {
                (hits - hits0, queries - queries0)
            }
        }
    };
    (d_queries > 0.0).then(|| d_hits / d_queries)
}

/// One histogram merged over series (buckets summed by `le`), as observed in
/// the window (or lifetime).
struct Hist {
    buckets: Vec<(f64, f64)>,
    sum: Option<f64>,
    count: Option<f64>,
}

impl Hist {
    fn empty() -> Hist {
        Hist {
            buckets: Vec::new(),
            sum: None,
            count: None,
        }
    }

    /// `cur` minus `prev` (reset-aware), or `cur` alone without `prev`.
    fn window(prev: Option<&Digest>, cur: &Digest, metric: CatalogMetric) -> Option<Hist> {
        let cur = cur.hist(metric)?;
        let Some(prev) = prev else {
            return Some(Hist {
                buckets: cur.buckets.clone(),
                sum: cur.sum,
                count: cur.count,
            });
        };
        let none = Hist::empty();
        let prev = prev.hist(metric).unwrap_or(&none);
        let (sum, count) = match (prev.sum, prev.count, cur.sum, cur.count) {
            (Some(s0), Some(c0), Some(s1), Some(c1)) if s1 >= s0 && c1 >= c0 => {
                (Some(s1 - s0), Some(c1 - c0))
            }
            // prev had none: everything in cur is new (as for buckets).
            (None, None, s1, c1) => (s1, c1),
            // A reset (either went down): cur counts from the restart.
            (Some(_), Some(_), Some(s1), Some(c1)) => (Some(s1), Some(c1)),
            _ => (None, None),
        };
        Some(Hist {
            buckets: bucket_deltas(&prev.buckets, &cur.buckets),
            sum,
            count,
        })
    }
}

trait HistExt {
    fn quantile(&self, q: f64) -> Option<f64>;
    fn mean(&self) -> Option<f64>;
}

impl HistExt for Option<Hist> {
    fn quantile(&self, q: f64) -> Option<f64> {
        histogram_quantile(q, &self.as_ref()?.buckets)
    }

    fn mean(&self) -> Option<f64> {
        let hist = self.as_ref()?;
        let count = hist.count?;
        (count > 0.0).then_some(hist.sum? / count)
    }
}

/// The GPU gauges [`Gpus`] keeps, one slot each.
const GPU_METRICS: &[CatalogMetric] = CatalogMetric::GPU;
const GPU_SLOTS: usize = GPU_METRICS.len();

fn gpu_slot(metric: CatalogMetric) -> Option<usize> {
    GPU_METRICS.iter().position(|m| *m == metric)
}

/// One GPU's label set (borrowed from the page) and its gauges by slot.
type GpuGauges<'a> = (&'a [(String, String)], [Option<f64>; GPU_SLOTS]);

/// Up to how many GPUs [`Gpus::collect`] compares label sets by pointer
/// and by content; past it, by hash.
const POINTER_SCAN: usize = 16;

/// GPU gauges of one page, per GPU label set (a day's chart reads this once
/// per instant), in the page's order.
struct Gpus<'a> {
    by_gpu: Vec<GpuGauges<'a>>,
}

#[derive(Clone, Copy)]
struct MemoryRatios {
    aggregate: f64,
    max: f64,
    min: f64,
}

impl<'a> Gpus<'a> {
    fn collect(samples: &'a [NormalizedSample]) -> Gpus<'a> {
        let mut by_gpu: Vec<GpuGauges<'a>> = Vec::new();
        // Past a node's worth of GPUs, a hash index (a fleet page can hold
        // hundreds), not a search tree: label sets are long strings whose
        // first pairs (driver version, host) are the same on every GPU.
        let mut index: HashMap<&'a [(String, String)], usize> = HashMap::new();
        for s in samples {
            if s.part != Part::Value || !s.value.is_finite() {
                continue;
            }
            let Some(slot) = gpu_slot(s.metric) else {
                continue;
            };
            // Samples read from the store share their series' label set, so
            // a pointer comparison finds the GPU without hashing its labels.
            let shared = by_gpu
                .iter()
                .take(POINTER_SCAN)
                .position(|(labels, _)| std::ptr::eq(*labels, &*s.labels));
            let at = match shared {
                Some(at) => at,
                // A node's GPUs: compared by content, which stops at the
                // first differing pair (the UUID), cheaper than hashing.
                None if by_gpu.len() < POINTER_SCAN => {
                    match by_gpu.iter().position(|(labels, _)| **labels == *s.labels) {
                        Some(at) => at,
                        None => {
                            by_gpu.push((&s.labels, [None; GPU_SLOTS]));
                            by_gpu.len() - 1
                        }
                    }
                }
                None => {
                    if index.is_empty() {
                        index.extend(by_gpu.iter().enumerate().map(|(at, (l, _))| (*l, at)));
                    }
                    *index.entry(&s.labels).or_insert_with(|| {
                        by_gpu.push((&s.labels, [None; GPU_SLOTS]));
                        by_gpu.len() - 1
                    })
                }
            };
            // The last sample of a metric wins, as a map insert would.
            by_gpu[at].1[slot] = Some(s.value);
        }
        Gpus { by_gpu }
    }

    fn each(&self, metric: CatalogMetric) -> impl Iterator<Item = f64> + '_ {
        let slot = gpu_slot(metric);
        self.by_gpu
            .iter()
            .filter_map(move |(_, values)| values[slot?])
    }

    fn fold(&self, metric: CatalogMetric, f: fn(f64, f64) -> f64) -> Option<f64> {
        self.each(metric).reduce(f)
    }

    fn mean(&self, metric: CatalogMetric) -> Option<f64> {
        let (sum, n) = self
            .each(metric)
            .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
        (n > 0).then(|| sum / n as f64)
    }

    fn memory_ratios(&self) -> Option<MemoryRatios> {
        let pairs: Vec<(f64, f64)> = self
            .by_gpu
            .iter()
            .filter_map(|(_, m)| {
                let used = m[gpu_slot(CatalogMetric::GpuMemUsedBytes)?]?;
                let total = m[gpu_slot(CatalogMetric::GpuMemTotalBytes)?]?;
                (total > 0.0).then_some((used, total))
            })
            .collect();
        let used: f64 = pairs.iter().map(|(u, _)| u).sum();
        let total: f64 = pairs.iter().map(|(_, t)| t).sum();
        let per_gpu = pairs.iter().map(|(u, t)| u / t);
        Some(MemoryRatios {
            aggregate: (total > 0.0).then(|| used / total)?,
            max: per_gpu.clone().reduce(f64::max)?,
            min: per_gpu.reduce(f64::min)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's GPUs or a fleet's (past [`POINTER_SCAN`]), their gauges as
    /// separate series with shared, with copied (parsed pages) or with
    /// interleaved label sets: each GPU counted once, its gauges together.
    #[test]
    fn gpus_are_told_apart_by_label_set_however_the_sets_are_held() {
        for gpus in [8usize, POINTER_SCAN + 9] {
            let sets: Vec<crate::catalog::SampleLabels> = (0..gpus)
                .map(|i| {
                    std::sync::Arc::from(vec![
                        ("Hostname".to_string(), "node-1".to_string()),
                        ("UUID".to_string(), format!("GPU-{i:04}")),
                    ])
                })
                .collect();
            for shared in [true, false] {
                let labels = |i: usize| {
                    if shared {
                        std::sync::Arc::clone(&sets[i])
                    } else {
                        std::sync::Arc::from(sets[i].to_vec())
                    }
                };
                let mut samples = Vec::new();
                for metric in [
                    CatalogMetric::GpuUtil,
                    CatalogMetric::GpuMemUsedBytes,
                    CatalogMetric::GpuMemTotalBytes,
                ] {
                    for i in 0..gpus {
                        let value = match metric {
                            CatalogMetric::GpuUtil => i as f64,
                            CatalogMetric::GpuMemUsedBytes => 1.0,
                            _ => 4.0 + i as f64,
                        };
                        samples.push(NormalizedSample {
                            metric,
                            labels: labels(i),
                            part: Part::Value,
                            value,
                        });
                    }
                }
                let out = signals_between(
                    None,
                    Snapshot {
                        ts: 0.0,
                        samples: &samples,
                    },
                );
                let get = |signal| out.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v);
                assert_eq!(
                    get(Signal::GpuCount),
                    Some(gpus as f64),
                    "{gpus} shared {shared}"
                );
                let mean = (0..gpus).sum::<usize>() as f64 / gpus as f64;
                assert_eq!(get(Signal::GpuUtil), Some(mean));
                // Used 1 of 4 + i each: the smallest ratio is the last GPU's.
                assert_eq!(
                    get(Signal::GpuMemUsedRatioMin),
                    Some(1.0 / (3.0 + gpus as f64))
                );
            }
        }
    }

    #[test]
    fn every_gpu_metric_has_a_slot() {
        for metric in CatalogMetric::all() {
            assert_eq!(gpu_slot(*metric).is_some(), metric.is_gpu(), "{metric}");
        }
    }

    #[test]
    fn signal_names_round_trip_and_error() {
        for signal in Signal::all() {
            assert_eq!(signal.as_str().parse::<Signal>(), Ok(*signal));
            assert!(!signal.unit().is_empty());
        }
        let err = "ttft".parse::<Signal>().unwrap_err().to_string();
        assert!(
            err.contains("\"ttft\"") && err.contains("server_ttft_p95"),
            "{err}"
        );
    }

    #[test]
    fn empty_page_gives_nothing() {
        let cur = Snapshot {
            ts: 1.0,
            samples: &[],
        };
        assert!(signals_between(None, cur).is_empty());
        assert!(signals_between(Some(cur), cur).is_empty());
    }
}
