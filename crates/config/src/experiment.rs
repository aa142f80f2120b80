//! Experiment plans (`llmwatch experiment PLAN.toml`, `POST
//! /api/v1/experiments`): how to start the server under test, the one load
//! every variant gets, the optional graded set, and the variants — each one
//! change from the baseline. Parsed and validated here once; errors name
//! the field.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use llmwatch_probe::conversation::MultiTurn;
use serde::Deserialize;

use crate::fields::parse_duration;
use crate::ConfigError;

/// Most variants one plan may hold: each is started `repeats` times.
pub const MAX_VARIANTS: usize = 16;
/// Most repeats per variant.
pub const MAX_REPEATS: u32 = 10;

/// A validated plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentPlan {
    pub name: String,
    pub repeats: u32,
    /// Let a variant change more than one setting from the baseline.
    pub allow_multiple_changes: bool,
    /// Seeds the bootstrap and the workload's prompts.
    pub seed: u64,
    pub target: PlanTarget,
    pub sweep: PlanSweep,
    pub quality: Option<PlanQuality>,
    /// The first is the baseline.
    pub variants: Vec<PlanVariant>,
}

/// Who starts the server under test.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanTarget {
    /// llmwatch starts it per variant.
    Command(PlanServer),
    /// The user restarts it between variants; llmwatch waits and checks.
    Url(String),
}

/// `[server]`: the command that starts the server under test.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanServer {
    /// Program and arguments; `{port}` is replaced by the port chosen.
    pub command: Vec<String>,
    pub health: String,
    pub ready_timeout: Duration,
    /// A fixed port instead of a free one.
    pub port: Option<u16>,
    pub env: BTreeMap<String, String>,
}

/// `[sweep]`: the same load for every variant.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSweep {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub concurrency: Vec<u32>,
    pub slo_ttft_p95: Duration,
    pub slo_itl_p95: Duration,
    pub requests_per_step: u64,
    pub min_step_duration: Duration,
    /// The model name to send (default: what `/v1/models` lists).
    pub model: Option<String>,
    /// Reference load for the p95 TTFT/ITL columns (default: the ladder's
    /// middle step).
    pub reference_concurrency: u32,
    pub requests_per_slot: u64,
    /// Warm-up requests per step (default: one per slot).
    pub warmup: Option<u64>,
    pub scrape_interval: Duration,
    /// Judge the load generator's own CPU and lags (on by default; off
    /// only where the host is shared and slow, e.g. CI).
    pub client_self_check: bool,
    /// A dcgm-exporter page of the server's GPUs (card, energy per token).
    pub gpu_url: Option<String>,
    /// `multi-turn:TURNS[,think=DUR]`: each level is that many concurrent
    /// conversations (the report shows each variant's prefix-cache benefit
    /// per turn).
    pub workload: Option<MultiTurn>,
}

/// `[quality]`: graded answers beside speed.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanQuality {
    /// `builtin:arith-50` or a JSONL file of `{prompt, answer}`.
    pub set: String,
    /// Largest accuracy drop (0..1) from the baseline before a variant is
    /// marked.
    pub max_drop: f64,
    pub max_tokens: u32,
}

/// `[[variant]]`: one change.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanVariant {
    pub name: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    url: Option<String>,
    experiment: RawExperiment,
    server: Option<RawServer>,
    sweep: RawSweep,
    quality: Option<RawQuality>,
    #[serde(default)]
    variant: Vec<RawVariant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    name: String,
    #[serde(default = "default_repeats")]
    repeats: u32,
    #[serde(default)]
    allow_multiple_changes: bool,
    #[serde(default)]
    seed: u64,
}

