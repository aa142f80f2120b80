//! The verdicts' scenario suite: each scenario, whose bottleneck is known
//! by construction, under steady load (one level, no variation), a slow
//! ramp and bursts, judged by the sweep (one level, a ladder, bursty
//! open-loop arrivals) and by the daemon's live verdict. Prints the
//! confusion matrix, then requires at least 90 % right, no "healthy" where
//! an objective is missed, and no high-confidence wrong answer.
//!
//! Every scenario runs the cost model fitted to the real vLLM 0.32's
//! default sweep (`fixtures/vllm-real-sweeps/default.fitted-profile.json`,
//! written by `llmwatch sim --fit`; see that folder's README), so the
//! engine behaves as a real one did; each bottleneck is induced on top of
//! it as a user would induce it on that server: by vLLM flags, or by the
//! workload where the fitted server already has the limit (its 23 ms a
//! request outside the engine, which short requests at a high rate turn
//! into the bottleneck; no vLLM flag makes a frontend slow).
//!
//! Times: the simulators run at `TIME_SCALE`, so engine seconds are halved;
//! the objectives below are in wall-clock time.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_core::analysis::{Confidence, LiveKind, Objectives, Verdict};
use llmwatch_engine::runners::sweep::{run_sweep, Ladder, SweepSettings};
use llmwatch_probe::{Api, SelfCheckLimits, Shape};
use llmwatch_sim::Sim;
use serde_json::Value;

const MODEL: &str = "sim-llama-8b";
const TIME_SCALE: f64 = 2.0;

/// The cost model fitted to the real server's default sweep (engine
/// seconds: a 5.8 ms step, 0.095 ms a prompt token, 0.56 ms a decoding
/// sequence, 23 ms a request outside the engine, 8 192 blocks of 128).
fn fitted_profile() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/vllm-real-sweeps/default.fitted-profile.json")
}

/// One scenario: the vLLM flags on the fitted model, its known bottleneck
/// and the load that shows it.
#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    /// `vllm serve` flags on top of the fitted profile.
    flags: &'static str,
    /// The live verdict's code the scenario must get.
    expect: &'static str,
    input: u32,
    output: u32,
    /// The steady level; the ramp climbs to it, the bursts jump to it.
    level: u32,
    ttft_ms: u64,
    itl_ms: u64,
}

const SCENARIOS: [Scenario; 6] = [
    // The real recording `kv-blocks-40` (judged KV-cache capacity there):
    // 40 blocks of 128 tokens, one the null block; 512 + 128 tokens a
    // sequence, 5 blocks from its first sampled token on: 7 fit. The real
    // sweep's ITL objective; TTFT well under its 1 s (the bursts arrive at
    // about the rate 7 sequences serve, so their queue is short), above
    // the ~100 ms (wall) that four prompts arriving together take.
    Scenario {
        name: "kv-starved",
        flags: "--num-gpu-blocks-override 40",
        expect: "kv_cache_capacity",
        input: 512,
        output: 128,
        level: 16,
        ttft_ms: 150,
        itl_ms: 50,
    },
    // An ample cache behind max-num-seqs 8: ~16 requests/s of engine time
    // at 48 output tokens, a third of what the fitted frontend passes (at
    // 16 tokens the two limits would meet; bursts queue in a frontend
    // busy half the time). ITL's objective leaves room for
    // the fitted prompt cost's chunks in the decode steps (the real
    // server's own p95 ITL tail).
    Scenario {
        name: "scheduler-limited",
        flags: "--max-num-seqs 8",
        expect: "scheduler_limit",
        input: 64,
        output: 48,
        level: 32,
        ttft_ms: 100,
        itl_ms: 50,
    },
    // The real recording's token budget (`max-num-batched-tokens-256`):
    // a 1 024-token prompt takes 4 chunks of ~30 ms (engine), ~60 ms wall.
    Scenario {
        name: "prefill-heavy",
        flags: "--max-num-batched-tokens 256",
        expect: "prefill_bound",
        input: 1024,
        output: 16,
        level: 2,
        ttft_ms: 50,
        itl_ms: 40,
    },
    // Tensor parallelism over PCIe: every step pays 7 all-reduces of 3 ms
    // (`vllm_args.rs`), a 21.7 ms step, ITL ~11 ms (wall) already alone.
    Scenario {
        name: "decode-slow",
        flags: "--tensor-parallel-size 8 --interconnect pcie",
        expect: "decode_bound",
        input: 64,
        output: 16,
        level: 2,
        ttft_ms: 500,
        itl_ms: 6,
    },
    // No flag: the fitted server's own 23 ms (11.6 ms wall) a request
    // outside the engine, serial, under 16 streams of short requests.
    Scenario {
        name: "slow-frontend",
        flags: "",
        expect: "outside_gpu",
        input: 64,
        output: 16,
        level: 16,
        ttft_ms: 100,
        itl_ms: 25,
    },
    // The fitted server as it is, at a load it met the real sweep's
    // objectives under (1 s, 50 ms; TTFT halved with the time scale): its
    // 23 ms outside the engine is half its TTFT here.
    Scenario {
        name: "fitted",
        flags: "",
        expect: "healthy",
        input: 64,
        output: 16,
        level: 2,
        ttft_ms: 500,
        itl_ms: 50,
    },
];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Pattern {
    Steady,
    Ramp,
    Bursts,
}

