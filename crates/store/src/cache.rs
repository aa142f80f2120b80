//! A small cache of decoded block groups. Sealed blocks never change (a
//! rewrite deletes the block and inserts another), so a group decoded once
//! serves every later query that reads it: a dashboard asking for the same
//! 24 h every few seconds decodes only what sealed since. Bounded in bytes:
//! a full cache admits nothing more (an LRU would thrash on a query wider
//! than itself) until retention or thinning empty it, or a smaller budget
//! evicts the least recently used.
//!
//! [`BoundedCache`] is the machinery (a budget in bytes, use clocks, an
//! epoch that keeps reads from before a removal out); the canaries' hour
//! cache (`probe_cache.rs`) is its other user, evicting instead of
//! refusing when full.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::block::SeriesValues;

/// The default budget: a day of a vLLM page's histograms and a dcgm page's
/// GPUs, decoded (≈ 2.5 M values at 8 bytes), with room to spare.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// One group's series over a block's up scrapes, decoded.
#[derive(Debug)]
pub(crate) struct DecodedGroup {
    pub series: Vec<DecodedSeries>,
}

/// Values as bits (NaN payloads kept), absences in a bitmap only when any.
#[derive(Debug)]
pub(crate) struct DecodedSeries {
    pub id: u32,
    values: Vec<f64>,
    absent: Option<Vec<u64>>,
}

impl DecodedSeries {
    pub(crate) fn new((id, values): SeriesValues) -> DecodedSeries {
        let absent = values.iter().any(Option::is_none).then(|| {
            let mut bits = vec![0u64; values.len().div_ceil(64)];
            for (i, value) in values.iter().enumerate() {
                if value.is_none() {
                    bits[i / 64] |= 1 << (i % 64);
                }
            }
            bits
        });
        DecodedSeries {
            id,
            values: values.into_iter().map(|v| v.unwrap_or(0.0)).collect(),
            absent,
        }
    }

    pub(crate) fn get(&self, position: usize) -> Option<f64> {
        let value = *self.values.get(position)?;
        match &self.absent {
            Some(bits) if bits[position / 64] & (1 << (position % 64)) != 0 => None,
            _ => Some(value),
        }
    }

    fn bytes(&self) -> usize {
        self.values.len() * 8 + self.absent.as_ref().map_or(0, |b| b.len() * 8) + 48
    }
}

/// What a kept value costs, in bytes (an estimate of its heap).
pub(crate) trait Weighed {
    fn bytes(&self) -> usize;
}

impl Weighed for DecodedGroup {
    fn bytes(&self) -> usize {
        self.series.iter().map(DecodedSeries::bytes).sum::<usize>() + 64
    }
}

/// What a cache at its budget does with one more value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WhenFull {
    /// Keeps what it holds and admits nothing: an LRU thrashes on a query
    /// wider than itself.
    Refuse,
    /// Drops the least recently used.
    EvictLeastRecent,
}

#[derive(Debug)]
struct Entries<K, V> {
    map: HashMap<K, (Arc<V>, u64)>,
    bytes: usize,
    /// Bumped by every use, so the smallest is the least recently used.
    clock: u64,
    /// Bumped by every removal: a value read before one is not kept (what
    /// it was read from may have changed or be gone).
    epoch: u64,
}

impl<K, V> Default for Entries<K, V> {
    fn default() -> Self {
        Entries {
            map: HashMap::new(),
            bytes: 0,
            clock: 0,
            epoch: 0,
        }
    }
}

/// Values kept by key within a budget in bytes, shared by every clone of
/// a `Store`: the decoded block groups and the canaries' hours.
#[derive(Debug)]
pub(crate) struct BoundedCache<K, V> {
    inner: Mutex<Entries<K, V>>,
    budget: std::sync::atomic::AtomicUsize,
    when_full: WhenFull,
}

