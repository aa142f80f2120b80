//! vLLM 0.32 `vllm serve` flags applied to a [`Profile`]: the simulator run
//! "with the same settings" as a real server, or with one changed.
//!
//! [`apply_vllm_args`] takes a base profile, the vLLM settings that profile
//! was measured at ([`VllmSettings`]: what `Profile` does not carry) and the
//! flags, and returns the new profile, the new settings and the flags it
//! accepted but ignored. It does no I/O and never panics; every refusal is
//! a [`VllmArgsError`] naming the flag.
//!
//! | flag | effect on the profile |
//! |---|---|
//! | `--max-num-seqs N` | `max_num_seqs` |
//! | `--max-num-batched-tokens N` | `max_num_batched_tokens` (≥ `max_num_seqs`; ≥ `max_model_len` without chunked prefill) |
//! | `--max-model-len N` | `max_model_len` (one sequence must fit the KV cache) |
//! | `--block-size N` (1, 8, 16, 32, 64, 128) | `block_size`; `kv_bytes_per_block` scales with it |
//! | `--num-gpu-blocks-override N` | `num_gpu_blocks = N`, whatever the memory says |
//! | `--enable-chunked-prefill`, `--no-enable-chunked-prefill` | `enable_chunked_prefill`; off, the token budget defaults to `max(max_model_len, budget)` as vLLM's does |
//! | `--enable-prefix-caching`, `--no-enable-prefix-caching` | `enable_prefix_caching` |
//! | `--gpu-memory-utilization F` (0 < F ≤ 1) | `num_gpu_blocks` from memory (below) |
//! | `--kv-cache-dtype D` (auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc) | fp8 halves `kv_bytes_per_block`: twice the blocks in the same memory |
//! | `--tensor-parallel-size N` | weights and KV split over N GPUs: more blocks; compute ÷ N plus an all-reduce cost per step and per token |
//! | `--pipeline-parallel-size N` | layers split over N GPUs: more blocks; step cost not reduced, plus a pipeline bubble per step |
//! | `--interconnect nvlink\|pcie` (llmwatch's own) | the link TP and PP pay for; required once either is above 1 |
//!
//! Flags that do not change scheduling (`--port`, `--host`,
//! `--served-model-name`, `--enforce-eager`, `--seed`, `--dtype`, …, and a
//! leading positional model) are accepted and listed as ignored; any other
//! flag is [`VllmArgsError::UnknownFlag`]. `--flag value` and `--flag=value`
//! both work; a repeated flag's last value wins, as with argparse.
//!
//! **KV memory.** vLLM sizes its cache as `(gpu_memory × utilization −
//! weights/GPUs − other) / (bytes per block / GPUs)` per GPU, where `other`
//! is activation and CUDA-graph memory. `other` is calibrated from the base:
//! the base profile at its own settings gives back exactly its own
//! `num_gpu_blocks`, so raising the utilisation by 0.05 adds 5 % of a GPU's
//! memory to the cache, as it does in vLLM. The blocks are only recomputed
//! when a flag that changes memory is given (utilisation, dtype, block size,
//! TP, PP).
//!
//! **TP and PP costs.** The base costs are turned into one-GPU costs (its
//! own communication taken out, compute × its TP size), then divided by the
//! new TP size, plus the new link's all-reduce costs: per step
//! `allreduce_step_s × (tp − 1)` and per scheduled token
//! `allreduce_token_s × 2(tp − 1)/tp` (an 8B Llama: 64 all-reduces of 8 KiB
//! per token per step). PP keeps the compute (its stages run one after the
//! other for one batch; the simulator runs one batch at a time, so PP's
//! overlap of micro-batches is not modelled) and adds a stage hand-off per
//! stage boundary to every step: the bubble.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Profile, Sim};

/// vLLM's default `--gpu-memory-utilization`.
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// Block sizes vLLM 0.32 accepts on CUDA.
pub const BLOCK_SIZES: [usize; 6] = [1, 8, 16, 32, 64, 128];

/// Why a set of flags was refused. Every variant names the flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VllmArgsError {
    #[error("unknown vLLM flag `{flag}` (not one the simulator models or knows to ignore)")]
    UnknownFlag { flag: String },
    #[error("`{flag}` needs a value")]
    MissingValue { flag: String },
    #[error("`{flag}`: expected {expected}, found `{value}`")]
    InvalidValue {
        flag: String,
        value: String,
        expected: String,
    },
    #[error("`{flag}` takes no value, found `{value}`")]
    UnexpectedValue { flag: String, value: String },
    #[error("unexpected argument `{value}`: only the model may come before the flags")]
    UnexpectedPositional { value: String },
    #[error("unclosed {quote} quote in the flags")]
    UnclosedQuote { quote: char },
    #[error("`{flag}` above 1 needs the link between the GPUs: add `--interconnect nvlink` or `--interconnect pcie`")]
    MissingInterconnect { flag: String },
    #[error("`{flag}`: {why}")]
    Refused { flag: String, why: String },
}

fn invalid(flag: &str, value: &str, expected: &str) -> VllmArgsError {
    VllmArgsError::InvalidValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

fn refused(flag: &str, why: String) -> VllmArgsError {
    VllmArgsError::Refused {
        flag: flag.to_string(),
        why,
    }
}

/// The link between the GPUs of a TP or PP group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interconnect {
    /// NVLink / NVSwitch (H100 SXM): ~8 µs per small all-reduce, ~350 GB/s.
    Nvlink,
    /// PCIe without NVLink: ~45 µs per small all-reduce, ~25 GB/s.
    Pcie,
}

