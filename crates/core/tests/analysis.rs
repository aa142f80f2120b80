//! Sweep analysis: saturation, max sustainable load, diagnosis, experiment
//! cards, on synthetic but realistic step tables.

use std::collections::BTreeMap;

use llmwatch_core::analysis::{
    analyze_sweep, cache_hygiene, card_from_info, check_objectives, compare_cards, diagnose,
    max_sustainable, saturation_point, summary_lines, AnalysisConfig, Confidence, EngineCapacity,
    ExperimentCard, Finding, Load, ObjectiveMiss, Objectives, Quantiles, ServerEvidence,
    StepResult, ThroughputMetric, Verdict, WorkloadHints,
};
use llmwatch_core::catalog::Engine;
use proptest::prelude::*;

const LADDER: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
const OUT_TOKENS: f64 = 256.0;

/// One closed-loop step: output tok/s, p95 TTFT and p95 ITL in seconds; the
/// rest derived the way the probe would (e2e ≈ TTFT + ITL × tokens).
fn step(c: u32, tput: f64, ttft95: f64, itl95: f64) -> StepResult {
    let mut s = StepResult::at(Load::Concurrency(c));
    s.start_unix_ms = 1_700_000_000_000 + i64::from(c) * 60_000;
    s.end_unix_ms = s.start_unix_ms + 60_000;
    s.wall_time_s = 60.0;
    s.output_token_throughput = tput;
    s.request_throughput = tput / OUT_TOKENS;
    s.requests_ok = (s.request_throughput * 60.0).round().max(1.0) as u64;
    s.ttft = Quantiles::new(ttft95 * 0.6, ttft95, ttft95 * 1.3);
    s.itl = Quantiles::new(itl95 * 0.8, itl95, itl95 * 1.2);
    s.tpot = Quantiles::new(itl95 * 0.8, itl95 * 0.9, itl95);
    let e2e = ttft95 + itl95 * OUT_TOKENS;
    s.e2e = Quantiles::new(e2e * 0.8, e2e, e2e * 1.1);
    s
}

fn sweep(tputs: &[f64], ttfts: &[f64], itls: &[f64]) -> Vec<StepResult> {
    LADDER
        .iter()
        .zip(tputs)
        .zip(ttfts)
        .zip(itls)
        .map(|(((c, t), ttft), itl)| step(*c, *t, *ttft, *itl))
        .collect()
}

const BALANCED_TPUT: [f64; 7] = [100.0, 195.0, 380.0, 700.0, 1100.0, 1150.0, 1160.0];
const BALANCED_TTFT: [f64; 7] = [0.20, 0.21, 0.23, 0.26, 0.35, 0.80, 1.90];
const BALANCED_ITL: [f64; 7] = [0.020, 0.021, 0.022, 0.025, 0.030, 0.031, 0.032];

fn balanced() -> Vec<StepResult> {
    sweep(&BALANCED_TPUT, &BALANCED_TTFT, &BALANCED_ITL)
}

fn chat_slo() -> Objectives {
    Objectives {
        ttft_p95: Some(1.0),
        itl_p95: Some(0.050),
        e2e_p95: None,
        max_error_rate: 0.01,
    }
}

fn cfg() -> AnalysisConfig {
    AnalysisConfig::default()
}

fn find(findings: &[Finding], v: Verdict) -> Option<&Finding> {
    findings.iter().find(|f| f.verdict == v)
}

fn verdicts(findings: &[Finding]) -> Vec<Verdict> {
    findings.iter().map(|f| f.verdict).collect()
}

// ---------------------------------------------------------------- saturation

#[test]
fn balanced_curve_saturates_at_16() {
    let steps = balanced();
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.step, 4);
    assert_eq!(sat.load, Load::Concurrency(16));
    assert_eq!(sat.metric, ThroughputMetric::OutputTokens);
    assert_eq!(sat.throughput, 1100.0);
    assert_eq!(sat.output_token_throughput, 1100.0);
    assert!((sat.request_throughput - 1100.0 / OUT_TOKENS).abs() < 1e-9);
    assert_eq!(sat.next_load, Load::Concurrency(32));
    assert!((sat.gain_per_doubling - (1150.0 / 1100.0 - 1.0)).abs() < 1e-9);
    assert!(
        sat.latency_rise.contains("p95 TTFT"),
        "{}",
        sat.latency_rise
    );
    assert_eq!(sat.peak_step, 6);
    assert_eq!(sat.peak_throughput, 1160.0);
    assert!(sat.excluded_steps.is_empty());
    let text = sat.describe();
    assert!(
        text.starts_with("Saturation at concurrency 16: 1100 output tok/s"),
        "{text}"
    );
}

#[test]
fn saturation_threshold_table() {
    // gains per doubling: 95 %, 95 %, 84 %, 57 %, 4.5 %, 0.9 %
    let cases: [(f64, Option<u32>); 4] = [
        (0.10, Some(16)),
        (0.60, Some(8)),
        (0.01, Some(32)),
        (0.001, None),
    ];
    let steps = balanced();
    for (threshold, want) in cases {
        let config = AnalysisConfig {
            saturation_gain_threshold: threshold,
            ..cfg()
        };
        let got = saturation_point(&steps, &config).map(|s| s.load);
        assert_eq!(got, want.map(Load::Concurrency), "threshold {threshold}");
    }
}

#[test]
fn non_doubling_ladder_is_normalised_by_log2() {
    // 1, 4, 16, 64: 4→16 gains (1100/380)^(1/2) − 1 ≈ 70 % per doubling, not
    // 189 %; 16→64 gains ≈ 2.7 % per doubling.
    let steps = vec![
        step(1, 100.0, 0.20, 0.020),
        step(4, 380.0, 0.23, 0.022),
        step(16, 1100.0, 0.35, 0.030),
        step(64, 1160.0, 1.90, 0.032),
    ];
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.load, Load::Concurrency(16));
    let want = (1160.0f64 / 1100.0).powf(0.5) - 1.0;
    assert!((sat.gain_per_doubling - want).abs() < 1e-9);
}

#[test]
fn request_rate_ladder_works() {
    let steps: Vec<StepResult> = [
        (0.5, 100.0, 0.2),
        (1.0, 198.0, 0.22),
        (3.0, 560.0, 0.4),
        (6.0, 570.0, 3.0),
    ]
    .iter()
    .map(|&(r, t, ttft)| {
        let mut s = step(1, t, ttft, 0.02);
        s.load = Load::RequestRate(r);
        s
    })
    .collect();
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.load, Load::RequestRate(3.0));
    assert!(
        sat.describe().contains("rate 3 req/s"),
        "{}",
        sat.describe()
    );
}

#[test]
fn unordered_steps_report_input_indices() {
    let mut steps = balanced();
    steps.reverse(); // 64 first … 1 last; c=16 is now index 2
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.step, 2);
    assert_eq!(sat.load, Load::Concurrency(16));
    assert_eq!(sat.next_step, 1);
}

#[test]
fn flat_throughput_without_rising_latency_is_not_saturation() {
    // The extra load never reached the server: latency stays put.
    let tput = [100.0, 195.0, 380.0, 700.0, 1100.0, 1105.0, 1108.0];
    let ttft = [0.2; 7];
    let itl = [0.02; 7];
    let steps = sweep(&tput, &ttft, &itl);
    assert_eq!(saturation_point(&steps, &cfg()), None);
    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    let top = v.highest_step.as_ref().expect("top step");
    assert!(top.flat);
    assert_eq!(top.step, 6);
    let lines = summary_lines(&v);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("but latency did not rise") && l.contains("client self-check")),
        "{lines:#?}"
    );
}

