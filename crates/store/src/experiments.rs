//! Experiments: one row each, holding the result document the experiment
//! runner hands it (JSON text whose shape belongs to
//! `llmwatch_core::analysis::experiment::ExperimentResult`). Only the
//! columns lists filter or order on are typed.

use llmwatch_core::redact::redact_urls_in;
use sqlx::Row;

use crate::{Store, StoreError};

/// One stored experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentRow {
    pub id: i64,
    pub name: String,
    pub status: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub result_json: String,
}

fn from_row(row: sqlx::sqlite::SqliteRow) -> Result<ExperimentRow, StoreError> {
    Ok(ExperimentRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        created_ms: row.try_get("created_ms")?,
        updated_ms: row.try_get("updated_ms")?,
        result_json: row.try_get("result")?,
    })
}

impl Store {
    /// Records an experiment that starts now; returns its id.
    pub async fn create_experiment(
        &self,
        name: &str,
        status: &str,
        now_ms: i64,
        result_json: &str,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO experiments (name, status, created_ms, updated_ms, result)
             VALUES (?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(name)
        .bind(status)
        .bind(now_ms)
        .bind(now_ms)
        .bind(redact_urls_in(result_json))
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// Rewrites an experiment's status and result.
    pub async fn update_experiment(
        &self,
        id: i64,
        status: &str,
        now_ms: i64,
        result_json: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE experiments SET status = ?, updated_ms = ?, result = ? WHERE id = ?")
            .bind(status)
            .bind(now_ms)
            .bind(redact_urls_in(result_json))
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// One experiment by id.
    pub async fn experiment(&self, id: i64) -> Result<Option<ExperimentRow>, StoreError> {
        let row = sqlx::query(
            "SELECT id, name, status, created_ms, updated_ms, result FROM experiments WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(from_row).transpose()
    }

    /// The most recent experiments, newest first, at most `limit`.
    pub async fn experiments(&self, limit: u32) -> Result<Vec<ExperimentRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, status, created_ms, updated_ms, result FROM experiments
             ORDER BY id DESC LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(from_row).collect()
    }

    /// Marks experiments still `running` as `interrupted` (the process that
    /// ran them is gone); returns how many.
    pub async fn mark_interrupted_experiments(&self, now_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE experiments SET status = 'interrupted', updated_ms = ? WHERE status = 'running'",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn experiments_round_trip_and_are_listed_newest_first() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("x.db")).await.expect("open");
        let a = store
            .create_experiment("a", "running", 1, "{}")
            .await
            .expect("a");
        let b = store
            .create_experiment("b", "running", 2, "{\"url\": \"http://u:p@h/\"}")
            .await
            .expect("b");
        store
            .update_experiment(a, "completed", 3, "{\"x\":1}")
            .await
            .expect("update");
        let row = store.experiment(a).await.expect("read").expect("row");
        assert_eq!(
            (
                row.status.as_str(),
                row.updated_ms,
                row.result_json.as_str()
            ),
            ("completed", 3, "{\"x\":1}")
        );
        let stored = store.experiment(b).await.expect("read").expect("row");
        assert!(
            !stored.result_json.contains("u:p@"),
            "credentials redacted: {}",
            stored.result_json
        );
        let list = store.experiments(10).await.expect("list");
        assert_eq!(list.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
        assert_eq!(
            store.mark_interrupted_experiments(4).await.expect("mark"),
            1
        );
        assert_eq!(
            store
                .experiment(a)
                .await
                .expect("read")
                .expect("row")
                .status,
            "completed"
        );
        assert_eq!(
            store
                .experiment(b)
                .await
                .expect("read")
                .expect("row")
                .status,
            "interrupted"
        );
        assert!(store.experiment(99).await.expect("read").is_none());
    }
}
