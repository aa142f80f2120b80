//! What the engine reads: label sets, series, matchers, the [`SeriesSource`]
//! trait a store implements, and [`MemorySource`], an in-memory store.

use std::fmt;

use regex::Regex;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// The label that holds a series' metric name.
pub const METRIC_NAME: &str = "__name__";

/// A label set, sorted by name, names unique. Includes `__name__` when the
/// series has one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// Builds a label set from pairs in any order; a later pair with the same
    /// name wins and empty values are dropped (Prometheus treats an empty
    /// value as an absent label).
    pub fn new<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut out: Vec<(String, String)> = Vec::new();
        for (k, v) in pairs {
            let (k, v) = (k.into(), v.into());
            match out.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => out.push((k, v)),
            }
        }
        out.retain(|(_, v)| !v.is_empty());
        out.sort();
        Labels(out)
    }

    /// The value of `name`, `None` when absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// The metric name (`__name__`), if any.
    pub fn metric_name(&self) -> Option<&str> {
        self.get(METRIC_NAME)
    }

    /// The pairs, sorted by name.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// Whether the set has no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This set with `name` set to `value` (removed when `value` is empty).
    pub fn with(&self, name: &str, value: &str) -> Labels {
        let mut out = self.clone();
        match out.0.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
            Ok(i) if value.is_empty() => {
                out.0.remove(i);
            }
            Ok(i) => out.0[i].1 = value.to_string(),
            Err(_) if value.is_empty() => {}
            Err(i) => out.0.insert(i, (name.to_string(), value.to_string())),
        }
        out
    }

    /// This set without the labels in `names`.
    pub fn without(&self, names: &[&str]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| !names.contains(&k.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// This set keeping only the labels in `names`.
    pub fn keep(&self, names: &[&str]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| names.contains(&k.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// This set without `__name__`.
    pub fn without_name(&self) -> Labels {
        self.without(&[METRIC_NAME])
    }
}

impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        f.write_str("}")
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// One stored series: its labels (with `__name__`) and samples in ascending
/// time order. A sample whose bits equal [`STALE_NAN_BITS`] is a staleness
/// marker: the series ends there.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Labels,
    /// `(timestamp in ms since the epoch, value)`, ascending by timestamp.
    pub samples: Vec<(i64, f64)>,
}

/// Prometheus' staleness marker: a NaN with this exact bit pattern.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Whether `v` is Prometheus' staleness marker (not just any NaN).
pub fn is_stale_marker(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// The staleness marker value.
pub fn stale_marker() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// How a [`LabelMatcher`] compares a label's value.
#[derive(Clone, Debug)]
pub enum MatchKind {
    Equal(String),
    NotEqual(String),
    /// Fully anchored, as in PromQL.
    Regex(Regex),
    NotRegex(Regex),
}

/// One label matcher of a selector. An absent label matches as the empty
/// string, as in Prometheus (`{foo=""}` selects series without `foo`).
#[derive(Clone, Debug)]
pub struct LabelMatcher {
    pub name: String,
    pub kind: MatchKind,
}

impl LabelMatcher {
    /// `name="value"`.
    pub fn equal(name: &str, value: &str) -> Self {
        LabelMatcher {
            name: name.to_string(),
            kind: MatchKind::Equal(value.to_string()),
        }
    }

    /// `name=~"pattern"`, anchored; `Err` names the bad pattern.
    pub fn regex(name: &str, pattern: &str) -> Result<Self, regex::Error> {
        Ok(LabelMatcher {
            name: name.to_string(),
            kind: MatchKind::Regex(Regex::new(&format!("^(?:{pattern})$"))?),
        })
    }

    /// Whether a label value (`""` when absent) satisfies this matcher.
    pub fn matches_value(&self, value: &str) -> bool {
        match &self.kind {
            MatchKind::Equal(v) => v == value,
            MatchKind::NotEqual(v) => v != value,
            MatchKind::Regex(r) => r.is_match(value),
            MatchKind::NotRegex(r) => !r.is_match(value),
        }
    }

    /// Whether a label set satisfies this matcher.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_value(labels.get(&self.name).unwrap_or(""))
    }

    /// The metric name this matcher pins, if it is `__name__="x"`.
    pub fn pinned_name(&self) -> Option<&str> {
        match &self.kind {
            MatchKind::Equal(v) if self.name == METRIC_NAME => Some(v),
            _ => None,
        }
    }
}

/// Whether a label set satisfies every matcher.
pub fn matches_all(matchers: &[LabelMatcher], labels: &Labels) -> bool {
    matchers.iter().all(|m| m.matches(labels))
}

/// Where the engine reads series. Implementations return every series that
/// satisfies all matchers and has samples in `[start_ms, end_ms]`, with only
/// those samples (staleness markers included), ascending in time.
pub trait SeriesSource {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Series satisfying all `matchers` with their samples in `[start_ms, end_ms]`.
    fn select(
        &self,
        matchers: &[LabelMatcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Series>, Self::Error>;

    /// Label names of series with samples in the window that satisfy any of
    /// the matcher sets (all series when `match_sets` is empty), sorted.
    fn label_names(
        &self,
        match_sets: &[Vec<LabelMatcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, Self::Error>;

    /// Values of label `name` as [`SeriesSource::label_names`] selects series, sorted.
    fn label_values(
        &self,
        name: &str,
        match_sets: &[Vec<LabelMatcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, Self::Error>;
}

/// A store in memory: tests, benchmarks, and a place to put series fetched
/// asynchronously (see [`crate::selections`]) before evaluating.
#[derive(Clone, Debug, Default)]
pub struct MemorySource {
    series: Vec<Series>,
}

/// [`MemorySource`] never fails; this type says so.
#[derive(Debug, thiserror::Error)]
#[error("in-memory source cannot fail")]
pub enum Infallible {}

impl MemorySource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sample; samples of one series must arrive in ascending time.
    /// Series are found by label set, so any order across series works.
    pub fn push(&mut self, labels: &Labels, ts_ms: i64, value: f64) {
        match self.series.iter_mut().rev().find(|s| &s.labels == labels) {
            Some(s) => s.samples.push((ts_ms, value)),
            None => self.series.push(Series {
                labels: labels.clone(),
                samples: vec![(ts_ms, value)],
            }),
        }
    }

    /// Adds a whole series (samples ascending in time).
    pub fn add_series(&mut self, series: Series) {
        self.series.push(series);
    }

    /// Every series held.
    pub fn series(&self) -> &[Series] {
        &self.series
    }

    fn in_window<'a>(
        &'a self,
        match_sets: &'a [Vec<LabelMatcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> impl Iterator<Item = &'a Series> + 'a {
        self.series.iter().filter(move |s| {
            (match_sets.is_empty() || match_sets.iter().any(|m| matches_all(m, &s.labels)))
                && s.samples.iter().any(|&(t, _)| t >= start_ms && t <= end_ms)
        })
    }
}

impl SeriesSource for MemorySource {
    type Error = Infallible;

    fn select(
        &self,
        matchers: &[LabelMatcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Series>, Infallible> {
        let mut out = Vec::new();
        for s in &self.series {
            if !matches_all(matchers, &s.labels) {
                continue;
            }
            let lo = s.samples.partition_point(|&(t, _)| t < start_ms);
            let hi = s.samples.partition_point(|&(t, _)| t <= end_ms);
            if lo < hi {
                out.push(Series {
                    labels: s.labels.clone(),
                    samples: s.samples[lo..hi].to_vec(),
                });
            }
        }
        Ok(out)
    }

    fn label_names(
        &self,
        match_sets: &[Vec<LabelMatcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, Infallible> {
        let mut names: Vec<String> = self
            .in_window(match_sets, start_ms, end_ms)
            .flat_map(|s| s.labels.pairs().iter().map(|(k, _)| k.clone()))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn label_values(
        &self,
        name: &str,
        match_sets: &[Vec<LabelMatcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, Infallible> {
        let mut values: Vec<String> = self
            .in_window(match_sets, start_ms, end_ms)
            .filter_map(|s| s.labels.get(name).map(str::to_string))
            .collect();
        values.sort();
        values.dedup();
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_sort_dedupe_and_drop_empty_values() {
        let l = Labels::new([("b", "2"), ("a", "1"), ("b", "3"), ("c", "")]);
        assert_eq!(
            l.pairs(),
            &[("a".into(), "1".into()), ("b".into(), "3".into())]
        );
        assert_eq!(l.with("a", "").get("a"), None);
        assert_eq!(l.with("0", "x").pairs()[0].0, "0");
        assert_eq!(l.to_string(), r#"{a="1", b="3"}"#);
    }

    #[test]
    fn absent_label_matches_empty_string() {
        let l = Labels::new([("a", "1")]);
        assert!(LabelMatcher::equal("b", "").matches(&l));
        assert!(!LabelMatcher::equal("a", "").matches(&l));
        assert!(LabelMatcher::regex("a", "1|2").unwrap().matches(&l));
        assert!(!LabelMatcher::regex("a", "").unwrap().matches(&l));
    }

    #[test]
    fn memory_source_selects_window_and_matchers() {
        let mut m = MemorySource::new();
        let a = Labels::new([(METRIC_NAME, "up"), ("job", "a")]);
        let b = Labels::new([(METRIC_NAME, "up"), ("job", "b")]);
        for t in 0..10 {
            m.push(&a, t * 1000, t as f64);
            m.push(&b, t * 1000, 1.0);
        }
        let got = m
            .select(&[LabelMatcher::equal("job", "a")], 2000, 4000)
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].samples, vec![(2000, 2.0), (3000, 3.0), (4000, 4.0)]);
        assert_eq!(m.label_values("job", &[], 0, 1).unwrap(), vec!["a", "b"]);
        assert!(m.select(&[], 20_000, 30_000).unwrap().is_empty());
    }
}
