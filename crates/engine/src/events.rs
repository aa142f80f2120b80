//! Failures the daemon survives, as named events (Vector's internal-events
//! pattern): each is logged with its context and counted by name, so
//! `llmwatch_failures_total{event=…}` in the daemon's own `/metrics` shows
//! every failure path, not only the ones someone reads the log for.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every failure path of the engine's loops, one name each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The hourly retention pass (deleting old rows) failed.
    Retention,
    /// Downsampling old scrapes failed.
    Downsampling,
    /// A canary probe (or its reason for not starting) could not be stored.
    CanaryStore,
    /// A canary cannot start (no model, a shape past the context, a key
    /// that cannot be read); stored as a failed probe too.
    CanarySetup,
    /// A canary's probe task failed (not a failed request: the task).
    CanaryTask,
    /// The live verdict of a target could not be judged or stored.
    LiveDiagnosis,
    /// A scheduled sweep failed or could not be set up.
    ScheduledSweep,
    /// A sweep started from the API or a page failed after it began.
    StartedSweep,
    /// Writing a batch of scrapes failed (the batch is lost).
    ScrapeWrite,
    /// The alert engine could not read or store its state.
    Alerts,
    /// Watching a target could not start (its store row, its thread).
    TargetStart,
    /// Reading the store for another loop's input failed (targets, sweeps).
    StoreRead,
}

impl Failure {
    /// Every event, in the order `/metrics` lists them.
    pub const ALL: [Failure; 12] = [
        Failure::Retention,
        Failure::Downsampling,
        Failure::CanaryStore,
        Failure::CanarySetup,
        Failure::CanaryTask,
        Failure::LiveDiagnosis,
        Failure::ScheduledSweep,
        Failure::StartedSweep,
        Failure::ScrapeWrite,
        Failure::Alerts,
        Failure::TargetStart,
        Failure::StoreRead,
    ];

    /// The `event` label.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Retention => "retention",
            Failure::Downsampling => "downsampling",
            Failure::CanaryStore => "canary_store",
            Failure::CanarySetup => "canary_setup",
            Failure::CanaryTask => "canary_task",
            Failure::LiveDiagnosis => "live_diagnosis",
            Failure::ScheduledSweep => "scheduled_sweep",
            Failure::StartedSweep => "started_sweep",
            Failure::ScrapeWrite => "scrape_write",
            Failure::Alerts => "alerts",
            Failure::TargetStart => "target_start",
            Failure::StoreRead => "store_read",
        }
    }

    fn index(self) -> usize {
        Failure::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }

    /// Logs the failure (with the target, where there is one) and counts it.
    pub fn emit(self, target: Option<&str>, error: &dyn Display) {
        COUNTS[self.index()].fetch_add(1, Ordering::Relaxed);
        match target {
            Some(target) => {
                tracing::warn!(event = self.name(), target = %target, error = %error, "failure")
            }
            None => tracing::warn!(event = self.name(), error = %error, "failure"),
        }
    }
}

/// One counter per event for the process: every loop of every daemon in it
/// adds to the same counts, as Prometheus counters of one process do.
static COUNTS: [AtomicU64; Failure::ALL.len()] = [const { AtomicU64::new(0) }; Failure::ALL.len()];

/// Each event's count since the process started.
pub fn failure_counts() -> Vec<(&'static str, u64)> {
    Failure::ALL
        .iter()
        .map(|f| (f.name(), COUNTS[f.index()].load(Ordering::Relaxed)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emitted_failure_is_counted_under_its_name() {
        let before = failure_counts();
        Failure::Downsampling.emit(None, &"disk full");
        let after = failure_counts();
        let count = |counts: &[(&str, u64)]| {
            counts
                .iter()
                .find(|(name, _)| *name == "downsampling")
                .map(|(_, n)| *n)
        };
        assert!(count(&after) > count(&before));
        assert_eq!(after.len(), Failure::ALL.len());
        let mut names: Vec<_> = after.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Failure::ALL.len(), "names are unique");
    }
}
