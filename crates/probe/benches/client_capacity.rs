//! How much can one client core measure, and how accurately?
//!
//! A loopback SSE server (raw HTTP/1.1 over tokio TCP, its own thread and
//! runtime, TCP_NODELAY) streams vLLM-shaped chat chunks; the client is a
//! [`MeasuringThread`] — one current-thread runtime on a thread of its own,
//! exactly as `llmwatch bench` and sweeps drive it — either sleeping when
//! idle or busy-polling (`spin`). The server stamps each event right after
//! its `write` returns; the client's stamp is its parse instant
//! (`sent_at + at_ns`); both are the same process's monotonic clock, so the
//! difference is the client's timing error (plus loopback and the server's
//! own scheduling, so it is an upper bound).
//!
//! Phase A (capacity): requests of 64 chat chunks (plus the usage chunk)
//! with zero delay between them — requests/s and events/s the client
//! sustains, its CPU per event (sleeping threads), and whether its
//! self-check called it the bottleneck.
//! Phase B (accuracy under load): paced streams (one event per stream every
//! 50 ms, phases spread) at rising concurrency, sleeping and spinning,
//! reporting the timing error p50/p99/max and the client self-check.
//!
//! Run: `cargo bench -p llmwatch-probe --bench client_capacity`
//! (`-- --quick` for a short pass; `-- --profile` runs one fixed workload
//! for callgrind). Every phase runs on a [`MeasuringPool`] of 1 worker and,
//! where the machine spares more cores, of N (`BENCH_WORKERS`, default
//! [`default_workers`]). Knobs: `BENCH_STREAMS=100,1000` (phase
//! B steps), `BENCH_SKIP_A=1`, `BENCH_MODES=spin` (or `sleep`, `default`:
//! what `--spin auto` resolves to here — adaptive below 4 cores),
//! `BENCH_SERVER_THREADS` (default: half the cores),
//! `BENCH_DEBUG=1` (error per event index). Each section prints the box's
//! load and CPU pressure, and each step the hypervisor's steal (the self-check's `host_steal_pct`): on a shared
//! machine the timing error measures the neighbours as much as the client.
//!
//! Columns: `client us/ev` is the measuring thread's CPU time per measured
//! event (sleeping; including its share of sending the requests) or its
//! time not spent spinning (spinning); `sched p99` the self-check's
//! scheduler lag; `steal %` the share of all CPU time the hypervisor gave
//! elsewhere during the step.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llmwatch_probe::{
    default_workers, Api, ClientConfig, MeasuringPool, ProbeRequest, RunConfig, RunOptions,
    RunResult, Spin, SpinMode,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Stamps = Arc<Mutex<HashMap<u64, Vec<Instant>>>>;

const CHUNK: &str = r#"{"id":"chatcmpl-898ca59d8a8074d8","object":"chat.completion.chunk","created":1796204553,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":" section"},"logprobs":null,"finish_reason":null,"token_ids":null}]}"#;
const FINAL: &str = r#"{"id":"chatcmpl-898ca59d8a8074d8","object":"chat.completion.chunk","created":1796204553,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":22,"total_tokens":38,"completion_tokens":16}}"#;

/// Encodes `data` as one HTTP chunk holding one SSE event.
fn http_chunk(data: &str) -> Vec<u8> {
    let ev = format!("data: {data}\n\n");
    let mut v = format!("{:x}\r\n", ev.len()).into_bytes();
    v.extend_from_slice(ev.as_bytes());
    v.extend_from_slice(b"\r\n");
    v
}

