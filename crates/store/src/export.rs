//! Reading the store out in time order, for remote write: every scrape of
//! every target after a cursor `(ts_ms, target_id)`, head rows and sealed
//! blocks alike, in bounded batches; canary probes after a probe id; and
//! the durable per-endpoint cursor (`remote_write_cursors`).
//!
//! A batch is a prefix, in `(ts_ms, target_id)` order, of the scrapes after
//! the cursor and at or before `until_ms`. The caller picks `until_ms` far
//! enough behind "now" that no scrape can still be written before it (a
//! scrape is stamped when it starts and stored when it ends), so a cursor
//! never passes a scrape that lands later.

use crate::read::split_locs;
use std::collections::HashMap;
use std::sync::Arc;

use llmwatch_core::catalog::{Engine, NormalizedSample};
use sqlx::{AssertSqlSafe, Row};

use crate::block;
use crate::read::{catalog_samples, Entry, Loc};
use crate::series::{FxMap, FxSet, SeriesDef};
use crate::{codec, poisoned, Store, StoreError};

/// How far one export batch looks ahead in time per step; a longer stretch
/// without scrapes is jumped over with one query.
const WINDOW_MS: i64 = 5 * 60 * 1000;

/// Where an export stands: everything at or before `(ts_ms, target_id)` is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExportCursor {
    pub ts_ms: i64,
    pub target_id: i64,
}

/// One scrape, read out whole.
#[derive(Debug, Clone)]
pub struct ExportedScrape {
    pub target_id: i64,
    pub ts_ms: i64,
    pub up: bool,
    pub duration_ms: f64,
    /// Every stored series of the scrape: (series id, its meaning, value),
    /// by series id.
    pub samples: Vec<(u32, Arc<SeriesDef>, f64)>,
    /// The catalog samples of the page (what signals are computed from);
    /// filled only when asked for.
    pub catalog: Vec<NormalizedSample>,
}

impl ExportedScrape {
    pub fn cursor(&self) -> ExportCursor {
        ExportCursor {
            ts_ms: self.ts_ms,
            target_id: self.target_id,
        }
    }
}

/// One canary probe's headline numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedProbe {
    pub id: i64,
    pub target_id: i64,
    pub ts_ms: i64,
    pub api: String,
    pub model: String,
    pub ok: bool,
    pub ttfb_s: Option<f64>,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub e2e_s: f64,
    pub output_tokens: i64,
}

/// An endpoint's saved position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteWriteCursor {
    pub scrapes: ExportCursor,
    /// The last probe id sent.
    pub probe_id: i64,
}

/// A scrape chosen for a batch.
struct Chosen {
    target_id: i64,
    entry: Entry,
}

/// A head row sealed while a batch was read: read it again from its block.
struct Moved;

impl Store {
    /// The scrapes after `after` and at or before `until_ms`, oldest first
    /// (ties by target id), as many whole scrapes as fit `max_samples`
    /// (at least one). Empty when there is nothing new.
    pub async fn export_scrapes(
        &self,
        after: ExportCursor,
        until_ms: i64,
        max_samples: usize,
        with_catalog: bool,
    ) -> Result<Vec<ExportedScrape>, StoreError> {
        // A seal between reading the timeline and the values moves head
        // rows into a block; the second read finds them there.
        for _ in 0..3 {
            let chosen = self.choose_scrapes(after, until_ms, max_samples).await?;
            match self.read_chosen(&chosen, with_catalog).await? {
                Ok(scrapes) => return Ok(scrapes),
                Err(Moved) => continue,
            }
        }
        Err(StoreError::Corrupt(
            "scrapes kept moving while being exported".to_string(),
        ))
    }

