//! The TOML config: parsed into typed values once, validated with errors that
//! name the field, so the rest of the daemon never re-checks.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use llmwatch_core::alerts::Op;
use llmwatch_core::catalog::Engine;
use llmwatch_core::signals::Signal;
use serde::{Deserialize, Deserializer};

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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub targets: Vec<TargetConfig>,
    #[serde(default)]
    pub gpus: Vec<GpuConfig>,
    #[serde(default)]
    pub alerts: Vec<AlertRuleConfig>,
    #[serde(default)]
    pub notifiers: Vec<NotifierConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default = "default_database")]
    pub database: PathBuf,
    /// Bearer token for the UI and API. Prefer `token_env`.
    #[serde(default)]
    pub token: Option<String>,
    /// Name of an environment variable holding the bearer token. Unset or
    /// empty at start, the daemon refuses to start (fail closed).
    #[serde(default)]
    pub token_env: Option<String>,
    /// Serve on a non-loopback address without a token. Off by default: such
    /// a daemon would let anyone on the network start load sweeps.
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// How long scrapes are kept.
    #[serde(default = "default_retention", deserialize_with = "duration")]
    pub retention: Duration,
    /// How long probe rows (canaries, bench and sweep requests) are kept.
    #[serde(default = "default_retention", deserialize_with = "duration")]
    pub probe_retention: Duration,
    /// How long finished sweeps (with their steps) are kept.
    #[serde(default = "default_sweep_retention", deserialize_with = "duration")]
    pub sweep_retention: Duration,
    /// How long the alert history (state changes) is kept.
    #[serde(
        default = "default_alert_history_retention",
        deserialize_with = "duration"
    )]
    pub alert_history_retention: Duration,
    /// Scrapes older than this are thinned to one per `downsample_interval`
    /// per target (DESIGN.md: a month of history kept small).
    #[serde(default = "default_downsample_after", deserialize_with = "duration")]
    pub downsample_after: Duration,
    /// One scrape kept per this much time in the thinned range; "0s" (the
    /// default: compressed storage keeps a month at full resolution small,
    /// BENCHMARKS.md) keeps every scrape. At most 150 s (signals look 5 min
    /// back for a scrape).
    #[serde(default = "default_downsample_interval", deserialize_with = "duration")]
    pub downsample_interval: Duration,
    /// The largest `/metrics` body accepted, in bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// How often alert rules are evaluated.
    #[serde(default = "default_alert_interval", deserialize_with = "duration")]
    pub alert_interval: Duration,
    /// How often a firing alert is sent to Alertmanager again (Prometheus'
    /// `--rules.alert.resend-delay`).
    #[serde(default = "default_alert_resend_delay", deserialize_with = "duration")]
    pub alert_resend_delay: Duration,
    /// The p95 TTFT objective the dashboard colours against (DESIGN.md's
    /// chat objective by default).
    #[serde(default = "default_slo_ttft_p95", deserialize_with = "duration")]
    pub slo_ttft_p95: Duration,
    /// The p95 ITL objective the dashboard colours against.
    #[serde(default = "default_slo_itl_p95", deserialize_with = "duration")]
    pub slo_itl_p95: Duration,
    /// Time a client has to send a request's headers (slowloris guard).
    #[serde(default = "default_http_header_timeout", deserialize_with = "duration")]
    pub http_header_timeout: Duration,
    /// Time a request has to be answered (an SSE stream may then run on).
    #[serde(
        default = "default_http_request_timeout",
        deserialize_with = "duration"
    )]
    pub http_request_timeout: Duration,
    /// Requests handled at once; more are answered 503.
    #[serde(default = "default_http_max_in_flight")]
    pub http_max_in_flight: usize,
    /// Bounds on what a sweep started through the API, the page or a
    /// schedule may ask of a production server.
    #[serde(default)]
    pub sweep_limits: SweepLimits,
    /// The sliding window the live diagnosis reads (default 5 min).
    #[serde(default = "default_live_window", deserialize_with = "duration")]
    pub live_window: Duration,
    /// How often each target's live verdict is evaluated.
    #[serde(default = "default_live_interval", deserialize_with = "duration")]
    pub live_interval: Duration,
}

