//! The Prometheus-compatible API (`/prometheus/api/v1/…`) over a real
//! daemon scraping the simulator over loopback: Grafana's own calls answer
//! in Prometheus' JSON shapes behind the bearer token, errors in
//! Prometheus' error JSON, and every query of every shipped Grafana
//! dashboard (`deploy/grafana/dashboards/*.json`) runs without error.

use crate::common;
use crate::common::prom;

use std::time::Duration;

use common::{spawn_daemon, wait_for};
use prom::{
    client, daemon_toml, dashboard_exprs, enc, get, now_ms, secs, start_sim, substitute, MODEL,
};
use serde_json::Value;

const TOKEN: &str = "grafana-token";

/// A daemon (token required) scraping the simulator and its GPU page every
/// 250 ms with canaries every 300 ms, once it has a canary probe stored.
async fn running() -> (
    llmwatch_sim::Sim,
    std::net::SocketAddr,
    common::app::TestApp,
) {
    let (sim, engine, gpu) = start_sim().await;
    let toml = daemon_toml(
        engine,
        gpu,
        "250ms",
        &format!("token = \"{TOKEN}\""),
        "[targets.probe]\ninterval = \"300ms\"\nshape = \"16x4\"\n",
    );
    let test = spawn_daemon(&toml).await;
    let base = format!("{}/prometheus/api/v1", test.base_url());
    let http = client();
    // Three engine scrapes stored, so every rate() below has two samples.
    wait_for(
        "a canary probe, GPU and engine scrapes",
        Duration::from_secs(20),
        || {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let q = enc(
                    "count(llmwatch_canary_success) + count(DCGM_FI_DEV_GPU_UTIL) \
                 + count(count_over_time(vllm:generation_tokens_total[1m]) >= 3)",
                );
                let (_, body) = get(&http, &format!("{base}/query?query={q}"), Some(TOKEN)).await;
                (body["data"]["result"].as_array().map_or(0, Vec::len) == 1).then_some(())
            }
        },
    )
    .await;
    (sim, engine, test)
}

fn result(body: &Value) -> &Vec<Value> {
    body["data"]["result"]
        .as_array()
        .unwrap_or_else(|| panic!("no result array: {body}"))
}

