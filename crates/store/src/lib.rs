//! llmwatch's storage: SQLite (WAL) through sqlx. Targets, series of catalog
//! metrics, scrapes with their health and packed samples, and the queries the
//! API and pages need (latest signals, a signal's series over a range, raw
//! metric series).
//!
//! Layout: one `scrapes` row per scrape holds all of that scrape's samples
//! packed (see [`codec`]); the `series` table names what each packed id means.
//! Writes are batched: [`Store::write_scrapes`] commits a whole batch in one
//! transaction.

mod alerts;
pub mod codec;
mod lifecycle;
mod live;
mod probes;
mod series;
mod sweeps;

use llmwatch_core::redact::{redact_url, redact_urls_in};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use llmwatch_core::catalog::{CatalogMetric, NormalizedSample};
use llmwatch_core::signals::{signals_between, Signal, Snapshot};
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Row, SqlitePool};

pub use alerts::{AlertChanges, AlertEventRow, AlertRow};
pub use lifecycle::{Pruned, RetentionCutoffs};
pub use live::{LiveChangeRow, LiveVerdictRow};
pub use probes::{is_probe_signal, ProbeRow};
use series::SeriesCache;
pub use series::{parse_part_key, part_key, SeriesDef};
pub use sweeps::{NewSweep, SweepEnd, SweepRow, SweepStatus, SweepStepRow};

/// Errors of the store. Messages say what was being done.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    #[error("unknown target id {0}")]
    UnknownTarget(i64),
    #[error("bad range: {0}")]
    BadRange(String),
}

/// What a target is: an inference server or a GPU source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    Engine,
    Gpu,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Engine => "engine",
            TargetKind::Gpu => "gpu",
        }
    }
}

/// A stored target.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TargetRow {
    pub id: i64,
    pub name: String,
    pub kind: TargetKind,
    pub url: String,
    pub engine: Option<String>,
}

/// One scrape's outcome, ready to be written.
#[derive(Debug, Clone)]
pub struct ScrapeRecord {
    pub target_id: i64,
    /// Unix milliseconds at the start of the scrape.
    pub ts_ms: i64,
    pub up: bool,
    pub duration_ms: f64,
    pub body_bytes: u64,
    pub error: Option<String>,
    pub engine: Option<String>,
    pub samples: Vec<NormalizedSample>,
}

/// A scrape's health as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScrapeHealth {
    pub ts_ms: i64,
    pub up: bool,
    pub duration_ms: f64,
    pub body_bytes: u64,
    pub error: Option<String>,
    pub sample_count: u64,
}

/// One point of a series.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Point {
    pub ts_ms: i64,
    pub value: f64,
}

/// A raw stored series over a range.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesPoints {
    pub metric: String,
    pub labels: Vec<(String, String)>,
    pub part: String,
    pub points: Vec<Point>,
}

/// `[from, to]` in Unix milliseconds, sampled every `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from_ms: i64,
    pub to_ms: i64,
    pub step_ms: i64,
}

/// The most points one range query returns (as Prometheus' limit).
pub const MAX_POINTS: i64 = 11_000;

impl Range {
    /// Checks order, step and size, so queries never loop forever or explode.
    pub fn checked(from_ms: i64, to_ms: i64, step_ms: i64) -> Result<Range, StoreError> {
        if step_ms <= 0 {
            return Err(StoreError::BadRange(format!(
                "step must be positive, got {step_ms} ms"
            )));
        }
        if to_ms < from_ms {
            return Err(StoreError::BadRange(format!(
                "`to` ({to_ms}) is before `from` ({from_ms})"
            )));
        }
        let points = (to_ms - from_ms) / step_ms + 1;
        if points > MAX_POINTS {
            return Err(StoreError::BadRange(format!(
                "{points} points requested, at most {MAX_POINTS}: raise the step"
            )));
        }
        Ok(Range {
            from_ms,
            to_ms,
            step_ms,
        })
    }
}

/// The shortest window probe signals are rolled over in a range query.
pub const PROBE_WINDOW_MIN_MS: i64 = 60 * 1000;

/// How far back a signal query looks for a scrape before calling the value stale.
const STALENESS_MS: i64 = 5 * 60 * 1000;

/// The coarsest downsampling bucket: a thinned range must still have a
/// scrape within [`STALENESS_MS`] of every instant.
pub const MAX_DOWNSAMPLE_BUCKET_MS: i64 = STALENESS_MS / 2;

