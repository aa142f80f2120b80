//! Service discovery, the pure part: Prometheus' target-group documents
//! (file_sd as JSON or YAML, http_sd as JSON) turned into targets, and the
//! shard rule that splits them among instances. Reading files and URLs is
//! the engine's job (`llmwatch_engine::sources::discovery`).

use std::collections::{BTreeMap, HashSet};

use llmwatch_core::stable_hash::fnv1a;
use serde::Deserialize;

use crate::fields::check_http_url;
use crate::relabel::relabel;
use crate::schema::{DiscoveryConfig, TargetConfig};
pub use crate::shard::Shard;

/// One entry of a service-discovery document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TargetGroup {
    /// `host:port` addresses.
    #[serde(default)]
    pub targets: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The two encodings file_sd accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentFormat {
    Json,
    Yaml,
}

impl DocumentFormat {
    /// By extension, as Prometheus decides: `.yml`/`.yaml` are YAML, the
    /// rest JSON.
    pub fn of_path(path: &std::path::Path) -> DocumentFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some("yml" | "yaml") => DocumentFormat::Yaml,
            _ => DocumentFormat::Json,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("not a list of target groups (JSON): {0}")]
    Json(#[from] serde_json::Error),
    #[error("not a list of target groups (YAML): {0}")]
    Yaml(#[from] serde_norway::Error),
}

/// Parses one document: a list of `{targets, labels}` groups.
pub fn parse_groups(
    document: &[u8],
    format: DocumentFormat,
) -> Result<Vec<TargetGroup>, DiscoveryError> {
    Ok(match format {
        DocumentFormat::Json => serde_json::from_slice(document)?,
        // An empty YAML file is no groups, as in Prometheus.
        DocumentFormat::Yaml if document.iter().all(u8::is_ascii_whitespace) => Vec::new(),
        DocumentFormat::Yaml => serde_norway::from_slice(document)?,
    })
}

/// A discovered address that did not become a target, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub address: String,
    pub reason: String,
}

/// The targets a group's documents describe: each address with its
/// group's labels (and `__address__`) through the group's
/// `relabel_configs`, then one per distinct address, named
/// `{group}-{address}` (characters a name cannot hold become `-`).
/// `__scheme__` and `__metrics_path__` labels set the URL as in
/// Prometheus; other `__`-prefixed labels are dropped.
pub fn targets_of(
    discovery: &DiscoveryConfig,
    groups: &[TargetGroup],
) -> (Vec<TargetConfig>, Vec<Skipped>) {
    let mut targets = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    for group in groups {
        for address in &group.targets {
            let mut labels = group.labels.clone();
            labels.insert("__address__".to_string(), address.clone());
            // A target a `keep`/`drop` rule leaves out is no target at all.
            let Some(labels) = relabel(labels, &discovery.relabel_configs) else {
                continue;
            };
            let Some(address) = labels.get("__address__").filter(|a| !a.is_empty()) else {
                skipped.push(Skipped {
                    address: address.clone(),
                    reason: "relabelling left no __address__".to_string(),
                });
                continue;
            };
            if !seen.insert(address.clone()) {
                continue;
            }
            match target_of(discovery, address, &labels) {
                Ok(target) => targets.push(target),
                Err(reason) => skipped.push(Skipped {
                    address: address.clone(),
                    reason,
                }),
            }
        }
    }
    (targets, skipped)
}

fn target_of(
    discovery: &DiscoveryConfig,
    address: &str,
    labels: &BTreeMap<String, String>,
) -> Result<TargetConfig, String> {
    let address = address.trim();
    if address.is_empty() || address.contains(['/', '@', '?', '#', ' ']) {
        return Err(format!("{address:?} is not a host:port address"));
    }
    let scheme = labels.get("__scheme__").map_or("http", String::as_str);
    let url = format!("{scheme}://{address}");
    check_http_url(&url)?;
    let settings = &discovery.target;
    let metrics_path = match labels.get("__metrics_path__") {
        Some(path) if path.starts_with('/') => Some(path.clone()),
        Some(path) => return Err(format!("__metrics_path__ {path:?} must start with '/'")),
        None => settings.metrics_path.clone(),
    };
    Ok(TargetConfig {
        name: target_name(&discovery.name, address),
        url,
        engine: settings.engine,
        scrape_interval: settings.scrape_interval,
        scrape_timeout: settings.scrape_timeout,
        metrics_path,
        api_key_env: settings.api_key_env.clone(),
        probe: settings.probe.clone(),
        sweep: None,
        slo_ttft_p95: settings.slo_ttft_p95,
        slo_itl_p95: settings.slo_itl_p95,
        gpus: None,
        max_num_seqs: None,
        labels: labels
            .iter()
            .filter(|(name, _)| !name.starts_with("__"))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
        discovered_by: Some(discovery.name.clone()),
    })
}

