//! Sweeps the daemon runs by itself: `[targets.sweep] every = "24h"` starts
//! one sweep of that target per period (the first one period after start, so
//! a restart never loads a production server at once), one sweep at a time
//! across the daemon, shared with sweeps started through the API.

use std::time::Duration;

use llmwatch_probe::record::Api;
use llmwatch_probe::Secret;
use llmwatch_store::Store;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::{run_sweep, Ladder, SweepCancel, SweepError, SweepSettings};
use crate::events::Failure;
use crate::ticker::schedule_offset;
use llmwatch_config::{Config, ProbeApi, SweepLimits, SweepScheduleConfig, TargetConfig};

/// The settings a daemon sweep of `target` starts from: its URLs (metrics,
/// GPU page), API key and probe model, DESIGN.md's defaults for the rest.
pub fn settings_for_target(
    config: &Config,
    target: &TargetConfig,
) -> Result<SweepSettings, llmwatch_config::ConfigError> {
    let mut settings = SweepSettings::new(target.url.clone());
    settings.target_name = Some(target.name.clone());
    settings.metrics_url = Some(target.metrics_url());
    settings.gpu_url = target.gpus.as_ref().and_then(|name| {
        config
            .gpus
            .iter()
            .find(|gpu| &gpu.name == name)
            .and_then(|gpu| gpu.dcgm_url.clone())
    });
    settings.api_key = target.api_key()?.map(Secret::new);
    settings.model = target.probe.as_ref().and_then(|p| p.model.clone());
    // The target's objectives, else the server's; `[targets.sweep]` may
    // still set its own (apply_schedule).
    let seconds =
        |own: Option<Duration>, server: Duration| Some(own.unwrap_or(server).as_secs_f64());
    settings.objectives.ttft_p95 = seconds(target.slo_ttft_p95, config.server.slo_ttft_p95);
    settings.objectives.itl_p95 = seconds(target.slo_itl_p95, config.server.slo_itl_p95);
    if let Some(sweep) = &target.sweep {
        settings.spin = sweep.spin;
        settings.reuse_prompts = sweep.reuse_prompts;
    }
    settings.max_duration = Some(config.server.sweep_limits.max_sweep_duration);
    Ok(settings)
}

/// A daemon sweep past `[server.sweep_limits]`: each names the request
/// field that is out of bounds and the limit it passed.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("{field}: {steps} steps, more than the {max} allowed (server.sweep_limits.max_steps)")]
    Steps {
        field: &'static str,
        steps: usize,
        max: usize,
    },
    #[error("rate: {rate} requests/s is above the limit of {max} (server.sweep_limits.max_rate)")]
    Rate { rate: f64, max: f64 },
    #[error("requests_per_step: {requests} is above the limit of {max} (server.sweep_limits.max_requests_per_step)")]
    RequestsPerStep { requests: u64, max: u64 },
    #[error("min_step_duration: {} is above the limit of {} (server.sweep_limits.max_step_duration)",
        humantime::format_duration(*.step), humantime::format_duration(*.max))]
    StepDuration { step: Duration, max: Duration },
    #[error("min_step_duration: {steps} steps of at least {} take longer than the sweep may run ({}, server.sweep_limits.max_sweep_duration)",
        humantime::format_duration(*.step), humantime::format_duration(*.max))]
    SweepDuration {
        steps: usize,
        step: Duration,
        max: Duration,
    },
}

/// Checks a daemon sweep (API, page, schedule) against `[server.sweep_limits]`.
pub fn check_limits(settings: &SweepSettings, limits: &SweepLimits) -> Result<(), LimitError> {
    let (field, loads) = match &settings.ladder {
        Ladder::Concurrency(levels) => ("concurrency", levels.len()),
        Ladder::Rate(rates) => ("rate", rates.len()),
    };
    if loads > limits.max_steps {
        return Err(LimitError::Steps {
            field,
            steps: loads,
            max: limits.max_steps,
        });
    }
    if let Ladder::Rate(rates) = &settings.ladder {
        if let Some(rate) = rates.iter().find(|r| **r > limits.max_rate) {
            return Err(LimitError::Rate {
                rate: *rate,
                max: limits.max_rate,
            });
        }
    }
    if settings.requests_per_step > limits.max_requests_per_step {
        return Err(LimitError::RequestsPerStep {
            requests: settings.requests_per_step,
            max: limits.max_requests_per_step,
        });
    }
    if settings.min_step_duration > limits.max_step_duration {
        return Err(LimitError::StepDuration {
            step: settings.min_step_duration,
            max: limits.max_step_duration,
        });
    }
    let shortest = settings.min_step_duration * u32::try_from(loads).unwrap_or(u32::MAX);
    if shortest > limits.max_sweep_duration {
        return Err(LimitError::SweepDuration {
            steps: loads,
            step: settings.min_step_duration,
            max: limits.max_sweep_duration,
        });
    }
    Ok(())
}

