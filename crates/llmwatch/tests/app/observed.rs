//! Issue 36 part 3, "the workload production sent": a simulated vLLM on
//! loopback serves a known mix of lengths, a daemon scrapes it into a real
//! SQLite file, and `--workload observed:` drawn from that file gives the
//! served lengths back decile by decile; `bench --workload observed:` and
//! `bench --dataset sharegpt:` run end to end through the binary.
#![allow(clippy::disallowed_methods)] // tests read the wall clock

use std::time::Duration;

use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_core::observed::nearest_rank;
use llmwatch_engine::observed::{observed_workload, ObservedError};
use llmwatch_probe::trace::{replay, TracePrompts, TraceRequest};
use llmwatch_probe::{ClientConfig, ProbeClient};
use llmwatch_store::Store;

use crate::common::app::TestApp;
use crate::common::{llmwatch, spawn_daemon, wait_for, wait_for_every};

const MODEL: &str = "sim-model";
/// Requests in the served mix.
const SERVED: u32 = 450;

/// The known mix: prompts of 51..=500 tokens and outputs of 11..=100, each
/// length equally often, paired in a scrambled order. Spread out as
/// production traffic is (a histogram cannot give back one exact length:
/// see `llmwatch_core::observed`).
fn served_mix() -> Vec<(u32, u32)> {
    (0..SERVED)
        .map(|i| (51 + (i * 173) % SERVED, 11 + (i * 37) % 90))
        .collect()
}

