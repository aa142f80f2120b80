//! What to try, in the knobs of the engine that was judged: a user of
//! llama-server told to "raise max-num-seqs" has no such flag. The verdicts
//! are the same on every engine; the words for the cap on running
//! sequences and the advice differ. [`Verdict::what_to_try`] is vLLM's (and
//! NIM's and Dynamo's over vLLM), the default where the engine is unknown.

use super::Verdict;
use crate::analysis::fmt;
use crate::catalog::Engine;

/// What to try for `verdict` on `engine`; vLLM's words where the engine has
/// no advice of its own for it.
pub fn what_to_try_on(verdict: Verdict, engine: Option<Engine>) -> &'static str {
    match (engine, verdict) {
        (Some(Engine::Llamacpp), Verdict::SchedulerLimit) => {
            "raise the slots (--parallel / -np) and the context with them (-c is split among the \
             slots unless --kv-unified), memory permitting; then more GPU memory or a smaller or \
             quantized model once memory is full"
        }
        (Some(Engine::Llamacpp), Verdict::KvCacheCapacity) => {
            "give each slot more context: a larger -c (split among the slots unless \
             --kv-unified), a quantized KV cache (--cache-type-k q8_0 --cache-type-v q8_0 with \
             flash attention), shorter inputs; fewer slots (-np) each get more of -c; then more \
             GPU memory or a smaller or quantized model"
        }
        (Some(Engine::Llamacpp), Verdict::PrefillBound) => {
            "shorter inputs, prompt caching for shared prefixes (cache_prompt, --cache-reuse), a \
             larger logical and physical batch (-b / -ub) where the batch binds; all layers on the \
             GPU (-ngl) or more GPUs for prompt compute"
        }
        (Some(Engine::Llamacpp), Verdict::PrefixCachingIneffective) => {
            "keep prompts cached per slot (cache_prompt, --cache-reuse N) and send a conversation \
             back to its slot (id_slot); give the slots more context (-c) so shared prefixes stay"
        }
        (Some(Engine::Sglang), Verdict::SchedulerLimit) => {
            "raise --max-running-requests (the KV cache has room for more requests), then \
             --chunked-prefill-size; more GPUs only once the cache fills"
        }
        (Some(Engine::Sglang), Verdict::KvCacheCapacity) => {
            "give the KV cache more room: raise --mem-fraction-static, FP8 KV cache \
             (--kv-cache-dtype fp8_e5m2), shorter inputs or --context-length, RadixAttention for \
             shared prefixes; then more GPUs (--tp) or a smaller or quantized model. Raising \
             --max-running-requests will not help: the cache, not the cap, is full"
        }
        (Some(Engine::Sglang), Verdict::PrefillBound) => {
            "shorter inputs, RadixAttention for shared prefixes, a larger --chunked-prefill-size \
             where the per-step token budget (not compute) binds; more GPUs (--tp) for prompt \
             compute"
        }
        (Some(Engine::Trtllm), Verdict::SchedulerLimit) => {
            "raise --max_batch_size (the KV cache has room for more sequences), then \
             --max_num_tokens; more GPUs only once the cache fills"
        }
        (Some(Engine::Trtllm), Verdict::KvCacheCapacity) => {
            "give the KV cache more room: raise --kv_cache_free_gpu_memory_fraction, FP8 KV \
             cache, shorter inputs or --max_seq_len, KV-cache reuse for shared prefixes; then \
             more GPUs (--tp_size) or a smaller or quantized model. Raising --max_batch_size will \
             not help: the cache, not the cap, is full"
        }
        _ => verdict.what_to_try(),
    }
}

/// The cap on running sequences in `engine`'s words, with its value.
pub fn cap_words(engine: Option<Engine>, cap: f64) -> String {
    let n = fmt::num(cap);
    match engine {
        Some(Engine::Llamacpp) => format!("llama-server's {n} slots (--parallel)"),
        Some(Engine::Sglang) => format!("max-running-requests {n}"),
        Some(Engine::Trtllm) => format!("max_batch_size {n}"),
        _ => format!("max-num-seqs {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_told_its_own_knob_and_vllm_is_the_default() {
        let slots = what_to_try_on(Verdict::SchedulerLimit, Some(Engine::Llamacpp));
        assert!(slots.contains("--parallel") && !slots.contains("max-num-seqs"));
        let sglang = what_to_try_on(Verdict::KvCacheCapacity, Some(Engine::Sglang));
        assert!(sglang.contains("--mem-fraction-static"), "{sglang}");
        for engine in [None, Some(Engine::Vllm), Some(Engine::Nim)] {
            assert_eq!(
                what_to_try_on(Verdict::SchedulerLimit, engine),
                Verdict::SchedulerLimit.what_to_try()
            );
        }
        // A verdict with no engine-specific advice keeps the table's.
        assert_eq!(
            what_to_try_on(Verdict::OutsideGpu, Some(Engine::Llamacpp)),
            Verdict::OutsideGpu.what_to_try()
        );
        assert_eq!(
            cap_words(Some(Engine::Llamacpp), 2.0),
            "llama-server's 2 slots (--parallel)"
        );
        assert_eq!(cap_words(None, 8.0), "max-num-seqs 8");
    }
}
