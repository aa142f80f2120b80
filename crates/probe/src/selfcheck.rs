//! The client's self-check: is the load generator itself the bottleneck?
//!
//! A benchmark whose client is saturated measures the client. So every run
//! records the client's CPU use (the process's, or the measuring thread's),
//! how late a 1 ms ticker fires on the runtime (scheduler lag: a busy or
//! starved runtime stamps events late), how late requests leave versus
//! their schedule (dispatch lag), tokens per event and the host's CPU
//! steal; past the limits the run is labelled `client_bound` and must not
//! feed a saturation verdict (DESIGN.md, "Validity").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::spin::SpinStats;

/// Limits past which a run is `client_bound`. The lag limits are floors:
/// a lag under them never counts; a lag over them counts only where it could
/// move the run's own numbers by more than `max_effect` of them, or carry a
/// p95 across its objective (see [`SelfCheck::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SelfCheckLimits {
    /// Process CPU, in cores (1.0 = one core busy all the run).
    pub max_cpu_cores: f64,
    pub max_scheduler_lag_p99_ms: f64,
    pub max_dispatch_lag_p99_ms: f64,
    /// The largest share (0..1) of a measured latency the client's own
    /// delay may make up before the number is the client's, not the
    /// server's.
    #[serde(default = "default_max_effect")]
    pub max_effect: f64,
}

fn default_max_effect() -> f64 {
    DEFAULT_MAX_EFFECT
}

/// See [`SelfCheckLimits::max_effect`]: 10 % of a latency, far above the
/// 2 % a busy 2-core host's scheduler lag makes of a real vLLM's TTFT, and
/// well inside what moves a verdict (objectives are met or missed by more).
pub const DEFAULT_MAX_EFFECT: f64 = 0.10;

impl Default for SelfCheckLimits {
    fn default() -> Self {
        SelfCheckLimits {
            max_cpu_cores: 0.9,
            max_scheduler_lag_p99_ms: 5.0,
            max_dispatch_lag_p99_ms: 10.0,
            max_effect: DEFAULT_MAX_EFFECT,
        }
    }
}

/// The run's own numbers, ms, that a client delay is weighed against.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MeasuredScale {
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub ttft_objective_ms: Option<f64>,
    pub itl_objective_ms: Option<f64>,
}

impl MeasuredScale {
    /// Why a delay of `lag_ms` on every timestamp could change what the run
    /// reports: more than `max_effect` of its p50 TTFT, or a p95 within
    /// `lag_ms` of its objective. `None`: it could not. With nothing
    /// measured to weigh against, any lag over the floor counts.
    fn stamp_effect(&self, lag_ms: f64, max_effect: f64) -> Option<String> {
        let mut why = Vec::new();
        let mut weighed = false;
        if let Some(ttft) = self.ttft_p50_ms.filter(|t| *t > 0.0) {
            weighed = true;
            if lag_ms > max_effect * ttft {
                why.push(format!(
                    "{:.1} % of p50 TTFT {ttft:.1} ms",
                    100.0 * lag_ms / ttft
                ));
            }
        }
        for (name, value, objective) in [
            ("TTFT", self.ttft_p95_ms, self.ttft_objective_ms),
            ("ITL", self.itl_p95_ms, self.itl_objective_ms),
        ] {
            if let (Some(v), Some(o)) = (value, objective) {
                weighed = true;
                if (v - o).abs() < lag_ms {
                    why.push(format!(
                        "p95 {name} {v:.1} ms within it of the {o:.1} ms objective"
                    ));
                }
            }
        }
        if !weighed {
            return Some("nothing measured to weigh it against".to_string());
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    /// Why late sends could change the load the run applied: each costs
    /// its slot `lag_ms` of a request's `e2e` time.
    fn dispatch_effect(&self, lag_ms: f64, max_effect: f64) -> Option<String> {
        match self.e2e_p50_ms.filter(|e| *e > 0.0) {
            Some(e2e) => (lag_ms > max_effect * e2e)
                .then(|| format!("{:.1} % of p50 e2e {e2e:.1} ms", 100.0 * lag_ms / e2e)),
            None => Some("nothing measured to weigh it against".to_string()),
        }
    }
}

/// What [`SelfCheck::cpu_cores`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuMeasure {
    /// The whole process's CPU time (a run on the caller's runtime).
    #[default]
    Process,
    /// The measuring thread's CPU time (it runs every probe of the run).
    MeasuringThread,
    /// The busy-polling measuring thread's time on anything but spinning.
    SpinBusy,
    /// The adaptively polling measuring thread's CPU time, less its
    /// spinning.
    AdaptiveBusy,
}

impl CpuMeasure {
    pub fn label(self) -> &'static str {
        match self {
            CpuMeasure::Process => "process",
            CpuMeasure::MeasuringThread => "measuring thread",
            CpuMeasure::SpinBusy => "measuring thread, busy-polling (time not spent spinning)",
            CpuMeasure::AdaptiveBusy => {
                "measuring thread, busy-polling while streams are active (CPU time not spent spinning)"
            }
        }
    }
}