impl Interconnect {
    pub fn as_str(self) -> &'static str {
        match self {
            Interconnect::Nvlink => "nvlink",
            Interconnect::Pcie => "pcie",
        }
    }

    /// Latency of one step's all-reduces (64 for an 8B Llama) per extra rank.
    fn allreduce_step_s(self) -> f64 {
        match self {
            Interconnect::Nvlink => 0.000_5,
            Interconnect::Pcie => 0.003,
        }
    }

    /// Bandwidth cost of one scheduled token's all-reduces at TP = 2
    /// (512 KiB per token for an 8B Llama).
    fn allreduce_token_s(self) -> f64 {
        match self {
            Interconnect::Nvlink => 0.000_001_5,
            Interconnect::Pcie => 0.000_021,
        }
    }

    /// One pipeline stage hand-off (activations to the next stage).
    fn stage_handoff_s(self) -> f64 {
        match self {
            Interconnect::Nvlink => 0.000_1,
            Interconnect::Pcie => 0.000_6,
        }
    }
}

impl FromStr for Interconnect {
    type Err = VllmArgsError;
    fn from_str(s: &str) -> Result<Interconnect, VllmArgsError> {
        match s.to_ascii_lowercase().as_str() {
            "nvlink" | "nvswitch" => Ok(Interconnect::Nvlink),
            "pcie" => Ok(Interconnect::Pcie),
            _ => Err(invalid("--interconnect", s, "nvlink or pcie")),
        }
    }
}

/// `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheDtype {
    /// The model's dtype (16-bit here).
    #[default]
    Auto,
    Bfloat16,
    Float16,
    Fp8,
    Fp8E4m3,
    Fp8E5m2,
    Fp8Inc,
}

impl KvCacheDtype {
    pub const NAMES: [&'static str; 7] = [
        "auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
    ];

    /// As vLLM spells it (the `cache_dtype` label).
    pub fn as_str(self) -> &'static str {
        match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Bfloat16 => "bfloat16",
            KvCacheDtype::Float16 => "float16",
            KvCacheDtype::Fp8 => "fp8",
            KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
            KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
            KvCacheDtype::Fp8Inc => "fp8_inc",
        }
    }

    /// Bytes per element relative to a 16-bit cache.
    pub fn size_factor(self) -> f64 {
        match self {
            KvCacheDtype::Auto | KvCacheDtype::Bfloat16 | KvCacheDtype::Float16 => 1.0,
            KvCacheDtype::Fp8
            | KvCacheDtype::Fp8E4m3
            | KvCacheDtype::Fp8E5m2
            | KvCacheDtype::Fp8Inc => 0.5,
        }
    }
}

impl FromStr for KvCacheDtype {
    type Err = VllmArgsError;
    fn from_str(s: &str) -> Result<KvCacheDtype, VllmArgsError> {
        Ok(match s {
            "auto" => KvCacheDtype::Auto,
            "bfloat16" => KvCacheDtype::Bfloat16,
            "float16" | "half" => KvCacheDtype::Float16,
            "fp8" => KvCacheDtype::Fp8,
            "fp8_e4m3" => KvCacheDtype::Fp8E4m3,
            "fp8_e5m2" => KvCacheDtype::Fp8E5m2,
            "fp8_inc" => KvCacheDtype::Fp8Inc,
            _ => {
                return Err(invalid(
                    "--kv-cache-dtype",
                    s,
                    &KvCacheDtype::NAMES.join(", "),
                ))
            }
        })
    }
}

/// The vLLM settings a profile runs with (or was measured at) that
/// [`Profile`] does not carry. Defaults are vLLM's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VllmSettings {
    pub gpu_memory_utilization: f64,
    pub cache_dtype: KvCacheDtype,
    pub num_gpu_blocks_override: Option<usize>,
    /// `--block-size` was given (vLLM's `user_specified_block_size` label).
    pub user_specified_block_size: bool,
    pub tensor_parallel_size: usize,
    pub pipeline_parallel_size: usize,
    /// Needed once TP or PP is above 1.
    pub interconnect: Option<Interconnect>,
}

impl Default for VllmSettings {
    fn default() -> VllmSettings {
        VllmSettings {
            gpu_memory_utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
            cache_dtype: KvCacheDtype::Auto,
            num_gpu_blocks_override: None,
            user_specified_block_size: false,
            tensor_parallel_size: 1,
            pipeline_parallel_size: 1,
            interconnect: None,
        }
    }
}

impl VllmSettings {
    /// GPUs the engine runs on (`tp × pp`): the simulator's `gpus`.
    pub fn world_size(&self) -> usize {
        self.tensor_parallel_size.max(1) * self.pipeline_parallel_size.max(1)
    }

    /// The `cache_config_info` labels these settings decide (the profile's
    /// own — block size, blocks, prefix caching — are rendered from it).
    pub fn cache_config_labels(&self) -> Vec<(&'static str, String)> {
        let py_bool = |b: bool| if b { "True" } else { "False" }.to_string();
        vec![
            (
                "gpu_memory_utilization",
                crate::stats::py_float(self.gpu_memory_utilization),
            ),
            ("cache_dtype", self.cache_dtype.as_str().to_string()),
            (
                "num_gpu_blocks_override",
                self.num_gpu_blocks_override
                    .map_or_else(|| "None".to_string(), |n| n.to_string()),
            ),
            (
                "user_specified_block_size",
                py_bool(self.user_specified_block_size),
            ),
        ]
    }
}

/// What [`apply_vllm_args`] made of the flags.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedArgs {
    pub profile: Profile,
    pub settings: VllmSettings,
    /// Accepted flags that do not change scheduling, as given (`--port
    /// 9000`; an API key's value is not repeated).
    pub ignored: Vec<String>,
}

