//! Every exposition file among the shared fixtures parses in lenient mode
//! (with zero errors where the file is well formed), plus spot checks of
//! values that naive parsers get wrong.

use std::fs;
use std::path::{Path, PathBuf};

use llmwatch_core::exposition::{
    detect_format, parse, parse_lenient, Exposition, Format, MetricFamily, MetricType, Sample,
};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"))
}

fn read(rel: &str) -> Vec<u8> {
    let path = fixtures().join(rel);
    fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "txt") {
            out.push(path);
        }
    }
}

/// Not expositions: name inventories and captured SSE streams.
fn is_exposition(name: &str) -> bool {
    !(name.starts_with("metric_names_inventory")
        || name.starts_with("metric_families")
        || name.starts_with("sse_"))
}

/// Files that are exposition snippets from documentation, with `...` lines
/// standing for elided samples: each `...` line is one error, nothing else.
fn elided_lines(text: &[u8]) -> usize {
    text.split(|&c| c == b'\n')
        .filter(|l| l.trim_ascii() == b"...")
        .count()
}

/// Files that are malformed on purpose (for a 0.0.4 parser): Prometheus 3
/// quoted UTF-8 names, every line of which must be rejected cleanly.
const MALFORMED: &[&str] = &["TestUTF8PromParse_input.prom.txt"];

#[test]
fn every_fixture_parses_leniently() {
    let mut files = Vec::new();
    walk(&fixtures(), &mut files);
    files.sort();
    let mut checked = 0;
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if !is_exposition(&name) {
            continue;
        }
        let body = fs::read(&path).expect("readable");
        let format = detect_format(None, &body);
        let (exp, errors) = parse_lenient(&body, format);
        let samples: usize = exp.families.iter().map(|f| f.samples.len()).sum();
        let elided = elided_lines(&body);
        if MALFORMED.contains(&name.as_str()) {
            let lines = body
                .split(|&c| c == b'\n')
                .filter(|l| !l.is_empty())
                .count();
            assert_eq!(errors.len(), lines, "{name}: every line is an error");
            assert_eq!(samples, 0, "{name}");
        } else {
            assert_eq!(errors.len(), elided, "{}: {errors:?}", path.display());
            assert!(
                errors.iter().all(|e| e.reason.contains("'.'")),
                "{name}: {errors:?}"
            );
            assert!(samples > 0, "{name}: no samples");
        }
        checked += 1;
    }
    println!("fixtures parsed leniently: {checked}");
    assert!(checked >= 25, "only {checked} fixture files found");
}

fn family<'e, 'a>(exp: &'e Exposition<'a>, name: &str) -> &'e MetricFamily<'a> {
    exp.families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name}"))
}

fn sample_where<'e, 'a>(
    fam: &'e MetricFamily<'a>,
    name: &str,
    labels: &[(&str, &str)],
) -> &'e Sample<'a> {
    fam.samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
}

fn clean(rel: &str) -> (Vec<u8>, Format) {
    let body = read(rel);
    let format = detect_format(Some("text/plain; version=0.0.4; charset=utf-8"), &body);
    (body, format)
}

#[test]
fn vllm_live_idle() {
    let (body, format) = clean("vllm-live/metrics_vllm_idle.txt");
    let (exp, errors) = parse_lenient(&body, format);
    assert!(errors.is_empty(), "{errors:?}");
    let kv = family(&exp, "vllm:kv_cache_usage_perc");
    assert_eq!(kv.metric_type, MetricType::Gauge);
    assert_eq!(
        kv.help.as_deref(),
        Some("KV-cache usage. 1 means 100 percent usage.")
    );
    let s = &kv.samples[0];
    assert_eq!(s.value, 0.0);
    assert_eq!(s.label("engine"), Some("0"));
    assert_eq!(s.label("model_name"), Some("tiny-llama"));
    let h = family(&exp, "vllm:request_prompt_tokens");
    assert_eq!(h.metric_type, MetricType::Histogram);
    assert!(h
        .samples
        .iter()
        .any(|s| s.name == "vllm:request_prompt_tokens_sum"));
    assert!(h.samples.iter().any(|s| s.label("le") == Some("+Inf")));
    // The strict 0.0.4 parser agrees with the lenient one on a clean page.
    assert_eq!(parse(&body, Format::PrometheusText).expect("strict"), exp);
}

