//! Alert state and history.

use llmwatch_core::alerts::{Alert, AlertState};
use sqlx::Row;

use crate::{Store, StoreError};

/// The stored state of one (rule, target) alert.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub rule: String,
    pub target: String,
    /// The state machine's values, as the evaluator holds them.
    pub alert: Alert,
    pub last_eval_ms: i64,
    /// Rendered labels, as a JSON object.
    pub labels_json: String,
    /// Rendered annotations, as a JSON object.
    pub annotations_json: String,
}

/// One state change of an alert.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertEventRow {
    pub id: i64,
    pub ts_ms: i64,
    pub rule: String,
    pub target: String,
    pub state: AlertState,
    pub value: Option<f64>,
    pub labels_json: String,
    pub annotations_json: String,
}

/// One evaluation's changes, written in one transaction.
#[derive(Debug, Clone, Default)]
pub struct AlertChanges {
    pub upserts: Vec<AlertRow>,
    /// (rule, target) of alerts that are inactive or expired now.
    pub deletes: Vec<(String, String)>,
    /// New events (`id` is ignored).
    pub events: Vec<AlertEventRow>,
}

fn state_of(text: &str) -> Result<AlertState, StoreError> {
    text.parse::<AlertState>()
        .map_err(|err| StoreError::Corrupt(err.to_string()))
}

impl Store {
    /// Every stored alert that is not inactive.
    pub async fn alert_states(&self) -> Result<Vec<AlertRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT rule, target, state, active_at_ms, fired_at_ms, resolved_at_ms,
                keep_firing_since_ms, value, last_sent_ms, last_eval_ms, labels, annotations
             FROM alert_states ORDER BY rule, target",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(AlertRow {
                    rule: row.try_get("rule")?,
                    target: row.try_get("target")?,
                    alert: Alert {
                        state: state_of(row.try_get::<&str, _>("state")?)?,
                        active_at_ms: row.try_get("active_at_ms")?,
                        fired_at_ms: row.try_get("fired_at_ms")?,
                        resolved_at_ms: row.try_get("resolved_at_ms")?,
                        keep_firing_since_ms: row.try_get("keep_firing_since_ms")?,
                        value: row.try_get("value")?,
                        last_sent_ms: row.try_get("last_sent_ms")?,
                    },
                    last_eval_ms: row.try_get("last_eval_ms")?,
                    labels_json: row.try_get("labels")?,
                    annotations_json: row.try_get("annotations")?,
                })
            })
            .collect()
    }

    /// Writes one evaluation's changes in one transaction.
    pub async fn apply_alert_changes(&self, changes: &AlertChanges) -> Result<(), StoreError> {
        if changes.upserts.is_empty() && changes.deletes.is_empty() && changes.events.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for row in &changes.upserts {
            let alert = &row.alert;
            if alert.state == AlertState::Inactive {
                continue;
            }
            sqlx::query(
                "INSERT INTO alert_states (rule, target, state, active_at_ms, fired_at_ms,
                    resolved_at_ms, keep_firing_since_ms, value, last_sent_ms, last_eval_ms,
                    labels, annotations)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT(rule, target) DO UPDATE SET state = excluded.state,
                    active_at_ms = excluded.active_at_ms, fired_at_ms = excluded.fired_at_ms,
                    resolved_at_ms = excluded.resolved_at_ms,
                    keep_firing_since_ms = excluded.keep_firing_since_ms,
                    value = excluded.value, last_sent_ms = excluded.last_sent_ms,
                    last_eval_ms = excluded.last_eval_ms, labels = excluded.labels,
                    annotations = excluded.annotations",
            )
            .bind(&row.rule)
            .bind(&row.target)
            .bind(alert.state.as_str())
            .bind(alert.active_at_ms)
            .bind(alert.fired_at_ms)
            .bind(alert.resolved_at_ms)
            .bind(alert.keep_firing_since_ms)
            .bind(alert.value)
            .bind(alert.last_sent_ms)
            .bind(row.last_eval_ms)
            .bind(&row.labels_json)
            .bind(&row.annotations_json)
            .execute(&mut *tx)
            .await?;
        }
        for (rule, target) in &changes.deletes {
            sqlx::query("DELETE FROM alert_states WHERE rule = ? AND target = ?")
                .bind(rule)
                .bind(target)
                .execute(&mut *tx)
                .await?;
        }
        for event in &changes.events {
            sqlx::query(
                "INSERT INTO alert_events (ts_ms, rule, target, state, value, labels, annotations)
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(event.ts_ms)
            .bind(&event.rule)
            .bind(&event.target)
            .bind(event.state.as_str())
            .bind(event.value)
            .bind(&event.labels_json)
            .bind(&event.annotations_json)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Alert history, newest first: events with `id < before_id` (all when
    /// `None`), optionally of one rule and/or one target, at most `limit`.
    pub async fn alert_events(
        &self,
        rule: Option<&str>,
        target: Option<&str>,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AlertEventRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, ts_ms, rule, target, state, value, labels, annotations FROM alert_events
             WHERE (?1 IS NULL OR rule = ?1) AND (?2 IS NULL OR target = ?2)
               AND (?3 IS NULL OR id < ?3)
             ORDER BY id DESC LIMIT ?4",
        )
        .bind(rule)
        .bind(target)
        .bind(before_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(AlertEventRow {
                    id: row.try_get("id")?,
                    ts_ms: row.try_get("ts_ms")?,
                    rule: row.try_get("rule")?,
                    target: row.try_get("target")?,
                    state: state_of(row.try_get::<&str, _>("state")?)?,
                    value: row.try_get("value")?,
                    labels_json: row.try_get("labels")?,
                    annotations_json: row.try_get("annotations")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(state: AlertState) -> AlertRow {
        AlertRow {
            rule: "ttft".into(),
            target: "a".into(),
            alert: Alert {
                state,
                active_at_ms: Some(1),
                fired_at_ms: Some(2),
                resolved_at_ms: None,
                keep_firing_since_ms: None,
                value: Some(1.5),
                last_sent_ms: None,
            },
            last_eval_ms: 3,
            labels_json: "{\"alertname\":\"ttft\"}".into(),
            annotations_json: "{}".into(),
        }
    }

    #[tokio::test]
    async fn alert_state_and_history_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a.db")).await.unwrap();
        let firing = alert(AlertState::Firing);
        let event = AlertEventRow {
            id: 0,
            ts_ms: 2,
            rule: "ttft".into(),
            target: "a".into(),
            state: AlertState::Firing,
            value: Some(1.5),
            labels_json: "{}".into(),
            annotations_json: "{}".into(),
        };
        store
            .apply_alert_changes(&AlertChanges {
                upserts: vec![firing.clone()],
                deletes: vec![],
                events: vec![event.clone(), event.clone()],
            })
            .await
            .unwrap();
        assert_eq!(store.alert_states().await.unwrap(), vec![firing]);
        let history = store.alert_events(None, None, None, 10).await.unwrap();
        assert_eq!(history.len(), 2);
        assert!(history[0].id > history[1].id);
        let older = store
            .alert_events(Some("ttft"), Some("a"), Some(history[0].id), 10)
            .await
            .unwrap();
        assert_eq!(older.len(), 1);
        assert!(store
            .alert_events(Some("other"), None, None, 10)
            .await
            .unwrap()
            .is_empty());
        store
            .apply_alert_changes(&AlertChanges {
                deletes: vec![("ttft".into(), "a".into())],
                ..AlertChanges::default()
            })
            .await
            .unwrap();
        assert!(store.alert_states().await.unwrap().is_empty());
    }
}
