//! Prometheus' `relabel_configs`, applied to every discovered target before
//! it becomes one: the label set (with `__address__`, `__scheme__`,
//! `__metrics_path__` and the discovery's `__meta_*` labels) goes through
//! each rule in order; `keep`/`drop` may drop the target. Semantics follow
//! Prometheus (`model/relabel`): regexes are fully anchored, source values
//! are joined with `separator`, `$1`/`${name}` expand in `replacement`, a
//! `replace` whose regex does not match changes nothing, and an empty
//! result removes the label. `hashmod`, `keepequal` and `dropequal` are not
//! supported (an error at load naming the action).

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Deserializer};

/// What a rule does (Prometheus' names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RelabelAction {
    #[default]
    Replace,
    Keep,
    Drop,
    Labelmap,
    Labeldrop,
    Labelkeep,
    Lowercase,
    Uppercase,
}

/// A regex anchored at both ends, as Prometheus anchors it.
#[derive(Debug, Clone)]
pub struct AnchoredRegex(Regex);

impl AnchoredRegex {
    pub fn new(pattern: &str) -> Result<AnchoredRegex, regex::Error> {
        Regex::new(&format!("^(?:{pattern})$")).map(AnchoredRegex)
    }
}

impl Default for AnchoredRegex {
    fn default() -> Self {
        AnchoredRegex(Regex::new("^(?:(.*))$").expect("the default regex compiles"))
    }
}

impl<'de> Deserialize<'de> for AnchoredRegex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pattern = String::deserialize(d)?;
        AnchoredRegex::new(&pattern)
            .map_err(|e| serde::de::Error::custom(format!("regex {pattern:?}: {e}")))
    }
}

/// One `[[discovery.relabel_configs]]` rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelabelConfig {
    #[serde(default)]
    pub source_labels: Vec<String>,
    #[serde(default = "default_separator")]
    pub separator: String,
    #[serde(default)]
    pub target_label: Option<String>,
    #[serde(default)]
    pub regex: AnchoredRegex,
    #[serde(default = "default_replacement")]
    pub replacement: String,
    #[serde(default)]
    pub action: RelabelAction,
}

fn default_separator() -> String {
    ";".to_string()
}

fn default_replacement() -> String {
    "$1".to_string()
}