/// What the self-check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfCheck {
    /// CPU time over the run's wall time, in cores (`None` where it cannot
    /// be read), of what [`SelfCheck::cpu_measure`] names.
    pub cpu_cores: Option<f64>,
    #[serde(default)]
    pub cpu_measure: CpuMeasure,
    /// p99 of how long a message from an OS thread (one per ms) waited
    /// before its task on the client runtime was polled (HdrHistogram,
    /// 3 significant digits), ms; on a busy-polling measuring thread, the
    /// time-weighted p99 of the gaps between its spinner's turns.
    pub scheduler_lag_p99_ms: Option<f64>,
    pub scheduler_lag_max_ms: Option<f64>,
    /// p99 of sent − scheduled over the run's requests, ms.
    pub dispatch_lag_p99_ms: Option<f64>,
    /// Mean tokens per output event (server-reported where streamed).
    pub tokens_per_event: Option<f64>,
    /// Share of the machine's CPU time the hypervisor gave to someone else
    /// during the run (`steal` in /proc/stat), %. Not judged — it does not
    /// make the client the bottleneck — but a run on a VM with high steal
    /// has noisy timings. `None` where /proc/stat is unavailable.
    #[serde(default)]
    pub host_steal_pct: Option<f64>,
    pub limits: SelfCheckLimits,
    pub client_bound: bool,
    /// One line per limit passed (prefixed `worker k:` on a pool's run).
    pub reasons: Vec<String>,
    /// The host's noise where it was over a floor but too small against
    /// the run's numbers to matter, with its size; the run still counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noise: Vec<String>,
    /// A [`crate::MeasuringPool`]'s run: each worker's own check (its
    /// thread's CPU and scheduler lag, its requests' dispatch lag); the
    /// figures above are the worst of them. Empty on a single thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<SelfCheck>,
}

/// What a [`Monitor`] saw over a run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Monitored {
    pub cpu_cores: Option<f64>,
    pub cpu_measure: CpuMeasure,
    /// (p99, max) scheduler lag, ms.
    pub scheduler_lag_ms: Option<(f64, f64)>,
    pub host_steal_pct: Option<f64>,
}