#[test]
fn vllm_histogram_bucket_count() {
    let (body, format) = clean("vllm/metrics_example.txt");
    let (exp, errors) = parse_lenient(&body, format);
    assert!(errors.is_empty(), "{errors:?}");
    let h = family(&exp, "vllm:e2e_request_latency_seconds");
    assert_eq!(h.metric_type, MetricType::Histogram);
    let b = sample_where(
        h,
        "vllm:e2e_request_latency_seconds_bucket",
        &[("le", "2.0")],
    );
    assert_eq!(b.value, 2.0);
    assert_eq!(b.label("model_name"), Some("Qwen/Qwen3-0.6B"));
    // prometheus_client's 0.0.4 `_created` gauges are their own families.
    let created = family(&exp, "vllm:prefix_cache_queries_created");
    assert_eq!(created.metric_type, MetricType::Gauge);
    assert_eq!(created.samples[0].value, 1.768_264_339_889_867_3e9);
}

#[test]
fn nim_three_digit_exponent_and_no_final_newline() {
    let body = read("nim/metrics_example.txt");
    assert_ne!(body.last(), Some(&b'\n'));
    let (exp, errors) = parse_lenient(&body, detect_format(None, &body));
    assert!(errors.is_empty(), "{errors:?}");
    let vm = family(&exp, "process_virtual_memory_bytes");
    assert_eq!(vm.samples[0].value, 115_891_634_176.0);
    // The last line, without '\n', is not lost.
    let last = family(&exp, "request_failure_total");
    assert_eq!(last.metric_type, MetricType::Counter);
    assert_eq!(
        last.samples[0].label("model_name"),
        Some("meta/llama-3.1-8b-instruct")
    );
    // Go's strict parser wants the final newline.
    assert!(parse(&body, Format::PrometheusText).is_err());
}

#[test]
fn dcgm_no_final_newline_note_comments_long_label_sets() {
    let body = read("dcgm-exporter/metrics_example.txt");
    assert_ne!(body.last(), Some(&b'\n'));
    let (exp, errors) = parse_lenient(&body, detect_format(None, &body));
    assert!(errors.is_empty(), "{errors:?}");
    let all: Vec<&Sample<'_>> = exp.families.iter().flat_map(|f| f.samples.iter()).collect();
    let last = all.iter().max_by_key(|s| s.labels.len()).expect("samples");
    assert!(last.labels.len() >= 10);
    let tail = exp
        .families
        .last()
        .and_then(|f| f.samples.last())
        .expect("last sample");
    assert_eq!(tail.value, 0.000003);
    assert_eq!(tail.label("pod"), Some("ray-1111111"));

    let body = read("dcgm-exporter/metrics_example_server_test.txt");
    let (exp, errors) = parse_lenient(&body, Format::PrometheusText);
    assert!(errors.is_empty());
    let t = family(&exp, "TEST_METRIC");
    assert_eq!(t.help, None, "empty HELP is no HELP");
    assert_eq!(t.samples[0].label("pci_bus_id"), Some(""));
    assert_eq!(t.samples[0].label("modelName"), Some("NVIDIA T400 4GB"));

    // The README snippet: `{gpu="0", UUID=...}` with a space, a sentinel.
    let body = read("dcgm-exporter/metrics_example_readme.txt");
    let (exp, errors) = parse_lenient(&body, Format::PrometheusText);
    assert_eq!(errors.len(), 2, "the two '...' lines");
    let temp = family(&exp, "DCGM_FI_DEV_MEMORY_TEMP");
    assert_eq!(temp.samples[0].value, 9_223_372_036_854_775_794.0);
    assert_eq!(
        temp.samples[0].label("UUID"),
        Some("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52")
    );
}

