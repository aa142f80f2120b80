//! One run of one variant (start, check, reset, sweep, grade, stop), and
//! what a variant's runs add up to.

use std::collections::BTreeMap;
use std::time::Duration;

use llmwatch_config::experiment::{ExperimentPlan, PlanTarget, PlanVariant};
use llmwatch_core::analysis::experiment::{
    capacity_intervals, card_contradicts_flags, changed_settings, joules_per_token, pooled_curve,
    quality_drop, Binding, CurvePoint, GradedItem, RequestSample, Resolved, RunRecord, RunSample,
    StepSample, TurnPoint, VariantResult, VariantStatus,
};
use llmwatch_core::analysis::{AnalysisConfig, ExperimentCard, Objectives};
use llmwatch_probe::conversation::TurnStats;
use llmwatch_probe::{Api, SelfCheckLimits, Shape};

use super::power::PowerSampler;
use super::server::{command_line, free_port, log_tail, ServerProcess};
use super::{quality, refuse_if_many, Experiment, ExperimentOptions};
use crate::runners::sweep::card::{collect_card, CardSettings};
use crate::runners::sweep::{run_sweep, Ladder, StepReport, SweepSettings};
use crate::sources::server_facts::discover_model;

/// Where a variant's server is, for one run.
struct Started {
    url: String,
    gpu_url: Option<String>,
    process: Option<ServerProcess>,
}

/// Starts (or, for a `url` plan, asks for) the variant's server; on
/// failure the variant is failed with the reason and log tail.
async fn start_server(
    exp: &mut Experiment<'_>,
    http: &reqwest::Client,
    options: &ExperimentOptions,
    idx: usize,
    repeat: u32,
) -> Option<Started> {
    let variant: &PlanVariant = &exp.plan.variants[idx];
    let server = match &exp.plan.target {
        PlanTarget::Url(url) => {
            let operator = options.operator.as_ref()?;
            let flags = variant.args.join(" ");
            let message = format!(
                "Restart the server at {url} as variant {:?} (flags: {}), then press Enter",
                variant.name,
                if flags.is_empty() {
                    "the baseline's"
                } else {
                    &flags
                }
            );
            if !operator(message).await {
                fail(
                    &mut exp.result.variants[idx],
                    "skipped by the user".into(),
                    None,
                    None,
                );
                return None;
            }
            return Some(Started {
                url: url.clone(),
                gpu_url: exp.plan.sweep.gpu_url.clone(),
                process: None,
            });
        }
        PlanTarget::Command(server) => server,
    };
    let port = match server.port.map(Ok).unwrap_or_else(free_port) {
        Ok(port) => port,
        Err(e) => {
            fail(
                &mut exp.result.variants[idx],
                format!("no free port: {e}"),
                None,
                None,
            );
            return None;
        }
    };
    let wants_gpu = server.command.iter().any(|w| w.contains("{gpu_port}"));
    let gpu_port = if wants_gpu { free_port().ok() } else { None };
    let argv = command_line(server, variant, port, gpu_port);
    let mut env = server.env.clone();
    env.extend(variant.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let log_path = options
        .log_dir
        .join(format!("{}-{}.log", variant.name, repeat + 1));
    let url = format!("http://127.0.0.1:{port}");
    exp.result.variants[idx].log_path = Some(log_path.display().to_string());
    let started = ServerProcess::start(&argv, &env, &log_path, url.clone());
    let mut process = match started {
        Ok(p) => p,
        Err(e) => {
            fail(
                &mut exp.result.variants[idx],
                e.to_string(),
                Some(log_tail(&log_path)),
                None,
            );
            return None;
        }
    };
    if let Err(e) = process
        .wait_ready(http, &server.health, server.ready_timeout)
        .await
    {
        process.stop().await;
        fail(
            &mut exp.result.variants[idx],
            e.to_string(),
            Some(log_tail(&log_path)),
            None,
        );
        return None;
    }
    Some(Started {
        url,
        gpu_url: gpu_port
            .map(|p| format!("http://127.0.0.1:{p}/metrics"))
            .or_else(|| exp.plan.sweep.gpu_url.clone()),
        process: Some(process),
    })
}

fn fail(
    v: &mut VariantResult,
    reason: String,
    log_tail: Option<String>,
    status: Option<VariantStatus>,
) {
    v.status = status.unwrap_or(VariantStatus::Failed);
    v.reason = Some(reason);
    if log_tail.as_deref().is_some_and(|t| !t.is_empty()) {
        v.log_tail = log_tail;
    }
}

/// One run of variant `idx`: start, check, reset, sweep, grade, stop.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_variant(
    exp: &mut Experiment<'_>,
    http: &reqwest::Client,
    options: &ExperimentOptions,
    items: Option<&[GradedItem]>,
    idx: usize,
    repeat: u32,
    order: u32,
) {
    let Some(started) = start_server(exp, http, options, idx, repeat).await else {
        return;
    };
    let record = measure(exp, http, &started, items, idx, repeat, order).await;
    if let Some(process) = started.process {
        process.stop().await;
    }
    if let Some(record) = record {
        exp.result.variants[idx].runs.push(record);
    }
}

