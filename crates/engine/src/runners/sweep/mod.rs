//! Sweeps, the I/O side: run probe steps at rising load against one target,
//! scrape the server (and its GPUs) during each step, judge the result with
//! [`llmwatch_core::analysis`], store it, and compare two stored sweeps.
//!
//! Method (DESIGN.md, "Method: why sweeps"): each step is one probe run at
//! one load (closed-loop concurrency or an open-loop request rate), after a
//! warm-up at the same load, lasting at least `requests_per_step` requests
//! *and* `min_step_duration` — whichever ends later — so a fast server still
//! gives a window long enough to scrape, and a slow one still gives enough
//! requests for a p95. The server's `/metrics` is scraped every
//! `scrape_interval` during the step, and the step's
//! [`ServerEvidence`](llmwatch_core::analysis::ServerEvidence) is read from
//! the scrapes of its window.
//!
//! Production safety: a sweep loads a server hard, so its ladder is capped
//! ([`DEFAULT_MAX_CONCURRENCY`], raised only on purpose) and it stops early
//! when the error rate or the p95 TTFT passes a hard limit, keeping (and
//! storing) every step measured so far with the reason it stopped.
//!
//! Entry points: [`run_sweep`] (the daemon and the CLI), [`compare_sweeps`],
//! and the binary crate's `cli::sweep::run` (`llmwatch sweep`).

pub mod card;
mod conversation;
mod error;
pub mod evidence;
mod persist;
pub mod rejudge;
mod report;
pub mod schedule;
mod settings;
pub mod start;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmwatch_core::analysis::{
    analyze_sweep, cache_hygiene, cache_hygiene_from_counters, latency_breakdown,
    per_request_breakdown, step_economics, summary_lines, ClientMeans, EngineCapacity,
    ExperimentCard, LatencyBreakdown, Load, NoBreakdown, Objectives, PerRequestPhases, StepResult,
    SweepVerdict, WaitingGauge, WorkloadHints,
};
use llmwatch_probe::mix::ShapeMix;
use llmwatch_probe::trace::TracePrompts;
use llmwatch_probe::{
    Bound, Calibrator, ClientConfig, MeasuringThread, Monitored, ProbeClient, PromptKind,
    RunConfig, RunError, RunResult, Shape, Workload,
};
use llmwatch_store::{NewSweep, Store, SweepEnd, SweepStatus, TargetKind};

use crate::runners::canary::probe_row;
use crate::sources::scrape::{now_ms, scrape_client};
use crate::sources::server_facts::discover_model;

use self::card::{card_to_json, collect_card, CardSettings};
use self::conversation::{run_conversation_step, ConversationStep};
use self::evidence::{evidence_for_window, has_phase_histograms, Scraped, Scraper};

// The public API stays at `runners::sweep::*`: settings and persistence are
// split out below it, and neither of them imports this runner.
pub use self::error::SweepError;
use self::persist::step_row;
pub use self::persist::{
    compare_sweeps, load_sweep, step_result, verdict_to_json, StoredSweep, SweepComparison,
};
pub use self::report::{StepReport, SweepReport};
pub use self::settings::{
    default_metrics_url, Ladder, ObservedMix, StopLimits, SweepCancel, SweepSettings,
    DEFAULT_CONCURRENCY_LADDER, DEFAULT_MAX_CONCURRENCY, DEFAULT_MIN_STEP_DURATION,
    DEFAULT_REQUESTS_PER_SLOT, DEFAULT_REQUESTS_PER_STEP, DEFAULT_SCRAPE_INTERVAL,
    DEFAULT_STOP_ERROR_RATE, DEFAULT_STOP_TTFT_P95,
};

/// Runs a sweep: validates the settings, fills the experiment card, runs
/// each step with its scrapes, stops early past a hard limit, judges the
/// steps and (with a store) records the sweep as it goes — the sweep row at
/// the start, each step when measured, the verdict at the end — so an
/// interrupted sweep keeps what it measured. `progress` is called after each
/// step is measured (and stored).
pub async fn run_sweep(
    settings: SweepSettings,
    store: Option<&Store>,
    progress: impl FnMut(&StepReport),
) -> Result<SweepReport, SweepError> {
    run_sweep_inner(settings, store, progress, None).await
}

