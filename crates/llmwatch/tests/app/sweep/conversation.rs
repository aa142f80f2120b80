//! A sweep of conversations (`multi-turn:TURNS[,think=DUR]`) against the
//! simulator over loopback: each level's concurrency is that many
//! sessions; per step and turn the stored run holds the input and cached
//! tokens, TTFT and the hit ratio, and the sweep page shows them.

use std::time::Instant;

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_core::analysis::Verdict;
use llmwatch_engine::runners::sweep::{load_sweep, run_sweep};
use llmwatch_probe::conversation::MultiTurn;

use super::{settings, shape, show, temp_store, Target, MODEL, SERIAL};

/// A simulator with its prefix cache on or off.
async fn sim_with_caching(caching: bool) -> Target {
    let mut args = SimArgs::loopback("balanced", MODEL, 20.0).with_gpu_page();
    if !caching {
        args.vllm_args = vec!["--no-enable-prefix-caching".to_string()];
    }
    let (sim, engine, gpu) = start(&args).await.expect("simulator starts");
    let gpu = gpu.expect("GPU page requested");
    Target {
        sim,
        url: format!("http://{engine}"),
        gpu_url: format!("http://{gpu}/metrics"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_turn_sweep_shows_cached_input_growing_turn_by_turn_with_prefix_caching_and_zero_without(
) {
    let _serial = SERIAL.lock().await;
    for caching in [true, false] {
        let started = Instant::now();
        let t = sim_with_caching(caching).await;
        // Completions: no chat template, so a first turn shares nothing.
        let mut s = settings(&t, shape(64, 8), &[1, 2]);
        s.conversation = Some(MultiTurn::parse("multi-turn:4,think=5ms").expect("parses"));
        s.requests_per_step = 8;
        let (_dir, store) = temp_store().await;
        let report = run_sweep(s, Some(&store), |_| {})
            .await
            .expect("the sweep runs");
        show(
            &format!("multi-turn, prefix caching {caching}"),
            &report,
            started,
        );
        // A conversation expects its history to hit the cache: with the
        // cache off the diagnosis says so; with it on it finds nothing to say.
        let caching_off = report
            .verdict
            .findings
            .iter()
            .any(|f| f.verdict == Verdict::PrefixCachingIneffective);
        assert_eq!(caching_off, !caching, "{:#?}", report.verdict.findings);
        let id = report.sweep_id.expect("stored");
        let stored = load_sweep(&store, id).await.expect("reads back");
        assert_eq!(stored.runs.len(), 2);
        for (step, run) in stored.steps.iter().zip(&stored.runs) {
            let table = llmwatch_probe::conversation::render_turn_table(&run.turns);
            assert_eq!(run.turns.len(), 4, "step {}:\n{table}", step.load);
            // Each session holds whole conversations: every turn as many
            // requests, at least the step's sessions, none failed.
            let sessions = u64::from(super::concurrency(step.load));
            let first = run.turns[0].requests;
            assert!(first >= sessions, "{table}");
            assert!(
                run.turns
                    .iter()
                    .all(|t| t.requests == first && t.failed == 0),
                "{table}"
            );
            assert_eq!(run.requests, 4 * first, "{table}");
            let input: Vec<f64> = run
                .turns
                .iter()
                .map(|t| t.input_tokens_mean.expect("input reported"))
                .collect();
            let cached: Vec<f64> = run
                .turns
                .iter()
                .map(|t| t.cached_tokens_mean.expect("cached reported"))
                .collect();
            // Each turn resends the history: 64 new tokens and an 8-token answer.
            assert!(input.windows(2).all(|w| w[1] > w[0] + 60.0), "{table}");
            if caching {
                assert_eq!(cached[0], 0.0, "{table}");
                assert!(cached.windows(2).all(|w| w[1] > w[0]), "{table}");
                assert!(run.turns[3].hit_ratio.expect("ratio") > 0.5, "{table}");
                // The step is not marked: conversations hit their own turns.
                assert_eq!(step.cache_contaminated, None);
            } else {
                assert!(cached.iter().all(|c| *c == 0.0), "{table}");
            }
        }
        // The sweep page shows the per-turn tables.
        let page = llmwatch_web::pages::sweep::sweep_page(&store, id)
            .await
            .expect("page reads")
            .expect("sweep exists");
        assert_eq!(page.conversations.len(), 2);
        assert_eq!(page.conversations[1].rows.len(), 4);
        assert_eq!(
            page.conversations[1].rows[0].cached_tokens, "0.0",
            "a first turn shares nothing"
        );
        assert!(page.prompt.contains("multi-turn:4"), "{}", page.prompt);
        drop(t.sim);
    }
}

/// An experiment whose load is conversations: the baseline (prefix caching
/// on) against `--no-enable-prefix-caching`, each variant's per-turn
/// benefit at the reference load in the report. The baseline runs with no
/// flag: the simulator states vLLM's defaults then too, so the variant's
/// one flag is the one change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_experiment_of_conversations_reports_the_prefix_cache_benefit_per_turn_per_variant() {
    let _serial = SERIAL.lock().await;
    let llmwatch = env!("CARGO_BIN_EXE_llmwatch");
    let plan = format!(
        r#"
[experiment]
name = "caching"
repeats = 1
[server]
command = ["{llmwatch}", "sim", "--port", "{{port}}", "--time-scale", "20", "--profile", "balanced", "--"]
ready_timeout = "20s"
[sweep]
shape = "64x8"
concurrency = [1, 2]
workload = "multi-turn:3,think=5ms"
requests_per_step = 6
min_step_duration = "200ms"
scrape_interval = "100ms"
client_self_check = false
[[variant]]
name = "baseline"
args = []
[[variant]]
name = "no-cache"
args = ["--no-enable-prefix-caching"]
"#
    );
    let dir = tempfile::tempdir().expect("dir");
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).expect("plan");
    let out = dir.path().join("out");
    let run = std::process::Command::new(llmwatch)
        .args(["experiment", plan_path.to_str().expect("utf-8"), "--out"])
        .arg(&out)
        .arg("--database")
        .arg(dir.path().join("x.db"))
        .output()
        .expect("llmwatch runs");
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    let result: llmwatch_core::analysis::experiment::ExperimentResult =
        serde_json::from_str(&text).expect("parses");
    for v in &result.variants {
        let cached: Vec<f64> = v
            .turns
            .iter()
            .map(|t| t.cached_tokens_mean.expect("cached reported"))
            .collect();
        assert_eq!(
            cached.len(),
            3,
            "{}: {:?} {:?} {:?}",
            v.name,
            v.status,
            v.reason,
            v.turns
        );
        match v.name.as_str() {
            "baseline" => {
                assert_eq!(cached[0], 0.0, "{cached:?}");
                assert!(cached.windows(2).all(|w| w[1] > w[0]), "{cached:?}");
            }
            _ => assert!(cached.iter().all(|c| *c == 0.0), "{cached:?}"),
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("Prefix-cache benefit per turn"), "{md}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("data-turn=\"3\""), "{html}");
}