/// Checks the card, resets the prefix cache, runs the sweep and (first
/// repeat) the graded set. `None` when the variant was refused here.
async fn measure(
    exp: &mut Experiment<'_>,
    http: &reqwest::Client,
    started: &Started,
    items: Option<&[GradedItem]>,
    idx: usize,
    repeat: u32,
    order: u32,
) -> Option<RunRecord> {
    let plan = exp.plan;
    let settings = sweep_settings(plan, &started.url, started.gpu_url.clone());
    let model = match &plan.sweep.model {
        Some(m) => m.clone(),
        None => discover_model(http, &started.url).await.unwrap_or_default(),
    };
    let card = server_card(http, &settings, &model).await;
    if repeat == 0 && !check_card(exp, idx, &card) {
        return None;
    }
    let reset = reset_prefix_cache(http, &started.url).await;
    let power = started
        .gpu_url
        .clone()
        .map(|url| PowerSampler::start(http.clone(), url, plan.sweep.scrape_interval));
    let mut samples = RunSample::default();
    let mut kv = BTreeMap::new();
    let mut windows = Vec::new();
    let mut turns = Vec::new();
    let reference = plan.sweep.reference_concurrency;
    let report = run_sweep(settings, exp.store, |step: &StepReport| {
        samples.steps.push(step_sample(step));
        if step.step.load.value() as u32 == reference {
            turns = turn_points(&step.run.turns);
        }
        windows.push((
            step.step.load.value() as u32,
            step.step.start_unix_ms,
            step.step.end_unix_ms,
            step.run.total_output_tokens,
        ));
        if let (Some(mean), Some(max)) = (
            step.step.server.kv_cache_usage_mean,
            step.step.server.kv_cache_usage_max,
        ) {
            kv.insert(step.step.load.value() as u32, (mean, max));
        }
    })
    .await;
    let watts = power.map(PowerSampler::stop).unwrap_or_default();
    let kept = &mut exp.kept[idx];
    kept.samples.push(samples);
    kept.kv.push(kv);
    if !turns.is_empty() {
        kept.turns.push(turns);
    }
    kept.energy.push(
        windows
            .iter()
            .filter_map(|&(level, start, end, tokens)| {
                Some((level, joules_per_token(&watts, start, end, tokens)?))
            })
            .collect(),
    );
    if let (Some(items), Some(q), true) = (items, &plan.quality, repeat == 0) {
        let acc = quality::evaluate(http, &started.url, &model, items, q.max_tokens).await;
        exp.result.variants[idx].accuracy = Some(acc);
    }
    Some(match report {
        Ok(report) => RunRecord {
            repeat: repeat + 1,
            order,
            sweep_id: report.sweep_id,
            status: report.status.as_str().to_string(),
            error: report.stop_reason.clone(),
            max_sustainable: report
                .verdict
                .sustainable
                .as_ref()
                .map(|s| s.load.value() as u32),
            binding: Binding::of(&report.verdict),
            prefix_cache_reset: reset,
        },
        Err(e) => RunRecord {
            repeat: repeat + 1,
            order,
            sweep_id: None,
            status: "failed".to_string(),
            error: Some(e.to_string()),
            max_sustainable: None,
            binding: None,
            prefix_cache_reset: reset,
        },
    })
}

