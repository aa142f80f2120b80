//! `/api/v1/metadata`: metric families and their types. The store keeps
//! sample lines, not HELP/TYPE lines, so the type of a scraped family is
//! read from its sample names (`_bucket` with `le`: histogram, `_total`:
//! counter, else unknown); llmwatch's own series carry their help text.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method};
use serde_json::{json, Value};

use super::{request, series_in, success, PromResult};
use llmwatch_store::Store;

/// llmwatch's own families: (name, type, help).
const OWN: &[(&str, &str, &str)] = &[
    (
        "up",
        "gauge",
        "1 when llmwatch's scrape of the target succeeded, else 0.",
    ),
    (
        "scrape_duration_seconds",
        "gauge",
        "How long llmwatch's scrape of the target took.",
    ),
    (
        "llmwatch_canary_ttft_seconds",
        "gauge",
        "Time to first token of one canary probe (successful probes), at its send time.",
    ),
    (
        "llmwatch_canary_tpot_seconds",
        "gauge",
        "Time per output token of one canary probe (successful probes).",
    ),
    (
        "llmwatch_canary_e2e_seconds",
        "gauge",
        "End-to-end latency of one canary probe (successful probes).",
    ),
    (
        "llmwatch_canary_success",
        "gauge",
        "1 when a canary probe succeeded, 0 when it failed, at its send time.",
    ),
    (
        "llmwatch_signal",
        "gauge",
        "llmwatch's derived signals by name (label `signal`), on a 15 s grid.",
    ),
];

/// The family a sample name belongs to, and its type, given every name seen.
fn family_of<'a>(name: &'a str, names: &BTreeMap<&str, ()>) -> (&'a str, &'static str) {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if names.contains_key(format!("{base}_bucket").as_str()) {
                return (base, "histogram");
            }
        }
    }
    if name.ends_with("_total") {
        return (name, "counter");
    }
    (name, "unknown")
}

pub async fn metadata(State(store): State<Store>, RawQuery(raw): RawQuery) -> PromResult {
    let req = request(&store, &Method::GET, &HeaderMap::new(), raw, &Bytes::new())?;
    let limit = req.form.limit()?;
    let wanted = req.form.get("metric").filter(|m| !m.is_empty());
    let series = series_in(&req.store, &req.form, &[]).await?;
    let names: BTreeMap<&str, ()> = series
        .iter()
        .filter_map(|labels| labels.iter().find(|(k, _)| k == "__name__"))
        .map(|(_, v)| (v.as_str(), ()))
        .collect();
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for name in names.keys() {
        let (family, kind) = match OWN.iter().find(|(n, _, _)| n == name) {
            Some((n, t, help)) => {
                out.insert(
                    n.to_string(),
                    json!([{"type": t, "help": help, "unit": ""}]),
                );
                continue;
            }
            None => family_of(name, &names),
        };
        out.entry(family.to_string())
            .or_insert_with(|| json!([{"type": kind, "help": "", "unit": ""}]));
    }
    if let Some(metric) = wanted {
        out.retain(|k, _| k == metric);
    }
    if let Some(n) = limit {
        out = out.into_iter().take(n).collect();
    }
    success(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_from_sample_names() {
        let names: BTreeMap<&str, ()> = [
            "vllm:e2e_request_latency_seconds_bucket",
            "vllm:e2e_request_latency_seconds_sum",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:prompt_tokens_total",
            "vllm:num_requests_running",
            "thing_count",
        ]
        .into_iter()
        .map(|n| (n, ()))
        .collect();
        assert_eq!(
            family_of("vllm:e2e_request_latency_seconds_sum", &names),
            ("vllm:e2e_request_latency_seconds", "histogram")
        );
        assert_eq!(family_of("vllm:prompt_tokens_total", &names).1, "counter");
        assert_eq!(family_of("thing_count", &names), ("thing_count", "unknown"));
    }
}
