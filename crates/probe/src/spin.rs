//! The spinner of a busy-polling measuring thread: a task that yields in a
//! loop so the runtime never parks, what its turns cost ([`SpinStats`]),
//! and the per-thread count of network activity ([`note_activity`]) that
//! tells an adaptive spinner when to stop. A leaf: the client notes its
//! activity here, the self-check reads the stats, the measuring thread
//! starts the spinner; it imports none of them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Notify;

/// Quiet time after which an adaptive measuring thread stops polling.
pub const ADAPTIVE_IDLE: Duration = Duration::from_millis(2);

/// What the spinner saw: its turns of the scheduler loop, and what an
/// empty turn costs on this machine.
#[derive(Debug)]
pub(crate) struct SpinStats {
    /// Gaps between the spinner's turns since the last reset.
    gaps_ns: Histogram<u64>,
    /// The median turn while nothing else ran (one yield and a
    /// zero-timeout poll of the I/O driver), measured before each run.
    empty_turn_ns: Option<f64>,
}

impl SpinStats {
    /// Share of `wall` the thread spent on anything but spinning: wall time
    /// minus the turns since the last reset, each costed as an empty turn.
    /// An empty turn costs the calibrated median or, if lower, the run's
    /// own median turn (at light load most turns are empty; a saturated run
    /// has few turns, all long, and keeps the calibration). An estimate:
    /// empty turns vary, so light loads read high (0.1–0.3 cores on a
    /// 2-vCPU VM where the sleeping thread used 0.06); the scheduler lag is
    /// the sharper test of a saturated client. In cores, 0..=1.
    pub(crate) fn busy_share(&self, wall: Duration) -> Option<f64> {
        if wall.is_zero() {
            return None;
        }
        let run_median =
            (!self.gaps_ns.is_empty()).then(|| self.gaps_ns.value_at_quantile(0.5) as f64);
        let empty = match (self.empty_turn_ns, run_median) {
            (Some(c), Some(r)) => c.min(r),
            (c, r) => c.or(r).unwrap_or(0.0),
        };
        let spinning = self.gaps_ns.len() as f64 * empty / 1e9;
        Some((1.0 - spinning / wall.as_secs_f64()).clamp(0.0, 1.0))
    }

    /// Seconds spent spinning since the last reset: every turn costed as
    /// an empty one (see [`SpinStats::busy_share`]).
    pub(crate) fn spinning_s(&self) -> f64 {
        let run_median =
            (!self.gaps_ns.is_empty()).then(|| self.gaps_ns.value_at_quantile(0.5) as f64);
        let empty = match (self.empty_turn_ns, run_median) {
            (Some(c), Some(r)) => c.min(r),
            (c, r) => c.or(r).unwrap_or(0.0),
        };
        self.gaps_ns.len() as f64 * empty / 1e9
    }

    /// The scheduler lag a busy-polling runtime shows: (p99, max) of its
    /// turn gaps, in ms, the p99 weighted by gap length — the gap that an
    /// event arriving at a random instant falls into is, 99 % of the time,
    /// no longer than this. `None` without turns.
    pub(crate) fn lag_ms(&self) -> Option<(f64, f64)> {
        if self.gaps_ns.is_empty() {
            return None;
        }
        let total: f64 = self
            .gaps_ns
            .iter_recorded()
            .map(|v| v.value_iterated_to() as f64 * v.count_at_value() as f64)
            .sum();
        let mut seen = 0.0;
        let mut p99 = self.gaps_ns.max();
        for v in self.gaps_ns.iter_recorded() {
            seen += v.value_iterated_to() as f64 * v.count_at_value() as f64;
            if seen >= 0.99 * total {
                p99 = v.value_iterated_to();
                break;
            }
        }
        Some((p99 as f64 / 1e6, self.gaps_ns.max() as f64 / 1e6))
    }

    /// Turns since the last reset.
    #[cfg(test)]
    pub(crate) fn turns(&self) -> u64 {
        self.gaps_ns.len()
    }

    /// Starts a new count (a run counts its own turns).
    pub(crate) fn reset(&mut self) {
        self.gaps_ns.reset();
    }

    fn calibrate(&mut self) {
        if !self.gaps_ns.is_empty() {
            self.empty_turn_ns = Some(self.gaps_ns.value_at_quantile(0.5) as f64);
        }
        self.gaps_ns.reset();
    }
}

