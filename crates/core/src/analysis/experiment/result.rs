//! What an experiment found: per variant its curves, capacity with
//! intervals, accuracy and binding limit; the ranked table and the answer.
//! Serialised as the report's JSON and stored as such, so `llmwatch
//! experiment --report ID` rewrites the report from it.

use serde::{Deserialize, Serialize};

use super::bootstrap::{CapacityEstimate, Interval};
use super::quality::Accuracy;
use super::settings::SettingChange;
use crate::analysis::{Finding, StepResult, SweepVerdict, Verdict};

/// Where a variant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VariantStatus {
    Pending,
    Running,
    Completed,
    /// Its server did not start, did not become healthy, or every run
    /// failed; the reason and log tail say why.
    Failed,
    /// Not run: it changes more than one setting from the baseline.
    Refused,
}

impl VariantStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            VariantStatus::Pending => "pending",
            VariantStatus::Running => "running",
            VariantStatus::Completed => "completed",
            VariantStatus::Failed => "failed",
            VariantStatus::Refused => "refused",
        }
    }
}

/// One load level of a curve (pooled over repeats).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub concurrency: u32,
    pub requests: u64,
    /// Output tokens/s.
    pub throughput: f64,
    pub ttft_p50_s: Option<f64>,
    pub ttft_p95_s: Option<f64>,
    pub itl_p50_s: Option<f64>,
    pub itl_p95_s: Option<f64>,
    pub error_rate: f64,
    /// Mean KV-cache usage over the step windows (0..1), where scraped.
    pub kv_usage_mean: Option<f64>,
    pub kv_usage_max: Option<f64>,
}

impl CurvePoint {
    /// A point from a pooled step, with the KV usage the runs' windows saw.
    pub fn from_step(step: &StepResult, kv: (Option<f64>, Option<f64>)) -> CurvePoint {
        CurvePoint {
            concurrency: step.load.value() as u32,
            requests: step.requests_ok + step.requests_failed,
            throughput: step.output_token_throughput,
            ttft_p50_s: step.ttft.p50,
            ttft_p95_s: step.ttft.p95,
            itl_p50_s: step.itl.p50,
            itl_p95_s: step.itl.p95,
            error_rate: step.effective_error_rate(),
            kv_usage_mean: kv.0,
            kv_usage_max: kv.1,
        }
    }
}

/// The limit a sweep's diagnosis named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// The verdict's name (DESIGN.md), e.g. "KV-cache capacity".
    pub verdict: String,
    /// Machine form: `kv_cache_capacity`, `scheduler_limit`, …
    pub kind: String,
    pub confidence: String,
    pub evidence: String,
    pub what_to_try: String,
}

impl Binding {
    /// The headline finding of a verdict: the most confident one that names
    /// a server limit (client-bound steps and prefix-cache advice are not
    /// limits of the server's capacity).
    pub fn of(verdict: &SweepVerdict) -> Option<Binding> {
        let limits = |f: &&Finding| {
            !matches!(
                f.verdict,
                Verdict::ClientBound | Verdict::PrefixCachingIneffective
            )
        };
        let best = verdict
            .findings
            .iter()
            .filter(limits)
            .min_by_key(|f| std::cmp::Reverse(f.confidence))?;
        Some(Binding {
            verdict: best.verdict.name().to_string(),
            kind: format!("{:?}", best.verdict),
            confidence: best.confidence.word().to_string(),
            evidence: best.evidence.clone(),
            what_to_try: best.what_to_try.to_string(),
        })
    }
}

/// One repeat of a variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub repeat: u32,
    /// Position in the experiment's interleaved order, from 0.
    pub order: u32,
    pub sweep_id: Option<i64>,
    pub status: String,
    pub error: Option<String>,
    pub max_sustainable: Option<u32>,
    pub binding: Option<Binding>,
    /// Whether the prefix cache was reset before the run (`None`: the
    /// engine has no reset endpoint).
    pub prefix_cache_reset: Option<bool>,
}

/// Everything found for one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    pub name: String,
    pub args: Vec<String>,
    /// Names only: values may be secrets.
    pub env_names: Vec<String>,
    pub status: VariantStatus,
    pub reason: Option<String>,
    /// The last lines of the server's log, for a failed start.
    pub log_tail: Option<String>,
    pub log_path: Option<String>,
    /// What changed from the baseline (empty for the baseline).
    pub changes: Vec<SettingChange>,
    /// The resolved card, `(field, value)`.
    pub card: Vec<(String, Option<String>)>,
    pub runs: Vec<RunRecord>,
    /// Pooled over the repeats.
    pub curve: Vec<CurvePoint>,
    pub capacity: Option<CapacityEstimate>,
    /// The curve's point at the plan's reference concurrency.
    pub at_reference: Option<CurvePoint>,
    pub gpu_count: Option<u32>,
    /// Throughput at the objective per GPU.
    pub tokens_per_s_per_gpu: Option<f64>,
    pub accuracy: Option<Accuracy>,
    /// Set when accuracy dropped beyond `[quality].max_drop`.
    pub quality_mark: Option<String>,
    /// Joules per output token at the max sustainable step, where GPU power
    /// was scraped.
    pub energy_j_per_token: Option<f64>,
    /// The binding limit of its pooled sweep.
    pub binding: Option<Binding>,
    /// Against the baseline, in words (called only when intervals separate).
    pub versus_baseline: Option<String>,
    /// Whether its throughput at the objective is above the baseline's with
    /// separated intervals (`Some(false)`: below; `None`: not called).
    pub raises_capacity: Option<bool>,
    /// A conversation workload's figures per turn at the reference load,
    /// pooled over the repeats: the prefix cache's benefit turn by turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnPoint>,
}