/// A simulator, a daemon scraping it every 200 ms into its database, and
/// the mix served through it; returns once the daemon has stored every
/// request of it, with the time before the first.
async fn serve_the_mix() -> (llmwatch_sim::Sim, String, TestApp, i64) {
    let (sim, engine, _) = sim::start(&SimArgs::loopback("balanced", MODEL, 50.0))
        .await
        .unwrap();
    let url = format!("http://{engine}");
    let daemon = spawn_daemon(&format!(
        "[[targets]]\nname = \"sim\"\nurl = \"{url}\"\nscrape_interval = \"200ms\"\n"
    ))
    .await;
    // A scrape before the first request: the range's increase starts at 0.
    // (A store reads the series defined when it was opened: opened again
    // until the daemon's first page is in.)
    let (store, started) = wait_for_every(
        "a first scrape",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            let store = Store::open(&daemon.database()).await.ok()?;
            let t = store.target_by_name("sim").await.ok()??;
            let page = store.page_at(t.id, i64::MAX).await.ok()??;
            (!page.raw.is_empty()).then_some((store, page.ts_ms - 1))
        },
    )
    .await;
    let trace: Vec<TraceRequest> = (0u64..)
        .zip(served_mix())
        .map(|(i, (input, output))| TraceRequest {
            timestamp: 4 * i,
            input_length: input,
            output_length: output,
            hash_ids: Vec::new(),
            session_id: None,
        })
        .collect();
    let client = ProbeClient::new(ClientConfig::new(url.clone())).unwrap();
    let prompts = TracePrompts::measure(&client, MODEL, 11).await.unwrap();
    let result = replay(&client, MODEL, &trace, &prompts, 1.0).await;
    assert_eq!((result.requests, result.failed), (u64::from(SERVED), 0));
    assert_eq!(result.input_length_mismatches, 0, "exact inputs served");
    wait_for(
        "the daemon to store every request",
        Duration::from_secs(30),
        || async {
            let now = llmwatch_engine::now_ms();
            let w = observed_workload(&store, "sim", started, now).await.ok()?;
            (w.requests >= f64::from(SERVED)).then_some(())
        },
    )
    .await;
    (sim, url, daemon, started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_workload_reproduces_the_served_deciles() {
    let (_sim, url, daemon, started) = serve_the_mix().await;
    let store = Store::open(&daemon.database()).await.unwrap();
    let now = llmwatch_engine::now_ms();
    let observed = observed_workload(&store, "sim", started, now)
        .await
        .unwrap();
    assert_eq!(observed.requests, f64::from(SERVED));
    let rate = observed.rate_per_second().unwrap();
    // 450 requests over the range (the replay took ~2 s, waiting included).
    assert!(rate > 1.0 && rate < 450.0, "rate {rate}");

    let drawn = observed.draw(4000, rate, 5, None);
    let served = served_mix();
    for (what, served, drawn) in [
        (
            "prompt",
            served.iter().map(|s| s.0).collect::<Vec<_>>(),
            drawn.iter().map(|d| d.input_tokens).collect::<Vec<_>>(),
        ),
        (
            "output",
            served.iter().map(|s| s.1).collect(),
            drawn.iter().map(|d| d.output_tokens).collect(),
        ),
    ] {
        let (mut served, mut drawn) = (served, drawn);
        served.sort_unstable();
        drawn.sort_unstable();
        for k in 1..=9 {
            let q = f64::from(k) / 10.0;
            let want = f64::from(nearest_rank(&served, q).unwrap());
            let got = f64::from(nearest_rank(&drawn, q).unwrap());
            assert!(
                (got - want).abs() <= 0.1 * want,
                "{what} decile {k}: drawn {got}, served {want}"
            );
        }
    }

    // The target page shows the served lengths over its range.
    let page = reqwest::get(format!("{}/targets/sim?range=15m", daemon.base_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!("data-observed-requests=\"{SERVED}\"")),
        "{page}"
    );
    assert!(page.contains("--workload observed:sim:15m"), "{page}");
    let p50 = prompt_p50_on(&page);
    assert!((p50 - 275.0).abs() <= 27.5, "prompt p50 on the page: {p50}");

    // The API answers the same deciles, each within 10 % of the mix served.
    let answer: serde_json::Value = reqwest::get(format!(
        "{}/api/v1/targets/sim/served_workload?from={}",
        daemon.base_url(),
        started / 1000
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(answer["requests"], f64::from(SERVED), "{answer}");
    assert!(answer["missing"].is_null(), "{answer}");
    for (field, mut served) in [
        (
            "prompt_tokens",
            served.iter().map(|s| s.0).collect::<Vec<_>>(),
        ),
        ("output_tokens", served.iter().map(|s| s.1).collect()),
    ] {
        served.sort_unstable();
        for k in 1..=9 {
            let want = f64::from(nearest_rank(&served, f64::from(k) / 10.0).unwrap());
            let got = answer[field][format!("p{}", k * 10)].as_f64().unwrap();
            assert!(
                (got - want).abs() <= 0.1 * want,
                "{field} p{}: answered {got}, served {want}",
                k * 10
            );
        }
    }

    // The binary, end to end: drawn from the same file, replayed exactly.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("observed.json");
    let db = daemon.database().display().to_string();
    let out = llmwatch(&[
        "bench",
        "--url",
        &url,
        "--model",
        MODEL,
        "--workload",
        "observed:sim:10m",
        "--database",
        &db,
        "--requests",
        "40",
        "--rate",
        "200",
        "--json",
        &json.display().to_string(),
    ])
    .await;
    assert!(out.0, "{}\n{}", out.1, out.2);
    assert!(out.1.contains("Observed on sim over 10m"), "{}", out.1);
    assert!(out.1.contains("Prompt tokens deciles: served"), "{}", out.1);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["replay"]["requests"], 40);
    assert_eq!(doc["replay"]["failed"], 0);
    assert_eq!(doc["replay"]["input_length_mismatches"], 0);
    assert_eq!(doc["source"]["workload"]["requests"], f64::from(SERVED));
    let drawn = doc["source"]["drawn"].as_array().unwrap();
    assert_eq!(drawn.len(), 40);
    for (d, record) in drawn
        .iter()
        .zip(doc["replay"]["records"].as_array().unwrap())
    {
        assert_eq!(record["usage"]["prompt_tokens"], d["input_tokens"]);
        assert_eq!(record["usage"]["completion_tokens"], d["output_tokens"]);
    }
}

/// `sweep --workload observed:`: every step sends the served lengths in
/// turn (its mean input is the mix's, not `--shape`'s), through
/// `/v1/completions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_sends_the_observed_lengths_at_every_step() {
    let (_sim, url, daemon, _) = serve_the_mix().await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sweep.json");
    let db = daemon.database().display().to_string();
    let out = llmwatch(&[
        "sweep",
        "--url",
        &url,
        "--model",
        MODEL,
        "--workload",
        "observed:sim:10m",
        "--database",
        &db,
        "--no-store",
        "--concurrency",
        "1,4",
        "--requests-per-step",
        "60",
        "--requests-per-slot",
        "1",
        "--warmup",
        "0",
        "--min-step-duration",
        "0s",
        "--slo-ttft-p95",
        "30s",
        "--slo-itl-p95",
        "10s",
        "--json",
        &json.display().to_string(),
    ])
    .await;
    assert!(out.0, "{}\n{}", out.1, out.2);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(
        doc.to_string().contains("lengths observed:sim:10m"),
        "the card names the workload: {}",
        doc["card"]
    );
    // The card states the mix's median lengths, not --shape's 512x128.
    let median_input: f64 = doc["card"]["input_tokens"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (median_input - 275.5).abs() < 0.15 * 275.5,
        "{}",
        doc["card"]
    );
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{doc}");
    // The served mix's mean prompt is 275.5 tokens (51..=500); 60 drawn
    // requests' mean lies within 15 % of it (the --shape default is 512).
    for step in steps {
        let run = &step["run"];
        let n = run["successful"].as_f64().unwrap();
        assert_eq!(run["failed"].as_f64(), Some(0.0), "{run}");
        let mean = run["total_input_tokens"].as_f64().unwrap() / n;
        assert!((mean - 275.5).abs() < 0.15 * 275.5, "mean input {mean}");
    }
}

/// The sweep API takes `observed:` as its `workload` too (read from the
/// daemon's own store when the sweep starts); an unknown target is refused
/// by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_started_through_the_api_sends_the_observed_lengths() {
    let (_sim, _url, daemon, _) = serve_the_mix().await;
    let base = daemon.base_url();
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        let request = http.post(format!("{base}/api/v1/sweeps")).json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (
                status,
                response
                    .json::<serde_json::Value>()
                    .await
                    .unwrap_or_default(),
            )
        }
    };
    let (status, body) = post(serde_json::json!({
        "target": "sim", "workload": "observed:nope", "concurrency": [1],
        "requests_per_step": 5, "min_step_duration": "300ms",
    }))
    .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.to_string().contains("unknown target \\\"nope\\\""),
        "{body}"
    );
    let (status, body) = post(serde_json::json!({
        "target": "sim", "workload": "observed:sim:10m", "concurrency": [2],
        "requests_per_step": 40, "min_step_duration": "300ms",
    }))
    .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_i64().expect("sweep id");
    let sweep = wait_for("the sweep to end", Duration::from_secs(60), || async {
        let sweep: serde_json::Value = http
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
        let run = &step["run"];
        let mean =
            run["total_input_tokens"].as_f64().unwrap() / run["successful"].as_f64().unwrap();
        assert!((mean - 275.5).abs() < 0.15 * 275.5, "mean input {mean}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_errors_name_the_problem() {
    let (_sim, url, daemon, started) = serve_the_mix().await;
    let store = Store::open(&daemon.database()).await.unwrap();
    let err = observed_workload(&store, "nope", started, llmwatch_engine::now_ms())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ObservedError::UnknownTarget { known, .. } if known == "sim"),
        "{err}"
    );
    // An hour before the daemon started: nothing stored.
    let err = observed_workload(&store, "sim", started - 3_600_000, started - 1_800_000)
        .await
        .unwrap_err();
    assert!(matches!(err, ObservedError::NoHistogram { .. }), "{err}");
    // Through the API: the same reason beside no lengths, and a 404 for an
    // unknown target.
    let base = daemon.base_url();
    let answer: serde_json::Value = reqwest::get(format!(
        "{base}/api/v1/targets/sim/served_workload?from={}&to={}",
        (started - 3_600_000) / 1000,
        (started - 1_800_000) / 1000
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert!(answer["prompt_tokens"].is_null(), "{answer}");
    assert!(
        answer["missing"]
            .as_str()
            .is_some_and(|m| m.contains("has no request_prompt_tokens histogram")),
        "{answer}"
    );
    let unknown = reqwest::get(format!("{base}/api/v1/targets/nope/served_workload"))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    // The last scrapes, once the mix has been served and scraped: no
    // request finished in them.
    let err = wait_for(
        "a range without requests",
        Duration::from_secs(20),
        || async {
            let now = llmwatch_engine::now_ms();
            match observed_workload(&store, "sim", now - 1000, now).await {
                Err(err @ ObservedError::NoRequests { .. }) => Some(err),
                _ => None,
            }
        },
    )
    .await;
    assert!(err.to_string().contains("finished no request"), "{err}");
    // The CLI says which target it did not find.
    let db = daemon.database().display().to_string();
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        &url,
        "--model",
        MODEL,
        "--workload",
        "observed:nope",
        "--database",
        &db,
    ])
    .await;
    assert!(
        !ok && stderr.contains("unknown target \"nope\""),
        "{stderr}"
    );
}