/// [`run_sweep`] that sends the sweep's id on `recorded` as soon as its row
/// is stored, before the first step (see [`start::SweepStarter`]).
pub async fn run_sweep_with_id(
    settings: SweepSettings,
    store: Option<&Store>,
    progress: impl FnMut(&StepReport),
    recorded: tokio::sync::oneshot::Sender<i64>,
) -> Result<SweepReport, SweepError> {
    run_sweep_inner(settings, store, progress, Some(recorded)).await
}

async fn run_sweep_inner(
    settings: SweepSettings,
    store: Option<&Store>,
    mut progress: impl FnMut(&StepReport),
    recorded: Option<tokio::sync::oneshot::Sender<i64>>,
) -> Result<SweepReport, SweepError> {
    settings.validate()?;
    let prepared = prepare(&settings).await?;
    let started_ms = now_ms();
    let settings_json = settings.to_json();
    let recorder = Recorder::start(store, &settings, started_ms, &settings_json, &prepared).await?;
    if let (Some(tx), Some(id)) = (recorded, recorder.sweep_id) {
        // The caller may have stopped waiting; the sweep goes on.
        let _ = tx.send(id);
    }
    let LadderEnd {
        steps,
        stop_reason,
        status,
    } = run_ladder(&settings, &prepared, &recorder, &mut progress).await?;
    let (verdict, summary) = judge(&settings, &prepared.card, &steps, stop_reason.as_deref());
    let ended_ms = now_ms();
    recorder
        .finish(ended_ms, &verdict, &summary, &stop_reason, status)
        .await?;
    Ok(SweepReport {
        sweep_id: recorder.sweep_id,
        url: settings.url.clone(),
        model: prepared.model,
        started_ms,
        ended_ms,
        card: prepared.card,
        steps,
        verdict,
        summary,
        stop_reason,
        status,
        settings_json,
    })
}

/// What a sweep sets up before its first step.
struct Prepared {
    runner: Runner,
    /// Scrapes the target's `/metrics` (and GPU page) during the steps.
    http: reqwest::Client,
    model: String,
    metrics_url: String,
    card: ExperimentCard,
    workload: Arc<Workload>,
}

/// Starts the measuring thread, finds the model, fills the experiment card
/// (refusing a shape the model's context cannot hold) and calibrates the
/// prompts — all before any load is applied.
async fn prepare(settings: &SweepSettings) -> Result<Prepared, SweepError> {
    let mut client_config = ClientConfig::new(settings.url.clone());
    client_config.api_key = settings.api_key.clone();
    client_config.timeout = settings.request_timeout;
    // Calibration and discovery use `client` here; the steps run on the
    // measuring thread with a client of its own (see MeasuringThread).
    let client = ProbeClient::new(client_config.clone())?;
    let runner = Runner {
        thread: MeasuringThread::start_mode(settings.spin.mode())?,
        client: ProbeClient::new(client_config)?,
    };
    let http = scrape_client()?;
    let model = match &settings.model {
        Some(m) => m.clone(),
        None => discover_model(&http, &settings.url)
            .await
            .map_err(SweepError::Model)?,
    };
    let metrics_url = settings.metrics_url();
    // An observed mix has no one shape: the card states its medians (and
    // its prompt field names the mix).
    let card_shape = settings
        .observed
        .as_ref()
        .map_or(settings.shape, ObservedMix::median_shape);
    let card = collect_card(
        &http,
        &settings.url,
        &metrics_url,
        settings.gpu_url.as_deref(),
        &CardSettings {
            model: &model,
            input_tokens: card_shape.input_tokens,
            output_tokens: card_shape.output_tokens,
            prompt_kind: prompt_kind(settings),
            temperature: settings.temperature,
            user: &user_card_fields(settings),
        },
    )
    .await?;
    // Drawn lengths beyond the context (a histogram's last bucket reaches
    // max_model_len) are shortened as `observed:` draws them for a bench.
    let observed = settings
        .observed
        .as_ref()
        .map(|mix| mix.capped(card.max_context_len));
    let longest = match (&observed, settings.conversation) {
        (Some(mix), _) => mix.longest(),
        (None, Some(workload)) => conversation::longest_prompt(settings.shape, workload),
        (None, None) => settings.shape,
    };
    check_context(&longest, card.max_context_len)?;
    let workload = prepare_workload(&client, settings, observed.as_ref(), &model).await?;
    Ok(Prepared {
        runner,
        http,
        model,
        metrics_url,
        card,
        workload,
    })
}

