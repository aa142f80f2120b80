//! The engine catalog: which raw metric of which engine means which
//! engine-neutral quantity, and how to normalise it (units, per-rank
//! aggregation, renames across versions). See `fixtures/METRIC_MAP.md`.
//!
//! CONTRACT (used by the store and the daemon; keep these signatures):
//! - `Engine`, `Engine::as_str`, `Engine::from_str` (via `FromStr`)
//! - `detect_engine(&Exposition) -> Engine`
//! - `CatalogMetric`, `CatalogMetric::name`, `CatalogMetric::from_name`, `CatalogMetric::kind`
//! - `Part`, `NormalizedSample`
//! - `normalize(Engine, &Exposition) -> Vec<NormalizedSample>`
//!
//! Layout: this file holds the vocabulary and engine detection;
//! `rules.rs` is the table (one row per engine metric, in METRIC_MAP's
//! name-resolution order); `normalize.rs` applies it.

use std::fmt;
use std::str::FromStr;

use crate::exposition::Exposition;

mod capacity;
mod normalize;
mod rules;

pub use capacity::{engine_capacity, EngineCapacity};
pub use normalize::{engine_may_expose, normalize, source_names};

/// The server software of a target (or `Dcgm` for a GPU exporter page).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    Vllm,
    Nim,
    Sglang,
    Tgi,
    Llamacpp,
    Trtllm,
    Dynamo,
    Dcgm,
    Generic,
}

impl Engine {
    /// Every engine, in the order of [`Engine::as_str`]'s documentation.
    pub const ALL: [Engine; 9] = [
        Engine::Vllm,
        Engine::Nim,
        Engine::Sglang,
        Engine::Tgi,
        Engine::Llamacpp,
        Engine::Trtllm,
        Engine::Dynamo,
        Engine::Dcgm,
        Engine::Generic,
    ];

    /// The config/API spelling: `vllm`, `nim`, `sglang`, `tgi`, `llamacpp`,
    /// `trtllm`, `dynamo`, `dcgm`, `generic`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Nim => "nim",
            Engine::Sglang => "sglang",
            Engine::Tgi => "tgi",
            Engine::Llamacpp => "llamacpp",
            Engine::Trtllm => "trtllm",
            Engine::Dynamo => "dynamo",
            Engine::Dcgm => "dcgm",
            Engine::Generic => "generic",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An engine name that is not one of [`Engine::as_str`]'s spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown engine {value:?}: expected one of vllm, nim, sglang, tgi, llamacpp, trtllm, dynamo, dcgm, generic"
)]
pub struct ParseEngineError {
    /// The value that was given.
    pub value: String,
}

impl FromStr for Engine {
    type Err = ParseEngineError;

    /// Exact config spelling, ASCII case-insensitive (`vLLM` is what people
    /// type). `auto` is not an engine: resolve it with [`detect_engine`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .into_iter()
            .find(|engine| engine.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseEngineError {
                value: s.to_owned(),
            })
    }
}

/// Sample names that only NVIDIA NIM for LLMs exposes unprefixed (its vLLM
/// core's metrics without the `vllm:` namespace).
const NIM_MARKERS: &[&str] = &[
    "num_requests_running",
    "num_requests_waiting",
    "gpu_cache_usage_perc",
    "num_request_max",
    "time_to_first_token_seconds_count",
    "time_per_output_token_seconds_count",
    "e2e_request_latency_seconds_count",
];

