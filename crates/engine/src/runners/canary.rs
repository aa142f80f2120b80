//! Canary probes in the daemon: one small streaming request per target per
//! interval (deterministic offset plus jitter, never two in flight), each
//! stored with its full timings. The rolling client-side signals
//! (`probe_ttft_p95`, …) are computed from these rows.

use std::sync::Arc;
use std::time::Duration;

use llmwatch_probe::conversation::MultiTurn;
use llmwatch_probe::record::{Api, ProbeRecord};
use llmwatch_probe::{
    Calibrator, Canary, ClientConfig, MeasuringThread, ProbeClient, PromptKind, Secret, Shape,
};
use llmwatch_store::{ProbeRow, Store};
use tokio::sync::watch;

use crate::events::Failure;
use crate::sources::server_facts::{context_limit, discover_model, FactError};
use crate::ticker::JitteredTicker;
use llmwatch_config::{ProbeApi, ProbeConfig, TargetConfig};

/// Converts a probe record into its stored row. Pure.
pub fn probe_row(
    target_id: i64,
    run_id: Option<i64>,
    shape: &str,
    record: &ProbeRecord,
) -> ProbeRow {
    let seconds = |ns: u64| ns as f64 / 1e9;
    ProbeRow {
        target_id,
        run_id,
        ts_ms: i64::try_from(record.wall_sent_unix_ms).unwrap_or(i64::MAX),
        api: record
            .request
            .api
            .path()
            .trim_start_matches("/v1/")
            .to_string(),
        model: record.request.model.clone(),
        shape: shape.to_string(),
        ok: record.is_ok(),
        error_kind: record.error_kind().map(|kind| kind.as_str().to_string()),
        error: record.error.as_ref().map(ToString::to_string),
        http_status: record.http_status,
        ttfb_s: record.ttfb_ns.map(seconds),
        ttft_s: record.ttft_ns.map(seconds),
        tpot_s: record.tpot_ns().map(|ns| ns / 1e9),
        e2e_s: seconds(record.e2e_ns),
        itl_s: record
            .per_token_itl_ns()
            .iter()
            .map(|ns| ns / 1e9)
            .collect(),
        prompt_tokens: record
            .usage
            .as_ref()
            .and_then(|u| u.prompt_tokens)
            .and_then(|t| i64::try_from(t).ok()),
        output_tokens: i64::try_from(record.output_tokens).unwrap_or(i64::MAX),
        cached_tokens: record
            .usage
            .as_ref()
            .and_then(|u| u.cached_tokens)
            .and_then(|t| i64::try_from(t).ok()),
        finish_reason: record.finish_reason.clone(),
        record_json: serde_json::to_string(record).unwrap_or_else(|_| "{}".to_string()),
    }
}

/// Everything one target's canary loop needs.
pub struct CanaryJob {
    pub target_id: i64,
    pub name: String,
    pub base_url: String,
    /// The key, or why it cannot be read.
    pub api_key: Result<Option<Secret>, String>,
    pub probe: ProbeConfig,
}

impl CanaryJob {
    pub fn from_config(target_id: i64, target: &TargetConfig) -> Option<CanaryJob> {
        let probe = target.probe.clone()?;
        // A key named but unset fails closed: the canary stores why it
        // cannot start rather than probing without it.
        let api_key = target
            .api_key()
            .map(|key| key.map(Secret::new))
            .map_err(|err| err.to_string());
        Some(CanaryJob {
            target_id,
            name: target.name.clone(),
            base_url: target.url.clone(),
            api_key,
            probe,
        })
    }
}

/// Why a canary cannot start; stored as its failed probe's error.
#[derive(Debug, thiserror::Error)]
pub enum CanarySetupError {
    /// Its API key is named but cannot be read.
    #[error("{0}")]
    Key(String),
    #[error("no model: {0}")]
    NoModel(FactError),
    #[error(
        "canary shape {shape} needs {needed} tokens of context, but {model} has {limit} ({read_from})"
    )]
    PastContext {
        shape: String,
        needed: u64,
        model: String,
        limit: u64,
        /// Where the limit was read (`/v1/models`, the model's config).
        read_from: String,
    },
}

/// Discovers the model, checks the shape fits its context and calibrates
/// the prompt once against `/tokenize`, so canaries carry exactly the
/// shape's input tokens where the server can count them. The error is the
/// reason the canary cannot start.
async fn prepare_canary(
    job: &CanaryJob,
    client: &ProbeClient,
    probe_client: &ProbeClient,
    api: Api,
    shape: Shape,
) -> Result<Canary, CanarySetupError> {
    // Its key named but unreadable: never probe without it.
    if let Err(why) = &job.api_key {
        return Err(CanarySetupError::Key(why.clone()));
    }
    let model = match &job.probe.model {
        Some(model) => model.clone(),
        None => discover_model(client.http(), &job.base_url)
            .await
            .map_err(CanarySetupError::NoModel)?,
    };
    // A conversation's last turn carries every earlier turn and answer.
    let turns = job.probe.workload.map_or(1, |w| u64::from(w.turns.max(1)));
    let needed = turns * (u64::from(shape.input_tokens) + u64::from(shape.output_tokens));
    if let Some((limit, source)) = context_limit(client.http(), &job.base_url, &model).await {
        if needed > limit {
            return Err(CanarySetupError::PastContext {
                shape: format!(
                    "{shape}{}",
                    job.probe
                        .workload
                        .map(|w| format!(" in {w}"))
                        .unwrap_or_default()
                ),
                needed,
                model,
                limit,
                read_from: source.to_string(),
            });
        }
    }
    let calibration = Calibrator::new()
        .calibrate(client, api, &model, PromptKind::Random, shape.input_tokens)
        .await;
    let canary =
        Canary::new(probe_client.clone(), api, model, shape).with_calibration(&calibration);
    Ok(match job.probe.workload {
        Some(workload) => canary.with_conversation(workload),
        None => canary,
    })
}

