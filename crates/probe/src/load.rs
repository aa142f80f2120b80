//! Load generators: closed-loop concurrency and open-loop Poisson/gamma.
//!
//! Every request gets a *scheduled* instant — the ideal send time — before
//! it is sent: in closed loop, the moment a slot frees up; in open loop, the
//! arrival process's next instant, whether or not the client managed to be
//! on time. Latency "from scheduled" therefore includes any time a request
//! waited on a slow client or a concurrency cap: no coordinated omission.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Gamma};
use thiserror::Error;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{ProbeClient, ProbeRequest};
use crate::record::{Api, ProbeError, ProbeRecord};
use crate::result::{RunResult, RunStats};
use crate::selfcheck::{CpuSource, Monitor, Monitored};
pub use crate::settings::{Bound, Load, Part, RunConfig, SharedSchedule};
use crate::shape::{
    approx_words, Calibration, Calibrator, Padding, PromptGenerator, PromptKind, Shape,
};

/// A run that cannot start.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RunError {
    #[error("concurrency must be at least 1, got {0}")]
    Concurrency(u32),
    #[error("request rate must be a positive finite number, got {0}")]
    Rate(f64),
    #[error("burstiness must be a positive finite number, got {0}")]
    Burstiness(f64),
    #[error("the run is bounded by 0 requests or a zero duration")]
    EmptyBound,
    #[error("the measuring thread stopped before the run ended")]
    MeasuringThreadGone,
    /// A session's own client (conversations) could not be built.
    #[error("cannot build a probe client: {0}")]
    Client(String),
}

/// What a run needs to build its requests: endpoint, model, shape and
/// prompt kind, calibrated once.
#[derive(Debug, Clone)]
pub struct Workload {
    pub api: Api,
    pub model: String,
    pub shape: Shape,
    pub temperature: f32,
    pub calibration: Calibration,
    generator: PromptGenerator,
    /// Lengths that vary request by request (`observed:`), in place of
    /// `shape`'s.
    mix: Option<Arc<dyn RequestMix>>,
}

/// The requests of a workload whose lengths vary request by request
/// (`observed:`; see `crate::mix::ShapeMix`).
pub trait RequestMix: std::fmt::Debug + Send + Sync {
    /// Request number `i` for `model`; `None` falls back to the fixed shape.
    fn request(&self, model: &str, i: u64) -> Option<ProbeRequest>;
}

impl Workload {
    /// Requests whose lengths follow `mix` (sent through `/v1/completions`,
    /// where the prompt is counted without a chat template); `shape` is
    /// what the run reports as its shape (e.g. the mix's medians).
    pub fn mixed(model: &str, shape: Shape, mix: Arc<dyn RequestMix>) -> Workload {
        let mut workload =
            Workload::approximate(Api::Completions, model, shape, PromptKind::Random, 0);
        workload.calibration.exact = true;
        workload.mix = Some(mix);
        workload
    }

    /// Calibrates the prompt length on the target (see [`Calibrator`]).
    pub async fn prepare(
        client: &ProbeClient,
        calibrator: &Calibrator,
        api: Api,
        model: &str,
        shape: Shape,
        kind: PromptKind,
        seed: u64,
    ) -> Workload {
        let calibration = calibrator
            .calibrate(client, api, model, kind, shape.input_tokens)
            .await;
        Workload::with_calibration(api, model, shape, kind, seed, calibration)
    }

    /// Without calibration: ≈0.75 words per token.
    pub fn approximate(
        api: Api,
        model: &str,
        shape: Shape,
        kind: PromptKind,
        seed: u64,
    ) -> Workload {
        let calibration = Calibration {
            words: approx_words(shape.input_tokens),
            padding: Padding::NONE,
            tokens: None,
            exact: false,
            spread: None,
        };
        Workload::with_calibration(api, model, shape, kind, seed, calibration)
    }

    fn with_calibration(
        api: Api,
        model: &str,
        shape: Shape,
        kind: PromptKind,
        seed: u64,
        calibration: Calibration,
    ) -> Workload {
        Workload {
            api,
            model: model.to_string(),
            shape,
            temperature: 0.0,
            calibration,
            generator: PromptGenerator::calibrated(kind, &calibration, seed),
            mix: None,
        }
    }