    /// Which scrapes the next batch holds.
    async fn choose_scrapes(
        &self,
        after: ExportCursor,
        until_ms: i64,
        max_samples: usize,
    ) -> Result<Vec<Chosen>, StoreError> {
        let targets: Vec<i64> = sqlx::query("SELECT id FROM targets ORDER BY id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| row.try_get("id"))
            .collect::<Result<_, _>>()?;
        let mut from = after.ts_ms;
        while from <= until_ms {
            let to = until_ms.min(from.saturating_add(WINDOW_MS));
            let mut found = Vec::new();
            for &target_id in &targets {
                for entry in self.timeline(target_id, from, to).await? {
                    let at = ExportCursor {
                        ts_ms: entry.health.ts_ms,
                        target_id,
                    };
                    if at > after {
                        found.push(Chosen { target_id, entry });
                    }
                }
            }
            if !found.is_empty() {
                found.sort_by_key(|c| (c.entry.health.ts_ms, c.target_id));
                let mut samples = 0usize;
                let mut keep = 0;
                for chosen in &found {
                    let count = usize::try_from(chosen.entry.health.sample_count).unwrap_or(0);
                    if keep > 0 && samples + count > max_samples {
                        break;
                    }
                    samples += count;
                    keep += 1;
                }
                found.truncate(keep);
                return Ok(found);
            }
            match self.next_scrape_after(to).await? {
                Some(next) => from = next,
                None => break,
            }
        }
        Ok(Vec::new())
    }

    /// The time of the first stored scrape after `ts_ms`, if any.
    async fn next_scrape_after(&self, ts_ms: i64) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT MIN(t) AS next FROM (
                SELECT MIN(ts_ms) AS t FROM scrapes WHERE ts_ms > ?1
                UNION ALL SELECT MIN(first_ms) FROM blocks WHERE last_ms > ?1)",
        )
        .bind(ts_ms)
        .fetch_one(&self.pool)
        .await?;
        // A block that straddles `ts_ms` starts before it: look from just after.
        Ok(row
            .try_get::<Option<i64>, _>("next")?
            .map(|next| next.max(ts_ms + 1)))
    }

    /// The values of the chosen scrapes.
    async fn read_chosen(
        &self,
        chosen: &[Chosen],
        with_catalog: bool,
    ) -> Result<Result<Vec<ExportedScrape>, Moved>, StoreError> {
        let locs: FxSet<Loc> = chosen.iter().map(|c| c.entry.loc).collect();
        let Ok(values) = self.all_values_at(&locs).await? else {
            return Ok(Err(Moved));
        };
        // Read after the values, so every series they name is known.
        let mut defs: HashMap<i64, FxMap<u32, Arc<SeriesDef>>> = HashMap::new();
        let mut engines: HashMap<i64, Engine> = HashMap::new();
        for c in chosen {
            if let std::collections::hash_map::Entry::Vacant(slot) = defs.entry(c.target_id) {
                let of_target = self
                    .series
                    .read()
                    .map_err(poisoned)?
                    .of_target(c.target_id, |_| true);
                slot.insert(of_target);
                if with_catalog {
                    engines.insert(c.target_id, self.engine_of(c.target_id).await?);
                }
            }
        }
        let empty = Vec::new();
        let mut out = Vec::with_capacity(chosen.len());
        for c in chosen {
            let pairs = values.get(&c.entry.loc).unwrap_or(&empty);
            let of_target = &defs[&c.target_id];
            let samples = pairs
                .iter()
                .filter_map(|(id, value)| Some((*id, Arc::clone(of_target.get(id)?), *value)))
                .collect();
            let catalog = match engines.get(&c.target_id) {
                Some(engine) => catalog_samples(of_target, *engine, pairs),
                None => Vec::new(),
            };
            out.push(ExportedScrape {
                target_id: c.target_id,
                ts_ms: c.entry.health.ts_ms,
                up: c.entry.health.up,
                duration_ms: c.entry.health.duration_ms,
                samples,
                catalog,
            });
        }
        Ok(Ok(out))
    }

    /// Every value at each of `locs`, by series id; `Err(Moved)` when a head
    /// row is gone (sealed meanwhile).
    async fn all_values_at(
        &self,
        locs: &FxSet<Loc>,
    ) -> Result<Result<FxMap<Loc, Vec<(u32, f64)>>, Moved>, StoreError> {
        let mut out: FxMap<Loc, Vec<(u32, f64)>> =
            FxMap::with_capacity_and_hasher(locs.len(), Default::default());
        let (heads, blocks) = split_locs(locs);
        for chunk in heads.chunks(500) {
            let placeholders = vec!["?"; chunk.len()].join(",");
            // Only placeholders are interpolated; every value is bound.
            let sql = format!("SELECT id, samples FROM scrapes WHERE id IN ({placeholders})");
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            let rows = query.fetch_all(&self.pool).await?;
            if rows.len() < chunk.len() {
                return Ok(Err(Moved));
            }
            for row in rows {
                let blob: Option<Vec<u8>> = row.try_get("samples")?;
                let mut pairs = blob
                    .map(|b| codec::decode(&b))
                    .transpose()?
                    .unwrap_or_default();
                pairs.sort_unstable_by_key(|(id, _)| *id);
                out.insert(Loc::Head(row.try_get("id")?), pairs);
            }
        }
        for (block, (positions, wanted)) in blocks {
            let rows = sqlx::query("SELECT data FROM block_groups WHERE block_id = ?")
                .bind(block)
                .fetch_all(&self.pool)
                .await?;
            for row in rows {
                let data: Vec<u8> = row.try_get("data")?;
                let series = block::decode_group(&data, positions as usize, |_| true)?;
                for &pos in &wanted {
                    let loc = Loc::Block {
                        block,
                        pos,
                        positions,
                    };
                    let slot = out.entry(loc).or_default();
                    for (id, values) in &series {
                        if let Some(Some(value)) = values.get(pos as usize) {
                            slot.push((*id, *value));
                        }
                    }
                }
            }
        }
        for pairs in out.values_mut() {
            pairs.sort_unstable_by_key(|(id, _)| *id);
        }
        Ok(Ok(out))
    }

    /// Canary probes (not sweep or bench requests) after probe `after_id`,
    /// by id, at most `limit`, up to (not including) the first one sent
    /// after `until_ms`: ids are the order probes are stored in, so a
    /// cursor by id never passes a probe that is stored later.
    pub async fn export_probes(
        &self,
        after_id: i64,
        until_ms: i64,
        limit: usize,
    ) -> Result<Vec<ExportedProbe>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, target_id, ts_ms, api, model, ok, ttfb_s, ttft_s, tpot_s, e2e_s,
                    output_tokens
             FROM probes WHERE id > ? AND run_id IS NULL ORDER BY id LIMIT ?",
        )
        .bind(after_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok::<_, StoreError>(ExportedProbe {
                    id: row.try_get("id")?,
                    target_id: row.try_get("target_id")?,
                    ts_ms: row.try_get("ts_ms")?,
                    api: row.try_get("api")?,
                    model: row.try_get("model")?,
                    ok: row.try_get("ok")?,
                    ttfb_s: row.try_get("ttfb_s")?,
                    ttft_s: row.try_get("ttft_s")?,
                    tpot_s: row.try_get("tpot_s")?,
                    e2e_s: row.try_get("e2e_s")?,
                    output_tokens: row.try_get("output_tokens")?,
                })
            })
            .take_while(|probe| !matches!(probe, Ok(p) if p.ts_ms > until_ms))
            .collect()
    }

    /// The time of the newest stored scrape of any target (for lag).
    pub async fn newest_scrape_ms(&self) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT MAX(t) AS newest FROM (
                SELECT MAX(ts_ms) AS t FROM scrapes UNION ALL SELECT MAX(last_ms) FROM blocks)",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("newest")?)
    }

    /// The id of the newest probe stamped before `ts_ms`, 0 if none (a new
    /// remote-write endpoint starts after it).
    pub async fn newest_probe_id_before(&self, ts_ms: i64) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) AS newest FROM probes WHERE ts_ms < ?")
            .bind(ts_ms)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("newest")?)
    }

    /// An endpoint's saved position, if it has one.
    pub async fn remote_write_cursor(
        &self,
        endpoint: &str,
    ) -> Result<Option<RemoteWriteCursor>, StoreError> {
        let row = sqlx::query(
            "SELECT scrape_ts_ms, scrape_target_id, probe_id FROM remote_write_cursors
             WHERE endpoint = ?",
        )
        .bind(endpoint)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(RemoteWriteCursor {
                scrapes: ExportCursor {
                    ts_ms: row.try_get("scrape_ts_ms")?,
                    target_id: row.try_get("scrape_target_id")?,
                },
                probe_id: row.try_get("probe_id")?,
            })
        })
        .transpose()
    }

    /// Saves an endpoint's position (after the receiver took the samples).
    pub async fn save_remote_write_cursor(
        &self,
        endpoint: &str,
        cursor: RemoteWriteCursor,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO remote_write_cursors
                (endpoint, scrape_ts_ms, scrape_target_id, probe_id, updated_ms)
             VALUES (?, ?, ?, ?, ?)
             ON CONFLICT(endpoint) DO UPDATE SET scrape_ts_ms = excluded.scrape_ts_ms,
                scrape_target_id = excluded.scrape_target_id, probe_id = excluded.probe_id,
                updated_ms = excluded.updated_ms",
        )
        .bind(endpoint)
        .bind(cursor.scrapes.ts_ms)
        .bind(cursor.scrapes.target_id)
        .bind(cursor.probe_id)
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