/// Guesses the engine from the sample names on one page (for `engine = "auto"`).
///
/// Order of the checks, and why:
/// 1. any `dynamo_*` sample → `Dynamo`. A Dynamo worker's status server also
///    carries its backend's own families (`vllm:*`, `sglang:*`, `trtllm_*`);
///    the target is still a Dynamo deployment, and [`normalize`] for `Dynamo`
///    reads those backend families too (they win where METRIC_MAP's
///    resolution order puts them first), so nothing is lost.
/// 2. `vllm:` → vLLM; `sglang:` → SGLang; `tgi_` → TGI; `llamacpp:` →
///    llama.cpp; `nv_trt_llm_` / `nv_inference_` / `trtllm_` → TensorRT-LLM.
/// 3. NIM's unprefixed names (`num_requests_running`, `gpu_cache_usage_perc`, …)
///    → NIM. Checked after vLLM so that a page with `vllm:` names is vLLM.
/// 4. `DCGM_FI_` → dcgm-exporter, checked last so an engine page that happens
///    to re-export GPU fields is still read as the engine.
/// 5. otherwise `Generic` (normalize then tries every known name).
pub fn detect_engine(page: &Exposition) -> Engine {
    let names = || {
        page.families
            .iter()
            .flat_map(|family| family.samples.iter())
            .map(|sample| sample.name.as_ref())
    };
    let any_prefix = |prefixes: &[&str]| {
        names().any(|name| prefixes.iter().any(|prefix| name.starts_with(prefix)))
    };
    if any_prefix(&["dynamo_"]) {
        Engine::Dynamo
    } else if any_prefix(&["vllm:"]) {
        Engine::Vllm
    } else if any_prefix(&["sglang:"]) {
        Engine::Sglang
    } else if any_prefix(&["tgi_"]) {
        Engine::Tgi
    } else if any_prefix(&["llamacpp:"]) {
        Engine::Llamacpp
    } else if any_prefix(&["nv_trt_llm_", "nv_inference_", "trtllm_"]) {
        Engine::Trtllm
    } else if names().any(|name| NIM_MARKERS.contains(&name)) {
        Engine::Nim
    } else if any_prefix(&["DCGM_FI_"]) {
        Engine::Dcgm
    } else {
        Engine::Generic
    }
}

/// How a catalog metric behaves over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Gauge,
    Counter,
    Histogram,
}

/// Engine-neutral metrics that llmwatch stores. Units are normalised:
/// ratios are 0..1, memory in bytes, times in seconds, power in watts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CatalogMetric {
    KvCacheUsage,
    RequestsRunning,
    RequestsWaiting,
    PreemptionsTotal,
    PrefixCacheHitsTotal,
    PrefixCacheQueriesTotal,
    /// Engines that only expose a ready-made ratio (SGLang, Dynamo, vLLM V0).
    PrefixCacheHitRate,
    PromptTokensTotal,
    GenerationTokensTotal,
    RequestsSuccessTotal,
    TtftSeconds,
    ItlSeconds,
    E2eSeconds,
    QueueTimeSeconds,
    /// Engine-core time from scheduling to the first token (vLLM V1).
    PrefillTimeSeconds,
    /// Engine-core time from the first token to the last (vLLM V1).
    DecodeTimeSeconds,
    /// Engine-core time from scheduling to the last token: prefill + decode.
    InferenceTimeSeconds,
    /// Prompt tokens served from a cache (local or external) instead of computed.
    PromptTokensCachedTotal,
    /// Prompt tokens the engine computed itself (vLLM `local_compute`, SGLang `prefill_compute`).
    PromptTokensComputedTotal,
    /// Cached prompt tokens computed again for the forward pass (vLLM).
    PromptTokensRecomputedTotal,
    /// Prompt tokens whose KV arrived from another instance (P/D disaggregation).
    PromptTokensTransferredTotal,
    /// Tokens found in an external (connector) prefix cache.
    ExternalPrefixCacheHitsTotal,
    /// Tokens looked up in an external (connector) prefix cache.
    ExternalPrefixCacheQueriesTotal,
    /// Preemptions per finished request (a histogram of counts).
    RequestPreemptions,
    /// Prompt tokens a finished request's prefill computed (cached ones excluded).
    PrefillComputedTokens,
    /// Bytes of KV cache loaded from the offload tier (host, disk) into the GPU.
    KvOffloadLoadBytesTotal,
    /// Bytes of KV cache stored from the GPU to the offload tier.
    KvOffloadStoreBytesTotal,
    /// Time spent loading offloaded KV cache, seconds.
    KvOffloadLoadSecondsTotal,
    /// Time spent storing KV cache to the offload tier, seconds.
    KvOffloadStoreSecondsTotal,
    /// Duration of one P/D KV-cache transfer (vLLM NIXL, Dynamo's router estimate).
    KvTransferTimeSeconds,
    /// The last P/D KV transfer's latency as a gauge (SGLang), seconds; slowest rank.
    KvTransferLatencySeconds,
    /// Bytes moved by P/D KV-cache transfers.
    KvTransferBytesTotal,
    /// The last P/D KV transfer's speed as a gauge (SGLang), bytes/s; ranks move their shards in parallel, so summed over ranks.
    KvTransferSpeedBytesPerSecond,
    /// Failed P/D KV-cache transfers.
    KvTransferFailuresTotal,
    /// Requests in the P/D hand-off queues (SGLang bootstrap/prealloc, in flight, transfer).
    KvTransferQueueRequests,
    /// Speculative-decoding draft steps.
    SpecDecodeDraftsTotal,
    /// Tokens proposed by the drafter.
    SpecDecodeDraftTokensTotal,
    /// Draft tokens the target model accepted.
    SpecDecodeAcceptedTokensTotal,
    /// Draft tokens accepted at the first draft position.
    SpecDecodeAcceptedFirstTotal,
    /// An engine's own acceptance-rate gauge (SGLang), 0..1.
    SpecDecodeAcceptRate,
    /// An engine's own mean acceptance-length gauge (SGLang, TensorRT-LLM), tokens per step.
    SpecDecodeAcceptLength,
    /// The engine's estimate of floating-point operations per GPU (vLLM MFU counters).
    EstimatedFlopsTotal,
    /// The engine's estimate of bytes read from GPU memory per GPU.
    EstimatedReadBytesTotal,
    /// The engine's estimate of bytes written to GPU memory per GPU.
    EstimatedWriteBytesTotal,
    /// 1 when the engine is awake, 0 while it sleeps (vLLM sleep mode); mean over engines.
    EngineAwake,
    /// Input and output tokens of retracted requests (SGLang), to be computed again.
    RetractedTokensTotal,
    /// The KV hit rate a router predicted per request at routing time (Dynamo), 0..1.
    RouterKvHitRate,
    /// Prompt tokens per finished request (a histogram of lengths).
    RequestPromptTokens,
    /// Generated tokens per finished request (a histogram of lengths).
    RequestGenerationTokens,
    GpuUtil,
    GpuMemUsedBytes,
    GpuMemTotalBytes,
    GpuMemBwUtil,
    GpuPowerWatts,
    GpuTempCelsius,
    GpuTensorActive,
}