impl Pattern {
    /// Concurrency levels the load cycles through, `PHASE` each.
    fn levels(self, level: u32) -> Vec<u32> {
        match self {
            Pattern::Steady => vec![level],
            Pattern::Ramp => vec![(level / 4).max(1), (level / 2).max(1), level],
            Pattern::Bursts => vec![level, 0],
        }
    }
}

const PHASE: Duration = Duration::from_secs(3);

/// One answer of one judge.
#[derive(Debug, Clone)]
struct Answer {
    judge: String,
    scenario: &'static str,
    expect: &'static str,
    got: String,
    confidence: String,
    evidence: String,
}

impl Answer {
    fn right(&self) -> bool {
        self.got == self.expect
    }
}

fn code_of(verdict: Verdict) -> &'static str {
    LiveKind::Bottleneck(verdict).code()
}

/// The simulator for a scenario: the fitted profile with its flags.
async fn sim(sc: &Scenario) -> (Sim, String, String) {
    let mut args = SimArgs::loopback("balanced", MODEL, TIME_SCALE).with_gpu_page();
    args.profile_file = Some(fitted_profile());
    args.vllm_args = sc.flags.split_whitespace().map(str::to_string).collect();
    let (sim, engine, gpu) = start(&args).await.expect("simulator starts");
    let gpu = gpu.expect("GPU page requested");
    (
        sim,
        format!("http://{engine}"),
        format!("http://{gpu}/metrics"),
    )
}

fn objectives(sc: &Scenario) -> Objectives {
    Objectives {
        ttft_p95: Some(sc.ttft_ms as f64 / 1e3),
        itl_p95: Some(sc.itl_ms as f64 / 1e3),
        ..Objectives::default()
    }
}

/// The load a sweep applies: a closed-loop ladder, or bursts — open-loop
/// arrivals at the rate the profile serves at its steady level, gamma
/// shape 0.25 (a burst, then a lull).
enum SweepLoad {
    Ladder(Vec<u32>),
    Bursts,
}

/// The sweep's answer for one scenario under `load`.
async fn sweep_answer(sc: &Scenario, load: SweepLoad, judge: &str) -> Answer {
    let (sim, url, gpu_url) = sim(sc).await;
    let ladder = match load {
        SweepLoad::Ladder(ladder) => Ladder::Concurrency(ladder),
        SweepLoad::Bursts => {
            let shape = llmwatch_sim::Shape::new(sc.input as usize, sc.output as usize);
            let tokens_per_s = sim.config().predicted_throughput(shape, sc.level as usize);
            Ladder::Rate(vec![tokens_per_s / f64::from(sc.output)])
        }
    };
    let mut s = SweepSettings::new(url);
    s.burstiness = 0.25;
    s.gpu_url = Some(gpu_url);
    s.model = Some(MODEL.to_string());
    s.api = Api::Completions;
    s.shape = Shape {
        input_tokens: sc.input,
        output_tokens: sc.output,
    };
    s.max_concurrency = match &ladder {
        Ladder::Concurrency(l) => l.iter().copied().max().unwrap_or(1).max(64),
        Ladder::Rate(_) => 4 * sc.level.max(16),
    };
    s.ladder = ladder;
    s.requests_per_step = 8;
    s.requests_per_slot = 2;
    s.min_step_duration = Duration::from_millis(800);
    s.scrape_interval = Duration::from_millis(100);
    s.objectives = objectives(sc);
    // The simulator shares this process and its cores with the client: its
    // CPU and its scheduling jitter are not the client's.
    s.self_check = SelfCheckLimits {
        max_cpu_cores: 64.0,
        max_scheduler_lag_p99_ms: 1000.0,
        max_dispatch_lag_p99_ms: 1000.0,
        ..SelfCheckLimits::default()
    };
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    let top = report
        .verdict
        .findings
        .iter()
        .find(|f| f.verdict != Verdict::ClientBound);
    Answer {
        judge: judge.to_string(),
        scenario: sc.name,
        expect: sc.expect,
        got: top.map_or("healthy".to_string(), |f| code_of(f.verdict).to_string()),
        confidence: top.map_or("-".to_string(), |f| f.confidence.word().to_string()),
        evidence: top.map_or_else(|| report.summary.join(" "), |f| f.evidence.clone()),
    }
}

