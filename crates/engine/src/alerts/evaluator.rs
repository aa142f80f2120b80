//! The evaluation loop: every `interval`, each rule on each of its targets
//! reads its signal over the rule's window, feeds the state machine, stores
//! what changed (one transaction per round) and hands notifications to the
//! notifier queues without waiting on them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use llmwatch_core::alerts::{
    fingerprint, render_template, Alert, AlertState, Transition, RESOLVED_RETENTION_MS,
};
use llmwatch_core::signals::Signal;
use llmwatch_store::{
    is_probe_signal, AlertChanges, AlertEventRow, AlertRow, Range, Store, StoreError, SweepSpan,
    SweepStatus,
};
use tokio::sync::watch;

use super::{duration_ms, rule_signal, AlertsHandle, CurrentAlert, Rule, RuleSignal};
use crate::events::Failure;
use crate::sinks::notify::{NotifierHandle, OutAlert};
use crate::sources::scrape::now_ms;
use crate::targets::TargetSet;
use llmwatch_config::NotifierKind;

/// What the loop needs besides rules and notifiers.
#[derive(Clone)]
pub struct EvalSettings {
    pub interval: Duration,
    pub resend_delay: Duration,
    /// The watched targets (configured and discovered) ...
    pub targets: TargetSet,
    /// ... and the GPU sources: what rules without a `target` apply to.
    pub gpu_sources: Vec<String>,
    pub generator_url: String,
}

/// A signal's value for one target over `(now − window, now]`: probe
/// signals from the window's probes; scrape signals between the last scrape
/// and the last one at or before `now − window` (rates and histogram
/// quantiles over that gap, gauges at the last scrape). `None` when there is
/// no data.
pub async fn signal_value(
    store: &Store,
    target_id: i64,
    signal: Signal,
    now_ms: i64,
    window: Duration,
) -> Result<Option<f64>, StoreError> {
    let window_ms = duration_ms(window).max(1);
    if is_probe_signal(signal) {
        let values = store.probe_signals(target_id, now_ms, window_ms).await?;
        return Ok(values
            .into_iter()
            .find(|(s, _)| *s == signal)
            .map(|(_, v)| v));
    }
    let range = Range::checked(now_ms, now_ms, window_ms)?;
    let series = store.signal_series(target_id, signal, range).await?;
    Ok(series.first().map(|p| p.value))
}