/// The longest target name (see `fields::check_name`).
const MAX_NAME: usize = 64;

/// `{group}-{address}` as a valid target name: `:` and other characters a
/// name cannot hold become `-`; past 64 characters the tail is replaced by
/// a stable hash, so long host names stay distinct.
pub fn target_name(group: &str, address: &str) -> String {
    let name: String = format!("{group}-{address}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = format!("{:016x}", fnv1a(address.bytes()));
    format!("{}-{hash}", &name[..MAX_NAME - hash.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery(toml_text: &str) -> DiscoveryConfig {
        #[derive(Deserialize)]
        struct Wrapper {
            discovery: DiscoveryConfig,
        }
        toml::from_str::<Wrapper>(toml_text)
            .expect("test discovery parses")
            .discovery
    }

    #[test]
    fn json_and_yaml_documents_give_the_same_groups() {
        let json =
            br#"[{"targets": ["10.0.0.1:8000", "10.0.0.2:8000"], "labels": {"model": "llama"}},
                        {"targets": ["gpu-b:9000"]}]"#;
        let yaml = b"- targets: ['10.0.0.1:8000', '10.0.0.2:8000']\n  labels:\n    model: llama\n\
                     - targets: ['gpu-b:9000']\n";
        let from_json = parse_groups(json, DocumentFormat::Json).expect("json parses");
        let from_yaml = parse_groups(yaml, DocumentFormat::Yaml).expect("yaml parses");
        assert_eq!(from_json, from_yaml);
        assert_eq!(from_json.len(), 2);
        assert_eq!(from_json[0].labels["model"], "llama");
        assert!(parse_groups(b"  \n", DocumentFormat::Yaml)
            .expect("empty yaml")
            .is_empty());
        let err = parse_groups(br#"{"targets": 1}"#, DocumentFormat::Json).unwrap_err();
        assert!(err.to_string().contains("target groups"), "{err}");
    }

    #[test]
    fn groups_become_named_labelled_targets() {
        let discovery = discovery(
            "[discovery]\nname = \"fleet\"\nfiles = [\"x.json\"]\n\
             [discovery.target]\nscrape_interval = \"2s\"\nmetrics_path = \"/m\"\n",
        );
        let groups = vec![
            TargetGroup {
                targets: vec!["10.0.0.1:8000".into(), "bad/addr".into()],
                labels: BTreeMap::from([
                    ("zone".into(), "a".into()),
                    ("__scheme__".into(), "https".into()),
                    ("__meta_x".into(), "dropped".into()),
                ]),
            },
            TargetGroup {
                // A repeated address is one target (the first group's).
                targets: vec!["10.0.0.1:8000".into(), "host-b:9000".into()],
                labels: BTreeMap::from([("__metrics_path__".into(), "/v1/metrics".into())]),
            },
        ];
        let (targets, skipped) = targets_of(&discovery, &groups);
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].name, "fleet-10.0.0.1-8000");
        assert_eq!(targets[0].url, "https://10.0.0.1:8000");
        assert_eq!(targets[0].metrics_url(), "https://10.0.0.1:8000/m");
        assert_eq!(
            targets[0].labels,
            BTreeMap::from([("zone".into(), "a".into())])
        );
        assert_eq!(
            targets[0].scrape_interval,
            std::time::Duration::from_secs(2)
        );
        assert_eq!(targets[0].discovered_by.as_deref(), Some("fleet"));
        assert_eq!(targets[1].metrics_url(), "http://host-b:9000/v1/metrics");
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].address, "bad/addr");
    }

    #[test]
    fn long_names_stay_valid_and_distinct() {
        let long_a = format!("{}.example.com:8000", "a".repeat(80));
        let long_b = format!("{}.example.com:8001", "a".repeat(80));
        let (a, b) = (target_name("fleet", &long_a), target_name("fleet", &long_b));
        assert!(a.len() <= MAX_NAME && b.len() <= MAX_NAME);
        assert_ne!(a, b);
        crate::check_name(&a).expect("a valid name");
    }
}