/// `[server.sweep_limits]`: a sweep request outside these is refused (400
/// naming the field), and a running sweep past `max_sweep_duration` stops.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepLimits {
    /// Steps in the ladder.
    #[serde(default = "default_max_sweep_steps")]
    pub max_steps: usize,
    /// The highest request rate (requests/s) of a rate ladder.
    #[serde(default = "default_max_sweep_rate")]
    pub max_rate: f64,
    /// Measured requests per step.
    #[serde(default = "default_max_requests_per_step")]
    pub max_requests_per_step: u64,
    /// The longest minimum step duration.
    #[serde(default = "default_max_step_duration", deserialize_with = "duration")]
    pub max_step_duration: Duration,
    /// The whole sweep.
    #[serde(default = "default_max_sweep_duration", deserialize_with = "duration")]
    pub max_sweep_duration: Duration,
}

impl Default for SweepLimits {
    fn default() -> Self {
        SweepLimits {
            max_steps: default_max_sweep_steps(),
            max_rate: default_max_sweep_rate(),
            max_requests_per_step: default_max_requests_per_step(),
            max_step_duration: default_max_step_duration(),
            max_sweep_duration: default_max_sweep_duration(),
        }
    }
}

fn default_max_sweep_steps() -> usize {
    16
}
fn default_max_sweep_rate() -> f64 {
    1000.0
}
fn default_max_requests_per_step() -> u64 {
    10_000
}
fn default_max_step_duration() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_max_sweep_duration() -> Duration {
    Duration::from_secs(30 * 60)
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            database: default_database(),
            token: None,
            token_env: None,
            allow_unauthenticated: false,
            retention: default_retention(),
            probe_retention: default_retention(),
            sweep_retention: default_sweep_retention(),
            alert_history_retention: default_alert_history_retention(),
            downsample_after: default_downsample_after(),
            downsample_interval: default_downsample_interval(),
            max_body_bytes: default_max_body_bytes(),
            alert_interval: default_alert_interval(),
            alert_resend_delay: default_alert_resend_delay(),
            slo_ttft_p95: default_slo_ttft_p95(),
            live_window: default_live_window(),
            live_interval: default_live_interval(),
            slo_itl_p95: default_slo_itl_p95(),
            sweep_limits: SweepLimits::default(),
            http_header_timeout: default_http_header_timeout(),
            http_request_timeout: default_http_request_timeout(),
            http_max_in_flight: default_http_max_in_flight(),
        }
    }
}

/// `engine = "auto"` or one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineChoice {
    Auto,
    Fixed(Engine),
}

impl<'de> Deserialize<'de> for EngineChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "auto" {
            return Ok(EngineChoice::Auto);
        }
        text.parse::<Engine>()
            .map(EngineChoice::Fixed)
            .map_err(|err| serde::de::Error::custom(format!("{err} (or \"auto\")")))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    pub name: String,
    pub url: String,
    #[serde(default = "default_engine")]
    pub engine: EngineChoice,
    #[serde(default = "default_scrape_interval", deserialize_with = "duration")]
    pub scrape_interval: Duration,
    /// Defaults to the scrape interval, capped at 10 s.
    #[serde(default, deserialize_with = "optional_duration")]
    pub scrape_timeout: Option<Duration>,
    /// Defaults to `/metrics` (`/v1/metrics` for NIM).
    #[serde(default)]
    pub metrics_path: Option<String>,
    /// Environment variable that holds the API key for probes.
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub probe: Option<ProbeConfig>,
    /// Sweeps the daemon runs by itself (off unless set).
    #[serde(default)]
    pub sweep: Option<SweepScheduleConfig>,
    /// This target's p95 TTFT objective, overriding `server.slo_ttft_p95`
    /// (pages colour and chart against it; its sweeps judge by it).
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_ttft_p95: Option<Duration>,
    /// This target's p95 ITL objective, overriding `server.slo_itl_p95`.
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_itl_p95: Option<Duration>,
    /// The name of the `[[gpus]]` source that serves this target, so pages
    /// show its GPU memory and utilisation beside the target's signals.
    #[serde(default)]
    pub gpus: Option<String>,
}