/// Reads one request (head + Content-Length body); `None` at EOF.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let total = end + 4 + len;
            while buf.len() < total {
                let mut tmp = [0u8; 8192];
                let n = sock.read(&mut tmp).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..total]).into_owned();
            buf.drain(..total);
            return Some(body);
        }
        let mut tmp = [0u8; 8192];
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// The prompt is `id events interval_us phase_us`; any other prompt (a peer
/// tool's random text) gets 64 zero-delay events, unstamped.
async fn serve_conn(mut sock: TcpStream, stamps: Stamps) {
    let _ = sock.set_nodelay(true);
    let chunk = http_chunk(CHUNK);
    let fin = http_chunk(FINAL);
    let done = http_chunk("[DONE]");
    let mut buf = Vec::new();
    while let Some(body) = read_request(&mut sock, &mut buf).await {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let prompt = v["messages"][0]["content"].as_str().unwrap_or_default();
        let p: Vec<u64> = prompt.split(' ').filter_map(|x| x.parse().ok()).collect();
        let (id, n, interval, phase) = match p[..] {
            [id, n, interval, phase] => (Some(id), n, interval, phase),
            _ => (None, 64, 0, 0),
        };
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        if sock.write_all(head).await.is_err() {
            return;
        }
        let t0 = Instant::now() + Duration::from_micros(phase);
        let mut mine = Vec::with_capacity(n as usize);
        for k in 0..n {
            if interval > 0 {
                tokio::time::sleep_until((t0 + Duration::from_micros(interval * k)).into()).await;
            }
            if sock.write_all(&chunk).await.is_err() {
                return;
            }
            mine.push(Instant::now());
        }
        let mut tail = fin.clone();
        tail.extend_from_slice(&done);
        tail.extend_from_slice(b"0\r\n\r\n");
        if sock.write_all(&tail).await.is_err() {
            return;
        }
        if let Some(id) = id {
            stamps.lock().unwrap().insert(id, mine);
        }
    }
}

fn spawn_server(stamps: Stamps) -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // One server thread per two cores (`BENCH_SERVER_THREADS`): on a
        // big machine one thread would bound N client workers.
        let threads = std::env::var("BENCH_SERVER_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1)
            });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            loop {
                if let Ok((s, _)) = l.accept().await {
                    tokio::spawn(serve_conn(s, stamps.clone()));
                }
            }
        });
    });
    rx.recv().unwrap()
}

struct Step {
    /// CPU seconds of the measuring thread during the step (busy seconds
    /// when it spins).
    client_cpu_s: f64,
    result: RunResult,
    wall: f64,
    events: u64,
    errors_us: Vec<f64>,
    /// Hypervisor steal over the step, % of all CPU time.
    steal_pct: f64,
}

