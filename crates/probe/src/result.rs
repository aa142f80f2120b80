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

use crate::record::ProbeRecord;
use crate::selfcheck::{MeasuredScale, Monitored, SelfCheck};
pub use crate::settings::Objectives;
use crate::settings::{Bound, Load, RunConfig};
use crate::stats::{Distribution, Summary, EXACT_SAMPLES};

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
    /// Server-reported prompt tokens per request (min/median/max…): shows
    /// whether every request got the asked input length.
    #[serde(default)]
    pub input_tokens_per_request: Summary,
    /// Output tokens of successful requests.
    pub total_output_tokens: u64,
    /// Successful requests whose output tokens were counted by the client.
    pub output_tokens_estimated: u64,
    /// Server-reported cached prompt tokens (prefix-cache hits).
    pub total_cached_tokens: u64,
    /// Requests whose usage carried no cached-token count (vLLM sends it
    /// only with `--enable-prompt-tokens-details`): when it is every
    /// request, `total_cached_tokens` says nothing about the cache.
    #[serde(default)]
    pub cached_tokens_unreported: u64,
    /// The server's prefix-cache hit ratio over the run from its own
    /// counters (hits / queries, all its clients), when the caller scraped them.
    #[serde(default)]
    pub server_prefix_cache_hit_ratio: Option<f64>,
    /// Why the run's cache hits contradict its workload (random prompts
    /// that hit the cache), when the caller judged it; such a run measured
    /// a warm cache.
    #[serde(default)]
    pub cache_contaminated: Option<String>,
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
    /// Time to the first answer token (first visible output).
    pub ttfo_ms: Summary,
    /// Time to the first reasoning token; requests that did not reason
    /// count as missing.
    #[serde(default)]
    pub ttfr_ms: Summary,
    /// Requests whose stream carried reasoning before (or instead of) the
    /// answer.
    #[serde(default)]
    pub reasoning_requests: u64,
    /// Reasoning and answer tokens of successful requests (together
    /// `total_output_tokens`).
    #[serde(default)]
    pub total_reasoning_tokens: u64,
    #[serde(default)]
    pub total_answer_tokens: u64,
    /// Requests the server timed itself (vLLM per-request metrics,
    /// llama.cpp timings): the exact breakdown below covers these.
    #[serde(default)]
    pub server_timed_requests: u64,
    /// The server's own queue, prefill (scheduled → first token) and decode
    /// (first → last token) per request, in its clock.
    #[serde(default)]
    pub server_queue_ms: Summary,
    #[serde(default)]
    pub server_prefill_ms: Summary,
    #[serde(default)]
    pub server_decode_ms: Summary,
    /// Client − server per request: the network, the HTTP front end and
    /// tokenization, before the first token and over the whole request.
    #[serde(default)]
    pub outside_server_ttft_ms: Summary,
    #[serde(default)]
    pub outside_server_e2e_ms: Summary,
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
    /// The shared schedule this run is a part of (`bench --part`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_of: Option<crate::settings::PartOf>,
    /// A conversation workload's figures per turn (input, cached tokens,
    /// TTFT, prefix-cache hit ratio); empty for one-shot requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<crate::conversation::TurnStats>,
    /// The measured probes themselves, in send order — when the run kept
    /// them (see [`crate::Records`]); a run that streamed them elsewhere
    /// leaves this empty and its memory flat.
    #[serde(default)]
    pub records: Vec<ProbeRecord>,
}

/// A run's statistics as records come in: counters and mergeable
/// [`Distribution`]s, never the records themselves, so memory stays flat
/// however long the run. Workers each keep one and [`RunStats::merge`]
/// them; the result is what one accumulator fed every record would hold
/// (every figure depends only on the set of records, not their order).
#[derive(Debug, Clone)]
pub struct RunStats {
    objectives: Objectives,
    requests: u64,
    successful: u64,
    total_input_tokens: u64,
    input_tokens_unreported: u64,
    input_tokens: Distribution,
    total_output_tokens: u64,
    output_tokens_estimated: u64,
    total_cached_tokens: u64,
    cached_tokens_unreported: u64,
    good_requests: u64,
    reasoning_requests: u64,
    total_reasoning_tokens: u64,
    total_answer_tokens: u64,
    output_events: u64,
    event_tokens: u64,
    errors: BTreeMap<String, u64>,
    /// Per error kind, the message of the lowest-numbered request that had
    /// it (so the example does not depend on which worker saw it first).
    error_examples: BTreeMap<String, (u64, String)>,
    ttfb: Distribution,
    ttft: Distribution,
    ttfo: Distribution,
    ttfr: Distribution,
    server_timed_requests: u64,
    server_queue: Distribution,
    server_prefill: Distribution,
    server_decode: Distribution,
    outside_server_ttft: Distribution,
    outside_server_e2e: Distribution,
    tpot: Distribution,
    itl: Distribution,
    itl_event: Distribution,
    e2e: Distribution,
    ttft_from_scheduled: Distribution,
    e2e_from_scheduled: Distribution,
    dispatch_lag: Distribution,
}

