//! The daemon is safe to leave beside production: it fails closed on a
//! missing token, logs browsers in with a session cookie, refuses
//! cross-site state changes and forms without their CSRF token (the Cancel
//! button's included), bounds and cancels sweeps, stops a sweep that runs
//! past `max_sweep_duration`, marks sweeps a crash cut off, and bounds its
//! own HTTP server (header and request timeouts, in-flight cap, body limit).
//! Each test starts the real daemon on port 0 with a real SQLite file, and
//! binds nothing but loopback.

use crate::common;

use std::time::{Duration, Instant};

use common::app::TestApp;
use common::{spawn_daemon, test_config, wait_for};
use llmwatch::cli::sim::{self, SimArgs};
use llmwatch::daemon;
use llmwatch_store::{Store, SweepStatus};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};

const TOKEN: &str = "s3cret-token-for-tests";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn sim() -> (llmwatch_sim::Sim, std::net::SocketAddr) {
    let (sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    (sim, engine)
}

fn target_toml(engine: std::net::SocketAddr) -> String {
    format!("[[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"250ms\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_token_or_an_open_network_listener_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let unset = "LLMWATCH_TEST_TOKEN_THAT_IS_NEVER_SET";
    let config = test_config(&format!("[server]\ntoken_env = \"{unset}\"\n"), dir.path());
    let err = daemon::start(config).await.err().expect("refused");
    let message = format!("{err:#}");
    assert!(
        message.contains("server.token_env") && message.contains(unset),
        "{message}"
    );

    let empty = llmwatch_config::Config::parse("[server]\ntoken = \"\"\n", "t.toml".as_ref())
        .expect_err("an empty token is refused")
        .to_string();
    assert!(empty.contains("server.token"), "{empty}");

    // All interfaces: the check daemon::start makes refuses it. (Checked
    // without starting: should the refusal break, nothing binds 0.0.0.0.)
    let mut open = test_config("", dir.path());
    open.server.listen = "0.0.0.0:0".parse().unwrap();
    let message = open.access_token().expect_err("refused").to_string();
    assert!(message.contains("server.listen"), "{message}");
    // The daemon itself on an address the check takes for the network but
    // that nothing outside this machine reaches: IPv4 loopback through an
    // IPv6 socket (`IpAddr::is_loopback` is false for it).
    open.server.listen = "[::ffff:127.0.0.1]:0".parse().unwrap();
    let message = format!(
        "{:#}",
        daemon::start(open.clone()).await.err().expect("refused")
    );
    assert!(message.contains("server.listen"), "{message}");
    open.server.allow_unauthenticated = true;
    let running = daemon::start(open).await.expect("allowed on purpose");
    running.shutdown().await;
}

/// A cookie's `name=value` from a response's `Set-Cookie` headers, with the
/// whole header line.
fn set_cookie(response: &reqwest::Response, name: &str) -> Option<(String, String)> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|line| {
            let pair = line.split(';').next().unwrap_or("").to_string();
            (pair, line.to_string())
        })
}

