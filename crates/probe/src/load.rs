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
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{ProbeClient, ProbeRequest};
use crate::record::{Api, ProbeError, ProbeRecord};
use crate::result::{Objectives, RunResult};
use crate::selfcheck::{CpuSource, Monitor, SelfCheckLimits};
use crate::shape::{approx_words, Calibration, Calibrator, PromptGenerator, PromptKind, Shape};

/// How load is applied.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Load {
    /// Closed loop: `concurrency` requests in flight, a new one as soon as
    /// one ends.
    Concurrency { concurrency: u32 },
    /// Open loop: arrivals at `per_second` on average, gaps drawn from
    /// Gamma(shape = burstiness, mean = 1/rate) — burstiness 1 is Poisson,
    /// below 1 burstier, above 1 smoother. `max_concurrency` caps requests
    /// in flight (time spent waiting for a slot shows as dispatch lag).
    Rate {
        per_second: f64,
        burstiness: f64,
        max_concurrency: Option<u32>,
    },
}

/// When a run stops sending.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// This many measured requests (warm-up not counted).
    Requests(u64),
    /// Send measured requests for this long, then wait for those in flight.
    Duration(Duration),
}

/// One run's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub load: Load,
    pub bound: Bound,
    /// Requests sent first under the same load and left out of every
    /// statistic (connection setup, server warm-up).
    pub warmup_requests: u64,
    pub objectives: Objectives,
    pub limits: SelfCheckLimits,
    /// Seeds the arrival process.
    pub seed: u64,
}

impl RunConfig {
    /// Closed loop at `concurrency` for `requests` requests, no warm-up.
    pub fn closed(concurrency: u32, requests: u64) -> RunConfig {
        RunConfig {
            load: Load::Concurrency { concurrency },
            bound: Bound::Requests(requests),
            warmup_requests: 0,
            objectives: Objectives::default(),
            limits: SelfCheckLimits::default(),
            seed: 0,
        }
    }
}

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
}

impl Workload {
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
            tokens: None,
            exact: false,
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
            generator: PromptGenerator::new(kind, calibration.words, seed),
        }
    }

    /// Sends the same prompts as any other run of this workload and seed
    /// (`--reuse-prompts`): cache hits are then expected, not a fault.
    pub fn reuse_prompts(&mut self) {
        self.generator = self.generator.clone().reusing_prompts();
    }

    /// True when prompts repeat across runs (see [`Workload::reuse_prompts`]).
    pub fn reuses_prompts(&self) -> bool {
        self.generator.reuses_prompts()
    }

    /// Request number `i`: fixed output length, unique prompt.
    pub fn request(&self, i: u64) -> ProbeRequest {
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
    run_measured(client, config, make_request, CpuSource::Process).await
}

/// [`run`], with the self-check's CPU read from `cpu`.
pub(crate) async fn run_measured<F>(
    client: &ProbeClient,
    config: &RunConfig,
    mut make_request: F,
    cpu: CpuSource,
) -> Result<RunResult, RunError>
where
    F: FnMut(u64) -> ProbeRequest,
{
    validate(config)?;
    let monitor = Monitor::start_with(cpu);
    let slots = match config.load {
        Load::Concurrency { concurrency } => Some(concurrency),
        Load::Rate {
            max_concurrency, ..
        } => max_concurrency,
    };
    let sem = slots.map(|n| Arc::new(Semaphore::new(n as usize)));
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
    let mut gaps = gaps;
    let mut tasks: JoinSet<(bool, ProbeRecord, Instant)> = JoinSet::new();
    let mut next_arrival = Instant::now();
    let mut measured_start: Option<Instant> = None;
    let mut i: u64 = 0;
    let mut done: Vec<(bool, ProbeRecord, Instant)> = Vec::new();
    loop {
        let warm = i < config.warmup_requests;
        if let Bound::Requests(n) = config.bound {
            if i >= config.warmup_requests + n {
                break;
            }
        }
        let req = make_request(i);
        let scheduled = match &mut gaps {
            Some((gamma, rng)) => {
                let at = next_arrival;
                let gap = gamma.sample(rng);
                next_arrival = at + Duration::from_secs_f64(gap.clamp(0.0, 86_400.0));
                tokio::time::sleep_until(at.into()).await;
                at
            }
            None => Instant::now(),
        };
        let permit = match &sem {
            Some(s) => match s.clone().acquire_owned().await {
                Ok(p) => Some(p),
                Err(_) => break,
            },
            None => None,
        };
        // Closed loop: the slot freeing up is the schedule.
        let scheduled = if gaps.is_none() {
            Instant::now()
        } else {
            scheduled
        };
        if !warm {
            let start = *measured_start.get_or_insert(scheduled);
            if let Bound::Duration(d) = config.bound {
                if scheduled.saturating_duration_since(start) >= d {
                    break;
                }
            }
        }
        let c = client.clone();
        let info = req.info();
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
            drop(permit);
            (warm, rec, Instant::now())
        });
        i += 1;
        while let Some(r) = tasks.try_join_next() {
            if let Ok(r) = r {
                done.push(r);
            }
        }
        // With free slots the loop would send a whole burst (1 000 requests
        // at concurrency 1 000: ~25 ms) in one poll, and no stream's event
        // could be stamped meanwhile. One turn of the runtime per send.
        tokio::task::yield_now().await;
    }
    while let Some(r) = tasks.join_next().await {
        if let Ok(r) = r {
            done.push(r);
        }
    }
    let monitored = monitor.finish().await;
    let start = measured_start.unwrap_or_else(Instant::now);
    let mut last_end = start;
    let mut records = Vec::with_capacity(done.len());
    let mut warmups = 0;
    for (warm, rec, end) in done {
        if warm {
            warmups += 1;
            continue;
        }
        last_end = last_end.max(end);
        records.push(rec);
    }
    // Requests in the order they were numbered (= scheduled).
    records.sort_by_key(|r| r.seq);
    let wall = last_end.saturating_duration_since(start);
    Ok(RunResult::from_records(
        config, warmups, records, wall, &monitored,
    ))
}
