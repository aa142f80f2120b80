//! Live diagnosis: each target's current verdict and the timeline of its
//! changes.

use sqlx::Row;

use crate::{Store, StoreError};

/// One live verdict as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveVerdictRow {
    pub ts_ms: i64,
    /// Machine name (`kv_cache_capacity`, `healthy`, …).
    pub verdict: String,
    pub confidence: String,
    pub evidence: String,
    pub what_to_try: String,
    pub samples: i64,
}

/// One change of verdict.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveChangeRow {
    pub ts_ms: i64,
    pub verdict: String,
    /// The verdict before, `None` for a target's first.
    pub previous: Option<String>,
    pub confidence: String,
    pub evidence: String,
}

impl Store {
    /// Records an evaluation: replaces the target's current verdict and, when
    /// the verdict differs from the one before, appends a change. Returns the
    /// previous verdict when it changed (`Some(None)` for the first).
    pub async fn record_live_verdict(
        &self,
        target_id: i64,
        row: &LiveVerdictRow,
    ) -> Result<Option<Option<String>>, StoreError> {
        let mut tx = self.begin_write().await?;
        let previous: Option<String> =
            sqlx::query("SELECT verdict FROM live_verdict_now WHERE target_id = ?")
                .bind(target_id)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.try_get("verdict"))
                .transpose()?;
        sqlx::query(
            "INSERT INTO live_verdict_now
                 (target_id, ts_ms, verdict, confidence, evidence, what_to_try, samples)
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (target_id) DO UPDATE SET ts_ms = excluded.ts_ms,
                 verdict = excluded.verdict, confidence = excluded.confidence,
                 evidence = excluded.evidence, what_to_try = excluded.what_to_try,
                 samples = excluded.samples",
        )
        .bind(target_id)
        .bind(row.ts_ms)
        .bind(&row.verdict)
        .bind(&row.confidence)
        .bind(&row.evidence)
        .bind(&row.what_to_try)
        .bind(row.samples)
        .execute(&mut *tx)
        .await?;
        let changed = previous.as_deref() != Some(row.verdict.as_str());
        if changed {
            sqlx::query(
                "INSERT INTO live_verdict_changes
                     (target_id, ts_ms, verdict, previous, confidence, evidence)
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(target_id)
            .bind(row.ts_ms)
            .bind(&row.verdict)
            .bind(previous.as_deref())
            .bind(&row.confidence)
            .bind(&row.evidence)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(changed.then_some(previous))
    }

    /// A target's current live verdict, if one was evaluated.
    pub async fn live_verdict(&self, target_id: i64) -> Result<Option<LiveVerdictRow>, StoreError> {
        let row = sqlx::query(
            "SELECT ts_ms, verdict, confidence, evidence, what_to_try, samples
             FROM live_verdict_now WHERE target_id = ?",
        )
        .bind(target_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(LiveVerdictRow {
                ts_ms: r.try_get("ts_ms")?,
                verdict: r.try_get("verdict")?,
                confidence: r.try_get("confidence")?,
                evidence: r.try_get("evidence")?,
                what_to_try: r.try_get("what_to_try")?,
                samples: r.try_get("samples")?,
            })
        })
        .transpose()
    }

    /// A target's verdict changes in `[from_ms, to_ms]`, oldest first, at
    /// most `limit` (the newest ones when there are more).
    pub async fn live_changes(
        &self,
        target_id: i64,
        from_ms: i64,
        to_ms: i64,
        limit: i64,
    ) -> Result<Vec<LiveChangeRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT ts_ms, verdict, previous, confidence, evidence FROM (
                 SELECT * FROM live_verdict_changes
                 WHERE target_id = ? AND ts_ms >= ? AND ts_ms <= ?
                 ORDER BY ts_ms DESC, id DESC LIMIT ?
             ) ORDER BY ts_ms, id",
        )
        .bind(target_id)
        .bind(from_ms)
        .bind(to_ms)
        .bind(limit.max(0))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LiveChangeRow {
                    ts_ms: r.try_get("ts_ms")?,
                    verdict: r.try_get("verdict")?,
                    previous: r.try_get("previous")?,
                    confidence: r.try_get("confidence")?,
                    evidence: r.try_get("evidence")?,
                })
            })
            .collect()
    }
}
