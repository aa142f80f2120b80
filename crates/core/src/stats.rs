//! Pure statistics shared by the signal derivation (server histograms) and the
//! probe crates (exact percentiles over client timings).
//!
//! Invariant: no function here returns NaN or an infinity; "no answer" is
//! `None` (quantiles, percentiles) and a counter that cannot be compared
//! yields a delta of 0.

/// The `q`-quantile (0 ≤ q ≤ 1) of a Prometheus histogram, with the semantics
/// of PromQL's `histogram_quantile`, so that llmwatch's server quantiles agree
/// with what an operator sees in Grafana:
///
/// * `buckets` are `(le, cumulative count)` pairs in any order; they are
///   sorted by `le`, and counts that decrease with `le` (a torn scrape) are
///   lifted to the running maximum, as Prometheus does.
/// * The last bucket must be `le = +Inf` (its count is the number of
///   observations); without it, or with fewer than two buckets, the answer
///   is `None` (Prometheus would return NaN).
/// * No observations (`+Inf` count is 0) → `None`.
/// * Inside the bucket that holds the rank, the value is linearly
///   interpolated between the bucket's lower and upper bound. The first
///   bucket's lower bound is 0, unless its upper bound is ≤ 0, in which case
///   that upper bound is returned.
/// * A rank that falls into the `+Inf` bucket returns the highest finite
///   bound (the histogram cannot say more).
/// * `q` outside `[0, 1]` or NaN → `None` (Prometheus gives ±Inf; we never
///   return infinities).
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return None;
    }
    let mut sorted: Vec<(f64, f64)> = buckets
        .iter()
        .copied()
        .filter(|(le, count)| !le.is_nan() && count.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    sorted.dedup_by(|later, earlier| {
        // Same bound twice (merged inputs): keep the larger count.
        if later.0 == earlier.0 {
            earlier.1 = earlier.1.max(later.1);
            true
        } else {
            false
        }
    });
    if sorted.len() < 2 {
        return None;
    }
    let last = sorted.len() - 1;
    if sorted[last].0 != f64::INFINITY {
        return None;
    }
    // Monotonicity fix: cumulative counts never decrease.
    let mut running = f64::NEG_INFINITY;
    for bucket in &mut sorted {
        running = running.max(bucket.1);
        bucket.1 = running;
    }
    let total = sorted[last].1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    // First finite bucket whose cumulative count reaches the rank; if none,
    // the rank lies in the +Inf bucket.
    let b = sorted[..last]
        .iter()
        .position(|(_, count)| *count >= rank)
        .unwrap_or(last);
    if b == last {
        return Some(sorted[last - 1].0);
    }
    let (upper, count) = sorted[b];
    if b == 0 && upper <= 0.0 {
        return Some(upper);
    }
    let (lower, below) = if b == 0 { (0.0, 0.0) } else { sorted[b - 1] };
    let in_bucket = count - below;
    if in_bucket <= 0.0 {
        return Some(lower);
    }
    let value = lower + (upper - lower) * ((rank - below) / in_bucket);
    value.is_finite().then_some(value)
}

/// Per-bucket increase of a cumulative histogram between two scrapes.
///
/// Buckets are matched by `le`. If any bucket decreased, or the bucket layout
/// changed (a bound appeared or vanished), the server restarted or was
/// reconfigured: `cur` is then treated as fresh, i.e. everything in it was
/// observed since `prev`, and is returned as is. The result is sorted by `le`.
pub fn bucket_deltas(prev: &[(f64, f64)], cur: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let prev_sorted = sorted_by_le(prev);
    let cur_sorted = sorted_by_le(cur);
    let same_layout = prev_sorted.len() == cur_sorted.len()
        && prev_sorted
            .iter()
            .zip(cur_sorted.iter())
            .all(|(p, c)| p.0.total_cmp(&c.0).is_eq());
    let reset = !same_layout
        || prev_sorted
            .iter()
            .zip(cur_sorted.iter())
            .any(|(p, c)| c.1 < p.1 || !p.1.is_finite());
    if reset {
        return cur_sorted.into_owned();
    }
    prev_sorted
        .iter()
        .zip(cur_sorted.iter())
        .map(|(p, c)| (c.0, c.1 - p.1))
        .collect()
}

