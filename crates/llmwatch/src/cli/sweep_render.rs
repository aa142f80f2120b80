//! Plain-text rendering of sweeps: the per-step table (client numbers beside
//! the server evidence of the same window), the verdicts, and a comparison
//! of two sweeps.

use std::fmt::Write as _;

use llmwatch_core::analysis::{Load, StepResult};
use llmwatch_probe::RunResult;

use llmwatch_engine::runners::sweep::{StepReport, SweepComparison, SweepReport};

/// The table's column headers, fixed-width to line up with [`step_line`].
pub fn table_header() -> String {
    format!(
        "{:>8} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5} {:>5} {:>6} {:>7} {:>17} {:>8} {:>5}  {}",
        "load",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p95",
        "ITL p50",
        "ITL p95",
        "errors",
        "KV",
        "KVmax",
        "wait",
        "GPUmem",
        "in tok min/med/max",
        "cached",
        "hit",
        "client_bound"
    )
}

fn load_cell(load: &Load) -> String {
    match *load {
        Load::Concurrency(c) => format!("c={c}"),
        Load::RequestRate(r) => format!("{r}/s"),
    }
}

fn secs(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "-".into(),
        Some(v) if v < 1.0 => format!("{:.1}ms", v * 1000.0),
        Some(v) => format!("{v:.2}s"),
    }
}

fn pct(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "-".into(),
        Some(v) => format!("{:.0}%", v * 100.0),
    }
}

fn num(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// Prompt tokens per request as the server reported them.
fn input_cell(run: &RunResult) -> String {
    match run.input_tokens_min_median_max() {
        Some((min, median, max)) => format!("{min:.0}/{median:.0}/{max:.0}"),
        None => "-".into(),
    }
}

/// Cached prompt tokens, or `-` when the server reports none per request.
fn cached_cell(run: &RunResult) -> String {
    if run.cached_tokens_unreported_by_all() {
        "-".into()
    } else {
        run.total_cached_tokens.to_string()
    }
}

/// The usage's hit ratio, else the server counters' (marked `s`).
fn hit_cell(run: &RunResult) -> String {
    match (run.cache_hit_ratio(), run.server_prefix_cache_hit_ratio) {
        (Some(r), _) => format!("{r:.2}"),
        (None, Some(r)) => format!("{r:.2}s"),
        (None, None) => "-".into(),
    }
}

/// One row of the table: the step's figures, then its run's input tokens
/// and cache hygiene.
pub fn step_line(report: &StepReport) -> String {
    let (s, run) = (&report.step, &report.run);
    let total = s.requests_ok + s.requests_failed;
    let gpu = s
        .server
        .gpu_mem_used_ratio_max
        .or(s.server.gpu_mem_used_ratio_mean);
    format!(
        "{:>8} {:>8.2} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5} {:>5} {:>6} {:>7} {:>17} {:>8} {:>5}  {}",
        load_cell(&s.load),
        s.request_throughput,
        s.output_token_throughput,
        secs(s.ttft.p50),
        secs(s.ttft.p95),
        secs(s.itl.p50),
        secs(s.itl.p95),
        format!("{}/{}", s.requests_failed, total),
        pct(s.server.kv_cache_usage_mean),
        pct(s.server.kv_cache_usage_max),
        num(s.server.requests_waiting_max),
        pct(gpu),
        input_cell(run),
        cached_cell(run),
        hit_cell(run),
        s.client_bound
            .as_deref()
            .or(s.cache_contaminated.as_ref().map(|_| "cache-contaminated"))
            .unwrap_or("no")
    )
}

/// The whole report: card, table, verdicts and diagnosis.
pub fn render_report(r: &SweepReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", table_header());
    for s in &r.steps {
        let _ = writeln!(out, "{}", step_line(s));
    }
    out.push('\n');
    out.push_str(&economics_lines(r));
    out.push_str(&render_verdict(r));
    out
}

/// Goodput per step and the best of the sweep, with energy per output
/// token and cost per million output tokens where the GPU page and a price
/// give them.
pub fn economics_lines(r: &SweepReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} {:>9} {:>9} {:>10} {:>10}",
        "load", "goodput", "GPU W", "J/out tok", "$/M out"
    );
    let opt = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".to_string(),
    };
    for s in &r.steps {
        let ev = &s.step.server;
        let _ = writeln!(
            out,
            "{:>8} {:>9.2} {:>9} {:>10} {:>10}",
            load_cell(&s.step.load),
            s.run.goodput,
            opt(ev.gpu_power_w_mean, 0),
            opt(ev.economics.energy_j_per_output_token, 3),
            opt(ev.economics.cost_per_million_output_tokens, 3),
        );
    }
    let best = r
        .steps
        .iter()
        .max_by(|a, b| a.run.goodput.total_cmp(&b.run.goodput));
    if let Some(best) = best {
        let _ = writeln!(
            out,
            "Best goodput (requests/s meeting every objective): {:.2} at {}",
            best.run.goodput,
            load_cell(&best.step.load).trim()
        );
    }
    out.push('\n');
    out
}

