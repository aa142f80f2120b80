//! The latency breakdown on a real vLLM 0.32: two `/metrics` pages captured
//! before and after 48 streaming chat requests, and what the client measured
//! for the same requests (`fixtures/vllm-live/SOURCE.md`). The phase means
//! come from the pages' histogram deltas through the same path the daemon
//! takes (parse → detect → normalize → `signals_between`).

use llmwatch_core::analysis::{latency_breakdown, ClientMeans, DominantPart, ServerPhases};
use llmwatch_core::catalog::{detect_engine, normalize, Engine};
use llmwatch_core::exposition::{parse_lenient, Format};
use llmwatch_core::signals::{signals_between, Snapshot};

const LIVE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/vllm-live");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{LIVE}/{name}")).expect("fixture present")
}

/// The server's phase means over the load, from the two pages.
fn server_phases() -> ServerPhases {
    let (before, after) = (
        read("metrics_vllm_load_before.txt"),
        read("metrics_vllm_load_after.txt"),
    );
    let page = |text: &str| {
        let (parsed, _) = parse_lenient(text.as_bytes(), Format::PrometheusText);
        assert_eq!(detect_engine(&parsed), Engine::Vllm);
        normalize(Engine::Vllm, &parsed)
    };
    let (before, after) = (page(&before), page(&after));
    let signals = signals_between(
        Some(Snapshot {
            ts: 0.0,
            samples: &before,
        }),
        Snapshot {
            ts: 60.0,
            samples: &after,
        },
    );
    ServerPhases::from_signals(&signals)
}

fn client_means() -> ClientMeans {
    let json: serde_json::Value =
        serde_json::from_str(&read("load_client.json")).expect("valid JSON");
    assert_eq!(json["requests"], 48);
    ClientMeans {
        ttft_s: json["client_ttft_mean_s"].as_f64(),
        e2e_s: json["client_e2e_mean_s"].as_f64(),
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-12)
}

#[test]
fn phase_means_are_the_histogram_deltas() {
    let phases = server_phases();
    // Δ_sum / Δ_count off the pages (every count 0 before, 48 after).
    assert!(
        close(phases.queue_s, 0.0009817789978114888 / 48.0),
        "{phases:?}"
    );
    assert!(
        close(phases.prefill_s, 2.151988441008143 / 48.0),
        "{phases:?}"
    );
    assert!(
        close(phases.decode_s, 7.602759220993903 / 48.0),
        "{phases:?}"
    );
    assert!(
        close(phases.inference_s, 9.754747662002046 / 48.0),
        "{phases:?}"
    );
    assert!(close(phases.ttft_s, 3.594831943511963 / 48.0), "{phases:?}");
    assert!(close(phases.e2e_s, 11.293193340301514 / 48.0), "{phases:?}");
}

/// The parts, each from its own instrument, sum to what the client measured:
/// queue 0.02 ms + prefill 44.8 ms + 32.1 ms in the server outside the engine
/// core (e2e 235.3 − inference 203.2 − queue) + 9.5 ms between client and
/// server (client TTFT 84.4 − server TTFT 74.9) = 86.4 ms against the
/// client's 84.4 ms. The 2 ms over is the e2e side's overhead also counting
/// the response's tail after the last token, which TTFT does not include.
#[test]
fn real_vllm_breakdown_sums_to_the_client_ttft_within_ten_percent() {
    let b = latency_breakdown(&server_phases(), &client_means(), true).expect("breakdown");
    let t = &b.ttft;
    let parts = t.queue_s
        + t.prefill_s
        + t.server_outside_core_s.expect("e2e, inference, queue")
        + t.network_s.expect("server TTFT");
    assert!(
        (parts - t.client_s).abs() <= 0.10 * t.client_s,
        "parts {parts} s vs client {} s: {b:?}",
        t.client_s
    );
    assert!(t.unexplained_fraction() <= 0.10, "{b:?}");
    // Not zero either: the two server clocks disagree by the tail, and the
    // test would not see a breakdown that subtracted its way to the answer.
    assert!(t.unexplained_s < -0.001, "{b:?}");
    // The engine core's prefill is the largest part, but more than a third
    // of the client's TTFT is outside the engine core.
    assert_eq!(b.dominant, DominantPart::Prefill);
    assert!(t.outside_engine_s / t.client_s > 0.4, "{b:?}");
    let e2e = b.e2e.expect("e2e breakdown");
    assert!(e2e.unexplained_s.abs() <= 0.10 * e2e.client_s, "{e2e:?}");
}

/// Without a load between the pages there is no traffic to split, and an
/// engine without phase histograms says so.
#[test]
fn idle_window_and_engines_without_histograms_give_no_breakdown() {
    let idle = read("metrics_vllm_idle.txt");
    let (parsed, _) = parse_lenient(idle.as_bytes(), Format::PrometheusText);
    let samples = normalize(Engine::Vllm, &parsed);
    let snap = Snapshot {
        ts: 0.0,
        samples: &samples,
    };
    let later = Snapshot { ts: 30.0, ..snap };
    let phases = ServerPhases::from_signals(&signals_between(Some(snap), later));
    assert_eq!(phases, ServerPhases::default());
    let client = client_means();
    assert_eq!(
        latency_breakdown(&phases, &client, true).map(|_| ()),
        Err(llmwatch_core::analysis::NoBreakdown::NoServerTraffic)
    );
    let sglang = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/sglang/metrics_reconstructed_v0.5.txt"
    ))
    .expect("fixture");
    let (parsed, _) = parse_lenient(sglang.as_bytes(), Format::PrometheusText);
    let samples = normalize(Engine::Sglang, &parsed);
    let phases = ServerPhases::from_signals(&signals_between(
        None,
        Snapshot {
            ts: 0.0,
            samples: &samples,
        },
    ));
    // SGLang has a queue histogram (3 requests, 4.57 s) but no phases.
    assert!(close(phases.queue_s, 4.57 / 3.0), "{phases:?}");
    assert_eq!(phases.prefill_s, None);
    assert_eq!(
        latency_breakdown(&phases, &client, false).map(|_| ()),
        Err(llmwatch_core::analysis::NoBreakdown::NoPhaseHistograms)
    );
}
