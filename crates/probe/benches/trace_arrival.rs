//! How close to schedule does a trace replay send? Issue 36 asks for a
//! 1 000-request trace with shared `hash_ids` to arrive within 2 ms p99 of
//! its schedule on this machine.
//!
//! The simulator (balanced profile, time scale 50) serves on a runtime of
//! its own thread; the client is a spinning-mode [`MeasuringThread`] with a
//! client of its own, as `llmwatch bench --trace` drives it. Each round
//! runs, on a fresh measuring thread each:
//!
//! - `replay`: the trace (one request every 4 ms, the odd ones sharing
//!   blocks 1 and 2) through `llmwatch_probe::trace::replay`; the figure is
//!   its arrival error (sent − scheduled);
//! - `open-loop`: the named peer, the bench's own open-loop dispatcher
//!   (`run` with Poisson arrivals at the trace's mean rate, 250/s, the
//!   same prompts), whose `dispatch_lag` is the same sent − scheduled.
//!
//! Run: `cargo bench -p llmwatch-probe --bench trace_arrival`
//! (`BENCH_ROUNDS=N`, default 3; `BENCH_REQUESTS=N`, default 1 000;
//! `BENCH_SPIN=on|adaptive|off`, default on: the measuring thread's mode,
//! its spinner running beside the replay as `spawn_measured` starts it —
//! off, the thread sleeps between arrivals; `BENCH_URL=http://…` with
//! `BENCH_MODEL` and `BENCH_TRACE=FILE.jsonl` replays that trace against a
//! real server instead of the simulator, the open-loop peer at the trace's
//! mean rate). It
//! prints the box's load average first: on a shared machine the tail
//! measures the neighbours as much as the dispatcher.
#![allow(clippy::disallowed_methods)] // benches read their own knobs

use std::time::Duration;

use llmwatch_probe::trace::{parse_trace, replay, TracePrompts, TraceRequest};
use llmwatch_probe::{
    Api, Bound, ClientConfig, Load, MeasuringThread, ProbeClient, ProbeRequest, RunConfig,
    SpinMode, Summary,
};
use llmwatch_sim::{serve, Profile, Sim, SimConfig};

const SIM_MODEL: &str = "sim-llama";

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The simulator on a thread and runtime of its own; its address.
fn start_sim() -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let mut config = SimConfig::new(Profile::named("balanced").expect("profile"));
            config.time_scale = 50.0;
            let sim = Sim::start(config).expect("sim");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send");
            serve(listener, sim.router()).await.expect("serve");
        });
    });
    rx.recv().expect("sim address")
}

/// The test's trace: one request every 4 ms, the odd ones sharing blocks 1
/// and 2.
fn trace(requests: u64) -> Vec<TraceRequest> {
    let mut lines = String::new();
    for i in 0..requests {
        let input = 1025 + (i % 7) * 10;
        let ids = if i % 2 == 1 {
            format!("[1, 2, {}]", 1000 + i)
        } else {
            format!(
                "[{}, {}, {}]",
                10_000 + 3 * i,
                10_001 + 3 * i,
                10_002 + 3 * i
            )
        };
        lines.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {input}, \"output_length\": 2, \"hash_ids\": {ids}}}\n",
            4 * i
        ));
    }
    parse_trace(&lines).expect("trace")
}

fn row(name: &str, lag: &Summary, failed: u64) {
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    println!(
        "{name:<10} {:>9} {:>9} {:>9} {:>9} {:>7}",
        f(lag.p50),
        f(lag.p99),
        f(lag.max),
        f(lag.mean),
        failed
    );
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let rounds = knob("BENCH_ROUNDS", 3);
    let requests = knob("BENCH_REQUESTS", 1000);
    let spin = std::env::var("BENCH_SPIN").unwrap_or_else(|_| "on".into());
    let mode = match spin.as_str() {
        "off" => SpinMode::Off,
        "adaptive" => SpinMode::Adaptive,
        _ => SpinMode::On,
    };
    let (url, model, trace) = match std::env::var("BENCH_URL") {
        Ok(url) => {
            let path = std::env::var("BENCH_TRACE").expect("BENCH_TRACE with BENCH_URL");
            let text = std::fs::read_to_string(&path).expect("trace file");
            let model = std::env::var("BENCH_MODEL").expect("BENCH_MODEL with BENCH_URL");
            (url, model, parse_trace(&text).expect("trace"))
        }
        Err(_) => (
            format!("http://{}", start_sim()),
            SIM_MODEL.to_string(),
            trace(requests),
        ),
    };
    let requests = trace.len() as u64;
    let span_s = trace.last().map_or(0, |r| r.timestamp) as f64 / 1000.0;
    let rate = requests as f64 / span_s.max(0.001);
    let model: &'static str = Box::leak(model.into_boxed_str());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let prompts = runtime.block_on(async {
        let client = ProbeClient::new(ClientConfig::new(url.clone())).expect("client");
        TracePrompts::measure(&client, model, 1)
            .await
            .expect("tokenizer")
    });
    println!(
        "trace arrival: {requests} requests over {span_s:.1} s against {url}, {rounds} round(s), spin {spin}; load average {}",
        load_average()
    );
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "ms", "p50", "p99", "max", "mean", "failed"
    );
    let (mut replay_p99, mut peer_p99) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let thread = MeasuringThread::start_mode(mode).expect("measuring thread");
        let own = ProbeClient::new(ClientConfig::new(url.clone())).expect("client");
        let (t, p) = (trace.clone(), prompts.clone());
        let r = runtime
            .block_on(thread.spawn_measured(async move { replay(&own, model, &t, &p, 1.0).await }))
            .expect("replay");
        row("replay", &r.arrival_error_ms, r.failed);
        replay_p99.extend(r.arrival_error_ms.p99);
        drop(thread);

        let thread = MeasuringThread::start_mode(mode).expect("measuring thread");
        let own = ProbeClient::new(ClientConfig::new(url.clone())).expect("client");
        let bodies: Vec<ProbeRequest> = (0u64..)
            .zip(&trace)
            .map(|(i, r)| {
                ProbeRequest::fixed(
                    Api::Completions,
                    model,
                    prompts.prompt(r, i),
                    r.output_length,
                )
            })
            .collect();
        let config = RunConfig {
            load: Load::Rate {
                per_second: rate,
                burstiness: 1.0,
                max_concurrency: None,
            },
            bound: Bound::Requests(requests),
            seed: round,
            ..RunConfig::closed(1, requests)
        };
        let run = runtime
            .block_on(thread.run(own, config, move |i| {
                bodies[(i as usize) % bodies.len()].clone()
            }))
            .expect("open loop");
        row("open-loop", &run.dispatch_lag_ms, run.failed);
        peer_p99.extend(run.dispatch_lag_ms.p99);
        drop(thread);
        std::thread::sleep(Duration::from_millis(200));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    if let (Some(a), Some(b)) = (median(&mut replay_p99), median(&mut peer_p99)) {
        println!(
            "median p99: replay {a:.3} ms, open-loop {b:.3} ms (replay/open-loop {:.2}); load average {}",
            a / b,
            load_average()
        );
    }
}
