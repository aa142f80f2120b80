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
//! `scrape_interval` during the step, and the step's [`ServerEvidence`] is
//! read from the scrapes of its window.
//!
//! Production safety: a sweep loads a server hard, so its ladder is capped
//! ([`DEFAULT_MAX_CONCURRENCY`], raised only on purpose) and it stops early
//! when the error rate or the p95 TTFT passes a hard limit, keeping (and
//! storing) every step measured so far with the reason it stopped.
//!
//! Entry points: [`run_sweep`] (the daemon and the CLI), [`compare_sweeps`],
//! [`cli::run`] (`llmwatch sweep`).

pub mod card;
pub mod evidence;
pub mod schedule;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmwatch_core::analysis::{
    analyze_sweep, cache_hygiene, cache_hygiene_from_counters, compare_cards, latency_breakdown,
    summary_lines, AnalysisConfig, CardDiff, ClientMeans, ExperimentCard, Load, Objectives,
    Quantiles, ServerEvidence, StepResult, SweepVerdict, WorkloadHints,
};
use llmwatch_probe::{
    Api, Bound, Calibrator, ClientConfig, ClientError, MeasuringThread, Monitored, ProbeClient,
    PromptKind, RunConfig, RunError, RunResult, Secret, SelfCheckLimits, Shape, Spin, Summary,
    Workload,
};
use llmwatch_store::{
    NewSweep, Store, StoreError, SweepEnd, SweepRow, SweepStatus, SweepStepRow, TargetKind,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::runners::canary::{discover_model, probe_row};
use crate::sources::scrape::{now_ms, scrape_client};
use llmwatch_config::join_url;

use self::card::{card_from_json, card_to_json, collect_card, CardFieldError, CardSettings};
use self::evidence::{evidence_for_window, has_phase_histograms, Scraper};

/// The concurrency ladder of DESIGN.md's method.
pub const DEFAULT_CONCURRENCY_LADDER: &[u32] = &[1, 2, 4, 8, 16, 32, 64];
/// The highest load a sweep may apply unless raised on purpose: a sweep is
/// meant to find a knee, not to knock a production server over.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 64;
/// Measured requests per step, at least: enough for a p95 that means
/// something (19 of 20 below it).
pub const DEFAULT_REQUESTS_PER_STEP: u64 = 100;
/// Measured requests per concurrency slot, at least (see
/// [`SweepSettings::requests_per_slot`]).
pub const DEFAULT_REQUESTS_PER_SLOT: u64 = 4;
/// Each step lasts at least this long, so several scrapes land inside it.
pub const DEFAULT_MIN_STEP_DURATION: Duration = Duration::from_secs(10);
/// Scrape interval during a step: vLLM updates its gauges every engine step,
/// so one second resolves a 10 s step into ten readings.
pub const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
/// Hard stop: a step with more failed requests than this fraction ends the
/// sweep (the server is failing, more load only hurts it).
pub const DEFAULT_STOP_ERROR_RATE: f64 = 0.05;
/// Hard stop: a step whose p95 TTFT passes this ends the sweep (far past any
/// chat objective; higher steps would only queue longer).
pub const DEFAULT_STOP_TTFT_P95: Duration = Duration::from_secs(30);

/// The loads of a sweep, lowest first; one kind per sweep, so steps can be
/// compared with each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ladder {
    /// Closed loop: this many requests in flight per step.
    Concurrency(Vec<u32>),
    /// Open loop: requests per second per step (Poisson arrivals by
    /// default), in-flight requests capped by the sweep's concurrency cap.
    Rate(Vec<f64>),
}

impl Ladder {
    /// The loads in step order.
    pub fn loads(&self) -> Vec<Load> {
        match self {
            Ladder::Concurrency(c) => c.iter().map(|c| Load::Concurrency(*c)).collect(),
            Ladder::Rate(r) => r.iter().map(|r| Load::RequestRate(*r)).collect(),
        }
    }

    /// Parses `1,2,4,8` (concurrency) or rates like `0.5,1,2`.
    pub fn parse_concurrency(text: &str) -> Result<Ladder, SweepError> {
        let values = split(text)
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| SweepError::Ladder(format!("{v:?} is not a whole concurrency")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        Ok(Ladder::Concurrency(values))
    }

    /// Parses a request-rate ramp, e.g. `1,2,4,8` requests per second.
    pub fn parse_rate(text: &str) -> Result<Ladder, SweepError> {
        let values = split(text)
            .map(|v| {
                v.parse::<f64>()
                    .map_err(|_| SweepError::Ladder(format!("{v:?} is not a request rate")))
            })
            .collect::<Result<Vec<f64>, _>>()?;
        Ok(Ladder::Rate(values))
    }
}

fn split(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|v| !v.is_empty())
}