fn hidden_field(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_log_in_with_a_session_cookie_and_forms_need_their_token() {
    let (_sim, engine) = sim().await;
    let test = spawn_daemon(&format!(
        "[server]\ntoken = \"{TOKEN}\"\n{}",
        target_toml(engine)
    ))
    .await;
    let base = test.base_url();
    let http = client();

    // Pages send a browser to the login page; the API answers 401.
    let page = http.get(format!("{base}/sweeps")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()[LOCATION], "/login?next=/sweeps");
    let api = http
        .get(format!("{base}/api/v1/targets"))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    for open in ["/healthz", "/static/style.css", "/login"] {
        let r = http.get(format!("{base}{open}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{open}");
    }

    // The login form: a double-submit CSRF token in a cookie and the form.
    let form = http
        .get(format!("{base}/login?next=/sweeps"))
        .send()
        .await
        .unwrap();
    let (login_cookie, _) = set_cookie(&form, "llmwatch_login").expect("login cookie");
    let html = form.text().await.unwrap();
    let csrf = hidden_field(&html, "csrf");
    let login = |token: &'static str, csrf: String, cookie: String| {
        let http = http.clone();
        let base = base.clone();
        async move {
            http.post(format!("{base}/login"))
                .header(COOKIE, cookie)
                .form(&[("token", token), ("csrf", &csrf), ("next", "/sweeps")])
                .send()
                .await
                .unwrap()
        }
    };
    let wrong = login("not-the-token", csrf.clone(), login_cookie.clone()).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&wrong, "llmwatch_session").is_none());
    let forged = login(TOKEN, "forged".into(), login_cookie.clone()).await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let cross_site = http
        .post(format!("{base}/login"))
        .header(COOKIE, &login_cookie)
        .header("origin", "https://evil.example")
        .form(&[("token", TOKEN), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);

    let ok = login(TOKEN, csrf, login_cookie).await;
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert_eq!(ok.headers()[LOCATION], "/sweeps");
    let (session, line) = set_cookie(&ok, "llmwatch_session").expect("session cookie");
    assert!(
        line.contains("HttpOnly") && line.contains("SameSite=Strict"),
        "{line}"
    );

    // The cookie opens pages, live updates and the API.
    let sweeps = http
        .get(format!("{base}/sweeps"))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    assert_eq!(sweeps.status(), StatusCode::OK);
    let html = sweeps.text().await.unwrap();
    let form_csrf = hidden_field(&html, "csrf");
    let events = http
        .get(format!("{base}/events"))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert!(events.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    drop(events);

    // The sweep form without its CSRF token, or from another site, is refused.
    let start = |csrf: &str, origin: Option<&str>| {
        let mut request = http
            .post(format!("{base}/sweeps"))
            .header(COOKIE, &session)
            .form(&[
                ("target", "sim"),
                ("concurrency", "1"),
                ("shape", "16x2"),
                ("requests_per_step", "2"),
                ("slo_ttft_p95", "1s"),
                ("slo_itl_p95", "50ms"),
                ("csrf", csrf),
            ]);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let missing = start("", None).await.unwrap();
    assert_eq!(missing.status(), StatusCode::FORBIDDEN);
    let evil = start(&form_csrf, Some("https://evil.example"))
        .await
        .unwrap();
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    assert_eq!(test.daemon.store.sweeps(10).await.unwrap().len(), 0);
    let same_site = start(&form_csrf, Some(&base)).await.unwrap();
    assert_eq!(same_site.status(), StatusCode::SEE_OTHER);

    // A cross-site API call with the bearer token is refused too.
    let api_evil = http
        .post(format!("{base}/api/v1/sweeps"))
        .bearer_auth(TOKEN)
        .header("sec-fetch-site", "cross-site")
        .json(&json!({"target": "sim"}))
        .send()
        .await
        .unwrap();
    assert_eq!(api_evil.status(), StatusCode::FORBIDDEN);

    // Logout ends the session.
    let logout_page = http
        .get(format!("{base}/logout"))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    let logout_csrf = hidden_field(&logout_page.text().await.unwrap(), "csrf");
    let out = http
        .post(format!("{base}/logout"))
        .header(COOKIE, &session)
        .form(&[("csrf", logout_csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let after = http
        .get(format!("{base}/sweeps"))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::SEE_OTHER, "session ended");
    test.daemon.shutdown().await;
}

async fn post_sweep(base: &str, body: Value) -> (StatusCode, Value) {
    post_sweep_with(base, None, body).await
}

/// `POST /api/v1/sweeps`, with `token` as the bearer token when given.
async fn post_sweep_with(base: &str, token: Option<&str>, body: Value) -> (StatusCode, Value) {
    let mut request = client().post(format!("{base}/api/v1/sweeps")).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeps_out_of_bounds_are_refused_naming_the_field() {
    let (_sim, engine) = sim().await;
    let test = spawn_daemon(&format!(
        "[server.sweep_limits]\nmax_steps = 4\nmax_rate = 50\nmax_requests_per_step = 500\n\
         max_step_duration = \"1m\"\nmax_sweep_duration = \"3m\"\n{}",
        target_toml(engine)
    ))
    .await;
    let base = test.base_url();
    for (body, field) in [
        (
            json!({"target": "sim", "concurrency": [1, 2, 4, 8, 16]}),
            "concurrency",
        ),
        (json!({"target": "sim", "rate": [10.0, 100.0]}), "rate"),
        (
            json!({"target": "sim", "concurrency": [1], "requests_per_step": 501}),
            "requests_per_step",
        ),
        (
            json!({"target": "sim", "concurrency": [1], "min_step_duration": "2m"}),
            "min_step_duration",
        ),
        (
            json!({"target": "sim", "concurrency": [1, 2, 4, 8], "min_step_duration": "50s"}),
            "max_sweep_duration",
        ),
        (json!({"target": "sim", "concurrency": [128]}), "cap"),
        // The simulator's context is 2048 tokens.
        (
            json!({"target": "sim", "shape": "4000x100", "concurrency": [1]}),
            "shape",
        ),
    ] {
        let (status, answer) = post_sweep(&base, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(field),
            "{body}: {message:?} lacks {field:?}"
        );
    }
    test.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sweep_stops_within_five_seconds_and_keeps_its_steps() {
    // At real speed a 256-token answer streams for ~2 s, so a request seen
    // running at the start of the second step is still running when the
    // cancel lands (at 10x speed a step could drain between the two).
    let (sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 1.0))
        .await
        .unwrap();
    let test = spawn_daemon(&target_toml(engine)).await;
    let base = test.base_url();
    let (status, answer) = post_sweep(
        &base,
        json!({"target": "sim", "shape": "16x256", "concurrency": [1, 4, 8],
               "requests_per_step": 2, "min_step_duration": "1s"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let id = answer["id"].as_i64().expect("sweep id");
    let store = test.daemon.store.clone();
    wait_for(
        "the first measured step",
        Duration::from_secs(30),
        || async { (!store.sweep_steps(id).await.unwrap().is_empty()).then_some(()) },
    )
    .await;
    // Now with requests in flight for the next step, cancel.
    wait_for("requests in flight", Duration::from_secs(10), || async {
        (sim.snapshot().running > 0).then_some(())
    })
    .await;
    let cancel_sent = Instant::now();
    let response = client()
        .post(format!("{base}/api/v1/sweeps/{id}/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let row = wait_for("the sweep to end", Duration::from_secs(5), || async {
        let row = store.sweep(id).await.unwrap()?;
        (row.status != SweepStatus::Running).then_some(row)
    })
    .await;
    assert!(cancel_sent.elapsed() < Duration::from_secs(5));
    assert_eq!(row.status, SweepStatus::Cancelled, "{row:?}");
    assert!(row.stop_reason.unwrap_or_default().contains("cancelled"));
    assert!(
        !store.sweep_steps(id).await.unwrap().is_empty(),
        "steps kept"
    );
    wait_for(
        "the in-flight requests aborted",
        Duration::from_secs(5),
        || async {
            (sim.snapshot().finished_aborted > 0 && sim.snapshot().running == 0).then_some(())
        },
    )
    .await;
    // Cancelling again: not running.
    let again = client()
        .post(format!("{base}/api/v1/sweeps/{id}/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
    test.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_cut_off_by_a_crash_is_marked_interrupted_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("llmwatch.db")).await.unwrap();
    // A minute ago: well inside every retention.
    let started_ms = llmwatch_engine::sources::scrape::now_ms() - 60_000;
    let id = common::insert_running_sweep(&store, "sim", started_ms).await;
    drop(store);
    let app = TestApp::builder().dir(dir).spawn().await;
    let store = &app.daemon.store;
    let row = store.sweep(id).await.unwrap().unwrap();
    assert_eq!(row.status, SweepStatus::Interrupted);
    assert!(row.ended_ms.is_some());
    assert_eq!(store.sweep_steps(id).await.unwrap().len(), 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_neither_block_the_dashboard_nor_stay_connected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let test = spawn_daemon("[server]\nhttp_header_timeout = \"1s\"\n").await;
    let addr = test.daemon.listen_addr;
    // 200 clients that send half a request and then nothing.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(stream);
    }
    let started = Instant::now();
    for path in ["/healthz", "/", "/api/v1/targets"] {
        let response = client()
            .get(format!("{}{path}", test.base_url()))
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    // The server hangs up on them once the header deadline passes.
    for mut stream in slow.into_iter().take(20) {
        let mut buf = [0u8; 256];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the server closes a half-sent request");
        // EOF, a reset, or hyper's 408 before closing.
        if let Ok(n) = read {
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(n == 0 || text.contains("408"), "{text}");
        }
    }
    // A body over the limit is refused before it is read whole.
    let big = "x".repeat(1 << 20);
    let response = client()
        .post(format!("{}/api/v1/sweeps", test.base_url()))
        .header("content-type", "application/json")
        .body(format!("{{\"target\": \"{big}\"}}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    test.daemon.shutdown().await;
}

/// A request past `server.http_max_in_flight` is answered 503 at once (with
/// `Retry-After`), instead of queueing behind the requests that hold the
/// slots; once they end, requests are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_cap_are_answered_503_at_once() {
    use tokio::io::AsyncWriteExt;
    let test = spawn_daemon("[server]\nhttp_max_in_flight = 2\n").await;
    let addr = test.daemon.listen_addr;
    let healthz = format!("{}/healthz", test.base_url());
    // Two queries whose form bodies never finish arriving hold both slots:
    // their handlers are waiting for the body.
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"POST /prometheus/api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                  Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nquery=",
            )
            .await
            .unwrap();
        holders.push(stream);
    }
    let refused = wait_for(
        "a request refused while both slots are held",
        Duration::from_secs(10),
        || async {
            let started = Instant::now();
            let response = client().get(&healthz).send().await.unwrap();
            (response.status() == StatusCode::SERVICE_UNAVAILABLE)
                .then(|| (started.elapsed(), response))
        },
    )
    .await;
    let (took, response) = refused;
    assert!(took < Duration::from_secs(2), "503 took {took:?}");
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert!(response
        .text()
        .await
        .unwrap()
        .contains("too many requests in flight"));
    // Still held: still refused.
    let again = client().get(&healthz).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The holders go away: their slots are freed.
    drop(holders);
    wait_for("the slots freed", Duration::from_secs(10), || async {
        let response = client().get(&healthz).send().await.unwrap();
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    test.daemon.shutdown().await;
}

/// Logs in through the login form as a browser does; returns the session
/// cookie (`name=value`).
async fn log_in(http: &reqwest::Client, base: &str) -> String {
    let form = http.get(format!("{base}/login")).send().await.unwrap();
    let (login_cookie, _) = set_cookie(&form, "llmwatch_login").expect("login cookie");
    let csrf = hidden_field(&form.text().await.unwrap(), "csrf");
    let ok = http
        .post(format!("{base}/login"))
        .header(COOKIE, login_cookie)
        .form(&[("token", TOKEN), ("csrf", &csrf), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    set_cookie(&ok, "llmwatch_session")
        .expect("session cookie")
        .0
}

/// How many steps sweep `id` has stored.
async fn stored_steps(store: &Store, id: i64) -> usize {
    store.sweep_steps(id).await.unwrap().len()
}

/// Waits for sweep `id` to store a step past the `seen` it had: proof it is
/// still running (a cancelled sweep stores no more steps).
async fn wait_for_another_step(store: &Store, id: i64, seen: usize) -> usize {
    let steps = wait_for(
        "the sweep to go on to another step",
        Duration::from_secs(20),
        || async {
            let steps = stored_steps(store, id).await;
            (steps > seen).then_some(steps)
        },
    )
    .await;
    let row = store.sweep(id).await.unwrap().unwrap();
    assert_eq!(row.status, SweepStatus::Running, "{row:?}");
    steps
}

/// The cancel endpoint refuses another site (`Origin`, `Sec-Fetch-Site`)
/// even with the bearer token, and the sweep runs on; the Cancel button's
/// form, with a session cookie, cancels only with its CSRF token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_cancels_are_refused_and_the_cancel_button_needs_its_token() {
    // Real speed and one-second steps: the sweep outlives the checks below.
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 1.0))
        .await
        .unwrap();
    let test = spawn_daemon(&format!(
        "[server]\ntoken = \"{TOKEN}\"\n{}",
        target_toml(engine)
    ))
    .await;
    let base = test.base_url();
    let store = test.daemon.store.clone();
    let http = client();
    let (status, started) = post_sweep_with(
        &base,
        Some(TOKEN),
        json!({"target": "sim", "shape": "16x16", "concurrency": vec![1; 16],
               "requests_per_step": 1, "min_step_duration": "1s"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let id = started["id"].as_i64().expect("sweep id");
    let mut seen = wait_for_another_step(&store, id, 0).await;

    // The API with the token, from another site: refused.
    for (header, value) in [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let refused = http
            .post(format!("{base}/api/v1/sweeps/{id}/cancel"))
            .bearer_auth(TOKEN)
            .header(header, value)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{header}: {value}");
        let answer: Value = refused.json().await.unwrap();
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("cross-site"),
            "{answer}"
        );
    }
    seen = wait_for_another_step(&store, id, seen).await;

    // The Cancel button: its form on the sweep's page, with the session.
    let session = log_in(&http, &base).await;
    let page = http
        .get(format!("{base}/sweeps/{id}"))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    let action = format!("action=\"/sweeps/{id}/cancel\"");
    let form = &html[html
        .find(&action)
        .unwrap_or_else(|| panic!("no Cancel button on {html}"))..];
    let csrf = hidden_field(form, "csrf");
    assert!(!csrf.is_empty());
    let cancel = |csrf: &str, origin: &str| {
        http.post(format!("{base}/sweeps/{id}/cancel"))
            .header(COOKIE, &session)
            .header("origin", origin)
            .form(&[("csrf", csrf)])
            .send()
    };
    for (csrf, origin, why) in [
        ("", base.as_str(), "no CSRF token"),
        ("forged", base.as_str(), "a wrong CSRF token"),
        (csrf.as_str(), "https://evil.example", "another site"),
    ] {
        let refused = cancel(csrf, origin).await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{why}");
    }
    seen = wait_for_another_step(&store, id, seen).await;

    let cancelled_at = Instant::now();
    let ok = cancel(&csrf, &base).await.unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert_eq!(ok.headers()[LOCATION], format!("/sweeps/{id}"));
    let row = wait_for("the sweep to end", Duration::from_secs(5), || async {
        let row = store.sweep(id).await.unwrap()?;
        (row.status != SweepStatus::Running).then_some(row)
    })
    .await;
    assert!(cancelled_at.elapsed() < Duration::from_secs(5));
    assert_eq!(row.status, SweepStatus::Cancelled, "{row:?}");
    assert!(stored_steps(&store, id).await >= seen, "steps kept");
    test.daemon.shutdown().await;
}

/// A sweep whose steps together run past `max_sweep_duration` (each within
/// the request bounds) stops when the limit passes: `stopped`, the reason
/// naming the limit, the steps finished before it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_past_max_sweep_duration_stops_and_keeps_its_steps() {
    // Real speed: a step of 1 warm-up and 4 measured 16x32 requests takes
    // about 1.3 s here, so 16 of them cannot fit in 4 s; the first does.
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 1.0))
        .await
        .unwrap();
    let limit = Duration::from_secs(4);
    let test = spawn_daemon(&format!(
        "[server.sweep_limits]\nmax_sweep_duration = \"4s\"\n{}",
        target_toml(engine)
    ))
    .await;
    let base = test.base_url();
    let (status, answer) = post_sweep(
        &base,
        json!({"target": "sim", "shape": "16x32", "concurrency": vec![1; 16],
               "requests_per_step": 4, "min_step_duration": "100ms"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let id = answer["id"].as_i64().expect("sweep id");
    let store = test.daemon.store.clone();
    let row = wait_for("the sweep to end", Duration::from_secs(20), || async {
        let row = store.sweep(id).await.unwrap()?;
        (row.status != SweepStatus::Running).then_some(row)
    })
    .await;
    assert_eq!(row.status, SweepStatus::Stopped, "{row:?}");
    let reason = row.stop_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("max_sweep_duration") && reason.contains("4s"),
        "{reason}"
    );
    let ran = Duration::from_millis((row.ended_ms.unwrap() - row.started_ms) as u64);
    assert!(
        ran >= limit && ran < limit + Duration::from_secs(2),
        "ran {ran:?} for a {limit:?} limit"
    );
    let steps = stored_steps(&store, id).await;
    assert!((1..16).contains(&steps), "{steps} steps kept");
    // The API says so too.
    let detail: Value = client()
        .get(format!("{base}/api/v1/sweeps/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["status"], "stopped");
    assert_eq!(detail["stop_reason"], reason.as_str());
    assert_eq!(detail["steps"].as_array().map(Vec::len), Some(steps));
    test.daemon.shutdown().await;
}

/// A request whose handler cannot finish (its form body never completes)
/// is answered 408 once `server.http_request_timeout` passes, not held open;
/// the dashboard answers meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_request_timeout_is_answered_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = Duration::from_secs(1);
    let test = spawn_daemon("[server]\nhttp_request_timeout = \"1s\"\n").await;
    let mut stream = tokio::net::TcpStream::connect(test.daemon.listen_addr)
        .await
        .unwrap();
    let sent = Instant::now();
    stream
        .write_all(
            b"POST /prometheus/api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nquery=",
        )
        .await
        .unwrap();
    let healthz = client()
        .get(format!("{}/healthz", test.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), StatusCode::OK);
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    let took = sent.elapsed();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "answered after {took:?}"
    );
    test.daemon.shutdown().await;
}
