//! Against the simulator: a calibrated run gives sane statistics.

use llmwatch_probe::{
    render_table, run, Api, Calibrator, ClientConfig, ProbeClient, PromptKind, RunConfig, Shape,
    Workload,
};
use llmwatch_sim::{serve, Profile, Sim, SimConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_requests_at_concurrency_4() {
    sim_run(Api::Completions).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_calibration_counts_the_template() {
    sim_run(Api::Chat).await;
}

async fn sim_run(api: Api) {
    let mut cfg = SimConfig::new(Profile::named("balanced").unwrap());
    cfg.time_scale = 4.0;
    let sim = Sim::start(cfg).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, sim.router()));
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let cal = Calibrator::new();
    let shape = Shape::new(128, 32);
    let w = Workload::prepare(
        &client,
        &cal,
        api,
        "sim-llama",
        shape,
        PromptKind::Random,
        7,
    )
    .await;
    assert!(
        w.calibration.exact,
        "the sim has /tokenize: {:?}",
        w.calibration
    );
    let r = run(&client, &RunConfig::closed(4, 20), |i| w.request(i))
        .await
        .unwrap();
    println!("{}", render_table(&r));
    assert_eq!(r.successful, 20, "{:?}", r.error_examples);
    assert_eq!(r.total_output_tokens, 20 * 32);
    assert_eq!(r.output_tokens_estimated, 0);
    // Calibrated input: the server counts exactly what /tokenize said.
    for rec in &r.records {
        let p = rec.usage.as_ref().unwrap().prompt_tokens.unwrap();
        assert_eq!(Some(p as u32), w.calibration.tokens, "prompt tokens");
        assert_eq!(
            rec.usage.as_ref().unwrap().cached_tokens.unwrap_or(0),
            0,
            "the nonce defeats the prefix cache"
        );
    }
    let ttft = r.ttft_ms.p50.unwrap();
    let itl = r.itl_ms.p50.unwrap();
    let tpot = r.tpot_ms.p50.unwrap();
    assert!(ttft > 0.0 && ttft < 500.0, "TTFT {ttft}");
    assert!(itl > 0.5 && itl < 50.0, "ITL {itl}");
    assert!((tpot - itl).abs() < itl, "TPOT {tpot} vs ITL {itl}");
    assert!(r.e2e_ms.p50.unwrap() > ttft);
    assert!(r.request_throughput > 1.0);
}

/// Dropping a run on the measuring thread cancels it: its streams are
/// closed, and the simulator aborts and frees every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_run_on_the_measuring_thread_closes_its_streams() {
    use llmwatch_probe::{MeasuringThread, ProbeRequest};
    use std::time::{Duration, Instant};

    let sim = Sim::start(SimConfig::new(Profile::named("balanced").unwrap())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, sim.router()));
    let thread = MeasuringThread::start(false).unwrap();
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    // 4 requests of 4 000 tokens: minutes of streaming at real time.
    let run = thread.run(client, RunConfig::closed(4, 4), |i| {
        ProbeRequest::fixed(Api::Completions, "sim-llama", format!("long {i}"), 4_000)
    });
    // Cut it once all four stream (polled with a deadline: a fixed wait may
    // end before a loaded machine has sent them all).
    let mut run = Box::pin(run);
    let deadline = Instant::now() + Duration::from_secs(20);
    let streaming = async {
        loop {
            let s = sim.snapshot();
            if s.running == 4 {
                break;
            }
            assert!(Instant::now() < deadline, "not all streaming: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = &mut run => panic!("the run ended; it should still be streaming"),
        () = streaming => {}
    }
    drop(run);
    assert_eq!(sim.snapshot().finished_aborted, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = sim.snapshot();
        if s.running == 0 && s.finished_aborted == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "still streaming: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A reasoning model (the simulator's reasoning mode: 12 `delta.reasoning`
/// tokens before the answer): both first-token times, the token split, and
/// objectives judged on the answer by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_stream_yields_both_first_token_times() {
    use llmwatch_probe::{JudgedOn, Objectives, ProbeRequest};
    use std::time::Duration;

    let mut cfg = SimConfig::new(Profile::named("balanced").unwrap());
    cfg.time_scale = 4.0;
    cfg.reasoning_tokens = 12;
    let sim = Sim::start(cfg).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, sim.router()));
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let request = |i: u64| ProbeRequest::fixed(Api::Chat, "sim-llama", format!("think {i}"), 32);
    let r = run(&client, &RunConfig::closed(2, 6), request)
        .await
        .unwrap();
    assert_eq!(r.successful, 6, "{:?}", r.error_examples);
    assert_eq!(r.reasoning_requests, 6);
    assert_eq!((r.total_reasoning_tokens, r.total_answer_tokens), (72, 120));
    for rec in &r.records {
        let (ttfr, ttfo) = (rec.ttfr_ns.unwrap(), rec.ttfo_ns.unwrap());
        assert_eq!(Some(ttfr), rec.ttft_ns, "the first output is reasoning");
        // Eleven more reasoning tokens pass before the answer starts.
        assert!(ttfo > ttfr, "answer at {ttfo} ns, reasoning at {ttfr} ns");
        // The client's own count of reasoning events agrees with the
        // server's usage.completion_tokens_details.
        let counted: u64 = rec
            .events
            .iter()
            .filter(|e| e.reasoning)
            .map(|e| u64::from(e.tokens))
            .sum();
        assert_eq!(counted, 12);
        assert_eq!(rec.usage.as_ref().unwrap().reasoning_tokens, Some(12));
        assert!(rec.events.iter().skip(12).all(|e| !e.reasoning));
    }
    assert!(r.ttfo_ms.p50.unwrap() > r.ttfr_ms.p50.unwrap());
    let table = render_table(&r);
    for needle in [
        "Requests that reasoned:                  6",
        "Median time to first reasoning token (ms):",
        "Median time to first answer token (ms):",
        "Objectives judged on:                    the answer",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in\n{table}");
    }
    // A TTFT objective between the two first-token times: met by the first
    // reasoning token, missed by the first answer token (the default).
    let records = &r.records;
    let between = Duration::from_nanos(
        records
            .iter()
            .map(|x| x.ttfr_ns.unwrap() + x.dispatch_lag_ns)
            .max()
            .unwrap()
            .max(1),
    );
    let earliest_answer = records
        .iter()
        .map(|x| x.ttfo_ns.unwrap() + x.dispatch_lag_ns)
        .min();
    assert!(Some(between.as_nanos() as u64) < earliest_answer);
    let mut on_answer = Objectives {
        ttft_p95: Some(between),
        ..Objectives::default()
    };
    assert_eq!(on_answer.judged_on, JudgedOn::Answer);
    assert_eq!(records.iter().filter(|x| on_answer.met_by(x)).count(), 0);
    on_answer.judged_on = JudgedOn::Output;
    assert_eq!(records.iter().filter(|x| on_answer.met_by(x)).count(), 6);
}