impl SelfCheck {
    /// Applies the limits. A lag over its floor makes the run client-bound
    /// only where it could move the run's numbers (`scale`) by more than
    /// [`SelfCheckLimits::max_effect`] or carry a p95 across its objective;
    /// otherwise it is listed in [`SelfCheck::noise`] with its size.
    pub fn judge(
        monitored: &Monitored,
        dispatch_lag_p99_ms: Option<f64>,
        tokens_per_event: Option<f64>,
        limits: SelfCheckLimits,
        scale: &MeasuredScale,
    ) -> SelfCheck {
        let Monitored {
            cpu_cores,
            cpu_measure,
            scheduler_lag_ms: scheduler_lag,
            host_steal_pct,
        } = *monitored;
        let mut reasons = Vec::new();
        let mut noise = Vec::new();
        let effect = if limits.max_effect.is_finite() && limits.max_effect >= 0.0 {
            limits.max_effect
        } else {
            DEFAULT_MAX_EFFECT
        };
        if let Some(c) = cpu_cores.filter(|c| *c > limits.max_cpu_cores) {
            reasons.push(format!(
                "client CPU {c:.2} cores > {:.2}",
                limits.max_cpu_cores
            ));
        }
        if let Some((p99, _)) = scheduler_lag.filter(|(p, _)| *p > limits.max_scheduler_lag_p99_ms)
        {
            let line = format!(
                "scheduler lag p99 {p99:.2} ms > {:.2} ms",
                limits.max_scheduler_lag_p99_ms
            );
            match scale.stamp_effect(p99, effect) {
                Some(why) => reasons.push(format!("{line}: {why}")),
                None => noise.push(format!(
                    "{line}, but under {:.0} % of every latency it could move and clear of the objectives{}",
                    100.0 * effect,
                    scale
                        .ttft_p50_ms
                        .filter(|t| *t > 0.0)
                        .map(|t| format!(" ({:.1} % of p50 TTFT)", 100.0 * p99 / t))
                        .unwrap_or_default()
                )),
            }
        }
        if let Some(d) = dispatch_lag_p99_ms.filter(|d| *d > limits.max_dispatch_lag_p99_ms) {
            let line = format!(
                "dispatch lag p99 {d:.2} ms > {:.2} ms",
                limits.max_dispatch_lag_p99_ms
            );
            match scale.dispatch_effect(d, effect) {
                Some(why) => reasons.push(format!("{line}: {why}")),
                None => noise.push(format!(
                    "{line}, but under {:.0} % of a request's time in its slot",
                    100.0 * effect
                )),
            }
        }
        SelfCheck {
            cpu_cores,
            cpu_measure,
            host_steal_pct,
            scheduler_lag_p99_ms: scheduler_lag.map(|s| s.0),
            scheduler_lag_max_ms: scheduler_lag.map(|s| s.1),
            dispatch_lag_p99_ms,
            tokens_per_event,
            limits,
            client_bound: !reasons.is_empty(),
            reasons,
            noise,
            workers: Vec::new(),
        }
    }
}

/// Process CPU time (user + system) so far, from `/proc/self/stat`.
pub fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces and ')': fields after the
    // last ')' start at field 3 (state).
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based) → 11 and 12 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let hz = clock_ticks_per_second()?;
    Some(Duration::from_secs_f64((utime + stime) as f64 / hz as f64))
}

/// CPU time (user + system) of the calling thread.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the local timespec only.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// (steal, total) jiffies over all CPUs so far, from /proc/stat.
fn host_steal_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    Some((*fields.get(7)?, fields.iter().sum()))
}

/// Steal since `before`, % of all CPU time.
fn host_steal_pct_since(before: Option<(u64, u64)>) -> Option<f64> {
    let (steal0, total0) = before?;
    let (steal1, total1) = host_steal_ticks()?;
    let total = total1.saturating_sub(total0);
    (total > 0).then(|| 100.0 * steal1.saturating_sub(steal0) as f64 / total as f64)
}

/// Where a run's CPU figure comes from.
#[derive(Clone)]
pub(crate) enum CpuSource {
    Process,
    /// The calling thread, which runs every task of the run (a current-
    /// thread runtime).
    Thread,
    /// The spinner's count of its turns (see [`SpinStats::busy_share`]).
    Spin(Arc<Mutex<SpinStats>>),
    /// The calling thread's CPU time less what its adaptive spinner spent
    /// spinning ([`SpinStats::spinning_s`]).
    Adaptive(Arc<Mutex<SpinStats>>),
}

impl CpuSource {
    fn measure(&self) -> CpuMeasure {
        match self {
            CpuSource::Process => CpuMeasure::Process,
            CpuSource::Thread => CpuMeasure::MeasuringThread,
            CpuSource::Spin(_) => CpuMeasure::SpinBusy,
            CpuSource::Adaptive(_) => CpuMeasure::AdaptiveBusy,
        }
    }

