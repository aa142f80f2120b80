//! llmwatch's storage: SQLite (WAL) through sqlx. Targets, every series of
//! every scraped page (names and labels as the server wrote them), scrapes
//! with their health, and the queries the API and pages need (latest
//! signals, a signal's series over a range, raw series, a whole stored page).
//!
//! Layout: the newest scrapes of a target are head rows of `scrapes`
//! (samples packed raw, see [`codec`]); every [`BLOCK_SCRAPES`] of them are
//! sealed into one compressed block (see [`block`](crate::block)). Writes are
//! batched: [`Store::write_scrapes`] commits a whole batch, and any seal it
//! causes, in one transaction. Signals are derived at query time: raw series
//! go through the catalog's `normalize`, then `signals_between`.
//!
//! It must never do network I/O: no socket, no HTTP; its only I/O is the
//! SQLite database file (and its WAL). What the data means is core's to say.

mod alerts;
mod block;
mod cache;
pub mod codec;
mod experiments;
mod export;
mod lifecycle;
mod live;
mod probe_cache;
mod probes;
pub mod prom_source;
mod read;
mod series;
mod stats;
mod sweeps;
mod write;

use llmwatch_core::redact::redact_url;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use llmwatch_core::catalog::NormalizedSample;
use llmwatch_core::signals::Signal;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};

pub use alerts::{AlertChanges, AlertEventRow, AlertRow};
pub use block::BLOCK_SCRAPES;
pub use cache::DEFAULT_CACHE_BYTES;
pub use experiments::ExperimentRow;
pub use export::{ExportCursor, ExportedProbe, ExportedScrape, RemoteWriteCursor};
pub use lifecycle::{Pruned, RetentionCutoffs};
pub use live::{LiveChangeRow, LiveVerdictRow};
pub use probe_cache::DEFAULT_PROBE_CACHE_BYTES;
pub use probes::{is_probe_signal, ProbeOrigin, ProbeRow, ServerTimingRow};
pub use prom_source::{PromLabels, PromLimits, PromSeries, PromSourceError};
pub use read::{RawSeries, StoredPage};
use series::SeriesCache;
pub use series::{parse_part_key, part_key, RawSample, SeriesDef, SeriesKind};
pub use stats::{DbStats, TargetStats};
pub use sweeps::{NewSweep, SweepEnd, SweepRow, SweepSpan, SweepStatus, SweepStepRow};

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
    /// The target's labels (service discovery, or `labels` in its config),
    /// attached to its series as Prometheus attaches target labels.
    pub labels: BTreeMap<String, String>,
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
    /// Catalog samples given normalised (NVML readings); a scraped page
    /// leaves this empty and gives its lines in `raw`.
    pub samples: Vec<NormalizedSample>,
    /// Every sample line of the page, as the server wrote it.
    pub raw: Vec<RawSample>,
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

pub use llmwatch_core::staleness::MAX_DOWNSAMPLE_BUCKET_MS;
pub(crate) use llmwatch_core::staleness::STALENESS_MS;

/// The store: a pool of SQLite connections plus the in-memory series index.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    series: Arc<RwLock<SeriesCache>>,
    write_lock: Arc<tokio::sync::Mutex<()>>,
    /// Per target, the time before which scrapes are already thinned (this
    /// process's memory: a restart thins from the oldest once more).
    thinned_until: Arc<std::sync::Mutex<std::collections::HashMap<i64, i64>>>,
    /// Per target, the head rows not yet sealed (count, oldest time).
    heads: Arc<std::sync::Mutex<HashMap<i64, write::Head>>>,
    /// Per target, the engine last stored in `targets.engine` (so a scrape
    /// writes it only when it changes, and reads need not ask SQLite).
    engines: Arc<std::sync::Mutex<HashMap<i64, String>>>,
    /// Per target, the series of its last page line by line (ingest's
    /// fast path: the next page is compared, not hashed).
    shapes: Arc<std::sync::Mutex<HashMap<i64, Arc<write::PageShape>>>>,
    /// Decoded block groups, for range queries that come again.
    cache: Arc<cache::GroupCache>,
    /// Decoded canary timings per target and hour.
    probe_cache: Arc<probe_cache::ProbeCache>,
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
            heads: Arc::default(),
            engines: Arc::default(),
            cache: Arc::default(),
            probe_cache: Arc::default(),
            shapes: Arc::default(),
        };
        store.load_series().await?;
        // Moves a database of an older layout (every scrape a head row) into
        // blocks; on a current one this only counts the heads.
        store.seal_backlog().await?;
        Ok(store)
    }

    /// Sets the memory the cache of decoded blocks may use (default
    /// [`DEFAULT_CACHE_BYTES`]; 0 turns it off).
    pub fn set_block_cache_bytes(&self, bytes: usize) {
        self.cache.set_budget(bytes);
    }

    /// The underlying pool, for the other stores of the binary (probes, runs).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// A write transaction that takes SQLite's write lock at once
    /// (`BEGIN IMMEDIATE`). A deferred one that reads and then writes cannot
    /// wait for the lock: when another connection committed after its read,
    /// SQLite answers `SQLITE_BUSY_SNAPSHOT` at once, whatever the busy
    /// timeout (the live diagnosis failed so with "database is locked"
    /// beside the demo's sweep).
    pub(crate) async fn begin_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }

    async fn load_series(&self) -> Result<(), StoreError> {
        let rows = sqlx::query("SELECT id, target_id, metric, labels, part FROM series")
            .fetch_all(&self.pool)
            .await?;
        let mut cache = SeriesCache::default();
        for row in rows {
            let id: i64 = row.try_get("id")?;
            let metric: String = row.try_get("metric")?;
            let labels: String = row.try_get("labels")?;
            let part: String = row.try_get("part")?;
            let def = SeriesDef::from_columns(row.try_get("target_id")?, &metric, &labels, &part)
                // A catalog metric this build does not know keeps its values
                // readable as a raw series of that name.
                .or_else(|| {
                    SeriesDef::from_columns(row.try_get("target_id").ok()?, &metric, &labels, "raw")
                });
            if let Some(def) = def {
                cache.insert(series_id(id)?, def);
            }
        }
        *self.series.write().map_err(poisoned)? = cache;
        // Page shapes name series by id: they are rebuilt from the new index.
        self.shapes.lock().map_err(poisoned)?.clear();
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

    /// Replaces a target's labels (see [`TargetRow::labels`]).
    pub async fn set_target_labels(
        &self,
        id: i64,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(labels)
            .map_err(|e| StoreError::Corrupt(format!("target labels: {e}")))?;
        sqlx::query("UPDATE targets SET labels_json = ? WHERE id = ?")
            .bind(json)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Every target, by name.
    pub async fn targets(&self) -> Result<Vec<TargetRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, kind, url, engine, labels_json FROM targets ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(target_from_row).collect()
    }

    /// One target by name.
    pub async fn target_by_name(&self, name: &str) -> Result<Option<TargetRow>, StoreError> {
        let row = sqlx::query(
            "SELECT id, name, kind, url, engine, labels_json FROM targets WHERE name = ?",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(target_from_row).transpose()
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
        labels: serde_json::from_str(&row.try_get::<String, _>("labels_json")?).map_err(|e| {
            StoreError::Corrupt(format!(
                "targets.labels_json is not a JSON object of strings: {e}"
            ))
        })?,
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
