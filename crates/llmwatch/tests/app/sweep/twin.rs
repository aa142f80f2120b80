//! The verdicts on the twin: the simulator fitted to a real vLLM 0.32's
//! default sweep (`fixtures/vllm-real-sweeps/default.json`), given the
//! flags that induced a limit on the real server, is swept as that server
//! was, and must be judged as the real sweep was re-judged
//! (`crates/engine/tests/real_sweeps.rs`): the same limit, on behaviour a
//! real engine showed rather than on a profile shaped to the rules.

use std::path::Path;

use llmwatch::cli::predict::{auto_time_scale, predict_sweep, PredictArgs};
use llmwatch::cli::sim::{fit_profile, steps_from_sweep_json, ResolvedProfile};
use llmwatch_core::analysis::Verdict;
use llmwatch_sim::{apply_vllm_args, Profile, VllmSettings};

use super::SERIAL;

fn flags(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// The twin of the real server with `change` applied.
fn twin(change: &str) -> ResolvedProfile {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vllm-real-sweeps/default.json");
    let text = std::fs::read_to_string(&path).expect("the recorded default sweep");
    let json = serde_json::from_str(&text).expect("JSON");
    let (steps, card) = steps_from_sweep_json(&json).expect("steps to fit");
    // The flags the real server ran with that its page does not show.
    let served = flags("--max-num-seqs 128 --max-num-batched-tokens 2048");
    let (file, _) = fit_profile(
        &steps,
        &card,
        Profile::named("balanced").expect("profile"),
        VllmSettings::default(),
        &served,
        "the recorded default sweep",
    )
    .expect("the default sweep fits");
    let applied =
        apply_vllm_args(&file.profile, &file.vllm, &flags(change)).expect("the change applies");
    ResolvedProfile {
        profile: applied.profile,
        settings: Some(applied.settings),
        ignored: applied.ignored,
        fit: file.fit,
    }
}

/// A short sweep of the real server's shape and objectives: one level
/// below the limit, one past it.
fn args(shape: &str, concurrency: &str) -> PredictArgs {
    PredictArgs {
        profile_file: "twin".into(),
        vllm_args: None,
        shape: shape.into(),
        api: "chat".into(),
        prompt: "random".into(),
        concurrency: concurrency.into(),
        max_concurrency: 64,
        slo_ttft_p95: "1s".into(),
        slo_itl_p95: "50ms".into(),
        slo_e2e_p95: None,
        stop_ttft_p95: "30s".into(),
        time_scale: None,
        requests_per_step: Some(8),
        requests_per_slot: Some(1),
        min_step_duration: "2s".into(),
        warmup: Some(2),
        json: None,
        vllm_flags: Vec::new(),
        // Loosened as the other sweeps of this binary (see its module
        // docs): other builds share these two cores.
        self_check: Some(llmwatch_probe::SelfCheckLimits {
            max_cpu_cores: 64.0,
            max_scheduler_lag_p99_ms: 1000.0,
            max_dispatch_lag_p99_ms: 1000.0,
            ..Default::default()
        }),
    }
}

async fn top_verdict(change: &str, shape: &str, concurrency: &str) -> (Verdict, String) {
    let changed = twin(change);
    let ts = auto_time_scale(&changed.profile);
    let report = predict_sweep(&args(shape, concurrency), &changed, ts, |_| {})
        .await
        .expect("the twin's sweep runs");
    let top = report
        .verdict
        .findings
        .iter()
        .find(|f| f.verdict != Verdict::ClientBound)
        .unwrap_or_else(|| panic!("a finding in {:#?}", report.verdict));
    (top.verdict, top.evidence.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twin_of_a_kv_starved_vllm_is_judged_kv_cache_capacity() {
    let _serial = SERIAL.lock().await;
    let (verdict, evidence) = top_verdict("--num-gpu-blocks-override 40", "512x128", "4,16").await;
    assert_eq!(verdict, Verdict::KvCacheCapacity, "{evidence}");
    assert!(
        evidence.contains("39 blocks (40 less 1 null)") && evidence.contains("= 7"),
        "{evidence}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twin_of_a_seqs_capped_vllm_is_judged_a_scheduler_limit() {
    let _serial = SERIAL.lock().await;
    let (verdict, evidence) = top_verdict("--max-num-seqs 4", "512x128", "2,16").await;
    assert_eq!(verdict, Verdict::SchedulerLimit, "{evidence}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twin_of_a_token_budget_bound_vllm_is_judged_prefill_bound() {
    let _serial = SERIAL.lock().await;
    let (verdict, evidence) = top_verdict("--max-num-batched-tokens 256", "1536x32", "2,16").await;
    assert_eq!(verdict, Verdict::PrefillBound, "{evidence}");
}
