//! Differential test: the same hour of samples in a real Prometheus 2.x
//! (loaded with `promtool tsdb create-blocks-from openmetrics`) and in a
//! [`MemorySource`]; every dashboard expression plus edge cases, as instant
//! and range queries, must give the same series, label sets and timestamps,
//! with values within 1 %. Prometheus missing is a failure, not a skip.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use common::prometheus::{create_blocks, prom_query, secs, start_prometheus, url_encode};

use llmwatch_promql::{instant_query, range_query, MemorySource, QueryOptions};
use serde_json::Value as Json;

const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const MIN_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MIN_MS;

/// Edge cases beyond the dashboards: every function and operator the engine
/// evaluates, counter resets, the target that disappears, offsets, `@`.
const EDGE_CASES: &[&str] = &[
    "vllm:num_requests_running",
    "vllm:num_requests_running offset 10m",
    "vllm:num_requests_running offset 2h",
    "vllm:num_requests_running @ 1767228600",
    "rate(vllm:num_requests_running[5m] @ end())",
    "rate(vllm:prompt_tokens_total[5m])",
    "rate(vllm:prompt_tokens_total[1m])",
    "rate(vllm:prompt_tokens_total[30s])",
    "rate(vllm:prompt_tokens_total[2h])",
    "increase(vllm:prompt_tokens_total[10m])",
    "increase(vllm:prompt_tokens_total[10m] offset 5m)",
    "irate(vllm:prompt_tokens_total[5m])",
    "idelta(vllm:num_requests_running[5m])",
    "delta(vllm:num_requests_running[10m])",
    "deriv(vllm:num_requests_running[10m])",
    "predict_linear(vllm:num_requests_running[10m], 600)",
    "changes(vllm:num_requests_running[10m])",
    "resets(vllm:prompt_tokens_total[1h])",
    "avg_over_time(vllm:num_requests_running[10m])",
    "min_over_time(vllm:num_requests_running[10m])",
    "max_over_time(vllm:num_requests_running[10m])",
    "sum_over_time(vllm:num_requests_running[10m])",
    "count_over_time(vllm:num_requests_running[10m])",
    "last_over_time(vllm:num_requests_running[10m])",
    "stddev_over_time(vllm:num_requests_running[10m])",
    "stdvar_over_time(vllm:num_requests_running[10m])",
    "quantile_over_time(0.9, vllm:num_requests_running[10m])",
    "present_over_time(vllm:num_requests_running[10m])",
    "absent_over_time(vllm:num_requests_running[10m])",
    "absent_over_time(nonexistent_metric{job=\"x\"}[10m])",
    "absent(nonexistent_metric{job=\"x\",instance=~\"a.*\"})",
    "absent(vllm:num_requests_running)",
    "max_over_time(rate(vllm:prompt_tokens_total[1m])[10m:1m])",
    "count by (job) ({__name__=~\"sglang:.*_total\"})",
    "count by (job) ({job=~\"sglang|vllm\"})",
    "sum without (instance, pod) (rate(vllm:prompt_tokens_total[5m]))",
    "avg by (instance) (vllm:num_requests_running)",
    "min by (job) (vllm:num_requests_running)",
    "max(vllm:num_requests_running)",
    "stddev by (job) (vllm:num_requests_running)",
    "stdvar(vllm:num_requests_running)",
    "group by (job) (vllm:num_requests_running)",
    "count_values(\"value\", vllm:num_requests_running)",
    "topk(3, rate(vllm:prompt_tokens_total[5m]))",
    "bottomk(2, vllm:num_requests_running)",
    "quantile(0.75, vllm:num_requests_running)",
    "quantile by (job) (0.5, vllm:num_requests_running)",
    "histogram_quantile(0.9, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.9, rate(vllm:e2e_request_latency_seconds_bucket[5m]))",
    "histogram_quantile(0, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
    "histogram_quantile(1, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
    "histogram_quantile(1.5, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
    "histogram_quantile(-1, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.5, sum by (le, instance) (vllm:time_to_first_token_seconds_bucket))",
    "histogram_quantile(0.5, sum by (le) (rate(tgi_request_duration_bucket[5m])))",
    "rate(vllm:e2e_request_latency_seconds_sum[5m]) / rate(vllm:e2e_request_latency_seconds_count[5m])",
    "vllm:num_requests_running / on (instance) group_left (model_name) vllm:num_requests_waiting",
    "vllm:num_requests_waiting / ignoring (job) vllm:num_requests_running",
    "sum by (instance) (vllm:num_requests_running) * on (instance) group_right vllm:num_requests_waiting",
    "vllm:num_requests_running > 1",
    "vllm:num_requests_running > bool 1",
    "1 < vllm:num_requests_running",
    "1 < bool vllm:num_requests_running",
    "vllm:num_requests_running == vllm:num_requests_running",
    "vllm:num_requests_running != bool vllm:num_requests_waiting",
    "vllm:num_requests_running >= on (instance, job) vllm:num_requests_waiting",
    "vllm:num_requests_running and on (instance) vllm:num_requests_waiting > 2",
    "vllm:num_requests_running or sglang:num_running_reqs",
    "vllm:num_requests_running unless on (pod) sglang:num_running_reqs",
    "{job=\"sglang\"} unless on (pod) {job=\"sglang\", pod=\"sglang-1\"}",
    "sum(rate(vllm:prompt_tokens_total[5m])) or vector(0)",
    "sum(rate(nonexistent_total[5m])) or vector(0)",
    "vllm:num_requests_running % 3",
    "vllm:num_requests_running ^ 2",
    "-vllm:num_requests_running",
    "2 * 3 + 4",
    "2 > bool 1",
    "time()",
    "time() - 60",
    "scalar(sum(vllm:num_requests_running))",
    "scalar(vllm:num_requests_running)",
    "vector(1)",
    "vector(time())",
    "label_replace(vllm:num_requests_running, \"host\", \"$1\", \"instance\", \"([^:]+):.*\")",
    "label_replace(vllm:num_requests_running, \"instance\", \"\", \"instance\", \".*\")",
    "label_join(vllm:num_requests_running, \"id\", \"/\", \"job\", \"pod\")",
    "clamp(vllm:num_requests_running, 1, 2)",
    "clamp(vllm:num_requests_running, 3, 2)",
    "clamp_min(vllm:num_requests_running, 2)",
    "clamp_max(vllm:num_requests_running, 2)",
    "round(vllm:num_requests_running)",
    "round(vllm:num_requests_running, 0.25)",
    "ceil(vllm:num_requests_running)",
    "floor(vllm:num_requests_running)",
    "abs(-vllm:num_requests_running)",
    "sgn(vllm:num_requests_running - 1)",
    "sqrt(vllm:num_requests_running)",
    "ln(vllm:num_requests_running)",
    "exp(vllm:num_requests_running / 100)",
    "log2(vllm:num_requests_running)",
    "log10(vllm:num_requests_running)",
    "timestamp(vllm:num_requests_running)",
    "sort_desc(vllm:num_requests_running)",
    "hour()",
    "minute(vllm:num_requests_running)",
    "day_of_week()",
    "month()",
    "year()",
    "days_in_month()",
    "{__name__=~\"vllm:num_requests_.*\"}",
    "{__name__=~\"vllm:num_requests_.*\", instance!=\"10.0.0.1:8000\"}",
    "sglang:num_running_reqs",
    "rate(sglang:prompt_tokens_total[5m])",
    "DCGM_FI_DEV_GPU_UTIL",
    // A range vector: raw samples as an instant query, an error as a range query.
    "vllm:num_requests_running[2m]",
    "rate(vllm:prompt_tokens_total[5m])[10m:2m]",
    "avg by (gpu) (DCGM_FI_DEV_GPU_UTIL)",
    // Errors in both: many-to-many matching and duplicate label sets.
    "vllm:num_requests_running / on (job) vllm:num_requests_waiting",
    "rate({__name__=~\"vllm:(prompt|generation)_tokens_total\"}[5m])",
];

