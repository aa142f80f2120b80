//! Validation, one function a section: every error names its field
//! (`targets[2].url`) and says what would be valid.

use std::collections::HashSet;
use std::time::Duration;

use llmwatch_core::redact::origin_only;

use crate::fields::{
    check_http_url, check_http_url_shown, check_label_name, check_name, check_positive,
};
use crate::schema::{Config, MIN_SWEEP_PERIOD};

/// A field and what is wrong with it.
type Invalid = (String, String);

impl Config {
    /// Checks what serde cannot: ranges, names, references between sections.
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        // Targets and GPU sources share one namespace (alerts name either).
        let mut names = HashSet::new();
        validate_targets(self, &mut names)?;
        validate_gpus(self, &mut names)?;
        validate_alerts(self, &names)?;
        validate_notifiers(self)?;
        validate_server(self)?;
        validate_gpu_links(self)?;
        validate_sweep_limits(self)?;
        validate_discovery(self, &names)?;
        crate::remote_write::validate_remote_write(&self.remote_write)?;
        validate_token(self)
    }
}

/// `[[discovery]]`: one source each (files or an HTTP URL), a valid group
/// name, a sane refresh, and the target settings a `[[targets]]` entry
/// would need.
fn validate_discovery(config: &Config, names: &HashSet<&str>) -> Result<(), Invalid> {
    let mut groups = HashSet::new();
    for (i, discovery) in config.discovery.iter().enumerate() {
        let field = |name: &str| format!("discovery[{i}].{name}");
        check_name(&discovery.name).map_err(|m| (field("name"), m))?;
        if !groups.insert(discovery.name.as_str()) {
            return Err((
                field("name"),
                format!("duplicate discovery name {:?}", discovery.name),
            ));
        }
        if names.contains(discovery.name.as_str()) {
            return Err((
                field("name"),
                format!(
                    "{:?} is already a target or GPU source name",
                    discovery.name
                ),
            ));
        }
        let sources = usize::from(discovery.http_url.is_some())
            + usize::from(!discovery.files.is_empty())
            + usize::from(discovery.kubernetes.is_some());
        if sources != 1 {
            return Err((
                field("files"),
                "set exactly one of `files` (file_sd), `http_url` (http_sd) or \
                 `[discovery.kubernetes]` (kubernetes_sd)"
                    .to_string(),
            ));
        }
        if let Some(url) = &discovery.http_url {
            check_http_url(url).map_err(|m| (field("http_url"), m))?;
        }
        if let Some(kubernetes) = &discovery.kubernetes {
            kubernetes
                .check()
                .map_err(|(name, m)| (field(&format!("kubernetes.{name}")), m))?;
        }
        for (k, rule) in discovery.relabel_configs.iter().enumerate() {
            rule.check()
                .map_err(|m| (field(&format!("relabel_configs[{k}]")), m))?;
        }
        if discovery.refresh_interval < Duration::from_secs(1) {
            return Err((field("refresh_interval"), "must be at least 1s".to_string()));
        }
        let settings = &discovery.target;
        check_positive(settings.scrape_interval)
            .map_err(|m| (field("target.scrape_interval"), m))?;
        if let Some(path) = &settings.metrics_path {
            if !path.starts_with('/') {
                return Err((
                    field("target.metrics_path"),
                    format!("must start with '/', found {path:?}"),
                ));
            }
        }
    }
    Ok(())
}

