//! Live diagnosis over windows of samples shaped like the simulator's
//! profiles: each must name its bottleneck (with its numbers), and a light
//! load must say healthy.

use llmwatch_core::analysis::{
    band_steps, live_diagnosis, AnalysisConfig, Confidence, EngineCapacity, LiveKind, LiveSample,
    Objectives, Verdict, WorkloadHints,
};
use llmwatch_core::catalog::Engine;
use llmwatch_core::signals::Signal;

/// One sample: (running, waiting, KV usage, server p95 TTFT, server p95 ITL).
fn sample(ts_ms: i64, running: f64, waiting: f64, kv: f64, ttft: f64, itl: f64) -> LiveSample {
    LiveSample {
        ts_ms,
        signals: vec![
            (Signal::RequestsRunning, running),
            (Signal::RequestsWaiting, waiting),
            (Signal::KvCacheUsage, kv),
            (Signal::ServerTtftP95, ttft),
            (Signal::ServerTtftP50, ttft / 2.0),
            (Signal::ServerItlP95, itl),
            (Signal::ServerItlP50, itl / 2.0),
            (Signal::GenerationTokensRate, running * 20.0),
        ],
    }
}

/// A window alternating a light phase and a busy phase, five samples each.
fn window(light: [f64; 5], busy: [f64; 5]) -> Vec<LiveSample> {
    let mut out = Vec::new();
    for i in 0..5 {
        let [r, w, kv, t, itl] = light;
        out.push(sample(i * 5_000, r, w, kv, t, itl));
        let [r, w, kv, t, itl] = busy;
        out.push(sample(i * 5_000 + 2_500, r, w, kv, t, itl));
    }
    out
}

fn judge(samples: &[LiveSample]) -> llmwatch_core::analysis::LiveVerdict {
    live_diagnosis(
        samples,
        &Objectives::default(),
        &WorkloadHints::default(),
        &AnalysisConfig::default(),
    )
}

#[test]
fn kv_starved_window_is_kv_cache_capacity_with_its_numbers() {
    let v = judge(&window(
        [3.0, 0.0, 0.40, 0.20, 0.02],
        [6.0, 10.0, 0.98, 2.50, 0.03],
    ));
    assert_eq!(
        v.kind,
        LiveKind::Bottleneck(Verdict::KvCacheCapacity),
        "{v:?}"
    );
    assert_eq!(v.kind.code(), "kv_cache_capacity");
    // Judged by usage: the window says nothing of the cache's size.
    assert_eq!(v.confidence, Confidence::Medium);
    assert!(
        v.evidence.contains("98 %") || v.evidence.contains("0.98"),
        "{}",
        v.evidence
    );
    assert!(v.evidence.contains("waiting = 10"), "{}", v.evidence);
    assert_eq!(v.bands, 2);
}

#[test]
fn capped_running_with_cache_room_is_scheduler_limit() {
    let v = judge(&window(
        [4.0, 0.0, 0.30, 0.20, 0.02],
        [4.0, 12.0, 0.35, 1.60, 0.02],
    ));
    assert_eq!(
        v.kind,
        LiveKind::Bottleneck(Verdict::SchedulerLimit),
        "{v:?}"
    );
    assert!(v.evidence.contains("running plateau 4"), "{}", v.evidence);
}

/// llama-server's page: running and deferred requests, no KV cache, no
/// TTFT histogram; without canaries nothing times TTFT. Requests waiting
/// behind its slots (`total_slots` from `/props`) still name the cap, less
/// surely, in its words (the real 2-slot server at concurrency 8: waiting
/// 5.6–6, "scheduler_limit, medium").
#[test]
fn requests_waiting_behind_llama_servers_slots_name_them_unmeasured() {
    let sample = |ts_ms: i64, running: f64, waiting: f64| LiveSample {
        ts_ms,
        signals: vec![
            (Signal::RequestsRunning, running),
            (Signal::RequestsWaiting, waiting),
            (Signal::GenerationTokensRate, running * 300.0),
        ],
    };
    let samples: Vec<LiveSample> = (0..10)
        .map(|i| match i % 2 {
            0 => sample(i * 2_500, 1.0, 0.0),
            _ => sample(i * 2_500, 2.0, 6.0),
        })
        .collect();
    let llama_server = WorkloadHints {
        capacity: EngineCapacity {
            engine: Some(Engine::Llamacpp),
            max_num_seqs: Some(2),
            ..EngineCapacity::default()
        },
        ..WorkloadHints::default()
    };
    let judge = |hints: &WorkloadHints| {
        let objectives = Objectives {
            ttft_p95: Some(0.2),
            ..Objectives::default()
        };
        live_diagnosis(&samples, &objectives, hints, &AnalysisConfig::default())
    };
    let v = judge(&llama_server);
    assert_eq!(
        v.kind,
        LiveKind::Bottleneck(Verdict::SchedulerLimit),
        "{v:?}"
    );
    assert_eq!(v.confidence, Confidence::Medium, "TTFT was not measured");
    for needle in [
        "requests waited (waiting = 6)",
        "p95 TTFT was not measured",
        "llama-server's 2 slots",
    ] {
        assert!(v.evidence.contains(needle), "{needle:?} in {}", v.evidence);
    }
    assert!(v.what_to_try.contains("--parallel"), "{}", v.what_to_try);
    // Without the slot count the cap is not known: unsure, and it says so.
    let v = judge(&WorkloadHints::default());
    assert_eq!(v.confidence, Confidence::Low, "{v:?}");
    assert!(
        v.evidence.contains("no cap on running sequences known"),
        "{}",
        v.evidence
    );
}

