//! The server under test as a child process: started in its own process
//! group with the variant's flags and environment, its output kept in a log
//! file, waited for until its health endpoint answers (or it exits, or the
//! ready timeout passes), and stopped by signalling the whole group (vLLM
//! starts engine processes of its own).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use llmwatch_config::experiment::{PlanServer, PlanVariant};
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::process::{Child, Command};

/// Bytes of the log read back for a failed start's tail.
const LOG_TAIL_BYTES: u64 = 64 * 1024;
/// Lines of the log shown for a failed start.
const LOG_TAIL_LINES: usize = 25;
/// How long a stopped server may take to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Pause between health checks.
const HEALTH_POLL: Duration = Duration::from_millis(200);

/// Why a server did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("could not start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the server exited ({status}) before {health} answered")]
    Exited { status: String, health: String },
    #[error("{health} did not answer 200 within {timeout:?}")]
    NotReady { health: String, timeout: Duration },
    #[error("cannot write the server log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A started server.
pub struct ServerProcess {
    child: Child,
    group: Option<Pid>,
    pub log_path: PathBuf,
    pub base_url: String,
}

/// A free loopback port (the listener is closed again; a server that starts
/// right after gets it unless another process races for it).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

/// The command line of a variant: `{port}` and `{gpu_port}` replaced, the
/// variant's flags appended.
pub fn command_line(
    server: &PlanServer,
    variant: &PlanVariant,
    port: u16,
    gpu_port: Option<u16>,
) -> Vec<String> {
    let fill = |word: &String| {
        let word = word.replace("{port}", &port.to_string());
        match gpu_port {
            Some(gpu) => word.replace("{gpu_port}", &gpu.to_string()),
            None => word,
        }
    };
    server
        .command
        .iter()
        .map(fill)
        .chain(variant.args.iter().cloned())
        .collect()
}

impl ServerProcess {
    /// Starts the command with `env` added to llmwatch's environment, its
    /// stdout and stderr appended to `log_path`.
    pub fn start(
        argv: &[String],
        env: &BTreeMap<String, String>,
        log_path: &Path,
        base_url: String,
    ) -> Result<ServerProcess, StartError> {
        let log_err = |source| StartError::Log {
            path: log_path.to_path_buf(),
            source,
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(log_err)?;
        let log2 = log.try_clone().map_err(log_err)?;
        let program = argv.first().cloned().unwrap_or_default();
        let child = Command::new(&program)
            .args(&argv[1.min(argv.len())..])
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| StartError::Spawn { program, source })?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw);
        Ok(ServerProcess {
            child,
            group,
            log_path: log_path.to_path_buf(),
            base_url,
        })
    }

    /// Polls `health` until it answers 200, the process exits, or `timeout`
    /// passes.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        health: &str,
        timeout: Duration,
    ) -> Result<(), StartError> {
        let url = format!("{}{health}", self.base_url);
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(StartError::Exited {
                    status: status.to_string(),
                    health: health.to_string(),
                });
            }
            let answer = http.get(&url).timeout(Duration::from_secs(2)).send().await;
            if answer.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::NotReady {
                    health: health.to_string(),
                    timeout,
                });
            }
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL after a grace
    /// period.
    pub async fn stop(mut self) {
        if let Some(group) = self.group {
            let _ = kill_process_group(group, Signal::TERM);
        }
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(log = %self.log_path.display(), "server ignored SIGTERM; killing its process group");
        }
        if let Some(group) = self.group {
            // Children that outlived the leader (or a leader that ignored
            // SIGTERM) go too; an empty group answers ESRCH.
            let _ = kill_process_group(group, Signal::KILL);
        }
        let _ = self.child.kill().await;
    }
}

/// The last lines of a log file, for a failed start's report.
pub fn log_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.take(LOG_TAIL_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    let mut tail = lines[start..].join("\n");
    // A Python server's last lines are often the outer traceback ("see
    // root cause above"): the first error line is the one that says why.
    let is_error = |l: &&str| l.contains("Error: ") || l.contains("Exception: ");
    if let Some(first) = lines.iter().position(is_error).filter(|&i| i < start) {
        tail = format!("{}\n[…]\n{tail}", lines[first].trim());
    }
    llmwatch_core::redact::redact_urls_in(&tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_leads_with_the_first_error_line() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("server.log");
        let mut text =
            String::from("INFO starting\nValueError: too little KV cache for max-model-len 2048\n");
        for i in 0..40 {
            text.push_str(&format!("  traceback line {i}\n"));
        }
        text.push_str("RuntimeError: Engine core initialization failed. See root cause above.\n");
        std::fs::write(&path, text).expect("log");
        let tail = log_tail(&path);
        assert!(
            tail.starts_with("ValueError: too little KV cache"),
            "{tail}"
        );
        assert!(tail.ends_with("See root cause above."), "{tail}");
        assert!(!tail.contains("traceback line 10\n"), "{tail}");
        assert_eq!(log_tail(&dir.path().join("missing.log")), "");
    }
}
