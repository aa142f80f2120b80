//! The live-diagnosis task: every `server.live_interval`, for each target,
//! reads the last `server.live_window` of its stored engine, probe and GPU
//! signals, asks [`live_diagnosis`] for the standing verdict, and stores it
//! (the timeline keeps a row per change of verdict).

use std::sync::Arc;
use std::time::Duration;

use llmwatch_core::analysis::{
    live_diagnosis, AnalysisConfig, EngineCapacity, LiveSample, LiveVerdict, Objectives,
    WorkloadHints, LIVE_ENGINE_SIGNALS, LIVE_GPU_SIGNALS,
};
use llmwatch_core::signals::Signal;
use llmwatch_store::{LiveVerdictRow, Point, Range, Store, StoreError};
use tokio::sync::watch;

use crate::events::Failure;
use crate::sources::scrape::{now_ms, scrape_client};
use crate::sources::server_facts::read_capacity;
use crate::targets::TargetSet;
use crate::ticker::JitteredTicker;
use llmwatch_config::TargetConfig;

/// What the task needs of one target.
#[derive(Debug, Clone)]
pub struct LiveJob {
    pub target_id: i64,
    pub name: String,
    /// The `[[gpus]]` source's target id, when the target names one.
    pub gpu_target_id: Option<i64>,
    /// One sample per scrape: the series step.
    pub step: Duration,
    pub objectives: Objectives,
    /// The target's base URL (llama-server's `/props`) and metrics page,
    /// read for the engine's capacity.
    pub base_url: String,
    pub metrics_url: String,
    /// The KV-cache size the engine last reported (kept across a failed
    /// read: a restart with new settings shows on the next good one).
    pub capacity: EngineCapacity,
}

impl LiveJob {
    pub fn new(target_id: i64, target: &TargetConfig, gpu_target_id: Option<i64>) -> LiveJob {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        LiveJob {
            target_id,
            name: target.name.clone(),
            gpu_target_id,
            step: target.scrape_interval.max(Duration::from_millis(200)),
            // Only a target's own objectives: without one, "high" latency
            // is judged against the window's lowest-load level.
            objectives: Objectives {
                ttft_p95: secs(target.slo_ttft_p95),
                itl_p95: secs(target.slo_itl_p95),
                ..Objectives::default()
            },
            base_url: target.url.clone(),
            metrics_url: target.metrics_url(),
            capacity: EngineCapacity {
                max_num_seqs: target.max_num_seqs.map(u64::from),
                ..EngineCapacity::default()
            },
        }
    }
}

/// How often a target's capacity is read again (it changes only when the
/// server restarts with other settings).
const CAPACITY_REFRESH: Duration = Duration::from_secs(60);