/// The sweep's prompts, calibrated on the target to the shape's input length.
async fn prepare_workload(
    client: &ProbeClient,
    settings: &SweepSettings,
    observed: Option<&ObservedMix>,
    model: &str,
) -> Result<Arc<Workload>, SweepError> {
    if let Some(mix) = observed {
        // Exact lengths from the target's one-token words (as a trace
        // replay builds them), salted afresh so no step hits another's.
        let prompts = TracePrompts::measure(client, model, llmwatch_probe::shape::fresh_salt())
            .await
            .map_err(|err| SweepError::Settings(format!("workload {}: {err}", mix.source)))?;
        let mut workload = Workload::mixed(
            model,
            mix.median_shape(),
            Arc::new(ShapeMix::new(mix.shapes.clone(), prompts)),
        );
        workload.temperature = settings.temperature;
        return Ok(Arc::new(workload));
    }
    let calibrator = Calibrator::new();
    let mut workload = Workload::prepare(
        client,
        &calibrator,
        settings.api,
        model,
        settings.shape,
        settings.prompt,
        settings.seed,
    )
    .await;
    workload.temperature = settings.temperature;
    if settings.reuse_prompts {
        workload.reuse_prompts();
    }
    Ok(Arc::new(workload))
}

/// Records a sweep in the store as it runs — its row at the start, each
/// step when measured, its end — so an interrupted sweep keeps what it
/// measured. Without a store it records nothing.
struct Recorder<'a> {
    store: Option<&'a Store>,
    sweep_id: Option<i64>,
    /// The named target the step probes are stored under (none: not stored).
    target_id: Option<i64>,
}

impl<'a> Recorder<'a> {
    async fn start(
        store: Option<&'a Store>,
        settings: &SweepSettings,
        started_ms: i64,
        settings_json: &serde_json::Value,
        prepared: &Prepared,
    ) -> Result<Recorder<'a>, SweepError> {
        let sweep_id = match store {
            Some(store) => Some(
                store
                    .create_sweep(&NewSweep {
                        target_name: settings.target_name.clone(),
                        target_url: settings.url.clone(),
                        started_ms,
                        settings_json: settings_json.to_string(),
                        card_json: card_to_json(&prepared.card).to_string(),
                    })
                    .await?,
            ),
            None => None,
        };
        let target_id = match (store, &settings.target_name) {
            (Some(store), Some(name)) => Some(
                store
                    .upsert_target(name, TargetKind::Engine, &settings.url, started_ms)
                    .await?,
            ),
            _ => None,
        };
        Ok(Recorder {
            store,
            sweep_id,
            target_id,
        })
    }

    /// Stores a measured step (noting its row id in the report) and, for a
    /// named target, each of its requests as a probe of that step.
    async fn step(
        &self,
        settings: &SweepSettings,
        report: &mut StepReport,
    ) -> Result<(), SweepError> {
        let (Some(store), Some(sweep_id)) = (self.store, self.sweep_id) else {
            return Ok(());
        };
        let row = step_row(sweep_id, report.index, &report.step, &report.run);
        let id = store.write_sweep_step(&row).await?;
        report.stored_id = Some(id);
        if let Some(target_id) = self.target_id {
            let shape = settings.shape.to_string();
            for record in &report.run.records {
                store
                    .write_probe(&probe_row(target_id, Some(id), &shape, record))
                    .await?;
            }
        }
        Ok(())
    }

    async fn finish(
        &self,
        ended_ms: i64,
        verdict: &SweepVerdict,
        summary: &[String],
        stop_reason: &Option<String>,
        status: SweepStatus,
    ) -> Result<(), SweepError> {
        if let (Some(store), Some(id)) = (self.store, self.sweep_id) {
            store
                .finish_sweep(
                    id,
                    &SweepEnd {
                        ended_ms,
                        verdict_json: Some(verdict_to_json(verdict, summary).to_string()),
                        stop_reason: stop_reason.clone(),
                        status,
                    },
                )
                .await?;
        }
        Ok(())
    }
}