impl TargetConfig {
    pub fn metrics_url(&self) -> String {
        let path = match (&self.metrics_path, self.engine) {
            (Some(path), _) => path.as_str(),
            (None, EngineChoice::Fixed(Engine::Nim)) => "/v1/metrics",
            (None, _) => "/metrics",
        };
        join_url(&self.url, path)
    }

    pub fn scrape_timeout(&self) -> Duration {
        self.scrape_timeout
            .unwrap_or_else(|| self.scrape_interval.min(Duration::from_secs(10)))
    }
}

/// Canary probe settings of a target (used once probes are wired in).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    #[serde(default = "default_probe_interval", deserialize_with = "duration")]
    pub interval: Duration,
    #[serde(default = "default_probe_shape")]
    pub shape: String,
    #[serde(default = "default_probe_api")]
    pub api: ProbeApi,
    /// Model to ask for; defaults to the first of `/v1/models`.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default = "default_probe_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
}

/// `[targets.sweep]`: a sweep of this target every `every`. Sweeps load a
/// server hard, so the first runs one period after start, never at start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepScheduleConfig {
    #[serde(deserialize_with = "duration")]
    pub every: Duration,
    #[serde(default = "default_sweep_shape")]
    pub shape: String,
    #[serde(default = "default_probe_api")]
    pub api: ProbeApi,
    /// Concurrency ladder; default 1, 2, 4 … 64.
    #[serde(default)]
    pub concurrency: Option<Vec<u32>>,
    /// The sweep cap (default 64): a ladder above it is refused.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub requests_per_step: Option<u64>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub min_step_duration: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_ttft_p95: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_itl_p95: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_e2e_p95: Option<Duration>,
    /// Busy-poll the measuring thread during this target's sweeps
    /// (scheduled or started by hand): "auto" (4+ cores), "on", "off".
    #[serde(default)]
    pub spin: llmwatch_probe::Spin,
    /// Repeat the previous sweeps' prompts (deliberate prefix-cache
    /// experiments); by default every sweep's prompts are new.
    #[serde(default)]
    pub reuse_prompts: bool,
}

/// The shortest period between scheduled sweeps: a sweep takes minutes and
/// loads the server hard.
pub const MIN_SWEEP_PERIOD: Duration = Duration::from_secs(600);