/// Buckets sorted by `le`: merged histograms come sorted and are not copied.
fn sorted_by_le(buckets: &[(f64, f64)]) -> std::borrow::Cow<'_, [(f64, f64)]> {
    if buckets.is_sorted_by(|a, b| a.0.total_cmp(&b.0).is_le()) {
        return std::borrow::Cow::Borrowed(buckets);
    }
    let mut owned = buckets.to_vec();
    owned.sort_by(|a, b| a.0.total_cmp(&b.0));
    std::borrow::Cow::Owned(owned)
}

/// Increase of a monotonic counter between two scrapes. A decrease means the
/// counter was reset (process restart), so everything counted since the reset
/// is `cur`. Non-finite inputs cannot be compared and give 0.
pub fn counter_delta(prev: f64, cur: f64) -> f64 {
    if !prev.is_finite() || !cur.is_finite() {
        return 0.0;
    }
    if cur < prev {
        cur.max(0.0)
    } else {
        cur - prev
    }
}

/// The exact `q`-quantile (0 ≤ q ≤ 1) of an ascending-sorted slice, linearly
/// interpolated between the two closest ranks (`h = (n − 1)·q`, the
/// "linear" method of NumPy and R type 7), so p50 of `[1, 2]` is 1.5.
/// `None` for an empty slice, for `q` outside `[0, 1]`, or for non-finite data.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let (a, b) = (*sorted.get(lo)?, *sorted.get(hi)?);
    let value = a + (h - lo as f64) * (b - a);
    value.is_finite().then_some(value)
}

