//! Measured TTFT, ITL and TPOT against the server's own send instants.
//!
//! Truth is per event: the server stamps each event with the monotonic
//! clock as hyper pulls it; the client's parse instant is `sent_at +
//! at_ns`. The client runs on a [`MeasuringThread`], as `llmwatch bench`
//! and sweeps do: sleeping at concurrency 1, busy-polling at 64 (the mode
//! meant for load; a debug build on a 2-core VM holds p99 ≤ 0.6 ms either
//! way). The error distribution is asserted at p99 ≤ 1 ms; the box is
//! shared, so an attempt may be retried, and each attempt reports the
//! hypervisor's steal (time the host gave our CPUs to someone else), the
//! usual cause of a noisy one. The release-mode capacity bench reports the
//! same error at far higher load.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use std::time::{Duration, Instant};

use llmwatch_probe::{
    Api, ClientConfig, MeasuringThread, ProbeClient, ProbeRecord, ProbeRequest, RunConfig,
};

use crate::helpers::*;

/// Tokens per token-carrying event after the first (which carries 2).
const PATTERN: [u64; 12] = [1, 3, 1, 1, 2, 1, 1, 4, 1, 1, 1, 2];
const FIRST_TOKENS: u64 = 2;
const HEADER_DELAY_MS: u64 = 20;
const FIRST_TOKEN_MS: u64 = 30;

fn total_tokens() -> u64 {
    FIRST_TOKENS + PATTERN.iter().sum::<u64>()
}

/// Headers after 20 ms; a role-only event (with usage 0) 5 ms later; the
/// first token event (2 tokens) 30 ms after the headers; then an event
/// every `interval`; finish+usage; [DONE] 3 ms later.
fn script(continuous_usage: bool, interval: u64, phase_step: Duration) -> Script {
    let mut events = vec![Ev {
        at: ms(5),
        data: role_chunk(continuous_usage).into(),
    }];
    let mut cum = FIRST_TOKENS;
    events.push(Ev {
        at: ms(FIRST_TOKEN_MS),
        data: chat_chunk("Hello there", continuous_usage.then_some(cum)).into(),
    });
    for (k, t) in PATTERN.iter().enumerate() {
        cum += t;
        events.push(Ev {
            at: ms(FIRST_TOKEN_MS + interval * (k as u64 + 1)),
            data: chat_chunk(" tok", continuous_usage.then_some(cum)).into(),
        });
    }
    let end = FIRST_TOKEN_MS + interval * (PATTERN.len() as u64 + 1);
    events.push(Ev {
        at: ms(end),
        data: finish_chunk(cum).into(),
    });
    events.push(Ev {
        at: ms(end + 3),
        data: "data: [DONE]\n\n".into(),
    });
    Script::Stream {
        header_delay: ms(HEADER_DELAY_MS),
        events,
        headers: vec![],
        abort_at_end: false,
        hang_at_end: false,
        phase_step,
    }
}

fn signed_ms(a: Instant, b: Instant) -> f64 {
    if a >= b {
        (a - b).as_secs_f64() * 1e3
    } else {
        -((b - a).as_secs_f64() * 1e3)
    }
}

/// Absolute errors (ms) against the truth, pooled over records.
#[derive(Default, Debug)]
struct Errors {
    ttft: Vec<f64>,
    itl: Vec<f64>,
    tpot: Vec<f64>,
    e2e: Vec<f64>,
    /// The server's per-token ITL (each event's gap split over its
    /// tokens) and per-record TPOT, from its own stamps: what the run's
    /// statistics must reproduce.
    itl_per_token_truth: Vec<f64>,
    tpot_truth: Vec<f64>,
}