fn default_repeats() -> u32 {
    3
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    command: Vec<String>,
    #[serde(default = "default_health")]
    health: String,
    #[serde(default = "default_ready_timeout")]
    ready_timeout: String,
    port: Option<u16>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

fn default_health() -> String {
    "/health".into()
}

fn default_ready_timeout() -> String {
    "5m".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    shape: String,
    concurrency: Vec<u32>,
    #[serde(default = "default_slo_ttft")]
    slo_ttft_p95: String,
    #[serde(default = "default_slo_itl")]
    slo_itl_p95: String,
    #[serde(default = "default_requests_per_step")]
    requests_per_step: u64,
    #[serde(default = "default_min_step")]
    min_step_duration: String,
    model: Option<String>,
    reference_concurrency: Option<u32>,
    #[serde(default = "default_requests_per_slot")]
    requests_per_slot: u64,
    warmup: Option<u64>,
    #[serde(default = "default_scrape_interval")]
    scrape_interval: String,
    #[serde(default = "default_true")]
    client_self_check: bool,
    gpu_url: Option<String>,
    workload: Option<String>,
}

fn default_requests_per_slot() -> u64 {
    2
}
fn default_scrape_interval() -> String {
    "1s".into()
}
fn default_true() -> bool {
    true
}

fn default_slo_ttft() -> String {
    "1s".into()
}
fn default_slo_itl() -> String {
    "50ms".into()
}
fn default_requests_per_step() -> u64 {
    64
}
fn default_min_step() -> String {
    "5s".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuality {
    set: String,
    #[serde(default = "default_max_drop")]
    max_drop: f64,
    #[serde(default = "default_quality_tokens")]
    max_tokens: u32,
}

fn default_max_drop() -> f64 {
    0.05
}
fn default_quality_tokens() -> u32 {
    16
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariant {
    name: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

fn invalid(path: &Path, field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        path: path.to_path_buf(),
        field: field.to_string(),
        message: message.into(),
    }
}

fn duration(path: &Path, field: &str, text: &str) -> Result<Duration, ConfigError> {
    parse_duration(text).map_err(|m| invalid(path, field, m))
}

impl ExperimentPlan {
    /// Reads and validates a plan file.
    pub fn load(path: &Path) -> Result<ExperimentPlan, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ExperimentPlan::parse(&text, path)
    }

    /// Parses and validates plan text; `path` is only for messages.
    pub fn parse(text: &str, path: &Path) -> Result<ExperimentPlan, ConfigError> {
        let raw: RawPlan = toml::from_str(text).map_err(|err| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
        })?;
        let e = &raw.experiment;
        if e.name.trim().is_empty() || e.name.len() > 128 {
            return Err(invalid(path, "experiment.name", "must be 1-128 characters"));
        }
        if !(1..=MAX_REPEATS).contains(&e.repeats) {
            return Err(invalid(
                path,
                "experiment.repeats",
                format!("must be 1..={MAX_REPEATS}, found {}", e.repeats),
            ));
        }
        let target = parse_target(path, raw.url, raw.server)?;
        let sweep = parse_sweep(path, &raw.sweep)?;
        let quality = raw.quality.map(|q| parse_quality(path, q)).transpose()?;
        let variants = parse_variants(path, raw.variant)?;
        Ok(ExperimentPlan {
            name: e.name.trim().to_string(),
            repeats: e.repeats,
            allow_multiple_changes: e.allow_multiple_changes,
            seed: e.seed,
            target,
            sweep,
            quality,
            variants,
        })
    }

    /// The program a plan starts (its command's first word), if it starts one.
    pub fn program(&self) -> Option<&str> {
        match &self.target {
            PlanTarget::Command(server) => server.command.first().map(String::as_str),
            PlanTarget::Url(_) => None,
        }
    }
}

fn parse_target(
    path: &Path,
    url: Option<String>,
    server: Option<RawServer>,
) -> Result<PlanTarget, ConfigError> {
    match (url, server) {
        (Some(_), Some(_)) => Err(invalid(
            path,
            "url",
            "give either `url` (a server you restart) or `[server]` (a command llmwatch runs), not both",
        )),
        (None, None) => Err(invalid(
            path,
            "server",
            "missing: give `[server] command = [...]`, or `url = \"http://...\"` for a server you restart",
        )),
        (Some(url), None) => {
            let parsed = url::Url::parse(&url).map_err(|e| invalid(path, "url", e.to_string()))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(invalid(path, "url", "must be http:// or https://"));
            }
            Ok(PlanTarget::Url(url.trim_end_matches('/').to_string()))
        }
        (None, Some(s)) => {
            if s.command.is_empty() || s.command[0].trim().is_empty() {
                return Err(invalid(path, "server.command", "must name a program"));
            }
            if !s.health.starts_with('/') {
                return Err(invalid(path, "server.health", "must be a path starting with /"));
            }
            let ready_timeout = duration(path, "server.ready_timeout", &s.ready_timeout)?;
            if ready_timeout.is_zero() {
                return Err(invalid(path, "server.ready_timeout", "must be above zero"));
            }
            check_env(path, "server.env", &s.env)?;
            Ok(PlanTarget::Command(PlanServer {
                command: s.command,
                health: s.health,
                ready_timeout,
                port: s.port,
                env: s.env,
            }))
        }
    }
}

