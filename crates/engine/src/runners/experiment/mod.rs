//! Experiments, the I/O side: for each variant of a plan, start its server
//! (or wait for the user to restart it), wait until healthy, check what
//! changed from the baseline, reset the prefix cache, run the plan's sweep,
//! ask the graded set, stop the server; the runs of the variants interleave
//! (round-robin, the order rotating each repeat) so drift of a shared host
//! does not favour one. The pure side ([`llmwatch_core::analysis::experiment`])
//! then gives intervals, the ranking and the answer.
//!
//! A start that fails or hangs makes that variant failed (with its log
//! tail), never the experiment: the others still run.

mod power;
mod quality;
pub mod render;
mod run;
pub mod server;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use llmwatch_config::experiment::{ExperimentPlan, PlanTarget};
use llmwatch_core::analysis::experiment::{
    answer, changed_settings, compare_with_baseline, pool_turns, rank, ExperimentResult,
    PlanSummary, Resolved, RunSample, TurnPoint, VariantResult, VariantStatus, DEFAULT_RESAMPLES,
};
use llmwatch_core::analysis::ExperimentCard;
use llmwatch_store::{Store, StoreError};

use crate::sources::scrape::now_ms;

pub use self::quality::{load_set, SetError};
pub use self::run::finish_variant;

/// Asks the user to restart a server by hand (`url` plans): gets the
/// message, answers `true` once the server runs with the variant's flags.
pub type Operator = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// How an experiment runs, beside its plan.
#[derive(Clone)]
pub struct ExperimentOptions {
    /// Where server logs go (one file per variant and repeat).
    pub log_dir: PathBuf,
    /// The plan's folder: a JSONL set's path is relative to it.
    pub plan_dir: PathBuf,
    pub resamples: u32,
    /// Needed for `url` plans.
    pub operator: Option<Operator>,
}

impl ExperimentOptions {
    pub fn new(log_dir: PathBuf, plan_dir: PathBuf) -> ExperimentOptions {
        ExperimentOptions {
            log_dir,
            plan_dir,
            resamples: DEFAULT_RESAMPLES,
            operator: None,
        }
    }
}

/// Why an experiment could not run at all (a variant's failure is not one).
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Set(#[from] SetError),
    #[error("storing the experiment: {0}")]
    Store(#[from] StoreError),
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("cannot create the log folder {path}: {source}")]
    LogDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a `url` plan needs someone to restart the server between variants (the CLI asks on its terminal)")]
    NoOperator,
}

/// What the runner keeps per variant beside its result: the samples the
/// bootstrap reads and the card the changes are read from.
#[derive(Default)]
struct Kept {
    samples: Vec<RunSample>,
    kv: Vec<BTreeMap<u32, (f64, f64)>>,
    /// Joules per output token per load level, per run (with a GPU page).
    energy: Vec<BTreeMap<u32, f64>>,
    /// A conversation workload's per-turn figures at the reference load,
    /// per run.
    turns: Vec<Vec<TurnPoint>>,
    card: Option<ExperimentCard>,
}

/// A running experiment: the result so far and what the runner keeps.
pub(crate) struct Experiment<'a> {
    plan: &'a ExperimentPlan,
    result: ExperimentResult,
    kept: Vec<Kept>,
    store: Option<&'a Store>,
}

impl Experiment<'_> {
    async fn save(&self) -> Result<(), StoreError> {
        let (Some(store), Some(id)) = (self.store, self.result.id) else {
            return Ok(());
        };
        let json = serde_json::to_string(&self.result).unwrap_or_default();
        store
            .update_experiment(id, &self.result.status, now_ms(), &json)
            .await
    }
}

/// Values of command-line flags that look secret (`--api-key X`), hidden.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let secret = |flag: &str| {
        let f = flag.to_ascii_lowercase();
        f.starts_with('-')
            && ["key", "token", "secret", "password"]
                .iter()
                .any(|w| f.contains(w))
    };
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push("***".to_string());
            hide_next = false;
        } else if let Some((flag, _)) = arg.split_once('=').filter(|(f, _)| secret(f)) {
            out.push(format!("{flag}=***"));
        } else {
            hide_next = secret(arg);
            out.push(arg.clone());
        }
    }
    out
}

fn plan_summary(plan: &ExperimentPlan) -> PlanSummary {
    let s = &plan.sweep;
    PlanSummary {
        shape: format!("{}x{}", s.input_tokens, s.output_tokens),
        concurrency: s.concurrency.clone(),
        slo_ttft_p95_s: s.slo_ttft_p95.as_secs_f64(),
        slo_itl_p95_s: s.slo_itl_p95.as_secs_f64(),
        reference_concurrency: s.reference_concurrency,
        requests_per_step: s.requests_per_step,
        repeats: plan.repeats,
        server: match &plan.target {
            PlanTarget::Command(server) => redact_args(&server.command).join(" "),
            PlanTarget::Url(url) => format!("{url} (restarted by hand)"),
        },
        quality_set: plan.quality.as_ref().map(|q| q.set.clone()),
        max_drop: plan.quality.as_ref().map(|q| q.max_drop),
        seed: plan.seed,
    }
}