#[test]
fn ttft_rising_without_queue_while_itl_fine_is_prefill_bound() {
    let v = judge(&window(
        [2.0, 0.0, 0.20, 0.20, 0.02],
        [16.0, 0.0, 0.40, 1.20, 0.021],
    ));
    assert_eq!(v.kind, LiveKind::Bottleneck(Verdict::PrefillBound), "{v:?}");
}

#[test]
fn slow_tokens_at_the_lowest_level_is_decode_bound() {
    let v = judge(&window(
        [1.0, 0.0, 0.10, 0.10, 0.120],
        [2.0, 0.0, 0.15, 0.11, 0.125],
    ));
    assert_eq!(v.kind, LiveKind::Bottleneck(Verdict::DecodeBound), "{v:?}");
    assert!(v.evidence.contains("ITL"), "{}", v.evidence);
}

#[test]
fn light_load_is_healthy_with_its_numbers() {
    let v = judge(&window(
        [1.0, 0.0, 0.05, 0.10, 0.02],
        [3.0, 0.0, 0.12, 0.11, 0.021],
    ));
    assert_eq!(v.kind, LiveKind::Healthy, "{v:?}");
    assert_eq!(v.kind.code(), "healthy");
    assert_eq!(v.confidence, Confidence::High);
    assert!(v.evidence.contains("p95 TTFT"), "{}", v.evidence);
    assert!(v.describe().starts_with("healthy"), "{}", v.describe());
}

#[test]
fn a_window_without_load_is_idle_not_healthy() {
    let samples: Vec<LiveSample> = (0..10)
        .map(|i| sample(i * 1000, 0.0, 0.0, 0.0, f64::NAN, f64::NAN))
        .collect();
    let v = judge(&samples);
    assert_eq!(v.kind, LiveKind::Idle);
    assert_eq!(v.bands, 0);
    assert_eq!(judge(&[]).kind, LiveKind::Idle);
}

#[test]
fn bands_are_powers_of_two_and_need_two_samples() {
    let mut samples = window([3.0, 0.0, 0.1, 0.1, 0.02], [6.0, 5.0, 0.2, 0.2, 0.02]);
    // A lone sample at concurrency 40 is too thin to be a level.
    samples.push(sample(99_000, 40.0, 0.0, 0.3, 0.3, 0.02));
    let steps = band_steps(&samples);
    let loads: Vec<String> = steps.iter().map(|s| s.load.to_string()).collect();
    assert_eq!(steps.len(), 2, "{loads:?}");
    assert_eq!(steps[0].server.requests_running_max, Some(3.0));
    assert_eq!(steps[1].server.requests_waiting_mean, Some(5.0));
    assert!(steps[0].load.value() < steps[1].load.value());
}

#[test]
fn every_code_names_its_kind_and_back() {
    for code in LiveKind::CODES {
        let kind = LiveKind::from_code(code).unwrap_or_else(|| panic!("{code} is known"));
        assert_eq!(kind.code(), code);
    }
    assert_eq!(LiveKind::from_code("kv_cache"), None);
}

