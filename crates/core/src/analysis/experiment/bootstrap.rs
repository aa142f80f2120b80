//! Bootstrap intervals for a variant's capacity: max sustainable load,
//! throughput at the objective and the saturation point, over repeats and
//! requests.
//!
//! Each resample draws the variant's repeats with replacement, then each
//! drawn repeat's requests of each step with replacement, pools them per
//! load level, rebuilds the steps (quantiles over the pooled requests,
//! throughput over the pooled wall time) and judges them with the sweep's
//! own [`max_sustainable`] and [`saturation_point`]. The interval is the
//! percentile interval of those judgements. Seeded, so a report rewritten
//! from stored samples gives the same numbers.

use serde::{Deserialize, Serialize};

use crate::analysis::{
    max_sustainable, saturation_point, AnalysisConfig, Load, Objectives, Quantiles, StepResult,
};
use crate::stats::percentile;

/// Resamples per interval: enough for a stable 95 % percentile interval
/// of a discrete ladder, cheap at the request counts of a sweep.
pub const DEFAULT_RESAMPLES: u32 = 400;
/// Two-sided coverage of the intervals.
pub const CONFIDENCE: f64 = 0.95;

/// One measured request, as the bootstrap needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestSample {
    pub ok: bool,
    pub ttft_s: Option<f64>,
    /// Per-token inter-token gaps, seconds.
    pub itl_s: Vec<f64>,
    pub output_tokens: u64,
    /// End to end, seconds: a resample's wall time scales with its mean.
    #[serde(default)]
    pub e2e_s: Option<f64>,
}

/// One step of one repeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSample {
    pub concurrency: u32,
    pub wall_time_s: f64,
    pub requests: Vec<RequestSample>,
}

/// One repeat (one sweep) of a variant.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunSample {
    pub steps: Vec<StepSample>,
}

/// A point estimate with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// Whether the two intervals do not overlap: only then is a difference
    /// called.
    pub fn separates(&self, other: &Interval) -> bool {
        self.low > other.high || self.high < other.low
    }

    /// `estimate [low, high]` with `digits` decimals.
    pub fn describe(&self, digits: usize) -> String {
        format!(
            "{:.d$} [{:.d$}, {:.d$}]",
            self.estimate,
            self.low,
            self.high,
            d = digits
        )
    }
}

/// A variant's capacity with intervals. Loads are concurrency; 0 where no
/// step met the objectives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityEstimate {
    pub max_sustainable: Interval,
    /// Output tokens/s at the max sustainable step (0 where none).
    pub throughput_at_objective: Interval,
    /// Saturation load, where at least half of the resamples found one.
    pub saturation_load: Option<Interval>,
    pub saturation_throughput: Option<Interval>,
    pub resamples: u32,
    pub confidence: f64,
}

/// SplitMix64: a small seeded generator, so the bootstrap is a pure
/// function of its inputs and seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is far below the
    /// bootstrap's own noise at these sizes.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The pooled steps of some repeats, in ladder order: one step per
/// concurrency level that any repeat reached.
fn pooled_steps(
    runs: &[&RunSample],
    mut pick: impl FnMut(&[RequestSample]) -> Vec<usize>,
) -> Vec<StepResult> {
    let mut levels: Vec<u32> = runs
        .iter()
        .flat_map(|r| r.steps.iter().map(|s| s.concurrency))
        .collect();
    levels.sort_unstable();
    levels.dedup();
    levels
        .into_iter()
        .map(|level| {
            let mut wall = 0.0;
            let mut picked: Vec<&RequestSample> = Vec::new();
            for run in runs {
                for step in run.steps.iter().filter(|s| s.concurrency == level) {
                    let chosen: Vec<&RequestSample> = pick(&step.requests)
                        .into_iter()
                        .map(|i| &step.requests[i])
                        .collect();
                    wall += step.wall_time_s * duration_ratio(&chosen, &step.requests);
                    picked.extend(chosen);
                }
            }
            step_from(level, wall, &picked)
        })
        .collect()
}

