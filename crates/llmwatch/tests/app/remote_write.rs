//! remote_write into a real Prometheus (Debian `prometheus`,
//! `--web.enable-remote-write-receiver`): llmwatch scrapes the simulator
//! every 500 ms and writes to it. Every sample line llmwatch stored for a
//! scrape is in Prometheus under the same name, labels (+ job, instance,
//! target) and timestamp, with the same value; the canary's timings too.
//! Then Prometheus is killed for 30 s while llmwatch keeps scraping, started
//! again on the same data directory, and every scrape llmwatch stored meanwhile
//! arrives: no gap remains.

use crate::common;
use crate::common::prom;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use common::{spawn_daemon, wait_for};
use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::{NewSweep, Store, SweepEnd, SweepStatus};
use serde_json::Value as Json;

const DEADLINE: Duration = Duration::from_secs(30);

/// A Prometheus with the remote-write receiver on, killed on drop.
struct Prometheus {
    child: Child,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts Prometheus on `listen` (port 0 at first; its address again for
/// the restart), and waits until it is ready.
async fn start_prometheus(dir: &Path, listen: &str) -> (Prometheus, SocketAddr) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
    )
    .expect("write the config");
    let mut command = Command::new("prometheus");
    command
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg("--web.enable-remote-write-receiver");
    let (child, addr) = prom::spawn_prometheus(command, listen);
    let prometheus = Prometheus { child };
    let client = http();
    wait_for("prometheus ready", DEADLINE, || {
        let client = client.clone();
        async move {
            let answer = client
                .get(format!("http://{addr}/-/ready"))
                .send()
                .await
                .ok()?;
            answer.status().is_success().then_some(())
        }
    })
    .await;
    (prometheus, addr)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

/// `GET /api/v1/query` at `time_ms`; the `data.result` array.
async fn query(addr: SocketAddr, expr: &str, time_ms: i64) -> Vec<Json> {
    let time = format!("{}.{:03}", time_ms / 1000, time_ms % 1000);
    let url = format!(
        "http://{addr}/api/v1/query?query={}&time={time}",
        url_encode(expr)
    );
    let answer: Json = http()
        .get(url)
        .send()
        .await
        .expect("prometheus answers")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["status"], "success", "{expr}: {answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The sample timestamps (ms) of every series a range selector returns.
fn timestamps(result: &[Json]) -> Vec<Vec<i64>> {
    result
        .iter()
        .map(|series| {
            series["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|pair| (pair[0].as_f64().unwrap_or(0.0) * 1000.0).round() as i64)
                .collect()
        })
        .collect()
}

fn value_of(text: &Json) -> f64 {
    match text.as_str() {
        Some("NaN") => f64::NAN,
        Some("+Inf") => f64::INFINITY,
        Some("-Inf") => f64::NEG_INFINITY,
        Some(text) => text.parse().expect("a number"),
        None => panic!("not a value: {text}"),
    }
}

/// Every scrape timestamp llmwatch stored for `target` (newest first).
/// The value of `name{endpoint="prom"}` on llmwatch's own `/metrics`.
async fn own_metric(metrics_url: &str, name: &str) -> Option<f64> {
    let text = http()
        .get(metrics_url)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let series = format!("{name}{{endpoint=\"prom\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))?
        .trim()
        .parse()
        .ok()
}

async fn stored_scrapes(store: &Store, target: i64) -> Vec<i64> {
    let mut scrapes: Vec<i64> = store
        .scrape_health(target, 10_000)
        .await
        .expect("scrape health")
        .iter()
        .map(|h| h.ts_ms)
        .collect();
    scrapes.sort_unstable();
    scrapes
}

/// Waits until Prometheus holds llmwatch's `up` of the target at `ts_ms`.
async fn wait_until_received(addr: SocketAddr, ts_ms: i64) {
    wait_for("the scrape in prometheus", DEADLINE, || async move {
        let result = query(addr, "up{target=\"sim\"}[1s]", ts_ms).await;
        timestamps(&result)
            .iter()
            .flatten()
            .any(|t| *t == ts_ms)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn samples_reach_prometheus_and_a_down_receiver_gets_the_backlog() {
    let prom_dir = tempfile::tempdir().expect("a temporary directory");
    let (mut prometheus, prom_addr) = start_prometheus(prom_dir.path(), "127.0.0.1:0").await;
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 1.0))
        .await
        .expect("the simulator starts");
    let daemon = spawn_daemon(&format!(
        "[[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"500ms\"\n\
         labels = {{ zone = \"eu-1\" }}\n\
         [targets.probe]\ninterval = \"1s\"\nshape = \"16x4\"\n\
         [[remote_write]]\nname = \"prom\"\nurl = \"http://{prom_addr}/api/v1/write\"\n\
         timeout = \"2s\"\n[remote_write.queue]\npoll_interval = \"100ms\"\nmax_backoff = \"500ms\"\n"
    ))
    .await;
    let store = daemon.daemon.store.clone();
    let target = store
        .target_by_name("sim")
        .await
        .expect("targets")
        .expect("the target")
        .id;

    // The same series and values: every line of a stored page is in
    // Prometheus at the scrape's timestamp.
    let scrapes = wait_for("4 stored scrapes", DEADLINE, || async {
        let scrapes = stored_scrapes(&store, target).await;
        (scrapes.len() >= 4).then_some(scrapes)
    })
    .await;
    let ts = scrapes[3];
    wait_until_received(prom_addr, ts).await;
    let page = store
        .page_at(target, ts)
        .await
        .expect("read")
        .expect("a page");
    assert_eq!(page.ts_ms, ts);
    let result = query(prom_addr, "{target=\"sim\",job=\"engine\"}[1ms]", ts).await;
    let mut received: BTreeMap<BTreeMap<String, String>, f64> = BTreeMap::new();
    for series in &result {
        let labels: BTreeMap<String, String> =
            serde_json::from_value(series["metric"].clone()).expect("labels");
        let values = series["values"].as_array().expect("a matrix");
        assert_eq!(values.len(), 1, "one sample per series at {ts}: {series}");
        assert_eq!((values[0][0].as_f64().unwrap() * 1000.0).round() as i64, ts);
        received.insert(labels, value_of(&values[0][1]));
    }
    let instance = engine.to_string();
    for line in &page.raw {
        let mut labels: BTreeMap<String, String> = line
            .labels
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| {
                let clash = ["job", "instance", "target"].contains(&k.as_str());
                (
                    if clash {
                        format!("exported_{k}")
                    } else {
                        k.clone()
                    },
                    v.clone(),
                )
            })
            .collect();
        labels.insert("__name__".into(), line.name.to_string());
        labels.insert("job".into(), "engine".into());
        labels.insert("instance".into(), instance.clone());
        labels.insert("target".into(), "sim".into());
        // The target's labels ride on every series, as Prometheus attaches them.
        labels.insert("zone".into(), "eu-1".into());
        let got = received
            .get(&labels)
            .unwrap_or_else(|| panic!("{labels:?} not in prometheus"));
        assert!(
            got.to_bits() == line.value.to_bits() || (got.is_nan() && line.value.is_nan()),
            "{labels:?}: prometheus {got}, llmwatch {}",
            line.value
        );
    }
    assert!(
        page.raw.len() > 50,
        "a whole page: {} lines",
        page.raw.len()
    );
    // llmwatch's own series ride along: scrape health and signals.
    let names: Vec<&str> = received
        .keys()
        .filter_map(|l| l.get("__name__"))
        .map(String::as_str)
        .collect();
    assert!(names.contains(&"up"), "{names:?}");
    // Signals are llmwatch's own: `job="llmwatch"`, one per signal.
    let signals = query(
        prom_addr,
        "llmwatch_signal{target=\"sim\",job=\"llmwatch\"}[1ms]",
        ts,
    )
    .await;
    assert!(
        signals.iter().any(|s| s["metric"]["signal"].is_string()),
        "{signals:?}"
    );

    // A canary probe's TTFT as stored.
    let probe = wait_for("a stored canary", DEADLINE, || async {
        let probes = store.export_probes(0, i64::MAX, 1).await.ok()?;
        probes.into_iter().find(|p| p.ttft_s.is_some())
    })
    .await;
    wait_for("the canary in prometheus", DEADLINE, || async {
        let result = query(
            prom_addr,
            "llmwatch_canary_ttft_seconds{target=\"sim\"}[1ms]",
            probe.ts_ms,
        )
        .await;
        let value = result.first()?["values"][0][1].clone();
        (value_of(&value) == probe.ttft_s.unwrap_or(f64::NAN)).then_some(())
    })
    .await;

    // The autoscaling gauges (issue 38): with a finished sweep whose
    // highest concurrency within the objectives was 8, each scrape's load
    // ratio is its in-flight count over 8, sent beside the queue.
    let sweep = store
        .create_sweep(&NewSweep {
            target_name: Some("sim".into()),
            target_url: format!("http://{engine}"),
            started_ms: now_ms(),
            settings_json: "{}".into(),
            card_json: "{}".into(),
        })
        .await
        .expect("a sweep row");
    store
        .finish_sweep(
            sweep,
            &SweepEnd {
                ended_ms: now_ms(),
                verdict_json: Some(r#"{"sustainable": {"load": {"concurrency": 8}}}"#.into()),
                stop_reason: None,
                status: SweepStatus::Completed,
            },
        )
        .await
        .expect("the sweep finishes");
    let gauge_at = |name: &'static str, ts: i64| async move {
        let result = query(
            prom_addr,
            &format!("{name}{{target=\"sim\",job=\"llmwatch\"}}[1ms]"),
            ts,
        )
        .await;
        Some(value_of(&result.first()?["values"][0][1]))
    };
    let (ratio, in_flight, queue) =
        wait_for("the autoscaling gauges in prometheus", DEADLINE, || async {
            for &ts in stored_scrapes(&store, target).await.iter().rev().take(5) {
                let ratio = gauge_at("llmwatch_autoscale_load_ratio", ts).await;
                let in_flight = gauge_at("llmwatch_autoscale_in_flight_requests", ts).await;
                let queue = gauge_at("llmwatch_autoscale_queue_requests", ts).await;
                if let (Some(r), Some(f), Some(q)) = (ratio, in_flight, queue) {
                    return Some((r, f, q));
                }
            }
            None
        })
        .await;
    assert_eq!(ratio, in_flight / 8.0);
    assert!(
        queue >= 0.0 && queue <= in_flight,
        "queue {queue}, in flight {in_flight}"
    );

    // The receiver goes away; llmwatch keeps scraping.
    drop(prometheus);
    let down_from = *stored_scrapes(&store, target)
        .await
        .last()
        .expect("scrapes");
    // Down for 30 s of scrapes, as the issue's outage.
    wait_for(
        "30 s of scrapes stored while prometheus is down",
        Duration::from_secs(60),
        || async {
            let newest = *stored_scrapes(&store, target).await.last()?;
            (newest - down_from >= 30_000).then_some(())
        },
    )
    .await;
    let metrics_url = format!("{}/metrics", daemon.base_url());
    wait_for("a counted retry", DEADLINE, || async {
        let retries = own_metric(&metrics_url, "llmwatch_remote_write_retries_total").await?;
        (retries > 0.0).then_some(())
    })
    .await;
    // The lag shows the outage: the cursor stands where Prometheus went away.
    wait_for("the outage in the lag gauge", DEADLINE, || async {
        let lag = own_metric(&metrics_url, "llmwatch_remote_write_lag_seconds").await?;
        (lag >= 25.0).then_some(())
    })
    .await;

    // It comes back on the same data: the backlog arrives, no gap remains.
    (prometheus, _) = start_prometheus(prom_dir.path(), &prom_addr.to_string()).await;
    let stored = stored_scrapes(&store, target).await;
    let newest = *stored.last().expect("scrapes");
    wait_until_received(prom_addr, newest).await;
    let window_ms = newest - stored[0] + 1;
    let result = query(
        prom_addr,
        &format!("up{{target=\"sim\"}}[{window_ms}ms]"),
        newest,
    )
    .await;
    let received: Vec<i64> = timestamps(&result).into_iter().flatten().collect();
    let missing: Vec<&i64> = stored.iter().filter(|t| !received.contains(t)).collect();
    assert!(
        missing.is_empty(),
        "scrapes missing in prometheus: {missing:?}"
    );
    // The shipped Grafana dashboards read the same names here as from
    // llmwatch's own API: every query answers, and those about the engine,
    // its scrapes and its canaries have data (no GPU page in this test).
    let exprs = prom::dashboard_exprs();
    let mut empty = Vec::new();
    for (where_, raw) in &exprs {
        let expr = prom::substitute(raw, engine);
        if query(prom_addr, &expr, newest).await.is_empty() {
            empty.push(format!("{where_}: {expr}"));
        }
    }
    let missing: Vec<&String> = empty
        .iter()
        .filter(|e| !(e.contains("DCGM") || e.contains("gpu")))
        .collect();
    assert!(
        missing.is_empty(),
        "dashboard queries without data in a Prometheus fed by remote_write:\n{missing:#?}"
    );
    // Caught up: the lag is back within a few scrapes.
    wait_for("the lag to close", DEADLINE, || async {
        let lag = own_metric(&metrics_url, "llmwatch_remote_write_lag_seconds").await?;
        (lag < 5.0).then_some(())
    })
    .await;
    drop(prometheus);
    daemon.daemon.shutdown().await;
}
