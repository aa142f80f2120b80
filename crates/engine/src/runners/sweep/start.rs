//! The one way a user starts a sweep (the API's JSON and the page's form
//! both become a [`SweepRequest`]): the target's own settings with the
//! request's overrides, checked against the limits, in the daemon's one
//! sweep slot; the answer is the new sweep's id, known as soon as its row
//! is recorded (after model discovery, the card and calibration).

use std::time::Duration;

use llmwatch_config::{Config, TargetConfig};
use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::Shape;
use llmwatch_store::Store;
use tokio::sync::oneshot;

use crate::events::Failure;

use super::schedule::{check_limits, settings_for_target, SweepSlots};
use super::{run_sweep_with_id, Ladder, ObservedMix, SweepError, SweepSettings};
use crate::observed::ObservedSpec;

/// What a user asks of a sweep of a watched target: overrides of the
/// target's own sweep settings (`None` keeps them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepRequest {
    pub target: String,
    pub model: Option<String>,
    pub shape: Option<Shape>,
    /// Conversations (`multi-turn:TURNS[,think=DUR]`) instead of one-shot
    /// requests: each concurrency level is that many conversations.
    pub conversation: Option<MultiTurn>,
    /// The lengths a watched target served (`observed:TARGET[:RANGE]`),
    /// read from the daemon's store when the sweep starts.
    pub observed: Option<ObservedSpec>,
    pub ladder: Option<Ladder>,
    pub reuse_prompts: Option<bool>,
    pub requests_per_step: Option<u64>,
    pub min_step_duration: Option<Duration>,
    /// Objectives, seconds.
    pub ttft_p95: Option<f64>,
    pub itl_p95: Option<f64>,
}

/// A request field that does not parse, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct RequestError {
    pub field: &'static str,
    pub why: String,
}

impl RequestError {
    pub fn new(field: &'static str, why: impl Into<String>) -> RequestError {
        RequestError {
            field,
            why: why.into(),
        }
    }
}

/// Parses a sweep request's `workload`: `multi-turn:TURNS[,think=DUR]` or
/// `observed:TARGET[:RANGE]`.
pub fn parse_workload(
    text: &str,
) -> Result<(Option<MultiTurn>, Option<ObservedSpec>), RequestError> {
    match ObservedSpec::parse(text) {
        Some(Ok(spec)) => Ok((None, Some(spec))),
        Some(Err(why)) => Err(RequestError::new("workload", why.to_string())),
        None => MultiTurn::parse(text)
            .map(|m| (Some(m), None))
            .map_err(|err| {
                RequestError::new(
                    "workload",
                    format!("{} (or observed:TARGET[:RANGE])", err.why),
                )
            }),
    }
}

impl SweepRequest {
    /// The request's overrides on `settings`.
    pub fn apply(&self, settings: &mut SweepSettings) {
        if let Some(model) = &self.model {
            settings.model = Some(model.clone());
        }
        if let Some(shape) = self.shape {
            settings.shape = shape;
        }
        if let Some(workload) = self.conversation {
            settings.conversation = Some(workload);
        }
        if let Some(ladder) = &self.ladder {
            settings.ladder = ladder.clone();
        }
        if let Some(reuse) = self.reuse_prompts {
            settings.reuse_prompts = reuse;
        }
        if let Some(n) = self.requests_per_step {
            settings.requests_per_step = n;
        }
        if let Some(d) = self.min_step_duration {
            settings.min_step_duration = d;
        }
        if self.ttft_p95.is_some() {
            settings.objectives.ttft_p95 = self.ttft_p95;
        }
        if self.itl_p95.is_some() {
            settings.objectives.itl_p95 = self.itl_p95;
        }
    }
}

/// Why a sweep did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no watched target named {0:?}")]
    UnknownTarget(String),
    /// The settings or the limits refuse it (the message names the field).
    #[error("{0}")]
    Refused(String),
    #[error("another sweep (from the API, a page or the schedule) is still running; try again when it ends")]
    Busy,
    /// It began but failed before its first step (target down, a shape its
    /// model cannot hold, …).
    #[error("the sweep could not start: {0}")]
    Failed(SweepError),
    #[error("the sweep task stopped: {0}")]
    Task(String),
}

/// What starting a sweep needs from the daemon.
#[derive(Clone)]
pub struct SweepStarter {
    pub store: Store,
    pub slots: SweepSlots,
}

impl SweepStarter {
    /// Starts `request` against `target` in the background and answers the
    /// new sweep's id once its row exists.
    pub async fn start(
        &self,
        config: &Config,
        target: &TargetConfig,
        request: &SweepRequest,
    ) -> Result<i64, StartError> {
        let mut settings = settings_for_target(config, target)
            .map_err(|err| StartError::Refused(err.to_string()))?;
        request.apply(&mut settings);
        if let Some(spec) = &request.observed {
            let observed = spec
                .read(&self.store, crate::now_ms())
                .await
                .map_err(|err| StartError::Refused(format!("workload: {err}")))?;
            settings.observed = Some(ObservedMix::drawn(spec.label(), &observed));
        }
        settings
            .validate()
            .map_err(|err| StartError::Refused(err.to_string()))?;
        check_limits(&settings, &config.server.sweep_limits)
            .map_err(|err| StartError::Refused(err.to_string()))?;
        let permit = self.slots.try_acquire().ok_or(StartError::Busy)?;
        settings.cancel = permit.cancel.clone();
        let store = self.store.clone();
        let name = target.name.clone();
        let (row_tx, row_rx) = oneshot::channel();
        let mut task = tokio::spawn(async move {
            let _permit = permit;
            let result = run_sweep_with_id(settings, Some(&store), |_| {}, row_tx).await;
            match &result {
                Ok(report) => {
                    tracing::info!(target = %name, sweep = ?report.sweep_id, status = report.status.as_str(), "sweep ended")
                }
                Err(err) => Failure::StartedSweep.emit(Some(&name), &err),
            }
            result.map(|_| ())
        });
        tokio::select! {
            id = row_rx => match id {
                Ok(id) => Ok(id),
                // The sender went away without an id: the task ended first.
                Err(_) => Err(task_outcome(task.await)),
            },
            done = &mut task => Err(task_outcome(done)),
        }
    }
}

fn task_outcome(done: Result<Result<(), SweepError>, tokio::task::JoinError>) -> StartError {
    match done {
        Ok(Err(err)) => StartError::Failed(err),
        Ok(Ok(())) => StartError::Task("ended without recording a sweep".into()),
        Err(err) => StartError::Task(err.to_string()),
    }
}
