//! What an engine's page says about its own capacity: the KV cache's size
//! (blocks and block size, or tokens) and, where exposed, the cap on running
//! sequences. The verdicts need it to tell a full cache from a scheduler
//! cap by arithmetic rather than by a usage threshold.
//!
//! * vLLM: `cache_config_info` labels `num_gpu_blocks`, `block_size` (and
//!   `kv_cache_size_tokens` where newer releases add it); one sample per
//!   data-parallel engine, whose caches add up.
//! * SGLang: `max_total_num_tokens`, one per rank: tensor-parallel ranks
//!   share one pool (the largest is taken), data-parallel ranks add up.
//! * llama.cpp, TGI, TensorRT-LLM: no size on the page; unknown. llama.cpp's
//!   cap on running sequences is its slot count (`total_slots` in `/props`,
//!   read at the edge, not on this page).

use super::{detect_engine, Engine};
use crate::exposition::Exposition;

/// What the engine says about its own capacity: the KV cache's size and
/// the cap on running sequences, where known (vLLM `cache_config_info`
/// `num_gpu_blocks` × `block_size`; SGLang `max_total_num_tokens`; a
/// `[targets.engine]` hint). `None` is "not reported".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineCapacity {
    pub kv_blocks: Option<u64>,
    /// Tokens per KV block.
    pub block_size: Option<u64>,
    /// The cache's size in tokens, for engines that report tokens rather
    /// than blocks.
    pub kv_tokens: Option<u64>,
    /// The most sequences the scheduler runs at once (vLLM max-num-seqs,
    /// SGLang max-running-requests, llama-server's slots).
    pub max_num_seqs: Option<u64>,
    /// Data-parallel engines whose block caches `kv_blocks` sums; each
    /// keeps one block for itself (vLLM's null block, never allocated to a
    /// sequence and left out of its usage), so `kv_blocks - engines` hold
    /// sequences.
    pub engines: u64,
    /// The engine the page is from, where known: what its knobs are
    /// called in the advice, and whether its running cap is slots that
    /// each hold one sequence's own cache (llama.cpp).
    pub engine: Option<Engine>,
}

impl EngineCapacity {
    /// Blocks that can hold sequences: the reported blocks less each
    /// engine's null block.
    pub fn usable_blocks(&self) -> Option<u64> {
        self.kv_blocks
            .map(|blocks| blocks.saturating_sub(self.engines.max(1)).max(1))
    }
}

/// The capacity `page` reports; every field `None` where it says nothing.
pub fn engine_capacity(page: &Exposition<'_>) -> EngineCapacity {
    let mut capacity = EngineCapacity {
        engine: Some(detect_engine(page)).filter(|e| !matches!(e, Engine::Generic | Engine::Dcgm)),
        ..EngineCapacity::default()
    };
    let samples = page.families.iter().flat_map(|f| f.samples.iter());
    let mut blocks_by_engine: std::collections::BTreeMap<String, u64> = Default::default();
    let mut sglang_by_dp: std::collections::BTreeMap<String, u64> = Default::default();
    for sample in samples {
        let name = sample.name.as_ref();
        if name.ends_with("cache_config_info") {
            let int = |label: &str| {
                sample
                    .label(label)
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .map(|v| v as u64)
            };
            if let Some(blocks) = int("num_gpu_blocks") {
                let engine = sample.label("engine").unwrap_or("").to_string();
                blocks_by_engine.insert(engine, blocks);
            }
            if let Some(bs) = int("block_size") {
                capacity.block_size = Some(bs);
            }
        } else if name == "sglang:max_total_num_tokens"
            && sample.value.is_finite()
            && sample.value > 0.0
        {
            let dp = sample.label("dp_rank").unwrap_or("").to_string();
            let tokens = sample.value as u64;
            let entry = sglang_by_dp.entry(dp).or_insert(0);
            *entry = (*entry).max(tokens);
        }
    }
    if !blocks_by_engine.is_empty() {
        capacity.kv_blocks = Some(blocks_by_engine.values().sum());
        capacity.engines = blocks_by_engine.len() as u64;
    }
    if !sglang_by_dp.is_empty() {
        capacity.kv_tokens = Some(sglang_by_dp.values().sum());
    }
    capacity
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{parse_lenient, Format};

    fn capacity_of(text: &str) -> EngineCapacity {
        let (page, _) = parse_lenient(text.as_bytes(), Format::PrometheusText);
        engine_capacity(&page)
    }

    #[test]
    fn vllm_blocks_and_block_size_from_the_info_labels() {
        let c = capacity_of(
            "vllm:cache_config_info{block_size=\"128\",engine=\"0\",num_gpu_blocks=\"40\"} 1.0\n",
        );
        assert_eq!((c.kv_blocks, c.block_size), (Some(40), Some(128)));
    }

    #[test]
    fn data_parallel_engines_add_up_and_none_is_unknown() {
        let c = capacity_of(
            "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"100\"} 1\n\
             vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"100\"} 1\n",
        );
        assert_eq!(c.kv_blocks, Some(200));
        assert_eq!((c.engines, c.usable_blocks()), (2, Some(198)));
        let none =
            capacity_of("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1\n");
        assert_eq!(none.kv_blocks, None);
        let llamacpp = capacity_of("llamacpp:requests_processing 1\n");
        assert!(!llamacpp.is_known());
        assert_eq!(llamacpp.engine, Some(Engine::Llamacpp));
    }

    #[test]
    fn sglang_tp_ranks_share_a_pool() {
        let c = capacity_of(
            "sglang:max_total_num_tokens{tp_rank=\"0\"} 1000\nsglang:max_total_num_tokens{tp_rank=\"1\"} 1000\n",
        );
        assert_eq!(c.kv_tokens, Some(1000));
    }
}
