//! What a sweep hands back: each measured step and the whole report, with
//! the report's JSON (`--json`).

use llmwatch_core::analysis::{ExperimentCard, StepResult, SweepVerdict};
use llmwatch_probe::RunResult;
use llmwatch_store::SweepStatus;
use serde_json::{json, Value};

use super::card::card_to_json;
use super::persist::{run_summary_json, step_to_json, verdict_to_json};

/// One measured step, as handed to the progress callback and kept in the
/// report.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Position in the ladder, from 0.
    pub index: usize,
    /// The step as the analysis sees it (client numbers in seconds plus the
    /// server evidence of its window).
    pub step: StepResult,
    /// The probe run: its per-request records while the step is stored and
    /// reported (progress callback), then only its summary.
    pub run: RunResult,
    /// Scrapes of this step that failed (evidence from them is missing).
    pub scrape_failures: Vec<String>,
    /// How many scrapes of the target fell inside the step's window.
    pub scrapes_in_window: usize,
    /// The step's row id in the store (also the `run_id` of its probes).
    pub stored_id: Option<i64>,
}

/// Everything a sweep found.
#[derive(Debug, Clone)]
pub struct SweepReport {
    /// The sweep's id in the store, when stored.
    pub sweep_id: Option<i64>,
    pub url: String,
    pub model: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub card: ExperimentCard,
    pub steps: Vec<StepReport>,
    pub verdict: SweepVerdict,
    /// The verdict in words
    /// ([`summary_lines`](llmwatch_core::analysis::summary_lines)).
    pub summary: Vec<String>,
    /// Why the sweep stopped before the end of its ladder.
    pub stop_reason: Option<String>,
    pub status: SweepStatus,
    pub settings_json: Value,
}

impl SweepReport {
    /// The step results in order, as the analysis takes them.
    pub fn step_results(&self) -> Vec<StepResult> {
        self.steps.iter().map(|s| s.step.clone()).collect()
    }

    /// The report as JSON (`--json`): settings, card, steps with their run
    /// summaries and evidence, the verdict.
    pub fn to_json(&self) -> Value {
        json!({
            "sweep_id": self.sweep_id,
            "url": self.url,
            "model": self.model,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "settings": self.settings_json,
            "card": card_to_json(&self.card),
            "steps": self.steps.iter().map(|s| json!({
                "index": s.index,
                "step": step_to_json(&s.step),
                "run": run_summary_json(&s.run),
                "scrapes_in_window": s.scrapes_in_window,
                "scrape_failures": s.scrape_failures,
            })).collect::<Vec<_>>(),
            "verdict": verdict_to_json(&self.verdict, &self.summary),
        })
    }
}
