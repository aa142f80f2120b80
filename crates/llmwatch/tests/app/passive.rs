//! The passive saturation curve end to end: a KV-starved simulator driven
//! through a slow load ramp (concurrency 1, 2, 4, 8, 16, each held until the
//! curve has several windows there), scraped by the real daemon into a real
//! SQLite file; the knee the API reads from those windows lies within one
//! doubling of the knee an active sweep finds on a fresh simulator of the
//! same profile and shape. The target page shows the curve beside that
//! sweep, with the windows behind each point.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_core::analysis::{Load, Objectives, MIN_WINDOWS_PER_POINT};
use llmwatch_engine::runners::sweep::{run_sweep, Ladder, SweepSettings};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_probe::{Api, SelfCheckLimits, Shape};
use serde_json::Value;

const MODEL: &str = "sim-llama-8b";
const PROFILE: &str = "kv-starved";
/// Simulated engine time runs this much faster than wall time.
const TIME_SCALE: f64 = 2.0;
/// 496 + 16 tokens = 32 blocks per sequence: the 256-block cache holds 8.
const INPUT_TOKENS: u32 = 496;
const OUTPUT_TOKENS: u32 = 16;
const LEVELS: [usize; 5] = [1, 2, 4, 8, 16];
/// The passive windows the test asks for (the scrape interval is 250 ms).
const WINDOW: &str = "2s";

