//! Issue 16: a run of any length keeps its memory flat. A binary of its
//! own: RSS is the process's, and no other test may allocate beside it.
//!
//! A duration-bounded run against a zero-delay loopback server streams
//! every record to a writer (serialized, then discarded) and keeps only
//! mergeable statistics; RSS is sampled throughout and must stop growing
//! once the warm-up (connections, the exact-sample buffers, allocator
//! pools) is over.
//!
//! In CI it runs 12 s closed-loop. The issue's hour at 1 000 requests/s of
//! 64 tokens, with the CLI's exact-sample cap, is the same test:
//! `MEMORY_RUN_SECONDS=3600 MEMORY_RUN_RATE=1000 MEMORY_RUN_TOKENS=64 cargo
//! test --release -p llmwatch-probe --test memory -- --nocapture`.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch_probe::{
    Api, Bound, ClientConfig, Load, MeasuringPool, ProbeRequest, RecordWriter, Records, RunConfig,
    RunOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CHUNK: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}"#;
const FINAL: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":16,"total_tokens":20}}"#;

fn http_chunk(data: &str) -> Vec<u8> {
    let ev = format!("data: {data}\n\n");
    let mut v = format!("{:x}\r\n", ev.len()).into_bytes();
    v.extend_from_slice(ev.as_bytes());
    v.extend_from_slice(b"\r\n");
    v
}

/// Answers every request on the connection with `tokens` chunks, no delay.
async fn serve(mut sock: TcpStream, tokens: usize) {
    let _ = sock.set_nodelay(true);
    let mut response =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..tokens {
        response.extend(http_chunk(CHUNK));
    }
    response.extend(http_chunk(&FINAL.replace(
        r#""completion_tokens":16,"total_tokens":20"#,
        &format!(
            r#""completion_tokens":{tokens},"total_tokens":{}"#,
            tokens + 4
        ),
    )));
    response.extend(http_chunk("[DONE]"));
    response.extend_from_slice(b"0\r\n\r\n");
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    loop {
        // One request: head, then its Content-Length body.
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        buf.drain(..end + 4 + len);
        if sock.write_all(&response).await.is_err() {
            return;
        }
    }
}

fn spawn_server(tokens: usize) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = TcpListener::from_std(listener).unwrap();
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(serve(s, tokens));
            }
        });
    });
    addr
}

/// Resident set size, bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A number from the environment, or `default` when it is not set.
fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}: expected a whole number, found {value:?}")),
        Err(_) => default,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_long_run_keeps_memory_flat() {
    let seconds = setting("MEMORY_RUN_SECONDS", 12);
    let rate = setting("MEMORY_RUN_RATE", 0);
    let tokens = setting("MEMORY_RUN_TOKENS", 16) as usize;
    let long_run = std::env::var("MEMORY_RUN_SECONDS").is_ok();
    let addr = spawn_server(tokens);
    let pool =
        MeasuringPool::start(2, false, &ClientConfig::new(format!("http://{addr}"))).unwrap();
    let writer = RecordWriter::create(std::path::Path::new("/dev/null")).unwrap();
    let options = RunOptions {
        records: Records::Stream(writer.sink()),
        // Small in CI, so the exact buffers fill during the warm-up; the
        // CLI's own cap for a long run.
        exact_samples: if long_run {
            RunOptions::default().exact_samples
        } else {
            20_000
        },
    };
    let run_for = Duration::from_secs(seconds);
    let mut config = RunConfig::closed(32, 1);
    if rate > 0 {
        config.load = Load::Rate {
            per_second: rate as f64,
            burstiness: 1.0,
            max_concurrency: Some(256),
        };
    }
    config.bound = Bound::Duration(run_for);

    // RSS sampled every 100 ms by a thread of its own while the run goes.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                samples.push((start.elapsed(), rss()));
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    let result = pool
        .run(config, options, move |i| {
            ProbeRequest::fixed(Api::Chat, "m", format!("req-{i}"), tokens as u32)
        })
        .await
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let written = writer.finish().unwrap();

    assert_eq!(result.failed, 0, "{:?}", result.error_examples);
    assert!(result.records.is_empty(), "records streamed, not kept");
    assert_eq!(written, result.requests);
    // Enough requests that kept records would show: ~1.5 KB each.
    assert!(result.requests > 5_000, "only {} requests", result.requests);
    assert!(!result.itl_ms.exact, "ITL past the exact cap: histograms");

    // After the first third (warm-up), RSS may wobble but not climb: its
    // peak over the last third stays within 4 MiB of its level at the end
    // of the first (kept records would add ~1.5 KB × requests/3).
    let third = run_for / 3;
    let at = |from: Duration, to: Duration| -> Vec<u64> {
        samples
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, r)| *r)
            .collect()
    };
    let warm = at(third, third * 2);
    let late = at(third * 2, run_for);
    assert!(!warm.is_empty() && !late.is_empty(), "{samples:?}");
    let base = *warm.iter().max().unwrap();
    let peak = *late.iter().max().unwrap();
    let growth = peak.saturating_sub(base);
    let per_request_if_kept = 1_500 * result.requests / 3;
    eprintln!(
        "{} requests in {:.1} s ({:.0}/s), RSS {:.1} MiB after warm-up, {:.1} MiB peak in the last third, {:.1} MiB peak overall",
        result.requests,
        result.duration_s,
        result.requests as f64 / result.duration_s,
        base as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        samples.iter().map(|(_, r)| *r).max().unwrap_or(0) as f64 / 1048576.0
    );
    assert!(
        growth < 4 << 20,
        "RSS grew {growth} bytes after warm-up ({base} → {peak}); keeping records would add ~{per_request_if_kept}"
    );
}