impl RunStats {
    /// Keeps up to `exact_samples` exact values per metric (see
    /// [`crate::stats::EXACT_SAMPLES`]).
    pub fn new(objectives: Objectives, exact_samples: usize) -> RunStats {
        let d = || Distribution::new(exact_samples);
        RunStats {
            objectives,
            requests: 0,
            successful: 0,
            total_input_tokens: 0,
            input_tokens_unreported: 0,
            input_tokens: d(),
            total_output_tokens: 0,
            output_tokens_estimated: 0,
            total_cached_tokens: 0,
            cached_tokens_unreported: 0,
            good_requests: 0,
            reasoning_requests: 0,
            total_reasoning_tokens: 0,
            total_answer_tokens: 0,
            output_events: 0,
            event_tokens: 0,
            errors: BTreeMap::new(),
            error_examples: BTreeMap::new(),
            ttfb: d(),
            ttft: d(),
            ttfo: d(),
            ttfr: d(),
            server_timed_requests: 0,
            server_queue: d(),
            server_prefill: d(),
            server_decode: d(),
            outside_server_ttft: d(),
            outside_server_e2e: d(),
            tpot: d(),
            itl: d(),
            itl_event: d(),
            e2e: d(),
            ttft_from_scheduled: d(),
            e2e_from_scheduled: d(),
            dispatch_lag: d(),
        }
    }

    /// Measured requests so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Counts one measured request.
    pub fn add(&mut self, r: &ProbeRecord) {
        self.requests += 1;
        let usage = r.usage.as_ref();
        match usage.and_then(|u| u.prompt_tokens) {
            Some(p) => {
                self.total_input_tokens += p;
                self.input_tokens.add(p as f64);
            }
            None => self.input_tokens_unreported += 1,
        }
        match usage.and_then(|u| u.cached_tokens) {
            Some(cached) => self.total_cached_tokens += cached,
            None => self.cached_tokens_unreported += 1,
        }
        if r.is_ok() {
            self.successful += 1;
            self.total_output_tokens += r.output_tokens;
            self.output_tokens_estimated += u64::from(r.output_tokens_estimated);
            self.total_reasoning_tokens += r.reasoning_tokens();
            self.total_answer_tokens += r.answer_tokens();
        }
        self.reasoning_requests += u64::from(r.ttfr_ns.is_some());
        if let Some(e) = &r.error {
            let k = e.kind().as_str().to_string();
            *self.errors.entry(k.clone()).or_insert(0) += 1;
            let seq = r.seq.unwrap_or(u64::MAX);
            let example = self
                .error_examples
                .entry(k)
                .or_insert_with(|| (seq, e.to_string()));
            if seq < example.0 {
                *example = (seq, e.to_string());
            }
        }
        self.good_requests += u64::from(self.objectives.met_by(r));
        self.output_events += r.events.len() as u64;
        self.event_tokens += r.events.iter().map(|x| u64::from(x.tokens)).sum::<u64>();

        let opt = |d: &mut Distribution, v: Option<f64>| match v {
            Some(v) => d.add(v),
            None => d.add_missing(1),
        };
        let ok = r.is_ok();
        opt(&mut self.ttfb, r.ttfb_ns.map(|v| v as f64));
        opt(&mut self.ttft, r.ttft_ns.map(|v| v as f64));
        opt(&mut self.ttfo, r.ttfo_ns.map(|v| v as f64));
        opt(&mut self.ttfr, r.ttfr_ns.map(|v| v as f64));
        self.add_server_timing(r);
        opt(&mut self.tpot, r.tpot_ns());
        opt(&mut self.e2e, ok.then_some(r.e2e_ns as f64));
        let ttft_s = r.ttft_from_scheduled_ns().map(|v| v as f64);
        opt(&mut self.ttft_from_scheduled, ttft_s);
        let e2e_s = ok.then_some(r.e2e_from_scheduled_ns() as f64);
        opt(&mut self.e2e_from_scheduled, e2e_s);
        self.dispatch_lag.add(r.dispatch_lag_ns as f64);
        if r.events.len() < 2 {
            // A request that produced no gap at all (failed early, one event).
            self.itl.add_missing(1);
            self.itl_event.add_missing(1);
        }
        r.per_token_itl_ns()
            .into_iter()
            .for_each(|v| self.itl.add(v));
        r.gaps().for_each(|(g, _)| self.itl_event.add(g as f64));
    }

