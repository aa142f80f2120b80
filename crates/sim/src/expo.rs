//! `/metrics` rendering. The page is the real capture of the engine (vLLM
//! 0.32 idle, or NIM) used as a template: every HELP/TYPE line, family
//! order, label order and bucket boundary comes from the capture, and only
//! sample values (and the `model_name` / cache-config label values) are
//! replaced. That keeps the page byte-for-byte in structure with the real
//! one without hand-copying ~80 families.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::stats::{py_float, Stats};

/// vLLM 0.32.0 `GET /metrics` while idle (copied from
/// `fixtures/vllm-live/metrics_vllm_idle.txt`).
const VLLM_TEMPLATE: &str = include_str!("templates/vllm_0.32_idle.txt");
/// NIM for LLMs `GET /v1/metrics` (from `fixtures/nim/metrics_example.txt`,
/// plus a `finished_reason="stop"` series and a trailing newline).
const NIM_TEMPLATE: &str = include_str!("templates/nim.txt");
/// llama-server `GET /metrics` while idle (copied from
/// `fixtures/llamacpp-live/metrics_llamacpp_idle.txt`).
const LLAMACPP_TEMPLATE: &str = include_str!("templates/llamacpp_idle.txt");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FamilyType {
    Counter,
    Gauge,
    Histogram,
    Other,
}

#[derive(Debug)]
enum Line {
    Raw(String),
    Sample {
        family: usize,
        name: String,
        labels: Vec<(String, String)>,
        value: String,
    },
}

#[derive(Debug)]
struct Family {
    name: String,
    kind: FamilyType,
}

/// A parsed template page.
#[derive(Debug)]
pub(crate) struct Template {
    prefix: &'static str,
    families: Vec<Family>,
    lines: Vec<Line>,
    /// Values as C++ streams print them (`12`, `0.5`: llama-server) rather
    /// than as Python's prometheus_client does (`12.0`).
    plain_numbers: bool,
}