fn default_sweep_shape() -> String {
    "512x128".to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeApi {
    Chat,
    Completions,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    pub name: String,
    /// A dcgm-exporter `/metrics` URL.
    #[serde(default)]
    pub dcgm_url: Option<String>,
    /// Read the local GPUs through NVML instead.
    #[serde(default)]
    pub nvml: bool,
    #[serde(default = "default_scrape_interval", deserialize_with = "duration")]
    pub interval: Duration,
}

/// An alert rule: `signal op threshold` over `window`, held for `for`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleConfig {
    pub name: String,
    /// A signal name, e.g. `probe_ttft_p95`, `server_ttft_p95`, `kv_cache_usage`.
    pub signal: String,
    /// `>`, `>=`, `<`, `<=`, `==` or `!=`.
    #[serde(default = "default_op")]
    pub op: String,
    /// A duration (`"1s"`, `"250ms"`) for signals in seconds, else a number.
    pub threshold: ThresholdValue,
    /// The window the signal is computed over.
    #[serde(default = "default_alert_window", deserialize_with = "duration")]
    pub window: Duration,
    #[serde(rename = "for", default, deserialize_with = "duration_or_zero")]
    pub for_: Duration,
    #[serde(default, deserialize_with = "duration_or_zero")]
    pub keep_firing_for: Duration,
    /// One target's name; every target when absent.
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A threshold as written: a number or a duration string.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ThresholdValue {
    Number(f64),
    Text(String),
}

impl AlertRuleConfig {
    /// The signal, parsed.
    pub fn signal(&self) -> Result<Signal, String> {
        self.signal.parse::<Signal>().map_err(|_| {
            let known: Vec<&str> = Signal::all().iter().map(|s| s.as_str()).collect();
            format!(
                "unknown signal {:?}: expected one of {}",
                self.signal,
                known.join(", ")
            )
        })
    }

    /// What the rule watches: a signal or the live diagnosis (a
    /// `bottleneck` rule's verdict comes from its threshold).
    pub fn rule_signal(&self) -> Result<crate::alerts::RuleSignal, String> {
        use crate::alerts::RuleSignal;
        match RuleSignal::parse(&self.signal)? {
            RuleSignal::Bottleneck(_) => match &self.threshold {
                ThresholdValue::Text(text) => RuleSignal::verdict(text).map(RuleSignal::Bottleneck),
                ThresholdValue::Number(n) => Err(format!(
                    "a bottleneck rule's threshold names a verdict (e.g. \"kv_cache_capacity\"), found {n}"
                )),
            },
            other => Ok(other),
        }
    }

    /// The comparison, parsed.
    pub fn op(&self) -> Result<Op, String> {
        self.op.parse::<Op>().map_err(|err| err.to_string())
    }

    /// The threshold in the signal's unit (seconds for latency signals).
    pub fn threshold(&self) -> Result<f64, String> {
        match self.rule_signal()? {
            crate::alerts::RuleSignal::Signal(_) => {}
            // "verdict is X" is "indicator == 1".
            crate::alerts::RuleSignal::Bottleneck(_) => {
                return match self.op()? {
                    Op::Eq | Op::Ne => Ok(1.0),
                    op => Err(format!(
                        "a bottleneck rule compares with == or !=, not {}",
                        op.as_str()
                    )),
                };
            }
            crate::alerts::RuleSignal::BottleneckChanges => {
                return match &self.threshold {
                    ThresholdValue::Number(n) if n.is_finite() => Ok(*n),
                    other => Err(format!("a number of changes, found {other:?}")),
                };
            }
        }
        let signal = self.signal()?;
        let value = match &self.threshold {
            ThresholdValue::Number(n) => *n,
            ThresholdValue::Text(text) if signal.unit() == "s" => parse_duration(text)
                .map(|d| d.as_secs_f64())
                .or_else(|err| text.trim().parse::<f64>().map_err(|_| err))?,
            ThresholdValue::Text(text) => text.trim().parse::<f64>().map_err(|_| {
                format!(
                    "{text:?} is not a number (signal {} is in {}, not seconds)",
                    signal.as_str(),
                    signal.unit()
                )
            })?,
        };
        if value.is_finite() {
            Ok(value)
        } else {
            Err(format!("must be a finite number, found {value}"))
        }
    }
}

/// Where alerts are sent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifierConfig {
    /// A name for logs and metrics; defaults to `KIND-INDEX`.
    #[serde(default)]
    pub name: Option<String>,
    pub kind: NotifierKind,
    /// The URL; it may hold a secret (a Slack webhook path) and is never
    /// logged. Prefer `url_env`.
    #[serde(default)]
    pub url: Option<String>,
    /// Name of an environment variable holding the URL.
    #[serde(default)]
    pub url_env: Option<String>,
    /// Per request, retries included separately.
    #[serde(default = "default_notifier_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifierKind {
    /// Alertmanager's webhook v4 JSON, POSTed to `url`.
    Webhook,
    /// Alertmanager's `POST /api/v2/alerts` under `url`.
    Alertmanager,
    /// A Slack-compatible incoming webhook.
    Slack,
}

