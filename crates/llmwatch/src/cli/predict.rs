//! `llmwatch predict`: what a sweep would show after a change of vLLM
//! flags, before making it. The fitted profile (`llmwatch sim --fit`) with
//! the change applied runs as a simulator in this process, on a loopback
//! port and `--time-scale` times faster than real; the same sweep
//! `llmwatch sweep` runs ([`run_sweep`], settings from the same flags)
//! measures it; its numbers are scaled back to real seconds and judged
//! again with the real objectives; the fit's own error on the sweep it was
//! fitted to is printed beside the prediction, to say how far to trust it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use llmwatch_core::analysis::{
    analyze_sweep, latency_breakdown, summary_lines, ClientMeans, EngineCapacity, ExperimentCard,
    Quantiles, WorkloadHints,
};
use llmwatch_engine::runners::sweep::{
    run_sweep, workload_hints, StepReport, SweepReport, SweepSettings, DEFAULT_MAX_CONCURRENCY,
};
use llmwatch_probe::Summary;
use llmwatch_sim::Profile;

use super::sim::{
    describe_costs, describe_profile, fit_error_line, ignored_line, render_fit_report,
    resolve_profile, start_resolved, vllm_flags, ResolvedProfile, SimArgs,
};
use super::sweep::{settings_from_args, SweepArgs};
use super::sweep_render::{render_verdict, step_line, table_header};

/// Flags of `llmwatch predict`.
#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// The fitted profile (`llmwatch sim --fit SWEEP --out FILE`).
    #[arg(long)]
    pub profile_file: PathBuf,
    /// The change, as vLLM serve flags in one argument (e.g.
    /// "--max-num-seqs 8"); the same flags may also follow `--`.
    #[arg(long, allow_hyphen_values = true)]
    pub vllm_args: Option<String>,
    /// INPUTxOUTPUT tokens.
    #[arg(long, default_value = "512x128")]
    pub shape: String,
    /// chat or completions.
    #[arg(long, default_value = "chat")]
    pub api: String,
    /// random | shared-prefix[:RATIO] | rag[:DOCS]
    #[arg(long, default_value = "random")]
    pub prompt: String,
    /// Closed-loop concurrency ladder.
    #[arg(long, default_value = "1,2,4,8,16,32,64")]
    pub concurrency: String,
    /// The highest concurrency the ladder may hold.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENCY)]
    pub max_concurrency: u32,
    /// p95 TTFT objective (real time).
    #[arg(long, default_value = "1s")]
    pub slo_ttft_p95: String,
    /// p95 ITL objective (real time).
    #[arg(long, default_value = "50ms")]
    pub slo_itl_p95: String,
    /// p95 end-to-end objective (real time); none by default.
    #[arg(long)]
    pub slo_e2e_p95: Option<String>,
    /// Hard stop past this p95 TTFT (real time).
    #[arg(long, default_value = "30s")]
    pub stop_ttft_p95: String,
    /// How much faster than real the simulator runs (default: as fast as
    /// keeps its shortest step, and the frontend's time, at 5 ms of wall
    /// time or more, at most 20x). Higher is quicker but less exact: the
    /// timer's ~1 ms granularity and loopback HTTP overhead (~0.3 ms a
    /// request) are multiplied by it in the predicted latencies.
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Measured requests per step, at least.
    #[arg(long)]
    pub requests_per_step: Option<u64>,
    /// Measured requests per concurrency slot, at least.
    #[arg(long)]
    pub requests_per_slot: Option<u64>,
    /// Each step lasts at least this long (real time).
    #[arg(long, default_value = "10s")]
    pub min_step_duration: String,
    /// Warm-up requests per step (default: one per concurrency slot).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Also write the predicted sweep (real time) and the profile as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// vLLM flags after `--`.
    #[arg(last = true, allow_hyphen_values = true, value_name = "VLLM_FLAGS")]
    pub vllm_flags: Vec<String>,
    /// The client self-check's limits in place of the sweep's (tests, where
    /// other builds share the cores).
    #[arg(skip)]
    pub self_check: Option<llmwatch_probe::SelfCheckLimits>,
}

