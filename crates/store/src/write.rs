//! The write path: a batch of scrapes becomes head rows in one transaction,
//! and a target whose head is full has its oldest rows sealed into a block in
//! that same transaction, so a crash leaves either the rows or the block.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use llmwatch_core::redact::redact_urls_in;
use sqlx::{Row, Sqlite, Transaction};

use crate::block::{self, HeadRow, Health, BLOCK_SCRAPES};
use crate::series::{RawSample, SeriesCache, SeriesDef};
use crate::{codec, poisoned, series_id, ScrapeRecord, Store, StoreError};

/// A head older than this is sealed even when short (slow scrape intervals):
/// head rows are packed raw, blocks are what is small.
const HEAD_MAX_SPAN_MS: i64 = 3_600_000;
/// The newest scrapes stay in the head when a block is sealed, so "now"
/// reads head rows, never a whole block.
const HEAD_KEEP: usize = 2;

/// The series of a target's last scraped page, line by line.
#[derive(Debug, Default)]
pub(crate) struct PageShape {
    ids: Vec<u32>,
    /// The page's lines (their values are not used): a scrape that shares
    /// their names and labels is recognised by pointer.
    lines: Vec<RawSample>,
}

impl PageShape {
    /// Whether `raw` has the same lines in the same order.
    fn matches(&self, raw: &[RawSample]) -> bool {
        self.lines.len() == raw.len()
            && self
                .lines
                .iter()
                .zip(raw)
                .all(|(line, sample)| line.same_line(sample))
    }

    /// (series id, value) of every line of `raw`, a page of this shape.
    fn pairs<'a>(&'a self, raw: &'a [RawSample]) -> impl Iterator<Item = (u32, f64)> + 'a {
        self.ids
            .iter()
            .zip(raw)
            .map(|(id, sample)| (*id, sample.value))
    }
}

/// What the store knows of a target's head without reading it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Head {
    pub rows: usize,
    pub oldest_ms: i64,
    pub newest_ms: i64,
}

impl Head {
    fn add(&mut self, ts_ms: i64) {
        if self.rows == 0 {
            (self.oldest_ms, self.newest_ms) = (ts_ms, ts_ms);
        } else {
            self.oldest_ms = self.oldest_ms.min(ts_ms);
            self.newest_ms = self.newest_ms.max(ts_ms);
        }
        self.rows += 1;
    }

    /// How many of the oldest rows a full head seals.
    fn seal_count(&self) -> usize {
        self.rows.saturating_sub(HEAD_KEEP).min(BLOCK_SCRAPES)
    }

    fn full(&self) -> bool {
        self.rows >= BLOCK_SCRAPES + HEAD_KEEP
            || (self.rows > HEAD_KEEP && self.newest_ms - self.oldest_ms >= HEAD_MAX_SPAN_MS)
    }
}

