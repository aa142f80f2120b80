//! Helpers of the Prometheus API tests: a simulator with its GPU page, a
//! daemon scraping both, a real Prometheus, an HTTP client for either, and
//! Grafana's variable substitution.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
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
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus is installed (Debian package `prometheus`); this test must not skip");
    Prometheus { child, addr }
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
