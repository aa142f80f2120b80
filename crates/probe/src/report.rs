//! The text report, laid out like `vllm bench serve` so numbers can be read
//! side by side with it, followed by what that tool does not show: the
//! from-scheduled view, errors by kind, and the client self-check.

use std::fmt::Write;

use crate::result::RunResult;
use crate::settings::{Bound, Load};
use crate::stats::Summary;

const WIDTH: usize = 50;

fn title(out: &mut String, t: &str, fill: char) {
    let pad = WIDTH.saturating_sub(t.chars().count());
    let left = pad / 2;
    let right = pad - left;
    let _ = writeln!(
        out,
        "{}{}{}",
        fill.to_string().repeat(left),
        t,
        fill.to_string().repeat(right)
    );
}

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<40} {value:<10}");
}

fn num(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

fn metric(out: &mut String, heading: &str, name: &str, s: &Summary) {
    title(out, heading, '-');
    line(out, &format!("Mean {name} (ms):"), num(s.mean));
    line(out, &format!("Median {name} (ms):"), num(s.p50));
    line(out, &format!("P90 {name} (ms):"), num(s.p90));
    line(out, &format!("P95 {name} (ms):"), num(s.p95));
    line(out, &format!("P99 {name} (ms):"), num(s.p99));
    line(out, &format!("Max {name} (ms):"), num(s.max));
    if s.missing > 0 {
        line(out, &format!("Requests without {name}:"), s.missing);
    }
}

/// Renders a run as text.
pub fn render_table(r: &RunResult) -> String {
    let mut out = String::new();
    title(&mut out, " Serving Benchmark Result ", '=');
    for section in [
        load_section,
        request_counts,
        token_section,
        throughput_section,
        latency_sections,
        reasoning_section,
        server_timing_section,
        scheduled_section,
        error_section,
        self_check_section,
    ] {
        section(&mut out, r);
    }
    title(&mut out, "", '=');
    out
}

/// The load the run was under, and how it was bounded.
fn load_section(out: &mut String, r: &RunResult) {
    match r.load {
        Load::Concurrency { concurrency } => line(out, "Concurrency:", concurrency),
        Load::Rate {
            per_second,
            burstiness,
            max_concurrency,
        } => {
            line(out, "Request rate (req/s):", format!("{per_second:.2}"));
            line(out, "Burstiness:", format!("{burstiness:.2}"));
            if let Some(m) = max_concurrency {
                line(out, "Max concurrency:", m);
            }
        }
    }
    if let Bound::Duration(d) = r.bound {
        line(
            out,
            "Bounded by duration (s):",
            format!("{:.2}", d.as_secs_f64()),
        );
    }
}

/// Requests and the run's length.
fn request_counts(out: &mut String, r: &RunResult) {
    line(out, "Successful requests:", r.successful);
    line(out, "Failed requests:", r.failed);
    if r.warmup_requests > 0 {
        line(out, "Warm-up requests (excluded):", r.warmup_requests);
    }
    line(
        out,
        "Benchmark duration (s):",
        format!("{:.2}", r.duration_s),
    );
}

/// Input tokens, their length per request and cache hygiene.
fn token_section(out: &mut String, r: &RunResult) {
    line(out, "Total input tokens:", r.total_input_tokens);
    if let Some((min, median, max)) = r.input_tokens_min_median_max() {
        line(
            out,
            "Input tokens per request (min/med/max):",
            format!("{min:.0} / {median:.0} / {max:.0}"),
        );
    }
    if r.cached_tokens_unreported_by_all() {
        line(out, "Cached input tokens:", "not reported by the server");
    } else {
        line(out, "Cached input tokens:", r.total_cached_tokens);
    }
    if let Some(ratio) = r.server_prefix_cache_hit_ratio {
        line(
            out,
            "Prefix-cache hit ratio (server):",
            format!("{ratio:.3}"),
        );
    }
    if let Some(why) = &r.cache_contaminated {
        line(out, "Cache hygiene:", format!("CONTAMINATED: {why}"));
    }
    if let Some(ratio) = r.cache_hit_ratio() {
        line(out, "Prefix-cache hit ratio:", format!("{ratio:.3}"));
    }
}

/// Output, throughput and goodput against the objectives.
fn throughput_section(out: &mut String, r: &RunResult) {
    line(out, "Total generated tokens:", r.total_output_tokens);
    line(
        out,
        "Request throughput (req/s):",
        format!("{:.2}", r.request_throughput),
    );
    line(
        out,
        "Output token throughput (tok/s):",
        format!("{:.2}", r.output_throughput),
    );
    line(
        out,
        "Total Token throughput (tok/s):",
        format!("{:.2}", r.total_token_throughput),
    );
    let o = &r.objectives;
    if o.any() {
        line(out, "Request goodput (req/s):", format!("{:.2}", r.goodput));
        line(
            out,
            "Requests meeting objectives:",
            format!("{}/{}", r.good_requests, r.requests),
        );
        if r.reasoning_requests > 0 {
            let _ = writeln!(
                out,
                "  (TTFT and ITL objectives judged on {})",
                o.judged_on.label()
            );
        }
    }
    if r.output_tokens_estimated > 0 {
        line(
            out,
            "Requests with estimated output tokens:",
            r.output_tokens_estimated,
        );
    }
}

/// The latency distributions, as `vllm bench serve` prints them.
fn latency_sections(out: &mut String, r: &RunResult) {
    metric(out, "Time to First Token", "TTFT", &r.ttft_ms);
    metric(
        out,
        "Time per Output Token (excl. 1st token)",
        "TPOT",
        &r.tpot_ms,
    );
    metric(out, "Inter-token Latency", "ITL", &r.itl_ms);
    metric(out, "End-to-end Latency", "E2EL", &r.e2e_ms);
}

/// A reasoning model's two first tokens and its token split; only when
/// some stream reasoned (the TTFT above is then the first reasoning token).
fn reasoning_section(out: &mut String, r: &RunResult) {
    if r.reasoning_requests == 0 {
        return;
    }
    title(out, "Reasoning", '-');
    line(out, "Requests that reasoned:", r.reasoning_requests);
    line(out, "Reasoning tokens:", r.total_reasoning_tokens);
    line(out, "Answer tokens:", r.total_answer_tokens);
    line(
        out,
        "Median time to first reasoning token (ms):",
        num(r.ttfr_ms.p50),
    );
    line(
        out,
        "P99 time to first reasoning token (ms):",
        num(r.ttfr_ms.p99),
    );
    line(
        out,
        "Median time to first answer token (ms):",
        num(r.ttfo_ms.p50),
    );
    line(
        out,
        "P99 time to first answer token (ms):",
        num(r.ttfo_ms.p99),
    );
    if r.ttfo_ms.missing > 0 {
        line(out, "Requests without an answer token:", r.ttfo_ms.missing);
    }
    line(out, "Objectives judged on:", r.objectives.judged_on.label());
}

/// The server's own timing per request and what lies outside it; only
/// when the server sent one (vLLM `--enable-per-request-metrics`,
/// llama.cpp). Means add up, so the parts are shown as means.
fn server_timing_section(out: &mut String, r: &RunResult) {
    if r.server_timed_requests == 0 {
        return;
    }
    title(out, "Server's own timing (per request)", '-');
    line(
        out,
        "Requests timed by the server:",
        r.server_timed_requests,
    );
    line(out, "Mean queue (ms):", num(r.server_queue_ms.mean));
    line(out, "Mean prefill (ms):", num(r.server_prefill_ms.mean));
    line(out, "Mean decode (ms):", num(r.server_decode_ms.mean));
    line(
        out,
        "Mean TTFT outside the server (ms):",
        num(r.outside_server_ttft_ms.mean),
    );
    line(
        out,
        "P99 TTFT outside the server (ms):",
        num(r.outside_server_ttft_ms.p99),
    );
    line(
        out,
        "Mean E2EL outside the server (ms):",
        num(r.outside_server_e2e_ms.mean),
    );
    let _ = writeln!(
        out,
        "  (outside = client − server, request by request: network, HTTP front end, tokenizer)"
    );
}

/// Latencies from each request's scheduled time (no coordinated omission).
fn scheduled_section(out: &mut String, r: &RunResult) {
    title(out, "From scheduled (no coordinated omission)", '-');
    line(
        out,
        "Median TTFT from scheduled (ms):",
        num(r.ttft_from_scheduled_ms.p50),
    );
    line(
        out,
        "P99 TTFT from scheduled (ms):",
        num(r.ttft_from_scheduled_ms.p99),
    );
    line(
        out,
        "Median E2EL from scheduled (ms):",
        num(r.e2e_from_scheduled_ms.p50),
    );
    line(
        out,
        "P99 E2EL from scheduled (ms):",
        num(r.e2e_from_scheduled_ms.p99),
    );
    line(out, "P99 dispatch lag (ms):", num(r.dispatch_lag_ms.p99));
}

/// Errors by kind, with an example each.
fn error_section(out: &mut String, r: &RunResult) {
    if !r.errors.is_empty() {
        title(out, "Errors", '-');
        line(out, "Error rate:", format!("{:.2} %", r.error_rate * 100.0));
        for (k, n) in &r.errors {
            line(out, &format!("{k}:"), n);
            if let Some(m) = r.error_examples.get(k) {
                let _ = writeln!(out, "  e.g. {m}");
            }
        }
    }
}

/// Whether the client itself kept up (the run's validity).
fn self_check_section(out: &mut String, r: &RunResult) {
    let s = &r.self_check;
    title(out, "Client self-check", '-');
    line(out, "Client CPU (cores):", num(s.cpu_cores));
    let _ = writeln!(out, "  ({})", s.cpu_measure.label());
    if !s.workers.is_empty() {
        line(out, "Measuring workers:", s.workers.len());
        let _ = writeln!(
            out,
            "  (figures: the worst worker's; each judged on its own)"
        );
    }
    if !(r.itl_ms.exact && r.ttft_ms.exact && r.e2e_ms.exact) {
        let _ = writeln!(
            out,
            "  (long run: some percentiles from histograms, within 0.05 %)"
        );
    }
    line(out, "Scheduler lag P99 (ms):", num(s.scheduler_lag_p99_ms));
    line(out, "Dispatch lag P99 (ms):", num(s.dispatch_lag_p99_ms));
    line(out, "Tokens per event:", num(s.tokens_per_event));
    line(out, "Host CPU steal (%):", num(s.host_steal_pct));
    if s.client_bound {
        line(out, "Verdict:", "CLIENT-BOUND (not valid for saturation)");
        for reason in &s.reasons {
            let _ = writeln!(out, "  - {reason}");
        }
    } else {
        line(out, "Verdict:", "ok");
    }
}