/// How an ignored flag takes its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arity {
    Switch,
    One,
    /// argparse `nargs="+"`: values up to the next flag.
    Many,
}

/// Flags of `vllm serve` that do not change what the simulator models.
const IGNORED_FLAGS: &[(&str, Arity)] = &[
    ("--port", Arity::One),
    ("--host", Arity::One),
    ("--served-model-name", Arity::Many),
    ("--model", Arity::One),
    ("--tokenizer", Arity::One),
    ("--revision", Arity::One),
    ("--download-dir", Arity::One),
    ("--enforce-eager", Arity::Switch),
    ("--seed", Arity::One),
    ("--dtype", Arity::One),
    ("--trust-remote-code", Arity::Switch),
    ("--disable-log-requests", Arity::Switch),
    ("--enable-log-requests", Arity::Switch),
    ("--disable-log-stats", Arity::Switch),
    ("--enable-per-request-metrics", Arity::Switch),
    ("--enable-prompt-tokens-details", Arity::Switch),
    ("--uvicorn-log-level", Arity::One),
    ("--api-key", Arity::One),
    ("--root-path", Arity::One),
    ("--chat-template", Arity::One),
    ("--generation-config", Arity::One),
];

/// Flags whose values must not be echoed.
const SECRET_FLAGS: [&str; 1] = ["--api-key"];

/// Flags the simulator models, all of which take one value except the
/// on/off pairs.
const VALUE_FLAGS: [&str; 10] = [
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--num-gpu-blocks-override",
    "--block-size",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--kv-cache-dtype",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--interconnect",
];
const SWITCH_FLAGS: [&str; 4] = [
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
];

/// vLLM's short spellings of modelled flags.
fn canonical(flag: &str) -> &str {
    match flag {
        "-tp" => "--tensor-parallel-size",
        "-pp" => "--pipeline-parallel-size",
        other => other,
    }
}

/// Splits a command-line string as a POSIX shell would for plain words:
/// whitespace separates, single quotes are literal, double quotes and
/// backslashes escape.
pub fn split_args(text: &str) -> Result<Vec<String>, VllmArgsError> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(VllmArgsError::UnclosedQuote { quote: '\'' }),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch) => word.push(ch),
                            None => return Err(VllmArgsError::UnclosedQuote { quote: '"' }),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err(VllmArgsError::UnclosedQuote { quote: '"' }),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(ch) = chars.next() {
                    word.push(ch);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    Ok(out)
}

/// The modelled flags as given, after splitting, before they are applied.
#[derive(Debug, Default)]
struct Given {
    max_num_seqs: Option<usize>,
    max_num_batched_tokens: Option<usize>,
    num_gpu_blocks_override: Option<usize>,
    block_size: Option<usize>,
    max_model_len: Option<usize>,
    gpu_memory_utilization: Option<f64>,
    kv_cache_dtype: Option<KvCacheDtype>,
    tensor_parallel_size: Option<usize>,
    pipeline_parallel_size: Option<usize>,
    interconnect: Option<Interconnect>,
    chunked_prefill: Option<bool>,
    prefix_caching: Option<bool>,
}

fn positive(flag: &str, value: &str) -> Result<usize, VllmArgsError> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(invalid(flag, value, "a whole number of at least 1")),
    }
}

impl Given {
    fn set(&mut self, flag: &str, value: &str) -> Result<(), VllmArgsError> {
        match flag {
            "--max-num-seqs" => self.max_num_seqs = Some(positive(flag, value)?),
            "--max-num-batched-tokens" => {
                self.max_num_batched_tokens = Some(positive(flag, value)?)
            }
            "--num-gpu-blocks-override" => {
                self.num_gpu_blocks_override = Some(positive(flag, value)?)
            }
            "--block-size" => {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| BLOCK_SIZES.contains(n))
                    .ok_or_else(|| invalid(flag, value, "one of 1, 8, 16, 32, 64, 128"))?;
                self.block_size = Some(n);
            }
            "--max-model-len" => self.max_model_len = Some(parse_model_len(value)?),
            "--gpu-memory-utilization" => {
                let f = value
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && *f > 0.0 && *f <= 1.0)
                    .ok_or_else(|| invalid(flag, value, "a fraction above 0 and at most 1"))?;
                self.gpu_memory_utilization = Some(f);
            }
            "--kv-cache-dtype" => self.kv_cache_dtype = Some(value.parse()?),
            "--tensor-parallel-size" => self.tensor_parallel_size = Some(positive(flag, value)?),
            "--pipeline-parallel-size" => {
                self.pipeline_parallel_size = Some(positive(flag, value)?)
            }
            "--interconnect" => self.interconnect = Some(value.parse()?),
            _ => {
                return Err(VllmArgsError::UnknownFlag {
                    flag: flag.to_string(),
                })
            }
        }
        Ok(())
    }

    fn switch(&mut self, flag: &str) {
        match flag {
            "--enable-chunked-prefill" => self.chunked_prefill = Some(true),
            "--no-enable-chunked-prefill" => self.chunked_prefill = Some(false),
            "--enable-prefix-caching" => self.prefix_caching = Some(true),
            "--no-enable-prefix-caching" => self.prefix_caching = Some(false),
            _ => {}
        }
    }
}

