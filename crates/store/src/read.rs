//! The read path. A target's scrapes over a range are a *timeline* (the
//! health of head rows and of the blocks that overlap it); values are then
//! read only at the scrapes and for the series a question needs, a block's
//! sample-name groups decoded once however many of its scrapes are asked.
//! Raw series become catalog samples through the catalog's `normalize`,
//! exactly as a live page would.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use llmwatch_core::catalog::{
    normalize, source_names, CatalogMetric, Engine, NormalizedSample, SampleLabels,
};
use llmwatch_core::exposition::{Exposition, Format, Label, MetricFamily, MetricType, Sample};
use llmwatch_core::signals::{signals_between, signals_between_digests, Digest, Signal, Snapshot};
use sqlx::{AssertSqlSafe, Row};

use crate::block::{self, Health};
use crate::cache::{DecodedGroup, DecodedSeries};
use crate::series::{FxMap, FxSet, RawSample, SeriesDef, SeriesKind};
use crate::write::health_of;
use crate::{
    codec, is_probe_signal, part_key, poisoned, Point, Range, ScrapeHealth, SeriesPoints, Store,
    StoreError, PROBE_WINDOW_MIN_MS, STALENESS_MS,
};

/// A catalog series: its labels and part key.
type SeriesKey = (SampleLabels, String);

/// Where a scrape's samples are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Loc {
    /// A head row of `scrapes`, by id.
    Head(i64),
    /// Up-scrape `pos` of a block with `positions` up scrapes.
    Block {
        block: i64,
        pos: u32,
        positions: u32,
    },
    /// A down scrape: no samples.
    Down,
}

/// One scrape of a timeline.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub health: Health,
    pub loc: Loc,
}

/// The series a question reads, and the sample names they are grouped by.
struct Selection {
    defs: FxMap<u32, Arc<SeriesDef>>,
    names: Vec<String>,
}

/// Every name any catalog metric may be read from, and the catalog names
/// themselves (series stored normalised).
static CATALOG_NAMES: LazyLock<HashSet<String>> =
    LazyLock::new(|| names_for(CatalogMetric::all().iter().copied()));

fn names_for(metrics: impl Iterator<Item = CatalogMetric>) -> HashSet<String> {
    let mut names = HashSet::new();
    for metric in metrics {
        names.extend(source_names(metric));
        names.insert(metric.name().to_string());
    }
    names
}

/// Everything stored of one scrape: "what did this server expose at 14:05".
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPage {
    pub ts_ms: i64,
    /// Every sample line of the page, as the server wrote it.
    pub raw: Vec<RawSample>,
    /// Catalog samples stored normalised (NVML readings, older databases).
    pub catalog: Vec<NormalizedSample>,
}

/// One raw series over a range.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RawSeries {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub points: Vec<Point>,
}

/// The catalog samples of one scrape's values: catalog series as they are,
/// raw series through `normalize` as one page.
pub(crate) fn catalog_samples(
    defs: &FxMap<u32, Arc<SeriesDef>>,
    engine: Engine,
    pairs: &[(u32, f64)],
) -> Vec<NormalizedSample> {
    let mut out = Vec::with_capacity(pairs.len());
    let mut raw = Vec::new();
    for (id, value) in pairs {
        let Some(def) = defs.get(id) else { continue };
        match def.kind {
            SeriesKind::Raw => raw.push(Sample {
                name: Cow::Borrowed(def.name.as_str()),
                labels: def
                    .labels
                    .iter()
                    .map(|(name, value)| Label {
                        name: Cow::Borrowed(name.as_str()),
                        value: Cow::Borrowed(value.as_str()),
                    })
                    .collect(),
                value: *value,
                timestamp: None,
                exemplar: None,
            }),
            SeriesKind::Catalog { .. } => out.extend(def.catalog_sample(*value)),
        }
    }
    if !raw.is_empty() {
        // `normalize` looks samples up by name; the family is only a holder.
        let page = Exposition {
            format: Format::PrometheusText,
            families: vec![MetricFamily {
                name: Cow::Borrowed(""),
                metric_type: MetricType::Unknown,
                help: None,
                unit: None,
                samples: raw,
            }],
        };
        out.extend(normalize(engine, &page));
    }
    out
}

