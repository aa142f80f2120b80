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
//! `BENCH_SPINNER=0` runs the replay without the thread's spinner, as
//! `MeasuringThread::spawn` does, so the thread sleeps between arrivals). It
//! prints the box's load average first: on a shared machine the tail
//! measures the neighbours as much as the dispatcher.
#![allow(clippy::disallowed_methods)] // benches read their own knobs

use std::time::Duration;

use llmwatch_probe::trace::{parse_trace, replay, TracePrompts, TraceRequest};
use llmwatch_probe::{
    Api, Bound, ClientConfig, Load, MeasuringThread, ProbeClient, ProbeRequest, RunConfig, Summary,
};
use llmwatch_sim::{serve, Profile, Sim, SimConfig};

const MODEL: &str = "sim-llama";

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
    let spinner = knob("BENCH_SPINNER", 1) != 0;
    let addr = start_sim();
    let url = format!("http://{addr}");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let trace = trace(requests);
    let prompts = runtime.block_on(async {
        let client = ProbeClient::new(ClientConfig::new(url.clone())).expect("client");
        TracePrompts::measure(&client, MODEL, 1)
            .await
            .expect("tokenizer")
    });
    println!(
        "trace arrival: {requests} requests every 4 ms, {rounds} round(s), spinner {}; load average {}",
        if spinner { "on" } else { "off" },
        load_average()
    );
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "ms", "p50", "p99", "max", "mean", "failed"
    );
    let (mut replay_p99, mut peer_p99) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let thread = MeasuringThread::start(true).expect("measuring thread");
        let own = ProbeClient::new(ClientConfig::new(url.clone())).expect("client");
        let (t, p) = (trace.clone(), prompts.clone());
        let replay = async move { replay(&own, MODEL, &t, &p, 1.0).await };
        let r = if spinner {
            runtime.block_on(thread.spawn_measured(replay))
        } else {
            runtime.block_on(thread.spawn(replay))
        }
        .expect("replay");
        row("replay", &r.arrival_error_ms, r.failed);
        replay_p99.extend(r.arrival_error_ms.p99);
        drop(thread);

        let thread = MeasuringThread::start(true).expect("measuring thread");
        let own = ProbeClient::new(ClientConfig::new(url.clone())).expect("client");
        let bodies: Vec<ProbeRequest> = (0u64..)
            .zip(&trace)
            .map(|(i, r)| ProbeRequest::fixed(Api::Completions, MODEL, prompts.prompt(r, i), 2))
            .collect();
        let config = RunConfig {
            load: Load::Rate {
                per_second: 250.0,
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