/// When a sweep gives up early.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StopLimits {
    /// A step whose error rate passes this ends the sweep.
    pub max_error_rate: f64,
    /// A step whose client p95 TTFT passes this ends the sweep.
    pub ttft_p95: Option<Duration>,
}

impl Default for StopLimits {
    fn default() -> Self {
        StopLimits {
            max_error_rate: DEFAULT_STOP_ERROR_RATE,
            ttft_p95: Some(DEFAULT_STOP_TTFT_P95),
        }
    }
}

/// Everything a sweep needs. [`SweepSettings::new`] gives DESIGN.md's
/// defaults for a URL.
#[derive(Debug, Clone)]
pub struct SweepSettings {
    /// The target's base URL (`http://host:8000`, a trailing `/v1` is fine).
    pub url: String,
    /// The daemon's name for the target, if it has one: the step probes are
    /// stored under it (without a name they are not stored, so a one-off
    /// sweep does not invent a target on the status page).
    pub target_name: Option<String>,
    /// `/metrics` URL; default `<url>/metrics`.
    pub metrics_url: Option<String>,
    /// A dcgm-exporter page for the target's GPUs.
    pub gpu_url: Option<String>,
    pub api_key: Option<Secret>,
    /// `None`: the first model of `/v1/models`.
    pub model: Option<String>,
    pub api: Api,
    pub shape: Shape,
    pub prompt: PromptKind,
    pub temperature: f32,
    pub ladder: Ladder,
    /// The highest concurrency (and, for a rate ladder, the most requests in
    /// flight) the sweep may use; a ladder above it is refused.
    pub max_concurrency: u32,
    pub requests_per_step: u64,
    /// Measured requests per concurrency slot, at least: a step also sends
    /// `requests_per_slot × concurrency` requests, because in a closed loop
    /// each client must finish several requests before the step is in steady
    /// state — with fewer, the warm-up ramp and the drain at the end (when
    /// slots empty one by one) would be most of what it measured. Closed
    /// loop only: a rate step's length comes from `min_step_duration`.
    pub requests_per_slot: u64,
    pub min_step_duration: Duration,
    /// Warm-up requests per step, left out of its statistics; `None`: one
    /// per concurrency slot (one second of arrivals for a rate).
    pub warmup_requests: Option<u64>,
    /// Gamma shape of the open-loop arrivals (1 = Poisson).
    pub burstiness: f64,
    pub objectives: Objectives,
    pub stop: StopLimits,
    pub self_check: SelfCheckLimits,
    pub scrape_interval: Duration,
    pub analysis: AnalysisConfig,
    /// `key=value` fields for the experiment card (card field names set the
    /// field, anything else is a user field).
    pub card: Vec<(String, String)>,
    /// Seeds arrivals and prompt bodies; nonces stay unique per sweep.
    pub seed: u64,
    /// Send the same prompts as earlier sweeps with this seed (deliberate
    /// prefix-cache experiments).
    pub reuse_prompts: bool,
    /// Deadline for one request (connect to end of stream).
    pub request_timeout: Duration,
    /// Whether the measuring thread busy-polls during steps (see
    /// [`llmwatch_probe::measure`]).
    pub spin: Spin,
    /// The longest the whole sweep may run; past it, the step in flight is
    /// aborted and the sweep ends `stopped` with what it measured.
    pub max_duration: Option<Duration>,
    /// Lets another task cancel the sweep (the API, the page, shutdown).
    pub cancel: SweepCancel,
}

