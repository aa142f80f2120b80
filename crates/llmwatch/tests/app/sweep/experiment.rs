//! `llmwatch experiment` end to end: the plan's `command` starts the
//! simulator (this build's `llmwatch sim`) once per variant and repeat with
//! different vLLM flags; the CLI runs the experiment, stores it, writes the
//! report; `--report ID` rewrites it from the database; Chromium opens the
//! HTML.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use llmwatch_core::analysis::experiment::{ExperimentResult, VariantResult, VariantStatus};
use serde_json::json;

use crate::common::browser::{find_chromium, Browser};

const LLMWATCH: &str = env!("CARGO_BIN_EXE_llmwatch");

/// Five variants over a scheduler-limited simulator (`--max-num-seqs 4`):
/// one that truly raises capacity (16 seqs), one that answers the graded
/// set worse, one that changes two things, one whose server exits at start.
/// Time scale 4 keeps a decode step above the timer's granularity. No GPU
/// page: on a shared two-core host the simulated GPU looks idle while the
/// client waits, and "outside the GPU" would then outrank the scheduler
/// cap this plan is about.
fn plan() -> String {
    format!(
        r#"
[experiment]
name = "seqs"
repeats = 2
seed = 7
[server]
command = ["{LLMWATCH}", "sim", "--port", "{{port}}", "--time-scale", "4", "--profile", "balanced", "--"]
ready_timeout = "20s"
[sweep]
shape = "64x16"
concurrency = [4, 16, 32]
slo_ttft_p95 = "40ms"
slo_itl_p95 = "20ms"
requests_per_step = 16
min_step_duration = "200ms"
scrape_interval = "100ms"
client_self_check = false
[quality]
set = "builtin:arith-50"
max_drop = 0.1
max_tokens = 4
[[variant]]
name = "baseline"
args = ["--max-num-seqs", "4"]
[[variant]]
name = "seqs-16"
args = ["--max-num-seqs", "16"]
[[variant]]
name = "lossy"
args = ["--max-num-seqs", "4", "--quality-error-rate", "0.4"]
[[variant]]
name = "two-changes"
args = ["--max-num-seqs", "16", "--kv-cache-dtype", "fp8"]
[[variant]]
name = "broken"
args = ["--max-num-seqs", "0"]
"#
    )
}

fn llmwatch(args: &[&str]) -> String {
    let out = Command::new(LLMWATCH)
        .args(args)
        .output()
        .expect("llmwatch runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "llmwatch {args:?} failed:\n{text}");
    text
}

fn variant<'a>(result: &'a ExperimentResult, name: &str) -> &'a VariantResult {
    result
        .variants
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("variant {name}"))
}

fn read_result(dir: &Path) -> ExperimentResult {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("report.json parses as an experiment result")
}

fn check_decision(result: &ExperimentResult) {
    assert_eq!(result.status, "completed");
    assert_eq!(
        result.ranking[0].variant, "seqs-16",
        "{:#?}",
        result.ranking
    );
    let (base, seqs) = (variant(result, "baseline"), variant(result, "seqs-16"));
    let (b, s) = (
        base.capacity.as_ref().expect("baseline capacity"),
        seqs.capacity.as_ref().expect("seqs-16 capacity"),
    );
    assert!(
        s.throughput_at_objective.low > b.throughput_at_objective.high,
        "separated intervals: {s:?} vs {b:?}"
    );
    assert_eq!(
        (b.max_sustainable.estimate, s.max_sustainable.estimate),
        (4.0, 16.0)
    );
    assert_eq!(seqs.raises_capacity, Some(true));
    for v in [base, seqs, variant(result, "lossy")] {
        assert_eq!(
            v.status,
            VariantStatus::Completed,
            "{}: {:?}",
            v.name,
            v.reason
        );
        let binding = v
            .binding
            .as_ref()
            .unwrap_or_else(|| panic!("{} binding", v.name));
        assert_eq!(binding.kind, "SchedulerLimit", "{}: {binding:?}", v.name);
        assert_eq!(v.runs.len(), 2);
        assert!(v.runs.iter().all(|r| r.prefix_cache_reset == Some(true)));
    }
    // Interleaved: another variant ran between the baseline's two runs.
    assert!(base.runs[0].order < seqs.runs[0].order && seqs.runs[0].order < base.runs[1].order);
    let answer = result.answer.join("\n");
    assert!(
        answer.contains("seqs-16 (--max-num-seqs 4 → 16) helped most"),
        "{answer}"
    );
    assert!(
        answer.contains("raise --max-num-seqs"),
        "what to try next: {answer}"
    );
}

