//! Sweeps and their steps. The store keeps the JSON documents the sweep
//! runner hands it (settings, card, run summary, evidence, verdict) as text:
//! their shapes belong to the binary crate, which can re-judge a stored sweep
//! from its steps with new thresholds. Only the columns that queries filter or
//! order on are typed.

use llmwatch_core::redact::{redact_url, redact_urls_in};
use sqlx::Row;

use crate::{Store, StoreError};

/// A sweep's lifecycle, as stored in `sweeps.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepStatus {
    /// Steps are still being measured (or the process died mid-sweep).
    Running,
    /// Every step of the ladder was measured.
    Completed,
    /// Stopped early by a hard limit; the steps so far are kept.
    Stopped,
    /// Ended by an error (a step could not run at all).
    Failed,
    /// Cancelled by a user; the steps measured so far are kept.
    Cancelled,
    /// The daemon stopped while it ran (found `running` at the next start).
    Interrupted,
}

impl SweepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepStatus::Running => "running",
            SweepStatus::Completed => "completed",
            SweepStatus::Stopped => "stopped",
            SweepStatus::Failed => "failed",
            SweepStatus::Cancelled => "cancelled",
            SweepStatus::Interrupted => "interrupted",
        }
    }

    fn parse(text: &str) -> Result<SweepStatus, StoreError> {
        match text {
            "running" => Ok(SweepStatus::Running),
            "completed" => Ok(SweepStatus::Completed),
            "stopped" => Ok(SweepStatus::Stopped),
            "failed" => Ok(SweepStatus::Failed),
            "cancelled" => Ok(SweepStatus::Cancelled),
            "interrupted" => Ok(SweepStatus::Interrupted),
            other => Err(StoreError::Corrupt(format!(
                "unknown sweep status {other:?}"
            ))),
        }
    }
}

/// What is known when a sweep starts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSweep {
    pub target_name: Option<String>,
    pub target_url: String,
    pub started_ms: i64,
    pub settings_json: String,
    pub card_json: String,
}

/// A stored sweep.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepRow {
    pub id: i64,
    pub target_name: Option<String>,
    pub target_url: String,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub settings_json: String,
    pub card_json: String,
    pub verdict_json: Option<String>,
    pub stop_reason: Option<String>,
    pub status: SweepStatus,
}

/// When a sweep ran (for marking it on time charts and alerts).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepSpan {
    pub id: i64,
    pub target_name: Option<String>,
    pub started_ms: i64,
    /// `None` while it runs.
    pub ended_ms: Option<i64>,
    pub status: SweepStatus,
}

/// One measured step of a sweep.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepStepRow {
    pub sweep_id: i64,
    pub step_index: i64,
    /// `"concurrency"` or `"rate"`.
    pub load_kind: String,
    pub load_value: f64,
    pub start_ms: i64,
    pub end_ms: i64,
    pub run_json: String,
    pub evidence_json: String,
}

/// How a sweep ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepEnd {
    pub ended_ms: i64,
    pub verdict_json: Option<String>,
    pub stop_reason: Option<String>,
    pub status: SweepStatus,
}

