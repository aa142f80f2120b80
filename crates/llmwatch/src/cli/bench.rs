//! `llmwatch bench`: one run against one target, printed in the spirit of
//! `vllm bench serve` (plus p90/p95, the scheduled-vs-sent view and the
//! client self-check) and optionally written as JSON.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::observed::{parse_bench_workload, BenchWorkload};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use llmwatch_probe::record::Api;
use llmwatch_probe::{
    Bound, Calibrator, ClientConfig, Load, MeasuringPool, Objectives, Part, PartOf, ProbeClient,
    PromptKind, Records, RunConfig, RunOptions, RunResult, Secret, Shape, SharedSchedule, Spin,
    Workload,
};

use llmwatch_config::parse_duration;
use llmwatch_core::analysis::{cache_hygiene, cache_hygiene_from_counters};
use llmwatch_engine::runners::sweep::default_metrics_url;
use llmwatch_engine::runners::sweep::evidence::{evidence_for_window, Scraper};
use llmwatch_engine::sources::server_facts::{context_limit, discover_model};

/// What to send and how to measure it: the flags `llmwatch bench` and
/// `llmwatch sweep` share.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// Model to ask for (default: the first of /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// chat or completions.
    #[arg(long, default_value = "chat")]
    pub api: String,
    /// INPUTxOUTPUT tokens.
    #[arg(long, default_value = "512x128")]
    pub shape: String,
    /// random | shared-prefix[:RATIO] | rag[:DOCS]
    #[arg(long, default_value = "random")]
    pub prompt: String,
    /// Sampling temperature (recorded on a sweep's card).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Environment variable holding the API key (never printed).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Seeds arrivals and prompt bodies; nonces stay unique per run.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Send the same prompts as earlier runs with this seed (deliberate
    /// prefix-cache experiments); by default every run's prompts are new.
    #[arg(long)]
    pub reuse_prompts: bool,
    /// Busy-poll the measuring thread so idle-CPU wake-ups stay out of the
    /// timings: auto (the whole run with 4+ cores; below, only while
    /// streams are active), on, off.
    #[arg(long, default_value = "auto", value_parser = parse_spin)]
    pub spin: Spin,
}

fn parse_spin(text: &str) -> Result<Spin, String> {
    Spin::parse(text).ok_or_else(|| format!("expected auto, on or off, got {text:?}"))
}

/// [`WorkloadArgs`] checked and parsed.
#[derive(Debug, Clone)]
pub struct ParsedWorkload {
    pub api: Api,
    pub shape: Shape,
    pub prompt: PromptKind,
    pub api_key: Option<Secret>,
}

