//! The binary's one-shot commands, run as a user would: `inspect` on fixture
//! files and over HTTP, `check-config` on good and bad files.

use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");

fn llmwatch(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run llmwatch");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn inspect_names_engine_families_and_signals_of_each_fixture() {
    for (file, engine, signal) in [
        ("vllm-live/metrics_vllm_idle.txt", "vllm", "kv_cache_usage"),
        ("nim/metrics_example.txt", "nim", "requests_running"),
        ("sglang/metrics_example.txt", "sglang", "requests_running"),
        ("tgi/metrics_example.txt", "tgi", "requests_waiting"),
        (
            "llamacpp-live/metrics_llamacpp_idle.txt",
            "llamacpp",
            "requests_running",
        ),
        (
            "tensorrt-llm-triton/metrics_example.txt",
            "trtllm",
            "kv_cache_usage",
        ),
        ("dynamo/metrics_example.txt", "dynamo", "requests_running"),
        (
            "dcgm-exporter/metrics_example.txt",
            "dcgm",
            "gpu_mem_used_ratio",
        ),
    ] {
        let path = format!("{FIXTURES}/{file}");
        let (ok, stdout, stderr) = llmwatch(&["inspect", &path]);
        assert!(ok, "{file}: {stderr}");
        assert!(
            stdout.contains(&format!("engine:   {engine} (detected)")),
            "{file}:\n{stdout}"
        );
        assert!(stdout.contains(signal), "{file} lacks {signal}:\n{stdout}");

        let (ok, json, _) = llmwatch(&["inspect", &path, "--json"]);
        assert!(ok);
        let parsed: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(parsed["engine"], engine, "{file}");
        assert!(parsed["families"].as_array().is_some_and(|f| !f.is_empty()));
        assert!(parsed["signals"]
            .as_array()
            .is_some_and(|s| s.iter().any(|v| v["signal"] == signal)));
    }
}

#[test]
fn inspect_reports_the_vllm_capture_values() {
    let path = format!("{FIXTURES}/vllm-live/metrics_vllm_idle.txt");
    let (_, json, _) = llmwatch(&["inspect", &path, "--json"]);
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["format"], "prometheus-text-0.0.4");
    assert_eq!(parsed["parse_errors"].as_array().map(Vec::len), Some(0));
    let kv = parsed["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == "kv_cache_usage")
        .unwrap();
    assert_eq!(kv["value"], 0.0);
    assert_eq!(kv["unit"], "ratio");
    let family = parsed["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "vllm:time_to_first_token_seconds")
        .expect("TTFT family");
    assert_eq!(family["type"], "histogram");
}

#[test]
fn inspect_of_a_missing_file_or_dead_url_fails_clearly() {
    let (ok, _, stderr) = llmwatch(&["inspect", "/nonexistent/metrics.txt"]);
    assert!(!ok);
    assert!(
        stderr.contains("reading /nonexistent/metrics.txt"),
        "{stderr}"
    );
    let (ok, _, stderr) = llmwatch(&["inspect", "http://127.0.0.1:9/metrics"]);
    assert!(!ok);
    assert!(
        stderr.contains("fetching http://127.0.0.1:9/metrics"),
        "{stderr}"
    );
}

#[test]
fn check_config_accepts_the_example_and_names_bad_fields() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/llmwatch.toml");
    let (ok, stdout, stderr) = llmwatch(&["check-config", example]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("ok (1 targets, 1 GPU sources)"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[targets]]\nname = \"a\"\nurl = \"http://127.0.0.1:8000\"\nscrape_interval = \"fast\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = llmwatch(&["check-config", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("scrape_interval") && stderr.contains("line 4"),
        "{stderr}"
    );
}
