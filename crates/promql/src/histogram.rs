//! `histogram_quantile` over classic (`le`-labelled) buckets, as Prometheus
//! 2.x computes it: buckets sorted, equal bounds merged, counts forced
//! monotonic, linear interpolation inside the bucket holding the rank.

use std::collections::HashMap;
use std::sync::Arc;

use crate::context::Sample;
use crate::source::{Labels, METRIC_NAME};

/// Parses an `le` value as Go's `strconv.ParseFloat` would for bucket bounds.
fn parse_bound(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}

/// `histogram_quantile(q, buckets)` for each group of buckets that share
/// every label but `le`. Samples without a parseable `le` are skipped.
pub(crate) fn histogram_quantile(q: f64, samples: Vec<Sample>) -> Vec<Sample> {
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<(Labels, Vec<(f64, f64)>)> = Vec::new();
    for s in samples {
        let Some(bound) = s.labels.get("le").and_then(parse_bound) else {
            continue;
        };
        let key = s.labels.without(&["le"]);
        match index.get(&key) {
            Some(&i) => groups[i].1.push((bound, s.v)),
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, vec![(bound, s.v)]));
            }
        }
    }
    groups
        .into_iter()
        .map(|(labels, mut buckets)| Sample {
            labels: Arc::new(labels.without(&[METRIC_NAME])),
            v: bucket_quantile(q, &mut buckets),
        })
        .collect()
}

/// The quantile `q` of cumulative `(upper bound, count)` buckets.
pub fn bucket_quantile(q: f64, buckets: &mut Vec<(f64, f64)>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    match buckets.last() {
        Some(&(ub, _)) if ub == f64::INFINITY => {}
        _ => return f64::NAN,
    }
    coalesce(buckets);
    ensure_monotonic(buckets);
    if buckets.len() < 2 {
        return f64::NAN;
    }
    let observations = buckets[buckets.len() - 1].1;
    if observations == 0.0 || observations.is_nan() {
        return f64::NAN;
    }
    let mut rank = q * observations;
    // The first bucket whose count reaches the rank (never the +Inf one).
    let b = buckets[..buckets.len() - 1].partition_point(|&(_, c)| c < rank);
    if b == buckets.len() - 1 {
        return buckets[buckets.len() - 2].0;
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return buckets[0].0;
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

/// Merges buckets with the same upper bound (summing their counts).
fn coalesce(buckets: &mut Vec<(f64, f64)>) {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(ub, c) in buckets.iter() {
        match out.last_mut() {
            Some(last) if last.0 == ub => last.1 += c,
            _ => out.push((ub, c)),
        }
    }
    *buckets = out;
}

/// Raises any count below an earlier one to that earlier count, so that
/// scrapes racing with observations cannot make the result go backwards.
fn ensure_monotonic(buckets: &mut [(f64, f64)]) {
    let mut max = f64::NEG_INFINITY;
    for b in buckets.iter_mut() {
        if b.1 > max {
            max = b.1;
        } else if b.1 < max {
            b.1 = max;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(q: f64, b: &[(f64, f64)]) -> f64 {
        bucket_quantile(q, &mut b.to_vec())
    }

    #[test]
    fn interpolates_inside_the_bucket() {
        let b = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)];
        // rank 20 lies halfway into (0.1, 0.5].
        assert!((q(0.5, &b) - 0.3).abs() < 1e-12);
        // rank 5 in the first bucket interpolates from 0.
        assert!((q(0.125, &b) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn rank_in_inf_bucket_answers_the_highest_finite_bound() {
        let b = [(0.1, 10.0), (0.5, 30.0), (f64::INFINITY, 40.0)];
        assert_eq!(q(0.99, &b), 0.5);
    }

    #[test]
    fn edges_answer_as_prometheus() {
        let b = [(1.0, 1.0), (f64::INFINITY, 2.0)];
        assert!(q(f64::NAN, &b).is_nan());
        assert_eq!(q(-0.1, &b), f64::NEG_INFINITY);
        assert_eq!(q(1.1, &b), f64::INFINITY);
        // No +Inf bucket, a single bucket, or no observations: NaN.
        assert!(q(0.5, &[(1.0, 1.0), (2.0, 2.0)]).is_nan());
        assert!(q(0.5, &[(f64::INFINITY, 2.0)]).is_nan());
        assert!(q(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]).is_nan());
        // A first bucket with a bound <= 0 answers that bound.
        assert_eq!(q(0.1, &[(-1.0, 5.0), (f64::INFINITY, 10.0)]), -1.0);
    }

    #[test]
    fn non_monotonic_counts_are_raised_and_duplicate_bounds_merged() {
        // 0.5 reports fewer than 0.1 (a racy scrape): treated as 10.
        let b = [(0.1, 10.0), (0.5, 8.0), (1.0, 20.0), (f64::INFINITY, 20.0)];
        // rank 10 is reached in the first bucket: full interpolation to 0.1.
        assert!((q(0.5, &b) - 0.1).abs() < 1e-12);
        let dup = [(0.1, 5.0), (0.1, 5.0), (f64::INFINITY, 20.0)];
        assert!((q(0.25, &dup) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn unparseable_le_is_skipped_and_labels_lose_name_and_le() {
        let mk = |le: &str, v: f64| Sample {
            labels: Arc::new(Labels::new([
                (METRIC_NAME, "h_bucket"),
                ("le", le),
                ("job", "a"),
            ])),
            v,
        };
        let out = histogram_quantile(0.5, vec![mk("1", 2.0), mk("+Inf", 4.0), mk("bogus", 100.0)]);
        assert_eq!(out.len(), 1);
        assert_eq!(*out[0].labels, Labels::new([("job", "a")]));
        assert!((out[0].v - 1.0).abs() < 1e-12);
    }
}
