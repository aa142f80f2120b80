//! The latency breakdown over time, for the target page and the API: the
//! canaries' mean TTFT/e2e against the engine's phase means over the same
//! windows, split by `llmwatch_core::analysis::latency_breakdown`.

use llmwatch_core::analysis::{latency_breakdown, ClientMeans, LatencyBreakdown, ServerPhases};
use llmwatch_core::signals::Signal;
use llmwatch_store::{Point, Range, Store, StoreError, PROBE_WINDOW_MIN_MS};

/// The signals of the latency breakdown: the canaries' means against the
/// engine's phase means over the same windows.
pub const BREAKDOWN_SIGNALS: &[Signal] = &[
    Signal::ProbeTtftMean,
    Signal::ProbeE2eMean,
    Signal::ServerTtftMean,
    Signal::ServerE2eMean,
    Signal::ServerQueueTimeMean,
    Signal::ServerPrefillTimeMean,
    Signal::ServerDecodeTimeMean,
    Signal::ServerInferenceTimeMean,
];

/// The latency breakdown over `range`, each instant over the window before
/// it. The step is at least [`PROBE_WINDOW_MIN_MS`], the shortest window the
/// store rolls probe signals over, so the canaries' means and the engine's
/// phase means always cover the same window.
pub async fn breakdown_series(
    store: &Store,
    target_id: i64,
    range: Range,
) -> Result<Vec<(i64, LatencyBreakdown)>, StoreError> {
    let step = range.step_ms.max(PROBE_WINDOW_MIN_MS);
    let range = Range::checked(range.from_ms, range.to_ms, step)?;
    let series = store
        .signals_series(target_id, BREAKDOWN_SIGNALS, range)
        .await?;
    Ok(breakdown_points(&series))
}

/// Pure: the latency breakdown at each instant of `series` (the signals of
/// [`BREAKDOWN_SIGNALS`] over one range) where the engine's phase means and the
/// canaries' means are both there; instants without are left out.
pub fn breakdown_points(series: &[(Signal, Vec<Point>)]) -> Vec<(i64, LatencyBreakdown)> {
    let mut instants: Vec<i64> = series
        .iter()
        .filter(|(s, _)| *s == Signal::ProbeTtftMean)
        .flat_map(|(_, points)| points.iter().map(|p| p.ts_ms))
        .collect();
    instants.sort_unstable();
    instants.dedup();
    let at = |ts_ms: i64| -> Vec<(Signal, f64)> {
        series
            .iter()
            .filter_map(|(signal, points)| {
                let i = points.binary_search_by_key(&ts_ms, |p| p.ts_ms).ok()?;
                Some((*signal, points[i].value))
            })
            .collect()
    };
    instants
        .into_iter()
        .filter_map(|ts_ms| {
            let signals = at(ts_ms);
            let client = ClientMeans {
                ttft_s: signal_value(&signals, Signal::ProbeTtftMean),
                e2e_s: signal_value(&signals, Signal::ProbeE2eMean),
            };
            latency_breakdown(&ServerPhases::from_signals(&signals), &client, true)
                .ok()
                .map(|b| (ts_ms, b))
        })
        .collect()
}

fn signal_value(signals: &[(Signal, f64)], signal: Signal) -> Option<f64> {
    signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v)
}
