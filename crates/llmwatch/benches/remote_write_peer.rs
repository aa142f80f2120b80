//! remote_write beside Prometheus' own (issue 14, part 1: "remote_write
//! throughput (samples/s on one core) … beside Prometheus on the same data
//! and machine"). A fixed workload, three parts (`PARTS`, default all):
//!
//! - `drain`: a backlog of `TARGETS` (100) × `SCRAPES` (120) scrapes of the
//!   vLLM 0.32 capture under load (`fixtures/vllm-live/metrics_vllm_load_after.txt`,
//!   the series that moved since `…_load_before.txt` advancing every scrape,
//!   as `scrape_fleet` serves it), parsed and written through the store
//!   before the clock starts, one scrape a second per target; then
//!   llmwatch's remote-write sender (`run_remote_write`, the daemon's task,
//!   defaults: 2 000 samples a request) drains it into a real Prometheus
//!   (`--web.enable-remote-write-receiver`, loopback) as fast as it takes
//!   them. Wall time from start to the cursor's last scrape gives samples/s;
//!   this process's CPU time (utime + stime of every thread, the store's
//!   SQLite thread included) over the same span gives CPU seconds per
//!   million samples. Nothing else runs in this process meanwhile.
//! - `prometheus`: Prometheus 2.42 scrapes `TARGETS` loopback ports serving
//!   the same page every 1 s, once without `remote_write` and once with it
//!   (to a second Prometheus' receiver, `max_samples_per_send: 2000` as
//!   llmwatch's default), `REPEATS` (2) times alternating; after `WARMUP`
//!   (10 s) its CPU time and counters are read, again `SECONDS` (30) later.
//!   Its remote-write cost is the CPU of the "on" run minus that of the
//!   "off" run (scaled to the same scrape count), per sample it sent
//!   (`prometheus_remote_storage_samples_total`).
//! - `llmwatch`: the same on/off pair for the real `llmwatch serve` binary
//!   (`[[remote_write]]` to that receiver, `llmwatch_remote_write_samples_sent_total`),
//!   so the two live costs compare like for like.
//!
//! The fleet is served from this process during the live parts, so its CPU
//! is in neither peer's figure (and no drain runs then).
//!
//! `cargo bench --bench remote_write_peer`
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

#[path = "common/fleet.rs"]
mod fleet;
#[path = "../tests/app/common/prom.rs"]
mod prom;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fleet::{cpu_seconds, env_number, read_text, serve_fleet, sum_of, LivePage};
use llmwatch_core::exposition::{detect_format, parse_lenient};
use llmwatch_engine::sinks::remote_write::{run_remote_write, RemoteWriteCounters, RemoteWriteJob};
use llmwatch_store::{ExportCursor, RawSample, ScrapeRecord, Store, TargetKind};

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

fn process_cpu(pid: u32) -> Result<f64> {
    let (user, system) = cpu_seconds(pid)?;
    Ok(user + system)
}

/// A Prometheus on loopback port 0 with the remote-write receiver on and
/// nothing to scrape, ready.
async fn receiver(dir: &Path) -> Result<(Killed, SocketAddr)> {
    std::fs::create_dir_all(dir)?;
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
    )?;
    let mut command = Command::new("prometheus");
    command
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg("--web.enable-remote-write-receiver");
    let (child, addr) = prom::spawn_prometheus(command, "127.0.0.1:0");
    let child = Killed(child);
    wait_ready(&format!("http://{addr}/-/ready")).await?;
    Ok((child, addr))
}

