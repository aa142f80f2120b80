//! Engine profiles: the parameters of the queueing model, and what they
//! predict. All costs are in *engine seconds* (the time the step would take
//! at `time_scale = 1`); [`crate::SimConfig::predict`] turns them into the
//! wall-clock numbers a client sees.

use serde::{Deserialize, Serialize};

use crate::SimError;

/// Parameters of the simulated engine. Every field can be overridden after
/// [`Profile::named`], so a test can build the exact shape it needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Profile name, reported nowhere but useful in logs.
    pub name: String,
    /// KV-cache capacity in blocks (vLLM's `num_gpu_blocks`).
    pub num_gpu_blocks: usize,
    /// Tokens per KV block (vLLM's `block_size`). Prefix-cache hits are
    /// counted in whole blocks of this size.
    pub block_size: usize,
    /// Most sequences running at once (`--max-num-seqs`).
    pub max_num_seqs: usize,
    /// Token budget of one step (`--max-num-batched-tokens`).
    pub max_num_batched_tokens: usize,
    /// Longest prompt + output accepted (`--max-model-len`).
    pub max_model_len: usize,
    /// Split long prompts into chunks that share steps with decodes. When
    /// off, a prompt is scheduled whole and `max_num_batched_tokens` must be
    /// at least `max_model_len` (as vLLM requires).
    pub enable_chunked_prefill: bool,
    /// Reuse cached KV blocks of identical prompt prefixes.
    pub enable_prefix_caching: bool,
    /// Fixed cost of every forward pass: reading the weights once.
    pub step_base_s: f64,
    /// Extra cost per decoding sequence in a step: reading its KV cache
    /// (memory-bandwidth-bound).
    pub decode_per_seq_s: f64,
    /// Cost per prompt token computed (compute-bound prefill).
    pub prefill_per_token_s: f64,
    /// Chance that a generated token is the pseudo-EOS, once `min_tokens`
    /// are out, for requests without `ignore_eos`. Deterministic per
    /// (seed, prompt, position).
    pub eos_probability: f64,
    /// Model weights in bytes, split evenly across the GPUs (tensor parallel).
    pub weights_bytes: u64,
    /// Bytes of one KV block over all layers (split across the GPUs).
    pub kv_bytes_per_block: u64,
    /// Framebuffer size of one GPU in bytes.
    pub gpu_memory_bytes: u64,
    /// Time a serial frontend (one request at a time: tokenizer, proxy)
    /// spends on each request before the engine sees it; the engine's own
    /// clocks (arrival, queue, TTFT histograms) start after it, so it is
    /// time outside the engine, as a slow API server or load balancer is.
    #[serde(default)]
    pub frontend_per_request_s: f64,
    /// Reported as the `modelName` label of the GPU page.
    pub gpu_model_name: String,
}

/// Input and output length of a request, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub input_tokens: usize,
    pub output_tokens: usize,
}

impl Shape {
    pub fn new(input_tokens: usize, output_tokens: usize) -> Shape {
        Shape {
            input_tokens,
            output_tokens,
        }
    }
}

const MIB: u64 = 1024 * 1024;

impl Profile {
    /// Names accepted by [`Profile::named`].
    pub const NAMES: [&'static str; 6] = [
        "balanced",
        "kv-starved",
        "prefill-heavy",
        "decode-slow",
        "scheduler-limited",
        "slow-frontend",
    ];

    /// A named preset. Costs are loosely modelled on an 8B model on one
    /// H100 so that the demo looks plausible at `time_scale = 1`.
    pub fn named(name: &str) -> Result<Profile, SimError> {
        let balanced = Profile::balanced();
        let p = match name {
            "balanced" => balanced,
            // 256 blocks = 4096 tokens of KV cache: a 512x128 shape needs 40
            // blocks per sequence, so the cache is full at ~6 sequences.
            "kv-starved" => Profile {
                name: name.to_string(),
                num_gpu_blocks: 256,
                max_model_len: 2048,
                ..balanced
            },
            // Prefill 10x as expensive (5k tokens/s): TTFT dominates, and
            // prefill chunks stretch the steps of running decodes.
            "prefill-heavy" => Profile {
                name: name.to_string(),
                prefill_per_token_s: 0.000_2,
                max_num_batched_tokens: 512,
                ..balanced
            },
            // A slow decode step (bandwidth-starved GPU): ITL 42 ms already
            // at concurrency 1.
            "decode-slow" => Profile {
                name: name.to_string(),
                step_base_s: 0.040,
                decode_per_seq_s: 0.002,
                ..balanced
            },
            // An ample cache (4096 blocks) behind a small running cap: at
            // 512x128 eight sequences run and the rest wait with the cache
            // mostly empty, as vLLM with a low `--max-num-seqs`.
            "scheduler-limited" => Profile {
                name: name.to_string(),
                max_num_seqs: 8,
                ..balanced
            },
            // A single-threaded frontend (tokenizer, proxy) that takes 25 ms
            // a request before the engine sees it: at most 40 requests/s
            // reach the GPU, which idles with an empty queue and cache.
            "slow-frontend" => Profile {
                name: name.to_string(),
                frontend_per_request_s: 0.025,
                ..balanced
            },
            other => {
                return Err(SimError::UnknownProfile {
                    name: other.to_string(),
                    known: Profile::NAMES.join(", "),
                })
            }
        };
        Ok(p)
    }

