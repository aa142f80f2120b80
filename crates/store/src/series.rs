//! The in-memory index of stored series: from a sample to its id when writing,
//! from an id back to its meaning when reading.

use std::collections::HashMap;

use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};

/// What a stored series id means.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesDef {
    pub target_id: i64,
    pub metric: CatalogMetric,
    pub labels: Vec<(String, String)>,
    pub part: Part,
}

impl SeriesDef {
    pub fn of(target_id: i64, sample: &NormalizedSample) -> SeriesDef {
        SeriesDef {
            target_id,
            metric: sample.metric,
            labels: sample.labels.clone(),
            part: sample.part,
        }
    }

    /// Rebuilds a definition from its columns; `None` for a metric or part this
    /// build does not know.
    pub fn from_columns(
        target_id: i64,
        metric: &str,
        labels: &str,
        part: &str,
    ) -> Option<SeriesDef> {
        Some(SeriesDef {
            target_id,
            metric: CatalogMetric::from_name(metric)?,
            labels: serde_json::from_str(labels).ok()?,
            part: parse_part_key(part)?,
        })
    }

    pub fn labels_column(&self) -> String {
        serde_json::to_string(&self.labels).unwrap_or_else(|_| "[]".to_string())
    }

    pub fn matches(&self, target_id: i64, sample: &NormalizedSample) -> bool {
        self.target_id == target_id
            && self.metric == sample.metric
            && same_part(self.part, sample.part)
            && self.labels == sample.labels
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

/// Two-level index: (target, metric, part) → the few label sets it has. Keeps
/// lookups free of allocation on the ingest path.
/// The label sets of one (target, metric, part), each with its series id.
type LabelSets = Vec<(Vec<(String, String)>, u32)>;

#[derive(Debug, Default)]
pub(crate) struct SeriesCache {
    ids: HashMap<(i64, CatalogMetric, PartBits), LabelSets>,
    defs: HashMap<u32, SeriesDef>,
}

impl SeriesCache {
    pub(crate) fn insert(&mut self, id: u32, def: SeriesDef) {
        self.ids
            .entry((def.target_id, def.metric, part_bits(def.part)))
            .or_default()
            .push((def.labels.clone(), id));
        self.defs.insert(id, def);
    }

    pub(crate) fn id_of(&self, target_id: i64, sample: &NormalizedSample) -> Option<u32> {
        self.ids
            .get(&(target_id, sample.metric, part_bits(sample.part)))?
            .iter()
            .find(|(labels, _)| *labels == sample.labels)
            .map(|(_, id)| *id)
    }

    pub(crate) fn metric_of(&self, id: u32) -> Option<CatalogMetric> {
        self.defs.get(&id).map(|def| def.metric)
    }

    pub(crate) fn sample(&self, id: u32, value: f64) -> Option<NormalizedSample> {
        let def = self.defs.get(&id)?;
        Some(NormalizedSample {
            metric: def.metric,
            labels: def.labels.clone(),
            part: def.part,
            value,
        })
    }

    pub(crate) fn clone_defs_of(
        &self,
        target_id: i64,
        metric: CatalogMetric,
    ) -> HashMap<u32, SeriesDef> {
        self.defs
            .iter()
            .filter(|(_, def)| def.target_id == target_id && def.metric == metric)
            .map(|(id, def)| (*id, def.clone()))
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
}
