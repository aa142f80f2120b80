//! `llmwatch sim`: one simulated engine (and optionally its GPU page) on
//! the given address, until Ctrl-C; with vLLM's own flags (`--vllm-args`
//! or after `--`) on top of a named profile or a profile file; or, with
//! `--fit`, the cost model fitted to a real server's sweep and written as a
//! profile file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use llmwatch_core::analysis::{ExperimentCard, Load};
use llmwatch_engine::runners::sweep::card::card_from_json;
use llmwatch_engine::runners::sweep::{load_sweep, StoredSweep};
use llmwatch_sim::{
    apply_vllm_args, fit_cost_model, split_args, vllm_router, FitReport, FitStep, Flavor,
    KvCacheDtype, Profile, ProfileFile, Sim, SimConfig, VllmSettings,
};
use llmwatch_store::Store;
use serde_json::Value;

/// Flags of `llmwatch sim`.
#[derive(Debug, clap::Args)]
pub struct SimCli {
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Address to bind (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// A named profile: balanced, kv-starved, prefill-heavy, decode-slow,
    /// scheduler-limited, slow-frontend. All hand-made (an 8B model on an
    /// H100, loosely), none fitted to a real server: for one that is, use
    /// `--profile-file fixtures/vllm-real-sweeps/default.fitted-profile.json`
    /// (a real vLLM 0.32's default sweep).
    #[arg(long, default_value = "balanced")]
    pub profile: String,
    /// A profile file (written by `--fit`, or a profile's JSON) instead of
    /// a named profile.
    #[arg(long, conflicts_with = "profile")]
    pub profile_file: Option<PathBuf>,
    /// vLLM 0.32 `vllm serve` flags applied on top of the profile, as one
    /// argument (e.g. "--max-num-seqs 4 --kv-cache-dtype fp8"); the same
    /// flags may also follow `--`. Plus `--interconnect nvlink|pcie` for
    /// tensor or pipeline parallelism, and `--quality-error-rate R` (the
    /// share of graded arithmetic prompts answered wrong, 0 by default).
    #[arg(long, allow_hyphen_values = true)]
    pub vllm_args: Option<String>,
    /// The server it imitates: vllm, nim or llamacpp.
    #[arg(long, default_value = "vllm")]
    pub flavor: String,
    /// Also serve a dcgm-exporter page for N simulated GPUs on this port.
    #[arg(long)]
    pub gpu_port: Option<u16>,
    /// Run the engine N× faster than its profile says.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    #[arg(long, default_value = "sim-llama-8b")]
    pub model: String,
    /// Fit the cost model to a real server's sweep instead of serving: a
    /// `llmwatch sweep --json` file, or a stored sweep id (see
    /// `--database`). The profile, profile file and vLLM flags describe the
    /// server that was swept; its card's cache settings are used too.
    #[arg(long, requires = "out")]
    pub fit: Option<String>,
    /// Where `--fit` writes the profile file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Database of stored sweeps, for `--fit ID`.
    #[arg(long, default_value = "llmwatch.db")]
    pub database: PathBuf,
    /// vLLM flags after `--` (`llmwatch sim --port 9000 -- --max-num-seqs 4`).
    #[arg(last = true, allow_hyphen_values = true, value_name = "VLLM_FLAGS")]
    pub vllm_flags: Vec<String>,
}

pub struct SimArgs {
    pub addr: SocketAddr,
    pub profile: String,
    /// A profile file, used instead of the named `profile`.
    pub profile_file: Option<PathBuf>,
    /// vLLM serve flags, one argument each.
    pub vllm_args: Vec<String>,
    pub flavor: String,
    pub gpu_addr: Option<SocketAddr>,
    pub time_scale: f64,
    pub model: String,
}

impl SimArgs {
    /// A vLLM-flavoured simulator on a free loopback port, without a GPU page.
    pub fn loopback(profile: &str, model: &str, time_scale: f64) -> SimArgs {
        SimArgs {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            profile: profile.to_string(),
            profile_file: None,
            vllm_args: Vec::new(),
            flavor: "vllm".to_string(),
            gpu_addr: None,
            time_scale,
            model: model.to_string(),
        }
    }