/// `samples` with `extra` signals set on each (replacing any already there),
/// `extra` given per sample by its load (running requests).
fn with_signals(
    samples: Vec<LiveSample>,
    extra: impl Fn(f64) -> Vec<(Signal, f64)>,
) -> Vec<LiveSample> {
    samples
        .into_iter()
        .map(|mut s| {
            let running = s.get(Signal::RequestsRunning).unwrap_or(0.0);
            for (signal, value) in extra(running) {
                s.signals.retain(|(have, _)| *have != signal);
                s.signals.push((signal, value));
            }
            s
        })
        .collect()
}

#[test]
fn flat_throughput_on_an_idle_gpu_is_outside_the_gpu() {
    // Eight times the requests in flight, the same tokens/s and TTFT up 5x,
    // the GPU 20 % busy and the KV cache nearly empty: the limit is in
    // front of the GPU.
    let samples = with_signals(
        window([2.0, 0.0, 0.10, 0.10, 0.02], [16.0, 0.0, 0.12, 0.50, 0.021]),
        |_| {
            vec![
                (Signal::GenerationTokensRate, 400.0),
                (Signal::GpuUtil, 0.20),
                (Signal::GpuCount, 1.0),
            ]
        },
    );
    let v = judge(&samples);
    assert_eq!(v.kind, LiveKind::Bottleneck(Verdict::OutsideGpu), "{v:?}");
    assert_eq!(v.kind.code(), "outside_gpu");
    assert!(
        v.evidence.contains("GPU utilisation is 0.20"),
        "{}",
        v.evidence
    );
    assert!(!v.what_to_try.is_empty());
}

#[test]
fn one_gpu_full_while_its_partner_has_room_is_an_unbalanced_split() {
    let samples = with_signals(
        window([1.0, 0.0, 0.05, 0.10, 0.02], [3.0, 0.0, 0.12, 0.11, 0.021]),
        |_| {
            vec![
                (Signal::GpuMemUsedRatio, 0.80),
                (Signal::GpuMemUsedRatioMax, 0.97),
                (Signal::GpuMemUsedRatioMin, 0.62),
                (Signal::GpuCount, 2.0),
                (Signal::GpuUtil, 0.70),
            ]
        },
    );
    let v = judge(&samples);
    assert_eq!(
        v.kind,
        LiveKind::Bottleneck(Verdict::UnbalancedSplit),
        "{v:?}"
    );
    assert!(
        v.evidence.contains("0.97") && v.evidence.contains("0.62") && v.evidence.contains("2 GPUs"),
        "{}",
        v.evidence
    );
}

#[test]
fn prefix_hits_lost_under_load_are_eviction_and_steady_hits_are_healthy() {
    // The light band's traffic hits the cache 60 %; the busy band 10 %.
    let evicted = with_signals(
        window([1.0, 0.0, 0.05, 0.10, 0.02], [3.0, 0.0, 0.12, 0.11, 0.021]),
        |running| {
            vec![(
                Signal::PrefixCacheHitRate,
                if running > 2.0 { 0.10 } else { 0.60 },
            )]
        },
    );
    let v = judge(&evicted);
    assert_eq!(
        v.kind,
        LiveKind::Bottleneck(Verdict::PrefixCachingIneffective),
        "{v:?}"
    );
    assert_eq!(v.kind.code(), "prefix_caching");
    assert!(v.evidence.contains("evicted"), "{}", v.evidence);
    // The same hit rate at every load: nothing lost, healthy.
    let steady = with_signals(
        window([1.0, 0.0, 0.05, 0.10, 0.02], [3.0, 0.0, 0.12, 0.11, 0.021]),
        |_| vec![(Signal::PrefixCacheHitRate, 0.60)],
    );
    assert_eq!(judge(&steady).kind, LiveKind::Healthy);
    // Traffic that never shared prefixes says nothing about the cache.
    let unshared = with_signals(
        window([1.0, 0.0, 0.05, 0.10, 0.02], [3.0, 0.0, 0.12, 0.11, 0.021]),
        |_| vec![(Signal::PrefixCacheHitRate, 0.01)],
    );
    assert_eq!(judge(&unshared).kind, LiveKind::Healthy);
}