/// A handle that cancels a running sweep: the step in flight is dropped,
/// which aborts its requests, and the sweep ends `cancelled` with the steps
/// it measured. Clones share one state.
#[derive(Debug, Clone)]
pub struct SweepCancel {
    state: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for SweepCancel {
    fn default() -> Self {
        SweepCancel {
            state: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }
}

impl SweepCancel {
    pub fn cancel(&self) {
        self.state.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.state.borrow()
    }

    /// Resolves once the sweep is cancelled.
    pub async fn cancelled(&self) {
        let mut receiver = self.state.subscribe();
        // Err: the sender is gone, which cannot happen while `self` holds it.
        let _ = receiver.wait_for(|cancelled| *cancelled).await;
    }
}

impl SweepSettings {
    /// DESIGN.md's defaults: chat API, 512×128 random prompts, concurrency
    /// 1…64, 100 requests and 10 s per step, p95 TTFT ≤ 1 s and p95 ITL ≤
    /// 50 ms objectives.
    pub fn new(url: impl Into<String>) -> SweepSettings {
        SweepSettings {
            url: url.into(),
            target_name: None,
            metrics_url: None,
            gpu_url: None,
            api_key: None,
            model: None,
            api: Api::Chat,
            shape: Shape {
                input_tokens: 512,
                output_tokens: 128,
            },
            prompt: PromptKind::Random,
            temperature: 0.0,
            ladder: Ladder::Concurrency(DEFAULT_CONCURRENCY_LADDER.to_vec()),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            requests_per_step: DEFAULT_REQUESTS_PER_STEP,
            requests_per_slot: DEFAULT_REQUESTS_PER_SLOT,
            min_step_duration: DEFAULT_MIN_STEP_DURATION,
            warmup_requests: None,
            burstiness: 1.0,
            objectives: Objectives {
                ttft_p95: Some(1.0),
                itl_p95: Some(0.050),
                ..Objectives::default()
            },
            stop: StopLimits::default(),
            self_check: SelfCheckLimits::default(),
            scrape_interval: DEFAULT_SCRAPE_INTERVAL,
            analysis: AnalysisConfig::default(),
            card: Vec::new(),
            seed: 0,
            reuse_prompts: false,
            request_timeout: Duration::from_secs(600),
            spin: Spin::Auto,
            max_duration: None,
            cancel: SweepCancel::default(),
        }
    }

    fn metrics_url(&self) -> String {
        self.metrics_url
            .clone()
            .unwrap_or_else(|| default_metrics_url(&self.url))
    }

    /// Checks the ladder against the cap and every number for sense, so a
    /// sweep is refused before it sends anything.
    pub fn validate(&self) -> Result<(), SweepError> {
        let loads = self.ladder.loads();
        if loads.is_empty() {
            return Err(SweepError::Ladder("the ladder has no steps".into()));
        }
        if self.max_concurrency == 0 {
            return Err(SweepError::Ladder(
                "--max-concurrency must be at least 1".into(),
            ));
        }
        for load in &loads {
            match *load {
                Load::Concurrency(0) => {
                    return Err(SweepError::Ladder(
                        "a concurrency of 0 sends nothing".into(),
                    ))
                }
                Load::Concurrency(c) if c > self.max_concurrency => {
                    return Err(SweepError::AboveCap {
                        load: c,
                        cap: self.max_concurrency,
                    })
                }
                Load::RequestRate(r) if !(r.is_finite() && r > 0.0) => {
                    return Err(SweepError::Ladder(format!(
                        "request rate {r} is not a positive number"
                    )))
                }
                _ => {}
            }
        }
        if self.requests_per_step == 0 {
            return Err(SweepError::Settings(
                "requests per step must be at least 1".into(),
            ));
        }
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            return Err(SweepError::Settings(format!(
                "burstiness must be a positive number, got {}",
                self.burstiness
            )));
        }
        if !(self.stop.max_error_rate.is_finite()
            && (0.0..=1.0).contains(&self.stop.max_error_rate))
        {
            return Err(SweepError::Settings(format!(
                "the stop error rate must be within 0..1, got {}",
                self.stop.max_error_rate
            )));
        }
        if self.scrape_interval.is_zero() {
            return Err(SweepError::Settings(
                "the scrape interval must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The settings as stored with the sweep (no secrets).
    pub fn to_json(&self) -> Value {
        json!({
            "url": self.url,
            "target_name": self.target_name,
            "metrics_url": self.metrics_url(),
            "gpu_url": self.gpu_url,
            "model": self.model,
            "api": self.api,
            "shape": self.shape.to_string(),
            "prompt": self.prompt.label(),
            "temperature": self.temperature,
            "ladder": self.ladder,
            "max_concurrency": self.max_concurrency,
            "requests_per_step": self.requests_per_step,
            "requests_per_slot": self.requests_per_slot,
            "min_step_duration_s": self.min_step_duration.as_secs_f64(),
            "warmup_requests": self.warmup_requests,
            "burstiness": self.burstiness,
            "objectives": {
                "ttft_p95_s": self.objectives.ttft_p95,
                "itl_p95_s": self.objectives.itl_p95,
                "e2e_p95_s": self.objectives.e2e_p95,
                "max_error_rate": self.objectives.max_error_rate,
            },
            "stop": {
                "max_error_rate": self.stop.max_error_rate,
                "ttft_p95_s": self.stop.ttft_p95.map(|d| d.as_secs_f64()),
            },
            "self_check": self.self_check,
            "scrape_interval_s": self.scrape_interval.as_secs_f64(),
            "seed": self.seed,
            "reuse_prompts": self.reuse_prompts,
            "spin": self.spin,
        })
    }
}

/// Why a sweep could not run (a sweep that *stops early* is not an error:
/// its report says why it stopped).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("invalid ladder: {0}")]
    Ladder(String),
    #[error(
        "concurrency {load} is above the sweep cap of {cap}: a sweep loads the server hard, so \
         raise the cap on purpose (--max-concurrency {load}) if you mean it"
    )]
    AboveCap { load: u32, cap: u32 },
    #[error("invalid settings: {0}")]
    Settings(String),
    #[error(transparent)]
    Card(#[from] CardFieldError),
    #[error("probe client: {0}")]
    Client(#[from] ClientError),
    #[error("cannot start the measuring thread: {0}")]
    MeasuringThread(#[from] std::io::Error),
    #[error("cannot build the scrape client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("no model given and none discovered: {0}")]
    Model(String),
    #[error("a step could not run: {0}")]
    Run(#[from] RunError),
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    #[error("sweep {0} not found")]
    NotFound(i64),
    #[error("stored sweep {id} is unreadable: {why}")]
    Corrupt { id: i64, why: String },
}

/// One measured step, as handed to the progress callback and kept in the
/// report.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Position in the ladder, from 0.
    pub index: usize,
    /// The step as the analysis sees it (client numbers in seconds plus the
    /// server evidence of its window).
    pub step: StepResult,
    /// The probe run, with its records.
    pub run: RunResult,
    /// Scrapes of this step that failed (evidence from them is missing).
    pub scrape_failures: Vec<String>,
    /// How many scrapes of the target fell inside the step's window.
    pub scrapes_in_window: usize,
    /// The step's row id in the store (also the `run_id` of its probes).
    pub stored_id: Option<i64>,
}

/// Everything a sweep found.
#[derive(Debug, Clone)]
pub struct SweepReport {
    /// The sweep's id in the store, when stored.
    pub sweep_id: Option<i64>,
    pub url: String,
    pub model: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub card: ExperimentCard,
    pub steps: Vec<StepReport>,
    pub verdict: SweepVerdict,
    /// The verdict in words ([`summary_lines`]).
    pub summary: Vec<String>,
    /// Why the sweep stopped before the end of its ladder.
    pub stop_reason: Option<String>,
    pub status: SweepStatus,
    pub settings_json: Value,
}

impl SweepReport {
    /// The step results in order, as the analysis takes them.
    pub fn step_results(&self) -> Vec<StepResult> {
        self.steps.iter().map(|s| s.step.clone()).collect()
    }

    /// The report as JSON (`--json`): settings, card, steps with their run
    /// summaries and evidence, the verdict.
    pub fn to_json(&self) -> Value {
        json!({
            "sweep_id": self.sweep_id,
            "url": self.url,
            "model": self.model,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "settings": self.settings_json,
            "card": card_to_json(&self.card),
            "steps": self.steps.iter().map(|s| json!({
                "index": s.index,
                "step": step_to_json(&s.step),
                "run": run_summary_json(&s.run),
                "scrapes_in_window": s.scrapes_in_window,
                "scrape_failures": s.scrape_failures,
            })).collect::<Vec<_>>(),
            "verdict": verdict_to_json(&self.verdict, &self.summary),
        })
    }
}

/// Runs a sweep: validates the settings, fills the experiment card, runs
/// each step with its scrapes, stops early past a hard limit, judges the
/// steps and (with a store) records the sweep as it goes — the sweep row at
/// the start, each step when measured, the verdict at the end — so an
/// interrupted sweep keeps what it measured. `progress` is called after each
/// step is measured (and stored).
pub async fn run_sweep(
    settings: SweepSettings,
    store: Option<&Store>,
    mut progress: impl FnMut(&StepReport),
) -> Result<SweepReport, SweepError> {
    settings.validate()?;
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
    let card = collect_card(
        &http,
        &settings.url,
        &metrics_url,
        settings.gpu_url.as_deref(),
        &CardSettings {
            model: &model,
            input_tokens: settings.shape.input_tokens,
            output_tokens: settings.shape.output_tokens,
            prompt_kind: settings.prompt.label(),
            temperature: settings.temperature,
            user: &settings.card,
        },
    )
    .await?;
    check_context(&settings.shape, card.max_context_len)?;
    let calibrator = Calibrator::new();
    let mut workload = Workload::prepare(
        &client,
        &calibrator,
        settings.api,
        &model,
        settings.shape,
        settings.prompt,
        settings.seed,
    )
    .await;
    workload.temperature = settings.temperature;
    if settings.reuse_prompts {
        workload.reuse_prompts();
    }
    let workload = Arc::new(workload);

    let started_ms = now_ms();
    let settings_json = settings.to_json();
    let sweep_id = match store {
        Some(store) => Some(
            store
                .create_sweep(&NewSweep {
                    target_name: settings.target_name.clone(),
                    target_url: settings.url.clone(),
                    started_ms,
                    settings_json: settings_json.to_string(),
                    card_json: card_to_json(&card).to_string(),
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

    let loads = settings.ladder.loads();
    let mut steps: Vec<StepReport> = Vec::new();
    let mut stop_reason = None;
    let mut status = SweepStatus::Completed;
    let mut next_seq: u64 = 0;
    let deadline = settings
        .max_duration
        .map(|d| tokio::time::Instant::now() + d);
    for (index, load) in loads.iter().enumerate() {
        let step = run_step(
            &settings,
            &runner,
            &http,
            &workload,
            &metrics_url,
            *load,
            &mut next_seq,
        );
        let measured = tokio::select! {
            measured = step => measured,
            () = settings.cancel.cancelled() => {
                // Dropping the step aborts its requests.
                stop_reason = Some(format!("cancelled during step {index} ({load})"));
                status = SweepStatus::Cancelled;
                break;
            }
            () = sleep_until_deadline(deadline) => {
                stop_reason = Some(format!(
                    "the sweep ran past its {} limit (max_sweep_duration) during step {index} ({load})",
                    humantime::format_duration(settings.max_duration.unwrap_or_default())
                ));
                status = SweepStatus::Stopped;
                break;
            }
        };
        let mut report = match measured {
            Ok(step) => step,
            Err(err) => {
                // Keep what was measured: the sweep ends as failed with the
                // reason, the steps so far are stored and judged.
                stop_reason = Some(format!("step {index} ({load}) could not run: {err}"));
                status = SweepStatus::Failed;
                break;
            }
        };
        report.index = index;
        if let (Some(store), Some(sweep_id)) = (store, sweep_id) {
            let id = store.write_sweep_step(&step_row(sweep_id, &report)).await?;
            report.stored_id = Some(id);
            if let Some(target_id) = target_id {
                let shape = settings.shape.to_string();
                for record in &report.run.records {
                    store
                        .write_probe(&probe_row(target_id, Some(id), &shape, record))
                        .await?;
                }
            }
        }
        progress(&report);
        let stop = stop_check(&report.step, &settings.stop);
        steps.push(report);
        if let Some(why) = stop {
            if index + 1 < loads.len() {
                stop_reason = Some(why);
                status = SweepStatus::Stopped;
            }
            break;
        }
    }

    let results: Vec<StepResult> = steps.iter().map(|s| s.step.clone()).collect();
    let hints = WorkloadHints {
        shared_prefix: matches!(settings.prompt, PromptKind::SharedPrefix { .. }),
        expected_prefix_hit_rate: match settings.prompt {
            PromptKind::SharedPrefix { hit_ratio } => Some(hit_ratio),
            _ => None,
        },
        input_tokens: Some(u64::from(settings.shape.input_tokens)),
        output_tokens: Some(u64::from(settings.shape.output_tokens)),
    };
    let verdict = analyze_sweep(&results, &settings.objectives, &hints, &settings.analysis);
    let mut summary = summary_lines(&verdict);
    if let Some(why) = &stop_reason {
        summary.insert(0, format!("Stopped early: {why}."));
    }
    let ended_ms = now_ms();
    if let (Some(store), Some(id)) = (store, sweep_id) {
        store
            .finish_sweep(
                id,
                &SweepEnd {
                    ended_ms,
                    verdict_json: Some(verdict_to_json(&verdict, &summary).to_string()),
                    stop_reason: stop_reason.clone(),
                    status,
                },
            )
            .await?;
    }
    Ok(SweepReport {
        sweep_id,
        url: settings.url.clone(),
        model,
        started_ms,
        ended_ms,
        card,
        steps,
        verdict,
        summary,
        stop_reason,
        status,
        settings_json,
    })
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
    runner: &Runner,
    http: &reqwest::Client,
    workload: &Arc<Workload>,
    metrics_url: &str,
    load: Load,
    next_seq: &mut u64,
) -> Result<StepReport, RunError> {
    let run_load = match load {
        Load::Concurrency(c) => llmwatch_probe::Load::Concurrency { concurrency: c },
        Load::RequestRate(r) => llmwatch_probe::Load::Rate {
            per_second: r,
            burstiness: settings.burstiness,
            max_concurrency: Some(settings.max_concurrency),
        },
    };
    let first = RunConfig {
        load: run_load,
        bound: Bound::Requests(step_requests(settings, load)),
        warmup_requests: settings
            .warmup_requests
            .unwrap_or_else(|| default_warmup(load)),
        objectives: probe_objectives(&settings.objectives),
        limits: settings.self_check,
        seed: settings.seed.wrapping_add(*next_seq),
    };
    let scraper = Scraper::start(
        http.clone(),
        metrics_url.to_string(),
        settings.gpu_url.clone(),
        settings.scrape_interval,
    )
    .await;
    let step_start_ms = now_ms();
    let mut result = run_counted(runner, first.clone(), workload, next_seq).await;

    // Whichever ends later: top up with a duration-bounded run at the same
    // load when the request count was reached before the minimum duration —
    // unless the step is already failing (more load on a failing server
    // tells nothing new).
    if let Ok(r1) = &result {
        let elapsed = Duration::from_secs_f64(r1.duration_s.max(0.0));
        let failing = r1.error_rate > settings.stop.max_error_rate;
        if elapsed < settings.min_step_duration && !failing {
            let second = RunConfig {
                bound: Bound::Duration(settings.min_step_duration - elapsed),
                warmup_requests: 0,
                seed: first.seed.wrapping_add(1),
                ..first.clone()
            };
            let r2 = run_counted(runner, second, workload, next_seq).await;
            result = r2.map(|r2| merge_runs(&first, r1, r2));
        }
    }
    let end_ms = now_ms();
    let scraped = scraper.finish().await;
    let run = result?;

    // The window starts at the first measured request (after the warm-up);
    // the load was applied until the last measured send.
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
    let evidence = evidence_for_window(&scraped, start_ms, load_end_ms, end_ms);
    let scrapes_in_window = scraped
        .engine
        .iter()
        .filter(|s| s.ts_ms >= start_ms && s.ts_ms <= end_ms)
        .count();
    let mut step = step_result(load, start_ms, end_ms, &run, evidence);
    let client = ClientMeans {
        ttft_s: run.ttft_ms.mean.map(|ms| ms / 1000.0),
        e2e_s: run.e2e_ms.mean.map(|ms| ms / 1000.0),
    };
    match latency_breakdown(&step.server.phases, &client, has_phase_histograms(&scraped)) {
        Ok(breakdown) => step.server.latency_breakdown = Some(breakdown),
        Err(why) => step.server.latency_breakdown_missing = Some(why.to_string()),
    }
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
    Ok(StepReport {
        index: 0,
        step,
        run,
        scrape_failures: scraped.failures,
        scrapes_in_window,
        stored_id: None,
    })
}

/// A server's metrics page when none is configured: `/metrics` at its root
/// (the base URL may end in `/v1`).
pub fn default_metrics_url(base_url: &str) -> String {
    join_url(
        base_url.trim_end_matches('/').trim_end_matches("/v1"),
        "/metrics",
    )
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
    }
}

fn quantiles(ms: &Summary) -> Quantiles {
    let s = |v: Option<f64>| v.filter(|v| v.is_finite()).map(|v| v / 1000.0);
    Quantiles {
        p50: s(ms.p50),
        p95: s(ms.p95),
        p99: s(ms.p99),
    }
}

/// The analysis' view of one step: the run's numbers in seconds (latencies
/// from *sent*, as `vllm bench serve` reports them) and the evidence.
pub fn step_result(
    load: Load,
    start_ms: i64,
    end_ms: i64,
    run: &RunResult,
    server: ServerEvidence,
) -> StepResult {
    StepResult {
        load,
        start_unix_ms: start_ms,
        end_unix_ms: end_ms,
        requests_ok: run.successful,
        requests_failed: run.failed,
        wall_time_s: run.duration_s,
        request_throughput: run.request_throughput,
        output_token_throughput: run.output_throughput,
        ttft: quantiles(&run.ttft_ms),
        itl: quantiles(&run.itl_ms),
        tpot: quantiles(&run.tpot_ms),
        e2e: quantiles(&run.e2e_ms),
        error_rate: run.error_rate,
        client_bound: run
            .self_check
            .client_bound
            .then(|| run.self_check.reasons.join("; ")),
        cache_contaminated: None,
        server,
    }
}

/// The prefix-cache hit ratio a sweep's prompts should give: 0 for random
/// and RAG prompts, the chosen ratio for shared-prefix; `None` (no check)
/// when prompts are reused on purpose.
fn intended_hit_ratio(settings: &SweepSettings) -> Option<f64> {
    (!settings.reuse_prompts).then(|| settings.prompt.intended_hit_ratio())
}

/// The run's summary without its per-request records (those are stored as
/// probes).
fn run_summary_json(run: &RunResult) -> Value {
    let mut run = run.clone();
    run.records.clear();
    serde_json::to_value(&run).unwrap_or(Value::Null)
}

fn step_row(sweep_id: i64, report: &StepReport) -> SweepStepRow {
    let (kind, value) = match report.step.load {
        Load::Concurrency(c) => ("concurrency", f64::from(c)),
        Load::RequestRate(r) => ("rate", r),
    };
    SweepStepRow {
        sweep_id,
        step_index: i64::try_from(report.index).unwrap_or(i64::MAX),
        load_kind: kind.to_string(),
        load_value: value,
        start_ms: report.step.start_unix_ms,
        end_ms: report.step.end_unix_ms,
        run_json: run_summary_json(&report.run).to_string(),
        evidence_json: serde_json::to_string(&report.step.server)
            .unwrap_or_else(|_| "{}".to_string()),
    }
}

fn load_json(load: &Load) -> Value {
    match *load {
        Load::Concurrency(c) => json!({ "concurrency": c }),
        Load::RequestRate(r) => json!({ "rate": r }),
    }
}

fn q_json(q: &Quantiles) -> Value {
    json!({ "p50": q.p50, "p95": q.p95, "p99": q.p99 })
}

fn step_to_json(s: &StepResult) -> Value {
    json!({
        "load": load_json(&s.load),
        "start_ms": s.start_unix_ms,
        "end_ms": s.end_unix_ms,
        "requests_ok": s.requests_ok,
        "requests_failed": s.requests_failed,
        "wall_time_s": s.wall_time_s,
        "request_throughput": s.request_throughput,
        "output_token_throughput": s.output_token_throughput,
        "ttft_s": q_json(&s.ttft),
        "itl_s": q_json(&s.itl),
        "tpot_s": q_json(&s.tpot),
        "e2e_s": q_json(&s.e2e),
        "error_rate": s.error_rate,
        "client_bound": s.client_bound,
        "cache_contaminated": s.cache_contaminated,
        "server": &s.server,
    })
}

/// The verdict as stored: the headline numbers and every finding, plus the
/// summary in words. It can always be recomputed from the steps.
pub fn verdict_to_json(v: &SweepVerdict, summary: &[String]) -> Value {
    json!({
        "step_count": v.step_count,
        "usable_steps": v.usable_steps,
        "excluded_steps": v.excluded_steps.iter().map(|e| json!({
            "step": e.step, "load": load_json(&e.load), "reason": e.reason,
        })).collect::<Vec<_>>(),
        "saturation": v.saturation.as_ref().map(|s| json!({
            "step": s.step,
            "load": load_json(&s.load),
            "throughput": s.throughput,
            "unit": s.metric.unit(),
            "request_throughput": s.request_throughput,
            "output_token_throughput": s.output_token_throughput,
            "gain_per_doubling": s.gain_per_doubling,
            "latency_rise": s.latency_rise,
            "peak_step": s.peak_step,
            "peak_throughput": s.peak_throughput,
        })),
        "sustainable": v.sustainable.as_ref().map(|s| json!({
            "step": s.step,
            "load": load_json(&s.load),
            "request_throughput": s.request_throughput,
            "output_token_throughput": s.output_token_throughput,
            "ttft_p95_s": s.ttft_p95,
            "itl_p95_s": s.itl_p95,
            "error_rate": s.error_rate,
        })),
        "findings": v.findings.iter().map(|f| json!({
            "verdict": f.verdict.name(),
            "confidence": format!("{:?}", f.confidence).to_ascii_lowercase(),
            "evidence": f.evidence,
            "what_to_try": f.what_to_try,
            "step": f.step,
        })).collect::<Vec<_>>(),
        "summary": summary,
    })
}

/// A stored sweep read back: its row, card and steps.
#[derive(Debug, Clone)]
pub struct StoredSweep {
    pub row: SweepRow,
    pub card: ExperimentCard,
    pub steps: Vec<StepResult>,
    /// Each step's probe run summary (no records: those are probes) ...
    pub runs: Vec<RunResult>,
    /// ... and its row id, the `run_id` of its probes.
    pub step_ids: Vec<i64>,
}

/// Two sweeps side by side: both curves, the card fields that differ and
/// the warning when more than one changed.
#[derive(Debug, Clone)]
pub struct SweepComparison {
    pub a: StoredSweep,
    pub b: StoredSweep,
    pub diff: CardDiff,
}

/// Reads one stored sweep.
pub async fn load_sweep(store: &Store, id: i64) -> Result<StoredSweep, SweepError> {
    let row = store.sweep(id).await?.ok_or(SweepError::NotFound(id))?;
    let card_value: Value =
        serde_json::from_str(&row.card_json).map_err(|err| SweepError::Corrupt {
            id,
            why: format!("card: {err}"),
        })?;
    let card = card_from_json(&card_value);
    let mut steps = Vec::new();
    let mut runs = Vec::new();
    let mut step_ids = Vec::new();
    for (step_id, s) in store.sweep_steps_with_ids(id).await? {
        let corrupt = |why: String| SweepError::Corrupt { id, why };
        let load = match s.load_kind.as_str() {
            "concurrency" => Load::Concurrency(
                u32::try_from(s.load_value.round() as i64)
                    .map_err(|_| corrupt(format!("concurrency {}", s.load_value)))?,
            ),
            "rate" => Load::RequestRate(s.load_value),
            other => return Err(corrupt(format!("load kind {other:?}"))),
        };
        let run: RunResult = serde_json::from_str(&s.run_json)
            .map_err(|err| corrupt(format!("step {} run: {err}", s.step_index)))?;
        let evidence: ServerEvidence = serde_json::from_str(&s.evidence_json)
            .map_err(|err| corrupt(format!("step {} evidence: {err}", s.step_index)))?;
        steps.push(step_result(load, s.start_ms, s.end_ms, &run, evidence));
        runs.push(run);
        step_ids.push(step_id);
    }
    Ok(StoredSweep {
        row,
        card,
        steps,
        runs,
        step_ids,
    })
}

/// Compares two stored sweeps (`llmwatch sweep --compare A B`).
pub async fn compare_sweeps(store: &Store, a: i64, b: i64) -> Result<SweepComparison, SweepError> {
    let a = load_sweep(store, a).await?;
    let b = load_sweep(store, b).await?;
    let diff = compare_cards(&a.card, &b.card);
    Ok(SweepComparison { a, b, diff })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_above_the_cap_is_refused_with_the_way_out() {
        let mut s = SweepSettings::new("http://127.0.0.1:1");
        s.ladder = Ladder::parse_concurrency("1, 2,4,128").expect("parses");
        let err = s.validate().expect_err("128 > 64");
        let text = err.to_string();
        assert!(
            text.contains("128") && text.contains("--max-concurrency"),
            "{text}"
        );
        s.max_concurrency = 128;
        s.validate().expect("cap raised on purpose");
        assert!(Ladder::parse_concurrency("1,x").is_err());
        assert!(Ladder::parse_rate("0.5,1").is_ok());
        s.ladder = Ladder::Rate(vec![0.0]);
        assert!(s.validate().is_err());
        s.ladder = Ladder::Concurrency(vec![]);
        assert!(s.validate().is_err());
    }

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

    #[test]
    fn evidence_round_trips() {
        let ev = ServerEvidence {
            kv_cache_usage_mean: Some(0.95),
            requests_waiting_max: Some(7.0),
            preemptions: Some(3),
            gpu_count: Some(2),
            ..ServerEvidence::default()
        };
        let json = serde_json::to_string(&ev).expect("serialises");
        assert!(json.contains("\"server_ttft_p95_s\":null"), "{json}");
        let back: ServerEvidence = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, ev);
    }
}
