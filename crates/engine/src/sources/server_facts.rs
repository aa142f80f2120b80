//! What a server says about itself, read the same way by the canary, the
//! sweep (its card), the live verdict and the experiments: the model it
//! serves (`/v1/models`), its context length (`max_model_len`, or
//! llama-server's `/props`), its version (`/version`) and its KV cache's
//! size (its `/metrics` page). Every read has a timeout and a size limit.

use std::time::Duration;

use llmwatch_core::analysis::EngineCapacity;
use llmwatch_core::catalog::{engine_capacity, Engine};
use llmwatch_core::exposition::{detect_format, parse_lenient};
use llmwatch_core::redact::{redact_url, redact_urls_in};
use serde_json::Value;

use crate::sources::scrape::{fetch_page, FetchError};

/// How long one read may take.
pub const FACT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JSON answer read (`/v1/models`, `/props`, `/version`).
pub const MAX_JSON_BYTES: u64 = 1 << 20;
/// The largest metrics page read for the capacity.
pub const MAX_PAGE_BYTES: u64 = 16 << 20;

/// Why a server's fact could not be read; each names the URL asked.
#[derive(Debug, thiserror::Error)]
pub enum FactError {
    #[error("{url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: FetchError,
    },
    #[error("{url}: not JSON: {source}")]
    NotJson {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{url}: no model in `data`")]
    NoModel { url: String },
}

/// GETs `url` as JSON, within [`FACT_TIMEOUT`] and [`MAX_JSON_BYTES`].
pub async fn get_json(client: &reqwest::Client, url: &str) -> Result<Value, FactError> {
    let page = fetch_page(client, url, FACT_TIMEOUT, MAX_JSON_BYTES)
        .await
        .map_err(|source| FactError::Fetch {
            url: url.to_string(),
            source,
        })?;
    serde_json::from_slice(&page.body).map_err(|source| FactError::NotJson {
        url: url.to_string(),
        source,
    })
}

fn root(base_url: &str) -> &str {
    base_url.trim_end_matches('/').trim_end_matches("/v1")
}

/// Asks `/v1/models` for the first model a server serves.
pub async fn discover_model(client: &reqwest::Client, base_url: &str) -> Result<String, FactError> {
    let url = llmwatch_config::join_url(root(base_url), "/v1/models");
    let json = get_json(client, &url).await?;
    json.pointer("/data/0/id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or(FactError::NoModel { url })
}

/// `model`'s entry of `/v1/models` (else the first), if the server answers.
pub async fn model_entry(client: &reqwest::Client, base_url: &str, model: &str) -> Option<Value> {
    let url = llmwatch_config::join_url(root(base_url), "/v1/models");
    let json = get_json(client, &url).await.ok()?;
    let entries = json.get("data").and_then(Value::as_array)?;
    entries
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or_else(|| entries.first())
        .cloned()
}

/// The model's context in tokens and where it was read: vLLM/SGLang's
/// `max_model_len` in `/v1/models`, else llama-server's per-slot `n_ctx`
/// in `/props`. `None` when the target states neither.
pub async fn context_limit(
    client: &reqwest::Client,
    base_url: &str,
    model: &str,
) -> Option<(u64, String)> {
    if let Some(len) = model_entry(client, base_url, model)
        .await
        .and_then(|m| m.get("max_model_len").and_then(Value::as_u64))
    {
        let url = llmwatch_config::join_url(root(base_url), "/v1/models");
        return Some((len, format!("max_model_len in {url}")));
    }
    let props_url = llmwatch_config::join_url(root(base_url), "/props");
    let json = get_json(client, &props_url).await.ok()?;
    json.pointer("/default_generation_settings/n_ctx")
        .or_else(|| json.get("n_ctx"))
        .and_then(Value::as_u64)
        .map(|n| (n, format!("n_ctx per slot in {props_url}")))
}

/// llama-server's slot count, `total_slots` in `/props`: the most
/// sequences it runs at once (its `--parallel`), each in its own share of
/// the context. `None` when the server does not say.
pub async fn llamacpp_slots(client: &reqwest::Client, base_url: &str) -> Option<u64> {
    let props_url = llmwatch_config::join_url(root(base_url), "/props");
    let json = get_json(client, &props_url).await.ok()?;
    json.get("total_slots")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
}

/// The server's version from `/version` (vLLM and the simulator answer
/// `{"version": "…"}`).
pub async fn server_version(client: &reqwest::Client, base_url: &str) -> Option<String> {
    let url = llmwatch_config::join_url(root(base_url), "/version");
    let json = get_json(client, &url).await.ok()?;
    json.get("version")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The capacity the server's metrics page reports now (with llama-server's
/// slots from its `/props`); `None` when the page could not be read.
pub async fn read_capacity(
    client: &reqwest::Client,
    base_url: &str,
    metrics_url: &str,
) -> Option<EngineCapacity> {
    match fetch_page(client, metrics_url, FACT_TIMEOUT, MAX_PAGE_BYTES).await {
        Ok(page) => {
            let format = detect_format(page.content_type.as_deref(), &page.body);
            let (parsed, _) = parse_lenient(&page.body, format);
            let mut capacity = engine_capacity(&parsed);
            if capacity.engine == Some(Engine::Llamacpp) {
                capacity.max_num_seqs = llamacpp_slots(client, base_url).await;
            }
            Some(capacity)
        }
        Err(err) => {
            // reqwest's errors carry the URL, credentials and all.
            tracing::debug!(
                url = %redact_url(metrics_url),
                error = %redact_urls_in(&err.to_string()),
                "reading the engine's capacity failed"
            );
            None
        }
    }
}