impl Store {
    /// Writes a batch of scrapes in one transaction: new series first, then one
    /// head row per scrape, then a block for every head that filled up.
    /// Returns the number of samples written.
    pub async fn write_scrapes(&self, batch: &[ScrapeRecord]) -> Result<u64, StoreError> {
        let _writer = self.write_lock.lock().await;
        let mut tx = self.begin_write().await?;
        let mut new_series = SeriesCache::default();
        let mut heads = self.heads.lock().map_err(poisoned)?.clone();
        let mut written = 0u64;
        let mut touched = BTreeSet::new();
        // Engines this batch writes join the known ones after the commit.
        let stored_engines = self.engines.lock().map_err(poisoned)?.clone();
        let mut engines: HashMap<i64, String> = HashMap::new();
        let mut shapes = self.shapes.lock().map_err(poisoned)?.clone();
        let mut rows: Vec<HeadRowInsert> = Vec::with_capacity(batch.len());
        for scrape in batch {
            let pairs = self
                .series_ids(&mut tx, scrape, &mut new_series, &mut shapes)
                .await?;
            rows.push((
                scrape,
                scrape.up.then(|| codec::encode(&pairs)),
                pairs.len(),
            ));
            if let Some(engine) = &scrape.engine {
                let known = engines
                    .get(&scrape.target_id)
                    .or_else(|| stored_engines.get(&scrape.target_id));
                if known != Some(engine) {
                    sqlx::query("UPDATE targets SET engine = ? WHERE id = ? AND engine IS NOT ?")
                        .bind(engine)
                        .bind(scrape.target_id)
                        .bind(engine)
                        .execute(&mut *tx)
                        .await?;
                    engines.insert(scrape.target_id, engine.clone());
                }
            }
            heads.entry(scrape.target_id).or_default().add(scrape.ts_ms);
            touched.insert(scrape.target_id);
            written += pairs.len() as u64;
        }
        while !rows.is_empty() {
            let chunk: Vec<HeadRowInsert> =
                rows.drain(..rows.len().min(HEAD_ROWS_PER_INSERT)).collect();
            insert_head_rows(&mut tx, chunk).await?;
        }
        for target in touched {
            while let Some(head) = heads.get_mut(&target).filter(|head| head.full()) {
                *head = self
                    .seal_oldest(&mut tx, target, head.seal_count(), &new_series)
                    .await?;
            }
        }
        tx.commit().await?;
        self.series.write().map_err(poisoned)?.absorb(new_series);
        *self.heads.lock().map_err(poisoned)? = heads;
        self.engines.lock().map_err(poisoned)?.extend(engines);
        *self.shapes.lock().map_err(poisoned)? = shapes;
        Ok(written)
    }

    /// The series id of every sample of `scrape`, registering new series
    /// (in the database and in `new_series`, which joins the index after
    /// the commit). A page's lines come in the same order scrape after
    /// scrape, so each raw line is first compared with the series at its
    /// place in the target's last page (`shapes`); only lines that moved or
    /// are new are looked up by hash.
    async fn series_ids(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        scrape: &ScrapeRecord,
        new_series: &mut SeriesCache,
        shapes: &mut HashMap<i64, Arc<PageShape>>,
    ) -> Result<Vec<(u32, f64)>, StoreError> {
        let target = scrape.target_id;
        let mut pairs = Vec::with_capacity(scrape.raw.len() + scrape.samples.len());
        let mut raw_ids: Vec<Option<u32>> = Vec::new();
        let mut missing_catalog = Vec::new();
        let shape = shapes.get(&target).map(Arc::clone);
        let same_shape = shape
            .as_deref()
            .is_some_and(|shape| shape.matches(&scrape.raw));
        if same_shape {
            if let Some(shape) = &shape {
                pairs.extend(shape.pairs(&scrape.raw));
            }
        }
        {
            let cache = self.series.read().map_err(poisoned)?;
            if !same_shape {
                raw_ids = scrape
                    .raw
                    .iter()
                    .map(|sample| cache.id_of_raw(target, sample))
                    .collect();
            }
            for (i, sample) in scrape.samples.iter().enumerate() {
                match cache.id_of_catalog(target, sample) {
                    Some(id) => pairs.push((id, sample.value)),
                    None => missing_catalog.push(i),
                }
            }
        }
        if !same_shape {
            for (slot, sample) in raw_ids.iter_mut().zip(&scrape.raw) {
                if slot.is_none() {
                    *slot = Some(match new_series.id_of_raw(target, sample) {
                        Some(id) => id,
                        None => {
                            insert_series(tx, SeriesDef::raw(target, sample), new_series).await?
                        }
                    });
                }
            }
            let ids = raw_ids
                .into_iter()
                .map(|id| id.ok_or_else(|| StoreError::Corrupt("a line without a series".into())))
                .collect::<Result<Vec<u32>, StoreError>>()?;
            let shape = PageShape {
                ids,
                lines: scrape.raw.clone(),
            };
            pairs.extend(shape.pairs(&scrape.raw));
            shapes.insert(target, Arc::new(shape));
        }
        for i in missing_catalog {
            let sample = &scrape.samples[i];
            let id = match new_series.id_of_catalog(target, sample) {
                Some(id) => id,
                None => insert_series(tx, SeriesDef::catalog(target, sample), new_series).await?,
            };
            pairs.push((id, sample.value));
        }
        Ok(pairs)
    }

