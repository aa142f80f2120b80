//! The KV-cache block pool with a prefix cache, shaped like vLLM V1's
//! `BlockPool`: blocks are reference-counted; a freed block keeps its hash
//! and goes to the back of an LRU free queue, so a later request with the
//! same prefix can take it back (a hit) until it is evicted by a new
//! allocation from the front of the queue.

use std::collections::{BTreeMap, HashMap};

pub(crate) type BlockId = usize;

/// Blocks the pool keeps for itself (vLLM V1's `null_block`).
const NULL_BLOCKS: usize = 1;

pub(crate) struct BlockPool {
    ref_cnt: Vec<u32>,
    hash: Vec<Option<u64>>,
    /// Free blocks in eviction order: smallest key first.
    free: BTreeMap<i64, BlockId>,
    free_key: Vec<Option<i64>>,
    next_back: i64,
    next_front: i64,
    cached: HashMap<u64, BlockId>,
    prefix_caching: bool,
}

impl BlockPool {
    pub(crate) fn new(num_blocks: usize, prefix_caching: bool) -> BlockPool {
        let mut pool = BlockPool {
            ref_cnt: vec![0; num_blocks],
            hash: vec![None; num_blocks],
            free: BTreeMap::new(),
            free_key: vec![None; num_blocks],
            next_back: 0,
            next_front: -1,
            cached: HashMap::new(),
            prefix_caching,
        };
        // Block 0 is vLLM's null block: taken from the free queue at start,
        // never given to a sequence, and left out of the usage. So 40 blocks
        // hold 39 blocks of sequences (a real vLLM 0.32 with
        // `--num-gpu-blocks-override 40` runs 7 sequences of 5 blocks).
        for b in NULL_BLOCKS.min(num_blocks)..num_blocks {
            pool.push_back(b);
        }
        pool
    }

    /// Blocks that can hold sequences: all but the null block.
    pub(crate) fn num_usable(&self) -> usize {
        self.ref_cnt.len().saturating_sub(NULL_BLOCKS)
    }

    pub(crate) fn num_free(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn num_used(&self) -> usize {
        self.num_usable() - self.num_free()
    }

    /// vLLM's `kv_cache_usage_perc`: `1 - free / (total - 1)`, the null
    /// block left out (cached-but-free blocks count as free).
    pub(crate) fn usage(&self) -> f64 {
        if self.num_usable() == 0 {
            return 0.0;
        }
        self.num_used() as f64 / self.num_usable() as f64
    }

    fn push_back(&mut self, b: BlockId) {
        let k = self.next_back;
        self.next_back += 1;
        self.free.insert(k, b);
        self.free_key[b] = Some(k);
    }

    fn push_front(&mut self, b: BlockId) {
        let k = self.next_front;
        self.next_front -= 1;
        self.free.insert(k, b);
        self.free_key[b] = Some(k);
    }

    fn remove_free(&mut self, b: BlockId) {
        if let Some(k) = self.free_key[b].take() {
            self.free.remove(&k);
        }
    }

    /// The longest run of cached blocks matching `hashes` from the start.
    pub(crate) fn lookup_prefix(&self, hashes: &[u64]) -> Vec<BlockId> {
        if !self.prefix_caching {
            return Vec::new();
        }
        let mut hit = Vec::new();
        for h in hashes {
            match self.cached.get(h) {
                Some(&b) => hit.push(b),
                None => break,
            }
        }
        hit
    }

    /// How many of `blocks` sit in the free queue (and so stop being free
    /// once touched).
    pub(crate) fn count_free_among(&self, blocks: &[BlockId]) -> usize {
        blocks.iter().filter(|&&b| self.ref_cnt[b] == 0).count()
    }

    /// Takes a reference on a cached block (a prefix hit).
    pub(crate) fn touch(&mut self, b: BlockId) {
        if self.ref_cnt[b] == 0 {
            self.remove_free(b);
        }
        self.ref_cnt[b] += 1;
    }

    /// A fresh block from the front of the free queue, evicting its cached
    /// hash; `None` when the cache is full.
    pub(crate) fn allocate(&mut self) -> Option<BlockId> {
        let (_, b) = self.free.pop_first()?;
        self.free_key[b] = None;
        if let Some(h) = self.hash[b].take() {
            if self.cached.get(&h) == Some(&b) {
                self.cached.remove(&h);
            }
        }
        self.ref_cnt[b] = 1;
        Some(b)
    }

    /// Drops one reference on each block, tail first, so that the tail of a
    /// sequence is evicted before its (more shareable) head.
    pub(crate) fn free_blocks(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            if self.ref_cnt[b] == 0 {
                continue;
            }
            self.ref_cnt[b] -= 1;
            if self.ref_cnt[b] == 0 {
                if self.hash[b].is_some() {
                    self.push_back(b);
                } else {
                    self.push_front(b);
                }
            }
        }
    }

    /// Records that block `b` now holds the full prompt block with hash `h`.
    pub(crate) fn commit(&mut self, b: BlockId, h: u64) {
        if !self.prefix_caching || self.hash[b].is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(h) {
            e.insert(b);
            self.hash[b] = Some(h);
        }
    }
}

impl BlockPool {
    /// Forgets every cached prefix (vLLM's `reset_prefix_cache`); refused
    /// (`false`) while a block is in use, as vLLM does.
    pub(crate) fn reset_prefix_cache(&mut self) -> bool {
        if self.num_used() > 0 {
            return false;
        }
        self.cached.clear();
        self.hash.iter_mut().for_each(|h| *h = None);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_blocks_stay_cached_until_evicted() {
        // Five blocks: the null block and four that hold sequences.
        let mut pool = BlockPool::new(5, true);
        assert_eq!((pool.num_usable(), pool.usage()), (4, 0.0));
        let a = pool.allocate().expect("free");
        let b = pool.allocate().expect("free");
        pool.commit(a, 11);
        pool.commit(b, 22);
        pool.free_blocks(&[a, b]);
        assert_eq!(pool.num_free(), 4);
        assert_eq!(pool.lookup_prefix(&[11, 22, 33]), vec![a, b]);
        // Two unhashed blocks are handed out first, then the LRU head (`b`,
        // freed first because tail-first).
        let _ = pool.allocate();
        let _ = pool.allocate();
        let c = pool.allocate().expect("free");
        assert_eq!(c, b);
        assert_eq!(pool.lookup_prefix(&[11, 22]), vec![a]);
        pool.touch(a);
        assert_eq!((pool.num_free(), pool.usage()), (0, 1.0));
        assert!(pool.allocate().is_none());
    }
}