    /// Sends the same prompts as any other run of this workload and seed
    /// (`--reuse-prompts`): cache hits are then expected, not a fault.
    pub fn reuse_prompts(&mut self) {
        self.generator = self.generator.clone().reusing_prompts();
    }

    /// The share of input tokens meant to hit the prefix cache, or `None`
    /// when prompts are deliberately reused (hits are then expected).
    pub fn intended_hit_ratio(&self) -> Option<f64> {
        (!self.reuses_prompts()).then(|| self.generator.kind().intended_hit_ratio())
    }

    /// Salts the prompts' nonces with `salt` (not 0) in place of fresh OS
    /// randomness: every part of a shared schedule, salted alike, sends
    /// request `k` with the same prompt one run of the schedule would.
    pub fn salt_prompts(&mut self, salt: u64) {
        self.generator = self.generator.clone().with_salt(salt.max(1));
    }

    /// True when prompts repeat across runs (see [`Workload::reuse_prompts`]).
    pub fn reuses_prompts(&self) -> bool {
        self.generator.reuses_prompts()
    }

    /// Request number `i`: fixed output length, unique prompt.
    pub fn request(&self, i: u64) -> ProbeRequest {
        if let Some(mut r) = self.mix.as_ref().and_then(|m| m.request(&self.model, i)) {
            r.temperature = self.temperature;
            return r;
        }
        let mut r = ProbeRequest::fixed(
            self.api,
            self.model.clone(),
            self.generator.prompt(i),
            self.shape.output_tokens,
        );
        r.temperature = self.temperature;
        r
    }
}

fn validate(config: &RunConfig) -> Result<(), RunError> {
    match config.load {
        Load::Concurrency { concurrency } if concurrency == 0 => {
            return Err(RunError::Concurrency(concurrency))
        }
        Load::Rate {
            per_second,
            burstiness,
            max_concurrency,
        } => {
            if !(per_second.is_finite() && per_second > 0.0) {
                return Err(RunError::Rate(per_second));
            }
            if !(burstiness.is_finite() && burstiness > 0.0) {
                return Err(RunError::Burstiness(burstiness));
            }
            if max_concurrency == Some(0) {
                return Err(RunError::Concurrency(0));
            }
        }
        _ => {}
    }
    match config.bound {
        Bound::Requests(0) => Err(RunError::EmptyBound),
        Bound::Duration(d) if d.is_zero() => Err(RunError::EmptyBound),
        _ => Ok(()),
    }
}

/// Where a run's per-request records go.
#[derive(Debug, Clone, Default)]
pub enum Records {
    /// Into [`RunResult::records`] (bounded runs: sweep steps, tests).
    #[default]
    Keep,
    /// To a [`RecordSink`] as each request ends; the result holds none, so
    /// memory stays flat however long the run.
    Stream(RecordSink),
    /// Nowhere: the statistics only.
    Discard,
}

/// The sending end of a record stream (see [`crate::RecordWriter`]). A full
/// channel makes the run wait for the writer: records are never dropped,
/// and memory stays bounded by the channel's capacity.
#[derive(Debug, Clone)]
pub struct RecordSink(pub(crate) std::sync::mpsc::SyncSender<ProbeRecord>);

impl RecordSink {
    /// A sink and its receiving end, holding at most `capacity` records.
    pub fn channel(capacity: usize) -> (RecordSink, std::sync::mpsc::Receiver<ProbeRecord>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
        (RecordSink(tx), rx)
    }
}

/// How a run keeps what it measured.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub records: Records,
    /// Exact samples kept per metric before summaries come from histograms.
    pub exact_samples: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            records: Records::Keep,
            exact_samples: crate::stats::EXACT_SAMPLES,
        }
    }
}

/// One load schedule shared by every worker of a run: request numbers,
/// the arrival process, the bound and the measured start. A part of a
/// shared schedule ([`SharedSchedule`]) draws every number and arrival as
/// the whole would, and hands out only its own.
pub(crate) struct Schedule {
    state: std::sync::Mutex<ScheduleState>,
    /// The schedule's start: open-loop arrivals count from it, records'
    /// `scheduled_ns` are measured from it.
    origin: Instant,
    part: Option<Part>,
}

struct ScheduleState {
    next: u64,
    next_arrival: Instant,
    gaps: Option<(Gamma<f64>, StdRng)>,
    measured_start: Option<Instant>,
    /// The whole schedule's first measured arrival (open loop), whichever
    /// part sends it: every part's duration bound counts from it.
    first_measured_arrival: Option<Instant>,
    /// A duration-bounded run has passed its end.
    over: bool,
}

