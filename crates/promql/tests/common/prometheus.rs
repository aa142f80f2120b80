//! A real Prometheus over a TSDB directory, and a tiny loopback HTTP
//! client for its API (timeouts and a size limit on every call).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

const MAX_BODY: usize = 64 << 20;

/// A Prometheus server over a TSDB directory, killed on drop.
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

pub fn start_prometheus(dir: &Path) -> Prometheus {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        "global:\n  scrape_interval: 15s\nscrape_configs: []\n",
    )
    .expect("write config");
    let (child, addr) = spawn_listening(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--storage.tsdb.retention.time=100y")
            .arg("--web.listen-address=127.0.0.1:0"),
    );
    let prom = Prometheus { child, addr };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = http_get(addr, "/-/ready") {
            return prom;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus not ready within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `command` (a Prometheus on port 0) and returns it with the
/// address its log says it listens on: the OS picks the port as Prometheus
/// binds it, so nothing can take it between a probe and the bind.
fn spawn_listening(command: &mut Command) -> (Child, SocketAddr) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus is installed (Debian package `prometheus`); this test must not skip");
    let stderr = child.stderr.take().expect("piped stderr");
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end, so a full pipe never stalls Prometheus.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !line.contains("msg=\"Listening on\"") {
                continue;
            }
            let addr = line
                .split_whitespace()
                .find_map(|field| field.strip_prefix("address="))
                .and_then(|a| a.parse::<SocketAddr>().ok());
            if let Some(addr) = addr {
                let _ = found.send(addr);
            }
        }
    });
    let addr = address
        .recv_timeout(Duration::from_secs(60))
        .expect("prometheus logs the address it listens on within 60 s");
    (child, addr)
}

/// A loopback HTTP/1.0 GET with timeouts and a size limit; (status, body).
pub fn http_get(addr: SocketAddr, path_and_query: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.take(MAX_BODY as u64 + 1).read_to_end(&mut raw)?;
    if raw.len() > MAX_BODY {
        return Err(std::io::Error::other("answer over the size limit"));
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    Ok((status, raw[split + 4..].to_vec()))
}

pub fn url_encode(s: &str) -> String {
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

/// Prometheus' answer: `Ok(data)` or `Err(error message)`.
pub fn prom_query(addr: SocketAddr, path: &str) -> Result<Json, String> {
    let (_, body) = http_get(addr, path).expect("prometheus answers");
    let v: Json = serde_json::from_slice(&body).expect("prometheus answers JSON");
    if v["status"] == "success" {
        Ok(v["data"].clone())
    } else {
        Err(v["error"].as_str().unwrap_or("?").to_string())
    }
}

/// Turns an OpenMetrics file with timestamps into TSDB blocks under
/// `data_dir` with `promtool tsdb create-blocks-from openmetrics`.
pub fn create_blocks(om: &Path, data_dir: &Path) {
    let status = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics", "--quiet"])
        .arg(om)
        .arg(data_dir)
        .status()
        .expect("promtool is installed (Debian package `prometheus`); this must not skip");
    assert!(
        status.success(),
        "promtool failed to create blocks from {om:?}"
    );
}
