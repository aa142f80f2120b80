//! Spawning simulators on loopback and talking to them like a client would.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use llmwatch_sim::{serve, Profile, Sim, SimConfig};
use serde_json::Value;
use tokio::time::Instant;

/// Timing-sensitive tests take this so they do not share the two cores
/// with each other.
pub static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct TestSim {
    pub sim: Sim,
    pub base: String,
    pub gpu_base: String,
    pub client: reqwest::Client,
}

pub async fn spawn(config: SimConfig) -> TestSim {
    let sim = Sim::start(config).expect("valid config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let gpu_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let gpu_base = format!("http://{}", gpu_listener.local_addr().expect("addr"));
    let engine = sim.clone();
    tokio::spawn(async move { engine.serve(listener).await });
    tokio::spawn(serve(gpu_listener, sim.gpu_router()));
    TestSim {
        sim,
        base,
        gpu_base,
        client: reqwest::Client::new(),
    }
}

/// A config for `profile` with the given time scale and model `tiny-llama`.
pub fn config(profile: Profile, time_scale: f64) -> SimConfig {
    let mut c = SimConfig::new(profile);
    c.time_scale = time_scale;
    c.model = "tiny-llama".to_string();
    c
}

pub fn fixture(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A prompt of exactly `n` tokens for completions (BOS + n-1 words of one
/// token each), unique per `nonce`.
pub fn prompt_tokens(n: usize, nonce: usize) -> String {
    let mut s = format!("q{:03}", nonce % 1000);
    for i in 1..n.saturating_sub(1) {
        s.push_str(&format!(" w{:03}", (i * 7 + nonce) % 1000));
    }
    s
}

pub struct Streamed {
    pub status: u16,
    pub content_type: String,
    /// (arrival, raw `data:` payload) per event.
    pub events: Vec<(Instant, String)>,
    pub sent: Instant,
}

impl Streamed {
    pub fn json(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter(|(_, e)| e != "[DONE]")
            .map(|(_, e)| serde_json::from_str(e).expect("event is JSON"))
            .collect()
    }

    /// Events that carry generated text.
    pub fn content_times(&self) -> Vec<Instant> {
        self.events
            .iter()
            .filter(|(_, e)| {
                e.contains(r#""text":""#) && !e.contains(r#""text":"""#)
                    || e.contains(r#""content":""#) && !e.contains(r#""content":"""#)
            })
            .map(|(t, _)| *t)
            .collect()
    }
}

pub async fn post_stream(client: &reqwest::Client, url: &str, body: &Value) -> Streamed {
    let sent = Instant::now();
    let resp = client.post(url).json(body).send().await.expect("send");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut events = Vec::new();
    let mut buf = Vec::<u8>::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("chunk");
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let ev: Vec<u8> = buf.drain(..pos + 2).collect();
            let text = String::from_utf8(ev).expect("utf8");
            let data = text
                .trim_end()
                .strip_prefix("data: ")
                .expect("data: prefix")
                .to_string();
            events.push((now, data));
        }
    }
    Streamed {
        status,
        content_type,
        events,
        sent,
    }
}

pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client
        .get(url)
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("body")
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    f()
}

/// A JSON text with string and number values replaced by `S` / `N` and keys
/// kept in order: the "shape" of an event, to compare with a capture.
pub fn skeleton(json: &str) -> String {
    let b = json.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            let mut j = i;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            if j < b.len() && b[j] == b':' {
                out.push_str(&json[start..i.min(b.len())]);
            } else {
                out.push('S');
            }
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_digit() || b"-+.eE".contains(&b[i])) {
                i += 1;
            }
            out.push('N');
            continue;
        }
        out.push(c as char);
        i += 1;
    }
    out
}
