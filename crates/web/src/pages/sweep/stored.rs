//! A stored sweep read back for its pages: its settings and its verdict,
//! judged again from its steps exactly as the runner did.

use llmwatch_core::analysis::{
    analyze_sweep, AnalysisConfig, EngineCapacity, Objectives, SweepVerdict, WorkloadHints,
};
use llmwatch_probe::{PromptKind, Shape};
use serde_json::Value;

use llmwatch_engine::runners::sweep::card::card_from_json;
use llmwatch_engine::runners::sweep::StoredSweep;

/// The settings a stored sweep ran with, as far as its page needs them.
#[derive(Debug, Clone, Default)]
pub struct StoredSettings {
    pub objectives: Objectives,
    /// The thresholds it was judged with (defaults for older sweeps).
    pub analysis: AnalysisConfig,
    pub hints: WorkloadHints,
    pub shape: String,
    pub prompt: String,
    pub model: Option<String>,
}

/// Reads the stored settings JSON; missing or odd fields fall back to
/// "unknown", never to an error.
pub fn stored_settings(json: &str) -> StoredSettings {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let f = |path: &[&str]| {
        let mut cur = &v;
        for p in path {
            cur = cur.get(p)?;
        }
        cur.as_f64().filter(|x| x.is_finite())
    };
    let mut objectives = Objectives {
        ttft_p95: f(&["objectives", "ttft_p95_s"]),
        itl_p95: f(&["objectives", "itl_p95_s"]),
        e2e_p95: f(&["objectives", "e2e_p95_s"]),
        ..Objectives::default()
    };
    if let Some(e) = f(&["objectives", "max_error_rate"]) {
        objectives.max_error_rate = e;
    }
    let shape = v.get("shape").and_then(Value::as_str).unwrap_or("");
    let prompt = v.get("prompt").and_then(Value::as_str).unwrap_or("");
    // `multi-turn:…` where the sweep sent conversations.
    let workload = v.get("workload").and_then(Value::as_str);
    let parsed_shape = Shape::parse(shape).ok();
    let kind = PromptKind::parse(prompt).ok();
    let hints = WorkloadHints {
        shared_prefix: matches!(kind, Some(PromptKind::SharedPrefix { .. })) || workload.is_some(),
        expected_prefix_hit_rate: match kind {
            Some(PromptKind::SharedPrefix { hit_ratio }) => Some(hit_ratio),
            _ => None,
        },
        input_tokens: parsed_shape.map(|s| u64::from(s.input_tokens)),
        output_tokens: parsed_shape.map(|s| u64::from(s.output_tokens)),
        capacity: EngineCapacity::default(),
    };
    StoredSettings {
        objectives,
        analysis: v
            .get("analysis")
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default(),
        hints,
        shape: shape.to_string(),
        prompt: match workload {
            Some(workload) => format!("{prompt} ({workload})"),
            None => prompt.to_string(),
        },
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
    }
}

/// The verdict of a stored sweep, judged again from its steps with its own
/// objectives, card and thresholds: the stored verdict's analysis, exactly
/// (a pure function of those), with the typed values the charts mark.
pub fn verdict_of(sweep: &StoredSweep) -> (StoredSettings, SweepVerdict) {
    let mut settings = stored_settings(&sweep.row.settings_json);
    // The same capacity the runner judged with: the card it stored.
    if let Ok(card) = serde_json::from_str::<Value>(&sweep.row.card_json) {
        settings.hints.capacity = EngineCapacity::from_card(&card_from_json(&card));
    }
    let verdict = analyze_sweep(
        &sweep.steps,
        &settings.objectives,
        &settings.hints,
        &settings.analysis,
    );
    (settings, verdict)
}