/// What follows the table: the sweep's identity and card, then the
/// verdicts and the diagnosis with their evidence.
pub fn render_verdict(r: &SweepReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Sweep{} of {} ({}), {} step(s), {}",
        r.sweep_id.map(|id| format!(" #{id}")).unwrap_or_default(),
        llmwatch_core::redact::redact_url(&r.url),
        r.model,
        r.steps.len(),
        r.status.as_str()
    );
    let card: Vec<String> = r
        .card
        .fields()
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect();
    let _ = writeln!(out, "Card: {}", card.join(", "));
    for line in &r.summary {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Two sweeps side by side, load by load, then the card differences.
pub fn render_comparison(c: &SweepComparison) -> String {
    let mut out = String::new();
    let (a, b) = (&c.a, &c.b);
    let _ = writeln!(
        out,
        "Sweep #{} ({}) vs sweep #{} ({})",
        a.row.id, a.row.target_url, b.row.id, b.row.target_url
    );
    let _ = writeln!(
        out,
        "{:>8} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "load", "A tok/s", "B tok/s", "A TTFT95", "B TTFT95", "A ITL95", "B ITL95"
    );
    let mut loads: Vec<Load> = Vec::new();
    for s in a.steps.iter().chain(b.steps.iter()) {
        if !loads.contains(&s.load) {
            loads.push(s.load);
        }
    }
    loads.sort_by(|x, y| x.value().total_cmp(&y.value()));
    let find = |steps: &[StepResult], load: &Load| steps.iter().find(|s| s.load == *load).cloned();
    for load in &loads {
        let sa = find(&a.steps, load);
        let sb = find(&b.steps, load);
        let tok = |s: &Option<StepResult>| {
            s.as_ref()
                .map(|s| format!("{:.1}", s.output_token_throughput))
                .unwrap_or_else(|| "-".into())
        };
        let _ = writeln!(
            out,
            "{:>8} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10}",
            load_cell(load),
            tok(&sa),
            tok(&sb),
            secs(sa.as_ref().and_then(|s| s.ttft.p95)),
            secs(sb.as_ref().and_then(|s| s.ttft.p95)),
            secs(sa.as_ref().and_then(|s| s.itl.p95)),
            secs(sb.as_ref().and_then(|s| s.itl.p95)),
        );
    }
    if c.diff.differing.is_empty() {
        let _ = writeln!(out, "\nThe cards are identical.");
    } else {
        let _ = writeln!(out, "\nCard fields that differ:");
        for (field, va, vb) in &c.diff.differing {
            let _ = writeln!(
                out,
                "  {field}: {} → {}",
                va.as_deref().unwrap_or("(unknown)"),
                vb.as_deref().unwrap_or("(unknown)")
            );
        }
    }
    if let Some(w) = &c.diff.warning {
        let _ = writeln!(out, "Warning: {w}.");
    }
    out
}
