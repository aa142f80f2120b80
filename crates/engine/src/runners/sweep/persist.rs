//! A sweep in the store: the rows and JSON shapes written as it runs, and
//! reading stored sweeps back (one, or two side by side to compare).

use llmwatch_core::analysis::{
    compare_cards, CardDiff, ExperimentCard, Load, Quantiles, ServerEvidence, StepResult,
    SweepVerdict,
};
use llmwatch_probe::{RunResult, Summary};
use llmwatch_store::{Store, SweepRow, SweepStepRow};
use serde_json::{json, Value};

use super::card::card_from_json;
use super::error::SweepError;

fn quantiles(ms: &Summary) -> Quantiles {
    let s = |v: Option<f64>| v.filter(|v| v.is_finite()).map(|v| v / 1000.0);
    Quantiles {
        p50: s(ms.p50),
        p95: s(ms.p95),
        p99: s(ms.p99),
    }
}

/// The analysis' view of one step: the run's numbers in seconds (latencies
/// from *sent*, as `vllm bench serve` reports them) and the evidence.
pub fn step_result(
    load: Load,
    start_ms: i64,
    end_ms: i64,
    run: &RunResult,
    server: ServerEvidence,
) -> StepResult {
    StepResult {
        load,
        start_unix_ms: start_ms,
        end_unix_ms: end_ms,
        requests_ok: run.successful,
        requests_failed: run.failed,
        wall_time_s: run.duration_s,
        request_throughput: run.request_throughput,
        output_token_throughput: run.output_throughput,
        ttft: quantiles(&run.ttft_ms),
        itl: quantiles(&run.itl_ms),
        tpot: quantiles(&run.tpot_ms),
        e2e: quantiles(&run.e2e_ms),
        error_rate: run.error_rate,
        client_bound: run
            .self_check
            .client_bound
            .then(|| run.self_check.reasons.join("; ")),
        cache_contaminated: None,
        server,
    }
}

/// The run's summary without its per-request records (those are stored as
/// probes).
pub(super) fn run_summary_json(run: &RunResult) -> Value {
    let mut run = run.clone();
    run.records.clear();
    serde_json::to_value(&run).unwrap_or(Value::Null)
}

/// The row of one measured step (its run without records, and its evidence).
pub(super) fn step_row(
    sweep_id: i64,
    index: usize,
    step: &StepResult,
    run: &RunResult,
) -> SweepStepRow {
    let (kind, value) = match step.load {
        Load::Concurrency(c) => ("concurrency", f64::from(c)),
        Load::RequestRate(r) => ("rate", r),
    };
    SweepStepRow {
        sweep_id,
        step_index: i64::try_from(index).unwrap_or(i64::MAX),
        load_kind: kind.to_string(),
        load_value: value,
        start_ms: step.start_unix_ms,
        end_ms: step.end_unix_ms,
        run_json: run_summary_json(run).to_string(),
        evidence_json: serde_json::to_string(&step.server).unwrap_or_else(|_| "{}".to_string()),
    }
}

fn load_json(load: &Load) -> Value {
    match *load {
        Load::Concurrency(c) => json!({ "concurrency": c }),
        Load::RequestRate(r) => json!({ "rate": r }),
    }
}

fn q_json(q: &Quantiles) -> Value {
    json!({ "p50": q.p50, "p95": q.p95, "p99": q.p99 })
}

pub(super) fn step_to_json(s: &StepResult) -> Value {
    json!({
        "load": load_json(&s.load),
        "start_ms": s.start_unix_ms,
        "end_ms": s.end_unix_ms,
        "requests_ok": s.requests_ok,
        "requests_failed": s.requests_failed,
        "wall_time_s": s.wall_time_s,
        "request_throughput": s.request_throughput,
        "output_token_throughput": s.output_token_throughput,
        "ttft_s": q_json(&s.ttft),
        "itl_s": q_json(&s.itl),
        "tpot_s": q_json(&s.tpot),
        "e2e_s": q_json(&s.e2e),
        "error_rate": s.error_rate,
        "client_bound": s.client_bound,
        "cache_contaminated": s.cache_contaminated,
        "server": &s.server,
    })
}

