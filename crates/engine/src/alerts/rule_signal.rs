//! The live-diagnosis value of a verdict rule, read from the store.

use std::time::Duration;

use llmwatch_core::alerts::RuleSignal;
use llmwatch_store::{Store, StoreError};

use super::duration_ms;

/// The live-diagnosis value of a rule at `now_ms`; `None` for a stored
/// signal (read elsewhere) or before the first verdict.
pub async fn live_value(
    rule: RuleSignal,
    store: &Store,
    target_id: i64,
    now_ms: i64,
    window: Duration,
) -> Result<Option<f64>, StoreError> {
    match rule {
        RuleSignal::Signal(_) => Ok(None),
        RuleSignal::Bottleneck(kind) => Ok(store.live_verdict(target_id).await?.map(|row| {
            if row.verdict == kind.code() {
                1.0
            } else {
                0.0
            }
        })),
        RuleSignal::BottleneckChanges => {
            let from = now_ms.saturating_sub(duration_ms(window));
            let changes = store.live_changes(target_id, from, now_ms, 10_000).await?;
            // A target's first verdict is not a change.
            let count = changes.iter().filter(|c| c.previous.is_some()).count();
            Ok(Some(count as f64))
        }
    }
}
