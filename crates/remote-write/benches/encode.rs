//! Remote-write encoding throughput on one core: a request of four scrapes
//! of the real vLLM page (fixtures/vllm-live, every sample line, labels
//! with job/instance/target attached) built, protobuf-encoded and
//! snappy-compressed, as the sender does per request; and the encode +
//! compress step alone. Throughput is in samples.
//!
//! `cargo bench -p llmwatch-remote-write --bench encode`

use std::path::Path;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use llmwatch_core::exposition::{detect_format, parse_lenient};
use llmwatch_remote_write::{encode, series_labels, EncodedLabels, WriteRequestBuilder};

/// (name, labels, value) of every sample line of the captured page.
/// One page line: name, labels, value.
type Line = (String, Vec<(String, String)>, f64);

fn page() -> Vec<Line> {
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/vllm-live/metrics_vllm_idle.txt"),
    )
    .expect("the fixture page");
    let (page, _) = parse_lenient(&body, detect_format(None, &body));
    page.families
        .iter()
        .flat_map(|f| f.samples.iter())
        .map(|s| {
            let labels = s
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            (s.name.to_string(), labels, s.value)
        })
        .collect()
}

const SCRAPES: i64 = 4;

fn build(lines: &[Line], cached: &[EncodedLabels]) -> Vec<u8> {
    let mut builder = WriteRequestBuilder::new();
    for scrape in 0..SCRAPES {
        for (i, (_, _, value)) in lines.iter().enumerate() {
            builder.push(
                i as u64,
                || cached[i].clone(),
                1_750_000_000_000 + scrape * 5_000,
                value + scrape as f64,
            );
        }
    }
    builder.finish()
}

fn bench(c: &mut Criterion) {
    let lines = page();
    let attached = [
        ("job", "llmwatch"),
        ("instance", "10.0.0.5:8000"),
        ("target", "vllm-a"),
    ];
    let cached: Vec<EncodedLabels> = lines
        .iter()
        .map(|(n, l, _)| EncodedLabels::new(&series_labels(n, l, &attached)))
        .collect();
    let samples = lines.len() as u64 * SCRAPES as u64;
    let mut group = c.benchmark_group("remote_write");
    group.throughput(Throughput::Elements(samples));
    group.bench_function("build_encode_compress", |b| {
        b.iter(|| build(&lines, &cached))
    });
    group.bench_function("labels_build_encode_compress", |b| {
        b.iter(|| {
            let fresh: Vec<EncodedLabels> = lines
                .iter()
                .map(|(n, l, _)| EncodedLabels::new(&series_labels(n, l, &attached)))
                .collect();
            build(&lines, &fresh)
        })
    });
    let mut builder = WriteRequestBuilder::new();
    for scrape in 0..SCRAPES {
        for (i, (_, _, value)) in lines.iter().enumerate() {
            builder.push(i as u64, || cached[i].clone(), scrape * 5_000, *value);
        }
    }
    let request = builder.request();
    group.bench_function("encode_compress", |b| {
        b.iter_batched(|| (), |()| encode(&request), BatchSize::SmallInput)
    });
    group.finish();
    eprintln!(
        "{} samples per request, {} bytes on the wire",
        samples,
        build(&lines, &cached).len()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
