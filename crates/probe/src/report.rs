//! The text report, laid out like `vllm bench serve` so numbers can be read
//! side by side with it, followed by what that tool does not show: the
//! from-scheduled view, errors by kind, and the client self-check.

use std::fmt::Write;

use crate::load::{Bound, Load};
use crate::result::RunResult;
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
    match r.load {
        Load::Concurrency { concurrency } => line(&mut out, "Concurrency:", concurrency),
        Load::Rate {
            per_second,
            burstiness,
            max_concurrency,
        } => {
            line(
                &mut out,
                "Request rate (req/s):",
                format!("{per_second:.2}"),
            );
            line(&mut out, "Burstiness:", format!("{burstiness:.2}"));
            if let Some(m) = max_concurrency {
                line(&mut out, "Max concurrency:", m);
            }
        }
    }
    if let Bound::Duration(d) = r.bound {
        line(
            &mut out,
            "Bounded by duration (s):",
            format!("{:.2}", d.as_secs_f64()),
        );
    }
    line(&mut out, "Successful requests:", r.successful);
    line(&mut out, "Failed requests:", r.failed);
    if r.warmup_requests > 0 {
        line(&mut out, "Warm-up requests (excluded):", r.warmup_requests);
    }
    line(
        &mut out,
        "Benchmark duration (s):",
        format!("{:.2}", r.duration_s),
    );
    line(&mut out, "Total input tokens:", r.total_input_tokens);
    let per_request = &r.input_tokens_per_request;
    if let (Some(min), Some(median), Some(max)) =
        (per_request.min, per_request.p50, per_request.max)
    {
        line(
            &mut out,
            "Input tokens per request (min/med/max):",
            format!("{min:.0} / {median:.0} / {max:.0}"),
        );
    }
    if r.cached_tokens_unreported_by_all() {
        line(
            &mut out,
            "Cached input tokens:",
            "not reported by the server",
        );
    } else {
        line(&mut out, "Cached input tokens:", r.total_cached_tokens);
    }
    if let Some(ratio) = r.server_prefix_cache_hit_ratio {
        line(
            &mut out,
            "Prefix-cache hit ratio (server):",
            format!("{ratio:.3}"),
        );
    }
    if let Some(why) = &r.cache_contaminated {
        line(&mut out, "Cache hygiene:", format!("CONTAMINATED: {why}"));
    }
    if r.total_input_tokens > 0 && !r.cached_tokens_unreported_by_all() {
        line(
            &mut out,
            "Prefix-cache hit ratio:",
            format!(
                "{:.3}",
                r.total_cached_tokens as f64 / r.total_input_tokens as f64
            ),
        );
    }
    line(&mut out, "Total generated tokens:", r.total_output_tokens);
    line(
        &mut out,
        "Request throughput (req/s):",
        format!("{:.2}", r.request_throughput),
    );
    line(
        &mut out,
        "Output token throughput (tok/s):",
        format!("{:.2}", r.output_throughput),
    );
    line(
        &mut out,
        "Total Token throughput (tok/s):",
        format!("{:.2}", r.total_token_throughput),
    );
    let o = &r.objectives;
    if o.ttft_p95.is_some() || o.itl_p95.is_some() || o.e2e_p95.is_some() {
        line(
            &mut out,
            "Request goodput (req/s):",
            format!("{:.2}", r.goodput),
        );
        line(
            &mut out,
            "Requests meeting objectives:",
            format!("{}/{}", r.good_requests, r.requests),
        );
    }
    if r.output_tokens_estimated > 0 {
        line(
            &mut out,
            "Requests with estimated output tokens:",
            r.output_tokens_estimated,
        );
    }
    metric(&mut out, "Time to First Token", "TTFT", &r.ttft_ms);
    metric(
        &mut out,
        "Time per Output Token (excl. 1st token)",
        "TPOT",
        &r.tpot_ms,
    );
    metric(&mut out, "Inter-token Latency", "ITL", &r.itl_ms);
    metric(&mut out, "End-to-end Latency", "E2EL", &r.e2e_ms);
    title(&mut out, "From scheduled (no coordinated omission)", '-');
    line(
        &mut out,
        "Median TTFT from scheduled (ms):",
        num(r.ttft_from_scheduled_ms.p50),
    );
    line(
        &mut out,
        "P99 TTFT from scheduled (ms):",
        num(r.ttft_from_scheduled_ms.p99),
    );
    line(
        &mut out,
        "Median E2EL from scheduled (ms):",
        num(r.e2e_from_scheduled_ms.p50),
    );
    line(
        &mut out,
        "P99 E2EL from scheduled (ms):",
        num(r.e2e_from_scheduled_ms.p99),
    );
    line(
        &mut out,
        "P99 dispatch lag (ms):",
        num(r.dispatch_lag_ms.p99),
    );
    if !r.errors.is_empty() {
        title(&mut out, "Errors", '-');
        line(
            &mut out,
            "Error rate:",
            format!("{:.2} %", r.error_rate * 100.0),
        );
        for (k, n) in &r.errors {
            line(&mut out, &format!("{k}:"), n);
            if let Some(m) = r.error_examples.get(k) {
                let _ = writeln!(out, "  e.g. {m}");
            }
        }
    }
    let s = &r.self_check;
    title(&mut out, "Client self-check", '-');
    line(&mut out, "Client CPU (cores):", num(s.cpu_cores));
    let _ = writeln!(out, "  ({})", s.cpu_measure.label());
    if !s.workers.is_empty() {
        line(&mut out, "Measuring workers:", s.workers.len());
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
    line(
        &mut out,
        "Scheduler lag P99 (ms):",
        num(s.scheduler_lag_p99_ms),
    );
    line(
        &mut out,
        "Dispatch lag P99 (ms):",
        num(s.dispatch_lag_p99_ms),
    );
    line(&mut out, "Tokens per event:", num(s.tokens_per_event));
    line(&mut out, "Host CPU steal (%):", num(s.host_steal_pct));
    if s.client_bound {
        line(
            &mut out,
            "Verdict:",
            "CLIENT-BOUND (not valid for saturation)",
        );
        for reason in &s.reasons {
            let _ = writeln!(out, "  - {reason}");
        }
    } else {
        line(&mut out, "Verdict:", "ok");
    }
    title(&mut out, "", '=');
    out
}