/// How much longer the chosen requests took than all of the step's, on
/// average: a closed-loop step's wall time scales with its requests'
/// durations, so a resample of slower requests takes longer (1 where
/// durations are unknown).
fn duration_ratio(chosen: &[&RequestSample], all: &[RequestSample]) -> f64 {
    let mean = |it: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = it.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
        (n > 0 && sum > 0.0).then(|| sum / n as f64)
    };
    let picked = mean(&mut chosen.iter().filter_map(|r| r.e2e_s));
    let whole = mean(&mut all.iter().filter_map(|r| r.e2e_s));
    match (picked, whole) {
        (Some(p), Some(w)) => p / w,
        _ => 1.0,
    }
}

fn quantiles(mut values: Vec<f64>) -> Quantiles {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    Quantiles {
        p50: percentile(&values, 0.50),
        p95: percentile(&values, 0.95),
        p99: percentile(&values, 0.99),
    }
}

/// A step rebuilt from pooled requests over a pooled wall time.
pub fn step_from(concurrency: u32, wall_time_s: f64, requests: &[&RequestSample]) -> StepResult {
    let mut step = StepResult::at(Load::Concurrency(concurrency));
    let ok: Vec<&&RequestSample> = requests.iter().filter(|r| r.ok).collect();
    step.requests_ok = ok.len() as u64;
    step.requests_failed = (requests.len() - ok.len()) as u64;
    step.wall_time_s = wall_time_s;
    if wall_time_s > 0.0 {
        step.request_throughput = ok.len() as f64 / wall_time_s;
        step.output_token_throughput =
            ok.iter().map(|r| r.output_tokens).sum::<u64>() as f64 / wall_time_s;
    }
    step.ttft = quantiles(ok.iter().filter_map(|r| r.ttft_s).collect());
    step.itl = quantiles(ok.iter().flat_map(|r| r.itl_s.iter().copied()).collect());
    step.error_rate = if requests.is_empty() {
        0.0
    } else {
        step.requests_failed as f64 / requests.len() as f64
    };
    step
}

/// What one set of steps says about capacity.
struct Judged {
    sustainable_load: f64,
    sustainable_throughput: f64,
    saturation: Option<(f64, f64)>,
}

fn judge(steps: &[StepResult], objectives: &Objectives, config: &AnalysisConfig) -> Judged {
    let sustainable = max_sustainable(steps, objectives);
    Judged {
        sustainable_load: sustainable.as_ref().map_or(0.0, |s| s.load.value()),
        sustainable_throughput: sustainable
            .as_ref()
            .map_or(0.0, |s| s.output_token_throughput),
        saturation: saturation_point(steps, config).map(|s| (s.load.value(), s.throughput)),
    }
}

fn interval(estimate: f64, mut draws: Vec<f64>) -> Interval {
    draws.sort_by(f64::total_cmp);
    let tail = (1.0 - CONFIDENCE) / 2.0;
    Interval {
        estimate,
        low: percentile(&draws, tail).unwrap_or(estimate),
        high: percentile(&draws, 1.0 - tail).unwrap_or(estimate),
    }
}

/// The pooled steps of all repeats, unresampled: what the point estimates
/// and the report's curves are read from.
pub fn pooled_curve(runs: &[RunSample]) -> Vec<StepResult> {
    let all: Vec<&RunSample> = runs.iter().collect();
    pooled_steps(&all, |reqs| (0..reqs.len()).collect())
}

