//! The live verdict as pages show it: on the overview card and the target
//! page, what limits the target now and the numbers it rests on.

use llmwatch_core::analysis::LiveKind;
use llmwatch_store::{Store, StoreError};

use super::format;

/// A target's standing verdict, ready to render.
#[derive(Debug, Clone)]
pub struct LiveCard {
    /// Machine name, e.g. `kv_cache_capacity` (a CSS class and test hook).
    pub code: String,
    /// The verdict in words.
    pub words: String,
    pub confidence: String,
    pub evidence: String,
    pub what_to_try: Option<String>,
    pub evaluated: String,
    /// `ok` when healthy, `na` when idle, `bad` for a bottleneck.
    pub class: &'static str,
}

/// The target's live verdict, `None` before the first evaluation.
pub async fn live_card(store: &Store, target_id: i64) -> Result<Option<LiveCard>, StoreError> {
    let Some(row) = store.live_verdict(target_id).await? else {
        return Ok(None);
    };
    let kind = LiveKind::from_code(&row.verdict);
    let class = match kind {
        Some(LiveKind::Healthy) => "ok",
        Some(LiveKind::Idle) | None => "na",
        Some(LiveKind::Bottleneck(_)) => "bad",
    };
    Ok(Some(LiveCard {
        words: kind.map_or_else(|| row.verdict.clone(), |k| k.name().to_string()),
        code: row.verdict,
        confidence: row.confidence,
        evidence: row.evidence,
        what_to_try: Some(row.what_to_try).filter(|t| !t.is_empty()),
        evaluated: format::datetime(row.ts_ms),
        class,
    }))
}