    /// The server's own timing of `r`, ns like every distribution here
    /// (requests without one are missing from these figures only).
    fn add_server_timing(&mut self, r: &ProbeRecord) {
        let t = r.server_timing;
        self.server_timed_requests += u64::from(t.is_some());
        let ns = |ms: Option<f64>| ms.map(|v| v * 1e6);
        let pairs = [
            (&mut self.server_queue, ns(t.and_then(|t| t.queue_ms))),
            (&mut self.server_prefill, ns(t.and_then(|t| t.prefill_ms))),
            (&mut self.server_decode, ns(t.and_then(|t| t.decode_ms))),
            (
                &mut self.outside_server_ttft,
                ns(r.outside_server_ttft_ms()),
            ),
            (&mut self.outside_server_e2e, ns(r.outside_server_e2e_ms())),
        ];
        for (d, v) in pairs {
            match v {
                // Client − server may be slightly negative where the two
                // clocks disagree; the histogram holds only positives, so
                // such a value is kept as zero.
                Some(v) => d.add(v.max(0.0)),
                None => d.add_missing(1),
            }
        }
    }

    /// Adds another accumulator's requests.
    pub fn merge(&mut self, o: &RunStats) {
        self.requests += o.requests;
        self.successful += o.successful;
        self.total_input_tokens += o.total_input_tokens;
        self.input_tokens_unreported += o.input_tokens_unreported;
        self.total_output_tokens += o.total_output_tokens;
        self.output_tokens_estimated += o.output_tokens_estimated;
        self.total_cached_tokens += o.total_cached_tokens;
        self.cached_tokens_unreported += o.cached_tokens_unreported;
        self.good_requests += o.good_requests;
        self.reasoning_requests += o.reasoning_requests;
        self.server_timed_requests += o.server_timed_requests;
        self.total_reasoning_tokens += o.total_reasoning_tokens;
        self.total_answer_tokens += o.total_answer_tokens;
        self.output_events += o.output_events;
        self.event_tokens += o.event_tokens;
        for (k, n) in &o.errors {
            *self.errors.entry(k.clone()).or_insert(0) += n;
        }
        for (k, ex) in &o.error_examples {
            let mine = self.error_examples.entry(k.clone()).or_insert(ex.clone());
            if ex.0 < mine.0 {
                *mine = ex.clone();
            }
        }
        let pairs = [
            (&mut self.input_tokens, &o.input_tokens),
            (&mut self.ttfb, &o.ttfb),
            (&mut self.ttft, &o.ttft),
            (&mut self.ttfo, &o.ttfo),
            (&mut self.ttfr, &o.ttfr),
            (&mut self.server_queue, &o.server_queue),
            (&mut self.server_prefill, &o.server_prefill),
            (&mut self.server_decode, &o.server_decode),
            (&mut self.outside_server_ttft, &o.outside_server_ttft),
            (&mut self.outside_server_e2e, &o.outside_server_e2e),
            (&mut self.tpot, &o.tpot),
            (&mut self.itl, &o.itl),
            (&mut self.itl_event, &o.itl_event),
            (&mut self.e2e, &o.e2e),
            (&mut self.ttft_from_scheduled, &o.ttft_from_scheduled),
            (&mut self.e2e_from_scheduled, &o.e2e_from_scheduled),
            (&mut self.dispatch_lag, &o.dispatch_lag),
        ];
        for (mine, theirs) in pairs {
            mine.merge(theirs);
        }
    }

