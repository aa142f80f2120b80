//! What the pages need from the config: objectives and each target's
//! links.

use std::time::Duration;

use llmwatch_config::{Config, TargetConfig};
use llmwatch_engine::targets::TargetSet;

fn objectives_of(target: &TargetConfig) -> TargetObjectives {
    TargetObjectives {
        ttft_p95: target.slo_ttft_p95.map(|d| d.as_secs_f64()),
        itl_p95: target.slo_itl_p95.map(|d| d.as_secs_f64()),
    }
}

/// A rule as the page shows it.
#[derive(Debug, Clone)]
pub struct RuleView {
    pub name: String,
    pub expr: String,
    pub window: String,
    pub for_: String,
    pub target: String,
}

fn threshold_text(t: &llmwatch_config::ThresholdValue) -> String {
    match t {
        llmwatch_config::ThresholdValue::Number(n) => n.to_string(),
        llmwatch_config::ThresholdValue::Text(s) => s.clone(),
    }
}

/// What the pages need from the config.
#[derive(Debug, Clone)]
pub struct PagesConfig {
    /// p95 TTFT objective, seconds (colours the overview; drawn on charts).
    pub slo_ttft_p95: Option<f64>,
    /// p95 ITL objective, seconds.
    pub slo_itl_p95: Option<f64>,
    /// Targets as configured (for GPU links and sweeps started from a page).
    pub targets: Vec<PageTarget>,
    /// Every watched target now, discovered ones included (the daemon's;
    /// `None` in page tests without a daemon).
    pub watched: Option<TargetSet>,
    /// How often `/events` sends an update.
    pub live_interval: Duration,
    /// Whether the sweep form may start sweeps (off in tests that must not
    /// load anything).
    pub sweeps_enabled: bool,
    /// The alert rules, as configured.
    pub rules: Vec<RuleView>,
    /// Flips to `true` when the daemon stops: live streams end, so a
    /// graceful shutdown does not wait on open browser tabs.
    pub shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    /// Passive curves computed lately (shared by every clone).
    pub passive_curves: super::passive_cache::PassiveCurveCache,
}

/// One configured target, as far as pages need it. No secrets: the API key
/// stays an environment variable name.
#[derive(Debug, Clone)]
pub struct PageTarget {
    pub name: String,
    pub url: String,
    pub metrics_url: String,
    /// The GPU source that serves this target (`targets.gpus`).
    pub gpus: Option<String>,
    pub gpu_url: Option<String>,
    pub api_key_env: Option<String>,
    /// This target's objectives where its config sets them (`targets.slo_*`).
    pub objectives: TargetObjectives,
}

/// p95 objectives in seconds; `None` where not set.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TargetObjectives {
    pub ttft_p95: Option<f64>,
    pub itl_p95: Option<f64>,
}

impl Default for PagesConfig {
    fn default() -> Self {
        PagesConfig {
            slo_ttft_p95: Some(1.0),
            slo_itl_p95: Some(0.050),
            targets: Vec::new(),
            watched: None,
            live_interval: Duration::from_secs(2),
            sweeps_enabled: true,
            rules: Vec::new(),
            shutdown: None,
            passive_curves: Default::default(),
        }
    }
}

impl PagesConfig {
    /// The objectives a target's values are coloured and charted against:
    /// its own where set, else the server's.
    pub fn objectives_for(&self, target: &str) -> TargetObjectives {
        let own = match self.target(target) {
            Some(t) => t.objectives,
            // A discovered target: its group's objectives.
            None => self
                .watched
                .as_ref()
                .and_then(|set| set.find(target))
                .map(|t| objectives_of(&t))
                .unwrap_or_default(),
        };
        TargetObjectives {
            ttft_p95: own.ttft_p95.or(self.slo_ttft_p95),
            itl_p95: own.itl_p95.or(self.slo_itl_p95),
        }
    }

    pub fn from_config(config: &Config) -> PagesConfig {
        let targets = config
            .targets
            .iter()
            .map(|t| {
                let gpu = t
                    .gpus
                    .as_ref()
                    .and_then(|name| config.gpus.iter().find(|g| &g.name == name));
                PageTarget {
                    name: t.name.clone(),
                    url: t.url.clone(),
                    metrics_url: t.metrics_url(),
                    gpus: t.gpus.clone(),
                    gpu_url: gpu.and_then(|g| g.dcgm_url.clone()),
                    api_key_env: t.api_key_env.clone(),
                    objectives: objectives_of(t),
                }
            })
            .collect();
        PagesConfig {
            slo_ttft_p95: Some(config.server.slo_ttft_p95.as_secs_f64()),
            slo_itl_p95: Some(config.server.slo_itl_p95.as_secs_f64()),
            targets,
            rules: config
                .alerts
                .iter()
                .map(|r| RuleView {
                    name: r.name.clone(),
                    expr: format!("{} {} {}", r.signal, r.op, threshold_text(&r.threshold)),
                    window: humantime::format_duration(r.window).to_string(),
                    for_: humantime::format_duration(r.for_).to_string(),
                    target: r.target.clone().unwrap_or_else(|| "every target".into()),
                })
                .collect(),
            ..PagesConfig::default()
        }
    }

    /// Names of the targets a sweep may be started on: every watched one.
    pub fn sweepable_targets(&self) -> Vec<String> {
        match &self.watched {
            Some(set) => set.names(),
            None => self.targets.iter().map(|t| t.name.clone()).collect(),
        }
    }

    pub fn target(&self, name: &str) -> Option<&PageTarget> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The GPU source linked to a target, if any.
    pub fn gpus_of(&self, target: &str) -> Option<&str> {
        self.target(target).and_then(|t| t.gpus.as_deref())
    }
}