/// Records the variant's card (first repeat) and refuses it when it
/// changes more than one setting from the baseline's, or, for a server
/// restarted by hand, does not show the planned flags.
fn check_card(exp: &mut Experiment<'_>, idx: usize, card: &ExperimentCard) -> bool {
    let plan = exp.plan;
    exp.kept[idx].card = Some(card.clone());
    let v = &mut exp.result.variants[idx];
    v.card = card.fields();
    v.gpu_count = card
        .gpu_count
        .or_else(|| Some(card.tensor_parallel? * card.pipeline_parallel.unwrap_or(1)));
    if matches!(plan.target, PlanTarget::Url(_)) {
        let wrong = card_contradicts_flags(card, &plan.variants[idx].args);
        if !wrong.is_empty() {
            fail(
                v,
                format!(
                    "the server does not show the planned change: {}",
                    wrong.join("; ")
                ),
                None,
                None,
            );
            return false;
        }
    }
    if idx == 0 {
        return true;
    }
    let (base, this) = (&plan.variants[0], &plan.variants[idx]);
    v.changes = changed_settings(
        Resolved {
            card: exp.kept[0].card.as_ref(),
            args: &base.args,
            env: &base.env,
        },
        Resolved {
            card: Some(card),
            args: &this.args,
            env: &this.env,
        },
    );
    !refuse_if_many(v, plan.allow_multiple_changes)
}

async fn server_card(http: &reqwest::Client, s: &SweepSettings, model: &str) -> ExperimentCard {
    let settings = CardSettings {
        model,
        input_tokens: s.shape.input_tokens,
        output_tokens: s.shape.output_tokens,
        prompt_kind: s.prompt.label(),
        temperature: s.temperature,
        user: &s.card,
    };
    let metrics_url = crate::runners::sweep::default_metrics_url(&s.url);
    collect_card(http, &s.url, &metrics_url, s.gpu_url.as_deref(), &settings)
        .await
        .unwrap_or_default()
}