fn check_refusals_and_marks(result: &ExperimentResult) {
    let two = variant(result, "two-changes");
    assert_eq!(two.status, VariantStatus::Refused);
    assert!(two.runs.is_empty(), "a refused variant is never started");
    assert!(two
        .reason
        .as_deref()
        .unwrap_or("")
        .contains("changes 2 settings"));
    let lossy = variant(result, "lossy");
    let accuracy = lossy.accuracy.as_ref().expect("graded");
    assert!(accuracy.interval.estimate < 0.8, "{accuracy:?}");
    assert!(lossy.quality_mark.is_some());
    let base = variant(result, "baseline")
        .accuracy
        .as_ref()
        .expect("graded");
    assert_eq!((base.correct, base.total), (50, 50));
    assert!(result
        .ranking
        .iter()
        .any(|r| r.variant == "lossy" && r.marks.contains(&"accuracy dropped".to_string())));
    let broken = variant(result, "broken");
    assert_eq!(broken.status, VariantStatus::Failed);
    assert!(broken.reason.as_deref().unwrap_or("").contains("exited"));
    let tail = broken.log_tail.as_deref().unwrap_or("");
    assert!(tail.contains("--max-num-seqs"), "log tail: {tail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_experiment_ranks_the_real_gain_marks_refuses_survives_and_reports() {
    let _serial = super::SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("dir");
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan()).expect("plan");
    let db = dir.path().join("x.db");
    let out = dir.path().join("out");
    let printed = llmwatch(&[
        "experiment",
        plan_path.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--database",
        db.to_str().expect("utf-8"),
    ]);
    assert!(printed.contains("experiment #1"), "{printed}");
    let result = read_result(&out);
    check_decision(&result);
    check_refusals_and_marks(&result);
    assert!(std::fs::read_to_string(out.join("report.md"))
        .expect("report.md")
        .contains("| 1 | seqs-16 |"));
    // The stored result rewrites the same report.
    let again = dir.path().join("again");
    llmwatch(&[
        "experiment",
        "--report",
        "1",
        "--database",
        db.to_str().expect("utf-8"),
        "--out",
        again.to_str().expect("utf-8"),
    ]);
    assert_eq!(
        read_result(&again),
        ExperimentResult {
            id: Some(1),
            ..result.clone()
        }
    );
    check_html_in_chromium(&again.join("report.html")).await;
}

