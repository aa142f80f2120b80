//! Window semantics of `signals_between`, end to end through `normalize` on
//! hand-built pages (no parser involved), with values computed by hand.

use std::borrow::Cow;

use llmwatch_core::catalog::{normalize, CatalogMetric, Engine, NormalizedSample, Part};
use llmwatch_core::exposition::{Exposition, Format, Label, MetricFamily, MetricType, Sample};
use llmwatch_core::signals::{signals_between, Signal, Snapshot};

const INF: f64 = f64::INFINITY;

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample<'static> {
    Sample {
        name: Cow::Owned(name.to_owned()),
        labels: labels
            .iter()
            .map(|(n, v)| Label {
                name: Cow::Owned((*n).to_owned()),
                value: Cow::Owned((*v).to_owned()),
            })
            .collect(),
        value,
        timestamp: None,
        exemplar: None,
    }
}

fn page(samples: Vec<Sample<'static>>) -> Exposition<'static> {
    Exposition {
        format: Format::PrometheusText,
        families: samples
            .into_iter()
            .map(|s| MetricFamily {
                name: s.name.clone(),
                metric_type: MetricType::Unknown,
                help: None,
                unit: None,
                samples: vec![s],
            })
            .collect(),
    }
}

/// A vLLM V1 page (label `le` placed between `engine` and `model_name`, as
/// vLLM writes it) with the given counters and TTFT buckets (≤0.1, ≤1, +Inf).
fn vllm_page(
    hits: f64,
    queries: f64,
    prompt: f64,
    generation: f64,
    finished: f64,
    preemptions: f64,
    ttft: [f64; 3],
) -> Exposition<'static> {
    let l: &[(&str, &str)] = &[("engine", "0"), ("model_name", "m")];
    let mut samples = vec![
        sample("vllm:kv_cache_usage_perc", l, 0.5),
        sample("vllm:num_requests_running", l, 3.0),
        sample("vllm:num_requests_waiting", l, 1.0),
        sample("vllm:prefix_cache_hits_total", l, hits),
        sample("vllm:prefix_cache_queries_total", l, queries),
        sample("vllm:prompt_tokens_total", l, prompt),
        sample("vllm:generation_tokens_total", l, generation),
        sample("vllm:num_preemptions_total", l, preemptions),
        sample(
            "vllm:request_success_total",
            &[
                ("engine", "0"),
                ("finished_reason", "stop"),
                ("model_name", "m"),
            ],
            finished,
        ),
        sample(
            "vllm:request_success_total",
            &[
                ("engine", "0"),
                ("finished_reason", "length"),
                ("model_name", "m"),
            ],
            0.0,
        ),
    ];
    for (le, count) in ["0.1", "1.0", "+Inf"].into_iter().zip(ttft) {
        samples.push(sample(
            "vllm:time_to_first_token_seconds_bucket",
            &[("engine", "0"), ("le", le), ("model_name", "m")],
            count,
        ));
    }
    samples.push(sample("vllm:time_to_first_token_seconds_count", l, ttft[2]));
    samples.push(sample(
        "vllm:time_to_first_token_seconds_sum",
        l,
        ttft[2] * 0.2,
    ));
    page(samples)
}

fn get(signals: &[(Signal, f64)], signal: Signal) -> Option<f64> {
    signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v)
}

fn assert_close(actual: Option<f64>, expected: f64) {
    let actual = actual.expect("signal present");
    assert!(
        (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0),
        "{actual} != {expected}"
    );
}

#[test]
fn window_rates_hit_rate_and_p95_from_bucket_deltas() {
    let before = vllm_page(100.0, 400.0, 1000.0, 5000.0, 10.0, 2.0, [10.0, 20.0, 20.0]);
    let after = vllm_page(250.0, 700.0, 3000.0, 9000.0, 30.0, 5.0, [10.0, 30.0, 40.0]);
    let prev = normalize(Engine::Vllm, &before);
    let cur = normalize(Engine::Vllm, &after);
    let s = signals_between(
        Some(Snapshot {
            ts: 1000.0,
            samples: &prev,
        }),
        Snapshot {
            ts: 1010.0,
            samples: &cur,
        },
    );
    // Gauges from cur.
    assert_close(get(&s, Signal::KvCacheUsage), 0.5);
    assert_close(get(&s, Signal::RequestsRunning), 3.0);
    assert_close(get(&s, Signal::RequestsWaiting), 1.0);
    // Δ/Δt over 10 s.
    assert_close(get(&s, Signal::PromptTokensRate), 200.0);
    assert_close(get(&s, Signal::GenerationTokensRate), 400.0);
    assert_close(get(&s, Signal::RequestRate), 2.0);
    assert_close(get(&s, Signal::PreemptionsRate), 0.3);
    // Δhits 150 / Δqueries 300.
    assert_close(get(&s, Signal::PrefixCacheHitRate), 0.5);
    // Bucket deltas: ≤0.1: 0, ≤1: 10, +Inf: 20. p95 rank 19 → +Inf bucket
    // → highest finite bound 1.0; p50 rank 10 → (0.1, 1] holding 0→10 → 1.0.
    assert_close(get(&s, Signal::ServerTtftP95), 1.0);
    assert_close(get(&s, Signal::ServerTtftP50), 1.0);
    // Δsum 4 / Δcount 20.
    assert_close(get(&s, Signal::ServerTtftMean), 0.2);

    // Lifetime view of the same `after` page.
    let single = signals_between(
        None,
        Snapshot {
            ts: 1010.0,
            samples: &cur,
        },
    );
    assert_eq!(get(&single, Signal::PromptTokensRate), None);
    assert_eq!(get(&single, Signal::RequestRate), None);
    assert_close(get(&single, Signal::PrefixCacheHitRate), 250.0 / 700.0);
    // lifetime buckets 10, 30, 40: p50 rank 20 → (0.1, 1] holding 10→30 → 0.1 + 0.9·0.5.
    assert_close(get(&single, Signal::ServerTtftP50), 0.55);
}