    /// The run's result; `records` are attached as they are (empty when
    /// the run streamed them elsewhere).
    pub fn finish(
        &self,
        config: &RunConfig,
        warmup_requests: u64,
        records: Vec<ProbeRecord>,
        wall: Duration,
        monitored: &Monitored,
    ) -> RunResult {
        let n = self.requests;
        let failed = n - self.successful;
        let secs = wall.as_secs_f64();
        let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        let dispatch_lag_ms = self.dispatch_lag.summary_ms();
        let tokens_per_event =
            (self.output_events > 0).then(|| self.event_tokens as f64 / self.output_events as f64);
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        let (ttft, itl, e2e) = (
            self.ttft.summary_ms(),
            self.itl.summary_ms(),
            self.e2e.summary_ms(),
        );
        let scale = MeasuredScale {
            ttft_p50_ms: ttft.p50,
            ttft_p95_ms: ttft.p95,
            itl_p95_ms: itl.p95,
            e2e_p50_ms: e2e.p50,
            ttft_objective_ms: ms(config.objectives.ttft_p95),
            itl_objective_ms: ms(config.objectives.itl_p95),
        };
        let self_check = SelfCheck::judge(
            monitored,
            dispatch_lag_ms.p99,
            tokens_per_event,
            config.limits,
            &scale,
        );
        RunResult {
            load: config.load,
            bound: config.bound,
            objectives: config.objectives,
            requests: n,
            successful: self.successful,
            failed,
            warmup_requests,
            duration_s: secs,
            total_input_tokens: self.total_input_tokens,
            input_tokens_unreported: self.input_tokens_unreported,
            input_tokens_per_request: self.input_tokens.summary(),
            total_output_tokens: self.total_output_tokens,
            output_tokens_estimated: self.output_tokens_estimated,
            total_cached_tokens: self.total_cached_tokens,
            cached_tokens_unreported: self.cached_tokens_unreported,
            server_prefix_cache_hit_ratio: None,
            cache_contaminated: None,
            request_throughput: per_s(self.successful as f64),
            output_throughput: per_s(self.total_output_tokens as f64),
            total_token_throughput: per_s(
                (self.total_output_tokens + self.total_input_tokens) as f64,
            ),
            good_requests: self.good_requests,
            goodput: per_s(self.good_requests as f64),
            error_rate: if n > 0 { failed as f64 / n as f64 } else { 0.0 },
            errors: self.errors.clone(),
            error_examples: self
                .error_examples
                .iter()
                .map(|(k, (_, m))| (k.clone(), m.clone()))
                .collect(),
            ttfb_ms: self.ttfb.summary_ms(),
            ttft_ms: self.ttft.summary_ms(),
            ttfo_ms: self.ttfo.summary_ms(),
            ttfr_ms: self.ttfr.summary_ms(),
            server_timed_requests: self.server_timed_requests,
            server_queue_ms: self.server_queue.summary_ms(),
            server_prefill_ms: self.server_prefill.summary_ms(),
            server_decode_ms: self.server_decode.summary_ms(),
            outside_server_ttft_ms: self.outside_server_ttft.summary_ms(),
            outside_server_e2e_ms: self.outside_server_e2e.summary_ms(),
            reasoning_requests: self.reasoning_requests,
            total_reasoning_tokens: self.total_reasoning_tokens,
            total_answer_tokens: self.total_answer_tokens,
            tpot_ms: self.tpot.summary_ms(),
            itl_ms: self.itl.summary_ms(),
            itl_event_ms: self.itl_event.summary_ms(),
            e2e_ms: self.e2e.summary_ms(),
            ttft_from_scheduled_ms: self.ttft_from_scheduled.summary_ms(),
            e2e_from_scheduled_ms: self.e2e_from_scheduled.summary_ms(),
            dispatch_lag_ms,
            self_check,
            part_of: None,
            turns: Vec::new(),
            records,
        }
    }
}

impl RunResult {
    /// True when no request's usage said how many prompt tokens were cached.
    pub fn cached_tokens_unreported_by_all(&self) -> bool {
        self.requests > 0 && self.cached_tokens_unreported >= self.requests
    }

    /// The prefix-cache hit ratio the requests' usage reported (cached /
    /// input tokens), or `None` when the server reported no cached tokens.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        (self.total_input_tokens > 0 && !self.cached_tokens_unreported_by_all())
            .then(|| self.total_cached_tokens as f64 / self.total_input_tokens as f64)
    }

    /// Server-reported prompt tokens per request as (min, median, max).
    pub fn input_tokens_min_median_max(&self) -> Option<(f64, f64, f64)> {
        let s = &self.input_tokens_per_request;
        Some((s.min?, s.p50?, s.max?))
    }

    /// Aggregates measured records (pure; also usable on stored records):
    /// one [`RunStats`] fed every record, the records kept in the result.
    pub fn from_records(
        config: &RunConfig,
        warmup_requests: u64,
        records: Vec<ProbeRecord>,
        wall: Duration,
        monitored: &Monitored,
    ) -> RunResult {
        let mut stats = RunStats::new(config.objectives, EXACT_SAMPLES);
        records.iter().for_each(|r| stats.add(r));
        stats.finish(config, warmup_requests, records, wall, monitored)
    }
}