#[test]
fn tgi_blank_lines() {
    let body = read("tgi/metrics_example.txt");
    assert!(body.windows(2).any(|w| w == b"\n\n"));
    let (exp, errors) = parse_lenient(&body, detect_format(None, &body));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(exp.families.len(), 24);
    let c = family(&exp, "tgi_request_count");
    assert_eq!(c.metric_type, MetricType::Counter);
    assert_eq!(c.samples[0].value, 12.0);
    // 0.0.4 strict accepts blank lines; OpenMetrics strict would not.
    assert!(parse(&body, Format::PrometheusText).is_ok());
    assert!(parse(&body, Format::OpenMetrics).is_err());
}

#[test]
fn triton_broken_histogram_becomes_untyped() {
    let body = read("tensorrt-llm-triton/metrics_example_triton_docs_histogram_BROKEN.txt");
    let (exp, errors) = parse_lenient(&body, Format::PrometheusText);
    assert!(errors.is_empty(), "{errors:?}");
    let declared = family(&exp, "nv_first_response_histogram_ms");
    assert_eq!(declared.metric_type, MetricType::Histogram);
    assert!(declared.samples.is_empty());
    let count = family(&exp, "nv_inference_first_response_histogram_ms_count");
    assert_eq!(count.metric_type, MetricType::Unknown);
    assert_eq!(count.samples[0].value, 37.0);
    let buckets = family(&exp, "nv_inference_first_response_histogram_ms");
    assert_eq!(buckets.metric_type, MetricType::Unknown);
    assert_eq!(buckets.samples.len(), 5);
    assert_eq!(buckets.samples[4].label("le"), Some("+Inf"));
}

#[test]
fn triton_summary_count_and_sum_before_quantiles() {
    let body = read("tensorrt-llm-triton/metrics_example_triton_docs_summary.txt");
    let exp = parse(&body, Format::PrometheusText).expect("strict");
    let s = family(&exp, "nv_inference_queue_summary_us");
    assert_eq!(s.metric_type, MetricType::Summary);
    assert_eq!(s.samples.len(), 7);
    assert_eq!(s.samples[0].name, "nv_inference_queue_summary_us_count");
}

#[test]
fn escaped_label_values() {
    let body = read("prometheus-text-suite/prometheus-textparse/TestPromParse_input.prom.txt");
    let (exp, errors) = parse_lenient(&body, Format::PrometheusText);
    assert!(errors.is_empty(), "{errors:?}");
    let t = family(&exp, "testmetric");
    let s = sample_where(t, "testmetric", &[("label", "\"bar\"")]);
    assert_eq!(s.value, 1.0);
    // Unescaping allocates; plain values borrow.
    assert!(matches!(s.labels[0].value, std::borrow::Cow::Owned(_)));
    let w = family(&exp, "wind_speed");
    assert!(matches!(
        w.samples[0].labels[0].value,
        std::borrow::Cow::Borrowed(_)
    ));

    let body = read("prometheus-text-suite/prometheus-common-expfmt/fuzz-corpus/from_test_parse_2");
    let (exp, errors) = parse_lenient(&body, Format::PrometheusText);
    assert!(errors.is_empty());
    let n = family(&exp, "name");
    assert_eq!(n.samples[1].label("basename"), Some("base\"v\\al\nue"));
}

#[test]
fn concatenated_registries_and_openmetrics_negotiation() {
    // Dynamo worker: runtime + engine expositions concatenated.
    for rel in [
        "dynamo/metrics_example.txt",
        "dynamo/metrics_example_worker_trtllm.txt",
    ] {
        let body = read(rel);
        let (exp, errors) = parse_lenient(&body, detect_format(None, &body));
        assert!(errors.is_empty(), "{rel}: {errors:?}");
        assert!(!exp.families.is_empty());
    }
    // The OM benchmark corpus is detected as OpenMetrics and typed OM-style.
    let body = read("prometheus-text-suite/prometheus-textparse/alltypes.5mfs.om.txt");
    assert_eq!(detect_format(None, &body), Format::OpenMetrics);
    let (exp, errors) = parse_lenient(&body, Format::OpenMetrics);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(exp
        .families
        .iter()
        .any(|f| f.metric_type == MetricType::Histogram));
}