/// The daemon's live answers for every scenario under one load pattern:
/// all simulators at once, one daemon, the verdicts read once the window
/// holds only loaded time.
async fn live_answers(pattern: Pattern) -> Vec<Answer> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client");
    let window = Duration::from_secs(18);
    let mut toml = format!(
        "[server]\nlive_window = \"{}s\"\nlive_interval = \"1s\"\n",
        window.as_secs()
    );
    let (mut sims, mut tasks) = (Vec::new(), Vec::new());
    for sc in &SCENARIOS {
        let (sim, url, gpu_url) = sim(sc).await;
        toml.push_str(&format!(
            "[[targets]]\nname = \"{name}\"\nurl = \"{url}\"\nscrape_interval = \"500ms\"\n\
             gpus = \"{name}-gpus\"\nslo_ttft_p95 = \"{}ms\"\nslo_itl_p95 = \"{}ms\"\n\
             [targets.probe]\ninterval = \"1s\"\nshape = \"{}x{}\"\napi = \"completions\"\n\
             [[gpus]]\nname = \"{name}-gpus\"\ndcgm_url = \"{gpu_url}\"\ninterval = \"1s\"\n",
            sc.ttft_ms,
            sc.itl_ms,
            sc.input,
            sc.output,
            name = sc.name,
        ));
        let active = Arc::new(AtomicUsize::new(0));
        for worker in 0..sc.level as usize {
            tasks.push(tokio::spawn(common::load::worker(
                common::load::Completions {
                    client: client.clone(),
                    url: url.clone(),
                    model: MODEL,
                    words: sc.input as usize,
                    max_tokens: sc.output,
                    idle_poll: Duration::from_millis(50),
                },
                worker,
                active.clone(),
            )));
        }
        let levels = pattern
            .levels(sc.level)
            .into_iter()
            .map(|l| l as usize)
            .collect();
        tasks.push(tokio::spawn(common::load::cycle(levels, active, PHASE)));
        sims.push(sim);
    }
    let daemon = common::spawn_daemon(&toml).await;
    let base = daemon.base_url();
    // A full window of the pattern (and a cycle more), then one reading.
    tokio::time::sleep(window + PHASE * 2).await;
    let mut answers = Vec::new();
    for sc in &SCENARIOS {
        let live = common::wait_for(
            &format!("{}'s live verdict", sc.name),
            Duration::from_secs(20),
            || {
                let (client, base) = (client.clone(), base.clone());
                async move {
                    let url = format!("{base}/api/v1/targets/{}", sc.name);
                    let body: Value = client.get(url).send().await.ok()?.json().await.ok()?;
                    Some(body["live"].clone()).filter(|v| !v.is_null())
                }
            },
        )
        .await;
        answers.push(Answer {
            judge: format!("live {pattern:?}").to_lowercase(),
            scenario: sc.name,
            expect: sc.expect,
            got: live["verdict"].as_str().unwrap_or("?").to_string(),
            confidence: live["confidence"].as_str().unwrap_or("?").to_string(),
            evidence: live["evidence"].as_str().unwrap_or("").to_string(),
        });
    }
    for task in tasks {
        task.abort();
    }
    daemon.daemon.shutdown().await;
    drop(sims);
    answers
}

fn print_matrix(answers: &[Answer]) {
    let mut matrix: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for a in answers {
        *matrix.entry((a.expect, a.got.clone())).or_default() += 1;
    }
    eprintln!("confusion matrix (expected → answered: count)");
    for ((expect, got), n) in &matrix {
        let mark = if expect == got { " " } else { "✗" };
        eprintln!("{mark} {expect:>18} → {got:<20} {n}");
    }
    for a in answers {
        eprintln!(
            "{} {:<13} {:<18} {:<20} {:<6} {}",
            if a.right() { " " } else { "✗" },
            a.judge,
            a.scenario,
            a.got,
            a.confidence,
            a.evidence
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profile_is_named_right_by_the_sweep_and_the_live_verdict() {
    let mut answers = Vec::new();
    for sc in &SCENARIOS {
        answers.push(sweep_answer(sc, SweepLoad::Ladder(vec![sc.level]), "sweep steady").await);
        let ramp: Vec<u32> = std::iter::successors(Some(1u32), |c| Some(c * 2))
            .take_while(|c| *c <= sc.level)
            .collect();
        answers.push(sweep_answer(sc, SweepLoad::Ladder(ramp), "sweep ramp").await);
        answers.push(sweep_answer(sc, SweepLoad::Bursts, "sweep bursts").await);
    }
    for pattern in [Pattern::Steady, Pattern::Ramp, Pattern::Bursts] {
        answers.extend(live_answers(pattern).await);
    }
    print_matrix(&answers);
    let right = answers.iter().filter(|a| a.right()).count();
    let healthy_under_breach: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.got == "healthy" && a.expect != "healthy")
        .collect();
    let sure_and_wrong: Vec<&Answer> = answers
        .iter()
        .filter(|a| !a.right() && a.confidence == Confidence::High.word())
        .collect();
    // On the fitted twin, two answers of 36 sit at an edge run to run (the
    // kv-starved bursts whose p95 TTFT lands within a few ms of its
    // objective; the scheduler-limited live bursts, whose canary waits in
    // a queue no gauge holds long enough to count): 90 %, with none of
    // them "healthy" and none sure of a wrong answer.
    assert!(
        right * 100 >= answers.len() * 90,
        "{right} of {} right",
        answers.len()
    );
    assert!(healthy_under_breach.is_empty(), "{healthy_under_breach:#?}");
    assert!(sure_and_wrong.is_empty(), "{sure_and_wrong:#?}");
}