/// `--max-model-len` as vLLM reads it: a number, optionally with a `k`/`K`
/// (×1000) or `m`/`M` (×10⁶) suffix (`32k`).
fn parse_model_len(value: &str) -> Result<usize, VllmArgsError> {
    let err = || {
        invalid(
            "--max-model-len",
            value,
            "a number of tokens such as 4096 or 32k",
        )
    };
    let (digits, mult) = match value.char_indices().last() {
        Some((i, 'k' | 'K')) => (&value[..i], 1_000.0),
        Some((i, 'm' | 'M')) => (&value[..i], 1_000_000.0),
        _ => (value, 1.0),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(err());
    }
    let n = digits.parse::<f64>().map_err(|_| err())? * mult;
    if !(n.is_finite() && n >= 2.0 && n.fract() == 0.0 && n <= 1e12) {
        return Err(err());
    }
    Ok(n as usize)
}

/// The value of a one-value flag: inline, or the next argument (which may
/// look like a negative number but never like a flag).
fn take_value(
    args: &[String],
    i: &mut usize,
    inline: Option<&str>,
    flag: &str,
) -> Result<String, VllmArgsError> {
    if let Some(v) = inline {
        return Ok(v.to_string());
    }
    match args.get(*i) {
        Some(v) if !v.starts_with("--") => {
            *i += 1;
            Ok(v.clone())
        }
        _ => Err(VllmArgsError::MissingValue {
            flag: flag.to_string(),
        }),
    }
}

/// Reads the flags into what was given and what is ignored.
fn read_flags(args: &[String]) -> Result<(Given, Vec<String>), VllmArgsError> {
    let mut given = Given::default();
    let mut ignored = Vec::new();
    let mut i = 0;
    // `vllm serve MODEL …` pasted whole.
    if args.first().map(String::as_str) == Some("vllm") {
        i += 1;
    }
    if args.get(i).map(String::as_str) == Some("serve") {
        i += 1;
    }
    if let Some(model) = args.get(i).filter(|a| !a.starts_with('-')) {
        ignored.push(format!("{model} (model)"));
        i += 1;
    }
    while let Some(arg) = args.get(i) {
        i += 1;
        if !arg.starts_with('-') || arg == "-" || arg == "--" {
            return Err(VllmArgsError::UnexpectedPositional { value: arg.clone() });
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (canonical(f), Some(v.to_string())),
            None => (canonical(arg), None),
        };
        if VALUE_FLAGS.contains(&flag) {
            let value = take_value(args, &mut i, inline.as_deref(), flag)?;
            given.set(flag, &value)?;
        } else if SWITCH_FLAGS.contains(&flag) {
            if let Some(value) = inline {
                return Err(VllmArgsError::UnexpectedValue {
                    flag: flag.to_string(),
                    value,
                });
            }
            given.switch(flag);
        } else if let Some(&(_, arity)) = IGNORED_FLAGS.iter().find(|(f, _)| *f == flag) {
            let shown = |v: &str| {
                if SECRET_FLAGS.contains(&flag) {
                    "<redacted>".to_string()
                } else {
                    v.to_string()
                }
            };
            match arity {
                Arity::Switch => {
                    if let Some(value) = inline {
                        return Err(VllmArgsError::UnexpectedValue {
                            flag: flag.to_string(),
                            value,
                        });
                    }
                    ignored.push(flag.to_string());
                }
                Arity::One => {
                    let value = take_value(args, &mut i, inline.as_deref(), flag)?;
                    ignored.push(format!("{flag} {}", shown(&value)));
                }
                Arity::Many => {
                    let mut values = vec![take_value(args, &mut i, inline.as_deref(), flag)?];
                    if inline.is_none() {
                        while let Some(v) = args.get(i).filter(|v| !v.starts_with('-')) {
                            values.push(v.clone());
                            i += 1;
                        }
                    }
                    ignored.push(format!("{flag} {}", values.join(" ")));
                }
            }
        } else {
            return Err(VllmArgsError::UnknownFlag {
                flag: flag.to_string(),
            });
        }
    }
    Ok((given, ignored))
}

/// One-GPU cost of a per-step or per-token cost measured on `tp` ranks
/// over `link` (its communication taken out); never negative.
fn one_gpu(cost: f64, comm: f64, tp: usize) -> f64 {
    ((cost - comm) * tp as f64).max(0.0)
}

fn allreduce_step(tp: usize, link: Option<Interconnect>) -> f64 {
    link.map_or(0.0, |l| l.allreduce_step_s() * (tp.max(1) - 1) as f64)
}

fn allreduce_token(tp: usize, link: Option<Interconnect>) -> f64 {
    let tp = tp.max(1) as f64;
    link.map_or(0.0, |l| l.allreduce_token_s() * 2.0 * (tp - 1.0) / tp)
}

fn bubble(pp: usize, link: Option<Interconnect>) -> f64 {
    link.map_or(0.0, |l| l.stage_handoff_s() * (pp.max(1) - 1) as f64)
}

