//! The config's schema: what each section may hold, with its defaults.
//! Parsing only; checks across fields live in `validate`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use llmwatch_core::alerts::Op;
use llmwatch_core::catalog::Engine;
use llmwatch_core::signals::Signal;
use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::Shape;
use serde::{Deserialize, Deserializer};

use crate::fields::{conversation, duration, optional_duration, parse_duration, shape};

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
    /// Target groups found by Prometheus service discovery (file_sd,
    /// http_sd), added and removed while the daemon runs.
    #[serde(default)]
    pub discovery: Vec<DiscoveryConfig>,
    /// `[[remote_write]]` endpoints (see `remote_write.rs`).
    #[serde(default)]
    pub remote_write: Vec<crate::remote_write::RemoteWriteConfig>,
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
    /// How long the alert history (state changes) and the live-verdict
    /// timeline are kept.
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
    /// BENCHMARKS.md) keeps every scrape. At most 150 s (signals look 5 min back for a scrape).
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
    /// Programs an experiment started through the API may run as its server
    /// (the plan's `[server] command` first word, matched exactly). Empty by
    /// default: the API then starts no process.
    #[serde(default)]
    pub experiment_programs: Vec<String>,
    /// The sliding window the live diagnosis reads (default 5 min).
    #[serde(default = "default_live_window", deserialize_with = "duration")]
    pub live_window: Duration,
    /// How often each target's live verdict is evaluated.
    #[serde(default = "default_live_interval", deserialize_with = "duration")]
    pub live_interval: Duration,
    /// `"i/n"`: this instance is shard i of n and watches only the
    /// discovered targets that hash to it (see `Shard`).
    #[serde(default)]
    pub shard: Option<crate::shard::Shard>,
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
            shard: None,
            slo_itl_p95: default_slo_itl_p95(),
            sweep_limits: SweepLimits::default(),
            experiment_programs: Vec::new(),
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    /// The server's cap on running sequences (vLLM `--max-num-seqs`), where
    /// its page does not say it: the verdict then tells a running plateau
    /// at this cap from one at the KV cache's limit by name.
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    /// Labels of the target (from service discovery, or set by hand): they
    /// label its series in the Prometheus API and remote_write.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The `[[discovery]]` group that found this target; `None` for one
    /// listed in `[[targets]]`.
    #[serde(skip)]
    pub discovered_by: Option<String>,
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

/// `[[discovery]]`: one group of targets that Prometheus service-discovery
/// documents list (`[{"targets": ["host:port"], "labels": {...}}]`), read from
/// files (file_sd, JSON or YAML) or an HTTP endpoint (http_sd), re-read every
/// `refresh_interval`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// Prefix of the discovered targets' names, and their `job`.
    pub name: String,
    /// file_sd: files to read; `*` and `?` may appear in the file name.
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// http_sd: the URL that answers the target groups as JSON.
    #[serde(default)]
    pub http_url: Option<String>,
    /// Environment variable holding a bearer token for `http_url`.
    #[serde(default)]
    pub http_token_env: Option<String>,
    /// kubernetes_sd: pods, Endpoints or EndpointSlices from the
    /// Kubernetes API (list, then watch).
    #[serde(default)]
    pub kubernetes: Option<crate::kubernetes::KubernetesSdConfig>,
    /// Prometheus `relabel_configs`, applied to every discovered target
    /// (`__address__`, `__meta_*` and the group's labels) before it becomes
    /// one; `keep`/`drop` filter targets.
    #[serde(default)]
    pub relabel_configs: Vec<crate::relabel::RelabelConfig>,
    #[serde(default = "default_discovery_refresh", deserialize_with = "duration")]
    pub refresh_interval: Duration,
    /// Settings every discovered target of this group gets.
    #[serde(default)]
    pub target: DiscoveredTargetSettings,
}

/// `[discovery.target]`: what a `[[targets]]` entry would say, for every
/// target of a discovery group (name, URL and labels come from discovery).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveredTargetSettings {
    #[serde(default = "default_engine")]
    pub engine: EngineChoice,
    #[serde(default = "default_scrape_interval", deserialize_with = "duration")]
    pub scrape_interval: Duration,
    #[serde(default, deserialize_with = "optional_duration")]
    pub scrape_timeout: Option<Duration>,
    /// Overridden per target by the `__metrics_path__` label.
    #[serde(default)]
    pub metrics_path: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub probe: Option<ProbeConfig>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_ttft_p95: Option<Duration>,
    #[serde(default, deserialize_with = "optional_duration")]
    pub slo_itl_p95: Option<Duration>,
}

impl Default for DiscoveredTargetSettings {
    fn default() -> Self {
        DiscoveredTargetSettings {
            engine: default_engine(),
            scrape_interval: default_scrape_interval(),
            scrape_timeout: None,
            metrics_path: None,
            api_key_env: None,
            probe: None,
            slo_ttft_p95: None,
            slo_itl_p95: None,
        }
    }
}

fn default_discovery_refresh() -> Duration {
    Duration::from_secs(30)
}

/// Canary probe settings of a target (used once probes are wired in).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    #[serde(default = "default_probe_interval", deserialize_with = "duration")]
    pub interval: Duration,
    #[serde(default = "default_probe_shape", deserialize_with = "shape")]
    pub shape: Shape,
    #[serde(default = "default_probe_api")]
    pub api: ProbeApi,
    /// Model to ask for; defaults to the first of `/v1/models`.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default = "default_probe_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// `"multi-turn:TURNS[,think=DUR]"`: each tick sends one conversation,
    /// its turns as the canary's probes (each resending the history, on
    /// one connection), so TTFT and cached tokens are recorded per turn.
    #[serde(default, deserialize_with = "conversation")]
    pub workload: Option<MultiTurn>,
}

/// `[targets.sweep]`: a sweep of this target every `every`. Sweeps load a
/// server hard, so the first runs one period after start, never at start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepScheduleConfig {
    #[serde(deserialize_with = "duration")]
    pub every: Duration,
    #[serde(default = "default_sweep_shape", deserialize_with = "shape")]
    pub shape: Shape,
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

fn default_sweep_shape() -> Shape {
    Shape::new(512, 128)
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
    pub fn rule_signal(&self) -> Result<llmwatch_core::alerts::RuleSignal, String> {
        use llmwatch_core::alerts::RuleSignal;
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
            llmwatch_core::alerts::RuleSignal::Signal(_) => {}
            // "verdict is X" is "indicator == 1".
            llmwatch_core::alerts::RuleSignal::Bottleneck(_) => {
                return match self.op()? {
                    Op::Eq | Op::Ne => Ok(1.0),
                    op => Err(format!(
                        "a bottleneck rule compares with == or !=, not {}",
                        op.as_str()
                    )),
                };
            }
            llmwatch_core::alerts::RuleSignal::BottleneckChanges => {
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
fn default_probe_shape() -> Shape {
    Shape::new(64, 16)
}
fn default_probe_api() -> ProbeApi {
    ProbeApi::Chat
}

/// Joins a base URL and a path without doubling or losing the slash.
pub fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}