impl RelabelConfig {
    /// What a rule needs for its action, as Prometheus checks it.
    pub fn check(&self) -> Result<(), String> {
        let needs_target = matches!(
            self.action,
            RelabelAction::Replace | RelabelAction::Lowercase | RelabelAction::Uppercase
        );
        match &self.target_label {
            None if needs_target => Err(format!("action {:?} needs a target_label", self.action)),
            Some(label) if !is_label_name(label) && self.action != RelabelAction::Replace => {
                Err(format!("target_label {label:?} is not a valid label name"))
            }
            _ => Ok(()),
        }
    }
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Applies `rules` in order; `None` when a rule dropped the target.
pub fn relabel(
    mut labels: BTreeMap<String, String>,
    rules: &[RelabelConfig],
) -> Option<BTreeMap<String, String>> {
    for rule in rules {
        if !apply(&mut labels, rule) {
            return None;
        }
    }
    Some(labels)
}

/// One rule; false when it drops the target.
fn apply(labels: &mut BTreeMap<String, String>, rule: &RelabelConfig) -> bool {
    let value = rule
        .source_labels
        .iter()
        .map(|name| labels.get(name).map_or("", String::as_str))
        .collect::<Vec<_>>()
        .join(&rule.separator);
    let regex = &rule.regex.0;
    let target = rule.target_label.as_deref().unwrap_or_default();
    match rule.action {
        RelabelAction::Keep => return regex.is_match(&value),
        RelabelAction::Drop => return !regex.is_match(&value),
        RelabelAction::Replace => {
            let Some(captures) = regex.captures(&value) else {
                return true;
            };
            let mut name = String::new();
            captures.expand(target, &mut name);
            let mut out = String::new();
            captures.expand(&rule.replacement, &mut out);
            if !is_label_name(&name) {
                return true;
            }
            if out.is_empty() {
                labels.remove(&name);
            } else {
                labels.insert(name, out);
            }
        }
        RelabelAction::Lowercase => {
            labels.insert(target.to_string(), value.to_lowercase());
        }
        RelabelAction::Uppercase => {
            labels.insert(target.to_string(), value.to_uppercase());
        }
        RelabelAction::Labelmap => {
            let mapped: Vec<(String, String)> = labels
                .iter()
                .filter_map(|(name, value)| {
                    let captures = regex.captures(name)?;
                    let mut new = String::new();
                    captures.expand(&rule.replacement, &mut new);
                    Some((new, value.clone()))
                })
                .collect();
            labels.extend(mapped);
        }
        RelabelAction::Labeldrop => labels.retain(|name, _| !regex.is_match(name)),
        RelabelAction::Labelkeep => labels.retain(|name, _| regex.is_match(name)),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(toml_text: &str) -> Vec<RelabelConfig> {
        #[derive(Deserialize)]
        struct Wrapper {
            relabel_configs: Vec<RelabelConfig>,
        }
        toml::from_str::<Wrapper>(toml_text)
            .expect("rules parse")
            .relabel_configs
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The rules of Prometheus' own kubernetes-pods example job.
    #[test]
    fn the_prometheus_pod_example_keeps_annotated_pods_and_rewrites_the_port() {
        let rules = rules(
            r#"
[[relabel_configs]]
source_labels = ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]
action = "keep"
regex = "true"
[[relabel_configs]]
source_labels = ["__meta_kubernetes_pod_annotation_prometheus_io_path"]
target_label = "__metrics_path__"
regex = "(.+)"
[[relabel_configs]]
source_labels = ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"]
regex = '([^:]+)(?::\d+)?;(\d+)'
replacement = "$1:$2"
target_label = "__address__"
[[relabel_configs]]
action = "labelmap"
regex = "__meta_kubernetes_pod_label_(.+)"
[[relabel_configs]]
source_labels = ["__meta_kubernetes_pod_name"]
target_label = "pod"
"#,
        );
        let pod = labels(&[
            ("__address__", "10.1.0.7:8000"),
            ("__meta_kubernetes_pod_name", "vllm-0"),
            ("__meta_kubernetes_pod_label_app", "vllm"),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape",
                "true",
            ),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_port",
                "9400",
            ),
            ("__meta_kubernetes_pod_annotation_prometheus_io_path", "/m"),
        ]);
        let out = relabel(pod.clone(), &rules).expect("kept");
        assert_eq!(out["__address__"], "10.1.0.7:9400");
        assert_eq!(out["__metrics_path__"], "/m");
        assert_eq!(out["app"], "vllm");
        assert_eq!(out["pod"], "vllm-0");
        let mut unannotated = pod;
        unannotated.remove("__meta_kubernetes_pod_annotation_prometheus_io_scrape");
        assert_eq!(relabel(unannotated, &rules), None);
    }

    #[test]
    fn replace_without_a_match_and_empty_results_follow_prometheus() {
        let rules = rules(
            r#"
[[relabel_configs]]
source_labels = ["zone"]
regex = "eu-(.*)"
target_label = "region"
[[relabel_configs]]
source_labels = ["missing"]
target_label = "team"
[[relabel_configs]]
action = "labeldrop"
regex = "tmp_.*"
[[relabel_configs]]
source_labels = ["Model"]
target_label = "model"
action = "lowercase"
"#,
        );
        let out = relabel(
            labels(&[
                ("zone", "us-1"),
                ("team", "a"),
                ("tmp_x", "1"),
                ("Model", "Llama"),
            ]),
            &rules,
        )
        .expect("kept");
        // No match: nothing written; empty value: the label removed.
        assert_eq!(
            out,
            labels(&[("zone", "us-1"), ("Model", "Llama"), ("model", "llama")])
        );
    }

    #[test]
    fn bad_rules_are_errors_naming_what_is_wrong() {
        let err = toml::from_str::<RelabelConfig>("regex = \"(\"\n")
            .expect_err("a bad regex is refused")
            .to_string();
        assert!(err.contains("regex \"(\""), "{err}");
        let err = toml::from_str::<RelabelConfig>("action = \"hashmod\"\n")
            .expect_err("hashmod is not supported");
        assert!(err.to_string().contains("hashmod"), "{err}");
        let rule: RelabelConfig = toml::from_str("action = \"replace\"\n").expect("parses");
        assert!(rule.check().unwrap_err().contains("target_label"));
    }
}