/// `POST /reset_prefix_cache`: `Some(true)` when done, `None` when the
/// engine has no such endpoint (vLLM serves it only with
/// `VLLM_SERVER_DEV_MODE=1`), `Some(false)` when it refused.
async fn reset_prefix_cache(http: &reqwest::Client, url: &str) -> Option<bool> {
    let answer = http
        .post(format!("{url}/reset_prefix_cache"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    match answer.status().as_u16() {
        200..=299 => Some(true),
        404 | 405 => None,
        _ => Some(false),
    }
}

fn step_sample(step: &StepReport) -> StepSample {
    StepSample {
        concurrency: step.step.load.value() as u32,
        wall_time_s: step.step.wall_time_s,
        requests: step
            .run
            .records
            .iter()
            .map(|r| RequestSample {
                ok: r.is_ok(),
                ttft_s: r.ttft_ns.map(|ns| ns as f64 / 1e9),
                itl_s: r
                    .per_token_itl_ns()
                    .into_iter()
                    .map(|ns| ns / 1e9)
                    .collect(),
                output_tokens: r.output_tokens,
                e2e_s: Some(r.e2e_ns as f64 / 1e9),
            })
            .collect(),
    }
}

/// A conversation step's per-turn figures as the experiment keeps them.
fn turn_points(turns: &[TurnStats]) -> Vec<TurnPoint> {
    turns
        .iter()
        .map(|t| TurnPoint {
            turn: t.turn,
            input_tokens_mean: t.input_tokens_mean,
            cached_tokens_mean: t.cached_tokens_mean,
            hit_ratio: t.hit_ratio,
            ttft_p50_s: t.ttft_ms.p50.map(|ms| ms / 1000.0),
        })
        .collect()
}

/// The plan's sweep as the sweep runner takes it.
fn sweep_settings(plan: &ExperimentPlan, url: &str, gpu_url: Option<String>) -> SweepSettings {
    let p = &plan.sweep;
    let mut s = SweepSettings::new(url.to_string());
    s.gpu_url = gpu_url;
    s.model = p.model.clone();
    s.api = Api::Completions;
    s.shape = Shape::new(
        u32::try_from(p.input_tokens).unwrap_or(u32::MAX),
        u32::try_from(p.output_tokens).unwrap_or(u32::MAX),
    );
    s.ladder = Ladder::Concurrency(p.concurrency.clone());
    s.conversation = p.workload;
    s.max_concurrency = p.concurrency.iter().copied().max().unwrap_or(1);
    s.requests_per_step = p.requests_per_step;
    s.requests_per_slot = p.requests_per_slot;
    s.min_step_duration = p.min_step_duration;
    s.warmup_requests = p.warmup;
    s.scrape_interval = p.scrape_interval;
    s.seed = plan.seed;
    s.temperature = 0.0;
    s.objectives = objectives(plan);
    if !p.client_self_check {
        s.self_check = SelfCheckLimits {
            max_cpu_cores: 1024.0,
            max_scheduler_lag_p99_ms: 60_000.0,
            max_dispatch_lag_p99_ms: 60_000.0,
            ..SelfCheckLimits::default()
        };
    }
    s
}

fn objectives(plan: &ExperimentPlan) -> Objectives {
    Objectives {
        ttft_p95: Some(plan.sweep.slo_ttft_p95.as_secs_f64()),
        itl_p95: Some(plan.sweep.slo_itl_p95.as_secs_f64()),
        ..Objectives::default()
    }
}

/// A variant's curves, intervals, reference point and binding limit from
/// its runs; failed when no run measured a step.
pub fn finish_variant(
    v: &mut VariantResult,
    samples: &[RunSample],
    kv: &[BTreeMap<u32, (f64, f64)>],
    plan: &ExperimentPlan,
    resamples: u32,
) {
    if matches!(v.status, VariantStatus::Failed | VariantStatus::Refused) {
        return;
    }
    let measured: Vec<RunSample> = samples
        .iter()
        .filter(|s| !s.steps.is_empty())
        .cloned()
        .collect();
    if measured.is_empty() {
        let why = v
            .runs
            .iter()
            .find_map(|r| r.error.clone())
            .unwrap_or_else(|| "no step was measured".into());
        fail(v, why, None, None);
        return;
    }
    v.status = VariantStatus::Completed;
    v.curve = pooled_curve(&measured)
        .iter()
        .map(|step| {
            let level = step.load.value() as u32;
            let seen: Vec<(f64, f64)> = kv.iter().filter_map(|m| m.get(&level).copied()).collect();
            let n = seen.len() as f64;
            let kv_pair = if seen.is_empty() {
                (None, None)
            } else {
                (
                    Some(seen.iter().map(|p| p.0).sum::<f64>() / n),
                    seen.iter().map(|p| p.1).reduce(f64::max),
                )
            };
            CurvePoint::from_step(step, kv_pair)
        })
        .collect();
    let seed = plan.seed ^ llmwatch_core::stable_hash::fnv1a(v.name.bytes());
    v.capacity = capacity_intervals(
        &measured,
        &objectives(plan),
        &AnalysisConfig::default(),
        resamples,
        seed,
    );
    v.at_reference = v
        .curve
        .iter()
        .find(|p| p.concurrency == plan.sweep.reference_concurrency)
        .cloned();
    v.tokens_per_s_per_gpu = match (&v.capacity, v.gpu_count) {
        (Some(c), Some(n)) if n > 0 => Some(c.throughput_at_objective.estimate / f64::from(n)),
        _ => None,
    };
    v.binding = most_common_binding(&v.runs);
}

/// Joules per output token at the variant's max sustainable load, the
/// mean over the runs that measured it (where GPU power was scraped).
pub(crate) fn energy_at_objective(v: &VariantResult, energy: &[BTreeMap<u32, f64>]) -> Option<f64> {
    let level = v.capacity.as_ref()?.max_sustainable.estimate as u32;
    let seen: Vec<f64> = energy
        .iter()
        .filter_map(|m| m.get(&level).copied())
        .collect();
    (!seen.is_empty()).then(|| seen.iter().sum::<f64>() / seen.len() as f64)
}

/// The binding limit most runs named (the latest on a tie).
fn most_common_binding(runs: &[RunRecord]) -> Option<Binding> {
    let named: Vec<&Binding> = runs.iter().filter_map(|r| r.binding.as_ref()).collect();
    named
        .iter()
        .rev()
        .max_by_key(|b| named.iter().filter(|o| o.kind == b.kind).count())
        .map(|b| (*b).clone())
}

/// Marks variants whose accuracy dropped beyond `[quality].max_drop`.
pub(crate) fn quality_marks(variants: &mut [VariantResult], plan: &ExperimentPlan) {
    let (Some(q), Some(base)) = (
        &plan.quality,
        variants.first().and_then(|v| v.accuracy.clone()),
    ) else {
        return;
    };
    for v in variants.iter_mut().skip(1) {
        if let Some(acc) = &v.accuracy {
            v.quality_mark = quality_drop(&base, acc, q.max_drop);
        }
    }
}

/// The origin chapter's checklist, filled from the baseline's card and the
/// plan.
pub(crate) fn checklist(
    plan: &ExperimentPlan,
    card: Option<&ExperimentCard>,
) -> Vec<(String, String)> {
    let unknown = || "not reported".to_string();
    let c = card.cloned().unwrap_or_default();
    let opt = |v: Option<String>| v.unwrap_or_else(unknown);
    let parallel = match (c.tensor_parallel, c.pipeline_parallel) {
        (None, None) => unknown(),
        (tp, pp) => format!("TP {} × PP {}", tp.unwrap_or(1), pp.unwrap_or(1)),
    };
    let engine = match (&c.engine, &c.engine_version) {
        (Some(e), Some(v)) => format!("{e} {v}"),
        (Some(e), None) => e.clone(),
        _ => unknown(),
    };
    let s = &plan.sweep;
    vec![
        ("Model".into(), opt(c.model)),
        ("Quantization format".into(), opt(c.quantization)),
        (
            "Context length".into(),
            opt(c.max_context_len.map(|n| n.to_string())),
        ),
        ("GPU model".into(), opt(c.gpu_type)),
        ("GPU count".into(), opt(c.gpu_count.map(|n| n.to_string()))),
        ("Parallelism".into(), parallel),
        ("Server version".into(), engine),
        ("Driver version".into(), opt(c.driver_version)),
        ("CUDA version".into(), opt(c.cuda_version)),
        (
            "KV cache".into(),
            format!(
                "dtype {}, block size {}, {} blocks, prefix caching {}",
                opt(c.kv_cache_dtype),
                opt(c.kv_block_size.map(|n| n.to_string())),
                opt(c.num_gpu_blocks.map(|n| n.to_string())),
                opt(c.prefix_caching.map(|b| b.to_string()))
            ),
        ),
        (
            "Input × output tokens".into(),
            format!("{} × {}", s.input_tokens, s.output_tokens),
        ),
        ("Concurrency".into(), format!("{:?}", s.concurrency)),
        ("Sampling".into(), opt(c.sampling)),
        (
            "Temperature".into(),
            opt(c.temperature.map(|t| t.to_string())),
        ),
        ("Prompts".into(), opt(c.prompt_kind)),
        ("Repeats".into(), plan.repeats.to_string()),
    ]
}