async fn get_json(client: &reqwest::Client, url: &str) -> Option<Value> {
    let response = client.get(url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.json().await.ok()
}

fn load_value(load: Load) -> f64 {
    match load {
        Load::Concurrency(c) => f64::from(c),
        Load::RequestRate(_) => panic!("a concurrency ladder was asked for"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_knee_lies_within_one_doubling_of_the_sweeps() {
    let started = Instant::now();
    let (_ramp_sim, engine, _) = start(&SimArgs::loopback(PROFILE, MODEL, TIME_SCALE))
        .await
        .expect("ramp simulator starts");
    let url = format!("http://{engine}");
    let toml = format!(
        "[[targets]]\nname = \"kv\"\nurl = \"{url}\"\nscrape_interval = \"250ms\"\n\
         slo_ttft_p95 = \"1s\"\nslo_itl_p95 = \"100ms\"\n\
         [targets.probe]\ninterval = \"1h\"\n"
    );
    let daemon = common::spawn_daemon(&toml).await;
    let base = daemon.base_url();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client");

    // The active sweep, on a fresh simulator of the same profile, stored
    // under the target's name so the page shows it beside the curve.
    let (_sweep_sim, sweep_engine, _) = start(&SimArgs::loopback(PROFILE, MODEL, TIME_SCALE))
        .await
        .expect("sweep simulator starts");
    let mut settings = SweepSettings::new(format!("http://{sweep_engine}"));
    settings.target_name = Some("kv".to_string());
    settings.model = Some(MODEL.to_string());
    settings.api = Api::Completions;
    settings.shape = Shape {
        input_tokens: INPUT_TOKENS,
        output_tokens: OUTPUT_TOKENS,
    };
    // One step past the ramp's top, so the flat part has two steps.
    settings.ladder = Ladder::Concurrency(vec![1, 2, 4, 8, 16, 32]);
    settings.max_concurrency = 64;
    settings.requests_per_step = 8;
    settings.requests_per_slot = 3;
    settings.min_step_duration = Duration::from_millis(300);
    settings.scrape_interval = Duration::from_millis(50);
    settings.objectives = Objectives::default();
    // The simulators share this process and its cores with the client.
    settings.self_check = SelfCheckLimits {
        max_cpu_cores: 64.0,
        max_scheduler_lag_p99_ms: 1000.0,
        max_dispatch_lag_p99_ms: 1000.0,
        ..Default::default()
    };
    let report = run_sweep(settings, Some(&daemon.daemon.store), |_| {})
        .await
        .expect("sweep runs");
    let Some(sweep_saturation) = report.verdict.saturation.as_ref() else {
        panic!(
            "the sweep finds no knee:\n{}",
            llmwatch::cli::sweep_render::render_report(&report)
        );
    };
    let sweep_knee = load_value(sweep_saturation.load);
    let sweep_id = report.sweep_id.expect("the sweep is stored");
    eprintln!(
        "sweep {sweep_id}: knee at concurrency {sweep_knee} after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The slow ramp on the watched simulator: each level is held until the
    // curve holds a supported point there, plus one window.
    let active = Arc::new(AtomicUsize::new(0));
    let most = LEVELS.iter().copied().max().unwrap_or(1);
    let workers: Vec<_> = (0..most)
        .map(|w| {
            // One unique first word + 495 words = 496 prompt tokens, out of
            // the prefix cache.
            let load = common::load::Completions {
                client: client.clone(),
                url: url.clone(),
                model: MODEL,
                words: INPUT_TOKENS as usize,
                max_tokens: OUTPUT_TOKENS,
                idle_poll: Duration::from_millis(20),
            };
            tokio::spawn(common::load::worker(load, w, active.clone()))
        })
        .collect();
    let ramp_from = now_ms() / 1000;
    let passive_url = format!("{base}/api/v1/targets/kv/passive?from={ramp_from}&window={WINDOW}");
    for level in LEVELS {
        active.store(level, Ordering::Relaxed);
        let level = level as f64;
        common::wait_for_every(
            &format!(
                "{} windows at concurrency {level}",
                MIN_WINDOWS_PER_POINT + 1
            ),
            Duration::from_secs(30),
            Duration::from_millis(500),
            || {
                let (client, url) = (client.clone(), passive_url.clone());
                async move {
                    let curve = get_json(&client, &url).await?;
                    curve["points"].as_array()?.iter().find(|p| {
                        let (lo, hi) = (
                            p["low"].as_f64().unwrap_or(0.0),
                            p["high"].as_f64().unwrap_or(0.0),
                        );
                        lo <= level
                            && level < hi
                            && p["windows"].as_u64().unwrap_or(0) > MIN_WINDOWS_PER_POINT as u64
                    })?;
                    Some(())
                }
            },
        )
        .await;
        eprintln!(
            "level {level} held, {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    for w in workers {
        w.abort();
    }

    let curve = get_json(&client, &passive_url)
        .await
        .expect("the passive curve answers");
    eprintln!("{curve:#}");
    assert_eq!(curve["target"], "kv");
    assert_eq!(curve["window_s"], 2.0);
    let points = curve["points"].as_array().expect("points");
    // Every ramp level is a supported point, and each says its support.
    for level in LEVELS {
        let level = level as f64;
        assert!(
            points.iter().any(|p| p["supported"] == true
                && p["low"].as_f64().is_some_and(|lo| lo <= level)
                && p["high"].as_f64().is_some_and(|hi| level < hi)
                && p["generation_tokens_per_s"]
                    .as_f64()
                    .is_some_and(|t| t > 0.0)),
            "no supported point at {level}"
        );
    }
    assert!(points
        .iter()
        .all(|p| p["windows"].as_u64().is_some_and(|w| w >= 1)));
    let knee = &curve["knee"];
    assert!(curve["no_knee"].is_null(), "{}", curve["no_knee"]);
    let passive_knee = knee["concurrency"].as_f64().expect("a passive knee");
    assert!(
        knee["windows"]
            .as_u64()
            .is_some_and(|w| w >= MIN_WINDOWS_PER_POINT as u64),
        "{knee}"
    );
    let ratio = passive_knee.max(sweep_knee) / passive_knee.min(sweep_knee);
    assert!(
        ratio <= 2.0,
        "passive knee {passive_knee} vs sweep knee {sweep_knee}: more than one doubling apart"
    );
    // Objectives were set: the highest concurrency meeting them is named.
    assert!(
        curve["max_sustainable"]["concurrency"].as_f64().is_some(),
        "{curve}"
    );
    assert_eq!(curve["last_sweep"]["id"], sweep_id);

    // The target page: the section, the windows behind each point, the
    // sweep beside it (its 1-minute windows are too few for a knee here,
    // and the page says so rather than drawing one).
    let page = client
        .get(format!("{base}/targets/kv"))
        .send()
        .await
        .expect("page answers");
    assert!(page.status().is_success());
    let html = page.text().await.expect("page body");
    assert!(
        html.contains("Saturation curve from production traffic"),
        "{html}"
    );
    assert!(
        html.contains(&format!("href=\"/sweeps/{sweep_id}\"")),
        "{html}"
    );
    assert!(html.contains("data-knee=\"too_few_windows\""), "{html}");
    assert!(html.contains("No knee drawn: too little data"), "{html}");
    assert!(html.contains("id=\"passive-points\""), "{html}");
    assert!(html.contains("data-windows=\""), "{html}");
    // The chart downloads carry both curves (the page's 1-minute windows
    // give the passive one no supported point yet: it is named, empty).
    let chart: Value = client
        .get(format!("{base}/targets/kv/passive/throughput.json"))
        .send()
        .await
        .expect("download answers")
        .json()
        .await
        .expect("chart JSON");
    let series = chart["series"].as_array().expect("series");
    assert_eq!(series[0]["name"], "production (passive)", "{chart}");
    assert_eq!(series[1]["name"], "last sweep (active)", "{chart}");
    assert_eq!(
        series[1]["points"].as_array().map(Vec::len),
        Some(6),
        "{chart}"
    );
    eprintln!(
        "passive knee {passive_knee}, sweep knee {sweep_knee}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    daemon.daemon.shutdown().await;
}