fn snapshot(ts_ms: i64, samples: &[NormalizedSample]) -> Snapshot<'_> {
    Snapshot {
        ts: ts_ms as f64 / 1000.0,
        samples,
    }
}

fn scrape_health_of(health: &Health) -> ScrapeHealth {
    ScrapeHealth {
        ts_ms: health.ts_ms,
        up: health.up,
        duration_ms: health.duration_ms,
        body_bytes: health.body_bytes,
        error: health.error.clone(),
        sample_count: health.sample_count,
    }
}

/// Appends the scrapes of a block's health blob that `keep` accepts (by
/// time), each with where its values are.
fn push_block_entries(
    block: i64,
    health: Vec<Health>,
    keep: impl Fn(&Health) -> bool,
    out: &mut Vec<Entry>,
) {
    let positions = u32::try_from(health.iter().filter(|e| e.up).count()).unwrap_or(u32::MAX);
    let mut pos = 0u32;
    for health in health {
        let loc = if health.up {
            pos += 1;
            Loc::Block {
                block,
                pos: pos - 1,
                positions,
            }
        } else {
            Loc::Down
        };
        if keep(&health) {
            out.push(Entry { health, loc });
        }
    }
}

impl Store {
    fn selection(
        &self,
        target: i64,
        names: Option<&HashSet<String>>,
    ) -> Result<Selection, StoreError> {
        let defs = self
            .series
            .read()
            .map_err(poisoned)?
            .of_target(target, |def| names.is_none_or(|n| n.contains(&def.name)));
        let names: BTreeMap<&str, ()> = defs.values().map(|d| (d.name.as_str(), ())).collect();
        let names = names.into_keys().map(str::to_string).collect();
        Ok(Selection { defs, names })
    }

