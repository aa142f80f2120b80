//! What a variant changed from the baseline: the resolved card (what the
//! server reports of itself) plus the plan's flags and environment. A flag
//! the card also shows (`--kv-cache-dtype` → `kv_cache_dtype`) is one
//! setting, not two; a flag the card cannot see (`--max-num-seqs`) counts
//! by its name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::{ExperimentCard, DERIVED_CARD_FIELDS};

/// One changed setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingChange {
    /// A card field (`kv_cache_dtype`), a flag (`--max-num-seqs`) or an
    /// environment variable (`env:NAME`).
    pub setting: String,
    pub baseline: Option<String>,
    pub variant: Option<String>,
}

/// One side of the comparison: what the server reported (when started)
/// and what the plan gave it.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'a> {
    pub card: Option<&'a ExperimentCard>,
    pub args: &'a [String],
    /// Environment variable names with a fingerprint of their value (never
    /// the value: it may be a secret).
    pub env: &'a BTreeMap<String, String>,
}

/// The card field a vLLM flag sets, where the card shows it.
pub fn card_field_of_flag(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "--kv-cache-dtype" => "kv_cache_dtype",
        "--block-size" => "kv_block_size",
        "--num-gpu-blocks-override" => "num_gpu_blocks",
        "--enable-prefix-caching" | "--no-enable-prefix-caching" => "prefix_caching",
        "--gpu-memory-utilization" => "gpu_memory_utilization",
        "--max-model-len" => "max_context_len",
        "--tensor-parallel-size" | "-tp" => "tensor_parallel",
        "--pipeline-parallel-size" | "-pp" => "pipeline_parallel",
        "--quantization" | "-q" => "quantization",
        _ => return None,
    })
}

/// Flags as `flag → value` (`""` for a switch); `--flag=value` and
/// `--flag value` both work. A prefix-caching switch is stored as
/// `--enable-prefix-caching = true/false` so on and off compare.
pub fn parse_flags(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if !arg.starts_with('-') {
            continue;
        }
        let (flag, value) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), v.to_string()),
            None => match args.get(i) {
                Some(next) if !next.starts_with("--") => {
                    i += 1;
                    (arg.clone(), next.clone())
                }
                _ => (arg.clone(), String::new()),
            },
        };
        match flag.as_str() {
            "--enable-prefix-caching" => out.insert(flag, "true".into()),
            "--no-enable-prefix-caching" => {
                out.insert("--enable-prefix-caching".into(), "false".into())
            }
            _ => out.insert(flag, value),
        };
    }
    out
}

/// The settings that differ between the baseline and a variant. Card
/// fields count when known on both cards and not derived (see
/// [`DERIVED_CARD_FIELDS`]) — except that a derived field a flag set on
/// purpose (`--num-gpu-blocks-override`) is a change.
pub fn changed_settings(baseline: Resolved<'_>, variant: Resolved<'_>) -> Vec<SettingChange> {
    let mut changes: Vec<SettingChange> = Vec::new();
    let base_flags = parse_flags(baseline.args);
    let var_flags = parse_flags(variant.args);
    let mut flag_fields: Vec<&'static str> = Vec::new();
    let mut names: Vec<&String> = base_flags.keys().chain(var_flags.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let (a, b) = (base_flags.get(name), var_flags.get(name));
        if a == b {
            continue;
        }
        if let Some(field) = card_field_of_flag(name) {
            flag_fields.push(field);
            // The card's value says it better, when both servers told it.
            if let (Some(ca), Some(cb)) = (baseline.card, variant.card) {
                if card_value(ca, field).is_some() && card_value(cb, field).is_some() {
                    continue;
                }
            }
        }
        changes.push(SettingChange {
            setting: name.clone(),
            baseline: a.cloned(),
            variant: b.cloned(),
        });
    }
    if let (Some(ca), Some(cb)) = (baseline.card, variant.card) {
        for ((name, va), (_, vb)) in ca.fields().into_iter().zip(cb.fields()) {
            let derived = DERIVED_CARD_FIELDS.contains(&name.as_str())
                && !flag_fields.contains(&name.as_str());
            if va != vb && va.is_some() && vb.is_some() && !derived {
                changes.push(SettingChange {
                    setting: name,
                    baseline: va,
                    variant: vb,
                });
            }
        }
    }
    let mut env_names: Vec<&String> = baseline.env.keys().chain(variant.env.keys()).collect();
    env_names.sort();
    env_names.dedup();
    for name in env_names {
        let (a, b) = (baseline.env.get(name), variant.env.get(name));
        if a != b {
            changes.push(SettingChange {
                setting: format!("env:{name}"),
                baseline: a.map(|_| "set".to_string()),
                variant: b.map(|_| if a.is_some() { "changed" } else { "set" }.to_string()),
            });
        }
    }
    changes
}