/// Applies `vllm serve` flags to `base` (measured at `base_settings`).
pub fn apply_vllm_args(
    base: &Profile,
    base_settings: &VllmSettings,
    args: &[String],
) -> Result<AppliedArgs, VllmArgsError> {
    let (given, ignored) = read_flags(args)?;
    let mut p = base.clone();
    let mut s = base_settings.clone();

    if let Some(n) = given.max_num_seqs {
        p.max_num_seqs = n;
    }
    if let Some(n) = given.max_model_len {
        p.max_model_len = n;
    }
    if let Some(b) = given.prefix_caching {
        p.enable_prefix_caching = b;
    }
    if let Some(b) = given.chunked_prefill {
        p.enable_chunked_prefill = b;
    }
    if let Some(n) = given.max_num_batched_tokens {
        p.max_num_batched_tokens = n;
    } else if given.chunked_prefill == Some(false) {
        // vLLM without chunked prefill: max(max_model_len, 2048).
        p.max_num_batched_tokens = p.max_num_batched_tokens.max(p.max_model_len);
    }

    apply_parallelism(base, base_settings, &given, &mut p, &mut s)?;

    // KV memory.
    if let Some(u) = given.gpu_memory_utilization {
        s.gpu_memory_utilization = u;
    }
    if let Some(d) = given.kv_cache_dtype {
        s.cache_dtype = d;
    }
    if let Some(bs) = given.block_size {
        p.block_size = bs;
        s.user_specified_block_size = true;
    }
    let bytes_per_token_16bit = base.kv_bytes_per_block as f64
        / base.block_size.max(1) as f64
        / base_settings.cache_dtype.size_factor();
    let kv_bytes_per_block =
        (bytes_per_token_16bit * s.cache_dtype.size_factor() * p.block_size as f64).round();
    p.kv_bytes_per_block = kv_bytes_per_block as u64;
    let memory_changed = given.gpu_memory_utilization.is_some()
        || given.kv_cache_dtype.is_some()
        || given.block_size.is_some()
        || given.tensor_parallel_size.is_some()
        || given.pipeline_parallel_size.is_some();
    if let Some(n) = given.num_gpu_blocks_override {
        s.num_gpu_blocks_override = Some(n);
        p.num_gpu_blocks = n;
    } else if let Some(n) = s.num_gpu_blocks_override {
        p.num_gpu_blocks = n;
    } else if memory_changed {
        p.num_gpu_blocks = blocks_from_memory(base, base_settings, &s, kv_bytes_per_block, &given)?;
    }

    check(&p, &given)?;
    Ok(AppliedArgs {
        profile: p,
        settings: s,
        ignored,
    })
}

/// Tensor and pipeline parallelism and their link: the costs of one GPU
/// (the base's undone) split over the new sizes, plus the link's all-reduce
/// and the pipeline's bubble.
fn apply_parallelism(
    base: &Profile,
    base_settings: &VllmSettings,
    given: &Given,
    p: &mut Profile,
    s: &mut VllmSettings,
) -> Result<(), VllmArgsError> {
    if let Some(link) = given.interconnect {
        s.interconnect = Some(link);
    }
    if let Some(tp) = given.tensor_parallel_size {
        s.tensor_parallel_size = tp;
    }
    if let Some(pp) = given.pipeline_parallel_size {
        s.pipeline_parallel_size = pp;
    }
    for (flag, size) in [
        ("--tensor-parallel-size", s.tensor_parallel_size),
        ("--pipeline-parallel-size", s.pipeline_parallel_size),
    ] {
        if size > 1 && s.interconnect.is_none() {
            return Err(VllmArgsError::MissingInterconnect {
                flag: flag.to_string(),
            });
        }
    }
    let (tp0, pp0, link0) = (
        base_settings.tensor_parallel_size.max(1),
        base_settings.pipeline_parallel_size.max(1),
        base_settings.interconnect,
    );
    let (tp1, pp1, link1) = (
        s.tensor_parallel_size.max(1),
        s.pipeline_parallel_size.max(1),
        s.interconnect,
    );
    if (tp0, pp0, link0) != (tp1, pp1, link1) {
        let sb = one_gpu(
            base.step_base_s,
            allreduce_step(tp0, link0) + bubble(pp0, link0),
            tp0,
        );
        let dps = one_gpu(base.decode_per_seq_s, allreduce_token(tp0, link0), tp0);
        let ppt = one_gpu(base.prefill_per_token_s, allreduce_token(tp0, link0), tp0);
        let t = tp1 as f64;
        p.step_base_s = sb / t + allreduce_step(tp1, link1) + bubble(pp1, link1);
        p.decode_per_seq_s = dps / t + allreduce_token(tp1, link1);
        p.prefill_per_token_s = ppt / t + allreduce_token(tp1, link1);
    }
    Ok(())
}