/// A sample value is `[<unix seconds as number>, "<value as string>"]`.
fn assert_point(point: &Value) {
    let pair = point.as_array().expect("a point is an array");
    assert_eq!(pair.len(), 2, "{point}");
    assert!(pair[0].is_f64() || pair[0].is_i64(), "{point}");
    let text = pair[1]
        .as_str()
        .unwrap_or_else(|| panic!("value is a string: {point}"));
    assert!(
        text.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&text),
        "{point}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grafana_calls_answer_in_prometheus_shapes() {
    let (_sim, engine, test) = running().await;
    let base = format!("{}/prometheus/api/v1", test.base_url());
    let http = client();
    let now = now_ms();

    // Without the token: refused, never redirected to a login page.
    let response = http
        .get(format!("{base}/query?query=up"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);

    // query_range with a step, as Grafana sends it (POST form).
    let form = [
        (
            "query",
            "sum by (target, model_name) (rate(vllm:generation_tokens_total[1m]))".to_string(),
        ),
        ("start", secs(now - 10_000)),
        ("end", secs(now)),
        ("step", "2".to_string()),
    ];
    let response = http
        .post(format!("{base}/query_range"))
        .bearer_auth(TOKEN)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "success", "{body}");
    assert_eq!(body["data"]["resultType"], "matrix");
    let series = result(&body);
    assert_eq!(series.len(), 1, "{body}");
    assert_eq!(series[0]["metric"]["target"], "sim");
    assert_eq!(series[0]["metric"]["model_name"], MODEL);
    let values = series[0]["values"].as_array().unwrap();
    // At most one point per 2 s step over 10 s (the first steps may come
    // before the daemon's second scrape: no rate there yet).
    assert!(!values.is_empty() && values.len() <= 6, "{body}");
    values.iter().for_each(assert_point);

    // An instant query: a vector with job/instance/target on every series.
    let (status, body) = get(
        &http,
        &format!(
            "{base}/query?query={}&time={}",
            enc("vllm:num_requests_running"),
            secs(now)
        ),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["resultType"], "vector");
    let sample = &result(&body)[0];
    assert_eq!(sample["metric"]["__name__"], "vllm:num_requests_running");
    assert_eq!(sample["metric"]["job"], "engine");
    assert_eq!(sample["metric"]["instance"], engine.to_string());
    assert_eq!(sample["metric"]["target"], "sim");
    assert_point(&sample["value"]);

    // Scalars answer as Prometheus does.
    let (_, body) = get(
        &http,
        &format!("{base}/query?query=1%2B1&time=100"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(body["data"]["resultType"], "scalar", "{body}");
    assert_eq!(body["data"]["result"][0].as_f64(), Some(100.0), "{body}");
    assert_eq!(body["data"]["result"][1], "2", "{body}");

    // labels with match[]
    let url = format!(
        "{base}/labels?match[]={}&start={}&end={}",
        enc("vllm:num_requests_running"),
        secs(now - 60_000),
        secs(now)
    );
    let (status, body) = get(&http, &url, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in [
        "__name__",
        "engine",
        "instance",
        "job",
        "model_name",
        "target",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert!(!names.contains(&"gpu"), "match[] narrows: {names:?}");
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");

    // series: label sets as objects.
    let url = format!(
        "{base}/series?match[]={}&match[]={}&start={}&end={}",
        enc("DCGM_FI_DEV_GPU_UTIL"),
        enc("up"),
        secs(now - 60_000),
        secs(now)
    );
    let (status, body) = get(&http, &url, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let series = body["data"].as_array().unwrap();
    let gpus = series
        .iter()
        .filter(|s| s["__name__"] == "DCGM_FI_DEV_GPU_UTIL")
        .count();
    assert!(gpus >= 1, "{body}");
    assert!(
        series
            .iter()
            .all(|s| s["job"].is_string() && s["target"].is_string()),
        "{body}"
    );
    let ups: Vec<&Value> = series.iter().filter(|s| s["__name__"] == "up").collect();
    assert_eq!(ups.len(), 2, "one `up` per target: {body}");

    // label/__name__/values: scraped names and llmwatch's own.
    let url = format!(
        "{base}/label/__name__/values?start={}&end={}",
        secs(now - 60_000),
        secs(now)
    );
    let (status, body) = get(&http, &url, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in [
        "vllm:num_requests_running",
        "vllm:time_to_first_token_seconds_bucket",
        "DCGM_FI_DEV_FB_USED",
        "up",
        "llmwatch_signal",
        "llmwatch_canary_ttft_seconds",
        "llmwatch_canary_success",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    // ... and with a limit, cut with Prometheus' warning.
    let (_, body) = get(&http, &format!("{url}&limit=2"), Some(TOKEN)).await;
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    assert_eq!(body["warnings"][0], "results truncated due to limit");

    // Signal values: a label per signal.
    let (_, body) = get(&http, &format!("{base}/label/signal/values"), Some(TOKEN)).await;
    let signals: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        signals.contains(&"kv_cache_usage") && signals.contains(&"gpu_util"),
        "{signals:?}"
    );

    // metadata and buildinfo.
    let (_, body) = get(
        &http,
        &format!(
            "{base}/metadata?metric={}",
            enc("vllm:e2e_request_latency_seconds")
        ),
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        body["data"]["vllm:e2e_request_latency_seconds"][0]["type"], "histogram",
        "{body}"
    );
    let (_, body) = get(&http, &format!("{base}/status/buildinfo"), Some(TOKEN)).await;
    assert_eq!(body["status"], "success");
    assert!(body["data"]["version"].as_str().unwrap().starts_with("2."));

    // Errors: Prometheus' JSON and status codes; unsupported names the feature.
    for (query, status, error_type, needle) in [
        ("sum(", 400, "bad_data", "parse error"),
        (
            "holt_winters(up[5m], 0.5, 0.5)",
            400,
            "bad_data",
            "holt_winters",
        ),
        ("up * on() group_left up", 422, "execution", "many"),
    ] {
        let url = format!("{base}/query?query={}", enc(query));
        let (got, body) = get(&http, &url, Some(TOKEN)).await;
        assert_eq!(got, status, "{query}: {body}");
        assert_eq!(body["status"], "error");
        assert_eq!(body["errorType"], error_type, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(needle),
            "{query}: {body}"
        );
    }
    let (status, body) = get(
        &http,
        &format!("{base}/query_range?query=up&start=0&end=100000&step=1"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        (status, body["errorType"].as_str()),
        (400, Some("bad_data")),
        "{body}"
    );
    assert!(body["error"].as_str().unwrap().contains("11000"), "{body}");
    let (status, body) = get(&http, &format!("{base}/query"), Some(TOKEN)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("query"), "{body}");
    let (status, body) = get(&http, &format!("{base}/series"), Some(TOKEN)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("no match[] parameter provided"))
    );
    let (status, body) = get(&http, &format!("{base}/label/a-b/values"), Some(TOKEN)).await;
    assert_eq!(
        (status, body["errorType"].as_str()),
        (400, Some("bad_data")),
        "{body}"
    );
    let (status, body) = get(&http, &format!("{base}/status/tsdb"), Some(TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("status/tsdb"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_dashboard_query_runs() {
    let (_sim, engine, test) = running().await;
    let base = format!("{}/prometheus/api/v1", test.base_url());
    let http = client();
    let now = now_ms();
    let exprs = dashboard_exprs();
    let mut with_data = 0;
    for (where_, raw) in &exprs {
        let expr = substitute(raw, engine);
        let url = format!(
            "{base}/query_range?query={}&start={}&end={}&step=1",
            enc(&expr),
            secs(now - 30_000),
            secs(now)
        );
        let (status, body) = get(&http, &url, Some(TOKEN)).await;
        assert_eq!(
            (status, &body["status"]),
            (200, &Value::from("success")),
            "{where_}: {expr}: {body}"
        );
        if !result(&body).is_empty() {
            with_data += 1;
        } else {
            eprintln!("no data yet: {where_}: {expr}");
        }
    }
    // Each shipped query reads something the simulator and the canaries
    // produce; a few (rates over a window with a single sample) may be
    // empty this early.
    assert!(
        with_data * 10 >= exprs.len() * 8,
        "{with_data} of {} queries had data",
        exprs.len()
    );
}
