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

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};

use crate::client::{ClientConfig, ClientError, ProbeClient, ProbeRequest};
use crate::load::{run_measured, run_worker, RunError, RunOptions, Schedule, WorkerOutcome};
use crate::result::RunResult;
use crate::selfcheck::{CpuSource, Monitored, SelfCheck};
use crate::settings::{Load, RunConfig, SharedSchedule};
use crate::spin::SpinMeter;
pub use crate::spin::ADAPTIVE_IDLE;

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

/// Below this many cores a client spinning for a whole run would take the
/// core the server, the scraper or the rest of the daemon needs: `auto`
/// spins only while streams are active there ([`SpinMode::Adaptive`]).
pub const AUTO_SPIN_MIN_CORES: usize = 4;

/// How a measuring thread waits for the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinMode {
    /// Sleeps in the kernel until a packet or timer wakes it.
    Off,
    /// Busy-polls while there is network activity — after each wake-up,
    /// until [`ADAPTIVE_IDLE`] passes without a byte read or a request
    /// sent — then sleeps until the next packet. Under paced load (events every few hundred µs) it never
    /// sleeps, so events are stamped as a spinning thread stamps them; idle
    /// it costs what a sleeping thread costs. Only the first event after a
    /// quiet spell pays the wake-up.
    Adaptive,
    /// Busy-polls for the whole run.
    On,
}

impl Spin {
    pub fn parse(text: &str) -> Option<Spin> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Spin::Auto),
            "on" | "true" | "yes" => Some(Spin::On),
            "off" | "false" | "no" => Some(Spin::Off),
            _ => None,
        }
    }

    /// How to wait on this machine: `auto` spins for the whole run with
    /// [`AUTO_SPIN_MIN_CORES`] cores, adaptively below.
    pub fn mode(self) -> SpinMode {
        match self {
            Spin::On => SpinMode::On,
            Spin::Off => SpinMode::Off,
            Spin::Auto if self.resolve() => SpinMode::On,
            Spin::Auto => SpinMode::Adaptive,
        }
    }

    /// Whether to spin for the whole run on this machine.
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
    spin: SpinMode,
    /// Notified each time the runtime wakes from sleep (an adaptive
    /// spinner waits on it).
    woke: Arc<Notify>,
    /// Dropped with the thread's owner: ends the runtime's `block_on`.
    _stop: oneshot::Sender<()>,
}

impl MeasuringThread {
    /// Starts the thread; `spin` (as resolved by [`Spin::resolve`]) makes
    /// [`MeasuringThread::run`] busy-poll.
    pub fn start(spin: bool) -> std::io::Result<MeasuringThread> {
        MeasuringThread::start_mode(if spin { SpinMode::On } else { SpinMode::Off })
    }

    /// Starts the thread waiting as `spin` says (see [`Spin::mode`]).
    pub fn start_mode(spin: SpinMode) -> std::io::Result<MeasuringThread> {
        let woke = Arc::new(Notify::new());
        let notify = woke.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_unpark(move || notify.notify_one())
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
            woke,
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

    /// Runs `future` on the measuring thread with the thread's spinner
    /// alongside (as a run has it), so a future that waits on timers —
    /// a trace replay, conversations — is woken on time rather than after
    /// the thread wakes from sleep.
    pub fn spawn_measured<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (spin, woke) = (self.spin, self.woke.clone());
        self.handle.spawn(async move {
            let _meter = spin_meter(spin, woke).await;
            future.await
        })
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
        self.run_with(client, config, RunOptions::default(), make_request)
            .await
    }

    /// [`MeasuringThread::run`] with the records kept, streamed or dropped
    /// as `options` say.
    pub async fn run_with<F>(
        &self,
        client: ProbeClient,
        config: RunConfig,
        options: RunOptions,
        make_request: F,
    ) -> Result<RunResult, RunError>
    where
        F: FnMut(u64) -> ProbeRequest + Send + 'static,
    {
        let (spin, woke) = (self.spin, self.woke.clone());
        let mut task = AbortOnDrop(self.handle.spawn(async move {
            let meter = spin_meter(spin, woke).await;
            let cpu = cpu_source(&meter);
            run_measured(&client, &config, make_request, cpu, options).await
        }));
        match (&mut task.0).await {
            Ok(result) => result,
            Err(_) => Err(RunError::MeasuringThreadGone),
        }
    }
}

async fn spin_meter(spin: SpinMode, woke: Arc<Notify>) -> Option<SpinMeter> {
    match spin {
        SpinMode::On => Some(SpinMeter::start(None).await),
        SpinMode::Adaptive => Some(SpinMeter::start(Some(woke)).await),
        SpinMode::Off => None,
    }
}

