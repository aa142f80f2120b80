//! Service discovery end to end: a file_sd file rewritten while the daemon
//! runs adds and removes targets within a refresh, timed from the write (a
//! removed one stops being scraped, even mid-scrape; its history stays);
//! http_sd from a loopback inventory server; two shards of one reachable
//! fleet each scrape their half, disjoint halves that cover it.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_sim::Sim;
use serde_json::Value;

/// How long startup and scraping may take on a loaded machine (not the
/// discovery bound: see [`WITHIN_A_REFRESH`]).
const WITHIN: Duration = Duration::from_secs(20);

/// The file_sd refresh interval of the test.
const REFRESH: Duration = Duration::from_secs(1);

/// The issue's bound, "within one refresh": a rewritten file's targets
/// are listed (or unlisted) by the API less than two refreshes after the
/// write. One refresh is the wait for the next read; the rest is margin for
/// reading the file, stopping the targets that left (a scrape of one is
/// hanging), starting the new ones and the API's own answer (polled every
/// 20 ms) on a loaded 2-core machine. Observed at a 1 s refresh, debug
/// build, load average 7–8: 0.15–1.26 s. A discovery that waits for a second
/// refresh (a file read half-written and not read again soon, a leaving
/// target's hanging scrape awaited: 9.6 s before that was fixed) fails it.
const WITHIN_A_REFRESH: Duration = Duration::from_secs(2);

async fn simulator() -> (Sim, String) {
    let (sim, engine, _) = start(&SimArgs::loopback("balanced", "sim-llama-8b", 1.0))
        .await
        .expect("simulator starts");
    (sim, engine.to_string())
}

fn sd_document(addresses: &[&str], zone: &str) -> String {
    serde_json::json!([{ "targets": addresses, "labels": { "zone": zone } }]).to_string()
}

async fn targets_json(base: &str) -> Vec<Value> {
    let body: Value = reqwest::get(format!("{base}/api/v1/targets"))
        .await
        .expect("targets answer")
        .json()
        .await
        .expect("targets are JSON");
    body["targets"].as_array().cloned().unwrap_or_default()
}

