//! Headless Chromium driven over the DevTools protocol on
//! `--remote-debugging-pipe` (NUL-separated JSON on fds 3 and 4; a `sh`
//! redirection maps them to the child's stdin/stdout), so no websocket
//! client and no npm are needed. Set `LLMWATCH_CHROMIUM` to a browser
//! binary to use another one.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The browser binary: `LLMWATCH_CHROMIUM`, else the first on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("LLMWATCH_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// A DevTools-protocol session with one page, over a pipe.
pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    session: Option<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn launch(binary: &Path) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null 2>/dev/null"#)
            .arg(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--mute-audio",
                "--window-size=1280,900",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium starts");
        let stdin = child.stdin.take().expect("pipe to chromium");
        let stdout = BufReader::new(child.stdout.take().expect("pipe from chromium"));
        let mut browser = Browser {
            child,
            stdin,
            stdout,
            next_id: 0,
            session: None,
            _profile: profile,
        };
        let target = browser
            .call("Target.createTarget", json!({ "url": "about:blank" }))
            .await;
        let target_id = target["targetId"].as_str().expect("target id").to_string();
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await;
        browser.session = Some(attached["sessionId"].as_str().expect("session").to_string());
        browser.call("Page.enable", json!({})).await;
        browser.call("Runtime.enable", json!({})).await;
        browser
    }

    /// Sends one command and waits for its answer (events are skipped).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("JSON");
        bytes.push(0);
        self.stdin
            .write_all(&bytes)
            .await
            .expect("write to chromium");
        self.stdin.flush().await.expect("flush");
        let answer = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let mut buf = Vec::new();
                let n = self
                    .stdout
                    .read_until(0, &mut buf)
                    .await
                    .expect("read from chromium");
                assert!(n > 0, "chromium closed the pipe during {method}");
                buf.pop();
                let Ok(reply) = serde_json::from_slice::<Value>(&buf) else {
                    continue;
                };
                if reply["id"].as_u64() == Some(id) {
                    return reply;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} within 60 s"));
        assert!(
            answer.get("error").is_none(),
            "{method} failed: {}",
            answer["error"]
        );
        answer["result"].clone()
    }

    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true }),
            )
            .await;
        result["result"]["value"].clone()
    }

    /// Navigates and waits for the load event (the SSE stream stays open).
    pub async fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url })).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let state = self.eval("document.readyState").await;
            let here = self.eval("location.href").await;
            if state == "complete" && here.as_str().is_some_and(|h| h == url) {
                break;
            }
            assert!(Instant::now() < deadline, "{url} did not load in 30 s");
        }
    }

    pub async fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        )
        .await;
    }

    /// Returns once the page has drawn two frames since the call, so a
    /// relayout (after a viewport change) is on screen.
    pub async fn painted(&mut self) {
        self.call(
            "Runtime.evaluate",
            json!({
                "expression": "new Promise(done => requestAnimationFrame(() => \
                               requestAnimationFrame(() => done(true))))",
                "awaitPromise": true,
                "returnByValue": true,
            }),
        )
        .await;
    }

    /// A full-page PNG at `width` CSS pixels.
    pub async fn screenshot(&mut self, width: u32, mobile: bool, path: &Path) {
        self.viewport(width, 900, mobile).await;
        self.painted().await;
        let metrics = self.call("Page.getLayoutMetrics", json!({})).await;
        let height = metrics["cssContentSize"]["height"]
            .as_f64()
            .unwrap_or(900.0)
            .clamp(400.0, 6000.0) as u32;
        self.viewport(width, height, mobile).await;
        self.painted().await;
        let shot = self
            .call("Page.captureScreenshot", json!({ "format": "png" }))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, &png).expect("screenshot written");
        eprintln!("saved {} ({} KiB)", path.display(), png.len() / 1024);
    }

    pub async fn close(mut self) {
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.call("Browser.close", json!({})),
        )
        .await;
        let _ = self.child.kill().await;
    }
}
