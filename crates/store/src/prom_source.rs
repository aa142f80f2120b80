//! What the Prometheus-compatible query API reads: every stored series under
//! the name and labels Prometheus would give it, and their points over a
//! window.
//!
//! Naming (also what remote_write sends, so dashboards work on either):
//!
//! - **Scraped lines**: the sample name and labels as the server wrote
//!   them, plus `job` (the target's kind: `engine` or `gpu`), `instance`
//!   (host:port of the target URL, never its userinfo) and `target` (the
//!   llmwatch target name). A scraped label that clashes with one of those
//!   three is kept as `exported_<name>`, as Prometheus does with
//!   `honor_labels: false`.
//! - **Scrape health**: `up` (1/0 per scrape) and `scrape_duration_seconds`
//!   with the same three labels.
//! - **Catalog series stored normalised** (NVML readings): `llmwatch_<metric>`
//!   (`_sum`, `_count`, `_bucket{le}` for histogram parts).
//! - **Canary probes**: one point per canary probe at its send time,
//!   `llmwatch_canary_ttft_seconds`, `llmwatch_canary_tpot_seconds`,
//!   `llmwatch_canary_e2e_seconds` (successful probes) and
//!   `llmwatch_canary_success` (1/0), with `job="llmwatch"`, `instance`,
//!   `target`.
//! - **Signals**: `llmwatch_signal{signal="<name>", job="llmwatch",
//!   instance, target}`, computed as `Store::signals_series` does at instants
//!   on a [`SIGNAL_STEP_MS`] grid aligned to the epoch (coarser for windows
//!   over [`MAX_SIGNAL_POINTS`] steps).
//!
//! Staleness as Prometheus writes it: a scraped series absent from the next
//! scrape of its target (or a scrape that failed) gets a staleness marker at
//! that scrape's time, so it disappears from instant queries at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use llmwatch_core::catalog::{Part, SampleLabels};
use llmwatch_core::signals::Signal;

use crate::read::Entry;
use crate::series::{SeriesDef, SeriesKind};
use crate::{poisoned, Point, Range, Store, StoreError, TargetKind, TargetRow};

/// A label set: sorted by name, names unique, `__name__` included.
pub type PromLabels = Vec<(String, String)>;

/// The label that holds a series' name.
pub const NAME_LABEL: &str = "__name__";

/// The `job` of llmwatch's own series (canaries, signals).
pub const OWN_JOB: &str = "llmwatch";

/// Signals are evaluated on this grid (aligned to the epoch).
pub const SIGNAL_STEP_MS: i64 = 15_000;

/// The most signal instants computed per series; longer windows use a
/// coarser grid (a multiple of [`SIGNAL_STEP_MS`]).
pub const MAX_SIGNAL_POINTS: i64 = 10_000;

/// Prometheus' staleness marker (a NaN with this bit pattern).
pub const STALE_MARKER_BITS: u64 = 0x7ff0_0000_0000_0002;

/// The canary series: name and which probe field they carry.
const CANARY_SERIES: [(&str, CanaryField); 4] = [
    ("llmwatch_canary_ttft_seconds", CanaryField::Ttft),
    ("llmwatch_canary_tpot_seconds", CanaryField::Tpot),
    ("llmwatch_canary_e2e_seconds", CanaryField::E2e),
    ("llmwatch_canary_success", CanaryField::Success),
];

/// The name of the signal series.
pub const SIGNAL_SERIES: &str = "llmwatch_signal";

/// Bounds on one selection, so a query cannot take the process's memory.
#[derive(Debug, Clone, Copy)]
pub struct PromLimits {
    pub max_series: usize,
    pub max_samples: usize,
}

/// Why a selection failed.
#[derive(Debug, thiserror::Error)]
pub enum PromSourceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A bound of [`PromLimits`] was passed; the message names it.
    #[error("{0}")]
    Limit(String),
}