impl CatalogMetric {
    pub(crate) const ALL: [CatalogMetric; 56] = [
        CatalogMetric::KvCacheUsage,
        CatalogMetric::RequestsRunning,
        CatalogMetric::RequestsWaiting,
        CatalogMetric::PreemptionsTotal,
        CatalogMetric::PrefixCacheHitsTotal,
        CatalogMetric::PrefixCacheQueriesTotal,
        CatalogMetric::PrefixCacheHitRate,
        CatalogMetric::PromptTokensTotal,
        CatalogMetric::GenerationTokensTotal,
        CatalogMetric::RequestsSuccessTotal,
        CatalogMetric::TtftSeconds,
        CatalogMetric::ItlSeconds,
        CatalogMetric::E2eSeconds,
        CatalogMetric::QueueTimeSeconds,
        CatalogMetric::PrefillTimeSeconds,
        CatalogMetric::DecodeTimeSeconds,
        CatalogMetric::InferenceTimeSeconds,
        CatalogMetric::PromptTokensCachedTotal,
        CatalogMetric::PromptTokensComputedTotal,
        CatalogMetric::PromptTokensRecomputedTotal,
        CatalogMetric::PromptTokensTransferredTotal,
        CatalogMetric::ExternalPrefixCacheHitsTotal,
        CatalogMetric::ExternalPrefixCacheQueriesTotal,
        CatalogMetric::RequestPreemptions,
        CatalogMetric::PrefillComputedTokens,
        CatalogMetric::KvOffloadLoadBytesTotal,
        CatalogMetric::KvOffloadStoreBytesTotal,
        CatalogMetric::KvOffloadLoadSecondsTotal,
        CatalogMetric::KvOffloadStoreSecondsTotal,
        CatalogMetric::KvTransferTimeSeconds,
        CatalogMetric::KvTransferLatencySeconds,
        CatalogMetric::KvTransferBytesTotal,
        CatalogMetric::KvTransferSpeedBytesPerSecond,
        CatalogMetric::KvTransferFailuresTotal,
        CatalogMetric::KvTransferQueueRequests,
        CatalogMetric::SpecDecodeDraftsTotal,
        CatalogMetric::SpecDecodeDraftTokensTotal,
        CatalogMetric::SpecDecodeAcceptedTokensTotal,
        CatalogMetric::SpecDecodeAcceptedFirstTotal,
        CatalogMetric::SpecDecodeAcceptRate,
        CatalogMetric::SpecDecodeAcceptLength,
        CatalogMetric::EstimatedFlopsTotal,
        CatalogMetric::EstimatedReadBytesTotal,
        CatalogMetric::EstimatedWriteBytesTotal,
        CatalogMetric::EngineAwake,
        CatalogMetric::RetractedTokensTotal,
        CatalogMetric::RouterKvHitRate,
        CatalogMetric::RequestPromptTokens,
        CatalogMetric::RequestGenerationTokens,
        CatalogMetric::GpuUtil,
        CatalogMetric::GpuMemUsedBytes,
        CatalogMetric::GpuMemTotalBytes,
        CatalogMetric::GpuMemBwUtil,
        CatalogMetric::GpuPowerWatts,
        CatalogMetric::GpuTempCelsius,
        CatalogMetric::GpuTensorActive,
    ];

