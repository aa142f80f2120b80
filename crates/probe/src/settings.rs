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

/// Per-request objectives; a request is *good* when it succeeded and meets
/// every objective set. ITL is judged on the request's own p95 per-token
/// ITL, TTFT and e2e on its value; all from *scheduled*, as a user would
/// feel them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Objectives {
    pub ttft_p95: Option<Duration>,
    pub itl_p95: Option<Duration>,
    pub e2e_p95: Option<Duration>,
}

impl Objectives {
    /// Whether one request met every objective.
    pub fn met_by(&self, r: &ProbeRecord) -> bool {
        if !r.is_ok() {
            return false;
        }
        let ns = |d: Duration| d.as_nanos() as f64;
        if let Some(t) = self.ttft_p95 {
            match r.ttft_from_scheduled_ns() {
                Some(v) if v as f64 <= ns(t) => {}
                _ => return false,
            }
        }
        if let Some(t) = self.itl_p95 {
            let mut itl = r.per_token_itl_ns();
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
