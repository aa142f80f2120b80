//! How many concurrent SSE streams, and how many events per second, the
//! simulator sustains on ONE core.
//!
//! The simulator (engine task + HTTP server) runs on a `current_thread`
//! tokio runtime in its own OS thread; the load generator runs on another
//! single-threaded runtime in a second thread and speaks raw HTTP/1.1 over
//! TCP (no client library), so that it stays far cheaper than the server.
//!
//! Two experiments:
//! 1. `zero-cost`: steps cost nothing, the engine runs flat out — events/s
//!    is the cost of the token → JSON → SSE → socket path.
//! 2. `paced`: every step costs 10 ms (100 tokens/s per stream, like a real
//!    server), `max_num_seqs` unbounded — the sim "sustains" a concurrency
//!    while it delivers ≥ 90 % of the 100 × C events/s the model predicts.
//!
//! Run: `cargo bench -p llmwatch-sim --bench streams`

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch_sim::{serve, Profile, Sim, SimConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// CPU seconds (user + system) the thread behind `/proc/<pid>/task/<tid>`
/// has used, from its `stat` file (assumes the usual 100 clock ticks/s).
fn thread_cpu_s(stat_dir: &Option<PathBuf>) -> Option<f64> {
    let text = std::fs::read_to_string(stat_dir.as_ref()?.join("stat")).ok()?;
    let after = text.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Starts the sim on its own thread; returns its address and the `/proc`
/// directory of that thread (to read its CPU time).
fn start_sim(profile: Profile) -> (SocketAddr, Option<PathBuf>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let me = std::fs::read_link("/proc/thread-self")
            .ok()
            .map(|p| PathBuf::from("/proc").join(p));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let mut cfg = SimConfig::new(profile);
            cfg.model = "bench".to_string();
            let sim = Sim::start(cfg).expect("sim");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send((listener.local_addr().expect("addr"), me))
                .expect("send addr");
            let _ = serve(listener, sim.router()).await;
        });
    });
    rx.recv().expect("sim address")
}

/// One streaming request on a fresh connection; counts `data: {` events.
async fn one_stream(addr: SocketAddr, body: &str, events: &AtomicU64) -> std::io::Result<()> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        tail.extend_from_slice(&buf[..n]);
        let found = tail.windows(7).filter(|w| w == b"data: {").count() as u64;
        events.fetch_add(found, Ordering::Relaxed);
        let keep = tail.len().min(6);
        tail.drain(..tail.len() - keep);
    }
}

struct Level {
    events_per_s: f64,
    /// Fraction of one core the sim thread used during the window.
    sim_cpu: Option<f64>,
}

impl Level {
    /// Events per CPU-second of the sim thread: what one core can carry,
    /// whatever else the machine is doing.
    fn per_cpu_s(&self) -> String {
        match self.sim_cpu {
            Some(c) if c > 0.0 => format!("{:.0}", self.events_per_s / c),
            _ => "n/a".to_string(),
        }
    }
    fn cpu(&self) -> String {
        match self.sim_cpu {
            Some(c) => format!("{:.0}%", c * 100.0),
            None => "n/a".to_string(),
        }
    }
}

/// Closed-loop clients at `concurrency` for `secs`; returns events/s and
/// the sim thread's CPU use over the measured window.
fn load(
    addr: SocketAddr,
    sim_thread: &Option<PathBuf>,
    concurrency: usize,
    max_tokens: usize,
    warmup_secs: f64,
    secs: f64,
) -> Level {
    let sim_thread = sim_thread.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let events = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let body = format!(
            r#"{{"model":"bench","prompt":"a short prompt for the bench","max_tokens":{max_tokens},"ignore_eos":true,"stream":true}}"#
        );
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let events = events.clone();
            let stop = stop.clone();
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if one_stream(addr, &body, &events).await.is_err() {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs_f64(warmup_secs)).await;
        let n0 = events.load(Ordering::Relaxed);
        let c0 = thread_cpu_s(&sim_thread);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let n1 = events.load(Ordering::Relaxed);
        let c1 = thread_cpu_s(&sim_thread);
        let wall = t0.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.abort();
        }
        // Let the sim reap the aborted streams before the next level.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Level {
            events_per_s: (n1 - n0) as f64 / wall,
            sim_cpu: c0.zip(c1).map(|(a, b)| (b - a) / wall),
        }
    })
}

fn main() {
    // `cargo test --benches` runs this without `--bench`; keep it quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let secs: f64 = if quick { 0.3 } else { 2.0 };

    println!("# zero-cost profile (engine flat out), sim on 1 core");
    println!(
        "{:>12} {:>12} {:>12} {:>10} {:>16}",
        "concurrency", "events/s", "per stream", "sim CPU", "events/CPU-s"
    );
    let mut zero = Profile::zero_cost();
    zero.max_num_seqs = 8192;
    zero.eos_probability = 0.0;
    let (addr, thread) = start_sim(zero);
    let levels: &[usize] = if quick {
        &[1, 64]
    } else {
        &[1, 8, 64, 256, 1024]
    };
    for &c in levels {
        let l = load(addr, &thread, c, 256, secs * 0.3, secs);
        println!(
            "{c:>12} {:>12.0} {:>12.1} {:>10} {:>16}",
            l.events_per_s,
            l.events_per_s / c as f64,
            l.cpu(),
            l.per_cpu_s()
        );
    }

    println!();
    println!("# paced profile: 10 ms per step => 100 events/s per stream expected");
    println!(
        "{:>12} {:>12} {:>12} {:>8} {:>10} {:>16}",
        "concurrency", "events/s", "expected", "ratio", "sim CPU", "events/CPU-s"
    );
    let mut paced = Profile::zero_cost();
    paced.step_base_s = 0.010;
    paced.max_num_seqs = 8192;
    paced.max_model_len = 2048;
    paced.eos_probability = 0.0;
    let (addr, thread) = start_sim(paced);
    let levels: &[usize] = if quick {
        &[16]
    } else {
        &[64, 256, 512, 1024, 2048]
    };
    for &c in levels {
        // 1024-token requests (10 s each) and a 2 s warm-up: all streams are
        // connected and decoding when the window opens (steady state).
        let l = load(addr, &thread, c, 1024, secs, secs * 1.5);
        let expected = 100.0 * c as f64;
        println!(
            "{c:>12} {:>12.0} {expected:>12.0} {:>8.2} {:>10} {:>16}",
            l.events_per_s,
            l.events_per_s / expected,
            l.cpu(),
            l.per_cpu_s()
        );
    }
}
