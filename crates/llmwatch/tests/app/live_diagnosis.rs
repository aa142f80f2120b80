//! Live diagnosis end to end: simulators of each profile under a background
//! load whose concurrency rises and falls, scraped by the daemon, judged by
//! its live-diagnosis task; each target's verdict (read through the API) is
//! the one its profile predicts, with its numbers, within 60 s.

use crate::common;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_sim::Sim;
use serde_json::Value;

const MODEL: &str = "sim-llama-8b";

/// One test at a time: each drives its simulators hard on shared cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One simulated target and the load it gets.
struct Case {
    name: &'static str,
    profile: &'static str,
    /// Concurrency levels the load cycles through, one per phase.
    levels: &'static [usize],
    prompt_words: usize,
    max_tokens: u32,
    /// Extra target config (objectives), TOML lines.
    extra: &'static str,
}

struct Started {
    _sims: Vec<Sim>,
    toml: String,
    load: Vec<tokio::task::JoinHandle<()>>,
    /// Each case's levels and the worker gate they drive: the cycles start
    /// only once every target has been judged idle, so each first verdict
    /// is `idle` and the expected one is always a change.
    gates: Vec<(&'static [usize], Arc<AtomicUsize>)>,
}

impl Started {
    fn start_cycles(&mut self) {
        for (levels, active) in self.gates.drain(..) {
            self.load.push(tokio::spawn(common::load::cycle(
                levels.to_vec(),
                active,
                Duration::from_secs(3),
            )));
        }
    }
}

async fn start_cases(cases: &[Case], time_scale: f64) -> Started {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client");
    let mut toml = String::from("[server]\nlive_window = \"60s\"\nlive_interval = \"2s\"\n");
    let (mut sims, mut load, mut gates) = (Vec::new(), Vec::new(), Vec::new());
    for case in cases {
        let (sim, engine, gpu) =
            start(&SimArgs::loopback(case.profile, MODEL, time_scale).with_gpu_page())
                .await
                .expect("simulator starts");
        let url = format!("http://{engine}");
        let gpu = gpu.expect("GPU page requested");
        toml.push_str(&format!(
            "[[targets]]\nname = \"{}\"\nurl = \"{url}\"\nscrape_interval = \"500ms\"\n\
             gpus = \"{0}-gpus\"\n{}\n[[gpus]]\nname = \"{0}-gpus\"\n\
             dcgm_url = \"http://{gpu}/metrics\"\ninterval = \"1s\"\n",
            case.name, case.extra
        ));
        let active = Arc::new(AtomicUsize::new(0));
        let most = case.levels.iter().copied().max().unwrap_or(1);
        for worker in 0..most {
            load.push(tokio::spawn(common::load::worker(
                common::load::Completions {
                    client: client.clone(),
                    url: url.clone(),
                    model: MODEL,
                    words: case.prompt_words + 1,
                    max_tokens: case.max_tokens,
                    idle_poll: Duration::from_millis(50),
                },
                worker,
                active.clone(),
            )));
        }
        gates.push((case.levels, active));
        sims.push(sim);
    }
    Started {
        _sims: sims,
        toml,
        load,
        gates,
    }
}

async fn live_of(client: &reqwest::Client, base: &str, name: &str) -> Option<Value> {
    let url = format!("{base}/api/v1/targets/{name}");
    let body: Value = client.get(url).send().await.ok()?.json().await.ok()?;
    Some(body["live"].clone()).filter(|v| !v.is_null())
}

async fn page(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.expect("page answers");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.text().await.expect("page body")
}

/// Waits up to 60 s for every case's expected verdict; returns the verdicts.
async fn expect_verdicts(cases: &[Case], expected: &[&str]) -> Vec<Value> {
    let mut started = start_cases(cases, 2.0).await;
    // Alert rules on the first case's verdict and on its changes.
    let toml = format!(
        "{}[[alerts]]\nname = \"is-{want}\"\nsignal = \"bottleneck\"\nop = \"==\"\n\
         threshold = \"{want}\"\nwindow = \"1m\"\ntarget = \"{name}\"\n\
         [[alerts]]\nname = \"verdict-changed\"\nsignal = \"bottleneck_changes\"\n\
         op = \">=\"\nthreshold = 1\nwindow = \"1m\"\ntarget = \"{name}\"\n",
        started
            .toml
            .replace("[server]\n", "[server]\nalert_interval = \"1s\"\n"),
        want = expected[0],
        name = cases[0].name,
    );
    let daemon = common::spawn_daemon(&toml).await;
    let base = daemon.base_url();
    let client = reqwest::Client::new();
    for case in cases {
        common::wait_for(
            &format!("{} to be judged idle before any load", case.name),
            Duration::from_secs(30),
            || {
                let (client, base) = (client.clone(), base.clone());
                async move {
                    let live = live_of(&client, &base, case.name).await?;
                    (live["verdict"] == "idle").then_some(())
                }
            },
        )
        .await;
    }
    started.start_cycles();
    let mut found = Vec::new();
    for (case, want) in cases.iter().zip(expected) {
        let verdict = common::wait_for(
            &format!("{} to be judged {want}", case.name),
            Duration::from_secs(60),
            || {
                let (client, base) = (client.clone(), base.clone());
                async move {
                    let live = live_of(&client, &base, case.name).await?;
                    eprintln!("{}: {live}", case.name);
                    (live["verdict"] == *want).then_some(live)
                }
            },
        )
        .await;
        found.push(verdict);
    }
    // The overview card and the target page show the verdict.
    let overview = page(&client, &format!("{base}/")).await;
    let target = page(&client, &format!("{base}/targets/{}", cases[0].name)).await;
    for html in [&overview, &target] {
        assert!(
            html.contains(&format!("data-verdict=\"{}\"", expected[0])),
            "{html}"
        );
    }
    // Both rules fire: the verdict is the expected one, and it changed.
    for rule in [format!("is-{}", expected[0]), "verdict-changed".to_string()] {
        common::wait_for(
            &format!("alert {rule} firing"),
            Duration::from_secs(20),
            || {
                let (client, base, rule) = (client.clone(), base.clone(), rule.clone());
                async move {
                    let body: Value = client
                        .get(format!("{base}/api/v1/alerts?state=firing"))
                        .send()
                        .await
                        .ok()?
                        .json()
                        .await
                        .ok()?;
                    body["alerts"]
                        .as_array()?
                        .iter()
                        .any(|a| a["rule"] == rule.as_str())
                        .then_some(())
                }
            },
        )
        .await;
    }
    // The timeline holds the change to the verdict.
    let timeline: Value = client
        .get(format!("{base}/api/v1/targets/{}/live", cases[0].name))
        .send()
        .await
        .expect("timeline answers")
        .json()
        .await
        .expect("timeline is JSON");
    let changes = timeline["changes"].as_array().expect("changes listed");
    assert!(
        changes.iter().any(|c| c["verdict"] == expected[0]),
        "{timeline}"
    );
    assert_eq!(timeline["window_s"], 60);
    for task in started.load {
        task.abort();
    }
    daemon.daemon.shutdown().await;
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_starved_is_kv_cache_capacity_and_light_load_is_healthy() {
    let _serial = SERIAL.lock().await;
    let cases = [
        Case {
            name: "kv",
            profile: "kv-starved",
            // 240 + 16 tokens fill 16 blocks: the cache holds 16 sequences.
            levels: &[4, 32],
            prompt_words: 239,
            max_tokens: 16,
            extra: "",
        },
        Case {
            name: "light",
            profile: "balanced",
            levels: &[1, 2],
            prompt_words: 31,
            max_tokens: 16,
            extra: "",
        },
    ];
    let verdicts = expect_verdicts(&cases, &["kv_cache_capacity", "healthy"]).await;
    let kv = verdicts[0]["evidence"].as_str().unwrap_or_default();
    assert!(kv.contains("KV-cache usage"), "{kv}");
    assert!(kv.contains("waiting = "), "{kv}");
    let light = verdicts[1]["evidence"].as_str().unwrap_or_default();
    assert!(light.contains("p95 TTFT"), "{light}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_decode_and_scheduler_profiles_get_their_verdicts() {
    let _serial = SERIAL.lock().await;
    // Objectives in engine time divided by the time scale (2), as the sweep
    // tests set them: interactive TTFT 100 ms and ITL 25 ms.
    let cases = [
        Case {
            name: "prefill",
            profile: "prefill-heavy",
            // One request at a time: at two, one request's prefill chunks
            // land between the other's tokens and its ITL is not fine.
            levels: &[1],
            prompt_words: 1023,
            max_tokens: 16,
            // Its ITL (9.6 ms here) is fine but only 1.25× under the 12 ms
            // of the other cases: on a box loaded by other work it crossed
            // 12 ms and the verdict turned decode-bound (CI, 2026-12-04).
            // 18 ms keeps "ITL fine" unambiguous; TTFT is 5× its objective.
            extra: "slo_ttft_p95 = \"50ms\"\nslo_itl_p95 = \"18ms\"",
        },
        Case {
            name: "decode",
            profile: "decode-slow",
            levels: &[1, 2],
            prompt_words: 31,
            max_tokens: 16,
            extra: "slo_ttft_p95 = \"500ms\"\nslo_itl_p95 = \"12ms\"",
        },
        Case {
            name: "seqs",
            profile: "balanced",
            // max-num-seqs is 64, and 64 short sequences use a tenth of the
            // cache: past 64 requests wait with the cache mostly empty,
            // and the running count stays at 64 from the level below.
            levels: &[16, 64, 128],
            prompt_words: 63,
            max_tokens: 16,
            extra: "",
        },
    ];
    let verdicts = expect_verdicts(
        &cases,
        &["prefill_bound", "decode_bound", "scheduler_limit"],
    )
    .await;
    let decode = verdicts[1]["evidence"].as_str().unwrap_or_default();
    assert!(decode.contains("p95 ITL"), "{decode}");
    let seqs = verdicts[2]["evidence"].as_str().unwrap_or_default();
    assert!(seqs.contains("running plateau 64"), "{seqs}");
}

/// One story per target: the live verdict carries its last finished sweep's
/// verdict beside it, agreeing, or saying why the two may differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_verdict_stands_beside_the_last_sweep() {
    use llmwatch_store::{LiveVerdictRow, Store, SweepEnd, SweepStatus};
    let _serial = SERIAL.lock().await;
    // A target nobody serves, judged once at start and then not for an hour.
    let daemon = common::spawn_daemon(
        "[server]\nlive_interval = \"1h\"\n[[targets]]\nname = \"t\"\nurl = \"http://127.0.0.1:9\"\n",
    )
    .await;
    let base = daemon.base_url();
    let client = reqwest::Client::new();
    common::wait_for("the first live verdict", Duration::from_secs(20), || {
        let (client, base) = (client.clone(), base.clone());
        async move { live_of(&client, &base, "t").await }
    })
    .await;
    let store = Store::open(&daemon.database()).await.expect("store opens");
    let target = store
        .target_by_name("t")
        .await
        .expect("read")
        .expect("target row");
    let now = llmwatch_engine::sources::scrape::now_ms();
    let sweep = common::insert_running_sweep(&store, "t", now - 60_000).await;
    let verdict = serde_json::json!({ "findings": [
        { "verdict": "client-bound steps" },
        { "verdict": "KV-cache capacity" },
    ]});
    store
        .finish_sweep(
            sweep,
            &SweepEnd {
                ended_ms: now - 30_000,
                verdict_json: Some(verdict.to_string()),
                stop_reason: None,
                status: SweepStatus::Completed,
            },
        )
        .await
        .expect("sweep finished");
    let judge = |code: &str| LiveVerdictRow {
        ts_ms: llmwatch_engine::sources::scrape::now_ms(),
        verdict: code.to_string(),
        confidence: "medium".into(),
        evidence: "test".into(),
        what_to_try: String::new(),
        samples: 10,
    };
    store
        .record_live_verdict(target.id, &judge("kv_cache_capacity"))
        .await
        .expect("verdict");
    let live = live_of(&client, &base, "t").await.expect("live verdict");
    assert_eq!(live["sweep"]["id"], sweep, "{live}");
    assert_eq!(live["sweep"]["verdict"], "KV-cache capacity", "{live}");
    assert_eq!(live["sweep"]["agrees"], true, "{live}");
    store
        .record_live_verdict(target.id, &judge("healthy"))
        .await
        .expect("verdict");
    let live = live_of(&client, &base, "t").await.expect("live verdict");
    assert_eq!(live["sweep"]["agrees"], false, "{live}");
    let note = live["sweep"]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("a limit the traffic has not reached"),
        "{note}"
    );
    daemon.daemon.shutdown().await;
}