/// Capacity with bootstrap intervals over `runs` (the repeats of one
/// variant); `None` without a measured step.
pub fn capacity_intervals(
    runs: &[RunSample],
    objectives: &Objectives,
    config: &AnalysisConfig,
    resamples: u32,
    seed: u64,
) -> Option<CapacityEstimate> {
    if runs.iter().all(|r| r.steps.is_empty()) {
        return None;
    }
    let point = judge(&pooled_curve(runs), objectives, config);
    let mut rng = SplitMix(seed);
    let (mut loads, mut throughputs, mut sat_loads, mut sat_tps) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..resamples.max(1) {
        let drawn: Vec<&RunSample> = (0..runs.len())
            .map(|_| &runs[rng.below(runs.len())])
            .collect();
        let steps = pooled_steps(&drawn, |reqs| {
            (0..reqs.len()).map(|_| rng.below(reqs.len())).collect()
        });
        let j = judge(&steps, objectives, config);
        loads.push(j.sustainable_load);
        throughputs.push(j.sustainable_throughput);
        if let Some((load, tp)) = j.saturation {
            sat_loads.push(load);
            sat_tps.push(tp);
        }
    }
    let enough_saturation = sat_loads.len() * 2 >= loads.len();
    Some(CapacityEstimate {
        max_sustainable: interval(point.sustainable_load, loads),
        throughput_at_objective: interval(point.sustainable_throughput, throughputs),
        saturation_load: point
            .saturation
            .filter(|_| enough_saturation)
            .map(|(load, _)| interval(load, sat_loads)),
        saturation_throughput: point
            .saturation
            .filter(|_| enough_saturation)
            .map(|(_, tp)| interval(tp, sat_tps)),
        resamples: resamples.max(1),
        confidence: CONFIDENCE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A closed-loop server that runs `cap` requests at once: below the cap
    /// each request takes `base` seconds, above it they queue.
    fn run(cap: u32, jitter: f64) -> RunSample {
        let steps = [1u32, 2, 4, 8]
            .iter()
            .map(|&c| {
                let queue = (f64::from(c) / f64::from(cap)).max(1.0);
                let requests: Vec<RequestSample> = (0..40)
                    .map(|i| RequestSample {
                        ok: true,
                        ttft_s: Some(0.05 * queue + jitter * f64::from(i % 5)),
                        itl_s: vec![0.01; 16],
                        output_tokens: 16,
                        e2e_s: Some(0.2 + jitter * f64::from(i % 5)),
                    })
                    .collect();
                let served = f64::from(c.min(cap));
                StepSample {
                    concurrency: c,
                    wall_time_s: 40.0 * 0.2 / served,
                    requests,
                }
            })
            .collect();
        RunSample { steps }
    }

    fn objectives() -> Objectives {
        Objectives {
            ttft_p95: Some(0.12),
            itl_p95: Some(0.05),
            ..Objectives::default()
        }
    }

    #[test]
    fn a_higher_cap_separates_and_the_bootstrap_is_seeded() {
        let config = AnalysisConfig::default();
        let low = [run(2, 0.001), run(2, 0.002)];
        let high = [run(8, 0.001), run(8, 0.002)];
        let a = capacity_intervals(&low, &objectives(), &config, 200, 7).expect("steps");
        let b = capacity_intervals(&high, &objectives(), &config, 200, 7).expect("steps");
        assert_eq!(a.max_sustainable.estimate, 4.0);
        assert_eq!(b.max_sustainable.estimate, 8.0);
        assert!(b
            .throughput_at_objective
            .separates(&a.throughput_at_objective));
        assert!(a.max_sustainable.low <= 4.0 && a.max_sustainable.high >= 4.0);
        let again = capacity_intervals(&low, &objectives(), &config, 200, 7).expect("steps");
        assert_eq!(a, again, "same seed, same intervals");
    }

    #[test]
    fn overlapping_intervals_do_not_separate() {
        let config = AnalysisConfig::default();
        let a = capacity_intervals(&[run(4, 0.001)], &objectives(), &config, 100, 1).expect("a");
        let b = capacity_intervals(&[run(4, 0.002)], &objectives(), &config, 100, 1).expect("b");
        assert!(!a
            .throughput_at_objective
            .separates(&b.throughput_at_objective));
        assert!(capacity_intervals(&[], &objectives(), &config, 10, 1).is_none());
    }
}