    /// Seals the `count` oldest head rows of `target` into a block and
    /// returns what is left of the head.
    async fn seal_oldest(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        target: i64,
        count: usize,
        new_series: &SeriesCache,
    ) -> Result<Head, StoreError> {
        let rows = sqlx::query(
            "SELECT id, ts_ms, up, duration_ms, body_bytes, error, sample_count, samples
             FROM scrapes WHERE target_id = ? ORDER BY ts_ms, id LIMIT ?",
        )
        .bind(target)
        .bind(i64::try_from(count).unwrap_or(i64::MAX))
        .fetch_all(&mut **tx)
        .await?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut head_rows = Vec::with_capacity(rows.len());
        for row in &rows {
            ids.push(row.try_get::<i64, _>("id")?);
            head_rows.push(HeadRow {
                health: health_of(row)?,
                samples: row.try_get("samples")?,
            });
        }
        if !head_rows.is_empty() {
            let sealed = {
                let cache = self.series.read().map_err(poisoned)?;
                block::seal(&head_rows, |id| {
                    cache.name_of(id).or_else(|| new_series.name_of(id))
                })?
            };
            insert_block(tx, target, &sealed).await?;
            for chunk in ids.chunks(500) {
                let placeholders = vec!["?"; chunk.len()].join(",");
                let sql = format!("DELETE FROM scrapes WHERE id IN ({placeholders})");
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(*id);
                }
                query.execute(&mut **tx).await?;
            }
        }
        head_of(&mut **tx, target).await
    }

    /// Seals every full head (a database of the older layout has all its
    /// scrapes there), a block per transaction, and loads the heads.
    pub(crate) async fn seal_backlog(&self) -> Result<(), StoreError> {
        self.seal_heads_where(Head::full).await
    }

    /// Seals every head, whatever its size: on a clean shutdown, so what
    /// stays on disk is compressed. Scrapes written later start a new head.
    pub async fn seal_heads(&self) -> Result<(), StoreError> {
        self.seal_heads_where(|head| head.rows > 0).await
    }

    /// Re-reads what is left of `target`'s head after rows were deleted.
    pub(crate) async fn refresh_head(&self, target: i64) -> Result<(), StoreError> {
        let _writer = self.write_lock.lock().await;
        let head = head_of(&self.pool, target).await?;
        self.heads.lock().map_err(poisoned)?.insert(target, head);
        Ok(())
    }

    async fn seal_heads_where(&self, seal: impl Fn(&Head) -> bool) -> Result<(), StoreError> {
        let targets: Vec<i64> = sqlx::query("SELECT DISTINCT target_id FROM scrapes")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| row.try_get::<i64, _>(0))
            .collect::<Result<_, _>>()?;
        let empty = SeriesCache::default();
        for target in targets {
            let _writer = self.write_lock.lock().await;
            let mut head = head_of(&self.pool, target).await?;
            while head.rows > 0 && seal(&head) {
                let count = if head.full() {
                    head.seal_count()
                } else {
                    head.rows
                };
                let before = head.rows;
                let mut tx = self.begin_write().await?;
                head = self.seal_oldest(&mut tx, target, count, &empty).await?;
                tx.commit().await?;
                if head.rows >= before {
                    break;
                }
            }
            self.heads.lock().map_err(poisoned)?.insert(target, head);
        }
        Ok(())
    }
}

async fn insert_series(
    tx: &mut Transaction<'_, Sqlite>,
    def: SeriesDef,
    new_series: &mut SeriesCache,
) -> Result<u32, StoreError> {
    let row = sqlx::query(
        "INSERT INTO series (target_id, metric, labels, part) VALUES (?, ?, ?, ?) RETURNING id",
    )
    .bind(def.target_id)
    .bind(&def.name)
    .bind(def.labels_column())
    .bind(def.part_column())
    .fetch_one(&mut **tx)
    .await?;
    let id = series_id(row.try_get("id")?)?;
    new_series.insert(id, def);
    Ok(id)
}