#[test]
fn no_new_observations_and_no_new_queries_omit_signals() {
    let p = vllm_page(100.0, 400.0, 1000.0, 5000.0, 10.0, 2.0, [10.0, 20.0, 20.0]);
    let samples = normalize(Engine::Vllm, &p);
    let s = signals_between(
        Some(Snapshot {
            ts: 0.0,
            samples: &samples,
        }),
        Snapshot {
            ts: 5.0,
            samples: &samples,
        },
    );
    assert_eq!(get(&s, Signal::PrefixCacheHitRate), None);
    assert_eq!(get(&s, Signal::ServerTtftP95), None);
    assert_eq!(get(&s, Signal::ServerTtftMean), None);
    assert_close(get(&s, Signal::PromptTokensRate), 0.0);
    // Δt = 0 → no rates at all (never inf/NaN).
    let same_time = signals_between(
        Some(Snapshot {
            ts: 5.0,
            samples: &samples,
        }),
        Snapshot {
            ts: 5.0,
            samples: &samples,
        },
    );
    assert_eq!(get(&same_time, Signal::PromptTokensRate), None);
    assert!(same_time.iter().all(|(_, v)| v.is_finite()));
}

#[test]
fn counter_reset_rebaselines_rates_hit_rate_and_histograms() {
    let before = vllm_page(
        900.0,
        1000.0,
        50_000.0,
        90_000.0,
        100.0,
        7.0,
        [50.0, 90.0, 100.0],
    );
    // Server restarted: every counter smaller than before.
    let after = vllm_page(30.0, 40.0, 600.0, 1200.0, 4.0, 1.0, [1.0, 3.0, 4.0]);
    let prev = normalize(Engine::Vllm, &before);
    let cur = normalize(Engine::Vllm, &after);
    let s = signals_between(
        Some(Snapshot {
            ts: 0.0,
            samples: &prev,
        }),
        Snapshot {
            ts: 20.0,
            samples: &cur,
        },
    );
    assert_close(get(&s, Signal::PromptTokensRate), 30.0);
    assert_close(get(&s, Signal::GenerationTokensRate), 60.0);
    assert_close(get(&s, Signal::RequestRate), 0.2);
    assert_close(get(&s, Signal::PreemptionsRate), 0.05);
    assert_close(get(&s, Signal::PrefixCacheHitRate), 0.75);
    // Fresh buckets 1, 3, 4: p95 rank 3.8 → +Inf → 1.0; p50 rank 2 → (0.1, 1]
    // holding 1→3 → 0.1 + 0.9·0.5.
    assert_close(get(&s, Signal::ServerTtftP95), 1.0);
    assert_close(get(&s, Signal::ServerTtftP50), 0.55);
    assert_close(get(&s, Signal::ServerTtftMean), 0.2);
}