#[test]
fn still_growing_curve_has_no_saturation_and_says_so() {
    let tput = [100.0, 198.0, 390.0, 770.0, 1500.0, 2900.0, 5600.0];
    let steps = sweep(&tput, &BALANCED_TTFT, &BALANCED_ITL);
    assert_eq!(saturation_point(&steps, &cfg()), None);
    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    let lines = summary_lines(&v);
    assert!(
        lines.iter().any(
            |l| l.starts_with("No saturation point within the tested range")
                && l.contains("concurrency 64")
                && l.contains("per doubling")
        ),
        "{lines:#?}"
    );
}

#[test]
fn client_bound_steps_are_ignored_for_saturation() {
    let mut steps = balanced();
    // A client-bound step at 32 reports a low throughput that would move the
    // knee to 8 if it were believed.
    let mut bogus = step(24, 720.0, 0.5, 0.03);
    bogus.client_bound = Some("client CPU 98 %".into());
    steps.insert(4, bogus);
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.load, Load::Concurrency(16));
    assert_eq!(sat.excluded_steps.len(), 1);
    assert_eq!(sat.excluded_steps[0].step, 4);
    assert!(sat.excluded_steps[0].reason.contains("client CPU 98 %"));
    assert!(sat
        .describe()
        .contains("1 client-bound step(s) were ignored"));
}

/// Issue 11: random prompts that hit the prefix cache measured a warm
/// cache; the step is labelled and kept out of the saturation verdict.
#[test]
fn cache_contaminated_steps_are_labelled_and_ignored_for_saturation() {
    // Random prompts (intended 0): 1 % cached is the template's opening,
    // 90 % cached contradicts the workload.
    assert_eq!(cache_hygiene(0.0, 10_000, 100), None);
    let why = cache_hygiene(0.0, 10_000, 9_000).expect("contaminated");
    assert!(
        why.contains("0.90 observed") && why.contains("0.00 intended"),
        "{why}"
    );
    // Shared-prefix at 0.8 expects its hits; only beyond the allowance is it flagged.
    assert_eq!(cache_hygiene(0.8, 10_000, 8_500), None);
    assert!(cache_hygiene(0.5, 10_000, 9_900).is_some());
    assert_eq!(cache_hygiene(0.0, 0, 0), None);

    let mut steps = balanced();
    // A warm-cache step at 24 that reports a low TTFT and a throughput that
    // would move the knee if it were believed.
    let mut warm = step(24, 720.0, 0.05, 0.03);
    warm.cache_contaminated = cache_hygiene(0.0, 10_000, 9_000);
    steps.insert(4, warm);
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.load, Load::Concurrency(16));
    assert_eq!(sat.excluded_steps.len(), 1);
    assert_eq!(sat.excluded_steps[0].step, 4);
    assert!(sat.excluded_steps[0].reason.contains("cache-contaminated"));
}

#[test]
fn request_throughput_is_used_when_no_tokens_are_reported() {
    let mut steps = balanced();
    for s in &mut steps {
        s.output_token_throughput = 0.0;
    }
    let sat = saturation_point(&steps, &cfg()).expect("saturation");
    assert_eq!(sat.metric, ThroughputMetric::Requests);
    assert_eq!(sat.load, Load::Concurrency(16));
}

// -------------------------------------------------------- max sustainable

#[test]
fn max_sustainable_table() {
    let slo = |ttft: Option<f64>, itl: Option<f64>| Objectives {
        ttft_p95: ttft,
        itl_p95: itl,
        e2e_p95: None,
        max_error_rate: 0.01,
    };
    // e2e p95 = TTFT p95 + ITL p95 × 256 tokens: 6.66 s at c=8, 8.03 s at 16.
    let e2e = |e2e: f64| Objectives {
        e2e_p95: Some(e2e),
        ..slo(None, None)
    };
    let cases: [(&str, Objectives, Option<u32>); 8] = [
        ("e2e only", e2e(7.0), Some(8)),
        ("e2e loose", e2e(11.0), Some(64)),
        ("chat SLO", chat_slo(), Some(32)),
        ("tight TTFT", slo(Some(0.5), Some(0.05)), Some(16)),
        ("tight ITL", slo(Some(1.0), Some(0.0245)), Some(4)),
        ("impossible", slo(Some(0.1), None), None),
        ("errors only", slo(None, None), Some(64)),
        ("TTFT only", slo(Some(0.3), None), Some(8)),
    ];
    let steps = balanced();
    for (name, objectives, want) in cases {
        let got = max_sustainable(&steps, &objectives);
        assert_eq!(
            got.as_ref().map(|s| s.load),
            want.map(Load::Concurrency),
            "{name}"
        );
        if let Some(s) = got {
            let i = s.step;
            assert_eq!(s.output_token_throughput, BALANCED_TPUT[i], "{name}");
            assert_eq!(s.ttft_p95, Some(BALANCED_TTFT[i]), "{name}");
        }
    }
}

#[test]
fn an_e2e_objective_is_checked_and_described() {
    let steps = balanced();
    let objectives = Objectives {
        e2e_p95: Some(7.0),
        ..Objectives::default()
    };
    let misses = check_objectives(&steps[4], &objectives);
    let words: Vec<String> = misses.iter().map(|m| m.describe()).collect();
    assert_eq!(
        words,
        vec!["p95 e2e 8.0 s > 7.0 s".to_string()],
        "{misses:?}"
    );
    assert!(check_objectives(&steps[3], &objectives).is_empty());
    let mut unmeasured = steps[3].clone();
    unmeasured.e2e.p95 = None;
    let words: Vec<String> = check_objectives(&unmeasured, &objectives)
        .iter()
        .map(|m| m.describe())
        .collect();
    assert_eq!(
        words,
        vec!["p95 e2e not measured (objective 7.0 s)".to_string()]
    );
}

#[test]
fn max_sustainable_stops_at_the_first_failure() {
    // c=8 has 5 % errors; c=16 and above pass again, but a pass above a
    // failure is not sustainable.
    let mut steps = balanced();
    steps[3].requests_failed = 5;
    steps[3].error_rate = 0.05;
    let s = max_sustainable(&steps, &chat_slo()).expect("sustainable");
    assert_eq!(s.load, Load::Concurrency(4));
    let misses = check_objectives(&steps[3], &chat_slo());
    assert_eq!(
        misses,
        vec![ObjectiveMiss::ErrorRate {
            value: 0.05,
            objective: 0.01
        }]
    );
    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    let lines = summary_lines(&v);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Max sustainable load: concurrency 4")
                && l.contains("concurrency 8 misses: error rate 5 % > 1 %")),
        "{lines:#?}"
    );
}

#[test]
fn unmeasured_latency_is_a_miss_and_all_failed_is_no_success() {
    let mut s = step(1, 100.0, 0.2, 0.02);
    s.itl = Quantiles::default();
    assert_eq!(
        check_objectives(&s, &chat_slo()),
        vec![ObjectiveMiss::ItlP95 {
            value: None,
            objective: 0.05
        }]
    );
    let mut dead = step(1, 0.0, 0.2, 0.02);
    dead.requests_ok = 0;
    dead.requests_failed = 10;
    dead.error_rate = 1.0;
    let misses = check_objectives(&dead, &chat_slo());
    assert_eq!(misses[0], ObjectiveMiss::NoSuccessfulRequests);
    assert!(matches!(misses[1], ObjectiveMiss::ErrorRate { .. }));
}

// ---------------------------------------------------------------- diagnosis

/// Adds server evidence to a sweep, one value per step.
fn with_server(
    mut steps: Vec<StepResult>,
    f: impl Fn(usize, &mut ServerEvidence),
) -> Vec<StepResult> {
    for (i, s) in steps.iter_mut().enumerate() {
        f(i, &mut s.server);
    }
    steps
}

