//! Exposition parsing throughput: ours (lenient 0.0.4) vs `prometheus-parse`
//! on the same deterministic ~5 MB page.
//!
//! cargo bench -p llmwatch-core --bench parse -- --warm-up-time 1 --measurement-time 5
//!
//! Each iteration parses and drops the whole result (~12 MB of `Sample`s and
//! labels for this page), as a scraper does. Both parsers run under
//! mimalloc, the binary's allocator: with glibc's default heap trimming a
//! good part of the time is page faults on re-grown heap memory.
//! Two pages: `vllm:` names as vLLM writes them (prometheus-parse drops
//! every line whose name has a colon, so it does far less work there), and
//! the same page without colons, which both parsers read in full.

use std::fmt::Write as _;

/// The allocator the llmwatch binary uses, for both parsers alike.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use llmwatch_core::exposition::{parse_lenient, Format};

/// A small deterministic PRNG (xorshift64*), so the page is identical on
/// every run and machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn float(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const MODELS: &[&str] = &[
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-0.6B",
    "mistralai/Mistral-7B-Instruct-v0.3",
];

const LATENCY_BUCKETS: &[&str] = &[
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
    "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf",
];

/// A page of about `target` bytes: vLLM-like histograms with long label sets,
/// dcgm-like gauges with 15 labels, counters with escaped label values, and
/// HELP/TYPE for every family.
///
/// `prefix` starts the vLLM-like names: `"vllm:"` as vLLM writes them, or
/// `"vllm_"` for a page that prometheus-parse (which drops every name with a
/// colon) reads in full.
fn page(target: usize, prefix: &str) -> String {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(target + 64 * 1024);
    let mut round = 0;
    while out.len() < target {
        // vLLM-like histograms.
        for h in 0..6 {
            let name = format!("{prefix}request_latency_{h}_r{round}_seconds");
            let _ = writeln!(out, "# HELP {name} Histogram of latency in seconds.");
            let _ = writeln!(out, "# TYPE {name} histogram");
            for (engine, model) in MODELS.iter().enumerate() {
                let mut count = 0u64;
                for le in LATENCY_BUCKETS {
                    count += rng.below(50);
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{engine=\"{engine}\",le=\"{le}\",model_name=\"{model}\",finished_reason=\"stop\"}} {count}.0"
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_sum{{engine=\"{engine}\",model_name=\"{model}\",finished_reason=\"stop\"}} {}",
                    rng.float() * 1e4
                );
                let _ = writeln!(
                    out,
                    "{name}_count{{engine=\"{engine}\",model_name=\"{model}\",finished_reason=\"stop\"}} {count}.0"
                );
            }
        }
        // dcgm-like gauges, 15 labels each.
        for f in 0..8 {
            let name = format!("DCGM_FI_DEV_FIELD_{f}_R{round}");
            let _ = writeln!(out, "# HELP {name} Some GPU field (in %).");
            let _ = writeln!(out, "# TYPE {name} gauge");
            for gpu in 0..8 {
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{gpu}\",UUID=\"GPU-{:08x}-d9cf-fef3-62e9-d92044ab6e52\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{gpu}\",modelName=\"NVIDIA A10G\",Hostname=\"ray-worker-{:04}\",DCGM_FI_CUDA_DRIVER_VERSION=\"12040\",DCGM_FI_DEV_BRAND=\"NVIDIA\",DCGM_FI_DEV_MINOR_NUMBER=\"{gpu}\",DCGM_FI_DEV_NAME=\"NVIDIA A10G\",DCGM_FI_DEV_SERIAL=\"1111111\",DCGM_FI_DRIVER_VERSION=\"550.144.03\",container=\"ray-worker\",namespace=\"ray-llm\",pod=\"ray-{:07}\"}} {:.6}",
                    rng.next() as u32,
                    gpu * 16,
                    rng.below(10000),
                    rng.below(10_000_000),
                    rng.float() * 100.0
                );
            }
        }
        // Counters with escaped label values and integer values.
        for c in 0..4 {
            let name = format!("http_requests_{c}_r{round}_total");
            let _ = writeln!(
                out,
                "# HELP {name} Requests by path (\\\\ and \\n escaped)."
            );
            let _ = writeln!(out, "# TYPE {name} counter");
            for p in 0..10 {
                let _ = writeln!(
                    out,
                    "{name}{{method=\"POST\",path=\"/v1/\\\"chat\\\"\\\\completions/{p}\",status=\"200\"}} {}",
                    rng.below(1_000_000_000)
                );
            }
        }
        round += 1;
    }
    out
}

fn bench_page(c: &mut Criterion, group_name: &str, text: &str) {
    let bytes = text.as_bytes();
    // Sanity: both parsers read the page; report how much each kept.
    let (exp, errors) = parse_lenient(bytes, Format::PrometheusText);
    assert!(errors.is_empty(), "{:?}", errors.first());
    let ours: usize = exp.families.iter().map(|f| f.samples.len()).sum();
    let theirs = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("prometheus-parse")
        .samples
        .len();
    eprintln!(
        "{group_name}: {} bytes, {} lines, {ours} samples (prometheus-parse keeps {theirs})",
        bytes.len(),
        text.lines().count()
    );

    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.sample_size(20);
    group.bench_function("llmwatch_lenient_0.0.4", |b| {
        b.iter(|| parse_lenient(black_box(bytes), Format::PrometheusText))
    });
    group.bench_function("prometheus_parse_0.2", |b| {
        b.iter(|| {
            prometheus_parse::Scrape::parse(black_box(text).lines().map(|l| Ok(l.to_owned())))
        })
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    // As engines write it: prometheus-parse silently drops the `vllm:*`
    // lines (~80% of samples), so it does less work than we do here.
    bench_page(c, "parse_5MB_vllm_page", &page(5 * 1024 * 1024, "vllm:"));
    // The same page without colons: both parsers read every sample.
    bench_page(
        c,
        "parse_5MB_colon_free_page",
        &page(5 * 1024 * 1024, "vllm_"),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