async fn step(
    pool: &MeasuringPool,
    stamps: &Stamps,
    streams: u32,
    requests: u64,
    events: u64,
    interval_us: u64,
) -> Step {
    stamps.lock().unwrap().clear();
    // Warm-up: one 1-event request per stream, so the measured streams run
    // on pooled connections (as a benchmark's steady state does).
    let mut cfg = RunConfig::closed(streams, requests);
    cfg.warmup_requests = u64::from(streams);
    let warm = cfg.warmup_requests;
    let started = Instant::now();
    let result = pool
        .run(cfg, RunOptions::default(), move |i| {
            let (events, interval_us) = if i < warm {
                (1, 0)
            } else {
                (events, interval_us)
            };
            // Paced streams start after a 300 ms settle (all requests sent,
            // connections up), then spread their phases over one interval.
            let phase = if interval_us > 0 {
                300_000 + (i % u64::from(streams)) * interval_us / u64::from(streams)
            } else {
                0
            };
            let mut r = ProbeRequest::fixed(
                Api::Chat,
                "m",
                format!("{i} {events} {interval_us} {phase}"),
                events as u32,
            );
            r.continuous_usage_stats = false;
            r
        })
        .await
        .expect("valid config");
    let steal_pct = result.self_check.host_steal_pct.unwrap_or(f64::NAN);
    // Every worker's CPU (each checked on its own thread).
    let client_cpu_s = result
        .self_check
        .workers
        .iter()
        .map(|w| w.cpu_cores.unwrap_or(f64::NAN))
        .sum::<f64>()
        * result.duration_s;
    let wall = started
        .elapsed()
        .as_secs_f64()
        .min(result.duration_s.max(1e-9));
    let stamps = stamps.lock().unwrap();
    let mut errors_us = Vec::new();
    let mut n = 0;
    for rec in &result.records {
        let (Some(seq), Some(sent)) = (rec.seq, rec.sent_at) else {
            continue;
        };
        let Some(server) = stamps.get(&seq) else {
            continue;
        };
        n += rec.events.len() as u64;
        for (ev, s) in rec.events.iter().zip(server) {
            let client = sent + Duration::from_nanos(ev.at_ns);
            let e = if client >= *s {
                (client - *s).as_secs_f64()
            } else {
                -(*s - client).as_secs_f64()
            };
            errors_us.push(e * 1e6);
        }
    }
    if std::env::var("BENCH_DEBUG").is_ok() && interval_us > 0 {
        let mut by_k: Vec<Vec<f64>> = vec![Vec::new(); events as usize];
        for rec in &result.records {
            let (Some(seq), Some(sent)) = (rec.seq, rec.sent_at) else {
                continue;
            };
            let Some(server) = stamps.get(&seq) else {
                continue;
            };
            for (k, (ev, s)) in rec.events.iter().zip(server).enumerate() {
                let client = sent + Duration::from_nanos(ev.at_ns);
                by_k[k].push(client.saturating_duration_since(*s).as_secs_f64() * 1e6);
            }
        }
        for (k, v) in by_k.iter_mut().enumerate() {
            v.sort_by(f64::total_cmp);
            eprintln!(
                "event {k}: p50 {:.0} p99 {:.0} max {:.0}",
                pct(v, 0.5),
                pct(v, 0.99),
                v.last().unwrap_or(&0.0)
            );
        }
    }
    errors_us.sort_by(f64::total_cmp);
    Step {
        client_cpu_s,
        result,
        wall,
        events: n,
        errors_us,
        steal_pct,
    }
}

fn pct(v: &[f64], q: f64) -> f64 {
    llmwatch_probe::percentile(v, q).unwrap_or(f64::NAN)
}

/// Load average and CPU pressure (PSI) of the box: on a shared machine the
/// numbers below measure the neighbours as much as the client.
fn box_state() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let psi = std::fs::read_to_string("/proc/pressure/cpu").unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!(
        "box: {cores} cores, loadavg {}, cpu pressure {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        psi.lines().next().unwrap_or("n/a")
    )
}

/// `vllm bench serve`, the field's reference client, run against the same
/// loopback server where it is installed (`BENCH_VLLM`; it needs a local
/// tokenizer to make its random prompts, `BENCH_VLLM_TOKENIZER`).
struct VllmBench {
    vllm: String,
    tokenizer: String,
}

impl VllmBench {
    fn from_env() -> Option<VllmBench> {
        Some(VllmBench {
            vllm: std::env::var("BENCH_VLLM").ok()?,
            tokenizer: std::env::var("BENCH_VLLM_TOKENIZER").ok()?,
        })
    }

    /// Requests per second it reports at `streams` concurrent streams.
    fn run(&self, addr: std::net::SocketAddr, streams: u32, requests: u64) -> Result<f64, String> {
        let (streams, requests) = (streams.to_string(), requests.to_string());
        let base_url = format!("http://{addr}");
        let mut args = vec![
            "-c",
            "0",
            &self.vllm,
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--base-url",
            &base_url,
            "--model",
            "m",
            "--tokenizer",
            &self.tokenizer,
            "--dataset-name",
            "random",
            "--random-input-len",
            "32",
            "--random-output-len",
            "64",
            "--ignore-eos",
            "--num-prompts",
            &requests,
            "--max-concurrency",
            &streams,
            "--request-rate",
            "inf",
        ];
        // Pinned to one core like the one-worker client above, where taskset exists.
        let pinned = std::process::Command::new("taskset")
            .arg("-V")
            .output()
            .is_ok();
        if !pinned {
            args.drain(..3); // `-c 0 vllm`: vllm is then the program itself
        }
        let program = if pinned { "taskset" } else { &self.vllm };
        let output = std::process::Command::new(program)
            .args(&args)
            .output()
            .map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("Request throughput (req/s):"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                let stderr = String::from_utf8_lossy(&output.stderr);
                format!(
                    "no throughput line; stderr tail: {}",
                    &stderr[stderr.len().saturating_sub(300)..]
                )
            })
    }
}

