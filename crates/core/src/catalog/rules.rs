//! The catalog table: for each [`CatalogMetric`], the raw metrics that carry
//! it, in METRIC_MAP's name-resolution order (first present on the page
//! wins), each tagged with the family of names it belongs to so that an
//! engine only reads names it can emit.

use super::{CatalogMetric, Engine};

/// A family of metric names (one exporter's namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Src {
    Vllm,
    /// NIM for LLMs: vLLM's names without the `vllm:` prefix.
    Nim,
    Sglang,
    Tgi,
    Llama,
    /// Triton server + TRT-LLM backend (`nv_trt_llm_*`, `nv_inference_*`).
    Triton,
    /// Triton's own GPU gauges (`nv_gpu_*`).
    TritonGpu,
    /// trtllm-serve / the TRT-LLM Python collector (`trtllm_*`).
    TrtServe,
    DynFront,
    DynComp,
    Dcgm,
}

impl Src {
    /// Which name families a page of `engine` may carry. `Generic` tries all
    /// of them; a Dynamo worker carries its backend's families too; NIM is
    /// vLLM inside and may show `vllm:` names in some releases.
    pub(super) fn allowed(self, engine: Engine) -> bool {
        use Src::*;
        match engine {
            Engine::Vllm => self == Vllm,
            Engine::Nim => matches!(self, Nim | Vllm),
            Engine::Sglang => self == Sglang,
            Engine::Tgi => self == Tgi,
            Engine::Llamacpp => self == Llama,
            Engine::Trtllm => matches!(self, Triton | TritonGpu | TrtServe),
            Engine::Dynamo => matches!(self, DynFront | DynComp | Vllm | Sglang | TrtServe),
            Engine::Dcgm => self == Dcgm,
            Engine::Generic => true,
        }
    }
}

/// Where the value of a rule comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    /// One sample name (exact, as on the wire), optionally restricted to the
    /// samples whose label `selector.0` equals `selector.1`, times `scale`.
    Value {
        name: &'static str,
        selector: Option<(&'static str, &'static str)>,
        scale: f64,
    },
    /// A histogram family `base` (`base_bucket{le}`, `base_sum`,
    /// `base_count`); `le` and `_sum` are multiplied by `scale` (ms → s).
    Histogram { base: &'static str, scale: f64 },
    /// A histogram known only by its sum and count, from plain counters:
    /// `sum × scale`, count = Σ `count` names.
    SumCount {
        sum: &'static str,
        scale: f64,
        count: &'static [&'static str],
    },
    /// Several sample names that together make one quantity (SGLang's four
    /// P/D hand-off queues, its retracted input and output tokens): each
    /// name's samples are one series, summed after rank deduplication.
    Sum {
        names: &'static [&'static str],
        scale: f64,
    },
    /// dcgm-exporter has no default total: `FB_TOTAL` where present, else
    /// `FB_USED + FB_FREE (+ FB_RESERVED)` per GPU, MiB → bytes.
    DcgmFbTotal,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Rule {
    pub metric: CatalogMetric,
    pub src: Src,
    pub source: Source,
}

/// 1 MiB in bytes: DCGM's `FB_*` fields are MiB.
pub(super) const MIB: f64 = 1_048_576.0;

const fn v(metric: CatalogMetric, src: Src, name: &'static str) -> Rule {
    Rule {
        metric,
        src,
        source: Source::Value {
            name,
            selector: None,
            scale: 1.0,
        },
    }
}

const fn vs(metric: CatalogMetric, src: Src, name: &'static str, scale: f64) -> Rule {
    Rule {
        metric,
        src,
        source: Source::Value {
            name,
            selector: None,
            scale,
        },
    }
}

const fn sel(
    metric: CatalogMetric,
    src: Src,
    name: &'static str,
    label: &'static str,
    value: &'static str,
) -> Rule {
    Rule {
        metric,
        src,
        source: Source::Value {
            name,
            selector: Some((label, value)),
            scale: 1.0,
        },
    }
}

const fn h(metric: CatalogMetric, src: Src, base: &'static str) -> Rule {
    Rule {
        metric,
        src,
        source: Source::Histogram { base, scale: 1.0 },
    }
}