fn value_of(v: &Json) -> f64 {
    match v.as_str() {
        Some("NaN") => f64::NAN,
        Some("+Inf") => f64::INFINITY,
        Some("-Inf") => f64::NEG_INFINITY,
        Some(s) => s.parse().unwrap_or(f64::NAN),
        None => f64::NAN,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 0.01 * a.abs().max(b.abs()) + 1e-9
}

/// The relative difference of two finite values (0 when equal or not finite).
fn relative_difference(a: f64, b: f64) -> f64 {
    if a == b || !a.is_finite() || !b.is_finite() {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

/// Series of a result keyed by label set: timestamp (ms) → value.
fn series_map(data: &Json) -> BTreeMap<String, Vec<(i64, f64)>> {
    let mut out = BTreeMap::new();
    let point = |p: &Json| {
        (
            (p[0].as_f64().unwrap_or(f64::NAN) * 1000.0).round() as i64,
            value_of(&p[1]),
        )
    };
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => {
            for s in data["result"].as_array().into_iter().flatten() {
                let points = match s.get("values") {
                    Some(vs) => vs.as_array().into_iter().flatten().map(point).collect(),
                    None => vec![point(&s["value"])],
                };
                out.insert(s["metric"].to_string(), points);
            }
        }
        _ => {
            out.insert("scalar".into(), vec![point(&data["result"])]);
        }
    }
    out
}

/// Compares two `data` objects; `Ok` has the series count and the largest
/// relative difference, `Err` says what differs.
fn compare(ours: &Json, theirs: &Json) -> Result<(usize, f64), String> {
    if ours["resultType"] != theirs["resultType"] {
        return Err(format!(
            "resultType {} vs {}",
            ours["resultType"], theirs["resultType"]
        ));
    }
    let (a, b) = (series_map(ours), series_map(theirs));
    let (ka, kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
    if ka != kb {
        let only_ours: Vec<_> = ka.iter().filter(|k| !b.contains_key(**k)).take(3).collect();
        let only_theirs: Vec<_> = kb.iter().filter(|k| !a.contains_key(**k)).take(3).collect();
        return Err(format!(
            "series differ: {} vs {}; only ours {only_ours:?}; only prometheus {only_theirs:?}",
            ka.len(),
            kb.len()
        ));
    }
    let mut worst: f64 = 0.0;
    for (k, pa) in &a {
        let pb = &b[k];
        let ta: Vec<i64> = pa.iter().map(|p| p.0).collect();
        let tb: Vec<i64> = pb.iter().map(|p| p.0).collect();
        if ta != tb {
            return Err(format!(
                "{k}: timestamps differ ({} vs {} points)",
                ta.len(),
                tb.len()
            ));
        }
        for (x, y) in pa.iter().zip(pb) {
            if !close(x.1, y.1) {
                return Err(format!("{k} at {}: {} vs {}", x.0, x.1, y.1));
            }
            worst = worst.max(relative_difference(x.1, y.1));
        }
    }
    Ok((a.len(), worst))
}

struct Tally {
    compared: usize,
    non_empty: usize,
    both_error: Vec<String>,
    mismatches: Vec<String>,
    worst: f64,
}

fn check(tally: &mut Tally, what: &str, ours: Result<Json, String>, theirs: Result<Json, String>) {
    tally.compared += 1;
    match (ours, theirs) {
        (Ok(o), Ok(t)) => match compare(&o, &t) {
            Ok((n, worst)) => {
                tally.non_empty += usize::from(n > 0);
                tally.worst = tally.worst.max(worst);
            }
            Err(e) => tally.mismatches.push(format!("{what}: {e}")),
        },
        (Err(e), Err(p)) => tally
            .both_error
            .push(format!("{what}\n    ours: {e}\n    prometheus: {p}")),
        (Ok(_), Err(e)) => tally
            .mismatches
            .push(format!("{what}: only prometheus fails: {e}")),
        (Err(e), Ok(_)) => tally.mismatches.push(format!("{what}: only we fail: {e}")),
    }
}

/// Runs `q` against both as instant queries at three times and as a range
/// query, and tallies the comparison.
fn compare_query(tally: &mut Tally, source: &MemorySource, prom: SocketAddr, label: &str, q: &str) {
    let opts = QueryOptions::default();
    // After vllm-1's restart (35 min); sglang-1 gone (40 min) but in
    // lookback; and past its lookback.
    let instants = [
        START_MS + 37 * MIN_MS + 7_500,
        START_MS + 43 * MIN_MS,
        START_MS + 50 * MIN_MS,
    ];
    // From before the data's 10th minute to 10 minutes past its end.
    let (range_start, range_end, step) = (
        START_MS + 5 * MIN_MS,
        START_MS + HOUR_MS + 10 * MIN_MS,
        MIN_MS,
    );
    for &t in &instants {
        let ours =
            instant_query(source, q, t, &opts).map(|d| serde_json::to_value(d).expect("serialise"));
        let theirs = prom_query(
            prom,
            &format!("/api/v1/query?query={}&time={}", url_encode(q), secs(t)),
        );
        check(
            tally,
            &format!("{label} instant@{}: {q}", secs(t)),
            ours.map_err(|e| e.to_string()),
            theirs,
        );
    }
    let ours = range_query(source, q, range_start, range_end, step, &opts)
        .map(|d| serde_json::to_value(d).expect("serialise"));
    let theirs = prom_query(
        prom,
        &format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={}",
            url_encode(q),
            secs(range_start),
            secs(range_end),
            step / 1000
        ),
    );
    check(
        tally,
        &format!("{label} range: {q}"),
        ours.map_err(|e| e.to_string()),
        theirs,
    );
}

#[test]
fn answers_match_prometheus() {
    let dir = tempfile::tempdir().expect("temp dir");
    let series = common::generate(START_MS, HOUR_MS, 15_000);
    let om = dir.path().join("samples.om");
    std::fs::write(&om, common::to_openmetrics(&series)).expect("write openmetrics");
    create_blocks(&om, &dir.path().join("data"));
    std::fs::remove_file(&om).expect("remove openmetrics");
    let prom = start_prometheus(dir.path());

    let mut source = MemorySource::new();
    let n_series = series.len();
    series.into_iter().for_each(|s| source.add_series(s));

    let mut queries: Vec<String> = common::dashboard_exprs()
        .iter()
        .map(|e| common::substitute(&e.raw))
        .collect();
    let n_dash = queries.len();
    queries.extend(EDGE_CASES.iter().map(|s| s.to_string()));

    let mut tally = Tally {
        compared: 0,
        non_empty: 0,
        both_error: Vec::new(),
        mismatches: Vec::new(),
        worst: 0.0,
    };
    for (i, q) in queries.iter().enumerate() {
        let label = if i < n_dash {
            format!("dashboards.tsv #{}", i + 1)
        } else {
            "edge case".to_string()
        };
        compare_query(&mut tally, &source, prom.addr, &label, q);
    }
    println!(
        "{n_series} series; {} queries ({} expressions: {n_dash} dashboard + {} edge cases) compared: {} matched with data, {} matched empty, {} failed in both, {} mismatches; largest relative difference {:e}",
        tally.compared,
        queries.len(),
        EDGE_CASES.len(),
        tally.non_empty,
        tally.compared - tally.non_empty - tally.both_error.len() - tally.mismatches.len(),
        tally.both_error.len(),
        tally.mismatches.len(),
        tally.worst
    );
    println!("failed in both:\n{}", tally.both_error.join("\n"));
    assert!(
        tally.mismatches.is_empty(),
        "{} mismatches:\n{}",
        tally.mismatches.len(),
        tally
            .mismatches
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Most answers must carry data, or the comparison proves little.
    assert!(
        tally.non_empty * 10 >= tally.compared * 7,
        "only {} of {} answers had data",
        tally.non_empty,
        tally.compared
    );
    // The two error cases fail in both, for each of the four queries, and
    // the two range vectors as range queries.
    assert!(
        tally.both_error.len() >= 10,
        "expected the many-to-many and duplicate-labelset cases to fail in both"
    );
}
