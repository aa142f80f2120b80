//! Reads each target's capacity reference for the autoscaling gauges
//! (`llmwatch_core::autoscale`): its last finished concurrency sweep, else
//! its passive curve over the last 7 days. Both llmwatch's own `/metrics`
//! and remote write use it, each with its own [`CapacityReferences`]: a
//! reference is read at most once a [`REFERENCE_TTL_MS`] per target.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llmwatch_core::analysis::{
    Load, Objectives, DEFAULT_PASSIVE_RANGE_S, DEFAULT_PASSIVE_WINDOW_S,
};
use llmwatch_core::autoscale::{
    autoscale_signals, AutoscaleSignals, CapacityReference, CapacitySource,
};
use llmwatch_core::signals::Signal;
use llmwatch_store::{Store, StoreError};

use crate::events::Failure;
use crate::passive::{read_passive_curve, PassiveQuery};
use crate::runners::sweep::{load_sweep, SweepError};

/// How long a reference is kept before it is read again.
pub const REFERENCE_TTL_MS: i64 = 60_000;
/// How long "no reference" is kept: a first sweep shows within seconds.
pub const NO_REFERENCE_TTL_MS: i64 = 5_000;

/// (when read, the reference) per (target id, TTFT objective bits).
type Cached = (i64, Option<Arc<CapacityReference>>);

/// The references read so far.
#[derive(Debug, Default)]
pub struct CapacityReferences {
    cache: Mutex<HashMap<(i64, Option<u64>), Cached>>,
}

impl CapacityReferences {
    /// The reference of target `name` (id `target_id`) as of `now_ms`.
    pub async fn reference(
        &self,
        store: &Store,
        target_id: i64,
        name: &str,
        ttft_objective: Option<f64>,
        now_ms: i64,
    ) -> Result<Option<Arc<CapacityReference>>, StoreError> {
        let key = (target_id, ttft_objective.map(f64::to_bits));
        if let Some((at, reference)) = self.lock().get(&key) {
            let ttl = match reference {
                Some(_) => REFERENCE_TTL_MS,
                None => NO_REFERENCE_TTL_MS,
            };
            if now_ms - at < ttl && now_ms >= *at {
                return Ok(reference.clone());
            }
        }
        let reference = match sweep_reference(store, name).await? {
            Some(sweep) => Some(sweep),
            None => passive_reference(store, target_id, ttft_objective, now_ms).await?,
        }
        .map(Arc::new);
        self.lock().insert(key, (now_ms, reference.clone()));
        Ok(reference)
    }

    /// The gauges of a target now, from its latest stored signals.
    pub async fn signals_now(
        &self,
        store: &Store,
        target_id: i64,
        name: &str,
        ttft_objective: Option<f64>,
        now_ms: i64,
    ) -> Result<(AutoscaleSignals, Option<CapacitySource>), StoreError> {
        let latest = store.latest_signals(target_id).await?;
        let get = |s: Signal| latest.iter().find(|(x, _)| *x == s).map(|(_, v)| *v);
        let reference = self
            .reference(store, target_id, name, ttft_objective, now_ms)
            .await?;
        let signals = autoscale_signals(
            reference.as_deref(),
            get(Signal::RequestsRunning),
            get(Signal::RequestsWaiting),
            ttft_objective,
        );
        Ok((signals, reference.map(|r| r.source)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i64, Option<u64>), Cached>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The last finished sweep's sustainable (else saturation) concurrency from
/// its verdict, with its usable concurrency steps' p95 TTFT (none when the
/// steps cannot be read: logged, the verdict still counts).
async fn sweep_reference(
    store: &Store,
    name: &str,
) -> Result<Option<CapacityReference>, StoreError> {
    let Some(row) = store.last_finished_sweep_of(name).await? else {
        return Ok(None);
    };
    let verdict: Option<serde_json::Value> = row
        .verdict_json
        .as_deref()
        .and_then(|v| serde_json::from_str(v).ok());
    let concurrency_at = |key: &str| {
        verdict.as_ref()?[key]["load"]["concurrency"]
            .as_f64()
            .filter(|c| c.is_finite() && *c > 0.0)
    };
    let Some(max_sustainable) =
        concurrency_at("sustainable").or_else(|| concurrency_at("saturation"))
    else {
        return Ok(None);
    };
    let steps = match load_sweep(store, row.id).await {
        Ok(stored) => stored.steps,
        Err(SweepError::Store(err)) => return Err(err),
        Err(err) => {
            Failure::StoreRead.emit(None, &format!("sweep {}: {err}", row.id));
            Vec::new()
        }
    };
    let curve = steps
        .iter()
        .filter(|s| s.client_bound.is_none() && s.cache_contaminated.is_none())
        .filter_map(|s| match s.load {
            Load::Concurrency(c) => Some((f64::from(c), s.ttft.p95?)),
            Load::RequestRate(_) => None,
        })
        .collect();
    Ok(Some(CapacityReference {
        source: CapacitySource::Sweep,
        max_sustainable,
        ttft_p95_by_concurrency: curve,
    }))
}

/// The passive curve's highest concurrency that met the objective (else
/// its knee), with its supported points' p95 TTFT.
async fn passive_reference(
    store: &Store,
    target_id: i64,
    ttft_objective: Option<f64>,
    now_ms: i64,
) -> Result<Option<CapacityReference>, StoreError> {
    let range_ms = i64::try_from(DEFAULT_PASSIVE_RANGE_S * 1000).unwrap_or(i64::MAX);
    let query = PassiveQuery {
        target_id,
        from_ms: now_ms.saturating_sub(range_ms),
        to_ms: now_ms,
        window: Duration::from_secs(DEFAULT_PASSIVE_WINDOW_S),
    };
    let objectives = Objectives {
        ttft_p95: ttft_objective,
        ..Objectives::default()
    };
    let (curve, _) = read_passive_curve(store, &query, &objectives).await?;
    let max = curve
        .sustainable
        .as_ref()
        .map(|s| s.concurrency)
        .or_else(|| curve.knee.as_ref().ok().map(|k| k.concurrency));
    let Some(max_sustainable) = max.filter(|m| *m > 0.0) else {
        return Ok(None);
    };
    let points = curve
        .points
        .iter()
        .filter(|p| p.supported)
        .filter_map(|p| Some((p.concurrency, p.ttft_p95?)))
        .collect();
    Ok(Some(CapacityReference {
        source: CapacitySource::Passive,
        max_sustainable,
        ttft_p95_by_concurrency: points,
    }))
}