/// A task that yields in a loop, so the runtime never parks: the I/O
/// driver is polled with a zero timeout on every turn and the thread never
/// sleeps. It records the gap between its own turns for [`SpinStats`].
pub(crate) struct SpinMeter {
    pub(crate) stats: Arc<Mutex<SpinStats>>,
    task: tokio::task::JoinHandle<()>,
    /// Stops after [`ADAPTIVE_IDLE`] without work, resumes on wake-up.
    pub(crate) adaptive: bool,
}

/// How long the spinner runs alone to learn what an empty turn costs.
const CALIBRATION: Duration = Duration::from_millis(3);

impl SpinMeter {
    /// Spins for good, or, given the runtime's wake-up signal, adaptively.
    pub(crate) async fn start(woke: Option<Arc<Notify>>) -> SpinMeter {
        // 1 ns .. 10 s, 2 significant digits: cheap to record per turn.
        let gaps_ns = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 2)
            .unwrap_or_else(|_| Histogram::<u64>::new(2).expect("2 sigfig is valid"));
        let stats = Arc::new(Mutex::new(SpinStats {
            gaps_ns,
            empty_turn_ns: None,
        }));
        let adaptive = woke.is_some();
        let task = tokio::spawn(spin_loop(stats.clone(), woke));
        tokio::time::sleep(CALIBRATION).await;
        if let Ok(mut s) = stats.lock() {
            s.calibrate();
        }
        SpinMeter {
            stats,
            task,
            adaptive,
        }
    }
}

thread_local! {
    /// Network activity on this thread (bytes read, requests sent): what
    /// an adaptive spinner takes as work. A turn's length would not do: on
    /// a busy machine the OS preempts the spinner, and a preempted turn is
    /// as long as a busy one.
    static ACTIVITY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Notes network activity on the calling thread (see [`ACTIVITY`]).
pub(crate) fn note_activity() {
    ACTIVITY.with(|a| a.set(a.get().wrapping_add(1)));
}

/// Yields in a loop, recording the gap between turns. Adaptive: after
/// [`ADAPTIVE_IDLE`] without network activity on the thread, it waits for
/// the runtime's next wake-up (which lets the thread sleep) and spins again
/// from there. The span it waited is not a turn: nothing was pending.
async fn spin_loop(stats: Arc<Mutex<SpinStats>>, woke: Option<Arc<Notify>>) {
    let mut last = Instant::now();
    let mut last_work = last;
    let mut seen = ACTIVITY.with(|a| a.get());
    loop {
        tokio::task::yield_now().await;
        let now = Instant::now();
        let gap = u64::try_from((now - last).as_nanos()).unwrap_or(u64::MAX);
        last = now;
        let calibrated = match stats.lock() {
            Ok(mut s) => {
                s.gaps_ns.saturating_record(gap.max(1));
                s.empty_turn_ns.is_some()
            }
            Err(_) => false,
        };
        let Some(woke) = &woke else { continue };
        let activity = ACTIVITY.with(|a| a.get());
        // Before calibration every turn counts as work (never park then).
        let work = !calibrated || activity != seen;
        seen = activity;
        if work {
            last_work = now;
        } else if now - last_work > ADAPTIVE_IDLE {
            woke.notified().await;
            last = Instant::now();
            last_work = last;
        }
    }
}

impl Drop for SpinMeter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_costs_every_turn_as_an_empty_one() {
        let gaps_ns = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 2).unwrap();
        let mut stats = SpinStats {
            gaps_ns,
            empty_turn_ns: None,
        };
        stats.gaps_ns.record_n(1_000, 50).unwrap();
        stats.calibrate();
        // HdrHistogram keeps 2 significant digits.
        let empty = stats.empty_turn_ns.unwrap();
        assert!((empty - 1_000.0).abs() <= 10.0, "{empty}");
        // 900 empty turns of 1 µs and 100 busy turns of 91 µs: 10 ms in
        // all, 1 ms of it spinning.
        stats.gaps_ns.record_n(1_000, 900).unwrap();
        stats.gaps_ns.record_n(91_000, 100).unwrap();
        let busy = stats.busy_share(Duration::from_millis(10)).unwrap();
        assert!((busy - 0.9).abs() < 0.002, "{busy}");
        assert_eq!(stats.busy_share(Duration::ZERO), None);
        // 90 % of the turns but 9 % of the time are 1 µs: time-weighted, the
        // p99 gap is the 91 µs one.
        let (p99, max) = stats.lag_ms().unwrap();
        assert!((p99 - 0.091).abs() < 0.001, "{p99}");
        assert!((max - 0.091).abs() < 0.001, "{max}");
        stats.reset();
        assert_eq!(stats.busy_share(Duration::from_millis(10)), Some(1.0));
        assert_eq!(stats.lag_ms(), None);
    }
}
