//! The one schedule of every periodic job (scrapes, canaries, sweeps): a
//! stable per-job phase, so jobs of many targets spread over the period
//! instead of firing together, plus a fresh random jitter each tick.

use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// A stable phase in `[0, interval)` for `key`: the same key gets the same
/// phase across restarts, different keys spread out.
pub fn schedule_offset(key: &str, interval: Duration) -> Duration {
    let hash = llmwatch_core::stable_hash::fnv1a(key.bytes());
    let interval_ns = interval.as_nanos().max(1);
    Duration::from_nanos(u64::try_from(u128::from(hash) % interval_ns).unwrap_or(0))
}

/// Ticks every `period` at the phase of its key, each tick delayed by a
/// fresh jitter of up to `max_jitter`. A tick missed while the job ran long
/// is skipped, not bunched.
pub struct JitteredTicker {
    interval: Interval,
    max_jitter_ms: u64,
}

impl JitteredTicker {
    pub fn new(key: &str, period: Duration, max_jitter: Duration) -> JitteredTicker {
        let start = Instant::now() + schedule_offset(key, period);
        let mut interval = tokio::time::interval_at(start, period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
        JitteredTicker {
            interval,
            max_jitter_ms: u64::try_from(max_jitter.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Ticks every `period` from now on, the first at once, with no phase
    /// and no jitter: for a single job (one task for every target, or a
    /// local source) that has nothing to spread out.
    pub fn starting_now(period: Duration) -> JitteredTicker {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
        JitteredTicker {
            interval,
            max_jitter_ms: 0,
        }
    }

    /// Waits for the next tick and its jitter; `false` once `shutdown`
    /// turns true (or its sender is gone), so the job ends.
    pub async fn tick(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = self.interval.tick() => {}
            _ = shutdown.changed() => return false,
        }
        if self.max_jitter_ms > 0 {
            let jitter = rand::rng().random_range(0..=self.max_jitter_ms);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(jitter)) => {}
                _ = shutdown.changed() => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_stable_and_spread() {
        let interval = Duration::from_secs(5);
        let a = schedule_offset("vllm-a", interval);
        assert_eq!(a, schedule_offset("vllm-a", interval));
        assert!(a < interval);
        assert_ne!(a, schedule_offset("vllm-b", interval));
    }

    /// Tokio's timer has a 1 ms resolution.
    fn about(actual: Duration, expected: Duration) -> bool {
        actual.abs_diff(expected) <= Duration::from_millis(1)
    }

    #[tokio::test(start_paused = true)]
    async fn ticks_at_the_phase_then_every_period_until_shutdown() {
        let period = Duration::from_secs(10);
        let (stop, mut shutdown) = watch::channel(false);
        let mut ticker = JitteredTicker::new("job", period, Duration::ZERO);
        let started = Instant::now();
        assert!(ticker.tick(&mut shutdown).await);
        assert!(about(started.elapsed(), schedule_offset("job", period)));
        assert!(ticker.tick(&mut shutdown).await);
        assert!(about(
            started.elapsed(),
            schedule_offset("job", period) + period
        ));
        stop.send(true).expect("receiver alive");
        assert!(!ticker.tick(&mut shutdown).await);
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_its_bound() {
        let period = Duration::from_secs(10);
        let (_stop, mut shutdown) = watch::channel(false);
        let max_jitter = Duration::from_millis(200);
        let mut ticker = JitteredTicker::new("job", period, max_jitter);
        let phase = schedule_offset("job", period);
        let started = Instant::now();
        for n in 0..20u32 {
            assert!(ticker.tick(&mut shutdown).await);
            let late = started.elapsed().abs_diff(phase + period * n);
            assert!(
                late <= max_jitter + Duration::from_millis(1),
                "tick {n} late by {late:?}"
            );
        }
    }
}
