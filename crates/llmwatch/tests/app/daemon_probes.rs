//! Canary probes in the daemon against the simulator over loopback: probes
//! are stored with their timings and roll up into client-side signals; a
//! target that starts failing shows up in `probe_error_rate`.

use crate::common;

use std::time::Duration;

use common::{spawn_daemon, wait_for};
use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_core::signals::Signal;
use llmwatch_core::stats::percentile;
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::ProbeRow;

/// A daemon with one target `name` at `engine` probed by 64x16 chat
/// canaries every 200 ms, once `count` canaries are stored: the daemon,
/// the target's row, its canaries.
async fn canaries(
    engine: std::net::SocketAddr,
    name: &str,
    count: usize,
) -> (
    common::app::TestApp,
    llmwatch_store::TargetRow,
    Vec<ProbeRow>,
) {
    let toml = format!(
        "[[targets]]\nname = \"{name}\"\nurl = \"http://{engine}\"\nscrape_interval = \"500ms\"\n\
         [targets.probe]\ninterval = \"200ms\"\nshape = \"64x16\"\napi = \"chat\"\n"
    );
    let test = spawn_daemon(&toml).await;
    let store = test.daemon.store.clone();
    let target = wait_for(
        "the target's first scrape",
        Duration::from_secs(10),
        || async { store.target_by_name(name).await.unwrap() },
    )
    .await;
    let probes = wait_for(
        &format!("{count} canaries"),
        Duration::from_secs(20),
        || async {
            let probes = store.probes(target.id, 0, i64::MAX, 1000).await.unwrap();
            (probes.len() >= count).then_some(probes)
        },
    )
    .await;
    (test, target, probes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_are_stored_and_become_signals() {
    let (sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    let (test, target, probes) = canaries(engine, "sim", 5).await;
    let store = test.daemon.store.clone();
    for probe in &probes {
        assert!(probe.ok, "{:?}", probe.error);
        assert_eq!(probe.model, "sim-model", "model discovered from /v1/models");
        assert_eq!(probe.output_tokens, 16);
        let prompt = probe
            .prompt_tokens
            .expect("server-reported prompt tokens kept");
        assert!(
            (60..=96).contains(&prompt),
            "prompt of {prompt} tokens for a 64-token shape"
        );
        assert_eq!(probe.itl_s.len(), 15);
        assert!(probe.ttft_s.unwrap() > 0.0 && probe.ttft_s.unwrap() < probe.e2e_s);
        assert!(probe.record_json.contains("\"events\""));
    }
    let signals = store
        .probe_signals(target.id, now_ms(), 60_000)
        .await
        .unwrap();
    let value = |signal| signals.iter().find(|(s, _)| *s == signal).map(|(_, v)| *v);
    assert_eq!(value(Signal::ProbeErrorRate), Some(0.0));
    assert!(value(Signal::ProbeTtftP95).unwrap() > 0.0);
    assert!(value(Signal::ProbeItlP95).unwrap() > 0.0);

    // The target starts failing: new canaries are recorded as errors.
    sim.set_failing(true);
    // Canaries started after the switch: one already in flight may still succeed.
    let window_start = now_ms() + 1;
    wait_for(
        "canaries started after the switch",
        Duration::from_secs(15),
        || async {
            let later = store
                .probes(target.id, window_start, i64::MAX, 1000)
                .await
                .unwrap();
            (later.len() >= 2).then_some(())
        },
    )
    .await;
    test.daemon.shutdown().await;
    let recent = store
        .probes(target.id, window_start, i64::MAX, 1000)
        .await
        .unwrap();
    assert!(!recent.is_empty());
    assert!(recent.iter().all(|p| !p.ok), "{recent:?}");
    assert!(
        recent[0].error.as_deref().unwrap_or("").contains("500"),
        "{:?}",
        recent[0].error
    );
    let signals = store
        .probe_signals(target.id, now_ms(), now_ms() - window_start)
        .await
        .unwrap();
    assert_eq!(
        signals
            .iter()
            .find(|(s, _)| *s == Signal::ProbeErrorRate)
            .map(|(_, v)| *v),
        Some(1.0)
    );
}

/// Issue 11: a canary that cannot start (its shape does not fit the
/// model's context) is stored as a failed probe with the reason, never
/// silence, and no request is sent to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_cannot_start_stores_its_reason() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    let toml = format!(
        "[[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"500ms\"\n\
         [targets.probe]\ninterval = \"200ms\"\nshape = \"1000000x8\"\napi = \"chat\"\n"
    );
    let test = spawn_daemon(&toml).await;
    let running = &test.daemon;
    let store = running.store.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let probes = loop {
        let target = store.target_by_name("sim").await.unwrap();
        let probes = match target {
            Some(t) => store.probes(t.id, 0, i64::MAX, 100).await.unwrap(),
            None => Vec::new(),
        };
        if !probes.is_empty() || tokio::time::Instant::now() > deadline {
            break probes;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    test.daemon.shutdown().await;
    assert!(!probes.is_empty(), "the canary stored nothing");
    let first = &probes[0];
    assert!(!first.ok);
    assert_eq!(first.error_kind.as_deref(), Some("setup"));
    let error = first.error.as_deref().unwrap_or("");
    assert!(
        error.contains("1000008") && error.contains("max_model_len"),
        "{error}"
    );
}

/// Issue 11: canaries against a llama-server (the simulator's `llamacpp`
/// flavor: `/tokenize` of raw `content`, the template from
/// `/apply-template`, the context per slot in `/props`, several tokens per
/// event, the connection closed after every stream) succeed with the exact
/// input length, and the engine is recognised from its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_against_llama_server_are_exact_and_lose_nothing() {
    let args = SimArgs {
        flavor: "llamacpp".to_string(),
        ..SimArgs::loopback("balanced", "tiny-llama", 10.0)
    };
    let (_sim, engine, _) = sim::start(&args).await.unwrap();
    let (test, _, probes) = canaries(engine, "llama", 8).await;
    let store = test.daemon.store.clone();
    let engine_name = wait_for("the engine detected", Duration::from_secs(10), || async {
        let t = store.target_by_name("llama").await.unwrap()?;
        t.engine.filter(|e| e != "unknown")
    })
    .await;
    test.daemon.shutdown().await;
    assert_eq!(engine_name, "llamacpp");
    for probe in &probes {
        assert!(probe.ok, "{:?}", probe.error);
        assert_eq!(
            probe.model, "tiny-llama",
            "model discovered from /v1/models"
        );
        assert_eq!(probe.prompt_tokens, Some(64), "template counted exactly");
        assert_eq!(probe.output_tokens, 16);
    }
    // Several tokens arrive in one event now and then: fewer gaps than tokens.
    assert!(
        probes.iter().any(|p| p.itl_s.len() < 15),
        "{:?}",
        probes.iter().map(|p| p.itl_s.len()).collect::<Vec<_>>()
    );
}

/// Issue 11: a canary whose shape does not fit llama-server's context per
/// slot (stated only in `/props`) stores the reason, naming the limit and
/// where it was read, and sends no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_past_llama_servers_slot_context_names_the_limit() {
    let args = SimArgs {
        flavor: "llamacpp".to_string(),
        ..SimArgs::loopback("balanced", "tiny-llama", 10.0)
    };
    let (sim, engine, _) = sim::start(&args).await.unwrap();
    let context = sim.config().profile.max_model_len;
    let toml = format!(
        "[[targets]]\nname = \"llama\"\nurl = \"http://{engine}\"\nscrape_interval = \"500ms\"\n\
         [targets.probe]\ninterval = \"200ms\"\nshape = \"{context}x8\"\napi = \"chat\"\n"
    );
    let test = spawn_daemon(&toml).await;
    let store = test.daemon.store.clone();
    let probes = wait_for("a stored canary", Duration::from_secs(20), || async {
        let t = store.target_by_name("llama").await.unwrap()?;
        let probes = store.probes(t.id, 0, i64::MAX, 100).await.unwrap();
        (!probes.is_empty()).then_some(probes)
    })
    .await;
    // The failure is an event too: counted by name on the own /metrics.
    let metrics = reqwest::get(format!("{}/metrics", test.base_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("llmwatch_failures_total{event=\"canary_setup\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(counted.is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(metrics.contains("llmwatch_failures_total{event=\"retention\"}"));
    test.daemon.shutdown().await;
    let first = &probes[0];
    assert!(!first.ok);
    assert_eq!(first.error_kind.as_deref(), Some("setup"));
    let error = first.error.as_deref().unwrap_or("");
    assert!(
        error.contains(&format!("{}", context + 8)) && error.contains("n_ctx per slot in"),
        "{error}"
    );
    assert_eq!(
        sim.snapshot().prompt_tokens,
        0,
        "no request reached the engine"
    );
}

/// A target name whose canaries fire in the first second of each `period`
/// after the daemon starts (the ticker's phase is a stable hash of it), so
/// a test knows when none is due.
fn name_with_early_phase(period: Duration) -> String {
    (0..10_000)
        .map(|i| format!("sim-{i}"))
        .find(|name| {
            llmwatch_engine::ticker::schedule_offset(&format!("{name}/probe"), period)
                < Duration::from_millis(500)
        })
        .expect("some name hashes into the first 500 ms")
}

/// Probes of `target` listed by the API, of `run` (`canary` or a step id)
/// or all.
async fn listed_probes(base: &str, target: &str, run: Option<&str>) -> Vec<serde_json::Value> {
    let run = run.map(|r| format!("&run={r}")).unwrap_or_default();
    let page: serde_json::Value = reqwest::get(format!(
        "{base}/api/v1/probes?target={target}{run}&from=0&limit=1000"
    ))
    .await
    .unwrap()
    .error_for_status()
    .unwrap()
    .json()
    .await
    .unwrap();
    page["probes"].as_array().cloned().unwrap_or_default()
}

fn ttfts(probes: &[serde_json::Value]) -> Vec<f64> {
    let mut values: Vec<f64> = probes.iter().filter_map(|p| p["ttft_s"].as_f64()).collect();
    values.sort_by(f64::total_cmp);
    values
}

/// Issue 11: canaries and a sweep of the same target. The sweep's probes
/// (long prompts on a prefill-heavy engine: TTFT ≥ 0.3 s) are kept and
/// listed per step, but `probe_ttft_p95` is the canaries' alone, so an
/// alert on it stays quiet; a server-side alert that fires under the
/// sweep's load says a sweep was running; the target page shades the sweep
/// with a link to it. The canaries come every 60 s and none is due while
/// the sweep runs, so the canaries' own TTFT is that of an idle server
/// (issue 39: 60 s, not 30, so a loaded machine has a minute, the signals'
/// window, to finish the sweep before the next canary, not 29 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_traffic_stays_out_of_canary_signals_and_alerts() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("prefill-heavy", "sim-model", 1.0))
        .await
        .unwrap();
    let period = Duration::from_secs(60);
    let name = name_with_early_phase(period);
    let toml = format!(
        r#"
[server]
alert_interval = "200ms"

[[targets]]
name = "{name}"
url = "http://{engine}"
scrape_interval = "250ms"
[targets.probe]
interval = "60s"
shape = "16x8"
api = "chat"

[[alerts]]
name = "canary-ttft"
signal = "probe_ttft_p95"
op = ">"
threshold = "200ms"
window = "60s"
target = "{name}"

[[alerts]]
name = "busy"
signal = "requests_running"
op = ">="
threshold = 2
window = "1s"
target = "{name}"
"#
    );
    let test = spawn_daemon(&toml).await;
    let started = std::time::Instant::now();
    let base = test.base_url();
    let store = test.daemon.store.clone();
    let canary = wait_for("the first canary", Duration::from_secs(10), || async {
        let t = store.target_by_name(&name).await.unwrap()?;
        let probes = store.probes(t.id, 0, i64::MAX, 10).await.unwrap();
        probes.into_iter().next()
    })
    .await;
    assert!(canary.ok, "{:?}", canary.error);

    let response = reqwest::Client::new()
        .post(format!("{base}/api/v1/sweeps"))
        .json(&serde_json::json!({
            "target": name,
            "shape": "1800x4",
            "concurrency": [1, 2],
            "requests_per_step": 6,
            "min_step_duration": "500ms",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
    let sweep_id = response.json::<serde_json::Value>().await.unwrap()["id"]
        .as_i64()
        .expect("sweep id");

    // While it runs, the server-side alert fires and names the sweep.
    let running_note = format!("sweep {sweep_id} running");
    let alerts = test.daemon.alerts.clone();
    let busy = wait_for("the busy alert, annotated", Duration::from_secs(20), || {
        let alerts = alerts.clone();
        let running_note = running_note.clone();
        async move {
            alerts.current().into_iter().find(|a| {
                a.rule == "busy"
                    && a.alert.state == llmwatch_core::alerts::AlertState::Firing
                    && a.annotations
                        .get("sweep")
                        .is_some_and(|n| n.starts_with(&running_note))
            })
        }
    })
    .await;
    assert!(busy.annotations["sweep"].contains(&format!("/sweeps/{sweep_id}")));

    let sweep = wait_for("the sweep to finish", Duration::from_secs(25), || async {
        let row = store.sweep(sweep_id).await.unwrap()?;
        (row.status != llmwatch_store::SweepStatus::Running).then_some(row)
    })
    .await;
    assert_eq!(sweep.status, llmwatch_store::SweepStatus::Completed);
    // Two evaluation rounds after the sweep, with its probes in the window.
    let evaluated = alerts.evaluations();
    wait_for("two more alert rounds", Duration::from_secs(5), || async {
        (alerts.evaluations() >= evaluated + 2).then_some(())
    })
    .await;
    assert!(
        started.elapsed() < period - Duration::from_secs(1),
        "the sweep overran the gap between two canaries: this test cannot tell their TTFTs apart"
    );

    // The sweep's probes are kept, per step, and slow.
    let steps: serde_json::Value = reqwest::get(format!("{base}/api/v1/runs?sweep={sweep_id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let steps = steps["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(steps.len(), 2, "{steps:?}");
    let mut sweep_probes = Vec::new();
    for step in &steps {
        let id = step["id"].as_i64().expect("step id");
        let probes = listed_probes(&base, &name, Some(&id.to_string())).await;
        assert!(probes.len() >= 6, "step {id}: {} probes", probes.len());
        assert!(probes.iter().all(|p| p["run_id"] == id), "{probes:?}");
        sweep_probes.extend(probes);
    }
    let canaries = listed_probes(&base, &name, Some("canary")).await;
    assert!(!canaries.is_empty());
    assert!(canaries.iter().all(|p| p["run_id"].is_null()));
    let all = listed_probes(&base, &name, None).await;
    assert_eq!(all.len(), canaries.len() + sweep_probes.len());

    let canary_p95 = percentile(&ttfts(&canaries), 0.95).unwrap();
    let mut everything = ttfts(&canaries);
    everything.extend(ttfts(&sweep_probes));
    everything.sort_by(f64::total_cmp);
    let mixed_p95 = percentile(&everything, 0.95).unwrap();
    assert!(
        canary_p95 < 0.2 && mixed_p95 > 0.2,
        "canaries p95 {canary_p95} s, with the sweep's probes {mixed_p95} s: the test needs them on either side of the threshold"
    );
    let target = store.target_by_name(&name).await.unwrap().unwrap();
    let signals = store
        .probe_signals(target.id, now_ms(), 60_000)
        .await
        .unwrap();
    let signal_p95 = signals
        .iter()
        .find(|(s, _)| *s == Signal::ProbeTtftP95)
        .map(|(_, v)| *v);
    assert_eq!(signal_p95, Some(canary_p95));
    // The API and own /metrics read the canaries alone too.
    let listed: serde_json::Value = reqwest::get(format!("{base}/api/v1/targets"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let api_p95 = listed["targets"]
        .as_array()
        .and_then(|targets| targets.iter().find(|t| t["name"] == name.as_str()))
        .and_then(|t| t["signals"]["probe_ttft_p95"]["value"].as_f64());
    assert!(
        api_p95.is_some_and(|p95| (p95 - canary_p95).abs() < 1e-9),
        "/api/v1/targets says probe_ttft_p95 {api_p95:?}, the canaries {canary_p95}"
    );
    let own_metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let target_label = format!("target=\"{name}\"");
    let counted: f64 = own_metrics
        .lines()
        .filter(|l| {
            l.starts_with("llmwatch_probe_ttft_seconds_count{") && l.contains(&target_label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        counted,
        ttfts(&canaries).len() as f64,
        "own /metrics' canary TTFT histogram counts the canaries alone"
    );
    assert!(
        store
            .alert_events(Some("canary-ttft"), None, None, 100)
            .await
            .unwrap()
            .is_empty(),
        "the canary alert fired from sweep traffic"
    );

    // The target page shades the sweep on its charts, linked to it.
    let page = reqwest::get(format!("{base}/targets/{name}?range=15m"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let href = format!("href=\"/sweeps/{sweep_id}\"");
    assert!(
        page.contains(&format!("data-sweep-band=\"/sweeps/{sweep_id}\"")),
        "no sweep list on the page"
    );
    let shaded = page.matches(&format!("<a class=\"band\" {href}")).count();
    assert!(shaded >= 4, "{shaded} charts shade the sweep");
    test.daemon.shutdown().await;
}
