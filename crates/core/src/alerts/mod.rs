//! Alert rules and their state machine, as Prometheus defines them, fed with
//! `(now, value)` observations. Pure: no clock, no I/O; times are Unix ms
//! supplied by the caller.
//!
//! States: `inactive` → `pending` (condition true, waiting out `for`) →
//! `firing` → `resolved` (condition false, after `keep_firing_for`). A
//! pending alert whose condition turns false goes back to `inactive`. A
//! resolved alert whose condition turns true again starts a new alert
//! (pending, or firing at once when `for` is zero). A missing value (no data
//! in the window) counts as "condition false", as an absent series does in
//! Prometheus.
//!
//! Templates (labels and annotations) understand `{{ $value }}`,
//! `{{ $labels.NAME }}` (e.g. `{{ $labels.target }}`) and the shorthand
//! `{{ $target }}`; spaces inside the braces are optional. Anything else is
//! left as written.

mod rule_signal;
pub use rule_signal::{RuleSignal, BOTTLENECK, BOTTLENECK_CHANGES};

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// A comparison of a rule: `value OP threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

/// An operator that is not one of `>`, `>=`, `<`, `<=`, `==`, `!=`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown comparison {0:?}: expected one of >, >=, <, <=, ==, !=")]
pub struct UnknownOp(pub String);

impl FromStr for Op {
    type Err = UnknownOp;
    fn from_str(text: &str) -> Result<Op, UnknownOp> {
        Ok(match text.trim() {
            ">" => Op::Gt,
            ">=" => Op::Ge,
            "<" => Op::Lt,
            "<=" => Op::Le,
            "==" => Op::Eq,
            "!=" => Op::Ne,
            other => return Err(UnknownOp(other.to_string())),
        })
    }
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }

    /// Does `value OP threshold` hold? A NaN value never holds.
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        if value.is_nan() {
            return false;
        }
        match self {
            Op::Gt => value > threshold,
            Op::Ge => value >= threshold,
            Op::Lt => value < threshold,
            Op::Le => value <= threshold,
            Op::Eq => value == threshold,
            Op::Ne => value != threshold,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The part of a rule the state machine needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Condition {
    pub op: Op,
    pub threshold: f64,
    /// How long the condition must hold before the alert fires.
    pub for_ms: i64,
    /// How long a firing alert keeps firing after the condition stops holding.
    pub keep_firing_for_ms: i64,
}

impl Condition {
    pub fn holds(&self, value: Option<f64>) -> bool {
        value.is_some_and(|v| self.op.holds(v, self.threshold))
    }
}

/// An alert's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum AlertState {
    #[default]
    Inactive,
    Pending,
    Firing,
    Resolved,
}

/// A state name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown alert state {0:?}")]
pub struct UnknownState(pub String);

impl AlertState {
    pub const ALL: [AlertState; 4] = [
        AlertState::Inactive,
        AlertState::Pending,
        AlertState::Firing,
        AlertState::Resolved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Inactive => "inactive",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

impl FromStr for AlertState {
    type Err = UnknownState;
    fn from_str(text: &str) -> Result<AlertState, UnknownState> {
        AlertState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| UnknownState(text.to_string()))
    }
}

impl fmt::Display for AlertState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert (one rule on one target) and its timestamps, Unix ms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Alert {
    pub state: AlertState,
    /// When the condition started to hold (Prometheus' `activeAt`); the
    /// alert's `startsAt` once firing.
    pub active_at_ms: Option<i64>,
    pub fired_at_ms: Option<i64>,
    pub resolved_at_ms: Option<i64>,
    /// First evaluation at which a firing alert's condition stopped holding.
    pub keep_firing_since_ms: Option<i64>,
    /// The last value seen (kept when the value goes missing).
    pub value: Option<f64>,
    /// When this alert was last sent to Alertmanager.
    pub last_sent_ms: Option<i64>,
}

/// A change of state worth recording and notifying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// inactive/resolved → pending.
    Pending,
    /// pending (or inactive/resolved with `for = 0`) → firing.
    Firing,
    /// firing → resolved.
    Resolved,
    /// pending → inactive: the condition stopped holding before `for`.
    Inactive,
}