/// `num_gpu_blocks` from memory, `other` (activations, CUDA graphs)
/// calibrated on the base (see the module docs).
fn blocks_from_memory(
    base: &Profile,
    base_settings: &VllmSettings,
    s: &VllmSettings,
    kv_bytes_per_block: f64,
    given: &Given,
) -> Result<usize, VllmArgsError> {
    let mem = base.gpu_memory_bytes as f64;
    let weights = base.weights_bytes as f64;
    let world0 = base_settings.world_size() as f64;
    let world1 = s.world_size() as f64;
    let base_kv_per_gpu = base.num_gpu_blocks as f64 * base.kv_bytes_per_block as f64 / world0;
    let other = mem * base_settings.gpu_memory_utilization - weights / world0 - base_kv_per_gpu;
    let kv_per_gpu = mem * s.gpu_memory_utilization - weights / world1 - other;
    let flag = if given.gpu_memory_utilization.is_some() {
        "--gpu-memory-utilization"
    } else if given.tensor_parallel_size.is_some() {
        "--tensor-parallel-size"
    } else if given.pipeline_parallel_size.is_some() {
        "--pipeline-parallel-size"
    } else if given.kv_cache_dtype.is_some() {
        "--kv-cache-dtype"
    } else {
        "--block-size"
    };
    let blocks = (kv_per_gpu * world1 / kv_bytes_per_block.max(1.0)).floor();
    if !(blocks.is_finite() && blocks >= 1.0) {
        return Err(refused(
            flag,
            format!(
                "no GPU memory left for the KV cache: {:.1} GiB per GPU × {} minus {:.1} GiB of weights per GPU and {:.1} GiB of activations",
                mem / GIB,
                crate::stats::py_float(s.gpu_memory_utilization),
                weights / world1 / GIB,
                other / GIB
            ),
        ));
    }
    Ok(blocks.min(usize::MAX as f64 / 2.0) as usize)
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The checks vLLM makes at start-up, naming the flag to change.
fn check(p: &Profile, given: &Given) -> Result<(), VllmArgsError> {
    let kv_tokens = p.num_gpu_blocks.saturating_mul(p.block_size);
    if p.max_model_len > kv_tokens {
        return Err(refused(
            "--max-model-len",
            format!(
                "{} tokens do not fit the KV cache of {} blocks × {} tokens = {kv_tokens}: \
                 raise --gpu-memory-utilization or lower --max-model-len",
                p.max_model_len, p.num_gpu_blocks, p.block_size
            ),
        ));
    }
    if !p.enable_chunked_prefill && p.max_num_batched_tokens < p.max_model_len {
        return Err(refused(
            "--max-num-batched-tokens",
            format!(
                "{} is below max_model_len {} with chunked prefill off: a whole prompt must fit one step",
                p.max_num_batched_tokens, p.max_model_len
            ),
        ));
    }
    if (given.max_num_batched_tokens.is_some() || given.max_num_seqs.is_some())
        && p.max_num_batched_tokens < p.max_num_seqs
    {
        let flag = if given.max_num_batched_tokens.is_some() {
            "--max-num-batched-tokens"
        } else {
            "--max-num-seqs"
        };
        return Err(refused(
            flag,
            format!(
                "max_num_batched_tokens ({}) must be at least max_num_seqs ({})",
                p.max_num_batched_tokens, p.max_num_seqs
            ),
        ));
    }
    p.validate()
        .map_err(|e| refused("--max-model-len", e.to_string()))
}

/// [`apply_vllm_args`] on a command-line string (split as a shell would).
pub fn parse_vllm_args(
    base: &Profile,
    base_settings: &VllmSettings,
    text: &str,
) -> Result<AppliedArgs, VllmArgsError> {
    apply_vllm_args(base, base_settings, &split_args(text)?)
}

impl fmt::Display for VllmSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gpu_memory_utilization={} cache_dtype={} tp={} pp={}",
            crate::stats::py_float(self.gpu_memory_utilization),
            self.cache_dtype.as_str(),
            self.tensor_parallel_size,
            self.pipeline_parallel_size
        )?;
        if let Some(link) = self.interconnect {
            write!(f, " interconnect={}", link.as_str())?;
        }
        if let Some(n) = self.num_gpu_blocks_override {
            write!(f, " num_gpu_blocks_override={n}")?;
        }
        Ok(())
    }
}

