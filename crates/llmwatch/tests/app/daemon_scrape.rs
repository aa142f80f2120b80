//! The daemon over loopback: fixture pages of every engine and dcgm-exporter
//! served over HTTP, plus targets that answer 500, garbage, a 50 MB page, or
//! hang. After a few scrape rounds the SQLite file holds each engine's
//! signals, the bad targets are recorded down with their reasons, and the
//! good ones kept their schedule.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use common::app::TestApp;
use common::wait_for;
use llmwatch_core::signals::Signal;
use llmwatch_store::Store;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"))
}

/// (target name, fixture file) for every engine page.
const PAGES: &[(&str, &str)] = &[
    ("vllm", "vllm-live/metrics_vllm_idle.txt"),
    ("vllm-v1", "vllm/metrics_example.txt"),
    ("nim", "nim/metrics_example.txt"),
    ("sglang", "sglang/metrics_example.txt"),
    ("tgi", "tgi/metrics_example.txt"),
    ("llamacpp", "llamacpp-live/metrics_llamacpp_idle.txt"),
    ("trtllm", "tensorrt-llm-triton/metrics_example.txt"),
    ("dynamo", "dynamo/metrics_example.txt"),
    ("dcgm", "dcgm-exporter/metrics_example.txt"),
];

async fn page(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "error" => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        "garbage" => (
            StatusCode::OK,
            "\u{0}\u{1}{{{ not a metrics page\n=== !!!\n",
        )
            .into_response(),
        "huge" => {
            let line =
                "filler_metric{label=\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"} 1\n";
            let body = line.repeat(50 * 1024 * 1024 / line.len());
            (StatusCode::OK, body).into_response()
        }
        "hang" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
        other => match PAGES.iter().find(|(n, _)| *n == other) {
            Some((_, file)) => match std::fs::read(fixtures().join(file)) {
                Ok(bytes) => Response::builder()
                    .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
                    .body(Body::from(bytes))
                    .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
                Err(_) => StatusCode::NOT_FOUND.into_response(),
            },
            None => StatusCode::NOT_FOUND.into_response(),
        },
    }
}

/// Every fixture page, the four bad targets and the GPU page, served at `base`.
fn targets_at(base: &str) -> String {
    let mut toml = String::new();
    for (name, _) in PAGES.iter().filter(|(n, _)| *n != "dcgm") {
        toml.push_str(&format!(
            "[[targets]]\nname = \"{name}\"\nurl = \"{base}/{name}\"\nscrape_interval = \"250ms\"\n"
        ));
    }
    for bad in ["error", "garbage", "huge", "hang"] {
        toml.push_str(&format!(
            "[[targets]]\nname = \"{bad}\"\nurl = \"{base}/{bad}\"\nscrape_interval = \"250ms\"\n"
        ));
    }
    toml.push_str(&format!(
        "[[gpus]]\nname = \"gpu-node\"\ndcgm_url = \"{base}/dcgm/metrics\"\ninterval = \"250ms\"\n"
    ));
    toml
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_every_engine_and_survives_bad_targets() {
    let app = Router::new().route("/{name}/metrics", get(page));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let app = TestApp::builder().config(&targets_at(&base)).spawn().await;
    let running = &app.daemon;
    let web = app.base_url();
    let started = Instant::now();
    // Run until the hanging target has timed out eight times and every
    // target has been scraped, then judge the others against that time.
    let live = running.store.clone();
    wait_for(
        "eight timed-out scrapes of the hanging target",
        Duration::from_secs(20),
        || async {
            let targets = live.targets().await.unwrap();
            if targets.len() < PAGES.len() + 4 {
                return None;
            }
            let hang = targets.iter().find(|t| t.name == "hang")?;
            let health = live.scrape_health(hang.id, 100).await.unwrap();
            (health.len() >= 8).then_some(())
        },
    )
    .await;
    let elapsed = started.elapsed();

    // The overview lists targets while it runs.
    let html = reqwest::get(format!("{web}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains("href=\"/targets/vllm\"")
            && html.contains("engine vllm")
            && html.contains("KV-cache usage"),
        "{html}"
    );
    assert_eq!(
        reqwest::get(format!("{web}/healthz"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok"
    );
    let db = app.database();
    let (_dir, _) = app.stop().await;

    let store = Store::open(&db).await.unwrap();
    let targets = store.targets().await.unwrap();
    assert_eq!(targets.len(), PAGES.len() + 4);
    let by_name = |name: &str| {
        targets
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("target {name} missing"))
            .clone()
    };

    // Good targets kept their 250 ms schedule with a hanging neighbour: at
    // least 70 % of the rounds that fit in the time it ran.
    let rounds = elapsed.as_secs_f64() / 0.25;
    for (name, _) in PAGES.iter().filter(|(n, _)| *n != "dcgm") {
        let target = by_name(name);
        let health = store.scrape_health(target.id, 1000).await.unwrap();
        let up = health.iter().filter(|h| h.up).count();
        assert!(
            up as f64 >= (0.7 * rounds).floor() - 1.0,
            "{name}: only {up} successful scrapes in {elapsed:?}: {health:?}"
        );
        assert!(health.iter().all(|h| h.up), "{name}: {health:?}");
        assert_eq!(
            target.engine.as_deref(),
            Some(*name).map(|n| if n == "vllm-v1" { "vllm" } else { n })
        );
    }

    let signals = |name: &'static str| {
        let store = store.clone();
        let id = by_name(name).id;
        async move { store.latest_signals(id).await.unwrap() }
    };
    let value = |signals: &[(Signal, f64)], signal: Signal| {
        signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v)
    };
    let vllm = signals("vllm").await;
    assert_eq!(value(&vllm, Signal::KvCacheUsage), Some(0.0));
    assert_eq!(value(&vllm, Signal::RequestsWaiting), Some(0.0));
    let nim = signals("nim").await;
    assert!(value(&nim, Signal::KvCacheUsage).is_some(), "{nim:?}");
    assert!(value(&nim, Signal::RequestsRunning).is_some(), "{nim:?}");
    let sglang = signals("sglang").await;
    assert!(
        value(&sglang, Signal::RequestsRunning).is_some(),
        "{sglang:?}"
    );
    let tgi = signals("tgi").await;
    assert!(value(&tgi, Signal::RequestsWaiting).is_some(), "{tgi:?}");
    let llamacpp = signals("llamacpp").await;
    assert!(
        value(&llamacpp, Signal::RequestsRunning).is_some(),
        "{llamacpp:?}"
    );
    let trtllm = signals("trtllm").await;
    assert!(value(&trtllm, Signal::KvCacheUsage).is_some(), "{trtllm:?}");
    let dcgm = signals("gpu-node").await;
    let used = value(&dcgm, Signal::GpuMemUsedRatio).expect("gpu memory ratio");
    assert!((0.0..=1.0).contains(&used), "{dcgm:?}");
    assert!(value(&dcgm, Signal::GpuUtil).is_some(), "{dcgm:?}");

    // Bad targets: recorded down, with the reason, every round.
    for (name, reason) in [
        ("error", "HTTP status 500"),
        ("garbage", "unparseable"),
        ("huge", "limit"),
        ("hang", "timed out"),
    ] {
        let health = store.scrape_health(by_name(name).id, 100).await.unwrap();
        assert!(!health.is_empty(), "{name} never recorded");
        assert!(health.iter().all(|h| !h.up), "{name}: {health:?}");
        let error = health[0].error.clone().unwrap_or_default();
        assert!(error.contains(reason), "{name}: {error}");
        if name != "hang" {
            assert!(
                health.len() as f64 >= (0.7 * rounds).floor() - 1.0,
                "{name}: {} rounds in {elapsed:?}",
                health.len()
            );
        }
    }
}

