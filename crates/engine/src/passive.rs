//! Reading the passive saturation curve of a target from the store: the
//! range is cut into windows, read in chunks with the store's stepped range
//! reads (never the raw pages of a week at once), and handed to the pure
//! [`passive_curve`].

use std::time::Duration;

use llmwatch_core::analysis::{
    assemble_windows, passive_curve, AnalysisConfig, Objectives, PassiveCurve, PassiveWindow,
    GAUGE_SAMPLES_PER_WINDOW, MAX_PASSIVE_WINDOWS, PASSIVE_GAUGE_SIGNALS, PASSIVE_WINDOW_SIGNALS,
};
use llmwatch_store::{Range, Store, StoreError, MAX_POINTS};

use crate::runners::live_diagnosis::samples_by_instant;

/// What to read: one target over `[from_ms, to_ms]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassiveQuery {
    pub target_id: i64,
    pub from_ms: i64,
    pub to_ms: i64,
    /// The window asked for; see [`fitted_window_ms`].
    pub window: Duration,
}

/// The window length used for a range: the one asked for, raised so the
/// range holds at most [`MAX_PASSIVE_WINDOWS`] windows, and at least
/// [`GAUGE_SAMPLES_PER_WINDOW`] ms (one gauge reading per ms at most).
pub fn fitted_window_ms(from_ms: i64, to_ms: i64, window: Duration) -> i64 {
    let asked = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let span = to_ms.saturating_sub(from_ms).max(0);
    let fitting = span.saturating_add(MAX_PASSIVE_WINDOWS - 1) / MAX_PASSIVE_WINDOWS;
    asked.max(fitting).max(GAUGE_SAMPLES_PER_WINDOW)
}

/// Every window of the range (ending in `(from_ms, to_ms]`, a window
/// apart), read a chunk at a time.
pub async fn read_windows(
    store: &Store,
    query: &PassiveQuery,
) -> Result<(Vec<PassiveWindow>, i64), StoreError> {
    let window_ms = fitted_window_ms(query.from_ms, query.to_ms, query.window);
    let gauge_step = (window_ms / GAUGE_SAMPLES_PER_WINDOW).max(1);
    // Windows per chunk: the gauge read of a chunk (about
    // GAUGE_SAMPLES_PER_WINDOW instants per window) stays within the
    // store's MAX_POINTS, so memory per chunk is bounded.
    let per_chunk = ((MAX_POINTS - 1).saturating_mul(gauge_step) / window_ms).max(1);
    let mut windows = Vec::new();
    let mut first_end = query.from_ms.saturating_add(window_ms);
    while first_end <= query.to_ms {
        let last_end = first_end
            .saturating_add(window_ms.saturating_mul(per_chunk - 1))
            .min(query.to_ms);
        let at_window_ends = Range::checked(first_end, last_end, window_ms)?;
        // Gauge instants inside every window of the chunk, ending on the
        // window ends (the first window starts a window before `first_end`).
        let inside = Range::checked(
            first_end.saturating_sub(window_ms) + gauge_step,
            last_end,
            gauge_step,
        )?;
        let (ends, gauges) = tokio::try_join!(
            store.signals_series(query.target_id, &PASSIVE_WINDOW_SIGNALS, at_window_ends),
            store.signals_series(query.target_id, &PASSIVE_GAUGE_SIGNALS, inside),
        )?;
        windows.extend(assemble_windows(
            &samples_by_instant([ends]),
            &samples_by_instant([gauges]),
            window_ms,
        ));
        first_end = last_end.saturating_add(window_ms);
    }
    Ok((windows, window_ms))
}

/// The passive curve of a target over a range, with the window length used.
pub async fn read_passive_curve(
    store: &Store,
    query: &PassiveQuery,
    objectives: &Objectives,
) -> Result<(PassiveCurve, i64), StoreError> {
    let (windows, window_ms) = read_windows(store, query).await?;
    Ok((
        passive_curve(&windows, objectives, &AnalysisConfig::default()),
        window_ms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_raised_to_fit_the_range() {
        let week = 7 * 24 * 3_600_000;
        assert_eq!(fitted_window_ms(0, week, Duration::from_secs(60)), 60_000);
        // A month of 1-minute windows is too many: raised to fit.
        let month = 30 * 24 * 3_600_000;
        let w = fitted_window_ms(0, month, Duration::from_secs(60));
        assert!(month / w <= MAX_PASSIVE_WINDOWS, "{w}");
        assert!(w > 60_000);
        assert_eq!(fitted_window_ms(0, 10, Duration::ZERO), 4);
        assert_eq!(fitted_window_ms(10, 0, Duration::from_secs(1)), 1_000);
    }
}
