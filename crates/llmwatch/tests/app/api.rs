//! The REST API over loopback against the simulator: content of every
//! route, pagination, times in both forms, bad parameters answered 400 with
//! a message, the bearer token, a sweep started through the API, and the
//! OpenAPI document covering every route.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use crate::common;

use std::time::{Duration, Instant};

use common::wait_for;

use common::app::TestApp;
use llmwatch::cli::sim::SimArgs;
use llmwatch_engine::sources::scrape::now_ms;
use reqwest::StatusCode;
use serde_json::{json, Value};

const TOKEN: &str = "s3cret-token";

struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    async fn ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        body
    }

    /// A 400 whose JSON message contains `needle`.
    async fn bad(&self, path: &str, needle: &str) {
        let (status, body) = self.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["status"], 400);
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(needle),
            "{path}: {message:?} lacks {needle:?}"
        );
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

fn rfc3339(ms: i64) -> String {
    llmwatch_engine::sinks::notify::rfc3339_ms(ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_api_end_to_end() {
    let started = Instant::now();
    let config = format!(
        r#"
[server]
token = "{TOKEN}"
alert_interval = "200ms"

[[alerts]]
name = "kv-high"
signal = "kv_cache_usage"
op = ">"
threshold = 0.9
window = "1m"
for = "1m"
annotations = {{ summary = "KV cache {{{{ $value }}}} on {{{{ $labels.target }}}}" }}

[[alerts]]
name = "always"
signal = "requests_waiting"
op = ">="
threshold = 0
window = "10s"
"#
    );
    let app = TestApp::builder()
        .config(&config)
        .sim_as("sim", SimArgs::loopback("balanced", "sim-model", 10.0))
        .target(
            "scrape_interval = \"250ms\"\n[targets.probe]\ninterval = \"150ms\"\nshape = \"64x4\"",
        )
        .spawn()
        .await;
    let api = Api {
        base: app.base_url(),
        client: reqwest::Client::new(),
    };
    let t0 = now_ms();
    // Enough data for every assertion below: the target up with a canary
    // signal, three scrapes' worth of series, and the "always" rule firing.
    let kv_series = format!(
        "/api/v1/targets/sim/signals?signal=kv_cache_usage&from={}&step=500ms",
        t0 as f64 / 1000.0
    );
    wait_for(
        "data, canaries and a firing alert",
        Duration::from_secs(20),
        || async {
            let targets = api.ok("/api/v1/targets").await;
            let target = &targets["targets"][0];
            let up = target["status"]["state"] == "up"
                && target["signals"]["probe_ttft_p95"]["value"]
                    .as_f64()
                    .is_some();
            let series = api.ok(&kv_series).await;
            let points = series["series"][0]["points"].as_array().map_or(0, Vec::len);
            let firing = api.ok("/api/v1/alerts").await["alerts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["state"] == "firing"));
            (up && points >= 3 && firing).then_some(())
        },
    )
    .await;

    // The token guards everything but /healthz.
    let plain = reqwest::get(format!("{}/healthz", api.base)).await.unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    let denied = reqwest::get(format!("{}/api/v1/targets", api.base))
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
    let denied = reqwest::get(format!("{}/metrics", api.base)).await.unwrap();
    assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);

    // Targets with live status and latest signals.
    let targets = api.ok("/api/v1/targets").await;
    let target = &targets["targets"][0];
    assert_eq!(target["name"], "sim");
    assert_eq!(target["kind"], "engine");
    assert_eq!(target["engine"], "vllm");
    assert_eq!(target["url"], app.sim("sim").url(), "{target}");
    assert_eq!(target["status"]["state"], "up");
    assert!(target["status"]["last_scrape_ms"].as_i64().unwrap() >= t0);
    assert!(target["status"]["last_scrape"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let kv = &target["signals"]["kv_cache_usage"];
    assert_eq!(kv["unit"], "ratio");
    assert_eq!(kv["source"], "server");
    assert!((0.0..=1.0).contains(&kv["value"].as_f64().unwrap()));
    let ttft = &target["signals"]["probe_ttft_p95"];
    assert_eq!(ttft["source"], "probe");
    assert_eq!(ttft["unit"], "s");
    assert!(ttft["value"].as_f64().unwrap() > 0.0);
    assert_eq!(api.ok("/api/v1/targets/sim").await["name"], "sim");
    let (status, body) = api.get("/api/v1/targets/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"]["message"].as_str().unwrap().contains("nope"));
    api.bad("/api/v1/targets?x=1", "unknown parameter \"x\"")
        .await;

    // Signal series: RFC 3339 and Unix seconds, explicit step.
    let now = now_ms();
    let series = api
        .ok(&format!(
            "/api/v1/targets/sim/signals?signal=kv_cache_usage,requests_running,probe_ttft_p95&from={}&to={}&step=500ms",
            rfc3339(t0),
            now as f64 / 1000.0
        ))
        .await;
    assert_eq!(series["target"], "sim");
    assert_eq!(series["step_s"], 0.5);
    let all = series["series"].as_array().unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0]["signal"], "kv_cache_usage");
    assert_eq!(all[2]["source"], "probe");
    let points = all[0]["points"].as_array().unwrap();
    assert!(points.len() >= 3, "{series}");
    for point in points {
        let t = point[0].as_f64().unwrap();
        assert!(t >= t0 as f64 / 1000.0 - 0.001 && t <= now as f64 / 1000.0 + 0.001);
        assert!((0.0..=1.0).contains(&point[1].as_f64().unwrap()));
    }
    assert!(!all[2]["points"].as_array().unwrap().is_empty());
    // The latency breakdown at now: the canaries' mean TTFT split by the
    // simulator's phase histograms over the same (60 s) window.
    let breakdown = api
        .ok(&format!(
            "/api/v1/targets/sim/latency_breakdown?from={0}&to={0}",
            now as f64 / 1000.0
        ))
        .await;
    assert_eq!(breakdown["step_s"], 60.0, "{breakdown}");
    let point = &breakdown["points"][0]["breakdown"]["ttft"];
    let client = point["client_s"].as_f64().expect("client mean TTFT");
    let parts: f64 = ["queue_s", "prefill_s", "server_outside_core_s", "network_s"]
        .iter()
        .map(|k| {
            point[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{k} in {breakdown}"))
        })
        .sum();
    assert!(
        (parts - client).abs() <= 0.10 * client,
        "parts {parts} s vs canaries' mean TTFT {client} s: {breakdown}"
    );
    assert_eq!(breakdown["missing"], Value::Null);
    let target = api.ok("/api/v1/targets/sim").await;
    assert!(
        target["latency_breakdown"]["breakdown"]["dominant"].is_string(),
        "{target}"
    );
    api.bad("/api/v1/targets/sim/latency_breakdown?step=fast", "step")
        .await;
    api.bad("/api/v1/targets/sim/signals?from=yesterday", "from")
        .await;
    api.bad("/api/v1/targets/sim/signals?to=2026-13-01T00:00:00Z", "to")
        .await;
    api.bad("/api/v1/targets/sim/signals?step=0", "step").await;
    api.bad("/api/v1/targets/sim/signals?step=fast", "step")
        .await;
    api.bad(
        "/api/v1/targets/sim/signals?signal=ttft",
        "unknown signal \"ttft\"",
    )
    .await;
    // A range that ends before it starts is empty, not an error.
    let backwards = api
        .ok("/api/v1/targets/sim/signals?signal=kv_cache_usage&from=2000&to=1000")
        .await;
    assert_eq!(backwards["series"][0]["points"], json!([]), "{backwards}");
    // Too fine a step for the range is raised to fit the point limit.
    let coarse = api
        .ok("/api/v1/targets/sim/signals?signal=kv_cache_usage&from=0&step=1s")
        .await;
    let step = coarse["step_s"].as_f64().unwrap();
    assert!(step > 1.0, "{coarse}");
    assert!(now as f64 / 1000.0 / step <= 11_000.0, "{step}");
    api.bad(
        "/api/v1/targets/sim/signals?step=1s&step=2s",
        "more than once",
    )
    .await;

    // Raw metric series.
    let raw = api
        .ok(&format!(
            "/api/v1/series?target=sim&metric=kv_cache_usage&from={}",
            t0 / 1000
        ))
        .await;
    assert_eq!(raw["metric"], "kv_cache_usage");
    let first = &raw["series"][0];
    assert_eq!(first["part"], "value");
    assert!(first["points"].as_array().unwrap().len() >= 3, "{raw}");
    let ttft_raw = api
        .ok("/api/v1/series?target=sim&metric=ttft_seconds")
        .await;
    assert!(
        ttft_raw["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["part"].as_str().unwrap().starts_with("bucket:")),
        "histogram buckets are raw series"
    );
    api.bad(
        "/api/v1/series?metric=kv_cache_usage",
        "missing parameter \"target\"",
    )
    .await;
    api.bad(
        "/api/v1/series?target=sim&metric=kv",
        "unknown catalog metric",
    )
    .await;
    // Raw series keep the last 24 h of a longer range, and say so.
    let raw = api
        .ok("/api/v1/series?target=sim&metric=kv_cache_usage&from=0")
        .await;
    let raw_from = llmwatch_web::api::params::parse_time(raw["from"].as_str().unwrap()).unwrap();
    let raw_to = llmwatch_web::api::params::parse_time(raw["to"].as_str().unwrap()).unwrap();
    assert_eq!(raw_to - raw_from, 24 * 3600 * 1000, "{raw}");

    // Probes, paginated with a cursor.
    let page1 = api.ok("/api/v1/probes?target=sim&limit=2").await;
    let probes = page1["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 2);
    assert_eq!(probes[0]["ok"], true);
    assert_eq!(probes[0]["model"], "sim-model");
    assert_eq!(probes[0]["output_tokens"], 4);
    assert!(probes[0]["ttft_s"].as_f64().unwrap() > 0.0);
    assert!(probes[0]["sent_ms"].as_i64().unwrap() <= probes[1]["sent_ms"].as_i64().unwrap());
    let cursor = page1["next_cursor"].as_str().expect("more pages");
    let page2 = api
        .ok(&format!(
            "/api/v1/probes?target=sim&limit=2&cursor={cursor}"
        ))
        .await;
    let ids1: Vec<i64> = probes.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    let ids2: Vec<i64> = page2["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids2.len(), 2);
    assert!(
        ids2.iter().all(|id| !ids1.contains(id)),
        "{ids1:?} {ids2:?}"
    );
    let everything = api.ok("/api/v1/probes?target=sim&limit=1000").await;
    assert!(everything["next_cursor"].is_null());
    api.bad("/api/v1/probes?target=sim&limit=0", "limit").await;
    api.bad("/api/v1/probes?target=sim&limit=5000", "limit")
        .await;
    api.bad("/api/v1/probes?target=sim&cursor=abc", "cursor")
        .await;
    api.bad(
        "/api/v1/probes?target=sim&run=sweep",
        "run: expected a sweep step id",
    )
    .await;
    // This daemon ran no sweep: its canaries are all its probes (up to a
    // fixed end, as canaries go on arriving).
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let all = api
        .ok(&format!("/api/v1/probes?target=sim&to={until}&limit=1000"))
        .await;
    let canaries = api
        .ok(&format!(
            "/api/v1/probes?target=sim&run=canary&to={until}&limit=1000"
        ))
        .await;
    assert!(!all["probes"].as_array().unwrap().is_empty());
    assert_eq!(canaries["probes"], all["probes"]);
    let of_a_step = api.ok("/api/v1/probes?target=sim&run=1&limit=1000").await;
    assert_eq!(of_a_step["probes"], serde_json::json!([]));
    api.bad("/api/v1/probes", "missing parameter \"target\"")
        .await;

    // Rules and alerts.
    let rules = api.ok("/api/v1/rules").await;
    let kv_rule = &rules["rules"][0];
    assert_eq!(kv_rule["name"], "kv-high");
    assert_eq!(kv_rule["signal"], "kv_cache_usage");
    assert_eq!(kv_rule["op"], ">");
    assert_eq!(kv_rule["threshold"], 0.9);
    assert_eq!(kv_rule["for_s"], 60.0);
    assert_eq!(kv_rule["alerts"], json!([]));
    assert_eq!(rules["rules"][1]["alerts"][0]["state"], "firing");
    let alerts = api.ok("/api/v1/alerts").await;
    assert_eq!(alerts["alerts"].as_array().unwrap().len(), 1, "{alerts}");
    let always = &alerts["alerts"][0];
    assert_eq!(always["rule"], "always");
    assert_eq!(always["labels"]["target"], "sim");
    assert!(always["fired_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        api.ok("/api/v1/alerts?state=pending").await["alerts"],
        json!([])
    );
    api.bad("/api/v1/alerts?state=burning", "state").await;
    let history = api.ok("/api/v1/alerts/history?limit=1").await;
    assert_eq!(history["events"][0]["state"], "firing");
    assert_eq!(history["events"][0]["rule"], "always");
    assert!(history["next_cursor"].is_null());

    // Sweeps: none yet; bad ids and bodies; then one started here.
    assert_eq!(api.ok("/api/v1/sweeps").await["sweeps"], json!([]));
    let (status, _) = api.get("/api/v1/sweeps/999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    api.bad("/api/v1/sweeps/abc", "sweep id").await;
    api.bad("/api/v1/runs", "missing parameter \"sweep\"").await;
    let (status, body) = api
        .post("/api/v1/sweeps", json!({ "target": "sim", "colour": 1 }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("colour"));
    let (status, _) = api
        .post("/api/v1/sweeps", json!({ "target": "other" }))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = api
        .post(
            "/api/v1/sweeps",
            json!({ "target": "sim", "concurrency": [1, 1000] }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = api
        .post(
            "/api/v1/sweeps",
            json!({
                "target": "sim",
                "shape": "64x8",
                "concurrency": [1, 2],
                "requests_per_step": 4,
                "min_step_duration": "500ms",
            }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_i64().expect("sweep id");
    let sweep = wait_for("the sweep to end", Duration::from_secs(60), || async {
        let sweep = api.ok(&format!("/api/v1/sweeps/{id}")).await;
        (sweep["status"] != "running").then_some(sweep)
    })
    .await;
    assert_eq!(sweep["status"], "completed", "{sweep}");
    assert_eq!(sweep["target"], "sim");
    assert_eq!(sweep["steps"].as_array().unwrap().len(), 2);
    assert_eq!(
        sweep["steps"][1]["load"],
        json!({ "kind": "concurrency", "value": 2.0 })
    );
    assert!(sweep["verdict"].is_object());
    let runs = api.ok(&format!("/api/v1/runs?sweep={id}")).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);
    let list = api.ok("/api/v1/sweeps?limit=1").await;
    assert_eq!(list["sweeps"][0]["id"], id);
    assert!(list["next_cursor"].is_null());

    // Predict a change of that sweep: the twin fitted to it, with one
    // running sequence, runs the same ladder. Flags are checked first.
    let predict = format!("/api/v1/sweeps/{id}/predictions");
    let (status, body) = api
        .post(&predict, json!({ "vllm_args": "--no-such-flag 1" }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--no-such-flag"),
        "{body}"
    );
    let (status, _) = api
        .post("/api/v1/sweeps/999/predictions", json!({ "vllm_args": "" }))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = api
        .post(&predict, json!({ "vllm_args": "--max-num-seqs 1" }))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "running");
    assert_eq!(body["vllm_args"], json!(["--max-num-seqs", "1"]));
    let prediction_id = body["id"].as_u64().expect("prediction id");
    let (status, busy) = api
        .post(&predict, json!({ "vllm_args": "--max-num-seqs 2" }))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    let prediction = wait_for(
        "the prediction to end",
        Duration::from_secs(120),
        || async {
            let p = api
                .ok(&format!("/api/v1/predictions/{prediction_id}"))
                .await;
            (p["status"] != "running").then_some(p)
        },
    )
    .await;
    assert_eq!(prediction["status"], "done", "{prediction}");
    let result = &prediction["result"];
    assert_eq!(result["steps"].as_array().unwrap().len(), 2, "{result}");
    assert_eq!(result["prediction"]["profile"]["max_num_seqs"], 1);
    assert!(result["prediction"]["fit_error"]
        .as_str()
        .is_some_and(|e| e.contains("RMS")));
    assert!(result["verdict"]["summary"].is_array());

    // Every GET route answers what its documentation promises.
    for (doc, _) in llmwatch_web::api::routes() {
        // This daemon runs no experiment (its API is off without
        // `experiment_programs`): experiments_run_from_the_api_only_with_an_allowed_program
        // checks that answer against its schema.
        if doc.method != "get" || doc.path == "/api/v1/experiments/{id}" {
            continue;
        }
        let mut path = if doc.path.starts_with("/api/v1/predictions/") {
            doc.path.replace("{id}", &prediction_id.to_string())
        } else {
            doc.path
                .replace("{name}", "sim")
                .replace("{id}", &id.to_string())
        };
        let required: Vec<String> = doc
            .params
            .iter()
            .filter(|p| p.required && p.location == llmwatch_web::api::In::Query)
            .map(|p| match p.name {
                "target" => "target=sim".to_string(),
                "metric" => "metric=kv_cache_usage".to_string(),
                "sweep" => format!("sweep={id}"),
                other => panic!("no test value for {other}"),
            })
            .collect();
        if !required.is_empty() {
            path = format!("{path}?{}", required.join("&"));
        }
        let body = api.ok(&path).await;
        let schema = (doc.response)();
        for key in schema["required"].as_array().into_iter().flatten() {
            let key = key.as_str().unwrap();
            assert!(body.get(key).is_some(), "{path}: no {key:?} in {body}");
        }
        // A closed schema names every field the answer has.
        if schema["additionalProperties"] == false {
            for key in body.as_object().unwrap().keys() {
                assert!(
                    schema["properties"].get(key).is_some(),
                    "{path}: {key:?} is not in its schema"
                );
            }
        }
    }

    // The OpenAPI document is served as generated.
    assert_eq!(
        api.ok("/api/v1/openapi.json").await,
        llmwatch_web::api::openapi::document(&Default::default())
    );

    // Unknown routes answer JSON too.
    let (status, body) = api.get("/api/v1/nothing/here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"]["message"].is_string());

    app.stop().await;
    eprintln!("api test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_documents_every_route() {
    let doc = llmwatch_web::api::openapi::document(&Default::default());
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut documented: Vec<String> = Vec::new();
    for (path, methods) in paths {
        for (method, op) in methods.as_object().unwrap() {
            documented.push(format!("{} {path}", method.to_uppercase()));
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()));
            assert!(op["responses"].as_object().unwrap().len() >= 2);
            // Every `{param}` of the path is declared.
            for segment in path.split('/').filter(|s| s.starts_with('{')) {
                let name = segment.trim_matches(|c| c == '{' || c == '}');
                assert!(
                    op["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["name"] == name && p["in"] == "path" && p["required"] == true),
                    "{path}: {name} undeclared"
                );
            }
        }
    }
    documented.sort();
    // The route list (a snapshot: a new route must be added here on purpose).
    assert_eq!(
        documented,
        [
            "GET /api/v1/alerts",
            "GET /api/v1/alerts/history",
            "GET /api/v1/experiments",
            "GET /api/v1/experiments/{id}",
            "POST /api/v1/experiments",
            "GET /api/v1/openapi.json",
            "GET /api/v1/predictions/{id}",
            "GET /api/v1/probes",
            "GET /api/v1/rules",
            "GET /api/v1/runs",
            "GET /api/v1/series",
            "GET /api/v1/sweeps",
            "GET /api/v1/sweeps/{id}",
            "GET /api/v1/targets",
            "GET /api/v1/targets/{name}",
            "GET /api/v1/targets/{name}/latency_breakdown",
            "GET /api/v1/targets/{name}/live",
            "GET /api/v1/targets/{name}/passive",
            "GET /api/v1/targets/{name}/served_workload",
            "GET /api/v1/targets/{name}/signals",
            "POST /api/v1/sweeps",
            "POST /api/v1/sweeps/{id}/cancel",
            "POST /api/v1/sweeps/{id}/predictions",
            "GET /prometheus/api/v1/label/{name}/values",
            "GET /prometheus/api/v1/labels",
            "GET /prometheus/api/v1/metadata",
            "GET /prometheus/api/v1/query",
            "GET /prometheus/api/v1/query_exemplars",
            "GET /prometheus/api/v1/query_range",
            "GET /prometheus/api/v1/rules",
            "GET /prometheus/api/v1/series",
            "GET /prometheus/api/v1/status/buildinfo",
            "POST /prometheus/api/v1/labels",
            "POST /prometheus/api/v1/query",
            "POST /prometheus/api/v1/query_exemplars",
            "POST /prometheus/api/v1/query_range",
            "POST /prometheus/api/v1/series",
        ]
        .into_iter()
        .map(String::from)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    // Every route the router serves is in the document: both come from
    // `api::routes()` and `prometheus::routes()`.
    let mut served: Vec<String> = llmwatch_web::api::routes()
        .iter()
        .map(|(doc, _)| format!("{} {}", doc.method.to_uppercase(), doc.path))
        .collect();
    for (route, _) in llmwatch_web::prometheus::routes::<llmwatch_web::AppState>() {
        served.push(format!("GET {}", route.path));
        if route.post {
            served.push(format!("POST {}", route.path));
        }
    }
    for route in &served {
        assert!(documented.contains(route), "{route} undocumented");
    }
    // The document is valid JSON as served, and parses back the same.
    let text = serde_json::to_string_pretty(&doc).unwrap();
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, doc);
}

/// A small plan over the simulator (`llmwatch sim`), one repeat: the API's
/// own path, not the experiment's statistics (`sweep.rs` has those).
fn api_plan(program: &str, extra: &str) -> String {
    format!(
        r#"
[experiment]
name = "api-plan"
repeats = 1
[server]
command = ["{program}", "sim", "--port", "{{port}}", "--gpu-port", "{{gpu_port}}", "--time-scale", "4", "--"]
ready_timeout = "20s"
{extra}
[sweep]
shape = "32x8"
concurrency = [1, 4]
slo_ttft_p95 = "1s"
slo_itl_p95 = "50ms"
requests_per_step = 8
requests_per_slot = 1
min_step_duration = "300ms"
scrape_interval = "50ms"
client_self_check = false
[[variant]]
name = "baseline"
args = ["--max-num-seqs", "2"]
[[variant]]
name = "seqs-8"
args = ["--max-num-seqs", "8"]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiments_run_from_the_api_only_with_an_allowed_program() {
    let program = env!("CARGO_BIN_EXE_llmwatch");
    // Off by default: no program listed, nothing parsed, 403.
    let off = common::spawn_daemon(&format!("[server]\ntoken = \"{TOKEN}\"\n")).await;
    let (status, body) = Api {
        base: off.base_url(),
        client: reqwest::Client::new(),
    }
    .post(
        "/api/v1/experiments",
        json!({ "plan": api_plan(program, "") }),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("are off"),
        "{body}"
    );
    let daemon = common::spawn_daemon(&format!(
        "[server]\ntoken = \"{TOKEN}\"\nexperiment_programs = [{program:?}]\n"
    ))
    .await;
    let api = Api {
        base: daemon.base_url(),
        client: reqwest::Client::new(),
    };
    // Refused: a program not listed, an environment beyond the engines', a
    // graded set read from the daemon's disk, a server restarted by hand.
    let (status, body) = api
        .post(
            "/api/v1/experiments",
            json!({ "plan": api_plan("/bin/sh", "") }),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("experiment_programs"));
    for (extra, needle) in [
        ("env = { LD_PRELOAD = \"/tmp/x.so\" }", "env.LD_PRELOAD"),
        ("[quality]\nset = \"/etc/passwd\"", "quality.set"),
    ] {
        let (status, body) = api
            .post(
                "/api/v1/experiments",
                json!({ "plan": api_plan(program, extra) }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(needle),
            "{body}"
        );
    }
    let (status, body) = api
        .post(
            "/api/v1/experiments",
            json!({ "plan": "[experiment]\nname = 1" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Another site's page may not start one, even with the token.
    let cross = api
        .client
        .post(format!("{}/api/v1/experiments", api.base))
        .bearer_auth(TOKEN)
        .header("Origin", "https://evil.example")
        .json(&json!({ "plan": api_plan(program, "") }))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);

    let (status, started) = api
        .post(
            "/api/v1/experiments",
            json!({ "plan": api_plan(program, "") }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let id = started["id"].as_i64().expect("id");
    let (busy, _) = api
        .post(
            "/api/v1/experiments",
            json!({ "plan": api_plan(program, "") }),
        )
        .await;
    assert_eq!(busy, StatusCode::CONFLICT, "one experiment at a time");
    let path = format!("/api/v1/experiments/{id}");
    let done = wait_for(
        "the API experiment to complete",
        Duration::from_secs(60),
        || async {
            let body = api.ok(&path).await;
            (body["status"] == "completed").then_some(body)
        },
    )
    .await;
    // The answer has every field its documented schema requires.
    let doc = llmwatch_web::api::routes()
        .into_iter()
        .find(|(doc, _)| doc.method == "get" && doc.path == "/api/v1/experiments/{id}")
        .expect("the route is documented")
        .0;
    for key in (doc.response)()["required"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = key.as_str().unwrap();
        assert!(done.get(key).is_some(), "no {key:?} in {done}");
    }
    let result = &done["result"];
    assert_eq!(result["ranking"][0]["variant"], "seqs-8", "{result}");
    assert_eq!(result["runs_done"], 2);
    // `{gpu_port}`: the simulated GPU page's power gives energy per token.
    let joules = result["variants"][1]["energy_j_per_token"].as_f64();
    assert!(joules.is_some_and(|j| j > 0.0), "{result}");
    assert_eq!(
        result["checklist"][3][1], "NVIDIA H100 80GB HBM3",
        "GPU model from the page"
    );
    let listed = api.ok("/api/v1/experiments").await;
    assert_eq!(listed["experiments"][0]["id"], id);
    let page = api
        .client
        .get(format!("{}/experiments/{id}", api.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("data-variant=\"seqs-8\"") && html.contains("<svg data-chart=\"throughput\"")
    );
    assert!(
        !html.contains("http-equiv=\"refresh\""),
        "a finished experiment does not reload"
    );
}