/// Reads the window's samples for one target (engine, probes, GPU merged by
/// instant).
pub async fn window_samples(
    store: &Store,
    job: &LiveJob,
    now: i64,
    window: Duration,
) -> Result<Vec<LiveSample>, StoreError> {
    let step_ms = i64::try_from(job.step.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let range = Range::checked(now.saturating_sub(window_ms), now, step_ms)?;
    let engine = store
        .signals_series(job.target_id, &LIVE_ENGINE_SIGNALS, range)
        .await?;
    let gpu = match job.gpu_target_id {
        Some(gpu) => store.signals_series(gpu, &LIVE_GPU_SIGNALS, range).await?,
        None => Vec::new(),
    };
    Ok(samples_by_instant([engine, gpu]))
}

/// Signal series (of one or several sources) merged into one sample per
/// instant, in time order.
pub fn samples_by_instant(
    sources: impl IntoIterator<Item = Vec<(Signal, Vec<Point>)>>,
) -> Vec<LiveSample> {
    let mut by_ts: std::collections::BTreeMap<i64, Vec<(Signal, f64)>> = Default::default();
    for series in sources {
        for (signal, points) in series {
            for p in points {
                by_ts.entry(p.ts_ms).or_default().push((signal, p.value));
            }
        }
    }
    by_ts
        .into_iter()
        .map(|(ts_ms, signals)| LiveSample { ts_ms, signals })
        .collect()
}

/// Evaluates one target now and stores the verdict.
pub async fn evaluate(
    store: &Store,
    job: &LiveJob,
    window: Duration,
) -> Result<LiveVerdict, StoreError> {
    let now = now_ms();
    let samples = window_samples(store, job, now, window).await?;
    let verdict = live_diagnosis(
        &samples,
        &job.objectives,
        &WorkloadHints {
            capacity: job.capacity,
            ..WorkloadHints::default()
        },
        &AnalysisConfig::default(),
    );
    let row = LiveVerdictRow {
        ts_ms: now,
        verdict: verdict.kind.code().to_string(),
        confidence: verdict.confidence.word().to_string(),
        evidence: verdict.evidence.clone(),
        what_to_try: verdict.what_to_try.to_string(),
        samples: i64::try_from(verdict.samples).unwrap_or(i64::MAX),
    };
    if let Some(previous) = store.record_live_verdict(job.target_id, &row).await? {
        tracing::info!(
            target = %job.name,
            verdict = %row.verdict,
            previous = previous.as_deref().unwrap_or("none"),
            "live verdict changed"
        );
    }
    Ok(verdict)
}

/// The task: evaluates every target of `targets` each `interval` until
/// shutdown (the jobs are rebuilt when the set changes).
pub async fn run_live_diagnosis(
    store: Store,
    targets: TargetSet,
    interval: Duration,
    window: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    // One task for every target, so no phase to spread; the first round
    // runs at once, giving each target a verdict from the start.
    let mut ticker = JitteredTicker::starting_now(interval);
    let mut jobs_of: Option<(Arc<Vec<TargetConfig>>, Vec<LiveJob>)> = None;
    let http = match scrape_client() {
        Ok(http) => Some(http),
        Err(err) => {
            tracing::warn!(error = %err, "live diagnosis: no HTTP client, the engines' capacity stays unknown");
            None
        }
    };
    let mut capacity_read: Option<tokio::time::Instant> = None;
    while ticker.tick(&mut shutdown).await {
        let current = targets.current();
        let fresh = jobs_of
            .as_ref()
            .is_some_and(|(of, _)| Arc::ptr_eq(of, &current));
        if !fresh {
            match jobs_for(&current, &store).await {
                Ok(jobs) => jobs_of = Some((current, jobs)),
                Err(err) => {
                    Failure::StoreRead.emit(None, &err);
                    continue;
                }
            }
        }
        let due = !fresh || capacity_read.is_none_or(|at| at.elapsed() >= CAPACITY_REFRESH);
        if let (true, Some(http), Some((_, jobs))) = (due, &http, jobs_of.as_mut()) {
            for job in jobs.iter_mut() {
                if let Some(capacity) = read_capacity(http, &job.base_url, &job.metrics_url).await {
                    // The configured cap stands where the page says none.
                    job.capacity = EngineCapacity {
                        max_num_seqs: capacity.max_num_seqs.or(job.capacity.max_num_seqs),
                        ..capacity
                    };
                }
            }
            capacity_read = Some(tokio::time::Instant::now());
        }
        for job in jobs_of.iter().flat_map(|(_, jobs)| jobs) {
            if let Err(err) = evaluate(&store, job, window).await {
                Failure::LiveDiagnosis.emit(Some(&job.name), &err);
            }
        }
    }
}

/// The jobs for a set of targets: one per target the store knows, with
/// its GPU source's id.
pub async fn jobs_for(targets: &[TargetConfig], store: &Store) -> Result<Vec<LiveJob>, StoreError> {
    let mut jobs = Vec::new();
    for target in targets {
        let Some(row) = store.target_by_name(&target.name).await? else {
            continue;
        };
        let gpu_id = match &target.gpus {
            Some(gpu) => store.target_by_name(gpu).await?.map(|r| r.id),
            None => None,
        };
        jobs.push(LiveJob::new(row.id, target, gpu_id));
    }
    Ok(jobs)
}
