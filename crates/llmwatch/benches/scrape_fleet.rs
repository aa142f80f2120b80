//! CPU per scrape beside Prometheus (issue 14, "scale per instance").
//!
//! A fixed workload: `TARGETS` loopback ports (default 100) each serve the
//! real vLLM 0.32 capture as a server under steady load would write it
//! (`PAGE=load`, the default: `fixtures/vllm-live/metrics_vllm_load_after.txt`
//! with every series that moved since `…_load_before.txt` advancing by that
//! much each scrape), or unchanging (`PAGE=idle`:
//! `fixtures/vllm-live/metrics_vllm_idle.txt`).
//! The real `llmwatch serve` binary, then `prometheus` (2.42 on `PATH`),
//! scrape that fleet every second; after `WARMUP` seconds (default 15) the
//! process's CPU time (utime + stime of every thread, `/proc/PID/stat`) and
//! its own scrape counter are read, again after `SECONDS` more (default 60),
//! and the difference gives CPU per scrape. The fleet runs in this process,
//! so its CPU is in neither figure.
//!
//! Both keep every sample of the page: llmwatch every line in its raw
//! store, Prometheus every series in its TSDB head (the samples a scrape
//! appended are printed beside the scrape count). llmwatch's live diagnosis
//! and alert evaluation run once an hour here, so the figure is the scrape
//! path alone (HTTP, parse, normalise, encode, write), as Prometheus without
//! rules is.
//!
//! `LLMWATCH_BASELINE=/path/to/llmwatch` adds another llmwatch binary (an
//! older commit's) to the same run; `PEERS=llmwatch,prometheus` picks peers.
//!
//! `cargo bench -p llmwatch --bench scrape_fleet`
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

#[path = "common/fleet.rs"]
mod fleet;

use fleet::{
    cpu_seconds, env_number, free_port, read_text, serve_fleet, sum_of, LivePage, CAPTURE,
    LOAD_AFTER, LOAD_BEFORE,
};

/// One scraper under test and how to ask it how many scrapes it did.
struct Peer {
    label: String,
    kind: PeerKind,
}

enum PeerKind {
    Llmwatch(PathBuf),
    Prometheus,
}

/// A reading of a running peer: CPU seconds so far, its scrape count and
/// the samples it has stored.
#[derive(Debug, Clone, Copy)]
struct Reading {
    cpu_s: f64,
    system_s: f64,
    scrapes: f64,
    samples: f64,
}

struct Outcome {
    label: String,
    scrapes: f64,
    cpu_s: f64,
    system_s: f64,
    samples_per_scrape: f64,
}

impl Outcome {
    fn ms_per_scrape(&self) -> f64 {
        self.cpu_s * 1000.0 / self.scrapes
    }
}

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; a filter argument is not used here.
    let targets = env_number("TARGETS", 100)? as usize;
    let warmup = Duration::from_secs(env_number("WARMUP", 15)?);
    let measured = Duration::from_secs(env_number("SECONDS", 60)?);
    let page = match std::env::var("PAGE").as_deref() {
        Ok("idle") => LivePage::fixed(&read_text(CAPTURE)?),
        Ok("load") | Err(_) => {
            LivePage::under_load(&read_text(LOAD_BEFORE)?, &read_text(LOAD_AFTER)?)
        }
        Ok(other) => bail!("PAGE: expected idle or load, found {other:?}"),
    };
    let page_description = page.describe();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let fleet = runtime.block_on(serve_fleet(targets, page))?;

    let mut peers = Vec::new();
    let wanted = std::env::var("PEERS").unwrap_or_else(|_| "llmwatch,prometheus".into());
    if let Ok(baseline) = std::env::var("LLMWATCH_BASELINE") {
        peers.push(Peer {
            label: format!("llmwatch baseline ({baseline})"),
            kind: PeerKind::Llmwatch(PathBuf::from(baseline)),
        });
    }
    for name in wanted.split(',') {
        match name.trim() {
            "llmwatch" => peers.push(Peer {
                label: "llmwatch (this build)".into(),
                kind: PeerKind::Llmwatch(PathBuf::from(env!("CARGO_BIN_EXE_llmwatch"))),
            }),
            "prometheus" => peers.push(Peer {
                label: "prometheus".into(),
                kind: PeerKind::Prometheus,
            }),
            "" => {}
            other => bail!("PEERS: unknown peer {other:?} (llmwatch, prometheus)"),
        }
    }

    println!(
        "scrape_fleet: {targets} loopback targets serving {page_description}, \
         1 s interval, {}s warm-up, {}s measured",
        warmup.as_secs(),
        measured.as_secs()
    );
    let mut outcomes = Vec::new();
    for peer in &peers {
        let outcome = runtime
            .block_on(measure(peer, &fleet, warmup, measured))
            .with_context(|| format!("measuring {}", peer.label))?;
        println!(
            "  {:<45} {:>7.0} scrapes  {:>6.2} s CPU ({:>5.2} s in the kernel)  {:>6.3} ms/scrape  {:>5.0} samples/scrape",
            outcome.label,
            outcome.scrapes,
            outcome.cpu_s,
            outcome.system_s,
            outcome.ms_per_scrape(),
            outcome.samples_per_scrape
        );
        outcomes.push(outcome);
    }
    if let Some(prometheus) = outcomes.iter().find(|o| o.label == "prometheus") {
        for outcome in outcomes.iter().filter(|o| o.label != "prometheus") {
            println!(
                "  {} / prometheus: {:.2}× the CPU per scrape",
                outcome.label,
                outcome.ms_per_scrape() / prometheus.ms_per_scrape()
            );
        }
    }
    Ok(())
}