/// How a sweep's ladder ended: the steps measured, and why it stopped
/// before the end, if it did.
struct LadderEnd {
    steps: Vec<StepReport>,
    stop_reason: Option<String>,
    status: SweepStatus,
}

/// Why the ladder ends before a step was measured, and how the sweep ends.
struct EarlyEnd {
    reason: String,
    status: SweepStatus,
}

/// Runs the ladder's steps in order, storing and reporting each, until the
/// last step, a hard limit, a cancel, the deadline or a step that cannot run.
async fn run_ladder(
    settings: &SweepSettings,
    prepared: &Prepared,
    recorder: &Recorder<'_>,
    progress: &mut impl FnMut(&StepReport),
) -> Result<LadderEnd, SweepError> {
    let loads = settings.ladder.loads();
    let mut end = LadderEnd {
        steps: Vec::new(),
        stop_reason: None,
        status: SweepStatus::Completed,
    };
    let mut next_seq: u64 = 0;
    let deadline = settings
        .max_duration
        .map(|d| tokio::time::Instant::now() + d);
    for (index, load) in loads.iter().enumerate() {
        let measured =
            measure_step(settings, prepared, index, *load, deadline, &mut next_seq).await;
        let mut report = match measured {
            Ok(report) => report,
            Err(early) => {
                end.stop_reason = Some(early.reason);
                end.status = early.status;
                break;
            }
        };
        report.index = index;
        recorder.step(settings, &mut report).await?;
        progress(&report);
        // Its requests are stored (as the step's probes) and summarised in
        // the run: a sweep holds one step's records at a time, never the
        // whole ladder's.
        report.run.records = Vec::new();
        let stop = stop_check(&report.step, &settings.stop);
        end.steps.push(report);
        if let Some(why) = stop {
            // A limit passed on the last step ends nothing early.
            if index + 1 < loads.len() {
                end.stop_reason = Some(why);
                end.status = SweepStatus::Stopped;
            }
            break;
        }
    }
    Ok(end)
}

/// One step, raced against the sweep's cancel handle and its deadline.
async fn measure_step(
    settings: &SweepSettings,
    prepared: &Prepared,
    index: usize,
    load: Load,
    deadline: Option<tokio::time::Instant>,
    next_seq: &mut u64,
) -> Result<StepReport, EarlyEnd> {
    let step = run_step(settings, prepared, load, next_seq);
    let measured = tokio::select! {
        measured = step => measured,
        () = settings.cancel.cancelled() => {
            // Dropping the step aborts its requests.
            return Err(EarlyEnd {
                reason: format!("cancelled during step {index} ({load})"),
                status: SweepStatus::Cancelled,
            });
        }
        () = sleep_until_deadline(deadline) => {
            return Err(EarlyEnd {
                reason: format!(
                    "the sweep ran past its {} limit (max_sweep_duration) during step {index} ({load})",
                    humantime::format_duration(settings.max_duration.unwrap_or_default())
                ),
                status: SweepStatus::Stopped,
            });
        }
    };
    // Keep what was measured: the sweep ends as failed with the reason, the
    // steps so far are stored and judged.
    measured.map_err(|err| EarlyEnd {
        reason: format!("step {index} ({load}) could not run: {err}"),
        status: SweepStatus::Failed,
    })
}