/// The result skeleton: every variant pending, those that change more than
/// one setting by their flags alone refused before anything starts.
pub fn initial_result(plan: &ExperimentPlan) -> ExperimentResult {
    let base = &plan.variants[0];
    let variants: Vec<VariantResult> = plan
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = VariantResult::pending(
                &v.name,
                &redact_args(&v.args),
                v.env.keys().cloned().collect(),
            );
            if i > 0 {
                r.changes = changed_settings(
                    Resolved {
                        card: None,
                        args: &base.args,
                        env: &base.env,
                    },
                    Resolved {
                        card: None,
                        args: &v.args,
                        env: &v.env,
                    },
                );
                refuse_if_many(&mut r, plan.allow_multiple_changes);
            }
            r
        })
        .collect();
    let runnable = variants
        .iter()
        .filter(|v| v.status == VariantStatus::Pending)
        .count();
    ExperimentResult {
        id: None,
        name: plan.name.clone(),
        status: "running".to_string(),
        started_ms: now_ms(),
        ended_ms: None,
        plan: plan_summary(plan),
        checklist: Vec::new(),
        variants,
        ranking: Vec::new(),
        answer: Vec::new(),
        runs_done: 0,
        runs_planned: runnable as u32 * plan.repeats,
        error: None,
    }
}

/// Refuses a variant that changes more than one setting (unless allowed).
pub(crate) fn refuse_if_many(v: &mut VariantResult, allow: bool) -> bool {
    if allow || v.changes.len() <= 1 {
        return false;
    }
    v.status = VariantStatus::Refused;
    v.reason = Some(format!(
        "changes {} settings from the baseline ({}): change one thing at a time, or set \
         allow_multiple_changes = true",
        v.changes.len(),
        v.change_line()
    ));
    true
}

/// The order of one repeat's runs: every variant once, starting one
/// further along each repeat (the baseline first in the first repeat, so
/// its card is known before any variant is checked against it).
pub fn run_order(variants: usize, repeat: u32) -> Vec<usize> {
    (0..variants)
        .map(|i| (i + repeat as usize) % variants.max(1))
        .collect()
}

/// Runs an experiment to its end; `progress` sees the result after each
/// run. With a store, the result is stored as it goes (its id set).
pub async fn run_experiment(
    plan: &ExperimentPlan,
    options: &ExperimentOptions,
    store: Option<&Store>,
    mut progress: impl FnMut(&ExperimentResult),
) -> Result<ExperimentResult, ExperimentError> {
    if matches!(plan.target, PlanTarget::Url(_)) && options.operator.is_none() {
        return Err(ExperimentError::NoOperator);
    }
    let items = match &plan.quality {
        Some(q) => Some(load_set(&q.set, &options.plan_dir)?),
        None => None,
    };
    std::fs::create_dir_all(&options.log_dir).map_err(|source| ExperimentError::LogDir {
        path: options.log_dir.clone(),
        source,
    })?;
    let mut exp = Experiment {
        plan,
        result: initial_result(plan),
        kept: plan.variants.iter().map(|_| Kept::default()).collect(),
        store,
    };
    if let Some(store) = store {
        let json = serde_json::to_string(&exp.result).unwrap_or_default();
        exp.result.id = Some(
            store
                .create_experiment(&plan.name, "running", now_ms(), &json)
                .await?,
        );
    }
    progress(&exp.result);
    let http = crate::sources::scrape::scrape_client()?;
    let mut order = 0;
    for repeat in 0..plan.repeats {
        for idx in run_order(plan.variants.len(), repeat) {
            if !matches!(
                exp.result.variants[idx].status,
                VariantStatus::Pending | VariantStatus::Running
            ) {
                continue;
            }
            exp.result.variants[idx].status = VariantStatus::Running;
            progress(&exp.result);
            run::run_variant(
                &mut exp,
                &http,
                options,
                items.as_deref(),
                idx,
                repeat,
                order,
            )
            .await;
            order += 1;
            exp.result.runs_done += 1;
            let v = &mut exp.result.variants[idx];
            match v.status {
                VariantStatus::Running => v.status = VariantStatus::Pending,
                // Its later repeats will not run.
                _ => {
                    exp.result.runs_planned = exp
                        .result
                        .runs_planned
                        .saturating_sub(plan.repeats - repeat - 1)
                }
            }
            exp.save().await?;
            progress(&exp.result);
        }
    }
    conclude(&mut exp, options.resamples);
    exp.save().await?;
    progress(&exp.result);
    Ok(exp.result)
}

/// The comparison, ranking and answer of a stored result again, with the
/// decision rules of this build (`--report ID`): they read only the
/// variants' stored intervals, curves and marks.
pub fn decide_again(result: &mut ExperimentResult) {
    compare_with_baseline(&mut result.variants);
    result.ranking = rank(&result.variants);
    result.answer = answer(&result.variants);
}

/// Intervals, comparison, ranking and the answer, once every run is done.
fn conclude(exp: &mut Experiment<'_>, resamples: u32) {
    let plan = exp.plan;
    for (i, v) in exp.result.variants.iter_mut().enumerate() {
        let kept = &exp.kept[i];
        finish_variant(v, &kept.samples, &kept.kv, plan, resamples);
        v.energy_j_per_token = run::energy_at_objective(v, &kept.energy);
        v.turns = pool_turns(&kept.turns);
    }
    run::quality_marks(&mut exp.result.variants, plan);
    compare_with_baseline(&mut exp.result.variants);
    exp.result.ranking = rank(&exp.result.variants);
    exp.result.answer = answer(&exp.result.variants);
    exp.result.checklist = run::checklist(plan, exp.kept[0].card.as_ref());
    exp.result.status = "completed".to_string();
    exp.result.ended_ms = Some(now_ms());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_interleave_and_rotate() {
        assert_eq!(run_order(3, 0), [0, 1, 2]);
        assert_eq!(run_order(3, 1), [1, 2, 0]);
        assert_eq!(run_order(3, 2), [2, 0, 1]);
    }

    #[test]
    fn secret_flag_values_are_hidden() {
        let args: Vec<String> = [
            "serve",
            "--api-key",
            "s3cret",
            "--hf-token=abc",
            "--port",
            "8000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let shown = redact_args(&args).join(" ");
        assert_eq!(shown, "serve --api-key *** --hf-token=*** --port 8000");
    }
}
