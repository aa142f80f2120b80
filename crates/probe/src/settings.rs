//! What a run is asked to do: how load is applied ([`Load`]), when it stops
//! ([`Bound`]), what a good request is ([`Objectives`]) and the run's
//! settings as a whole ([`RunConfig`]). Plain data: the load generators
//! read it, the statistics and the report echo it; it imports neither.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::ProbeRecord;
use crate::selfcheck::SelfCheckLimits;
use crate::stats::percentile;

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

/// Which part of a stream the latency objectives judge. They matter only
/// for reasoning models (a stream without reasoning is all answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgedOn {
    /// The answer the user reads: TTFT is the time to the first answer
    /// token, ITL the gaps between answer events (the reasoning before it
    /// is waiting time, as a user of a reasoning model feels it).
    #[default]
    Answer,
    /// All generated output, reasoning included: TTFT is the first token of
    /// any kind, ITL every gap.
    Output,
}

impl JudgedOn {
    pub fn parse(text: &str) -> Option<JudgedOn> {
        match text.trim().to_ascii_lowercase().as_str() {
            "answer" => Some(JudgedOn::Answer),
            "output" | "all" => Some(JudgedOn::Output),
            _ => None,
        }
    }

    /// How a report states it.
    pub fn label(self) -> &'static str {
        match self {
            JudgedOn::Answer => "the answer (reasoning tokens count as waiting)",
            JudgedOn::Output => "all output (reasoning tokens included)",
        }
    }
}

/// Per-request objectives; a request is *good* when it succeeded and meets
/// every objective set. ITL is judged on the request's own p95 per-token
/// ITL, TTFT and e2e on its value; all from *scheduled*, as a user would
/// feel them; TTFT and ITL on the part of the stream `judged_on` names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Objectives {
    pub ttft_p95: Option<Duration>,
    pub itl_p95: Option<Duration>,
    pub e2e_p95: Option<Duration>,
    #[serde(default)]
    pub judged_on: JudgedOn,
}

impl Objectives {
    /// Whether any objective is set.
    pub fn any(&self) -> bool {
        self.ttft_p95.is_some() || self.itl_p95.is_some() || self.e2e_p95.is_some()
    }

    /// Whether one request met every objective.
    pub fn met_by(&self, r: &ProbeRecord) -> bool {
        if !r.is_ok() {
            return false;
        }
        let ns = |d: Duration| d.as_nanos() as f64;
        if let Some(t) = self.ttft_p95 {
            let ttft = match self.judged_on {
                JudgedOn::Answer => r.ttfo_from_scheduled_ns(),
                JudgedOn::Output => r.ttft_from_scheduled_ns(),
            };
            match ttft {
                Some(v) if v as f64 <= ns(t) => {}
                _ => return false,
            }
        }
        if let Some(t) = self.itl_p95 {
            let mut itl = match self.judged_on {
                JudgedOn::Answer => r.answer_itl_ns(),
                JudgedOn::Output => r.per_token_itl_ns(),
            };
            itl.sort_by(f64::total_cmp);
            if percentile(&itl, 0.95).is_some_and(|p| p > ns(t)) {
                return false;
            }
        }
        if let Some(t) = self.e2e_p95 {
            if r.e2e_from_scheduled_ns() as f64 > ns(t) {
                return false;
            }
        }
        true
    }
}

/// One part of a schedule shared by several load generators
/// (`llmwatch bench --part I/N`): request number `k` (warm-ups included)
/// belongs to part `k mod N`, so the N parts together send exactly the
/// requests, prompts and open-loop arrival instants of one run with the
/// same seed. `index` counts from 0 (a Kubernetes Indexed Job's
/// `JOB_COMPLETION_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub index: u32,
    pub count: u32,
}

impl Part {
    /// Parses `I/N` with `0 <= I < N`.
    pub fn parse(text: &str) -> Result<Part, String> {
        let (index, count) = text
            .split_once('/')
            .ok_or_else(|| format!("expected I/N (e.g. 0/4), got {text:?}"))?;
        let number = |s: &str, what: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("{what} in {text:?} is not a whole number"))
        };
        let part = Part {
            index: number(index, "I")?,
            count: number(count, "N")?,
        };
        if part.count == 0 || part.index >= part.count {
            return Err(format!(
                "expected 0 <= I < N, got {text:?} (parts count from 0)"
            ));
        }
        Ok(part)
    }

    /// Whether request number `k` is this part's.
    pub fn owns(self, k: u64) -> bool {
        k % u64::from(self.count) == u64::from(self.index)
    }

    /// This part's share of `total` (requests in flight): shared out as
    /// evenly as whole numbers allow, the first parts taking the remainder.
    pub fn share(self, total: u32) -> u32 {
        total / self.count + u32::from(self.index < total % self.count)
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Where a run sits in a shared schedule: its part (all requests when
/// `None`) and the instant the schedule starts (now when `None`). Parts
/// started on several machines with the same seed and start instant send,
/// together, what one run would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedSchedule {
    pub part: Option<Part>,
    pub start_at: Option<std::time::Instant>,
}

/// What a part's result says of the schedule it was cut from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartOf {
    pub part: Part,
    /// The shared schedule's seed (arrivals, prompt bodies).
    pub seed: u64,
    /// The shared start instant (`--start-at`), Unix ms.
    pub start_at_unix_ms: u64,
}