/// The verdict on the measured steps and its summary in words, led by why
/// the sweep stopped early if it did.
fn judge(
    settings: &SweepSettings,
    card: &ExperimentCard,
    steps: &[StepReport],
    stop_reason: Option<&str>,
) -> (SweepVerdict, Vec<String>) {
    let results: Vec<StepResult> = steps.iter().map(|s| s.step.clone()).collect();
    let verdict = analyze_sweep(
        &results,
        &settings.objectives,
        &workload_hints(settings, card),
        &settings.analysis,
    );
    let mut summary = summary_lines(&verdict);
    if let Some(why) = stop_reason {
        summary.insert(0, format!("Stopped early: {why}."));
    }
    (verdict, summary)
}

/// What the analysis should know about the prompts the sweep sent and the
/// server's capacity its card recorded.
pub fn workload_hints(settings: &SweepSettings, card: &ExperimentCard) -> WorkloadHints {
    WorkloadHints {
        capacity: EngineCapacity::from_card(card),
        // A conversation resends its history: a prefix the cache should hit
        // (so a server with caching off is diagnosed as such).
        shared_prefix: matches!(settings.prompt, PromptKind::SharedPrefix { .. })
            || settings.conversation.is_some(),
        expected_prefix_hit_rate: match settings.prompt {
            PromptKind::SharedPrefix { hit_ratio } => Some(hit_ratio),
            _ => None,
        },
        input_tokens: Some(u64::from(settings.shape.input_tokens)),
        output_tokens: Some(u64::from(settings.shape.output_tokens)),
    }
}