impl NotifierKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NotifierKind::Webhook => "webhook",
            NotifierKind::Alertmanager => "alertmanager",
            NotifierKind::Slack => "slack",
        }
    }
}

impl NotifierConfig {
    /// The URL, from the config or its environment variable.
    pub fn resolved_url(&self) -> Option<String> {
        self.url.clone().or_else(|| {
            self.url_env
                .as_ref()
                .and_then(|var| std::env::var(var).ok())
        })
    }
}

fn default_op() -> String {
    ">".to_string()
}
fn default_alert_window() -> Duration {
    Duration::from_secs(5 * 60)
}
fn default_live_window() -> Duration {
    Duration::from_secs(llmwatch_core::analysis::DEFAULT_LIVE_WINDOW_S)
}

fn default_live_interval() -> Duration {
    Duration::from_secs(15)
}

fn default_alert_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_alert_resend_delay() -> Duration {
    Duration::from_secs(60)
}
fn default_notifier_timeout() -> Duration {
    Duration::from_secs(10)
}

fn duration_or_zero<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9477))
}
fn default_database() -> PathBuf {
    PathBuf::from("llmwatch.db")
}
fn default_retention() -> Duration {
    Duration::from_secs(30 * 24 * 3600)
}
fn default_http_header_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_http_request_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_http_max_in_flight() -> usize {
    256
}
fn default_sweep_retention() -> Duration {
    Duration::from_secs(365 * 24 * 3600)
}
fn default_alert_history_retention() -> Duration {
    Duration::from_secs(90 * 24 * 3600)
}
fn default_downsample_after() -> Duration {
    Duration::from_secs(2 * 24 * 3600)
}
fn default_downsample_interval() -> Duration {
    Duration::ZERO
}
fn default_slo_ttft_p95() -> Duration {
    Duration::from_secs(1)
}
fn default_slo_itl_p95() -> Duration {
    Duration::from_millis(50)
}
fn default_max_body_bytes() -> u64 {
    16 * 1024 * 1024
}
fn default_engine() -> EngineChoice {
    EngineChoice::Auto
}
fn default_scrape_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_probe_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_probe_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_probe_shape() -> String {
    "64x16".to_string()
}
fn default_probe_api() -> ProbeApi {
    ProbeApi::Chat
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|t| parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// `"5s"`, `"250ms"`, `"2m"`, `"1h 30m"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|err| {
        format!("invalid duration {text:?}: {err} (examples: \"5s\", \"250ms\", \"2m\")")
    })
}