    /// Also serve a dcgm-exporter page, on a free loopback port.
    pub fn with_gpu_page(mut self) -> SimArgs {
        self.gpu_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        self
    }
}

/// The profile a simulator runs: the base (named or from a file) with the
/// vLLM flags applied.
#[derive(Debug, Clone)]
pub struct ResolvedProfile {
    pub profile: Profile,
    /// The vLLM settings, when flags or a profile file gave them (the page
    /// then shows them in `cache_config_info`).
    pub settings: Option<VllmSettings>,
    /// Flags accepted without effect on scheduling.
    pub ignored: Vec<String>,
    /// The fit a profile file came from.
    pub fit: Option<FitReport>,
}

/// Reads a profile file.
pub fn load_profile_file(path: &Path) -> anyhow::Result<ProfileFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    ProfileFile::from_json(&text).with_context(|| format!("loading {}", path.display()))
}

/// `--vllm-args TEXT` split as a shell would, then the flags after `--`.
pub fn vllm_flags(text: Option<&str>, trailing: &[String]) -> anyhow::Result<Vec<String>> {
    let mut flags = match text {
        Some(text) => split_args(text).context("--vllm-args")?,
        None => Vec::new(),
    };
    flags.extend(trailing.iter().cloned());
    Ok(flags)
}

/// The simulator's own flag among the vLLM ones: `--quality-error-rate R`
/// (the share of graded prompts answered wrong, for experiments' quality
/// checks). Returns the vLLM flags without it, and the rate (0 if absent).
pub fn split_sim_flags(flags: &[String]) -> anyhow::Result<(Vec<String>, f64)> {
    let mut rest = Vec::with_capacity(flags.len());
    let mut rate = 0.0;
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let value = match flag.strip_prefix("--quality-error-rate") {
            Some("") => it.next().map(String::as_str),
            Some(tail) if tail.starts_with('=') => Some(&tail[1..]),
            _ => {
                rest.push(flag.clone());
                continue;
            }
        };
        rate = value
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|r| (0.0..=1.0).contains(r))
            .with_context(|| {
                format!("--quality-error-rate: expected a fraction in 0..=1, found {value:?}")
            })?;
    }
    Ok((rest, rate))
}

/// The base profile (named, or a file with its settings and fit), with the
/// vLLM flags applied.
pub fn resolve_profile(
    named: &str,
    file: Option<&Path>,
    flags: &[String],
) -> anyhow::Result<ResolvedProfile> {
    let (flags, _) = split_sim_flags(flags)?;
    let flags = flags.as_slice();
    let (base, base_settings, fit) = match file {
        Some(path) => {
            let f = load_profile_file(path)?;
            (f.profile, Some(f.vllm), f.fit)
        }
        None => (Profile::named(named)?, None, None),
    };
    if flags.is_empty() {
        return Ok(ResolvedProfile {
            profile: base,
            settings: base_settings,
            ignored: Vec::new(),
            fit,
        });
    }
    let applied =
        apply_vllm_args(&base, &base_settings.unwrap_or_default(), flags).context("vLLM flags")?;
    Ok(ResolvedProfile {
        profile: applied.profile,
        settings: Some(applied.settings),
        ignored: applied.ignored,
        fit,
    })
}

/// Starts a simulator from CLI-style arguments and returns it with the
/// addresses it listens on (engine, GPU page).
pub async fn start(args: &SimArgs) -> anyhow::Result<(Sim, SocketAddr, Option<SocketAddr>)> {
    let resolved = resolve_profile(&args.profile, args.profile_file.as_deref(), &args.vllm_args)?;
    start_resolved(&resolved, args).await
}