/// Values that are not engine statistics but configuration, for the info
/// families.
#[derive(Debug, Clone)]
pub(crate) struct PageConfig {
    pub(crate) model: String,
    pub(crate) block_size: usize,
    pub(crate) num_gpu_blocks: usize,
    pub(crate) enable_prefix_caching: bool,
    pub(crate) max_model_len: usize,
    pub(crate) max_num_seqs: usize,
    pub(crate) kv_bytes_total: u64,
    pub(crate) start_unix: f64,
    /// The page claims every queried prompt token as a prefix-cache hit
    /// (see `SimConfig::report_all_cached`).
    pub(crate) report_all_cached: bool,
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    // The templates are our own copies of well-formed pages: label values
    // never contain `",`.
    let mut out = Vec::new();
    for part in s.split("\",") {
        let part = part.trim_end_matches('"');
        if let Some((k, v)) = part.split_once("=\"") {
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

impl Template {
    fn parse(text: &str, prefix: &'static str) -> Template {
        let mut families: Vec<Family> = Vec::new();
        let mut lines = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split_whitespace();
                let name = it.next().unwrap_or_default().to_string();
                let kind = match it.next() {
                    Some("counter") => FamilyType::Counter,
                    Some("gauge") => FamilyType::Gauge,
                    Some("histogram") => FamilyType::Histogram,
                    _ => FamilyType::Other,
                };
                families.push(Family { name, kind });
                lines.push(Line::Raw(line.to_string()));
            } else if line.starts_with('#') || line.is_empty() {
                lines.push(Line::Raw(line.to_string()));
            } else {
                let (series, value) = line.rsplit_once(' ').unwrap_or((line, "0.0"));
                let (name, labels) = match series.split_once('{') {
                    Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
                    None => (series, Vec::new()),
                };
                lines.push(Line::Sample {
                    family: families.len().saturating_sub(1),
                    name: name.to_string(),
                    labels,
                    value: value.to_string(),
                });
            }
        }
        Template {
            prefix,
            families,
            lines,
            plain_numbers: false,
        }
    }

    pub(crate) fn vllm() -> Template {
        Template::parse(VLLM_TEMPLATE, "vllm:")
    }

    pub(crate) fn nim() -> Template {
        Template::parse(NIM_TEMPLATE, "")
    }

    pub(crate) fn llamacpp() -> Template {
        Template {
            plain_numbers: true,
            ..Template::parse(LLAMACPP_TEMPLATE, "llamacpp:")
        }
    }

    /// Logical name of a family: the vLLM name without prefix; NIM's
    /// `time_per_output_token_seconds` is vLLM's inter-token latency.
    fn logical<'a>(&self, family: &'a str) -> Option<&'a str> {
        let l = family.strip_prefix(self.prefix)?;
        if self.prefix == "llamacpp:" {
            // llama-server's names for what vLLM calls otherwise; its
            // `prompt_tokens_total` excludes cached tokens.
            return Some(match l {
                "prompt_tokens_total" => "prompt_tokens_computed_total",
                "tokens_predicted_total" => "generation_tokens_total",
                "requests_processing" => "num_requests_running",
                "requests_deferred" => "num_requests_waiting",
                other => other,
            });
        }
        Some(match l {
            "time_per_output_token_seconds" => "inter_token_latency_seconds",
            "gpu_cache_usage_perc" => "kv_cache_usage_perc",
            other => other,
        })
    }

    /// Bucket bounds of every histogram family, by logical name, so the
    /// engine's histograms use exactly the capture's boundaries.
    pub(crate) fn histogram_bounds(&self) -> HashMap<String, Vec<f64>> {
        let mut out: HashMap<String, Vec<f64>> = HashMap::new();
        for line in &self.lines {
            let Line::Sample {
                family,
                name,
                labels,
                ..
            } = line
            else {
                continue;
            };
            let Some(fam) = self.families.get(*family) else {
                continue;
            };
            if fam.kind != FamilyType::Histogram || *name != format!("{}_bucket", fam.name) {
                continue;
            }
            let Some(logical) = self.logical(&fam.name) else {
                continue;
            };
            let le = labels
                .iter()
                .find(|(k, _)| k == "le")
                .and_then(|(_, v)| v.parse::<f64>().ok());
            if let Some(le) = le.filter(|v| v.is_finite()) {
                out.entry(logical.to_string()).or_default().push(le);
            }
        }
        out
    }

    /// Names of the histogram, counter and gauge families on the page.
    #[cfg(test)]
    fn family_names(&self) -> Vec<&str> {
        self.families.iter().map(|f| f.name.as_str()).collect()
    }

    pub(crate) fn render(&self, stats: &Stats, cfg: &PageConfig) -> String {
        let mut out = String::with_capacity(64 * 1024);
        for line in &self.lines {
            match line {
                Line::Raw(s) => {
                    out.push_str(s);
                    out.push('\n');
                }
                Line::Sample {
                    family,
                    name,
                    labels,
                    value,
                } => {
                    let fam = self.families.get(*family);
                    let v = fam.and_then(|f| self.value(f, name, labels, stats, cfg));
                    out.push_str(name);
                    if !labels.is_empty() {
                        out.push('{');
                        for (i, (k, lv)) in labels.iter().enumerate() {
                            if i > 0 {
                                out.push(',');
                            }
                            let lv = self.label_value(name, k, lv, cfg);
                            let _ = write!(out, "{k}=\"{}\"", escape_label(&lv));
                        }
                        out.push('}');
                    }
                    out.push(' ');
                    match v {
                        Some(v) if self.plain_numbers => {
                            let _ = write!(out, "{v}");
                        }
                        Some(v) => out.push_str(&py_float(v)),
                        None => out.push_str(value),
                    }
                    out.push('\n');
                }
            }
        }
        out
    }

    fn label_value(&self, sample: &str, key: &str, template: &str, cfg: &PageConfig) -> String {
        if key == "model_name" {
            return cfg.model.clone();
        }
        if !sample.ends_with("cache_config_info") {
            return template.to_string();
        }
        let bool_py = |b: bool| if b { "True" } else { "False" }.to_string();
        match key {
            "block_size" | "effective_attention_block_size" => cfg.block_size.to_string(),
            "num_gpu_blocks" => cfg.num_gpu_blocks.to_string(),
            "enable_prefix_caching" => bool_py(cfg.enable_prefix_caching),
            "kv_cache_size_tokens" => (cfg.num_gpu_blocks * cfg.block_size).to_string(),
            "kv_cache_memory_bytes" => cfg.kv_bytes_total.to_string(),
            "kv_cache_max_concurrency" => py_float(
                (cfg.num_gpu_blocks * cfg.block_size) as f64 / cfg.max_model_len.max(1) as f64,
            ),
            _ => template.to_string(),
        }
    }

    /// The live value of one sample, or `None` to keep the template's value
    /// (static families: python/process info, sleep state, …).
    fn value(
        &self,
        fam: &Family,
        name: &str,
        labels: &[(String, String)],
        stats: &Stats,
        cfg: &PageConfig,
    ) -> Option<f64> {
        let label = |k: &str| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        };
        if name == "process_start_time_seconds" {
            return Some(cfg.start_unix);
        }
        if fam.kind == FamilyType::Gauge && fam.name.ends_with("_created") {
            return Some(cfg.start_unix);
        }
        let logical = self.logical(&fam.name)?;
        if fam.kind == FamilyType::Histogram {
            let h = stats.histograms.get(logical)?;
            let suffix = name.strip_prefix(fam.name.as_str())?;
            return match suffix {
                "_bucket" => {
                    let le = label("le")?;
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().ok()?
                    };
                    Some(h.cumulative(le) as f64)
                }
                "_count" => Some(h.count as f64),
                "_sum" => Some(h.sum),
                _ => None,
            };
        }
        let finished = |r: Option<&str>| match r {
            Some("stop") => Some(stats.finished_stop as f64),
            Some("length") => Some(stats.finished_length as f64),
            Some("abort") => Some(stats.finished_abort as f64),
            Some("error") => Some(stats.finished_error as f64),
            Some(_) => Some(0.0),
            None => None,
        };
        let v = match logical {
            "num_requests_running" => stats.running as f64,
            "num_requests_waiting" => stats.waiting as f64,
            "num_requests_waiting_by_reason" => match label("reason") {
                Some("capacity") => stats.waiting as f64,
                _ => 0.0,
            },
            "num_request_max" => cfg.max_num_seqs as f64,
            "kv_cache_usage_perc" => stats.kv_usage,
            "prefix_cache_queries_total" => stats.prefix_queries as f64,
            "prefix_cache_hits_total" if cfg.report_all_cached => stats.prefix_queries as f64,
            "prefix_cache_hits_total" => stats.prefix_hits as f64,
            "num_preemptions_total" => stats.preemptions as f64,
            "prompt_tokens_total" => stats.prompt_tokens as f64,
            "prompt_tokens_by_source_total" => match label("source") {
                Some("local_compute") => stats.prompt_tokens_computed as f64,
                Some("local_cache_hit") => stats.prompt_tokens_cached as f64,
                _ => 0.0,
            },
            "prompt_tokens_cached_total" => stats.prompt_tokens_cached as f64,
            "prompt_tokens_cached_by_source_total" => match label("source") {
                Some("device") => stats.prompt_tokens_cached as f64,
                _ => 0.0,
            },
            "generation_tokens_total" => stats.generation_tokens as f64,
            // llama-server's own counters and per-decode averages.
            "prompt_tokens_computed_total" => stats.prompt_tokens_computed as f64,
            "prompt_seconds_total" => stats.prompt_seconds,
            "tokens_predicted_seconds_total" => stats.decode_seconds,
            "n_decode_total" => stats.decode_calls as f64,
            "n_tokens_max" => stats.max_sequence_tokens as f64,
            "prompt_tokens_seconds" => {
                per_second(stats.prompt_tokens_computed, stats.prompt_seconds)
            }
            "predicted_tokens_seconds" => per_second(stats.generation_tokens, stats.decode_seconds),
            "n_busy_slots_per_decode" => {
                per_second(stats.busy_slot_decodes, stats.decode_calls as f64)
            }
            // vLLM: by finished_reason; NIM: one unlabelled series.
            "request_success_total" => match finished(label("finished_reason")) {
                Some(v) => v,
                None => (stats.finished_stop + stats.finished_length) as f64,
            },
            "request_finish_total" => finished(label("finished_reason"))?,
            "request_failure_total" => stats.finished_error as f64,
            _ => return None,
        };
        Some(v)
    }
}

