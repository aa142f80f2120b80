//! End to end in a real browser: headless Chromium (Debian's `chromium`,
//! installed by `.ci/run`) loads the overview of a running `llmwatch demo`,
//! sees a value change through a live update (SSE → `static/live.js`),
//! opens the target and sweep pages, and saves screenshots (to the build's
//! temp dir; with `LLMWATCH_UPDATE_SCREENSHOTS=1` to `docs/screenshots/`,
//! shown in the README).
//!
//! Chromium is driven over the DevTools protocol (`common::browser`). Set
//! `LLMWATCH_CHROMIUM` to a browser binary to use another one. Without a
//! browser the test fails: a skipped check must not read as a pass.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::browser::{find_chromium, Browser};
use serde_json::{json, Value};

/// `{data-kpi id: text}` of the page, without the page-level ids (`_…`).
const KPI_TEXTS: &str = "JSON.stringify(Object.fromEntries(Array.from(\
    document.querySelectorAll('[data-kpi]')).filter(e => !e.dataset.kpi.startsWith('_'))\
    .map(e => [e.dataset.kpi, e.textContent])))";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_sees_live_updates_and_the_sweep_page() {
    let chromium = find_chromium().expect(
        "no chromium on PATH: install Debian's `chromium` (.ci/run does) or set \
         LLMWATCH_CHROMIUM=/path/to/browser",
    );
    let started = Instant::now();
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let demo = llmwatch::demo::start(listen, None)
        .await
        .expect("demo starts");
    let base = format!("http://{}", demo.daemon.listen_addr);
    let store = demo.daemon.store.clone();

    // Within a minute of starting, the live diagnosis names the KV-starved
    // target's bottleneck.
    let kv_id = store
        .target_by_name("kv-starved")
        .await
        .expect("store reads")
        .expect("kv-starved registered")
        .id;
    let live_deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live = store.live_verdict(kv_id).await.expect("store reads");
        if live
            .as_ref()
            .is_some_and(|l| l.verdict == "kv_cache_capacity")
        {
            eprintln!(
                "live verdict after {:.1} s: {live:?}",
                started.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            Instant::now() < live_deadline,
            "no kv_cache_capacity live verdict on kv-starved within 60 s: {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The demo's sweep runs at start: wait for it to finish (or at least
    // to have measured steps), and for the first probes and scrapes.
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let sweep = store.sweep(1).await.expect("store");
        let steps = store.sweep_steps(1).await.expect("store").len();
        let done = sweep.as_ref().is_some_and(|s| s.ended_ms.is_some());
        if done || (Instant::now() >= deadline && steps >= 2) {
            break;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "the demo sweep measured {steps} steps in 180 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "demo sweep ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The KV-starved target's sweep runs next: it finds a saturation point
    // and names the KV cache (the method working, not only its labels).
    let kv_sweep = wait_for_kv_sweep(&store).await;
    eprintln!(
        "kv-starved sweep {} done after {:.1} s",
        kv_sweep.id,
        started.elapsed().as_secs_f64()
    );
    let verdict: Value =
        serde_json::from_str(kv_sweep.verdict_json.as_deref().expect("a stored verdict"))
            .expect("verdict JSON");
    assert!(
        verdict["saturation"]["load"].is_object(),
        "the kv-starved sweep finds a saturation point: {verdict}"
    );
    assert_eq!(
        verdict["findings"][0]["verdict"],
        llmwatch_core::analysis::Verdict::KvCacheCapacity.name(),
        "the kv-starved sweep names the KV cache first: {verdict}"
    );

    // The passive curve fills in from the demo's background load.
    // The last 15 minutes in 10 s windows (the default week would be read
    // in windows too long for a test's few minutes).
    let from_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
        - 900;
    let passive: Value = reqwest::get(format!(
        "{base}/api/v1/targets/healthy/passive?from={from_s}&window=10s"
    ))
    .await
    .expect("passive curve answers")
    .json()
    .await
    .expect("passive JSON");
    let busy_windows: u64 = passive["points"]
        .as_array()
        .map(|points| points.iter().filter_map(|p| p["windows"].as_u64()).sum())
        .unwrap_or(0);
    assert!(
        busy_windows >= 3,
        "the passive curve has windows of background load: {passive}"
    );

    let mut browser = Browser::launch(&chromium).await;
    // Screenshots go to the build's temp dir; with
    // LLMWATCH_UPDATE_SCREENSHOTS=1 they replace the README's.
    let shots = if std::env::var_os("LLMWATCH_UPDATE_SCREENSHOTS").is_some() {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
    };
    std::fs::create_dir_all(&shots).expect("screenshot dir");

    // The overview, as the server rendered it, then live.
    browser.open(&format!("{base}/")).await;
    let title = browser.eval("document.title").await;
    assert_eq!(title, "Overview · llmwatch");
    let initial: Value =
        serde_json::from_str(browser.eval(KPI_TEXTS).await.as_str().expect("kpi texts"))
            .expect("kpi JSON");
    assert!(
        initial.get("healthy|kv").is_some() && initial.get("kv-starved|kv").is_some(),
        "both demo targets on the overview: {initial}"
    );
    // Each card shows its live verdict.
    let verdicts = browser
        .eval(
            "JSON.stringify([...document.querySelectorAll('.card')].map(c => \
             [c.id, c.querySelector('.live-verdict')?.dataset.verdict]))",
        )
        .await;
    let verdicts = verdicts.as_str().unwrap_or_default().to_string();
    assert!(
        verdicts.contains("[\"target-kv-starved\",\"kv_cache_capacity\"]"),
        "{verdicts}"
    );
    assert!(
        !verdicts.contains("none") && verdicts.contains("target-healthy"),
        "{verdicts}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let changed = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now: Value =
            serde_json::from_str(browser.eval(KPI_TEXTS).await.as_str().expect("kpi texts"))
                .expect("kpi JSON");
        let updates = browser
            .eval("Number(document.body.dataset.liveUpdates || 0)")
            .await;
        let changed: Vec<String> = now
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(id, text)| initial.get(id.as_str()) != Some(*text))
                    .map(|(id, text)| format!("{id}: {} → {text}", initial[id.as_str()]))
                    .collect()
            })
            .unwrap_or_default();
        if updates.as_u64().unwrap_or(0) >= 1 && !changed.is_empty() {
            break changed;
        }
        assert!(
            Instant::now() < deadline,
            "no value changed through live updates in 30 s ({updates} updates)"
        );
    };
    eprintln!("live updates changed: {}", changed.join("; "));
    let marked = browser
        .eval("document.querySelectorAll('[data-changed]').length")
        .await;
    assert!(
        marked.as_u64().unwrap_or(0) >= 1,
        "live.js marks what it changed"
    );
    let status = browser
        .eval("document.getElementById('live-status').textContent")
        .await;
    assert!(
        status.as_str().is_some_and(|s| s.starts_with("live: ")),
        "{status}"
    );
    browser
        .screenshot(1280, false, &shots.join("overview.png"))
        .await;

    // A target page: ten charts over time (the ninth: canary TTFT by
    // phase; the tenth: prompt tokens by source, which the simulator
    // reports) and the passive curve's three, drawn server-side.
    browser
        .open(&format!("{base}/targets/kv-starved?range=15m"))
        .await;
    let charts = browser
        .eval("document.querySelectorAll('figure.chart svg').length")
        .await;
    assert_eq!(charts, 13, "thirteen charts on the target page");
    browser
        .screenshot(1280, false, &shots.join("target.png"))
        .await;

    // The sweep page: verdict, marked charts, the step table.
    browser.open(&format!("{base}/sweeps/1")).await;
    let text = browser.eval("document.body.innerText").await;
    let text = text.as_str().unwrap_or("");
    assert!(text.contains("Sweep 1 of healthy"), "{text}");
    assert!(text.contains("Saturation point") && text.contains("Max sustainable load"));
    assert!(text.contains("Experiment card"));
    let charts = browser
        .eval("document.querySelectorAll('figure.chart svg').length")
        .await;
    assert_eq!(charts, 4, "the method's three charts and TTFT by phase");
    browser
        .screenshot(1280, false, &shots.join("sweep.png"))
        .await;

    // The KV-starved sweep's page says what its stored summary says.
    browser
        .open(&format!("{base}/sweeps/{}", kv_sweep.id))
        .await;
    let text = browser.eval("document.body.innerText").await;
    let text = text.as_str().unwrap_or("");
    let headline = verdict["summary"][0].as_str().expect("a summary line");
    assert!(
        text.contains(&format!("Sweep {} of kv-starved", kv_sweep.id)) && text.contains(headline),
        "{headline:?} on the page:\n{text}"
    );
    browser
        .screenshot(1280, false, &shots.join("sweep-kv-starved.png"))
        .await;

    // On a phone.
    browser.open(&format!("{base}/")).await;
    browser
        .screenshot(390, true, &shots.join("overview-phone.png"))
        .await;

    browser.close().await;
    demo.shutdown().await;
    eprintln!("browser test took {:.1} s", started.elapsed().as_secs_f64());
}