    /// The engine a target's raw series are normalised as.
    pub(crate) async fn engine_of(&self, target: i64) -> Result<Engine, StoreError> {
        let known = self.engines.lock().map_err(poisoned)?.get(&target).cloned();
        if let Some(engine) = known.and_then(|name| Engine::from_str(&name).ok()) {
            return Ok(engine);
        }
        let engine: Option<String> = sqlx::query("SELECT engine FROM targets WHERE id = ?")
            .bind(target)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| row.try_get("engine"))
            .transpose()?
            .flatten();
        Ok(engine
            .and_then(|name| Engine::from_str(&name).ok())
            .unwrap_or(Engine::Generic))
    }

    /// Every scrape of `target` in `[from, to]`, in time order.
    pub(crate) async fn timeline(
        &self,
        target: i64,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Entry>, StoreError> {
        let blocks = sqlx::query(
            "SELECT id, health FROM blocks WHERE target_id = ? AND last_ms >= ? AND first_ms <= ?
             ORDER BY first_ms",
        )
        .bind(target)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        let head = sqlx::query(
            "SELECT id, ts_ms, up, duration_ms, body_bytes, error, sample_count FROM scrapes
             WHERE target_id = ? AND ts_ms BETWEEN ? AND ? ORDER BY ts_ms, id",
        )
        .bind(target)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        let mut decoded = Vec::with_capacity(blocks.len());
        for row in &blocks {
            let health: Vec<u8> = row.try_get("health")?;
            decoded.push((row.try_get("id")?, block::decode_health(&health)?));
        }
        // Sized once: a day is ≈ 17 000 entries, moved on every doubling.
        let mut entries = Vec::with_capacity(
            decoded
                .iter()
                .map(|(_, health)| health.len())
                .sum::<usize>()
                + head.len(),
        );
        let in_range = |h: &Health| (from_ms..=to_ms).contains(&h.ts_ms);
        for (block, health) in decoded {
            push_block_entries(block, health, in_range, &mut entries);
        }
        for row in &head {
            let health = health_of(row)?;
            let loc = if health.up {
                Loc::Head(row.try_get("id")?)
            } else {
                Loc::Down
            };
            entries.push(Entry { health, loc });
        }
        entries.sort_by_key(|e| e.health.ts_ms);
        Ok(entries)
    }

    /// The newest up scrapes of `target` at or before `ts_ms`, newest
    /// first, at most `count`.
    async fn last_ups(
        &self,
        target: i64,
        ts_ms: i64,
        count: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let limit = i64::try_from(count).unwrap_or(i64::MAX);
        let mut found: Vec<Entry> = Vec::new();
        for row in sqlx::query(LATEST_UP_SCRAPES_BEFORE)
            .bind(target)
            .bind(ts_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?
        {
            found.push(Entry {
                health: health_of(&row)?,
                loc: Loc::Head(row.try_get("id")?),
            });
        }
        // Blocks newest first, until `count` ups older than the head's are had.
        let mut before = i64::MAX;
        loop {
            let rows = sqlx::query(
                "SELECT id, first_ms, health FROM blocks WHERE target_id = ? AND first_ms <= ?
                 AND first_ms < ? AND last_up_ms IS NOT NULL ORDER BY first_ms DESC LIMIT 4",
            )
            .bind(target)
            .bind(ts_ms)
            .bind(before)
            .fetch_all(&self.pool)
            .await?;
            for row in &rows {
                let health: Vec<u8> = row.try_get("health")?;
                let up_by = |h: &Health| h.up && h.ts_ms <= ts_ms;
                let block = row.try_get("id")?;
                push_block_entries(block, block::decode_health(&health)?, up_by, &mut found);
                before = row.try_get("first_ms")?;
            }
            found.sort_by_key(|e| std::cmp::Reverse(e.health.ts_ms));
            found.truncate(count);
            let complete = found.len() == count && found.iter().all(|e| e.health.ts_ms >= before);
            if rows.is_empty() || complete {
                return Ok(found);
            }
        }
    }

    /// The values of the selected series at each of `locs`.
    async fn values_at(
        &self,
        locs: &FxSet<Loc>,
        selection: &Selection,
    ) -> Result<FxMap<Loc, Vec<(u32, f64)>>, StoreError> {
        let mut out: FxMap<Loc, Vec<(u32, f64)>> =
            FxMap::with_capacity_and_hasher(locs.len(), Default::default());
        let (heads, blocks) = split_locs(locs);
        if selection.names.is_empty() {
            return Ok(out);
        }
        for chunk in heads.chunks(500) {
            let placeholders = vec!["?"; chunk.len()].join(",");
            // Only placeholders are interpolated; every value is bound.
            let sql = format!("SELECT id, samples FROM scrapes WHERE id IN ({placeholders})");
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            for row in query.fetch_all(&self.pool).await? {
                let Some(blob) = row.try_get::<Option<Vec<u8>>, _>("samples")? else {
                    continue;
                };
                let mut pairs = codec::decode(&blob)?;
                pairs.retain(|(id, _)| selection.defs.contains_key(id));
                out.insert(Loc::Head(row.try_get("id")?), pairs);
            }
        }
        let epoch = self.cache.epoch();
        for (block, (positions, mut wanted)) in blocks {
            wanted.sort_unstable();
            wanted.dedup();
            let cached = wanted.len() > FEW_POSITIONS && self.cache.has_room();
            let mut missing: Vec<&str> = Vec::new();
            let mut groups: Vec<Arc<DecodedGroup>> = Vec::new();
            for name in &selection.names {
                let hit = (wanted.len() > FEW_POSITIONS)
                    .then(|| self.cache.get(block, name))
                    .flatten();
                match hit {
                    Some(group) => groups.push(group),
                    None => missing.push(name),
                }
            }
            if missing.is_empty() {
                pick(&mut out, block, positions, &wanted, &groups, selection);
                continue;
            }
            let placeholders = vec!["?"; missing.len()].join(",");
            // Only placeholders are interpolated; every value is bound.
            let sql = format!(
                "SELECT name, data FROM block_groups WHERE block_id = ? AND name IN ({placeholders})"
            );
            let mut query = sqlx::query(AssertSqlSafe(sql)).bind(block);
            for name in &missing {
                query = query.bind(*name);
            }
            let rows = query.fetch_all(&self.pool).await?;
            let mut found: HashSet<&str> = HashSet::with_capacity(rows.len());
            for row in &rows {
                let name: &str = row.try_get("name")?;
                let data: &[u8] = row.try_get("data")?;
                found.insert(name);
                let group = if cached {
                    let all = block::decode_group(data, positions as usize, |_| true)?;
                    let group = Arc::new(DecodedGroup {
                        series: all.into_iter().map(DecodedSeries::new).collect(),
                    });
                    self.cache.insert(epoch, block, name, Arc::clone(&group));
                    group
                } else {
                    let at = block::decode_group_at(data, positions as usize, &wanted, |id| {
                        selection.defs.contains_key(&id)
                    })?;
                    pick_sparse(&mut out, block, positions, &wanted, at);
                    continue;
                };
                groups.push(group);
            }
            if cached {
                // A name the block does not hold is remembered as empty.
                for name in missing.iter().filter(|name| !found.contains(**name)) {
                    let empty = Arc::new(DecodedGroup { series: Vec::new() });
                    self.cache.insert(epoch, block, name, empty);
                }
            }
            pick(&mut out, block, positions, &wanted, &groups, selection);
        }
        Ok(out)
    }

    /// The last `limit` scrapes of a target, newest first.
    pub async fn scrape_health(
        &self,
        target_id: i64,
        limit: u32,
    ) -> Result<Vec<ScrapeHealth>, StoreError> {
        let limit = limit as usize;
        let rows = sqlx::query(
            "SELECT ts_ms, up, duration_ms, body_bytes, error, sample_count FROM scrapes
             WHERE target_id = ? ORDER BY ts_ms DESC LIMIT ?",
        )
        .bind(target_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<Health> = rows.iter().map(health_of).collect::<Result<_, _>>()?;
        let mut offset = 0i64;
        while out.len() < limit {
            let blocks = sqlx::query(
                "SELECT health FROM blocks WHERE target_id = ? ORDER BY last_ms DESC LIMIT 4 OFFSET ?",
            )
            .bind(target_id)
            .bind(offset)
            .fetch_all(&self.pool)
            .await?;
            if blocks.is_empty() {
                break;
            }
            offset += blocks.len() as i64;
            for row in &blocks {
                out.extend(block::decode_health(&row.try_get::<Vec<u8>, _>("health")?)?);
            }
        }
        out.sort_by_key(|h| std::cmp::Reverse(h.ts_ms));
        out.truncate(limit);
        Ok(out.iter().map(scrape_health_of).collect())
    }

    /// SQLite's plan for the newest-successful-scrapes lookup of
    /// [`Store::latest_signals`] in the head (which index it uses).
    pub async fn explain_latest_up_scrape(
        &self,
        target_id: i64,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {LATEST_UP_SCRAPES_BEFORE}"
        )))
        .bind(target_id)
        .bind(i64::MAX)
        .bind(2)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| row.try_get::<String, _>("detail").map_err(StoreError::from))
            .collect()
    }

    /// Every signal of a target now: gauges from its last successful scrape,
    /// rates, ratios and quantiles over the gap to the one before.
    pub async fn latest_signals(&self, target_id: i64) -> Result<Vec<(Signal, f64)>, StoreError> {
        let latest = self.last_ups(target_id, i64::MAX, 2).await?;
        if latest.is_empty() {
            return Ok(Vec::new());
        }
        let selection = self.selection(target_id, Some(&CATALOG_NAMES))?;
        let engine = self.engine_of(target_id).await?;
        let locs: FxSet<Loc> = latest.iter().map(|e| e.loc).collect();
        let values = self.values_at(&locs, &selection).await?;
        let samples: Vec<(i64, Vec<NormalizedSample>)> = latest
            .iter()
            .map(|e| {
                let pairs = values.get(&e.loc).map(Vec::as_slice).unwrap_or(&[]);
                (
                    e.health.ts_ms,
                    catalog_samples(&selection.defs, engine, pairs),
                )
            })
            .collect();
        Ok(match samples.as_slice() {
            [] => Vec::new(),
            [(ts, cur)] => signals_between(None, snapshot(*ts, cur)),
            [(ts, cur), (prev_ts, prev), ..] => {
                signals_between(Some(snapshot(*prev_ts, prev)), snapshot(*ts, cur))
            }
        })
    }

    /// A signal's value at each step of `range`; see [`Store::signals_series`].
    pub async fn signal_series(
        &self,
        target_id: i64,
        signal: Signal,
        range: Range,
    ) -> Result<Vec<Point>, StoreError> {
        let mut series = self.signals_series(target_id, &[signal], range).await?;
        Ok(series.pop().map(|(_, points)| points).unwrap_or_default())
    }

    /// Several signals' values at each step of `range`, read in one pass.
    /// At instant t a signal is computed between the last scrape at or before
    /// t and the last one at or before t − step (or the scrape just before,
    /// when the step is shorter than the scrape interval). Instants with no
    /// scrape in the last five minutes are left out. Probe signals are rolled
    /// over the step (at least [`PROBE_WINDOW_MIN_MS`]).
    pub async fn signals_series(
        &self,
        target_id: i64,
        signals: &[Signal],
        range: Range,
    ) -> Result<Vec<(Signal, Vec<Point>)>, StoreError> {
        let mut out: Vec<(Signal, Vec<Point>)> = signals.iter().map(|s| (*s, Vec::new())).collect();
        let (probe_wanted, scrape_signals): (Vec<Signal>, Vec<Signal>) =
            signals.iter().copied().partition(|s| is_probe_signal(*s));
        if !probe_wanted.is_empty() {
            let window = range.step_ms.max(PROBE_WINDOW_MIN_MS);
            for (signal, points) in self
                .probe_signals_series(target_id, &probe_wanted, range, window)
                .await?
            {
                if let Some((_, slot)) = out.iter_mut().find(|(s, _)| *s == signal) {
                    *slot = points;
                }
            }
        }
        if scrape_signals.is_empty() {
            return Ok(out);
        }
        let names = names_for(
            scrape_signals
                .iter()
                .flat_map(|s| s.inputs().iter().copied()),
        );
        let selection = self.selection(target_id, Some(&names))?;
        let engine = self.engine_of(target_id).await?;
        let pairs = self.instant_pairs(target_id, range).await?;
        let locs: FxSet<Loc> = pairs
            .iter()
            .flat_map(|(_, prev, cur)| prev.iter().chain(std::iter::once(cur)))
            .map(|e| e.loc)
            .collect();
        let values = self.values_at(&locs, &selection).await?;
        let mut samples: FxMap<Loc, Vec<NormalizedSample>> =
            FxMap::with_capacity_and_hasher(locs.len(), Default::default());
        for loc in &locs {
            let pairs = values.get(loc).map(Vec::as_slice).unwrap_or(&[]);
            samples.insert(*loc, catalog_samples(&selection.defs, engine, pairs));
        }
        // Each scrape digested once: it is the `cur` of one window and the
        // `prev` of the next.
        let empty = Vec::new();
        let mut digests: FxMap<Loc, Digest> =
            FxMap::with_capacity_and_hasher(locs.len(), Default::default());
        for (_, prev, cur) in &pairs {
            for entry in prev.iter().chain(std::iter::once(cur)) {
                digests.entry(entry.loc).or_insert_with(|| {
                    let of = samples.get(&entry.loc).unwrap_or(&empty);
                    Digest::of(snapshot(entry.health.ts_ms, of))
                });
            }
        }
        for (t, prev, cur) in &pairs {
            let (Some(cur_digest), prev_digest) = (
                digests.get(&cur.loc),
                prev.as_ref().and_then(|p| digests.get(&p.loc)),
            ) else {
                continue;
            };
            let values = signals_between_digests(prev_digest, cur_digest);
            for (signal, points) in out.iter_mut() {
                if let Some((_, value)) = values.iter().find(|(s, _)| s == signal) {
                    points.push(Point {
                        ts_ms: *t,
                        value: *value,
                    });
                }
            }
        }
        Ok(out)
    }

    /// For each instant of `range` with a fresh scrape: (instant, the scrape
    /// to diff against, the scrape at or before it).
    async fn instant_pairs(
        &self,
        target_id: i64,
        range: Range,
    ) -> Result<Vec<(i64, Option<Entry>, Entry)>, StoreError> {
        let lookback = range.from_ms - range.step_ms - STALENESS_MS;
        let timeline = self.timeline(target_id, lookback, range.to_ms).await?;
        let ups: Vec<&Entry> = timeline.iter().filter(|e| e.health.up).collect();
        let mut older: Option<Option<Entry>> = None;
        let mut pairs = Vec::new();
        let mut t = range.from_ms;
        while t <= range.to_ms {
            let at = ups.partition_point(|e| e.health.ts_ms <= t);
            if let Some(cur) = at.checked_sub(1).map(|i| ups[i]) {
                if t - cur.health.ts_ms <= STALENESS_MS {
                    let bound = (t - range.step_ms).min(cur.health.ts_ms - 1);
                    let prev = match ups.partition_point(|e| e.health.ts_ms <= bound) {
                        0 => {
                            if older.is_none() {
                                older =
                                    Some(self.last_ups(target_id, lookback - 1, 1).await?.pop());
                            }
                            // Watching began inside the window: diff against
                            // the first scrape, so the window holds what was
                            // observed, not everything since the server
                            // started (which the canaries never saw).
                            older.clone().flatten().or_else(|| {
                                ups.first()
                                    .filter(|first| first.health.ts_ms < cur.health.ts_ms)
                                    .map(|first| (*first).clone())
                            })
                        }
                        n => Some(ups[n - 1].clone()),
                    };
                    pairs.push((t, prev, cur.clone()));
                }
            }
            t += range.step_ms;
        }
        Ok(pairs)
    }

    /// Every stored series of `metric` for a target over `[from, to]`, as
    /// the catalog reads it from each scrape.
    pub async fn metric_series(
        &self,
        target_id: i64,
        metric: CatalogMetric,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<SeriesPoints>, StoreError> {
        let selection = self.selection(target_id, Some(&names_for(std::iter::once(metric))))?;
        let engine = self.engine_of(target_id).await?;
        let timeline = self.timeline(target_id, from_ms, to_ms).await?;
        let locs: FxSet<Loc> = timeline.iter().map(|e| e.loc).collect();
        let values = self.values_at(&locs, &selection).await?;
        let mut by_series: BTreeMap<SeriesKey, Vec<Point>> = BTreeMap::new();
        for entry in &timeline {
            let Some(pairs) = values.get(&entry.loc) else {
                continue;
            };
            for sample in catalog_samples(&selection.defs, engine, pairs) {
                if sample.metric == metric {
                    by_series
                        .entry((sample.labels, part_key(sample.part)))
                        .or_default()
                        .push(Point {
                            ts_ms: entry.health.ts_ms,
                            value: sample.value,
                        });
                }
            }
        }
        Ok(by_series
            .into_iter()
            .map(|((labels, part), points)| SeriesPoints {
                metric: metric.name().to_string(),
                labels: labels.to_vec(),
                part,
                points,
            })
            .collect())
    }

    /// Everything stored of the last successful scrape at or before
    /// `ts_ms`: every sample line of the page as the server wrote it.
    pub async fn page_at(
        &self,
        target_id: i64,
        ts_ms: i64,
    ) -> Result<Option<StoredPage>, StoreError> {
        let Some(entry) = self.last_ups(target_id, ts_ms, 1).await?.pop() else {
            return Ok(None);
        };
        let selection = self.selection(target_id, None)?;
        let values = self
            .values_at(&FxSet::from_iter([entry.loc]), &selection)
            .await?;
        let mut page = StoredPage {
            ts_ms: entry.health.ts_ms,
            raw: Vec::new(),
            catalog: Vec::new(),
        };
        let mut pairs = values.get(&entry.loc).cloned().unwrap_or_default();
        pairs.sort_by_key(|(id, _)| *id);
        for (id, value) in pairs {
            let Some(def) = selection.defs.get(&id) else {
                continue;
            };
            match def.kind {
                SeriesKind::Raw => page.raw.push(RawSample {
                    name: def.name.as_str().into(),
                    labels: Arc::clone(&def.labels),
                    value,
                }),
                SeriesKind::Catalog { .. } => page.catalog.extend(def.catalog_sample(value)),
            }
        }
        Ok(Some(page))
    }

    /// Every raw series named `name` (a sample name as on the page) for a
    /// target over `[from, to]`.
    pub async fn raw_series(
        &self,
        target_id: i64,
        name: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RawSeries>, StoreError> {
        let names = HashSet::from([name.to_string()]);
        let mut selection = self.selection(target_id, Some(&names))?;
        selection.defs.retain(|_, def| def.kind == SeriesKind::Raw);
        let timeline = self.timeline(target_id, from_ms, to_ms).await?;
        let locs: FxSet<Loc> = timeline.iter().map(|e| e.loc).collect();
        let values = self.values_at(&locs, &selection).await?;
        let mut by_id: BTreeMap<u32, Vec<Point>> = BTreeMap::new();
        for entry in &timeline {
            for (id, value) in values.get(&entry.loc).into_iter().flatten() {
                by_id.entry(*id).or_default().push(Point {
                    ts_ms: entry.health.ts_ms,
                    value: *value,
                });
            }
        }
        let mut series: Vec<RawSeries> = by_id
            .into_iter()
            .filter_map(|(id, points)| {
                let def = selection.defs.get(&id)?;
                Some(RawSeries {
                    name: def.name.clone(),
                    labels: def.labels.to_vec(),
                    points,
                })
            })
            .collect();
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(series)
    }
}

/// Up to this many positions of a block are decoded in place and not
/// cached (the latest scrapes, one stored page); more is a range question,
/// whose groups are decoded whole and kept for the next.
const FEW_POSITIONS: usize = 2;

/// Appends the selected series' values at `wanted` positions of a block
/// from its decoded groups.
fn pick(
    out: &mut FxMap<Loc, Vec<(u32, f64)>>,
    block: i64,
    positions: u32,
    wanted: &[u32],
    groups: &[Arc<DecodedGroup>],
    selection: &Selection,
) {
    let series: Vec<&DecodedSeries> = groups
        .iter()
        .flat_map(|group| group.series.iter())
        .filter(|series| selection.defs.contains_key(&series.id))
        .collect();
    for &pos in wanted {
        let loc = Loc::Block {
            block,
            pos,
            positions,
        };
        let slot = out.entry(loc).or_default();
        slot.reserve(series.len());
        slot.extend(
            series
                .iter()
                .filter_map(|series| Some((series.id, series.get(pos as usize)?))),
        );
    }
}

/// Appends values decoded at `wanted` positions (one per position).
fn pick_sparse(
    out: &mut FxMap<Loc, Vec<(u32, f64)>>,
    block: i64,
    positions: u32,
    wanted: &[u32],
    series: Vec<block::SeriesValues>,
) {
    for (k, &pos) in wanted.iter().enumerate() {
        let loc = Loc::Block {
            block,
            pos,
            positions,
        };
        let slot = out.entry(loc).or_default();
        slot.extend(
            series
                .iter()
                .filter_map(|(id, values)| Some((*id, (*values.get(k)?)?))),
        );
    }
}

/// The newest successful head scrapes of a target at or before a time (the
/// partial index `scrapes_up_by_target_time` skips its down rows).
const LATEST_UP_SCRAPES_BEFORE: &str =
    "SELECT id, ts_ms, up, duration_ms, body_bytes, error, sample_count FROM scrapes
     WHERE target_id = ? AND up = 1 AND ts_ms <= ? ORDER BY ts_ms DESC LIMIT ?";

/// Per block id: its position count and the positions wanted.
pub(crate) type BlockPositions = BTreeMap<i64, (u32, Vec<u32>)>;

/// `locs` split by where they live: head row ids, and per block its
/// position count and the positions wanted.
pub(crate) fn split_locs(locs: &FxSet<Loc>) -> (Vec<i64>, BlockPositions) {
    let mut heads = Vec::new();
    let mut blocks = BlockPositions::new();
    for loc in locs {
        match *loc {
            Loc::Head(id) => heads.push(id),
            Loc::Block {
                block,
                pos,
                positions,
            } => blocks
                .entry(block)
                .or_insert((positions, Vec::new()))
                .1
                .push(pos),
            Loc::Down => {}
        }
    }
    (heads, blocks)
}
