//! Query latency of the dashboard set over 24 h of data, llmwatch's
//! `/prometheus/api/v1/query_range` beside a real Prometheus 2.42 holding
//! the same samples, both through their HTTP APIs on loopback with the same
//! client (one HTTP/1.0 request at a time), so the comparison is like for
//! like. llmwatch's part is also timed in-process (store read, evaluation,
//! JSON; no HTTP) to show what HTTP adds. A fixed workload, timed once per
//! engine after a warm-up:
//! `cargo bench -p llmwatch-web --bench prom_store`.
//!
//! Data: the promql crate's generator (the vLLM page's first instance, the
//! DCGM page and the synthetic target with every other dashboard metric),
//! one sample every 5 s for 24 h, written into the store as scrapes of
//! three targets (every line kept, sealed into blocks as the daemon does).
//! Prometheus gets the same series under the labels llmwatch's API gives
//! them (`job` = target kind, `instance`, `target`), as TSDB blocks built by
//! promtool in 1 h pieces. The dashboard expressions and the data come from
//! the promql crate's test helpers (`tests/common`), shared, not copied.

#[path = "../../promql/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::prometheus::{create_blocks, http_get, secs, start_prometheus, url_encode};
use llmwatch_promql::{range_query, Labels, QueryOptions, Series};
use llmwatch_store::{RawSample, ScrapeRecord, Store, TargetKind};
use llmwatch_web::prometheus::{fetch::source_for, LIMITS, MAX_SAMPLES};

const START_MS: i64 = 1_767_225_600_000;
const PIECE_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * 3_600_000;
const STEP_MS: i64 = 60_000;

struct Target {
    name: String,
    kind: TargetKind,
    instance: String,
    series: Vec<usize>,
}

/// Groups the generated series into targets by (job, instance).
fn targets_of(series: &[Series]) -> Vec<Target> {
    let mut by_key: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, s) in series.iter().enumerate() {
        let job = s.labels.get("job").unwrap_or("none").to_string();
        let instance = s.labels.get("instance").unwrap_or("none").to_string();
        by_key.entry((job, instance)).or_default().push(i);
    }
    by_key
        .into_iter()
        .enumerate()
        .map(|(n, ((job, instance), series))| Target {
            name: format!("{job}-{n}"),
            kind: if job == "dcgm" {
                TargetKind::Gpu
            } else {
                TargetKind::Engine
            },
            instance,
            series,
        })
        .collect()
}

/// The labels llmwatch's API gives a series of `target`.
fn api_labels(labels: &Labels, target: &Target) -> Labels {
    let mut pairs: Vec<(String, String)> = labels
        .pairs()
        .iter()
        .filter(|(k, _)| k != "job" && k != "instance")
        .cloned()
        .collect();
    pairs.push(("job".into(), target.kind.as_str().into()));
    pairs.push(("instance".into(), target.instance.clone()));
    pairs.push(("target".into(), target.name.clone()));
    Labels::new(pairs)
}

/// Writes every target's samples as scrapes, 200 scrapes a batch.
async fn fill_store(store: &Store, series: &[Series], targets: &[Target]) {
    for target in targets {
        let url = format!("http://{}/metrics", target.instance);
        let id = store
            .upsert_target(&target.name, target.kind, &url, START_MS)
            .await
            .expect("target");
        let times: BTreeSet<i64> = target
            .series
            .iter()
            .flat_map(|&i| series[i].samples.iter().map(|(t, _)| *t))
            .collect();
        let mut cursors = vec![0usize; target.series.len()];
        let mut batch = Vec::new();
        for &ts_ms in &times {
            let mut raw = Vec::new();
            for (slot, &i) in target.series.iter().enumerate() {
                let s = &series[i];
                let Some(&(t, value)) = s.samples.get(cursors[slot]) else {
                    continue;
                };
                if t != ts_ms {
                    continue;
                }
                cursors[slot] += 1;
                if llmwatch_promql::is_stale_marker(value) {
                    continue;
                }
                raw.push(RawSample {
                    name: s.labels.metric_name().unwrap_or("").into(),
                    labels: s
                        .labels
                        .pairs()
                        .iter()
                        .filter(|(k, _)| !matches!(k.as_str(), "__name__" | "job" | "instance"))
                        .cloned()
                        .collect(),
                    value,
                });
            }
            batch.push(ScrapeRecord {
                target_id: id,
                ts_ms,
                up: !raw.is_empty(),
                duration_ms: 1.0,
                body_bytes: 0,
                error: None,
                engine: None,
                samples: Vec::new(),
                raw,
            });
            if batch.len() == 200 {
                store.write_scrapes(&batch).await.expect("write");
                batch.clear();
            }
        }
        store.write_scrapes(&batch).await.expect("write");
    }
    store.seal_heads().await.expect("seal");
}

fn load_prometheus(series: &[Series], dir: &std::path::Path) {
    let pieces = DAY_MS / PIECE_MS;
    for k in 0..pieces {
        let (from, to) = (START_MS + k * PIECE_MS, START_MS + (k + 1) * PIECE_MS);
        let piece: Vec<Series> = series
            .iter()
            .map(|s| Series {
                labels: s.labels.clone(),
                samples: s
                    .samples
                    .iter()
                    .copied()
                    .filter(|&(t, _)| (k == 0 || t >= from) && (k == pieces - 1 || t < to))
                    .collect(),
            })
            .filter(|s| !s.samples.is_empty())
            .collect();
        let om = dir.join("piece.om");
        std::fs::write(&om, common::to_openmetrics(&piece)).expect("write openmetrics");
        create_blocks(&om, &dir.join("data"));
        std::fs::remove_file(&om).expect("remove openmetrics");
    }
}