fn kv_starved() -> Vec<StepResult> {
    let tput = [100.0, 190.0, 360.0, 600.0, 700.0, 720.0, 725.0];
    let ttft = [0.20, 0.21, 0.25, 0.90, 2.40, 4.10, 8.00];
    let itl = [0.020, 0.021, 0.023, 0.026, 0.028, 0.029, 0.030];
    let kv = [0.10, 0.20, 0.40, 0.97, 0.98, 0.99, 0.99];
    let waiting = [0.0, 0.0, 0.0, 3.0, 12.0, 27.0, 58.0];
    with_server(sweep(&tput, &ttft, &itl), |i, e| {
        e.kv_cache_usage_mean = Some(kv[i]);
        e.kv_cache_usage_max = Some((kv[i] + 0.01f64).min(1.0));
        e.requests_waiting_mean = Some(waiting[i]);
        e.requests_waiting_max = Some(waiting[i] * 1.2);
        e.preemptions = Some(if i >= 4 { 12 } else { 0 });
        e.gpu_util_mean = Some(0.9);
        e.server_ttft_p95 = Some(ttft[i] * 1.1);
    })
}

#[test]
fn kv_starved_sweep_names_kv_cache_capacity_with_numbers() {
    let findings = diagnose(
        &kv_starved(),
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::KvCacheCapacity).expect("kv finding");
    assert_eq!(f.step, Some(3));
    // Judged by usage alone (the cache's size is not reported): medium.
    assert_eq!(f.confidence, Confidence::Medium);
    for needle in [
        "p95 TTFT 900 ms",
        "concurrency 8",
        "waiting = 3",
        "KV-cache usage mean 0.97",
        "KV-cache size not reported",
        "4.5×",
        "concurrency-1 floor of 200 ms",
    ] {
        assert!(
            f.evidence.contains(needle),
            "missing {needle:?} in {}",
            f.evidence
        );
    }
    assert!(f.what_to_try.contains("Raising max-num-seqs will not help"));
    // Not mistaken for prefill-bound: those steps are explained by the cache.
    assert!(
        find(&findings, Verdict::PrefillBound).is_none(),
        "{findings:#?}"
    );
    assert!(
        find(&findings, Verdict::OutsideGpu).is_none(),
        "{findings:#?}"
    );
}

/// A server capped at 16 running sequences with KV-cache room to spare:
/// beyond concurrency 16 requests only queue.
fn seqs_capped() -> Vec<StepResult> {
    let tput = [100.0, 195.0, 380.0, 700.0, 1100.0, 1120.0, 1125.0];
    let ttft = [0.20, 0.21, 0.23, 0.26, 0.35, 1.40, 3.10];
    let itl = [0.020, 0.021, 0.022, 0.025, 0.030, 0.031, 0.031];
    let running = [1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0];
    let waiting = [0.0, 0.0, 0.0, 0.0, 0.0, 15.0, 47.0];
    with_server(sweep(&tput, &ttft, &itl), |i, e| {
        e.kv_cache_usage_mean = Some(0.05 * (i as f64 + 1.0));
        e.kv_cache_usage_max = Some(0.05 * (i as f64 + 1.0) + 0.02);
        e.requests_running_mean = Some(running[i] * 0.95);
        e.requests_running_max = Some(running[i]);
        e.requests_waiting_mean = Some(waiting[i]);
        e.requests_waiting_max = Some(waiting[i] * 1.2);
        e.gpu_util_mean = Some(0.9);
    })
}