/// The two newest successful scrapes of a target (the partial index
/// `scrapes_up_by_target_time` skips its down rows).
const LATEST_UP_SCRAPES: &str =
    "SELECT ts_ms, samples FROM scrapes WHERE target_id = ? AND up = 1 \
     ORDER BY ts_ms DESC LIMIT 2";

/// The store: a pool of SQLite connections plus the in-memory series index.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    series: Arc<RwLock<SeriesCache>>,
    write_lock: Arc<tokio::sync::Mutex<()>>,
    /// Per target, the time before which scrapes are already thinned (this
    /// process's memory: a restart thins from the oldest once more).
    thinned_until: Arc<std::sync::Mutex<std::collections::HashMap<i64, i64>>>,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, and
    /// applies the migrations in `migrations/`.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            // Pages freed by retention go back to the file system in steps
            // (`run_retention`); takes effect on a new file at once.
            .auto_vacuum(SqliteAutoVacuum::Incremental);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::migrate!("../../migrations").run(&pool).await?;
        ensure_incremental_vacuum(&pool).await?;
        let store = Store {
            pool,
            series: Arc::new(RwLock::new(SeriesCache::default())),
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
            thinned_until: Arc::default(),
        };
        store.load_series().await?;
        Ok(store)
    }

    /// The underlying pool, for the other stores of the binary (probes, runs).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn load_series(&self) -> Result<(), StoreError> {
        let rows = sqlx::query("SELECT id, target_id, metric, labels, part FROM series")
            .fetch_all(&self.pool)
            .await?;
        let mut cache = SeriesCache::default();
        for row in rows {
            let id: i64 = row.try_get("id")?;
            let def = SeriesDef::from_columns(
                row.try_get("target_id")?,
                row.try_get::<String, _>("metric")?.as_str(),
                row.try_get::<String, _>("labels")?.as_str(),
                row.try_get::<String, _>("part")?.as_str(),
            );
            // A series of a metric this build does not know is skipped, not fatal.
            if let Some(def) = def {
                cache.insert(series_id(id)?, def);
            }
        }
        *self.series.write().map_err(poisoned)? = cache;
        Ok(())
    }

    /// Registers a target (or updates its kind and URL) and returns its id.
    pub async fn upsert_target(
        &self,
        name: &str,
        kind: TargetKind,
        url: &str,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO targets (name, kind, url, created_ms) VALUES (?, ?, ?, ?)
             ON CONFLICT(name) DO UPDATE SET kind = excluded.kind, url = excluded.url
             RETURNING id",
        )
        .bind(name)
        .bind(kind.as_str())
        // Credentials in a target's URL never reach the database.
        .bind(redact_url(url))
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// Every target, by name.
    pub async fn targets(&self) -> Result<Vec<TargetRow>, StoreError> {
        let rows = sqlx::query("SELECT id, name, kind, url, engine FROM targets ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(target_from_row).collect()
    }

    /// One target by name.
    pub async fn target_by_name(&self, name: &str) -> Result<Option<TargetRow>, StoreError> {
        let row = sqlx::query("SELECT id, name, kind, url, engine FROM targets WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(target_from_row).transpose()
    }

    /// Writes a batch of scrapes in one transaction: new series first, then one
    /// row per scrape. Returns the number of samples written.
    pub async fn write_scrapes(&self, batch: &[ScrapeRecord]) -> Result<u64, StoreError> {
        let _writer = self.write_lock.lock().await;
        let mut tx = self.pool.begin().await?;
        let mut new_series: Vec<(u32, SeriesDef)> = Vec::new();
        let mut written = 0u64;
        for scrape in batch {
            // Resolve known series under one read lock; remember the rest.
            let mut ids: Vec<Option<u32>> = {
                let cache = self.series.read().map_err(poisoned)?;
                scrape
                    .samples
                    .iter()
                    .map(|sample| cache.id_of(scrape.target_id, sample))
                    .collect()
            };
            for (slot, sample) in ids.iter_mut().zip(&scrape.samples) {
                if slot.is_some() {
                    continue;
                }
                if let Some((id, _)) = new_series
                    .iter()
                    .find(|(_, def)| def.matches(scrape.target_id, sample))
                {
                    *slot = Some(*id);
                    continue;
                }
                let def = SeriesDef::of(scrape.target_id, sample);
                let row = sqlx::query(
                    "INSERT INTO series (target_id, metric, labels, part) VALUES (?, ?, ?, ?)
                     RETURNING id",
                )
                .bind(scrape.target_id)
                .bind(def.metric.name())
                .bind(def.labels_column())
                .bind(part_key(def.part))
                .fetch_one(&mut *tx)
                .await?;
                let id = series_id(row.try_get("id")?)?;
                new_series.push((id, def));
                *slot = Some(id);
            }
            let pairs: Vec<(u32, f64)> = ids
                .iter()
                .zip(&scrape.samples)
                .filter_map(|(id, sample)| id.map(|id| (id, sample.value)))
                .collect();
            let blob = scrape.up.then(|| codec::encode(&pairs));
            sqlx::query(
                "INSERT INTO scrapes (target_id, ts_ms, up, duration_ms, body_bytes, error, sample_count, samples)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(scrape.target_id)
            .bind(scrape.ts_ms)
            .bind(scrape.up)
            .bind(scrape.duration_ms)
            .bind(i64::try_from(scrape.body_bytes).unwrap_or(i64::MAX))
            .bind(scrape.error.as_deref().map(redact_urls_in))
            .bind(i64::try_from(pairs.len()).unwrap_or(i64::MAX))
            .bind(blob)
            .execute(&mut *tx)
            .await?;
            if let Some(engine) = &scrape.engine {
                sqlx::query("UPDATE targets SET engine = ? WHERE id = ? AND engine IS NOT ?")
                    .bind(engine)
                    .bind(scrape.target_id)
                    .bind(engine)
                    .execute(&mut *tx)
                    .await?;
            }
            written += pairs.len() as u64;
        }
        tx.commit().await?;
        let mut cache = self.series.write().map_err(poisoned)?;
        for (id, def) in new_series {
            cache.insert(id, def);
        }
        Ok(written)
    }

    /// The last `limit` scrapes of a target, newest first.
    pub async fn scrape_health(
        &self,
        target_id: i64,
        limit: u32,
    ) -> Result<Vec<ScrapeHealth>, StoreError> {
        let rows = sqlx::query(
            "SELECT ts_ms, up, duration_ms, body_bytes, error, sample_count FROM scrapes
             WHERE target_id = ? ORDER BY ts_ms DESC LIMIT ?",
        )
        .bind(target_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ScrapeHealth {
                    ts_ms: row.try_get("ts_ms")?,
                    up: row.try_get("up")?,
                    duration_ms: row.try_get("duration_ms")?,
                    body_bytes: u64::try_from(row.try_get::<i64, _>("body_bytes")?).unwrap_or(0),
                    error: row.try_get("error")?,
                    sample_count: u64::try_from(row.try_get::<i64, _>("sample_count")?)
                        .unwrap_or(0),
                })
            })
            .collect()
    }

    /// SQLite's plan for the newest-successful-scrapes lookup of
    /// [`Store::latest_signals`] (which index it uses), one line per step.
    pub async fn explain_latest_up_scrape(
        &self,
        target_id: i64,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {LATEST_UP_SCRAPES}"
        )))
        .bind(target_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| row.try_get::<String, _>("detail").map_err(StoreError::from))
            .collect()
    }

    /// Every signal of a target now: gauges from its last successful scrape,
    /// rates, ratios and quantiles over the gap to the one before.
    pub async fn latest_signals(&self, target_id: i64) -> Result<Vec<(Signal, f64)>, StoreError> {
        let rows = sqlx::query(LATEST_UP_SCRAPES)
            .bind(target_id)
            .fetch_all(&self.pool)
            .await?;
        let mut snapshots = Vec::with_capacity(2);
        for row in &rows {
            let ts_ms: i64 = row.try_get("ts_ms")?;
            let blob: Option<Vec<u8>> = row.try_get("samples")?;
            snapshots.push((ts_ms, self.decode_samples(blob.as_deref())?));
        }
        Ok(match snapshots.as_slice() {
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
        let scrape_signals: Vec<Signal> = signals
            .iter()
            .copied()
            .filter(|s| !is_probe_signal(*s))
            .collect();
        let probe_wanted: Vec<Signal> = signals
            .iter()
            .copied()
            .filter(|s| is_probe_signal(*s))
            .collect();
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
        let wanted: HashSet<CatalogMetric> = scrape_signals
            .iter()
            .flat_map(|s| s.inputs().iter().copied())
            .collect();
        // One query finds, for every instant t, the scrape at or before t and
        // the one to diff against, by index seeks: the cost follows the number
        // of instants, not the number of scrapes in the range.
        let rows = sqlx::query(
            "WITH RECURSIVE instants(t) AS (
                 SELECT ?1 UNION ALL SELECT t + ?2 FROM instants WHERE t + ?2 <= ?3
             ),
             current AS (
                 SELECT t, (SELECT id FROM scrapes
                            WHERE target_id = ?4 AND up = 1 AND ts_ms <= t
                            ORDER BY ts_ms DESC LIMIT 1) AS cur_id
                 FROM instants
             ),
             located AS (
                 SELECT current.t, current.cur_id, s.ts_ms AS cur_ts
                 FROM current JOIN scrapes s ON s.id = current.cur_id
                 WHERE current.t - s.ts_ms <= ?5
             )
             SELECT t, cur_id, cur_ts,
                    (SELECT id FROM scrapes
                     WHERE target_id = ?4 AND up = 1 AND ts_ms <= MIN(t - ?2, cur_ts - 1)
                     ORDER BY ts_ms DESC LIMIT 1) AS prev_id
             FROM located ORDER BY t",
        )
        .bind(range.from_ms)
        .bind(range.step_ms)
        .bind(range.to_ms)
        .bind(target_id)
        .bind(STALENESS_MS)
        .fetch_all(&self.pool)
        .await?;
        let mut pairs: Vec<(i64, Option<i64>, i64)> = Vec::with_capacity(rows.len());
        for row in &rows {
            pairs.push((
                row.try_get("t")?,
                row.try_get("prev_id")?,
                row.try_get("cur_id")?,
            ));
        }
        let mut needed: Vec<i64> = pairs
            .iter()
            .flat_map(|(_, prev, cur)| prev.iter().chain(std::iter::once(cur)))
            .copied()
            .collect();
        needed.sort_unstable();
        needed.dedup();
        let decoded = self.samples_by_scrape_id(&needed, &wanted).await?;
        for (t, prev_id, cur_id) in pairs {
            let Some((cur_ts, cur_samples)) = decoded.get(&cur_id) else {
                continue;
            };
            let prev_snapshot = prev_id
                .and_then(|id| decoded.get(&id))
                .map(|(ts, samples)| snapshot(*ts, samples));
            let cur_ts = *cur_ts;
            let values = signals_between(prev_snapshot, snapshot(cur_ts, cur_samples));
            for (signal, points) in out.iter_mut() {
                if let Some((_, value)) = values.iter().find(|(s, _)| s == signal) {
                    points.push(Point {
                        ts_ms: t,
                        value: *value,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Every stored series of `metric` for a target over `[from, to]`, raw.
    pub async fn metric_series(
        &self,
        target_id: i64,
        metric: CatalogMetric,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<SeriesPoints>, StoreError> {
        let rows = sqlx::query(
            "SELECT ts_ms, samples FROM scrapes WHERE target_id = ? AND up = 1
             AND ts_ms BETWEEN ? AND ? ORDER BY ts_ms",
        )
        .bind(target_id)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        let cache = self
            .series
            .read()
            .map_err(poisoned)?
            .clone_defs_of(target_id, metric);
        let mut by_series: HashMap<u32, SeriesPoints> = HashMap::new();
        for row in &rows {
            let ts_ms: i64 = row.try_get("ts_ms")?;
            let Some(blob) = row.try_get::<Option<Vec<u8>>, _>("samples")? else {
                continue;
            };
            for (id, value) in codec::decode(&blob)? {
                if let Some(def) = cache.get(&id) {
                    by_series
                        .entry(id)
                        .or_insert_with(|| SeriesPoints {
                            metric: def.metric.name().to_string(),
                            labels: def.labels.clone(),
                            part: part_key(def.part),
                            points: Vec::new(),
                        })
                        .points
                        .push(Point { ts_ms, value });
                }
            }
        }
        let mut series: Vec<SeriesPoints> = by_series.into_values().collect();
        series.sort_by(|a, b| (&a.labels, &a.part).cmp(&(&b.labels, &b.part)));
        Ok(series)
    }

    /// Thins scrapes older than `before_ms` to one per `bucket_ms` per
    /// target and health (the earliest of each bucket; a down scrape is
    /// kept apart from the up ones, so outages stay visible). Signals stay
    /// right on thinned data: rates and quantiles diff whichever two scrapes
    /// bracket a step, whatever their gap (up to the staleness window,
    /// [`MAX_DOWNSAMPLE_BUCKET_MS`]). Idempotent; returns how many went.
    pub async fn downsample(&self, before_ms: i64, bucket_ms: i64) -> Result<u64, StoreError> {
        if !(1..=MAX_DOWNSAMPLE_BUCKET_MS).contains(&bucket_ms) {
            return Err(StoreError::BadRange(format!(
                "downsample bucket {bucket_ms} ms is outside 1..={MAX_DOWNSAMPLE_BUCKET_MS}"
            )));
        }
        self.downsample_in_chunks(before_ms, bucket_ms).await
    }

    /// Size of the database file in bytes (pages × page size).
    pub async fn size_bytes(&self) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT page_count * page_size AS bytes FROM pragma_page_count(), pragma_page_size()",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("bytes")?)
    }

    async fn samples_by_scrape_id(
        &self,
        ids: &[i64],
        wanted: &HashSet<CatalogMetric>,
    ) -> Result<HashMap<i64, (i64, Vec<NormalizedSample>)>, StoreError> {
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let placeholders = vec!["?"; chunk.len()].join(",");
            // Only placeholders are interpolated; every value is bound.
            let sql =
                format!("SELECT id, ts_ms, samples FROM scrapes WHERE id IN ({placeholders})");
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            for row in query.fetch_all(&self.pool).await? {
                let id: i64 = row.try_get("id")?;
                let ts_ms: i64 = row.try_get("ts_ms")?;
                let blob: Option<Vec<u8>> = row.try_get("samples")?;
                out.insert(
                    id,
                    (ts_ms, self.decode_samples_of(blob.as_deref(), wanted)?),
                );
            }
        }
        Ok(out)
    }

    /// Decodes only the samples of `wanted` metrics: a signal query touches a
    /// handful of a scrape's series, not all of them.
    fn decode_samples_of(
        &self,
        blob: Option<&[u8]>,
        wanted: &HashSet<CatalogMetric>,
    ) -> Result<Vec<NormalizedSample>, StoreError> {
        let Some(blob) = blob else {
            return Ok(Vec::new());
        };
        let pairs = codec::decode(blob)?;
        let cache = self.series.read().map_err(poisoned)?;
        Ok(pairs
            .into_iter()
            .filter(|(id, _)| cache.metric_of(*id).is_some_and(|m| wanted.contains(&m)))
            .filter_map(|(id, value)| cache.sample(id, value))
            .collect())
    }

    fn decode_samples(&self, blob: Option<&[u8]>) -> Result<Vec<NormalizedSample>, StoreError> {
        let Some(blob) = blob else {
            return Ok(Vec::new());
        };
        let pairs = codec::decode(blob)?;
        let cache = self.series.read().map_err(poisoned)?;
        Ok(pairs
            .into_iter()
            .filter_map(|(id, value)| cache.sample(id, value))
            .collect())
    }
}

fn snapshot(ts_ms: i64, samples: &[NormalizedSample]) -> Snapshot<'_> {
    Snapshot {
        ts: ts_ms as f64 / 1000.0,
        samples,
    }
}

fn series_id(id: i64) -> Result<u32, StoreError> {
    u32::try_from(id).map_err(|_| StoreError::Corrupt(format!("series id {id} out of range")))
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Corrupt("series index lock poisoned by a panic".into())
}

fn target_from_row(row: sqlx::sqlite::SqliteRow) -> Result<TargetRow, StoreError> {
    let kind: String = row.try_get("kind")?;
    Ok(TargetRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        kind: if kind == "gpu" {
            TargetKind::Gpu
        } else {
            TargetKind::Engine
        },
        url: row.try_get("url")?,
        engine: row.try_get("engine")?,
    })
}

/// Parses a signal name, for callers that take it from users.
pub fn parse_signal(name: &str) -> Option<Signal> {
    Signal::from_str(name).ok()
}

/// A database made before incremental vacuum was on is rewritten once
/// (`VACUUM`), so that from then on retention shrinks the file.
async fn ensure_incremental_vacuum(pool: &SqlitePool) -> Result<(), StoreError> {
    const INCREMENTAL: i64 = 2;
    let mode: i64 = sqlx::query("PRAGMA auto_vacuum")
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    if mode != INCREMENTAL {
        sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
            .execute(pool)
            .await?;
        sqlx::query("VACUUM").execute(pool).await?;
    }
    Ok(())
}