    fn balanced() -> Profile {
        Profile {
            name: "balanced".to_string(),
            num_gpu_blocks: 4096,
            block_size: 16,
            max_num_seqs: 64,
            max_num_batched_tokens: 2048,
            max_model_len: 4096,
            enable_chunked_prefill: true,
            enable_prefix_caching: true,
            step_base_s: 0.008,
            decode_per_seq_s: 0.0004,
            prefill_per_token_s: 0.000_02,
            eos_probability: 1.0 / 256.0,
            weights_bytes: 16 * 1024 * MIB,
            kv_bytes_per_block: 2 * MIB,
            gpu_memory_bytes: 81_559 * MIB,
            gpu_model_name: "NVIDIA H100 80GB HBM3".to_string(),
            frontend_per_request_s: 0.0,
        }
    }

    /// A profile whose steps cost nothing: the engine runs as fast as the
    /// CPU allows. Used by the bench to measure the HTTP/streaming path.
    pub fn zero_cost() -> Profile {
        Profile {
            name: "zero-cost".to_string(),
            step_base_s: 0.0,
            decode_per_seq_s: 0.0,
            prefill_per_token_s: 0.0,
            num_gpu_blocks: 1 << 16,
            max_num_seqs: 4096,
            max_num_batched_tokens: 1 << 16,
            ..Profile::balanced()
        }
    }

