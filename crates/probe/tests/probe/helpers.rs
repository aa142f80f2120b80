//! A scripted loopback SSE server with known, injected timings. It runs on
//! its own thread and runtime so the client under test cannot delay its
//! clock readings, and it records the monotonic instant of every event it
//! hands to hyper (the truth the client is compared with).

// Shared by the `probe` and `accuracy` test binaries; each uses a part.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures_util::stream;

/// Serializes the timing-sensitive tests of this binary, so they do not
/// compete with each other for the two cores.
pub static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Raises the scheduling priority of every thread of this test process
/// (nice −10; needs root or CAP_SYS_NICE, silently skipped otherwise).
/// The timing tests compare two clocks readings a fraction of a millisecond
/// apart; on a shared 2-core box a neighbour's compile otherwise delays a
/// wakeup by several ms and the test measures the neighbour, not the client.
pub fn boost_priority() {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for entry in dir.flatten() {
        if let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        {
            // SAFETY: setpriority only reads its arguments.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, tid, -10);
            }
        }
    }
}

/// One event the server will send, `at` after the headers went out.
#[derive(Clone, Debug)]
pub struct Ev {
    pub at: Duration,
    pub data: Vec<u8>,
}

/// What the server does for every request.
#[derive(Clone, Debug)]
pub enum Script {
    /// Stream `events` after waiting `header_delay`; if `cut`, end the
    /// connection abruptly after the events instead of finishing cleanly.
    Stream {
        header_delay: Duration,
        events: Vec<Ev>,
        headers: Vec<(String, String)>,
        abort_at_end: bool,
        hang_at_end: bool,
        /// Request `req-{i}` starts its events `phase_step * (i % 64)` later,
        /// so concurrent streams are not all in lock-step.
        phase_step: Duration,
    },
    /// A plain error response.
    Status { status: u16, body: String },
    /// Never answer.
    Hang,
}

#[derive(Clone)]
struct AppState {
    script: Arc<Script>,
    stamps: Stamps,
}

/// Send instants per request id (the request's prompt).
pub type Stamps = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

pub struct TestServer {
    pub addr: SocketAddr,
    pub stamps: Stamps,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Send instants of the request whose prompt was `id`.
    pub fn stamps_of(&self, id: &str) -> Vec<Instant> {
        self.stamps
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default()
    }
}

fn prompt_of(body: &serde_json::Value) -> String {
    if let Some(p) = body.get("prompt").and_then(|p| p.as_str()) {
        return p.to_string();
    }
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

async fn handle(State(st): State<AppState>, body: Bytes) -> Response {
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = prompt_of(&req);
    match &*st.script {
        Script::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
        Script::Status { status, body } => {
            let mut r = Response::new(Body::from(body.clone()));
            *r.status_mut() = StatusCode::from_u16(*status).unwrap();
            r.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            r
        }
        Script::Stream {
            header_delay,
            events,
            headers,
            abort_at_end,
            hang_at_end,
            phase_step,
        } => {
            let n: u32 = id
                .strip_prefix("req-")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(*header_delay).await;
            let t0 = Instant::now() + *phase_step * (n % 64);
            let stamps = st.stamps.clone();
            stamps.lock().unwrap().insert(id.clone(), Vec::new());
            let events = events.clone();
            let (abort, hang) = (*abort_at_end, *hang_at_end);
            // The stamp is taken inside the body stream's poll, right when
            // hyper pulls the frame to write it.
            let body = stream::unfold(0usize, move |i| {
                let events = events.clone();
                let stamps = stamps.clone();
                let id = id.clone();
                async move {
                    if i == events.len() {
                        if hang {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        if abort {
                            return Some((Err(std::io::Error::other("cut")), i + 1));
                        }
                        return None;
                    }
                    if i > events.len() {
                        return None;
                    }
                    tokio::time::sleep_until((t0 + events[i].at).into()).await;
                    let bytes = Bytes::from(events[i].data.clone());
                    stamps
                        .lock()
                        .unwrap()
                        .entry(id)
                        .or_default()
                        .push(Instant::now());
                    Some((Ok::<_, std::io::Error>(bytes), i + 1))
                }
            });
            let mut r = Response::new(Body::from_stream(body));
            let h = r.headers_mut();
            h.insert(
                "content-type",
                HeaderValue::from_static("text/event-stream"),
            );
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (
                    HeaderName::from_bytes(k.as_bytes()),
                    HeaderValue::from_str(v),
                ) {
                    if k != "transfer-encoding" && k != "content-length" {
                        h.insert(k, v);
                    }
                }
            }
            r
        }
    }
}

/// Starts the server on 127.0.0.1:0 on its own thread and runtime.
pub fn spawn_server(script: Script) -> TestServer {
    let stamps: Stamps = Arc::default();
    let state = AppState {
        script: Arc::new(script),
        stamps: stamps.clone(),
    };
    let app = Router::new()
        .route("/v1/completions", post(handle))
        .route("/v1/chat/completions", post(handle))
        .with_state(state);
    let addr = spawn_router(app);
    TestServer { addr, stamps }
}

/// Serves `app` on 127.0.0.1:0 on its own thread and runtime (a fake
/// `/tokenize` and the like); its address.
pub fn spawn_router(app: Router) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(NoDelay(listener), app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// A listener that sets TCP_NODELAY on accepted sockets (see STYLE.md:
/// without it the first streamed event can wait ~40 ms).
struct NoDelay(tokio::net::TcpListener);

impl axum::serve::Listener for NoDelay {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok((s, a)) = self.0.accept().await {
                let _ = s.set_nodelay(true);
                return (s, a);
            }
        }
    }
    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A stream script with default switches.
pub fn stream_script(header_delay: Duration, events: Vec<Ev>) -> Script {
    Script::Stream {
        header_delay,
        events,
        headers: vec![],
        abort_at_end: false,
        hang_at_end: false,
        phase_step: Duration::ZERO,
    }
}

/// A chat chunk carrying `text`, optionally with cumulative usage.
pub fn chat_chunk(text: &str, usage_completion: Option<u64>) -> String {
    let mut v = serde_json::json!({
        "id": "x", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
    });
    if let Some(c) = usage_completion {
        v["usage"] = serde_json::json!({"prompt_tokens": 10, "completion_tokens": c, "total_tokens": 10 + c});
    }
    format!("data: {v}\n\n")
}

pub fn role_chunk(usage: bool) -> String {
    let mut v = serde_json::json!({
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]
    });
    if usage {
        v["usage"] =
            serde_json::json!({"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10});
    }
    format!("data: {v}\n\n")
}

pub fn finish_chunk(completion: u64) -> String {
    let v = serde_json::json!({
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion,
                  "prompt_tokens_details": {"cached_tokens": 4}}
    });
    format!("data: {v}\n\n")
}

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}