/// The simulator's per-request `metrics` (vLLM `--enable-per-request-metrics`)
/// reconcile with the client's own timings of the same requests: the server
/// accounts for its queue, prefill and decode, and what it does not account
/// for is the 20 ms serial front end in front of its engine, plus loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_request_server_timing_reconciles_with_the_client() {
    let mut profile = Profile::named("balanced").unwrap();
    profile.frontend_per_request_s = 0.040;
    let mut cfg = SimConfig::new(profile);
    cfg.time_scale = 2.0;
    cfg.per_request_metrics = true;
    let sim = Sim::start(cfg).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, sim.router()));
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let request =
        |i: u64| llmwatch_probe::ProbeRequest::fixed(Api::Chat, "sim-llama", format!("p {i}"), 16);
    let r = run(&client, &RunConfig::closed(1, 6), request)
        .await
        .unwrap();
    assert_eq!(r.successful, 6, "{:?}", r.error_examples);
    assert_eq!(r.server_timed_requests, 6);
    let frontend_ms = 20.0;
    for rec in &r.records {
        let t = rec.server_timing.unwrap();
        let client_ttft = rec.ttft_ns.unwrap() as f64 / 1e6;
        let client_e2e = rec.e2e_ns as f64 / 1e6;
        // What the server does not account for is the front end's 20 ms
        // and the loopback hop: never less, and not much more.
        let outside = rec.outside_server_ttft_ms().unwrap();
        assert!(
            (frontend_ms - 1.0..frontend_ms + 15.0).contains(&outside),
            "outside {outside} ms of client TTFT {client_ttft} ms: {t:?}"
        );
        let outside_e2e = rec.outside_server_e2e_ms().unwrap();
        assert!(
            (outside_e2e - outside).abs() < 5.0,
            "{outside_e2e} vs {outside}"
        );
        // The server's decode is the client's first-to-last token time.
        let client_decode = client_e2e - client_ttft;
        let decode = t.decode_ms.unwrap();
        assert!(
            (decode - client_decode).abs() < 5.0,
            "{decode} vs {client_decode}"
        );
        let itl = t.mean_itl_ms.unwrap();
        assert!((itl - decode / 15.0).abs() < 1e-6, "{itl} ms");
        assert!(t.queue_ms.unwrap() >= 0.0 && t.prefill_ms.unwrap() > 0.0);
    }
    let table = render_table(&r);
    for needle in [
        "Requests timed by the server:            6",
        "Mean TTFT outside the server (ms):",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in\n{table}");
    }
}