    /// CPU time so far; `None` for a spinner, whose share is counted from
    /// its turns instead.
    fn cpu_time(&self) -> Option<Duration> {
        match self {
            CpuSource::Process => process_cpu_time(),
            CpuSource::Thread | CpuSource::Adaptive(_) => thread_cpu_time(),
            CpuSource::Spin(_) => None,
        }
    }
}

fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(v).ok().filter(|v| *v > 0)
}

/// Measures CPU and scheduler lag between `start` and `finish`.
///
/// Scheduler lag is measured the way an SSE event experiences it: a plain
/// OS thread (not a tokio timer, whose 1 ms wheel would add its own rounding)
/// sends its current instant every millisecond to a task on the client's
/// runtime, which records how long the message waited before the task was
/// polled. A busy or starved runtime shows here exactly as it would delay
/// the stamping of a real event.
///
/// A busy-polling runtime needs no ticker (a third thread competing for the
/// cores would measure itself): its spinner's turn gaps are the lag — an
/// event that arrives during a gap waits at most the gap — weighted by
/// their length, as a ticker samples time (`SpinStats::lag_ms`).
pub struct Monitor {
    started: Instant,
    source: CpuSource,
    cpu_start: Option<Duration>,
    steal_start: Option<(u64, u64)>,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<Histogram<u64>>>,
}

impl Monitor {
    /// Starts the ticker thread and its receiving task on the current
    /// runtime; the process's CPU is measured.
    pub fn start() -> Monitor {
        Monitor::start_with(CpuSource::Process)
    }

