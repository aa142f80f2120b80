//! Query latency of the dashboard set over 24 h of 5 s data: this engine
//! (evaluation + JSON) beside a real Prometheus 2.x (HTTP API) holding the
//! same samples. A fixed workload, timed once per engine after a warm-up:
//! `cargo bench -p llmwatch-promql --bench dashboards`.
//!
//! Data: the vLLM page's first instance, the DCGM page and the synthetic
//! llm-d target (every dashboard metric no page has), one sample every 5 s
//! for 24 h. Prometheus gets it as TSDB blocks built by promtool in 1 h
//! pieces, so no more than one piece of OpenMetrics text is on disk.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::prometheus::{create_blocks, http_get, secs, start_prometheus, url_encode};
use llmwatch_promql::{instant_query, range_query, MemorySource, QueryOptions, Series};

const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z, 2 h aligned
const PIECE_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * 3_600_000;
const STEP_MS: i64 = 60_000;

/// Writes the samples of `[from, to)` (the first piece also takes earlier
/// ones, the last later ones) as OpenMetrics and builds blocks from them.
fn load_piece(
    series: &[Series],
    from: i64,
    to: i64,
    first: bool,
    last: bool,
    dir: &std::path::Path,
) {
    let piece: Vec<Series> = series
        .iter()
        .map(|s| Series {
            labels: s.labels.clone(),
            samples: s
                .samples
                .iter()
                .copied()
                .filter(|&(t, _)| (first || t >= from) && (last || t < to))
                .collect(),
        })
        .filter(|s| !s.samples.is_empty())
        .collect();
    let om = dir.join("piece.om");
    std::fs::write(&om, common::to_openmetrics(&piece)).expect("write openmetrics");
    create_blocks(&om, &dir.join("data"));
    std::fs::remove_file(&om).expect("remove openmetrics");
}

struct Timing {
    total: Duration,
    per_query: Vec<Duration>,
    errors: usize,
}

impl Timing {
    fn median_ms(&self) -> f64 {
        let mut v = self.per_query.clone();
        v.sort();
        v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }
}

fn time_each(queries: &[String], mut run: impl FnMut(&str) -> bool) -> Timing {
    let mut t = Timing {
        total: Duration::ZERO,
        per_query: Vec::new(),
        errors: 0,
    };
    for q in queries {
        let began = Instant::now();
        let ok = run(q);
        let took = began.elapsed();
        t.total += took;
        t.per_query.push(took);
        t.errors += usize::from(!ok);
    }
    t
}

fn report(what: &str, ours: &Timing, prom: &Timing) {
    println!(
        "{what}: llmwatch-promql {:.2} s (median {:.2} ms/query, {} errors) | prometheus {:.2} s (median {:.2} ms/query, {} errors) | ratio ours/prometheus {:.2}",
        ours.total.as_secs_f64(),
        ours.median_ms(),
        ours.errors,
        prom.total.as_secs_f64(),
        prom.median_ms(),
        prom.errors,
        ours.total.as_secs_f64() / prom.total.as_secs_f64()
    );
}

fn main() {
    let generated = Instant::now();
    let series = common::generate_for(&["first:vllm", "dcgm"], START_MS, DAY_MS, 5_000);
    let samples: usize = series.iter().map(|s| s.samples.len()).sum();
    println!(
        "{} series, {samples} samples, generated in {:.1} s",
        series.len(),
        generated.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let loaded = Instant::now();
    let pieces = DAY_MS / PIECE_MS;
    for k in 0..pieces {
        let from = START_MS + k * PIECE_MS;
        load_piece(
            &series,
            from,
            from + PIECE_MS,
            k == 0,
            k == pieces - 1,
            dir.path(),
        );
    }
    println!("blocks built in {:.1} s", loaded.elapsed().as_secs_f64());
    let prom = start_prometheus(dir.path());

    let mut source = MemorySource::new();
    series.into_iter().for_each(|s| source.add_series(s));
    let opts = QueryOptions::default();
    let queries: Vec<String> = common::dashboard_exprs()
        .iter()
        .map(|e| common::substitute(&e.raw))
        .collect();
    let (start, end) = (START_MS, START_MS + DAY_MS);

    let ours_range = |q: &str| {
        range_query(&source, q, start, end, STEP_MS, &opts)
            .map(|d| serde_json::to_vec(&d).map(|v| v.len()))
            .is_ok()
    };
    let prom_range = |q: &str| {
        let path = format!(
            "/api/v1/query_range?query={}&start={}&end={}&step=60",
            url_encode(q),
            secs(start),
            secs(end)
        );
        matches!(http_get(prom.addr, &path), Ok((200, _)))
    };
    // Warm-up: page cache, Prometheus' block readers, our allocator.
    let warm = &queries[..queries.len().min(30)];
    time_each(warm, ours_range);
    time_each(warm, prom_range);

    let ours = time_each(&queries, ours_range);
    let theirs = time_each(&queries, prom_range);
    report(
        &format!(
            "{} dashboard range queries, 24 h at a 60 s step",
            queries.len()
        ),
        &ours,
        &theirs,
    );

    let ours = time_each(&queries, |q| {
        instant_query(&source, q, end, &opts)
            .map(|d| serde_json::to_vec(&d).map(|v| v.len()))
            .is_ok()
    });
    let theirs = time_each(&queries, |q| {
        let path = format!("/api/v1/query?query={}&time={}", url_encode(q), secs(end));
        matches!(http_get(prom.addr, &path), Ok((200, _)))
    });
    report(
        &format!(
            "{} dashboard instant queries at the end of the day",
            queries.len()
        ),
        &ours,
        &theirs,
    );
}