/// A failed canary row for a canary that could not start: kind `setup`,
/// the reason as its error. Pure apart from the clock.
pub fn setup_error_row(target_id: i64, api: Api, shape: &str, reason: &str) -> ProbeRow {
    let now_ms = crate::clock::now_ms();
    ProbeRow {
        target_id,
        run_id: None,
        ts_ms: now_ms,
        api: api.path().trim_start_matches("/v1/").to_string(),
        model: String::new(),
        shape: shape.to_string(),
        ok: false,
        error_kind: Some("setup".to_string()),
        error: Some(reason.to_string()),
        http_status: None,
        ttfb_s: None,
        ttft_s: None,
        tpot_s: None,
        e2e_s: 0.0,
        itl_s: Vec::new(),
        prompt_tokens: None,
        output_tokens: 0,
        cached_tokens: None,
        finish_reason: None,
        record_json: "{}".to_string(),
    }
}

/// The shape label a canary's probe is stored under: the shape, and for a
/// conversation's turn which turn it was (its input carries the history,
/// so turns differ in what they measure: `64x16 turn 3/5`).
fn turn_label(shape: &str, workload: Option<MultiTurn>, record: &ProbeRecord) -> String {
    match (workload, record.turn) {
        (Some(w), Some(turn)) => format!("{shape} turn {turn}/{}", w.turns),
        _ => shape.to_string(),
    }
}

/// Fires the canary of one target every `probe.interval` until shutdown.
///
/// Discovery and calibration run here; the probes themselves run on
/// `thread`, with a client of their own (connections belong to the runtime
/// that opened them).
pub async fn run_canary_loop(
    job: CanaryJob,
    thread: Arc<MeasuringThread>,
    store: Store,
    mut shutdown: watch::Receiver<bool>,
) {
    let shape = job.probe.shape;
    let mut client_config = ClientConfig::new(job.base_url.clone());
    client_config.api_key = job.api_key.clone().unwrap_or_default();
    client_config.timeout = job.probe.timeout;
    let clients = ProbeClient::new(client_config.clone())
        .and_then(|setup| Ok((setup, ProbeClient::new(client_config)?)));
    let (client, probe_client) = match clients {
        Ok(clients) => clients,
        Err(err) => {
            Failure::CanarySetup.emit(Some(&job.name), &err);
            return;
        }
    };
    let api = match job.probe.api {
        ProbeApi::Chat => Api::Chat,
        ProbeApi::Completions => Api::Completions,
    };
    let interval = job.probe.interval;
    // A different phase from the scrape of the same target; up to 10 % of
    // the interval (at most 1 s) of jitter.
    let max_jitter = (interval / 10).min(Duration::from_secs(1));
    let mut ticker = JitteredTicker::new(&format!("{}/probe", job.name), interval, max_jitter);
    let mut canary: Option<Arc<Canary>> = None;
    while ticker.tick(&mut shutdown).await {
        if canary.is_none() {
            match prepare_canary(&job, &client, &probe_client, api, shape).await {
                Ok(ready) => canary = Some(Arc::new(ready)),
                Err(reason) => {
                    // Never silence: the reason is stored as a failed probe.
                    Failure::CanarySetup.emit(Some(&job.name), &reason);
                    let row = setup_error_row(
                        job.target_id,
                        api,
                        &job.probe.shape.to_string(),
                        &reason.to_string(),
                    );
                    if let Err(err) = store.write_probe(&row).await {
                        Failure::CanaryStore.emit(Some(&job.name), &err);
                    }
                    continue;
                }
            }
        }
        let Some(current) = canary.clone() else {
            continue;
        };
        // The probe runs in its own task so a slow stream never delays the
        // next tick's busy check or shutdown.
        let store = store.clone();
        let name = job.name.clone();
        let target_id = job.target_id;
        let shape_label = job.probe.shape.to_string();
        let workload = current.workload();
        let probe = thread.spawn(async move { current.conversation().await });
        tokio::spawn(async move {
            match probe.await {
                Ok(Ok(records)) => {
                    for record in &records {
                        if let Some(error) = &record.error {
                            tracing::warn!(target = %name, error = %error, "canary probe failed");
                        }
                        let label = turn_label(&shape_label, workload, record);
                        let row = probe_row(target_id, None, &label, record);
                        if let Err(err) = store.write_probe(&row).await {
                            Failure::CanaryStore.emit(Some(&name), &err);
                        }
                    }
                }
                Ok(Err(busy)) => tracing::debug!(target = %name, "{busy}: tick skipped"),
                // Cancelled: the daemon is shutting down (its measuring
                // thread went with the last canary loop).
                Err(err) if err.is_cancelled() => {
                    tracing::debug!(target = %name, "canary probe cancelled")
                }
                Err(err) => Failure::CanaryTask.emit(Some(&name), &err),
            }
        });
    }
}