    /// Every catalog metric, in declaration (= storage and output) order.
    pub fn all() -> &'static [CatalogMetric] {
        &Self::ALL
    }

    /// Stable snake_case name used in the store and the API; the unit is in
    /// the name where it is not a ratio or a count.
    pub fn name(&self) -> &'static str {
        match self {
            CatalogMetric::KvCacheUsage => "kv_cache_usage",
            CatalogMetric::RequestsRunning => "requests_running",
            CatalogMetric::RequestsWaiting => "requests_waiting",
            CatalogMetric::PreemptionsTotal => "preemptions_total",
            CatalogMetric::PrefixCacheHitsTotal => "prefix_cache_hits_total",
            CatalogMetric::PrefixCacheQueriesTotal => "prefix_cache_queries_total",
            CatalogMetric::PrefixCacheHitRate => "prefix_cache_hit_rate",
            CatalogMetric::PromptTokensTotal => "prompt_tokens_total",
            CatalogMetric::GenerationTokensTotal => "generation_tokens_total",
            CatalogMetric::RequestsSuccessTotal => "requests_success_total",
            CatalogMetric::TtftSeconds => "ttft_seconds",
            CatalogMetric::ItlSeconds => "itl_seconds",
            CatalogMetric::E2eSeconds => "e2e_seconds",
            CatalogMetric::QueueTimeSeconds => "queue_time_seconds",
            CatalogMetric::PrefillTimeSeconds => "prefill_time_seconds",
            CatalogMetric::DecodeTimeSeconds => "decode_time_seconds",
            CatalogMetric::InferenceTimeSeconds => "inference_time_seconds",
            CatalogMetric::PromptTokensCachedTotal => "prompt_tokens_cached_total",
            CatalogMetric::PromptTokensComputedTotal => "prompt_tokens_computed_total",
            CatalogMetric::PromptTokensRecomputedTotal => "prompt_tokens_recomputed_total",
            CatalogMetric::PromptTokensTransferredTotal => "prompt_tokens_transferred_total",
            CatalogMetric::ExternalPrefixCacheHitsTotal => "external_prefix_cache_hits_total",
            CatalogMetric::ExternalPrefixCacheQueriesTotal => "external_prefix_cache_queries_total",
            CatalogMetric::RequestPreemptions => "request_preemptions",
            CatalogMetric::PrefillComputedTokens => "prefill_computed_tokens",
            CatalogMetric::KvOffloadLoadBytesTotal => "kv_offload_load_bytes_total",
            CatalogMetric::KvOffloadStoreBytesTotal => "kv_offload_store_bytes_total",
            CatalogMetric::KvOffloadLoadSecondsTotal => "kv_offload_load_seconds_total",
            CatalogMetric::KvOffloadStoreSecondsTotal => "kv_offload_store_seconds_total",
            CatalogMetric::KvTransferTimeSeconds => "kv_transfer_time_seconds",
            CatalogMetric::KvTransferLatencySeconds => "kv_transfer_latency_seconds",
            CatalogMetric::KvTransferBytesTotal => "kv_transfer_bytes_total",
            CatalogMetric::KvTransferSpeedBytesPerSecond => "kv_transfer_speed_bytes_per_second",
            CatalogMetric::KvTransferFailuresTotal => "kv_transfer_failures_total",
            CatalogMetric::KvTransferQueueRequests => "kv_transfer_queue_requests",
            CatalogMetric::SpecDecodeDraftsTotal => "spec_decode_drafts_total",
            CatalogMetric::SpecDecodeDraftTokensTotal => "spec_decode_draft_tokens_total",
            CatalogMetric::SpecDecodeAcceptedTokensTotal => "spec_decode_accepted_tokens_total",
            CatalogMetric::SpecDecodeAcceptedFirstTotal => "spec_decode_accepted_first_total",
            CatalogMetric::SpecDecodeAcceptRate => "spec_decode_accept_rate",
            CatalogMetric::SpecDecodeAcceptLength => "spec_decode_accept_length",
            CatalogMetric::EstimatedFlopsTotal => "estimated_flops_total",
            CatalogMetric::EstimatedReadBytesTotal => "estimated_read_bytes_total",
            CatalogMetric::EstimatedWriteBytesTotal => "estimated_write_bytes_total",
            CatalogMetric::EngineAwake => "engine_awake",
            CatalogMetric::RetractedTokensTotal => "retracted_tokens_total",
            CatalogMetric::RouterKvHitRate => "router_kv_hit_rate",
            CatalogMetric::RequestPromptTokens => "request_prompt_tokens",
            CatalogMetric::RequestGenerationTokens => "request_generation_tokens",
            CatalogMetric::GpuUtil => "gpu_util",
            CatalogMetric::GpuMemUsedBytes => "gpu_mem_used_bytes",
            CatalogMetric::GpuMemTotalBytes => "gpu_mem_total_bytes",
            CatalogMetric::GpuMemBwUtil => "gpu_mem_bw_util",
            CatalogMetric::GpuPowerWatts => "gpu_power_watts",
            CatalogMetric::GpuTempCelsius => "gpu_temp_celsius",
            CatalogMetric::GpuTensorActive => "gpu_tensor_active",
        }
    }

    /// Inverse of [`CatalogMetric::name`] (exact match).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|metric| metric.name() == name)
    }

    /// Gauge, counter or histogram. `ItlSeconds`/`E2eSeconds`/`QueueTimeSeconds`
    /// are histograms even where an engine only gives `Sum` and `Count`
    /// (Triton's µs counters, llama.cpp's predicted seconds/tokens).
    pub fn kind(&self) -> MetricKind {
        match self {
            CatalogMetric::PreemptionsTotal
            | CatalogMetric::PrefixCacheHitsTotal
            | CatalogMetric::PrefixCacheQueriesTotal
            | CatalogMetric::PromptTokensTotal
            | CatalogMetric::GenerationTokensTotal
            | CatalogMetric::RequestsSuccessTotal
            | CatalogMetric::PromptTokensCachedTotal
            | CatalogMetric::PromptTokensComputedTotal
            | CatalogMetric::PromptTokensRecomputedTotal
            | CatalogMetric::PromptTokensTransferredTotal
            | CatalogMetric::ExternalPrefixCacheHitsTotal
            | CatalogMetric::ExternalPrefixCacheQueriesTotal
            | CatalogMetric::KvOffloadLoadBytesTotal
            | CatalogMetric::KvOffloadStoreBytesTotal
            | CatalogMetric::KvOffloadLoadSecondsTotal
            | CatalogMetric::KvOffloadStoreSecondsTotal
            | CatalogMetric::KvTransferBytesTotal
            | CatalogMetric::KvTransferFailuresTotal
            | CatalogMetric::SpecDecodeDraftsTotal
            | CatalogMetric::SpecDecodeDraftTokensTotal
            | CatalogMetric::SpecDecodeAcceptedTokensTotal
            | CatalogMetric::SpecDecodeAcceptedFirstTotal
            | CatalogMetric::EstimatedFlopsTotal
            | CatalogMetric::EstimatedReadBytesTotal
            | CatalogMetric::EstimatedWriteBytesTotal
            | CatalogMetric::RetractedTokensTotal => MetricKind::Counter,
            CatalogMetric::TtftSeconds
            | CatalogMetric::ItlSeconds
            | CatalogMetric::E2eSeconds
            | CatalogMetric::QueueTimeSeconds
            | CatalogMetric::PrefillTimeSeconds
            | CatalogMetric::DecodeTimeSeconds
            | CatalogMetric::InferenceTimeSeconds
            | CatalogMetric::RequestPreemptions
            | CatalogMetric::PrefillComputedTokens
            | CatalogMetric::KvTransferTimeSeconds
            | CatalogMetric::RouterKvHitRate
            | CatalogMetric::RequestPromptTokens
            | CatalogMetric::RequestGenerationTokens => MetricKind::Histogram,
            _ => MetricKind::Gauge,
        }
    }

    /// The per-GPU metrics: the last of [`CatalogMetric::all`].
    pub const GPU: &'static [CatalogMetric] = Self::ALL.split_at(Self::ALL.len() - 7).1;

    /// Per-GPU metrics keep GPU identity labels; engine metrics keep none.
    pub fn is_gpu(&self) -> bool {
        Self::GPU.contains(self)
    }
}

