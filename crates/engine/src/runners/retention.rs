//! The store's hourly maintenance, once at start and then every hour:
//! rows past their retention are deleted (the watched targets' and GPU
//! sources' series stay), then scrapes past `downsample_after` are thinned.

use std::time::Duration;

use llmwatch_store::{Pruned, RetentionCutoffs, Store};
use tokio::sync::watch;

use crate::clock::now_ms;
use crate::events::Failure;
use crate::targets::TargetSet;
use crate::ticker::JitteredTicker;

/// How often the maintenance runs.
const RETENTION_PERIOD: Duration = Duration::from_secs(3600);

/// What the hourly maintenance does to old scrapes.
#[derive(Debug, Clone)]
pub struct Retention {
    pub keep: Duration,
    pub probes: Duration,
    pub sweeps: Duration,
    pub alert_history: Duration,
    /// The GPU sources and the watched targets: their series stay.
    pub gpu_sources: Vec<i64>,
    pub targets: TargetSet,
    pub downsample_after: Duration,
    /// Zero: never thin.
    pub downsample_interval: Duration,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Once an hour (and once at start): deletes scrapes past the retention,
/// then thins those past `downsample_after`.
pub async fn run_retention(
    store: Store,
    retention: Retention,
    mut shutdown: watch::Receiver<bool>,
) {
    // One job for the whole store: nothing to spread out.
    let mut ticker = JitteredTicker::starting_now(RETENTION_PERIOD);
    while ticker.tick(&mut shutdown).await {
        let now = now_ms();
        let before = |keep: Duration| now.saturating_sub(ms(keep));
        let cutoffs = RetentionCutoffs {
            scrapes_before_ms: before(retention.keep),
            probes_before_ms: before(retention.probes),
            sweeps_before_ms: before(retention.sweeps),
            alert_events_before_ms: before(retention.alert_history),
        };
        let mut active = retention.gpu_sources.clone();
        for name in retention.targets.names() {
            match store.target_by_name(&name).await {
                Ok(Some(row)) => active.push(row.id),
                Ok(None) => {}
                Err(err) => Failure::StoreRead.emit(Some(&name), &err),
            }
        }
        match store.run_retention(&cutoffs, &active).await {
            Ok(pruned) if pruned == Pruned::default() => {}
            Ok(pruned) => tracing::info!(?pruned, "retention: old rows deleted"),
            Err(err) => Failure::Retention.emit(None, &err),
        }
        if retention.downsample_interval.is_zero() {
            continue;
        }
        let cutoff = now.saturating_sub(ms(retention.downsample_after));
        match store
            .downsample(cutoff, ms(retention.downsample_interval))
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "downsampling: old scrapes thinned"),
            Err(err) => Failure::Downsampling.emit(None, &err),
        }
    }
}