fn compare(rec: &ProbeRecord, stamps: &[Instant], continuous: bool, e: &mut Errors) {
    assert!(rec.is_ok(), "probe failed: {:?}", rec.error);
    let sent = rec.sent_at.expect("sent instant");
    // stamps: role, first token, 12 token events, finish, [DONE].
    assert_eq!(stamps.len(), 2 + PATTERN.len() + 2);
    assert_eq!(
        rec.events.len(),
        1 + PATTERN.len(),
        "role-only/finish events must not count"
    );
    let at = |ns: u64| sent + Duration::from_nanos(ns);
    // TTFT: the first token event, never the role-only one.
    let ttft = Duration::from_nanos(rec.ttft_ns.unwrap());
    // The client cannot see the first token before the server sent it: a
    // TTFT before that instant would have come from the role-only event.
    assert!(
        sent + ttft >= stamps[1],
        "TTFT was set by the role-only event"
    );
    e.ttft
        .push((ttft.as_secs_f64() * 1e3 - signed_ms(stamps[1], sent)).abs());
    for k in 1..rec.events.len() {
        let measured = signed_ms(at(rec.events[k].at_ns), at(rec.events[k - 1].at_ns));
        let truth = signed_ms(stamps[k + 1], stamps[k]);
        e.itl.push((measured - truth).abs());
        let tokens = if continuous { PATTERN[k - 1] } else { 1 };
        e.itl_per_token_truth
            .extend(std::iter::repeat_n(truth / tokens as f64, tokens as usize));
    }
    if std::env::var("ACC_DEBUG").is_ok() {
        let errs: Vec<String> = rec
            .events
            .iter()
            .enumerate()
            .map(|(k, ev)| format!("{:.2}", signed_ms(at(ev.at_ns), stamps[k + 1])))
            .collect();
        eprintln!("per-event errors ms: {errs:?}");
    }
    let expected_tokens: Vec<u32> = if continuous {
        std::iter::once(FIRST_TOKENS as u32)
            .chain(PATTERN.iter().map(|&t| t as u32))
            .collect()
    } else {
        vec![1; 1 + PATTERN.len()]
    };
    let got: Vec<u32> = rec.events.iter().map(|e| e.tokens).collect();
    assert_eq!(got, expected_tokens);
    assert_eq!(rec.output_tokens, total_tokens());
    assert!(!rec.output_tokens_estimated);
    assert_eq!(rec.usage.as_ref().unwrap().cached_tokens, Some(4));
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
    // TPOT against the server's own [DONE] and first-token instants.
    let first = u64::from(expected_tokens[0]);
    let done = stamps[stamps.len() - 1];
    let tpot_truth = signed_ms(done, stamps[1]) / (total_tokens() - first) as f64;
    e.tpot
        .push((rec.tpot_ns().unwrap() / 1e6 - tpot_truth).abs());
    e.tpot_truth.push(tpot_truth);
    e.e2e
        .push((rec.e2e_ns as f64 / 1e6 - signed_ms(done, sent)).abs());
}

fn p50_p99_max(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let p = |q| llmwatch_probe::percentile(v, q).unwrap_or(0.0);
    (p(0.5), p(0.99), v.last().copied().unwrap_or(0.0))
}

/// The outcome of one attempt.
struct Attempt {
    /// Every error's p99 within 1 ms (the requirement).
    within: bool,
    /// Out of bounds, but honestly so: no error exceeds the longest stall
    /// the run's own self-check saw on the measuring thread (plus the 1 ms
    /// budget). A host that preempts our thread for 2 ms makes a 2 ms
    /// error that the client reports as scheduler lag; a client that stamps
    /// late or counts the wrong event fails `systematic_ok` in every
    /// attempt.
    explained_by_self_check: bool,
    /// Every error's median within 0.5 ms and the run's ITL and TPOT
    /// medians within 1 ms of the server's. A stall that lands on many
    /// requests at once can move one attempt's medians; a client that stamps
    /// late or counts the wrong event moves every attempt's.
    systematic_ok: bool,
    /// The longest stall the run's self-check saw.
    lag_max_ms: f64,
    report: String,
}

