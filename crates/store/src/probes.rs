//! Probe records: written one at a time (a canary fires every few seconds at
//! most), read back by window for the rolling client-side signals.

use llmwatch_core::probe_signals::{probe_signals, ProbeTimings};
use llmwatch_core::redact::redact_urls_in;
use llmwatch_core::signals::Signal;
use sqlx::Row;

use std::sync::Arc;

use crate::probe_cache::{hour_of, HourProbes, HOUR_MS};
use crate::{Point, Range, Store, StoreError};

/// One stored probe.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProbeRow {
    pub target_id: i64,
    pub run_id: Option<i64>,
    /// Wall-clock send time, Unix ms.
    pub ts_ms: i64,
    pub api: String,
    pub model: String,
    pub shape: String,
    pub ok: bool,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub http_status: Option<u16>,
    pub ttfb_s: Option<f64>,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub e2e_s: f64,
    pub itl_s: Vec<f64>,
    pub prompt_tokens: Option<i64>,
    pub output_tokens: i64,
    pub cached_tokens: Option<i64>,
    pub finish_reason: Option<String>,
    /// The full probe record as JSON.
    pub record_json: String,
}

fn pack_f64s(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The probe columns but the full record (large; only some readers need it).
/// Which probes a listing wants: all of them, the daemon's canaries only
/// (no `run_id`), or the probes of one sweep step (its row id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOrigin {
    Any,
    Canary,
    Run(i64),
}

const PROBE_COLUMNS: &str = "id, target_id, run_id, ts_ms, api, model, shape, ok, error_kind,
    error, http_status, ttfb_s, ttft_s, tpot_s, e2e_s, itl_s, prompt_tokens, output_tokens,
    cached_tokens, finish_reason";

/// A probe row selected with [`PROBE_COLUMNS`], with its id; `record_json`
/// is left empty.
fn probe_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<(i64, ProbeRow), StoreError> {
    Ok((
        row.try_get("id")?,
        ProbeRow {
            target_id: row.try_get("target_id")?,
            run_id: row.try_get("run_id")?,
            ts_ms: row.try_get("ts_ms")?,
            api: row.try_get("api")?,
            model: row.try_get("model")?,
            shape: row.try_get("shape")?,
            ok: row.try_get("ok")?,
            error_kind: row.try_get("error_kind")?,
            error: row.try_get("error")?,
            http_status: row
                .try_get::<Option<i64>, _>("http_status")?
                .and_then(|s| u16::try_from(s).ok()),
            ttfb_s: row.try_get("ttfb_s")?,
            ttft_s: row.try_get("ttft_s")?,
            tpot_s: row.try_get("tpot_s")?,
            e2e_s: row.try_get("e2e_s")?,
            itl_s: unpack_f64s(&row.try_get::<Vec<u8>, _>("itl_s")?)?,
            prompt_tokens: row.try_get("prompt_tokens")?,
            output_tokens: row.try_get("output_tokens")?,
            cached_tokens: row.try_get("cached_tokens")?,
            finish_reason: row.try_get("finish_reason")?,
            record_json: String::new(),
        },
    ))
}

fn unpack_f64s(blob: &[u8]) -> Result<Vec<f64>, StoreError> {
    if !blob.len().is_multiple_of(8) {
        return Err(StoreError::Corrupt(format!(
            "ITL blob of {} bytes is not a whole number of f64s",
            blob.len()
        )));
    }
    Ok(blob
        .chunks_exact(8)
        .map(|chunk| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(chunk);
            f64::from_le_bytes(bytes)
        })
        .collect())
}

/// Is `signal` computed from probes rather than scrapes?
pub fn is_probe_signal(signal: Signal) -> bool {
    signal.is_probe()
}

/// One hour of a canary read: the part of it asked, and its probes once
/// found in the cache or read.
struct HourSlot {
    hour: i64,
    lo: i64,
    hi: i64,
    whole: bool,
    probes: Option<Arc<HourProbes>>,
}

/// The server's own timing of one probe, seconds (columns
/// `server_queue_s`, `server_prefill_s`, `server_decode_s`).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ServerTimingRow {
    pub queue_s: Option<f64>,
    pub prefill_s: Option<f64>,
    pub decode_s: Option<f64>,
}

