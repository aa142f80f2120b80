//! The dashboard pages, rendered by the running daemon from a store filled
//! by the simulator: two stored sweeps of a KV-starved engine, then the
//! daemon scraping it (and its GPU page), probing it, and evaluating an
//! alert that fires. Each page is fetched over HTTP and asserted on its
//! content — values, chart markers, diagnosis text — not only its status.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_core::analysis::Objectives;
use llmwatch_engine::runners::sweep::{run_sweep, Ladder, SweepSettings};
use llmwatch_probe::{Api, SelfCheckLimits, Shape};
use llmwatch_store::Store;
use serde_json::Value;

use crate::common::app::TestApp;
use crate::common::wait_until;

const MODEL: &str = "sim-llama-8b";

struct Fixture {
    app: TestApp,
    base: String,
    _sim: llmwatch_sim::Sim,
    load: Vec<tokio::task::JoinHandle<()>>,
}

fn sweep_settings(url: &str, gpu_url: &str, shape: Shape, ladder: &[u32]) -> SweepSettings {
    let mut s = SweepSettings::new(url.to_string());
    s.target_name = Some("kv".to_string());
    s.gpu_url = Some(gpu_url.to_string());
    s.model = Some(MODEL.to_string());
    s.api = Api::Completions;
    s.shape = shape;
    s.ladder = Ladder::Concurrency(ladder.to_vec());
    s.requests_per_step = 8;
    s.requests_per_slot = 2;
    s.min_step_duration = Duration::from_millis(300);
    s.scrape_interval = Duration::from_millis(50);
    s.price.per_gpu_hour = Some(2.5);
    s.objectives = Objectives {
        ttft_p95: Some(1.0),
        itl_p95: Some(0.050),
        e2e_p95: Some(60.0),
        ..Objectives::default()
    };
    s.self_check = SelfCheckLimits {
        max_cpu_cores: 64.0,
        max_scheduler_lag_p99_ms: 1000.0,
        max_dispatch_lag_p99_ms: 1000.0,
        ..Default::default()
    };
    s
}

