//! The twin behind "predict a change" in the API and on the sweep page:
//! fits the simulator to a stored sweep (as `llmwatch sim --fit ID`),
//! applies the change (as `llmwatch predict --vllm-args`) and runs the same
//! sweep on it in this process. The web layer keeps the book; this is the
//! runner it is given, since only the binary knows the simulator.

use std::path::PathBuf;

use anyhow::Context;
use llmwatch_engine::runners::sweep::load_sweep;
use llmwatch_sim::{apply_vllm_args, Profile, VllmSettings};
use llmwatch_store::Store;
use llmwatch_web::state::predictions::{PredictFuture, PredictRunner};
use serde_json::Value;

use crate::cli::predict::{auto_time_scale, predict_sweep, prediction_json, PredictArgs};
use crate::cli::sim::{fit_profile, fit_steps_of, vllm_flags, ResolvedProfile};

/// Runs predictions against the daemon's store.
pub struct TwinRunner {
    pub store: Store,
}

impl PredictRunner for TwinRunner {
    fn parse_flags(&self, text: &str) -> Result<Vec<String>, String> {
        let flags = vllm_flags(Some(text), &[]).map_err(|e| format!("{e:#}"))?;
        // Applied to a default profile, so an unknown flag or a bad value
        // is refused now, naming the flag, not minutes later.
        let base = Profile::named("balanced").map_err(|e| e.to_string())?;
        apply_vllm_args(&base, &VllmSettings::default(), &flags).map_err(|e| e.to_string())?;
        Ok(flags)
    }

    fn run(&self, sweep_id: i64, served: Vec<String>, change: Vec<String>) -> PredictFuture {
        let store = self.store.clone();
        Box::pin(async move {
            predict_stored(&store, sweep_id, &served, &change)
                .await
                .map_err(|e| format!("{e:#}"))
        })
    }
}

/// Fits the twin to stored sweep `sweep_id` (its server started with
/// `served`), applies `change`, runs the sweep's own settings on it and
/// answers the predicted sweep's JSON (see [`prediction_json`]).
pub async fn predict_stored(
    store: &Store,
    sweep_id: i64,
    served: &[String],
    change: &[String],
) -> anyhow::Result<Value> {
    let stored = load_sweep(store, sweep_id)
        .await
        .with_context(|| format!("sweep #{sweep_id}"))?;
    let steps = fit_steps_of(&stored);
    if steps.is_empty() {
        anyhow::bail!("sweep #{sweep_id} has no concurrency step with successful requests to fit");
    }
    let source = format!("sweep #{sweep_id}");
    let (file, _) = fit_profile(
        &steps,
        &stored.card,
        Profile::named("balanced")?,
        VllmSettings::default(),
        served,
        &source,
    )?;
    let applied = apply_vllm_args(&file.profile, &file.vllm, change).context("vLLM flags")?;
    let changed = ResolvedProfile {
        profile: applied.profile,
        settings: Some(applied.settings),
        ignored: applied.ignored,
        fit: file.fit,
    };
    let settings: Value = serde_json::from_str(&stored.row.settings_json)
        .with_context(|| format!("sweep #{sweep_id}: its settings are not JSON"))?;
    let args = args_of(&settings, &source)?;
    let ts = auto_time_scale(&changed.profile);
    let report = predict_sweep(&args, &changed, ts, |_| {}).await?;
    Ok(prediction_json(&report, &source, change, &changed, ts))
}

/// The stored sweep's own settings as `llmwatch predict` flags: its shape,
/// prompts, ladder, objectives, step size and warm-up.
fn args_of(settings: &Value, source: &str) -> anyhow::Result<PredictArgs> {
    let text = |key: &str, default: &str| {
        settings
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    let seconds = |path: &[&str]| {
        path.iter()
            .try_fold(settings, |v, key| v.get(key))
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| format!("{}ms", (s * 1000.0).round()))
    };
    let count = |key: &str| settings.get(key).and_then(Value::as_u64);
    let ladder: Vec<String> = settings
        .get("ladder")
        .and_then(|l| l.get("concurrency").or(Some(l)))
        .and_then(Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .filter_map(Value::as_u64)
                .map(|c| c.to_string())
                .collect()
        })
        .unwrap_or_default();
    if ladder.is_empty() {
        anyhow::bail!(
            "{source} has no concurrency ladder to predict (rate sweeps are not predicted)"
        );
    }
    Ok(PredictArgs {
        profile_file: PathBuf::from(source),
        vllm_args: None,
        shape: text("shape", "512x128"),
        api: text("api", "chat"),
        prompt: text("prompt", "random"),
        concurrency: ladder.join(","),
        max_concurrency: count("max_concurrency")
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(llmwatch_engine::runners::sweep::DEFAULT_MAX_CONCURRENCY),
        slo_ttft_p95: seconds(&["objectives", "ttft_p95_s"]).unwrap_or_else(|| "1s".into()),
        slo_itl_p95: seconds(&["objectives", "itl_p95_s"]).unwrap_or_else(|| "50ms".into()),
        slo_e2e_p95: seconds(&["objectives", "e2e_p95_s"]),
        stop_ttft_p95: seconds(&["stop", "ttft_p95_s"]).unwrap_or_else(|| "30s".into()),
        time_scale: None,
        requests_per_step: count("requests_per_step"),
        requests_per_slot: count("requests_per_slot"),
        min_step_duration: seconds(&["min_step_duration_s"]).unwrap_or_else(|| "10s".into()),
        warmup: count("warmup_requests"),
        json: None,
        vllm_flags: Vec::new(),
        self_check: None,
    })
}