/// One turn of a conversation workload at one load: mean input and cached
/// tokens per request, the hit ratio they make, the median TTFT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnPoint {
    /// From 1.
    pub turn: u32,
    pub input_tokens_mean: Option<f64>,
    pub cached_tokens_mean: Option<f64>,
    pub hit_ratio: Option<f64>,
    pub ttft_p50_s: Option<f64>,
}

/// Pools the per-turn figures of several runs: each figure the mean over
/// the runs that have it, turn by turn (the turns of the longest run).
pub fn pool_turns(runs: &[Vec<TurnPoint>]) -> Vec<TurnPoint> {
    let turns = runs.iter().map(Vec::len).max().unwrap_or(0);
    (0..turns)
        .map(|i| {
            let of_turn: Vec<&TurnPoint> = runs.iter().filter_map(|r| r.get(i)).collect();
            let mean = |f: fn(&TurnPoint) -> Option<f64>| {
                let values: Vec<f64> = of_turn.iter().filter_map(|t| f(t)).collect();
                (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
            };
            TurnPoint {
                turn: of_turn.first().map_or(0, |t| t.turn),
                input_tokens_mean: mean(|t| t.input_tokens_mean),
                cached_tokens_mean: mean(|t| t.cached_tokens_mean),
                hit_ratio: mean(|t| t.hit_ratio),
                ttft_p50_s: mean(|t| t.ttft_p50_s),
            }
        })
        .collect()
}

impl VariantResult {
    /// A variant not yet run.
    pub fn pending(name: &str, args: &[String], env_names: Vec<String>) -> VariantResult {
        VariantResult {
            name: name.to_string(),
            args: args.to_vec(),
            env_names,
            status: VariantStatus::Pending,
            reason: None,
            log_tail: None,
            log_path: None,
            changes: Vec::new(),
            card: Vec::new(),
            runs: Vec::new(),
            curve: Vec::new(),
            capacity: None,
            at_reference: None,
            gpu_count: None,
            tokens_per_s_per_gpu: None,
            accuracy: None,
            quality_mark: None,
            energy_j_per_token: None,
            binding: None,
            versus_baseline: None,
            raises_capacity: None,
            turns: Vec::new(),
        }
    }

    /// The changes in one line: `--max-num-seqs 4 → 16`.
    pub fn change_line(&self) -> String {
        if self.changes.is_empty() {
            return "baseline".to_string();
        }
        self.changes
            .iter()
            .map(|c| {
                format!(
                    "{} {} → {}",
                    c.setting,
                    c.baseline.as_deref().unwrap_or("default"),
                    c.variant.as_deref().unwrap_or("default")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One row of the ranked table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRow {
    pub rank: u32,
    pub variant: String,
    pub max_sustainable: Option<Interval>,
    pub throughput_at_objective: Option<Interval>,
    pub ttft_p95_at_reference_s: Option<f64>,
    pub itl_p95_at_reference_s: Option<f64>,
    pub tokens_per_s_per_gpu: Option<f64>,
    pub accuracy: Option<f64>,
    pub energy_j_per_token: Option<f64>,
    pub binding: Option<String>,
    pub marks: Vec<String>,
}

/// What the plan asked, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    pub shape: String,
    pub concurrency: Vec<u32>,
    pub slo_ttft_p95_s: f64,
    pub slo_itl_p95_s: f64,
    pub reference_concurrency: u32,
    pub requests_per_step: u64,
    pub repeats: u32,
    /// The command with `{port}` (or the URL of a server the user restarts).
    pub server: String,
    pub quality_set: Option<String>,
    pub max_drop: Option<f64>,
    pub seed: u64,
}

/// The whole experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentResult {
    pub id: Option<i64>,
    pub name: String,
    /// `running`, `completed` or `failed`.
    pub status: String,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub plan: PlanSummary,
    /// The origin checklist: `(item, value)`; "not reported" where unknown.
    pub checklist: Vec<(String, String)>,
    pub variants: Vec<VariantResult>,
    pub ranking: Vec<RankRow>,
    /// The answer in a few sentences, with numbers.
    pub answer: Vec<String>,
    /// Progress: runs done of runs planned.
    pub runs_done: u32,
    pub runs_planned: u32,
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_pool_as_means_over_the_runs_that_have_them() {
        let point = |turn, cached: Option<f64>, hit| TurnPoint {
            turn,
            input_tokens_mean: Some(100.0 * f64::from(turn)),
            cached_tokens_mean: cached,
            hit_ratio: hit,
            ttft_p50_s: Some(0.01 * f64::from(turn)),
        };
        let runs = vec![
            vec![
                point(1, Some(0.0), Some(0.0)),
                point(2, Some(80.0), Some(0.4)),
            ],
            vec![point(1, Some(0.0), Some(0.0)), point(2, Some(120.0), None)],
            vec![point(1, None, None)],
        ];
        let pooled = pool_turns(&runs);
        assert_eq!(pooled.len(), 2);
        assert_eq!(pooled[0].cached_tokens_mean, Some(0.0));
        assert_eq!(pooled[1].turn, 2);
        assert_eq!(pooled[1].cached_tokens_mean, Some(100.0));
        assert_eq!(pooled[1].hit_ratio, Some(0.4));
        assert_eq!(pooled[1].input_tokens_mean, Some(200.0));
        assert!(pool_turns(&[]).is_empty());
    }
}