struct Entry {
    alert: Alert,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

fn to_json(map: &BTreeMap<String, String>) -> String {
    serde_json::to_string(map).unwrap_or_else(|_| "{}".to_string())
}

fn from_json(text: &str) -> BTreeMap<String, String> {
    serde_json::from_str(text).unwrap_or_default()
}

fn render(
    rule: &Rule,
    target: &str,
    value: Option<f64>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut base: BTreeMap<String, String> = BTreeMap::new();
    base.insert("alertname".to_string(), rule.name.clone());
    base.insert("target".to_string(), target.to_string());
    base.insert("signal".to_string(), rule.signal.as_str().to_string());
    let mut labels = base.clone();
    for (name, template) in &rule.labels {
        labels.insert(name.clone(), render_template(template, value, &base));
    }
    // Rule labels cannot rename the alert or move it to another target.
    labels.insert("alertname".to_string(), rule.name.clone());
    labels.insert("target".to_string(), target.to_string());
    let annotations = rule
        .annotations
        .iter()
        .map(|(name, template)| (name.clone(), render_template(template, value, &labels)))
        .collect();
    (labels, annotations)
}

fn out_alert(
    entry: &Entry,
    now: i64,
    interval_ms: i64,
    resend_ms: i64,
    generator_url: &str,
) -> OutAlert {
    let alert = &entry.alert;
    OutAlert {
        labels: entry.labels.clone(),
        annotations: entry.annotations.clone(),
        firing: alert.state == AlertState::Firing,
        starts_at_ms: alert.active_at_ms.unwrap_or(now),
        ends_at_ms: Some(alert.ends_at_ms(now, interval_ms, resend_ms)),
        value: alert.value,
        fingerprint: fingerprint(&entry.labels),
        generator_url: generator_url.to_string(),
    }
}

/// Runs rounds until shutdown.
pub async fn run_evaluator(
    settings: EvalSettings,
    store: Store,
    handle: AlertsHandle,
    notifiers: Vec<NotifierHandle>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut entries: HashMap<(String, String), Entry> = HashMap::new();
    // Resume: a firing alert stays firing with its start time and last send.
    match store.alert_states().await {
        Ok(rows) => {
            let known: HashSet<&str> = handle.rules.iter().map(|r| r.name.as_str()).collect();
            let mut stale = AlertChanges::default();
            for row in rows {
                if !known.contains(row.rule.as_str()) {
                    stale.deletes.push((row.rule, row.target));
                    continue;
                }
                entries.insert(
                    (row.rule.clone(), row.target.clone()),
                    Entry {
                        alert: row.alert,
                        labels: from_json(&row.labels_json),
                        annotations: from_json(&row.annotations_json),
                    },
                );
            }
            if let Err(err) = store.apply_alert_changes(&stale).await {
                Failure::Alerts.emit(None, &format!("removing alerts of deleted rules: {err}"));
            }
            if !entries.is_empty() {
                tracing::info!(
                    alerts = entries.len(),
                    "alert states resumed from the store"
                );
            }
        }
        Err(err) => {
            handle.counters.failures.fetch_add(1, Ordering::Relaxed);
            Failure::Alerts.emit(
                None,
                &format!("reading stored alert states (starting empty): {err}"),
            );
        }
    }
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut target_ids: HashMap<String, i64> = HashMap::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let started = Instant::now();
        let mut names = settings.targets.names();
        names.extend(settings.gpu_sources.iter().cloned());
        if names.iter().any(|name| !target_ids.contains_key(name)) {
            match store.targets().await {
                Ok(rows) => {
                    target_ids = rows
                        .into_iter()
                        .filter(|row| names.contains(&row.name))
                        .map(|row| (row.name, row.id))
                        .collect();
                }
                Err(err) => {
                    handle.counters.failures.fetch_add(1, Ordering::Relaxed);
                    Failure::StoreRead.emit(None, &err);
                    continue;
                }
            }
        }
        evaluate_round(
            &settings,
            &names,
            &store,
            &handle,
            &notifiers,
            &target_ids,
            &mut entries,
        )
        .await;
        handle.counters.evaluations.fetch_add(1, Ordering::Relaxed);
        handle.counters.last_duration_us.store(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        handle
            .counters
            .last_run_ms
            .store(u64::try_from(now_ms()).unwrap_or(0), Ordering::Relaxed);
    }
}

/// What one round decided: state rows to store, and alerts to send.
#[derive(Default)]
struct RoundOutcome {
    changes: AlertChanges,
    /// Firing and resolved transitions (webhooks, Slack).
    transitions: Vec<OutAlert>,
    /// Every alert due (again) at Alertmanager.
    to_alertmanager: Vec<OutAlert>,
}

async fn evaluate_round(
    settings: &EvalSettings,
    targets: &[String],
    store: &Store,
    handle: &AlertsHandle,
    notifiers: &[NotifierHandle],
    target_ids: &HashMap<String, i64>,
    entries: &mut HashMap<(String, String), Entry>,
) {
    let now = now_ms();
    let mut outcome = RoundOutcome::default();
    let sweeps = sweeps_in_windows(store, &handle.rules, now).await;
    for rule in handle.rules.iter() {
        for target in targets {
            if rule.target.as_ref().is_some_and(|t| t != target) {
                continue;
            }
            let Some(&target_id) = target_ids.get(target) else {
                continue;
            };
            let read = match rule.signal {
                RuleSignal::Signal(signal) => {
                    signal_value(store, target_id, signal, now, rule.window).await
                }
                live => rule_signal::live_value(live, store, target_id, now, rule.window).await,
            };
            let note = sweep_note(&sweeps, target, now - duration_ms(rule.window), now);
            match read {
                Ok(value) => observe(
                    settings,
                    Observation {
                        rule,
                        target,
                        value,
                        sweep: note,
                    },
                    now,
                    entries,
                    &mut outcome,
                ),
                Err(err) => {
                    // Unknown is not "fine": keep the state as it is.
                    handle.counters.failures.fetch_add(1, Ordering::Relaxed);
                    Failure::Alerts.emit(
                        Some(target),
                        &format!("rule {}: reading the signal: {err}", rule.name),
                    );
                }
            }
        }
    }
    // A target that left the watched set (discovery removed it) has no
    // signal any more: its live alerts resolve, as Prometheus' do when their
    // series vanish (after `keep_firing_for`), instead of firing forever.
    let gone: Vec<(String, String)> = entries
        .iter()
        .filter(|((_, target), entry)| {
            !targets.contains(target)
                && matches!(entry.alert.state, AlertState::Firing | AlertState::Pending)
        })
        .map(|(key, _)| key.clone())
        .collect();
    for (rule_name, target) in gone {
        if let Some(rule) = handle.rules.iter().find(|r| r.name == rule_name) {
            let gone = Observation {
                rule,
                target: &target,
                value: None,
                sweep: None,
            };
            observe(settings, gone, now, entries, &mut outcome);
        }
    }
    let current = settle(entries, &mut outcome.changes, now);
    if let Err(err) = store.apply_alert_changes(&outcome.changes).await {
        handle.counters.failures.fetch_add(1, Ordering::Relaxed);
        Failure::Alerts.emit(None, &format!("storing alert states: {err}"));
    }
    dispatch(handle, notifiers, outcome);
    // Published last: whoever sees an alert firing may rely on it being
    // stored and its notification queued.
    if let Ok(mut shared) = handle.current.write() {
        *shared = current;
    }
}

/// The sweeps that overlap any rule's window ending at `now` (none when
/// they cannot be read: the note is context, not a reason to skip a round).
async fn sweeps_in_windows(store: &Store, rules: &[Rule], now: i64) -> Vec<SweepSpan> {
    let widest = rules
        .iter()
        .map(|r| duration_ms(r.window))
        .max()
        .unwrap_or(0);
    match store
        .sweep_spans(None, now - widest, now, MAX_SWEEPS_NOTED)
        .await
    {
        Ok(sweeps) => sweeps,
        Err(err) => {
            Failure::StoreRead.emit(None, &err);
            Vec::new()
        }
    }
}

/// At most this many sweeps are looked at per round (a rule window holds
/// one or two: sweeps run one at a time).
const MAX_SWEEPS_NOTED: u32 = 50;

/// The `sweep` annotation of an alert on `target` whose window is
/// `(from_ms, now]`: which sweep loaded the target then, so whoever is paged
/// sees that the server was busy with llmwatch's own load test.
fn sweep_note(sweeps: &[SweepSpan], target: &str, from_ms: i64, now: i64) -> Option<String> {
    let sweep = sweeps.iter().rev().find(|s| {
        s.target_name.as_deref() == Some(target)
            && s.started_ms <= now
            && s.ended_ms.is_none_or(|end| end > from_ms)
    })?;
    let when = if sweep.status == SweepStatus::Running {
        "running"
    } else {
        "ran in this rule's window"
    };
    Some(format!(
        "sweep {} {when} (/sweeps/{}): its load is in this target's server-side signals; probe_* signals are canaries only",
        sweep.id, sweep.id
    ))
}

/// What one rule read for one target this round.
struct Observation<'a> {
    rule: &'a Rule,
    target: &'a str,
    value: Option<f64>,
    /// The `sweep` annotation, when a sweep of the target overlaps the
    /// rule's window.
    sweep: Option<String>,
}