/// [`start`] with the profile already resolved.
pub async fn start_resolved(
    resolved: &ResolvedProfile,
    args: &SimArgs,
) -> anyhow::Result<(Sim, SocketAddr, Option<SocketAddr>)> {
    let flavor: Flavor = args.flavor.parse()?;
    if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        anyhow::bail!(
            "--time-scale must be a positive number, got {}",
            args.time_scale
        );
    }
    let mut config = SimConfig {
        model: args.model.clone(),
        flavor,
        time_scale: args.time_scale,
        ..SimConfig::new(resolved.profile.clone())
    };
    if let Some(settings) = &resolved.settings {
        config.gpus = settings.world_size();
    }
    config.quality_error_rate = split_sim_flags(&args.vllm_args)?.1;
    // vLLM's flag for the per-request `metrics` object on the final chunk.
    config.per_request_metrics = args
        .vllm_args
        .iter()
        .any(|flag| flag == "--enable-per-request-metrics");
    let sim = Sim::start(config)?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("binding {}", args.addr))?;
    let engine_addr = listener.local_addr()?;
    let engine = sim.clone();
    let settings = resolved.settings.clone();
    tokio::spawn(async move {
        // A vLLM-flavoured simulator states its settings as vLLM does, its
        // defaults too: the captured page's own labels (that server ran
        // at 0.92 memory utilization) would differ from any flagged run's
        // in settings nobody changed.
        let served = match flavor {
            Flavor::Vllm => {
                let settings = settings.unwrap_or_default();
                llmwatch_sim::serve(listener, vllm_router(&engine, &settings)).await
            }
            _ => engine.serve(listener).await,
        };
        if let Err(err) = served {
            tracing::error!(error = %err, "simulated engine stopped");
        }
    });
    let gpu_addr = match args.gpu_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            let bound = listener.local_addr()?;
            let router = sim.gpu_router();
            tokio::spawn(async move {
                if let Err(err) = llmwatch_sim::serve(listener, router).await {
                    tracing::error!(error = %err, "simulated GPU page stopped");
                }
            });
            Some(bound)
        }
        None => None,
    };
    Ok((sim, engine_addr, gpu_addr))
}

/// The scheduling and memory settings of a profile, one line.
pub fn describe_profile(p: &Profile, settings: Option<&VllmSettings>) -> String {
    let mut line = format!(
        "max_num_seqs={} max_num_batched_tokens={} max_model_len={} block_size={} num_gpu_blocks={} chunked_prefill={} prefix_caching={}",
        p.max_num_seqs,
        p.max_num_batched_tokens,
        p.max_model_len,
        p.block_size,
        p.num_gpu_blocks,
        p.enable_chunked_prefill,
        p.enable_prefix_caching
    );
    if let Some(s) = settings {
        line.push(' ');
        line.push_str(&s.to_string());
    }
    line
}

/// The costs of a profile, one line, in milliseconds.
pub fn describe_costs(p: &Profile) -> String {
    format!(
        "step_base={:.3}ms prefill_per_token={:.4}ms decode_per_seq={:.4}ms frontend_per_request={:.3}ms",
        p.step_base_s * 1e3,
        p.prefill_per_token_s * 1e3,
        p.decode_per_seq_s * 1e3,
        p.frontend_per_request_s * 1e3
    )
}

/// The ignored flags, one line, or nothing.
pub fn ignored_line(ignored: &[String]) -> Option<String> {
    (!ignored.is_empty()).then(|| {
        format!(
            "ignored vLLM flags (no effect on scheduling): {}",
            ignored.join(", ")
        )
    })
}

/// Runs `llmwatch sim` from its flags: `--fit`, or serve until Ctrl-C.
pub async fn run_cli(cli: SimCli) -> anyhow::Result<()> {
    let flags = vllm_flags(cli.vllm_args.as_deref(), &cli.vllm_flags)?;
    if let Some(source) = &cli.fit {
        let Some(out) = &cli.out else {
            bail!("--fit needs --out FILE for the profile");
        };
        return run_fit(&cli, source, out, &flags).await;
    }
    run(SimArgs {
        addr: SocketAddr::new(cli.host, cli.port),
        profile: cli.profile,
        profile_file: cli.profile_file,
        vllm_args: flags,
        flavor: cli.flavor,
        gpu_addr: cli.gpu_port.map(|p| SocketAddr::new(cli.host, p)),
        time_scale: cli.time_scale,
        model: cli.model,
    })
    .await
}

pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let resolved = resolve_profile(&args.profile, args.profile_file.as_deref(), &args.vllm_args)?;
    let (_sim, engine_addr, gpu_addr) = start_resolved(&resolved, &args).await?;
    let name = match &args.profile_file {
        Some(path) => path.display().to_string(),
        None => args.profile.clone(),
    };
    println!("simulated engine ({name} profile) on http://{engine_addr}");
    println!(
        "  {}",
        describe_profile(&resolved.profile, resolved.settings.as_ref())
    );
    println!("  {}", describe_costs(&resolved.profile));
    if let Some(line) = ignored_line(&resolved.ignored) {
        println!("{line}");
    }
    if let Some(gpu_addr) = gpu_addr {
        println!("simulated dcgm-exporter page on http://{gpu_addr}/metrics");
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}

/// The steps and card of a sweep to fit: a `sweep --json` file, or a
/// stored sweep id.
async fn fit_source(
    source: &str,
    database: &Path,
) -> anyhow::Result<(Vec<FitStep>, ExperimentCard)> {
    let path = Path::new(source);
    if path.exists() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        return steps_from_sweep_json(&value).with_context(|| format!("{}", path.display()));
    }
    let Ok(id) = source.parse::<i64>() else {
        bail!("--fit {source}: no such file, and not a stored sweep id");
    };
    let store = Store::open(database)
        .await
        .with_context(|| format!("opening {}", database.display()))?;
    let stored = load_sweep(&store, id).await?;
    let steps = fit_steps_of(&stored);
    if steps.is_empty() {
        bail!("sweep #{id} has no concurrency step with successful requests to fit");
    }
    Ok((steps, stored.card))
}

/// The steps of a stored sweep the cost model can be fitted to: each
/// concurrency step with successful requests (at most half failed), with
/// its tokens per request.
pub fn fit_steps_of(stored: &StoredSweep) -> Vec<FitStep> {
    let mut steps = Vec::new();
    for (step, run) in stored.steps.iter().zip(&stored.runs) {
        let Load::Concurrency(c) = step.load else {
            continue;
        };
        if step.requests_ok == 0 || step.error_rate > 0.5 {
            continue;
        }
        let per_request =
            |total: u64| (run.successful > 0).then(|| total as f64 / run.successful as f64);
        let (Some(input), Some(output)) = (
            per_request(run.total_input_tokens),
            per_request(run.total_output_tokens),
        ) else {
            continue;
        };
        steps.push(FitStep {
            concurrency: f64::from(c),
            input_tokens: input,
            output_tokens: output,
            ttft_p50_s: step.ttft.p50,
            itl_p50_s: step.itl.p50,
            output_tps: Some(step.output_token_throughput).filter(|v| *v > 0.0),
            running_mean: step.server.requests_running_mean,
        });
    }
    steps
}

/// The steps of a sweep as `llmwatch sweep --json` writes it: each
/// concurrency step with successful requests (rate steps are skipped), its
/// p50 TTFT and ITL, output throughput, mean running requests and tokens
/// per request; and the card.
pub fn steps_from_sweep_json(value: &Value) -> anyhow::Result<(Vec<FitStep>, ExperimentCard)> {
    let Some(steps) = value.get("steps").and_then(Value::as_array) else {
        bail!("no `steps` array: not a sweep written by `llmwatch sweep --json`");
    };
    let shape = value
        .pointer("/settings/shape")
        .and_then(Value::as_str)
        .and_then(|s| s.split_once('x'))
        .and_then(|(i, o)| Some((i.trim().parse::<f64>().ok()?, o.trim().parse::<f64>().ok()?)));
    let num = |v: &Value, pointer: &str| v.pointer(pointer).and_then(Value::as_f64);
    let mut out = Vec::new();
    for (index, s) in steps.iter().enumerate() {
        let Some(concurrency) = num(s, "/step/load/concurrency") else {
            continue;
        };
        let ok = num(s, "/step/requests_ok").unwrap_or(0.0);
        if ok <= 0.0 || num(s, "/step/error_rate").unwrap_or(0.0) > 0.5 {
            continue;
        }
        let successful = num(s, "/run/successful").filter(|n| *n > 0.0);
        let per_request = |pointer: &str| Some(num(s, pointer)? / successful?);
        let input = per_request("/run/total_input_tokens")
            .filter(|v| *v > 0.0)
            .or(shape.map(|s| s.0));
        let output = per_request("/run/total_output_tokens")
            .filter(|v| *v > 0.0)
            .or(shape.map(|s| s.1));
        let (Some(input_tokens), Some(output_tokens)) = (input, output) else {
            bail!("step {index}: no token counts in its run and no shape in the settings");
        };
        out.push(FitStep {
            concurrency,
            input_tokens,
            output_tokens,
            ttft_p50_s: num(s, "/step/ttft_s/p50"),
            itl_p50_s: num(s, "/step/itl_s/p50"),
            output_tps: num(s, "/step/output_token_throughput").filter(|v| *v > 0.0),
            running_mean: num(s, "/step/server/requests_running_mean"),
        });
    }
    if out.is_empty() {
        bail!("no concurrency step with successful requests to fit");
    }
    let card = value.get("card").map(card_from_json).unwrap_or_default();
    Ok((out, card))
}

