//! `llmwatch sweep`: one sweep with verdicts and diagnosis, or the
//! comparison of two stored sweeps. The CLI edge: flags in, anyhow out.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use llmwatch_probe::conversation::render_turn_table;

use super::observed::{parse_bench_workload, BenchWorkload};
use llmwatch_store::Store;

use super::sweep_render::{render_comparison, render_verdict, step_line, table_header};
use crate::cli::bench::WorkloadArgs;
use llmwatch_config::parse_duration;
use llmwatch_engine::runners::sweep as sweep_defaults;
use llmwatch_engine::runners::sweep::card::parse_card_arg;
use llmwatch_engine::runners::sweep::{
    compare_sweeps, run_sweep, Ladder, SweepSettings, DEFAULT_MAX_CONCURRENCY,
};

/// Flags of `llmwatch sweep`.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The target's base URL (e.g. http://127.0.0.1:8000).
    #[arg(long, required_unless_present = "compare")]
    pub url: Option<String>,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// multi-turn:TURNS[,think=DUR]: each concurrency level is that many
    /// concurrent conversations, each resending its history with a new
    /// turn of --shape (per step and turn: input, cached tokens, TTFT,
    /// prefix-cache hit ratio).
    /// observed:TARGET[:RANGE]: every step sends the prompt and output
    /// lengths TARGET served over RANGE (default 1h), read from
    /// --database (the ladder sets the load).
    #[arg(long = "workload", value_parser = parse_bench_workload)]
    pub workload_source: Option<BenchWorkload>,
    /// Closed-loop concurrency ladder.
    #[arg(long, default_value = "1,2,4,8,16,32,64", conflicts_with = "rate")]
    pub concurrency: String,
    /// Open-loop request-rate ramp (requests/s) instead of concurrency.
    #[arg(long)]
    pub rate: Option<String>,
    /// The highest load the sweep may apply; raise it on purpose.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENCY)]
    pub max_concurrency: u32,
    /// Measured requests per step, at least.
    #[arg(long, default_value_t = sweep_defaults::DEFAULT_REQUESTS_PER_STEP)]
    pub requests_per_step: u64,
    /// Measured requests per concurrency slot, at least.
    #[arg(long, default_value_t = sweep_defaults::DEFAULT_REQUESTS_PER_SLOT)]
    pub requests_per_slot: u64,
    /// Each step lasts at least this long.
    #[arg(long, default_value = "10s")]
    pub min_step_duration: String,
    /// Warm-up requests per step (default: one per concurrency slot).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// p95 TTFT objective.
    #[arg(long, default_value = "1s")]
    pub slo_ttft_p95: String,
    /// p95 ITL objective.
    #[arg(long, default_value = "50ms")]
    pub slo_itl_p95: String,
    /// p95 end-to-end objective (batch jobs, agents); none by default.
    #[arg(long)]
    pub slo_e2e_p95: Option<String>,
    /// Error-rate objective (0..1).
    #[arg(long, default_value_t = llmwatch_core::analysis::DEFAULT_MAX_ERROR_RATE)]
    pub slo_error_rate: f64,
    /// Price of one GPU-hour in dollars: each step's cost per million output
    /// tokens.
    #[arg(long)]
    pub price_gpu_hour: Option<f64>,
    /// Price of a kWh in dollars, on the GPUs' measured power (needs a GPU
    /// page).
    #[arg(long)]
    pub price_kwh: Option<f64>,
    /// Hard stop: end the sweep when a step's error rate passes this (0..1).
    #[arg(long, default_value_t = sweep_defaults::DEFAULT_STOP_ERROR_RATE)]
    pub max_error_rate: f64,
    /// Hard stop: end the sweep when a step's p95 TTFT passes this.
    #[arg(long, default_value = "30s")]
    pub stop_ttft_p95: String,
    /// Scrape interval during steps.
    #[arg(long, default_value = "1s")]
    pub scrape_interval: String,
    /// Client self-check: most process CPU (cores) before a step counts as
    /// client-bound.
    #[arg(long)]
    pub max_client_cpu: Option<f64>,
    /// Client self-check: most runtime scheduler lag (p99) before a step
    /// counts as client-bound.
    #[arg(long)]
    pub max_scheduler_lag: Option<String>,
    /// Client self-check: most dispatch lag (p99, sent − scheduled) before a
    /// step counts as client-bound.
    #[arg(long)]
    pub max_dispatch_lag: Option<String>,
    /// The target's metrics URL (default: URL/metrics).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// A dcgm-exporter page for the target's GPUs.
    #[arg(long)]
    pub gpu_url: Option<String>,
    /// The daemon's name for this target: step probes are stored under it.
    #[arg(long)]
    pub target: Option<String>,
    /// Database file.
    #[arg(long, default_value = "llmwatch.db")]
    pub database: PathBuf,
    /// Do not store the sweep.
    #[arg(long)]
    pub no_store: bool,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Experiment card field, key=value (repeatable).
    #[arg(long = "card")]
    pub card: Vec<String>,
    /// Compare two stored sweeps by id instead of running one.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub compare: Option<Vec<i64>>,
}

