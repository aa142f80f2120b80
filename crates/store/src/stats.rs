//! `llmwatch db stats`: what the samples cost on disk.

use sqlx::Row;

use crate::{Store, StoreError, TargetKind};

/// The tables that hold samples, their series and their scrapes' health
/// (with their indexes).
const SAMPLE_TABLES: [&str; 4] = ["scrapes", "blocks", "block_groups", "series"];

/// The whole database.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DbStats {
    /// Pages × page size of the main file (the WAL not included).
    pub file_bytes: u64,
    /// Of which free pages (reused by later writes; maintenance gives them back).
    pub free_bytes: u64,
    /// Pages of the sample tables and their indexes (`scrapes`, `blocks`,
    /// `block_groups`, `series`): what samples cost, probes and the rest apart.
    pub sample_bytes: u64,
    pub samples: u64,
    pub scrapes: u64,
    pub series: u64,
    /// `sample_bytes / samples`.
    pub bytes_per_sample: Option<f64>,
    pub blocks: u64,
    /// Scrapes not yet sealed into a block (packed raw, 12 bytes a sample).
    pub head_scrapes: u64,
    pub head_samples: u64,
    pub oldest_ms: Option<i64>,
    pub newest_ms: Option<i64>,
    pub targets: Vec<TargetStats>,
}

/// One target.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TargetStats {
    pub name: String,
    pub kind: TargetKind,
    pub samples: u64,
    pub scrapes: u64,
    pub series: u64,
    pub head_scrapes: u64,
    /// The target's share of `sample_bytes`, split by the bytes of its rows
    /// (block health and groups, head rows, series names).
    pub bytes: u64,
    pub bytes_per_sample: Option<f64>,
    pub oldest_ms: Option<i64>,
    pub newest_ms: Option<i64>,
}

fn count(row: &sqlx::sqlite::SqliteRow, column: &str) -> Result<u64, StoreError> {
    Ok(u64::try_from(row.try_get::<Option<i64>, _>(column)?.unwrap_or(0)).unwrap_or(0))
}

fn per_sample(bytes: u64, samples: u64) -> Option<f64> {
    (samples > 0).then(|| bytes as f64 / samples as f64)
}

/// Per target: samples, scrapes, series, head scrapes, payload bytes, time range.
const PER_TARGET: &str = "
SELECT t.name, t.kind,
  (SELECT SUM(sample_count) FROM blocks b WHERE b.target_id = t.id) AS block_samples,
  (SELECT SUM(sample_count) FROM scrapes s WHERE s.target_id = t.id AND s.up = 1) AS head_samples,
  (SELECT SUM(scrape_count) FROM blocks b WHERE b.target_id = t.id) AS block_scrapes,
  (SELECT COUNT(*) FROM scrapes s WHERE s.target_id = t.id) AS head_scrapes,
  (SELECT COUNT(*) FROM series r WHERE r.target_id = t.id) AS series,
  (SELECT COUNT(*) FROM blocks b WHERE b.target_id = t.id) AS blocks,
  COALESCE((SELECT SUM(LENGTH(health) + 40) FROM blocks b WHERE b.target_id = t.id), 0)
  + COALESCE((SELECT SUM(LENGTH(g.data) + LENGTH(g.name) + 16) FROM blocks b
              JOIN block_groups g ON g.block_id = b.id WHERE b.target_id = t.id), 0)
  + COALESCE((SELECT SUM(COALESCE(LENGTH(samples), 0) + 60) FROM scrapes s
              WHERE s.target_id = t.id), 0)
  + COALESCE((SELECT SUM(LENGTH(metric) + LENGTH(labels) + 24) FROM series r
              WHERE r.target_id = t.id), 0) AS payload,
  (SELECT MIN(first_ms) FROM blocks b WHERE b.target_id = t.id) AS oldest_block,
  (SELECT MIN(ts_ms) FROM scrapes s WHERE s.target_id = t.id) AS oldest_head,
  (SELECT MAX(last_ms) FROM blocks b WHERE b.target_id = t.id) AS newest_block,
  (SELECT MAX(ts_ms) FROM scrapes s WHERE s.target_id = t.id) AS newest_head
