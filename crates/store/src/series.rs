//! The in-memory index of stored series: from a sample to its id when writing,
//! from an id back to its meaning when reading.
//!
//! A series is either **raw** — one sample line of a scraped page, its name
//! and labels exactly as the server wrote them — or **catalog** — an
//! engine-neutral [`NormalizedSample`] given to the store directly (NVML
//! readings, and every series of a database written before pages were kept
//! whole). Raw series are turned into catalog samples at query time by the
//! catalog's own `normalize`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part, SampleLabels};
use llmwatch_core::exposition::Exposition;

/// One sample line of a scraped page, as the server wrote it.
///
/// Name and labels are shared (`Arc`): a target's page has the same lines
/// scrape after scrape, so [`RawSample::all_of_like`] gives a new page the
/// previous page's strings instead of allocating ~3 000 of them, and the
/// writer recognises an unchanged line by pointer.
#[derive(Debug, Clone, PartialEq)]
pub struct RawSample {
    /// The sample name, e.g. `vllm:e2e_request_latency_seconds_bucket`.
    pub name: Arc<str>,
    /// Label pairs in page order, values unescaped.
    pub labels: Arc<[(String, String)]>,
    pub value: f64,
}

impl RawSample {
    /// Every sample line of a parsed page, in page order.
    pub fn all_of(page: &Exposition) -> Vec<RawSample> {
        RawSample::all_of_like(page, &[])
    }

    /// Every sample line of `page`, sharing the name and labels of the line
    /// at the same place in `previous` (the target's last page) when they
    /// are equal, and a name with the line before when it repeats
    /// (histogram buckets).
    pub fn all_of_like(page: &Exposition, previous: &[RawSample]) -> Vec<RawSample> {
        let mut lines: Vec<RawSample> = Vec::with_capacity(previous.len());
        let samples = page
            .families
            .iter()
            .flat_map(|family| family.samples.iter());
        for (i, sample) in samples.enumerate() {
            let same_labels = |labels: &[(String, String)]| {
                labels.len() == sample.labels.len()
                    && labels
                        .iter()
                        .zip(&sample.labels)
                        .all(|((name, value), label)| {
                            *name == *label.name && *value == *label.value
                        })
            };
            let line = match previous.get(i) {
                Some(old) if *old.name == *sample.name && same_labels(&old.labels) => RawSample {
                    name: Arc::clone(&old.name),
                    labels: Arc::clone(&old.labels),
                    value: sample.value,
                },
                _ => RawSample {
                    name: match lines.last() {
                        Some(before) if *before.name == *sample.name => Arc::clone(&before.name),
                        _ => Arc::from(sample.name.as_ref()),
                    },
                    labels: sample
                        .labels
                        .iter()
                        .map(|label| (label.name.to_string(), label.value.to_string()))
                        .collect(),
                    value: sample.value,
                },
            };
            lines.push(line);
        }
        lines
    }

    /// Whether `other` is the same line (name and labels), by pointer first.
    pub fn same_line(&self, other: &RawSample) -> bool {
        (Arc::ptr_eq(&self.name, &other.name) || self.name == other.name)
            && (Arc::ptr_eq(&self.labels, &other.labels) || self.labels == other.labels)
    }
}

/// What kind of value a series holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SeriesKind {
    /// A sample line of a page; normalised when read.
    Raw,
    /// A catalog metric's part, stored normalised.
    Catalog { metric: CatalogMetric, part: Part },
}

/// The `part` column of a raw series.
const RAW_PART: &str = "raw";

/// What a stored series id means.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesDef {
    pub target_id: i64,
    /// The sample name (raw) or the catalog metric's name.
    pub name: String,
    /// Shared with every catalog sample read from the series.
    pub labels: SampleLabels,
    pub kind: SeriesKind,
}

impl SeriesDef {
    pub fn raw(target_id: i64, sample: &RawSample) -> SeriesDef {
        SeriesDef {
            target_id,
            name: sample.name.to_string(),
            labels: Arc::clone(&sample.labels),
            kind: SeriesKind::Raw,
        }
    }

    pub fn catalog(target_id: i64, sample: &NormalizedSample) -> SeriesDef {
        SeriesDef {
            target_id,
            name: sample.metric.name().to_string(),
            labels: sample.labels.clone(),
            kind: SeriesKind::Catalog {
                metric: sample.metric,
                part: sample.part,
            },
        }
    }