/// A scrape, its packed samples (none when down) and their count.
type HeadRowInsert<'a> = (&'a ScrapeRecord, Option<Vec<u8>>, usize);

/// Head rows per INSERT statement (8 bound values each; SQLite allows 32 766).
const HEAD_ROWS_PER_INSERT: usize = 200;

/// Inserts head rows with one statement: a round of many targets costs one
/// trip to SQLite's thread, not one per scrape.
async fn insert_head_rows(
    tx: &mut Transaction<'_, Sqlite>,
    rows: Vec<HeadRowInsert<'_>>,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; rows.len()].join(", ");
    // Only placeholders are interpolated; every value is bound.
    let sql = format!(
        "INSERT INTO scrapes (target_id, ts_ms, up, duration_ms, body_bytes, error, sample_count, samples)
         VALUES {values}"
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (scrape, blob, count) in rows {
        query = query
            .bind(scrape.target_id)
            .bind(scrape.ts_ms)
            .bind(scrape.up)
            .bind(scrape.duration_ms)
            .bind(i64::try_from(scrape.body_bytes).unwrap_or(i64::MAX))
            .bind(scrape.error.as_deref().map(redact_urls_in))
            .bind(i64::try_from(count).unwrap_or(i64::MAX))
            .bind(blob);
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

pub(crate) async fn insert_block(
    tx: &mut Transaction<'_, Sqlite>,
    target: i64,
    sealed: &block::Sealed,
) -> Result<i64, StoreError> {
    let block_id: i64 = sqlx::query(
        "INSERT INTO blocks (target_id, first_ms, last_ms, last_up_ms, scrape_count, up_count,
                             sample_count, health)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(target)
    .bind(sealed.first_ms)
    .bind(sealed.last_ms)
    .bind(sealed.last_up_ms)
    .bind(i64::try_from(sealed.scrape_count).unwrap_or(i64::MAX))
    .bind(i64::try_from(sealed.up_count).unwrap_or(i64::MAX))
    .bind(i64::try_from(sealed.sample_count).unwrap_or(i64::MAX))
    .bind(&sealed.health)
    .fetch_one(&mut **tx)
    .await?
    .try_get(0)?;
    for (name, data) in &sealed.groups {
        sqlx::query("INSERT INTO block_groups (block_id, name, data) VALUES (?, ?, ?)")
            .bind(block_id)
            .bind(name)
            .bind(data)
            .execute(&mut **tx)
            .await?;
    }
    Ok(block_id)
}

/// A head row's health columns.
pub(crate) fn health_of(row: &sqlx::sqlite::SqliteRow) -> Result<Health, StoreError> {
    Ok(Health {
        ts_ms: row.try_get("ts_ms")?,
        up: row.try_get("up")?,
        duration_ms: row.try_get("duration_ms")?,
        body_bytes: u64::try_from(row.try_get::<i64, _>("body_bytes")?).unwrap_or(0),
        error: row.try_get("error")?,
        sample_count: u64::try_from(row.try_get::<i64, _>("sample_count")?).unwrap_or(0),
    })
}

async fn head_of<'e>(
    executor: impl sqlx::Executor<'e, Database = Sqlite>,
    target: i64,
) -> Result<Head, StoreError> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, MIN(ts_ms) AS oldest, MAX(ts_ms) AS newest
         FROM scrapes WHERE target_id = ?",
    )
    .bind(target)
    .fetch_one(executor)
    .await?;
    Ok(Head {
        rows: usize::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0),
        oldest_ms: row.try_get::<Option<i64>, _>("oldest")?.unwrap_or(0),
        newest_ms: row.try_get::<Option<i64>, _>("newest")?.unwrap_or(0),
    })
}
