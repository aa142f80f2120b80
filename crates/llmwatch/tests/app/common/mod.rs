//! Shared by the daemon's integration tests: a daemon on port 0 with a
//! fresh SQLite file, and waiting on a condition with a deadline instead of
//! sleeping a fixed time.
// Each test binary uses only some of these helpers.
#![allow(dead_code)]

pub mod app;
pub mod browser;
pub mod load;
pub mod prom;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use llmwatch_config::Config;
use llmwatch_store::{NewSweep, Store, SweepStepRow};

/// Runs the binary with `args`: (succeeded, stdout, stderr).
pub async fn llmwatch(args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Parses `toml` (which need not name `listen` or `database`), then starts
/// the daemon on `127.0.0.1:0` with a fresh database file.
pub async fn spawn_daemon(toml: &str) -> app::TestApp {
    app::TestApp::builder().config(toml).spawn().await
}

/// The config a test daemon runs with: `toml` as written, listening on an
/// OS-chosen loopback port, storing into `dir/llmwatch.db`.
pub fn test_config(toml: &str, dir: &Path) -> Config {
    let mut config = Config::parse(toml, Path::new("test.toml")).expect("test config parses");
    config.server.listen = "127.0.0.1:0".parse().expect("loopback address");
    config.server.database = dir.join("llmwatch.db");
    config
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after
/// `deadline` naming `what` was awaited.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_every(what, deadline, Duration::from_millis(50), check).await
}

/// Polls `check` every 50 ms until it holds, or panics after `deadline`
/// naming `what` was awaited.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, deadline, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// [`wait_for`] polling every `interval` (for checks that cost something).
pub async fn wait_for_every<T, F, Fut>(
    what: &str,
    deadline: Duration,
    interval: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(interval).await;
    }
}

/// A sweep of `target` started at `started_ms` with one measured step, left
/// `running` (as a crash would leave it); returns its id.
pub async fn insert_running_sweep(store: &Store, target: &str, started_ms: i64) -> i64 {
    let id = store
        .create_sweep(&NewSweep {
            target_name: Some(target.into()),
            target_url: "http://127.0.0.1:9".into(),
            started_ms,
            settings_json: "{}".into(),
            card_json: "{}".into(),
        })
        .await
        .expect("sweep row");
    store
        .write_sweep_step(&SweepStepRow {
            sweep_id: id,
            step_index: 0,
            load_kind: "concurrency".into(),
            load_value: 1.0,
            start_ms: started_ms,
            end_ms: started_ms + 1_000,
            run_json: "{}".into(),
            evidence_json: "{}".into(),
        })
        .await
        .expect("step row");
    id
}
