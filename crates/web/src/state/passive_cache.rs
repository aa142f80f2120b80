//! The passive-curve cache the target page reads through: a leaf, so the
//! pages' config (and through it the app state) holds it without importing
//! the page that fills it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use llmwatch_core::analysis::PassiveCurve;

/// How long a computed passive curve is served as it is. It spans 7 days of
/// 1-minute windows, and recomputing it was ≈ 40 % of a target page's time
/// (BENCHMARKS.md); a minute more of traffic moves it by a window or so.
pub const PASSIVE_CURVE_TTL_MS: i64 = 60_000;

/// A target's id and its objectives (as bits): what a curve depends on.
pub(crate) type CurveKey = (i64, Option<u64>, Option<u64>);

/// A passive curve as read: the curve, its window length, where it starts.
pub(crate) type CurveRead = (PassiveCurve, i64, i64);

/// A curve and when it was computed (ms).
type KeptCurve = (i64, Arc<CurveRead>);

/// Passive curves computed lately, per target and objectives, so that a
/// page refreshed (or its chart downloads fetched) within
/// [`PASSIVE_CURVE_TTL_MS`] does not read 7 days of windows again.
#[derive(Debug, Clone, Default)]
pub struct PassiveCurveCache {
    curves: Arc<Mutex<HashMap<CurveKey, KeptCurve>>>,
}

impl PassiveCurveCache {
    /// The curve kept for `key`, if it was computed at most a TTL before
    /// `now` (and not after it: a page asked as of an earlier instant reads).
    pub(crate) fn fresh(&self, key: &CurveKey, now: i64) -> Option<Arc<CurveRead>> {
        let curves = self.curves.lock().ok()?;
        let (at, read) = curves.get(key)?;
        (0..PASSIVE_CURVE_TTL_MS)
            .contains(&now.saturating_sub(*at))
            .then(|| Arc::clone(read))
    }

    pub(crate) fn keep(&self, key: CurveKey, now: i64, read: Arc<CurveRead>) {
        if let Ok(mut curves) = self.curves.lock() {
            // Stale entries go: the map holds at most the targets viewed lately.
            curves.retain(|_, (at, _)| now.saturating_sub(*at) < PASSIVE_CURVE_TTL_MS);
            curves.insert(key, (now, read));
        }
    }
}

#[cfg(test)]
mod tests {
    use llmwatch_core::analysis::{passive_curve, AnalysisConfig, Objectives};

    use super::*;

    #[test]
    fn a_curve_is_served_for_a_ttl_after_it_was_computed_and_no_longer() {
        let cache = PassiveCurveCache::default();
        let curve = passive_curve(&[], &Objectives::default(), &AnalysisConfig::default());
        let key: CurveKey = (7, Some(1.0f64.to_bits()), None);
        let at = 1_800_000_000_000;
        cache.keep(key, at, Arc::new((curve, 60_000, at - 1)));
        assert!(cache.fresh(&key, at).is_some());
        assert!(cache.fresh(&key, at + PASSIVE_CURVE_TTL_MS - 1).is_some());
        assert!(cache.fresh(&key, at + PASSIVE_CURVE_TTL_MS).is_none());
        // Asked as of an earlier instant: computed again.
        assert!(cache.fresh(&key, at - 1).is_none());
        // Other objectives or another target: their own curve.
        assert!(cache.fresh(&(7, None, None), at).is_none());
        assert!(cache
            .fresh(&(8, Some(1.0f64.to_bits()), None), at)
            .is_none());
        // A later curve replaces it, and stale entries are dropped.
        let later = passive_curve(&[], &Objectives::default(), &AnalysisConfig::default());
        cache.keep(
            (8, None, None),
            at + PASSIVE_CURVE_TTL_MS,
            Arc::new((later, 60_000, at)),
        );
        assert_eq!(cache.curves.lock().map(|c| c.len()).ok(), Some(1));
    }
}
