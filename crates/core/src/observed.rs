//! The workload a server actually served, read off its own request-length
//! histograms (vLLM `request_prompt_tokens` / `request_generation_tokens`
//! and the other engines' equivalents, catalog metrics
//! `request_{prompt,generation}_tokens`) and drawn again as requests:
//! `--workload observed:TARGET[:RANGE]`.
//!
//! What a histogram can and cannot say:
//! - A length is known to its bucket only (vLLM's buckets go 1, 2, 5, 10,
//!   20, 50 … up to the model's context). Lengths are drawn uniformly
//!   within their bucket (linear interpolation of the CDF, as
//!   `histogram_quantile` does), so a mix that is spread out is reproduced
//!   decile by decile, while a single length (every prompt 300 tokens) comes
//!   back spread over its bucket (201..500).
//! - The two histograms are marginals: which prompt went with which output
//!   is not recorded, so the two lengths of a request are drawn
//!   independently.
//! - Samples in the `+Inf` bucket are drawn at the highest finite bound, as
//!   `histogram_quantile` answers for them.
//!
//! Pure: counts in, lengths out; randomness from a seed.

use serde::{Deserialize, Serialize};

/// The increase of a counter over its samples in time order, counting a
/// drop as a restart from zero (Prometheus' `increase` without the
/// extrapolation to the range's ends).
pub fn counter_increase(values: &[f64]) -> f64 {
    let mut increase = 0.0;
    for pair in values.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        if !(before.is_finite() && after.is_finite()) {
            continue;
        }
        increase += if after >= before {
            after - before
        } else {
            after
        };
    }
    increase
}

/// A length distribution: how many requests fell in each bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthDistribution {
    /// The buckets' finite upper bounds, ascending.
    pub bounds: Vec<f64>,
    /// Requests per bucket (not cumulative); one more than `bounds`, the
    /// last for `+Inf`.
    pub counts: Vec<f64>,
}

impl LengthDistribution {
    /// From cumulative `(le, count)` pairs (a histogram's buckets, or their
    /// increases over a range), in any order. `None` without a `+Inf`
    /// bucket, a finite one, or a request.
    pub fn from_cumulative(buckets: &[(f64, f64)]) -> Option<LengthDistribution> {
        let mut sorted: Vec<(f64, f64)> = buckets
            .iter()
            .copied()
            .filter(|(le, count)| !le.is_nan() && count.is_finite())
            .collect();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        sorted.dedup_by(|later, earlier| {
            // The same bound twice: keep the larger count.
            let same = later.0 == earlier.0;
            if same {
                earlier.1 = earlier.1.max(later.1);
            }
            same
        });
        let (&(last, _), finite) = sorted.split_last()?;
        if last != f64::INFINITY || finite.is_empty() {
            return None;
        }
        let mut counts = Vec::with_capacity(sorted.len());
        let mut below = 0.0_f64;
        for &(_, cumulative) in &sorted {
            // Cumulative counts never decrease (increases of buckets read
            // at slightly different moments may).
            let cumulative = cumulative.max(below);
            counts.push(cumulative - below);
            below = cumulative;
        }
        if below <= 0.0 {
            return None;
        }
        Some(LengthDistribution {
            bounds: finite.iter().map(|(le, _)| *le).collect(),
            counts,
        })
    }

    /// Requests counted.
    pub fn total(&self) -> f64 {
        self.counts.iter().sum()
    }

    /// The length at cumulative fraction `q` (0..=1), interpolated linearly
    /// within its bucket (the first bucket starts at 0; the `+Inf` bucket
    /// answers the highest finite bound).
    pub fn quantile(&self, q: f64) -> f64 {
        let total = self.total();
        let rank = q.clamp(0.0, 1.0) * total;
        let mut below = 0.0;
        for (i, &count) in self.counts.iter().enumerate() {
            let Some(&upper) = self.bounds.get(i) else {
                break;
            };
            if count > 0.0 && below + count >= rank {
                let lower = if i == 0 { 0.0 } else { self.bounds[i - 1] };
                let lower = lower.min(upper);
                return lower + (upper - lower) * ((rank - below) / count);
            }
            below += count;
        }
        self.bounds.last().copied().unwrap_or(0.0)
    }