/// One rule on one target: the alert's new state, its event if it changed,
/// and what is due for sending.
fn observe(
    settings: &EvalSettings,
    observation: Observation<'_>,
    now: i64,
    entries: &mut HashMap<(String, String), Entry>,
    outcome: &mut RoundOutcome,
) {
    let Observation {
        rule,
        target,
        value,
        sweep,
    } = observation;
    let interval_ms = duration_ms(settings.interval);
    let resend_ms = duration_ms(settings.resend_delay);
    let key = (rule.name.clone(), target.to_string());
    let entry = entries.entry(key).or_insert_with(|| Entry {
        alert: Alert::default(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    });
    let transition = entry.alert.observe(&rule.condition, now, value);
    // Labels and annotations follow the value while the alert is
    // live; once resolved they keep what was last sent.
    if entry.alert.state != AlertState::Resolved || transition.is_some() {
        let (labels, mut annotations) = render(rule, target, entry.alert.value);
        if let Some(note) = sweep {
            annotations.insert("sweep".to_string(), note);
        }
        entry.labels = labels;
        entry.annotations = annotations;
    }
    if let Some(transition) = transition {
        tracing::info!(
            rule = %rule.name,
            target = %target,
            state = transition.state().as_str(),
            value = ?entry.alert.value,
            "alert state changed"
        );
        outcome.changes.events.push(AlertEventRow {
            id: 0,
            ts_ms: now,
            rule: rule.name.clone(),
            target: target.to_string(),
            state: transition.state(),
            value: entry.alert.value,
            labels_json: to_json(&entry.labels),
            annotations_json: to_json(&entry.annotations),
        });
        if matches!(transition, Transition::Firing | Transition::Resolved) {
            outcome.transitions.push(out_alert(
                entry,
                now,
                interval_ms,
                resend_ms,
                &settings.generator_url,
            ));
        }
    }
    if entry.alert.needs_sending(now, resend_ms) {
        outcome.to_alertmanager.push(out_alert(
            entry,
            now,
            interval_ms,
            resend_ms,
            &settings.generator_url,
        ));
        entry.alert.last_sent_ms = Some(now);
    }
}

/// Drops expired entries and returns the live ones, adding their rows to
/// `changes`.
fn settle(
    entries: &mut HashMap<(String, String), Entry>,
    changes: &mut AlertChanges,
    now: i64,
) -> Vec<CurrentAlert> {
    let mut current = Vec::new();
    entries.retain(|(rule, target), entry| {
        if entry.alert.is_expired(now, RESOLVED_RETENTION_MS) {
            if entry.alert.state != AlertState::Inactive || transitions_touch(changes, rule, target)
            {
                changes.deletes.push((rule.clone(), target.clone()));
            }
            return false;
        }
        changes.upserts.push(AlertRow {
            rule: rule.clone(),
            target: target.clone(),
            alert: entry.alert.clone(),
            last_eval_ms: now,
            labels_json: to_json(&entry.labels),
            annotations_json: to_json(&entry.annotations),
        });
        current.push(CurrentAlert {
            rule: rule.clone(),
            target: target.clone(),
            alert: entry.alert.clone(),
            labels: entry.labels.clone(),
            annotations: entry.annotations.clone(),
        });
        true
    });
    current.sort_by(|a, b| (&a.rule, &a.target).cmp(&(&b.rule, &b.target)));
    current
}

/// Hands this round's alerts to each notifier, in the batches its kind
/// expects.
fn dispatch(handle: &AlertsHandle, notifiers: &[NotifierHandle], outcome: RoundOutcome) {
    let RoundOutcome {
        transitions,
        to_alertmanager,
        ..
    } = outcome;
    // Webhook messages are grouped by rule, as Alertmanager's
    // `group_by: [alertname]` would (one group key per message).
    let mut by_rule: BTreeMap<&str, Vec<OutAlert>> = BTreeMap::new();
    for alert in &transitions {
        let rule = alert
            .labels
            .get("alertname")
            .map(String::as_str)
            .unwrap_or("");
        by_rule.entry(rule).or_default().push(alert.clone());
    }
    for notifier in notifiers {
        let batches: Vec<Vec<OutAlert>> = match notifier.kind {
            NotifierKind::Alertmanager => vec![to_alertmanager.clone()],
            NotifierKind::Slack => vec![transitions.clone()],
            NotifierKind::Webhook => by_rule.values().cloned().collect(),
        };
        for batch in batches {
            if !batch.is_empty() && !notifier.offer(batch) {
                handle.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Did this round record a transition of `(rule, target)` (e.g. pending →
/// inactive), so its stored row must go?
fn transitions_touch(changes: &AlertChanges, rule: &str, target: &str) -> bool {
    changes
        .events
        .iter()
        .any(|e| e.rule == rule && e.target == target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmwatch_core::alerts::{Condition, Op};

    #[test]
    fn labels_and_annotations_are_rendered() {
        let rule = Rule {
            name: "ttft".into(),
            signal: RuleSignal::Signal(Signal::ProbeTtftP95),
            condition: Condition {
                op: Op::Gt,
                threshold: 1.0,
                for_ms: 0,
                keep_firing_for_ms: 0,
            },
            window: Duration::from_secs(60),
            target: None,
            labels: [
                ("severity".to_string(), "page".to_string()),
                ("alertname".to_string(), "x".to_string()),
            ]
            .into_iter()
            .collect(),
            annotations: [(
                "summary".to_string(),
                "p95 TTFT {{ $value }}s on {{ $labels.target }} ({{ $labels.severity }})"
                    .to_string(),
            )]
            .into_iter()
            .collect(),
        };
        let (labels, annotations) = render(&rule, "vllm-a", Some(1.5));
        assert_eq!(labels["alertname"], "ttft");
        assert_eq!(labels["severity"], "page");
        assert_eq!(labels["signal"], "probe_ttft_p95");
        assert_eq!(annotations["summary"], "p95 TTFT 1.5s on vllm-a (page)");
    }
}
