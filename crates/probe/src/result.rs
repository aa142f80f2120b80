//! A run's statistics, computed from its probe records alone.
//!
//! Definitions follow DESIGN.md: percentiles are exact over all requests of
//! the run (never an average of averages); failed requests stay in: they
//! count in the error rate and against goodput, whatever they measured
//! before failing (a TTFT, some ITL gaps) stays in those distributions, and
//! each summary's `missing` says how many requests had no value.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::load::{Bound, Load, RunConfig};
use crate::record::ProbeRecord;
use crate::selfcheck::{Monitored, SelfCheck};
use crate::stats::{percentile, Summary};

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

/// Everything a run measured. Times in the summaries are milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub load: Load,
    pub bound: Bound,
    pub objectives: Objectives,
    /// Measured requests (warm-ups excluded).
    pub requests: u64,
    pub successful: u64,
    pub failed: u64,
    pub warmup_requests: u64,
    /// From the first measured request's scheduled instant to the last
    /// one's end.
    pub duration_s: f64,
    /// Server-reported prompt tokens, summed over measured requests.
    pub total_input_tokens: u64,
    /// Requests whose prompt tokens the server did not report.
    pub input_tokens_unreported: u64,
    /// Output tokens of successful requests.
    pub total_output_tokens: u64,
    /// Successful requests whose output tokens were counted by the client.
    pub output_tokens_estimated: u64,
    /// Server-reported cached prompt tokens (prefix-cache hits).
    pub total_cached_tokens: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// Requests that met every objective.
    pub good_requests: u64,
    /// Good requests per second.
    pub goodput: f64,
    pub error_rate: f64,
    /// Failed requests per error kind.
    pub errors: BTreeMap<String, u64>,
    /// The first message seen per error kind.
    pub error_examples: BTreeMap<String, String>,
    /// From sent.
    pub ttfb_ms: Summary,
    pub ttft_ms: Summary,
    pub ttfo_ms: Summary,
    /// Per output token (see `ProbeRecord::tpot_ns`).
    pub tpot_ms: Summary,
    /// Per token: a multi-token event's gap is split over its tokens.
    pub itl_ms: Summary,
    /// Per event gap, as a per-chunk tool would report it.
    pub itl_event_ms: Summary,
    pub e2e_ms: Summary,
    /// From scheduled: what a user arriving on schedule felt.
    pub ttft_from_scheduled_ms: Summary,
    pub e2e_from_scheduled_ms: Summary,
    /// sent − scheduled.
    pub dispatch_lag_ms: Summary,
    pub self_check: SelfCheck,
    /// The measured probes themselves, in send order.
    pub records: Vec<ProbeRecord>,
}

const MS: f64 = 1e6;

impl RunResult {
    /// Aggregates measured records (pure; also usable on stored records).
    pub fn from_records(
        config: &RunConfig,
        warmup_requests: u64,
        records: Vec<ProbeRecord>,
        wall: Duration,
        monitored: &Monitored,
    ) -> RunResult {
        let n = records.len() as u64;
        let ok: Vec<&ProbeRecord> = records.iter().filter(|r| r.is_ok()).collect();
        let successful = ok.len() as u64;
        let failed = n - successful;
        let secs = wall.as_secs_f64();
        let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };

        let mut errors = BTreeMap::new();
        let mut error_examples = BTreeMap::new();
        for e in records.iter().filter_map(|r| r.error.as_ref()) {
            let k = e.kind().as_str().to_string();
            *errors.entry(k.clone()).or_insert(0) += 1;
            error_examples.entry(k).or_insert_with(|| e.to_string());
        }

        let total_input_tokens: u64 = records
            .iter()
            .filter_map(|r| r.usage.as_ref().and_then(|u| u.prompt_tokens))
            .sum();
        let input_tokens_unreported = records
            .iter()
            .filter(|r| r.usage.as_ref().and_then(|u| u.prompt_tokens).is_none())
            .count() as u64;
        let total_cached_tokens: u64 = records
            .iter()
            .filter_map(|r| r.usage.as_ref().and_then(|u| u.cached_tokens))
            .sum();
        let total_output_tokens: u64 = ok.iter().map(|r| r.output_tokens).sum();
        let output_tokens_estimated =
            ok.iter().filter(|r| r.output_tokens_estimated).count() as u64;
        let good_requests = records
            .iter()
            .filter(|r| config.objectives.met_by(r))
            .count() as u64;

        // A metric's values, with requests lacking one counted as missing.
        let opt = |f: &dyn Fn(&ProbeRecord) -> Option<f64>| {
            let vals: Vec<f64> = records.iter().filter_map(f).map(|v| v / MS).collect();
            let missing = n - vals.len() as u64;
            Summary::from_values(vals, missing)
        };
        let ttfb_ms = opt(&|r| r.ttfb_ns.map(|v| v as f64));
        let ttft_ms = opt(&|r| r.ttft_ns.map(|v| v as f64));
        let ttfo_ms = opt(&|r| r.ttfo_ns.map(|v| v as f64));
        let tpot_ms = opt(&|r| r.tpot_ns());
        let e2e_ms = opt(&|r| r.is_ok().then_some(r.e2e_ns as f64));
        let ttft_from_scheduled_ms = opt(&|r| r.ttft_from_scheduled_ns().map(|v| v as f64));
        let e2e_from_scheduled_ms = opt(&|r| r.is_ok().then_some(r.e2e_from_scheduled_ns() as f64));
        let dispatch_lag_ms = opt(&|r| Some(r.dispatch_lag_ns as f64));
        let itl: Vec<f64> = records
            .iter()
            .flat_map(|r| r.per_token_itl_ns())
            .map(|v| v / MS)
            .collect();
        let itl_event: Vec<f64> = records
            .iter()
            .flat_map(|r| r.itl_ns())
            .map(|v| v as f64 / MS)
            .collect();
        // Requests that produced no gap at all (failed early, one event).
        let no_gap = records.iter().filter(|r| r.events.len() < 2).count() as u64;
        let itl_ms = Summary::from_values(itl, no_gap);
        let itl_event_ms = Summary::from_values(itl_event, no_gap);

        let (ev, tok) = records.iter().fold((0u64, 0u64), |(e, t), r| {
            (
                e + r.events.len() as u64,
                t + r.events.iter().map(|x| u64::from(x.tokens)).sum::<u64>(),
            )
        });
        let tokens_per_event = (ev > 0).then(|| tok as f64 / ev as f64);
        let self_check = SelfCheck::judge(
            monitored,
            dispatch_lag_ms.p99,
            tokens_per_event,
            config.limits,
        );

        RunResult {
            load: config.load,
            bound: config.bound,
            objectives: config.objectives,
            requests: n,
            successful,
            failed,
            warmup_requests,
            duration_s: secs,
            total_input_tokens,
            input_tokens_unreported,
            total_output_tokens,
            output_tokens_estimated,
            total_cached_tokens,
            request_throughput: per_s(successful as f64),
            output_throughput: per_s(total_output_tokens as f64),
            total_token_throughput: per_s((total_output_tokens + total_input_tokens) as f64),
            good_requests,
            goodput: per_s(good_requests as f64),
            error_rate: if n > 0 { failed as f64 / n as f64 } else { 0.0 },
            errors,
            error_examples,
            ttfb_ms,
            ttft_ms,
            ttfo_ms,
            tpot_ms,
            itl_ms,
            itl_event_ms,
            e2e_ms,
            ttft_from_scheduled_ms,
            e2e_from_scheduled_ms,
            dispatch_lag_ms,
            self_check,
            records,
        }
    }
}