    /// A whole length ≥ 1 at fraction `u` of the distribution: lengths are
    /// whole tokens, so a bucket (a, b] holds a+1 ..= b.
    pub fn length_at(&self, u: f64) -> u32 {
        let length = self.quantile(u).ceil();
        if length >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            (length as u32).max(1)
        }
    }

    /// The 10th, 20th … 90th percentiles.
    pub fn deciles(&self) -> [f64; 9] {
        std::array::from_fn(|i| self.quantile((i + 1) as f64 / 10.0))
    }
}

/// The names of [`LengthDistribution::deciles`], in their order.
pub const DECILE_NAMES: [&str; 9] = [
    "p10", "p20", "p30", "p40", "p50", "p60", "p70", "p80", "p90",
];

/// What a target served over a range, as its histograms recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedWorkload {
    pub prompt: LengthDistribution,
    pub generation: LengthDistribution,
    /// Requests finished over the range (the prompt histogram's count).
    pub requests: f64,
    /// Seconds between the first and the last scrape read.
    pub seconds: f64,
}

/// One drawn request: when it arrives and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawnRequest {
    /// Arrival, ms from the start.
    pub at_ms: u64,
    pub input_tokens: u32,
    pub output_tokens: u32,
}

impl ObservedWorkload {
    /// Requests per second over the range.
    pub fn rate_per_second(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.requests / self.seconds)
    }

    /// `count` requests with lengths drawn from the two distributions and
    /// Poisson arrivals at `rate_per_second`; a request never asks for more
    /// than `max_context` tokens in all (output shortened first, the prompt
    /// then, leaving at least one of each).
    pub fn draw(
        &self,
        count: usize,
        rate_per_second: f64,
        seed: u64,
        max_context: Option<u32>,
    ) -> Vec<DrawnRequest> {
        let arrivals = poisson_arrivals_ms(count, rate_per_second, seed);
        // Lengths from a stream of their own: the same seed at another rate
        // draws the same shapes.
        let mut random = SplitMix64(seed ^ 0x5EED_1E46_7405_0000);
        let mut out = Vec::with_capacity(count);
        for at_ms in arrivals {
            let mut input = self.prompt.length_at(random.unit());
            let mut output = self.generation.length_at(random.unit());
            if let Some(limit) = max_context.filter(|&limit| limit >= 2) {
                input = input.min(limit - 1);
                output = output.min(limit - input);
            }
            out.push(DrawnRequest {
                at_ms,
                input_tokens: input,
                output_tokens: output,
            });
        }
        out
    }
}

/// `count` arrival times (ms from the first, which is at 0) of a Poisson
/// process at `rate_per_second`; all at 0 for a rate that is not > 0.
pub fn poisson_arrivals_ms(count: usize, rate_per_second: f64, seed: u64) -> Vec<u64> {
    let mut random = SplitMix64(seed);
    let mut at_s = 0.0_f64;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        if i > 0 && rate_per_second > 0.0 && rate_per_second.is_finite() {
            at_s += -random.unit().ln() / rate_per_second;
        }
        out.push((at_s * 1000.0).round() as u64);
    }
    out
}