    /// Rebuilds a definition from its columns; `None` for a catalog metric or
    /// part this build does not know, or unreadable labels.
    pub fn from_columns(
        target_id: i64,
        metric: &str,
        labels: &str,
        part: &str,
    ) -> Option<SeriesDef> {
        let kind = if part == RAW_PART {
            SeriesKind::Raw
        } else {
            SeriesKind::Catalog {
                metric: CatalogMetric::from_name(metric)?,
                part: parse_part_key(part)?,
            }
        };
        Some(SeriesDef {
            target_id,
            name: metric.to_string(),
            labels: serde_json::from_str::<Vec<(String, String)>>(labels)
                .ok()?
                .into(),
            kind,
        })
    }

    pub fn labels_column(&self) -> String {
        serde_json::to_string(&*self.labels).unwrap_or_else(|_| "[]".to_string())
    }

    pub fn part_column(&self) -> String {
        match self.kind {
            SeriesKind::Raw => RAW_PART.to_string(),
            SeriesKind::Catalog { part, .. } => part_key(part),
        }
    }

    /// The catalog sample this series holds with `value`, if it is one.
    pub fn catalog_sample(&self, value: f64) -> Option<NormalizedSample> {
        match self.kind {
            SeriesKind::Raw => None,
            SeriesKind::Catalog { metric, part } => Some(NormalizedSample {
                metric,
                labels: Arc::clone(&self.labels),
                part,
                value,
            }),
        }
    }
}

