//! The TOML config: parsed into typed values once, validated with errors that
//! name the field, so the rest of the daemon never re-checks.
//!
//! It must never do I/O beyond reading the config file ([`Config::load`])
//! and the environment variables that hold secrets: no socket, no task, no
//! other file (discovery documents are parsed from bytes the engine fetched).
// The one crate that reads the environment (clippy.toml's disallowed
// methods): a named secret that is unset fails closed here.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

pub mod discovery;
pub mod experiment;
mod fields;
pub mod kubernetes;
pub mod kubernetes_objects;
pub mod relabel;
mod remote_write;
mod schema;
mod secrets;
pub use secrets::{env_var, secret_from_env};
mod shard;
mod validate;

pub use fields::{check_name, parse_duration};
pub use remote_write::{RemoteWriteAuth, RemoteWriteConfig, RemoteWriteQueue};
pub use schema::*;

/// A config that could not be used; the message names the field (and, for
/// syntax errors, the line).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// Found when the daemon starts (the environment it runs in).
    #[error("{field}: {message}")]
    AtStart { field: String, message: String },
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates config text; `path` is only for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let syntax = |message: String| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: message.trim_end().to_string(),
        };
        let deserializer =
            toml::Deserializer::parse(text).map_err(|err| syntax(err.to_string()))?;
        // The path names the field a value was refused for (e.g.
        // `targets[0].probe.shape`); the TOML error shows the line.
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let field = err.path().to_string();
            let inner = err.into_inner().to_string();
            syntax(if field == "." {
                inner
            } else {
                format!("{field}: {inner}")
            })
        })?;
        config
            .validate()
            .map_err(|(field, message)| ConfigError::Invalid {
                path: path.to_path_buf(),
                field,
                message,
            })?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmwatch_core::alerts::Op;
    use llmwatch_core::signals::Signal;
    use std::time::Duration;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn dashboard_objectives_and_gpu_links() {
        let config = parse("").unwrap();
        assert_eq!(config.server.slo_ttft_p95, Duration::from_secs(1));
        assert_eq!(config.server.slo_itl_p95, Duration::from_millis(50));
        let config = parse(
            "[server]\nslo_ttft_p95 = \"500ms\"\nslo_itl_p95 = \"30ms\"\n\
             [[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:8000\"\ngpus = \"node\"\n\
             [[gpus]]\nname = \"node\"\ndcgm_url = \"http://127.0.0.1:9400/metrics\"\n",
        )
        .unwrap();
        assert_eq!(config.server.slo_ttft_p95, Duration::from_millis(500));
        assert_eq!(config.targets[0].gpus.as_deref(), Some("node"));
        let err =
            parse("[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:8000\"\ngpus = \"nope\"\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("targets[0].gpus") && err.contains("nope"),
            "{err}"
        );
        let err = parse("[server]\nslo_itl_p95 = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.slo_itl_p95"), "{err}");
    }

    #[test]
    fn defaults_are_safe() {
        let config = parse("").unwrap();
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:9477");
        assert_eq!(config.server.database, PathBuf::from("llmwatch.db"));
        assert!(config.bearer_token().unwrap().is_none());
    }

    #[test]
    fn full_example_parses() {
        let config = parse(
            r#"
[server]
listen = "127.0.0.1:9477"
database = "x.db"

[[targets]]
name = "vllm-a"
url = "http://127.0.0.1:8000"
engine = "auto"
scrape_interval = "5s"
[targets.probe]
interval = "15s"
shape = "64x16"
api = "chat"

[[targets]]
name = "nim-b"
url = "http://127.0.0.1:8001/"
engine = "nim"

[[gpus]]
name = "node-1"
dcgm_url = "http://127.0.0.1:9400/metrics"
"#,
        )
        .unwrap();
        assert_eq!(config.targets.len(), 2);
        assert_eq!(
            config.targets[0].metrics_url(),
            "http://127.0.0.1:8000/metrics"
        );
        assert_eq!(
            config.targets[1].metrics_url(),
            "http://127.0.0.1:8001/v1/metrics"
        );
        assert_eq!(config.targets[0].scrape_timeout(), Duration::from_secs(5));
        assert_eq!(
            config.targets[0].probe.as_ref().unwrap().interval,
            Duration::from_secs(15)
        );
    }

    fn error_of(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn bottleneck_rules_name_a_verdict_and_compare_by_equality() {
        let rule = |signal: &str, op: &str, threshold: &str| {
            format!(
                "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n[[alerts]]\nname = \"r\"\n\
                 signal = \"{signal}\"\nop = \"{op}\"\nthreshold = {threshold}\n"
            )
        };
        let config = parse(&rule("bottleneck", "==", "\"kv_cache_capacity\"")).expect("valid");
        assert_eq!(
            config.alerts[0].rule_signal(),
            Ok(llmwatch_core::alerts::RuleSignal::Bottleneck(
                llmwatch_core::analysis::LiveKind::Bottleneck(
                    llmwatch_core::analysis::Verdict::KvCacheCapacity
                )
            ))
        );
        assert_eq!(config.alerts[0].threshold(), Ok(1.0));
        let err = error_of(&rule("bottleneck", "==", "\"kv_full\""));
        assert!(
            err.contains("alerts[0].signal") && err.contains("kv_cache_capacity"),
            "{err}"
        );
        let err = error_of(&rule("bottleneck", ">", "\"healthy\""));
        assert!(
            err.contains("alerts[0].threshold") && err.contains("=="),
            "{err}"
        );
        let config = parse(&rule("bottleneck_changes", ">=", "1")).expect("valid");
        assert_eq!(config.alerts[0].threshold(), Ok(1.0));
    }

    #[test]
    fn errors_name_the_field() {
        let err = error_of("[[targets]]\nname = \"a\"\nurl = \"ftp://x\"\n");
        assert!(err.contains("targets[0].url"), "{err}");
        let err =
            error_of("[[targets]]\nname = \"a\"\nurl = \"http://x\"\nscrape_interval = \"soon\"\n");
        assert!(err.contains("scrape_interval"), "{err}");
        assert!(err.contains("line 4"), "{err}");
        let err = error_of("[[targets]]\nname = \"a\"\nurl = \"http://x\"\nengine = \"vlm\"\n");
        assert!(err.contains("engine") && err.contains("vlm"), "{err}");
        let err = error_of("[[targets]]\nname = \"a\"\nurl = \"http://x\"\nurl_typo = 1\n");
        assert!(err.contains("url_typo"), "{err}");
        let err = error_of(
            "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n[[targets]]\nname = \"a\"\nurl = \"http://y\"\n",
        );
        assert!(
            err.contains("targets[1].name") && err.contains("duplicate"),
            "{err}"
        );
        let err = error_of("[[gpus]]\nname = \"g\"\n");
        assert!(err.contains("gpus[0].dcgm_url"), "{err}");
        let err = error_of(
            "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n[targets.probe]\nshape = \"64\"\n",
        );
        assert!(err.contains("targets[0].probe.shape"), "{err}");
    }

    #[test]
    fn a_canary_workload_is_a_conversation_and_its_errors_name_the_field() {
        let target =
            "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n[targets.probe]\ninterval = \"15s\"\n";
        let config = parse(&format!("{target}workload = \"multi-turn:5,think=1s\"\n")).unwrap();
        let workload = config.targets[0].probe.as_ref().unwrap().workload.unwrap();
        assert_eq!(
            (workload.turns, workload.think),
            (5, std::time::Duration::from_secs(1))
        );
        let err = error_of(&format!("{target}workload = \"multi-turn:0\"\n"));
        assert!(
            err.contains("targets[0].probe.workload") && err.contains("TURNS"),
            "{err}"
        );
        let err = error_of(&format!("{target}workload = \"rag\"\n"));
        assert!(err.contains("targets[0].probe.workload"), "{err}");
        // Four pauses of 5 s do not fit a 15 s tick.
        let err = error_of(&format!("{target}workload = \"multi-turn:5,think=5s\"\n"));
        assert!(
            err.contains("targets[0].probe.workload") && err.contains("probe.interval"),
            "{err}"
        );
    }

    #[test]
    fn alerts_and_notifiers_parse() {
        let config = parse(
            r#"
[server]
alert_interval = "5s"

[[targets]]
name = "vllm-a"
url = "http://127.0.0.1:8000"

[[alerts]]
name = "ttft-p95"
signal = "probe_ttft_p95"
op = ">"
threshold = "1s"
window = "5m"
for = "2m"
keep_firing_for = "1m"
target = "vllm-a"
labels = { severity = "page" }
annotations = { summary = "p95 TTFT {{ $value }}s on {{ $labels.target }}" }

[[alerts]]
name = "kv-full"
signal = "kv_cache_usage"
op = ">="
threshold = 0.9

[[notifiers]]
kind = "alertmanager"
url = "http://127.0.0.1:9093"

[[notifiers]]
kind = "slack"
url_env = "SLACK_URL"
timeout = "3s"
"#,
        )
        .unwrap();
        assert_eq!(config.server.alert_interval, Duration::from_secs(5));
        let rule = &config.alerts[0];
        assert_eq!(rule.signal(), Ok(Signal::ProbeTtftP95));
        assert_eq!(rule.threshold(), Ok(1.0));
        assert_eq!(rule.for_, Duration::from_secs(120));
        assert_eq!(rule.keep_firing_for, Duration::from_secs(60));
        assert_eq!(rule.labels["severity"], "page");
        assert_eq!(config.alerts[1].threshold(), Ok(0.9));
        assert_eq!(config.alerts[1].op(), Ok(Op::Ge));
        assert_eq!(config.alerts[1].for_, Duration::ZERO);
        assert_eq!(config.notifiers[0].kind, NotifierKind::Alertmanager);
        assert_eq!(config.notifiers[1].timeout, Duration::from_secs(3));
    }

    #[test]
    fn alert_errors_name_the_field() {
        let rule = |body: &str| format!("[[alerts]]\nname = \"r\"\n{body}\n");
        let err = error_of(&rule("signal = \"ttft\"\nthreshold = 1"));
        assert!(
            err.contains("alerts[0].signal") && err.contains("probe_ttft_p95"),
            "{err}"
        );
        let err = error_of(&rule(
            "signal = \"probe_ttft_p95\"\nop = \"=>\"\nthreshold = 1",
        ));
        assert!(err.contains("alerts[0].op"), "{err}");
        let err = error_of(&rule("signal = \"probe_ttft_p95\"\nthreshold = \"soon\""));
        assert!(err.contains("alerts[0].threshold"), "{err}");
        let err = error_of(&rule("signal = \"kv_cache_usage\"\nthreshold = \"1s\""));
        assert!(
            err.contains("alerts[0].threshold") && err.contains("ratio"),
            "{err}"
        );
        let err = error_of(&rule(
            "signal = \"kv_cache_usage\"\nthreshold = 1\ntarget = \"nope\"",
        ));
        assert!(err.contains("alerts[0].target"), "{err}");
        let err = error_of(&rule(
            "signal = \"kv_cache_usage\"\nthreshold = 1\nfor = \"later\"",
        ));
        assert!(err.contains("for"), "{err}");
        let err = error_of(&rule(
            "signal = \"kv_cache_usage\"\nthreshold = 1\nlabels = { \"bad-name\" = \"x\" }",
        ));
        assert!(err.contains("alerts[0].labels.bad-name"), "{err}");
        let err = error_of("[[notifiers]]\nkind = \"pager\"\nurl = \"http://x\"\n");
        assert!(err.contains("kind") && err.contains("pager"), "{err}");
        let err = error_of("[[notifiers]]\nkind = \"slack\"\n");
        assert!(err.contains("notifiers[0].url"), "{err}");
        let err = error_of("[[notifiers]]\nkind = \"slack\"\nurl = \"ftp://hooks/T000/SECRET\"\n");
        assert!(
            err.contains("notifiers[0].url") && !err.contains("SECRET"),
            "{err}"
        );
    }

    #[test]
    fn target_objectives_are_checked() {
        let base = "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n";
        let ok = parse(&format!("{base}slo_ttft_p95 = \"2s\"\n")).unwrap();
        assert_eq!(ok.targets[0].slo_ttft_p95, Some(Duration::from_secs(2)));
        assert_eq!(ok.targets[0].slo_itl_p95, None);
        let err = error_of(&format!("{base}slo_itl_p95 = \"0s\"\n"));
        assert!(err.contains("targets[0].slo_itl_p95"), "{err}");
    }

    #[test]
    fn a_target_may_name_its_running_cap() {
        let base = "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n";
        let ok = parse(&format!("{base}max_num_seqs = 128\n")).unwrap();
        assert_eq!(ok.targets[0].max_num_seqs, Some(128));
        let err = error_of(&format!("{base}max_num_seqs = 0\n"));
        assert!(err.contains("targets[0].max_num_seqs"), "{err}");
    }

    #[test]
    fn downsampling_defaults_and_limits() {
        let config = parse("").unwrap();
        assert_eq!(config.server.downsample_after, Duration::from_secs(172_800));
        assert_eq!(config.server.downsample_interval, Duration::ZERO, "off");
        let off = parse("[server]\ndownsample_interval = \"0s\"\ndownsample_after = \"1m\"\n");
        assert!(off.is_ok(), "0s turns it off, so `after` is not checked");
        let err = error_of("[server]\ndownsample_interval = \"10m\"\n");
        assert!(
            err.contains("server.downsample_interval") && err.contains("at most 150 s"),
            "{err}"
        );
        // Checked once thinning is on.
        let err = error_of("[server]\ndownsample_interval = \"60s\"\ndownsample_after = \"10m\"\n");
        assert!(
            err.contains("server.downsample_after") && err.contains("at least 1h"),
            "{err}"
        );
    }

    #[test]
    fn scheduled_sweeps_are_capped_and_named() {
        let base = "[[targets]]\nname = \"a\"\nurl = \"http://x\"\n[targets.sweep]\n";
        let ok = parse(&format!("{base}every = \"24h\"\nconcurrency = [1, 2, 4]\n")).unwrap();
        let sweep = ok.targets[0].sweep.as_ref().unwrap();
        assert_eq!(sweep.every, Duration::from_secs(86_400));
        assert_eq!(sweep.shape, llmwatch_probe::Shape::new(512, 128));
        let err = error_of(&format!("{base}every = \"1m\"\n"));
        assert!(
            err.contains("targets[0].sweep.every") && err.contains("too often"),
            "{err}"
        );
        let err = error_of(&format!("{base}every = \"1h\"\nconcurrency = [1, 128]\n"));
        assert!(
            err.contains("targets[0].sweep.concurrency") && err.contains("cap of 64"),
            "{err}"
        );
        let ok = parse(&format!(
            "{base}every = \"1h\"\nconcurrency = [1, 128]\nmax_concurrency = 128\n"
        ));
        assert!(ok.is_ok());
        let err = error_of(&format!("{base}every = \"1h\"\nshape = \"big\"\n"));
        assert!(err.contains("targets[0].sweep.shape"), "{err}");
        assert_eq!(sweep.spin, llmwatch_probe::Spin::Auto);
        let on = parse(&format!("{base}every = \"1h\"\nspin = \"on\"\n")).unwrap();
        assert_eq!(
            on.targets[0].sweep.as_ref().unwrap().spin,
            llmwatch_probe::Spin::On
        );
        let err = error_of(&format!("{base}every = \"1h\"\nspin = \"sometimes\"\n"));
        // The error quotes the line, so the field is named.
        assert!(
            err.contains("spin = \"sometimes\"") && err.contains("`auto`, `on`, `off`"),
            "{err}"
        );
    }

    #[test]
    fn kubernetes_sd_config_errors_name_the_discovery_field() {
        let error = |body: &str| {
            let text = format!("[[discovery]]\nname = \"k8s\"\n{body}");
            Config::parse(&text, std::path::Path::new("t.toml"))
                .expect_err("refused")
                .to_string()
        };
        let both = error("files = [\"x.json\"]\n[discovery.kubernetes]\nrole = \"pod\"\n");
        assert!(
            both.contains("discovery[0].files") && both.contains("kubernetes_sd"),
            "{both}"
        );
        let namespace = error("[discovery.kubernetes]\nrole = \"pod\"\nnamespaces = [\"a_b\"]\n");
        assert!(
            namespace.contains("discovery[0].kubernetes.namespaces"),
            "{namespace}"
        );
        let url = error("[discovery.kubernetes]\nrole = \"pod\"\napi_server = \"ftp://x\"\n");
        assert!(url.contains("discovery[0].kubernetes.api_server"), "{url}");
        let rule = error(
            "[discovery.kubernetes]\nrole = \"pod\"\n[[discovery.relabel_configs]]\naction = \"lowercase\"\n",
        );
        assert!(rule.contains("discovery[0].relabel_configs[0]"), "{rule}");
    }
}