/// The statistics llmwatch reports for a run: exact, over all values, never
/// an average of averages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summarises `values` (any order). Non-finite values are skipped: they
    /// are not timings, and one NaN would poison every statistic; callers that
    /// need to count failures do so separately. `None` when nothing is left.
    pub fn from_values(values: &[f64]) -> Option<Summary> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        Summary::from_sorted(&sorted)
    }

    /// Like [`Summary::from_values`] for data already sorted ascending and
    /// finite (not re-checked beyond what `percentile` does).
    pub fn from_sorted(sorted: &[f64]) -> Option<Summary> {
        let count = sorted.len();
        let max = *sorted.last()?;
        // A plain f64 sum: runs hold at most millions of timings, far from
        // where the rounding error would reach the reported precision.
        let mean = sorted.iter().sum::<f64>() / count as f64;
        if !mean.is_finite() {
            return None;
        }
        Some(Summary {
            count,
            mean,
            p50: percentile(sorted, 0.50)?,
            p90: percentile(sorted, 0.90)?,
            p95: percentile(sorted, 0.95)?,
            p99: percentile(sorted, 0.99)?,
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn quantile_interpolates_inside_bucket() {
        // 10 obs ≤ 1, 10 more in (1, 2]; p75 → rank 15 → halfway in (1, 2].
        let b = [(1.0, 10.0), (2.0, 20.0), (INF, 20.0)];
        assert!(close(histogram_quantile(0.75, &b).unwrap(), 1.5));
        // p50 → rank 10 → reaches exactly the end of the first bucket.
        assert!(close(histogram_quantile(0.5, &b).unwrap(), 1.0));
        // first bucket interpolates from 0.
        assert!(close(histogram_quantile(0.25, &b).unwrap(), 0.5));
    }

    #[test]
    fn quantile_in_inf_bucket_returns_highest_finite_bound() {
        let b = [(1.0, 1.0), (2.0, 2.0), (INF, 10.0)];
        assert_eq!(histogram_quantile(0.95, &b), Some(2.0));
    }

    #[test]
    fn quantile_unsorted_input_and_negative_first_bound() {
        let b = [(INF, 4.0), (-1.0, 4.0), (0.0, 4.0)];
        assert_eq!(histogram_quantile(0.5, &b), Some(-1.0));
        let b = [(INF, 2.0), (2.0, 2.0), (1.0, 0.0)];
        assert!(close(histogram_quantile(0.5, &b).unwrap(), 1.5));
    }

    #[test]
    fn quantile_none_cases() {
        assert_eq!(histogram_quantile(0.5, &[(1.0, 0.0), (INF, 0.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[(1.0, 3.0), (2.0, 3.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[(INF, 3.0)]), None);
        assert_eq!(histogram_quantile(1.5, &[(1.0, 3.0), (INF, 3.0)]), None);
        assert_eq!(
            histogram_quantile(f64::NAN, &[(1.0, 3.0), (INF, 3.0)]),
            None
        );
        assert_eq!(histogram_quantile(0.5, &[]), None);
    }

    #[test]
    fn quantile_q0_and_empty_first_bucket() {
        let b = [(1.0, 0.0), (2.0, 4.0), (INF, 4.0)];
        assert_eq!(histogram_quantile(0.0, &b), Some(0.0));
        assert!(close(histogram_quantile(1.0, &b).unwrap(), 2.0));
    }

    #[test]
    fn quantile_fixes_non_monotonic_counts() {
        let b = [(1.0, 5.0), (2.0, 4.0), (INF, 10.0)];
        // counts become 5, 5, 10 → p50 = rank 5 → end of first bucket.
        assert!(close(histogram_quantile(0.5, &b).unwrap(), 1.0));
    }

    #[test]
    fn bucket_deltas_and_reset() {
        let prev = [(1.0, 2.0), (INF, 3.0)];
        let cur = [(INF, 10.0), (1.0, 5.0)];
        assert_eq!(bucket_deltas(&prev, &cur), vec![(1.0, 3.0), (INF, 7.0)]);
        let restarted = [(1.0, 1.0), (INF, 1.0)];
        assert_eq!(bucket_deltas(&prev, &restarted), restarted.to_vec());
        let relayout = [(0.5, 4.0), (INF, 4.0)];
        assert_eq!(bucket_deltas(&prev, &relayout), relayout.to_vec());
    }

    #[test]
    fn counter_delta_with_reset() {
        assert_eq!(counter_delta(10.0, 15.0), 5.0);
        assert_eq!(counter_delta(10.0, 3.0), 3.0);
        assert_eq!(counter_delta(f64::NAN, 3.0), 0.0);
    }

    #[test]
    fn percentile_linear_between_closest_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 1.0), Some(4.0));
        assert!(close(percentile(&v, 0.5).unwrap(), 2.5));
        assert!(close(percentile(&v, 0.95).unwrap(), 3.85));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&v, -0.1), None);
    }

    #[test]
    fn summary_skips_non_finite() {
        let values: Vec<f64> = (1..=100).rev().map(f64::from).chain([f64::NAN]).collect();
        let s = Summary::from_values(&values).unwrap();
        assert_eq!(s.count, 100);
        assert!(close(s.mean, 50.5));
        assert!(close(s.p50, 50.5));
        assert!(close(s.p90, 90.1));
        assert!(close(s.p95, 95.05));
        assert!(close(s.p99, 99.01));
        assert_eq!(s.max, 100.0);
        assert_eq!(Summary::from_values(&[f64::NAN]), None);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn histogram() -> impl Strategy<Value = Vec<(f64, f64)>> {
            // Increasing bounds with non-negative increments per bucket.
            prop::collection::vec((0.001f64..10.0, 0u32..50), 1..12).prop_map(|steps| {
                let (mut le, mut count) = (0.0, 0.0);
                let mut buckets: Vec<(f64, f64)> = steps
                    .into_iter()
                    .map(|(dle, dcount)| {
                        le += dle;
                        count += f64::from(dcount);
                        (le, count)
                    })
                    .collect();
                buckets.push((f64::INFINITY, count));
                buckets
            })
        }

        proptest! {
            #[test]
            fn quantile_is_finite_bounded_and_monotone(b in histogram(), q1 in 0.0f64..=1.0, q2 in 0.0f64..=1.0) {
                let (lo, hi) = if q1 <= q2 { (q1, q2) } else { (q2, q1) };
                let max_finite = b[b.len() - 2].0;
                match (histogram_quantile(lo, &b), histogram_quantile(hi, &b)) {
                    (Some(a), Some(c)) => {
                        prop_assert!(a.is_finite() && c.is_finite());
                        prop_assert!((0.0..=max_finite).contains(&a));
                        prop_assert!(a <= c + 1e-12);
                    }
                    (None, None) => prop_assert_eq!(b[b.len() - 1].1, 0.0),
                    other => prop_assert!(false, "inconsistent {:?}", other),
                }
            }

            #[test]
            fn percentile_stays_within_data(mut v in prop::collection::vec(-1e6f64..1e6, 1..200), q in 0.0f64..=1.0) {
                v.sort_by(f64::total_cmp);
                let p = percentile(&v, q).unwrap();
                prop_assert!(v[0] <= p && p <= v[v.len() - 1]);
            }
        }
    }
}