async fn wait_ready(url: &str) -> Result<()> {
    let client = reqwest::Client::new();
    let by = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(answer) = client.get(url).send().await {
            if answer.status().is_success() {
                return Ok(());
            }
        }
        if Instant::now() > by {
            bail!("{url} not ready within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn main() -> Result<()> {
    let targets = env_number("TARGETS", 100)? as usize;
    let scrapes = env_number("SCRAPES", 120)? as usize;
    let warmup = Duration::from_secs(env_number("WARMUP", 10)?);
    let measured = Duration::from_secs(env_number("SECONDS", 30)?);
    let repeats = env_number("REPEATS", 2)? as usize;
    let parts = std::env::var("PARTS").unwrap_or_else(|_| "drain,prometheus,llmwatch".into());
    let parts: Vec<&str> = parts.split(',').map(str::trim).collect();
    let page = || -> Result<LivePage> {
        Ok(LivePage::under_load(
            &read_text(fleet::LOAD_BEFORE)?,
            &read_text(fleet::LOAD_AFTER)?,
        ))
    };
    println!(
        "remote_write_peer: {targets} targets, {}; \
         load average {}",
        page()?.describe(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut drain_cpu_per_million = None;
    if parts.contains(&"drain") {
        drain_cpu_per_million = Some(runtime.block_on(drain(targets, scrapes, page()?))?);
    }
    let mut live = Vec::new();
    let wants_live = parts.contains(&"prometheus") || parts.contains(&"llmwatch");
    if wants_live {
        let fleet = runtime.block_on(serve_fleet(targets, page()?))?;
        for peer in ["prometheus", "llmwatch"] {
            if parts.contains(&peer) {
                let cost = runtime.block_on(on_off(peer, &fleet, warmup, measured, repeats))?;
                live.push((peer, cost));
            }
        }
    }
    let prometheus = live
        .iter()
        .find(|(p, _)| *p == "prometheus")
        .map(|(_, c)| *c);
    let llmwatch = live.iter().find(|(p, _)| *p == "llmwatch").map(|(_, c)| *c);
    if let Some(prometheus) = prometheus {
        if let Some(drain) = drain_cpu_per_million {
            println!(
                "  llmwatch draining / prometheus streaming: {:.2}× the CPU per sample sent",
                drain / prometheus
            );
        }
        if let Some(llmwatch) = llmwatch {
            println!(
                "  llmwatch streaming / prometheus streaming: {:.2}× the CPU per sample sent",
                llmwatch / prometheus
            );
        }
    }
    println!(
        "  load average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}

/// Part `drain`; returns the sender's CPU seconds per million samples.
async fn drain(targets: usize, scrapes: usize, page: LivePage) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("llmwatch.db")).await?;
    let mut ids = Vec::with_capacity(targets);
    for t in 0..targets {
        let url = format!("http://127.0.0.1:{}", 20_000 + t);
        ids.push(
            store
                .upsert_target(&format!("t{t:04}"), TargetKind::Engine, &url, 0)
                .await?,
        );
    }
    // One scrape a second per target, the targets' phases spread over the
    // second, the newest 10 s before now.
    let newest = llmwatch_engine::now_ms() - 10_000;
    let first = newest - (scrapes as i64 - 1) * 1_000 - 999;
    let prepared = Instant::now();
    let mut previous: Vec<Vec<RawSample>> = vec![Vec::new(); targets];
    let mut stored = 0u64;
    let mut last = ExportCursor::default();
    for round in 0..scrapes {
        let body = page.render(round as u64 + 1);
        let (parsed, _) = parse_lenient(&body, detect_format(None, &body));
        let mut batch = Vec::with_capacity(targets);
        for (t, &id) in ids.iter().enumerate() {
            let raw = RawSample::all_of_like(&parsed, &previous[t]);
            previous[t] = raw.clone();
            let ts_ms = first + round as i64 * 1_000 + (t as i64 * 1_000) / targets as i64;
            last = last.max(ExportCursor {
                ts_ms,
                target_id: id,
            });
            batch.push(ScrapeRecord {
                target_id: id,
                ts_ms,
                up: true,
                duration_ms: 2.0,
                body_bytes: body.len() as u64,
                error: None,
                engine: Some("vllm".into()),
                samples: Vec::new(),
                raw,
            });
        }
        stored += store.write_scrapes(&batch).await?;
    }
    println!(
        "  drain: backlog of {targets} targets × {scrapes} scrapes, {stored} stored samples \
         (written in {:.1?}, before the clock starts)",
        prepared.elapsed()
    );

    let (receiver, addr) = receiver(&dir.path().join("receiver")).await?;
    let config = llmwatch_config::Config::parse(
        &format!(
            "[[remote_write]]\nname = \"bench\"\nurl = \"http://{addr}/api/v1/write\"\n\
             [remote_write.queue]\nbackfill = \"1h\"\n"
        ),
        Path::new("bench.toml"),
    )?;
    let job = RemoteWriteJob {
        config: config.remote_write[0].clone(),
        auth: None,
        settle: Duration::ZERO,
        ttft_objectives: Default::default(),
        started_ms: llmwatch_engine::now_ms(),
    };
    let counters = Arc::new(RemoteWriteCounters {
        name: "bench".into(),
        ..RemoteWriteCounters::default()
    });
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let self_pid = std::process::id();
    let cpu_before = process_cpu(self_pid)?;
    let receiver_before = process_cpu(receiver.pid())?;
    let started = Instant::now();
    let task = tokio::spawn(run_remote_write(
        store.clone(),
        job,
        counters.clone(),
        shutdown,
    ));
    loop {
        if counters.cursor_ms.load(Ordering::Relaxed) >= last.ts_ms {
            let cursor = store.remote_write_cursor("bench").await?;
            if cursor.is_some_and(|c| c.scrapes >= last) {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("the backlog was not drained in 600 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = process_cpu(self_pid)? - cpu_before;
    let receiver_cpu = process_cpu(receiver.pid())? - receiver_before;
    let _ = stop.send(true);
    let _ = task.await;
    let sent = counters.samples_sent.load(Ordering::Relaxed) as f64;
    let dropped = counters.samples_dropped.load(Ordering::Relaxed);
    let failed = counters.samples_failed.load(Ordering::Relaxed);
    let requests = counters.requests.load(Ordering::Relaxed);
    let per_million = cpu / sent * 1e6;
    println!(
        "  drain: {sent:.0} samples sent in {requests} requests ({dropped} dropped, {failed} failed and retried) \
         in {wall:.2} s = {:.0} samples/s; sender {cpu:.2} s CPU = {per_million:.2} s per million samples \
         ({:.0} samples per CPU-second); the receiving Prometheus {receiver_cpu:.2} s CPU",
        sent / wall,
        sent / cpu
    );
    if dropped > 0 {
        bail!("the receiver refused {dropped} samples");
    }
    Ok(per_million)
}

/// One measured span of a live peer.
#[derive(Debug, Clone, Copy)]
struct Span {
    cpu_s: f64,
    scrapes: f64,
    sent: f64,
}

/// Part `prometheus` or `llmwatch`: CPU with remote_write off and on,
/// `repeats` times alternating; returns the remote-write CPU seconds per
/// million samples sent (the on-off difference at equal scrape counts).
async fn on_off(
    peer: &str,
    fleet: &[SocketAddr],
    warmup: Duration,
    measured: Duration,
    repeats: usize,
) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let (receiver, addr) = receiver(&dir.path().join("receiver")).await?;
    let mut off = Vec::new();
    let mut on = Vec::new();
    for repeat in 0..repeats {
        for remote in [false, true] {
            let run_dir = dir.path().join(format!("{peer}-{repeat}-{remote}"));
            std::fs::create_dir_all(&run_dir)?;
            let receiver_before = process_cpu(receiver.pid())?;
            let span = live_span(
                peer,
                fleet,
                &run_dir,
                remote.then_some(addr),
                warmup,
                measured,
            )
            .await
            .with_context(|| format!("{peer}, remote_write {remote}"))?;
            let receiver_cpu = process_cpu(receiver.pid())? - receiver_before;
            println!(
                "  {peer:<10} remote_write {:<3}: {:>6.0} scrapes, {:>6.2} s CPU ({:.3} ms/scrape), {:>8.0} samples sent; \
                 receiver {receiver_cpu:.2} s CPU",
                if remote { "on" } else { "off" },
                span.scrapes,
                span.cpu_s,
                span.cpu_s * 1000.0 / span.scrapes,
                span.sent
            );
            if remote {
                on.push(span);
            } else {
                off.push(span);
            }
        }
    }
    let total = |spans: &[Span]| {
        spans.iter().fold((0.0, 0.0, 0.0), |acc, s| {
            (acc.0 + s.cpu_s, acc.1 + s.scrapes, acc.2 + s.sent)
        })
    };
    let (off_cpu, off_scrapes, _) = total(&off);
    let (on_cpu, on_scrapes, on_sent) = total(&on);
    if on_sent <= 0.0 || off_scrapes <= 0.0 {
        bail!("{peer}: nothing sent with remote_write on, or no scrapes off");
    }
    let extra = on_cpu - off_cpu * on_scrapes / off_scrapes;
    let per_million = extra / on_sent * 1e6;
    println!(
        "  {peer:<10} remote_write cost: {extra:.2} s CPU over {on_sent:.0} samples = {per_million:.2} s per million \
         samples ({:.0} samples per CPU-second); {:.0} samples/s sent",
        on_sent / extra,
        on_sent / (measured.as_secs_f64() * on.len() as f64)
    );
    Ok(per_million)
}

/// Starts `peer` on `fleet` (remote-writing to `remote` if given), reads it
/// after `warmup` and after `measured` more, and stops it.
async fn live_span(
    peer: &str,
    fleet: &[SocketAddr],
    dir: &Path,
    remote: Option<SocketAddr>,
    warmup: Duration,
    measured: Duration,
) -> Result<Span> {
    let (child, metrics) = match peer {
        "prometheus" => {
            let targets: Vec<String> = fleet.iter().map(|a| format!("'{a}'")).collect();
            let mut config = format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            );
            if let Some(addr) = remote {
                config.push_str(&format!(
                    "remote_write:\n  - url: http://{addr}/api/v1/write\n    queue_config:\n      max_samples_per_send: 2000\n"
                ));
            }
            let path = dir.join("prometheus.yml");
            std::fs::write(&path, config)?;
            let mut command = Command::new("prometheus");
            command
                .arg(format!("--config.file={}", path.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("tsdb").display()
                ));
            let (child, addr) = prom::spawn_prometheus(command, "127.0.0.1:0");
            (Killed(child), format!("http://{addr}/metrics"))
        }
        "llmwatch" => {
            let port = fleet::free_port()?;
            let mut config = fleet::llmwatch_fleet_config(port, dir, fleet);
            if let Some(addr) = remote {
                config.push_str(&format!(
                    "[[remote_write]]\nname = \"peer\"\nurl = \"http://{addr}/api/v1/write\"\n"
                ));
            }
            let path = dir.join("llmwatch.toml");
            std::fs::write(&path, config)?;
            let child = Command::new(env!("CARGO_BIN_EXE_llmwatch"))
                .arg("serve")
                .arg("--config")
                .arg(&path)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting llmwatch")?;
            (Killed(child), format!("http://127.0.0.1:{port}/metrics"))
        }
        other => bail!("unknown peer {other:?}"),
    };
    // No pooled connections: a kept-alive one the peer closed while idle
    // fails the next read ("connection closed before message completed").
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let ready_by = Instant::now() + Duration::from_secs(30);
    while client.get(&metrics).send().await.is_err() {
        if Instant::now() > ready_by {
            bail!("{peer} did not answer {metrics} within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(warmup).await;
    let read = |page: &str| -> (f64, f64) {
        if peer == "prometheus" {
            (
                sum_of(page, "prometheus_target_interval_length_seconds_count"),
                sum_of(page, "prometheus_remote_storage_samples_total"),
            )
        } else {
            (
                sum_of(page, "llmwatch_scrapes_total"),
                sum_of(page, "llmwatch_remote_write_samples_sent_total"),
            )
        }
    };
    let cpu_before = process_cpu(child.pid())?;
    let (scrapes_before, sent_before) = read(&client.get(&metrics).send().await?.text().await?);
    tokio::time::sleep(measured).await;
    let cpu_after = process_cpu(child.pid())?;
    let (scrapes_after, sent_after) = read(&client.get(&metrics).send().await?.text().await?);
    drop(child);
    Ok(Span {
        cpu_s: cpu_after - cpu_before,
        scrapes: scrapes_after - scrapes_before,
        sent: sent_after - sent_before,
    })
}