/// Starts `peer` on the fleet, reads it after the warm-up and after the
/// measured span, and stops it.
async fn measure(
    peer: &Peer,
    fleet: &[SocketAddr],
    warmup: Duration,
    measured: Duration,
) -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut child = spawn_peer(&peer.kind, fleet, dir.path(), port)?;
    let result = async {
        let client = reqwest::Client::new();
        let metrics = format!("http://127.0.0.1:{port}/metrics");
        let ready_by = Instant::now() + Duration::from_secs(30);
        while client.get(&metrics).send().await.is_err() {
            if Instant::now() > ready_by {
                bail!("{} did not answer {metrics} within 30 s", peer.label);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(warmup).await;
        let before = read_peer(&peer.kind, &client, &metrics, child.id()).await?;
        tokio::time::sleep(measured).await;
        let after = read_peer(&peer.kind, &client, &metrics, child.id()).await?;
        let scrapes = after.scrapes - before.scrapes;
        if scrapes <= 0.0 {
            bail!("{} did no scrapes in {measured:?}", peer.label);
        }
        Ok(Outcome {
            label: peer.label.clone(),
            scrapes,
            cpu_s: after.cpu_s - before.cpu_s,
            system_s: after.system_s - before.system_s,
            samples_per_scrape: (after.samples - before.samples) / scrapes,
        })
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn spawn_peer(kind: &PeerKind, fleet: &[SocketAddr], dir: &Path, port: u16) -> Result<Child> {
    match kind {
        PeerKind::Llmwatch(binary) => {
            let config = fleet::llmwatch_fleet_config(port, dir, fleet);
            let path = dir.join("llmwatch.toml");
            std::fs::File::create(&path)?.write_all(config.as_bytes())?;
            Ok(Command::new(binary)
                .arg("serve")
                .arg("--config")
                .arg(&path)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?)
        }
        PeerKind::Prometheus => {
            let targets: Vec<String> = fleet.iter().map(|a| format!("'{a}'")).collect();
            let config = format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            );
            let path = dir.join("prometheus.yml");
            std::fs::File::create(&path)?.write_all(config.as_bytes())?;
            Ok(Command::new("prometheus")
                .arg(format!("--config.file={}", path.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("tsdb").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting prometheus (is it on PATH?)")?)
        }
    }
}

async fn read_peer(
    kind: &PeerKind,
    client: &reqwest::Client,
    metrics: &str,
    pid: u32,
) -> Result<Reading> {
    let (user_s, system_s) = cpu_seconds(pid)?;
    let page = client.get(metrics).send().await?.text().await?;
    let (scrapes, samples) = match kind {
        PeerKind::Llmwatch(_) => (
            sum_of(&page, "llmwatch_scrapes_total"),
            sum_of(&page, "llmwatch_samples_written_total"),
        ),
        PeerKind::Prometheus => (
            sum_of(&page, "prometheus_target_interval_length_seconds_count"),
            sum_of(&page, "prometheus_tsdb_head_samples_appended_total"),
        ),
    };
    Ok(Reading {
        cpu_s: user_s + system_s,
        system_s,
        scrapes,
        samples,
    })
}