fn same_part(a: Part, b: Part) -> bool {
    match (a, b) {
        (Part::Bucket(x), Part::Bucket(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// `value`, `sum`, `count` or `bucket:<le>` (`bucket:+Inf` for the last).
pub fn part_key(part: Part) -> String {
    match part {
        Part::Value => "value".to_string(),
        Part::Sum => "sum".to_string(),
        Part::Count => "count".to_string(),
        Part::Bucket(le) if le == f64::INFINITY => "bucket:+Inf".to_string(),
        Part::Bucket(le) => format!("bucket:{le}"),
    }
}

pub fn parse_part_key(key: &str) -> Option<Part> {
    match key {
        "value" => Some(Part::Value),
        "sum" => Some(Part::Sum),
        "count" => Some(Part::Count),
        "bucket:+Inf" => Some(Part::Bucket(f64::INFINITY)),
        other => other
            .strip_prefix("bucket:")?
            .parse()
            .ok()
            .map(Part::Bucket),
    }
}

/// Hashable stand-in for [`Part`] (f64 is not `Eq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PartBits {
    Value,
    Sum,
    Count,
    Bucket(u64),
}

fn part_bits(part: Part) -> PartBits {
    match part {
        Part::Value => PartBits::Value,
        Part::Sum => PartBits::Sum,
        Part::Count => PartBits::Count,
        Part::Bucket(le) => PartBits::Bucket(le.to_bits()),
    }
}

fn raw_key(target_id: i64, name: &str, labels: &[(String, String)]) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    target_id.hash(&mut hasher);
    name.hash(&mut hasher);
    labels.hash(&mut hasher);
    hasher.finish()
}

fn catalog_key(target_id: i64, sample: &NormalizedSample) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    target_id.hash(&mut hasher);
    sample.metric.hash(&mut hasher);
    part_bits(sample.part).hash(&mut hasher);
    sample.labels.hash(&mut hasher);
    hasher.finish()
}

/// Maps keyed by small integers and hashes: ids, locations, label hashes.
pub(crate) type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;
pub(crate) type FxSet<K> = std::collections::HashSet<K, rustc_hash::FxBuildHasher>;

/// Lookup of series ids in both directions. Lookups on the ingest path
/// allocate nothing: a series is found by a hash of its whole identity
/// (target, name or catalog metric and part, labels), then compared.
#[derive(Debug, Default, Clone)]
pub(crate) struct SeriesCache {
    defs: FxMap<u32, Arc<SeriesDef>>,
    raw: FxMap<u64, Vec<u32>>,
    catalog: FxMap<u64, Vec<u32>>,
    by_target: FxMap<i64, Vec<u32>>,
    /// Each distinct label set once: a GPU's gauges are separate series
    /// with the same labels, and sharing one `Arc` lets a reader tell they
    /// are one GPU by pointer (`signals::Digest`) instead of by hashing.
    label_sets: FxMap<u64, Vec<SampleLabels>>,
}

impl SeriesCache {
    pub(crate) fn insert(&mut self, id: u32, mut def: SeriesDef) {
        def.labels = self.interned(&def.labels);
        match def.kind {
            SeriesKind::Raw => self
                .raw
                .entry(raw_key(def.target_id, &def.name, &def.labels))
                .or_default()
                .push(id),
            SeriesKind::Catalog { metric, part } => self
                .catalog
                .entry(catalog_key(
                    def.target_id,
                    &NormalizedSample {
                        metric,
                        labels: Arc::clone(&def.labels),
                        part,
                        value: 0.0,
                    },
                ))
                .or_default()
                .push(id),
        }
        self.by_target.entry(def.target_id).or_default().push(id);
        self.defs.insert(id, Arc::new(def));
    }

    /// The shared copy of `labels`, kept from now on if it is the first.
    fn interned(&mut self, labels: &SampleLabels) -> SampleLabels {
        let mut hasher = rustc_hash::FxHasher::default();
        labels.hash(&mut hasher);
        let same = self.label_sets.entry(hasher.finish()).or_default();
        match same.iter().find(|known| **known == *labels) {
            Some(known) => Arc::clone(known),
            None => {
                same.push(Arc::clone(labels));
                Arc::clone(labels)
            }
        }
    }

    /// Moves every series of `other` in.
    pub(crate) fn absorb(&mut self, other: SeriesCache) {
        for (id, def) in other.defs {
            self.insert(id, Arc::unwrap_or_clone(def));
        }
    }

    pub(crate) fn id_of_raw(&self, target_id: i64, sample: &RawSample) -> Option<u32> {
        self.raw
            .get(&raw_key(target_id, &sample.name, &sample.labels))?
            .iter()
            .copied()
            .find(|id| {
                self.defs.get(id).is_some_and(|def| {
                    def.target_id == target_id
                        && *def.name == *sample.name
                        && *def.labels == *sample.labels
                })
            })
    }

    pub(crate) fn id_of_catalog(&self, target_id: i64, sample: &NormalizedSample) -> Option<u32> {
        self.catalog
            .get(&catalog_key(target_id, sample))?
            .iter()
            .copied()
            .find(|id| {
                self.defs.get(id).is_some_and(|def| {
                    def.target_id == target_id
                        && def.labels == sample.labels
                        && matches!(def.kind, SeriesKind::Catalog { metric, part }
                            if metric == sample.metric && same_part(part, sample.part))
                })
            })
    }

    pub(crate) fn name_of(&self, id: u32) -> Option<&str> {
        self.defs.get(&id).map(|def| def.name.as_str())
    }

    /// The series of `target_id` that `keep` accepts.
    pub(crate) fn of_target(
        &self,
        target_id: i64,
        mut keep: impl FnMut(&SeriesDef) -> bool,
    ) -> FxMap<u32, Arc<SeriesDef>> {
        self.by_target
            .get(&target_id)
            .into_iter()
            .flatten()
            .filter_map(|id| Some((*id, self.defs.get(id)?)))
            .filter(|(_, def)| keep(def))
            .map(|(id, def)| (id, Arc::clone(def)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_keys_round_trip() {
        for part in [
            Part::Value,
            Part::Sum,
            Part::Count,
            Part::Bucket(0.001),
            Part::Bucket(2.5),
            Part::Bucket(f64::INFINITY),
        ] {
            let back = parse_part_key(&part_key(part)).unwrap();
            assert!(same_part(part, back), "{part:?}");
        }
        assert_eq!(parse_part_key("bucket:x"), None);
        assert_eq!(parse_part_key("other"), None);
    }

    #[test]
    fn raw_and_catalog_series_are_found_again() {
        let mut cache = SeriesCache::default();
        let raw = RawSample {
            name: "vllm:num_requests_running".into(),
            labels: vec![("model_name".into(), "m".into())].into(),
            value: 1.0,
        };
        let catalog = NormalizedSample {
            metric: CatalogMetric::RequestsRunning,
            labels: Vec::new().into(),
            part: Part::Value,
            value: 1.0,
        };
        cache.insert(1, SeriesDef::raw(7, &raw));
        cache.insert(2, SeriesDef::catalog(7, &catalog));
        assert_eq!(cache.id_of_raw(7, &raw), Some(1));
        assert_eq!(cache.id_of_raw(8, &raw), None);
        assert_eq!(cache.id_of_catalog(7, &catalog), Some(2));
        let defs = cache.of_target(7, |_| true);
        let def = &defs[&1];
        let back = SeriesDef::from_columns(7, &def.name, &def.labels_column(), &def.part_column());
        assert_eq!(back.as_ref(), Some(def.as_ref()));
        let def = &defs[&2];
        let back = SeriesDef::from_columns(7, &def.name, &def.labels_column(), &def.part_column());
        assert_eq!(back.as_ref(), Some(def.as_ref()));
    }
}