/// `bench --dataset sharegpt:`: every answered human turn of the fixture
/// is a request whose prompt and output lengths the server counted as the
/// target's tokenizer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharegpt_dataset_sends_each_human_turn_with_its_reply_length() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", MODEL, 50.0))
        .await
        .unwrap();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/datasets/sharegpt_small.json"
    );
    let text = std::fs::read_to_string(fixture).unwrap();
    let turns = llmwatch_probe::dataset::parse_sharegpt(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("dataset.json");
    let out = llmwatch(&[
        "bench",
        "--url",
        &format!("http://{engine}"),
        "--model",
        MODEL,
        "--dataset",
        &format!("sharegpt:{fixture}"),
        "--rate",
        "50",
        "--json",
        &json.display().to_string(),
    ])
    .await;
    assert!(out.0, "{}\n{}", out.1, out.2);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["source"]["turns"], turns.len());
    assert_eq!(doc["replay"]["failed"], 0);
    assert_eq!(doc["replay"]["input_length_mismatches"], 0);
    let records = doc["replay"]["records"].as_array().unwrap();
    assert_eq!(records.len(), turns.len());
    for (turn, record) in turns.iter().zip(records) {
        // The simulator's own tokenizer, counted here independently.
        let prompt = llmwatch_sim::tokenizer::encode(&turn.prompt, true).len();
        let reply = llmwatch_sim::tokenizer::encode(&turn.reply, false).len();
        assert_eq!(record["usage"]["prompt_tokens"], prompt);
        assert_eq!(record["usage"]["completion_tokens"], reply);
    }

    // A file that is not ShareGPT is named with its conversation.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"[{"conversations": [{"from": "human"}]}]"#).unwrap();
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        &format!("http://{engine}"),
        "--model",
        MODEL,
        "--dataset",
        &format!("sharegpt:{}", bad.display()),
        "--rate",
        "5",
    ])
    .await;
    assert!(
        !ok && stderr.contains("conversation 0: turn 0: no \"value\""),
        "{stderr}"
    );
}

/// The prompt row's p50 in the page's length table.
fn prompt_p50_on(page: &str) -> f64 {
    let table = &page[page.find("id=\"observed-lengths\"").expect("length table")..];
    let row = &table[table.find("<th>prompt</th>").expect("prompt row")..];
    let cells: Vec<&str> = row
        .split("<td>")
        .skip(1)
        .map(|c| c.split('<').next().unwrap_or(""))
        .collect();
    cells[4].parse().expect("a number")
}