impl Transition {
    pub fn state(self) -> AlertState {
        match self {
            Transition::Pending => AlertState::Pending,
            Transition::Firing => AlertState::Firing,
            Transition::Resolved => AlertState::Resolved,
            Transition::Inactive => AlertState::Inactive,
        }
    }
}

impl Alert {
    /// Feeds one observation at `now_ms`; returns the transition, if any.
    pub fn observe(
        &mut self,
        condition: &Condition,
        now_ms: i64,
        value: Option<f64>,
    ) -> Option<Transition> {
        if value.is_some() {
            self.value = value;
        }
        let holds = condition.holds(value);
        match self.state {
            AlertState::Inactive | AlertState::Resolved => {
                if !holds {
                    return None;
                }
                *self = Alert {
                    state: AlertState::Pending,
                    active_at_ms: Some(now_ms),
                    value: self.value,
                    ..Alert::default()
                };
                if condition.for_ms <= 0 {
                    self.state = AlertState::Firing;
                    self.fired_at_ms = Some(now_ms);
                    return Some(Transition::Firing);
                }
                Some(Transition::Pending)
            }
            AlertState::Pending => {
                if !holds {
                    self.state = AlertState::Inactive;
                    self.active_at_ms = None;
                    return Some(Transition::Inactive);
                }
                let since = self.active_at_ms.unwrap_or(now_ms);
                if now_ms.saturating_sub(since) >= condition.for_ms {
                    self.state = AlertState::Firing;
                    self.fired_at_ms = Some(now_ms);
                    return Some(Transition::Firing);
                }
                None
            }
            AlertState::Firing => {
                if holds {
                    self.keep_firing_since_ms = None;
                    return None;
                }
                if condition.keep_firing_for_ms > 0 {
                    let since = *self.keep_firing_since_ms.get_or_insert(now_ms);
                    if now_ms.saturating_sub(since) < condition.keep_firing_for_ms {
                        return None;
                    }
                }
                self.state = AlertState::Resolved;
                self.resolved_at_ms = Some(now_ms);
                self.keep_firing_since_ms = None;
                Some(Transition::Resolved)
            }
        }
    }

    /// Prometheus' rule for sending to Alertmanager: never while pending or
    /// inactive; at once when resolved since the last send; else again once
    /// `resend_delay_ms` has passed since the last send.
    pub fn needs_sending(&self, now_ms: i64, resend_delay_ms: i64) -> bool {
        match self.state {
            AlertState::Inactive | AlertState::Pending => false,
            AlertState::Firing | AlertState::Resolved => {
                let Some(sent) = self.last_sent_ms else {
                    return true;
                };
                if self.resolved_at_ms.is_some_and(|r| r > sent) {
                    return true;
                }
                sent + resend_delay_ms < now_ms
            }
        }
    }

    /// `endsAt` for Alertmanager: the resolve time, or for a firing alert
    /// `now + 4 × max(eval interval, resend delay)`, so Alertmanager resolves
    /// it by itself if llmwatch stops sending.
    pub fn ends_at_ms(&self, now_ms: i64, eval_interval_ms: i64, resend_delay_ms: i64) -> i64 {
        match (self.state, self.resolved_at_ms) {
            (AlertState::Resolved, Some(resolved)) => resolved,
            _ => now_ms + 4 * eval_interval_ms.max(resend_delay_ms),
        }
    }

    /// A resolved alert is kept (and resent) this long, then forgotten, as
    /// Prometheus' 15 minutes.
    pub fn is_expired(&self, now_ms: i64, retention_ms: i64) -> bool {
        match self.state {
            AlertState::Inactive => true,
            AlertState::Resolved => self
                .resolved_at_ms
                .is_none_or(|r| now_ms.saturating_sub(r) >= retention_ms),
            _ => false,
        }
    }
}