fn duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    parse_duration(text).map_err(|err| anyhow::anyhow!("--{flag}: {err}"))
}

/// Builds the settings from the flags.
pub fn settings_from_args(args: &SweepArgs) -> anyhow::Result<SweepSettings> {
    let Some(url) = &args.url else {
        bail!("--url is required to run a sweep");
    };
    let mut s = SweepSettings::new(url.clone());
    let parsed = args.workload.parse()?;
    s.model = args.workload.model.clone();
    s.api = parsed.api;
    s.shape = parsed.shape;
    s.prompt = parsed.prompt;
    if let Some(BenchWorkload::MultiTurn(workload)) = args.workload_source {
        s.conversation = Some(workload);
    }
    s.api_key = parsed.api_key;
    s.temperature = args.workload.temperature;
    s.seed = args.workload.seed;
    s.reuse_prompts = args.workload.reuse_prompts;
    s.spin = args.workload.spin;
    s.ladder = match &args.rate {
        Some(rate) => Ladder::parse_rate(rate)?,
        None => Ladder::parse_concurrency(&args.concurrency)?,
    };
    s.max_concurrency = args.max_concurrency;
    s.requests_per_step = args.requests_per_step;
    s.requests_per_slot = args.requests_per_slot;
    s.min_step_duration = duration("min-step-duration", &args.min_step_duration)?;
    s.warmup_requests = args.warmup;
    s.objectives.ttft_p95 = Some(duration("slo-ttft-p95", &args.slo_ttft_p95)?.as_secs_f64());
    s.objectives.itl_p95 = Some(duration("slo-itl-p95", &args.slo_itl_p95)?.as_secs_f64());
    s.objectives.e2e_p95 = match &args.slo_e2e_p95 {
        Some(text) => Some(duration("slo-e2e-p95", text)?.as_secs_f64()),
        None => None,
    };
    s.objectives.max_error_rate = args.slo_error_rate;
    for (flag, price) in [
        ("--price-gpu-hour", args.price_gpu_hour),
        ("--price-kwh", args.price_kwh),
    ] {
        if price.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
            anyhow::bail!("{flag} must be a number of dollars >= 0, got {price:?}");
        }
    }
    s.price.per_gpu_hour = args.price_gpu_hour;
    s.price.per_kwh = args.price_kwh;
    s.stop.max_error_rate = args.max_error_rate;
    s.stop.ttft_p95 = Some(duration("stop-ttft-p95", &args.stop_ttft_p95)?);
    s.scrape_interval = duration("scrape-interval", &args.scrape_interval)?;
    if let Some(cpu) = args.max_client_cpu {
        s.self_check.max_cpu_cores = cpu;
    }
    if let Some(lag) = &args.max_scheduler_lag {
        s.self_check.max_scheduler_lag_p99_ms =
            duration("max-scheduler-lag", lag)?.as_secs_f64() * 1000.0;
    }
    if let Some(lag) = &args.max_dispatch_lag {
        s.self_check.max_dispatch_lag_p99_ms =
            duration("max-dispatch-lag", lag)?.as_secs_f64() * 1000.0;
    }
    s.metrics_url = args.metrics_url.clone();
    s.gpu_url = args.gpu_url.clone();
    s.target_name = args.target.clone();
    for arg in &args.card {
        s.card.push(parse_card_arg(arg)?);
    }
    Ok(s)
}

/// Runs `llmwatch sweep`.
pub async fn run(args: SweepArgs) -> anyhow::Result<()> {
    if let Some(ids) = &args.compare {
        let [a, b] = ids.as_slice() else {
            bail!("--compare takes two sweep ids");
        };
        let store = Store::open(&args.database)
            .await
            .with_context(|| format!("opening {}", args.database.display()))?;
        let comparison = compare_sweeps(&store, *a, *b).await?;
        print!("{}", render_comparison(&comparison));
        return Ok(());
    }
    let mut settings = settings_from_args(&args)?;
    if let Some(BenchWorkload::Observed(spec)) = &args.workload_source {
        settings.observed = Some(super::observed::observed_mix(spec, &args.database).await?);
    }
    settings.validate()?;
    let store = if args.no_store {
        None
    } else {
        Some(
            Store::open(&args.database)
                .await
                .with_context(|| format!("opening {}", args.database.display()))?,
        )
    };
    println!("{}", table_header());
    let report = run_sweep(settings, store.as_ref(), |step| {
        println!("{}", step_line(step));
        if !step.run.turns.is_empty() {
            print!("{}", render_turn_table(&step.run.turns));
        }
    })
    .await?;
    println!();
    print!("{}", render_verdict(&report));
    if let Some(path) = &args.json {
        // No credential of a URL in the file (see llmwatch_core::redact).
        let text = llmwatch_core::redact::redact_urls_in(&serde_json::to_string_pretty(
            &report.to_json(),
        )?);
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
