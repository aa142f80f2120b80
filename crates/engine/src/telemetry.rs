//! Counters the engine keeps about itself on its hot paths, lock-free, for
//! the web layer's own `/metrics` to read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bounds (seconds) of the store write latency histogram.
pub const WRITE_BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A lock-free latency histogram (for the writer's hot path).
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; WRITE_BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(i) = WRITE_BUCKETS.iter().position(|b| seconds <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The counts so far (per bucket, not cumulative).
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: &WRITE_BUCKETS,
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            count: self.count.load(Ordering::Relaxed),
            sum: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A histogram read at one moment: per-bucket (not cumulative) counts.
#[derive(Debug, Clone)]
pub struct HistogramSnapshot {
    pub bounds: &'static [f64],
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}