/// Streams completions back to back so the engine has running and waiting
/// requests and a filling KV cache.
async fn background_load(client: reqwest::Client, url: String, worker: usize) {
    let mut round = 0usize;
    loop {
        round += 1;
        let body = serde_json::json!({
            "model": MODEL,
            "prompt": format!("load-{worker}-{round} {}", "lorem ipsum dolor ".repeat(60)),
            "max_tokens": 64,
            "ignore_eos": true,
            "stream": true,
        });
        match client
            .post(format!("{url}/v1/completions"))
            .json(&body)
            .send()
            .await
        {
            Ok(response) => {
                let mut stream = response.bytes_stream();
                while let Some(chunk) = stream.next().await {
                    if chunk.is_err() {
                        break;
                    }
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn fixture(token: Option<&str>) -> Fixture {
    let (sim, engine, gpu) = start(&SimArgs::loopback("kv-starved", MODEL, 2.0).with_gpu_page())
        .await
        .expect("simulator starts");
    let url = format!("http://{engine}");
    let gpu_url = format!("http://{}/metrics", gpu.expect("GPU page"));
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("llmwatch.db");

    // Two sweeps first (nothing else loads the engine while they measure):
    // the second changes the shape, so the comparison has a card difference.
    {
        let store = Store::open(&db).await.expect("store opens");
        let shape = |i, o| Shape {
            input_tokens: i,
            output_tokens: o,
        };
        run_sweep(
            sweep_settings(&url, &gpu_url, shape(240, 16), &[1, 2, 4, 8, 16, 32]),
            Some(&store),
            |_| {},
        )
        .await
        .expect("first sweep runs");
        run_sweep(
            sweep_settings(&url, &gpu_url, shape(120, 16), &[1, 4, 16]),
            Some(&store),
            |_| {},
        )
        .await
        .expect("second sweep runs");
    }

    let token_line = token
        .map(|t| format!("token = \"{t}\"\n"))
        .unwrap_or_default();
    let toml = format!(
        "[server]\nalert_interval = \"200ms\"\n{token_line}\
         slo_ttft_p95 = \"1s\"\nslo_itl_p95 = \"50ms\"\n\
         [[targets]]\nname = \"kv\"\nurl = \"{url}\"\nscrape_interval = \"300ms\"\ngpus = \"kv-gpus\"\n\
         [targets.probe]\ninterval = \"300ms\"\nshape = \"64x16\"\napi = \"completions\"\n\
         [[gpus]]\nname = \"kv-gpus\"\ndcgm_url = \"{gpu_url}\"\ninterval = \"300ms\"\n\
         [[alerts]]\nname = \"kv-in-use\"\nsignal = \"requests_running\"\nop = \">=\"\nthreshold = 0\nwindow = \"1s\"\n",
    );
    let app = TestApp::builder().config(&toml).dir(dir).spawn().await;
    let client = reqwest::Client::new();
    let load = (0..6)
        .map(|w| tokio::spawn(background_load(client.clone(), url.clone(), w)))
        .collect();
    let base = app.base_url();

    // Wait for scrapes, GPU scrapes, probes and a firing alert.
    let store = app.daemon.store.clone();
    wait_until(
        "the daemon to fill the store",
        Duration::from_secs(20),
        || async {
            let target = store.target_by_name("kv").await.expect("store");
            let gpus = store.target_by_name("kv-gpus").await.expect("store");
            match (target, gpus) {
                (Some(t), Some(g)) => {
                    let probes = store
                        .probes(
                            t.id,
                            llmwatch_engine::sources::scrape::now_ms() - 60_000,
                            i64::MAX,
                            100,
                        )
                        .await
                        .expect("probes");
                    let scrapes = store.scrape_health(t.id, 5).await.expect("health");
                    let gpu_scrapes = store.scrape_health(g.id, 3).await.expect("health");
                    let firing = store
                        .alert_states()
                        .await
                        .expect("alerts")
                        .iter()
                        .any(|a| a.alert.state == llmwatch_core::alerts::AlertState::Firing);
                    probes.len() >= 3
                        && scrapes.iter().filter(|h| h.up).count() >= 3
                        && gpu_scrapes.iter().filter(|h| h.up).count() >= 2
                        && firing
                }
                _ => false,
            }
        },
    )
    .await;
    Fixture {
        app,
        base,
        _sim: sim,
        load,
    }
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, String) {
    let response = client.get(url).send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// The text of the element carrying `data-kpi="ID"`.
fn kpi<'a>(html: &'a str, id: &str) -> &'a str {
    let marker = format!("data-kpi=\"{id}\"");
    let at = html.find(&marker).unwrap_or_else(|| panic!("no {marker}"));
    let rest = &html[at..];
    let start = rest.find('>').expect("tag end") + 1;
    let end = rest[start..].find('<').expect("text end");
    &rest[start..start + end]
}

/// The class attribute of the element carrying `data-kpi="ID"`.
fn kpi_class<'a>(html: &'a str, id: &str) -> &'a str {
    let marker = format!("data-kpi=\"{id}\"");
    let at = html.find(&marker).unwrap_or_else(|| panic!("no {marker}"));
    let tag_start = html[..at].rfind('<').expect("tag start");
    let tag = &html[tag_start..at];
    let class_at = tag.find("class=\"").expect("class") + 7;
    let class_end = tag[class_at..].find('"').expect("class end");
    &tag[class_at..class_at + class_end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_what_the_store_holds() {
    let started = Instant::now();
    let f = fixture(None).await;
    eprintln!("fixture ready in {:.1} s", started.elapsed().as_secs_f64());
    let client = reqwest::Client::new();
    let base = &f.base;

    // Overview: the target's card with live values, coloured; the linked
    // GPU source; the firing alert on top; recent sweeps.
    let (status, html) = get(&client, &format!("{base}/")).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("<h1>Targets</h1>"));
    let firing_at = html.find("Firing alerts").expect("firing alerts section");
    let targets_at = html.find("<h1>Targets</h1>").expect("targets");
    assert!(firing_at < targets_at, "firing alerts are on top");
    assert!(
        html.contains("<strong>kv-in-use</strong> on kv"),
        "the firing rule is named"
    );
    assert!(html.contains("href=\"/targets/kv\""));
    assert!(html.contains("engine vllm"), "engine detected");
    assert!(
        html.contains(&format!("model {MODEL}")),
        "model from the probes"
    );
    assert_eq!(kpi(&html, "kv|state"), "up");
    let ttft = kpi(&html, "kv|ttft_p95");
    assert!(
        ttft.ends_with(" ms") || ttft.ends_with(" s"),
        "TTFT {ttft:?}"
    );
    let class = kpi_class(&html, "kv|ttft_p95");
    assert!(
        ["v ok", "v warn", "v bad"].contains(&class),
        "TTFT coloured against the objective: {class:?}"
    );
    let itl = kpi(&html, "kv|itl_p95");
    assert!(itl.ends_with(" ms") || itl.ends_with(" s"), "ITL {itl:?}");
    for id in ["kv|kv", "kv|gpu_mem", "kv|gpu_util", "kv|prefix"] {
        let text = kpi(&html, id);
        assert!(text.ends_with(" %"), "{id}: {text:?}");
    }
    let running: f64 = kpi(&html, "kv|running")
        .parse()
        .expect("running is a number");
    assert!(running >= 0.0);
    assert!(kpi(&html, "kv|waiting").parse::<f64>().is_ok());
    assert!(html.contains("GPU sources") && html.contains("kv-gpus"));
    assert!(html.contains("href=\"/sweeps/1\"") && html.contains("href=\"/sweeps/2\""));
    assert!(html.contains("p95 TTFT ≤ 1.00 s, p95 ITL ≤ 50 ms"));
    assert!(html.contains("/static/live.js"));

    // Target page: every chart, on one time axis, with objectives and
    // probe beside server quantiles; downloads for each.
    let (status, html) = get(&client, &format!("{base}/targets/kv?range=15m")).await;
    assert_eq!(status, 200, "{html}");
    for title in [
        "Time to first token: probe (exact) vs server histogram (interpolated)",
        "Inter-token latency: probe (exact) vs server histogram (interpolated)",
        "KV-cache usage",
        "Requests waiting and running",
        "Preemptions",
        "Prefix-cache hit rate",
        "Token throughput",
        "GPU utilisation and memory",
        "Canary mean TTFT by phase",
        // The simulator's page is vLLM 0.32's: its prompt tokens by source
        // (issue 38) are charted; its MFU counters and sleep state read 0
        // and are not.
        "Prompt tokens by source",
    ] {
        assert!(html.contains(title), "chart {title:?}");
    }
    assert!(
        !html.contains("Engines asleep"),
        "all-zero families stay off"
    );
    // Ten over time, and the passive curve's three (throughput, TTFT, ITL
    // against concurrency).
    assert_eq!(html.matches("<svg").count(), 13, "thirteen inline charts");
    assert!(html.contains("objective p95 ≤ 1.00 s"));
    assert!(html.contains("objective p95 ≤ 50 ms"));
    for legend in [
        "probe p95",
        "probe p50",
        "server p95",
        "server p50",
        "waiting",
        "running",
    ] {
        assert!(
            html.contains(&format!("\n{legend}\n</text>")),
            "legend {legend:?}"
        );
    }
    assert!(html.contains("<strong aria-current=\"page\">15m</strong>"));
    assert!(html.contains("href=\"/targets/kv?range=24h\""));
    assert!(html.contains("href=\"/targets/kv/charts/ttft.svg?range=15m\""));
    assert!(html.contains("href=\"/targets/kv/charts/kv_cache.csv?range=15m\""));
    assert!(html.contains("GPU source kv-gpus"));

    // The data behind a chart, as JSON and CSV.
    let (status, body) = get(
        &client,
        &format!("{base}/targets/kv/charts/kv_cache.json?range=15m"),
    )
    .await;
    assert_eq!(status, 200);
    let chart: Value = serde_json::from_str(&body).expect("chart JSON");
    assert_eq!(chart["title"], "KV-cache usage");
    let points = chart["series"][0]["points"].as_array().expect("points");
    assert!(!points.is_empty(), "KV-cache points in the last 15 minutes");
    assert!(points.iter().all(|p| {
        let v = p[1].as_f64().unwrap_or(-1.0);
        (0.0..=100.0).contains(&v)
    }));
    let (status, body) = get(
        &client,
        &format!("{base}/targets/kv/charts/gpu.json?range=15m"),
    )
    .await;
    assert_eq!(status, 200);
    let chart: Value = serde_json::from_str(&body).expect("chart JSON");
    assert!(
        chart["series"][1]["points"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "GPU memory from the linked source: {body}"
    );
    let (status, body) = get(
        &client,
        &format!("{base}/targets/kv/charts/ttft.csv?range=15m"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.starts_with("series,unit,unix_ms,value\n"));
    assert!(body.contains("\nprobe p95,s,"), "probe TTFT rows: {body}");
    let (status, svg) = get(
        &client,
        &format!("{base}/targets/kv/charts/requests.svg?range=1h"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(svg.starts_with("<svg") && svg.contains("Requests waiting and running"));

    // Sweep page: verdict, diagnosis with evidence, marked charts, card,
    // steps.
    let (status, html) = get(&client, &format!("{base}/sweeps/1")).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Sweep 1 of kv"));
    // Goodput, energy (from the simulated dcgm page) and cost per step.
    for (class, unit) in [("energy", " J<"), ("cost", "<"), ("goodput", "<")] {
        let at = html
            .find(&format!("class=\"{class}\">"))
            .unwrap_or_else(|| panic!("no {class} cell"));
        let cell = &html[at..at + 40];
        let value = cell.split('>').nth(1).unwrap_or_default();
        assert!(
            value.contains(unit)
                && value
                    .trim_start_matches('$')
                    .starts_with(|c: char| c.is_ascii_digit()),
            "{class}: {cell}"
        );
    }
    let objectives_at = html
        .find("p95 e2e ≤ ")
        .expect("the e2e objective is stated");
    assert!(
        html[objectives_at..].starts_with("p95 e2e ≤ 60"),
        "{}",
        &html[objectives_at..objectives_at + 40]
    );
    // The diagnosis the store holds, named on the page (which verdict a
    // kv-starved sweep gets is the sweep tests' and the matrix's to check;
    // a page test beside the busiest tests must not depend on it).
    let (status, body) = get(&client, &format!("{base}/api/v1/sweeps/1")).await;
    assert_eq!(status, 200, "{body}");
    let stored: Value = serde_json::from_str(&body).expect("sweep JSON");
    let named = stored["verdict"]["findings"][0]["verdict"]
        .as_str()
        .unwrap_or_else(|| panic!("a stored finding: {body}"));
    assert!(html.contains(named), "diagnosis {named:?} named");
    assert!(html.contains("Evidence: "), "diagnosis evidence");
    assert!(html.contains("What to try: "));
    assert!(html.contains("Throughput vs load"));
    assert!(html.contains("Time to first token vs load"));
    assert!(html.contains("Inter-token latency vs load"));
    assert!(
        html.contains("GPU memory used, peak (%)") && html.contains("KV-cache usage, peak (%)")
    );
    assert!(html.contains("objective p95 TTFT ≤ 1.00 s"));
    assert!(html.contains("objective p95 ITL ≤ 50 ms"));
    let saturation = html
        .split("<dd id=\"saturation\">")
        .nth(1)
        .and_then(|s| s.split("</dd>").next())
        .expect("saturation");
    if saturation.starts_with("c ") {
        assert!(
            html.contains("saturation point (c "),
            "marked on the charts"
        );
        assert!(html.contains("(saturation)</td>"), "marked in the table");
    } else {
        assert_eq!(saturation, "not reached in this sweep");
    }
    assert_eq!(html.matches("<tr class=").count(), 6, "one row per step");
    // Each step says what the server saw of its prompts: exact input
    // lengths, no cache hits for random prompts, and links to its probes.
    assert_eq!(
        html.matches("<td class=\"input-tokens\">240 / 240 / 240</td>")
            .count(),
        6,
        "exact input tokens per step"
    );
    assert_eq!(
        html.matches("<td class=\"cached\">0 (0.00 hit)</td>")
            .count(),
        6,
        "no cache hits"
    );
    let probes_href = html
        .split("<a href=\"/api/v1/probes?target=kv&#38;run=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a step links to its probes")
        .replace("&#38;", "&");
    let (status, body) = get(
        &client,
        &format!("{base}/api/v1/probes?target=kv&run={probes_href}"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let probes = listed["probes"].as_array().unwrap();
    assert!(!probes.is_empty(), "{body}");
    assert!(probes.iter().all(|p| p["prompt_tokens"] == 240), "{body}");
    assert!(html.contains("concurrency 32"));
    assert!(
        html.contains(&format!("<td>{MODEL}</td>")),
        "experiment card"
    );
    assert!(html.contains("href=\"/sweeps/1/charts/ttft.csv\""));
    // Each step's mean TTFT by phase: a stacked chart and a table column.
    assert!(html.contains("Mean TTFT by phase vs load"));
    assert_eq!(
        html.matches("<td>mean TTFT ").count(),
        6,
        "a breakdown per step"
    );
    let (status, body) = get(
        &client,
        &format!("{base}/sweeps/1/charts/ttft_breakdown.json"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let chart: Value = serde_json::from_str(&body).expect("chart JSON");
    assert_eq!(chart["stacked"], true);
    assert_eq!(chart["series"][0]["name"], "queue");
    assert_eq!(
        chart["series"][0]["points"].as_array().map(Vec::len),
        Some(6),
        "{chart}"
    );
    let (status, body) = get(&client, &format!("{base}/sweeps/1/charts/throughput.json")).await;
    assert_eq!(status, 200);
    let chart: Value = serde_json::from_str(&body).expect("chart JSON");
    assert_eq!(
        chart["series"][0]["points"].as_array().map(Vec::len),
        Some(6)
    );
    assert_eq!(chart["series"][0]["points"][5][0], 32.0);

    // Sweep list and form.
    let (status, html) = get(&client, &format!("{base}/sweeps")).await;
    assert_eq!(status, 200);
    assert!(html.contains("<form class=\"sweep\" method=\"post\" action=\"/sweeps\">"));
    // The form carries the server's CSRF token (no login configured here).
    let marker = "name=\"csrf\" value=\"";
    let csrf = html[html.find(marker).expect("a CSRF field") + marker.len()..]
        .split('"')
        .next()
        .unwrap_or("")
        .to_string();
    assert_eq!(csrf.len(), 64, "{csrf}");
    assert!(html.contains("<option>kv</option>"));
    assert!(html.contains("href=\"/sweeps/2\""));

    // The form refuses what it cannot run, and says why.
    let post = |body: &'static str| {
        client
            .post(format!("{base}/sweeps"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("{body}&csrf={csrf}"))
            .send()
    };
    let response = post(
        "target=kv&concurrency=1%2Cx&shape=64x16&requests_per_step=5&slo_ttft_p95=1s&slo_itl_p95=50ms",
    )
    .await
    .expect("post");
    assert_eq!(response.status().as_u16(), 400);
    assert!(response
        .text()
        .await
        .expect("body")
        .contains("not a whole concurrency"));
    let response = post(
        "target=nope&concurrency=1&shape=64x16&requests_per_step=5&slo_ttft_p95=1s&slo_itl_p95=50ms",
    )
    .await
    .expect("post");
    assert_eq!(response.status().as_u16(), 400);
    let response = post(
        "target=kv&concurrency=1,128&shape=64x16&requests_per_step=5&slo_ttft_p95=1s&slo_itl_p95=50ms",
    )
    .await
    .expect("post");
    assert_eq!(response.status().as_u16(), 400, "above the sweep cap");

    // Compare: the differing card fields highlighted, both curves.
    let (status, html) = get(&client, &format!("{base}/compare?a=1&b=2")).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("sweep 1 (kv) vs sweep 2 (kv)"));
    assert!(html.contains("(differs)"), "a differing field");
    assert!(
        html.contains("<th>input_tokens (differs)</th><td class=\"changed\">240</td><td class=\"changed\">120</td>"),
        "input length differs"
    );
    assert!(
        html.contains("\nsweep 1\n</text>") && html.contains("\nsweep 2\n</text>"),
        "legend of both"
    );
    assert_eq!(html.matches("<svg").count(), 3);

    // Alerts: rule, state, history.
    let (status, html) = get(&client, &format!("{base}/alerts")).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("<code>requests_running &#62;= 0</code>"),
        "rule, escaped: {html}"
    );
    assert!(html.contains("<span class=\"state firing\">firing</span>"));
    assert!(html.contains("id=\"history\""));

    // Live updates: the first SSE event carries the overview's values.
    let response = client
        .get(format!("{base}/events"))
        .send()
        .await
        .expect("events");
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap_or(""),
        "text/event-stream"
    );
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event within 5 s")
            .expect("stream open")
            .expect("chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.starts_with("event: overview\ndata: "), "{text}");
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("data");
    let values: Value = serde_json::from_str(data).expect("JSON data");
    let kv = values
        .as_array()
        .and_then(|a| a.iter().find(|v| v["id"] == "kv|kv"))
        .expect("KV value of target kv");
    assert!(kv["text"].as_str().is_some_and(|t| t.ends_with(" %")));
    drop(stream);

    // Errors are pages too, and say what was wrong.
    let (status, html) = get(&client, &format!("{base}/targets/nope")).await;
    assert_eq!(status, 404);
    assert!(html.contains("no target is named &#34;nope&#34;"), "{html}");
    let (status, _) = get(&client, &format!("{base}/targets/kv?range=2h")).await;
    assert_eq!(status, 400);
    let (status, _) = get(&client, &format!("{base}/sweeps/99")).await;
    assert_eq!(status, 404);
    let (status, _) = get(&client, &format!("{base}/targets/kv/charts/ttft.png")).await;
    assert_eq!(status, 404);

    // Static assets are embedded.
    let (status, css) = get(&client, &format!("{base}/static/style.css")).await;
    assert_eq!(status, 200);
    assert!(css.contains(".v.bad"));

    // "Predict a change" on a finished sweep's page: the form starts a
    // prediction and shows it; a bad flag is refused, naming it.
    let (_, html) = get(&client, &format!("{base}/sweeps/2")).await;
    assert!(html.contains("id=\"predict\""), "the predict form");
    let field = "name=\"csrf\" value=\"";
    let csrf_at = html.find(field).expect("a CSRF field") + field.len();
    let csrf = &html[csrf_at..csrf_at + html[csrf_at..].find('"').expect("closing quote")];
    let no_redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let post = |change: &'static str, csrf: String| {
        no_redirect
            .post(format!("{base}/sweeps/2/predict"))
            .form(&[("csrf", csrf.as_str()), ("vllm_args", change)])
            .send()
    };
    let refused = post("--max-num-seqz 2", csrf.to_string())
        .await
        .expect("POST");
    assert_eq!(refused.status(), 400);
    assert!(refused
        .text()
        .await
        .expect("body")
        .contains("--max-num-seqz"));
    let forged = post("--max-num-seqs 2", "forged".into())
        .await
        .expect("POST");
    assert_eq!(forged.status(), 403);
    let started_prediction = post("--max-num-seqs 2", csrf.to_string())
        .await
        .expect("POST");
    assert_eq!(started_prediction.status(), 303);
    let location = started_prediction.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    assert!(location.starts_with("/predictions/"), "{location}");
    let (status, html) = get(&client, &format!("{base}{location}")).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("<code id=\"change\">--max-num-seqs 2</code>"),
        "{html}"
    );
    assert!(html.contains("href=\"/sweeps/2\""));
    let (_, html) = get(&client, &format!("{base}/sweeps/2")).await;
    assert!(
        html.contains(&format!("href=\"{location}\"")),
        "listed on the sweep page"
    );

    for task in &f.load {
        task.abort();
    }
    f.app.stop().await;
    eprintln!("pages test took {:.1} s", started.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_the_token_and_live_streams_end_with_the_daemon() {
    let app = TestApp::builder()
        .config("[server]\ntoken = \"s3cret\"\n")
        .spawn()
        .await;
    let base = app.base_url();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    // Pages send a browser to the login page; streams and data answer 401.
    for path in ["/", "/targets/x", "/sweeps", "/compare", "/alerts"] {
        let response = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status().as_u16(), 303, "{path} needs a login");
        let location = response.headers()["location"].to_str().unwrap_or("");
        assert!(location.starts_with("/login?next="), "{location}");
    }
    for path in ["/events", "/metrics", "/api/v1/targets"] {
        let response = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status().as_u16(), 401, "{path} needs the token");
    }
    let authed = |path: &str| {
        client
            .get(format!("{base}{path}"))
            .header("authorization", "Bearer s3cret")
            .send()
    };
    let html = authed("/")
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(html.contains("No targets yet"), "{html}");
    let html = authed("/alerts")
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(html.contains("No alert rules"));
    let html = authed("/sweeps")
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(html.contains("No sweeps yet") && html.contains("No configured targets to sweep"));
    // The script and stylesheet load without it (nothing about targets in them).
    let js = client
        .get(format!("{base}/static/live.js"))
        .send()
        .await
        .expect("request");
    assert_eq!(js.status().as_u16(), 200);
    assert!(js
        .text()
        .await
        .expect("body")
        .contains("new EventSource(\"/events\")"));

    // An open live stream does not hold the daemon's shutdown.
    let events = authed("/events").await.expect("events");
    assert_eq!(events.status().as_u16(), 200);
    let mut stream = events.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("first event")
        .expect("open")
        .expect("chunk");
    assert!(String::from_utf8_lossy(&first).contains("event: overview"));
    tokio::time::timeout(Duration::from_secs(10), app.stop())
        .await
        .expect("shutdown within 10 s with a live stream open");
    drop(stream);
}