/// The dashboard set with Grafana's variables substituted; `job` takes the
/// values llmwatch's API gives (`engine`, `gpu`).
fn queries() -> Vec<String> {
    common::dashboard_exprs()
        .iter()
        .map(|e| {
            common::substitute(&e.raw)
                .replace("(vllm|sglang|tgi|dcgm|llm-d)", "(engine|gpu)")
                .replace("job=\"vllm\"", "job=\"engine\"")
        })
        .collect()
}

fn time_each(
    queries: &[String],
    mut run: impl FnMut(&str) -> bool,
) -> (Duration, Vec<Duration>, usize) {
    let (mut total, mut each, mut errors) = (Duration::ZERO, Vec::new(), 0);
    for q in queries {
        let began = Instant::now();
        errors += usize::from(!run(q));
        let took = began.elapsed();
        total += took;
        each.push(took);
    }
    each.sort();
    (total, each, errors)
}

/// Serves llmwatch's Prometheus API over `store` on a loopback port.
fn serve_llmwatch(runtime: &tokio::runtime::Runtime, store: &Store) -> std::net::SocketAddr {
    let router = llmwatch_web::prometheus::router().with_state(store.clone());
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("llmwatch's API stopped: {e}");
            }
        });
        addr
    })
}

/// One line of the results table.
fn report(what: &str, total: Duration, each: &[Duration], errors: usize) -> String {
    let at = |q: usize| {
        each.get(each.len() * q / 100)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    format!(
        "{what}: total {:.2} s, median {:.1} ms, p95 {:.1} ms, max {:.1} ms, {errors} errors",
        total.as_secs_f64(),
        at(50),
        at(95),
        each.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
    )
}

fn main() {
    let began = Instant::now();
    let generated = common::generate_for(&["first:vllm", "dcgm"], START_MS, DAY_MS, 5_000);
    let targets = targets_of(&generated);
    let mut series = generated.clone();
    for target in &targets {
        for &i in &target.series {
            series[i].labels = api_labels(&generated[i].labels, target);
        }
    }
    drop(generated);
    let samples: usize = series.iter().map(|s| s.samples.len()).sum();
    println!(
        "{} series in {} targets, {samples} samples",
        series.len(),
        targets.len()
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = runtime.block_on(async {
        let store = Store::open(&dir.path().join("llmwatch.db"))
            .await
            .expect("store");
        fill_store(&store, &series, &targets).await;
        store
    });
    println!("store filled in {:.1} s", began.elapsed().as_secs_f64());
    let loaded = Instant::now();
    load_prometheus(&series, dir.path());
    drop(series);
    println!(
        "Prometheus blocks built in {:.1} s",
        loaded.elapsed().as_secs_f64()
    );
    let prom = start_prometheus(dir.path());
    let ours_addr = serve_llmwatch(&runtime, &store);

    let queries = queries();
    let opts = QueryOptions {
        max_samples: MAX_SAMPLES,
        ..QueryOptions::default()
    };
    let (start, end) = (START_MS, START_MS + DAY_MS);
    let path = |q: &str| {
        format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={}",
            url_encode(q),
            secs(start),
            secs(end),
            STEP_MS / 1000
        )
    };
    let ours_http = |q: &str| {
        matches!(
            http_get(ours_addr, &format!("/prometheus{}", path(q))),
            Ok((200, _))
        )
    };
    let theirs = |q: &str| matches!(http_get(prom.addr, &path(q)), Ok((200, _)));
    let ours_in_process = |q: &str| {
        runtime.block_on(async {
            match source_for(&store, q, start, end, &opts, LIMITS).await {
                Ok(source) => range_query(&source, q, start, end, STEP_MS, &opts)
                    .map(|d| serde_json::to_vec(&d).map(|v| v.len()))
                    .is_ok(),
                Err(_) => false,
            }
        })
    };
    // The floor of one loopback request: a query that reads nothing.
    let trivial = ["vector(1)".to_string()];
    let (ours_floor, _, _) = time_each(&trivial, ours_http);
    let (prom_floor, _, _) = time_each(&trivial, theirs);
    let warm = &queries[..queries.len().min(30)];
    time_each(warm, ours_http);
    time_each(warm, theirs);
    let (ours_total, ours_each, ours_errors) = time_each(&queries, ours_http);
    let (prom_total, prom_each, prom_errors) = time_each(&queries, theirs);
    let (local_total, local_each, local_errors) = time_each(&queries, ours_in_process);
    let median = |v: &[Duration]| v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64());
    println!(
        "{} dashboard range queries, 24 h at a {} s step, one at a time:",
        queries.len(),
        STEP_MS / 1000
    );
    println!(
        "  {}",
        report("llmwatch HTTP", ours_total, &ours_each, ours_errors)
    );
    println!(
        "  {}",
        report("Prometheus HTTP", prom_total, &prom_each, prom_errors)
    );
    println!(
        "  {}",
        report(
            "llmwatch in-process",
            local_total,
            &local_each,
            local_errors
        )
    );
    println!(
        "  one loopback request answering vector(1): llmwatch {:.2} ms, Prometheus {:.2} ms",
        ours_floor.as_secs_f64() * 1000.0,
        prom_floor.as_secs_f64() * 1000.0
    );
    println!(
        "  ratio llmwatch / Prometheus over HTTP: total {:.2}, median {:.2}",
        ours_total.as_secs_f64() / prom_total.as_secs_f64(),
        median(&ours_each) / median(&prom_each)
    );
}