/// `llmwatch sweep`'s flags, parsed from an argument list built here, so
/// the prediction's sweep is configured exactly as that command's.
#[derive(Parser)]
#[command(no_binary_name = true)]
struct SweepFlags {
    #[command(flatten)]
    args: SweepArgs,
}

/// Runs `llmwatch predict`.
pub async fn run(args: PredictArgs) -> anyhow::Result<()> {
    let flags = vllm_flags(args.vllm_args.as_deref(), &args.vllm_flags)?;
    let base = resolve_profile("balanced", Some(&args.profile_file), &[])?;
    let changed = resolve_profile("balanced", Some(&args.profile_file), &flags)?;
    let ts = args
        .time_scale
        .unwrap_or_else(|| auto_time_scale(&changed.profile));
    print_prediction_head(&args, &flags, &base, &changed, ts);

    println!();
    println!("{}", table_header());
    let report = predict_sweep(&args, &changed, ts, |real| println!("{}", step_line(real))).await?;
    println!();
    print!("{}", render_verdict(&report));
    println!();
    match &changed.fit {
        Some(fit) => {
            println!("Beside it, the fitted model on the sweep it was fitted to:");
            print!("{}", render_fit_report(fit));
        }
        None => println!(
            "{} holds no fit: how far to trust the prediction is unknown",
            args.profile_file.display()
        ),
    }
    if let Some(path) = &args.json {
        let json = prediction_json(
            &report,
            &args.profile_file.display().to_string(),
            &flags,
            &changed,
            ts,
        );
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The sweep `args` describe, run on the twin `changed` at `ts` times real
/// speed, reported (and each step passed to `on_step`) in real time and
/// judged with the real objectives.
pub async fn predict_sweep(
    args: &PredictArgs,
    changed: &ResolvedProfile,
    ts: f64,
    mut on_step: impl FnMut(&StepReport),
) -> anyhow::Result<SweepReport> {
    if !(ts.is_finite() && ts > 0.0) {
        anyhow::bail!("--time-scale must be a positive number, got {ts}");
    }
    let sim_args = SimArgs::loopback("balanced", "sim-llama-8b", ts);
    let (_sim, engine, _) = start_resolved(changed, &sim_args).await?;
    let url = format!("http://{engine}");
    let parsed =
        SweepFlags::try_parse_from(sweep_argv(args, &url)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut settings = settings_from_args(&parsed.args)?;
    // The simulator runs in this process: its CPU is not the client's.
    settings.self_check.max_cpu_cores = 1.0e6;
    if let Some(limits) = args.self_check {
        settings.self_check = limits;
    }
    let real_objectives = settings.objectives;
    let analysis = settings.analysis;
    scale_clocks(&mut settings, ts);
    // The capacity comes from the predicted sweep's card (see `rejudge`).
    let hints = workload_hints(&settings, &ExperimentCard::default());
    let mut report = run_sweep(settings, None, |step| {
        let mut real = step.clone();
        to_real_time(&mut real, ts);
        on_step(&real);
    })
    .await
    .context("the predicted sweep")?;
    for step in &mut report.steps {
        to_real_time(step, ts);
    }
    rejudge(&mut report, &real_objectives, hints, &analysis);
    Ok(report)
}

/// What is predicted: the profile, the change and its costs.
fn print_prediction_head(
    args: &PredictArgs,
    flags: &[String],
    base: &ResolvedProfile,
    changed: &ResolvedProfile,
    ts: f64,
) {
    println!(
        "Prediction: {} with {} (simulated {ts:.1}x faster; numbers in real time)",
        args.profile_file.display(),
        if flags.is_empty() {
            "no change".to_string()
        } else {
            flags.join(" ")
        }
    );
    println!(
        "  {}",
        describe_profile(&changed.profile, changed.settings.as_ref())
    );
    println!("  {}", describe_costs(&changed.profile));
    let diff = profile_changes(&base.profile, &changed.profile);
    if !diff.is_empty() {
        println!("  changed: {}", diff.join(", "));
    }
    if let Some(line) = ignored_line(&changed.ignored) {
        println!("{line}");
    }
}

/// The `llmwatch sweep` arguments of the predicted sweep, so it is parsed
/// and checked as that command's own.
fn sweep_argv(args: &PredictArgs, url: &str) -> Vec<String> {
    let mut argv: Vec<String> = [
        "--url",
        url,
        "--shape",
        &args.shape,
        "--api",
        &args.api,
        "--prompt",
        &args.prompt,
        "--concurrency",
        &args.concurrency,
        "--slo-ttft-p95",
        &args.slo_ttft_p95,
        "--slo-itl-p95",
        &args.slo_itl_p95,
        "--stop-ttft-p95",
        &args.stop_ttft_p95,
        "--min-step-duration",
        &args.min_step_duration,
        "--no-store",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend([
        "--max-concurrency".to_string(),
        args.max_concurrency.to_string(),
    ]);
    for (flag, value) in [
        ("--slo-e2e-p95", args.slo_e2e_p95.clone()),
        (
            "--requests-per-step",
            args.requests_per_step.map(|n| n.to_string()),
        ),
        (
            "--requests-per-slot",
            args.requests_per_slot.map(|n| n.to_string()),
        ),
        ("--warmup", args.warmup.map(|n| n.to_string())),
    ] {
        if let Some(value) = value {
            argv.extend([flag.to_string(), value]);
        }
    }
    argv
}

/// The simulator runs `ts` times faster: every clock of the sweep too.
fn scale_clocks(settings: &mut SweepSettings, ts: f64) {
    let scale = |v: Option<f64>| v.map(|s| s / ts);
    settings.objectives.ttft_p95 = scale(settings.objectives.ttft_p95);
    settings.objectives.itl_p95 = scale(settings.objectives.itl_p95);
    settings.objectives.e2e_p95 = scale(settings.objectives.e2e_p95);
    settings.stop.ttft_p95 = settings.stop.ttft_p95.map(|d| d.div_f64(ts));
    settings.min_step_duration = settings.min_step_duration.div_f64(ts);
    // Several scrapes per (shortened) step, so its evidence is there.
    settings.scrape_interval = Duration::from_secs(1)
        .div_f64(ts)
        .min(settings.min_step_duration / 5)
        .max(Duration::from_millis(20));
}

/// The predicted sweep (real time) as JSON, with what was predicted: the
/// profile, the change, the time scale and the fit's own error.
pub fn prediction_json(
    report: &SweepReport,
    profile_source: &str,
    flags: &[String],
    changed: &ResolvedProfile,
    ts: f64,
) -> serde_json::Value {
    let mut json = report.to_json();
    if let Some(map) = json.as_object_mut() {
        map.insert(
            "prediction".to_string(),
            serde_json::json!({
                "profile_file": profile_source,
                "vllm_args": flags,
                "ignored": changed.ignored,
                "time_scale": ts,
                "profile": changed.profile,
                "vllm": changed.settings,
                "fit_error": changed.fit.as_ref().map(fit_error_line),
                "fit": changed.fit,
            }),
        );
    }
    json
}

/// The shortest wall-clock step (or frontend time) [`auto_time_scale`]
/// keeps: tokio's timer has ~1 ms granularity, so shorter sleeps would
/// bunch tokens and blur the latency percentiles.
const MIN_WALL_STEP_S: f64 = 0.005;

/// The fastest time scale (1 to 20) that keeps the profile's shortest
/// step and its frontend time at [`MIN_WALL_STEP_S`] of wall time or more.
pub fn auto_time_scale(p: &Profile) -> f64 {
    let shortest = [p.decode_step_s(1), p.frontend_per_request_s]
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !shortest.is_finite() {
        return 20.0;
    }
    (shortest / MIN_WALL_STEP_S).clamp(1.0, 20.0)
}

/// `field old → new` for every scheduling, memory or cost field that the
/// flags changed.
pub fn profile_changes(a: &Profile, b: &Profile) -> Vec<String> {
    let mut out = Vec::new();
    let mut int = |name: &str, x: usize, y: usize| {
        if x != y {
            out.push(format!("{name} {x} → {y}"));
        }
    };
    int("max_num_seqs", a.max_num_seqs, b.max_num_seqs);
    int(
        "max_num_batched_tokens",
        a.max_num_batched_tokens,
        b.max_num_batched_tokens,
    );
    int("max_model_len", a.max_model_len, b.max_model_len);
    int("block_size", a.block_size, b.block_size);
    int("num_gpu_blocks", a.num_gpu_blocks, b.num_gpu_blocks);
    let mut flag = |name: &str, x: bool, y: bool| {
        if x != y {
            out.push(format!("{name} {x} → {y}"));
        }
    };
    flag(
        "chunked_prefill",
        a.enable_chunked_prefill,
        b.enable_chunked_prefill,
    );
    flag(
        "prefix_caching",
        a.enable_prefix_caching,
        b.enable_prefix_caching,
    );
    for (name, x, y) in [
        ("step_base", a.step_base_s, b.step_base_s),
        (
            "prefill_per_token",
            a.prefill_per_token_s,
            b.prefill_per_token_s,
        ),
        ("decode_per_seq", a.decode_per_seq_s, b.decode_per_seq_s),
    ] {
        if (x - y).abs() > 1e-12 {
            out.push(format!("{name} {:.4}ms → {:.4}ms", x * 1e3, y * 1e3));
        }
    }
    out
}

fn scale_quantiles(q: &mut Quantiles, k: f64) {
    for v in [&mut q.p50, &mut q.p95, &mut q.p99] {
        *v = v.map(|x| x * k);
    }
}

fn scale_summary(s: &mut Summary, k: f64) {
    for v in [
        &mut s.mean,
        &mut s.p50,
        &mut s.p90,
        &mut s.p95,
        &mut s.p99,
        &mut s.min,
        &mut s.max,
    ] {
        *v = v.map(|x| x * k);
    }
}

/// A step measured on the `ts`-times-faster simulator, in real time:
/// latencies × ts, rates ÷ ts; the latency breakdown is made again from the
/// scaled phases.
fn to_real_time(step: &mut StepReport, ts: f64) {
    let s = &mut step.step;
    s.wall_time_s *= ts;
    s.request_throughput /= ts;
    s.output_token_throughput /= ts;
    for q in [&mut s.ttft, &mut s.itl, &mut s.tpot, &mut s.e2e] {
        scale_quantiles(q, ts);
    }
    let ev = &mut s.server;
    for v in [
        &mut ev.server_ttft_p50,
        &mut ev.server_ttft_p95,
        &mut ev.server_itl_p50,
        &mut ev.server_itl_p95,
        &mut ev.phases.queue_s,
        &mut ev.phases.prefill_s,
        &mut ev.phases.decode_s,
        &mut ev.phases.inference_s,
        &mut ev.phases.ttft_s,
        &mut ev.phases.e2e_s,
    ] {
        *v = v.map(|x| x * ts);
    }
    let run = &mut step.run;
    run.duration_s *= ts;
    run.request_throughput /= ts;
    run.output_throughput /= ts;
    run.total_token_throughput /= ts;
    run.goodput /= ts;
    for summary in [
        &mut run.ttfb_ms,
        &mut run.ttft_ms,
        &mut run.ttfo_ms,
        &mut run.tpot_ms,
        &mut run.itl_ms,
        &mut run.itl_event_ms,
        &mut run.e2e_ms,
        &mut run.ttft_from_scheduled_ms,
        &mut run.e2e_from_scheduled_ms,
    ] {
        scale_summary(summary, ts);
    }
    if ev.latency_breakdown.is_some() {
        let client = ClientMeans {
            ttft_s: run.ttft_ms.mean.map(|ms| ms / 1000.0),
            e2e_s: run.e2e_ms.mean.map(|ms| ms / 1000.0),
        };
        ev.latency_breakdown = latency_breakdown(&ev.phases, &client, true).ok();
    }
}

/// Judges the real-time steps with the real objectives, as the sweep
/// would have on a real server.
fn rejudge(
    report: &mut SweepReport,
    objectives: &llmwatch_core::analysis::Objectives,
    mut hints: WorkloadHints,
    analysis: &llmwatch_core::analysis::AnalysisConfig,
) {
    hints.capacity = EngineCapacity::from_card(&report.card);
    report.verdict = analyze_sweep(&report.step_results(), objectives, &hints, analysis);
    let mut summary = summary_lines(&report.verdict);
    if let Some(why) = &report.stop_reason {
        summary.insert(0, format!("Stopped early (simulated time): {why}."));
    }
    report.summary = summary;
}
