//! `llmwatch bench --trace FILE.jsonl [--trace-speed X]`: replays a
//! Mooncake-format trace (see `llmwatch_probe::trace`).

use std::fmt::Write;
use std::path::Path;

use anyhow::Context;
use llmwatch_probe::trace::{parse_trace, replay, TracePrompts, TraceResult};
use llmwatch_probe::{ClientConfig, MeasuringThread, ProbeClient};

use super::bench::BenchArgs;

/// Reads, replays and reports the trace; writes it with every probe to
/// `--json`.
pub async fn run(args: &BenchArgs, path: &Path, speed: f64) -> anyhow::Result<()> {
    if !(speed.is_finite() && speed > 0.0) {
        anyhow::bail!("--trace-speed must be a number > 0, got {speed}");
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let trace = parse_trace(&text).with_context(|| format!("{}", path.display()))?;
    let model = args
        .workload
        .model
        .clone()
        .context("--trace needs --model")?;
    let parsed = args.workload.parse()?;
    let mut config = ClientConfig::new(args.url.clone());
    config.api_key = parsed.api_key;
    let client = ProbeClient::new(config.clone())?;
    let salt = llmwatch_probe::shape::fresh_salt();
    let prompts = TracePrompts::measure(&client, &model, salt).await?;
    // On a spinning measuring thread with a client of its own, as a bench.
    let thread = MeasuringThread::start(true)?;
    let own = ProbeClient::new(config)?;
    let result = thread
        .spawn(async move { replay(&own, &model, &trace, &prompts, speed).await })
        .await?;
    print!("{}", render(&result));
    if let Some(path) = &args.json {
        super::write_json_redacted(path, &result)?;
    }
    Ok(())
}

fn render(r: &TraceResult) -> String {
    let mut out = String::new();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let _ = writeln!(
        out,
        "Trace replay at {}x: {} requests, {} failed",
        r.speed, r.requests, r.failed
    );
    let _ = writeln!(
        out,
        "Input lengths: {} of {} exact; {} input tokens, {} cached",
        r.requests - r.input_length_mismatches,
        r.requests,
        r.total_input_tokens,
        r.total_cached_tokens
    );
    let lag = &r.arrival_error_ms;
    let _ = writeln!(
        out,
        "Arrival error (sent − scheduled) ms: p50 {} p99 {} max {}",
        ms(lag.p50),
        ms(lag.p99),
        ms(lag.max)
    );
    let _ = writeln!(
        out,
        "TTFT ms: p50 {} p99 {}; E2EL ms: p50 {} p99 {}",
        ms(r.ttft_ms.p50),
        ms(r.ttft_ms.p99),
        ms(r.e2e_ms.p50),
        ms(r.e2e_ms.p99)
    );
    out
}
