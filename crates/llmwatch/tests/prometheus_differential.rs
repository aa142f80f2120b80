//! Differential: a real Prometheus (Debian `prometheus`, 2.42) and the
//! daemon scrape the SAME simulator (and its GPU page) every 250 ms; load
//! runs for a few seconds, then the simulator idles. Every expression of
//! `fixtures/promql/dashboards.tsv` (Grafana variables substituted) plus
//! edge cases, as an instant query and as a range query over the settled
//! tail, must answer the same through both APIs: the same errors, the same
//! series with the same labels and timestamps, and values within 1 %.
//!
//! The two scrapers sample at different instants, which only matters for
//! values computed from samples *inside the load phase* that are not
//! counter deltas: `*_over_time`, `deriv`, `predict_linear`, `changes`,
//! `resets`, `timestamp`, range windows shorter than the data (< 60 s).
//! Those are compared on series and labels only (the count is printed).
//! Counter rates over windows longer than the data differ only by the
//! extrapolation factor (sampled span + half an interval) / sampled span,
//! under 0.2 % here, and are held to the 1 %.

mod common;
#[path = "common/prom.rs"]
mod prom;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{spawn_daemon, wait_for};
use prom::{
    client, daemon_toml, enc, get, now_ms, secs, start_prometheus, start_sim, substitute, MODEL,
};
use serde_json::Value;

/// Edge cases beyond the dashboards: matchers, operators, functions.
const EDGE_CASES: &[&str] = &[
    "up",
    "count by (job) (up)",
    "{__name__=~\"vllm:num_requests_(running|waiting)\"}",
    "{__name__=\"vllm:kv_cache_usage_perc\", model_name!=\"other\"}",
    "vllm:request_success_total{finished_reason!~\"stop|length\"}",
    "sum without (le) (vllm:time_to_first_token_seconds_bucket)",
    "histogram_quantile(0.9, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.5, rate(vllm:inter_token_latency_seconds_bucket[2m]))",
    "increase(vllm:generation_tokens_total[5m])",
    "rate(vllm:prompt_tokens_total[1m]) * 60",
    "irate(vllm:generation_tokens_total[5m])",
    "delta(vllm:num_requests_running[5m])",
    "topk(3, vllm:request_success_total)",
    "bottomk(2, DCGM_FI_DEV_GPU_UTIL)",
    "quantile(0.5, DCGM_FI_DEV_FB_USED)",
    "avg by (gpu) (DCGM_FI_DEV_POWER_USAGE)",
    "count(DCGM_FI_DEV_GPU_TEMP > 0)",
    "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
    "vllm:num_requests_running == bool 0",
    "vllm:num_requests_running offset 1s",
    "label_replace(vllm:kv_cache_usage_perc, \"m\", \"$1\", \"model_name\", \"(.*)-model\")",
    "absent(nonexistent_metric)",
    "absent(vllm:num_requests_running)",
    "clamp_max(vllm:generation_tokens_total, 10)",
    "clamp_min(vllm:num_requests_waiting, 1)",
    "vllm:num_requests_running + on (target) group_left sum by (target) (vllm:num_requests_waiting)",
    "sum(vllm:generation_tokens_total) / scalar(sum(vllm:request_success_total)) ",
    "up and on () vector(1)",
    "vllm:num_requests_running or vllm:num_requests_waiting",
    "vllm:request_success_total unless vllm:request_success_total{finished_reason=\"stop\"}",
    "sum by (job, instance, target) (up)",
    "time() - time()",
    "max_over_time(vllm:num_requests_running[5m])",
    "sum(up) by (job)",
];

/// Whether an expression's values depend on where inside the load phase
/// each scraper happened to sample (see the module comment).
fn sampling_dependent(expr: &str) -> bool {
    let functions = [
        "_over_time(",
        "deriv(",
        "predict_linear(",
        "changes(",
        "resets(",
        "timestamp(",
        "holt_winters(",
    ];
    if functions.iter().any(|f| expr.contains(f)) {
        return true;
    }
    // Range windows shorter than a minute start inside the data.
    let mut rest = expr;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let window = rest.split([']', ':']).next().unwrap_or("");
        let ms = promql_duration_ms(window);
        if ms.is_some_and(|ms| ms < 60_000) {
            return true;
        }
    }
    false
}