/// The verdict as stored: the headline numbers and every finding, plus the
/// summary in words. It can always be recomputed from the steps.
pub fn verdict_to_json(v: &SweepVerdict, summary: &[String]) -> Value {
    json!({
        "step_count": v.step_count,
        "usable_steps": v.usable_steps,
        "excluded_steps": v.excluded_steps.iter().map(|e| json!({
            "step": e.step, "load": load_json(&e.load), "reason": e.reason,
        })).collect::<Vec<_>>(),
        "saturation": v.saturation.as_ref().map(|s| json!({
            "step": s.step,
            "load": load_json(&s.load),
            "throughput": s.throughput,
            "unit": s.metric.unit(),
            "request_throughput": s.request_throughput,
            "output_token_throughput": s.output_token_throughput,
            "gain_per_doubling": s.gain_per_doubling,
            "latency_rise": s.latency_rise,
            "peak_step": s.peak_step,
            "peak_throughput": s.peak_throughput,
        })),
        "sustainable": v.sustainable.as_ref().map(|s| json!({
            "step": s.step,
            "load": load_json(&s.load),
            "request_throughput": s.request_throughput,
            "output_token_throughput": s.output_token_throughput,
            "ttft_p95_s": s.ttft_p95,
            "itl_p95_s": s.itl_p95,
            "error_rate": s.error_rate,
        })),
        "findings": v.findings.iter().map(|f| json!({
            "verdict": f.verdict.name(),
            "confidence": format!("{:?}", f.confidence).to_ascii_lowercase(),
            "evidence": f.evidence,
            "what_to_try": f.what_to_try,
            "step": f.step,
        })).collect::<Vec<_>>(),
        "summary": summary,
    })
}

/// A stored sweep read back: its row, card and steps.
#[derive(Debug, Clone)]
pub struct StoredSweep {
    pub row: SweepRow,
    pub card: ExperimentCard,
    pub steps: Vec<StepResult>,
    /// Each step's probe run summary (no records: those are probes) ...
    pub runs: Vec<RunResult>,
    /// ... and its row id, the `run_id` of its probes.
    pub step_ids: Vec<i64>,
}

/// Two sweeps side by side: both curves, the card fields that differ and
/// the warning when more than one changed.
#[derive(Debug, Clone)]
pub struct SweepComparison {
    pub a: StoredSweep,
    pub b: StoredSweep,
    pub diff: CardDiff,
}

/// Reads one stored sweep.
pub async fn load_sweep(store: &Store, id: i64) -> Result<StoredSweep, SweepError> {
    let row = store.sweep(id).await?.ok_or(SweepError::NotFound(id))?;
    let card_value: Value =
        serde_json::from_str(&row.card_json).map_err(|err| SweepError::Corrupt {
            id,
            why: format!("card: {err}"),
        })?;
    let card = card_from_json(&card_value);
    let mut steps = Vec::new();
    let mut runs = Vec::new();
    let mut step_ids = Vec::new();
    for (step_id, s) in store.sweep_steps_with_ids(id).await? {
        let corrupt = |why: String| SweepError::Corrupt { id, why };
        let load = match s.load_kind.as_str() {
            "concurrency" => Load::Concurrency(
                u32::try_from(s.load_value.round() as i64)
                    .map_err(|_| corrupt(format!("concurrency {}", s.load_value)))?,
            ),
            "rate" => Load::RequestRate(s.load_value),
            other => return Err(corrupt(format!("load kind {other:?}"))),
        };
        let run: RunResult = serde_json::from_str(&s.run_json)
            .map_err(|err| corrupt(format!("step {} run: {err}", s.step_index)))?;
        let evidence: ServerEvidence = serde_json::from_str(&s.evidence_json)
            .map_err(|err| corrupt(format!("step {} evidence: {err}", s.step_index)))?;
        steps.push(step_result(load, s.start_ms, s.end_ms, &run, evidence));
        runs.push(run);
        step_ids.push(step_id);
    }
    Ok(StoredSweep {
        row,
        card,
        steps,
        runs,
        step_ids,
    })
}

/// Compares two stored sweeps (`llmwatch sweep --compare A B`).
pub async fn compare_sweeps(store: &Store, a: i64, b: i64) -> Result<SweepComparison, SweepError> {
    let a = load_sweep(store, a).await?;
    let b = load_sweep(store, b).await?;
    let diff = compare_cards(&a.card, &b.card);
    Ok(SweepComparison { a, b, diff })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_round_trips() {
        let ev = ServerEvidence {
            kv_cache_usage_mean: Some(0.95),
            requests_waiting_max: Some(7.0),
            preemptions: Some(3),
            gpu_count: Some(2),
            ..ServerEvidence::default()
        };
        let json = serde_json::to_string(&ev).expect("serialises");
        assert!(json.contains("\"server_ttft_p95_s\":null"), "{json}");
        let back: ServerEvidence = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, ev);
    }
}
