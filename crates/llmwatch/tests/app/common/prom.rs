//! Helpers of the Prometheus API tests: a simulator with its GPU page, a
//! daemon scraping both, a real Prometheus, an HTTP client for either, and
//! Grafana's variable substitution.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use llmwatch::cli::sim::{self, SimArgs};
use serde_json::Value;

pub const MODEL: &str = "sim-model";

/// A simulator (vLLM flavour) with its dcgm-exporter page, on loopback.
pub async fn start_sim() -> (llmwatch_sim::Sim, SocketAddr, SocketAddr) {
    let (sim, engine, gpu) = sim::start(&SimArgs::loopback("balanced", MODEL, 1.0).with_gpu_page())
        .await
        .expect("simulator starts");
    (sim, engine, gpu.expect("GPU page address"))
}

/// The daemon's config: the simulator as target `sim` (scraped every
/// `interval`), its GPU page as `gpu`; `extra` is appended to `[server]`
/// and `probe` to the target.
pub fn daemon_toml(
    engine: SocketAddr,
    gpu: SocketAddr,
    interval: &str,
    server: &str,
    probe: &str,
) -> String {
    format!(
        "[server]\n{server}\n\
         [[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"{interval}\"\ngpus = \"gpu\"\n{probe}\n\
         [[gpus]]\nname = \"gpu\"\ndcgm_url = \"http://{gpu}/metrics\"\ninterval = \"{interval}\"\n"
    )
}

/// GET `base/path` (with an optional bearer token); (status, JSON body).
pub async fn get(client: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("body");
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "GET {url}: not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, json)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A real Prometheus (Debian `prometheus`) scraping `jobs` every 250 ms,
/// killed on drop.
pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `jobs`: (job name, host:port, metrics path, `target` label).
pub fn start_prometheus(dir: &Path, jobs: &[(&str, SocketAddr, &str, &str)]) -> Prometheus {
    let mut config = String::from(
        "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\nscrape_configs:\n",
    );
    for (job, addr, path, target) in jobs {
        config.push_str(&format!(
            "  - job_name: {job}\n    metrics_path: {path}\n    static_configs:\n      - targets: ['{addr}']\n        labels:\n          target: {target}\n"
        ));
    }
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).expect("write prometheus.yml");
    let mut command = Command::new("prometheus");
    command
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ));
    let (child, addr) = spawn_prometheus(command, "127.0.0.1:0");
    Prometheus { child, addr }
}

/// Starts `command` (a Prometheus) listening on `listen` and returns it
/// with the address its log says it listens on. With port 0 the OS picks
/// the port as Prometheus binds it, so no other process can take it between
/// a probe and the bind.
pub fn spawn_prometheus(mut command: Command, listen: &str) -> (Child, SocketAddr) {
    let mut child = command
        .arg(format!("--web.listen-address={listen}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus is installed (Debian package `prometheus`); this test must not skip");
    let stderr = child.stderr.take().expect("piped stderr");
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end, so a full pipe never stalls Prometheus.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = listening_address(&line) {
                let _ = found.send(addr);
            }
        }
    });
    let addr = address
        .recv_timeout(Duration::from_secs(60))
        .expect("prometheus logs the address it listens on within 60 s");
    (child, addr)
}

/// The address of Prometheus' `msg="Listening on" address=…` log line.
fn listening_address(line: &str) -> Option<SocketAddr> {
    if !line.contains("msg=\"Listening on\"") {
        return None;
    }
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("address="))?
        .parse()
        .ok()
}

/// The value a Grafana variable takes against the simulator: one value
/// for `="$v"`, a regex after `=~"`.
fn variable_value(name: &str, engine: SocketAddr) -> (String, String) {
    let one = |v: &str| (v.to_string(), v.to_string());
    match name {
        "model_name" | "model" | "Deployment_id" => one(MODEL),
        "target" => one("sim"),
        "gpu_target" => one("gpu"),
        "instance" => one(&engine.to_string()),
        "job" => ("engine".into(), "(engine|gpu)".into()),
        "engine" | "gpu" => ("0".into(), "(0|1)".into()),
        "__rate_interval" | "__interval" => one("1m"),
        "__range" => one("1h"),
        "__range_s" => one("3600"),
        "__range_ms" => one("3600000"),
        "__interval_ms" => one("60000"),
        "ttft_slo" => one("0.5"),
        "tpot_slo" => one("0.05"),
        "namespace_label" => one("namespace"),
        _ => ("x".into(), ".*".into()),
    }
}

/// Substitutes Grafana's variables (`$v`, `${v}`, `${v:fmt}`, `[[v]]`).
pub fn substitute(expr: &str, engine: SocketAddr) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while !rest.is_empty() {
        let (name, len) = if let Some(inner) = rest.strip_prefix("${") {
            match inner.find('}') {
                Some(end) => (inner[..end].split(':').next().unwrap_or(""), end + 3),
                None => ("", 0),
            }
        } else if let Some(inner) = rest.strip_prefix('$') {
            let n = inner
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(inner.len());
            (&inner[..n], n + 1)
        } else if let Some(inner) = rest.strip_prefix("[[") {
            match inner.find("]]") {
                Some(end) => (&inner[..end], end + 4),
                None => ("", 0),
            }
        } else {
            ("", 0)
        };
        if len == 0 || name.is_empty() {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let (single, multi) = variable_value(name, engine);
        out.push_str(if out.ends_with("=~\"") {
            &multi
        } else {
            &single
        });
        rest = &rest[len..];
    }
    out
}

/// Every `expr` of every panel of every shipped dashboard.
pub fn dashboard_exprs() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/dashboards");
    let mut out = Vec::new();
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "overview, target, GPUs, probes, sweeps: {files:?}"
    );
    for file in files {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{file:?}: {e}"));
        for panel in dashboard["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().expect("every target has an expr");
                out.push((
                    format!("{} / {}", file.display(), panel["title"]),
                    expr.to_string(),
                ));
            }
        }
        for var in dashboard["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            // label_values(<selector>, <label>) → the series call Grafana makes.
            let query = var["query"]["query"].as_str().expect("variable query");
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','));
            let (selector, _) = inner.unwrap_or_else(|| panic!("{file:?}: {query}"));
            out.push((
                format!("{} / variable {}", file.display(), var["name"]),
                selector.to_string(),
            ));
        }
    }
    out
}