/// `sim.router()` with the `cache_config_info` labels that `settings`
/// decide (`gpu_memory_utilization`, `cache_dtype`,
/// `num_gpu_blocks_override`, `user_specified_block_size`) set on its
/// `/metrics`, as a vLLM started with those flags shows them.
pub fn vllm_router(sim: &Sim, settings: &VllmSettings) -> axum::Router {
    use axum::body::Body;
    use axum::extract::Request;
    use axum::http::{header, StatusCode};
    use axum::middleware::Next;
    use axum::response::{IntoResponse, Response};

    let labels = Arc::new(settings.cache_config_labels());
    sim.router().layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let labels = labels.clone();
            async move {
                let is_metrics = req.uri().path() == "/metrics";
                let resp = next.run(req).await;
                if !is_metrics || !resp.status().is_success() {
                    return resp;
                }
                let (mut parts, body) = resp.into_parts();
                match axum::body::to_bytes(body, usize::MAX).await {
                    Ok(bytes) => {
                        let page = crate::expo::relabel_cache_config(
                            &String::from_utf8_lossy(&bytes),
                            &labels,
                        );
                        parts.headers.remove(header::CONTENT_LENGTH);
                        Response::from_parts(parts, Body::from(page))
                    }
                    Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Profile {
        Profile::named("balanced").unwrap_or_else(|e| panic!("{e}"))
    }

    fn apply(text: &str) -> Result<AppliedArgs, VllmArgsError> {
        parse_vllm_args(&base(), &VllmSettings::default(), text)
    }

    fn ok(text: &str) -> AppliedArgs {
        apply(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn err(text: &str) -> VllmArgsError {
        match apply(text) {
            Ok(a) => panic!("{text}: accepted as {:?}", a.profile),
            Err(e) => e,
        }
    }

    #[test]
    fn no_flags_leave_the_profile_alone() {
        let a = ok("");
        assert_eq!(a.profile, base());
        assert_eq!(a.settings, VllmSettings::default());
        assert!(a.ignored.is_empty());
    }

    #[test]
    fn scheduler_flags_both_spellings() {
        let a = ok("--max-num-seqs 4 --max-num-batched-tokens=512 --max-model-len 2048");
        assert_eq!(a.profile.max_num_seqs, 4);
        assert_eq!(a.profile.max_num_batched_tokens, 512);
        assert_eq!(a.profile.max_model_len, 2048);
        assert_eq!(ok("--max-model-len 2k").profile.max_model_len, 2000);
        // The last of a repeated flag wins, as with argparse.
        assert_eq!(
            ok("--max-num-seqs 4 --max-num-seqs=8").profile.max_num_seqs,
            8
        );
        assert_eq!(
            ok("--max-num-seqs 4").profile.num_gpu_blocks,
            base().num_gpu_blocks
        );
    }

    #[test]
    fn num_gpu_blocks_override_wins_over_memory() {
        let a = ok("--num-gpu-blocks-override 256 --gpu-memory-utilization 0.95");
        assert_eq!(a.profile.num_gpu_blocks, 256);
        assert_eq!(a.settings.num_gpu_blocks_override, Some(256));
        let e = err("--num-gpu-blocks-override 100");
        assert!(
            matches!(&e, VllmArgsError::Refused { flag, .. } if flag == "--max-model-len"),
            "{e}"
        );
        assert!(ok("--num-gpu-blocks-override 100 --max-model-len 1600")
            .profile
            .validate()
            .is_ok());
    }

    #[test]
    fn block_size_keeps_the_bytes_per_token() {
        let a = ok("--block-size 32");
        assert_eq!(a.profile.block_size, 32);
        assert_eq!(a.profile.kv_bytes_per_block, 2 * base().kv_bytes_per_block);
        assert_eq!(a.profile.num_gpu_blocks, base().num_gpu_blocks / 2);
        assert!(a.settings.user_specified_block_size);
        assert!(matches!(
            err("--block-size 12"),
            VllmArgsError::InvalidValue { flag, .. } if flag == "--block-size"
        ));
    }

    #[test]
    fn chunked_prefill_and_prefix_caching_switches() {
        let a = ok("--no-enable-chunked-prefill --no-enable-prefix-caching");
        assert!(!a.profile.enable_chunked_prefill);
        assert!(!a.profile.enable_prefix_caching);
        // Unchunked: the budget grows to a whole prompt, as vLLM's default.
        assert_eq!(a.profile.max_num_batched_tokens, base().max_model_len);
        let a = ok("--no-enable-chunked-prefill --enable-chunked-prefill --enable-prefix-caching");
        assert!(a.profile.enable_chunked_prefill && a.profile.enable_prefix_caching);
        assert_eq!(
            a.profile.max_num_batched_tokens,
            base().max_num_batched_tokens
        );
        assert!(matches!(
            err("--no-enable-chunked-prefill --max-num-batched-tokens 1024"),
            VllmArgsError::Refused { flag, .. } if flag == "--max-num-batched-tokens"
        ));
        assert!(matches!(
            err("--enable-prefix-caching=false"),
            VllmArgsError::UnexpectedValue { flag, .. } if flag == "--enable-prefix-caching"
        ));
    }

    #[test]
    fn gpu_memory_utilization_moves_the_cache_by_that_share_of_memory() {
        let p = base();
        // At the base's own 0.9 nothing changes.
        assert_eq!(
            ok("--gpu-memory-utilization 0.9").profile.num_gpu_blocks,
            p.num_gpu_blocks
        );
        let a = ok("--gpu-memory-utilization=0.95");
        let extra = (0.05 * p.gpu_memory_bytes as f64 / p.kv_bytes_per_block as f64).floor();
        let got = a.profile.num_gpu_blocks as f64 - p.num_gpu_blocks as f64;
        assert!((got - extra).abs() <= 1.0, "{got} vs {extra}");
        assert!((a.settings.gpu_memory_utilization - 0.95).abs() < 1e-12);
        // Too little memory: vLLM refuses to start.
        assert!(matches!(
            err("--gpu-memory-utilization 0.5"),
            VllmArgsError::Refused { flag, .. } if flag == "--gpu-memory-utilization"
        ));
        assert!(matches!(
            err("--gpu-memory-utilization 1.5"),
            VllmArgsError::InvalidValue { flag, .. } if flag == "--gpu-memory-utilization"
        ));
    }

    #[test]
    fn fp8_kv_cache_doubles_the_blocks() {
        let a = ok("--kv-cache-dtype fp8");
        assert_eq!(a.profile.kv_bytes_per_block, base().kv_bytes_per_block / 2);
        assert_eq!(a.profile.num_gpu_blocks, 2 * base().num_gpu_blocks);
        assert_eq!(a.settings.cache_dtype, KvCacheDtype::Fp8);
        assert_eq!(
            ok("--kv-cache-dtype fp8_e5m2").profile.num_gpu_blocks,
            2 * base().num_gpu_blocks
        );
        assert_eq!(
            ok("--kv-cache-dtype bfloat16").profile.num_gpu_blocks,
            base().num_gpu_blocks
        );
        // Back from an fp8 base to 16 bits halves them again.
        let fp8 = ok("--kv-cache-dtype fp8");
        let back =
            parse_vllm_args(&fp8.profile, &fp8.settings, "--kv-cache-dtype auto").expect("ok");
        assert_eq!(back.profile.num_gpu_blocks, base().num_gpu_blocks);
        assert!(matches!(
            err("--kv-cache-dtype int4"),
            VllmArgsError::InvalidValue { flag, .. } if flag == "--kv-cache-dtype"
        ));
    }

    #[test]
    fn tensor_parallel_adds_blocks_and_speeds_steps_nvlink_more_than_pcie() {
        let p = base();
        let nv = ok("--tensor-parallel-size 2 --interconnect nvlink").profile;
        let pcie = ok("-tp=2 --interconnect=pcie").profile;
        assert!(nv.num_gpu_blocks > 2 * p.num_gpu_blocks);
        assert_eq!(nv.num_gpu_blocks, pcie.num_gpu_blocks);
        assert!(nv.step_base_s < p.step_base_s);
        assert!(nv.step_base_s < pcie.step_base_s);
        assert!(nv.prefill_per_token_s < pcie.prefill_per_token_s);
        let expected = p.step_base_s / 2.0 + 0.000_5;
        assert!((nv.step_base_s - expected).abs() < 1e-12);
        assert!(matches!(
            err("--tensor-parallel-size 2"),
            VllmArgsError::MissingInterconnect { flag } if flag == "--tensor-parallel-size"
        ));
        // Back to one GPU from a TP=2 base gives the base costs again.
        let tp2 = ok("--tensor-parallel-size 2 --interconnect nvlink");
        let back =
            parse_vllm_args(&tp2.profile, &tp2.settings, "--tensor-parallel-size 1").expect("ok");
        assert!((back.profile.step_base_s - p.step_base_s).abs() < 1e-12);
        assert!((back.profile.decode_per_seq_s - p.decode_per_seq_s).abs() < 1e-12);
        assert_eq!(back.profile.num_gpu_blocks, p.num_gpu_blocks);
    }

    #[test]
    fn pipeline_parallel_adds_blocks_but_not_speed() {
        let p = base();
        let a = ok("--pipeline-parallel-size 2 --interconnect pcie");
        assert!(a.profile.num_gpu_blocks > 2 * p.num_gpu_blocks);
        assert!(a.profile.step_base_s > p.step_base_s, "the bubble");
        assert!((a.profile.decode_per_seq_s - p.decode_per_seq_s).abs() < 1e-15);
        assert_eq!(a.settings.world_size(), 2);
        assert!(matches!(
            err("-pp 2"),
            VllmArgsError::MissingInterconnect { flag } if flag == "--pipeline-parallel-size"
        ));
        assert!(matches!(
            err("--interconnect infiniband"),
            VllmArgsError::InvalidValue { flag, .. } if flag == "--interconnect"
        ));
    }

    #[test]
    fn scheduling_neutral_flags_are_listed_as_ignored() {
        let a = ok(
            "meta-llama/Llama-3.1-8B-Instruct --port 9000 --host=0.0.0.0 \
             --served-model-name a b --enforce-eager --seed 1 --dtype bfloat16 \
             --trust-remote-code --disable-log-requests --enable-per-request-metrics \
             --uvicorn-log-level warning --api-key sk-secret --max-num-seqs 4",
        );
        assert_eq!(a.profile.max_num_seqs, 4);
        assert_eq!(
            a.ignored,
            vec![
                "meta-llama/Llama-3.1-8B-Instruct (model)",
                "--port 9000",
                "--host 0.0.0.0",
                "--served-model-name a b",
                "--enforce-eager",
                "--seed 1",
                "--dtype bfloat16",
                "--trust-remote-code",
                "--disable-log-requests",
                "--enable-per-request-metrics",
                "--uvicorn-log-level warning",
                "--api-key <redacted>",
            ]
        );
        assert!(!format!("{a:?}").contains("sk-secret"));
        let a = ok("vllm serve m --port 1");
        assert_eq!(a.ignored, vec!["m (model)", "--port 1"]);
    }

    #[test]
    fn errors_name_the_flag() {
        let e = err("--max-num-seqs 4 --port-ignored 1");
        assert_eq!(
            e,
            VllmArgsError::UnknownFlag {
                flag: "--port-ignored".into()
            }
        );
        assert!(e.to_string().contains("--port-ignored"), "{e}");
        assert_eq!(
            err("--max-num-seqs"),
            VllmArgsError::MissingValue {
                flag: "--max-num-seqs".into()
            }
        );
        assert_eq!(
            err("--max-num-seqs --port 1"),
            VllmArgsError::MissingValue {
                flag: "--max-num-seqs".into()
            }
        );
        let e = err("--max-num-seqs four");
        assert!(
            matches!(&e, VllmArgsError::InvalidValue { flag, value, .. } if flag == "--max-num-seqs" && value == "four"),
            "{e}"
        );
        assert!(e.to_string().contains("four"));
        assert!(matches!(
            err("--max-num-seqs 0"),
            VllmArgsError::InvalidValue { .. }
        ));
        assert!(matches!(
            err("--max-num-seqs 4 stray"),
            VllmArgsError::UnexpectedPositional { value } if value == "stray"
        ));
        assert!(matches!(
            err("--max-num-seqs 128 --max-num-batched-tokens 64"),
            VllmArgsError::Refused { flag, .. } if flag == "--max-num-batched-tokens"
        ));
        assert!(matches!(
            err("--max-model-len 1e9"),
            VllmArgsError::InvalidValue { flag, .. } if flag == "--max-model-len"
        ));
        assert!(matches!(
            err("--seed 'unclosed"),
            VllmArgsError::UnclosedQuote { quote: '\'' }
        ));
        assert!(matches!(
            err("--enforce-eager=1"),
            VllmArgsError::UnexpectedValue { .. }
        ));
    }

    #[test]
    fn split_args_handles_quotes() {
        let words = split_args(r#" --a "b c" 'd e' f\ g "h\"i" "" "#).expect("splits");
        assert_eq!(words, vec!["--a", "b c", "d e", "f g", "h\"i", ""]);
        assert!(split_args("\"x").is_err());
    }

    #[test]
    fn settings_labels_read_as_vllm_prints_them() {
        let a = ok("--gpu-memory-utilization 0.92 --kv-cache-dtype fp8 --block-size 16");
        let labels = a.settings.cache_config_labels();
        let get = |k: &str| {
            labels
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("gpu_memory_utilization"), Some("0.92"));
        assert_eq!(get("cache_dtype"), Some("fp8"));
        assert_eq!(get("num_gpu_blocks_override"), Some("None"));
        assert_eq!(get("user_specified_block_size"), Some("True"));
        let json = serde_json::to_string(&a.settings).expect("serialises");
        let back: VllmSettings = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, a.settings);
        let empty: VllmSettings = serde_json::from_str("{}").expect("defaults");
        assert_eq!(empty, VllmSettings::default());
    }
}
