//! The experiment card of a sweep: what it ran on, read from what the server
//! and GPUs report (`/v1/models`, `/version`, info metrics on `/metrics`,
//! dcgm-exporter labels), the sweep's own settings, and what the user adds.
//! Every fetch is best-effort: a field the target does not expose stays
//! unknown, it never fails the sweep.

use std::time::Duration;

use llmwatch_core::analysis::{card_from_info, ExperimentCard};
use llmwatch_core::catalog::{detect_engine, engine_capacity, Engine};
use llmwatch_core::exposition::{detect_format, parse_lenient, Exposition};
use serde_json::Value;

use crate::sources::scrape::fetch_page;
use crate::sources::server_facts::{llamacpp_slots, model_entry, server_version};

/// Metrics pages larger than this are refused.
const MAX_PAGE_BYTES: u64 = 16 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// A user card field that cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("card field {field:?}: {why}")]
pub struct CardFieldError {
    pub field: String,
    pub why: String,
}

/// Sets one card field by its name in [`ExperimentCard::fields`]; a name
/// that is not a card field (or is spelled `user.<key>`) becomes a user
/// field. Overwrites what the server reported: the user knows better (e.g.
/// a quantization the server does not label).
pub fn set_card_field(
    card: &mut ExperimentCard,
    key: &str,
    value: &str,
) -> Result<(), CardFieldError> {
    let key = key.trim();
    let value = value.trim();
    let bad = |why: &str| CardFieldError {
        field: key.to_string(),
        why: why.to_string(),
    };
    if key.is_empty() {
        return Err(bad("empty field name"));
    }
    let text = || Some(value.to_string());
    let int = || {
        value
            .parse::<u64>()
            .map(Some)
            .map_err(|_| bad("expected a whole number"))
    };
    let small = || {
        value
            .parse::<u32>()
            .map(Some)
            .map_err(|_| bad("expected a whole number"))
    };
    match key {
        "model" => card.model = text(),
        "quantization" => card.quantization = text(),
        "max_context_len" => card.max_context_len = int()?,
        "gpu_count" => card.gpu_count = small()?,
        "gpu_type" => card.gpu_type = text(),
        "tensor_parallel" => card.tensor_parallel = small()?,
        "pipeline_parallel" => card.pipeline_parallel = small()?,
        "engine" => card.engine = text(),
        "engine_version" => card.engine_version = text(),
        "driver_version" => card.driver_version = text(),
        "cuda_version" => card.cuda_version = text(),
        "input_tokens" => card.input_tokens = int()?,
        "output_tokens" => card.output_tokens = int()?,
        "sampling" => card.sampling = text(),
        "temperature" => {
            card.temperature = Some(
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite())
                    .ok_or_else(|| bad("expected a number"))?,
            )
        }
        "prompt_kind" => card.prompt_kind = text(),
        "kv_cache_dtype" => card.kv_cache_dtype = text(),
        "kv_block_size" => card.kv_block_size = small()?,
        "num_gpu_blocks" => card.num_gpu_blocks = int()?,
        "data_parallel" => card.data_parallel = small()?,
        "kv_cache_tokens" => card.kv_cache_tokens = int()?,
        "max_num_seqs" => card.max_num_seqs = int()?,
        "prefix_caching" => {
            card.prefix_caching = Some(match value.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => return Err(bad("expected true or false")),
            })
        }
        "gpu_memory_utilization" => {
            card.gpu_memory_utilization = Some(
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite())
                    .ok_or_else(|| bad("expected a number"))?,
            )
        }
        other => {
            let user = other.strip_prefix("user.").unwrap_or(other).trim();
            if user.is_empty() {
                return Err(bad("empty user field name"));
            }
            card.user.insert(user.to_string(), value.to_string());
        }
    }
    Ok(())
}

/// Parses `key=value` (the CLI's `--card`).
pub fn parse_card_arg(arg: &str) -> Result<(String, String), CardFieldError> {
    match arg.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(CardFieldError {
            field: arg.to_string(),
            why: "expected key=value".to_string(),
        }),
    }
}

/// The card as a JSON object of its known fields (unknown ones left out).
pub fn card_to_json(card: &ExperimentCard) -> Value {
    let map: serde_json::Map<String, Value> = card
        .fields()
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, Value::String(v))))
        .collect();
    Value::Object(map)
}

/// Reads back what [`card_to_json`] wrote. A field that no longer parses
/// (a stored card from another version) is skipped rather than failing the
/// whole comparison.
pub fn card_from_json(value: &Value) -> ExperimentCard {
    let mut card = ExperimentCard::default();
    if let Some(map) = value.as_object() {
        for (k, v) in map {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = set_card_field(&mut card, k, &text);
        }
    }
    card
}

/// What the sweep itself decides, to put on its card.
pub struct CardSettings<'a> {
    pub model: &'a str,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub prompt_kind: String,
    pub temperature: f32,
    pub user: &'a [(String, String)],
}