const fn sum(metric: CatalogMetric, src: Src, names: &'static [&'static str]) -> Rule {
    Rule {
        metric,
        src,
        source: Source::Sum { names, scale: 1.0 },
    }
}

use CatalogMetric as M;
use Src as S;

const SGLANG_PD_QUEUES: &[&str] = &[
    "sglang:num_prefill_prealloc_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
];

const SGLANG_RETRACTED_TOKENS: &[&str] = &[
    "sglang:num_retracted_input_tokens_total",
    "sglang:num_retracted_output_tokens_total",
];

const TRITON_REQUESTS: &[&str] = &[
    "nv_inference_request_success",
    "nv_inference_request_failure",
];

/// The table. Within one metric, order = resolution order.
pub(super) const RULES: &[Rule] = &[
    // KV-cache usage (ratio 0..1 everywhere, whatever the name says).
    v(M::KvCacheUsage, S::Vllm, "vllm:kv_cache_usage_perc"),
    v(M::KvCacheUsage, S::Vllm, "vllm:gpu_cache_usage_perc"),
    v(M::KvCacheUsage, S::Nim, "gpu_cache_usage_perc"),
    v(M::KvCacheUsage, S::Sglang, "sglang:token_usage"),
    sel(
        M::KvCacheUsage,
        S::Triton,
        "nv_trt_llm_kv_cache_block_metrics",
        "kv_cache_block_type",
        "fraction",
    ),
    v(
        M::KvCacheUsage,
        S::DynComp,
        "dynamo_component_kvstats_gpu_cache_usage_percent",
    ),
    v(M::KvCacheUsage, S::Llama, "llamacpp:kv_cache_usage_ratio"),
    v(M::KvCacheUsage, S::TrtServe, "trtllm_kv_cache_utilization"),
    // Requests running.
    v(M::RequestsRunning, S::Vllm, "vllm:num_requests_running"),
    v(M::RequestsRunning, S::Nim, "num_requests_running"),
    v(M::RequestsRunning, S::Sglang, "sglang:num_running_reqs"),
    v(M::RequestsRunning, S::Tgi, "tgi_batch_current_size"),
    sel(
        M::RequestsRunning,
        S::Triton,
        "nv_trt_llm_request_metrics",
        "request_type",
        "active",
    ),
    v(M::RequestsRunning, S::Llama, "llamacpp:requests_processing"),
    v(
        M::RequestsRunning,
        S::TrtServe,
        "trtllm_num_requests_running",
    ),
    v(
        M::RequestsRunning,
        S::DynFront,
        "dynamo_frontend_inflight_requests",
    ),
    v(
        M::RequestsRunning,
        S::DynComp,
        "dynamo_component_inflight_requests",
    ),
    // Requests waiting.
    v(M::RequestsWaiting, S::Vllm, "vllm:num_requests_waiting"),
    v(M::RequestsWaiting, S::Nim, "num_requests_waiting"),
    v(M::RequestsWaiting, S::Sglang, "sglang:num_queue_reqs"),
    v(M::RequestsWaiting, S::Tgi, "tgi_queue_size"),
    sel(
        M::RequestsWaiting,
        S::Triton,
        "nv_trt_llm_request_metrics",
        "request_type",
        "waiting",
    ),
    v(
        M::RequestsWaiting,
        S::Triton,
        "nv_inference_pending_request_count",
    ),
    v(M::RequestsWaiting, S::Llama, "llamacpp:requests_deferred"),
    v(
        M::RequestsWaiting,
        S::TrtServe,
        "trtllm_num_requests_waiting",
    ),
    v(
        M::RequestsWaiting,
        S::DynFront,
        "dynamo_frontend_queued_requests",
    ),
    v(
        M::RequestsWaiting,
        S::DynFront,
        "dynamo_frontend_worker_waiting_requests",
    ),
    // Preemptions (SGLang: retractions; the old gauge is not a counter).
    v(M::PreemptionsTotal, S::Vllm, "vllm:num_preemptions_total"),
    v(
        M::PreemptionsTotal,
        S::Sglang,
        "sglang:num_retracted_requests_total",
    ),
    // Prefix cache (tokens), V1 names then the 0.8–0.10 names.
    v(
        M::PrefixCacheHitsTotal,
        S::Vllm,
        "vllm:prefix_cache_hits_total",
    ),
    v(
        M::PrefixCacheHitsTotal,
        S::Vllm,
        "vllm:gpu_prefix_cache_hits_total",
    ),
    v(
        M::PrefixCacheQueriesTotal,
        S::Vllm,
        "vllm:prefix_cache_queries_total",
    ),
    v(
        M::PrefixCacheQueriesTotal,
        S::Vllm,
        "vllm:gpu_prefix_cache_queries_total",
    ),
    v(
        M::PrefixCacheHitRate,
        S::Vllm,
        "vllm:gpu_prefix_cache_hit_rate",
    ),
    v(M::PrefixCacheHitRate, S::Sglang, "sglang:cache_hit_rate"),
    v(
        M::PrefixCacheHitRate,
        S::DynComp,
        "dynamo_component_kvstats_gpu_prefix_cache_hit_rate",
    ),
    v(
        M::PrefixCacheHitRate,
        S::TrtServe,
        "trtllm_kv_cache_hit_rate",
    ),
    // Token counters (TGI and Dynamo only have histogram sums).
    v(M::PromptTokensTotal, S::Vllm, "vllm:prompt_tokens_total"),
    v(M::PromptTokensTotal, S::Nim, "prompt_tokens_total"),
    v(
        M::PromptTokensTotal,
        S::Sglang,
        "sglang:prompt_tokens_total",
    ),
    v(M::PromptTokensTotal, S::Tgi, "tgi_request_input_length_sum"),
    v(
        M::PromptTokensTotal,
        S::Llama,
        "llamacpp:prompt_tokens_total",
    ),
    v(
        M::PromptTokensTotal,
        S::DynFront,
        "dynamo_frontend_input_sequence_tokens_sum",
    ),
    v(
        M::PromptTokensTotal,
        S::DynComp,
        "dynamo_component_router_input_sequence_tokens_sum",
    ),
    v(
        M::PromptTokensTotal,
        S::TrtServe,
        "trtllm_prompt_tokens_total",
    ),
    v(
        M::GenerationTokensTotal,
        S::Vllm,
        "vllm:generation_tokens_total",
    ),
    v(M::GenerationTokensTotal, S::Nim, "generation_tokens_total"),
    v(
        M::GenerationTokensTotal,
        S::Sglang,
        "sglang:generation_tokens_total",
    ),
    v(
        M::GenerationTokensTotal,
        S::Tgi,
        "tgi_request_generated_tokens_sum",
    ),
    v(
        M::GenerationTokensTotal,
        S::Llama,
        "llamacpp:tokens_predicted_total",
    ),
    v(
        M::GenerationTokensTotal,
        S::DynFront,
        "dynamo_frontend_output_tokens_total",
    ),
    v(
        M::GenerationTokensTotal,
        S::DynComp,
        "dynamo_component_router_output_sequence_tokens_sum",
    ),
    v(
        M::GenerationTokensTotal,
        S::TrtServe,
        "trtllm_generation_tokens_total",
    ),
    sel(
        M::GenerationTokensTotal,
        S::Sglang,
        "sglang:realtime_tokens_total",
        "mode",
        "decode",
    ),
    // Finished requests (all finish reasons summed).
    v(
        M::RequestsSuccessTotal,
        S::Vllm,
        "vllm:request_success_total",
    ),
    v(M::RequestsSuccessTotal, S::Nim, "request_success_total"),
    v(
        M::RequestsSuccessTotal,
        S::Sglang,
        "sglang:num_requests_total",
    ),
    v(M::RequestsSuccessTotal, S::Tgi, "tgi_request_success"),
    v(
        M::RequestsSuccessTotal,
        S::TrtServe,
        "trtllm_request_success_total",
    ),
    v(
        M::RequestsSuccessTotal,
        S::Triton,
        "nv_inference_request_success",
    ),
    sel(
        M::RequestsSuccessTotal,
        S::DynFront,
        "dynamo_frontend_requests_total",
        "status",
        "success",
    ),
    v(
        M::RequestsSuccessTotal,
        S::DynComp,
        "dynamo_component_requests_total",
    ),
    v(
        M::RequestsSuccessTotal,
        S::DynComp,
        "dynamo_component_router_requests_total",
    ),
    // TTFT.
    h(M::TtftSeconds, S::Vllm, "vllm:time_to_first_token_seconds"),
    h(M::TtftSeconds, S::Nim, "time_to_first_token_seconds"),
    h(
        M::TtftSeconds,
        S::Sglang,
        "sglang:time_to_first_token_seconds",
    ),
    h(
        M::TtftSeconds,
        S::TrtServe,
        "trtllm_time_to_first_token_seconds",
    ),
    Rule {
        metric: M::TtftSeconds,
        src: S::Triton,
        source: Source::Histogram {
            base: "nv_inference_first_response_histogram_ms",
            scale: 1e-3,
        },
    },
    h(
        M::TtftSeconds,
        S::DynFront,
        "dynamo_frontend_time_to_first_token_seconds",
    ),
    h(
        M::TtftSeconds,
        S::DynComp,
        "dynamo_component_router_time_to_first_token_seconds",
    ),
    // ITL (TGI last: per-request mean TPOT, one observation per request).
    h(M::ItlSeconds, S::Vllm, "vllm:inter_token_latency_seconds"),
    h(M::ItlSeconds, S::Vllm, "vllm:time_per_output_token_seconds"),
    h(M::ItlSeconds, S::Nim, "time_per_output_token_seconds"),
    h(
        M::ItlSeconds,
        S::Sglang,
        "sglang:inter_token_latency_seconds",
    ),
    h(
        M::ItlSeconds,
        S::Sglang,
        "sglang:time_per_output_token_seconds",
    ),
    h(
        M::ItlSeconds,
        S::TrtServe,
        "trtllm_time_per_output_token_seconds",
    ),
    h(
        M::ItlSeconds,
        S::DynFront,
        "dynamo_frontend_inter_token_latency_seconds",
    ),
    h(
        M::ItlSeconds,
        S::DynComp,
        "dynamo_component_router_inter_token_latency_seconds",
    ),
    h(
        M::ItlSeconds,
        S::Tgi,
        "tgi_request_mean_time_per_token_duration",
    ),
    Rule {
        metric: M::ItlSeconds,
        src: S::Llama,
        source: Source::SumCount {
            sum: "llamacpp:tokens_predicted_seconds_total",
            scale: 1.0,
            count: &["llamacpp:tokens_predicted_total"],
        },
    },
    // End-to-end latency.
    h(M::E2eSeconds, S::Vllm, "vllm:e2e_request_latency_seconds"),
    h(M::E2eSeconds, S::Nim, "e2e_request_latency_seconds"),
    h(
        M::E2eSeconds,
        S::Sglang,
        "sglang:e2e_request_latency_seconds",
    ),
    h(M::E2eSeconds, S::Tgi, "tgi_request_duration"),
    h(
        M::E2eSeconds,
        S::TrtServe,
        "trtllm_e2e_request_latency_seconds",
    ),
    Rule {
        metric: M::E2eSeconds,
        src: S::Triton,
        source: Source::SumCount {
            sum: "nv_inference_request_duration_us",
            scale: 1e-6,
            count: TRITON_REQUESTS,
        },
    },
    h(
        M::E2eSeconds,
        S::DynFront,
        "dynamo_frontend_request_duration_seconds",
    ),
    h(
        M::E2eSeconds,
        S::DynComp,
        "dynamo_component_request_duration_seconds",
    ),
    // Queue time.
    h(
        M::QueueTimeSeconds,
        S::Vllm,
        "vllm:request_queue_time_seconds",
    ),
    h(M::QueueTimeSeconds, S::Sglang, "sglang:queue_time_seconds"),
    h(M::QueueTimeSeconds, S::Tgi, "tgi_request_queue_duration"),
    h(
        M::QueueTimeSeconds,
        S::TrtServe,
        "trtllm_request_queue_time_seconds",
    ),
    Rule {
        metric: M::QueueTimeSeconds,
        src: S::Triton,
        source: Source::SumCount {
            sum: "nv_inference_queue_duration_us",
            scale: 1e-6,
            count: TRITON_REQUESTS,
        },
    },
    // Engine-core phases of a request (vLLM V1 and NIM, which is vLLM
    // inside; trtllm-serve's scheduled → first token → last token, the same
    // spans; TGI's inference duration runs from batching to the end, the
    // same span). No other engine splits a request by phase.
    h(
        M::PrefillTimeSeconds,
        S::Vllm,
        "vllm:request_prefill_time_seconds",
    ),
    h(
        M::DecodeTimeSeconds,
        S::Vllm,
        "vllm:request_decode_time_seconds",
    ),
    h(
        M::InferenceTimeSeconds,
        S::Vllm,
        "vllm:request_inference_time_seconds",
    ),
    h(
        M::PrefillTimeSeconds,
        S::TrtServe,
        "trtllm_request_prefill_time_seconds",
    ),
    h(
        M::DecodeTimeSeconds,
        S::TrtServe,
        "trtllm_request_decode_time_seconds",
    ),
    h(
        M::InferenceTimeSeconds,
        S::TrtServe,
        "trtllm_request_inference_time_seconds",
    ),
    h(
        M::InferenceTimeSeconds,
        S::Tgi,
        "tgi_request_inference_duration",
    ),
    // Where prompt tokens came from (2026 names): cached (local or
    // external), computed here, computed again, or received from a prefill
    // instance.
    v(
        M::PromptTokensCachedTotal,
        S::Vllm,
        "vllm:prompt_tokens_cached_total",
    ),
    v(
        M::PromptTokensCachedTotal,
        S::Vllm,
        "vllm:prompt_tokens_cached_by_source_total",
    ),
    v(
        M::PromptTokensCachedTotal,
        S::Sglang,
        "sglang:cached_tokens_total",
    ),
    sel(
        M::PromptTokensCachedTotal,
        S::Sglang,
        "sglang:realtime_tokens_total",
        "mode",
        "prefill_cache",
    ),
    v(
        M::PromptTokensCachedTotal,
        S::TrtServe,
        "trtllm_prompt_cached_tokens_total",
    ),
    v(
        M::PromptTokensCachedTotal,
        S::TrtServe,
        "trtllm_prompt_cache_hit_tokens_total",
    ),
    sel(
        M::PromptTokensComputedTotal,
        S::Vllm,
        "vllm:prompt_tokens_by_source_total",
        "source",
        "local_compute",
    ),
    sel(
        M::PromptTokensComputedTotal,
        S::Sglang,
        "sglang:realtime_tokens_total",
        "mode",
        "prefill_compute",
    ),
    v(
        M::PromptTokensRecomputedTotal,
        S::Vllm,
        "vllm:prompt_tokens_recomputed_total",
    ),
    sel(
        M::PromptTokensTransferredTotal,
        S::Vllm,
        "vllm:prompt_tokens_by_source_total",
        "source",
        "external_kv_transfer",
    ),
    v(
        M::ExternalPrefixCacheHitsTotal,
        S::Vllm,
        "vllm:external_prefix_cache_hits_total",
    ),
    v(
        M::ExternalPrefixCacheQueriesTotal,
        S::Vllm,
        "vllm:external_prefix_cache_queries_total",
    ),
    h(
        M::RequestPreemptions,
        S::Vllm,
        "vllm:request_num_preemptions",
    ),
    h(
        M::PrefillComputedTokens,
        S::Vllm,
        "vllm:request_prefill_kv_computed_tokens",
    ),
    // Request lengths (what a server served: `--workload observed:`).
    h(
        M::RequestPromptTokens,
        S::Vllm,
        "vllm:request_prompt_tokens",
    ),
    h(M::RequestPromptTokens, S::Nim, "request_prompt_tokens"),
    h(
        M::RequestPromptTokens,
        S::Sglang,
        "sglang:prompt_tokens_histogram",
    ),
    h(M::RequestPromptTokens, S::Tgi, "tgi_request_input_length"),
    h(
        M::RequestPromptTokens,
        S::DynFront,
        "dynamo_frontend_input_sequence_tokens",
    ),
    h(
        M::RequestPromptTokens,
        S::DynComp,
        "dynamo_component_router_input_sequence_tokens",
    ),
    h(
        M::RequestGenerationTokens,
        S::Vllm,
        "vllm:request_generation_tokens",
    ),
    h(
        M::RequestGenerationTokens,
        S::Nim,
        "request_generation_tokens",
    ),
    h(
        M::RequestGenerationTokens,
        S::Sglang,
        "sglang:generation_tokens_histogram",
    ),
    h(
        M::RequestGenerationTokens,
        S::Tgi,
        "tgi_request_generated_tokens",
    ),
    h(
        M::RequestGenerationTokens,
        S::DynFront,
        "dynamo_frontend_output_sequence_tokens",
    ),
    h(
        M::RequestGenerationTokens,
        S::DynComp,
        "dynamo_component_router_output_sequence_tokens",
    ),
    // KV offloading (GPU ↔ host/disk): the flat names, then the deprecated
    // `transfer_type` ones, then the transfer-size histograms' sums.
    v(
        M::KvOffloadLoadBytesTotal,
        S::Vllm,
        "vllm:kv_offload_load_bytes_total",
    ),
    sel(
        M::KvOffloadLoadBytesTotal,
        S::Vllm,
        "vllm:kv_offload_total_bytes_total",
        "transfer_type",
        "CPU_to_GPU",
    ),
    v(
        M::KvOffloadLoadBytesTotal,
        S::Vllm,
        "vllm:kv_offload_load_size_sum",
    ),
    sel(
        M::KvOffloadLoadBytesTotal,
        S::Vllm,
        "vllm:kv_offload_size_sum",
        "transfer_type",
        "CPU_to_GPU",
    ),
    v(
        M::KvOffloadLoadBytesTotal,
        S::TrtServe,
        "trtllm_kv_cache_onboard_bytes_total",
    ),
    v(
        M::KvOffloadStoreBytesTotal,
        S::Vllm,
        "vllm:kv_offload_store_bytes_total",
    ),
    sel(
        M::KvOffloadStoreBytesTotal,
        S::Vllm,
        "vllm:kv_offload_total_bytes_total",
        "transfer_type",
        "GPU_to_CPU",
    ),
    v(
        M::KvOffloadStoreBytesTotal,
        S::Vllm,
        "vllm:kv_offload_store_size_sum",
    ),
    sel(
        M::KvOffloadStoreBytesTotal,
        S::Vllm,
        "vllm:kv_offload_size_sum",
        "transfer_type",
        "GPU_to_CPU",
    ),
    v(
        M::KvOffloadStoreBytesTotal,
        S::TrtServe,
        "trtllm_kv_cache_offload_bytes_total",
    ),
    v(
        M::KvOffloadLoadSecondsTotal,
        S::Vllm,
        "vllm:kv_offload_load_time_total",
    ),
    sel(
        M::KvOffloadLoadSecondsTotal,
        S::Vllm,
        "vllm:kv_offload_total_time_total",
        "transfer_type",
        "CPU_to_GPU",
    ),
    v(
        M::KvOffloadStoreSecondsTotal,
        S::Vllm,
        "vllm:kv_offload_store_time_total",
    ),
    sel(
        M::KvOffloadStoreSecondsTotal,
        S::Vllm,
        "vllm:kv_offload_total_time_total",
        "transfer_type",
        "GPU_to_CPU",
    ),
    // Prefill/decode disaggregation: KV transfer time, bytes, failures,
    // queues.
    h(
        M::KvTransferTimeSeconds,
        S::Vllm,
        "vllm:nixl_xfer_time_seconds",
    ),
    h(
        M::KvTransferTimeSeconds,
        S::DynComp,
        "dynamo_component_router_kv_transfer_estimated_latency_seconds",
    ),
    vs(
        M::KvTransferLatencySeconds,
        S::Sglang,
        "sglang:kv_transfer_latency_ms",
        1e-3,
    ),
    v(
        M::KvTransferBytesTotal,
        S::Vllm,
        "vllm:nixl_bytes_transferred_sum",
    ),
    vs(
        M::KvTransferSpeedBytesPerSecond,
        S::Sglang,
        "sglang:kv_transfer_speed_gb_s",
        1e9,
    ),
    v(
        M::KvTransferFailuresTotal,
        S::Vllm,
        "vllm:nixl_num_failed_transfers_total",
    ),
    v(
        M::KvTransferFailuresTotal,
        S::Sglang,
        "sglang:num_transfer_failed_reqs_total",
    ),
    sum(M::KvTransferQueueRequests, S::Sglang, SGLANG_PD_QUEUES),
    // Speculative decoding.
    v(
        M::SpecDecodeDraftsTotal,
        S::Vllm,
        "vllm:spec_decode_num_drafts_total",
    ),
    sel(
        M::SpecDecodeDraftsTotal,
        S::TrtServe,
        "trtllm_spec_decode_drafted_tokens_total",
        "token_position",
        "0",
    ),
    v(
        M::SpecDecodeDraftTokensTotal,
        S::Vllm,
        "vllm:spec_decode_num_draft_tokens_total",
    ),
    v(
        M::SpecDecodeDraftTokensTotal,
        S::TrtServe,
        "trtllm_spec_decode_num_draft_tokens_total",
    ),
    v(
        M::SpecDecodeDraftTokensTotal,
        S::TrtServe,
        "trtllm_spec_decode_drafted_tokens_total",
    ),
    v(
        M::SpecDecodeAcceptedTokensTotal,
        S::Vllm,
        "vllm:spec_decode_num_accepted_tokens_total",
    ),
    v(
        M::SpecDecodeAcceptedTokensTotal,
        S::TrtServe,
        "trtllm_spec_decode_num_accepted_tokens_total",
    ),
    v(
        M::SpecDecodeAcceptedTokensTotal,
        S::TrtServe,
        "trtllm_spec_decode_accepted_tokens_total",
    ),
    sel(
        M::SpecDecodeAcceptedFirstTotal,
        S::Vllm,
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "position",
        "0",
    ),
    sel(
        M::SpecDecodeAcceptedFirstTotal,
        S::TrtServe,
        "trtllm_spec_decode_accepted_tokens_total",
        "token_position",
        "0",
    ),
    v(
        M::SpecDecodeAcceptRate,
        S::Sglang,
        "sglang:spec_accept_rate",
    ),
    v(
        M::SpecDecodeAcceptLength,
        S::Sglang,
        "sglang:spec_accept_length",
    ),
    v(
        M::SpecDecodeAcceptLength,
        S::TrtServe,
        "trtllm_spec_decode_acceptance_length",
    ),
    // vLLM's MFU counters (per GPU; `--enable-mfu-metrics`).
    v(
        M::EstimatedFlopsTotal,
        S::Vllm,
        "vllm:estimated_flops_per_gpu_total",
    ),
    v(
        M::EstimatedReadBytesTotal,
        S::Vllm,
        "vllm:estimated_read_bytes_per_gpu_total",
    ),
    v(
        M::EstimatedWriteBytesTotal,
        S::Vllm,
        "vllm:estimated_write_bytes_per_gpu_total",
    ),
    sel(
        M::EngineAwake,
        S::Vllm,
        "vllm:engine_sleep_state",
        "sleep_state",
        "awake",
    ),
    sum(M::RetractedTokensTotal, S::Sglang, SGLANG_RETRACTED_TOKENS),
    h(
        M::RouterKvHitRate,
        S::DynComp,
        "dynamo_component_router_kv_hit_rate",
    ),
    // GPU: DCP (PROF_*) ratios preferred over the coarse NVML percentages.
    v(M::GpuUtil, S::Dcgm, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    vs(M::GpuUtil, S::Dcgm, "DCGM_FI_DEV_GPU_UTIL", 0.01),
    v(M::GpuUtil, S::TritonGpu, "nv_gpu_utilization"),
    vs(M::GpuMemUsedBytes, S::Dcgm, "DCGM_FI_DEV_FB_USED", MIB),
    v(M::GpuMemUsedBytes, S::TritonGpu, "nv_gpu_memory_used_bytes"),
    Rule {
        metric: M::GpuMemTotalBytes,
        src: S::Dcgm,
        source: Source::DcgmFbTotal,
    },
    v(
        M::GpuMemTotalBytes,
        S::TritonGpu,
        "nv_gpu_memory_total_bytes",
    ),
    v(M::GpuMemBwUtil, S::Dcgm, "DCGM_FI_PROF_DRAM_ACTIVE"),
    vs(M::GpuMemBwUtil, S::Dcgm, "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01),
    v(M::GpuPowerWatts, S::Dcgm, "DCGM_FI_DEV_POWER_USAGE"),
    v(M::GpuPowerWatts, S::TritonGpu, "nv_gpu_power_usage"),
    v(M::GpuTempCelsius, S::Dcgm, "DCGM_FI_DEV_GPU_TEMP"),
    v(
        M::GpuTensorActive,
        S::Dcgm,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ),
];