impl fmt::Display for CatalogMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which part of a metric a sample is: a plain value, or one piece of a histogram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Part {
    Value,
    /// Cumulative bucket with upper bound `le` (may be `f64::INFINITY`).
    Bucket(f64),
    Sum,
    Count,
}

/// The distinguishing labels of a [`NormalizedSample`], sorted by name.
pub type SampleLabels = std::sync::Arc<[(String, String)]>;

/// One sample after normalisation.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedSample {
    pub metric: CatalogMetric,
    /// Labels that still distinguish series after aggregation, sorted by name
    /// (e.g. `gpu`, `UUID`, `modelName` for GPUs; usually empty for engines).
    /// Shared: a stored series hands the same label set to every sample read
    /// from it (a day of 8-GPU pages is ≈ 65 000 samples of ≈ 5 labels).
    pub labels: SampleLabels,
    pub part: Part,
    pub value: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_metrics_are_exactly_the_gpu_named_ones() {
        for metric in CatalogMetric::all() {
            assert_eq!(
                metric.is_gpu(),
                metric.name().starts_with("gpu_"),
                "{metric}"
            );
        }
        assert_eq!(CatalogMetric::GPU.first(), Some(&CatalogMetric::GpuUtil));
    }

    #[test]
    fn engine_round_trips_and_error_names_value() {
        for engine in Engine::ALL {
            assert_eq!(engine.as_str().parse::<Engine>(), Ok(engine));
        }
        assert_eq!("vLLM".parse::<Engine>(), Ok(Engine::Vllm));
        let err = "ollama".parse::<Engine>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("\"ollama\""), "{msg}");
        assert!(msg.contains("llamacpp"), "{msg}");
    }

    #[test]
    fn catalog_metric_names_round_trip() {
        for metric in CatalogMetric::all() {
            assert_eq!(CatalogMetric::from_name(metric.name()), Some(*metric));
        }
        assert_eq!(CatalogMetric::from_name("nope"), None);
        assert_eq!(CatalogMetric::TtftSeconds.kind(), MetricKind::Histogram);
        assert_eq!(CatalogMetric::PromptTokensTotal.kind(), MetricKind::Counter);
        assert_eq!(CatalogMetric::KvCacheUsage.kind(), MetricKind::Gauge);
    }

    #[test]
    fn phase_histograms_are_known_where_engines_split_requests() {
        use CatalogMetric as M;
        // trtllm-serve splits requests as vLLM does (TensorRT-LLM 1.3).
        for engine in [
            Engine::Vllm,
            Engine::Nim,
            Engine::Dynamo,
            Engine::Trtllm,
            Engine::Generic,
        ] {
            assert!(engine_may_expose(engine, M::PrefillTimeSeconds), "{engine}");
        }
        for engine in [Engine::Sglang, Engine::Tgi, Engine::Llamacpp] {
            assert!(
                !engine_may_expose(engine, M::PrefillTimeSeconds),
                "{engine}"
            );
        }
        // TGI's inference duration spans batching to the end, as vLLM's does.
        assert!(engine_may_expose(Engine::Tgi, M::InferenceTimeSeconds));
        assert!(!engine_may_expose(Engine::Dcgm, M::QueueTimeSeconds));
    }
}