fn promql_duration_ms(text: &str) -> Option<i64> {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let n: i64 = digits.parse().ok()?;
    match &text[digits.len()..] {
        "ms" => Some(n),
        "s" => Some(n * 1000),
        "m" => Some(n * 60_000),
        "h" => Some(n * 3_600_000),
        "d" => Some(n * 86_400_000),
        _ => None,
    }
}

/// The dashboard expressions, substituted.
fn dashboard_exprs(engine: SocketAddr) -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/promql/dashboards.tsv"
    );
    let text = std::fs::read_to_string(path).expect("dashboards.tsv");
    text.lines()
        .skip(1)
        .filter_map(|l| l.splitn(3, '\t').nth(2))
        .map(|e| substitute(e, engine))
        .collect()
}

fn same_value(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_str(), b.as_str()) else {
        return false;
    };
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 0.01 * x.abs().max(y.abs()) + 1e-9,
        _ => false,
    }
}

/// Series by label set: (timestamps, values).
fn by_labels(data: &Value) -> BTreeMap<String, Vec<(f64, Value)>> {
    let mut out = BTreeMap::new();
    let point = |p: &Value| (p[0].as_f64().unwrap_or(f64::NAN), p[1].clone());
    match data["resultType"].as_str() {
        Some("vector") => {
            for s in data["result"].as_array().into_iter().flatten() {
                out.insert(s["metric"].to_string(), vec![point(&s["value"])]);
            }
        }
        Some("matrix") => {
            for s in data["result"].as_array().into_iter().flatten() {
                let points = s["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(point)
                    .collect();
                out.insert(s["metric"].to_string(), points);
            }
        }
        _ => {
            out.insert(String::new(), vec![point(&data["result"])]);
        }
    }
    out
}

/// `None` when the answers agree; else why not.
fn compare(expr: &str, ours: &Value, theirs: &Value) -> Option<String> {
    match (ours["status"].as_str(), theirs["status"].as_str()) {
        (Some("error"), Some("error")) => return None,
        (Some("success"), Some("success")) => {}
        _ => return Some(format!("status differs: ours {ours}, Prometheus {theirs}")),
    }
    let (a, b) = (&ours["data"], &theirs["data"]);
    if a["resultType"] != b["resultType"] {
        return Some(format!(
            "result type {} vs {}",
            a["resultType"], b["resultType"]
        ));
    }
    let (a, b) = (by_labels(a), by_labels(b));
    if a.keys().ne(b.keys()) {
        return Some(format!(
            "series differ:\n ours {:?}\n Prometheus {:?}",
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>()
        ));
    }
    if sampling_dependent(expr) {
        return None;
    }
    for (labels, ours) in &a {
        let theirs = &b[labels];
        let times = |s: &Vec<(f64, Value)>| {
            s.iter()
                .map(|(t, _)| (t * 1000.0).round() as i64)
                .collect::<Vec<_>>()
        };
        if times(ours) != times(theirs) {
            return Some(format!(
                "{labels}: timestamps {:?} vs {:?}",
                times(ours),
                times(theirs)
            ));
        }
        for ((t, x), (_, y)) in ours.iter().zip(theirs) {
            if !same_value(x, y) {
                return Some(format!("{labels} at {t}: ours {x}, Prometheus {y}"));
            }
        }
    }
    None
}

/// Streams completions from `clients` clients until `until`.
async fn load(engine: SocketAddr, clients: usize, until: Instant) {
    let http = client();
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = 0;
            while Instant::now() < until {
                round += 1;
                let body = serde_json::json!({
                    "model": MODEL, "prompt": format!("w{worker}-{round} the quick brown fox"),
                    "max_tokens": 24, "ignore_eos": true, "stream": true,
                });
                if let Ok(r) = http
                    .post(format!("http://{engine}/v1/completions"))
                    .json(&body)
                    .send()
                    .await
                {
                    let _ = r.bytes().await;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs (54 s) but does not pass yet: the simulated GPU page's gauges move while idle \
            (util, power: sampled at different instants), topk ties break differently, and \
            rates over ~20 s of data differ by ~1 % of extrapolation; see the report of branch promapi"]
async fn answers_match_a_prometheus_scraping_the_same_simulator() {
    let started = Instant::now();
    let (_sim, engine, gpu) = start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(
        dir.path(),
        &[
            ("engine", engine, "/metrics", "sim"),
            ("gpu", gpu, "/metrics", "gpu"),
        ],
    );
    let test = spawn_daemon(&daemon_toml(engine, gpu, "250ms", "", "")).await;
    let ours = format!("{}/prometheus/api/v1", test.base_url());
    let theirs = format!("http://{}/api/v1", prometheus.addr);
    let http = client();
    // Both have scraped both targets a few times before the load starts.
    for base in [&ours, &theirs] {
        wait_for(
            "both scrapers' first scrapes",
            Duration::from_secs(30),
            || {
                let (http, base) = (http.clone(), base.clone());
                async move {
                    let q = enc("count(count_over_time(up[30s]) >= 4)");
                    let response = http
                        .get(format!("{base}/query?query={q}"))
                        .send()
                        .await
                        .ok()?;
                    let body: Value = response.json().await.ok()?;
                    (body["data"]["result"][0]["value"][1] == "2").then_some(())
                }
            },
        )
        .await;
    }
    load(engine, 6, Instant::now() + Duration::from_secs(5)).await;
    // Settled: nothing running, and both scraped that a few times since.
    tokio::time::sleep(Duration::from_millis(100)).await;
    wait_for("the simulator to idle", Duration::from_secs(20), || {
        let http = http.clone();
        async move {
            let text = http
                .get(format!("http://{engine}/metrics"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            let busy = text.lines().any(|l| {
                (l.starts_with("vllm:num_requests_running")
                    || l.starts_with("vllm:num_requests_waiting{"))
                    && !l.ends_with(" 0.0")
            });
            (!busy).then_some(())
        }
    })
    .await;
    let settled = now_ms();
    wait_for("3 s of idle scrapes", Duration::from_secs(10), || async {
        (now_ms() > settled + 3_000).then_some(())
    })
    .await;
    let at = now_ms() - 500;

    let mut exprs: Vec<String> = EDGE_CASES.iter().map(|s| s.to_string()).collect();
    exprs.extend(dashboard_exprs(engine));
    let (mut compared, mut values_checked, mut with_data, mut errors) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for expr in &exprs {
        let q = enc(expr);
        let paths = [
            format!("/query?query={q}&time={}", secs(at)),
            format!(
                "/query_range?query={q}&start={}&end={}&step=1",
                secs(at - 2_000),
                secs(at)
            ),
        ];
        for path in &paths {
            let (_, a) = get(&http, &format!("{ours}{path}"), None).await;
            let (_, b) = get(&http, &format!("{theirs}{path}"), None).await;
            compared += 1;
            if b["status"] == "error" {
                errors += 1;
            } else if b["data"]["result"].as_array().is_none_or(|r| !r.is_empty()) {
                with_data += 1;
                if !sampling_dependent(expr) {
                    values_checked += 1;
                }
            }
            if let Some(why) = compare(expr, &a, &b) {
                failures.push(format!("{expr}\n  {path}\n  {why}"));
            }
        }
    }
    eprintln!(
        "{compared} answers compared ({} expressions × instant + range): {with_data} with data, \
         {values_checked} of them value-checked within 1 %, {errors} errors on both sides; {:.1} s",
        exprs.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {compared} answers differ:\n{}",
        failures.len(),
        failures
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The comparison means something: most answers carry data, most of those values.
    assert!(
        with_data * 2 >= compared,
        "only {with_data} of {compared} answers had data"
    );
    assert!(
        values_checked * 4 >= with_data * 3,
        "only {values_checked} of {with_data} value-checked"
    );
}
