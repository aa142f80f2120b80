//! The alert engine: rules from the config evaluated on an interval against
//! stored signals, the Prometheus state machine of
//! [`llmwatch_core::alerts`], state and history in SQLite, and notifiers in
//! their own tasks behind bounded queues, so a notifier that is down or
//! hangs never delays an evaluation.
//!
//! Entry point: [`start`], called by the daemon.

pub mod evaluator;
pub mod rule_signal;

use crate::StartError;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use llmwatch_core::alerts::{Alert, Condition, Op};
use llmwatch_store::Store;
use tokio::sync::watch;

use crate::targets::TargetSet;
use tokio::task::JoinHandle;

use llmwatch_config::Config;

pub use crate::sinks::notify::{self as notify, NotifierCounters, NotifierHandle, OutAlert};
pub use evaluator::run_evaluator;
pub use llmwatch_core::alerts::RuleSignal;

/// A rule from the config, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: String,
    pub signal: RuleSignal,
    pub condition: Condition,
    pub window: Duration,
    /// One target, or every target when `None`.
    pub target: Option<String>,
    /// Label templates.
    pub labels: BTreeMap<String, String>,
    /// Annotation templates.
    pub annotations: BTreeMap<String, String>,
}

impl Rule {
    /// Parses every rule of a validated config.
    pub fn from_config(config: &Config) -> Result<Vec<Rule>, String> {
        config
            .alerts
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let field = |name: &str, m: String| format!("alerts[{i}].{name}: {m}");
                Ok(Rule {
                    name: rule.name.clone(),
                    signal: rule.rule_signal().map_err(|m| field("signal", m))?,
                    condition: Condition {
                        op: rule.op().map_err(|m| field("op", m))?,
                        threshold: rule.threshold().map_err(|m| field("threshold", m))?,
                        for_ms: duration_ms(rule.for_),
                        keep_firing_for_ms: duration_ms(rule.keep_firing_for),
                    },
                    window: rule.window,
                    target: rule.target.clone(),
                    labels: rule.labels.clone(),
                    annotations: rule.annotations.clone(),
                })
            })
            .collect()
    }

    pub fn op(&self) -> Op {
        self.condition.op
    }
}

/// Milliseconds of a duration, saturating.
pub fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One alert as the API and `/metrics` see it.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentAlert {
    pub rule: String,
    pub target: String,
    pub alert: Alert,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Counters of the evaluator, for llmwatch's own `/metrics`.
#[derive(Debug, Default)]
pub struct EvalCounters {
    pub evaluations: AtomicU64,
    /// Alerts whose signal could not be read (the alert keeps its state).
    pub failures: AtomicU64,
    /// Batches a notifier's full queue could not take.
    pub dropped: AtomicU64,
    /// The last evaluation round's duration, in microseconds.
    pub last_duration_us: AtomicU64,
    /// When the last round finished, Unix ms.
    pub last_run_ms: AtomicU64,
}

/// What the rest of the daemon sees of the alert engine.
#[derive(Clone, Default)]
pub struct AlertsHandle {
    pub rules: Arc<Vec<Rule>>,
    pub current: Arc<RwLock<Vec<CurrentAlert>>>,
    pub counters: Arc<EvalCounters>,
    pub notifiers: Arc<Vec<Arc<NotifierCounters>>>,
}

impl AlertsHandle {
    /// Every alert that is not inactive, by rule then target.
    pub fn current(&self) -> Vec<CurrentAlert> {
        self.current.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Rounds run so far.
    pub fn evaluations(&self) -> u64 {
        self.counters.evaluations.load(Ordering::Relaxed)
    }
}

/// Starts the notifiers and the evaluator; their tasks go into `tasks`.
pub async fn start(
    config: &Config,
    targets: TargetSet,
    listen_addr: SocketAddr,
    store: Store,
    shutdown: watch::Receiver<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<AlertsHandle, StartError> {
    let rules = Rule::from_config(config).map_err(StartError::Rules)?;
    let mut notifiers = Vec::new();
    for (i, notifier) in config.notifiers.iter().enumerate() {
        let (handle, task) = notify::spawn(i, notifier, shutdown.clone())?;
        notifiers.push(handle);
        tasks.push(task);
    }
    let handle = AlertsHandle {
        rules: Arc::new(rules),
        current: Arc::default(),
        counters: Arc::default(),
        notifiers: Arc::new(notifiers.iter().map(|n| n.counters.clone()).collect()),
    };
    if handle.rules.is_empty() {
        return Ok(handle);
    }
    let settings = evaluator::EvalSettings {
        interval: config.server.alert_interval,
        resend_delay: config.server.alert_resend_delay,
        targets,
        gpu_sources: config.gpus.iter().map(|g| g.name.clone()).collect(),
        generator_url: format!("http://{listen_addr}/alerts"),
    };
    tasks.push(tokio::spawn(run_evaluator(
        settings,
        store,
        handle.clone(),
        notifiers,
        shutdown,
    )));
    Ok(handle)
}