fn raise_fd_limit() {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let profile = std::env::args().any(|a| a == "--profile");
    raise_fd_limit();
    let stamps: Stamps = Arc::default();
    let addr = spawn_server(stamps.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut cfg = ClientConfig::new(format!("http://{addr}"));
        cfg.timeout = Duration::from_secs(60);
        // Each pool's threads get clients of their own: connections belong
        // to the runtime that opened them.
        let n = std::env::var("BENCH_WORKERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(default_workers);
        let pool = |n, mode| MeasuringPool::start_mode(n, mode, &cfg).unwrap();
        let sleeping = pool(1, SpinMode::Off);
        let spinning = pool(1, SpinMode::On);
        // What `--spin auto` gives on this machine (adaptive below 4 cores).
        let default_mode = Spin::Auto.mode();
        let defaulted = pool(1, default_mode);
        let wide = (n > 1).then(|| (pool(n, SpinMode::Off), pool(n, SpinMode::On)));
        if profile {
            // A fixed workload for `valgrind --tool=callgrind
            // --separate-threads=yes`: instructions per event on the
            // measuring thread are repeatable where wall time is not.
            let s = step(&sleeping, &stamps, 16, 400, 64, 0).await;
            println!("profile: {} events, {} failed", s.events, s.result.failed);
            return;
        }
        println!("client: MeasuringPool of 1 and {n} workers (one current_thread runtime per thread); server: own thread, 1 worker");
        println!("{}", box_state());
        println!("\nPhase A: zero-delay streams, 64 chat chunks + usage each: what the client sustains (sleeping threads)");
        println!(
            "{:>8} {:>7} {:>9} {:>8} {:>10} {:>10} {:>12} {:>12} {:>7} {:>6} {:>7}",
            "streams", "workers", "requests", "wall s", "req/s", "events/s", "client cpu s", "client us/ev", "steal %", "bound", "failed"
        );
        let sizes: &[u32] = if std::env::var("BENCH_SKIP_A").is_ok() {
            &[]
        } else if quick {
            &[16, 256]
        } else {
            &[16, 64, 256, 1000]
        };
        let mut a_pools: Vec<(usize, &MeasuringPool)> = vec![(1, &sleeping)];
        if let Some((w, _)) = &wide {
            a_pools.push((n, w));
        }
        for &c in sizes {
            for &(workers, pool) in &a_pools {
                let requests = if quick { 1_000 } else { 4_000 }.max(u64::from(c) * 2);
                let s = step(pool, &stamps, c, requests, 64, 0).await;
                println!(
                    "{:>8} {:>7} {:>9} {:>8.2} {:>10.0} {:>10.0} {:>12.2} {:>12.2} {:>7.1} {:>6} {:>7}",
                    c,
                    workers,
                    s.result.requests,
                    s.wall,
                    s.result.requests as f64 / s.wall,
                    s.events as f64 / s.wall,
                    s.client_cpu_s,
                    s.client_cpu_s * 1e6 / s.events.max(1) as f64,
                    s.steal_pct,
                    if s.result.self_check.client_bound { "yes" } else { "no" },
                    s.result.failed
                );
            }
        }
        if let Some(peer) = VllmBench::from_env() {
            println!("{}", box_state());
            println!("\nPhase A, peer: `vllm bench serve` against the same server (chat, 64 events, --ignore-eos), pinned to one core");
            println!("{:>8} {:>9} {:>10} {:>10}", "streams", "requests", "req/s", "events/s");
            for &c in sizes {
                let requests = if quick { 1_000 } else { 4_000 }.max(u64::from(c) * 2);
                match peer.run(addr, c, requests) {
                    Ok(req_s) => println!("{c:>8} {requests:>9} {req_s:>10.0} {:>10.0}", req_s * 65.0),
                    Err(why) => println!("{c:>8} {requests:>9} vllm bench serve failed: {why}"),
                }
            }
        } else {
            println!("\n(`vllm bench serve` beside phase A: set BENCH_VLLM=path/to/vllm and BENCH_VLLM_TOKENIZER=a local tokenizer directory)");
        }
        println!("{}", box_state());
        println!("\nPhase B: paced streams (1 event / 50 ms each); timing error (us) = client parse − server write");
        println!(
            "{:>8} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9} {:>7} {:>6}",
            "streams", "workers", "mode", "events/s", "err p50", "err p99", "err max", "<1ms %", "client us/ev", "sched p99", "steal %", "failed"
        );
        let sizes: Vec<u32> = match std::env::var("BENCH_STREAMS") {
            Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
            Err(_) if quick => vec![256, 1000],
            Err(_) => vec![64, 256, 1000, 2000],
        };
        let default_name = match default_mode {
            SpinMode::Adaptive => "adapt",
            SpinMode::On => "spin",
            SpinMode::Off => "sleep",
        };
        let mut modes: Vec<(&str, usize, &MeasuringPool)> = match std::env::var("BENCH_MODES").as_deref() {
            Ok("spin") => vec![("spin", 1, &spinning)],
            Ok("sleep") => vec![("sleep", 1, &sleeping)],
            Ok("default") => vec![(default_name, 1, &defaulted)],
            _ => vec![("sleep", 1, &sleeping), (default_name, 1, &defaulted), ("spin", 1, &spinning)],
        };
        println!("default mode (--spin auto) here: {default_name}");
        if let Some((w_sleep, w_spin)) = &wide {
            modes.push(("sleep", n, w_sleep));
            modes.push(("spin", n, w_spin));
        }
        let mut best: Vec<(&str, usize, u32)> = Vec::new();
        for &c in &sizes {
            for &(mode, workers, pool) in &modes {
                let events = if quick { 20 } else { 40 };
                let s = step(pool, &stamps, c, u64::from(c), events, 50_000).await;
                let p99 = pct(&s.errors_us, 0.99);
                let within = s.errors_us.iter().filter(|e| e.abs() < 1000.0).count() as f64
                    / s.errors_us.len().max(1) as f64;
                let sc = &s.result.self_check;
                println!(
                    "{:>8} {:>7} {:>6} {:>9.0} {:>9.1} {:>9.1} {:>9.1} {:>8.2}% {:>12.2} {:>9.2} {:>7.1} {:>6}",
                    c,
                    workers,
                    mode,
                    f64::from(c) * 1e6 / 50_000.0,
                    pct(&s.errors_us, 0.5),
                    p99,
                    s.errors_us.last().copied().unwrap_or(f64::NAN),
                    within * 100.0,
                    s.client_cpu_s * 1e6 / s.events.max(1) as f64,
                    sc.scheduler_lag_p99_ms.unwrap_or(f64::NAN),
                    s.steal_pct,
                    s.result.failed
                );
                if p99 < 1000.0 && s.result.failed == 0 {
                    best.retain(|(m, w, _)| !(*m == mode && *w == workers));
                    best.push((mode, workers, c));
                }
            }
        }
        println!("{}", box_state());
        for &(mode, workers, _) in &modes {
            match best.iter().find(|(m, w, _)| *m == mode && *w == workers) {
                Some((_, _, c)) => println!("{mode} x{workers}: most concurrent streams with p99 timing error < 1 ms: {c}"),
                None => println!("{mode} x{workers}: no step reached p99 timing error < 1 ms"),
            }
        }
    });
}