/// The demo's KV-starved sweep, once it has ended (it follows the healthy
/// target's sweep).
async fn wait_for_kv_sweep(store: &llmwatch_store::Store) -> llmwatch_store::SweepRow {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let sweeps = store.sweeps(10).await.expect("store reads");
        if let Some(sweep) = sweeps
            .into_iter()
            .find(|s| s.target_name.as_deref() == Some("kv-starved") && s.ended_ms.is_some())
        {
            return sweep;
        }
        assert!(
            Instant::now() < deadline,
            "the kv-starved demo sweep did not end within 180 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Polls `expression` in the page until it is `true`, or panics naming `what`.
async fn until_true(browser: &mut Browser, what: &str, expression: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while browser.eval(expression).await != json!(true) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_logs_in_and_gets_live_updates_with_the_session_cookie() {
    let chromium = find_chromium().expect(
        "no chromium on PATH: install Debian's `chromium` (.ci/run does) or set \
         LLMWATCH_CHROMIUM=/path/to/browser",
    );
    let (_sim, engine, _) = llmwatch::cli::sim::start(&llmwatch::cli::sim::SimArgs::loopback(
        "balanced",
        "sim-model",
        10.0,
    ))
    .await
    .expect("simulator");
    let test = common::spawn_daemon(&format!(
        "[server]\ntoken = \"browser-token\"\n\
         [[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"250ms\"\n"
    ))
    .await;
    let base = test.base_url();
    let mut browser = Browser::launch(&chromium).await;

    // The overview sends the browser to the login page.
    browser
        .call("Page.navigate", json!({ "url": format!("{base}/") }))
        .await;
    until_true(
        &mut browser,
        "the login page",
        "document.readyState === 'complete' && location.pathname === '/login' \
         && !!document.querySelector('input[name=token]')",
    )
    .await;
    browser
        .eval(
            "document.querySelector('input[name=token]').value = 'browser-token'; \
             document.querySelector('form').submit(); true",
        )
        .await;
    until_true(
        &mut browser,
        "the overview after logging in",
        "document.readyState === 'complete' && location.pathname === '/' \
         && document.querySelectorAll('[data-kpi]').length > 0",
    )
    .await;
    // The session cookie is HttpOnly: scripts cannot read it.
    let cookies = browser.eval("document.cookie").await;
    assert!(
        !cookies.as_str().unwrap_or("").contains("llmwatch_session"),
        "{cookies}"
    );
    // Live updates flow over the cookie-authenticated event stream.
    browser
        .eval(
            "window.__updates = 0; const es = new EventSource('/events'); \
             es.addEventListener('overview', () => window.__updates++); true",
        )
        .await;
    until_true(
        &mut browser,
        "an overview update over /events",
        "window.__updates > 0",
    )
    .await;
    browser.close().await;
    test.daemon.shutdown().await;
}