/// How long resolved alerts are kept and resent.
pub const RESOLVED_RETENTION_MS: i64 = 15 * 60 * 1000;

/// Formats a value for templates and messages: integers without a fraction,
/// others with up to four decimals (trailing zeros dropped).
pub fn format_value(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return format!("{value:.0}");
    }
    let text = format!("{value:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "0" || text == "-0" {
        // Too small for four decimals: keep its magnitude.
        return format!("{value:e}");
    }
    text.to_string()
}

/// Renders a label or annotation template (see the module doc).
pub fn render_template(
    template: &str,
    value: Option<f64>,
    labels: &BTreeMap<String, String>,
) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = after[..end].trim();
        let replacement = match inner {
            "$value" | ".Value" => Some(value.map(format_value).unwrap_or_default()),
            "$target" => Some(labels.get("target").cloned().unwrap_or_default()),
            _ => inner
                .strip_prefix("$labels.")
                .or_else(|| inner.strip_prefix(".Labels."))
                .map(|name| labels.get(name).cloned().unwrap_or_default()),
        };
        match replacement {
            Some(text) => out.push_str(&text),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A stable fingerprint of a label set (FNV-1a 64 over sorted pairs), hex.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let hash = crate::stable_hash::fnv1a(labels.iter().flat_map(|(name, value)| {
        name.bytes()
            .chain([0xff])
            .chain(value.bytes())
            .chain([0xfe])
    }));
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(for_ms: i64, keep_ms: i64) -> Condition {
        Condition {
            op: Op::Gt,
            threshold: 1.0,
            for_ms,
            keep_firing_for_ms: keep_ms,
        }
    }

    #[test]
    fn ops_parse_and_compare() {
        assert_eq!(">=".parse::<Op>(), Ok(Op::Ge));
        assert!("=>".parse::<Op>().is_err());
        assert!(Op::Gt.holds(2.0, 1.0));
        assert!(!Op::Gt.holds(1.0, 1.0));
        assert!(Op::Le.holds(1.0, 1.0));
        assert!(!Op::Ne.holds(f64::NAN, 1.0));
    }

    #[test]
    fn pending_then_firing_then_resolved() {
        let c = cond(2000, 0);
        let mut a = Alert::default();
        assert_eq!(a.observe(&c, 0, Some(0.5)), None);
        assert_eq!(a.state, AlertState::Inactive);
        assert_eq!(a.observe(&c, 1000, Some(2.0)), Some(Transition::Pending));
        assert_eq!(a.active_at_ms, Some(1000));
        assert_eq!(a.observe(&c, 2000, Some(2.0)), None);
        assert_eq!(a.state, AlertState::Pending);
        assert_eq!(a.observe(&c, 3000, Some(3.0)), Some(Transition::Firing));
        assert_eq!(a.fired_at_ms, Some(3000));
        assert_eq!(a.value, Some(3.0));
        assert_eq!(a.observe(&c, 4000, Some(3.0)), None);
        assert_eq!(a.observe(&c, 5000, Some(0.1)), Some(Transition::Resolved));
        assert_eq!(a.state, AlertState::Resolved);
        assert_eq!(a.resolved_at_ms, Some(5000));
        // Stays resolved while the condition is false.
        assert_eq!(a.observe(&c, 6000, Some(0.1)), None);
        // A new breach is a new alert.
        assert_eq!(a.observe(&c, 7000, Some(5.0)), Some(Transition::Pending));
        assert_eq!(a.active_at_ms, Some(7000));
        assert_eq!(a.resolved_at_ms, None);
        assert_eq!(a.fired_at_ms, None);
    }

    #[test]
    fn pending_drops_back_to_inactive() {
        let c = cond(2000, 0);
        let mut a = Alert::default();
        a.observe(&c, 0, Some(2.0));
        assert_eq!(a.observe(&c, 1000, Some(0.0)), Some(Transition::Inactive));
        assert_eq!(a.state, AlertState::Inactive);
        // The `for` clock restarts.
        a.observe(&c, 1500, Some(2.0));
        assert_eq!(a.observe(&c, 3000, Some(2.0)), None);
        assert_eq!(a.observe(&c, 3500, Some(2.0)), Some(Transition::Firing));
    }

    #[test]
    fn zero_for_fires_at_once() {
        let mut a = Alert::default();
        assert_eq!(
            a.observe(&cond(0, 0), 10, Some(2.0)),
            Some(Transition::Firing)
        );
        assert_eq!(a.active_at_ms, Some(10));
    }

    #[test]
    fn missing_value_is_false() {
        let c = cond(0, 0);
        let mut a = Alert::default();
        a.observe(&c, 0, Some(2.0));
        assert_eq!(a.observe(&c, 1000, None), Some(Transition::Resolved));
        assert_eq!(a.value, Some(2.0), "last value kept");
    }

    #[test]
    fn keep_firing_for_holds_the_alert() {
        let c = cond(0, 3000);
        let mut a = Alert::default();
        a.observe(&c, 0, Some(2.0));
        assert_eq!(a.observe(&c, 1000, Some(0.0)), None);
        assert_eq!(a.keep_firing_since_ms, Some(1000));
        assert_eq!(a.observe(&c, 3000, Some(0.0)), None);
        // True again: the keep-firing clock resets.
        assert_eq!(a.observe(&c, 3500, Some(2.0)), None);
        assert_eq!(a.keep_firing_since_ms, None);
        assert_eq!(a.observe(&c, 4000, Some(0.0)), None);
        assert_eq!(a.observe(&c, 6999, Some(0.0)), None);
        assert_eq!(a.observe(&c, 7000, Some(0.0)), Some(Transition::Resolved));
    }

    #[test]
    fn resend_rules() {
        let c = cond(0, 0);
        let mut a = Alert::default();
        a.observe(&c, 0, Some(2.0));
        assert!(a.needs_sending(0, 60_000));
        a.last_sent_ms = Some(0);
        assert!(!a.needs_sending(30_000, 60_000));
        assert!(a.needs_sending(60_001, 60_000));
        assert_eq!(a.ends_at_ms(0, 15_000, 60_000), 240_000);
        a.observe(&c, 40_000, Some(0.0));
        assert!(a.needs_sending(40_000, 60_000), "resolved since last send");
        assert_eq!(a.ends_at_ms(41_000, 15_000, 60_000), 40_000);
        a.last_sent_ms = Some(40_000);
        assert!(!a.needs_sending(41_000, 60_000));
        assert!(!a.is_expired(41_000, RESOLVED_RETENTION_MS));
        assert!(a.is_expired(40_000 + RESOLVED_RETENTION_MS, RESOLVED_RETENTION_MS));
        let pending = Alert {
            state: AlertState::Pending,
            ..Alert::default()
        };
        assert!(!pending.needs_sending(0, 0));
    }

    #[test]
    fn templates() {
        let labels: BTreeMap<String, String> = [
            ("target".to_string(), "vllm-a".to_string()),
            ("alertname".to_string(), "ttft".to_string()),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            render_template(
                "p95 TTFT {{ $value }}s on {{$labels.target}} ({{ $target }})",
                Some(1.23456),
                &labels
            ),
            "p95 TTFT 1.2346s on vllm-a (vllm-a)"
        );
        assert_eq!(
            render_template("{{ $labels.none }}|{{ .Bad }}|{{ open", Some(1.0), &labels),
            "|{{ .Bad }}|{{ open"
        );
        assert_eq!(render_template("{{ $value }}", None, &labels), "");
        assert_eq!(format_value(3.0), "3");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(0.00001), "1e-5");
    }

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        let a: BTreeMap<String, String> = [("a".into(), "b".into())].into_iter().collect();
        let b: BTreeMap<String, String> = [("ab".into(), "".into())].into_iter().collect();
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
    }

    #[test]
    fn states_round_trip() {
        for state in AlertState::ALL {
            assert_eq!(state.as_str().parse::<AlertState>(), Ok(state));
        }
    }
}
