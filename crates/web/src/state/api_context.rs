//! Everything the API reads: the store, the engine's shared state, the
//! config.

use std::sync::Arc;

use llmwatch_config::Config;
use llmwatch_engine::alerts::AlertsHandle;
use llmwatch_engine::runners::sweep::schedule::SweepSlots;
use llmwatch_engine::sources::scrape::ScrapeCounters;
use llmwatch_engine::targets::TargetSet;
use llmwatch_store::{Store, StoreError};

use crate::own_metrics::OwnMetrics;

/// Everything the API reads.
pub struct ApiContext {
    pub store: Store,
    pub counters: Arc<ScrapeCounters>,
    pub alerts: AlertsHandle,
    pub own_metrics: OwnMetrics,
    /// The watched targets, configured and discovered (for sweeps started
    /// through the API or a page).
    pub targets: TargetSet,
    /// The whole config, for sweep settings (GPU pages of targets).
    pub config: Arc<Config>,
    /// Shared with the sweep schedule: one sweep at a time.
    pub sweeps: SweepSlots,
    /// One experiment (`POST /api/v1/experiments`) at a time.
    pub experiments: super::experiment_slot::ExperimentSlot,
    /// "Predict a change" of a stored sweep (the twin; none without a
    /// runner).
    pub predictions: super::predictions::Predictions,
}

impl ApiContext {
    /// Starts sweeps in this daemon's one slot.
    pub fn sweep_starter(&self) -> llmwatch_engine::runners::sweep::start::SweepStarter {
        llmwatch_engine::runners::sweep::start::SweepStarter {
            store: self.store.clone(),
            slots: self.sweeps.clone(),
        }
    }

    pub async fn new(
        config: &Config,
        store: Store,
        counters: Arc<ScrapeCounters>,
        alerts: AlertsHandle,
        targets: TargetSet,
    ) -> Result<ApiContext, StoreError> {
        Ok(ApiContext {
            own_metrics: OwnMetrics::new(&store).await?,
            store,
            counters,
            alerts,
            targets,
            config: Arc::new(config.clone()),
            sweeps: SweepSlots::default(),
            experiments: Default::default(),
            predictions: Default::default(),
        })
    }
}
