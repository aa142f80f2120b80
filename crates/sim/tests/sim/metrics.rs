//! The metrics pages through llmwatch's own parser and catalog, against the
//! real captures.

use std::collections::BTreeSet;
use std::time::Duration;

use llmwatch_core::catalog::{detect_engine, normalize, CatalogMetric, Engine, Part};
use llmwatch_core::exposition::{parse_lenient, Exposition, Format, MetricType};
use llmwatch_sim::{Flavor, Profile};
use serde_json::json;

use crate::helpers::*;

fn parse(text: &str) -> Exposition<'_> {
    let (page, errors) = parse_lenient(text.as_bytes(), Format::PrometheusText);
    assert!(errors.is_empty(), "parse errors: {errors:?}");
    page
}

fn catalog_set(page: &Exposition) -> BTreeSet<CatalogMetric> {
    normalize(detect_engine(page), page)
        .into_iter()
        .map(|s| s.metric)
        .collect()
}

/// (family name, type, sorted label names of its samples) for every family.
fn family_shapes(page: &Exposition) -> Vec<(String, MetricType, BTreeSet<String>)> {
    page.families
        .iter()
        .map(|f| {
            let labels = f
                .samples
                .iter()
                .flat_map(|s| s.labels.iter().map(|l| l.name.to_string()))
                .collect();
            (f.name.to_string(), f.metric_type, labels)
        })
        .collect()
}