/// The window of a real vLLM 0.32 (40 KV blocks of 128 tokens) at a steady
/// 24 requests of 512 + 128 tokens: one level, mean KV usage 0.86 while the
/// cache binds. The arithmetic, not a usage threshold, names the cache.
#[test]
fn one_steady_level_is_judged_by_arithmetic() {
    use llmwatch_core::analysis::EngineCapacity;
    let mut samples = Vec::new();
    for i in 0..10 {
        let mut s = sample(
            i * 1_000,
            7.0,
            16.0,
            if i % 2 == 0 { 0.82 } else { 0.90 },
            6.0,
            0.063,
        );
        s.signals.extend([
            (Signal::RequestRate, 1.25),
            (Signal::PromptTokensRate, 640.0),
            (Signal::GenerationTokensRate, 160.0),
            (Signal::ServerQueueTimeMean, 5.0),
            (Signal::ServerPrefillTimeMean, 0.15),
            (Signal::ServerTtftMean, 5.2),
        ]);
        samples.push(s);
    }
    let objectives = Objectives {
        ttft_p95: Some(1.0),
        itl_p95: Some(0.05),
        ..Objectives::default()
    };
    let capacity = EngineCapacity {
        kv_blocks: Some(40),
        block_size: Some(128),
        ..EngineCapacity::default()
    };
    let with = |capacity| {
        live_diagnosis(
            &samples,
            &objectives,
            &WorkloadHints {
                capacity,
                ..WorkloadHints::default()
            },
            &AnalysisConfig::default(),
        )
    };
    let v = with(capacity);
    assert_eq!(
        v.kind,
        LiveKind::Bottleneck(Verdict::KvCacheCapacity),
        "{v:?}"
    );
    // Tokens per sequence from a window's counters: medium.
    assert_eq!(v.confidence, Confidence::Medium, "{}", v.evidence);
    assert!(
        v.evidence
            .contains("39 blocks (40 less 1 null) × 128 tokens / ")
            && v.evidence
                .contains("tokens per sequence (5 blocks) = 7 = running plateau 7"),
        "{}",
        v.evidence
    );
    assert!(!v.what_to_try.starts_with("raise max-num-seqs"));
    // The same window with a cache that holds 100 such sequences and the
    // target's running cap set to 8 (`max_num_seqs`): the cap, not memory.
    let roomy = with(EngineCapacity {
        kv_blocks: Some(500),
        max_num_seqs: Some(8),
        ..capacity
    });
    assert_eq!(roomy.kind.code(), "scheduler_limit", "{roomy:?}");
    assert_eq!(roomy.confidence, Confidence::High);
    assert!(
        roomy.evidence.contains("= max-num-seqs 8"),
        "{}",
        roomy.evidence
    );
    // Without the cap named, still a cap (each step carried 2.5 prompt
    // tokens per decoding sequence: not prompt work), less sure.
    let unnamed = with(EngineCapacity {
        kv_blocks: Some(500),
        ..capacity
    });
    assert_eq!(unnamed.kind.code(), "scheduler_limit", "{unnamed:?}");
    assert_eq!(unnamed.confidence, Confidence::Medium);
    // Without the cache's size, usage alone (mean 0.86) still says KV, less
    // sure; never healthy at six times the objective.
    let blind = with(EngineCapacity::default());
    assert_eq!(
        blind.kind,
        LiveKind::Bottleneck(Verdict::KvCacheCapacity),
        "{blind:?}"
    );
    assert_eq!(blind.confidence, Confidence::Medium);
}

/// An objective missed with nothing to name a cause (requests wait, the
/// running count is not reported and the cache is half full): said so with
/// the numbers, never healthy.
#[test]
fn a_breach_no_rule_explains_is_said_with_its_numbers() {
    use llmwatch_core::analysis::{diagnose, Load, Quantiles, StepResult};
    let mut step = StepResult::at(Load::Concurrency(8));
    step.requests_ok = 40;
    step.request_throughput = 2.0;
    step.output_token_throughput = 200.0;
    step.ttft = Quantiles::new(2.0, 3.0, 3.5);
    step.itl = Quantiles::new(0.02, 0.03, 0.04);
    step.server.requests_waiting_mean = Some(5.0);
    step.server.kv_cache_usage_mean = Some(0.70);
    let objectives = Objectives {
        ttft_p95: Some(1.0),
        ..Objectives::default()
    };
    let findings = diagnose(
        &[step],
        &objectives,
        &WorkloadHints::default(),
        &AnalysisConfig::default(),
    );
    let top = findings.first().expect("a finding");
    assert_eq!(top.verdict, Verdict::ObjectiveBreached, "{findings:#?}");
    assert!(
        top.evidence.contains("p95 TTFT 3.0 s > 1.0 s") && top.evidence.contains("waiting = 5"),
        "{}",
        top.evidence
    );
    assert_eq!(
        LiveKind::Bottleneck(top.verdict).code(),
        "objective_breached"
    );
}