/// Joins a base URL and a path without doubling or losing the slash.
pub fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
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
        let config: Config = toml::from_str(text).map_err(|err| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
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

    fn validate(&self) -> Result<(), (String, String)> {
        let mut names = HashSet::new();
        for (i, target) in self.targets.iter().enumerate() {
            let field = |name: &str| format!("targets[{i}].{name}");
            check_name(&target.name).map_err(|m| (field("name"), m))?;
            for (name, objective) in [
                ("slo_ttft_p95", target.slo_ttft_p95),
                ("slo_itl_p95", target.slo_itl_p95),
            ] {
                if let Some(d) = objective {
                    check_positive(d).map_err(|m| (field(name), m))?;
                }
            }
            if !names.insert(target.name.as_str()) {
                return Err((
                    field("name"),
                    format!("duplicate name {:?}: names must be unique", target.name),
                ));
            }
            check_http_url(&target.url).map_err(|m| (field("url"), m))?;
            check_positive(target.scrape_interval).map_err(|m| (field("scrape_interval"), m))?;
            if let Some(timeout) = target.scrape_timeout {
                check_positive(timeout).map_err(|m| (field("scrape_timeout"), m))?;
            }
            if let Some(path) = &target.metrics_path {
                if !path.starts_with('/') {
                    return Err((
                        field("metrics_path"),
                        format!("must start with '/', found {path:?}"),
                    ));
                }
            }
            if let Some(sweep) = &target.sweep {
                if sweep.every < MIN_SWEEP_PERIOD {
                    return Err((
                        field("sweep.every"),
                        format!(
                            "{:?} is too often: scheduled sweeps load the server hard; at least {:?}",
                            sweep.every, MIN_SWEEP_PERIOD
                        ),
                    ));
                }
                check_shape(&sweep.shape).map_err(|m| (field("sweep.shape"), m))?;
                let cap = sweep.max_concurrency.unwrap_or(64);
                if let Some(ladder) = &sweep.concurrency {
                    if ladder.is_empty() || ladder.contains(&0) {
                        return Err((
                            field("sweep.concurrency"),
                            "must list concurrency levels of at least 1, e.g. [1, 2, 4, 8]".into(),
                        ));
                    }
                    if let Some(high) = ladder.iter().find(|c| **c > cap) {
                        return Err((
                            field("sweep.concurrency"),
                            format!(
                                "{high} is above the sweep cap of {cap}; raise sweep.max_concurrency on purpose"
                            ),
                        ));
                    }
                }
            }
            if let Some(probe) = &target.probe {
                check_positive(probe.interval).map_err(|m| (field("probe.interval"), m))?;
                check_shape(&probe.shape).map_err(|m| (field("probe.shape"), m))?;
            }
        }
        for (i, gpu) in self.gpus.iter().enumerate() {
            let field = |name: &str| format!("gpus[{i}].{name}");
            check_name(&gpu.name).map_err(|m| (field("name"), m))?;
            if !names.insert(gpu.name.as_str()) {
                return Err((
                    field("name"),
                    format!(
                        "duplicate name {:?}: target and GPU source names must be unique",
                        gpu.name
                    ),
                ));
            }
            match (&gpu.dcgm_url, gpu.nvml) {
                (Some(url), false) => check_http_url(url).map_err(|m| (field("dcgm_url"), m))?,
                (None, true) => {}
                (Some(_), true) => {
                    return Err((
                        field("nvml"),
                        "set either dcgm_url or nvml = true, not both".to_string(),
                    ))
                }
                (None, false) => {
                    return Err((
                        field("dcgm_url"),
                        "missing: set dcgm_url = \"http://host:9400/metrics\" or nvml = true"
                            .to_string(),
                    ))
                }
            }
            check_positive(gpu.interval).map_err(|m| (field("interval"), m))?;
        }
        let mut rule_names = HashSet::new();
        for (i, rule) in self.alerts.iter().enumerate() {
            let field = |name: &str| format!("alerts[{i}].{name}");
            check_name(&rule.name).map_err(|m| (field("name"), m))?;
            if !rule_names.insert(rule.name.as_str()) {
                return Err((
                    field("name"),
                    format!("duplicate rule name {:?}: names must be unique", rule.name),
                ));
            }
            rule.rule_signal().map_err(|m| (field("signal"), m))?;
            rule.op().map_err(|m| (field("op"), m))?;
            rule.threshold().map_err(|m| (field("threshold"), m))?;
            check_positive(rule.window).map_err(|m| (field("window"), m))?;
            if let Some(target) = &rule.target {
                if !names.contains(target.as_str()) {
                    return Err((
                        field("target"),
                        format!("no target or GPU source is named {target:?}"),
                    ));
                }
            }
            for (key, _) in rule.labels.iter() {
                check_label_name(key).map_err(|m| (field(&format!("labels.{key}")), m))?;
            }
            for (key, _) in rule.annotations.iter() {
                check_label_name(key).map_err(|m| (field(&format!("annotations.{key}")), m))?;
            }
        }
        for (i, notifier) in self.notifiers.iter().enumerate() {
            let field = |name: &str| format!("notifiers[{i}].{name}");
            if let Some(name) = &notifier.name {
                check_name(name).map_err(|m| (field("name"), m))?;
            }
            match (&notifier.url, &notifier.url_env) {
                (Some(url), None) => {
                    check_http_url(url).map_err(|m| (field("url"), redact_urls(&m)))?
                }
                (None, Some(_)) => {}
                (Some(_), Some(_)) => {
                    return Err((
                        field("url"),
                        "set either url or url_env, not both".to_string(),
                    ))
                }
                (None, None) => {
                    return Err((
                        field("url"),
                        "missing: set url = \"http://host:9093\" or url_env = \"VAR\"".to_string(),
                    ))
                }
            }
            check_positive(notifier.timeout).map_err(|m| (field("timeout"), m))?;
        }
        check_positive(self.server.alert_interval)
            .map_err(|m| ("server.alert_interval".to_string(), m))?;
        check_positive(self.server.live_window)
            .map_err(|m| ("server.live_window".to_string(), m))?;
        check_positive(self.server.live_interval)
            .map_err(|m| ("server.live_interval".to_string(), m))?;
        let bucket_ms =
            i64::try_from(self.server.downsample_interval.as_millis()).unwrap_or(i64::MAX);
        if bucket_ms > llmwatch_store::MAX_DOWNSAMPLE_BUCKET_MS {
            return Err((
                "server.downsample_interval".to_string(),
                format!(
                    "at most {} s: a signal looks 5 min back for a scrape (\"0s\" turns downsampling off)",
                    llmwatch_store::MAX_DOWNSAMPLE_BUCKET_MS / 1000
                ),
            ));
        }
        if !self.server.downsample_interval.is_zero()
            && self.server.downsample_after < Duration::from_secs(3600)
        {
            return Err((
                "server.downsample_after".to_string(),
                "at least 1h: recent data stays at full resolution".to_string(),
            ));
        }
        check_positive(self.server.slo_ttft_p95)
            .map_err(|m| ("server.slo_ttft_p95".to_string(), m))?;
        check_positive(self.server.slo_itl_p95)
            .map_err(|m| ("server.slo_itl_p95".to_string(), m))?;
        for (i, target) in self.targets.iter().enumerate() {
            if let Some(gpus) = &target.gpus {
                if !self.gpus.iter().any(|g| &g.name == gpus) {
                    return Err((
                        format!("targets[{i}].gpus"),
                        format!("no [[gpus]] source is named {gpus:?}"),
                    ));
                }
            }
        }
        for (name, keep) in [
            ("retention", self.server.retention),
            ("probe_retention", self.server.probe_retention),
            ("sweep_retention", self.server.sweep_retention),
            (
                "alert_history_retention",
                self.server.alert_history_retention,
            ),
        ] {
            check_positive(keep).map_err(|m| (format!("server.{name}"), m))?;
        }
        check_positive(self.server.http_header_timeout)
            .map_err(|m| ("server.http_header_timeout".to_string(), m))?;
        check_positive(self.server.http_request_timeout)
            .map_err(|m| ("server.http_request_timeout".to_string(), m))?;
        if self.server.http_max_in_flight == 0 {
            return Err((
                "server.http_max_in_flight".to_string(),
                "must be at least 1".to_string(),
            ));
        }
        let limits = &self.server.sweep_limits;
        if limits.max_steps == 0 || limits.max_requests_per_step == 0 {
            return Err((
                "server.sweep_limits".to_string(),
                "max_steps and max_requests_per_step must be at least 1".to_string(),
            ));
        }
        if !(limits.max_rate.is_finite() && limits.max_rate > 0.0) {
            return Err((
                "server.sweep_limits.max_rate".to_string(),
                "must be a positive number of requests/s".to_string(),
            ));
        }
        check_positive(limits.max_sweep_duration)
            .map_err(|m| ("server.sweep_limits.max_sweep_duration".to_string(), m))?;
        if self.server.max_body_bytes == 0 {
            return Err((
                "server.max_body_bytes".to_string(),
                "must be positive".to_string(),
            ));
        }
        if self.server.token.is_some() && self.server.token_env.is_some() {
            return Err((
                "server.token".to_string(),
                "set either token or token_env, not both".to_string(),
            ));
        }
        if self
            .server
            .token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty())
        {
            return Err((
                "server.token".to_string(),
                "is empty: an empty token would let anyone in; set a token or remove the field"
                    .to_string(),
            ));
        }
        if self
            .server
            .token_env
            .as_deref()
            .is_some_and(|v| v.trim().is_empty())
        {
            return Err((
                "server.token_env".to_string(),
                "names no variable".to_string(),
            ));
        }
        Ok(())
    }

    /// The bearer token, from the config or the environment variable it
    /// names. A named variable that is unset or empty is an error, never
    /// "no token": the daemon fails closed.
    pub fn bearer_token(&self) -> Result<Option<String>, ConfigError> {
        if let Some(token) = &self.server.token {
            return Ok(Some(token.clone()));
        }
        let Some(var) = &self.server.token_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => Ok(Some(token)),
            _ => Err(ConfigError::AtStart {
                field: "server.token_env".to_string(),
                message: format!(
                    "the environment variable {var} is unset or empty; refusing to start \
                     without the token it should hold"
                ),
            }),
        }
    }

    /// The token the daemon serves with, after checking that a listen
    /// address reachable from the network has one (or explicitly needs none).
    pub fn access_token(&self) -> Result<Option<String>, ConfigError> {
        let token = self.bearer_token()?;
        let exposed = !self.server.listen.ip().is_loopback();
        if token.is_none() && exposed && !self.server.allow_unauthenticated {
            return Err(ConfigError::AtStart {
                field: "server.listen".to_string(),
                message: format!(
                    "{} is reachable from the network and no token is set; set \
                     server.token_env (or allow_unauthenticated = true to serve without one)",
                    self.server.listen
                ),
            });
        }
        Ok(token)
    }
}

