//! Every table's lifecycle: retention in small batches that never hold the
//! writer for long (a scrape batch waits at most one batch), orphaned series,
//! and giving freed pages back to the file system, so the database stops
//! growing once retention is reached.

use std::collections::HashMap;

use sqlx::Row;

use crate::block::{self, HeadRow, Health};
use crate::write::insert_block;
use crate::{codec, Store, StoreError, MAX_DOWNSAMPLE_BUCKET_MS};

/// Rows deleted per transaction: small enough that a waiting scrape write
/// is never held up for long.
const BATCH_ROWS: i64 = 500;
/// Blocks deleted per transaction (each is up to an hour of a target).
const BATCH_BLOCKS: i64 = 4;
/// Free pages returned to the file system per step.
const VACUUM_PAGES: i64 = 500;

/// What one maintenance pass removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub scrapes: u64,
    pub probes: u64,
    pub sweeps: u64,
    pub alert_events: u64,
    /// Live-verdict changes past the alert-history retention, and the
    /// standing verdicts of removed targets.
    pub live_verdicts: u64,
    pub series: u64,
    pub freed_pages: u64,
}

/// The cut-offs of one maintenance pass (Unix ms): rows older go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionCutoffs {
    pub scrapes_before_ms: i64,
    pub probes_before_ms: i64,
    pub sweeps_before_ms: i64,
    /// Alert events and the live-verdict timeline (both are the history of
    /// what the daemon concluded about a target).
    pub alert_events_before_ms: i64,
}

impl Store {
    /// Applies every retention, removes the series of targets no longer
    /// configured (`active_targets`) that have no scrape left, and returns
    /// freed pages to the file system.
    pub async fn run_retention(
        &self,
        cutoffs: &RetentionCutoffs,
        active_targets: &[i64],
    ) -> Result<Pruned, StoreError> {
        let mut pruned = Pruned {
            scrapes: self.prune(cutoffs.scrapes_before_ms).await?,
            ..Pruned::default()
        };
        pruned.probes = self
            .delete_in_batches(
                "DELETE FROM probes WHERE id IN \
                 (SELECT id FROM probes WHERE target_id = ?1 AND ts_ms < ?2 LIMIT ?3)",
                cutoffs.probes_before_ms,
                true,
            )
            .await?;
        if pruned.probes > 0 {
            self.probe_cache.clear();
        }
        pruned.sweeps = self
            .delete_in_batches(
                "DELETE FROM sweeps WHERE id IN \
                 (SELECT id FROM sweeps WHERE ?1 = ?1 AND started_ms < ?2 \
                  AND status != 'running' ORDER BY started_ms LIMIT ?3)",
                cutoffs.sweeps_before_ms,
                false,
            )
            .await?;
        pruned.alert_events = self
            .delete_in_batches(
                "DELETE FROM alert_events WHERE id IN \
                 (SELECT id FROM alert_events WHERE ?1 = ?1 AND ts_ms < ?2 ORDER BY ts_ms LIMIT ?3)",
                cutoffs.alert_events_before_ms,
                false,
            )
            .await?;
        pruned.live_verdicts = self
            .delete_in_batches(
                "DELETE FROM live_verdict_changes WHERE id IN \
                 (SELECT id FROM live_verdict_changes WHERE target_id = ?1 AND ts_ms < ?2 LIMIT ?3)",
                cutoffs.alert_events_before_ms,
                true,
            )
            .await?;
        pruned.live_verdicts += self.prune_removed_verdicts(active_targets).await?;
        pruned.series = self.prune_orphan_series(active_targets).await?;
        pruned.freed_pages = self.vacuum_free_pages().await?;
        Ok(pruned)
    }

