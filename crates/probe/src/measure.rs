//! The measuring thread: runs take place on an OS thread of their own, on a
//! single-threaded runtime, optionally busy-polling.
//!
//! Why a thread of its own: an event's timestamp is taken when its task is
//! polled, so anything else on the same runtime (a daemon's scrapes, page
//! renders, a work-stealing neighbour) delays it. One current-thread
//! runtime is also what `cargo bench -p llmwatch-probe --bench
//! client_capacity` measures, so its figures hold for every run.
//!
//! Why busy-polling: an idle CPU sleeps (a C-state on bare metal, a halted
//! vCPU under a hypervisor) and takes tens of microseconds to milliseconds
//! to wake when a packet arrives — time that lands in TTFT and ITL as if
//! the server had spent it. Measured on a 2-vCPU VM at 1 000 paced streams
//! (BENCHMARKS.md): p99 timing error 2–10 ms sleeping, 0.44 ms spinning.
//! Spinning costs one core for the run's length, so [`Spin::Auto`] spins
//! only where at least four cores leave room for everything else.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use crate::client::{ClientConfig, ClientError, ProbeClient, ProbeRequest};
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

/// A measuring thread that cannot start.
#[derive(Debug, Error)]
pub enum MeasureError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot start the measuring thread: {0}")]
    Thread(#[from] std::io::Error),
}

type MakeRequest = Box<dyn FnMut(u64) -> ProbeRequest + Send>;

struct Job {
    config: RunConfig,
    make_request: MakeRequest,
    reply: oneshot::Sender<Result<RunResult, RunError>>,
}

/// A thread with its own single-threaded runtime and probe client (its own
/// connection pool, kept between runs). Dropping it ends the thread once
/// the run in progress, if any, is dropped.
pub struct MeasuringThread {
    jobs: mpsc::UnboundedSender<Job>,
    spin: bool,
}

impl MeasuringThread {
    /// Starts the thread; `spin` as resolved by [`Spin::resolve`].
    pub fn start(client: ClientConfig, spin: bool) -> Result<MeasuringThread, MeasureError> {
        let client = ProbeClient::new(client)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        std::thread::Builder::new()
            .name("llmwatch-measure".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = queue.recv().await {
                        serve(&client, job, spin).await;
                    }
                });
            })?;
        Ok(MeasuringThread { jobs, spin })
    }

    pub fn spins(&self) -> bool {
        self.spin
    }

    /// Runs one load on the measuring thread (see [`crate::run`]). Dropping
    /// the returned future cancels the run.
    pub async fn run<F>(&self, config: RunConfig, make_request: F) -> Result<RunResult, RunError>
    where
        F: FnMut(u64) -> ProbeRequest + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            config,
            make_request: Box::new(make_request),
            reply,
        };
        self.jobs
            .send(job)
            .map_err(|_| RunError::MeasuringThreadGone)?;
        answer.await.map_err(|_| RunError::MeasuringThreadGone)?
    }
}

/// One job on the measuring thread; ends early when its caller is gone.
async fn serve(client: &ProbeClient, mut job: Job, spin: bool) {
    let meter = match spin {
        true => Some(SpinMeter::start().await),
        false => None,
    };
    let cpu = match &meter {
        Some(m) => CpuSource::Spin(m.stats.clone()),
        None => CpuSource::Thread,
    };
    let outcome = tokio::select! {
        result = run_measured(client, &job.config, &mut job.make_request, cpu) => Some(result),
        _ = job.reply.closed() => None,
    };
    drop(meter);
    if let Some(result) = outcome {
        let _ = job.reply.send(result);
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
        stats.reset();
        assert_eq!(stats.busy_share(Duration::from_millis(10)), Some(1.0));
    }
}