/// One series with its points in the asked window, ascending in time
/// (staleness markers included).
#[derive(Debug, Clone, PartialEq)]
pub struct PromSeries {
    pub labels: PromLabels,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CanaryField {
    Ttft,
    Tpot,
    E2e,
    Success,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Health {
    Up,
    Duration,
}

/// Where a candidate series' points come from.
#[derive(Debug, Clone)]
enum Origin {
    Stored(u32),
    Health(Health),
    Canary(CanaryField),
    Signal(Signal),
}

struct Candidate {
    labels: PromLabels,
    origin: Origin,
}

/// `host:port` of a target URL: no scheme, no userinfo, no path; the
/// scheme's default port when none is written (as Prometheus' `instance`).
pub fn instance_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let has_port = match host_port.rfind(':') {
        Some(i) => !host_port[i..].contains(']'),
        None => false,
    };
    if has_port || host_port.is_empty() {
        return host_port.to_string();
    }
    // The port the scheme implies; a scheme without one (`nvml://local`)
    // leaves the host alone.
    if scheme.eq_ignore_ascii_case("https") {
        format!("{host_port}:443")
    } else if scheme.eq_ignore_ascii_case("http") {
        format!("{host_port}:80")
    } else {
        host_port.to_string()
    }
}

/// The labels attached to every series of `target` under `job`, as
/// Prometheus attaches target labels: `job` and `instance` (unless the
/// target's own labels set them: discovered labels take precedence), its
/// labels from discovery or config, and `target` (llmwatch's name for it,
/// never overridden). Names starting with `__` are not attached.
pub fn attached_labels(target: &TargetRow, job: &str) -> Vec<(String, String)> {
    let mut out: BTreeMap<String, String> = BTreeMap::from([
        ("job".to_string(), job.to_string()),
        ("instance".to_string(), instance_of(&target.url)),
    ]);
    for (key, value) in &target.labels {
        if !key.starts_with("__") && key != "target" && !value.is_empty() {
            out.insert(key.clone(), value.clone());
        }
    }
    out.insert("target".to_string(), target.name.clone());
    out.into_iter().collect()
}

/// The labels Prometheus would store for a scraped line of `target`.
fn scraped_labels(target: &TargetRow, name: &str, labels: &[(String, String)]) -> PromLabels {
    let attached = attached_labels(target, target.kind.as_str());
    // As Prometheus' scrape loop (`resolveConflictingExposedLabels`): a
    // scraped label that clashes with an attached one moves to the first
    // free `exported_…` name, shorter names first; the others stay.
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut clashing: Vec<(&String, &String)> = Vec::new();
    for (key, value) in labels {
        if value.is_empty() {
            continue;
        }
        if attached.iter().any(|(k, _)| k == key) || key == NAME_LABEL {
            clashing.push((key, value));
        } else {
            out.insert(key.clone(), value.clone());
        }
    }
    clashing.sort_by_key(|(key, _)| key.len());
    for (key, value) in clashing {
        let mut name = format!("exported_{key}");
        while out.contains_key(&name) || attached.iter().any(|(k, _)| *k == name) {
            name = format!("exported_{name}");
        }
        out.insert(name, value.clone());
    }
    out.extend(attached);
    out.insert(NAME_LABEL.to_string(), name.to_string());
    out.into_iter().collect()
}

fn own_labels(target: &TargetRow, name: &str, extra: &[(&str, &str)]) -> PromLabels {
    let mut out: BTreeMap<String, String> = attached_labels(target, OWN_JOB).into_iter().collect();
    out.insert(NAME_LABEL.to_string(), name.to_string());
    for (k, v) in extra {
        out.insert(k.to_string(), v.to_string());
    }
    out.into_iter().collect()
}

/// The name and labels of a catalog series stored normalised.
fn catalog_labels(target: &TargetRow, def: &SeriesDef, part: Part) -> PromLabels {
    let base = format!("llmwatch_{}", def.name);
    let mut labels = def.labels.to_vec();
    let name = match part {
        Part::Value => base,
        Part::Sum => format!("{base}_sum"),
        Part::Count => format!("{base}_count"),
        Part::Bucket(le) => {
            labels.push(("le".to_string(), format_le(le)));
            format!("{base}_bucket")
        }
    };
    scraped_labels(target, &name, &labels)
}

fn format_le(le: f64) -> String {
    if le == f64::INFINITY {
        "+Inf".to_string()
    } else {
        le.to_string()
    }
}

/// The signals a target of `kind` can have.
fn signals_for(kind: TargetKind) -> impl Iterator<Item = Signal> {
    Signal::all().iter().copied().filter(move |s| {
        let gpu = s.as_str().starts_with("gpu_");
        match kind {
            TargetKind::Gpu => gpu,
            TargetKind::Engine => !gpu,
        }
    })
}

/// The grid signals are computed on over `[from, to]`, if it has an instant.
fn signal_range(from_ms: i64, to_ms: i64) -> Option<Range> {
    let span = to_ms.saturating_sub(from_ms).max(0);
    let steps = span / SIGNAL_STEP_MS / MAX_SIGNAL_POINTS + 1;
    let step = SIGNAL_STEP_MS.saturating_mul(steps);
    let first = from_ms.div_euclid(step) * step + if from_ms % step == 0 { 0 } else { step };
    (first <= to_ms)
        .then(|| Range::checked(first, to_ms, step).ok())
        .flatten()
}

impl Store {
    /// Every series Prometheus' API could name for `target`, matched or not.
    fn prom_candidates(&self, target: &TargetRow) -> Result<Vec<Candidate>, StoreError> {
        let defs = self
            .series
            .read()
            .map_err(poisoned)?
            .of_target(target.id, |_| true);
        let mut out = Vec::with_capacity(defs.len() + 40);
        for (id, def) in defs {
            let labels = match def.kind {
                SeriesKind::Raw => scraped_labels(target, &def.name, &def.labels),
                SeriesKind::Catalog { part, .. } => catalog_labels(target, &def, part),
            };
            out.push(Candidate {
                labels,
                origin: Origin::Stored(id),
            });
        }
        for (name, health) in [
            ("up", Health::Up),
            ("scrape_duration_seconds", Health::Duration),
        ] {
            out.push(Candidate {
                labels: scraped_labels(target, name, &[]),
                origin: Origin::Health(health),
            });
        }
        if target.kind == TargetKind::Engine {
            for (name, field) in CANARY_SERIES {
                out.push(Candidate {
                    labels: own_labels(target, name, &[]),
                    origin: Origin::Canary(field),
                });
            }
        }
        for signal in signals_for(target.kind) {
            out.push(Candidate {
                labels: own_labels(target, SIGNAL_SERIES, &[("signal", signal.as_str())]),
                origin: Origin::Signal(signal),
            });
        }
        Ok(out)
    }