/// A target or source name: 1-64 letters, digits, `-`, `_` or `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid name: use 1-64 letters, digits, '-', '_' or '.'"
        ))
    }
}

fn check_http_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("invalid URL {url:?}: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "URL {url:?} must start with http:// or https://, found scheme {:?}",
            parsed.scheme()
        ));
    }
    Ok(())
}

/// Prometheus label names: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid label name: use letters, digits and '_', not starting with a digit"
        ))
    }
}

fn redact_urls(message: &str) -> String {
    // check_http_url quotes the URL it rejects; drop it.
    match (message.find('"'), message.rfind('"')) {
        (Some(a), Some(b)) if b > a => format!("{}(the URL){}", &message[..a], &message[b + 1..]),
        _ => message.to_string(),
    }
}

fn check_positive(duration: Duration) -> Result<(), String> {
    if duration.is_zero() {
        Err("must be longer than zero".to_string())
    } else {
        Ok(())
    }
}

fn check_shape(shape: &str) -> Result<(), String> {
    let parsed = shape.split_once('x').and_then(|(input, output)| {
        Some((input.parse::<u32>().ok()?, output.parse::<u32>().ok()?))
    });
    match parsed {
        Some((input, output)) if input > 0 && output > 0 => Ok(()),
        _ => Err(format!(
            "invalid shape {shape:?}: expected INPUTxOUTPUT tokens, e.g. \"64x16\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Ok(crate::alerts::RuleSignal::Bottleneck(
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
        let err = error_of("[server]\ndownsample_after = \"10m\"\n");
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
        assert_eq!(sweep.shape, "512x128");
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
}
