//! Sweeps against the simulator over loopback: each profile's bottleneck is
//! found where its parameters say it is, from the scraped evidence.
//!
//! The tests run one at a time (a shared lock): the simulator and the load
//! generator share this process and two cores, and a sweep measures timing,
//! so concurrent sweeps would measure each other. The self-check limits are
//! loosened for the same reason — the simulator's own CPU counts as the
//! "client's" process CPU here — except in the test that wants a
//! client-bound run.

mod conversation;
mod experiment;
mod llamacpp;
mod twin;

use std::time::{Duration, Instant};

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch::cli::sweep_render::{render_comparison, render_report};
use llmwatch_core::analysis::{Confidence, Load, Objectives, Verdict};
use llmwatch_engine::runners::sweep::{
    compare_sweeps, load_sweep, run_sweep, Ladder, SweepReport, SweepSettings,
};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_probe::{Api, SelfCheckLimits, Shape};
use llmwatch_sim::{Shape as SimShape, Sim, SimSnapshot};
use llmwatch_store::{Store, SweepStatus};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

const MODEL: &str = "sim-llama-8b";

struct Target {
    sim: Sim,
    url: String,
    gpu_url: String,
}

async fn sim(profile: &str, time_scale: f64) -> Target {
    let (sim, engine, gpu) = start(&SimArgs::loopback(profile, MODEL, time_scale).with_gpu_page())
        .await
        .expect("simulator starts");
    let gpu = gpu.expect("GPU page requested");
    Target {
        sim,
        url: format!("http://{engine}"),
        gpu_url: format!("http://{gpu}/metrics"),
    }
}

/// Settings for a fast sweep: completions API (no chat template to
/// render), short steps, fast scrapes, self-check loosened (see the module
/// docs), no objectives unless a test sets them.
fn settings(t: &Target, shape: Shape, ladder: &[u32]) -> SweepSettings {
    let mut s = SweepSettings::new(t.url.clone());
    s.gpu_url = Some(t.gpu_url.clone());
    s.model = Some(MODEL.to_string());
    s.api = Api::Completions;
    s.shape = shape;
    s.ladder = Ladder::Concurrency(ladder.to_vec());
    s.max_concurrency = ladder.iter().copied().max().unwrap_or(1).max(64);
    s.requests_per_step = 8;
    s.requests_per_slot = 3;
    s.min_step_duration = Duration::from_millis(300);
    s.scrape_interval = Duration::from_millis(50);
    s.objectives = Objectives::default();
    s.self_check = SelfCheckLimits {
        max_cpu_cores: 64.0,
        max_scheduler_lag_p99_ms: 1000.0,
        max_dispatch_lag_p99_ms: 1000.0,
        ..Default::default()
    };
    s
}

fn shape(input: u32, output: u32) -> Shape {
    Shape {
        input_tokens: input,
        output_tokens: output,
    }
}

fn show(name: &str, report: &SweepReport, started: Instant) {
    eprintln!(
        "--- {name} ({:.1} s)\n{}",
        started.elapsed().as_secs_f64(),
        render_report(report)
    );
}

fn concurrency(load: Load) -> u32 {
    match load {
        Load::Concurrency(c) => c,
        Load::RequestRate(_) => panic!("concurrency ladder expected"),
    }
}

fn sim_shape(s: Shape) -> SimShape {
    SimShape::new(s.input_tokens as usize, s.output_tokens as usize)
}

async fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("sweep.db"))
        .await
        .expect("store opens");
    (dir, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_saturates_where_its_parameters_predict() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("balanced", 2.0).await;
    let sh = shape(64, 16);
    let ladder = [1, 2, 4, 8, 16, 32, 64, 128];
    let mut s = settings(&t, sh, &ladder);
    s.requests_per_slot = 2;
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    show("balanced", &report, started);

    // Where the parameters say throughput stops growing:
    // min(max_num_seqs, KV saturation concurrency).
    let predicted = t.sim.config().profile.max_running(sim_shape(sh));
    let sat = report
        .verdict
        .saturation
        .as_ref()
        .expect("a saturation point within 1..128");
    let found = concurrency(sat.load);
    let predicted_idx = ladder
        .iter()
        .position(|l| *l as usize >= predicted)
        .expect("prediction inside the ladder");
    let found_idx = ladder
        .iter()
        .position(|l| *l == found)
        .expect("a ladder step");
    assert!(
        found_idx.abs_diff(predicted_idx) <= 1,
        "saturation at concurrency {found}, predicted {predicted} (max_running)"
    );
    // Below the knee nothing waits; above it the queue holds the excess.
    let top = report.steps.last().expect("steps").step.clone();
    assert!(
        top.server.requests_waiting_max.is_some_and(|w| w > 0.0),
        "requests wait above the knee: {:?}",
        top.server
    );
    // The cap is max-num-seqs with the KV cache far from full: the
    // diagnosis names the scheduler, with the cap in its evidence.
    let profile = &t.sim.config().profile;
    assert!(profile.max_num_seqs < profile.kv_saturation_concurrency(sim_shape(sh)));
    let finding = report
        .verdict
        .findings
        .iter()
        .find(|f| f.verdict == Verdict::SchedulerLimit)
        .unwrap_or_else(|| panic!("no scheduler finding: {:#?}", report.verdict.findings));
    let cap = format!("running plateau {}", profile.max_num_seqs);
    assert!(finding.evidence.contains(&cap), "{}", finding.evidence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_starved_is_diagnosed_as_kv_cache_capacity_from_the_scrapes() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("kv-starved", 2.0).await;
    // 240 + 16 tokens = 16 blocks per sequence, all of them taken at
    // admission (the prompt alone fills 16 blocks), so a full cache stays
    // full: the 256-block cache (255 less vLLM's null block) holds 15.
    let sh = shape(240, 16);
    let c_kv = t
        .sim
        .config()
        .profile
        .kv_saturation_concurrency(sim_shape(sh));
    let ladder: Vec<u32> = [1, 2, 4, 8, 16, 32]
        .into_iter()
        .filter(|c| *c as usize <= 2 * (c_kv + 1))
        .collect();
    assert!(
        ladder.last().is_some_and(|c| *c as usize > c_kv + 1),
        "the ladder must pass the KV saturation concurrency {c_kv}"
    );
    let s = settings(&t, sh, &ladder);
    let (_dir, store) = temp_store().await;

    // Poll the engine directly while the sweep runs, to check the scraped
    // evidence against the engine's own state in the same windows.
    let sweep = run_sweep(s, Some(&store), |_| {});
    tokio::pin!(sweep);
    let mut direct: Vec<(i64, SimSnapshot)> = Vec::new();
    let report = loop {
        tokio::select! {
            r = &mut sweep => break r.expect("sweep runs"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                direct.push((now_ms(), t.sim.snapshot()));
            }
        }
    };
    show("kv-starved", &report, started);

    let finding = report
        .verdict
        .findings
        .iter()
        .find(|f| f.verdict == Verdict::KvCacheCapacity)
        .unwrap_or_else(|| {
            panic!(
                "KV-cache capacity finding in {:#?}",
                report.verdict.findings
            )
        });
    assert_eq!(finding.confidence, Confidence::High, "{finding:?}");
    let i = finding.step.expect("the finding names its step");
    let step = &report.steps[i];
    let ev = &step.step.server;
    assert!(
        concurrency(step.step.load) as usize > c_kv / 2,
        "found at {} (KV saturation concurrency {c_kv})",
        step.step.load
    );
    let kv = ev.kv_cache_usage_mean.expect("KV usage scraped");
    let waiting = ev.requests_waiting_max.expect("waiting scraped");
    // Full, as a real vLLM's cache is there: a request admitted into the
    // last blocks is preempted at its first token (the real 40-block
    // recordings: mean 0.84 and 0.83, max 0.90), so the mean sits below
    // the max; lower still when a loaded client is slow to send each next
    // request (0.78 beside two busy loops), which the max does not feel.
    let kv_max = ev.kv_cache_usage_max.expect("KV usage max scraped");
    assert!(kv > 0.7 && kv_max > 0.9, "KV usage mean {kv}, max {kv_max}");
    assert!(waiting > 0.0, "waiting max {waiting}");
    assert!(
        step.scrapes_in_window >= 3,
        "{} scrapes",
        step.scrapes_in_window
    );
    assert!(
        step.scrape_failures.is_empty(),
        "{:?}",
        step.scrape_failures
    );
    // The scraped numbers are the engine's: within what the engine itself
    // showed during the step's window.
    let window: Vec<&SimSnapshot> = direct
        .iter()
        .filter(|(ts, _)| *ts >= step.step.start_unix_ms && *ts <= step.step.end_unix_ms)
        .map(|(_, s)| s)
        .collect();
    assert!(!window.is_empty(), "direct polls inside the window");
    let direct_waiting_max = window.iter().map(|s| s.waiting).max().unwrap_or(0) as f64;
    let direct_kv_max = window
        .iter()
        .map(|s| s.kv_cache_usage)
        .fold(0.0_f64, f64::max);
    assert!(
        waiting <= direct_waiting_max + 1.0,
        "scraped waiting max {waiting} vs engine {direct_waiting_max}"
    );
    assert!(
        (ev.kv_cache_usage_max.expect("max") - direct_kv_max).abs() < 0.1,
        "scraped KV max {:?} vs engine {direct_kv_max}",
        ev.kv_cache_usage_max
    );
    assert!(
        finding.evidence.contains("KV-cache usage") && finding.evidence.contains("waiting"),
        "{}",
        finding.evidence
    );
    // Preemptions happen when the cache is full; the window's counter
    // delta sees them.
    assert!(ev.preemptions.is_some(), "preemption counter read");
    // GPU evidence from the dcgm page.
    assert_eq!(ev.gpu_count, Some(1));
    assert!(ev
        .gpu_mem_used_ratio_mean
        .is_some_and(|r| r > 0.0 && r <= 1.0));

    // Throughput stops growing where the cache fills.
    let sat = report
        .verdict
        .saturation
        .as_ref()
        .expect("saturation point");
    let pos = |c: usize| ladder.iter().position(|l| *l as usize >= c);
    let found = pos(concurrency(sat.load) as usize).expect("ladder step");
    let predicted = pos(c_kv).expect("ladder passes C_kv");
    assert!(
        found.abs_diff(predicted) <= 1,
        "saturation at {}, KV saturation concurrency {c_kv}",
        sat.load
    );

    // What was stored is what was measured.
    let id = report.sweep_id.expect("stored");
    let stored = load_sweep(&store, id)
        .await
        .expect("stored sweep reads back");
    assert_eq!(stored.steps.len(), report.steps.len());
    assert_eq!(stored.row.status, SweepStatus::Completed);
    // serde_json parses floats to within one ULP; compare as JSON numbers
    // to 10 significant digits (relative: a fixed scale flips on a value
    // that lands on its rounding boundary, as 424.2462014375 W did).
    let rounded = |e: &llmwatch_core::analysis::ServerEvidence| {
        let v = serde_json::to_value(e).expect("serialises");
        let obj = v.as_object().expect("object").clone();
        obj.into_iter()
            .map(|(k, v)| (k, v.as_f64().map(|x| format!("{x:.9e}"))))
            .collect::<Vec<_>>()
    };
    assert_eq!(rounded(&stored.steps[i].server), rounded(ev));
    assert!(stored
        .row
        .verdict_json
        .is_some_and(|v| v.contains("KV-cache capacity")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_heavy_with_long_prompts_is_prefill_bound() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let ts = 2.0;
    let t = sim("prefill-heavy", ts).await;
    let sh = shape(1024, 16);
    let mut s = settings(&t, sh, &[1, 2]);
    s.requests_per_step = 6;
    // Interactive objectives in engine time (TTFT 100 ms, ITL 25 ms),
    // scaled like everything the simulator shows.
    s.objectives.ttft_p95 = Some(0.100 / ts);
    s.objectives.itl_p95 = Some(0.025 / ts);
    let p = t.sim.config().predict(sim_shape(sh));
    assert!(
        p.ttft_c1_s > 2.0 * s.objectives.ttft_p95.unwrap_or(0.0)
            && p.itl_c1_s < 0.5 * s.objectives.itl_p95.unwrap_or(0.0),
        "the profile predicts TTFT {} s and ITL {} s at concurrency 1",
        p.ttft_c1_s,
        p.itl_c1_s
    );
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    show("prefill-heavy", &report, started);
    let verdicts: Vec<Verdict> = report.verdict.findings.iter().map(|f| f.verdict).collect();
    assert!(
        verdicts.contains(&Verdict::PrefillBound),
        "{:#?}",
        report.verdict.findings
    );
    assert!(
        !verdicts.contains(&Verdict::DecodeBound),
        "{:#?}",
        report.verdict.findings
    );
    assert!(
        !verdicts.contains(&Verdict::KvCacheCapacity),
        "{:#?}",
        report.verdict.findings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_slow_is_decode_bound() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let ts = 4.0;
    let t = sim("decode-slow", ts).await;
    let sh = shape(32, 16);
    let mut s = settings(&t, sh, &[1, 2, 4]);
    // decode-slow's ITL at concurrency 1 is 42 ms (engine time): under the
    // 50 ms chat objective, so a 25 ms (engine time) objective is what makes
    // it "high" at the floor.
    s.objectives.ttft_p95 = Some(1.0 / ts);
    s.objectives.itl_p95 = Some(0.025 / ts);
    let p = t.sim.config().predict(sim_shape(sh));
    assert!(p.itl_c1_s > s.objectives.itl_p95.unwrap_or(f64::MAX));
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    show("decode-slow", &report, started);
    let f = report
        .verdict
        .findings
        .iter()
        .find(|f| f.verdict == Verdict::DecodeBound)
        .unwrap_or_else(|| panic!("decode-bound in {:#?}", report.verdict.findings));
    assert_eq!(f.step, Some(0), "read at the floor");
    let verdicts: Vec<Verdict> = report.verdict.findings.iter().map(|f| f.verdict).collect();
    assert!(!verdicts.contains(&Verdict::PrefillBound), "{verdicts:?}");
    // The measured ITL at the floor is the profile's.
    let itl = report.steps[0].step.itl.p50.expect("ITL measured");
    assert!(
        (itl - p.itl_c1_s).abs() < 0.5 * p.itl_c1_s,
        "ITL p50 {itl} vs predicted {}",
        p.itl_c1_s
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_bound_run_gives_no_saturation_verdict_and_says_why() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("balanced", 4.0).await;
    let mut s = settings(&t, shape(32, 8), &[1, 2, 4]);
    s.min_step_duration = Duration::from_millis(100);
    // Limits no client can meet: every step is client-bound.
    s.self_check = SelfCheckLimits {
        max_cpu_cores: 0.0,
        max_scheduler_lag_p99_ms: 0.0,
        max_dispatch_lag_p99_ms: 0.0,
        max_effect: 0.0,
    };
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    show("client-bound", &report, started);
    assert!(report.steps.iter().all(|s| s
        .step
        .client_bound
        .as_deref()
        .is_some_and(|w| !w.is_empty())));
    assert!(report.verdict.saturation.is_none());
    assert!(report.verdict.usable_steps.is_empty());
    let text = report.summary.join("\n");
    assert!(text.contains("No saturation verdict"), "{text}");
    assert!(text.contains("client-bound"), "{text}");
    assert!(report
        .verdict
        .findings
        .iter()
        .any(|f| f.verdict == Verdict::ClientBound));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comparing_sweeps_whose_cards_differ_in_two_fields_warns() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("balanced", 4.0).await;
    let (_dir, store) = temp_store().await;
    let mut ids = Vec::new();
    for (quant, tp) in [("fp16", "1"), ("fp8", "2"), ("fp8", "1")] {
        let mut s = settings(&t, shape(32, 8), &[1, 2]);
        s.min_step_duration = Duration::from_millis(100);
        s.card = vec![
            ("quantization".into(), quant.into()),
            ("tensor_parallel".into(), tp.into()),
            ("note".into(), "same note".into()),
        ];
        let report = run_sweep(s, Some(&store), |_| {})
            .await
            .expect("sweep runs");
        ids.push(report.sweep_id.expect("stored"));
    }
    let two = compare_sweeps(&store, ids[0], ids[1])
        .await
        .expect("compares");
    eprintln!(
        "{} ({:.1} s)",
        render_comparison(&two),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(two.a.steps.len(), 2);
    assert_eq!(two.b.steps.len(), 2);
    let fields: Vec<&str> = two
        .diff
        .differing
        .iter()
        .map(|(f, _, _)| f.as_str())
        .collect();
    assert!(
        fields.contains(&"quantization") && fields.contains(&"tensor_parallel"),
        "{fields:?}"
    );
    let warning = two.diff.warning.as_deref().expect("two changes warn");
    assert!(
        warning.contains("quantization") && warning.contains("tensor_parallel"),
        "{warning}"
    );
    assert!(render_comparison(&two).contains("Warning"));

    let one = compare_sweeps(&store, ids[1], ids[2])
        .await
        .expect("compares");
    assert_eq!(one.diff.warning, None, "{:?}", one.diff.differing);
    assert!(compare_sweeps(&store, ids[0], 9999).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_failing_half_way_stops_the_sweep_and_keeps_what_it_measured() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("balanced", 4.0).await;
    let (_dir, store) = temp_store().await;
    let mut s = settings(&t, shape(32, 8), &[1, 2, 4, 8, 16]);
    s.min_step_duration = Duration::from_millis(100);
    s.target_name = Some("sim-a".into());
    let sim = t.sim.clone();
    let report = run_sweep(s, Some(&store), |step| {
        if step.index == 1 {
            sim.set_failing(true);
        }
    })
    .await
    .expect("a stopped sweep is a report, not an error");
    show("failing", &report, started);

    assert_eq!(report.status, SweepStatus::Stopped);
    assert_eq!(report.steps.len(), 3, "two good steps and the failing one");
    let why = report.stop_reason.as_deref().expect("stop reason");
    assert!(why.contains("error rate"), "{why}");
    assert!(report.steps[2].step.error_rate > 0.5);
    assert!(
        report.summary[0].contains("Stopped early"),
        "{:?}",
        report.summary
    );

    let id = report.sweep_id.expect("stored");
    let row = store.sweep(id).await.expect("reads").expect("exists");
    assert_eq!(row.status, SweepStatus::Stopped);
    assert_eq!(row.stop_reason.as_deref(), Some(why));
    assert!(row.ended_ms.is_some());
    let steps = store.sweep_steps(id).await.expect("reads");
    assert_eq!(steps.len(), 3);
    // The probes of each step are stored under its step id.
    let target = store
        .target_by_name("sim-a")
        .await
        .expect("reads")
        .expect("target registered");
    let probes = store
        .probes(target.id, 0, i64::MAX, u32::MAX)
        .await
        .expect("reads");
    let measured: u64 = report.steps.iter().map(|s| s.run.requests).sum();
    assert_eq!(probes.len() as u64, measured);
    // The report keeps each step's summary, not its requests: those are in
    // the store, so a long sweep's memory does not grow with its ladder.
    assert!(report.steps.iter().all(|s| s.run.records.is_empty()));
    let failed_step_id = report.steps[2].stored_id.expect("stored step");
    assert!(probes
        .iter()
        .filter(|p| p.run_id == Some(failed_step_id))
        .all(|p| !p.ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rate_ramp_runs_open_loop_steps() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("balanced", 4.0).await;
    let (_dir, store) = temp_store().await;
    let mut s = settings(&t, shape(32, 8), &[1]);
    s.ladder = Ladder::Rate(vec![20.0, 40.0]);
    s.requests_per_step = 10;
    s.warmup_requests = Some(4);
    s.min_step_duration = Duration::from_millis(200);
    let report = run_sweep(s, Some(&store), |_| {})
        .await
        .expect("sweep runs");
    show("rate ramp", &report, started);
    assert_eq!(report.steps.len(), 2);
    for (step, rate) in report.steps.iter().zip([20.0, 40.0]) {
        assert_eq!(step.step.load, Load::RequestRate(rate));
        assert!(step.run.requests >= 10, "{} requests", step.run.requests);
        // At least the minimum duration of arrivals.
        assert!(step.step.wall_time_s >= 0.2, "{} s", step.step.wall_time_s);
        assert_eq!(step.step.requests_failed, 0);
    }
    let stored = store
        .sweep_steps(report.sweep_id.expect("stored"))
        .await
        .expect("reads");
    assert!(stored.iter().all(|s| s.load_kind == "rate"));
}

/// Issue 11: a server whose cache hits contradict random prompts (here
/// one that reports every prompt token cached): every step is labelled
/// cache-contaminated with the reason, stored that way, and left out of the
/// saturation verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_whose_random_prompts_hit_the_cache_are_marked_and_left_out() {
    cache_contaminated_sweep(true, &["1.00 observed", "0.00 intended"]).await;
}

/// The same against a server that reports no cached tokens per request
/// (vLLM's default): its prefix-cache counters over each step judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_per_request_cached_tokens_the_servers_counters_judge() {
    cache_contaminated_sweep(false, &["server's counters", "1.00", "0.00 intended"]).await;
}

async fn cache_contaminated_sweep(prompt_tokens_details: bool, reason_has: &[&str]) {
    let _serial = SERIAL.lock().await;
    let mut config =
        llmwatch_sim::SimConfig::new(llmwatch_sim::Profile::named("balanced").unwrap());
    config.model = MODEL.to_string();
    config.time_scale = 8.0;
    config.report_all_cached = true;
    config.prompt_tokens_details = prompt_tokens_details;
    let sim = Sim::start(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = sim.router();
    tokio::spawn(async move { llmwatch_sim::serve(listener, router).await });
    let t = Target {
        sim,
        url,
        gpu_url: String::new(),
    };
    let mut s = settings(&t, shape(256, 16), &[1, 2, 4]);
    s.gpu_url = None;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).await.unwrap();
    let report = run_sweep(s, Some(&store), |_| {}).await.unwrap();
    assert_eq!(report.steps.len(), 3);
    for step in &report.steps {
        let why = step.step.cache_contaminated.as_deref().unwrap_or("");
        assert!(reason_has.iter().all(|part| why.contains(part)), "{why:?}");
    }
    assert!(report.verdict.saturation.is_none());
    assert!(
        report
            .verdict
            .excluded_steps
            .iter()
            .all(|e| e.reason.contains("cache-contaminated")),
        "{:?}",
        report.verdict.excluded_steps
    );
    assert_eq!(report.verdict.excluded_steps.len(), 3);
    let table = render_report(&report);
    assert!(table.contains("cache-contaminated"), "{table}");
    drop(t);
}

/// The engine's phase histograms account for the client's TTFT: at every
/// step the breakdown's parts (queue, prefill, time in the server outside
/// the engine core, network/client) sum to the client-measured mean TTFT
/// within 10 %, and past the cache's capacity the queue is what grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_breakdown_sums_to_the_client_ttft_under_load() {
    use llmwatch_core::analysis::DominantPart;
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let t = sim("kv-starved", 2.0).await;
    let sh = shape(240, 16);
    let c_kv = t
        .sim
        .config()
        .profile
        .kv_saturation_concurrency(sim_shape(sh));
    let top = u32::try_from(4 * c_kv).expect("small");
    let s = settings(&t, sh, &[1, 4, top]);
    let (_dir, store) = temp_store().await;
    let report = run_sweep(s, Some(&store), |_| {})
        .await
        .expect("sweep runs");
    show("ttft breakdown", &report, started);

    for step in &report.steps {
        let ev = &step.step.server;
        let b = ev.latency_breakdown.as_ref().unwrap_or_else(|| {
            panic!(
                "breakdown at {}: {:?}",
                step.step.load, ev.latency_breakdown_missing
            )
        });
        let client = step.run.ttft_ms.mean.expect("client TTFT") / 1000.0;
        assert!((b.ttft.client_s - client).abs() < 1e-9);
        let parts = b.ttft.queue_s
            + b.ttft.prefill_s
            + b.ttft
                .server_outside_core_s
                .expect("e2e and inference histograms")
            + b.ttft.network_s.expect("TTFT histogram");
        assert!(
            (parts - client).abs() <= 0.10 * client,
            "{}: parts {parts} s vs client mean TTFT {client} s ({b:?})",
            step.step.load
        );
        let e2e = b.e2e.expect("e2e breakdown");
        assert!(
            e2e.unexplained_s.abs() <= 0.10 * e2e.client_s,
            "{}: {e2e:?}",
            step.step.load
        );
        eprintln!("{}: {}", step.step.load, b.reason);
    }
    // Alone, a request does not wait; at four times the cache's capacity
    // it mostly waits.
    let first = report.steps[0].step.server.latency_breakdown.as_ref();
    let last = report.steps[2].step.server.latency_breakdown.as_ref();
    let (first, last) = (first.expect("floor"), last.expect("top"));
    assert_ne!(first.dominant, DominantPart::Queue, "{first:?}");
    assert_eq!(last.dominant, DominantPart::Queue, "{last:?}");
    assert!(last.ttft.queue_s > 5.0 * first.ttft.queue_s.max(1e-4));

    // Stored with the step's evidence, and read back the same.
    let id = report.sweep_id.expect("stored");
    let stored = load_sweep(&store, id).await.expect("reads back");
    for (a, b) in stored.steps.iter().zip(&report.steps) {
        let (a, b) = (&a.server, &b.step.server);
        let (a, b) = (a.latency_breakdown.as_ref(), b.latency_breakdown.as_ref());
        let (a, b) = (a.expect("stored"), b.expect("measured"));
        assert_eq!(a.dominant, b.dominant);
        assert!((a.ttft.queue_s - b.ttft.queue_s).abs() < 1e-9);
        assert!((a.ttft.client_s - b.ttft.client_s).abs() < 1e-9);
    }
}

/// With `--enable-per-request-metrics` the breakdown comes from the
/// server's own timing of the sweep's requests, not its histograms: the
/// parts are those requests' means and sum to the client's mean TTFT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_breakdown_prefers_the_servers_per_request_timing() {
    let _serial = SERIAL.lock().await;
    let mut args = SimArgs::loopback("balanced", MODEL, 4.0).with_gpu_page();
    args.vllm_args = vec!["--enable-per-request-metrics".to_string()];
    let (sim, engine, gpu) = start(&args).await.expect("simulator starts");
    let t = Target {
        sim,
        url: format!("http://{engine}"),
        gpu_url: format!("http://{}/metrics", gpu.expect("GPU page")),
    };
    let (_dir, store) = temp_store().await;
    let mut s = settings(&t, shape(128, 16), &[1, 4]);
    s.target_name = Some("sim".to_string());
    let report = run_sweep(s, Some(&store), |_| {})
        .await
        .expect("sweep runs");
    for step in &report.steps {
        let run = &step.run;
        // Stored with each probe, in the server's clock.
        let id = step.stored_id.expect("stored");
        let stored = store.probe_server_timings(id).await.expect("reads");
        assert_eq!(stored.len() as u64, run.requests);
        let prefill: f64 = stored.iter().map(|t| t.prefill_s.expect("prefill")).sum();
        let mean = run.server_prefill_ms.mean.expect("prefill") / 1000.0;
        assert!((prefill / stored.len() as f64 - mean).abs() < 1e-6);
        assert_eq!(
            run.server_timed_requests, run.requests,
            "{}",
            step.step.load
        );
        let b = step
            .step
            .server
            .latency_breakdown
            .as_ref()
            .expect("breakdown");
        assert!(b.per_request, "{b:?}");
        let queue = run.server_queue_ms.mean.expect("queue") / 1000.0;
        assert!((b.ttft.queue_s - queue).abs() < 1e-9, "{b:?}");
        let parts = b.ttft.queue_s + b.ttft.prefill_s + b.ttft.network_s.expect("outside");
        assert!((parts - b.ttft.client_s).abs() < 1e-9, "{b:?}");
        // Outside the server: loopback and the simulator's HTTP layer only
        // (a few ms in a debug build on 2 busy cores), never negative.
        let outside = b.ttft.network_s.expect("outside");
        assert!((0.0..0.05).contains(&outside), "{b:?}");
        assert!(b.reason.contains("per request"), "{}", b.reason);
    }
}

/// Goodput, energy and cost per step from the simulated dcgm page: the
/// GPUs' mean power over each step ÷ its output rate, and the configured
/// prices on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn energy_and_cost_per_token_from_the_gpu_page() {
    use llmwatch_core::analysis::Price;
    let _serial = SERIAL.lock().await;
    let t = sim("balanced", 4.0).await;
    let mut s = settings(&t, shape(128, 32), &[1, 4]);
    s.objectives.ttft_p95 = Some(10.0);
    s.price = Price {
        per_gpu_hour: Some(2.0),
        per_kwh: Some(0.25),
    };
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    for step in &report.steps {
        let (ev, s) = (&step.step.server, &step.step);
        let power = ev
            .gpu_power_w_mean
            .expect("power from DCGM_FI_DEV_POWER_USAGE");
        assert!(power > 0.0, "{power}");
        let joules = ev.economics.energy_j_per_output_token.expect("energy");
        assert!((joules - power / s.output_token_throughput).abs() < 1e-9);
        let gpus = f64::from(ev.gpu_count.expect("gpus"));
        let per_s = 2.0 * gpus / 3600.0 + 0.25 * power / 1000.0 / 3600.0;
        let cost = ev.economics.cost_per_million_output_tokens.expect("cost");
        assert!((cost - per_s / s.output_token_throughput * 1e6).abs() < 1e-9);
        // Generous objectives: every request is good.
        assert_eq!(step.run.good_requests, step.run.requests);
        assert!(step.run.goodput > 0.0);
    }
    let text = render_report(&report);
    assert!(text.contains("J/out tok"), "{text}");
    // The card states the prices the costs came from.
    assert!(text.contains("user.price_per_gpu_hour=$2"), "{text}");
    assert!(text.contains("user.price_per_kwh=$0.25"), "{text}");
    assert!(text.contains("Best goodput"), "{text}");
}

/// Issue 38: a simulated decode instance that reports speculative decoding
/// and its prefill→decode KV transfers (`SimConfig::pd_spec`); the sweep's
/// verdicts cite them.
mod pd_and_speculation {
    use super::*;
    use llmwatch_sim::{PdSpec, Profile, SimConfig};

    async fn sim_with(profile: &str, time_scale: f64, pd_spec: PdSpec) -> Target {
        let mut config = SimConfig::new(Profile::named(profile).expect("profile"));
        config.model = MODEL.to_string();
        config.time_scale = time_scale;
        config.pd_spec = pd_spec;
        let sim = Sim::start(config).expect("simulator starts");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let served = sim.clone();
        tokio::spawn(async move { served.serve(listener).await });
        Target {
            sim,
            url,
            gpu_url: String::new(),
        }
    }

    /// decode-slow with drafts of 3 tokens each accepted 30 % of the time
    /// (given the ones before): about 14 % of draft tokens accepted, and
    /// the decode-bound verdict says that is low.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decode_bound_verdict_says_speculation_is_rejected() {
        let _serial = SERIAL.lock().await;
        let ts = 4.0;
        let pd = PdSpec {
            spec_tokens: 3,
            spec_acceptance: 0.3,
            ..PdSpec::default()
        };
        let t = sim_with("decode-slow", ts, pd).await;
        let mut s = settings(&t, shape(32, 16), &[1, 2]);
        s.gpu_url = None;
        s.objectives.ttft_p95 = Some(1.0 / ts);
        s.objectives.itl_p95 = Some(0.025 / ts);
        let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
        let f = report
            .verdict
            .findings
            .iter()
            .find(|f| f.verdict == Verdict::DecodeBound)
            .unwrap_or_else(|| panic!("decode-bound in {:#?}", report.verdict.findings));
        let rate = report.steps[0]
            .step
            .server
            .spec_decode_acceptance_rate
            .expect("acceptance over the floor's window");
        let expected = (0.3 + 0.09 + 0.027) / 3.0;
        assert!((rate - expected).abs() < 0.03, "acceptance {rate}");
        assert!(
            f.evidence.contains("speculative decoding accepts") && f.evidence.contains(", low"),
            "{}",
            f.evidence
        );
    }

    /// balanced, but every request waits 400 ms (engine time) for its KV
    /// from a prefill instance: TTFT is mostly transfer, named as such.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ttft_made_of_kv_transfer_is_named() {
        let _serial = SERIAL.lock().await;
        let ts = 4.0;
        let pd = PdSpec {
            kv_transfer_s: 0.4,
            ..PdSpec::default()
        };
        let t = sim_with("balanced", ts, pd).await;
        let mut s = settings(&t, shape(32, 16), &[1, 2]);
        s.gpu_url = None;
        s.objectives.ttft_p95 = Some(0.2 / ts);
        s.objectives.itl_p95 = Some(0.05);
        let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
        let transfer = report.steps[0]
            .step
            .server
            .kv_transfer_time_mean
            .expect("transfer time over the floor's window");
        assert!((transfer - 0.4 / ts).abs() < 0.05, "transfer {transfer}");
        let f = report
            .verdict
            .findings
            .iter()
            .find(|f| f.verdict == Verdict::OutsideGpu)
            .unwrap_or_else(|| panic!("outside the GPU in {:#?}", report.verdict.findings));
        assert!(
            f.evidence.contains("KV transfer is the largest part"),
            "{}",
            f.evidence
        );
        assert!(f.what_to_try.contains("KV transfer"), "{}", f.what_to_try);
    }
}
