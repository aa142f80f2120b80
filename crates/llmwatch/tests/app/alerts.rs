//! Alerts end to end over loopback: a simulated target turns slow, the p95
//! TTFT rule fires in a real Alertmanager (Debian's `prometheus-alertmanager`)
//! and in a webhook receiver, then resolves when the target is fast again; a
//! restart keeps a firing alert without firing it again; a hanging notifier
//! never delays evaluation.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use llmwatch::cli::sim::SimArgs;
use serde_json::Value;

use crate::common::app::TestApp;
use crate::common::wait_until;

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// Reads a child's log lines until one says `msg="Listening on"`, and
/// returns the address it names; keeps draining the pipe afterwards so the
/// child never blocks on a full one.
fn listening_address(log: impl std::io::Read + Send + 'static) -> SocketAddr {
    use std::io::BufRead as _;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(log).lines() {
            let Ok(line) = line else { break };
            if line.contains("msg=\"Listening on\"") {
                let address = line
                    .split_whitespace()
                    .find_map(|field| field.strip_prefix("address="))
                    .and_then(|a| a.parse::<SocketAddr>().ok());
                if let Some(address) = address {
                    let _ = tx.send(address);
                }
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the child logged the address it listens on")
}

/// A real Alertmanager on a loopback port, killed on drop.
struct Alertmanager {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_alertmanager() -> Alertmanager {
    assert!(
        Path::new(ALERTMANAGER).exists(),
        "{ALERTMANAGER} is missing: apt-get install prometheus-alertmanager"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(
        &config,
        "route:\n  receiver: blackhole\n  group_wait: 0s\nreceivers:\n  - name: blackhole\n",
    )
    .unwrap();
    // Port 0: the OS picks a free port and Alertmanager logs it.
    let mut child = Command::new(ALERTMANAGER)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.path={}",
            dir.path().join("data").display()
        ))
        .arg("--web.listen-address=127.0.0.1:0")
        .arg("--cluster.listen-address=")
        .arg("--log.level=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting alertmanager");
    let address = listening_address(child.stderr.take().expect("piped stderr"));
    let am = Alertmanager {
        child,
        url: format!("http://{address}"),
        _dir: dir,
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = client.get(format!("{}/-/ready", am.url)).send().await {
            if r.status().is_success() {
                return am;
            }
        }
        assert!(
            Instant::now() < deadline,
            "alertmanager did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn am_alerts(am: &Alertmanager, alertname: &str) -> Vec<Value> {
    let body: Value = reqwest::get(format!("{}/api/v2/alerts", am.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body.as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["alertname"] == alertname)
        .cloned()
        .collect()
}

/// A webhook receiver that records every body.
async fn start_webhook() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    start_slow_webhook(Duration::ZERO).await
}

/// A webhook receiver that takes `delay` to answer each message.
async fn start_slow_webhook(delay: Duration) -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let store = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |axum::Json(body): axum::Json<Value>| {
            let store = store.clone();
            async move {
                tokio::time::sleep(delay).await;
                store.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// A daemon watching one simulated `balanced` engine, the target `sim`, at
/// its real speed: `config` is written before the target, `target` in it.
async fn sim_app(config: &str, target: &str) -> TestApp {
    TestApp::builder()
        .config(config)
        .sim_as("sim", SimArgs::loopback("balanced", "sim-model", 1.0))
        .target(target)
        .spawn()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_target_fires_in_alertmanager_then_resolves() {
    let started = Instant::now();
    let am = start_alertmanager().await;
    let (hook_addr, hooks) = start_webhook().await;
    let config = format!(
        r#"
[server]
alert_interval = "250ms"
alert_resend_delay = "2s"

[[alerts]]
name = "probe-ttft-p95"
signal = "probe_ttft_p95"
op = ">"
threshold = "100ms"
window = "1500ms"
for = "500ms"
target = "sim"
labels = {{ severity = "page" }}
annotations = {{ summary = "p95 TTFT {{{{ $value }}}}s on {{{{ $labels.target }}}}" }}

[[alerts]]
name = "server-ttft-p95"
signal = "server_ttft_p95"
op = ">"
threshold = "100ms"
window = "1500ms"
for = "500ms"

[[notifiers]]
kind = "alertmanager"
url = "{am}"

[[notifiers]]
kind = "webhook"
url = "http://{hook_addr}/hook"
"#,
        am = am.url,
    );
    let app = sim_app(
        &config,
        "scrape_interval = \"500ms\"\n[targets.probe]\ninterval = \"150ms\"\nshape = \"64x2\"",
    )
    .await;
    let running = &app.daemon;
    let api = app.base_url();

    // Fast target: probes come in and rules are evaluated, nothing fires.
    let store = running.store.clone();
    let alerts = running.alerts.clone();
    wait_until(
        "five canaries and ten evaluations",
        Duration::from_secs(20),
        || {
            let store = store.clone();
            let evaluations = alerts.evaluations();
            async move {
                let Some(target) = store.target_by_name("sim").await.unwrap() else {
                    return false;
                };
                let probes = store.probes(target.id, 0, i64::MAX, 100).await.unwrap();
                probes.len() >= 5 && evaluations >= 10
            }
        },
    )
    .await;
    assert!(am_alerts(&am, "probe-ttft-p95").await.is_empty());
    let current: Value = reqwest::get(format!("{api}/api/v1/alerts"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(current["alerts"], serde_json::json!([]), "{current}");

    // Slow target: every engine step costs 30x; TTFT ≈ 0.25 s.
    app.sim("sim").sim.set_slowdown(30.0);
    let fired_at = Instant::now();
    wait_until(
        "the alert in Alertmanager",
        Duration::from_secs(20),
        || async { !am_alerts(&am, "probe-ttft-p95").await.is_empty() },
    )
    .await;
    eprintln!(
        "fired in Alertmanager {:?} after the slowdown",
        fired_at.elapsed()
    );
    // The server's own histograms (deltas over the window) agree.
    wait_until(
        "the server-side alert in Alertmanager",
        Duration::from_secs(20),
        || async { !am_alerts(&am, "server-ttft-p95").await.is_empty() },
    )
    .await;
    eprintln!(
        "server-side alert fired {:?} after the slowdown",
        fired_at.elapsed()
    );
    let alert = am_alerts(&am, "probe-ttft-p95").await.remove(0);
    assert_eq!(alert["labels"]["target"], "sim");
    assert_eq!(alert["labels"]["severity"], "page");
    assert_eq!(alert["status"]["state"], "active");
    assert_eq!(
        alert["generatorURL"],
        format!("http://{}/alerts", running.listen_addr)
    );
    let summary = alert["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("p95 TTFT 0.") && summary.ends_with("s on sim"),
        "{summary}"
    );

    // The API agrees.
    let current: Value = reqwest::get(format!("{api}/api/v1/alerts?state=firing"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let firing = &current["alerts"][0];
    assert_eq!(firing["rule"], "probe-ttft-p95");
    assert_eq!(firing["target"], "sim");
    assert!(firing["value"].as_f64().unwrap() > 0.1, "{firing}");

    // Fast again: resolved, and gone from Alertmanager's active alerts.
    app.sim("sim").sim.set_slowdown(1.0);
    let fast_at = Instant::now();
    wait_until(
        "the alert to resolve in Alertmanager",
        Duration::from_secs(20),
        || async { am_alerts(&am, "probe-ttft-p95").await.is_empty() },
    )
    .await;
    eprintln!(
        "resolved in Alertmanager {:?} after the target was fast",
        fast_at.elapsed()
    );
    wait_until(
        "the server-side alert to resolve",
        Duration::from_secs(20),
        || async { am_alerts(&am, "server-ttft-p95").await.is_empty() },
    )
    .await;

    let history: Value = reqwest::get(format!("{api}/api/v1/alerts/history?rule=probe-ttft-p95"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let states: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending", "firing", "resolved"], "{history}");

    // The webhook saw the firing and the resolved notification, v4 shape.
    let probe_hooks = || -> Vec<Value> {
        hooks
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h["groupLabels"]["alertname"] == "probe-ttft-p95")
            .cloned()
            .collect()
    };
    wait_until("two webhook posts", Duration::from_secs(5), || {
        let n = probe_hooks().len();
        async move { n >= 2 }
    })
    .await;
    let hooks = probe_hooks();
    assert_eq!(hooks[0]["version"], "4");
    assert_eq!(hooks[0]["status"], "firing");
    assert_eq!(
        hooks[0]["alerts"][0]["labels"]["alertname"],
        "probe-ttft-p95"
    );
    assert_eq!(hooks[1]["status"], "resolved");
    assert_ne!(hooks[1]["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
    app.stop().await;
    eprintln!("whole test {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_a_firing_alert_without_firing_it_again() {
    // Slow to answer: the notification is still in flight when the first
    // daemon is told to stop, and must be sent all the same (the second one
    // resumes the alert as notified and never sends it again).
    let (hook_addr, hooks) = start_slow_webhook(Duration::from_millis(700)).await;
    // requests_waiting ≥ 0 holds as soon as there is a scrape.
    let config = format!(
        r#"
[server]
alert_interval = "100ms"

[[alerts]]
name = "always"
signal = "requests_waiting"
op = ">="
threshold = 0
window = "1s"

[[notifiers]]
kind = "webhook"
url = "http://{hook_addr}/hook"
"#,
    );
    let first_app = sim_app(&config, "scrape_interval = \"200ms\"").await;
    let first = &first_app.daemon;
    let alerts = first.alerts.clone();
    wait_until("the alert to fire", Duration::from_secs(10), || {
        let firing = alerts
            .current()
            .iter()
            .any(|a| a.alert.state == llmwatch_core::alerts::AlertState::Firing);
        async move { firing }
    })
    .await;
    let before = first.alerts.current().remove(0);
    let (dir, sims) = first_app.stop().await;
    assert_eq!(
        hooks.lock().unwrap().len(),
        1,
        "the notification in flight at shutdown was sent"
    );

    // The second daemon: the same database and the same engine.
    let second_app = TestApp::builder()
        .config(&config)
        .config(&format!(
            "[[targets]]\nname = \"sim\"\nurl = \"{}\"\nscrape_interval = \"200ms\"",
            sims[0].url()
        ))
        .dir(dir)
        .spawn()
        .await;
    let second = &second_app.daemon;
    let alerts = second.alerts.clone();
    let evaluated = alerts.evaluations();
    wait_until("a few evaluations", Duration::from_secs(10), || {
        let n = alerts.evaluations();
        async move { n >= evaluated + 5 }
    })
    .await;
    let after = second.alerts.current().remove(0);
    assert_eq!(after.alert.state, llmwatch_core::alerts::AlertState::Firing);
    assert_eq!(
        after.alert.active_at_ms, before.alert.active_at_ms,
        "same alert, not a new one"
    );
    assert_eq!(after.alert.fired_at_ms, before.alert.fired_at_ms);
    let history = second
        .store
        .alert_events(Some("always"), None, None, 100)
        .await
        .unwrap();
    assert_eq!(history.len(), 1, "fired once: {history:?}");
    second_app.stop().await;
    assert_eq!(hooks.lock().unwrap().len(), 1, "notified once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_notifier_never_delays_evaluation() {
    // Accepts connections and never answers.
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang_addr = hang.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hang.accept().await {
            held.push(socket);
        }
    });
    let config = format!(
        r#"
[server]
alert_interval = "100ms"
alert_resend_delay = "1ms"

[[alerts]]
name = "always"
signal = "requests_waiting"
op = ">="
threshold = 0
window = "1s"

[[notifiers]]
name = "hangs"
kind = "alertmanager"
url = "http://{hang_addr}"
timeout = "60s"
"#,
    );
    let app = sim_app(&config, "scrape_interval = \"200ms\"").await;
    let running = &app.daemon;
    let alerts = running.alerts.clone();
    // Let the alert fire, then measure a window of evaluations.
    wait_until("the alert to fire", Duration::from_secs(10), || {
        let firing = !alerts.current().is_empty();
        async move { firing }
    })
    .await;
    // 100 ms interval: 20 rounds take ~2 s, and a blocked evaluator would
    // never get there (polled, with room for a loaded machine, instead of
    // counting the rounds of a fixed 3 s window).
    let start_count = alerts.evaluations();
    wait_until("20 evaluations", Duration::from_secs(15), || {
        let rounds = alerts.evaluations() - start_count;
        async move { rounds >= 20 }
    })
    .await;
    let notifier = &alerts.notifiers[0];
    wait_until(
        "the hanging notifier's full queue to drop a batch",
        Duration::from_secs(15),
        || {
            let dropped = notifier.dropped.load(std::sync::atomic::Ordering::Relaxed);
            async move { dropped > 0 }
        },
    )
    .await;
    assert_eq!(notifier.sent.load(std::sync::atomic::Ordering::Relaxed), 0);
    // Shutdown is not held up by the hanging request either.
    let shutdown_started = Instant::now();
    app.stop().await;
    assert!(shutdown_started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_notifier_retries_5xx_with_backoff() {
    // Answers 503 twice, then accepts.
    let seen: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/services/T0/B0/SECRET",
        post(move |axum::Json(body): axum::Json<Value>| {
            let record = record.clone();
            async move {
                let mut seen = record.lock().unwrap();
                seen.push((Instant::now(), body));
                if seen.len() <= 2 {
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = format!(
        r#"
[server]
alert_interval = "100ms"

[[alerts]]
name = "always"
signal = "requests_waiting"
op = ">="
threshold = 0
window = "1s"
annotations = {{ summary = "{{{{ $value }}}} waiting" }}

[[notifiers]]
kind = "slack"
url = "http://{addr}/services/T0/B0/SECRET"
"#,
    );
    let app = sim_app(&config, "scrape_interval = \"200ms\"").await;
    let running = &app.daemon;
    let alerts = running.alerts.clone();
    wait_until("delivery after two 503s", Duration::from_secs(15), || {
        let sent = alerts.notifiers[0]
            .sent
            .load(std::sync::atomic::Ordering::Relaxed);
        async move { sent == 1 }
    })
    .await;
    let counters = &alerts.notifiers[0];
    assert_eq!(
        counters
            .attempt_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    assert_eq!(
        counters.failed.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    // Backoff: 0.5 s, then 1 s.
    let gap1 = seen[1].0 - seen[0].0;
    let gap2 = seen[2].0 - seen[1].0;
    assert!(
        gap1 >= Duration::from_millis(450) && gap2 >= Duration::from_millis(950),
        "{gap1:?} {gap2:?}"
    );
    assert_eq!(
        seen[2].1["text"],
        "[FIRING] always on sim (value 0): 0 waiting"
    );
    app.stop().await;
}