fn value(page: &Exposition, name: &str, label: Option<(&str, &str)>) -> f64 {
    page.families
        .iter()
        .flat_map(|f| f.samples.iter())
        .find(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no sample {name} {label:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_page_maps_like_the_real_capture() {
    let mut p = Profile::named("balanced").expect("known");
    p.eos_probability = 0.0;
    let t = spawn(config(p, 50.0)).await;
    // Some traffic first, so that histograms and counters are non-zero.
    for i in 0..3 {
        let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(40, i), "max_tokens": 8,
            "stream": true, "ignore_eos": true});
        let _ = post_stream(&t.client, &format!("{}/v1/completions", t.base), &body).await;
    }
    let text = get_text(&t.client, &format!("{}/metrics", t.base)).await;
    let real_text = fixture("vllm-live/metrics_vllm_idle.txt");
    let ours = parse(&text);
    let real = parse(&real_text);
    assert_eq!(detect_engine(&ours), Engine::Vllm);
    assert_eq!(catalog_set(&ours), catalog_set(&real));
    assert_eq!(family_shapes(&ours), family_shapes(&real));
    for f in [
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:request_success",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:cache_config_info",
    ] {
        let found = ours
            .families
            .iter()
            .any(|fam| fam.name == f || fam.name == format!("{f}_total"));
        assert!(found, "{f} missing");
    }
    let count = |n: &str| value(&ours, n, None);
    assert_eq!(count("vllm:generation_tokens_total"), 24.0);
    assert_eq!(count("vllm:prompt_tokens_total"), 120.0);
    assert_eq!(count("vllm:time_to_first_token_seconds_count"), 3.0);
    assert_eq!(count("vllm:inter_token_latency_seconds_count"), 21.0);
    assert_eq!(count("vllm:e2e_request_latency_seconds_count"), 3.0);
    assert_eq!(
        value(
            &ours,
            "vllm:request_success_total",
            Some(("finished_reason", "length"))
        ),
        3.0
    );
    let info = ours
        .families
        .iter()
        .find(|f| f.name == "vllm:cache_config_info")
        .and_then(|f| f.samples.first())
        .expect("cache_config_info");
    assert_eq!(info.label("block_size"), Some("16"));
    assert_eq!(info.label("num_gpu_blocks"), Some("4096"));
    assert_eq!(info.label("enable_prefix_caching"), Some("True"));
    assert_eq!(info.value, 1.0);
    // The catalog reads the TTFT histogram with the capture's buckets.
    let ttft_buckets = normalize(Engine::Vllm, &ours)
        .into_iter()
        .filter(|s| s.metric == CatalogMetric::TtftSeconds)
        .filter(|s| matches!(s.part, Part::Bucket(_)))
        .count();
    let real_buckets = normalize(Engine::Vllm, &real)
        .into_iter()
        .filter(|s| s.metric == CatalogMetric::TtftSeconds)
        .filter(|s| matches!(s.part, Part::Bucket(_)))
        .count();
    assert_eq!(ttft_buckets, real_buckets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nim_flavor_serves_unprefixed_names_at_v1_metrics() {
    let mut cfg = config(Profile::named("balanced").expect("known"), 50.0);
    cfg.flavor = Flavor::Nim;
    let t = spawn(cfg).await;
    let body =
        json!({"model": "tiny-llama", "prompt": "hello", "max_tokens": 4, "ignore_eos": true});
    let _ = t
        .client
        .post(format!("{}/v1/completions", t.base))
        .json(&body)
        .send()
        .await
        .expect("send")
        .text()
        .await;
    let text = get_text(&t.client, &format!("{}/v1/metrics", t.base)).await;
    let ours = parse(&text);
    let real_text = fixture("nim/metrics_example.txt");
    let real = parse(&real_text);
    assert_eq!(detect_engine(&ours), Engine::Nim);
    assert_eq!(catalog_set(&ours), catalog_set(&real));
    assert!(!text.contains("vllm:"));
    assert_eq!(value(&ours, "generation_tokens_total", None), 4.0);
    assert_eq!(value(&ours, "num_request_max", None), 64.0);
    assert_eq!(
        value(&ours, "time_per_output_token_seconds_count", None),
        3.0
    );
    assert_eq!(
        text,
        get_text(&t.client, &format!("{}/metrics", t.base)).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_page_looks_like_dcgm_exporter_and_follows_the_kv_cache() {
    let mut p = Profile::named("balanced").expect("known");
    p.eos_probability = 0.0;
    let mut cfg = config(p, 1.0);
    cfg.gpus = 2;
    let t = spawn(cfg).await;
    let idle_text = get_text(&t.client, &format!("{}/metrics", t.gpu_base)).await;
    let idle = parse(&idle_text);
    assert_eq!(detect_engine(&idle), Engine::Dcgm);
    let set = catalog_set(&idle);
    for m in [
        CatalogMetric::GpuUtil,
        CatalogMetric::GpuMemUsedBytes,
        CatalogMetric::GpuMemTotalBytes,
        CatalogMetric::GpuMemBwUtil,
        CatalogMetric::GpuPowerWatts,
        CatalogMetric::GpuTempCelsius,
        CatalogMetric::GpuTensorActive,
    ] {
        assert!(set.contains(&m), "{m:?} missing from {set:?}");
    }
    // Same families, types and label names as dcgm-exporter 4.5 (GPU 1 of
    // the reconstruction has no pod attribution).
    let real_text = fixture("dcgm-exporter/metrics_reconstructed_4.5_Hostname.txt");
    let real = parse(&real_text);
    let strip_pod = |shapes: Vec<(String, MetricType, BTreeSet<String>)>| {
        shapes
            .into_iter()
            .map(|(n, t, mut l)| {
                for k in ["container", "namespace", "pod", "err_code", "err_msg"] {
                    l.remove(k);
                }
                (n, t, l)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip_pod(family_shapes(&idle)),
        strip_pod(family_shapes(&real))
    );
    let label_order: Vec<String> = idle.families[0].samples[0]
        .labels
        .iter()
        .map(|l| l.name.to_string())
        .collect();
    assert_eq!(
        label_order,
        [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "Hostname",
            "DCGM_FI_DRIVER_VERSION"
        ]
    );
    let fb_used = |page: &Exposition| value(page, "DCGM_FI_DEV_FB_USED", Some(("gpu", "1")));
    let idle_used = fb_used(&idle);
    assert_eq!(idle_used, 8192.0, "16 GiB of weights split over 2 GPUs");
    assert_eq!(
        value(&idle, "DCGM_FI_DEV_GPU_UTIL", Some(("gpu", "0"))),
        0.0
    );

    // Load: 8 long decodes of 1000-token prompts hold ~63 blocks x 2 MiB each.
    let mut handles = Vec::new();
    for i in 0..8 {
        let client = t.client.clone();
        let url = format!("{}/v1/completions", t.base);
        handles.push(tokio::spawn(async move {
            let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(1000, i), "max_tokens": 400,
                "ignore_eos": true, "stream": true});
            post_stream(&client, &url, &body).await
        }));
    }
    let sim = t.sim.clone();
    assert!(wait_for(Duration::from_secs(3), || sim.snapshot().running == 8).await);
    // The GPU page follows the engine's activity over ~1 s (an average that
    // still holds the prefill at first): within a few seconds of decoding it
    // must read busy and decode-dominated. Polled, not a fixed sleep.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let busy_text = loop {
        let text = get_text(&t.client, &format!("{}/metrics", t.gpu_base)).await;
        let page = parse(&text);
        let gpu0 = Some(("gpu", "0"));
        let decoding = value(&page, "DCGM_FI_DEV_GPU_UTIL", gpu0) > 20.0
            && value(&page, "DCGM_FI_PROF_DRAM_ACTIVE", gpu0)
                > value(&page, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu0);
        if decoding || std::time::Instant::now() >= deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let busy = parse(&busy_text);
    let kv_blocks = t.sim.snapshot().kv_blocks_used as f64;
    let used = fb_used(&busy);
    assert!(
        (used - (8192.0 + kv_blocks)).abs() <= 8.0,
        "FB_USED {used} MiB vs 8192 + {kv_blocks} blocks x 2 MiB / 2 GPUs"
    );
    assert!(value(&busy, "DCGM_FI_DEV_GPU_UTIL", Some(("gpu", "0"))) > 20.0);
    assert!(
        value(&busy, "DCGM_FI_PROF_DRAM_ACTIVE", Some(("gpu", "0")))
            > value(&busy, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Some(("gpu", "0"))),
        "decode-dominated: DRAM more active than the tensor pipe"
    );
    for h in handles {
        h.abort();
    }
}
