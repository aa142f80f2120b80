//! The remote-write sender against a loopback receiver that answers what
//! the test scripts: a 500 is retried (same samples, cursor held), a 400 is
//! dropped and counted (cursor moves on), every request carries the
//! remote-write headers and the secret from the environment, and a
//! restarted sender resumes after its durable cursor.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use llmwatch_config::Config;
use llmwatch_engine::sinks::remote_write::{run_remote_write, RemoteWriteCounters, RemoteWriteJob};
use llmwatch_remote_write::{decode, WriteRequest};
use llmwatch_store::{RawSample, ScrapeRecord, Store, TargetKind};
use tokio::sync::watch;

/// What the receiver saw: (status it answered, headers, request).
type Seen = Arc<Mutex<Vec<(u16, HeaderMap, WriteRequest)>>>;

struct Receiver {
    url: String,
    script: Arc<Mutex<VecDeque<u16>>>,
    seen: Seen,
}

async fn receiver() -> Receiver {
    let script: Arc<Mutex<VecDeque<u16>>> = Arc::default();
    let seen: Seen = Arc::default();
    let (s, v) = (script.clone(), seen.clone());
    let app = axum::Router::new().route(
        "/api/v1/write",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let (script, seen) = (s.clone(), v.clone());
            async move {
                let status = script.lock().unwrap().pop_front().unwrap_or(200);
                let request = decode(&body, 64 << 20).expect("a remote-write body");
                seen.lock().unwrap().push((status, headers, request));
                (StatusCode::from_u16(status).unwrap(), "scripted answer")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api/v1/write", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { url, script, seen }
}

fn now_ms() -> i64 {
    llmwatch_engine::now_ms()
}

fn page(i: usize) -> Vec<RawSample> {
    let line = |name: &str, labels: &[(&str, &str)], value: f64| RawSample {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        value,
    };
    vec![
        line(
            "vllm:num_requests_running",
            &[("model_name", "m")],
            i as f64,
        ),
        line(
            "vllm:prompt_tokens_total",
            &[("model_name", "m"), ("job", "theirs")],
            100.0 * i as f64,
        ),
    ]
}

async fn write_scrapes(store: &Store, target: i64, times: &[i64]) {
    for (i, ts_ms) in times.iter().enumerate() {
        store
            .write_scrapes(&[ScrapeRecord {
                target_id: target,
                ts_ms: *ts_ms,
                up: true,
                duration_ms: 2.0,
                body_bytes: 100,
                error: None,
                engine: Some("vllm".into()),
                samples: Vec::new(),
                raw: page(i + 1),
            }])
            .await
            .unwrap();
    }
}

fn job(url: &str) -> RemoteWriteJob {
    std::env::set_var("LLMWATCH_TEST_RW_BEARER", "tok-5ecret");
    let toml = format!(
        "[[remote_write]]\nname = \"rx\"\nurl = \"{url}\"\nbearer_token_env = \"LLMWATCH_TEST_RW_BEARER\"\n\
         timeout = \"2s\"\n[remote_write.headers]\nX-Scope-OrgID = \"team-a\"\n\
         [remote_write.queue]\nmax_samples_per_send = 2\nmin_backoff = \"10ms\"\nmax_backoff = \"40ms\"\n\
         poll_interval = \"20ms\"\nbackfill = \"5m\"\n"
    );
    let config = Config::parse(&toml, Path::new("t.toml")).unwrap();
    let endpoint = config.remote_write[0].clone();
    RemoteWriteJob {
        auth: endpoint.auth().unwrap(),
        config: endpoint,
        settle: Duration::ZERO,
        ttft_objectives: Default::default(),
        started_ms: llmwatch_engine::now_ms(),
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scrape timestamps of `vllm:num_requests_running` in a request.
fn stamps(request: &WriteRequest) -> Vec<i64> {
    request
        .timeseries
        .iter()
        .filter(|ts| {
            ts.labels
                .iter()
                .any(|l| l.value == "vllm:num_requests_running")
        })
        .flat_map(|ts| ts.samples.iter().map(|s| s.timestamp))
        .collect()
}

fn samples_in(request: &WriteRequest) -> u64 {
    request
        .timeseries
        .iter()
        .map(|t| t.samples.len() as u64)
        .sum()
}

#[tokio::test]
async fn a_500_is_retried_a_400_dropped_and_a_restart_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let target = store
        .upsert_target("a", TargetKind::Engine, "http://user:pw@127.0.0.1:8000", 0)
        .await
        .unwrap();
    let base = now_ms() - 60_000;
    let times: Vec<i64> = (0..5).map(|i| base + i * 1_000).collect();
    write_scrapes(&store, target, &times).await;

    let rx = receiver().await;
    rx.script.lock().unwrap().extend([500, 200, 400]);
    let counters = Arc::new(RemoteWriteCounters {
        name: "rx".into(),
        ..Default::default()
    });
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run_remote_write(
        store.clone(),
        job(&rx.url),
        counters.clone(),
        stopped,
    ));
    let last = *times.last().unwrap();
    wait_until("every scrape handled", || {
        counters.cursor_ms.load(Ordering::Relaxed) == last
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();

    let seen = rx.seen.lock().unwrap().clone();
    // One scrape per request (2 samples per send).
    let per_request: Vec<(u16, Vec<i64>)> = seen.iter().map(|(s, _, r)| (*s, stamps(r))).collect();
    assert_eq!(
        per_request,
        vec![
            (500, vec![times[0]]),
            (200, vec![times[0]]),
            (400, vec![times[1]]),
            (200, vec![times[2]]),
            (200, vec![times[3]]),
            (200, vec![times[4]]),
        ]
    );
    // The retry carried exactly what failed.
    assert_eq!(seen[0].2, seen[1].2);
    let sum = |status: u16| -> u64 {
        seen.iter()
            .filter(|(s, _, _)| *s == status)
            .map(|(_, _, r)| samples_in(r))
            .sum()
    };
    assert_eq!(counters.retries.load(Ordering::Relaxed), 1);
    assert_eq!(counters.samples_failed.load(Ordering::Relaxed), sum(500));
    assert_eq!(counters.samples_dropped.load(Ordering::Relaxed), sum(400));
    assert_eq!(counters.samples_sent.load(Ordering::Relaxed), sum(200));
    assert_eq!(counters.requests.load(Ordering::Relaxed), 6);

    // Headers of remote write 1.0, the extra header, the secret.
    let headers = &seen[1].1;
    assert_eq!(headers["content-encoding"], "snappy");
    assert_eq!(headers["content-type"], "application/x-protobuf");
    assert_eq!(headers["x-prometheus-remote-write-version"], "0.1.0");
    assert!(headers["user-agent"]
        .to_str()
        .unwrap()
        .starts_with("llmwatch/"));
    assert_eq!(headers["authorization"], "Bearer tok-5ecret");
    assert_eq!(headers["x-scope-orgid"], "team-a");

    // Labels: job/instance/target attached, a clashing page label exported,
    // no user info; the value is the stored one.
    let series = seen[1]
        .2
        .timeseries
        .iter()
        .find(|t| {
            t.labels
                .iter()
                .any(|l| l.value == "vllm:prompt_tokens_total")
        })
        .expect("the counter was sent");
    let label = |name: &str| {
        series
            .labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.clone())
    };
    // Scraped lines carry the target's kind as `job`, as the /prometheus API.
    assert_eq!(label("job").as_deref(), Some("engine"));
    assert_eq!(label("exported_job").as_deref(), Some("theirs"));
    assert_eq!(label("instance").as_deref(), Some("127.0.0.1:8000"));
    assert_eq!(label("target").as_deref(), Some("a"));
    assert_eq!(series.labels[0].name, "__name__");
    assert_eq!(series.samples[0].value, 100.0);
    assert!(seen[1].2.timeseries.iter().any(|t| t
        .labels
        .iter()
        .any(|l| l.name == "__name__" && l.value == "up")));

    // A new sender on the same store resumes after the saved cursor.
    let later: Vec<i64> = (5..7).map(|i| base + i * 1_000).collect();
    write_scrapes(&store, target, &later).await;
    let counters = Arc::new(RemoteWriteCounters::default());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run_remote_write(
        store.clone(),
        job(&rx.url),
        counters.clone(),
        stopped,
    ));
    let newest = *later.last().unwrap();
    wait_until("the new scrapes", || {
        counters.cursor_ms.load(Ordering::Relaxed) == newest
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let seen = rx.seen.lock().unwrap().clone();
    let resumed: Vec<i64> = seen[6..].iter().flat_map(|(_, _, r)| stamps(r)).collect();
    assert_eq!(resumed, later, "only what came after the cursor");
}

/// A new endpoint without backfill sends what was scraped since the daemon
/// started, however late its task first runs, and nothing from before.
#[tokio::test]
async fn a_new_endpoint_starts_at_the_daemons_start_not_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let target = store
        .upsert_target("a", TargetKind::Engine, "http://127.0.0.1:8000", 0)
        .await
        .unwrap();
    let started = now_ms() - 10_000;
    // One scrape from a run before, two stored before the task ran (its
    // first at the daemon's very start).
    let times = [started - 1_000, started, started + 500];
    write_scrapes(&store, target, &times).await;

    let rx = receiver().await;
    let counters = Arc::new(RemoteWriteCounters {
        name: "rx".into(),
        ..Default::default()
    });
    let mut job = job(&rx.url);
    job.config.queue.backfill = None;
    job.started_ms = started;
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run_remote_write(
        store.clone(),
        job,
        counters.clone(),
        stopped,
    ));
    wait_until("the scrapes since the start sent", || {
        counters.cursor_ms.load(Ordering::Relaxed) == started + 500
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let sent: Vec<i64> = rx
        .seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(_, _, request)| stamps(request))
        .collect();
    assert_eq!(sent, vec![started, started + 500]);
}