fn cpu_source(meter: &Option<SpinMeter>) -> CpuSource {
    match meter {
        Some(m) if m.adaptive => CpuSource::Adaptive(m.stats.clone()),
        Some(m) => CpuSource::Spin(m.stats.clone()),
        None => CpuSource::Thread,
    }
}

/// The workers a machine can spare by default: every core but one (left
/// to the server, the scraper, the rest of the system), at least one.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1))
        .unwrap_or(1)
        .max(1)
}

/// N measuring threads, each with its own client, driving one load
/// schedule together: a machine with N spare cores drives N times the load
/// with the same per-event timing accuracy. Concurrency (or a rate's cap
/// on requests in flight) is split evenly; requests are numbered and, in
/// open loop, arrive from one shared schedule; the workers' statistics
/// merge exactly ([`crate::RunStats::merge`]); the self-check judges each
/// worker ([`SelfCheck::workers`]).
pub struct MeasuringPool {
    workers: Vec<(MeasuringThread, ProbeClient)>,
}

impl MeasuringPool {
    /// Starts `workers` threads (at least one), spinning or not.
    pub fn start(
        workers: usize,
        spin: bool,
        client: &ClientConfig,
    ) -> Result<MeasuringPool, ClientError> {
        let mode = if spin { SpinMode::On } else { SpinMode::Off };
        MeasuringPool::start_mode(workers, mode, client)
    }