fn card_value(card: &ExperimentCard, field: &str) -> Option<String> {
    card.fields()
        .into_iter()
        .find(|(n, _)| n == field)
        .and_then(|(_, v)| v)
}

/// Where the card contradicts the plan's flags (a server the user restarts
/// by hand may not have been given them): `field: card says X, plan says Y`.
pub fn card_contradicts_flags(card: &ExperimentCard, args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (flag, value) in parse_flags(args) {
        let Some(field) = card_field_of_flag(&flag) else {
            continue;
        };
        let Some(seen) = card_value(card, field) else {
            continue;
        };
        let same = match (seen.parse::<f64>(), value.parse::<f64>()) {
            (Ok(a), Ok(b)) => (a - b).abs() < 1e-9,
            _ => seen.eq_ignore_ascii_case(&value),
        };
        if !same {
            out.push(format!(
                "{field}: the server reports {seen}, the plan says {flag} {value}"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn one_flag_is_one_change_even_where_the_card_shows_it() {
        let env = BTreeMap::new();
        let base_card = ExperimentCard {
            kv_cache_dtype: Some("auto".into()),
            num_gpu_blocks: Some(100),
            ..ExperimentCard::default()
        };
        let fp8_card = ExperimentCard {
            kv_cache_dtype: Some("fp8".into()),
            num_gpu_blocks: Some(200),
            ..ExperimentCard::default()
        };
        let (a, b) = (
            args("--max-num-seqs 4"),
            args("--max-num-seqs 4 --kv-cache-dtype fp8"),
        );
        let side = |card, args| Resolved {
            card: Some(card),
            args,
            env: &env,
        };
        let changes = changed_settings(side(&base_card, &a), side(&fp8_card, &b));
        let names: Vec<&str> = changes.iter().map(|c| c.setting.as_str()).collect();
        assert_eq!(names, ["kv_cache_dtype"], "num_gpu_blocks follows from it");

        let two = args("--max-num-seqs 16 --kv-cache-dtype=fp8");
        let changes = changed_settings(side(&base_card, &a), side(&fp8_card, &two));
        let names: Vec<&str> = changes.iter().map(|c| c.setting.as_str()).collect();
        assert_eq!(names, ["--max-num-seqs", "kv_cache_dtype"]);

        let blocks = args("--max-num-seqs 4 --num-gpu-blocks-override 200");
        let card = ExperimentCard {
            num_gpu_blocks: Some(200),
            ..base_card.clone()
        };
        let changes = changed_settings(side(&base_card, &a), side(&card, &blocks));
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].setting, "num_gpu_blocks");
    }

    #[test]
    fn env_changes_count_without_their_values_and_the_card_is_checked() {
        let none = BTreeMap::new();
        let token: BTreeMap<String, String> =
            [("HF_TOKEN".to_string(), "secret".to_string())].into();
        let changes = changed_settings(
            Resolved {
                card: None,
                args: &[],
                env: &none,
            },
            Resolved {
                card: None,
                args: &[],
                env: &token,
            },
        );
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].setting, "env:HF_TOKEN");
        assert!(!format!("{changes:?}").contains("secret"));

        let card = ExperimentCard {
            kv_cache_dtype: Some("auto".into()),
            gpu_memory_utilization: Some(0.9),
            ..ExperimentCard::default()
        };
        let wrong = card_contradicts_flags(
            &card,
            &args("--kv-cache-dtype fp8 --gpu-memory-utilization 0.90"),
        );
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert!(wrong[0].contains("kv_cache_dtype"));
    }
}