/// Applies a `[targets.sweep]` section to `settings`; checks the result.
pub fn apply_schedule(
    settings: &mut SweepSettings,
    schedule: &SweepScheduleConfig,
) -> Result<(), SweepError> {
    settings.shape = schedule.shape;
    settings.api = match schedule.api {
        ProbeApi::Chat => Api::Chat,
        ProbeApi::Completions => Api::Completions,
    };
    if let Some(ladder) = &schedule.concurrency {
        settings.ladder = Ladder::Concurrency(ladder.clone());
    }
    if let Some(cap) = schedule.max_concurrency {
        settings.max_concurrency = cap;
    }
    if let Some(n) = schedule.requests_per_step {
        settings.requests_per_step = n;
    }
    if let Some(d) = schedule.min_step_duration {
        settings.min_step_duration = d;
    }
    if let Some(d) = schedule.slo_ttft_p95 {
        settings.objectives.ttft_p95 = Some(d.as_secs_f64());
    }
    if let Some(d) = schedule.slo_itl_p95 {
        settings.objectives.itl_p95 = Some(d.as_secs_f64());
    }
    if let Some(d) = schedule.slo_e2e_p95 {
        settings.objectives.e2e_p95 = Some(d.as_secs_f64());
    }
    settings.validate()
}

/// One sweep at a time across the daemon (API and schedule alike): sweeps
/// load servers hard, two at once would measure each other.
#[derive(Clone)]
pub struct SweepSlots {
    permits: std::sync::Arc<Semaphore>,
    /// The cancel handle of the sweep holding the slot.
    current: std::sync::Arc<std::sync::Mutex<SweepCancel>>,
}

impl Default for SweepSlots {
    fn default() -> Self {
        SweepSlots {
            permits: std::sync::Arc::new(Semaphore::new(1)),
            current: Default::default(),
        }
    }
}

/// The one sweep slot, held: its sweep runs with `cancel`.
pub struct SweepPermit {
    _permit: OwnedSemaphorePermit,
    pub cancel: SweepCancel,
}

impl SweepSlots {
    /// The slot, with a fresh cancel handle for its sweep, if no sweep is running.
    pub fn try_acquire(&self) -> Option<SweepPermit> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        let cancel = SweepCancel::default();
        if let Ok(mut current) = self.current.lock() {
            *current = cancel.clone();
        }
        Some(SweepPermit {
            _permit: permit,
            cancel,
        })
    }

    pub fn is_running(&self) -> bool {
        self.permits.available_permits() == 0
    }

    /// Waits until no sweep holds the slot, at most `limit`; `false` if one
    /// still does.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.permits.acquire()).await,
            Ok(Ok(_))
        )
    }

    /// Cancels the running sweep, if there is one; `true` if there was.
    pub fn cancel_running(&self) -> bool {
        if !self.is_running() {
            return false;
        }
        match self.current.lock() {
            Ok(current) => {
                current.cancel();
                true
            }
            Err(_) => false,
        }
    }
}

/// Runs `target`'s scheduled sweeps until shutdown.
pub async fn run_schedule(
    config: std::sync::Arc<Config>,
    target: TargetConfig,
    schedule: SweepScheduleConfig,
    store: Store,
    slots: SweepSlots,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut settings = match settings_for_target(&config, &target) {
        Ok(settings) => settings,
        Err(err) => {
            Failure::ScheduledSweep.emit(Some(&target.name), &err);
            return;
        }
    };
    if let Err(err) = apply_schedule(&mut settings, &schedule) {
        // check-config refuses this; guard anyway.
        Failure::ScheduledSweep.emit(Some(&target.name), &err);
        return;
    }
    let first = schedule.every + schedule_offset(&format!("{}/sweep", target.name), schedule.every);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + first, schedule.every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(permit) = slots.try_acquire() else {
            tracing::warn!(target = %target.name, "scheduled sweep skipped: another sweep is running");
            continue;
        };
        tracing::info!(target = %target.name, "scheduled sweep starting");
        let mut this_sweep = settings.clone();
        this_sweep.cancel = permit.cancel.clone();
        let sweep = run_sweep(this_sweep, Some(&store), |_| {});
        tokio::pin!(sweep);
        // At shutdown the sweep is cancelled, not dropped: it ends
        // `cancelled` with what it measured.
        let result = tokio::select! {
            result = &mut sweep => result,
            _ = shutdown.changed() => {
                permit.cancel.cancel();
                sweep.await
            }
        };
        match result {
            Ok(report) => tracing::info!(
                target = %target.name,
                sweep = ?report.sweep_id,
                status = report.status.as_str(),
                "scheduled sweep ended"
            ),
            Err(err) => Failure::ScheduledSweep.emit(Some(&target.name), &err),
        }
    }
}