    /// Deletes old scrapes, target by target: head rows through the
    /// `(target_id, ts_ms)` index a batch per transaction, whole blocks a few
    /// per transaction, and the scrapes of a block that straddles the
    /// cut-off by rewriting that block.
    pub async fn prune(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut pruned = self
            .delete_in_batches(
                "DELETE FROM scrapes WHERE id IN \
                 (SELECT id FROM scrapes WHERE target_id = ?1 AND ts_ms < ?2 LIMIT ?3)",
                before_ms,
                true,
            )
            .await?;
        for target in self.target_ids().await? {
            loop {
                let _writer = self.write_lock.lock().await;
                let rows = sqlx::query(
                    "SELECT id, scrape_count FROM blocks WHERE target_id = ? AND last_ms < ? LIMIT ?",
                )
                .bind(target)
                .bind(before_ms)
                .bind(BATCH_BLOCKS)
                .fetch_all(&self.pool)
                .await?;
                if rows.is_empty() {
                    break;
                }
                let mut tx = self.begin_write().await?;
                // Cleared before and after: a block id may be reused.
                self.cache.clear();
                for row in &rows {
                    sqlx::query("DELETE FROM blocks WHERE id = ?")
                        .bind(row.try_get::<i64, _>("id")?)
                        .execute(&mut *tx)
                        .await?;
                    pruned += u64::try_from(row.try_get::<i64, _>("scrape_count")?).unwrap_or(0);
                }
                tx.commit().await?;
                self.cache.clear();
                drop(_writer);
                tokio::task::yield_now().await;
            }
            let straddling: Vec<i64> = sqlx::query(
                "SELECT id FROM blocks WHERE target_id = ?1 AND first_ms < ?2 AND last_ms >= ?2",
            )
            .bind(target)
            .bind(before_ms)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| row.try_get::<i64, _>("id"))
            .collect::<Result<_, _>>()?;
            for block in straddling {
                let _writer = self.write_lock.lock().await;
                pruned += self
                    .rewrite_block(block, |entries| {
                        entries.iter().map(|e| e.ts_ms >= before_ms).collect()
                    })
                    .await?;
            }
            self.refresh_head(target).await?;
        }
        Ok(pruned)
    }

    /// Every target id.
    async fn target_ids(&self) -> Result<Vec<i64>, StoreError> {
        Ok(sqlx::query("SELECT id FROM targets")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| row.try_get::<i64, _>("id"))
            .collect::<Result<_, _>>()?)
    }

    /// Keeps the scrapes of a block that `keep` marks (one flag per scrape,
    /// in the block's order), re-encoding it; a block left empty goes.
    /// Returns how many scrapes went. The caller holds the writer lock.
    pub(crate) async fn rewrite_block(
        &self,
        block_id: i64,
        keep: impl FnOnce(&[Health]) -> Vec<bool>,
    ) -> Result<u64, StoreError> {
        let Some(row) = sqlx::query("SELECT target_id, up_count, health FROM blocks WHERE id = ?")
            .bind(block_id)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(0);
        };
        let target: i64 = row.try_get("target_id")?;
        let positions = usize::try_from(row.try_get::<i64, _>("up_count")?).unwrap_or(0);
        let entries = block::decode_health(&row.try_get::<Vec<u8>, _>("health")?)?;
        let kept = keep(&entries);
        let removed = kept.iter().filter(|k| !**k).count() as u64;
        if removed == 0 {
            return Ok(0);
        }
        let mut names: HashMap<u32, String> = HashMap::new();
        let mut by_position: Vec<Vec<(u32, f64)>> = vec![Vec::new(); positions];
        for group in sqlx::query("SELECT name, data FROM block_groups WHERE block_id = ?")
            .bind(block_id)
            .fetch_all(&self.pool)
            .await?
        {
            let name: String = group.try_get("name")?;
            let data: Vec<u8> = group.try_get("data")?;
            for (id, values) in block::decode_group(&data, positions, |_| true)? {
                names.insert(id, name.clone());
                for (pos, value) in values.into_iter().enumerate() {
                    if let (Some(value), Some(slot)) = (value, by_position.get_mut(pos)) {
                        slot.push((id, value));
                    }
                }
            }
        }
        let mut rows = Vec::new();
        let mut pos = 0;
        for (health, keep) in entries.into_iter().zip(kept) {
            let samples = if health.up {
                pos += 1;
                by_position.get(pos - 1).map(|pairs| codec::encode(pairs))
            } else {
                None
            };
            if keep {
                rows.push(HeadRow { health, samples });
            }
        }
        let mut tx = self.begin_write().await?;
        // Cleared before and after: the new block may get the old one's id.
        self.cache.clear();
        sqlx::query("DELETE FROM blocks WHERE id = ?")
            .bind(block_id)
            .execute(&mut *tx)
            .await?;
        if !rows.is_empty() {
            let sealed = block::seal(&rows, |id| names.get(&id).map(String::as_str))?;
            insert_block(&mut tx, target, &sealed).await?;
        }
        tx.commit().await?;
        self.cache.clear();
        Ok(removed)
    }

    /// Runs `sql` (binding target id or a dummy, the cut-off and the batch
    /// size) until it deletes less than a batch; the writer lock is taken
    /// per batch, so scrape writes slip in between.
    async fn delete_in_batches(
        &self,
        sql: &'static str,
        before_ms: i64,
        per_target: bool,
    ) -> Result<u64, StoreError> {
        let targets: Vec<i64> = if per_target {
            sqlx::query("SELECT id FROM targets")
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|row| row.try_get::<i64, _>("id"))
                .collect::<Result<_, _>>()?
        } else {
            vec![0]
        };
        let mut deleted = 0;
        for target in targets {
            loop {
                let done = {
                    let _writer = self.write_lock.lock().await;
                    sqlx::query(sql)
                        .bind(target)
                        .bind(before_ms)
                        .bind(BATCH_ROWS)
                        .execute(&self.pool)
                        .await?
                        .rows_affected()
                };
                deleted += done;
                if done < BATCH_ROWS as u64 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        Ok(deleted)
    }

    /// Thins scrapes older than `before_ms` to one per `bucket_ms` per
    /// target and health (the earliest of each bucket; a down scrape is
    /// kept apart from the up ones, so outages stay visible). Signals stay
    /// right on thinned data: rates and quantiles diff whichever two scrapes
    /// bracket a step, whatever their gap (up to the staleness window,
    /// [`MAX_DOWNSAMPLE_BUCKET_MS`]). Idempotent; returns how many went.
    /// Optional: compressed blocks make full resolution cheap.
    pub async fn downsample(&self, before_ms: i64, bucket_ms: i64) -> Result<u64, StoreError> {
        if !(1..=MAX_DOWNSAMPLE_BUCKET_MS).contains(&bucket_ms) {
            return Err(StoreError::BadRange(format!(
                "downsample bucket {bucket_ms} ms is outside 1..={MAX_DOWNSAMPLE_BUCKET_MS}"
            )));
        }
        self.downsample_in_chunks(before_ms, bucket_ms).await
    }

    /// Thins scrapes older than `before_ms` to one per `bucket_ms` per
    /// target and health, an hour (of whole buckets) per transaction,
    /// starting where the last pass of this process stopped. Only hours that
    /// hold head rows are visited: a `before_ms` far past the data (or data
    /// far older than the cutoff) costs nothing per empty hour.
    pub(crate) async fn downsample_in_chunks(
        &self,
        before_ms: i64,
        bucket_ms: i64,
    ) -> Result<u64, StoreError> {
        let chunk_ms = bucket_ms * (3_600_000 / bucket_ms).max(1);
        let targets: Vec<i64> = sqlx::query_scalar("SELECT id FROM targets")
            .fetch_all(&self.pool)
            .await?;
        let mut deleted = 0;
        for target in targets {
            let done_until = self.thinned_until(target);
            let mut from = done_until.unwrap_or(i64::MIN);
            while let Some(oldest) = self.first_head_scrape(target, from, before_ms).await? {
                let start = oldest - oldest.rem_euclid(bucket_ms);
                let end = start.saturating_add(chunk_ms).min(before_ms);
                let _writer = self.write_lock.lock().await;
                // SQLite fills a bare column from the row MIN() picked.
                deleted += sqlx::query(
                    "DELETE FROM scrapes WHERE target_id = ?1 AND ts_ms >= ?2 AND ts_ms < ?3 \
                     AND id NOT IN (SELECT id FROM (SELECT id, MIN(ts_ms) FROM scrapes \
                     WHERE target_id = ?1 AND ts_ms >= ?2 AND ts_ms < ?3 GROUP BY up, ts_ms / ?4))",
                )
                .bind(target)
                .bind(start)
                .bind(end)
                .bind(bucket_ms)
                .execute(&self.pool)
                .await?
                .rows_affected();
                drop(_writer);
                from = end;
                tokio::task::yield_now().await;
            }
            deleted += self
                .thin_blocks(target, done_until.unwrap_or(i64::MIN), before_ms, bucket_ms)
                .await?;
            self.refresh_head(target).await?;
            // The last, partial bucket is thinned again next time.
            self.set_thinned_until(target, before_ms - before_ms.rem_euclid(bucket_ms));
        }
        Ok(deleted)
    }

    /// The oldest head scrape of `target` in `[from_ms, before_ms)`.
    async fn first_head_scrape(
        &self,
        target: i64,
        from_ms: i64,
        before_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(ts_ms) FROM scrapes WHERE target_id = ? AND ts_ms >= ? AND ts_ms < ?",
        )
        .bind(target)
        .bind(from_ms)
        .bind(before_ms)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Thins the blocks of `target` that end in `[from, before)`: in each,
    /// the earliest scrape of every bucket and health is kept.
    async fn thin_blocks(
        &self,
        target: i64,
        from_ms: i64,
        before_ms: i64,
        bucket_ms: i64,
    ) -> Result<u64, StoreError> {
        let blocks: Vec<i64> = sqlx::query(
            "SELECT id FROM blocks WHERE target_id = ? AND last_ms >= ? AND last_ms < ? ORDER BY last_ms",
        )
        .bind(target)
        .bind(from_ms)
        .bind(before_ms)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| row.try_get::<i64, _>("id"))
        .collect::<Result<_, _>>()?;
        let mut deleted = 0;
        for block in blocks {
            let _writer = self.write_lock.lock().await;
            deleted += self
                .rewrite_block(block, |entries| {
                    let mut seen = std::collections::HashSet::new();
                    let mut order: Vec<usize> = (0..entries.len()).collect();
                    order.sort_by_key(|i| entries[*i].ts_ms);
                    let mut keep = vec![false; entries.len()];
                    for i in order {
                        let e = &entries[i];
                        keep[i] = seen.insert((e.up, e.ts_ms.div_euclid(bucket_ms)));
                    }
                    keep
                })
                .await?;
            drop(_writer);
            tokio::task::yield_now().await;
        }
        Ok(deleted)
    }

    fn thinned_until(&self, target: i64) -> Option<i64> {
        self.thinned_until.lock().ok()?.get(&target).copied()
    }

    fn set_thinned_until(&self, target: i64, until: i64) {
        if let Ok(mut map) = self.thinned_until.lock() {
            map.insert(target, until);
        }
    }

    /// Deletes the series of targets that are not configured any more and
    /// have no scrape left (their history has aged out).
    async fn prune_orphan_series(&self, active_targets: &[i64]) -> Result<u64, StoreError> {
        let _writer = self.write_lock.lock().await;
        let candidates: Vec<i64> = sqlx::query(
            "SELECT t.id FROM targets t WHERE NOT EXISTS \
             (SELECT 1 FROM scrapes s WHERE s.target_id = t.id) \
             AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.target_id = t.id)",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| row.try_get::<i64, _>("id"))
        .collect::<Result<_, _>>()?;
        let mut deleted = 0;
        for target in candidates.iter().filter(|t| !active_targets.contains(t)) {
            deleted += sqlx::query("DELETE FROM series WHERE target_id = ?")
                .bind(target)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        if deleted > 0 {
            self.load_series().await?;
        }
        Ok(deleted)
    }

    /// Drops the standing verdict of every target no longer configured: it
    /// would otherwise stay "current" forever.
    async fn prune_removed_verdicts(&self, active_targets: &[i64]) -> Result<u64, StoreError> {
        let _writer = self.write_lock.lock().await;
        let standing: Vec<i64> = sqlx::query("SELECT target_id FROM live_verdict_now")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| row.try_get::<i64, _>("target_id"))
            .collect::<Result<_, _>>()?;
        let mut deleted = 0;
        for target in standing.iter().filter(|t| !active_targets.contains(t)) {
            deleted += sqlx::query("DELETE FROM live_verdict_now WHERE target_id = ?")
                .bind(target)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        Ok(deleted)
    }

    /// How many series the store names for `target_id`.
    pub async fn series_count(&self, target_id: i64) -> Result<i64, StoreError> {
        Ok(
            sqlx::query("SELECT COUNT(*) FROM series WHERE target_id = ?")
                .bind(target_id)
                .fetch_one(&self.pool)
                .await?
                .try_get(0)?,
        )
    }

    /// Returns free pages to the file system (the database is in
    /// `auto_vacuum = INCREMENTAL` mode), a step at a time.
    async fn vacuum_free_pages(&self) -> Result<u64, StoreError> {
        let mut freed = 0u64;
        loop {
            let free: i64 = sqlx::query("PRAGMA freelist_count")
                .fetch_one(&self.pool)
                .await?
                .try_get(0)?;
            if free == 0 {
                return Ok(freed);
            }
            let step = free.min(VACUUM_PAGES);
            {
                let _writer = self.write_lock.lock().await;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "PRAGMA incremental_vacuum({step})"
                )))
                .execute(&self.pool)
                .await?;
            }
            freed += u64::try_from(step).unwrap_or(0);
            if step < VACUUM_PAGES {
                return Ok(freed);
            }
            tokio::task::yield_now().await;
        }
    }
}