/// A request number and, in open loop, its arrival instant.
struct Slot {
    i: u64,
    arrival: Option<Instant>,
}

impl Schedule {
    pub(crate) fn shared(config: &RunConfig, shared: SharedSchedule) -> Result<Schedule, RunError> {
        validate(config)?;
        let origin = shared.start_at.unwrap_or_else(Instant::now);
        let gaps = match config.load {
            Load::Rate {
                per_second,
                burstiness,
                ..
            } => Gamma::new(burstiness, 1.0 / (per_second * burstiness))
                .ok()
                .map(|g| (g, StdRng::seed_from_u64(config.seed))),
            Load::Concurrency { .. } => None,
        };
        Ok(Schedule {
            state: std::sync::Mutex::new(ScheduleState {
                next: 0,
                next_arrival: origin,
                gaps,
                measured_start: None,
                first_measured_arrival: None,
                over: false,
            }),
            origin,
            part: shared.part,
        })
    }

    /// When the schedule starts (workers wait for it).
    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScheduleState> {
        // A poisoned lock only means a worker panicked mid-update of plain
        // counters; the state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next request of this part to send; `None` once the bound is
    /// reached. Numbers of other parts are drawn (their arrival gaps
    /// too) and passed over, so every part sees the whole's arrivals.
    fn take(&self, config: &RunConfig) -> Option<Slot> {
        let mut st = self.lock();
        loop {
            if st.over {
                return None;
            }
            if let Bound::Requests(n) = config.bound {
                if st.next >= config.warmup_requests + n {
                    return None;
                }
            }
            let i = st.next;
            st.next += 1;
            let arrival = match &mut st.gaps {
                Some((gamma, rng)) => {
                    let gap = gamma.sample(rng);
                    let at = st.next_arrival;
                    st.next_arrival = at + Duration::from_secs_f64(gap.clamp(0.0, 86_400.0));
                    Some(at)
                }
                None => None,
            };
            if i == config.warmup_requests {
                st.first_measured_arrival = arrival;
            }
            if self.part.is_none_or(|part| part.owns(i)) {
                return Some(Slot { i, arrival });
            }
        }
    }

    /// Marks a measured request scheduled at `at`; false when a
    /// duration-bounded run has ended by then (the request is not sent).
    fn admit(&self, config: &RunConfig, at: Instant) -> bool {
        let mut st = self.lock();
        let start = st.first_measured_arrival.unwrap_or(at);
        let start = *st.measured_start.get_or_insert(start);
        if let Bound::Duration(d) = config.bound {
            if at.saturating_duration_since(start) >= d {
                st.over = true;
            }
        }
        !st.over
    }

    pub(crate) fn measured_start(&self) -> Option<Instant> {
        self.lock().measured_start
    }
}

/// What one worker measured.
pub(crate) struct WorkerOutcome {
    pub stats: RunStats,
    pub records: Vec<ProbeRecord>,
    pub warmups: u64,
    pub monitored: Monitored,
    pub last_end: Option<Instant>,
}

/// Runs one load against one target. `make_request(i)` builds request
/// number `i` (warm-ups are the first `warmup_requests` numbers); it is
/// called before the request's scheduled instant is awaited, so building a
/// prompt never delays a send.
///
/// The run's tasks share the caller's runtime; for the most accurate
/// timings run on a [`crate::MeasuringThread`] instead.
pub async fn run<F>(
    client: &ProbeClient,
    config: &RunConfig,
    make_request: F,
) -> Result<RunResult, RunError>
where
    F: FnMut(u64) -> ProbeRequest,
{
    run_measured(
        client,
        config,
        make_request,
        CpuSource::Process,
        RunOptions::default(),
    )
    .await
}

/// [`run`], with the self-check's CPU read from `cpu`.
pub(crate) async fn run_measured<F>(
    client: &ProbeClient,
    config: &RunConfig,
    make_request: F,
    cpu: CpuSource,
    options: RunOptions,
) -> Result<RunResult, RunError>
where
    F: FnMut(u64) -> ProbeRequest,
{
    let schedule = Schedule::shared(config, SharedSchedule::default())?;
    let slots = match config.load {
        Load::Concurrency { concurrency } => Some(concurrency),
        Load::Rate {
            max_concurrency, ..
        } => max_concurrency,
    };
    let out = run_worker(
        client,
        config,
        &schedule,
        slots,
        make_request,
        cpu,
        &options,
    )
    .await;
    let start = schedule.measured_start().unwrap_or_else(Instant::now);
    let wall = out
        .last_end
        .unwrap_or(start)
        .saturating_duration_since(start);
    let mut records = out.records;
    // Requests in the order they were numbered (= scheduled).
    records.sort_by_key(|r| r.seq);
    Ok(out
        .stats
        .finish(config, out.warmups, records, wall, &out.monitored))
}

/// One worker's share of a run: it takes requests off the shared
/// `schedule` and keeps at most `slots` in flight.
pub(crate) async fn run_worker<F>(
    client: &ProbeClient,
    config: &RunConfig,
    schedule: &Schedule,
    slots: Option<u32>,
    mut make_request: F,
    cpu: CpuSource,
    options: &RunOptions,
) -> WorkerOutcome
where
    F: FnMut(u64) -> ProbeRequest,
{
    let monitor = Monitor::start_with(cpu);
    let sem = slots.map(|n| Arc::new(Semaphore::new(n as usize)));
    let mut tasks: JoinSet<(bool, ProbeRecord, Instant)> = JoinSet::new();
    let mut out = WorkerOutcome {
        stats: RunStats::new(config.objectives, options.exact_samples),
        records: Vec::new(),
        warmups: 0,
        monitored: Monitored::default(),
        last_end: None,
    };
    // An anchored schedule (`--start-at`) starts for every part at once.
    tokio::time::sleep_until(schedule.origin().into()).await;
    while let Some(slot) = schedule.take(config) {
        let i = slot.i;
        let warm = i < config.warmup_requests;
        let req = make_request(i);
        if let Some(at) = slot.arrival {
            tokio::time::sleep_until(at.into()).await;
        }
        let permit = match &sem {
            Some(s) => match s.clone().acquire_owned().await {
                Ok(p) => Some(p),
                Err(_) => break,
            },
            None => None,
        };
        // Closed loop: the slot freeing up is the schedule.
        let scheduled = slot.arrival.unwrap_or_else(Instant::now);
        if !warm && !schedule.admit(config, scheduled) {
            break;
        }
        let c = client.clone();
        let info = req.info();
        let origin = schedule.origin();
        tasks.spawn(async move {
            // `probe` does not panic; if it ever did, the request must still
            // be counted, as a failure, not vanish from the statistics.
            let probe = std::panic::AssertUnwindSafe(c.probe(&req, scheduled)).catch_unwind();
            let mut rec = probe.await.unwrap_or_else(|_| {
                let mut r = ProbeRecord::new(info);
                r.error = Some(ProbeError::Request {
                    message: "internal error: the probe panicked".into(),
                });
                r
            });
            rec.seq = Some(i);
            rec.scheduled_ns = Some(duration_ns(scheduled.saturating_duration_since(origin)));
            drop(permit);
            (warm, rec, Instant::now())
        });
        while let Some(r) = tasks.try_join_next() {
            if let Ok(r) = r {
                collect(&mut out, r, &options.records);
            }
        }
        // With free slots the loop would send a whole burst (1 000 requests
        // at concurrency 1 000: ~25 ms) in one poll, and no stream's event
        // could be stamped meanwhile. One turn of the runtime per send.
        tokio::task::yield_now().await;
    }
    while let Some(r) = tasks.join_next().await {
        if let Ok(r) = r {
            collect(&mut out, r, &options.records);
        }
    }
    out.monitored = monitor.finish().await;
    out
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Counts one finished request and sends its record where it belongs.
fn collect(out: &mut WorkerOutcome, (warm, rec, end): (bool, ProbeRecord, Instant), to: &Records) {
    if warm {
        out.warmups += 1;
        return;
    }
    out.last_end = Some(out.last_end.map_or(end, |e| e.max(end)));
    out.stats.add(&rec);
    match to {
        Records::Keep => out.records.push(rec),
        // A writer that has gone (its file failed) stops receiving; the
        // statistics still count the request.
        Records::Stream(sink) => {
            let _ = sink.0.send(rec);
        }
        Records::Discard => {}
    }
}
