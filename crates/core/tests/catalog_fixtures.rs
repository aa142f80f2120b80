//! Table-driven: every real engine/exporter page under `fixtures` →
//! parse → detect engine → normalize → `signals_between(None, …)`, compared
//! with values read off the fixture text by hand (lifetime semantics: no
//! rates, cumulative hit rate and quantiles).
//!
//! Quantiles follow PromQL: rank = q · count(+Inf); find the first bucket
//! whose cumulative count reaches the rank; interpolate linearly from the
//! previous bound; a rank in the +Inf bucket gives the highest finite bound.

use llmwatch_core::catalog::{detect_engine, normalize, Engine};
use llmwatch_core::exposition::{parse_lenient, Format};
use llmwatch_core::signals::{signals_between, Signal, Snapshot};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
const MIB: f64 = 1_048_576.0;

use Signal::*;

struct Case {
    file: &'static str,
    engine: Engine,
    /// Exactly the signals expected (any other signal is a failure).
    signals: &'static [(Signal, f64)],
}

const CASES: &[Case] = &[
    Case {
        // vLLM V1 (Qwen3-0.6B, 2 requests). prefix queries = 0 → hit rate undefined.
        file: "vllm/metrics_example.txt",
        engine: Engine::Vllm,
        signals: &[
            (KvCacheUsage, 0.0),
            (RequestsRunning, 0.0),
            (RequestsWaiting, 0.0),
            // TTFT count 2: p50 rank 1 → (0.01, 0.02] holds 0→1 → 0.01 + 0.01·1/1.
            (ServerTtftP50, 0.02),
            // p95 rank 1.9 → (0.25, 0.5] holds 1→2 → 0.25 + 0.25·0.9.
            (ServerTtftP95, 0.475),
            (ServerTtftMean, 0.4143967628479004 / 2.0),
            // ITL count 598, 597 ≤ 0.01: p50 rank 299 → 0.01·299/597.
            (ServerItlP50, 0.01 * 299.0 / 597.0),
            // p95 rank 568.1 → 0.01·568.1/597.
            (ServerItlP95, 0.01 * 568.1 / 597.0),
            (ServerItlMean, 3.1598554495722055 / 598.0),
            // e2e: both in (1.5, 2.0]: rank 1.9 → 1.5 + 0.5·1.9/2.
            (ServerE2eP95, 1.975),
            (ServerE2eMean, 3.5736520290374756 / 2.0),
            // queue: both ≤ 0.3: rank 1.9 → 0.3·1.9/2.
            (ServerQueueTimeP95, 0.285),
            // Phase means: Δsum/Δcount over the lifetime (no decode family).
            (ServerQueueTimeMean, 1.883227378129959e-05 / 2.0),
            (ServerPrefillTimeMean, 0.41180944442749023 / 2.0),
            (ServerInferenceTimeMean, 3.5716648939996958 / 2.0),
            // 2026 families: 66 tokens looked up in the connector's cache,
            // none found; the engine awake.
            (ExternalPrefixCacheHitRate, 0.0),
            (EngineSleeping, 0.0),
        ],
    },
    Case {
        // Legacy/spliced DataDog fixture: kv_cache_usage_perc wins over
        // gpu_cache_usage_perc; inter_token_latency over time_per_output_token.
        file: "vllm/metrics_example_legacy_v0_datadog_fixture.txt",
        engine: Engine::Vllm,
        signals: &[
            (KvCacheUsage, 0.0),
            (RequestsRunning, 0.0),
            (RequestsWaiting, 0.0),
            // prefix_cache_hits_total 64 / prefix_cache_queries_total 117.
            (PrefixCacheHitRate, 64.0 / 117.0),
            // TTFT count 1 in (0.25, 0.5]: p50 0.25 + 0.25·0.5, p95 0.25 + 0.25·0.95.
            (ServerTtftP50, 0.375),
            (ServerTtftP95, 0.4875),
            (ServerTtftMean, 0.31326723098754883),
            // ITL count 144 (buckets 0.01: 141 … ): p50 rank 72 → 0.01·72/141.
            (ServerItlP50, 0.01 * 72.0 / 141.0),
            (ServerItlP95, 0.01 * 136.8 / 141.0),
            (ServerItlMean, 0.6237391703762114 / 144.0),
            // e2e count 1 in (0, 1.0]: 1.0·0.95.
            (ServerE2eP95, 0.95),
            (ServerE2eMean, 0.5034303665161133),
            // queue count 6, all ≤ 0.3: 0.3·5.7/6.
            (ServerQueueTimeP95, 0.3 * 5.7 / 6.0),
            (ServerQueueTimeMean, 7.358146831393242e-05 / 6.0),
            (ServerPrefillTimeMean, 0.2140041133388877 / 6.0),
            (ServerDecodeTimeMean, 0.6237391703762114 / 6.0),
            (ServerInferenceTimeMean, 0.8377432837150991 / 6.0),
            // 53 prompt tokens computed over 6 prefills.
            (PrefillComputedTokensMean, 53.0 / 6.0),
            (EngineSleeping, 0.0),
        ],
    },
    Case {
        // v0.10 transition page: old and new names side by side; the new ones win
        // (same values here), nothing is counted twice.
        file: "vllm/metrics_reconstructed_v0.10_transition.txt",
        engine: Engine::Vllm,
        signals: &[
            (KvCacheUsage, 0.4219),
            (RequestsRunning, 4.0),
            (RequestsWaiting, 1.0),
            (PrefixCacheHitRate, 1024.0 / 3072.0),
            (ServerTtftP50, 0.05),
            (ServerTtftP95, 0.4625),
            (ServerTtftMean, 0.456 / 3.0),
            // No inter_token_latency here: time_per_output_token_seconds is used.
            (ServerItlP50, 0.0175),
            (ServerItlP95, 0.02425),
            (ServerItlMean, 5.410200000000006 / 381.0),
            (ServerE2eP95, 4.625),
            (ServerE2eMean, 6.67 / 3.0),
            (ServerQueueTimeP95, 0.285),
            (ServerQueueTimeMean, 0.2915 / 3.0),
            (ServerPrefillTimeMean, 0.456 / 3.0),
            (ServerDecodeTimeMean, 5.922499999999999 / 3.0),
            (ServerInferenceTimeMean, 6.378499999999999 / 3.0),
        ],
    },
    Case {
        // Live idle vLLM: every histogram is empty → no quantiles/means,
        // prefix queries 0 → no hit rate.
        file: "vllm-live/metrics_vllm_idle.txt",
        engine: Engine::Vllm,
        signals: &[
            (KvCacheUsage, 0.0),
            (RequestsRunning, 0.0),
            (RequestsWaiting, 0.0),
            (EngineSleeping, 0.0),
        ],
    },
    Case {
        file: "nim/metrics_example.txt",
        engine: Engine::Nim,
        signals: &[
            (KvCacheUsage, 0.0002848191398461977),
            (RequestsRunning, 1.0),
            (RequestsWaiting, 0.0),
            (ServerTtftP50, 0.025),
            (ServerTtftP95, 0.6875),
            (ServerTtftMean, 0.6119842529296875 / 5.0),
            (ServerItlP50, 0.017544642857142856),
            (ServerItlP95, 0.024334821428571428),
            (ServerItlMean, 1.856855869293213 / 169.0),
            (ServerE2eP95, 0.95),
            (ServerE2eMean, 2.4688401222229004 / 5.0),
        ],
    },
    Case {
        // SGLang docs example (early 2025): TPOT name, buckets up to 30 s.
        file: "sglang/metrics_example.txt",
        engine: Engine::Sglang,
        signals: &[
            (KvCacheUsage, 0.28),
            (RequestsRunning, 162.0),
            (RequestsWaiting, 2826.0),
            (PrefixCacheHitRate, 0.007507552643049313),
            // TTFT: 2513 of 11008 ≤ 30 s, so p50 and p95 ranks fall in +Inf
            // → highest finite bound.
            (ServerTtftP50, 30.0),
            (ServerTtftP95, 30.0),
            (ServerTtftMean, 2.3518979474117756e6 / 11008.0),
            // ITL count 7400757: p50 rank 3700378.5 in (0.075, 0.1] holding
            // 433413 → 4950195.
            (
                ServerItlP50,
                0.075 + 0.025 * (3_700_378.5 - 433_413.0) / (4_950_195.0 - 433_413.0),
            ),
            // p95 rank 7030719.15 in (0.1, 0.15] holding 4950195 → 7039435.
            (
                ServerItlP95,
                0.1 + 0.05 * (7_030_719.15 - 4_950_195.0) / (7_039_435.0 - 4_950_195.0),
            ),
            (ServerItlMean, 866964.5791549598 / 7.400757e6),
            (ServerE2eP95, 60.0),
            (ServerE2eMean, 3.116093850019932e6 / 11228.0),
        ],
    },
    Case {
        // SGLang 0.5 reconstruction: tp_rank/pp_rank labels, ITL name,
        // retraction counter (a rate, so absent here).
        file: "sglang/metrics_reconstructed_v0.5.txt",
        engine: Engine::Sglang,
        signals: &[
            (KvCacheUsage, 0.28),
            (RequestsRunning, 162.0),
            (RequestsWaiting, 2826.0),
            (PrefixCacheHitRate, 0.007507552643049313),
            // TTFT count 3: p50 rank 1.5 in (0.8, 1.0] holding 1→2 → 0.8 + 0.2·0.5.
            (ServerTtftP50, 0.9),
            // p95 rank 2.85 in (6, 8] holding 2→3 → 6 + 2·0.85.
            (ServerTtftP95, 7.7),
            (ServerTtftMean, 8.66 / 3.0),
            (ServerItlP50, 0.01355),
            (ServerItlP95, 0.0293625),
            (ServerItlMean, 1.4000000000000004 / 71.0),
            // e2e p95 rank 2.85 in (40, 60] holding 2→3 → 40 + 20·0.85.
            (ServerE2eP95, 57.0),
            (ServerE2eMean, 88.4 / 3.0),
            // queue p95 rank 2.85 in (4, 5] holding 2→3 → 4 + 0.85.
            (ServerQueueTimeP95, 4.85),
            (ServerQueueTimeMean, 4.57 / 3.0),
            // spec_accept_length 0: speculation off, no acceptance signal.
        ],
    },
    Case {
        // TGI: no KV usage, no TTFT; "ITL" is the per-request mean TPOT
        // histogram tgi_request_mean_time_per_token_duration.
        file: "tgi/metrics_example.txt",
        engine: Engine::Tgi,
        signals: &[
            (RequestsRunning, 0.0),
            (RequestsWaiting, 0.0),
            // count 11: p50 rank 5.5 in (0.0129746…, 0.0194619…] holding 5→11.
            (
                ServerItlP50,
                0.0129746337890625 + (0.01946195068359375 - 0.0129746337890625) * 0.5 / 6.0,
            ),
            (ServerItlP95, 0.018867279968261718),
            (ServerItlMean, 0.14940613004879125 / 11.0),
            (ServerE2eP95, 3.556206201410964),
            (ServerE2eMean, 22.17695412131686 / 11.0),
            (ServerQueueTimeP95, 0.30204415298223486),
            (ServerQueueTimeMean, 1.4569574589903815 / 11.0),
            // Batching → end of generation, vLLM's inference span.
            (ServerInferenceTimeMean, 22.06695412131687 / 11.0),
        ],
    },
    Case {
        // llama.cpp: no histograms; ITL mean = predicted seconds / predicted tokens.
        file: "llamacpp/metrics_example.txt",
        engine: Engine::Llamacpp,
        signals: &[
            (RequestsRunning, 1.0),
            (RequestsWaiting, 0.0),
            (ServerItlMean, 3544.27 / 3469.0),
        ],
    },
    Case {
        file: "llamacpp/metrics_example_legacy_with_kv_cache.txt",
        engine: Engine::Llamacpp,
        signals: &[
            (KvCacheUsage, 0.0732422),
            (RequestsRunning, 1.0),
            (RequestsWaiting, 0.0),
            (ServerItlMean, 3544.27 / 3469.0),
        ],
    },
    Case {
        // Idle: 0 predicted tokens → no mean.
        file: "llamacpp-live/metrics_llamacpp_idle.txt",
        engine: Engine::Llamacpp,
        signals: &[(RequestsRunning, 0.0), (RequestsWaiting, 0.0)],
    },
    Case {
        // Triton + TRT-LLM backend: selectors pick request_type / block type;
        // waiting = nv_trt_llm request_type="waiting" (1) before Triton's
        // pending count (0); the µs counters have count 0 → no means.
        file: "tensorrt-llm-triton/metrics_example.txt",
        engine: Engine::Trtllm,
        signals: &[
            (KvCacheUsage, 0.4875),
            (RequestsRunning, 0.0),
            (RequestsWaiting, 1.0),
        ],
    },
    Case {
        file: "dynamo/metrics_example.txt",
        engine: Engine::Dynamo,
        signals: &[
            (RequestsRunning, 0.0),
            (RequestsWaiting, 0.0),
            (ServerTtftP50, 1.6),
            (ServerTtftP95, 2.14),
            (ServerTtftMean, 1.5625701570000001),
            (ServerItlP50, 0.0026422382671480145),
            (ServerItlP95, 0.0034194223826714805),
            (ServerItlMean, 0.6126917290000005 / 299.0),
            (ServerE2eP95, 3.325),
            (ServerE2eMean, 2.177646729),
        ],
    },
    Case {
        // Dynamo worker carrying trtllm_* families: detected as Dynamo, and
        // the backend histograms are read.
        file: "dynamo/metrics_example_worker_trtllm.txt",
        engine: Engine::Dynamo,
        signals: &[
            (KvCacheUsage, 0.0),
            (RequestsRunning, 0.0),
            (PrefixCacheHitRate, 0.0),
            (ServerTtftP50, 0.04),
            (ServerTtftP95, 0.058),
            (ServerTtftMean, 0.06795299984514713 / 2.0),
            (ServerItlP50, 0.005),
            (ServerItlP95, 0.0095),
            (ServerItlMean, 0.005558789299682629 / 2.0),
            (ServerE2eP95, 0.99),
            (ServerE2eMean, 1.7300310004502535 / 2.0),
            (ServerQueueTimeP95, 0.285),
            (ServerQueueTimeMean, 0.01181500032544136 / 2.0),
        ],
    },
    Case {
        // Spliced DataDog page: four distinct GPU label sets (one with no
        // labels at all); PROF_GR_ENGINE_ACTIVE (0) preferred over GPU_UTIL;
        // GPU-20c5…: used 0 + free 15109 MiB → ratio 0; GPU-9ef1… has
        // FB_TOTAL but no FB_USED, so it is not in the ratio.
        file: "dcgm-exporter/metrics_example.txt",
        engine: Engine::Dcgm,
        signals: &[
            (GpuUtil, 0.0),
            (GpuMemUsedRatio, 0.0),
            (GpuMemUsedRatioMax, 0.0),
            (GpuMemUsedRatioMin, 0.0),
            (GpuMemUsedBytes, 0.0),
            (GpuMemBwUtil, 0.000003),
            (GpuPowerW, 8.969),
            (GpuCount, 4.0),
            (GpuTempMax, 25.0),
            (GpuTensorActive, 0.0),
        ],
    },
    Case {
        // 2 × H100: GPU 0 used 73556 + free 7012 + reserved 591 MiB; GPU 1
        // 0 + 80568 + 591.
        file: "dcgm-exporter/metrics_reconstructed_4.5_Hostname.txt",
        engine: Engine::Dcgm,
        signals: H100_PAIR,
    },
    Case {
        file: "dcgm-exporter/metrics_reconstructed_4.5_hostname.txt",
        engine: Engine::Dcgm,
        signals: H100_PAIR,
    },
    Case {
        // Only clocks and a sentinel MEMORY_TEMP (9223372036854775794): nothing
        // the catalog maps survives.
        file: "dcgm-exporter/metrics_example_readme.txt",
        engine: Engine::Dcgm,
        signals: &[],
    },
    Case {
        // dcgm-exporter's server test page exports only TEST_METRIC.
        file: "dcgm-exporter/metrics_example_server_test.txt",
        engine: Engine::Generic,
        signals: &[],
    },
];

