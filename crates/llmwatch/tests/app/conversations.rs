//! Conversations in the daemon against the simulator over loopback: a
//! canary with `workload = "multi-turn:…"` sends a conversation's turns as
//! its probes (stored per turn, cached input growing turn by turn), and a
//! sweep started through the API with a `workload` stores and shows its
//! per-turn figures.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{spawn_daemon, wait_for};
use llmwatch::cli::sim::{self, SimArgs};
use serde_json::{json, Value};

/// One stored turn of a canary conversation: (turn, prompt tokens, cached
/// tokens, shape label).
type Turn = (u64, Option<i64>, Option<i64>, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_turn_canary_records_each_turn_with_its_cached_input() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    // Completions: no chat template, so a first turn shares nothing with
    // another conversation's.
    let toml = format!(
        "[[targets]]\nname = \"chat\"\nurl = \"http://{engine}\"\nscrape_interval = \"500ms\"\n\
         [targets.probe]\ninterval = \"300ms\"\nshape = \"64x8\"\napi = \"completions\"\n\
         workload = \"multi-turn:3,think=10ms\"\n"
    );
    let test = spawn_daemon(&toml).await;
    let store = test.daemon.store.clone();
    let target = wait_for(
        "the target's first scrape",
        Duration::from_secs(10),
        || async { store.target_by_name("chat").await.unwrap() },
    )
    .await;
    // Two whole conversations: turns grouped by the canary's sequence number.
    let conversations = wait_for(
        "two whole conversations",
        Duration::from_secs(30),
        || async {
            let probes = store.probes(target.id, 0, i64::MAX, 1000).await.unwrap();
            let mut by_seq: BTreeMap<u64, Vec<Turn>> = BTreeMap::new();
            for p in &probes {
                assert!(p.ok, "{:?}", p.error);
                let record: Value = serde_json::from_str(&p.record_json).unwrap();
                let seq = record["seq"].as_u64().expect("canary sequence number");
                let turn = record["turn"].as_u64().expect("turn recorded");
                by_seq.entry(seq).or_default().push((
                    turn,
                    p.prompt_tokens,
                    p.cached_tokens,
                    p.shape.clone(),
                ));
            }
            let whole: Vec<_> = by_seq
                .into_values()
                .filter(|turns| turns.len() == 3)
                .collect();
            (whole.len() >= 2).then_some(whole)
        },
    )
    .await;
    for mut turns in conversations {
        turns.sort();
        let labels: Vec<&str> = turns.iter().map(|t| t.3.as_str()).collect();
        assert_eq!(labels, ["64x8 turn 1/3", "64x8 turn 2/3", "64x8 turn 3/3"]);
        let input: Vec<i64> = turns.iter().map(|t| t.1.expect("prompt tokens")).collect();
        let cached: Vec<i64> = turns.iter().map(|t| t.2.expect("cached tokens")).collect();
        assert!(input.windows(2).all(|w| w[1] > w[0] + 60), "{input:?}");
        assert_eq!(
            cached[0], 0,
            "{cached:?}: canaries never share a first turn"
        );
        assert!(cached.windows(2).all(|w| w[1] > w[0]), "{cached:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_started_through_the_api_with_a_workload_shows_its_turns() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 20.0))
        .await
        .unwrap();
    let toml = format!(
        "[[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"500ms\"\n"
    );
    let test = spawn_daemon(&toml).await;
    let base = test.base_url();
    let http = reqwest::Client::new();
    let post = |body: Value| {
        let request = http.post(format!("{base}/api/v1/sweeps")).json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    // A conversation on a rate ladder, or a workload that is none, is refused
    // naming the field.
    let (status, body) = post(json!({
        "target": "sim", "shape": "32x8", "workload": "multi-turn:3", "rate": [1.0]
    }))
    .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("multi-turn"), "{body}");
    let (status, body) = post(json!({ "target": "sim", "workload": "multi-turn:0" })).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("workload"), "{body}");

    let (status, body) = post(json!({
        "target": "sim",
        "shape": "32x8",
        "workload": "multi-turn:3,think=5ms",
        "concurrency": [1, 2],
        "requests_per_step": 6,
        "min_step_duration": "300ms",
    }))
    .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_i64().expect("sweep id");
    let sweep = wait_for("the sweep to end", Duration::from_secs(60), || async {
        let sweep: Value = http
            .get(format!("{base}/api/v1/sweeps/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (sweep["status"] != "running").then_some(sweep)
    })
    .await;
    assert_eq!(sweep["status"], "completed", "{sweep}");
    for step in sweep["steps"].as_array().unwrap() {
        let turns = step["run"]["turns"].as_array().expect("per-turn figures");
        assert_eq!(turns.len(), 3, "{step}");
        let cached: Vec<f64> = turns
            .iter()
            .map(|t| t["cached_tokens_mean"].as_f64().unwrap())
            .collect();
        assert_eq!(cached[0], 0.0, "{cached:?}");
        assert!(cached.windows(2).all(|w| w[1] > w[0]), "{cached:?}");
    }
    let page = http
        .get(format!("{base}/sweeps/{id}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Conversations: per turn"), "{page}");
    assert!(page.contains("id=\"turns-1\""), "{page}");
    assert!(page.contains("random (multi-turn:3,think=5ms)"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_command_prints_each_steps_turns() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 20.0))
        .await
        .unwrap();
    let url = format!("http://{engine}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args([
            "sweep",
            "--url",
            &url,
            "--model",
            "sim-model",
            "--api",
            "completions",
            "--shape",
            "32x8",
            "--workload",
            "multi-turn:3,think=5ms",
            "--concurrency",
            "1,2",
            "--requests-per-step",
            "3",
            "--min-step-duration",
            "100ms",
            "--no-store",
            "--max-client-cpu",
            "64",
            "--max-scheduler-lag",
            "1s",
            "--max-dispatch-lag",
            "1s",
        ])
        .output()
        .await
        .expect("llmwatch runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A turn table under each of the two steps, three turns each.
    assert_eq!(text.matches("cached tok").count(), 2, "{text}");
    // A turn's row: turn, requests, failed, input, cached, hit, TTFT.
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 7 && ["1", "2", "3"].contains(&w[0]))
        .collect();
    assert_eq!(rows.len(), 6, "{text}");
    // Cached input grows turn by turn (the simulator caches prefixes).
    for step in rows.chunks(3) {
        let cached: Vec<f64> = step.iter().map(|w| w[4].parse().unwrap()).collect();
        assert!(
            cached[0] == 0.0 && 0.0 < cached[1] && cached[1] < cached[2],
            "{text}"
        );
    }
    assert!(
        text.contains("prompt_kind=random (multi-turn:3,think=5ms)"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_command_prints_the_turns_of_its_conversations() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 20.0))
        .await
        .unwrap();
    let url = format!("http://{engine}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args([
            "bench",
            "--url",
            &url,
            "--model",
            "sim-model",
            "--api",
            "completions",
            "--shape",
            "32x8",
            "--workload",
            "multi-turn:3,think=5ms",
            "--concurrency",
            "2",
        ])
        .output()
        .await
        .expect("llmwatch runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("2 session(s) x 3 turn(s)"), "{text}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 7 && ["1", "2", "3"].contains(&w[0]))
        .collect();
    let cached: Vec<f64> = rows.iter().map(|w| w[4].parse().unwrap()).collect();
    assert_eq!(cached.len(), 3, "{text}");
    assert!(
        cached[0] == 0.0 && 0.0 < cached[1] && cached[1] < cached[2],
        "{text}"
    );
}
