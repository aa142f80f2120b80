//! Experiment cards: what a sweep ran on, so two sweeps can be compared
//! knowing what changed between them.

use std::collections::{BTreeMap, BTreeSet};

/// Card fields that follow from other fields rather than being chosen
/// (vLLM's `num_gpu_blocks` follows from GPU memory, model, max-model-len,
/// `gpu_memory_utilization`, KV dtype). They are listed when they differ but
/// do not count toward the "more than one change" warning.
pub const DERIVED_CARD_FIELDS: &[&str] = &["num_gpu_blocks", "kv_cache_tokens"];

/// Everything that describes the setup of one sweep. Filled from what the
/// server and GPUs report (info metrics, DCGM/NVML labels, `/v1/models`,
/// `/version`) plus what the user adds; `None` is "not known".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExperimentCard {
    pub model: Option<String>,
    pub quantization: Option<String>,
    pub max_context_len: Option<u64>,
    pub gpu_count: Option<u32>,
    pub gpu_type: Option<String>,
    pub tensor_parallel: Option<u32>,
    pub pipeline_parallel: Option<u32>,
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Sampling settings in words (e.g. "max_tokens=512, ignore_eos").
    pub sampling: Option<String>,
    pub temperature: Option<f64>,
    /// random, shared-prefix, long-context RAG.
    pub prompt_kind: Option<String>,
    /// vLLM `cache_config_info` `cache_dtype` ("auto", "fp8", …).
    pub kv_cache_dtype: Option<String>,
    /// vLLM `cache_config_info` `block_size` (tokens per KV block).
    pub kv_block_size: Option<u32>,
    /// vLLM `cache_config_info` `num_gpu_blocks` (derived, see
    /// [`DERIVED_CARD_FIELDS`]).
    pub num_gpu_blocks: Option<u64>,
    /// Data-parallel engines behind the endpoint (vLLM: one
    /// `cache_config_info` sample per engine, each with its own cache).
    pub data_parallel: Option<u32>,
    /// The KV cache in tokens, for engines that report tokens rather than
    /// blocks (SGLang `max_total_num_tokens`; derived).
    pub kv_cache_tokens: Option<u64>,
    /// The most sequences the engine runs at once: llama-server's
    /// `total_slots` in `/props`, or what the user states (vLLM
    /// `--max-num-seqs`, SGLang `--max-running-requests`).
    pub max_num_seqs: Option<u64>,
    /// vLLM `cache_config_info` `enable_prefix_caching`.
    pub prefix_caching: Option<bool>,
    /// vLLM `cache_config_info` `gpu_memory_utilization`.
    pub gpu_memory_utilization: Option<f64>,
    /// Free-form fields the user adds; compared as `user.<key>`.
    pub user: BTreeMap<String, String>,
}

fn s<T: ToString>(v: &Option<T>) -> Option<String> {
    v.as_ref().map(ToString::to_string)
}

impl ExperimentCard {
    /// Every field as `(name, value as text)`, in a fixed order, user fields
    /// last as `user.<key>`.
    pub fn fields(&self) -> Vec<(String, Option<String>)> {
        let mut out: Vec<(String, Option<String>)> = vec![
            ("model".into(), self.model.clone()),
            ("quantization".into(), self.quantization.clone()),
            ("max_context_len".into(), s(&self.max_context_len)),
            ("gpu_count".into(), s(&self.gpu_count)),
            ("gpu_type".into(), self.gpu_type.clone()),
            ("tensor_parallel".into(), s(&self.tensor_parallel)),
            ("pipeline_parallel".into(), s(&self.pipeline_parallel)),
            ("engine".into(), self.engine.clone()),
            ("engine_version".into(), self.engine_version.clone()),
            ("driver_version".into(), self.driver_version.clone()),
            ("cuda_version".into(), self.cuda_version.clone()),
            ("input_tokens".into(), s(&self.input_tokens)),
            ("output_tokens".into(), s(&self.output_tokens)),
            ("sampling".into(), self.sampling.clone()),
            ("temperature".into(), s(&self.temperature)),
            ("prompt_kind".into(), self.prompt_kind.clone()),
            ("kv_cache_dtype".into(), self.kv_cache_dtype.clone()),
            ("kv_block_size".into(), s(&self.kv_block_size)),
            ("num_gpu_blocks".into(), s(&self.num_gpu_blocks)),
            ("data_parallel".into(), s(&self.data_parallel)),
            ("kv_cache_tokens".into(), s(&self.kv_cache_tokens)),
            ("max_num_seqs".into(), s(&self.max_num_seqs)),
            ("prefix_caching".into(), s(&self.prefix_caching)),
            (
                "gpu_memory_utilization".into(),
                s(&self.gpu_memory_utilization),
            ),
        ];
        out.extend(
            self.user
                .iter()
                .map(|(k, v)| (format!("user.{k}"), Some(v.clone()))),
        );
        out
    }