    /// Starts `workers` threads waiting as `spin` says.
    pub fn start_mode(
        workers: usize,
        spin: SpinMode,
        client: &ClientConfig,
    ) -> Result<MeasuringPool, ClientError> {
        let workers = (0..workers.max(1))
            .map(|_| {
                let thread = MeasuringThread::start_mode(spin).map_err(|e| {
                    ClientError::Build(format!("cannot start a measuring thread: {e}"))
                })?;
                Ok((thread, ProbeClient::new(client.clone())?))
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        Ok(MeasuringPool { workers })
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Runs one load on every worker. Dropping the future cancels the run.
    pub async fn run<F>(
        &self,
        config: RunConfig,
        options: RunOptions,
        make_request: F,
    ) -> Result<RunResult, RunError>
    where
        F: Fn(u64) -> ProbeRequest + Send + Sync + 'static,
    {
        self.run_shared(config, options, SharedSchedule::default(), make_request)
            .await
    }

    /// [`MeasuringPool::run`] of one part of a shared schedule, starting
    /// when it says (see [`SharedSchedule`]).
    pub async fn run_shared<F>(
        &self,
        config: RunConfig,
        options: RunOptions,
        shared: SharedSchedule,
        make_request: F,
    ) -> Result<RunResult, RunError>
    where
        F: Fn(u64) -> ProbeRequest + Send + Sync + 'static,
    {
        let schedule = Arc::new(Schedule::shared(&config, shared)?);
        let make_request = Arc::new(make_request);
        let config = Arc::new(config);
        let shares = split_slots(&config.load, self.workers.len());
        // The exact samples are shared out too: N workers hold no more than
        // one thread would. (A worker past its share falls back to its
        // histogram a little before the whole run would have.)
        let active = shares.iter().filter(|s| **s != Some(0)).count().max(1);
        let full_cap = options.exact_samples;
        let options = RunOptions {
            exact_samples: (full_cap / active).max(1),
            ..options
        };
        let mut tasks = Vec::new();
        for ((thread, client), share) in self.workers.iter().zip(shares) {
            if share == Some(0) {
                continue;
            }
            let (spin, woke) = (thread.spin, thread.woke.clone());
            let (client, config) = (client.clone(), config.clone());
            let (schedule, make, options) =
                (schedule.clone(), make_request.clone(), options.clone());
            tasks.push(AbortOnDrop(thread.handle.spawn(async move {
                let meter = spin_meter(spin, woke).await;
                let cpu = cpu_source(&meter);
                let make = move |i| make(i);
                run_worker(&client, &config, &schedule, share, make, cpu, &options).await
            })));
        }
        let mut outcomes = Vec::with_capacity(tasks.len());
        for mut task in tasks {
            match (&mut task.0).await {
                Ok(outcome) => outcomes.push(outcome),
                Err(_) => return Err(RunError::MeasuringThreadGone),
            }
        }
        Ok(merge_outcomes(
            &config,
            full_cap,
            schedule.measured_start(),
            outcomes,
        ))
    }
}

/// Each worker's share of the requests in flight; `None` when uncapped.
fn split_slots(load: &Load, workers: usize) -> Vec<Option<u32>> {
    let cap = match *load {
        Load::Concurrency { concurrency } => Some(concurrency),
        Load::Rate {
            max_concurrency, ..
        } => max_concurrency,
    };
    let n = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
    (0..n)
        .map(|k| cap.map(|c| c / n + u32::from(k < c % n)))
        .collect()
}

/// One result from the workers' outcomes: their statistics merged, their
/// records in request order, the self-check judged per worker and over all.
pub(crate) fn merge_outcomes(
    config: &RunConfig,
    exact_samples: usize,
    measured_start: Option<Instant>,
    outcomes: Vec<WorkerOutcome>,
) -> RunResult {
    let start = measured_start.unwrap_or_else(Instant::now);
    let mut stats = crate::RunStats::new(config.objectives, exact_samples);
    let mut iter = outcomes.into_iter();
    let Some(first) = iter.next() else {
        return stats.finish(config, 0, Vec::new(), Duration::ZERO, &Monitored::default());
    };
    let mut checks = vec![worker_check(config, &first)];
    stats.merge(&first.stats);
    let (mut records, mut warmups) = (first.records, first.warmups);
    let mut last_end = first.last_end;
    let mut worst = first.monitored;
    for o in iter {
        checks.push(worker_check(config, &o));
        stats.merge(&o.stats);
        records.extend(o.records);
        warmups += o.warmups;
        last_end = match (last_end, o.last_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        worst = worse(worst, o.monitored);
    }
    records.sort_by_key(|r| r.seq);
    let wall = last_end.unwrap_or(start).saturating_duration_since(start);
    let mut result = stats.finish(config, warmups, records, wall, &worst);
    let sc = &mut result.self_check;
    let worker_reasons: Vec<String> = checks
        .iter()
        .enumerate()
        .flat_map(|(k, c)| c.reasons.iter().map(move |r| format!("worker {k}: {r}")))
        .collect();
    if !worker_reasons.is_empty() {
        sc.reasons = worker_reasons;
    }
    sc.client_bound = !sc.reasons.is_empty();
    sc.workers = checks;
    result
}

/// One worker's self-check: its own CPU, scheduler lag and dispatch lag.
fn worker_check(config: &RunConfig, o: &WorkerOutcome) -> SelfCheck {
    let mine = o
        .stats
        .finish(config, 0, Vec::new(), Duration::ZERO, &o.monitored);
    mine.self_check
}

/// The worse of two workers' monitors, figure by figure.
pub(crate) fn worse(a: Monitored, b: Monitored) -> Monitored {
    let max = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let lag = match (a.scheduler_lag_ms, b.scheduler_lag_ms) {
        (Some(x), Some(y)) => Some((x.0.max(y.0), x.1.max(y.1))),
        (x, y) => x.or(y),
    };
    Monitored {
        cpu_cores: max(a.cpu_cores, b.cpu_cores),
        cpu_measure: a.cpu_measure,
        scheduler_lag_ms: lag,
        host_steal_pct: max(a.host_steal_pct, b.host_steal_pct),
    }
}

/// Cancels the task when the future awaiting it is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
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

    /// Adaptive: idle, the spinner stops and the thread sleeps (little CPU
    /// over a quiet spell); the runtime's next wake-up restarts it.
    #[tokio::test]
    async fn adaptive_spinner_sleeps_when_idle_and_wakes_with_the_runtime() {
        let thread = MeasuringThread::start_mode(SpinMode::Adaptive).unwrap();
        let woke = thread.woke.clone();
        let (idle_cpu, resumed) = thread
            .spawn(async move {
                let meter = spin_meter(SpinMode::Adaptive, woke).await.unwrap();
                let turns = || meter.stats.lock().unwrap().turns();
                // Let it go quiet, then measure a quiet spell.
                tokio::time::sleep(ADAPTIVE_IDLE * 5).await;
                let cpu0 = crate::selfcheck::thread_cpu_time().unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
                let idle_cpu = crate::selfcheck::thread_cpu_time().unwrap() - cpu0;
                // The timer's wake-up restarts the spinner: its turns grow
                // again (polled with a deadline).
                let before = turns();
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut resumed = false;
                while Instant::now() < deadline {
                    tokio::task::yield_now().await;
                    if turns() > before + 10 {
                        resumed = true;
                        break;
                    }
                }
                (idle_cpu, resumed)
            })
            .await
            .unwrap();
        // Spinning through it would burn most of the 300 ms.
        assert!(idle_cpu < Duration::from_millis(60), "{idle_cpu:?}");
        assert!(resumed);
    }
}