#[test]
fn per_rank_aggregation_sglang_tp_and_dp() {
    // 2 DP groups × 2 TP ranks. TP ranks repeat their group's scheduler view.
    let mut samples = Vec::new();
    for (dp, running, queue, usage, retracted) in
        [("0", 10.0, 4.0, 0.6, 3.0), ("1", 7.0, 1.0, 0.9, 2.0)]
    {
        for tp in ["0", "1"] {
            let l: &[(&str, &str)] = &[
                ("dp_rank", dp),
                ("engine_type", "unified"),
                ("model_name", "m"),
                ("pp_rank", "0"),
                ("tp_rank", tp),
            ];
            samples.push(sample("sglang:num_running_reqs", l, running));
            samples.push(sample("sglang:num_queue_reqs", l, queue));
            samples.push(sample("sglang:token_usage", l, usage));
            samples.push(sample("sglang:num_retracted_requests_total", l, retracted));
        }
    }
    let normalized = normalize(Engine::Sglang, &page(samples));
    let s = signals_between(
        None,
        Snapshot {
            ts: 0.0,
            samples: &normalized,
        },
    );
    assert_close(get(&s, Signal::RequestsRunning), 17.0);
    assert_close(get(&s, Signal::RequestsWaiting), 5.0);
    assert_close(get(&s, Signal::KvCacheUsage), 0.9);
    let preemptions: Vec<&NormalizedSample> = normalized
        .iter()
        .filter(|s| s.metric == CatalogMetric::PreemptionsTotal)
        .collect();
    assert_eq!(preemptions.len(), 1);
    assert_eq!(preemptions[0].value, 5.0);
    assert!(preemptions[0].labels.is_empty());
}

#[test]
fn per_rank_aggregation_vllm_data_parallel_histograms() {
    let mut samples = Vec::new();
    for (engine, buckets) in [("0", [2.0, 4.0]), ("1", [0.0, 6.0])] {
        for (le, count) in ["0.5", "+Inf"].into_iter().zip(buckets) {
            samples.push(sample(
                "vllm:e2e_request_latency_seconds_bucket",
                &[("engine", engine), ("le", le), ("model_name", "m")],
                count,
            ));
        }
        samples.push(sample(
            "vllm:num_requests_running",
            &[("engine", engine), ("model_name", "m")],
            2.0,
        ));
    }
    let normalized = normalize(Engine::Vllm, &page(samples));
    let e2e: Vec<(Part, f64)> = normalized
        .iter()
        .filter(|s| s.metric == CatalogMetric::E2eSeconds)
        .map(|s| (s.part, s.value))
        .collect();
    assert_eq!(
        e2e,
        vec![(Part::Bucket(0.5), 2.0), (Part::Bucket(INF), 10.0)]
    );
    let s = signals_between(
        None,
        Snapshot {
            ts: 0.0,
            samples: &normalized,
        },
    );
    // DP engines add up.
    assert_close(get(&s, Signal::RequestsRunning), 4.0);
    // merged: 2 of 10 ≤ 0.5 → p95 in +Inf → 0.5.
    assert_close(get(&s, Signal::ServerE2eP95), 0.5);
}

#[test]
fn percent_vs_ratio_normalisation() {
    let gpu = |i: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("gpu", i),
            ("UUID", if i == "0" { "GPU-a" } else { "GPU-b" }),
        ]
    };
    // NVML-style percentages (DEV_*_UTIL) become ratios…
    let dev = page(vec![
        sample("DCGM_FI_DEV_GPU_UTIL", &gpu("0"), 80.0),
        sample("DCGM_FI_DEV_GPU_UTIL", &gpu("1"), 40.0),
        sample("DCGM_FI_DEV_MEM_COPY_UTIL", &gpu("0"), 30.0),
        sample("DCGM_FI_DEV_MEM_COPY_UTIL", &gpu("1"), 10.0),
        sample("DCGM_FI_DEV_FB_USED", &gpu("0"), 3000.0),
        sample("DCGM_FI_DEV_FB_FREE", &gpu("0"), 1000.0),
        sample("DCGM_FI_DEV_FB_USED", &gpu("1"), 1000.0),
        sample("DCGM_FI_DEV_FB_FREE", &gpu("1"), 2500.0),
        sample("DCGM_FI_DEV_FB_RESERVED", &gpu("1"), 500.0),
    ]);
    let normalized = normalize(Engine::Dcgm, &dev);
    let s = signals_between(
        None,
        Snapshot {
            ts: 0.0,
            samples: &normalized,
        },
    );
    assert_close(get(&s, Signal::GpuUtil), 0.6);
    assert_close(get(&s, Signal::GpuMemBwUtil), 0.2);
    assert_close(get(&s, Signal::GpuMemUsedBytes), 4000.0 * 1_048_576.0);
    assert_close(get(&s, Signal::GpuMemUsedRatio), 0.5);
    assert_close(get(&s, Signal::GpuMemUsedRatioMax), 0.75);
    assert_close(get(&s, Signal::GpuMemUsedRatioMin), 0.25);
    assert_close(get(&s, Signal::GpuCount), 2.0);

    // …while DCP PROF_* and the "perc"/"percent"-named LLM gauges already are.
    let prof = page(vec![
        sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &gpu("0"), 0.8),
        sample("DCGM_FI_DEV_GPU_UTIL", &gpu("0"), 99.0),
        sample("DCGM_FI_PROF_DRAM_ACTIVE", &gpu("0"), 0.3),
    ]);
    let normalized = normalize(Engine::Dcgm, &prof);
    let s = signals_between(
        None,
        Snapshot {
            ts: 0.0,
            samples: &normalized,
        },
    );
    assert_close(get(&s, Signal::GpuUtil), 0.8);
    assert_close(get(&s, Signal::GpuMemBwUtil), 0.3);

    let nim = page(vec![sample(
        "gpu_cache_usage_perc",
        &[("model_name", "m")],
        0.42,
    )]);
    let dynamo = page(vec![sample(
        "dynamo_component_kvstats_gpu_cache_usage_percent",
        &[("dynamo_component", "backend")],
        0.42,
    )]);
    for (engine, p) in [(Engine::Nim, nim), (Engine::Dynamo, dynamo)] {
        let normalized = normalize(engine, &p);
        let s = signals_between(
            None,
            Snapshot {
                ts: 0.0,
                samples: &normalized,
            },
        );
        assert_close(get(&s, Signal::KvCacheUsage), 0.42);
    }
}