/// `[[targets]]`: names, URLs, intervals, probes and scheduled sweeps.
fn validate_targets<'a>(config: &'a Config, names: &mut HashSet<&'a str>) -> Result<(), Invalid> {
    for (i, target) in config.targets.iter().enumerate() {
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
        if target.max_num_seqs == Some(0) {
            return Err((field("max_num_seqs"), "must be at least 1".to_string()));
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
            if let Some(workload) = probe.workload {
                // One conversation per tick: its think time alone must fit
                // the interval, or every other tick is skipped.
                let thinking = workload.think * workload.turns.saturating_sub(1);
                if thinking >= probe.interval {
                    return Err((
                        field("probe.workload"),
                        format!(
                            "{workload} thinks {} per conversation, not less than probe.interval ({}): one conversation runs per tick",
                            humantime::format_duration(thinking),
                            humantime::format_duration(probe.interval)
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `[[gpus]]`: unique names, exactly one of `dcgm_url` and `nvml`.
fn validate_gpus<'a>(config: &'a Config, names: &mut HashSet<&'a str>) -> Result<(), Invalid> {
    for (i, gpu) in config.gpus.iter().enumerate() {
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
    Ok(())
}

/// `[[alerts]]`: unique names, a known signal, op and threshold, an existing target.
fn validate_alerts(config: &Config, names: &HashSet<&str>) -> Result<(), Invalid> {
    let mut rule_names = HashSet::new();
    for (i, rule) in config.alerts.iter().enumerate() {
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
    Ok(())
}

/// `[[notifiers]]`: one URL (never echoed: it may hold a secret), a timeout.
fn validate_notifiers(config: &Config) -> Result<(), Invalid> {
    for (i, notifier) in config.notifiers.iter().enumerate() {
        let field = |name: &str| format!("notifiers[{i}].{name}");
        if let Some(name) = &notifier.name {
            check_name(name).map_err(|m| (field("name"), m))?;
        }
        match (&notifier.url, &notifier.url_env) {
            (Some(url), None) => {
                check_http_url_shown(url, &origin_only(url)).map_err(|m| (field("url"), m))?
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
    Ok(())
}

/// `[server]`: intervals, downsampling, objectives, retention, HTTP limits.
fn validate_server(config: &Config) -> Result<(), Invalid> {
    check_positive(config.server.alert_interval)
        .map_err(|m| ("server.alert_interval".to_string(), m))?;
    check_positive(config.server.live_window).map_err(|m| ("server.live_window".to_string(), m))?;
    check_positive(config.server.live_interval)
        .map_err(|m| ("server.live_interval".to_string(), m))?;
    let bucket_ms =
        i64::try_from(config.server.downsample_interval.as_millis()).unwrap_or(i64::MAX);
    if bucket_ms > llmwatch_core::staleness::MAX_DOWNSAMPLE_BUCKET_MS {
        return Err((
            "server.downsample_interval".to_string(),
            format!(
                "at most {} s: a signal looks 5 min back for a scrape (\"0s\" turns downsampling off)",
                llmwatch_core::staleness::MAX_DOWNSAMPLE_BUCKET_MS / 1000
            ),
        ));
    }
    if !config.server.downsample_interval.is_zero()
        && config.server.downsample_after < Duration::from_secs(3600)
    {
        return Err((
            "server.downsample_after".to_string(),
            "at least 1h: recent data stays at full resolution".to_string(),
        ));
    }
    check_positive(config.server.slo_ttft_p95)
        .map_err(|m| ("server.slo_ttft_p95".to_string(), m))?;
    check_positive(config.server.slo_itl_p95).map_err(|m| ("server.slo_itl_p95".to_string(), m))?;
    for (name, keep) in [
        ("retention", config.server.retention),
        ("probe_retention", config.server.probe_retention),
        ("sweep_retention", config.server.sweep_retention),
        (
            "alert_history_retention",
            config.server.alert_history_retention,
        ),
    ] {
        check_positive(keep).map_err(|m| (format!("server.{name}"), m))?;
    }
    check_positive(config.server.http_header_timeout)
        .map_err(|m| ("server.http_header_timeout".to_string(), m))?;
    check_positive(config.server.http_request_timeout)
        .map_err(|m| ("server.http_request_timeout".to_string(), m))?;
    if config.server.http_max_in_flight == 0 {
        return Err((
            "server.http_max_in_flight".to_string(),
            "must be at least 1".to_string(),
        ));
    }
    if config.server.max_body_bytes == 0 {
        return Err((
            "server.max_body_bytes".to_string(),
            "must be positive".to_string(),
        ));
    }
    Ok(())
}

/// A target's `gpus` names a `[[gpus]]` source.
fn validate_gpu_links(config: &Config) -> Result<(), Invalid> {
    for (i, target) in config.targets.iter().enumerate() {
        if let Some(gpus) = &target.gpus {
            if !config.gpus.iter().any(|g| &g.name == gpus) {
                return Err((
                    format!("targets[{i}].gpus"),
                    format!("no [[gpus]] source is named {gpus:?}"),
                ));
            }
        }
    }
    Ok(())
}

/// `[server.sweep_limits]`: every bound positive.
fn validate_sweep_limits(config: &Config) -> Result<(), Invalid> {
    let limits = &config.server.sweep_limits;
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
    Ok(())
}

/// `[server]` token fields: one of them, never empty.
fn validate_token(config: &Config) -> Result<(), Invalid> {
    if config.server.token.is_some() && config.server.token_env.is_some() {
        return Err((
            "server.token".to_string(),
            "set either token or token_env, not both".to_string(),
        ));
    }
    if config
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
    if config
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