    /// Refuses parameter sets the engine cannot run (it would deadlock or
    /// divide by zero), naming the field.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |field: &'static str, why: String| Err(SimError::InvalidProfile { field, why });
        if self.block_size == 0 {
            return bad("block_size", "must be at least 1".into());
        }
        if self.num_gpu_blocks < 2 {
            // One block is the null block (see blocks.rs).
            return bad("num_gpu_blocks", "must be at least 2".into());
        }
        if self.max_num_seqs == 0 {
            return bad("max_num_seqs", "must be at least 1".into());
        }
        if self.max_num_batched_tokens == 0 {
            return bad("max_num_batched_tokens", "must be at least 1".into());
        }
        if self.max_model_len < 2 {
            return bad("max_model_len", "must be at least 2".into());
        }
        if self.max_model_len > self.num_gpu_blocks * self.block_size {
            return bad(
                "max_model_len",
                format!(
                    "{} tokens do not fit in the KV cache ({} blocks x {} tokens); one sequence must always fit",
                    self.max_model_len, self.num_gpu_blocks, self.block_size
                ),
            );
        }
        if !self.enable_chunked_prefill && self.max_num_batched_tokens < self.max_model_len {
            return bad(
                "max_num_batched_tokens",
                format!(
                    "{} is below max_model_len {} while chunked prefill is off",
                    self.max_num_batched_tokens, self.max_model_len
                ),
            );
        }
        for (field, v) in [
            ("step_base_s", self.step_base_s),
            ("decode_per_seq_s", self.decode_per_seq_s),
            ("prefill_per_token_s", self.prefill_per_token_s),
            ("frontend_per_request_s", self.frontend_per_request_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(field, format!("must be a finite number >= 0, found {v}"));
            }
        }
        if !(0.0..=1.0).contains(&self.eos_probability) {
            return bad(
                "eos_probability",
                format!("must be within 0..=1, found {}", self.eos_probability),
            );
        }
        Ok(())
    }

    /// KV blocks a sequence of this shape holds at its peak:
    /// `ceil((in + out - 1) / block_size)` — the last sampled token never
    /// enters the cache. Equals `ceil((in + out) / block_size)` unless
    /// `in + out` is one past a block boundary.
    pub fn blocks_per_sequence(&self, shape: Shape) -> usize {
        let tokens = (shape.input_tokens + shape.output_tokens).saturating_sub(1);
        tokens.div_ceil(self.block_size).max(1)
    }

    /// Concurrency at which the KV cache is full when every sequence is at
    /// its peak: `(num_gpu_blocks - 1) / blocks_per_sequence`. Above it (and below
    /// `max_num_seqs`) expect `kv_cache_usage_perc` near 1, waiting requests
    /// and preemptions.
    pub fn kv_saturation_concurrency(&self, shape: Shape) -> usize {
        // Less the null block, which holds no sequence (blocks.rs).
        self.num_gpu_blocks.saturating_sub(1) / self.blocks_per_sequence(shape)
    }

    /// Most sequences that decode together for this shape:
    /// `min(max_num_seqs, kv_saturation_concurrency)`.
    pub fn max_running(&self, shape: Shape) -> usize {
        self.max_num_seqs
            .min(self.kv_saturation_concurrency(shape))
            .max(1)
    }

    /// Engine seconds of a pure decode step with `running` sequences.
    pub fn decode_step_s(&self, running: usize) -> f64 {
        self.step_base_s + self.decode_per_seq_s * running as f64
    }

    /// Engine seconds to first token for a lone request (concurrency 1, no
    /// prefix hit): one step per prefill chunk plus the prompt's compute.
    pub fn ttft_c1_s(&self, input_tokens: usize) -> f64 {
        let chunks = if self.enable_chunked_prefill {
            input_tokens.div_ceil(self.max_num_batched_tokens).max(1)
        } else {
            1
        };
        chunks as f64 * self.step_base_s + input_tokens as f64 * self.prefill_per_token_s
    }

    /// Generation tokens per engine second that closed-loop clients at this
    /// concurrency get. With `R = min(concurrency, max_running)` sequences in
    /// flight, each request costs its prefill (`in × prefill_per_token`) plus
    /// `out − 1` shares of decode steps (`step_base / R + decode_per_seq`):
    /// `out / ((out − 1)(step_base/R + decode_per_seq) + in × prefill_per_token + step_base/R)`.
    /// The last `step_base/R` is the prefill's own step at R = 1 (at higher
    /// R prefills ride along with decodes; the term then under-predicts by
    /// less than 1/out).
    pub fn generation_throughput(&self, shape: Shape, concurrency: usize) -> f64 {
        let r = concurrency.min(self.max_running(shape)).max(1) as f64;
        let out = shape.output_tokens.max(1) as f64;
        let per_request = (out - 1.0) * (self.step_base_s / r + self.decode_per_seq_s)
            + shape.input_tokens as f64 * self.prefill_per_token_s
            + self.step_base_s / r;
        if per_request <= 0.0 {
            return f64::INFINITY;
        }
        out / per_request
    }

    /// The decode throughput ceiling: `R / decode_step_s(R)` with
    /// `R = max_running(shape)`, tokens per engine second (prefill ignored).
    pub fn decode_throughput_ceiling(&self, shape: Shape) -> f64 {
        let r = self.max_running(shape);
        let step = self.decode_step_s(r);
        if step <= 0.0 {
            return f64::INFINITY;
        }
        r as f64 / step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_profile_is_valid() {
        for name in Profile::NAMES {
            let p = Profile::named(name).expect("known profile");
            p.validate().expect("valid");
        }
        Profile::zero_cost().validate().expect("valid");
        assert!(Profile::named("nope").is_err());
    }

    #[test]
    fn predictions_for_kv_starved() {
        let p = Profile::named("kv-starved").expect("known");
        let shape = Shape::new(512, 128);
        assert_eq!(p.blocks_per_sequence(shape), 40);
        assert_eq!(p.kv_saturation_concurrency(shape), 6);
        assert_eq!(p.max_running(shape), 6);
    }

    #[test]
    fn throughput_grows_then_flattens() {
        let p = Profile::named("balanced").expect("known");
        let shape = Shape::new(64, 64);
        let t: Vec<f64> = [1, 2, 4, 8, 16, 32, 64, 128]
            .iter()
            .map(|&c| p.generation_throughput(shape, c))
            .collect();
        assert!(t.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(t[6], t[7], "flat past max_num_seqs");
    }
}