/// The swept server's own cache settings from its card, over the base: its
/// blocks, block size, prefix caching, context, KV dtype, memory share,
/// parallelism and GPU.
pub fn overlay_card(profile: &mut Profile, settings: &mut VllmSettings, card: &ExperimentCard) {
    if let Some(bs) = card
        .kv_block_size
        .and_then(|b| usize::try_from(b).ok())
        .filter(|b| *b > 0)
    {
        let per_token = profile.kv_bytes_per_block as f64 / profile.block_size.max(1) as f64;
        profile.block_size = bs;
        profile.kv_bytes_per_block = (per_token * bs as f64).round() as u64;
    }
    if let Some(n) = card
        .num_gpu_blocks
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
    {
        profile.num_gpu_blocks = n;
    }
    if let Some(b) = card.prefix_caching {
        profile.enable_prefix_caching = b;
    }
    if let Some(len) = card.max_context_len.and_then(|n| usize::try_from(n).ok()) {
        if len >= 2 && len <= profile.num_gpu_blocks.saturating_mul(profile.block_size) {
            profile.max_model_len = len;
            if !profile.enable_chunked_prefill {
                profile.max_num_batched_tokens = profile.max_num_batched_tokens.max(len);
            }
        }
    }
    if let Some(dtype) = card
        .kv_cache_dtype
        .as_deref()
        .and_then(|d| d.parse::<KvCacheDtype>().ok())
    {
        settings.cache_dtype = dtype;
    }
    if let Some(u) = card
        .gpu_memory_utilization
        .filter(|u| *u > 0.0 && *u <= 1.0)
    {
        settings.gpu_memory_utilization = u;
    }
    if let Some(tp) = card.tensor_parallel.filter(|n| *n > 0) {
        settings.tensor_parallel_size = tp as usize;
    }
    if let Some(pp) = card.pipeline_parallel.filter(|n| *n > 0) {
        settings.pipeline_parallel_size = pp as usize;
    }
    if let Some(gpu) = &card.gpu_type {
        profile.gpu_model_name = gpu.clone();
    }
}

/// One line per step: the observed numbers, the fit's, and the errors.
pub fn render_fit_report(report: &FitReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}ms", v * 1e3));
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:+.1}%", v * 100.0));
    let _ = writeln!(
        out,
        "{:>6} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>10} {:>10} {:>7}",
        "conc", "TTFT p50", "fit", "err", "ITL p50", "fit", "err", "out tok/s", "fit", "err"
    );
    for s in &report.steps {
        let _ = writeln!(
            out,
            "{:>6} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>10} {:>10.1} {:>7}",
            format!("c={}", s.step.concurrency),
            ms(s.step.ttft_p50_s),
            ms(Some(s.predicted.ttft_p50_s)),
            pct(s.rel_err.ttft_p50),
            ms(s.step.itl_p50_s),
            ms(Some(s.predicted.itl_p50_s)),
            pct(s.rel_err.itl_p50),
            s.step
                .output_tps
                .map_or("-".to_string(), |v| format!("{v:.1}")),
            s.predicted.output_tps,
            pct(s.rel_err.output_tps),
        );
    }
    let _ = writeln!(out, "{}", fit_error_line(report));
    out
}