fn check_env(path: &Path, field: &str, env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for key in env.keys() {
        let ok = !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !key.starts_with(|c: char| c.is_ascii_digit());
        if !ok {
            return Err(invalid(
                path,
                &format!("{field}.{key}"),
                "not an environment variable name (letters, digits, _)",
            ));
        }
    }
    Ok(())
}

fn parse_sweep(path: &Path, raw: &RawSweep) -> Result<PlanSweep, ConfigError> {
    let (input, output) = raw
        .shape
        .split_once(['x', 'X', '×'])
        .and_then(|(i, o)| Some((i.trim().parse::<u64>().ok()?, o.trim().parse::<u64>().ok()?)))
        .filter(|(i, o)| *i > 0 && *o > 0)
        .ok_or_else(|| {
            invalid(
                path,
                "sweep.shape",
                format!(
                    "expected INPUTxOUTPUT tokens like \"512x128\", found {:?}",
                    raw.shape
                ),
            )
        })?;
    if raw.concurrency.is_empty()
        || raw.concurrency.contains(&0)
        || raw.concurrency.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(invalid(
            path,
            "sweep.concurrency",
            "must be rising positive levels, e.g. [1, 2, 4, 8]",
        ));
    }
    if raw.requests_per_step == 0 {
        return Err(invalid(
            path,
            "sweep.requests_per_step",
            "must be above zero",
        ));
    }
    let reference = match raw.reference_concurrency {
        Some(c) if raw.concurrency.contains(&c) => c,
        Some(c) => {
            return Err(invalid(
                path,
                "sweep.reference_concurrency",
                format!("{c} is not a level of sweep.concurrency"),
            ))
        }
        None => raw.concurrency[raw.concurrency.len() / 2],
    };
    Ok(PlanSweep {
        input_tokens: input,
        output_tokens: output,
        concurrency: raw.concurrency.clone(),
        slo_ttft_p95: duration(path, "sweep.slo_ttft_p95", &raw.slo_ttft_p95)?,
        slo_itl_p95: duration(path, "sweep.slo_itl_p95", &raw.slo_itl_p95)?,
        requests_per_step: raw.requests_per_step,
        min_step_duration: duration(path, "sweep.min_step_duration", &raw.min_step_duration)?,
        model: raw.model.clone(),
        reference_concurrency: reference,
        requests_per_slot: raw.requests_per_slot,
        warmup: raw.warmup,
        scrape_interval: duration(path, "sweep.scrape_interval", &raw.scrape_interval)?,
        client_self_check: raw.client_self_check,
        gpu_url: match &raw.gpu_url {
            Some(u) => {
                url::Url::parse(u).map_err(|e| invalid(path, "sweep.gpu_url", e.to_string()))?;
                Some(u.clone())
            }
            None => None,
        },
        workload: raw
            .workload
            .as_deref()
            .map(|text| {
                MultiTurn::parse(text).map_err(|err| {
                    invalid(
                        path,
                        "sweep.workload",
                        format!(
                            "{} in {:?} (expected multi-turn:TURNS[,think=DUR])",
                            err.why, err.text
                        ),
                    )
                })
            })
            .transpose()?,
    })
}

fn parse_quality(path: &Path, raw: RawQuality) -> Result<PlanQuality, ConfigError> {
    if raw.set.trim().is_empty() {
        return Err(invalid(
            path,
            "quality.set",
            "must name `builtin:arith-50` or a JSONL file",
        ));
    }
    if !(raw.max_drop.is_finite() && (0.0..=1.0).contains(&raw.max_drop)) {
        return Err(invalid(
            path,
            "quality.max_drop",
            "must be a fraction in 0..=1",
        ));
    }
    if raw.max_tokens == 0 {
        return Err(invalid(path, "quality.max_tokens", "must be above zero"));
    }
    Ok(PlanQuality {
        set: raw.set,
        max_drop: raw.max_drop,
        max_tokens: raw.max_tokens,
    })
}