#[test]
fn running_capped_with_cache_room_is_a_scheduler_limit() {
    let findings = diagnose(
        &seqs_capped(),
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::SchedulerLimit).expect("scheduler finding");
    assert_eq!(f.step, Some(5), "{findings:#?}");
    // The cache's size is not reported: judged by usage, medium.
    assert_eq!(f.confidence, Confidence::Medium);
    for needle in [
        "running plateau 16",
        "at concurrency 32",
        "waiting = 15",
        "KV-cache usage mean 0.30",
        "p95 TTFT 1.4 s at concurrency 32 (7.0× the concurrency-1 floor",
    ] {
        assert!(
            f.evidence.contains(needle),
            "missing {needle:?} in {}",
            f.evidence
        );
    }
    assert!(f.what_to_try.contains("raise max-num-seqs"));
    // Neither memory nor prompt compute is blamed for the queue.
    assert!(
        find(&findings, Verdict::KvCacheCapacity).is_none(),
        "{findings:#?}"
    );
    assert!(
        find(&findings, Verdict::PrefillBound).is_none(),
        "{findings:#?}"
    );

    // The same sweep with the cache full is KV-cache capacity instead.
    let full = with_server(seqs_capped(), |i, e| {
        if i >= 5 {
            e.kv_cache_usage_mean = Some(0.97);
        }
    });
    let findings = diagnose(
        &full,
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    assert!(
        find(&findings, Verdict::KvCacheCapacity).is_some(),
        "{findings:#?}"
    );
    assert!(
        find(&findings, Verdict::SchedulerLimit).is_none(),
        "{findings:#?}"
    );

    // Without running counts the cap cannot be seen: no scheduler verdict.
    let blind = with_server(seqs_capped(), |_, e| e.requests_running_max = None);
    let findings = diagnose(
        &blind,
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    assert!(
        find(&findings, Verdict::SchedulerLimit).is_none(),
        "{findings:#?}"
    );
}

/// llama-server reports no KV cache at all, neither size nor usage: the
/// plateau at its slots (`total_slots` in `/props`) is the cap, named and
/// advised in its own words. Without the slot count nothing tells the cap
/// from a full cache, and the verdict says what is missing, unsure.
#[test]
fn a_plateau_at_llama_servers_slots_is_its_scheduler_limit() {
    let unreported = with_server(seqs_capped(), |_, e| {
        e.kv_cache_usage_mean = None;
        e.kv_cache_usage_max = None;
    });
    let judge = |engine: Option<Engine>, cap: Option<u64>| {
        let hints = WorkloadHints {
            capacity: EngineCapacity {
                engine,
                max_num_seqs: cap,
                ..EngineCapacity::default()
            },
            ..WorkloadHints::default()
        };
        diagnose(&unreported, &Objectives::default(), &hints, &cfg())
    };
    let findings = judge(Some(Engine::Llamacpp), Some(16));
    let f = &findings[0];
    assert_eq!(
        (f.verdict, f.confidence, f.step),
        (Verdict::SchedulerLimit, Confidence::High, Some(5)),
        "{findings:#?}"
    );
    assert!(
        f.evidence
            .contains("running plateau 16 = llama-server's 16 slots (--parallel)"),
        "{}",
        f.evidence
    );
    assert!(f.what_to_try.contains("-np"), "{}", f.what_to_try);
    assert!(find(&findings, Verdict::KvCacheCapacity).is_none());

    // A cap known on an engine whose cache may also fill: the same
    // verdict, less sure, in that engine's words.
    let findings = judge(Some(Engine::Sglang), Some(16));
    let f = find(&findings, Verdict::SchedulerLimit).expect("scheduler finding");
    assert_eq!(f.confidence, Confidence::Medium);
    assert!(
        f.evidence.contains("max-running-requests 16"),
        "{}",
        f.evidence
    );
    assert!(f.what_to_try.contains("--max-running-requests"));

    // Neither the cache nor the cap known: unsure, and it says what to state.
    let findings = judge(Some(Engine::Llamacpp), None);
    let f = find(&findings, Verdict::KvCacheCapacity).expect("a low KV finding");
    assert_eq!(f.confidence, Confidence::Low);
    assert!(
        f.evidence.contains("no cap on running sequences known"),
        "{}",
        f.evidence
    );
    assert!(find(&findings, Verdict::SchedulerLimit).is_none());
}

#[test]
fn kv_rule_against_objective_reports_first_breach() {
    // With a 1 s TTFT objective, c=8 (0.9 s) is fine, c=16 (2.4 s) is not.
    let findings = diagnose(
        &kv_starved(),
        &chat_slo(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::KvCacheCapacity).expect("kv finding");
    // c=8 still qualifies through the jump rule (0.25 s → 0.9 s, 3.6×).
    assert_eq!(f.step, Some(3));
    assert!(f.evidence.contains("up 3.6× from 250 ms"), "{}", f.evidence);
    // Without the jump, the first step over the objective is named, with
    // preemptions and the server's bucket estimate.
    let config = AnalysisConfig {
        ttft_jump_ratio: 100.0,
        ..cfg()
    };
    let findings = diagnose(
        &kv_starved(),
        &chat_slo(),
        &WorkloadHints::default(),
        &config,
    );
    let f = find(&findings, Verdict::KvCacheCapacity).expect("kv finding");
    assert_eq!(f.step, Some(4));
    for needle in [
        "p95 TTFT 2.4 s at concurrency 16 (objective 1.0 s)",
        "waiting = 12",
        "KV-cache usage mean 0.98",
        "12 preemptions",
        "bucket estimate",
    ] {
        assert!(
            f.evidence.contains(needle),
            "missing {needle:?} in {}",
            f.evidence
        );
    }
}

#[test]
fn prefill_heavy_sweep_is_prefill_bound() {
    let tput = [60.0, 110.0, 180.0, 240.0, 260.0, 265.0, 268.0];
    let ttft = [1.6, 1.9, 2.6, 3.9, 6.5, 12.0, 23.0];
    let itl = [0.020, 0.021, 0.022, 0.024, 0.026, 0.027, 0.028];
    let steps = with_server(sweep(&tput, &ttft, &itl), |_, e| {
        e.kv_cache_usage_mean = Some(0.35);
        e.gpu_util_mean = Some(0.95);
    });
    let workload = WorkloadHints {
        input_tokens: Some(8000),
        output_tokens: Some(256),
        ..WorkloadHints::default()
    };
    let findings = diagnose(&steps, &chat_slo(), &workload, &cfg());
    let f = find(&findings, Verdict::PrefillBound).expect("prefill finding");
    assert_eq!(f.step, Some(0));
    // Nothing queues at the floor, but without the engine's phase times the
    // time outside the engine cannot be ruled out: medium.
    assert_eq!(f.confidence, Confidence::Medium);
    for needle in [
        "p95 TTFT 1.6 s at concurrency 1 (objective 1.0 s)",
        "p95 ITL 20 ms is fine",
        "input 8000 tokens",
    ] {
        assert!(
            f.evidence.contains(needle),
            "missing {needle:?} in {}",
            f.evidence
        );
    }
    assert!(find(&findings, Verdict::DecodeBound).is_none());
    assert!(find(&findings, Verdict::KvCacheCapacity).is_none());
}

#[test]
fn prefill_bound_without_objectives_is_relative_to_the_floor() {
    let tput = [60.0, 110.0, 180.0, 240.0, 260.0, 265.0, 268.0];
    let ttft = [0.4, 0.6, 1.3, 2.5, 5.0, 10.0, 20.0];
    let itl = [0.020; 7];
    let steps = sweep(&tput, &ttft, &itl);
    let findings = diagnose(
        &steps,
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::PrefillBound).expect("prefill finding");
    assert_eq!(f.step, Some(2)); // 1.3 / 0.4 = 3.25× ≥ 3×
                                 // No KV-cache or waiting evidence: queueing for cache cannot be ruled out.
    assert_eq!(f.confidence, Confidence::Low);
    assert!(f.evidence.contains("KV-cache usage not reported"));
    // With the cache measured and roomy, the same evidence is medium.
    let steps = with_server(steps, |_, e| e.kv_cache_usage_mean = Some(0.4));
    let findings = diagnose(
        &steps,
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::PrefillBound).expect("prefill finding");
    assert_eq!(f.confidence, Confidence::Medium);
    assert!(f.evidence.contains("KV-cache usage 0.40"), "{}", f.evidence);
    assert!(
        f.evidence
            .contains("3.2× the concurrency-1 floor of 400 ms"),
        "{}",
        f.evidence
    );
}

/// The engine's own phase times read one level: prefill-dominated TTFT is
/// prefill-bound with high confidence; queue-dominated TTFT is not prefill
/// but a capacity limit, named once the running count shows which.
#[test]
fn the_ttft_breakdown_weighs_a_latency_verdict() {
    use llmwatch_core::analysis::{latency_breakdown, ClientMeans, ServerPhases};
    let tput = [60.0, 110.0, 180.0, 240.0, 260.0, 265.0, 268.0];
    let ttft = [0.4, 0.6, 1.3, 2.5, 5.0, 10.0, 20.0];
    let itl = [0.020; 7];
    let with_breakdown = |queue: f64, prefill: f64| {
        with_server(sweep(&tput, &ttft, &itl), move |_, e| {
            e.kv_cache_usage_mean = Some(0.4);
            let phases = ServerPhases {
                queue_s: Some(queue),
                prefill_s: Some(prefill),
                ttft_s: Some(queue + prefill + 0.05),
                ..ServerPhases::default()
            };
            let client = ClientMeans {
                ttft_s: Some(queue + prefill + 0.06),
                e2e_s: None,
            };
            e.latency_breakdown = latency_breakdown(&phases, &client, true).ok();
        })
    };
    let all = |steps: &[StepResult]| {
        diagnose(
            steps,
            &Objectives::default(),
            &WorkloadHints::default(),
            &cfg(),
        )
    };
    let judge = |steps: &[StepResult]| {
        find(&all(steps), Verdict::PrefillBound)
            .expect("prefill finding")
            .clone()
    };
    // Prefill 1.0 s of 1.16 s: the phase times agree, medium → high.
    let agrees = judge(&with_breakdown(0.1, 1.0));
    assert_eq!(agrees.confidence, Confidence::High, "{}", agrees.evidence);
    assert!(
        agrees
            .evidence
            .contains("phase times at concurrency 4 support it")
            && agrees.evidence.contains("prefill 1.0 s")
            && agrees.evidence.contains("prefill-dominated"),
        "{}",
        agrees.evidence
    );
    // Prefill the largest part but under half (0.45 of 1.01 s beside a
    // queue of 0.4 s): cited, not sure.
    let near = judge(&with_breakdown(0.4, 0.45));
    assert_eq!(near.confidence, Confidence::Medium, "{}", near.evidence);
    assert!(
        near.evidence.contains("prefill 450 ms"),
        "{}",
        near.evidence
    );
    // Queue 1.0 s of 1.16 s: the requests wait, so it is not prefill; with
    // the running count pinned at 3 and the cache at 0.40, a running cap.
    let queued = with_breakdown(1.0, 0.1);
    let findings = all(&queued);
    assert!(
        find(&findings, Verdict::PrefillBound).is_none(),
        "{findings:#?}"
    );
    let pinned = with_server(queued, |_, e| {
        e.requests_running_max = Some(3.0);
        e.requests_running_mean = Some(3.0);
        e.requests_waiting_mean = Some(5.0);
    });
    let findings = all(&pinned);
    let f = find(&findings, Verdict::SchedulerLimit).expect("scheduler finding");
    assert!(
        f.evidence.contains("queue 1.0 s (86 %)") && f.evidence.contains("support it"),
        "{}",
        f.evidence
    );
}

#[test]
fn decode_slow_sweep_is_decode_bound_table() {
    // (ITL p95 at c=1, objectives, expect decode-bound)
    let cases: [(f64, Objectives, bool); 4] = [
        (0.090, chat_slo(), true),
        (0.090, Objectives::default(), true), // over the 50 ms reference
        (0.020, chat_slo(), false),
        (0.040, Objectives::default(), false),
    ];
    for (itl1, objectives, want) in cases {
        let itl: Vec<f64> = (0..7).map(|i| itl1 * (1.0 + 0.1 * f64::from(i))).collect();
        let steps = with_server(sweep(&BALANCED_TPUT, &[0.3; 7], &itl), |_, e| {
            e.gpu_mem_bw_util_mean = Some(0.85);
        });
        let workload = WorkloadHints {
            output_tokens: Some(2000),
            ..WorkloadHints::default()
        };
        let findings = diagnose(&steps, &objectives, &workload, &cfg());
        let f = find(&findings, Verdict::DecodeBound);
        assert_eq!(
            f.is_some(),
            want,
            "itl {itl1} {objectives:?}: {findings:#?}"
        );
        if let Some(f) = f {
            assert_eq!(f.step, Some(0));
            assert_eq!(f.confidence, Confidence::High);
            assert!(
                f.evidence
                    .contains("p95 ITL 90 ms already at concurrency 1"),
                "{}",
                f.evidence
            );
            assert!(f.evidence.contains("memory-bandwidth utilisation 0.85"));
            assert!(f.evidence.contains("output 2000 tokens"));
        }
    }
}

fn flat_idle() -> Vec<StepResult> {
    let tput = [100.0, 190.0, 300.0, 310.0, 312.0, 315.0, 316.0];
    let ttft = [0.20, 0.21, 0.25, 0.45, 0.90, 1.80, 3.60];
    with_server(sweep(&tput, &ttft, &[0.02; 7]), |_, e| {
        e.gpu_util_mean = Some(0.22);
        e.kv_cache_usage_mean = Some(0.15);
        e.gpu_mem_used_ratio_mean = Some(0.91); // vLLM pre-allocation
    })
}

#[test]
fn flat_throughput_with_idle_gpu_is_outside_the_gpu() {
    let findings = diagnose(
        &flat_idle(),
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::OutsideGpu).expect("outside finding");
    assert_eq!(f.step, Some(3));
    assert_eq!(f.confidence, Confidence::High);
    for needle in [
        "throughput 300 → 310 output tok/s",
        "from concurrency 4 to concurrency 8",
        "GPU utilisation is 0.22",
        "KV-cache usage 0.15",
    ] {
        assert!(
            f.evidence.contains(needle),
            "missing {needle:?} in {}",
            f.evidence
        );
    }
    assert!(f.what_to_try.contains("do not buy GPUs"));
    assert!(!verdicts(&findings).contains(&Verdict::KvCacheCapacity));
}

#[test]
fn outside_the_gpu_points_at_the_client_self_check() {
    let mut steps = flat_idle();
    steps.push({
        let mut s = step(128, 200.0, 9.0, 0.05);
        s.client_bound = Some("scheduler lag 40 ms".into());
        s
    });
    let findings = diagnose(
        &steps,
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let f = find(&findings, Verdict::OutsideGpu).expect("outside finding");
    assert_eq!(f.confidence, Confidence::Medium);
    assert!(
        f.evidence.contains("failed the client self-check"),
        "{}",
        f.evidence
    );
    let cb = find(&findings, Verdict::ClientBound).expect("client-bound note");
    assert_eq!(cb.step, Some(7));
    assert!(cb.evidence.contains("scheduler lag 40 ms"));
}

/// A band whose throughput collapsed as the load doubled (a live window's
/// burst edge) is no plateau: nothing is blamed outside the GPU on it,
/// while the same idle GPU under a flat curve still is.
#[test]
fn a_collapse_of_throughput_is_not_read_as_a_plateau() {
    let tput = [206.0, 12.9, 14.0, 15.0, 15.5, 16.0, 16.2];
    let ttft = [0.05, 0.44, 0.90, 1.80, 3.60, 7.20, 14.4];
    let steps = with_server(sweep(&tput, &ttft, &[0.02; 7]), |_, e| {
        e.gpu_util_mean = Some(0.33);
        e.kv_cache_usage_mean = Some(0.0);
    });
    let findings = diagnose(
        &steps[..2],
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    assert!(
        find(&findings, Verdict::OutsideGpu).is_none(),
        "{findings:#?}"
    );
    // Past the collapse the curve is flat, and that is read.
    let findings = diagnose(
        &steps[1..],
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    assert!(
        find(&findings, Verdict::OutsideGpu).is_some(),
        "{findings:#?}"
    );
}

#[test]
fn busy_gpu_is_not_outside_the_gpu() {
    let steps = with_server(flat_idle(), |_, e| e.gpu_util_mean = Some(0.97));
    let findings = diagnose(
        &steps,
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    assert!(find(&findings, Verdict::OutsideGpu).is_none());
}

#[test]
fn unbalanced_gpu_memory_table() {
    // (min peak, max peak, gpu count, expect)
    let cases: [(f64, f64, Option<u32>, Option<Confidence>); 5] = [
        (0.55, 0.98, Some(2), Some(Confidence::High)),
        (0.55, 0.98, None, Some(Confidence::Medium)),
        (0.90, 0.92, Some(2), None), // even
        (0.40, 0.80, Some(2), None), // nobody full
        (0.55, 0.98, Some(1), None), // one GPU cannot be unbalanced
    ];
    for (lo, hi, count, want) in cases {
        let steps = with_server(balanced(), |i, e| {
            e.per_gpu_peak_mem_ratio_min = Some(lo - 0.01 * (6 - i) as f64);
            e.per_gpu_peak_mem_ratio_max = Some(hi);
            e.gpu_count = count;
        });
        let findings = diagnose(
            &steps,
            &Objectives::default(),
            &WorkloadHints::default(),
            &cfg(),
        );
        let f = find(&findings, Verdict::UnbalancedSplit);
        assert_eq!(f.map(|f| f.confidence), want, "{lo} {hi} {count:?}");
        if let Some(f) = f {
            // The widest gap is at the lowest load here.
            assert_eq!(f.step, Some(0));
            assert!(f.evidence.contains("0.98"), "{}", f.evidence);
            assert!(f.evidence.contains("0.49"), "{}", f.evidence);
        }
    }
}

#[test]
fn prefix_caching_table() {
    let shared = WorkloadHints {
        shared_prefix: true,
        ..WorkloadHints::default()
    };
    let expected = WorkloadHints {
        shared_prefix: true,
        expected_prefix_hit_rate: Some(0.8),
        ..WorkloadHints::default()
    };
    let off = [0.03, 0.02, 0.03, 0.02, 0.02, 0.01, 0.02];
    let evicted = [0.80, 0.80, 0.78, 0.75, 0.30, 0.10, 0.05];
    let healthy = [0.80, 0.80, 0.79, 0.78, 0.77, 0.76, 0.75];
    // (name, hit rates, workload, expected confidence, step, evidence needle)
    type Case<'a> = (
        &'a str,
        &'a [f64; 7],
        WorkloadHints,
        Option<Confidence>,
        Option<usize>,
        &'a str,
    );
    let cases: [Case; 6] = [
        (
            "off",
            &off,
            shared,
            Some(Confidence::High),
            Some(0),
            "caching looks off",
        ),
        (
            "evicted",
            &evicted,
            expected,
            Some(Confidence::Medium),
            Some(4),
            "falls from 0.80 at concurrency 1 to 0.30 at concurrency 16",
        ),
        (
            "evicted, default threshold",
            &evicted,
            shared,
            Some(Confidence::Medium),
            Some(5),
            "to 0.10 at concurrency 32",
        ),
        ("healthy", &healthy, expected, None, None, ""),
        (
            "not a shared-prefix workload",
            &off,
            WorkloadHints::default(),
            None,
            None,
            "",
        ),
        (
            "off vs expectation",
            &off,
            expected,
            Some(Confidence::High),
            Some(0),
            "(expected ≈ 0.80)",
        ),
    ];
    for (name, rates, workload, want, want_step, needle) in cases {
        let steps = with_server(balanced(), |i, e| e.prefix_cache_hit_rate = Some(rates[i]));
        let findings = diagnose(&steps, &Objectives::default(), &workload, &cfg());
        let f = find(&findings, Verdict::PrefixCachingIneffective);
        assert_eq!(f.map(|f| f.confidence), want, "{name}");
        if let Some(f) = f {
            assert_eq!(f.step, want_step, "{name}");
            assert!(f.evidence.contains(needle), "{name}: {}", f.evidence);
        }
    }
}

#[test]
fn prefix_hit_rate_not_exposed_is_low_confidence() {
    let shared = WorkloadHints {
        shared_prefix: true,
        ..WorkloadHints::default()
    };
    let findings = diagnose(&balanced(), &Objectives::default(), &shared, &cfg());
    let f = find(&findings, Verdict::PrefixCachingIneffective).expect("finding");
    assert_eq!(f.confidence, Confidence::Low);
}

#[test]
fn findings_are_sorted_by_confidence() {
    let steps = with_server(kv_starved(), |_, e| e.prefix_cache_hit_rate = None);
    let shared = WorkloadHints {
        shared_prefix: true,
        ..WorkloadHints::default()
    };
    let findings = diagnose(&steps, &Objectives::default(), &shared, &cfg());
    assert_eq!(
        verdicts(&findings),
        vec![Verdict::KvCacheCapacity, Verdict::PrefixCachingIneffective]
    );
}

// ------------------------------------------------------------ client-bound

#[test]
fn all_client_bound_sweep_gives_no_verdict_and_says_why() {
    let mut steps = balanced();
    for s in &mut steps {
        s.client_bound = Some("client CPU 100 %".into());
    }
    assert_eq!(saturation_point(&steps, &cfg()), None);
    assert_eq!(max_sustainable(&steps, &chat_slo()), None);
    let findings = diagnose(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    assert_eq!(verdicts(&findings), vec![Verdict::ClientBound]);
    assert_eq!(findings[0].confidence, Confidence::High);
    assert!(findings[0]
        .evidence
        .contains("all 7 steps were client-bound"));
    assert!(findings[0].evidence.contains("no saturation verdict"));

    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    assert_eq!(v.usable_steps, Vec::<usize>::new());
    assert_eq!(v.excluded_steps.len(), 7);
    let lines = summary_lines(&v);
    assert!(
        lines.iter().any(|l| l.starts_with("No saturation verdict")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("client-bound steps (high confidence)")),
        "{lines:#?}"
    );
}

// ------------------------------------------------------------------- summary

#[test]
fn summary_of_a_balanced_sweep() {
    let v = analyze_sweep(&balanced(), &chat_slo(), &WorkloadHints::default(), &cfg());
    assert_eq!(v.saturation.as_ref().map(|s| s.step), Some(4));
    assert_eq!(v.sustainable.as_ref().map(|s| s.step), Some(5));
    assert_eq!(v.first_miss.as_ref().map(|m| m.step), Some(6));
    assert_eq!(
        v.load_range,
        Some((Load::Concurrency(1), Load::Concurrency(64)))
    );
    let lines = summary_lines(&v);
    assert_eq!(
        lines[0],
        "7 step(s) from concurrency 1 to concurrency 64; 7 usable, 0 left out."
    );
    assert_eq!(
        lines[1],
        "Judged against the objectives (p95 TTFT ≤ 1.0 s, p95 ITL ≤ 50 ms, error rate ≤ 1 %)."
    );
    assert!(
        lines[2].starts_with("Saturation at concurrency 16: 1100 output tok/s (4.30 req/s)"),
        "{lines:#?}"
    );
    assert!(
        lines[3].starts_with("Max sustainable load: concurrency 32 (1150 output tok/s")
            && lines[3].contains("p95 TTFT ≤ 1.0 s, p95 ITL ≤ 50 ms, error rate ≤ 1 %")
            && lines[3].contains("concurrency 64 misses: p95 TTFT 1.9 s > 1.0 s"),
        "{lines:#?}"
    );
}

#[test]
fn summary_when_even_the_floor_misses() {
    let steps = balanced();
    let tight = Objectives {
        ttft_p95: Some(0.1),
        ..chat_slo()
    };
    let v = analyze_sweep(&steps, &tight, &WorkloadHints::default(), &cfg());
    assert_eq!(v.sustainable, None);
    let lines = summary_lines(&v);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("already at concurrency 1 p95 TTFT 200 ms > 100 ms")),
        "{lines:#?}"
    );
}

#[test]
fn summary_mentions_bucket_estimates_when_evidence_uses_them() {
    let v = analyze_sweep(
        &kv_starved(),
        &Objectives::default(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let lines = summary_lines(&v);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("a guess within the bucket")),
        "{lines:#?}"
    );
}

// ---------------------------------------------------------------- edge cases

#[test]
fn empty_sweep() {
    let steps: Vec<StepResult> = Vec::new();
    assert_eq!(saturation_point(&steps, &cfg()), None);
    assert_eq!(max_sustainable(&steps, &chat_slo()), None);
    assert!(diagnose(&steps, &chat_slo(), &WorkloadHints::default(), &cfg()).is_empty());
    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    assert_eq!(
        summary_lines(&v),
        vec!["The sweep has no steps: nothing to judge.".to_string()]
    );
}

#[test]
fn one_step_sweep() {
    let steps = vec![step(1, 100.0, 0.2, 0.02)];
    assert_eq!(saturation_point(&steps, &cfg()), None);
    assert_eq!(
        max_sustainable(&steps, &chat_slo()).map(|s| s.step),
        Some(0)
    );
    assert!(diagnose(&steps, &chat_slo(), &WorkloadHints::default(), &cfg()).is_empty());
    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    let lines = summary_lines(&v);
    assert_eq!(
        lines[0],
        "1 step(s) at concurrency 1; 1 usable, 0 left out."
    );
    assert!(lines[2].starts_with("No saturation point"), "{lines:#?}");
}

#[test]
fn missing_server_evidence_still_gives_client_verdicts() {
    // balanced() has no server evidence at all.
    let v = analyze_sweep(&balanced(), &chat_slo(), &WorkloadHints::default(), &cfg());
    assert!(v.saturation.is_some());
    for f in &v.findings {
        assert!(
            matches!(f.verdict, Verdict::PrefillBound | Verdict::DecodeBound),
            "a server-evidence rule fired without evidence: {f:?}"
        );
    }
}

#[test]
fn invalid_steps_are_excluded_not_fatal() {
    let mut steps = balanced();
    steps[1].output_token_throughput = f64::NAN;
    steps[2].load = Load::RequestRate(f64::INFINITY);
    steps[3].requests_ok = 0; // nothing ran at all
    let v = analyze_sweep(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
    assert_eq!(
        v.excluded_steps.iter().map(|e| e.step).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(
        v.saturation.as_ref().map(|s| s.load),
        Some(Load::Concurrency(16))
    );
    for l in summary_lines(&v) {
        assert!(!l.contains("NaN") && !l.contains("inf"), "{l}");
    }
}

fn all_floats(v: &llmwatch_core::analysis::SweepVerdict) -> Vec<f64> {
    let mut out = Vec::new();
    if let Some(s) = &v.saturation {
        out.extend([
            s.throughput,
            s.request_throughput,
            s.output_token_throughput,
            s.gain_per_doubling,
            s.threshold,
            s.peak_throughput,
        ]);
    }
    if let Some(s) = &v.sustainable {
        out.extend([
            s.request_throughput,
            s.output_token_throughput,
            s.error_rate,
        ]);
        out.extend(s.ttft_p95);
        out.extend(s.itl_p95);
    }
    if let Some(top) = &v.highest_step {
        out.push(top.throughput);
        out.extend(top.gain_per_doubling);
    }
    out
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..5000.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-1.0),
        1 => Just(0.0),
    ]
}

fn opt_f64() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![1 => Just(None), 3 => any_f64().prop_map(Some)]
}

prop_compose! {
    fn arb_step()(
        c in 0u32..200,
        tput in any_f64(),
        rps in any_f64(),
        ttft in opt_f64(),
        itl in opt_f64(),
        e2e in opt_f64(),
        err in any_f64(),
        ok in 0u64..50,
        failed in 0u64..5,
        cb in prop::bool::weighted(0.2),
        kv in opt_f64(),
        waiting in opt_f64(),
        util in opt_f64(),
        hit in opt_f64(),
        lo in opt_f64(),
        hi in opt_f64(),
    ) -> StepResult {
        let mut s = StepResult::at(Load::Concurrency(c));
        s.output_token_throughput = tput;
        s.request_throughput = rps;
        s.ttft.p95 = ttft;
        s.itl.p95 = itl;
        s.e2e.p95 = e2e;
        s.error_rate = err;
        s.requests_ok = ok;
        s.requests_failed = failed;
        s.client_bound = cb.then(|| "cpu".to_string());
        s.server.kv_cache_usage_mean = kv;
        s.server.requests_waiting_mean = waiting;
        s.server.gpu_util_mean = util;
        s.server.prefix_cache_hit_rate = hit;
        s.server.per_gpu_peak_mem_ratio_min = lo;
        s.server.per_gpu_peak_mem_ratio_max = hi;
        s
    }
}

proptest! {
    #[test]
    fn outputs_are_nan_free(steps in prop::collection::vec(arb_step(), 0..10), shared in any::<bool>()) {
        let workload = WorkloadHints { shared_prefix: shared, ..WorkloadHints::default() };
        let v = analyze_sweep(&steps, &chat_slo(), &workload, &cfg());
        for x in all_floats(&v) {
            prop_assert!(x.is_finite(), "{x} in {v:?}");
        }
        for l in summary_lines(&v) {
            prop_assert!(!l.contains("NaN") && !l.contains("inf") && !l.contains("unknown"), "{l}");
        }
    }
}

// --------------------------------------------------------------------- cards

fn base_card() -> ExperimentCard {
    ExperimentCard {
        model: Some("meta-llama/Llama-3.1-8B-Instruct".into()),
        quantization: Some("bf16".into()),
        max_context_len: Some(8192),
        gpu_count: Some(1),
        gpu_type: Some("NVIDIA H100 80GB HBM3".into()),
        tensor_parallel: Some(1),
        pipeline_parallel: Some(1),
        engine: Some("vllm".into()),
        engine_version: Some("0.11.0".into()),
        driver_version: Some("570.124.06".into()),
        cuda_version: Some("12.8".into()),
        input_tokens: Some(512),
        output_tokens: Some(512),
        sampling: Some("max_tokens=512, ignore_eos".into()),
        temperature: Some(0.0),
        prompt_kind: Some("random".into()),
        num_gpu_blocks: Some(30000),
        ..ExperimentCard::default()
    }
}

#[test]
fn card_comparison_table() {
    type Edit = fn(&mut ExperimentCard);
    // (name, edit to b, differing field names, warning?)
    let cases: [(&str, Edit, &[&str], bool); 6] = [
        ("identical", |_| {}, &[], false),
        (
            "one field",
            |c| c.max_context_len = Some(4096),
            &["max_context_len"],
            false,
        ),
        (
            "two fields",
            |c| {
                c.max_context_len = Some(4096);
                c.kv_cache_dtype = None;
                c.tensor_parallel = Some(2);
            },
            &["max_context_len", "tensor_parallel"],
            true,
        ),
        (
            "one field and a derived one",
            |c| {
                c.max_context_len = Some(4096);
                c.num_gpu_blocks = Some(31000);
            },
            &["max_context_len", "num_gpu_blocks"],
            false,
        ),
        (
            "one field and one unknown on one side",
            |c| {
                c.temperature = Some(0.7);
                c.driver_version = None;
            },
            &["driver_version", "temperature"],
            false,
        ),
        (
            "user fields count",
            |c| {
                c.user.insert("note".into(), "after kernel upgrade".into());
                c.engine_version = Some("0.11.1".into());
            },
            &["engine_version"],
            true,
        ),
    ];
    for (name, edit, want_fields, want_warning) in cases {
        let mut a = base_card();
        a.user.insert("note".into(), "baseline".into());
        let mut b = a.clone();
        edit(&mut b);
        let diff = compare_cards(&a, &b);
        let mut got: Vec<&str> = diff
            .differing
            .iter()
            .map(|(f, _, _)| f.as_str())
            .filter(|f| !f.starts_with("user."))
            .collect();
        got.sort_unstable();
        assert_eq!(got, want_fields, "{name}");
        assert_eq!(diff.warning.is_some(), want_warning, "{name}: {diff:?}");
    }
}

#[test]
fn two_changes_warn_and_show_values() {
    let a = base_card();
    let mut b = base_card();
    b.max_context_len = Some(4096);
    b.user.insert("gpu_clock".into(), "locked".into());
    let mut a2 = a.clone();
    a2.user.insert("gpu_clock".into(), "default".into());
    let diff = compare_cards(&a2, &b);
    assert_eq!(
        diff.differing,
        vec![
            (
                "max_context_len".to_string(),
                Some("8192".to_string()),
                Some("4096".to_string())
            ),
            (
                "user.gpu_clock".to_string(),
                Some("default".to_string()),
                Some("locked".to_string())
            ),
        ]
    );
    let w = diff.warning.expect("warning");
    assert!(
        w.contains("2 fields changed (max_context_len, user.gpu_clock)"),
        "{w}"
    );
    assert!(w.contains("change one thing at a time"));
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn card_from_vllm_and_dcgm_labels() {
    let cache = labels(&[
        ("block_size", "16"),
        ("cache_dtype", "fp8"),
        ("num_gpu_blocks", "27865"),
        ("enable_prefix_caching", "True"),
        ("gpu_memory_utilization", "0.9"),
        ("swap_space", "4"),
        ("num_cpu_blocks", "garbage"),
    ]);
    let gpu = |i: &str, uuid: &str| {
        labels(&[
            ("gpu", i),
            ("UUID", uuid),
            ("device", "nvidia0"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
            ("Hostname", "node-1"),
            ("DCGM_FI_DRIVER_VERSION", "570.124.06"),
        ])
    };
    // Two metrics per GPU, as dcgm-exporter exports one series per metric.
    let dcgm = vec![
        gpu("0", "GPU-a"),
        gpu("1", "GPU-b"),
        gpu("0", "GPU-a"),
        gpu("1", "GPU-b"),
    ];
    let card = card_from_info(&cache, &dcgm);
    assert_eq!(card.kv_block_size, Some(16));
    assert_eq!(card.kv_cache_dtype.as_deref(), Some("fp8"));
    assert_eq!(card.num_gpu_blocks, Some(27865));
    assert_eq!(card.prefix_caching, Some(true));
    assert_eq!(card.gpu_memory_utilization, Some(0.9));
    assert_eq!(card.engine.as_deref(), Some("vllm"));
    assert_eq!(card.gpu_count, Some(2));
    assert_eq!(card.gpu_type.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(card.driver_version.as_deref(), Some("570.124.06"));
    assert_eq!(card.user, BTreeMap::new());
}

#[test]
fn card_labels_do_not_overwrite_user_values_and_tolerate_garbage() {
    let mut card = ExperimentCard {
        gpu_type: Some("H100 SXM (user)".into()),
        prefix_caching: Some(false),
        ..ExperimentCard::default()
    };
    card.apply_vllm_cache_config(&labels(&[
        ("enable_prefix_caching", "True"),
        ("block_size", "sixteen"),
    ]));
    assert_eq!(card.prefix_caching, Some(false));
    assert_eq!(card.kv_block_size, None);
    // No UUID: GPUs told apart by host + index; a mixed host joins names.
    card.apply_dcgm_labels(&[
        labels(&[("gpu", "0"), ("Hostname", "a"), ("modelName", "NVIDIA L4")]),
        labels(&[
            ("gpu", "0"),
            ("Hostname", "b"),
            ("modelName", "NVIDIA A10G"),
        ]),
        labels(&[("gpu", ""), ("modelName", " ")]),
    ]);
    assert_eq!(card.gpu_count, Some(2));
    assert_eq!(card.gpu_type.as_deref(), Some("H100 SXM (user)"));
    let mixed = card_from_info(
        &[],
        &[
            labels(&[("gpu", "0"), ("modelName", "NVIDIA L4")]),
            labels(&[("gpu", "1"), ("modelName", "NVIDIA A10G")]),
        ],
    );
    assert_eq!(mixed.gpu_type.as_deref(), Some("NVIDIA A10G + NVIDIA L4"));
    assert_eq!(mixed.engine, None);
}

#[test]
fn summary_of_a_kv_starved_sweep_reads_in_words() {
    let v = analyze_sweep(
        &kv_starved(),
        &chat_slo(),
        &WorkloadHints::default(),
        &cfg(),
    );
    let lines = summary_lines(&v);
    for l in &lines {
        println!("{l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Saturation at concurrency 16")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "KV-cache capacity (medium confidence): p95 TTFT 900 ms at concurrency 8"
        )),
        "{lines:#?}"
    );
}

/// A target that starts failing is an outage, not "outside the GPU": the
/// failing step's zero throughput must not read as a plateau.
#[test]
fn failing_steps_are_not_an_outside_the_gpu_plateau() {
    use llmwatch_core::analysis::*;
    let step = |c: u32, tok: f64, failed: u64| {
        let mut s = StepResult::at(Load::Concurrency(c));
        s.requests_ok = if failed > 0 { 0 } else { 20 };
        s.requests_failed = failed;
        s.wall_time_s = 2.0;
        s.output_token_throughput = tok;
        s.request_throughput = tok / 100.0;
        s.error_rate = if failed > 0 { 1.0 } else { 0.0 };
        s.ttft = Quantiles::new(0.05, 0.08, 0.09);
        s.itl = Quantiles::new(0.01, 0.012, 0.013);
        s.e2e = Quantiles::new(1.0, 1.2, 1.3);
        s.server.gpu_util_mean = Some(0.1);
        s.server.kv_cache_usage_mean = Some(0.2);
        s
    };
    let steps = vec![step(1, 300.0, 0), step(2, 580.0, 0), step(4, 0.0, 20)];
    let findings = diagnose(
        &steps,
        &Objectives::default(),
        &WorkloadHints::default(),
        &AnalysisConfig::default(),
    );
    assert!(
        findings.iter().all(|f| f.verdict != Verdict::OutsideGpu),
        "{findings:?}"
    );
}

/// Issue 38: speculative decoding's acceptance is cited where ITL is high,
/// and a low one is called low; a prefill→decode KV transfer that takes most
/// of TTFT is named, with what to try for it.
mod evidence_2026 {
    use super::*;
    use llmwatch_core::analysis::{latency_breakdown, ClientMeans, ServerPhases};

    fn decode_slow_with_acceptance(rate: f64) -> Finding {
        let itl: Vec<f64> = (0..7).map(|i| 0.09 * (1.0 + 0.1 * f64::from(i))).collect();
        let steps = with_server(sweep(&BALANCED_TPUT, &[0.3; 7], &itl), |_, e| {
            e.spec_decode_acceptance_rate = Some(rate);
            e.spec_decode_accept_length = Some(1.0 + 3.0 * rate);
        });
        let findings = diagnose(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
        find(&findings, Verdict::DecodeBound)
            .expect("decode-bound")
            .clone()
    }

    #[test]
    fn low_spec_decode_acceptance_is_said_where_itl_is_high() {
        let low = decode_slow_with_acceptance(0.2);
        assert!(
            low.evidence.contains(
                "speculative decoding accepts 20 % of draft tokens (1.60 tokens a step), low"
            ),
            "{}",
            low.evidence
        );
        let good = decode_slow_with_acceptance(0.8);
        assert!(
            good.evidence.contains(
                "accepts 80 % of draft tokens (3.40 tokens a step), so speculation is not"
            ),
            "{}",
            good.evidence
        );
    }

    #[test]
    fn ttft_mostly_kv_transfer_is_named_outside_the_gpu() {
        // Each level: queue 5 ms, prefill 20 ms, 1.275 s more before the
        // first token of which the NIXL transfer is 1.2 s.
        let tput = [60.0, 110.0, 180.0, 240.0, 260.0, 265.0, 268.0];
        let steps = with_server(sweep(&tput, &[1.3; 7], &[0.02; 7]), |_, e| {
            let phases = ServerPhases {
                queue_s: Some(0.005),
                prefill_s: Some(0.02),
                ttft_s: Some(0.03),
                ..ServerPhases::default()
            };
            let client = ClientMeans {
                ttft_s: Some(1.3),
                e2e_s: None,
            };
            e.latency_breakdown = latency_breakdown(&phases, &client, true).ok();
            e.kv_transfer_time_mean = Some(1.2);
            e.requests_waiting_mean = Some(0.0);
            e.kv_cache_usage_mean = Some(0.2);
        });
        let findings = diagnose(&steps, &chat_slo(), &WorkloadHints::default(), &cfg());
        let f = find(&findings, Verdict::OutsideGpu).unwrap_or_else(|| panic!("{findings:#?}"));
        assert!(f.evidence.contains("KV transfer 1.2"), "{}", f.evidence);
        assert!(
            f.evidence
                .contains("the prefill→decode KV transfer is the largest part"),
            "{}",
            f.evidence
        );
        assert!(f.what_to_try.contains("KV transfer"), "{}", f.what_to_try);
        assert!(
            find(&findings, Verdict::PrefillBound).is_none(),
            "{findings:#?}"
        );
        // Without the transfer histogram the same time is only "outside the
        // engine", and what to try is the generic one.
        let plain = with_server(steps.clone(), |_, e| e.kv_transfer_time_mean = None);
        let findings = diagnose(&plain, &chat_slo(), &WorkloadHints::default(), &cfg());
        let f = find(&findings, Verdict::OutsideGpu).expect("outside");
        assert!(!f.what_to_try.contains("KV transfer"), "{}", f.what_to_try);
    }
}