/// The fit's error in one line.
pub fn fit_error_line(report: &FitReport) -> String {
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    format!(
        "fit error{}: RMS {:.1}%, max {:.1}%; mean |error| TTFT p50 {}, ITL p50 {}, throughput {} over {} step(s)",
        report
            .source
            .as_deref()
            .map(|s| format!(" on {s}"))
            .unwrap_or_default(),
        report.rms_rel_err * 100.0,
        report.max_abs_rel_err * 100.0,
        pct(report.mean_abs_rel_err.ttft_p50),
        pct(report.mean_abs_rel_err.itl_p50),
        pct(report.mean_abs_rel_err.output_tps),
        report.steps.len()
    )
}

/// The cost model fitted to `steps` of the server `card` describes: the
/// base profile, the card's cache settings, then the `flags` the server was
/// started with (those its page does not show), fitted and named after
/// `source`. Also the profile it was fitted on (for the ignored flags).
pub fn fit_profile(
    steps: &[FitStep],
    card: &ExperimentCard,
    mut base: Profile,
    mut settings: VllmSettings,
    flags: &[String],
    source: &str,
) -> anyhow::Result<(ProfileFile, ResolvedProfile)> {
    overlay_card(&mut base, &mut settings, card);
    let resolved = if flags.is_empty() {
        base.validate().context("the swept server's profile")?;
        ResolvedProfile {
            profile: base,
            settings: Some(settings),
            ignored: Vec::new(),
            fit: None,
        }
    } else {
        let applied = apply_vllm_args(&base, &settings, flags).context("vLLM flags")?;
        ResolvedProfile {
            profile: applied.profile,
            settings: Some(applied.settings),
            ignored: applied.ignored,
            fit: None,
        }
    };
    let fit = fit_cost_model(&resolved.profile, steps).context("fitting the cost model")?;
    let mut report = fit.report;
    report.source = Some(source.to_string());
    let mut profile = fit.profile;
    profile.name = format!("fitted to {source}");
    let file = ProfileFile {
        profile,
        vllm: resolved.settings.clone().unwrap_or_default(),
        fit: Some(report),
    };
    Ok((file, resolved))
}

/// `llmwatch sim --fit SWEEP --out FILE`.
async fn run_fit(cli: &SimCli, source: &str, out: &Path, flags: &[String]) -> anyhow::Result<()> {
    let (steps, card) = fit_source(source, &cli.database).await?;
    let (base, settings) = match &cli.profile_file {
        Some(path) => {
            let f = load_profile_file(path)?;
            (f.profile, f.vllm)
        }
        None => (Profile::named(&cli.profile)?, VllmSettings::default()),
    };
    let name = if Path::new(source).exists() {
        source.to_string()
    } else {
        format!("sweep #{source} in {}", cli.database.display())
    };
    let (file, resolved) = fit_profile(&steps, &card, base, settings, flags, &name)?;
    std::fs::write(out, file.to_json_pretty())
        .with_context(|| format!("writing {}", out.display()))?;
    if let Some(line) = ignored_line(&resolved.ignored) {
        println!("{line}");
    }
    println!(
        "fitted {} step(s) of {}: {}",
        steps.len(),
        file.fit
            .as_ref()
            .and_then(|f| f.source.as_deref())
            .unwrap_or(source),
        describe_costs(&file.profile)
    );
    if let Some(fit) = &file.fit {
        println!(
            "  arrivals in lock-step: {:.0}% (a property of the swept workload)",
            fit.params.arrival_sync * 100.0
        );
    }
    println!("  {}", describe_profile(&file.profile, Some(&file.vllm)));
    if let Some(report) = &file.fit {
        print!("{}", render_fit_report(report));
    }
    println!("profile written to {}", out.display());
    Ok(())
}