/// The daemon's hourly maintenance runs once at start: scrapes past the
/// retention go, scrapes past `downsample_after` are thinned to one per
/// `downsample_interval`, recent ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_downsampling_run_at_start() {
    use llmwatch_core::catalog::{CatalogMetric, NormalizedSample, Part};
    use llmwatch_store::{ScrapeRecord, TargetKind};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llmwatch.db");
    let now = llmwatch_engine::sources::scrape::now_ms();
    let hour = 3_600_000;
    {
        let store = Store::open(&db).await.unwrap();
        let target = store
            .upsert_target("old", TargetKind::Engine, "http://127.0.0.1:9", 0)
            .await
            .unwrap();
        // 5 s scrapes: one hour 40 days ago, the 3 h → 2 h before now, and
        // the last 10 minutes.
        let spans = [
            (now - 40 * 24 * hour, now - 40 * 24 * hour + hour),
            (now - 3 * hour, now - 2 * hour),
            (now - 600_000, now),
        ];
        let batch: Vec<ScrapeRecord> = spans
            .iter()
            .flat_map(|&(from, to)| (from..to).step_by(5000))
            .map(|ts_ms| ScrapeRecord {
                target_id: target,
                ts_ms,
                up: true,
                duration_ms: 1.0,
                body_bytes: 100,
                error: None,
                engine: Some("vllm".into()),
                samples: vec![NormalizedSample {
                    metric: CatalogMetric::KvCacheUsage,
                    labels: Vec::new().into(),
                    part: Part::Value,
                    value: 0.5,
                }],
                raw: Vec::new(),
            })
            .collect();
        store.write_scrapes(&batch).await.unwrap();
    }
    let app = TestApp::builder()
        .config(
            "[server]\nretention = \"30d\"\n\
             downsample_after = \"1h\"\ndownsample_interval = \"1m\"\n",
        )
        .dir(dir)
        .spawn()
        .await;
    let store = app.daemon.store.clone();
    let target = store.target_by_name("old").await.unwrap().unwrap();
    let health = wait_for("scrapes thinned", Duration::from_secs(10), || async {
        let health = store.scrape_health(target.id, 100_000).await.unwrap();
        (health.len() < 720).then_some(health)
    })
    .await;
    app.stop().await;
    let older_than = |ms: i64| health.iter().filter(|h| h.ts_ms < now - ms).count();
    assert_eq!(older_than(30 * 24 * hour), 0, "past retention");
    // The hour 3 h → 2 h ago: one scrape per minute (61 buckets when the
    // hour does not start on a minute).
    let thinned = older_than(hour);
    assert!((60..=61).contains(&thinned), "{thinned}");
    // The last 10 minutes untouched.
    assert_eq!(health.len() - thinned, 120);
}
