//! Pure percentile and summary math over exact samples.
//!
//! Exact (sorted) percentiles rather than a histogram: a run holds at most a
//! few hundred thousand samples, sorting them is cheap, and an exact value is
//! what lets the probe contradict a server quantile interpolated inside a
//! coarse bucket (see DESIGN.md, "The measurements").
//!
//! The interpolation itself is `llmwatch_core::stats::percentile` (NumPy's
//! "linear" method, the one `vllm bench serve` reports), so the probe and
//! the analysis side agree on every percentile; this module adds what a run
//! report needs on top: serde, `min`, and the count of requests that had no
//! value.

use serde::{Deserialize, Serialize};

/// The `q`-quantile (0.0..=1.0) of an ascending, finite slice, linearly
/// interpolated between closest ranks; `None` for an empty slice or a `q`
/// outside 0..=1. Delegates to `llmwatch_core::stats::percentile`.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    llmwatch_core::stats::percentile(sorted, q)
}

/// Distribution summary of one metric over all requests of a run.
///
/// `n` is how many values went in; `missing` counts requests of the run that
/// had no value for this metric because they failed before it could be
/// measured. Keeping `missing` beside the percentiles is how failed requests
/// stay visible instead of silently shrinking the sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: u64,
    pub missing: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Summary {
    /// Summarizes `values` (any order; non-finite values are dropped and
    /// counted as missing, since they can only come from a bug upstream and
    /// must not poison the sort).
    pub fn from_values(mut values: Vec<f64>, missing: u64) -> Summary {
        let before = values.len();
        values.retain(|v| v.is_finite());
        let nan = (before - values.len()) as u64;
        values.sort_by(f64::total_cmp);
        let n = values.len() as u64;
        let mean = if values.is_empty() {
            None
        } else {
            Some(values.iter().sum::<f64>() / values.len() as f64)
        };
        Summary {
            n,
            missing: missing + nan,
            mean,
            p50: percentile(&values, 0.50),
            p90: percentile(&values, 0.90),
            p95: percentile(&values, 0.95),
            p99: percentile(&values, 0.99),
            min: values.first().copied(),
            max: values.last().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_interpolates_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), Some(2.5));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 1.0), Some(4.0));
        assert!((percentile(&v, 0.99).unwrap() - 3.97).abs() < 1e-9);
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&v, 1.5), None);
        assert_eq!(percentile(&[7.0], 0.95), Some(7.0));
    }

    #[test]
    fn summary_counts_missing_and_drops_nan() {
        let s = Summary::from_values(vec![3.0, f64::NAN, 1.0, 2.0], 2);
        assert_eq!(s.n, 3);
        assert_eq!(s.missing, 3);
        assert_eq!(s.mean, Some(2.0));
        assert_eq!(s.p50, Some(2.0));
        assert_eq!(s.max, Some(3.0));
        assert_eq!(s.min, Some(1.0));
        let e = Summary::from_values(vec![], 5);
        assert_eq!(e.n, 0);
        assert_eq!(e.p99, None);
    }
}
