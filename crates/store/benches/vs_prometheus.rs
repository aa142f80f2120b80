//! Bytes per sample beside Prometheus' own TSDB, on the same samples
//! (issue 13): for each engine fixture page, a page sequence with its
//! counters and histograms advancing under load (`tests/common/loaded.rs`),
//! `SCRAPES` (1 440 = 2 h of 5 s) scrapes of one target. llmwatch stores
//! them through `write_scrapes` and seals them (a clean shutdown);
//! Prometheus gets the very same samples as an OpenMetrics file with
//! timestamps, turned into TSDB blocks by `promtool tsdb create-blocks-from
//! openmetrics` (its chunks + index + meta, every file of the blocks).
//! Printed as a table; a fixed workload, not a timing.
//!
//! `cargo bench -p llmwatch-store --bench vs_prometheus`
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

#[path = "../tests/common/loaded.rs"]
mod loaded;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use llmwatch_store::{RawSample, ScrapeRecord, Store, TargetKind};
use loaded::LoadedVllm;

const STEP_MS: i64 = 5_000;
const T0: i64 = 1_750_000_000_000;

/// (label, fixture page, engine the page is normalised as).
const FIXTURES: [(&str, &str, &str); 8] = [
    (
        "vLLM (live capture)",
        "vllm-live/metrics_vllm_idle.txt",
        "vllm",
    ),
    ("SGLang", "sglang/metrics_example.txt", "sglang"),
    ("TGI", "tgi/metrics_example.txt", "tgi"),
    (
        "llama.cpp (live capture)",
        "llamacpp-live/metrics_llamacpp_idle.txt",
        "llamacpp",
    ),
    ("NIM", "nim/metrics_example.txt", "nim"),
    ("Dynamo", "dynamo/metrics_example.txt", "dynamo"),
    (
        "TensorRT-LLM (Triton)",
        "tensorrt-llm-triton/metrics_example.txt",
        "trtllm",
    ),
    ("dcgm-exporter", "dcgm-exporter/metrics_example.txt", "dcgm"),
];

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v:?}")
    }
}

/// The pages' samples as OpenMetrics with timestamps, series by series
/// (a label set once, as Prometheus keeps it), and their count.
fn openmetrics(pages: &[Vec<RawSample>]) -> (String, u64) {
    let mut seen = HashSet::new();
    let mut columns: Vec<usize> = Vec::new();
    for (i, line) in pages[0].iter().enumerate() {
        if seen.insert((line.name.clone(), line.labels.clone())) {
            columns.push(i);
        }
    }
    let mut out = String::new();
    let mut samples = 0;
    for i in columns {
        let line = &pages[0][i];
        let labels: Vec<String> = line
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let head = format!("{}{{{}}}", line.name, labels.join(","));
        for (n, page) in pages.iter().enumerate() {
            let ts = T0 + n as i64 * STEP_MS;
            let value = page[i].value;
            let _ = writeln!(
                out,
                "{head} {} {}.{:03}",
                format_value(value),
                ts / 1000,
                ts % 1000
            );
            samples += 1;
        }
    }
    out.push_str("# EOF\n");
    (out, samples)
}

fn dir_bytes(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Prometheus' bytes for the samples of `pages`, and their count.
fn prometheus_bytes(dir: &Path, pages: &[Vec<RawSample>]) -> (u64, u64) {
    let (text, samples) = openmetrics(pages);
    let om = dir.join("samples.om");
    std::fs::write(&om, text).expect("write openmetrics");
    let data = dir.join("tsdb");
    let status = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics", "--quiet"])
        .arg(&om)
        .arg(&data)
        .status()
        .expect("promtool is installed (Debian package `prometheus`)");
    assert!(status.success(), "promtool failed on {om:?}");
    std::fs::remove_file(&om).expect("remove openmetrics");
    (dir_bytes(&data), samples)
}

fn main() {
    let scrapes: usize = std::env::var("SCRAPES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1440);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("| page | lines | samples | llmwatch B/sample | Prometheus TSDB B/sample | ratio |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (label, path, engine) in FIXTURES {
        let body = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures")
                .join(path),
        )
        .expect("fixture");
        let mut generator = LoadedVllm::new(&body);
        let pages: Vec<Vec<RawSample>> = (0..scrapes).map(|_| generator.next_page()).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let stats = runtime.block_on(async {
            let store = Store::open(&dir.path().join("store.db"))
                .await
                .expect("open");
            let target = store
                .upsert_target("t", TargetKind::Engine, "http://t", 0)
                .await
                .expect("target");
            for (c, chunk) in pages.chunks(60).enumerate() {
                let batch: Vec<ScrapeRecord> = chunk
                    .iter()
                    .enumerate()
                    .map(|(k, page)| ScrapeRecord {
                        target_id: target,
                        ts_ms: T0 + (c * 60 + k) as i64 * STEP_MS,
                        up: true,
                        duration_ms: 3.0 + k as f64 * 0.01,
                        body_bytes: body.len() as u64,
                        error: None,
                        engine: Some(engine.into()),
                        samples: Vec::new(),
                        raw: page.clone(),
                    })
                    .collect();
                store.write_scrapes(&batch).await.expect("write");
            }
            store.seal_heads().await.expect("seal");
            store.db_stats().await.expect("stats")
        });
        let ours = stats.bytes_per_sample.unwrap_or(f64::NAN);
        let (prom_bytes, prom_samples) = prometheus_bytes(dir.path(), &pages);
        let theirs = prom_bytes as f64 / prom_samples.max(1) as f64;
        println!(
            "| {label} | {} | {} | {ours:.2} | {theirs:.2} | {:.2} |",
            pages[0].len(),
            stats.samples,
            ours / theirs
        );
    }
}
