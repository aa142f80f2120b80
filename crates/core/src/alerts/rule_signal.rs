//! What a rule watches: a stored signal, or the live diagnosis — whether the
//! verdict is a given one (`signal = "bottleneck"`, `op = "=="`,
//! `threshold = "kv_cache_capacity"`), or how often it changed over the
//! window (`signal = "bottleneck_changes"`, `op = ">="`, `threshold = 1`).

use crate::analysis::LiveKind;
use crate::signals::Signal;

/// The pseudo-signal of a verdict rule.
pub const BOTTLENECK: &str = "bottleneck";
/// The pseudo-signal of a verdict-change rule.
pub const BOTTLENECK_CHANGES: &str = "bottleneck_changes";

/// A rule's subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleSignal {
    Signal(Signal),
    /// 1 while the target's live verdict is this one, else 0; a rule's
    /// condition is `== 1` (op `==`) or `!= 1` (op `!=`).
    Bottleneck(LiveKind),
    /// Changes of the live verdict over the rule's window.
    BottleneckChanges,
}

impl RuleSignal {
    /// Parses a rule's `signal` field.
    pub fn parse(name: &str) -> Result<RuleSignal, String> {
        match name {
            BOTTLENECK_CHANGES => Ok(RuleSignal::BottleneckChanges),
            // The verdict comes from the threshold; see `with_verdict`.
            BOTTLENECK => Ok(RuleSignal::Bottleneck(LiveKind::Healthy)),
            _ => name.parse::<Signal>().map(RuleSignal::Signal).map_err(|_| {
                let mut known: Vec<&str> = Signal::all().iter().map(|s| s.as_str()).collect();
                known.extend([BOTTLENECK, BOTTLENECK_CHANGES]);
                format!(
                    "unknown signal {name:?}: expected one of {}",
                    known.join(", ")
                )
            }),
        }
    }

    /// The verdict a `bottleneck` rule's threshold names.
    pub fn verdict(threshold: &str) -> Result<LiveKind, String> {
        LiveKind::from_code(threshold.trim()).ok_or_else(|| {
            format!(
                "{threshold:?} is not a verdict: expected one of {}",
                LiveKind::CODES.join(", ")
            )
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RuleSignal::Signal(s) => s.as_str(),
            RuleSignal::Bottleneck(_) => BOTTLENECK,
            RuleSignal::BottleneckChanges => BOTTLENECK_CHANGES,
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            RuleSignal::Signal(s) => s.unit(),
            RuleSignal::Bottleneck(_) => "verdict",
            RuleSignal::BottleneckChanges => "changes",
        }
    }
}