impl ServerTimingRow {
    /// From the probe record's `server_timing` (milliseconds there); all
    /// `None` when the record has none or is not JSON.
    fn from_record_json(record: &str) -> ServerTimingRow {
        let value: serde_json::Value = serde_json::from_str(record).unwrap_or_default();
        let timing = &value["server_timing"];
        let s = |field: &str| timing[field].as_f64().map(|ms| ms / 1000.0);
        ServerTimingRow {
            queue_s: s("queue_ms"),
            prefill_s: s("prefill_ms"),
            decode_s: s("decode_ms"),
        }
    }
}

impl Store {
    /// The server's own timing of every probe of one run (sweep step), in
    /// probe order; probes without one give all-`None` rows.
    pub async fn probe_server_timings(
        &self,
        run_id: i64,
    ) -> Result<Vec<ServerTimingRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT server_queue_s, server_prefill_s, server_decode_s FROM probes
             WHERE run_id = ? ORDER BY id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ServerTimingRow {
                    queue_s: row.try_get("server_queue_s")?,
                    prefill_s: row.try_get("server_prefill_s")?,
                    decode_s: row.try_get("server_decode_s")?,
                })
            })
            .collect()
    }

    /// Stores one probe; returns its id.
    pub async fn write_probe(&self, probe: &ProbeRow) -> Result<i64, StoreError> {
        let server = ServerTimingRow::from_record_json(&probe.record_json);
        let row = sqlx::query(
            "INSERT INTO probes (target_id, run_id, ts_ms, api, model, shape, ok, error_kind, error,
                http_status, ttfb_s, ttft_s, tpot_s, e2e_s, itl_s, prompt_tokens, output_tokens,
                cached_tokens, finish_reason, record, server_queue_s, server_prefill_s,
                server_decode_s)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             RETURNING id",
        )
        .bind(probe.target_id)
        .bind(probe.run_id)
        .bind(probe.ts_ms)
        .bind(&probe.api)
        .bind(&probe.model)
        .bind(&probe.shape)
        .bind(probe.ok)
        .bind(probe.error_kind.as_deref())
        .bind(probe.error.as_deref().map(redact_urls_in))
        .bind(probe.http_status.map(i64::from))
        .bind(probe.ttfb_s)
        .bind(probe.ttft_s)
        .bind(probe.tpot_s)
        .bind(probe.e2e_s)
        .bind(pack_f64s(&probe.itl_s))
        .bind(probe.prompt_tokens)
        .bind(probe.output_tokens)
        .bind(probe.cached_tokens)
        .bind(probe.finish_reason.as_deref())
        .bind(redact_urls_in(&probe.record_json))
        .bind(server.queue_s)
        .bind(server.prefill_s)
        .bind(server.decode_s)
        .fetch_one(&self.pool)
        .await?;
        if probe.run_id.is_none() {
            self.probe_cache.invalidate(probe.target_id, probe.ts_ms);
        }
        Ok(row.try_get("id")?)
    }

    /// Probes of a target sent in `[from_ms, to_ms]`, oldest first, at most
    /// `limit`, each with its full record.
    pub async fn probes(
        &self,
        target_id: i64,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<ProbeRow>, StoreError> {
        let sql = format!(
            "SELECT {PROBE_COLUMNS}, record FROM probes
             WHERE target_id = ? AND ts_ms BETWEEN ? AND ? ORDER BY ts_ms LIMIT ?"
        );
        // Only the constant column list is interpolated; every value is bound.
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(target_id)
            .bind(from_ms)
            .bind(to_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let (_, mut probe) = probe_from_row(row)?;
                probe.record_json = row.try_get("record")?;
                Ok(probe)
            })
            .collect()
    }

    /// One page of a target's probes sent in `[from_ms, to_ms]`, oldest
    /// first, after probe id `after_id`; each with its id (the cursor).
    pub async fn probes_page(
        &self,
        target_id: i64,
        origin: ProbeOrigin,
        from_ms: i64,
        to_ms: i64,
        after_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, ProbeRow)>, StoreError> {
        let sql = format!(
            "SELECT {PROBE_COLUMNS} FROM probes
             WHERE target_id = ?1 AND ts_ms BETWEEN ?2 AND ?3
               AND (?4 IS NULL OR ts_ms > (SELECT ts_ms FROM probes WHERE id = ?4)
                    OR (ts_ms = (SELECT ts_ms FROM probes WHERE id = ?4) AND id > ?4))
               AND (?6 = 0 OR (?6 = 1 AND run_id IS NULL) OR (?6 = 2 AND run_id = ?7))
             ORDER BY ts_ms, id LIMIT ?5"
        );
        let (origin_kind, run_id) = match origin {
            ProbeOrigin::Any => (0, None),
            ProbeOrigin::Canary => (1, None),
            ProbeOrigin::Run(id) => (2, Some(id)),
        };
        // Only the constant column list is interpolated; every value is bound.
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(target_id)
            .bind(from_ms)
            .bind(to_ms)
            .bind(after_id)
            .bind(limit)
            .bind(origin_kind)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(probe_from_row).collect()
    }

    /// Probes of every target stored after id `after_id`, in id order, at
    /// most `limit` (for folding new probes into running histograms).
    pub async fn probes_after_id(
        &self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<(i64, ProbeRow)>, StoreError> {
        let sql = format!("SELECT {PROBE_COLUMNS} FROM probes WHERE id > ? ORDER BY id LIMIT ?");
        // Only the constant column list is interpolated; every value is bound.
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(after_id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(probe_from_row).collect()
    }

    /// The highest probe id stored (0 when none).
    pub async fn last_probe_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) AS id FROM probes")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("id")?)
    }

    /// Canary probes of a target sent in `[from_ms, to_ms]`, oldest first.
    pub async fn probe_timings(
        &self,
        target_id: i64,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(i64, ProbeTimings)>, StoreError> {
        let parts = self.canary_parts(target_id, from_ms, to_ms).await?;
        Ok(parts
            .iter()
            .flat_map(|(hour, at)| {
                hour.stamps[at.clone()]
                    .iter()
                    .copied()
                    .zip(hour.timings[at.clone()].iter().cloned())
            })
            .collect())
    }

    /// The canaries of `[from_ms, to_ms]` as parts of hours, oldest first:
    /// whole hours from the cache (read and kept on a miss), the partial
    /// hours at either end read for just their part when not cached (the
    /// newest hour changes with every canary). Each run of hours not cached
    /// is one read; a range of more than two days first asks where the
    /// canaries are (a range from 1970 is not half a million hours).
    async fn canary_parts(
        &self,
        target_id: i64,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(Arc<HourProbes>, std::ops::Range<usize>)>, StoreError> {
        if from_ms > to_ms {
            return Ok(Vec::new());
        }
        let (mut first_hour, mut last_hour) = (hour_of(from_ms), hour_of(to_ms));
        if last_hour - first_hour > 48 {
            match self.canary_extent(target_id, from_ms, to_ms).await? {
                Some((first, last)) => (first_hour, last_hour) = (hour_of(first), hour_of(last)),
                None => return Ok(Vec::new()),
            }
        }
        let mut slots: Vec<HourSlot> = (first_hour..=last_hour)
            .map(|hour| {
                let start = hour * HOUR_MS;
                let (lo, hi) = (from_ms.max(start), to_ms.min(start + HOUR_MS - 1));
                HourSlot {
                    hour,
                    lo,
                    hi,
                    whole: lo == start && hi == start + HOUR_MS - 1,
                    probes: self.probe_cache.get(target_id, hour),
                }
            })
            .collect();
        let mut k = 0;
        while k < slots.len() {
            if slots[k].probes.is_some() {
                k += 1;
                continue;
            }
            let end = (k..slots.len())
                .find(|&j| slots[j].probes.is_some())
                .unwrap_or(slots.len());
            let epoch = self.probe_cache.epoch();
            let read_lo = if slots[k].whole {
                slots[k].hour * HOUR_MS
            } else {
                slots[k].lo
            };
            let last = &slots[end - 1];
            let read_hi = if last.whole {
                (last.hour + 1) * HOUR_MS - 1
            } else {
                last.hi
            };
            let mut read = self.read_canaries(target_id, read_lo, read_hi).await?;
            // Split from the back, moving each hour's rows out.
            for slot in slots[k..end].iter_mut().rev() {
                let at = read.stamps.partition_point(|ts| hour_of(*ts) < slot.hour);
                let hour = Arc::new(HourProbes {
                    stamps: read.stamps.split_off(at),
                    timings: read.timings.split_off(at),
                });
                if slot.whole {
                    self.probe_cache
                        .insert(epoch, target_id, slot.hour, Arc::clone(&hour));
                }
                slot.probes = Some(hour);
            }
            k = end;
        }
        Ok(slots
            .into_iter()
            .filter_map(|slot| {
                let probes = slot.probes?;
                let at = probes.stamps.partition_point(|ts| *ts < slot.lo)
                    ..probes.stamps.partition_point(|ts| *ts <= slot.hi);
                (!at.is_empty()).then_some((probes, at))
            })
            .collect())
    }

    /// The first and last canary of a target in `[from_ms, to_ms]`.
    async fn canary_extent(
        &self,
        target_id: i64,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Option<(i64, i64)>, StoreError> {
        let row = sqlx::query(
            "SELECT MIN(ts_ms) AS first, MAX(ts_ms) AS last FROM probes
             WHERE target_id = ? AND run_id IS NULL AND ts_ms BETWEEN ? AND ?",
        )
        .bind(target_id)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_one(&self.pool)
        .await?;
        let first: Option<i64> = row.try_get("first")?;
        let last: Option<i64> = row.try_get("last")?;
        Ok(first.zip(last))
    }

    async fn read_canaries(
        &self,
        target_id: i64,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<HourProbes, StoreError> {
        let rows = sqlx::query(
            "SELECT ts_ms, ok, ttft_s, tpot_s, e2e_s, itl_s FROM probes
             WHERE target_id = ? AND run_id IS NULL AND ts_ms BETWEEN ? AND ?
             ORDER BY ts_ms",
        )
        .bind(target_id)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        let mut hour = HourProbes {
            stamps: Vec::with_capacity(rows.len()),
            timings: Vec::with_capacity(rows.len()),
        };
        for row in &rows {
            hour.stamps.push(row.try_get("ts_ms")?);
            hour.timings.push(ProbeTimings {
                ok: row.try_get("ok")?,
                ttft_s: row.try_get("ttft_s")?,
                tpot_s: row.try_get("tpot_s")?,
                e2e_s: row.try_get("e2e_s")?,
                itl_s: unpack_f64s(row.try_get::<&[u8], _>("itl_s")?)?,
            });
        }
        Ok(hour)
    }

    /// Rolling probe signals over `(now_ms − window_ms, now_ms]`.
    pub async fn probe_signals(
        &self,
        target_id: i64,
        now_ms: i64,
        window_ms: i64,
    ) -> Result<Vec<(Signal, f64)>, StoreError> {
        let parts = self
            .canary_parts(target_id, now_ms - window_ms + 1, now_ms)
            .await?;
        let timings: Vec<&ProbeTimings> = parts
            .iter()
            .flat_map(|(hour, at)| hour.timings[at.clone()].iter())
            .collect();
        Ok(probe_signals(&timings))
    }

    /// A probe signal at each step of `range`, each over the `window_ms`
    /// before it.
    pub async fn probe_signal_series(
        &self,
        target_id: i64,
        signal: Signal,
        range: Range,
        window_ms: i64,
    ) -> Result<Vec<Point>, StoreError> {
        let mut series = self
            .probe_signals_series(target_id, &[signal], range, window_ms)
            .await?;
        Ok(series.pop().map(|(_, points)| points).unwrap_or_default())
    }

    /// Several probe signals at each step of `range`, each over the
    /// `window_ms` before it, from one read of the probes.
    pub async fn probe_signals_series(
        &self,
        target_id: i64,
        signals: &[Signal],
        range: Range,
        window_ms: i64,
    ) -> Result<Vec<(Signal, Vec<Point>)>, StoreError> {
        let parts = self
            .canary_parts(target_id, range.from_ms - window_ms + 1, range.to_ms)
            .await?;
        let (stamps, timings): (Vec<i64>, Vec<&ProbeTimings>) = parts
            .iter()
            .flat_map(|(hour, at)| {
                hour.stamps[at.clone()]
                    .iter()
                    .copied()
                    .zip(hour.timings[at.clone()].iter())
            })
            .unzip();
        let mut out: Vec<(Signal, Vec<Point>)> = signals.iter().map(|s| (*s, Vec::new())).collect();
        let mut t = range.from_ms;
        while t <= range.to_ms {
            let start = stamps.partition_point(|ts| *ts <= t - window_ms);
            let end = stamps.partition_point(|ts| *ts <= t);
            for (signal, value) in probe_signals(&timings[start..end]) {
                if let Some((_, points)) = out.iter_mut().find(|(s, _)| *s == signal) {
                    points.push(Point { ts_ms: t, value });
                }
            }
            t += range.step_ms;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itl_blob_round_trips() {
        let values = vec![0.001, 0.0125, 3.5];
        assert_eq!(unpack_f64s(&pack_f64s(&values)).unwrap(), values);
        assert!(unpack_f64s(&[1, 2, 3]).is_err());
    }
}