/// SplitMix64: a small, seedable generator (no dependency in this crate).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1): never 0, so its logarithm is finite.
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// Exact percentiles of whole lengths, nearest rank: the `q`-th of `values`.
pub fn nearest_rank(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM_BOUNDS: [f64; 11] = [
        1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
    ];

    /// vLLM's cumulative buckets of `lengths`.
    fn buckets_of(lengths: &[u32]) -> Vec<(f64, f64)> {
        let mut out: Vec<(f64, f64)> = VLLM_BOUNDS
            .iter()
            .map(|&le| {
                let n = lengths.iter().filter(|&&l| f64::from(l) <= le).count();
                (le, n as f64)
            })
            .collect();
        out.push((f64::INFINITY, lengths.len() as f64));
        out
    }

    #[test]
    fn counter_increase_counts_a_restart_from_zero() {
        assert_eq!(counter_increase(&[5.0, 7.0, 7.0, 10.0]), 5.0);
        // Restarted between 10 and 3: 3 new after the restart.
        assert_eq!(counter_increase(&[5.0, 10.0, 3.0, 4.0]), 9.0);
        assert_eq!(counter_increase(&[4.0]), 0.0);
    }

    #[test]
    fn a_distribution_needs_an_inf_bucket_and_a_request() {
        assert!(LengthDistribution::from_cumulative(&[(1.0, 1.0)]).is_none());
        assert!(LengthDistribution::from_cumulative(&[(1.0, 0.0), (f64::INFINITY, 0.0)]).is_none());
        let d =
            LengthDistribution::from_cumulative(&[(f64::INFINITY, 4.0), (10.0, 1.0), (100.0, 3.0)])
                .unwrap();
        assert_eq!(
            (d.bounds.clone(), d.counts.clone()),
            (vec![10.0, 100.0], vec![1.0, 2.0, 1.0])
        );
    }

    #[test]
    fn quantiles_interpolate_as_histogram_quantile_does() {
        let buckets = buckets_of(&[150, 160, 170, 180, 400, 450, 600, 700, 800, 900]);
        let d = LengthDistribution::from_cumulative(&buckets).unwrap();
        for q in [0.1, 0.25, 0.5, 0.77, 0.9, 0.99] {
            let ours = d.quantile(q);
            let prometheus = crate::stats::histogram_quantile(q, &buckets).unwrap();
            assert!(
                (ours - prometheus).abs() < 1e-9,
                "q {q}: {ours} vs {prometheus}"
            );
        }
    }

    #[test]
    fn drawn_lengths_have_the_histograms_deciles() {
        // A spread-out mix: uniform 50..=500 (bucket edges at 50, 100,
        // 200, 500), so interpolating within buckets is exact.
        let served: Vec<u32> = (0..900u32).map(|i| 51 + i / 2).collect();
        let d = LengthDistribution::from_cumulative(&buckets_of(&served)).unwrap();
        let w = ObservedWorkload {
            prompt: d.clone(),
            generation: d,
            requests: 900.0,
            seconds: 90.0,
        };
        let drawn = w.draw(4000, 10.0, 7, None);
        let mut lengths: Vec<u32> = drawn.iter().map(|r| r.input_tokens).collect();
        lengths.sort_unstable();
        for k in 1..=9 {
            let q = f64::from(k) / 10.0;
            let want = f64::from(nearest_rank(&served, q).unwrap());
            let got = f64::from(nearest_rank(&lengths, q).unwrap());
            assert!(
                (got - want).abs() <= 0.1 * want,
                "decile {k}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn arrivals_are_poisson_at_the_rate_and_context_is_respected() {
        let d = LengthDistribution::from_cumulative(&buckets_of(&[1500, 1800, 1900])).unwrap();
        let w = ObservedWorkload {
            prompt: d.clone(),
            generation: d,
            requests: 3.0,
            seconds: 1.0,
        };
        assert_eq!(w.rate_per_second(), Some(3.0));
        let drawn = w.draw(5000, 50.0, 1, Some(2048));
        let span_s = drawn.last().unwrap().at_ms as f64 / 1000.0;
        let rate = 4999.0 / span_s;
        assert!((rate - 50.0).abs() < 50.0 * 0.05, "rate {rate}");
        assert!(drawn
            .iter()
            .all(|r| r.input_tokens + r.output_tokens <= 2048 && r.output_tokens >= 1));
        // Same seed, same requests.
        assert_eq!(drawn, w.draw(5000, 50.0, 1, Some(2048)));
    }

    #[test]
    fn the_inf_bucket_draws_the_highest_finite_bound() {
        let d = LengthDistribution::from_cumulative(&[(10.0, 0.0), (f64::INFINITY, 5.0)]).unwrap();
        assert_eq!(d.length_at(0.5), 10);
        assert_eq!(nearest_rank(&[], 0.5), None);
    }
}