impl Store {
    /// Records a sweep that starts now (status `running`); returns its id.
    pub async fn create_sweep(&self, sweep: &NewSweep) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO sweeps (target_name, target_url, started_ms, settings, card, status)
             VALUES (?, ?, ?, ?, ?, 'running') RETURNING id",
        )
        .bind(sweep.target_name.as_deref())
        .bind(redact_url(&sweep.target_url))
        .bind(sweep.started_ms)
        .bind(redact_urls_in(&sweep.settings_json))
        .bind(&sweep.card_json)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// Stores one measured step; returns the step row's id (used as the
    /// `run_id` of the step's probes).
    pub async fn write_sweep_step(&self, step: &SweepStepRow) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO sweep_steps (sweep_id, step_index, load_kind, load_value, start_ms,
                end_ms, run, evidence)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(step.sweep_id)
        .bind(step.step_index)
        .bind(&step.load_kind)
        .bind(step.load_value)
        .bind(step.start_ms)
        .bind(step.end_ms)
        .bind(redact_urls_in(&step.run_json))
        .bind(&step.evidence_json)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// Records how a sweep ended.
    pub async fn finish_sweep(&self, id: i64, end: &SweepEnd) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE sweeps SET ended_ms = ?, verdict = ?, stop_reason = ?, status = ? WHERE id = ?",
        )
        .bind(end.ended_ms)
        .bind(end.verdict_json.as_deref())
        .bind(end.stop_reason.as_deref().map(redact_urls_in))
        .bind(end.status.as_str())
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Marks every sweep still `running` as `interrupted` (call at start,
    /// before any sweep runs: they were cut off by a crash or a kill). Their
    /// steps stay. Returns how many were marked.
    pub async fn mark_interrupted_sweeps(&self, now_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE sweeps SET status = 'interrupted', ended_ms = ?, \
             stop_reason = COALESCE(stop_reason, 'the daemon stopped while the sweep ran') \
             WHERE status = 'running'",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// One sweep by id.
    pub async fn sweep(&self, id: i64) -> Result<Option<SweepRow>, StoreError> {
        let row = sqlx::query(
            "SELECT id, target_name, target_url, started_ms, ended_ms, settings, card, verdict,
                stop_reason, status
             FROM sweeps WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(sweep_from_row).transpose()
    }

    /// The most recent sweeps, newest first, at most `limit`.
    pub async fn sweeps(&self, limit: u32) -> Result<Vec<SweepRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, target_name, target_url, started_ms, ended_ms, settings, card, verdict,
                stop_reason, status
             FROM sweeps ORDER BY started_ms DESC, id DESC LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(sweep_from_row).collect()
    }

    /// When each sweep overlapping `[from_ms, to_ms]` ran (a running one
    /// has no end yet), of one target or (`None`) of all, oldest first, at
    /// most `limit`.
    pub async fn sweep_spans(
        &self,
        target_name: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<SweepSpan>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, target_name, started_ms, ended_ms, status FROM sweeps
             WHERE (?1 IS NULL OR target_name = ?1) AND started_ms <= ?2
               AND (ended_ms IS NULL OR ended_ms >= ?3)
             ORDER BY started_ms, id LIMIT ?4",
        )
        .bind(target_name)
        .bind(to_ms)
        .bind(from_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                Ok(SweepSpan {
                    id: row.try_get("id")?,
                    target_name: row.try_get("target_name")?,
                    started_ms: row.try_get("started_ms")?,
                    ended_ms: row.try_get("ended_ms")?,
                    status: SweepStatus::parse(&status)?,
                })
            })
            .collect()
    }

    /// The newest sweep of a target that measured its whole ladder or
    /// stopped at a limit (both curves a verdict may read), if any.
    pub async fn last_finished_sweep_of(
        &self,
        target_name: &str,
    ) -> Result<Option<SweepRow>, StoreError> {
        let row = sqlx::query(
            "SELECT id, target_name, target_url, started_ms, ended_ms, settings, card, verdict,
                stop_reason, status
             FROM sweeps WHERE target_name = ? AND status IN ('completed', 'stopped')
             ORDER BY started_ms DESC, id DESC LIMIT 1",
        )
        .bind(target_name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(sweep_from_row).transpose()
    }

    /// A sweep's steps in ladder order.
    pub async fn sweep_steps(&self, sweep_id: i64) -> Result<Vec<SweepStepRow>, StoreError> {
        Ok(self
            .sweep_steps_with_ids(sweep_id)
            .await?
            .into_iter()
            .map(|(_, step)| step)
            .collect())
    }

    /// The steps of a sweep with their row ids (the `run_id` of each
    /// step's probes), in step order.
    pub async fn sweep_steps_with_ids(
        &self,
        sweep_id: i64,
    ) -> Result<Vec<(i64, SweepStepRow)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, sweep_id, step_index, load_kind, load_value, start_ms, end_ms, run, evidence
             FROM sweep_steps WHERE sweep_id = ? ORDER BY step_index",
        )
        .bind(sweep_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let step = SweepStepRow {
                    sweep_id: row.try_get("sweep_id")?,
                    step_index: row.try_get("step_index")?,
                    load_kind: row.try_get("load_kind")?,
                    load_value: row.try_get("load_value")?,
                    start_ms: row.try_get("start_ms")?,
                    end_ms: row.try_get("end_ms")?,
                    run_json: row.try_get("run")?,
                    evidence_json: row.try_get("evidence")?,
                };
                Ok((row.try_get("id")?, step))
            })
            .collect()
    }
}

fn sweep_from_row(row: sqlx::sqlite::SqliteRow) -> Result<SweepRow, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(SweepRow {
        id: row.try_get("id")?,
        target_name: row.try_get("target_name")?,
        target_url: row.try_get("target_url")?,
        started_ms: row.try_get("started_ms")?,
        ended_ms: row.try_get("ended_ms")?,
        settings_json: row.try_get("settings")?,
        card_json: row.try_get("card")?,
        verdict_json: row.try_get("verdict")?,
        stop_reason: row.try_get("stop_reason")?,
        status: SweepStatus::parse(&status)?,
    })
}
