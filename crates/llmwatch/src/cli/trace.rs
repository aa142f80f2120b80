//! `llmwatch bench --trace FILE.jsonl [--trace-speed X]`: replays a
//! Mooncake-format trace (see `llmwatch_probe::trace`).

use std::fmt::Write;
use std::path::Path;

use anyhow::Context;
use llmwatch_probe::record::Api;
use llmwatch_probe::trace::{
    parse_trace, replay_requests, replay_spin_mode, ScheduledRequest, TracePrompts, TraceResult,
};
use llmwatch_probe::{ClientConfig, MeasuringThread, ProbeClient, ProbeRequest, Spin};

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
    let (client, config) = client_of(args)?;
    let salt = llmwatch_probe::shape::fresh_salt();
    let prompts = TracePrompts::measure(&client, &model, salt).await?;
    let scheduled = (0u64..)
        .zip(&trace)
        .map(|(i, r)| ScheduledRequest {
            at_ms: r.timestamp,
            input_length: r.input_length,
            request: ProbeRequest::fixed(
                Api::Completions,
                &model,
                prompts.prompt(r, i),
                r.output_length,
            ),
        })
        .collect();
    let result = replay_on_a_measuring_thread(config, scheduled, speed).await?;
    report(args, &result, None)
}

/// The probe client of `args` (URL, API key, timeout) and its config.
pub(crate) fn client_of(args: &BenchArgs) -> anyhow::Result<(ProbeClient, ClientConfig)> {
    let parsed = args.workload.parse()?;
    let mut config = ClientConfig::new(args.url.clone());
    config.timeout = llmwatch_config::parse_duration(&args.timeout)
        .map_err(|err| anyhow::anyhow!("--timeout: {err}"))?;
    config.api_key = parsed.api_key;
    Ok((ProbeClient::new(config.clone())?, config))
}

/// Sends `scheduled` on a measuring thread with a client of its own, as a
/// bench runs; the thread spins for good only with 4+ cores
/// (`replay_spin_mode`: on two cores shared with the server a spinning
/// thread is preempted by it, p99 9–16 ms against the real vLLM, and one
/// left to sleep is not, 0.04–0.11 ms).
pub(crate) async fn replay_on_a_measuring_thread(
    config: ClientConfig,
    scheduled: Vec<ScheduledRequest>,
    speed: f64,
) -> anyhow::Result<TraceResult> {
    let thread = MeasuringThread::start_mode(replay_spin_mode(Spin::Auto))?;
    let own = ProbeClient::new(config)?;
    Ok(thread
        .spawn_measured(async move { replay_requests(&own, scheduled, speed).await })
        .await?)
}

/// Prints the replay and writes it with every probe to `--json`; with a
/// `source` (what the requests were drawn from) as `{"source", "replay"}`.
pub(crate) fn report(
    args: &BenchArgs,
    result: &TraceResult,
    source: Option<serde_json::Value>,
) -> anyhow::Result<()> {
    print!("{}", render(result));
    if let Some(path) = &args.json {
        match source {
            Some(source) => super::write_json_redacted(
                path,
                &serde_json::json!({ "source": source, "replay": result }),
            )?,
            None => super::write_json_redacted(path, result)?,
        }
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