impl<K: Eq + std::hash::Hash + Clone, V: Weighed> BoundedCache<K, V> {
    pub(crate) fn new(budget: usize, when_full: WhenFull) -> Self {
        BoundedCache {
            inner: Mutex::default(),
            budget: budget.into(),
            when_full,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<K, V>> {
        // The cache holds no invariant a panic could break half-way that
        // matters: at worst a byte count is off until the next clear.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn budget(&self) -> usize {
        self.budget.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new budget; a smaller one drops the least recently used.
    pub(crate) fn set_budget(&self, bytes: usize) {
        self.budget
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        evict(&mut self.lock(), bytes);
    }

    /// The epoch to hand back to [`BoundedCache::insert`].
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    pub(crate) fn get(&self, key: &K) -> Option<Arc<V>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        let entry = inner.map.get_mut(key)?;
        entry.1 = clock;
        Some(Arc::clone(&entry.0))
    }

    /// Whether anything more may be kept.
    pub(crate) fn has_room(&self) -> bool {
        let budget = self.budget();
        budget > 0 && self.lock().bytes < budget
    }

    /// Keeps `value` unless something was removed since `epoch`, it alone
    /// is over a quarter of the budget, or the cache is full and refuses.
    pub(crate) fn insert(&self, epoch: u64, key: K, value: Arc<V>) {
        let budget = self.budget();
        let size = value.bytes();
        if size > budget / 4 {
            return;
        }
        let mut inner = self.lock();
        if inner.epoch != epoch
            || (self.when_full == WhenFull::Refuse && inner.bytes + size > budget)
        {
            return;
        }
        inner.clock += 1;
        let clock = inner.clock;
        if let Some((old, _)) = inner.map.insert(key, (value, clock)) {
            inner.bytes -= old.bytes();
        }
        inner.bytes += size;
        evict(&mut inner, budget);
    }

    /// Forgets `key`, and any read that began before.
    pub(crate) fn remove(&self, key: &K) {
        let mut inner = self.lock();
        inner.epoch += 1;
        if let Some((old, _)) = inner.map.remove(key) {
            inner.bytes -= old.bytes();
        }
    }

    /// Forgets everything, and any read that began before.
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.map.clear();
        inner.bytes = 0;
        inner.epoch += 1;
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// Over `budget`, drops the least recently used down to three quarters of
/// it (so a full cache does not sort on every insert).
fn evict<K: Eq + std::hash::Hash + Clone, V: Weighed>(inner: &mut Entries<K, V>, budget: usize) {
    if inner.bytes <= budget {
        return;
    }
    let mut by_age: Vec<(u64, K)> = inner
        .map
        .iter()
        .map(|(key, (_, used))| (*used, key.clone()))
        .collect();
    by_age.sort_unstable_by_key(|(used, _)| *used);
    for (_, key) in by_age {
        if inner.bytes <= budget / 4 * 3 {
            break;
        }
        if let Some((value, _)) = inner.map.remove(&key) {
            inner.bytes -= value.bytes();
        }
    }
}

/// The decoded groups, by block and sample name.
#[derive(Debug)]
pub(crate) struct GroupCache(BoundedCache<(i64, String), DecodedGroup>);

impl Default for GroupCache {
    fn default() -> GroupCache {
        GroupCache::new(DEFAULT_CACHE_BYTES)
    }
}

impl GroupCache {
    pub(crate) fn new(budget: usize) -> GroupCache {
        GroupCache(BoundedCache::new(budget, WhenFull::Refuse))
    }

    pub(crate) fn set_budget(&self, bytes: usize) {
        self.0.set_budget(bytes);
    }

    /// The epoch to hand back to [`GroupCache::insert`].
    pub(crate) fn epoch(&self) -> u64 {
        self.0.epoch()
    }

    pub(crate) fn get(&self, block: i64, name: &str) -> Option<Arc<DecodedGroup>> {
        // The key is owned; a lookup builds one (names are short).
        self.0.get(&(block, name.to_string()))
    }

    /// Whether a range read should decode whole groups to keep them: not
    /// when off, nor when full (a query wider than the cache would
    /// otherwise evict, on every run, what its next run needs first).
    pub(crate) fn has_room(&self) -> bool {
        self.0.has_room()
    }

    /// Keeps `group` unless the cache was cleared since `epoch`, it alone
    /// is over a quarter of the budget, or there is no room: a full cache
    /// keeps what it holds (retention and thinning empty it).
    pub(crate) fn insert(&self, epoch: u64, block: i64, name: &str, group: Arc<DecodedGroup>) {
        self.0.insert(epoch, (block, name.to_string()), group);
    }

    /// Forgets everything: blocks were deleted or rewritten.
    pub(crate) fn clear(&self) {
        self.0.clear();
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.0.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(values: usize) -> Arc<DecodedGroup> {
        Arc::new(DecodedGroup {
            series: vec![DecodedSeries::new((
                1,
                (0..values)
                    .map(|i| (i % 3 != 0).then_some(i as f64))
                    .collect(),
            ))],
        })
    }

    #[test]
    fn decoded_series_keep_absences_and_nan_payloads() {
        let nan = f64::from_bits(0x7ff0_0000_0000_0002);
        let series = DecodedSeries::new((4, vec![Some(1.0), None, Some(nan), Some(-0.0)]));
        assert_eq!(series.get(0), Some(1.0));
        assert_eq!(series.get(1), None);
        assert_eq!(series.get(2).map(f64::to_bits), Some(nan.to_bits()));
        assert_eq!(series.get(3).map(f64::to_bits), Some((-0.0f64).to_bits()));
        assert_eq!(series.get(4), None);
        let full = DecodedSeries::new((4, vec![Some(2.0); 70]));
        assert!(full.absent.is_none());
        assert_eq!(full.get(69), Some(2.0));
    }

    #[test]
    fn a_full_cache_keeps_what_it_holds_and_clears_refuse_stale_decodes() {
        let one = group(1000).bytes();
        let cache = GroupCache::new(one * 10);
        let epoch = cache.epoch();
        for block in 0..12 {
            cache.insert(epoch, block, "a", group(1000));
        }
        assert!(cache.bytes() <= one * 10);
        assert!(!cache.has_room());
        assert!(cache.get(0, "a").is_some());
        assert!(cache.get(9, "a").is_some());
        assert!(cache.get(11, "a").is_none(), "no room, nothing evicted");
        // A smaller budget evicts the least recently used.
        cache.get(2, "a");
        cache.set_budget(one * 4);
        assert!(cache.get(2, "a").is_some());
        assert!(cache.get(1, "a").is_none());
        cache.clear();
        assert!(cache.has_room());
        assert!(cache.get(2, "a").is_none());
        cache.insert(epoch, 3, "a", group(1000));
        assert!(
            cache.get(3, "a").is_none(),
            "a decode from before the clear"
        );
        // One group over a quarter of the budget is never kept.
        cache.insert(cache.epoch(), 5, "a", group(5000));
        assert!(cache.get(5, "a").is_none());
    }
}
