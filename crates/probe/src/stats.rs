//! Pure percentile and summary math: exact while the samples fit, a
//! histogram of stated precision beyond.
//!
//! Exact (sorted) percentiles where they fit: an exact value is what lets
//! the probe contradict a server quantile interpolated inside a coarse
//! bucket (see DESIGN.md, "The measurements"). A run of any length must
//! keep its memory flat, though, so every [`Distribution`] also records an
//! HdrHistogram (3 significant digits: every reported value within 0.05 %
//! of a sample of the bucket it names); past [`EXACT_SAMPLES`] values the
//! exact samples are dropped and the summary comes from the histogram
//! (`Summary::exact` says which). Both merge exactly, so N workers' results
//! combine into what one thread would have computed from the same records.
//!
//! The interpolation itself is `llmwatch_core::stats::percentile` (NumPy's
//! "linear" method, the one `vllm bench serve` reports), so the probe and
//! the analysis side agree on every percentile; this module adds what a run
//! report needs on top: serde, `min`, and the count of requests that had no
//! value.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Exact samples kept per metric before its summary falls back to the
/// histogram: 8 bytes each, so 4 MiB per metric at most.
pub const EXACT_SAMPLES: usize = 1 << 19;

/// Histogram range: 1 ns to one hour; longer values are clamped (and a
/// probe never lasts that long: its deadline ends it).
const HIST_MAX_NS: u64 = 3_600_000_000_000;

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
    /// True when computed from every sample; false when from the histogram
    /// (values within 0.05 %, the mean within 0.05 % too).
    #[serde(default = "exact_default")]
    pub exact: bool,
}

fn exact_default() -> bool {
    true
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
            exact: true,
        }
    }
}

/// One metric's values over a run, in nanoseconds, mergeable: the exact
/// samples while there are at most `cap` of them, and always a histogram.
/// Its summary depends only on the multiset of values added (not on their
/// order or on how they were split before merging).
#[derive(Debug, Clone)]
pub struct Distribution {
    exact: Option<Vec<f64>>,
    hist: Histogram<u64>,
    /// Requests without a value, plus non-finite values.
    missing: u64,
    cap: usize,
}

impl Distribution {
    /// Keeps up to `cap` exact samples.
    pub fn new(cap: usize) -> Distribution {
        let hist = Histogram::new_with_bounds(1, HIST_MAX_NS, 3)
            .or_else(|_| Histogram::new(3))
            .unwrap_or_else(|_| unreachable!("3 significant digits are valid"));
        Distribution {
            exact: Some(Vec::new()),
            hist,
            missing: 0,
            cap,
        }
    }

    pub fn add(&mut self, ns: f64) {
        if !ns.is_finite() {
            self.missing += 1;
            return;
        }
        self.hist
            .saturating_record((ns.round().max(1.0) as u64).min(HIST_MAX_NS));
        if let Some(v) = &mut self.exact {
            if v.len() < self.cap {
                v.push(ns);
            } else {
                self.exact = None;
            }
        }
    }

    pub fn add_missing(&mut self, n: u64) {
        self.missing += n;
    }

    /// Values added (finite ones).
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Adds another distribution's values. This one's cap applies to the
    /// sum; samples `other` already dropped stay dropped.
    pub fn merge(&mut self, other: &Distribution) {
        let _ = self.hist.add(&other.hist);
        self.missing += other.missing;
        self.exact = match (self.exact.take(), &other.exact) {
            (Some(mut a), Some(b)) if a.len() + b.len() <= self.cap => {
                a.extend_from_slice(b);
                Some(a)
            }
            _ => None,
        };
    }

    /// The summary in milliseconds (values went in as nanoseconds): exact
    /// where the samples were kept.
    pub fn summary_ms(&self) -> Summary {
        self.summary_divided_by(1e6)
    }

    /// The summary in the values' own unit (counts such as prompt tokens).
    pub fn summary(&self) -> Summary {
        self.summary_divided_by(1.0)
    }

    fn summary_divided_by(&self, unit: f64) -> Summary {
        match &self.exact {
            Some(v) => Summary::from_values(v.iter().map(|x| x / unit).collect(), self.missing),
            None => self.histogram_summary(unit),
        }
    }

    fn histogram_summary(&self, unit: f64) -> Summary {
        let h = &self.hist;
        let ms = |ns: u64| h.median_equivalent(ns) as f64 / unit;
        let q = |q: f64| (!h.is_empty()).then(|| ms(h.value_at_quantile(q)));
        Summary {
            n: h.len(),
            missing: self.missing,
            mean: (!h.is_empty()).then(|| h.mean() / unit),
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            min: (!h.is_empty()).then(|| ms(h.min())),
            max: (!h.is_empty()).then(|| ms(h.max())),
            exact: false,
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

    #[test]
    fn distribution_is_exact_while_it_fits_then_within_precision() {
        let values: Vec<f64> = (1..=1000).map(|i| f64::from(i) * 1_000.0).collect();
        let mut d = Distribution::new(2000);
        values.iter().for_each(|v| d.add(*v));
        d.add(f64::NAN);
        d.add_missing(2);
        let s = d.summary_ms();
        let reference = Summary::from_values(values.iter().map(|v| v / 1e6).collect(), 3);
        assert_eq!(s, reference);
        assert!(s.exact);
        // Past the cap: the histogram, within its 0.05 %.
        let mut small = Distribution::new(10);
        values.iter().for_each(|v| small.add(*v));
        let h = small.summary_ms();
        assert!(!h.exact);
        assert_eq!(h.n, 1000);
        for (got, want) in [
            (h.p50, s.p50),
            (h.p99, s.p99),
            (h.mean, s.mean),
            (h.max, s.max),
        ] {
            let (got, want) = (got.unwrap(), want.unwrap());
            assert!((got - want).abs() <= want * 0.001, "{got} vs {want}");
        }
    }

    #[test]
    fn distributions_merge_into_what_one_would_hold() {
        for cap in [10, 5000] {
            let mut whole = Distribution::new(cap);
            let mut parts = [
                Distribution::new(cap),
                Distribution::new(cap),
                Distribution::new(cap),
            ];
            for i in 0..900u32 {
                let v = f64::from(i * 7919 % 1000) * 1234.5 + 1.0;
                whole.add(v);
                parts[(i % 3) as usize].add(v);
            }
            let [mut a, b, c] = parts;
            a.merge(&c);
            a.merge(&b);
            assert_eq!(a.summary_ms(), whole.summary_ms(), "cap {cap}");
        }
    }
}
