//! A sweep written by `llmwatch sweep --json`, judged again by today's
//! rules: each step's client self-check re-applied to the numbers its run
//! recorded, then the whole analysis with the card's KV-cache capacity. The
//! recorded real-server sweeps are tested this way, so a rule change is
//! checked against what real engines did.

use llmwatch_core::analysis::{
    analyze_sweep, summary_lines, AnalysisConfig, EngineCapacity, Load, Objectives, StepResult,
    SweepVerdict, WorkloadHints,
};
use llmwatch_probe::{
    MeasuredScale, Monitored, PromptKind, RunResult, SelfCheck, SelfCheckLimits, Shape,
};
use serde_json::Value;

use super::card::card_from_json;
use super::persist::step_result;
use super::SweepError;
use super::{breakdown_by_server_timing, record_breakdown};

/// A re-judged sweep.
#[derive(Debug, Clone)]
pub struct Rejudged {
    pub steps: Vec<StepResult>,
    pub objectives: Objectives,
    pub hints: WorkloadHints,
    pub verdict: SweepVerdict,
    pub summary: Vec<String>,
}

fn bad(why: impl Into<String>) -> SweepError {
    SweepError::Settings(format!(
        "not a sweep written by `llmwatch sweep --json`: {}",
        why.into()
    ))
}

/// Re-judges the sweep JSON `value` (see the module documentation).
pub fn rejudge_json(value: &Value) -> Result<Rejudged, SweepError> {
    let settings = value.get("settings").ok_or_else(|| bad("no `settings`"))?;
    let secs = |key: &str| {
        settings
            .pointer(&format!("/objectives/{key}"))
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite())
    };
    let objectives = Objectives {
        ttft_p95: secs("ttft_p95_s"),
        itl_p95: secs("itl_p95_s"),
        e2e_p95: secs("e2e_p95_s"),
        max_error_rate: secs("max_error_rate").unwrap_or(Objectives::default().max_error_rate),
    };
    let limits: SelfCheckLimits = settings
        .get("self_check")
        .map(|v| serde_json::from_value(v.clone()))
        .transpose()
        .map_err(|err| bad(format!("self_check: {err}")))?
        .unwrap_or_default();
    let shape = settings
        .get("shape")
        .and_then(Value::as_str)
        .and_then(|s| Shape::parse(s).ok());
    let prompt = settings
        .get("prompt")
        .and_then(Value::as_str)
        .and_then(|p| PromptKind::parse(p).ok());
    let card = value.get("card").map(card_from_json).unwrap_or_default();
    let hints = WorkloadHints {
        shared_prefix: matches!(prompt, Some(PromptKind::SharedPrefix { .. })),
        expected_prefix_hit_rate: match prompt {
            Some(PromptKind::SharedPrefix { hit_ratio }) => Some(hit_ratio),
            _ => None,
        },
        input_tokens: shape.map(|s| u64::from(s.input_tokens)),
        output_tokens: shape.map(|s| u64::from(s.output_tokens)),
        capacity: EngineCapacity::from_card(&card),
    };
    let entries = value
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `steps` array"))?;
    let mut steps = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let step = entry
            .get("step")
            .ok_or_else(|| bad(format!("step {index}: no `step`")))?;
        let mut run: RunResult = entry
            .get("run")
            .map(|v| serde_json::from_value(v.clone()))
            .transpose()
            .map_err(|err| bad(format!("step {index}: run: {err}")))?
            .ok_or_else(|| bad(format!("step {index}: no `run`")))?;
        let load = match (
            step.pointer("/load/concurrency").and_then(Value::as_u64),
            step.pointer("/load/rate").and_then(Value::as_f64),
        ) {
            (Some(c), _) => Load::Concurrency(u32::try_from(c).map_err(|_| bad("concurrency"))?),
            (None, Some(r)) => Load::RequestRate(r),
            _ => return Err(bad(format!("step {index}: no load"))),
        };
        let server = step
            .get("server")
            .map(|v| serde_json::from_value(v.clone()))
            .transpose()
            .map_err(|err| bad(format!("step {index}: server evidence: {err}")))?
            .unwrap_or_default();
        run.self_check = recheck(&run, limits, &objectives);
        let int = |key: &str| step.get(key).and_then(Value::as_i64).unwrap_or(0);
        let mut result = step_result(load, int("start_ms"), int("end_ms"), &run, server);
        // The server's per-request timing split again by today's rules
        // (the histogram means need the scrapes, which are not recorded).
        if let Some(breakdown) = breakdown_by_server_timing(&result, &run) {
            record_breakdown(&mut result, breakdown);
        }
        result.cache_contaminated = step
            .get("cache_contaminated")
            .and_then(Value::as_str)
            .map(str::to_string);
        steps.push(result);
    }
    // Its own thresholds where it stored them (older sweeps: the defaults).
    let analysis: AnalysisConfig = settings
        .get("analysis")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    let verdict = analyze_sweep(&steps, &objectives, &hints, &analysis);
    let summary = summary_lines(&verdict);
    Ok(Rejudged {
        steps,
        objectives,
        hints,
        verdict,
        summary,
    })
}

/// The run's self-check judged again from what it monitored.
fn recheck(run: &RunResult, limits: SelfCheckLimits, objectives: &Objectives) -> SelfCheck {
    let sc = &run.self_check;
    let monitored = Monitored {
        cpu_cores: sc.cpu_cores,
        cpu_measure: sc.cpu_measure,
        scheduler_lag_ms: sc.scheduler_lag_p99_ms.zip(sc.scheduler_lag_max_ms),
        host_steal_pct: sc.host_steal_pct,
    };
    let scale = MeasuredScale {
        ttft_p50_ms: run.ttft_ms.p50,
        ttft_p95_ms: run.ttft_ms.p95,
        itl_p95_ms: run.itl_ms.p95,
        e2e_p50_ms: run.e2e_ms.p50,
        ttft_objective_ms: objectives.ttft_p95.map(|s| s * 1e3),
        itl_objective_ms: objectives.itl_p95.map(|s| s * 1e3),
    };
    SelfCheck::judge(
        &monitored,
        sc.dispatch_lag_p99_ms,
        sc.tokens_per_event,
        limits,
        &scale,
    )
}