impl WorkloadArgs {
    /// Parses the flags; errors name the flag.
    pub fn parse(&self) -> anyhow::Result<ParsedWorkload> {
        let api = Api::parse(&self.api)
            .with_context(|| format!("--api: expected chat or completions, got {:?}", self.api))?;
        let shape = Shape::parse(&self.shape).map_err(|err| anyhow::anyhow!("--shape: {err}"))?;
        let prompt =
            PromptKind::parse(&self.prompt).map_err(|err| anyhow::anyhow!("--prompt: {err}"))?;
        let api_key = match &self.api_key_env {
            Some(var) => Some(Secret::new(llmwatch_config::secret_from_env(
                var,
                "--api-key-env".to_string(),
            )?)),
            None => None,
        };
        Ok(ParsedWorkload {
            api,
            shape,
            prompt,
            api_key,
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// Base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000
    // Required unless `merge` is given; the empty default only lets the
    // derive build the struct then (clap checks `required` on what the
    // user gave).
    #[arg(long, required = true, default_value = "", hide_default_value = true)]
    pub url: String,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Requests in flight (closed loop); with --rate, the cap on in-flight requests.
    #[arg(long, default_value_t = 8)]
    pub concurrency: u32,
    /// multi-turn:TURNS[,think=DUR]: --concurrency conversations, each
    /// resending its history with a new turn (per-turn input, cached
    /// tokens, TTFT, prefix-cache hit ratio). observed:TARGET[:RANGE]: the
    /// lengths and request rate TARGET served over RANGE (default 1h), read
    /// from --database, replayed as a trace (--rate overrides the rate).
    #[arg(long = "workload", value_parser = parse_bench_workload)]
    pub workload_source: Option<BenchWorkload>,
    /// sharegpt:FILE.json: each human turn of a ShareGPT dataset as a
    /// prompt asking for its reply's length, at --rate (Poisson).
    #[arg(long, conflicts_with_all = ["workload_source", "trace"])]
    pub dataset: Option<String>,
    /// The daemon's database, read by --workload observed:.
    #[arg(long, default_value = "llmwatch.db")]
    pub database: PathBuf,
    /// Replay a Mooncake-format trace (JSON Lines: timestamp ms,
    /// input_length, output_length, hash_ids of 512-token blocks) through
    /// /v1/completions, prompts exact to the token (needs /tokenize).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Replay the trace this many times as fast as recorded.
    #[arg(long, default_value_t = 1.0)]
    pub trace_speed: f64,
    /// Measured requests (warm-up not counted).
    #[arg(long, default_value_t = 200)]
    pub requests: u64,
    /// Send for this long instead of a request count (e.g. 60s).
    #[arg(long)]
    pub duration: Option<String>,
    /// Open loop: mean requests per second (Poisson, or gamma with --burstiness).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Gamma shape of arrival gaps: 1 = Poisson, < 1 burstier.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Requests sent first and left out of the statistics.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Goodput objectives, e.g. 1s, 50ms.
    #[arg(long)]
    pub slo_ttft_p95: Option<String>,
    #[arg(long)]
    pub slo_itl_p95: Option<String>,
    #[arg(long)]
    pub slo_e2e_p95: Option<String>,
    /// Deadline for one request.
    #[arg(long, default_value = "10m")]
    pub timeout: String,
    /// Write the full result (every probe's timings) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Stream every probe's record to this file as JSON Lines while the run
    /// goes (memory stays flat however long it runs).
    #[arg(long)]
    pub records: Option<PathBuf>,
    /// Measuring threads sharing the load (default: the cores the machine
    /// can spare, all but one).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Send part I of N of the schedule (parts count from 0): request k goes
    /// to part k mod N; --concurrency is the whole's, shared out. Needs
    /// --start-at and --json; merge the parts with `llmwatch bench merge`.
    #[arg(long, value_parser = Part::parse)]
    pub part: Option<Part>,
    /// When the schedule starts, the same for every part: Unix seconds or
    /// RFC 3339 (2026-12-07T08:00:00Z). Prompts are salted from it and the
    /// seed, so every part sends what one run of the schedule would.
    #[arg(long)]
    pub start_at: Option<String>,
}

/// `llmwatch bench merge`.
#[derive(Debug, Clone, Subcommand)]
pub enum BenchCommand {
    /// Merge the result files of a shared schedule's parts (`bench --part
    /// I/N --json FILE` each) into one result.
    Merge(MergeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Every part's result file.
    #[arg(required = true)]
    pub parts: Vec<PathBuf>,
    /// Write the merged result (every part's records) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `--start-at`: Unix seconds or RFC 3339, as a wall-clock time.
fn parse_start_at(text: &str) -> anyhow::Result<SystemTime> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        if seconds.is_finite() && seconds >= 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(seconds));
        }
    }
    humantime::parse_rfc3339_weak(text).map_err(|err| {
        anyhow::anyhow!("--start-at: expected Unix seconds or RFC 3339, got {text:?}: {err}")
    })
}

/// The monotonic instant of wall-clock `at`; an error once it has passed.
fn instant_of(at: SystemTime) -> anyhow::Result<Instant> {
    match at.duration_since(llmwatch_engine::clock::now()) {
        Ok(ahead) => Ok(Instant::now() + ahead),
        Err(passed) => bail!(
            "--start-at: that time passed {:.1}s ago (after calibrating); give every part a \
             start time still ahead of it",
            passed.duration().as_secs_f64()
        ),
    }
}

/// The shared schedule `--part`/`--start-at` describe (checked), with the
/// start as Unix ms for the result.
fn shared_schedule(args: &BenchArgs) -> anyhow::Result<Option<(Option<Part>, SystemTime)>> {
    let start = args.start_at.as_deref().map(parse_start_at).transpose()?;
    match (args.part, start) {
        (Some(_), None) => {
            bail!("--part needs --start-at: every part must start the schedule at the same time")
        }
        (Some(_), _) if args.json.is_none() => {
            bail!("--part needs --json: `bench merge` merges the parts' result files")
        }
        (Some(part), _) if args.concurrency < part.count => bail!(
            "--part {part}: --concurrency {} is the whole schedule's and must be at least the \
             number of parts, {}",
            args.concurrency,
            part.count
        ),
        (part, Some(start)) => Ok(Some((part, start))),
        (None, None) => Ok(None),
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn optional_duration(flag: &str, value: &Option<String>) -> anyhow::Result<Option<Duration>> {
    value
        .as_deref()
        .map(|v| parse_duration(v).map_err(|err| anyhow::anyhow!("--{flag}: {err}")))
        .transpose()
}

/// Turns CLI arguments into a run: client, workload, config.
pub async fn prepare(args: &BenchArgs) -> anyhow::Result<(ProbeClient, Workload, RunConfig)> {
    let parsed = args.workload.parse()?;
    // Flags checked before any request.
    let shared = shared_schedule(args)?;
    let mut client_config = ClientConfig::new(args.url.clone());
    client_config.timeout =
        parse_duration(&args.timeout).map_err(|err| anyhow::anyhow!("--timeout: {err}"))?;
    client_config.api_key = parsed.api_key;
    let client = ProbeClient::new(client_config)?;
    let model = model_of(args, &client).await?;
    refuse_a_shape_past_the_context(&client, &args.url, &model, parsed.shape).await?;
    let calibrator = Calibrator::new();
    let mut workload = Workload::prepare(
        &client,
        &calibrator,
        parsed.api,
        &model,
        parsed.shape,
        parsed.prompt,
        args.workload.seed,
    )
    .await;
    workload.temperature = args.workload.temperature;
    if args.workload.reuse_prompts {
        workload.reuse_prompts();
    }
    if let Some((_, start)) = shared {
        if !args.workload.reuse_prompts {
            workload.salt_prompts(args.workload.seed ^ unix_ms(start).rotate_left(32));
        }
    }
    // A part keeps its share of the whole schedule's requests in flight.
    let concurrency = match shared.and_then(|(part, _)| part) {
        Some(part) => part.share(args.concurrency),
        None => args.concurrency,
    };
    let load = match args.rate {
        Some(rate) => Load::Rate {
            per_second: rate,
            burstiness: args.burstiness,
            max_concurrency: Some(concurrency),
        },
        None => Load::Concurrency { concurrency },
    };
    let bound = match optional_duration("duration", &args.duration)? {
        Some(duration) => Bound::Duration(duration),
        None => Bound::Requests(args.requests),
    };
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let config = RunConfig {
        load,
        bound,
        warmup_requests: args.warmup,
        objectives: Objectives {
            ttft_p95: optional_duration("slo-ttft-p95", &args.slo_ttft_p95)?,
            itl_p95: optional_duration("slo-itl-p95", &args.slo_itl_p95)?,
            e2e_p95: optional_duration("slo-e2e-p95", &args.slo_e2e_p95)?,
            ..Objectives::default()
        },
        seed: args.workload.seed,
        ..RunConfig::closed(args.concurrency, args.requests)
    };
    Ok((client, workload, config))
}

/// The model `--model` names, else the one the server lists.
pub async fn model_of(args: &BenchArgs, client: &ProbeClient) -> anyhow::Result<String> {
    match &args.workload.model {
        Some(model) => Ok(model.clone()),
        None => discover_model(client.http(), &args.url)
            .await
            .map_err(|err| anyhow::anyhow!("no --model given and discovery failed: {err}")),
    }
}

/// Refuses, before any request, a shape whose prompt plus output cannot fit
/// the model's context: every request would fail.
pub async fn refuse_a_shape_past_the_context(
    client: &ProbeClient,
    url: &str,
    model: &str,
    shape: Shape,
) -> anyhow::Result<()> {
    let needed = u64::from(shape.input_tokens) + u64::from(shape.output_tokens);
    if let Some((limit, source)) = context_limit(client.http(), url, model).await {
        if needed > limit {
            bail!(
                "--shape {shape}: needs {needed} tokens of context, but {model} has {limit} ({source}); \
                 no request was sent"
            );
        }
    }
    Ok(())
}

/// Runs the bench; returns its result and where its records were written.
pub async fn bench(args: &BenchArgs) -> anyhow::Result<(RunResult, Option<PathBuf>)> {
    let (client, workload, config) = prepare(args).await?;
    if let Some(why) = workload.calibration.inexact_reason() {
        eprintln!(
            "note: {}: input length not exact: {why}",
            llmwatch_core::redact::redact_url(&args.url)
        );
    }
    if workload.reuses_prompts() {
        eprintln!("note: --reuse-prompts: prompts repeat earlier runs', so prefix-cache hits are expected");
    }
    // The run gets threads of its own (and, with --spin, busy cores); the
    // client above only calibrated the prompt. Records stream to a file
    // (the --json document is assembled from it at the end).
    let workers = args.workers.unwrap_or_else(llmwatch_probe::default_workers);
    let pool = MeasuringPool::start_mode(workers, args.workload.spin.mode(), client.config())?;
    let records_path = args.records.clone().or_else(|| {
        args.json
            .as_ref()
            .map(|j| j.with_extension("records.jsonl.tmp"))
    });
    let writer = records_path
        .as_deref()
        .map(llmwatch_probe::RecordWriter::create)
        .transpose()?;
    let options = RunOptions {
        records: writer
            .as_ref()
            .map_or(Records::Discard, |w| Records::Stream(w.sink())),
        ..RunOptions::default()
    };
    // The server's prefix-cache counters over the run: the hygiene check's
    // evidence where usage carries no cached tokens (vLLM's default).
    let intended_hit_ratio = workload.intended_hit_ratio();
    let scraper = Scraper::start(
        client.http().clone(),
        default_metrics_url(&args.url),
        None,
        Duration::from_secs(5),
    )
    .await;
    let shared = shared_schedule(args)?;
    let schedule = SharedSchedule {
        part: shared.and_then(|(part, _)| part),
        start_at: shared.map(|(_, at)| instant_of(at)).transpose()?,
    };
    let seed = config.seed;
    let run_started_ms = llmwatch_engine::now_ms();
    let run = pool
        .run_shared(config, options, schedule, move |i| workload.request(i))
        .await;
    let scraped = scraper.finish().await;
    let mut result = run?;
    result.part_of = shared.and_then(|(part, start)| {
        Some(PartOf {
            part: part?,
            seed,
            start_at_unix_ms: unix_ms(start),
        })
    });
    let run_ended_ms = llmwatch_engine::now_ms();
    result.server_prefix_cache_hit_ratio =
        evidence_for_window(&scraped, run_started_ms, run_ended_ms, run_ended_ms)
            .prefix_cache_hit_rate;
    result.cache_contaminated = intended_hit_ratio.and_then(|intended| {
        if result.cached_tokens_unreported_by_all() {
            result
                .server_prefix_cache_hit_ratio
                .and_then(|rate| cache_hygiene_from_counters(intended, rate))
        } else {
            cache_hygiene(
                intended,
                result.total_input_tokens,
                result.total_cached_tokens,
            )
        }
    });
    if let Some(w) = writer {
        w.finish()?;
    }
    Ok((result, records_path))
}

/// `llmwatch bench merge`: reads the parts, merges, prints, writes.
fn merge_cli(args: &MergeArgs) -> anyhow::Result<()> {
    let mut parts = Vec::with_capacity(args.parts.len());
    for path in &args.parts {
        let file =
            std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        let part: RunResult = serde_json::from_reader(std::io::BufReader::new(file))
            .with_context(|| format!("{}: not a `bench --json` result", path.display()))?;
        parts.push(part);
    }
    let merged = llmwatch_probe::merge_parts(parts)?;
    print!(
        "{}",
        llmwatch_core::redact::redact_urls_in(&llmwatch_probe::render_table(&merged))
    );
    if let Some(path) = &args.json {
        super::write_json_redacted(path, &merged)?;
    }
    Ok(())
}

pub async fn run_cli(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(BenchCommand::Merge(merge)) = &args.command {
        return merge_cli(merge);
    }
    match &args.workload_source {
        Some(BenchWorkload::MultiTurn(workload)) => {
            return super::conversation::run(&args, *workload).await;
        }
        Some(BenchWorkload::Observed(spec)) => return super::observed::run(&args, spec).await,
        None => {}
    }
    if let Some(dataset) = &args.dataset {
        return super::dataset::run(&args, dataset).await;
    }
    if let Some(trace) = &args.trace {
        return super::trace::run(&args, trace, args.trace_speed).await;
    }
    let (result, records_path) = bench(&args).await?;
    print!(
        "{}",
        llmwatch_core::redact::redact_urls_in(&llmwatch_probe::render_table(&result))
    );
    if let (Some(path), Some(records)) = (&args.json, &records_path) {
        // Error messages in the records may quote the URL: no credential in the file.
        llmwatch_probe::write_result_json(&result, records, path)?;
        if args.records.is_none() {
            std::fs::remove_file(records)
                .with_context(|| format!("removing {}", records.display()))?;
        }
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.records {
        println!("wrote {} (one record per line)", path.display());
    }
    Ok(())
}