    pub(crate) fn start_with(source: CpuSource) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = match &source {
            // A run counts its own turns, not the calibration's. (An
            // adaptive spinner needs no ticker either: a ticker would wake
            // it every millisecond and keep it spinning.)
            CpuSource::Spin(stats) | CpuSource::Adaptive(stats) => {
                if let Ok(mut s) = stats.lock() {
                    s.reset();
                }
                None
            }
            _ => Some(Monitor::start_ticker(stop.clone())),
        };
        Monitor {
            started: Instant::now(),
            cpu_start: source.cpu_time(),
            steal_start: host_steal_ticks(),
            source,
            stop,
            ticker,
        }
    }

    fn start_ticker(stop: Arc<AtomicBool>) -> JoinHandle<Histogram<u64>> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
        let thread_stop = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("llmwatch-selfcheck".into())
            .spawn(move || {
                while !thread_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    if tx.send(Instant::now()).is_err() {
                        break;
                    }
                }
            });
        tokio::spawn(async move {
            // 1 µs .. 60 s, 3 significant digits.
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
                .unwrap_or_else(|_| Histogram::<u64>::new(3).expect("3 sigfig is valid"));
            if spawned.is_err() {
                return h;
            }
            while let Some(sent) = rx.recv().await {
                let late_us = sent.elapsed().as_micros() as u64;
                h.saturating_record(late_us.max(1));
            }
            h
        })
    }

    /// Stops the ticker.
    pub async fn finish(self) -> Monitored {
        let elapsed = self.started.elapsed();
        let wall = elapsed.as_secs_f64();
        let cpu = match &self.source {
            CpuSource::Spin(stats) => stats.lock().ok().and_then(|s| s.busy_share(elapsed)),
            CpuSource::Adaptive(stats) => match (self.cpu_start, thread_cpu_time(), stats.lock()) {
                (Some(a), Some(b), Ok(s)) if wall > 0.0 => {
                    let busy = b.saturating_sub(a).as_secs_f64() - s.spinning_s();
                    Some((busy / wall).clamp(0.0, 1.0))
                }
                _ => None,
            },
            other => match (self.cpu_start, other.cpu_time()) {
                (Some(a), Some(b)) if wall > 0.0 => Some(b.saturating_sub(a).as_secs_f64() / wall),
                _ => None,
            },
        };

        // The thread sees the flag within a millisecond and drops its
        // sender, which ends the task's loop.
        self.stop.store(true, Ordering::Relaxed);
        let lag = match (self.ticker, &self.source) {
            (Some(ticker), _) => match ticker.await {
                Ok(h) if !h.is_empty() => Some((
                    h.value_at_quantile(0.99) as f64 / 1000.0,
                    h.max() as f64 / 1000.0,
                )),
                _ => None,
            },
            (None, CpuSource::Spin(stats) | CpuSource::Adaptive(stats)) => {
                stats.lock().ok().and_then(|s| s.lag_ms())
            }
            (None, _) => None,
        };
        Monitored {
            cpu_cores: cpu,
            cpu_measure: self.source.measure(),
            scheduler_lag_ms: lag,
            host_steal_pct: host_steal_pct_since(self.steal_start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_steal_reads_where_proc_stat_exists() {
        let before = host_steal_ticks();
        assert_eq!(
            before.is_some(),
            std::path::Path::new("/proc/stat").exists()
        );
        if before.is_some() {
            std::thread::sleep(Duration::from_millis(20));
            let pct = host_steal_pct_since(before).unwrap_or(0.0);
            assert!((0.0..=100.0).contains(&pct), "{pct}");
        }
    }

    #[test]
    fn cpu_time_reads() {
        assert!(process_cpu_time().is_some());
        let before = thread_cpu_time().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_time().unwrap() > before, "{x}");
    }

    #[test]
    fn judge_reasons() {
        let s = SelfCheck::judge(
            &Monitored {
                cpu_cores: Some(1.5),
                scheduler_lag_ms: Some((7.0, 9.0)),
                ..Monitored::default()
            },
            Some(1.0),
            None,
            SelfCheckLimits::default(),
            &MeasuredScale::default(),
        );
        assert!(s.client_bound);
        assert_eq!(s.reasons.len(), 2);
        let s = SelfCheck::judge(
            &Monitored {
                cpu_cores: Some(0.1),
                scheduler_lag_ms: Some((0.5, 1.0)),
                host_steal_pct: Some(0.0),
                ..Monitored::default()
            },
            Some(0.2),
            Some(1.0),
            SelfCheckLimits::default(),
            &MeasuredScale::default(),
        );
        assert!(!s.client_bound);
    }

    /// A lag over the floor counts only where it could move the run's own
    /// numbers: 6 ms against a 1 s TTFT is noise, against a 30 ms TTFT or
    /// a p95 ITL 3 ms from its objective it is the client's.
    #[test]
    fn lag_is_weighed_against_what_it_could_move() {
        let lagged = Monitored {
            cpu_cores: Some(0.2),
            scheduler_lag_ms: Some((6.0, 9.0)),
            ..Monitored::default()
        };
        let judge = |scale: MeasuredScale| {
            SelfCheck::judge(&lagged, Some(1.0), None, SelfCheckLimits::default(), &scale)
        };
        let slow = MeasuredScale {
            ttft_p50_ms: Some(1000.0),
            ttft_p95_ms: Some(1500.0),
            itl_p95_ms: Some(30.0),
            e2e_p50_ms: Some(5000.0),
            ttft_objective_ms: Some(1000.0),
            itl_objective_ms: Some(50.0),
        };
        let kept = judge(slow);
        assert!(!kept.client_bound, "{:?}", kept.reasons);
        assert!(
            kept.noise[0].contains("0.6 % of p50 TTFT"),
            "{:?}",
            kept.noise
        );
        let fast = judge(MeasuredScale {
            ttft_p50_ms: Some(30.0),
            ..slow
        });
        assert!(fast.client_bound && fast.reasons[0].contains("20.0 % of p50 TTFT"));
        let near = judge(MeasuredScale {
            itl_p95_ms: Some(47.0),
            ..slow
        });
        assert!(near.client_bound && near.reasons[0].contains("p95 ITL 47.0 ms"));
        // Late sends: against a 100 ms request, 20 ms of lag is a fifth of
        // its slot; against a 5 s one, nothing.
        let late = |e2e: f64| {
            SelfCheck::judge(
                &Monitored::default(),
                Some(20.0),
                None,
                SelfCheckLimits::default(),
                &MeasuredScale {
                    e2e_p50_ms: Some(e2e),
                    ..MeasuredScale::default()
                },
            )
            .client_bound
        };
        assert!(late(100.0) && !late(5000.0));
    }
}