async fn check_html_in_chromium(path: &Path) {
    let chromium = find_chromium().expect(
        "no chromium on PATH: install Debian's `chromium` (.ci/run does) or set LLMWATCH_CHROMIUM",
    );
    let mut browser = Browser::launch(&chromium).await;
    let url = format!("file://{}", path.display());
    browser.open(&url).await;
    let seen = browser
        .eval(
            "JSON.stringify({
               charts: Array.from(document.querySelectorAll('svg[data-chart]')).map(s => s.dataset.chart),
               series: Array.from(document.querySelectorAll('svg[data-chart=\"ttft\"] polyline')).map(p => p.dataset.series),
               drawn: Array.from(document.querySelectorAll('svg[data-chart]')).every(s => s.getBoundingClientRect().width > 100),
               first: document.querySelector('tbody tr[data-variant]').dataset.variant,
               marked: !!document.querySelector('[data-variant-section=\"lossy\"] [data-quality-mark]'),
               log: (document.querySelector('[data-variant-section=\"broken\"] pre.log') || {}).textContent || '',
               binding: (document.querySelector('[data-variant-section=\"seqs-16\"] [data-binding]') || {dataset: {}}).dataset.binding,
               fetched: performance.getEntriesByType('resource').length,
               scripts: document.scripts.length,
             })",
        )
        .await;
    let seen: serde_json::Value =
        serde_json::from_str(seen.as_str().expect("a JSON string")).expect("JSON");
    assert_eq!(seen["charts"], json!(["throughput", "ttft", "itl", "kv"]));
    for name in ["baseline p95", "seqs-16 p95", "lossy p50"] {
        assert!(
            seen["series"]
                .as_array()
                .expect("series")
                .contains(&json!(name)),
            "{name} overlaid: {seen}"
        );
    }
    assert_eq!(seen["drawn"], json!(true), "{seen}");
    assert_eq!(seen["first"], json!("seqs-16"));
    assert_eq!(seen["marked"], json!(true));
    assert!(
        seen["log"]
            .as_str()
            .unwrap_or("")
            .contains("--max-num-seqs"),
        "{seen}"
    );
    assert_eq!(seen["binding"], json!("SchedulerLimit"));
    assert_eq!(
        (seen["fetched"].clone(), seen["scripts"].clone()),
        (json!(0), json!(0)),
        "self-contained: nothing fetched, no script"
    );
    tokio::time::timeout(Duration::from_secs(10), browser.close())
        .await
        .expect("chromium closes");
}

/// A server the user restarts by hand (`url = …`): the runner asks before
/// each run, and a variant whose flags the server's card contradicts (the
/// user did not restart it with `--kv-cache-dtype fp8`) fails, naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_plan_asks_before_each_run_and_checks_the_card() {
    use std::sync::{Arc, Mutex};

    use llmwatch::cli::sim::{start, SimArgs};
    use llmwatch_config::experiment::ExperimentPlan;
    use llmwatch_engine::runners::experiment::{run_experiment, ExperimentOptions, Operator};

    let _serial = super::SERIAL.lock().await;
    let mut args = SimArgs::loopback("balanced", "sim-llama-8b", 4.0);
    args.vllm_args = vec!["--max-num-seqs".into(), "4".into()];
    let (_sim, engine, _) = start(&args).await.expect("simulator starts");
    let text = format!(
        r#"
url = "http://{engine}"
[experiment]
name = "by-hand"
repeats = 1
[sweep]
shape = "32x8"
concurrency = [1, 2]
requests_per_step = 6
requests_per_slot = 1
min_step_duration = "100ms"
scrape_interval = "100ms"
client_self_check = false
[[variant]]
name = "baseline"
args = ["--max-num-seqs", "4"]
[[variant]]
name = "fp8-kv"
args = ["--max-num-seqs", "4", "--kv-cache-dtype", "fp8"]
"#
    );
    let plan = ExperimentPlan::parse(&text, Path::new("plan.toml")).expect("plan");
    let dir = tempfile::tempdir().expect("dir");
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    let operator: Operator = Arc::new(move |message: String| {
        seen.lock().expect("lock").push(message);
        Box::pin(async { true })
    });
    let mut options = ExperimentOptions::new(dir.path().join("logs"), dir.path().to_path_buf());
    options.operator = Some(operator);
    let result = run_experiment(&plan, &options, None, |_| {})
        .await
        .expect("experiment runs");
    let asked = asked.lock().expect("lock").clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[1].contains("\"fp8-kv\"") && asked[1].contains("--kv-cache-dtype fp8"));
    assert_eq!(
        variant(&result, "baseline").status,
        VariantStatus::Completed
    );
    let fp8 = variant(&result, "fp8-kv");
    assert_eq!(fp8.status, VariantStatus::Failed);
    let reason = fp8.reason.as_deref().unwrap_or("");
    assert!(
        reason.contains(
            "kv_cache_dtype: the server reports auto, the plan says --kv-cache-dtype fp8"
        ),
        "{reason}"
    );
}