/// One attempt. Structural checks (token counts, role-only, usage) panic at
/// once: they do not depend on timing noise.
async fn accuracy_at(
    concurrency: u32,
    requests: u64,
    continuous: bool,
    interval: u64,
    spin: bool,
) -> Attempt {
    let phase = Duration::from_micros(interval * 1000 / 64);
    let server = spawn_server(script(continuous, interval, phase));
    boost_priority();
    let measuring = MeasuringThread::start(spin).unwrap();
    let client = ProbeClient::new(ClientConfig::new(server.url())).unwrap();
    let cfg = RunConfig::closed(concurrency, requests);
    let result = measuring
        .run(client, cfg, move |i| {
            let mut r = ProbeRequest::fixed(Api::Chat, "m", format!("req-{i}"), 64);
            r.continuous_usage_stats = continuous;
            r
        })
        .await
        .unwrap();
    assert_eq!(result.successful, requests, "{:?}", result.errors);
    let mut errs = Errors::default();
    for rec in &result.records {
        let id = format!("req-{}", rec.seq.unwrap());
        compare(rec, &server.stamps_of(&id), continuous, &mut errs);
    }
    // Run-level per-token ITL: multi-token events split their gap.
    let tokens_after_first: u64 = if continuous {
        PATTERN.iter().sum()
    } else {
        PATTERN.len() as u64
    };
    assert_eq!(result.itl_ms.n, tokens_after_first * requests);
    assert_eq!(result.itl_event_ms.n, PATTERN.len() as u64 * requests);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        llmwatch_probe::percentile(v, 0.5).unwrap()
    };
    let itl_median_truth = median(&mut errs.itl_per_token_truth);
    let tpot_truth = median(&mut errs.tpot_truth);
    let mut report = Vec::new();
    let mut within = true;
    let mut worst_error: f64 = 0.0;
    let mut systematic_ok = true;
    for (name, v) in [
        ("TTFT", &mut errs.ttft),
        ("ITL", &mut errs.itl),
        ("TPOT", &mut errs.tpot),
        ("E2E", &mut errs.e2e),
    ] {
        let (p50, p99, max) = p50_p99_max(v);
        let p90 = llmwatch_probe::percentile(v, 0.9).unwrap_or(0.0);
        report.push(format!(
            "{name} p50 {p50:.3} p90 {p90:.3} p99 {p99:.3} max {max:.3} (n={})",
            v.len()
        ));
        within &= p99 <= 1.0;
        worst_error = worst_error.max(max);
        systematic_ok &= p50 <= 0.5;
    }
    let itl_p50 = result.itl_ms.p50.unwrap();
    let tpot_p50 = result.tpot_ms.p50.unwrap();
    report.push(format!("run ITL p50 {itl_p50:.3} (server {itl_median_truth:.3}), TPOT p50 {tpot_p50:.3} (server {tpot_truth:.3})"));
    let medians = (itl_p50 - itl_median_truth).abs() <= 1.0 && (tpot_p50 - tpot_truth).abs() <= 1.0;
    within &= medians;
    let ttft = result.ttft_ms.min.unwrap();
    assert!(
        ttft >= (HEADER_DELAY_MS + FIRST_TOKEN_MS) as f64,
        "TTFT min {ttft}"
    );
    let lag_max = result.self_check.scheduler_lag_max_ms.unwrap_or(0.0);
    let explained_by_self_check = worst_error <= lag_max + 1.0;
    let report = format!(
        "concurrency {concurrency}, continuous usage {continuous}, spin {spin}, steal {:.1} %, self-check scheduler lag max {lag_max:.3} ms: errors (ms) {report:?}",
        result.self_check.host_steal_pct.unwrap_or(f64::NAN)
    );
    Attempt {
        within,
        explained_by_self_check,
        systematic_ok: systematic_ok && medians,
        lag_max_ms: lag_max,
        report,
    }
}

/// A self-check stall past this says the host took the measuring thread
/// away for longer than any timing claim can survive: such an attempt is
/// recorded, not judged.
const DISTURBED_LAG_MS: f64 = 10.0;

/// Runs attempts, serialized with the other timing tests, and passes on the
/// first whose error p99 is within 1 ms. A real inaccuracy (stamping late,
/// counting the wrong event) fails every attempt; a neighbour's compile
/// stealing the CPU for a few ms fails one. Out-of-bounds attempts whose
/// self-check saw a stall past `DISTURBED_LAG_MS` are not judged (up to six
/// attempts, three judged). The judged ones pass only if each attempt's
/// errors were no larger than the stalls its self-check reported and one
/// at least had its medians in bounds: the promise on a noisy host is that
/// the client says its timing is disturbed, never that it is exact. A
/// fresh-clone CI run beside two compiles saw stalls of 12 to 200 ms.
async fn accurate(concurrency: u32, requests: u64, continuous: bool, interval: u64) {
    let _serial = TIMING.lock().await;
    let spin = concurrency > 1;
    let mut reports = Vec::new();
    let mut judged = Vec::new();
    for _ in 0..6 {
        let a = accuracy_at(concurrency, requests, continuous, interval, spin).await;
        if a.within {
            eprintln!("{} (after {} noisy attempts)", a.report, reports.len());
            return;
        }
        reports.push(a.report.clone());
        if a.lag_max_ms <= DISTURBED_LAG_MS {
            judged.push(a);
        }
        if judged.len() == 3 {
            break;
        }
    }
    if judged.is_empty() {
        eprintln!(
            "host too disturbed to judge: every attempt saw a stall past {DISTURBED_LAG_MS} ms:\n{}",
            reports.join("\n")
        );
        return;
    }
    let all_explained = judged.iter().all(|a| a.explained_by_self_check);
    let any_systematic_ok = judged.iter().any(|a| a.systematic_ok);
    assert!(
        all_explained && any_systematic_ok,
        "timing error above 1 ms in every attempt, beyond what the self-check saw \
         (or a median off by over 0.5 ms in every judged attempt):\n{}",
        reports.join("\n")
    );
    eprintln!(
        "noisy host: every attempt above 1 ms, each within the stalls its self-check reported:\n{}",
        reports.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn concurrency_1_continuous_usage() {
    accurate(1, 6, true, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn concurrency_1_one_token_per_event() {
    accurate(1, 6, false, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_64_continuous_usage() {
    accurate(64, 64, true, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_64_one_token_per_event() {
    accurate(64, 64, false, 60).await;
}
