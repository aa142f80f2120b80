//! From the store to the engine: the selections a query needs are read from
//! the store (async), merged per series, and put into a `MemorySource` that
//! the pure evaluator then reads.

use std::collections::HashMap;

use llmwatch_promql::{LabelMatcher, Labels, MemorySource, QueryOptions, Series};
use llmwatch_store::{PromLabels, PromLimits, Store};

use super::PromError;

/// Whether a label set (sorted, `__name__` included) satisfies every matcher;
/// an absent label matches as the empty string.
pub fn matches_pairs(matchers: &[LabelMatcher], labels: &PromLabels) -> bool {
    matchers.iter().all(|m| {
        let value = labels
            .binary_search_by(|(k, _)| k.as_str().cmp(&m.name))
            .ok()
            .map_or("", |i| labels[i].1.as_str());
        m.matches_value(value)
    })
}

/// Whether a label set satisfies any of the matcher sets (all when none).
pub fn matches_any(sets: &[Vec<LabelMatcher>], labels: &PromLabels) -> bool {
    sets.is_empty() || sets.iter().any(|m| matches_pairs(m, labels))
}

/// The series `query` reads over `[start_ms, end_ms]`, from the store.
pub async fn source_for(
    store: &Store,
    query: &str,
    start_ms: i64,
    end_ms: i64,
    opts: &QueryOptions,
    limits: PromLimits,
) -> Result<MemorySource, PromError> {
    let selections = llmwatch_promql::selections(query, start_ms, end_ms, opts)?;
    let mut merged: HashMap<PromLabels, Vec<(i64, f64)>> = HashMap::new();
    let mut samples = 0usize;
    for selection in &selections {
        let matchers = &selection.matchers;
        let predicate = |labels: &PromLabels| matches_pairs(matchers, labels);
        let found = store
            .prom_select(&predicate, selection.start_ms, selection.end_ms, limits)
            .await?;
        for series in found {
            let slot = merged.entry(series.labels).or_default();
            let before = slot.len();
            merge_points(slot, series.points.iter().map(|p| (p.ts_ms, p.value)));
            samples += slot.len() - before;
        }
        if merged.len() > limits.max_series {
            return Err(PromError::limit(format!(
                "the query selects more than {} series; narrow the selectors",
                limits.max_series
            )));
        }
        if samples > limits.max_samples {
            return Err(PromError::limit(format!(
                "the query reads more than {} samples; shorten the range or narrow the selectors",
                limits.max_samples
            )));
        }
    }
    let mut source = MemorySource::new();
    for (labels, samples) in merged {
        source.add_series(Series {
            labels: Labels::new(labels),
            samples,
        });
    }
    Ok(source)
}

/// Adds `more` (ascending) to `slot` (ascending), one sample per timestamp.
fn merge_points(slot: &mut Vec<(i64, f64)>, more: impl Iterator<Item = (i64, f64)>) {
    if slot.is_empty() {
        slot.extend(more);
        return;
    }
    slot.extend(more);
    slot.sort_by_key(|(t, _)| *t);
    slot.dedup_by_key(|(t, _)| *t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_match_like_prometheus() {
        let labels: PromLabels = vec![
            ("__name__".into(), "up".into()),
            ("job".into(), "engine".into()),
        ];
        assert!(matches_pairs(
            &[LabelMatcher::equal("job", "engine")],
            &labels
        ));
        assert!(matches_pairs(&[LabelMatcher::equal("absent", "")], &labels));
        assert!(!matches_pairs(
            &[LabelMatcher::regex("job", "eng").unwrap()],
            &labels
        ));
        assert!(matches_any(&[], &labels));
    }

    #[test]
    fn overlapping_windows_merge_once_per_timestamp() {
        let mut slot = vec![(1, 1.0), (2, 2.0)];
        merge_points(&mut slot, [(2, 2.0), (3, 3.0)].into_iter());
        assert_eq!(slot, vec![(1, 1.0), (2, 2.0), (3, 3.0)]);
    }
}
