//! llmwatch's own `/metrics` against the simulator: `promtool check metrics`
//! accepts it (Debian's `prometheus` package), and our own strict parser
//! reads back the probe histograms, scrape health, alert states, the latest
//! sweep verdict, the autoscaling gauges, store size and write latency.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;

use common::{spawn_daemon, wait_for};
use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_core::exposition::{parse, Format, MetricType, Sample};
use llmwatch_engine::sources::scrape::now_ms;
use llmwatch_store::{NewSweep, SweepEnd, SweepStatus};

const PROMTOOL: &str = "/usr/bin/promtool";

fn label<'a>(sample: &'a Sample<'_>, name: &str) -> Option<&'a str> {
    sample
        .labels
        .iter()
        .find(|l| l.name == name)
        .map(|l| l.value.as_ref())
}

/// The first value of `sample_name` whose labels include `labels`.
fn sample_value(text: &str, sample_name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let page = parse(text.as_bytes(), Format::PrometheusText).ok()?;
    page.families
        .iter()
        .flat_map(|f| f.samples.iter())
        .find(|s| s.name == sample_name && labels.iter().all(|(k, v)| label(s, k) == Some(*v)))
        .map(|s| s.value)
}

/// Whether the page shows enough activity for every assertion below.
fn has_settled(text: &str) -> bool {
    let at_least = |name: &str, labels: &[(&str, &str)], min: f64| {
        sample_value(text, name, labels).is_some_and(|v| v >= min)
    };
    at_least(
        "llmwatch_probe_ttft_seconds_count",
        &[("target", "sim")],
        3.0,
    ) && at_least("llmwatch_target_scrapes_total", &[("target", "sim")], 5.0)
        && at_least(
            "llmwatch_alerts",
            &[("alertname", "always"), ("state", "firing")],
            1.0,
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_metrics_pass_promtool_and_parse_back() {
    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    let toml = format!(
        r#"
[server]
alert_interval = "200ms"

[[targets]]
name = "sim"
url = "http://{engine}"
scrape_interval = "250ms"
[targets.probe]
interval = "150ms"
shape = "64x4"

[[alerts]]
name = "always"
signal = "requests_waiting"
op = ">="
threshold = 0
window = "10s"

[[notifiers]]
kind = "webhook"
url = "http://127.0.0.1:9/hook"
timeout = "1s"
"#
    );
    let test = spawn_daemon(&toml).await;
    let running = &test.daemon;
    // A finished sweep of the target with a verdict.
    let sweep = running
        .store
        .create_sweep(&NewSweep {
            target_name: Some("sim".into()),
            target_url: format!("http://{engine}"),
            started_ms: now_ms(),
            settings_json: "{}".into(),
            card_json: "{}".into(),
        })
        .await
        .unwrap();
    running
        .store
        .finish_sweep(
            sweep,
            &SweepEnd {
                ended_ms: now_ms(),
                verdict_json: Some(
                    r#"{"saturation": {"load": {"concurrency": 16}, "request_throughput": 12.5},
                        "sustainable": {"load": {"concurrency": 8}, "request_throughput": 9.0}}"#
                        .into(),
                ),
                stop_reason: None,
                status: SweepStatus::Completed,
            },
        )
        .await
        .unwrap();
    let url = format!("{}/metrics", test.base_url());
    let text = wait_for(
        "three canaries, five scrapes and a firing alert",
        Duration::from_secs(20),
        || async {
            let body = reqwest::get(&url).await.unwrap();
            assert!(body
                .headers()
                .get("content-type")
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("text/plain; version=0.0.4"));
            let text = body.text().await.unwrap();
            has_settled(&text).then_some(text)
        },
    )
    .await;
    test.daemon.shutdown().await;

    // promtool: exit 0 and no lint complaints.
    assert!(
        Path::new(PROMTOOL).exists(),
        "{PROMTOOL} is missing: apt-get install prometheus"
    );
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let complaints = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && complaints.trim().is_empty(),
        "promtool: {complaints}\n{text}"
    );

    // Our own strict parser reads it back.
    let page = parse(text.as_bytes(), Format::PrometheusText).expect("strict parse");
    let family = |name: &str| {
        page.families
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no family {name}"))
    };
    let value = |name: &str, sample_name: &str, labels: &[(&str, &str)]| -> f64 {
        family(name)
            .samples
            .iter()
            .find(|s| s.name == sample_name && labels.iter().all(|(k, v)| label(s, k) == Some(*v)))
            .unwrap_or_else(|| panic!("no {sample_name}{labels:?}"))
            .value
    };
    for name in [
        "llmwatch_probe_ttft_seconds",
        "llmwatch_probe_itl_seconds",
        "llmwatch_probe_e2e_seconds",
    ] {
        assert_eq!(family(name).metric_type, MetricType::Histogram);
        let count = value(
            name,
            &format!("{name}_count"),
            &[("target", "sim"), ("shape", "64x4")],
        );
        let inf = value(
            name,
            &format!("{name}_bucket"),
            &[("target", "sim"), ("le", "+Inf")],
        );
        assert!(count >= 3.0, "{name}: {count}");
        assert_eq!(count, inf);
    }
    // 64x4: three gaps per probe.
    let probes = value(
        "llmwatch_probes_total",
        "llmwatch_probes_total",
        &[("outcome", "ok")],
    );
    let itl_count = value(
        "llmwatch_probe_itl_seconds",
        "llmwatch_probe_itl_seconds_count",
        &[("target", "sim")],
    );
    assert_eq!(itl_count, probes * 3.0);
    assert_eq!(
        value(
            "llmwatch_target_up",
            "llmwatch_target_up",
            &[("target", "sim")]
        ),
        1.0
    );
    assert!(value("llmwatch_scrapes_total", "llmwatch_scrapes_total", &[]) >= 5.0);
    assert!(
        value(
            "llmwatch_target_scrapes_total",
            "llmwatch_target_scrapes_total",
            &[("target", "sim")]
        ) >= 5.0
    );
    assert_eq!(
        value(
            "llmwatch_target_scrape_failures_total",
            "llmwatch_target_scrape_failures_total",
            &[("target", "sim")]
        ),
        0.0
    );
    assert_eq!(
        value(
            "llmwatch_alerts",
            "llmwatch_alerts",
            &[
                ("alertname", "always"),
                ("target", "sim"),
                ("state", "firing")
            ]
        ),
        1.0
    );
    assert_eq!(
        value(
            "llmwatch_saturation_load",
            "llmwatch_saturation_load",
            &[("target", "sim"), ("load", "concurrency")]
        ),
        16.0
    );
    assert_eq!(
        value(
            "llmwatch_saturation_throughput_requests_per_second",
            "llmwatch_saturation_throughput_requests_per_second",
            &[("target", "sim")]
        ),
        12.5
    );
    assert_eq!(
        value(
            "llmwatch_max_sustainable_load",
            "llmwatch_max_sustainable_load",
            &[("target", "sim")]
        ),
        8.0
    );
    // Autoscaling (issue 38): in flight over the sweep's 8, the queue.
    let in_flight = value(
        "llmwatch_autoscale_in_flight_requests",
        "llmwatch_autoscale_in_flight_requests",
        &[("target", "sim")],
    );
    assert_eq!(
        value(
            "llmwatch_autoscale_load_ratio",
            "llmwatch_autoscale_load_ratio",
            &[("target", "sim"), ("source", "sweep")]
        ),
        in_flight / 8.0
    );
    let queue = value(
        "llmwatch_autoscale_queue_requests",
        "llmwatch_autoscale_queue_requests",
        &[("target", "sim")],
    );
    assert!((0.0..=in_flight).contains(&queue), "{queue} of {in_flight}");
    assert!(
        value(
            "llmwatch_store_size_bytes",
            "llmwatch_store_size_bytes",
            &[]
        ) > 0.0
    );
    assert!(
        value(
            "llmwatch_store_write_duration_seconds",
            "llmwatch_store_write_duration_seconds_count",
            &[]
        ) >= 1.0
    );
    // The webhook at port 9 refuses: failures are counted, not hidden.
    assert!(
        value(
            "llmwatch_notifications_total",
            "llmwatch_notifications_total",
            &[("kind", "webhook"), ("outcome", "sent")]
        ) == 0.0
    );
    assert!(
        !text.contains("127.0.0.1:9/hook"),
        "notifier URLs never appear"
    );
}