    /// Every series that `matches` accepts, with its points in
    /// `[from_ms, to_ms]`; series without a point there are left out.
    pub async fn prom_select(
        &self,
        matches: &(dyn Fn(&PromLabels) -> bool + Sync),
        from_ms: i64,
        to_ms: i64,
        limits: PromLimits,
    ) -> Result<Vec<PromSeries>, PromSourceError> {
        let mut out = Vec::new();
        let mut samples = 0usize;
        for target in self.targets().await? {
            let wanted: Vec<Candidate> = self
                .prom_candidates(&target)?
                .into_iter()
                .filter(|c| matches(&c.labels))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            for series in self.points_of(&target, wanted, from_ms, to_ms).await? {
                samples += series.points.len();
                out.push(series);
                check_limits(out.len(), samples, limits)?;
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// The label sets `matches` accepts that have data in `[from_ms, to_ms]`,
    /// read cheaply: a scraped series counts when its target had an up
    /// scrape in the window (its points are not decoded); canary and signal
    /// series when they have a point (signals on a grid of at most 20 steps).
    pub async fn prom_series(
        &self,
        matches: &(dyn Fn(&PromLabels) -> bool + Sync),
        from_ms: i64,
        to_ms: i64,
        limits: PromLimits,
    ) -> Result<Vec<PromLabels>, PromSourceError> {
        let mut out = Vec::new();
        for target in self.targets().await? {
            let wanted: Vec<Candidate> = self
                .prom_candidates(&target)?
                .into_iter()
                .filter(|c| matches(&c.labels))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let timeline = self.timeline(target.id, from_ms, to_ms).await?;
            let scraped = timeline.iter().any(|e| e.health.up);
            let any_scrape = !timeline.is_empty();
            let mut derived = Vec::new();
            for c in wanted {
                match c.origin {
                    Origin::Stored(..) if scraped => out.push(c.labels),
                    Origin::Health(_) if any_scrape => out.push(c.labels),
                    Origin::Canary(_) | Origin::Signal(_) => derived.push(c),
                    _ => {}
                }
            }
            for series in self
                .derived_points(&target, derived, from_ms, to_ms, 20)
                .await?
            {
                if !series.points.is_empty() {
                    out.push(series.labels);
                }
            }
            check_limits(out.len(), 0, limits)?;
        }
        out.sort();
        Ok(out)
    }

    /// Points of the `wanted` series of one target.
    async fn points_of(
        &self,
        target: &TargetRow,
        wanted: Vec<Candidate>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<PromSeries>, StoreError> {
        let mut stored: HashMap<u32, PromLabels> = HashMap::new();
        let mut health: Vec<(Health, PromLabels)> = Vec::new();
        let mut derived = Vec::new();
        for c in wanted {
            match c.origin {
                Origin::Stored(id) => {
                    stored.insert(id, c.labels);
                }
                Origin::Health(h) => health.push((h, c.labels)),
                Origin::Canary(_) | Origin::Signal(_) => derived.push(c),
            }
        }
        let mut out = Vec::new();
        if !stored.is_empty() || !health.is_empty() {
            let timeline = self.timeline(target.id, from_ms, to_ms).await?;
            let timeline: Vec<Entry> = timeline
                .into_iter()
                .filter(|e| e.health.ts_ms >= from_ms && e.health.ts_ms <= to_ms)
                .collect();
            for (h, labels) in health {
                let points: Vec<Point> = timeline
                    .iter()
                    .map(|e| Point {
                        ts_ms: e.health.ts_ms,
                        value: match h {
                            Health::Up => f64::from(u8::from(e.health.up)),
                            Health::Duration => e.health.duration_ms / 1000.0,
                        },
                    })
                    .collect();
                out.push(PromSeries { labels, points });
            }
            if !stored.is_empty() {
                out.extend(
                    self.stored_points(target, stored, &timeline, from_ms, to_ms)
                        .await?,
                );
            }
        }
        out.extend(
            self.derived_points(target, derived, from_ms, to_ms, MAX_SIGNAL_POINTS)
                .await?,
        );
        out.retain(|s| !s.points.is_empty());
        Ok(out)
    }

    /// Scraped (and catalog) series: read name by name through
    /// [`Store::raw_series`] / [`Store::metric_series`], then staleness
    /// markers where a series is missing from a scrape of `timeline`.
    async fn stored_points(
        &self,
        target: &TargetRow,
        stored: HashMap<u32, PromLabels>,
        timeline: &[Entry],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<PromSeries>, StoreError> {
        let defs = self
            .series
            .read()
            .map_err(poisoned)?
            .of_target(target.id, |_| true);
        // Raw series by (name, labels as written) → their Prometheus labels.
        let mut raw_by_name: BTreeMap<String, HashMap<SampleLabels, PromLabels>> = BTreeMap::new();
        let mut catalog: Vec<PromLabels> = Vec::new();
        for (id, labels) in stored {
            let Some(def) = defs.get(&id) else { continue };
            match def.kind {
                SeriesKind::Raw => {
                    raw_by_name
                        .entry(def.name.clone())
                        .or_default()
                        .insert(Arc::clone(&def.labels), labels);
                }
                SeriesKind::Catalog { .. } => catalog.push(labels),
            }
        }
        let scrapes: Vec<i64> = timeline.iter().map(|e| e.health.ts_ms).collect();
        let mut out = Vec::new();
        for (name, by_labels) in raw_by_name {
            for series in self.raw_series(target.id, &name, from_ms, to_ms).await? {
                if let Some(labels) = by_labels.get(series.labels.as_slice()) {
                    let mut points = series.points;
                    points.retain(|p| p.ts_ms >= from_ms && p.ts_ms <= to_ms);
                    out.push(PromSeries {
                        labels: labels.clone(),
                        points: with_stale_markers(&points, &scrapes),
                    });
                }
            }
        }
        if !catalog.is_empty() {
            out.extend(
                self.catalog_points(target, &defs, catalog, from_ms, to_ms)
                    .await?,
            );
        }
        Ok(out)
    }

    /// Catalog series stored normalised, through [`Store::metric_series`].
    async fn catalog_points(
        &self,
        target: &TargetRow,
        defs: &crate::series::FxMap<u32, std::sync::Arc<SeriesDef>>,
        wanted: Vec<PromLabels>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<PromSeries>, StoreError> {
        let wanted: HashSet<PromLabels> = wanted.into_iter().collect();
        let metrics: HashSet<_> = defs
            .values()
            .filter_map(|d| match d.kind {
                SeriesKind::Catalog { metric, .. } => Some(metric),
                SeriesKind::Raw => None,
            })
            .collect();
        let mut out = Vec::new();
        for metric in metrics {
            for series in self
                .metric_series(target.id, metric, from_ms, to_ms)
                .await?
            {
                let Some(part) = crate::parse_part_key(&series.part) else {
                    continue;
                };
                let def = SeriesDef {
                    target_id: target.id,
                    name: series.metric.clone(),
                    labels: series.labels.clone().into(),
                    kind: SeriesKind::Catalog { metric, part },
                };
                let labels = catalog_labels(target, &def, part);
                if wanted.contains(&labels) {
                    out.push(PromSeries {
                        labels,
                        points: series.points,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Canary and signal series of one target; signals on a grid of at most
    /// `max_points` instants.
    async fn derived_points(
        &self,
        target: &TargetRow,
        wanted: Vec<Candidate>,
        from_ms: i64,
        to_ms: i64,
        max_points: i64,
    ) -> Result<Vec<PromSeries>, StoreError> {
        let mut out = Vec::new();
        let canaries: Vec<&Candidate> = wanted
            .iter()
            .filter(|c| matches!(c.origin, Origin::Canary(_)))
            .collect();
        if !canaries.is_empty() {
            let probes = self.probe_timings(target.id, from_ms, to_ms).await?;
            for c in canaries {
                let Origin::Canary(field) = c.origin else {
                    continue;
                };
                let points = probes
                    .iter()
                    .filter_map(|(ts_ms, p)| {
                        let value = match field {
                            CanaryField::Success => Some(f64::from(u8::from(p.ok))),
                            CanaryField::Ttft => p.ttft_s.filter(|_| p.ok),
                            CanaryField::Tpot => p.tpot_s.filter(|_| p.ok),
                            CanaryField::E2e => p.ok.then_some(p.e2e_s),
                        }?;
                        Some(Point {
                            ts_ms: *ts_ms,
                            value,
                        })
                    })
                    .collect();
                out.push(PromSeries {
                    labels: c.labels.clone(),
                    points,
                });
            }
        }
        let signals: Vec<(Signal, &PromLabels)> = wanted
            .iter()
            .filter_map(|c| match c.origin {
                Origin::Signal(s) => Some((s, &c.labels)),
                _ => None,
            })
            .collect();
        let range = if max_points >= MAX_SIGNAL_POINTS {
            signal_range(from_ms, to_ms)
        } else {
            coarse_range(from_ms, to_ms, max_points)
        };
        if let (false, Some(range)) = (signals.is_empty(), range) {
            let names: Vec<Signal> = signals.iter().map(|(s, _)| *s).collect();
            for (signal, points) in self.signals_series(target.id, &names, range).await? {
                if let Some((_, labels)) = signals.iter().find(|(s, _)| *s == signal) {
                    out.push(PromSeries {
                        labels: (*labels).clone(),
                        points,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// A grid of at most `points` instants over `[from, to]`, steps a multiple
/// of [`SIGNAL_STEP_MS`] (for listing series, not for values).
fn coarse_range(from_ms: i64, to_ms: i64, points: i64) -> Option<Range> {
    let span = to_ms.saturating_sub(from_ms).max(0);
    let steps = span / SIGNAL_STEP_MS / points.max(1) + 1;
    let step = SIGNAL_STEP_MS.saturating_mul(steps);
    let first = to_ms - (span / step) * step;
    Range::checked(first, to_ms, step).ok()
}

fn check_limits(series: usize, samples: usize, limits: PromLimits) -> Result<(), PromSourceError> {
    if series > limits.max_series {
        return Err(PromSourceError::Limit(format!(
            "the query selects more than {} series; narrow the selectors",
            limits.max_series
        )));
    }
    if samples > limits.max_samples {
        return Err(PromSourceError::Limit(format!(
            "the query reads more than {} samples; shorten the range or narrow the selectors",
            limits.max_samples
        )));
    }
    Ok(())
}

/// `points` with a staleness marker at each scrape (of `scrapes`, ascending)
/// that follows a point but has none of its own, as Prometheus writes them.
fn with_stale_markers(points: &[Point], scrapes: &[i64]) -> Vec<Point> {
    let mut out = Vec::with_capacity(points.len() + 1);
    let stale = f64::from_bits(STALE_MARKER_BITS);
    let mut next = 0usize;
    for (i, p) in points.iter().enumerate() {
        out.push(*p);
        next = next.max(scrapes.partition_point(|t| *t <= p.ts_ms));
        let following = points.get(i + 1).map(|q| q.ts_ms);
        if let Some(&scrape) = scrapes.get(next) {
            if following != Some(scrape) {
                out.push(Point {
                    ts_ms: scrape,
                    value: stale,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_is_host_port_without_secrets() {
        assert_eq!(
            instance_of("http://127.0.0.1:8000/metrics"),
            "127.0.0.1:8000"
        );
        assert_eq!(instance_of("https://user:pw@host/x"), "host:443");
        assert_eq!(instance_of("http://[::1]/metrics"), "[::1]:80");
        assert_eq!(instance_of("http://[::1]:9/metrics"), "[::1]:9");
        assert_eq!(instance_of("http://***@h:1/m"), "h:1");
        // A scheme that implies no port leaves the host alone.
        assert_eq!(instance_of("nvml://local"), "local");
    }

    #[test]
    fn target_labels_are_attached_with_discovered_ones_taking_precedence() {
        let target = TargetRow {
            id: 1,
            name: "fleet-a".into(),
            kind: TargetKind::Engine,
            url: "http://10.0.0.1:8000".into(),
            engine: None,
            labels: [
                ("zone", "eu-1"),
                ("instance", "pod-a"),
                ("target", "not-this"),
                ("__meta_x", "hidden"),
                ("empty", ""),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let attached: BTreeMap<String, String> =
            attached_labels(&target, "engine").into_iter().collect();
        let get = |k: &str| attached.get(k).map(String::as_str);
        assert_eq!(get("zone"), Some("eu-1"));
        assert_eq!(get("instance"), Some("pod-a"), "a discovered instance wins");
        assert_eq!(get("target"), Some("fleet-a"), "target is llmwatch's name");
        assert_eq!(get("job"), Some("engine"));
        assert_eq!(get("__meta_x"), None);
        assert_eq!(get("empty"), None);
        // A scraped `zone` moves aside, as Prometheus does with
        // `honor_labels = false`.
        let labels = scraped_labels(&target, "m", &[("zone".into(), "scraped".into())]);
        let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("zone"), Some("eu-1"));
        assert_eq!(get("exported_zone"), Some("scraped"));
    }

    #[test]
    fn clashing_scraped_labels_get_the_exported_prefix() {
        let target = TargetRow {
            id: 1,
            name: "sim".into(),
            kind: TargetKind::Engine,
            url: "http://10.0.0.1:8000/metrics".into(),
            engine: None,
            labels: Default::default(),
        };
        let labels = scraped_labels(
            &target,
            "m",
            &[
                ("job".into(), "theirs".into()),
                ("exported_job".into(), "older".into()),
                ("model".into(), "x".into()),
                ("empty".into(), String::new()),
            ],
        );
        let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("job"), Some("engine"));
        // Prometheus keeps the scraped `exported_job` and moves `job` on.
        assert_eq!(get("exported_job"), Some("older"));
        assert_eq!(get("exported_exported_job"), Some("theirs"));
        assert_eq!(get("instance"), Some("10.0.0.1:8000"));
        assert_eq!(get("target"), Some("sim"));
        assert_eq!(get("empty"), None);
        assert_eq!(get(NAME_LABEL), Some("m"));
        assert!(labels.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn stale_markers_follow_a_missing_scrape() {
        let p = |t, v| Point { ts_ms: t, value: v };
        let scrapes = [10, 20, 30, 40, 50];
        let got = with_stale_markers(&[p(10, 1.0), p(20, 2.0), p(40, 4.0), p(50, 5.0)], &scrapes);
        let times: Vec<i64> = got.iter().map(|p| p.ts_ms).collect();
        assert_eq!(times, vec![10, 20, 30, 40, 50]);
        assert_eq!(got[2].value.to_bits(), STALE_MARKER_BITS);
        // The last scrape has no follower: no marker.
        assert_eq!(got[4].value, 5.0);
    }

    #[test]
    fn signal_grid_is_aligned_and_bounded() {
        let r = signal_range(1_000, 61_000).unwrap();
        assert_eq!((r.from_ms, r.step_ms), (15_000, SIGNAL_STEP_MS));
        let day = 30 * 86_400_000;
        let r = signal_range(0, day).unwrap();
        assert!((r.to_ms - r.from_ms) / r.step_ms < MAX_SIGNAL_POINTS);
        assert_eq!(r.from_ms % r.step_ms, 0);
        assert!(signal_range(1_000, 2_000).is_none());
    }
}
