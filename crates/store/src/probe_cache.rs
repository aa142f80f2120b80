//! The canaries' timings, decoded, per target and hour.
//!
//! A target page, the live diagnosis and the alert evaluator read the same
//! canary probes again and again (a day of them per page view, the last
//! minutes every few seconds); reading them through SQLite decodes every
//! row anew. An hour is kept until a canary probe is written into it or
//! retention deletes probes, so what is served is always what SQLite holds.
//! Bounded in bytes; the least recently used hours go first.

use std::sync::Arc;

use llmwatch_core::probe_signals::ProbeTimings;

use crate::cache::{BoundedCache, Weighed, WhenFull};

/// An hour, in milliseconds: the unit that is cached and invalidated.
pub(crate) const HOUR_MS: i64 = 3_600_000;

/// The default budget: about 40 target-days of canaries every 15 s.
pub const DEFAULT_PROBE_CACHE_BYTES: usize = 32 << 20;

/// One target's canary probes of one hour, oldest first.
#[derive(Debug, Default)]
pub(crate) struct HourProbes {
    pub stamps: Vec<i64>,
    pub timings: Vec<ProbeTimings>,
}

impl Weighed for HourProbes {
    fn bytes(&self) -> usize {
        self.stamps.len() * 8
            + self
                .timings
                .iter()
                .map(|t| std::mem::size_of::<ProbeTimings>() + t.itl_s.len() * 8)
                .sum::<usize>()
            + 64
    }
}

/// The hour `ts_ms` falls in (floor, also before 1970).
pub(crate) fn hour_of(ts_ms: i64) -> i64 {
    ts_ms.div_euclid(HOUR_MS)
}

/// The cache: least recently used hours go first.
#[derive(Debug)]
pub(crate) struct ProbeCache(BoundedCache<(i64, i64), HourProbes>);

impl Default for ProbeCache {
    fn default() -> ProbeCache {
        ProbeCache::new(DEFAULT_PROBE_CACHE_BYTES)
    }
}

impl ProbeCache {
    pub(crate) fn new(budget: usize) -> ProbeCache {
        ProbeCache(BoundedCache::new(budget, WhenFull::EvictLeastRecent))
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.0.epoch()
    }

    pub(crate) fn get(&self, target_id: i64, hour: i64) -> Option<Arc<HourProbes>> {
        self.0.get(&(target_id, hour))
    }

    /// Keeps `hour` unless something was invalidated since `epoch`.
    pub(crate) fn insert(&self, epoch: u64, target_id: i64, hour: i64, probes: Arc<HourProbes>) {
        self.0.insert(epoch, (target_id, hour), probes);
    }

    /// A canary probe was written at `ts_ms`.
    pub(crate) fn invalidate(&self, target_id: i64, ts_ms: i64) {
        self.0.remove(&(target_id, hour_of(ts_ms)));
    }

    /// Probes were deleted.
    pub(crate) fn clear(&self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(n: usize) -> Arc<HourProbes> {
        Arc::new(HourProbes {
            stamps: (0..n as i64).collect(),
            timings: (0..n)
                .map(|_| ProbeTimings {
                    ok: true,
                    ttft_s: Some(0.1),
                    tpot_s: None,
                    e2e_s: 0.2,
                    itl_s: vec![0.01; 15],
                })
                .collect(),
        })
    }

    #[test]
    fn a_write_into_an_hour_forgets_it_and_a_read_from_before_is_not_kept() {
        let cache = ProbeCache::default();
        let epoch = cache.epoch();
        cache.insert(epoch, 1, 5, hour(3));
        assert!(cache.get(1, 5).is_some());
        cache.invalidate(1, 5 * HOUR_MS + 10);
        assert!(cache.get(1, 5).is_none());
        // Read before the write, kept after it: refused.
        cache.insert(epoch, 1, 5, hour(3));
        assert!(cache.get(1, 5).is_none());
        cache.insert(cache.epoch(), 1, 6, hour(3));
        cache.clear();
        assert!(cache.get(1, 6).is_none());
        assert_eq!(hour_of(-1), -1);
    }

    #[test]
    fn the_budget_holds_and_the_oldest_go_first() {
        let budget = hour(10).bytes() * 4 + 10;
        let cache = ProbeCache::new(budget);
        for h in 0..8 {
            cache.insert(cache.epoch(), 1, h, hour(10));
            assert!(cache.0.bytes() <= budget);
        }
        assert!(cache.get(1, 7).is_some());
        assert!(cache.get(1, 0).is_none());
    }
}