/// Issue 38: after a real sweep of the simulator, the predicted TTFT is the
/// sweep's p95 TTFT at the current in-flight count, over the 1 s objective,
/// and the page still passes promtool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscaling_gauges_follow_the_last_sweep() {
    use llmwatch_core::analysis::{Load, Objectives};
    use llmwatch_core::autoscale::predict_ttft_p95;
    use llmwatch_engine::runners::sweep::{run_sweep, Ladder, SweepSettings};
    use llmwatch_probe::{Api, SelfCheckLimits, Shape};

    let (_sim, engine, _) = sim::start(&SimArgs::loopback("balanced", "sim-model", 10.0))
        .await
        .unwrap();
    let test = spawn_daemon(&format!(
        "[[targets]]\nname = \"sim\"\nurl = \"http://{engine}\"\nscrape_interval = \"250ms\"\n"
    ))
    .await;
    let mut s = SweepSettings::new(format!("http://{engine}"));
    s.target_name = Some("sim".into());
    s.model = Some("sim-model".into());
    s.api = Api::Completions;
    s.shape = Shape {
        input_tokens: 32,
        output_tokens: 8,
    };
    s.ladder = Ladder::Concurrency(vec![1, 2, 4]);
    s.requests_per_step = 8;
    s.min_step_duration = Duration::from_millis(300);
    s.scrape_interval = Duration::from_millis(50);
    s.objectives = Objectives {
        ttft_p95: Some(1.0),
        ..Objectives::default()
    };
    s.self_check = SelfCheckLimits {
        max_cpu_cores: 64.0,
        max_scheduler_lag_p99_ms: 1000.0,
        max_dispatch_lag_p99_ms: 1000.0,
        ..Default::default()
    };
    let report = run_sweep(s, Some(&test.daemon.store), |_| {})
        .await
        .expect("the sweep runs");
    let sustainable = match report.verdict.sustainable.as_ref().map(|s| s.load) {
        Some(Load::Concurrency(c)) => f64::from(c),
        other => panic!("a sustainable concurrency, got {other:?}"),
    };
    let curve: Vec<(f64, f64)> = report
        .steps
        .iter()
        .filter_map(|s| match s.step.load {
            Load::Concurrency(c) => Some((f64::from(c), s.step.ttft.p95?)),
            Load::RequestRate(_) => None,
        })
        .collect();
    let url = format!("{}/metrics", test.base_url());
    let text = wait_for(
        "the gauges from the sweep",
        Duration::from_secs(20),
        || async {
            let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
            sample_value(
                &text,
                "llmwatch_autoscale_predicted_ttft_seconds",
                &[("source", "sweep")],
            )
            .is_some()
            .then_some(text)
        },
    )
    .await;
    test.daemon.shutdown().await;
    let get = |name: &str| sample_value(&text, name, &[("target", "sim")]).expect(name);
    let in_flight = get("llmwatch_autoscale_in_flight_requests");
    let predicted = get("llmwatch_autoscale_predicted_ttft_seconds");
    let expected = predict_ttft_p95(&curve, in_flight).expect("a curve");
    assert!(
        (predicted - expected).abs() <= 1e-9 * expected,
        "{predicted} vs {expected}"
    );
    // The daemon's objective is the server's default p95 TTFT, 1 s.
    let ratio = get("llmwatch_autoscale_ttft_objective_ratio");
    assert!((ratio - predicted).abs() <= 1e-12, "{ratio} vs {predicted}");
    assert_eq!(
        get("llmwatch_autoscale_load_ratio"),
        in_flight / sustainable
    );
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