const H100_PAIR: &[(Signal, f64)] = &[
    (GpuUtil, (0.912345 + 0.0) / 2.0),
    (GpuMemUsedRatio, 73556.0 / (2.0 * 81159.0)),
    (GpuMemUsedRatioMax, 73556.0 / 81159.0),
    (GpuMemUsedRatioMin, 0.0),
    (GpuMemUsedBytes, 73556.0 * MIB),
    (GpuMemBwUtil, 0.583119 / 2.0),
    (GpuPowerW, 512.337 + 71.204),
    (GpuCount, 2.0),
    (GpuTempMax, 61.0),
    (GpuTensorActive, 0.412233 / 2.0),
];

fn close(actual: f64, expected: f64) -> bool {
    actual == expected || (actual - expected).abs() <= 1e-9 * expected.abs().max(actual.abs())
}

#[test]
fn every_fixture_page_detects_and_derives_expected_signals() {
    let mut failures = Vec::new();
    for case in CASES {
        let path = format!("{FIXTURES}/{}", case.file);
        let body = std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
        let (page, _errors) = parse_lenient(&body, Format::PrometheusText);
        let engine = detect_engine(&page);
        if engine != case.engine {
            failures.push(format!(
                "{}: detected {engine}, expected {}",
                case.file, case.engine
            ));
        }
        let samples = normalize(case.engine, &page);
        let got = signals_between(
            None,
            Snapshot {
                ts: 0.0,
                samples: &samples,
            },
        );
        for (signal, value) in &got {
            assert!(value.is_finite(), "{}: {signal} = {value}", case.file);
        }
        let got_names: Vec<Signal> = got.iter().map(|(s, _)| *s).collect();
        let want_names: Vec<Signal> = case.signals.iter().map(|(s, _)| *s).collect();
        if got_names != want_names {
            failures.push(format!(
                "{}: signals {got_names:?}, expected {want_names:?}",
                case.file
            ));
            continue;
        }
        for ((signal, actual), (_, expected)) in got.iter().zip(case.signals) {
            if !close(*actual, *expected) {
                failures.push(format!(
                    "{}: {signal} = {actual:?}, expected {expected:?}",
                    case.file
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn normalized_output_is_deterministic_and_label_free_for_engines() {
    for case in CASES {
        let body = std::fs::read(format!("{FIXTURES}/{}", case.file)).expect("fixture");
        let (page, _) = parse_lenient(&body, Format::PrometheusText);
        let first = normalize(case.engine, &page);
        assert_eq!(first, normalize(case.engine, &page), "{}", case.file);
        for sample in &first {
            assert!(sample.value.is_finite(), "{}: {sample:?}", case.file);
            if !sample.metric.is_gpu() {
                assert!(sample.labels.is_empty(), "{}: {sample:?}", case.file);
            }
        }
    }
}

#[test]
fn dcgm_gpu_labels_are_kept_and_hostname_normalised() {
    for file in [
        "dcgm-exporter/metrics_reconstructed_4.5_Hostname.txt",
        "dcgm-exporter/metrics_reconstructed_4.5_hostname.txt",
    ] {
        let body = std::fs::read(format!("{FIXTURES}/{file}")).expect("fixture");
        let (page, _) = parse_lenient(&body, Format::PrometheusText);
        let samples = normalize(Engine::Dcgm, &page);
        let gpu0 = samples
            .iter()
            .find(|s| s.labels.iter().any(|(n, v)| n == "gpu" && v == "0"))
            .expect("gpu 0");
        let names: Vec<&str> = gpu0.labels.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["UUID", "gpu", "hostname", "modelName"], "{file}");
        assert!(gpu0
            .labels
            .contains(&("hostname".to_owned(), "gpu-node-07".to_owned())));
    }
}

/// Issue 38: the engine families of 2026. Every family of each new page
/// feeds a catalog metric, and that metric a signal; the pages are read as
/// a window against the same server 10 s earlier with every counter at zero
/// (just started), so counters give rates.
mod families_2026 {
    use super::*;
    use llmwatch_core::catalog::{source_names, CatalogMetric, NormalizedSample};
    use llmwatch_core::exposition::Exposition;
    use std::collections::BTreeSet;

    const WINDOW_S: f64 = 10.0;

    struct FamilyCase {
        file: &'static str,
        engine: Engine,
        /// Whether the table must name every family of the page (pages
        /// written for this issue) or only the new ones (live captures).
        every_family: bool,
        /// (family as on the page, a signal it feeds).
        families: &'static [(&'static str, Signal)],
        /// Signals of the whole page over the window, read off the page by hand.
        values: &'static [(Signal, f64)],
    }

    const VLLM_PD: FamilyCase = FamilyCase {
        file: "vllm/metrics_reconstructed_0.32_pd_offload_spec.txt",
        engine: Engine::Vllm,
        every_family: true,
        families: &[
            (
                "vllm:prompt_tokens_by_source_total",
                PromptComputedTokensRate,
            ),
            (
                "vllm:prompt_tokens_by_source_total",
                PromptTransferredTokensRate,
            ),
            ("vllm:prompt_tokens_cached_total", PromptCachedTokensRate),
            (
                "vllm:prompt_tokens_cached_by_source_total",
                PromptCachedTokensRate,
            ),
            (
                "vllm:prompt_tokens_recomputed_total",
                PromptRecomputedTokensRate,
            ),
            (
                "vllm:external_prefix_cache_queries_total",
                ExternalPrefixCacheHitRate,
            ),
            (
                "vllm:external_prefix_cache_hits_total",
                ExternalPrefixCacheHitRate,
            ),
            (
                "vllm:request_prefill_kv_computed_tokens",
                PrefillComputedTokensMean,
            ),
            ("vllm:request_num_preemptions", PreemptionsPerRequestMean),
            ("vllm:kv_offload_load_bytes_total", KvOffloadLoadBytesRate),
            ("vllm:kv_offload_load_time_total", KvOffloadTimeRatio),
            ("vllm:kv_offload_load_size", KvOffloadLoadBytesRate),
            ("vllm:kv_offload_store_bytes_total", KvOffloadStoreBytesRate),
            ("vllm:kv_offload_store_time_total", KvOffloadTimeRatio),
            ("vllm:kv_offload_store_size", KvOffloadStoreBytesRate),
            ("vllm:kv_offload_total_bytes_total", KvOffloadLoadBytesRate),
            ("vllm:kv_offload_total_bytes_total", KvOffloadStoreBytesRate),
            ("vllm:kv_offload_total_time_total", KvOffloadTimeRatio),
            ("vllm:kv_offload_size", KvOffloadLoadBytesRate),
            ("vllm:kv_offload_size", KvOffloadStoreBytesRate),
            ("vllm:nixl_xfer_time_seconds", KvTransferTimeMean),
            ("vllm:nixl_xfer_time_seconds", KvTransferTimeP95),
            ("vllm:nixl_bytes_transferred", KvTransferBytesRate),
            ("vllm:nixl_bytes_transferred", KvTransferSpeed),
            (
                "vllm:nixl_num_failed_transfers_total",
                KvTransferFailuresRate,
            ),
            ("vllm:spec_decode_num_drafts_total", SpecDecodeAcceptLength),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                SpecDecodeAcceptanceRate,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                SpecDecodeAcceptanceRate,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                SpecDecodeFirstAcceptance,
            ),
            ("vllm:estimated_flops_per_gpu_total", AchievedTflops),
            (
                "vllm:estimated_read_bytes_per_gpu_total",
                AchievedMemBandwidth,
            ),
            (
                "vllm:estimated_write_bytes_per_gpu_total",
                AchievedMemBandwidth,
            ),
            ("vllm:engine_sleep_state", EngineSleeping),
        ],
        values: &[
            // Engines 0 and 1 summed, over 10 s.
            (PromptCachedTokensRate, (5000.0 + 3000.0) / WINDOW_S),
            (PromptComputedTokensRate, (12000.0 + 8000.0) / WINDOW_S),
            (PromptRecomputedTokensRate, (120.0 + 80.0) / WINDOW_S),
            (PromptTransferredTokensRate, (40000.0 + 36000.0) / WINDOW_S),
            (ExternalPrefixCacheHitRate, 4000.0 / 36000.0),
            (PreemptionsPerRequestMean, 9.0 / 70.0),
            (PrefillComputedTokensMean, 20000.0 / 70.0),
            (KvOffloadLoadBytesRate, 12e9 / WINDOW_S),
            (KvOffloadStoreBytesRate, 28e9 / WINDOW_S),
            (KvOffloadTimeRatio, (1.2 + 3.5) / WINDOW_S),
            (KvTransferTimeMean, 5.9 / 70.0),
            // 70 transfers: p95 rank 66.5 in (0.1, 0.2] holding 58 → 66
            // (engine 0: 10+20+6 ≤ 0.1, engine 1: 5+15+6) … 70 ≤ 0.2.
            (KvTransferTimeP95, 0.1 + 0.1 * (66.5 - 62.0) / 8.0),
            (KvTransferBytesRate, 7.6e10 / WINDOW_S),
            (KvTransferSpeed, 7.6e10 / 5.9),
            (KvTransferFailuresRate, 1.0 / WINDOW_S),
            (SpecDecodeAcceptanceRate, 2100.0 / 5400.0),
            (SpecDecodeAcceptLength, 1.0 + 2100.0 / 1800.0),
            (SpecDecodeFirstAcceptance, 1050.0 / 1800.0),
            // Per-GPU counters: the mean of the two engines' GPUs.
            (AchievedTflops, 3.5e15 / WINDOW_S / 1e12),
            (AchievedMemBandwidth, (1.8e13 + 0.9e12) / WINDOW_S / 1e9),
            (EngineSleeping, 0.0),
        ],
    };

    const SGLANG_PD: FamilyCase = FamilyCase {
        file: "sglang/metrics_reconstructed_v0.5.9_pd_decode.txt",
        engine: Engine::Sglang,
        every_family: true,
        families: &[
            ("sglang:prompt_tokens_total", PromptTokensRate),
            ("sglang:generation_tokens_total", GenerationTokensRate),
            ("sglang:cached_tokens_total", PromptCachedTokensRate),
            ("sglang:realtime_tokens_total", PromptCachedTokensRate),
            ("sglang:realtime_tokens_total", PromptComputedTokensRate),
            ("sglang:realtime_tokens_total", GenerationTokensRate),
            (
                "sglang:num_prefill_prealloc_queue_reqs",
                KvTransferQueueRequests,
            ),
            (
                "sglang:num_prefill_inflight_queue_reqs",
                KvTransferQueueRequests,
            ),
            (
                "sglang:num_decode_prealloc_queue_reqs",
                KvTransferQueueRequests,
            ),
            (
                "sglang:num_decode_transfer_queue_reqs",
                KvTransferQueueRequests,
            ),
            ("sglang:kv_transfer_speed_gb_s", KvTransferSpeed),
            ("sglang:kv_transfer_latency_ms", KvTransferTimeMean),
            (
                "sglang:num_transfer_failed_reqs_total",
                KvTransferFailuresRate,
            ),
            ("sglang:num_retracted_requests_total", PreemptionsRate),
            (
                "sglang:num_retracted_input_tokens_total",
                RetractedTokensRate,
            ),
            (
                "sglang:num_retracted_output_tokens_total",
                RetractedTokensRate,
            ),
            ("sglang:spec_accept_length", SpecDecodeAcceptLength),
            ("sglang:spec_accept_rate", SpecDecodeAcceptanceRate),
        ],
        values: &[
            // TP ranks 0 and 1 report one scheduler: counted once.
            (PreemptionsRate, 7.0 / WINDOW_S),
            (PromptTokensRate, 2000.0 / WINDOW_S),
            (GenerationTokensRate, 90000.0 / WINDOW_S),
            (PromptCachedTokensRate, 1500.0 / WINDOW_S),
            (PromptComputedTokensRate, 500.0 / WINDOW_S),
            // The slowest rank's shard.
            (KvTransferTimeMean, 0.045),
            // Each rank moves its own shard at once: 12.5 + 11.5 GB/s.
            (KvTransferSpeed, 24e9),
            (KvTransferFailuresRate, 2.0 / WINDOW_S),
            (KvTransferQueueRequests, 8.0),
            (SpecDecodeAcceptanceRate, 0.53),
            (SpecDecodeAcceptLength, 2.6),
            (RetractedTokensRate, 3000.0 / WINDOW_S),
        ],
    };

    const TRTLLM_SERVE: FamilyCase = FamilyCase {
        file: "trtllm-serve/metrics_reconstructed_1.3.txt",
        engine: Engine::Trtllm,
        every_family: true,
        families: &[
            ("trtllm_request_success_total", RequestRate),
            ("trtllm_e2e_request_latency_seconds", ServerE2eMean),
            ("trtllm_time_to_first_token_seconds", ServerTtftP95),
            ("trtllm_time_per_output_token_seconds", ServerItlMean),
            ("trtllm_request_queue_time_seconds", ServerQueueTimeMean),
            ("trtllm_request_prefill_time_seconds", ServerPrefillTimeMean),
            ("trtllm_request_decode_time_seconds", ServerDecodeTimeMean),
            (
                "trtllm_request_inference_time_seconds",
                ServerInferenceTimeMean,
            ),
            ("trtllm_prompt_tokens_total", PromptTokensRate),
            ("trtllm_generation_tokens_total", GenerationTokensRate),
            ("trtllm_prompt_cached_tokens_total", PromptCachedTokensRate),
            (
                "trtllm_prompt_cache_hit_tokens_total",
                PromptCachedTokensRate,
            ),
            ("trtllm_kv_cache_hit_rate", PrefixCacheHitRate),
            ("trtllm_kv_cache_utilization", KvCacheUsage),
            ("trtllm_num_requests_running", RequestsRunning),
            ("trtllm_num_requests_waiting", RequestsWaiting),
            (
                "trtllm_kv_cache_onboard_bytes_total",
                KvOffloadLoadBytesRate,
            ),
            (
                "trtllm_kv_cache_offload_bytes_total",
                KvOffloadStoreBytesRate,
            ),
            (
                "trtllm_spec_decode_num_draft_tokens_total",
                SpecDecodeAcceptanceRate,
            ),
            (
                "trtllm_spec_decode_num_accepted_tokens_total",
                SpecDecodeAcceptanceRate,
            ),
            (
                "trtllm_spec_decode_acceptance_length",
                SpecDecodeAcceptLength,
            ),
            (
                "trtllm_spec_decode_drafted_tokens_total",
                SpecDecodeAcceptLength,
            ),
            (
                "trtllm_spec_decode_accepted_tokens_total",
                SpecDecodeFirstAcceptance,
            ),
        ],
        values: &[
            (KvCacheUsage, 0.62),
            (RequestsRunning, 12.0),
            (RequestsWaiting, 3.0),
            (PrefixCacheHitRate, 0.4),
            (ServerTtftMean, 12.0 / 100.0),
            (ServerQueueTimeMean, 3.0 / 100.0),
            (ServerPrefillTimeMean, 8.0 / 100.0),
            (ServerDecodeTimeMean, 145.0 / 100.0),
            (PromptTokensRate, 51200.0 / WINDOW_S),
            (GenerationTokensRate, 25600.0 / WINDOW_S),
            (RequestRate, 100.0 / WINDOW_S),
            (PromptCachedTokensRate, 20480.0 / WINDOW_S),
            (KvOffloadLoadBytesRate, 2e9 / WINDOW_S),
            (KvOffloadStoreBytesRate, 5e9 / WINDOW_S),
            (SpecDecodeAcceptanceRate, 5400.0 / 9000.0),
            // Drafts = tokens drafted at position 0.
            (SpecDecodeAcceptLength, 1.0 + 5400.0 / 3000.0),
            (SpecDecodeFirstAcceptance, 2400.0 / 3000.0),
        ],
    };

    const DYNAMO_ROUTER: FamilyCase = FamilyCase {
        file: "dynamo/metrics_reconstructed_1.x_frontend_router.txt",
        engine: Engine::Dynamo,
        every_family: true,
        families: &[
            ("dynamo_frontend_inflight_requests", RequestsRunning),
            ("dynamo_frontend_queued_requests", RequestsWaiting),
            ("dynamo_frontend_worker_waiting_requests", RequestsWaiting),
            ("dynamo_frontend_requests_total", RequestRate),
            ("dynamo_frontend_time_to_first_token_seconds", ServerTtftP95),
            ("dynamo_frontend_inter_token_latency_seconds", ServerItlP95),
            ("dynamo_frontend_output_tokens_total", GenerationTokensRate),
            ("dynamo_component_router_requests_total", RequestRate),
            (
                "dynamo_component_router_time_to_first_token_seconds",
                ServerTtftP95,
            ),
            (
                "dynamo_component_router_inter_token_latency_seconds",
                ServerItlP95,
            ),
            (
                "dynamo_component_router_input_sequence_tokens",
                PromptTokensRate,
            ),
            (
                "dynamo_component_router_output_sequence_tokens",
                GenerationTokensRate,
            ),
            ("dynamo_component_router_kv_hit_rate", RouterKvHitRateMean),
            (
                "dynamo_component_router_kv_transfer_estimated_latency_seconds",
                KvTransferTimeMean,
            ),
        ],
        values: &[
            (RequestsRunning, 6.0),
            (RequestsWaiting, 2.0),
            (ServerTtftMean, 30.0 / 200.0),
            (PromptTokensRate, 400000.0 / WINDOW_S),
            (GenerationTokensRate, 60000.0 / WINDOW_S),
            (RequestRate, 200.0 / WINDOW_S),
            (KvTransferTimeMean, 9.0 / 200.0),
            (RouterKvHitRateMean, (80.0 * 0.4 + 120.0 * 0.6) / 200.0),
        ],
    };

    /// A real vLLM 0.32 (CPU) with ngram speculative decoding, the MFU
    /// counters and `--custom-histogram-buckets`, before and after 12
    /// requests (`fixtures/vllm-live/SOURCE.md`).
    const VLLM_LIVE_SPEC: FamilyCase = FamilyCase {
        file: "vllm-live/metrics_vllm_spec_buckets_after.txt",
        engine: Engine::Vllm,
        every_family: false,
        families: &[
            (
                "vllm:prompt_tokens_by_source_total",
                PromptComputedTokensRate,
            ),
            ("vllm:prompt_tokens_cached_total", PromptCachedTokensRate),
            (
                "vllm:prompt_tokens_cached_by_source_total",
                PromptCachedTokensRate,
            ),
            (
                "vllm:request_prefill_kv_computed_tokens",
                PrefillComputedTokensMean,
            ),
            ("vllm:request_num_preemptions", PreemptionsPerRequestMean),
            ("vllm:spec_decode_num_drafts_total", SpecDecodeAcceptLength),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                SpecDecodeAcceptanceRate,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                SpecDecodeAcceptanceRate,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                SpecDecodeFirstAcceptance,
            ),
            ("vllm:estimated_flops_per_gpu_total", AchievedTflops),
            (
                "vllm:estimated_read_bytes_per_gpu_total",
                AchievedMemBandwidth,
            ),
            (
                "vllm:estimated_write_bytes_per_gpu_total",
                AchievedMemBandwidth,
            ),
            ("vllm:engine_sleep_state", EngineSleeping),
        ],
        values: &[
            // 12 requests of 392 prompt tokens, none cached.
            (PromptCachedTokensRate, 0.0),
            (PromptComputedTokensRate, 4704.0 / WINDOW_S),
            (PreemptionsPerRequestMean, 0.0),
            (PrefillComputedTokensMean, 4704.0 / 12.0),
            // Every draft token accepted (greedy, repetitive text).
            // 252 of 252 draft tokens.
            (SpecDecodeAcceptanceRate, 1.0),
            (SpecDecodeAcceptLength, 1.0 + 252.0 / 96.0),
            // 96 of 96 drafts.
            (SpecDecodeFirstAcceptance, 1.0),
            (AchievedTflops, 1.6340877312e10 / WINDOW_S / 1e12),
            (
                AchievedMemBandwidth,
                (7.48480512e8 + 5.8257408e7) / WINDOW_S / 1e9,
            ),
            (EngineSleeping, 0.0),
        ],
    };

    fn read(file: &str) -> Vec<u8> {
        let path = format!("{FIXTURES}/{file}");
        std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
    }

    /// `page` against the same page with every value at zero `WINDOW_S`
    /// earlier.
    fn over_window(samples: &[NormalizedSample]) -> Vec<(Signal, f64)> {
        let zero: Vec<NormalizedSample> = samples
            .iter()
            .map(|s| NormalizedSample {
                value: 0.0,
                ..s.clone()
            })
            .collect();
        signals_between(
            Some(Snapshot {
                ts: 0.0,
                samples: &zero,
            }),
            Snapshot {
                ts: WINDOW_S,
                samples,
            },
        )
    }

    fn sample_names(page: &Exposition, family: usize) -> BTreeSet<String> {
        page.families[family]
            .samples
            .iter()
            .map(|s| s.name.to_string())
            .collect()
    }

    /// The catalog metrics whose rules read any of `names`.
    fn metrics_reading(names: &BTreeSet<String>) -> Vec<CatalogMetric> {
        CatalogMetric::all()
            .iter()
            .copied()
            .filter(|m| source_names(*m).iter().any(|n| names.contains(n)))
            .collect()
    }

    /// The page without the families that compete with `family` for the
    /// catalog metrics it feeds (an earlier or later name of METRIC_MAP's
    /// resolution order), so `family` is the one read.
    fn alone<'a>(page: &Exposition<'a>, family: usize) -> Exposition<'a> {
        let fed: BTreeSet<String> = metrics_reading(&sample_names(page, family))
            .into_iter()
            .flat_map(source_names)
            .collect();
        let keep = (0..page.families.len())
            .filter(|&i| i == family || sample_names(page, i).is_disjoint(&fed))
            .map(|i| page.families[i].clone())
            .collect();
        Exposition {
            format: page.format,
            families: keep,
        }
    }

    fn check_families(case: &FamilyCase, failures: &mut Vec<String>) {
        let body = read(case.file);
        let (page, _) = parse_lenient(&body, Format::PrometheusText);
        if detect_engine(&page) != case.engine {
            failures.push(format!("{}: not detected as {}", case.file, case.engine));
        }
        for (i, family) in page.families.iter().enumerate() {
            let names = sample_names(&page, i);
            let listed = case.families.iter().any(|(f, _)| names.contains(*f))
                || case.families.iter().any(|(f, _)| *f == family.name);
            if case.every_family && !listed {
                failures.push(format!("{}: family {} has no row", case.file, family.name));
            }
        }
        for (name, signal) in case.families {
            let Some(i) = (0..page.families.len()).find(|&i| {
                page.families[i].name == *name || sample_names(&page, i).contains(*name)
            }) else {
                failures.push(format!("{}: no family {name}", case.file));
                continue;
            };
            let fed = metrics_reading(&sample_names(&page, i));
            let samples = normalize(case.engine, &alone(&page, i));
            let read: Vec<CatalogMetric> = fed
                .iter()
                .copied()
                .filter(|m| samples.iter().any(|s| s.metric == *m))
                .collect();
            if read.is_empty() || !read.iter().any(|m| signal.inputs().contains(m)) {
                failures.push(format!(
                    "{}: {name} feeds {read:?}, none an input of {signal}",
                    case.file
                ));
            }
            if !over_window(&samples)
                .iter()
                .any(|(s, v)| s == signal && v.is_finite())
            {
                failures.push(format!("{}: {name} alone gives no {signal}", case.file));
            }
        }
    }

    fn check_values(case: &FamilyCase, failures: &mut Vec<String>) {
        let body = read(case.file);
        let (page, _) = parse_lenient(&body, Format::PrometheusText);
        let got = over_window(&normalize(case.engine, &page));
        for (signal, expected) in case.values {
            match got.iter().find(|(s, _)| s == signal) {
                Some((_, actual)) if close(*actual, *expected) => {}
                other => failures.push(format!(
                    "{}: {signal} = {other:?}, expected {expected}",
                    case.file
                )),
            }
        }
    }

    #[test]
    fn vllm_every_2026_family_maps_to_its_signal() {
        let mut failures = Vec::new();
        for case in [&VLLM_PD, &VLLM_LIVE_SPEC] {
            check_families(case, &mut failures);
            check_values(case, &mut failures);
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn sglang_every_0_5_9_family_maps_to_its_signal() {
        let mut failures = Vec::new();
        check_families(&SGLANG_PD, &mut failures);
        check_values(&SGLANG_PD, &mut failures);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn trtllm_serve_every_family_maps_to_its_signal() {
        let mut failures = Vec::new();
        check_families(&TRTLLM_SERVE, &mut failures);
        check_values(&TRTLLM_SERVE, &mut failures);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn dynamo_frontend_and_router_families_map_to_their_signals() {
        let mut failures = Vec::new();
        check_families(&DYNAMO_ROUTER, &mut failures);
        check_values(&DYNAMO_ROUTER, &mut failures);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// `--custom-histogram-buckets`: the bounds come from the page (a real
    /// vLLM's), and the window's quantiles interpolate inside them.
    #[test]
    fn vllm_custom_histogram_buckets_are_read_from_the_page() {
        let before = read("vllm-live/metrics_vllm_spec_buckets_before.txt");
        let after = read("vllm-live/metrics_vllm_spec_buckets_after.txt");
        let (before, _) = parse_lenient(&before, Format::PrometheusText);
        let (after, _) = parse_lenient(&after, Format::PrometheusText);
        let (before, after) = (
            normalize(Engine::Vllm, &before),
            normalize(Engine::Vllm, &after),
        );
        let bounds = |metric: CatalogMetric| -> Vec<f64> {
            after
                .iter()
                .filter(|s| s.metric == metric)
                .filter_map(|s| match s.part {
                    llmwatch_core::catalog::Part::Bucket(le) => Some(le),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            bounds(CatalogMetric::TtftSeconds),
            [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, f64::INFINITY]
        );
        assert_eq!(
            bounds(CatalogMetric::E2eSeconds),
            [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, f64::INFINITY]
        );
        let got = signals_between(
            Some(Snapshot {
                ts: 0.0,
                samples: &before,
            }),
            Snapshot {
                ts: WINDOW_S,
                samples: &after,
            },
        );
        let get = |signal| got.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v);
        // 12 requests: 5 ≤ 0.05 s, 10 ≤ 0.1 s, 11 ≤ 0.2 s, 12 ≤ +Inf.
        // p50 rank 6 in (0.05, 0.1] holding 5 → 10.
        assert!(close(get(ServerTtftP50).expect("ttft p50"), 0.06));
        // p95 rank 11.4 past the last finite bound → that bound.
        assert_eq!(get(ServerTtftP95), Some(1.6));
        // e2e: 11 ≤ 0.25 s, 12 ≤ 4 s: rank 11.4 in (2, 4] holding 11 → 12.
        assert!(close(get(ServerE2eP95).expect("e2e p95"), 2.8));
        assert_eq!(get(SpecDecodeAcceptanceRate), Some(1.0));
    }
}