FROM targets t ORDER BY t.name";

impl Store {
    /// Samples stored, bytes on disk and bytes per sample, overall and per
    /// target, with series counts and time ranges.
    pub async fn db_stats(&self) -> Result<DbStats, StoreError> {
        let pages = sqlx::query(
            "SELECT page_count * page_size AS file, freelist_count * page_size AS free
             FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
        )
        .fetch_one(&self.pool)
        .await?;
        let file_bytes = count(&pages, "file")?;
        let free_bytes = count(&pages, "free")?;
        let sample_bytes = self
            .sample_table_bytes()
            .await
            .unwrap_or(file_bytes - free_bytes);
        let rows = sqlx::query(PER_TARGET).fetch_all(&self.pool).await?;
        let mut targets = Vec::with_capacity(rows.len());
        let mut payloads = Vec::with_capacity(rows.len());
        let mut stats = DbStats {
            file_bytes,
            free_bytes,
            sample_bytes,
            samples: 0,
            scrapes: 0,
            series: 0,
            bytes_per_sample: None,
            blocks: 0,
            head_scrapes: 0,
            head_samples: 0,
            oldest_ms: None,
            newest_ms: None,
            targets: Vec::new(),
        };
        for row in &rows {
            let head_samples = count(row, "head_samples")?;
            let head_scrapes = count(row, "head_scrapes")?;
            let oldest: Option<i64> = [
                row.try_get::<Option<i64>, _>("oldest_block")?,
                row.try_get("oldest_head")?,
            ]
            .into_iter()
            .flatten()
            .min();
            let newest: Option<i64> = [
                row.try_get::<Option<i64>, _>("newest_block")?,
                row.try_get("newest_head")?,
            ]
            .into_iter()
            .flatten()
            .max();
            let target = TargetStats {
                name: row.try_get("name")?,
                kind: if row.try_get::<String, _>("kind")? == "gpu" {
                    TargetKind::Gpu
                } else {
                    TargetKind::Engine
                },
                samples: count(row, "block_samples")? + head_samples,
                scrapes: count(row, "block_scrapes")? + head_scrapes,
                series: count(row, "series")?,
                head_scrapes,
                bytes: 0,
                bytes_per_sample: None,
                oldest_ms: oldest,
                newest_ms: newest,
            };
            stats.samples += target.samples;
            stats.scrapes += target.scrapes;
            stats.series += target.series;
            stats.blocks += count(row, "blocks")?;
            stats.head_scrapes += head_scrapes;
            stats.head_samples += head_samples;
            stats.oldest_ms = stats.oldest_ms.into_iter().chain(oldest).min();
            stats.newest_ms = stats.newest_ms.into_iter().chain(newest).max();
            payloads.push(count(row, "payload")?);
            targets.push(target);
        }
        let total_payload: u64 = payloads.iter().sum();
        for (target, payload) in targets.iter_mut().zip(payloads) {
            if total_payload > 0 {
                target.bytes = (sample_bytes as f64 * payload as f64 / total_payload as f64) as u64;
            }
            target.bytes_per_sample = per_sample(target.bytes, target.samples);
        }
        stats.bytes_per_sample = per_sample(sample_bytes, stats.samples);
        stats.targets = targets;
        Ok(stats)
    }

    /// Bytes of the pages of the sample tables and their indexes, from
    /// SQLite's `dbstat` table.
    async fn sample_table_bytes(&self) -> Result<u64, StoreError> {
        let rows = sqlx::query(
            "SELECT s.tbl_name AS tbl, SUM(d.pgsize) AS bytes FROM dbstat d
             JOIN sqlite_schema s ON s.name = d.name GROUP BY s.tbl_name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut bytes = 0;
        for row in &rows {
            let table: String = row.try_get("tbl")?;
            if SAMPLE_TABLES.contains(&table.as_str()) {
                bytes += count(row, "bytes")?;
            }
        }
        Ok(bytes)
    }
}
