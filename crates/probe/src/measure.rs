//! The measuring thread: runs take place on an OS thread of their own, on a
//! single-threaded runtime, optionally busy-polling.
//!
//! Why a thread of its own: an event's timestamp is taken when its task is
//! polled, so anything else on the same runtime (a daemon's scrapes, page
//! renders, a work-stealing neighbour) delays it. `llmwatch bench` and
//! sweep steps run on one; the daemon's canaries share one that never
//! spins. One current-thread runtime is also what `cargo bench -p
//! llmwatch-probe --bench client_capacity` measures, so its figures hold
//! for every run.
//!
//! Why busy-polling: an idle CPU sleeps (a C-state on bare metal, a halted
//! vCPU under a hypervisor) and takes tens of microseconds to milliseconds
//! to wake when a packet arrives — time that lands in TTFT and ITL as if
//! the server had spent it. Measured on a 2-vCPU VM at 1 000 paced streams
//! (BENCHMARKS.md): p99 timing error 0.8–10 ms sleeping, 0.04–0.53 ms
//! spinning.
//! Spinning costs one core for the run's length, so [`Spin::Auto`] spins
//! only where at least four cores leave room for everything else.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::client::{ProbeClient, ProbeRequest};
use crate::load::{run_measured, RunConfig, RunError};
use crate::result::RunResult;
use crate::selfcheck::CpuSource;

/// Whether the measuring thread busy-polls during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spin {
    /// Spin where the machine has at least [`AUTO_SPIN_MIN_CORES`] cores.
    #[default]
    Auto,
    On,
    Off,
}

/// Below this many cores a spinning client would take the core the server,
/// the scraper or the rest of the daemon needs.
pub const AUTO_SPIN_MIN_CORES: usize = 4;

impl Spin {
    pub fn parse(text: &str) -> Option<Spin> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Spin::Auto),
            "on" | "true" | "yes" => Some(Spin::On),
            "off" | "false" | "no" => Some(Spin::Off),
            _ => None,
        }
    }

    /// Whether to spin on this machine.
    pub fn resolve(self) -> bool {
        match self {
            Spin::On => true,
            Spin::Off => false,
            Spin::Auto => std::thread::available_parallelism()
                .map(|n| n.get() >= AUTO_SPIN_MIN_CORES)
                .unwrap_or(false),
        }
    }
}

/// A thread with its own single-threaded runtime. Give it a [`ProbeClient`]
/// of its own: a client's connections are driven by the runtime that opened
/// them, so a client shared with another runtime would have its sockets
/// read there. One run at a time (a run's self-check reads the whole
/// thread). Dropping it ends the thread and every task on it.
pub struct MeasuringThread {
    handle: tokio::runtime::Handle,
    spin: bool,
    /// Dropped with the thread's owner: ends the runtime's `block_on`.
    _stop: oneshot::Sender<()>,
}

impl MeasuringThread {
    /// Starts the thread; `spin` (as resolved by [`Spin::resolve`]) makes
    /// [`MeasuringThread::run`] busy-poll.
    pub fn start(spin: bool) -> std::io::Result<MeasuringThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("llmwatch-measure".into())
            .spawn(move || {
                // Tasks spawned through the handle run while this waits.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(MeasuringThread {
            handle,
            spin,
            _stop: stop,
        })
    }

    /// Runs `future` on the measuring thread (e.g. one canary probe).
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// Runs one load on the measuring thread (see [`crate::run`]), with the
    /// self-check's CPU read from this thread. Dropping the returned future
    /// cancels the run.
    pub async fn run<F>(
        &self,
        client: ProbeClient,
        config: RunConfig,
        make_request: F,
    ) -> Result<RunResult, RunError>
    where
        F: FnMut(u64) -> ProbeRequest + Send + 'static,
    {
        let spin = self.spin;
        let mut task = AbortOnDrop(self.handle.spawn(async move {
            let meter = match spin {
                true => Some(SpinMeter::start().await),
                false => None,
            };
            let cpu = match &meter {
                Some(m) => CpuSource::Spin(m.stats.clone()),
                None => CpuSource::Thread,
            };
            run_measured(&client, &config, make_request, cpu).await
        }));
        match (&mut task.0).await {
            Ok(result) => result,
            Err(_) => Err(RunError::MeasuringThreadGone),
        }
    }
}

/// Cancels the task when the future awaiting it is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

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
struct SpinMeter {
    stats: Arc<Mutex<SpinStats>>,
    task: tokio::task::JoinHandle<()>,
}

/// How long the spinner runs alone to learn what an empty turn costs.
const CALIBRATION: Duration = Duration::from_millis(3);

impl SpinMeter {
    async fn start() -> SpinMeter {
        // 1 ns .. 10 s, 2 significant digits: cheap to record per turn.
        let gaps_ns = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 2)
            .unwrap_or_else(|_| Histogram::<u64>::new(2).expect("2 sigfig is valid"));
        let stats = Arc::new(Mutex::new(SpinStats {
            gaps_ns,
            empty_turn_ns: None,
        }));
        let shared = stats.clone();
        let task = tokio::spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::task::yield_now().await;
                let now = Instant::now();
                let gap = u64::try_from((now - last).as_nanos()).unwrap_or(u64::MAX);
                last = now;
                if let Ok(mut s) = shared.lock() {
                    s.gaps_ns.saturating_record(gap.max(1));
                }
            }
        });
        tokio::time::sleep(CALIBRATION).await;
        if let Ok(mut s) = stats.lock() {
            s.calibrate();
        }
        SpinMeter { stats, task }
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
    fn spin_parses_and_resolves() {
        assert_eq!(Spin::parse("AUTO"), Some(Spin::Auto));
        assert_eq!(Spin::parse("on"), Some(Spin::On));
        assert_eq!(Spin::parse("off"), Some(Spin::Off));
        assert_eq!(Spin::parse("sometimes"), None);
        assert!(Spin::On.resolve());
        assert!(!Spin::Off.resolve());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Spin::Auto.resolve(), cores >= AUTO_SPIN_MIN_CORES);
    }

    #[tokio::test]
    async fn tasks_run_on_the_measuring_thread_and_end_with_it() {
        let thread = MeasuringThread::start(false).unwrap();
        let name = thread
            .spawn(async { std::thread::current().name().map(str::to_string) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("llmwatch-measure"));
        // A task still pending when the thread's owner goes is dropped with
        // its runtime: its guard's channel closes.
        let (guard, gone) = oneshot::channel::<()>();
        let _pending = thread.spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        drop(thread);
        let closed = tokio::time::timeout(Duration::from_secs(5), gone).await;
        assert!(matches!(closed, Ok(Err(_))), "{closed:?}");
    }

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
