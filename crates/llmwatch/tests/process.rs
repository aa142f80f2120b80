//! The real `llmwatch` binary as an operator runs it: `serve` with a target
//! whose URL carries a password, stopped by SIGTERM. The password never
//! appears in its log, pages, API answers or database file; SIGTERM ends it
//! with exit code 0 within 10 s and the last scrapes stored. `bench --json`
//! keeps the password out of its table and file too.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::wait_for;
use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::Store;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

const PASSWORD: &str = "pa55-SECRET-word";
const QUERY_SECRET: &str = "KEY-SECRET-42";
const TOKEN: &str = "process-test-token";

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD) && !text.contains(QUERY_SECRET),
        "{what} shows a credential:\n{text}"
    );
}

async fn get(url: &str) -> String {
    reqwest::Client::new()
        .get(url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_secrets_out_and_stops_cleanly_on_sigterm() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("llmwatch.db");
    let config = dir.path().join("llmwatch.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
database = {db:?}
token_env = "LLMWATCH_PROCESS_TEST_TOKEN"

[[targets]]
name = "sim"
url = "http://llmuser:{PASSWORD}@{engine}"
scrape_interval = "200ms"
[targets.probe]
interval = "300ms"
shape = "16x2"

# Refused port: its scrape and probe errors are where a URL leaks.
[[targets]]
name = "down"
url = "http://downuser:{PASSWORD}@127.0.0.1:9/v1?api_key={QUERY_SECRET}"
scrape_interval = "200ms"
[targets.probe]
interval = "300ms"
shape = "16x2"

[[gpus]]
name = "gpu"
dcgm_url = "http://{engine}/metrics?api_key={QUERY_SECRET}"
interval = "500ms"
"#
        ),
    )
    .unwrap();
    let log_path = dir.path().join("llmwatch.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("LLMWATCH_PROCESS_TEST_TOKEN", TOKEN)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("the llmwatch binary starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), stdout.next_line())
        .await
        .expect("it prints its address")
        .unwrap()
        .unwrap_or_default();
    let base = first
        .strip_prefix("llmwatch listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();

    // Scrapes and canaries arrive; every surface that shows the target is clean.
    wait_for(
        "the target up with canaries",
        Duration::from_secs(20),
        || async {
            let targets: Value =
                serde_json::from_str(&get(&format!("{base}/api/v1/targets")).await).ok()?;
            let sim = targets["targets"]
                .as_array()?
                .iter()
                .find(|t| t["name"] == "sim")?;
            let down = targets["targets"]
                .as_array()?
                .iter()
                .find(|t| t["name"] == "down")?;
            (sim["status"]["state"] == "up"
                && sim["signals"]["probe_ttft_p95"]["value"].is_number()
                && down["status"]["state"] == "down"
                && down["status"]["error"].is_string())
            .then_some(())
        },
    )
    .await;
    let sweep: Value = reqwest::Client::new()
        .post(format!("{base}/api/v1/sweeps"))
        .bearer_auth(TOKEN)
        .json(
            &json!({"target": "sim", "shape": "16x2", "concurrency": [1],
                      "requests_per_step": 2, "min_step_duration": "100ms"}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = sweep["id"].as_i64().expect("sweep id");
    let detail = wait_for("the sweep to finish", Duration::from_secs(30), || async {
        let text = get(&format!("{base}/api/v1/sweeps/{id}")).await;
        let row: Value = serde_json::from_str(&text).ok()?;
        (row["status"] != "running").then_some(text)
    })
    .await;
    assert_clean("the sweep's API answer", &detail);
    for path in [
        "/",
        "/targets/sim",
        "/targets/down",
        "/targets/gpu",
        "/sweeps",
        &format!("/sweeps/{id}"),
        "/api/v1/targets",
        "/api/v1/targets/sim",
        "/api/v1/targets/down",
        "/api/v1/probes?target=sim",
        "/api/v1/probes?target=down",
        "/api/v1/sweeps",
        "/metrics",
    ] {
        assert_clean(path, &get(&format!("{base}{path}")).await);
    }

    // SIGTERM: exit 0 within 10 s, the last scrapes committed.
    let signalled_ms = now_ms();
    let signalled = Instant::now();
    let pid = child.id().expect("running").to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits within 10 s")
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(signalled.elapsed() < Duration::from_secs(10));

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("shutting down"), "{log}");
    assert_clean("the log", &log);
    let store = Store::open(&db).await.unwrap();
    let target = store.target_by_name("sim").await.unwrap().unwrap();
    let newest = store.scrape_health(target.id, 1).await.unwrap();
    assert!(
        newest[0].ts_ms >= signalled_ms - 1000,
        "the newest stored scrape is {} ms older than the signal",
        signalled_ms - newest[0].ts_ms
    );
    drop(store);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains("llmwatch.db") {
            // The -shm file may be gone between listing and reading.
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            assert_clean(
                &path.display().to_string(),
                &String::from_utf8_lossy(&bytes),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_output_keeps_the_password_out() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("run.json");
    // One reachable target with a password, and one refused port so an
    // error message quotes the URL.
    for (url, expect_ok) in [
        (format!("http://llmuser:{PASSWORD}@{engine}"), true),
        (format!("http://llmuser:{PASSWORD}@127.0.0.1:9"), false),
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
            .args([
                "bench",
                "--url",
                &url,
                "--model",
                "sim-model",
                "--shape",
                "16x2",
            ])
            .args(["--concurrency", "1", "--requests", "2", "--json"])
            .arg(&json_path)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_clean("bench's table", &stdout);
        assert_clean("bench's errors", &stderr);
        if expect_ok {
            assert!(output.status.success(), "{stdout}{stderr}");
            assert_clean(
                "bench's JSON",
                &std::fs::read_to_string(&json_path).unwrap(),
            );
        }
    }
}
