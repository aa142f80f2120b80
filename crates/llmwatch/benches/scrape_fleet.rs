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

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::http::header;
use axum::routing::get;
use axum::Router;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/vllm-live/metrics_vllm_idle.txt"
);
/// The same server before and after a burst of load: the series whose
/// values differ advance by that difference every scrape (`PAGE=load`).
const LOAD_BEFORE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/vllm-live/metrics_vllm_load_before.txt"
);
const LOAD_AFTER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/vllm-live/metrics_vllm_load_after.txt"
);

/// Kernel clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

fn env_number(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .with_context(|| format!("{name}: expected a whole number, found {value:?}")),
        Err(_) => Ok(default),
    }
}

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

fn read_text(path: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
}

/// One line of a served page.
enum PageLine {
    Fixed(String),
    /// `series value`: the value is `base + step × n` at the n-th scrape.
    Advancing {
        series: String,
        base: f64,
        step: f64,
    },
}

/// The page a fleet target serves: fixed, or advancing as a server under
/// steady load would (its counters and histogram buckets grow every scrape).
struct LivePage {
    lines: Vec<PageLine>,
}

impl LivePage {
    fn fixed(text: &str) -> LivePage {
        LivePage {
            lines: text
                .lines()
                .map(|line| PageLine::Fixed(line.into()))
                .collect(),
        }
    }

    /// `after`'s lines; a series whose value differs from `before`'s
    /// advances by that difference per scrape (new series stay as written).
    fn under_load(before: &str, after: &str) -> LivePage {
        let split = |line: &str| -> Option<(String, f64)> {
            if line.starts_with('#') {
                return None;
            }
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        };
        let before: std::collections::HashMap<String, f64> =
            before.lines().filter_map(split).collect();
        let lines = after
            .lines()
            .map(|line| match split(line) {
                Some((series, value)) => match before.get(&series) {
                    Some(&base) if base != value && value.is_finite() && base.is_finite() => {
                        PageLine::Advancing {
                            series,
                            base,
                            step: value - base,
                        }
                    }
                    _ => PageLine::Fixed(line.into()),
                },
                None => PageLine::Fixed(line.into()),
            })
            .collect();
        LivePage { lines }
    }

    fn describe(&self) -> String {
        let advancing = self
            .lines
            .iter()
            .filter(|line| matches!(line, PageLine::Advancing { .. }))
            .count();
        let bytes = self.render(1).len();
        if advancing == 0 {
            format!("the vLLM 0.32 capture ({bytes} bytes, unchanging)")
        } else {
            format!("the vLLM 0.32 capture under load ({bytes} bytes, {advancing} series advancing every scrape)")
        }
    }

    fn render(&self, scrape: u64) -> Vec<u8> {
        let mut out = String::with_capacity(64 * 1024);
        for line in &self.lines {
            match line {
                PageLine::Fixed(text) => out.push_str(text),
                PageLine::Advancing { series, base, step } => {
                    out.push_str(series);
                    out.push(' ');
                    out.push_str(&(base + step * scrape as f64).to_string());
                }
            }
            out.push('\n');
        }
        out.into_bytes()
    }
}

/// Binds `count` loopback ports serving `page` at `/metrics`, each with its
/// own scrape count.
async fn serve_fleet(count: usize, page: LivePage) -> Result<Vec<SocketAddr>> {
    let page = std::sync::Arc::new(page);
    let mut addrs = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(listener.local_addr()?);
        let page = page.clone();
        let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let body = page.render(n);
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body) }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    Ok(addrs)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
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
            let mut config = format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\ndatabase = {:?}\n\
                 live_interval = \"1h\"\nalert_interval = \"1h\"\n",
                dir.join("llmwatch.db").display().to_string()
            );
            for (i, addr) in fleet.iter().enumerate() {
                config.push_str(&format!(
                    "[[targets]]\nname = \"t{i:04}\"\nurl = \"http://{addr}\"\n\
                     scrape_interval = \"1s\"\n"
                ));
            }
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

/// utime and stime of every thread of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("/proc/PID/stat without a command name")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks = |index: usize| -> Result<f64> {
        fields
            .get(index)
            .context("/proc/PID/stat too short")?
            .parse::<f64>()
            .context("/proc/PID/stat: a field that is not a number")
    };
    Ok((
        ticks(11)? / CLOCK_TICKS_PER_SECOND,
        ticks(12)? / CLOCK_TICKS_PER_SECOND,
    ))
}

/// The sum of every sample of the family `name` on an exposition page.
fn sum_of(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