#[test]
fn gauge_hit_rate_engines_use_the_gauge_in_both_modes() {
    let p = page(vec![sample(
        "sglang:cache_hit_rate",
        &[("tp_rank", "0")],
        0.3,
    )]);
    let normalized = normalize(Engine::Sglang, &p);
    let snap = Snapshot {
        ts: 1.0,
        samples: &normalized,
    };
    let earlier = Snapshot {
        ts: 0.0,
        samples: &normalized,
    };
    assert_close(
        get(&signals_between(None, snap), Signal::PrefixCacheHitRate),
        0.3,
    );
    assert_close(
        get(
            &signals_between(Some(earlier), snap),
            Signal::PrefixCacheHitRate,
        ),
        0.3,
    );
}

#[test]
fn triton_milliseconds_become_seconds() {
    let l: &[(&str, &str)] = &[("model", "ensemble"), ("version", "1")];
    let mut samples = Vec::new();
    for (le, count) in [("100", 1.0), ("1000", 4.0), ("+Inf", 4.0)] {
        let mut labels = l.to_vec();
        labels.push(("le", le));
        samples.push(sample(
            "nv_inference_first_response_histogram_ms_bucket",
            &labels,
            count,
        ));
    }
    samples.push(sample(
        "nv_inference_first_response_histogram_ms_sum",
        l,
        1200.0,
    ));
    samples.push(sample(
        "nv_inference_first_response_histogram_ms_count",
        l,
        4.0,
    ));
    let normalized = normalize(Engine::Trtllm, &page(samples));
    let s = signals_between(
        None,
        Snapshot {
            ts: 0.0,
            samples: &normalized,
        },
    );
    // p50 rank 2 → (0.1, 1.0] s holding 1→4 → 0.1 + 0.9/3.
    assert_close(get(&s, Signal::ServerTtftP50), 0.4);
    assert_close(get(&s, Signal::ServerTtftMean), 0.3);
}

/// `Signal::inputs` is complete: computing a signal from only its inputs
/// gives the same value as from the whole scrape (so stores may decode less).
#[test]
fn each_signal_needs_only_its_inputs() {
    use llmwatch_core::catalog::detect_engine;
    use llmwatch_core::exposition::parse_lenient;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
    let mut samples = Vec::new();
    for file in [
        "vllm/metrics_example.txt",
        "dcgm-exporter/metrics_example.txt",
    ] {
        let body = std::fs::read(format!("{root}/{file}")).unwrap();
        let (page, _) = parse_lenient(&body, Format::PrometheusText);
        samples.extend(normalize(detect_engine(&page), &page));
    }
    // An earlier scrape: every counter and bucket at 60 %, gauges unchanged.
    let earlier: Vec<_> = samples
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if s.metric.kind() != llmwatch_core::catalog::MetricKind::Gauge {
                s.value *= 0.6;
            }
            s
        })
        .collect();
    let prev = Snapshot {
        ts: 0.0,
        samples: &earlier,
    };
    let cur = Snapshot {
        ts: 10.0,
        samples: &samples,
    };
    let full = signals_between(Some(prev), cur);
    assert!(full.len() > 15, "{full:?}");
    for (signal, value) in &full {
        let only = |set: &[llmwatch_core::catalog::NormalizedSample]| {
            set.iter()
                .filter(|s| signal.inputs().contains(&s.metric))
                .cloned()
                .collect::<Vec<_>>()
        };
        let (p, c) = (only(&earlier), only(&samples));
        let narrow = signals_between(
            Some(Snapshot {
                ts: 0.0,
                samples: &p,
            }),
            Snapshot {
                ts: 10.0,
                samples: &c,
            },
        );
        let got = narrow.iter().find(|(s, _)| s == signal).map(|(_, v)| *v);
        assert_eq!(got, Some(*value), "{signal}");
    }
}