/// The value of an unlabelled series on the daemon's own `/metrics`.
async fn own_metric(base: &str, name: &str) -> Option<f64> {
    let page = reqwest::get(format!("{base}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The state of the `always` alert on `target`, from `/api/v1/alerts`.
async fn alert_state(base: &str, target: &str) -> Option<String> {
    let body: Value = reqwest::get(format!("{base}/api/v1/alerts"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    body["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["rule"] == "always" && a["target"] == target)
        .and_then(|a| a["state"].as_str().map(str::to_string))
}

/// A loopback address that accepts connections and never answers.
async fn hanging_address() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("hanging port binds");
    let addr = listener.local_addr().expect("hanging address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr.to_string()
}

/// Scrapes stored for `name` so far (0 when the store does not know it).
async fn scrapes_of(daemon: &common::app::TestApp, name: &str) -> usize {
    let store = &daemon.daemon.store;
    let Some(row) = store.target_by_name(name).await.expect("store reads") else {
        return 0;
    };
    store
        .scrape_health(row.id, 100_000)
        .await
        .expect("store reads")
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sd_changes_add_and_remove_targets_while_running() {
    let (_a, a) = simulator().await;
    let (_b, b) = simulator().await;
    // h accepts and never answers: its scrapes hang for their 10 s timeout,
    // and its leaving must not hold up b's coming.
    let h = hanging_address().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let sd_file = dir.path().join("fleet.json");
    std::fs::write(&sd_file, sd_document(&[&a, &h], "east")).expect("sd file written");
    // A rule that holds on every scraped target: it fires for a, and must
    // resolve once a leaves the fleet.
    let toml = format!(
        "[server]\nalert_interval = \"300ms\"\n\
         [[discovery]]\nname = \"fleet\"\nfiles = [\"{}/*.json\"]\nrefresh_interval = \"{}ms\"\n\
         [discovery.target]\nscrape_interval = \"300ms\"\nscrape_timeout = \"10s\"\n\
         [[alerts]]\nname = \"always\"\nsignal = \"requests_running\"\nop = \">=\"\n\
         threshold = \"0\"\nwindow = \"1m\"\nfor = \"0s\"\n",
        dir.path().display(),
        REFRESH.as_millis()
    );
    let daemon = common::spawn_daemon(&toml).await;
    let base = daemon.base_url();
    let name_a = format!("fleet-{}", a.replace(':', "-"));
    let name_b = format!("fleet-{}", b.replace(':', "-"));
    let name_h = format!("fleet-{}", h.replace(':', "-"));

    // The first target is found and scraped, with its discovery labels.
    common::wait_for("target a scraped", WITHIN, || async {
        (scrapes_of(&daemon, &name_a).await >= 2).then_some(())
    })
    .await;
    let listed = targets_json(&base).await;
    let entry = listed
        .iter()
        .find(|t| t["name"] == name_a.as_str())
        .expect("target a listed");
    assert_eq!(entry["labels"]["zone"], "east", "{entry}");
    // Its series carry the discovery labels in the Prometheus API.
    let answer: Value = reqwest::get(format!(
        "{base}/prometheus/api/v1/query?query=sum(up%7Bzone%3D%22east%22%7D)"
    ))
    .await
    .expect("query sent")
    .json()
    .await
    .expect("query answered JSON");
    assert_eq!(answer["data"]["result"][0]["value"][1], "1", "{answer}");
    assert_eq!(entry["discovered_by"], "fleet");
    assert_eq!(entry["watched"], true);
    let own = own_metric(&base, "llmwatch_discovery_targets").await;
    assert_eq!(own, Some(2.0), "a and h found");
    assert!(own_metric(&base, "llmwatch_discovery_refreshes_total").await >= Some(1.0));
    common::wait_for("the alert firing for a", WITHIN, || {
        let (base, name_a) = (base.clone(), name_a.clone());
        async move { (alert_state(&base, &name_a).await.as_deref() == Some("firing")).then_some(()) }
    })
    .await;

    // Rewritten in place: a and h (a scrape of it hanging) leave, b comes,
    // each within one refresh of the write as the API lists targets. Then
    // b is scraped; a's scrapes stop.
    common::wait_for("h watched", WITHIN, || async {
        daemon
            .daemon
            .targets
            .names()
            .contains(&name_h)
            .then_some(())
    })
    .await;
    std::fs::write(&sd_file, sd_document(&[&b], "west")).expect("sd file rewritten");
    let written = Instant::now();
    // Polled by hand, every 20 ms, to time each change from the write.
    let (mut b_listed, mut a_unlisted) = (None, None);
    while b_listed.is_none() || a_unlisted.is_none() {
        let listed = targets_json(&base).await;
        let watched = |name: &str| {
            listed
                .iter()
                .find(|t| t["name"] == name)
                .map(|t| t["watched"] == true)
        };
        if b_listed.is_none() && watched(&name_b) == Some(true) {
            b_listed = Some(written.elapsed());
        }
        if a_unlisted.is_none() && watched(&name_a) == Some(false) && watched(&name_h) != Some(true)
        {
            a_unlisted = Some(written.elapsed());
        }
        assert!(
            written.elapsed() < WITHIN,
            "the rewrite not followed in {WITHIN:?}: b listed {b_listed:?}, a unwatched {a_unlisted:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (b_listed, a_unlisted) = (b_listed.unwrap_or(WITHIN), a_unlisted.unwrap_or(WITHIN));
    eprintln!("file_sd rewrite: b listed after {b_listed:?}, a unwatched after {a_unlisted:?}");
    assert!(
        b_listed < WITHIN_A_REFRESH && a_unlisted < WITHIN_A_REFRESH,
        "a {REFRESH:?} refresh: b listed after {b_listed:?}, a unwatched after {a_unlisted:?} \
         (bound {WITHIN_A_REFRESH:?})"
    );
    common::wait_for("target b scraped", WITHIN, || async {
        (scrapes_of(&daemon, &name_b).await >= 1).then_some(())
    })
    .await;
    common::wait_for("a's alert resolved after a left", WITHIN, || {
        let (base, name_a) = (base.clone(), name_a.clone());
        async move {
            (alert_state(&base, &name_a).await.as_deref() == Some("resolved")).then_some(())
        }
    })
    .await;
    let a_after_removal = scrapes_of(&daemon, &name_a).await;
    let b_now = scrapes_of(&daemon, &name_b).await;
    common::wait_for("b scraped 5 more times", WITHIN, || async {
        (scrapes_of(&daemon, &name_b).await >= b_now + 5).then_some(())
    })
    .await;
    // At most one scrape was in flight when a was stopped.
    let a_later = scrapes_of(&daemon, &name_a).await;
    assert!(
        a_later <= a_after_removal + 1,
        "a still scraped: {a_after_removal} then {a_later}"
    );
    assert!(a_later >= 2, "a's history stays");
    let listed = targets_json(&base).await;
    let b_entry = listed
        .iter()
        .find(|t| t["name"] == name_b.as_str())
        .expect("target b listed");
    assert_eq!(b_entry["labels"]["zone"], "west");

    // A half-written file keeps the last good list.
    std::fs::write(&sd_file, "[{\"targets\": [").expect("sd file broken");
    let b_before = scrapes_of(&daemon, &name_b).await;
    common::wait_for("b still scraped after a broken file", WITHIN, || async {
        (scrapes_of(&daemon, &name_b).await >= b_before + 5).then_some(())
    })
    .await;
    assert!(daemon.daemon.targets.names().contains(&name_b.to_string()));
    assert!(
        own_metric(&base, "llmwatch_discovery_failures_total").await >= Some(1.0),
        "the broken file is counted"
    );
    daemon.daemon.shutdown().await;
}

/// A loopback inventory answering the http_sd document it holds now.
async fn inventory(document: Arc<Mutex<String>>) -> String {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/sd",
        get(move |headers: axum::http::HeaderMap| {
            let document = document.clone();
            async move {
                let authorized = headers
                    .get("authorization")
                    .is_some_and(|v| v == "Bearer sd-secret");
                if !authorized {
                    return (axum::http::StatusCode::UNAUTHORIZED, String::new());
                }
                let body = document.lock().map(|d| d.clone()).unwrap_or_default();
                (axum::http::StatusCode::OK, body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("inventory binds");
    let addr = listener.local_addr().expect("inventory address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/sd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sd_follows_the_inventory() {
    let (_a, a) = simulator().await;
    let document = Arc::new(Mutex::new(sd_document(&[&a, "127.0.0.1:9"], "rack-1")));
    let url = inventory(document.clone()).await;
    std::env::set_var("LLMWATCH_TEST_SD_TOKEN", "sd-secret");
    let toml = format!(
        "[[discovery]]\nname = \"inv\"\nhttp_url = \"{url}\"\nhttp_token_env = \"LLMWATCH_TEST_SD_TOKEN\"\n\
         refresh_interval = \"1s\"\n[discovery.target]\nscrape_interval = \"300ms\"\n"
    );
    let daemon = common::spawn_daemon(&toml).await;
    let name_a = format!("inv-{}", a.replace(':', "-"));
    common::wait_for("both inventory targets watched", WITHIN, || async {
        let names: BTreeSet<String> = daemon.daemon.targets.names().into_iter().collect();
        (names.contains(&name_a) && names.contains("inv-127.0.0.1-9")).then_some(())
    })
    .await;
    common::wait_for("target a scraped", WITHIN, || async {
        (scrapes_of(&daemon, &name_a).await >= 1).then_some(())
    })
    .await;
    // The down address is recorded as down, and the daemon goes on.
    common::wait_for("the closed port recorded down", WITHIN, || async {
        (scrapes_of(&daemon, "inv-127.0.0.1-9").await >= 1).then_some(())
    })
    .await;
    *document.lock().expect("document lock") = sd_document(&[&a], "rack-1");
    common::wait_for("the closed port dropped", WITHIN, || async {
        let names = daemon.daemon.targets.names();
        (!names.contains(&"inv-127.0.0.1-9".to_string()) && names.contains(&name_a)).then_some(())
    })
    .await;
    daemon.daemon.shutdown().await;
}

/// `count` loopback ports, each serving the real vLLM capture at
/// `/metrics` (a tiny axum server per port: shards decide by URL, so every
/// target needs its own address).
async fn fixture_fleet(count: usize) -> Vec<String> {
    use axum::routing::get;
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/vllm-live/metrics_vllm_idle.txt"
    ))
    .expect("the vLLM capture");
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let page = page.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    page,
                )
            }
        }),
    );
    let mut addresses = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a fleet port binds");
        addresses.push(listener.local_addr().expect("fleet address").to_string());
        let app = app.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
    }
    addresses
}

/// Scrapes `daemon` stored for `name`, and how many of them were up
/// ((0, 0) when its store does not know the target).
async fn scrapes_and_up(daemon: &common::app::TestApp, name: &str) -> (usize, usize) {
    let store = &daemon.daemon.store;
    let Some(row) = store.target_by_name(name).await.expect("store reads") else {
        return (0, 0);
    };
    let health = store
        .scrape_health(row.id, 100_000)
        .await
        .expect("store reads");
    (health.len(), health.iter().filter(|h| h.up).count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_split_the_fleet_disjointly_and_completely() {
    // Twenty reachable targets serving the real page: each shard must
    // scrape (and store) its half, and never the other's.
    let addresses = fixture_fleet(20).await;
    let refs: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("fleet.json"), sd_document(&refs, "x")).expect("sd written");
    let mut shards = Vec::new();
    for shard in ["0/2", "1/2"] {
        let toml = format!(
            "[server]\nshard = \"{shard}\"\n[[discovery]]\nname = \"fleet\"\n\
             files = [\"{}/fleet.json\"]\nrefresh_interval = \"1s\"\n\
             [discovery.target]\nscrape_interval = \"300ms\"\n",
            dir.path().display()
        );
        shards.push(common::spawn_daemon(&toml).await);
    }
    let expected: BTreeSet<String> = addresses
        .iter()
        .map(|a| format!("fleet-{}", a.replace(':', "-")))
        .collect();

    // The watched sets: disjoint, together the fleet, each a fair share.
    let mut seen = Vec::new();
    for daemon in &shards {
        let names = common::wait_for("a shard's targets", WITHIN, || async {
            let names = daemon.daemon.targets.names();
            (!names.is_empty()).then_some(names)
        })
        .await;
        seen.push(names.into_iter().collect::<BTreeSet<String>>());
    }
    assert!(seen[0].is_disjoint(&seen[1]), "{seen:?}");
    let all: BTreeSet<String> = seen[0].union(&seen[1]).cloned().collect();
    assert_eq!(all, expected);
    assert!(
        seen.iter().all(|s| s.len() >= 4),
        "both shards hold a fair share: {seen:?}"
    );

    // Scraping: every target of a shard's half is scraped up twice in that
    // shard's own store.
    for (daemon, names) in shards.iter().zip(&seen) {
        common::wait_for_every(
            "every target of the shard scraped up twice",
            WITHIN,
            Duration::from_millis(200),
            || async {
                for name in names {
                    if scrapes_and_up(daemon, name).await.1 < 2 {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    }
    // Then, from the stores alone: the scraped halves are the watched ones,
    // disjoint and complete, and every target was scraped up by exactly one
    // shard; the other shard stored no scrape of it at all.
    let mut scraped: Vec<BTreeSet<String>> = Vec::new();
    for daemon in &shards {
        let mut names = BTreeSet::new();
        for name in &expected {
            if scrapes_and_up(daemon, name).await.0 > 0 {
                names.insert(name.clone());
            }
        }
        scraped.push(names);
    }
    assert_eq!(scraped, seen, "each shard scraped exactly its watched half");
    assert!(scraped[0].is_disjoint(&scraped[1]), "{scraped:?}");
    let covered: BTreeSet<String> = scraped[0].union(&scraped[1]).cloned().collect();
    assert_eq!(
        covered, expected,
        "together the shards scraped every target"
    );
    for name in &expected {
        let mut up_in = Vec::new();
        for (i, daemon) in shards.iter().enumerate() {
            let (stored, up) = scrapes_and_up(daemon, name).await;
            if up > 0 {
                up_in.push(i);
            }
            if !scraped[i].contains(name) {
                assert_eq!(
                    stored, 0,
                    "shard {i} stored a scrape of {name}, not its own"
                );
            }
        }
        assert_eq!(up_in.len(), 1, "{name} scraped up by shards {up_in:?}");
    }
    for daemon in shards {
        daemon.daemon.shutdown().await;
    }
}

/// A loopback stand-in for the Kubernetes API server: it answers the pod
/// list of namespace `ml` from the recorded pages in `fixtures/kubernetes/`
/// (the first list in two pages joined by `continue`, any later list from
/// `pods_list_after_gone.json`), and holds each watch open, sending the
/// lines the test hands it (`None` ends the watch as the server's
/// `timeoutSeconds` would). Every request is logged; one without the
/// service-account token is answered 401.
mod kube_api {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    pub const TOKEN: &str = "sa-token-5f0c9d2e";

    pub fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../../fixtures/kubernetes/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    pub struct KubeApi {
        pub url: String,
        pub requests: Arc<Mutex<Vec<String>>>,
        pub watch: mpsc::UnboundedSender<Option<String>>,
    }

    struct State {
        requests: Arc<Mutex<Vec<String>>>,
        lines: tokio::sync::Mutex<mpsc::UnboundedReceiver<Option<String>>>,
        first_lists: AtomicUsize,
    }

    pub async fn start() -> KubeApi {
        start_with(None).await
    }

    /// As [`start`], over TLS with `acceptor` (an https API server).
    pub async fn start_with(acceptor: Option<tokio_rustls::TlsAcceptor>) -> KubeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr().expect("address"));
        let (watch, lines) = mpsc::unbounded_channel();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(State {
            requests: requests.clone(),
            lines: tokio::sync::Mutex::new(lines),
            first_lists: AtomicUsize::new(0),
        });
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (state, acceptor) = (state.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(acceptor) => {
                            // A client that refuses the certificate ends here.
                            if let Ok(tls) = acceptor.accept(socket).await {
                                serve(tls, state).await;
                            }
                        }
                        None => serve(socket, state).await,
                    }
                });
            }
        });
        KubeApi {
            url,
            requests,
            watch,
        }
    }

    impl KubeApi {
        /// The logged request targets (path and query).
        pub fn logged(&self) -> Vec<String> {
            self.requests.lock().expect("log").clone()
        }
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut socket: S, state: Arc<State>) {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let target = head.split(' ').nth(1).unwrap_or("").to_string();
        let authorized = head
            .lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {TOKEN}")));
        state.requests.lock().expect("log").push(target.clone());
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        if !authorized {
            return respond(&mut socket, "401 Unauthorized", "{}").await;
        }
        if path != "/api/v1/namespaces/ml/pods" {
            return respond(&mut socket, "404 Not Found", "{}").await;
        }
        let params: Vec<&str> = query.split('&').collect();
        if params.contains(&"watch=1") {
            return stream_watch(&mut socket, &state).await;
        }
        let page = if params.iter().any(|p| p.starts_with("continue=")) {
            fixture("pods_list_page2.json")
        } else if state.first_lists.fetch_add(1, Ordering::SeqCst) == 0 {
            fixture("pods_list_page1.json")
        } else {
            fixture("pods_list_after_gone.json")
        };
        respond(&mut socket, "200 OK", &page).await;
    }

    async fn respond<S: AsyncWrite + Unpin>(socket: &mut S, status: &str, body: &str) {
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = socket.write_all(answer.as_bytes()).await;
    }

    async fn stream_watch<S: AsyncWrite + Unpin>(socket: &mut S, state: &State) {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                    Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let mut lines = state.lines.lock().await;
        while let Some(Some(line)) = lines.recv().await {
            let chunk = format!("{:x}\r\n{line}\n\r\n", line.len() + 1);
            if socket.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = socket.write_all(b"0\r\n\r\n").await;
    }
}

/// The discovered targets of group `k8s`: address → (pod, model) labels.
fn k8s_targets(daemon: &common::app::TestApp) -> BTreeMap<String, (String, String)> {
    daemon
        .daemon
        .targets
        .current()
        .iter()
        .filter(|t| t.discovered_by.as_deref() == Some("k8s"))
        .map(|t| {
            let label = |name: &str| t.labels.get(name).cloned().unwrap_or_default();
            let address = t.url.trim_start_matches("http://").to_string();
            (address, (label("pod"), label("model")))
        })
        .collect()
}

fn expect(pairs: &[(&str, &str, &str)]) -> BTreeMap<String, (String, String)> {
    pairs
        .iter()
        .map(|(a, p, m)| (a.to_string(), (p.to_string(), m.to_string())))
        .collect()
}

/// Issue 38: kubernetes_sd against recorded list and watch answers. The
/// list (two pages) gives the scrape-annotated pods' `http` ports,
/// relabelled as Prometheus' kubernetes-pods job does; watch events add,
/// relabel and remove targets as pods come and go; a watch the server ends
/// resumes from the last bookmark; 410 Gone lists again, and what changed
/// meanwhile shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_sd_follows_pods_through_list_watch_and_gone() {
    let api = kube_api::start().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{}\n", kube_api::TOKEN)).expect("token written");
    let toml = format!(
        r#"
[[discovery]]
name = "k8s"
refresh_interval = "1s"
[discovery.kubernetes]
role = "pod"
namespaces = ["ml"]
label_selector = "app.kubernetes.io/name=vllm"
api_server = "{url}"
token_file = "{token}"
[[discovery.relabel_configs]]
source_labels = ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]
action = "keep"
regex = "true"
[[discovery.relabel_configs]]
source_labels = ["__meta_kubernetes_pod_container_port_name"]
action = "keep"
regex = "http"
[[discovery.relabel_configs]]
action = "labelmap"
regex = "__meta_kubernetes_pod_label_(model)"
[[discovery.relabel_configs]]
source_labels = ["__meta_kubernetes_pod_name"]
target_label = "pod"
[discovery.target]
scrape_interval = "60s"
"#,
        url = api.url,
        token = token_file.display()
    );
    let daemon = common::spawn_daemon(&toml).await;
    let wait = |what: &'static str, want: BTreeMap<String, (String, String)>| {
        let daemon = &daemon;
        async move {
            common::wait_for(what, WITHIN, || {
                let matches = k8s_targets(daemon) == want;
                async move { matches.then_some(()) }
            })
            .await
        }
    };
    // Listed: vllm-0 and vllm-1; vllm-2 has no IP yet, vllm-3 is not
    // annotated for scraping, the dcgm ports are not `http`.
    wait(
        "the listed pods",
        expect(&[
            ("127.0.10.1:8000", "vllm-0", "llama-8b"),
            ("127.0.10.2:8000", "vllm-1", "llama-8b"),
        ]),
    )
    .await;
    let lines: Vec<String> = kube_api::fixture("pods_watch_1.jsonl")
        .lines()
        .map(str::to_string)
        .collect();
    let send = |line: &String| api.watch.send(Some(line.clone())).expect("watch open");
    send(&lines[0]);
    wait(
        "vllm-2 added",
        expect(&[
            ("127.0.10.1:8000", "vllm-0", "llama-8b"),
            ("127.0.10.2:8000", "vllm-1", "llama-8b"),
            ("127.0.10.3:8000", "vllm-2", "llama-8b"),
        ]),
    )
    .await;
    send(&lines[1]);
    send(&lines[2]);
    let after_watch = expect(&[
        ("127.0.10.2:8000", "vllm-1", "llama-70b"),
        ("127.0.10.3:8000", "vllm-2", "llama-8b"),
    ]);
    wait("vllm-0 removed, vllm-1 relabelled", after_watch.clone()).await;
    // A bookmark, then the server ends the watch: the next one resumes
    // from the bookmark's version, nothing listed again.
    send(&lines[3]);
    api.watch.send(None).expect("watch open");
    common::wait_for("a watch from the bookmark", WITHIN, || async {
        api.logged()
            .iter()
            .any(|r| r.contains("watch=1") && r.contains("resourceVersion=4720"))
            .then_some(())
    })
    .await;
    assert_eq!(k8s_targets(&daemon), after_watch);
    // 410 Gone: listed again; vllm-2 went meanwhile, vllm-4 came.
    send(
        &kube_api::fixture("pods_watch_2.jsonl")
            .trim_end()
            .to_string(),
    );
    wait(
        "the re-list after 410",
        expect(&[
            ("127.0.10.2:8000", "vllm-1", "llama-70b"),
            ("127.0.10.5:8000", "vllm-4", "llama-8b"),
        ]),
    )
    .await;
    common::wait_for("a watch from the new list", WITHIN, || async {
        api.logged()
            .iter()
            .any(|r| r.contains("watch=1") && r.contains("resourceVersion=4800"))
            .then_some(())
    })
    .await;
    let logged = api.logged();
    let lists: Vec<&String> = logged.iter().filter(|r| !r.contains("watch=1")).collect();
    assert_eq!(lists.len(), 3, "two pages, then one re-list: {logged:?}");
    assert!(
        lists[0].contains("labelSelector=app.kubernetes.io%2Fname%3Dvllm")
            && lists[0].contains("limit=500"),
        "{logged:?}"
    );
    assert!(lists[1].contains("continue="), "{logged:?}");
    let first_watch = logged
        .iter()
        .find(|r| r.contains("watch=1"))
        .expect("a watch");
    assert!(
        first_watch.contains("resourceVersion=4711") && first_watch.contains("timeoutSeconds="),
        "{first_watch}"
    );
    let base = daemon.base_url();
    assert_eq!(
        own_metric(&base, "llmwatch_discovery_targets").await,
        Some(2.0)
    );
}

/// A CA and a server certificate for 127.0.0.1 it signed, made by the
/// `openssl` CLI in `dir`: (CA PEM path, server acceptor).
fn tls_for_loopback(
    dir: &std::path::Path,
    name: &str,
) -> (std::path::PathBuf, tokio_rustls::TlsAcceptor) {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let path = |file: &str| dir.join(format!("{name}-{file}"));
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let s = |p: std::path::PathBuf| p.display().to_string();
    std::fs::write(
        path("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("extensions written");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &s(path("ca.key")),
        "-out",
        &s(path("ca.pem")),
        "-days",
        "1",
        "-subj",
        &format!("/CN={name}-ca"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &s(path("server.key")),
        "-out",
        &s(path("server.csr")),
        "-subj",
        "/CN=kubernetes",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &s(path("server.csr")),
        "-CA",
        &s(path("ca.pem")),
        "-CAkey",
        &s(path("ca.key")),
        "-CAcreateserial",
        "-out",
        &s(path("server.pem")),
        "-days",
        "1",
        "-extfile",
        &s(path("ext")),
    ]);
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&std::fs::read(path("server.pem")).expect("cert"))
            .collect::<Result<_, _>>()
            .expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(&std::fs::read(path("server.key")).expect("key"))
        .expect("key PEM");
    let config = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
    (
        path("ca.pem"),
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    )
}

/// https to the API server trusts the configured CA bundle and nothing
/// else: against a server whose certificate that CA signed, the pods are
/// listed; against one signed by another CA, nothing is, and the failure
/// is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_sd_over_https_trusts_only_its_ca() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cluster_ca, acceptor) = tls_for_loopback(dir.path(), "cluster");
    let (other_ca, _) = tls_for_loopback(dir.path(), "other");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, kube_api::TOKEN).expect("token written");
    let config = |url: &str, ca: &std::path::Path| {
        format!(
            "[[discovery]]\nname = \"k8s\"\nrefresh_interval = \"1s\"\n\
             [discovery.kubernetes]\nrole = \"pod\"\nnamespaces = [\"ml\"]\n\
             api_server = \"{url}\"\ntoken_file = \"{}\"\nca_file = \"{}\"\n\
             [discovery.target]\nscrape_interval = \"60s\"\n",
            token_file.display(),
            ca.display()
        )
    };
    let api = kube_api::start_with(Some(acceptor)).await;
    assert!(api.url.starts_with("https://"));
    let trusted = common::spawn_daemon(&config(&api.url, &cluster_ca)).await;
    common::wait_for("pods listed over https", WITHIN, || {
        let listed = k8s_targets(&trusted).len();
        async move { (listed > 0).then_some(()) }
    })
    .await;
    let untrusted = common::spawn_daemon(&config(&api.url, &other_ca)).await;
    let base = untrusted.base_url();
    common::wait_for("the refused certificate counted", WITHIN, || {
        let base = base.clone();
        async move {
            (own_metric(&base, "llmwatch_discovery_failures_total").await >= Some(1.0))
                .then_some(())
        }
    })
    .await;
    assert!(k8s_targets(&untrusted).is_empty());
}