    /// Fills still-unknown fields from the labels of vLLM's
    /// `vllm:cache_config_info` gauge (`block_size`, `cache_dtype`,
    /// `num_gpu_blocks`, `enable_prefix_caching`, `gpu_memory_utilization`).
    /// A field already set (e.g. by the user) is kept; an unparseable label
    /// is skipped. Sets `engine = "vllm"` if unknown, since only vLLM has
    /// this metric.
    pub fn apply_vllm_cache_config(&mut self, labels: &[(String, String)]) {
        for (k, v) in labels {
            let v = v.trim();
            match k.as_str() {
                "block_size" => fill(&mut self.kv_block_size, v.parse().ok()),
                "cache_dtype" if !v.is_empty() => fill(&mut self.kv_cache_dtype, Some(v.into())),
                "num_gpu_blocks" => fill(&mut self.num_gpu_blocks, v.parse().ok()),
                "enable_prefix_caching" => fill(&mut self.prefix_caching, parse_bool(v)),
                "gpu_memory_utilization" => fill(
                    &mut self.gpu_memory_utilization,
                    v.parse::<f64>().ok().filter(|x| x.is_finite()),
                ),
                _ => {}
            }
        }
        if !labels.is_empty() {
            fill(&mut self.engine, Some("vllm".into()));
        }
    }

    /// Fills still-unknown GPU fields from dcgm-exporter series labels, one
    /// label list per series: `gpu_count` from the distinct GPUs (by `UUID`,
    /// else `Hostname` + `gpu`, else `gpu`, else `device`), `gpu_type` from
    /// `modelName` (distinct names joined with " + " on a mixed host), and
    /// `driver_version` from `DCGM_FI_DRIVER_VERSION` (only present when the
    /// exporter is configured to attach it). CUDA version is not a DCGM label;
    /// it comes from NVML or the user.
    pub fn apply_dcgm_labels(&mut self, series: &[Vec<(String, String)>]) {
        let mut gpus = BTreeSet::new();
        let mut models = BTreeSet::new();
        let mut drivers = BTreeSet::new();
        for labels in series {
            let get = |name: &str| {
                labels
                    .iter()
                    .find(|(k, v)| k == name && !v.trim().is_empty())
                    .map(|(_, v)| v.trim().to_string())
            };
            let key = get("UUID")
                .map(|u| format!("uuid:{u}"))
                .or_else(|| {
                    let gpu = get("gpu")?;
                    Some(match get("Hostname") {
                        Some(h) => format!("host:{h}/gpu:{gpu}"),
                        None => format!("gpu:{gpu}"),
                    })
                })
                .or_else(|| get("device").map(|d| format!("device:{d}")));
            if let Some(key) = key {
                gpus.insert(key);
            }
            if let Some(m) = get("modelName") {
                models.insert(m);
            }
            if let Some(d) = get("DCGM_FI_DRIVER_VERSION") {
                drivers.insert(d);
            }
        }
        if !gpus.is_empty() {
            fill(&mut self.gpu_count, u32::try_from(gpus.len()).ok());
        }
        if !models.is_empty() {
            fill(
                &mut self.gpu_type,
                Some(models.into_iter().collect::<Vec<_>>().join(" + ")),
            );
        }
        if !drivers.is_empty() {
            fill(
                &mut self.driver_version,
                Some(drivers.into_iter().collect::<Vec<_>>().join(" / ")),
            );
        }
    }
}

fn fill<T>(slot: &mut Option<T>, value: Option<T>) {
    if slot.is_none() {
        *slot = value;
    }
}

/// Python's `str(bool)` ("True"/"False") as vLLM writes it, plus the usual
/// spellings.
fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// A card from vLLM's `cache_config_info` labels and dcgm-exporter series
/// labels; the caller then adds what the user and the other endpoints
/// (`/v1/models`, `/version`) say.
pub fn card_from_info(
    vllm_cache_config: &[(String, String)],
    dcgm_series: &[Vec<(String, String)>],
) -> ExperimentCard {
    let mut card = ExperimentCard::default();
    card.apply_vllm_cache_config(vllm_cache_config);
    card.apply_dcgm_labels(dcgm_series);
    card
}

/// The fields that differ between two cards, and a warning when more than
/// one changed.
#[derive(Debug, Clone, PartialEq)]
pub struct CardDiff {
    /// `(field, value in a, value in b)` for every differing field, in card
    /// order; `None` is "not known on that card".
    pub differing: Vec<(String, Option<String>, Option<String>)>,
    /// Set when more than one field changed: the curves then differ for
    /// reasons that cannot be told apart.
    pub warning: Option<String>,
}

/// Compares two cards. Every differing field is listed, but the warning
/// counts only *changes*: fields known on both cards, not derived (see
/// [`DERIVED_CARD_FIELDS`]). A field known on one card only is listed but
/// not counted — one sweep lacking a GPU exporter is not a change of setup.
pub fn compare_cards(a: &ExperimentCard, b: &ExperimentCard) -> CardDiff {
    let fa = a.fields();
    let fb = b.fields();
    let mut names: Vec<String> = fa.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &fb {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let lookup = |fields: &[(String, Option<String>)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
    };
    let mut differing = Vec::new();
    let mut changed = Vec::new();
    for name in names {
        let va = lookup(&fa, &name);
        let vb = lookup(&fb, &name);
        if va != vb {
            if va.is_some() && vb.is_some() && !DERIVED_CARD_FIELDS.contains(&name.as_str()) {
                changed.push(name.clone());
            }
            differing.push((name, va, vb));
        }
    }
    let warning = (changed.len() > 1).then(|| {
        format!(
            "{} fields changed ({}): change one thing at a time, or the difference between the \
             curves cannot be attributed to any one of them",
            changed.len(),
            changed.join(", ")
        )
    });
    CardDiff { differing, warning }
}