/// `page` with the given label values set on its `cache_config_info`
/// sample (any prefix): the settings a vLLM started with other flags would
/// show (see `vllm_args::vllm_router`). Keys the sample lacks are left out,
/// so the label set stays the capture's; other lines are copied unchanged.
pub(crate) fn relabel_cache_config(page: &str, labels: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(page.len() + 64);
    for line in page.split_inclusive('\n') {
        let relabelled = (|| {
            if line.starts_with('#') {
                return None;
            }
            let (name, rest) = line.split_once('{')?;
            if !name.ends_with("cache_config_info") {
                return None;
            }
            let (inner, tail) = rest.rsplit_once('}')?;
            let mut text = format!("{name}{{");
            for (i, (k, v)) in parse_labels(inner).into_iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                let v = labels
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map_or(v, |(_, new)| new.clone());
                let _ = write!(text, "{k}=\"{}\"", escape_label(&v));
            }
            text.push('}');
            text.push_str(tail);
            Some(text)
        })();
        out.push_str(relabelled.as_deref().unwrap_or(line));
    }
    out
}

/// `count / seconds`, 0 before anything was timed (as llama-server prints).
fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

fn escape_label(v: &str) -> String {
    if !v.contains(['\\', '"', '\n']) {
        return v.to_string();
    }
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PageConfig {
        PageConfig {
            model: "tiny-llama".into(),
            block_size: 128,
            num_gpu_blocks: 8192,
            enable_prefix_caching: true,
            max_model_len: 2048,
            max_num_seqs: 64,
            kv_bytes_total: 1_073_741_824,
            start_unix: 1.7962045395368457e9,
            report_all_cached: false,
        }
    }

    #[test]
    fn idle_vllm_page_reproduces_the_capture_structure() {
        let t = Template::vllm();
        let stats = Stats::new(t.histogram_bounds());
        let page = t.render(&stats, &cfg());
        let strip = |s: &str| -> Vec<String> {
            s.lines()
                .map(|l| match l.rsplit_once(' ') {
                    Some((a, _)) if !l.starts_with('#') => a.to_string(),
                    _ => l.to_string(),
                })
                .collect()
        };
        assert_eq!(strip(&page), strip(VLLM_TEMPLATE));
        assert!(t.family_names().contains(&"vllm:kv_cache_usage_perc"));
    }

    #[test]
    fn cache_config_labels_can_be_set_and_keep_their_order() {
        let t = Template::vllm();
        let stats = Stats::new(t.histogram_bounds());
        let page = t.render(&stats, &cfg());
        let labels = [
            ("gpu_memory_utilization", "0.95".to_string()),
            ("cache_dtype", "fp8".to_string()),
            ("not_a_label", "x".to_string()),
        ];
        let out = relabel_cache_config(&page, &labels);
        assert_eq!(out.lines().count(), page.lines().count());
        let info = |p: &str| {
            p.lines()
                .find(|l| l.starts_with("vllm:cache_config_info{"))
                .map(str::to_string)
                .unwrap_or_default()
        };
        let (before, after) = (info(&page), info(&out));
        assert!(before.contains("gpu_memory_utilization=\"0.92\""));
        assert!(after.contains("gpu_memory_utilization=\"0.95\""), "{after}");
        assert!(after.contains("cache_dtype=\"fp8\""));
        assert!(after.contains("num_gpu_blocks=\"8192\""));
        assert!(!after.contains("not_a_label"));
        assert!(after.ends_with("} 1.0"));
        let keys = |l: &str| -> Vec<String> {
            parse_labels(&l[l.find('{').unwrap_or(0) + 1..l.rfind('}').unwrap_or(0)])
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(keys(&before), keys(&after));
        let rest = |p: &str| -> Vec<String> {
            p.lines()
                .filter(|l| !l.contains("cache_config_info{"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(rest(&page), rest(&out));
    }

    #[test]
    fn bounds_come_from_the_capture() {
        let b = Template::vllm().histogram_bounds();
        let ttft = &b["time_to_first_token_seconds"];
        assert_eq!(ttft.first(), Some(&0.001));
        assert!(ttft.contains(&2.5));
        let nim = Template::nim().histogram_bounds();
        assert!(nim.contains_key("inter_token_latency_seconds"));
    }
}