fn parse_variants(path: &Path, raw: Vec<RawVariant>) -> Result<Vec<PlanVariant>, ConfigError> {
    if raw.is_empty() {
        return Err(invalid(
            path,
            "variant",
            "at least one [[variant]] (the baseline) is needed",
        ));
    }
    if raw.len() > MAX_VARIANTS {
        return Err(invalid(
            path,
            "variant",
            format!("at most {MAX_VARIANTS} variants"),
        ));
    }
    let mut out: Vec<PlanVariant> = Vec::with_capacity(raw.len());
    for (i, v) in raw.into_iter().enumerate() {
        let field = format!("variant[{i}].name");
        crate::check_name(&v.name).map_err(|m| invalid(path, &field, m))?;
        if out.iter().any(|o| o.name == v.name) {
            return Err(invalid(path, &field, format!("{:?} is used twice", v.name)));
        }
        check_env(path, &format!("variant[{i}].env"), &v.env)?;
        out.push(PlanVariant {
            name: v.name,
            args: v.args,
            env: v.env,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
[experiment]
name = "max-num-seqs"
repeats = 2
[server]
command = ["vllm", "serve", "m", "--port", "{port}"]
ready_timeout = "30s"
[sweep]
shape = "512x128"
concurrency = [1, 2, 4, 8]
[quality]
set = "builtin:arith-50"
[[variant]]
name = "baseline"
[[variant]]
name = "seqs-128"
args = ["--max-num-seqs", "128"]
env = { VLLM_X = "1" }
"#;

    fn parse(text: &str) -> Result<ExperimentPlan, ConfigError> {
        ExperimentPlan::parse(text, Path::new("plan.toml"))
    }

    #[test]
    fn a_plan_parses_with_its_defaults() {
        let plan = parse(PLAN).expect("valid");
        assert_eq!(plan.repeats, 2);
        assert_eq!(plan.sweep.input_tokens, 512);
        assert_eq!(plan.sweep.reference_concurrency, 4);
        assert_eq!(plan.variants[1].args, ["--max-num-seqs", "128"]);
        assert_eq!(plan.quality.as_ref().expect("quality").max_drop, 0.05);
        assert_eq!(plan.program(), Some("vllm"));
        let PlanTarget::Command(server) = plan.target else {
            panic!("command plan")
        };
        assert_eq!(server.ready_timeout, Duration::from_secs(30));
        assert_eq!(server.health, "/health");
        assert_eq!(plan.sweep.workload, None);
        let chat = parse(&PLAN.replace(
            "[1, 2, 4, 8]",
            "[1, 2]\nworkload = \"multi-turn:4,think=10ms\"",
        ))
        .expect("a conversation workload");
        let workload = chat.sweep.workload.expect("workload");
        assert_eq!(
            (workload.turns, workload.think),
            (4, Duration::from_millis(10))
        );
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (PLAN.replace("512x128", "512"), "sweep.shape"),
            (PLAN.replace("[1, 2, 4, 8]", "[4, 2]"), "sweep.concurrency"),
            (
                PLAN.replace("[1, 2, 4, 8]", "[1, 2]\ngpu_url = \"not a url\""),
                "sweep.gpu_url",
            ),
            (
                PLAN.replace("repeats = 2", "repeats = 0"),
                "experiment.repeats",
            ),
            (PLAN.replace("\"30s\"", "\"soon\""), "server.ready_timeout"),
            (PLAN.replace("VLLM_X", "\"A B\""), "variant[1].env.A B"),
            (
                PLAN.replace("\"seqs-128\"", "\"baseline\""),
                "variant[1].name",
            ),
            (
                PLAN.replace("[quality]", "[quality]\nmax_drop = 2.0"),
                "quality.max_drop",
            ),
            (
                PLAN.replace("[1, 2, 4, 8]", "[1, 2]\nworkload = \"multi-turn:0\""),
                "sweep.workload",
            ),
        ];
        for (text, field) in cases {
            let err = parse(&text).expect_err(field).to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        let err = parse(&PLAN.replace("repeats = 2", "repeats = 2\ncolour = 1"))
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn url_mode_replaces_the_server_table() {
        let text = format!(
            "url = \"http://127.0.0.1:8000/\"\n{}",
            PLAN.replace(
                "[server]\ncommand = [\"vllm\", \"serve\", \"m\", \"--port\", \"{port}\"]\nready_timeout = \"30s\"\n",
                ""
            )
        );
        let plan = parse(&text).expect("url plan");
        assert_eq!(plan.target, PlanTarget::Url("http://127.0.0.1:8000".into()));
        assert_eq!(plan.program(), None);
        let both = format!("url = \"http://127.0.0.1:8000\"\n{PLAN}");
        assert!(parse(&both).expect_err("both").to_string().contains("url"));
    }
}