/// Fills a card from the target and the GPU page, then the sweep's settings
/// and the user's fields (which win).
pub async fn collect_card(
    http: &reqwest::Client,
    base_url: &str,
    metrics_url: &str,
    gpu_url: Option<&str>,
    settings: &CardSettings<'_>,
) -> Result<ExperimentCard, CardFieldError> {
    let base = base_url.trim_end_matches('/').trim_end_matches("/v1");
    let metrics = fetch(http, metrics_url, MAX_PAGE_BYTES).await;
    let gpu = match gpu_url {
        Some(url) => fetch(http, url, MAX_PAGE_BYTES).await,
        None => None,
    };
    let parsed = metrics.as_ref().map(|(body, ct)| {
        let format = detect_format(ct.as_deref(), body);
        parse_lenient(body, format).0
    });
    let gpu_parsed = gpu.as_ref().map(|(body, ct)| {
        let format = detect_format(ct.as_deref(), body);
        parse_lenient(body, format).0
    });

    let cache_config = parsed
        .as_ref()
        .map(|page| info_labels(page, "cache_config_info"))
        .unwrap_or_default();
    let dcgm_series: Vec<Vec<(String, String)>> = gpu_parsed
        .as_ref()
        .map(|page| {
            page.families
                .iter()
                .flat_map(|f| f.samples.iter())
                .map(|s| {
                    s.labels
                        .iter()
                        .map(|l| (l.name.to_string(), l.value.to_string()))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    let mut card = card_from_info(&cache_config, &dcgm_series);

    if let Some(page) = &parsed {
        let engine = detect_engine(page);
        if card.engine.is_none() {
            card.engine = Some(engine.as_str().to_string());
        }
        apply_other_info(&mut card, page);
        apply_capacity(&mut card, page);
        if engine == Engine::Llamacpp && card.max_num_seqs.is_none() {
            card.max_num_seqs = llamacpp_slots(http, base).await;
        }
    }

    // The served model's context length and the server's version.
    if card.max_context_len.is_none() {
        card.max_context_len = model_entry(http, base, settings.model)
            .await
            .and_then(|m| m.get("max_model_len").and_then(Value::as_u64));
    }
    if let Some(version) = server_version(http, base).await {
        card.engine_version = Some(version);
    }

    card.model = Some(settings.model.to_string());
    card.input_tokens = Some(u64::from(settings.input_tokens));
    card.output_tokens = Some(u64::from(settings.output_tokens));
    card.prompt_kind = Some(settings.prompt_kind.clone());
    card.temperature = Some(f64::from(settings.temperature));
    card.sampling = Some(format!(
        "max_tokens={0}, min_tokens={0}, ignore_eos",
        settings.output_tokens
    ));
    for (k, v) in settings.user {
        set_card_field(&mut card, k, v)?;
    }
    Ok(card)
}

/// The labels of the first sample of the info family whose name ends with
/// `suffix` (e.g. `vllm:cache_config_info`).
fn info_labels(page: &Exposition<'_>, suffix: &str) -> Vec<(String, String)> {
    page.families
        .iter()
        .find(|f| f.name.ends_with(suffix))
        .and_then(|f| f.samples.first())
        .map(|s| {
            s.labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The cache as the live verdict reads it (`engine_capacity`), so a sweep
/// and the live task do the same arithmetic: the number of data-parallel
/// engines (each reports its own `num_gpu_blocks`) and a cache reported in
/// tokens.
fn apply_capacity(card: &mut ExperimentCard, page: &Exposition<'_>) {
    let capacity = engine_capacity(page);
    if card.data_parallel.is_none() && capacity.engines > 0 {
        card.data_parallel = u32::try_from(capacity.engines).ok();
    }
    if card.kv_cache_tokens.is_none() {
        card.kv_cache_tokens = capacity.kv_tokens;
    }
}

/// Other `*_info` families (model config, NIM's, TGI's…): the labels that
/// name a card field fill it when still unknown; `model_name` on any engine
/// metric names the model.
fn apply_other_info(card: &mut ExperimentCard, page: &Exposition<'_>) {
    for family in page.families.iter().filter(|f| f.name.ends_with("_info")) {
        for sample in &family.samples {
            for label in &sample.labels {
                let v = label.value.trim();
                if v.is_empty() || v.eq_ignore_ascii_case("none") {
                    continue;
                }
                match label.name.as_ref() {
                    "quantization" if card.quantization.is_none() => {
                        card.quantization = Some(v.to_string())
                    }
                    "tensor_parallel_size" if card.tensor_parallel.is_none() => {
                        card.tensor_parallel = v.parse().ok()
                    }
                    "pipeline_parallel_size" if card.pipeline_parallel.is_none() => {
                        card.pipeline_parallel = v.parse().ok()
                    }
                    "max_model_len" if card.max_context_len.is_none() => {
                        card.max_context_len = v.parse().ok()
                    }
                    "cuda_version" if card.cuda_version.is_none() => {
                        card.cuda_version = Some(v.to_string())
                    }
                    _ => {}
                }
            }
        }
    }
}

async fn fetch(http: &reqwest::Client, url: &str, max: u64) -> Option<(Vec<u8>, Option<String>)> {
    match fetch_page(http, url, FETCH_TIMEOUT, max).await {
        Ok(page) => Some((page.body, page.content_type)),
        Err(err) => {
            tracing::debug!(%url, error = %err, "experiment card: fetch failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_round_trips_through_json_and_user_fields_land() {
        let mut card = ExperimentCard::default();
        set_card_field(&mut card, "quantization", "fp8").expect("known field");
        set_card_field(&mut card, "tensor_parallel", "2").expect("number");
        set_card_field(&mut card, "prefix_caching", "True").expect("bool");
        set_card_field(&mut card, "note", "after driver update").expect("user field");
        set_card_field(&mut card, "user.rack", "b7").expect("user field");
        assert!(set_card_field(&mut card, "gpu_count", "two").is_err());
        assert_eq!(
            card.user.get("note").map(String::as_str),
            Some("after driver update")
        );
        let back = card_from_json(&card_to_json(&card));
        assert_eq!(back, card);
        assert!(parse_card_arg("novalue").is_err());
        assert_eq!(
            parse_card_arg("a = b=c").expect("split on the first ="),
            ("a".to_string(), "b=c".to_string())
        );
    }
}