/// Waits until `deadline`, or forever without one.
async fn sleep_until_deadline(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Refuses a shape that does not fit the model's context before any request.
fn check_context(shape: &Shape, max_context_len: Option<u64>) -> Result<(), SweepError> {
    let needed = u64::from(shape.input_tokens) + u64::from(shape.output_tokens);
    match max_context_len {
        Some(context) if needed > context => Err(SweepError::Settings(format!(
            "shape: {shape} needs {needed} tokens of context, more than the model's \
             context length of {context} (max_model_len)"
        ))),
        _ => Ok(()),
    }
}

/// The hard limits, checked after each step.
fn stop_check(step: &StepResult, limits: &StopLimits) -> Option<String> {
    let error_rate = step.effective_error_rate();
    if error_rate > limits.max_error_rate {
        return Some(format!(
            "error rate {:.1} % at {} passed the hard limit of {:.1} %",
            error_rate * 100.0,
            step.load,
            limits.max_error_rate * 100.0
        ));
    }
    if let (Some(p95), Some(limit)) = (step.ttft.p95, limits.ttft_p95) {
        if p95 > limit.as_secs_f64() {
            return Some(format!(
                "p95 TTFT {:.2} s at {} passed the hard limit of {:.2} s",
                p95,
                step.load,
                limit.as_secs_f64()
            ));
        }
    }
    None
}

/// Measured requests of a step: the per-step minimum, or — in a closed
/// loop — enough for every slot to finish `requests_per_slot` of them,
/// whichever is more. An open-loop step has no slots to fill: its arrivals
/// do not wait for answers, and the minimum duration sets its length.
fn step_requests(settings: &SweepSettings, load: Load) -> u64 {
    let per_slot = match load {
        Load::Concurrency(c) => u64::from(c).saturating_mul(settings.requests_per_slot),
        Load::RequestRate(_) => 0,
    };
    settings.requests_per_step.max(per_slot)
}

fn default_warmup(load: Load) -> u64 {
    match load {
        Load::Concurrency(c) => u64::from(c),
        Load::RequestRate(r) => (r.ceil() as u64).max(1),
    }
}

/// One step: warm-up and measured requests under one load, with the scraper
/// running alongside.
async fn run_step(
    settings: &SweepSettings,
    prepared: &Prepared,
    load: Load,
    next_seq: &mut u64,
) -> Result<StepReport, RunError> {
    let config = step_config(settings, load, *next_seq);
    let scraper = Scraper::start(
        prepared.http.clone(),
        prepared.metrics_url.clone(),
        settings.gpu_url.clone(),
        settings.scrape_interval,
    )
    .await;
    let step_start_ms = now_ms();
    let result = match (settings.conversation, load) {
        (Some(workload), Load::Concurrency(sessions)) => {
            let step = ConversationStep {
                settings,
                workload,
                client: prepared.runner.client.config().clone(),
                model: prepared.model.clone(),
                sessions,
                config: config.clone(),
            };
            *next_seq += 1;
            run_conversation_step(&prepared.runner.thread, step).await
        }
        _ => {
            run_long_enough(
                settings,
                &prepared.runner,
                &config,
                &prepared.workload,
                next_seq,
            )
            .await
        }
    };
    let end_ms = now_ms();
    let scraped = scraper.finish().await;
    let run = result?;

    let (start_ms, load_end_ms) = measured_window(&run, step_start_ms, end_ms);
    let evidence = evidence_for_window(&scraped, start_ms, load_end_ms, end_ms);
    let scrapes_in_window = scraped
        .engine
        .iter()
        .filter(|s| s.ts_ms >= start_ms && s.ts_ms <= end_ms)
        .count();
    let mut step = step_result(load, start_ms, end_ms, &run, evidence);
    add_breakdown_and_hygiene(settings, &mut step, &run, &scraped);
    Ok(StepReport {
        index: 0,
        step,
        run,
        scrape_failures: scraped.failures,
        scrapes_in_window,
        stored_id: None,
    })
}

/// The probe run of one step at `load`, its prompts seeded from `seq`.
fn step_config(settings: &SweepSettings, load: Load, seq: u64) -> RunConfig {
    let run_load = match load {
        Load::Concurrency(c) => llmwatch_probe::Load::Concurrency { concurrency: c },
        Load::RequestRate(r) => llmwatch_probe::Load::Rate {
            per_second: r,
            burstiness: settings.burstiness,
            max_concurrency: Some(settings.max_concurrency),
        },
    };
    RunConfig {
        load: run_load,
        bound: Bound::Requests(step_requests(settings, load)),
        warmup_requests: settings
            .warmup_requests
            .unwrap_or_else(|| default_warmup(load)),
        objectives: probe_objectives(&settings.objectives),
        limits: settings.self_check,
        seed: settings.seed.wrapping_add(seq),
    }
}

/// Runs `first`, then — whichever ends later — tops it up with a
/// duration-bounded run at the same load when the request count was reached
/// before the minimum duration, unless the step is already failing (more
/// load on a failing server tells nothing new).
async fn run_long_enough(
    settings: &SweepSettings,
    runner: &Runner,
    first: &RunConfig,
    workload: &Arc<Workload>,
    next_seq: &mut u64,
) -> Result<RunResult, RunError> {
    let result = run_counted(runner, first.clone(), workload, next_seq).await;
    let Ok(r1) = &result else {
        return result;
    };
    let elapsed = Duration::from_secs_f64(r1.duration_s.max(0.0));
    let failing = r1.error_rate > settings.stop.max_error_rate;
    if elapsed >= settings.min_step_duration || failing {
        return result;
    }
    let second = RunConfig {
        bound: Bound::Duration(settings.min_step_duration - elapsed),
        warmup_requests: 0,
        seed: first.seed.wrapping_add(1),
        ..first.clone()
    };
    let r2 = run_counted(runner, second, workload, next_seq).await;
    r2.map(|r2| merge_runs(first, r1, r2))
}

/// The step's window: it starts at the first measured request (after the
/// warm-up), and the load was applied until the last measured send; both
/// kept inside the step's wall-clock bounds. Returns (start, load end).
fn measured_window(run: &RunResult, step_start_ms: i64, end_ms: i64) -> (i64, i64) {
    let sends: Vec<i64> = run
        .records
        .iter()
        .filter_map(|r| i64::try_from(r.wall_sent_unix_ms).ok())
        .filter(|ms| *ms > 0)
        .collect();
    let start_ms = sends
        .iter()
        .copied()
        .min()
        .unwrap_or(step_start_ms)
        .clamp(step_start_ms, end_ms);
    let load_end_ms = sends
        .iter()
        .copied()
        .max()
        .unwrap_or(end_ms)
        .clamp(start_ms, end_ms);
    (start_ms, load_end_ms)
}

/// Adds the server/client latency breakdown (or why there is none) and the
/// prefix-cache hygiene check to a measured step.
fn add_breakdown_and_hygiene(
    settings: &SweepSettings,
    step: &mut StepResult,
    run: &RunResult,
    scraped: &Scraped,
) {
    step.server.economics = step_economics(
        step.server.gpu_power_w_mean,
        step.server.gpu_count,
        step.output_token_throughput,
        &settings.price,
    );
    // The server's own timing of these very requests beats its histograms'
    // means over the window (which may hold other traffic).
    let breakdown = breakdown_by_server_timing(step, run).unwrap_or_else(|| {
        latency_breakdown(
            &step.server.phases,
            &client_means(run),
            has_phase_histograms(scraped),
        )
    });
    record_breakdown(step, breakdown);
    step.cache_contaminated = intended_hit_ratio(settings).and_then(|intended| {
        if run.cached_tokens_unreported_by_all() {
            // No per-request cached tokens: the server's own counters over
            // the step's window judge instead.
            step.server
                .prefix_cache_hit_rate
                .and_then(|rate| cache_hygiene_from_counters(intended, rate))
        } else {
            cache_hygiene(intended, run.total_input_tokens, run.total_cached_tokens)
        }
    });
}

/// The card's prompt field: the prompt kind, or the conversation workload
/// (two sweeps that differ in it differ in what they sent).
fn prompt_kind(settings: &SweepSettings) -> String {
    if let Some(mix) = &settings.observed {
        return format!("lengths {}", mix.source);
    }
    match settings.conversation {
        Some(workload) => format!("{} ({workload})", settings.prompt.label()),
        None => settings.prompt.label(),
    }
}

/// The user's card fields, with the configured prices (the cost per token
/// of each step depends on them, so the card says what they were).
fn user_card_fields(settings: &SweepSettings) -> Vec<(String, String)> {
    let mut fields = settings.card.clone();
    for (key, price) in [
        ("price_per_gpu_hour", settings.price.per_gpu_hour),
        ("price_per_kwh", settings.price.per_kwh),
    ] {
        if let Some(price) = price {
            if !fields.iter().any(|(k, _)| k == key) {
                fields.push((key.to_string(), format!("${price}")));
            }
        }
    }
    fields
}

/// Puts a step's latency breakdown, or why it has none, on its evidence.
pub(crate) fn record_breakdown(
    step: &mut StepResult,
    breakdown: Result<LatencyBreakdown, NoBreakdown>,
) {
    let (breakdown, missing) = match breakdown {
        Ok(breakdown) => (Some(breakdown), None),
        Err(why) => (None, Some(why.to_string())),
    };
    step.server.latency_breakdown = breakdown;
    step.server.latency_breakdown_missing = missing;
}

fn client_means(run: &RunResult) -> ClientMeans {
    ClientMeans {
        ttft_s: run.ttft_ms.mean.map(|ms| ms / 1000.0),
        e2e_s: run.e2e_ms.mean.map(|ms| ms / 1000.0),
    }
}

/// The step's latency breakdown by the server's own timing of its
/// requests, where it timed every successful one; a queue it does not time
/// (llama-server) read from its waiting gauge over the step.
pub(crate) fn breakdown_by_server_timing(
    step: &StepResult,
    run: &RunResult,
) -> Option<Result<LatencyBreakdown, NoBreakdown>> {
    if run.successful == 0 || run.server_timed_requests < run.successful {
        return None;
    }
    let s = |ms: Option<f64>| ms.map(|v| v / 1000.0);
    let phases = PerRequestPhases {
        queue_s: s(run.server_queue_ms.mean),
        prefill_s: s(run.server_prefill_ms.mean)?,
        decode_s: s(run.server_decode_ms.mean),
    };
    let waiting = step
        .server
        .requests_waiting_mean
        .map(|waiting_mean| WaitingGauge {
            waiting_mean,
            requests_per_s: step.request_throughput,
        });
    Some(per_request_breakdown(&phases, &client_means(run), waiting))
}

/// Where a sweep's steps run.
struct Runner {
    thread: MeasuringThread,
    /// Used on `thread` only.
    client: ProbeClient,
}

/// One run on the measuring thread, its requests numbered from `next_seq`
/// on (prompts never repeat across a sweep); `next_seq` moves past the
/// numbers it used.
async fn run_counted(
    runner: &Runner,
    config: RunConfig,
    workload: &Arc<Workload>,
    next_seq: &mut u64,
) -> Result<RunResult, RunError> {
    let base = *next_seq;
    let used = Arc::new(AtomicU64::new(0));
    let (counter, workload) = (used.clone(), workload.clone());
    let result = runner
        .thread
        .run(runner.client.clone(), config, move |i| {
            counter.fetch_max(i + 1, Ordering::Relaxed);
            workload.request(base + i)
        })
        .await;
    *next_seq = base + used.load(Ordering::Relaxed);
    result
}

/// One run from two back-to-back runs at the same load: their records
/// together over their summed wall time; the self-check takes the worse of
/// the two for CPU and scheduler lag (dispatch lag is recomputed from the
/// records).
fn merge_runs(config: &RunConfig, a: &RunResult, b: RunResult) -> RunResult {
    let wall = Duration::from_secs_f64((a.duration_s + b.duration_s).max(0.0));
    let max = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let (x, y) = (&a.self_check, &b.self_check);
    let sched_p99 = max(x.scheduler_lag_p99_ms, y.scheduler_lag_p99_ms);
    let sched_max = max(x.scheduler_lag_max_ms, y.scheduler_lag_max_ms);
    let monitored = Monitored {
        cpu_cores: max(x.cpu_cores, y.cpu_cores),
        cpu_measure: y.cpu_measure,
        scheduler_lag_ms: sched_p99.map(|p| (p, sched_max.unwrap_or(p))),
        host_steal_pct: max(x.host_steal_pct, y.host_steal_pct),
    };
    let mut records = a.records.clone();
    records.extend(b.records);
    RunResult::from_records(config, a.warmup_requests, records, wall, &monitored)
}

fn probe_objectives(o: &Objectives) -> llmwatch_probe::Objectives {
    let d = |s: Option<f64>| {
        s.filter(|v| v.is_finite() && *v >= 0.0)
            .map(Duration::from_secs_f64)
    };
    llmwatch_probe::Objectives {
        ttft_p95: d(o.ttft_p95),
        itl_p95: d(o.itl_p95),
        e2e_p95: d(o.e2e_p95),
        ..llmwatch_probe::Objectives::default()
    }
}

/// The prefix-cache hit ratio a sweep's prompts should give: 0 for random
/// and RAG prompts, the chosen ratio for shared-prefix; `None` (no check)
/// when prompts are reused on purpose.
fn intended_hit_ratio(settings: &SweepSettings) -> Option<f64> {
    // A conversation hits its own earlier turns by design.
    (!settings.reuse_prompts && settings.conversation.is_none())
        .then(|| settings.prompt.intended_hit_ratio())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_check_names_the_limit() {
        let mut step = StepResult::at(Load::Concurrency(4));
        step.requests_ok = 5;
        step.requests_failed = 5;
        step.error_rate = 0.5;
        let why = stop_check(&step, &StopLimits::default()).expect("50 % errors");
        assert!(why.contains("error rate"), "{why}");
        step.error_rate = 0.0;
        step.requests_failed = 0;
        step.ttft.p95 = Some(31.0);
        let why = stop_check(&step, &StopLimits::default()).expect("TTFT");
        assert!(why.contains("TTFT"), "{why}");
        step.ttft.p95 = Some(1.0);
        assert_eq!(stop_check(&step, &StopLimits::default()), None);
    }

    /// The daemon runs sweeps on its own tasks: the future must be `Send`.
    #[test]
    fn run_sweep_future_is_send() {
        fn is_send<T: Send>(_: &T) {}
        let settings = SweepSettings::new("http://127.0.0.1:1");
        let future = run_sweep(settings, None, |_: &StepReport| {});
        is_send(&future);
    }
}
