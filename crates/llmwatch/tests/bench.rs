//! `llmwatch bench` end to end: the real binary against a simulated engine
//! on loopback, printed table and JSON checked for content.

use llmwatch::sim_cmd::{self, SimArgs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_prints_the_table_and_writes_json() {
    let (_sim, engine, _) = sim_cmd::start(&SimArgs::loopback("balanced", "bench-model", 8.0))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("run.json");
    let url = format!("http://{engine}");
    let json_arg = json_path.display().to_string();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args([
            "bench",
            "--url",
            &url,
            "--api",
            "completions",
            "--shape",
            "128x32",
            "--concurrency",
            "4",
            "--requests",
            "24",
            "--warmup",
            "2",
            "--slo-ttft-p95",
            "10s",
            "--json",
            &json_arg,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "Serving Benchmark Result",
        "Successful requests:                     24",
        "Failed requests:                         0",
        "Total generated tokens:                  768",
        "P95 TTFT (ms)",
        "P99 ITL (ms)",
        "From scheduled",
        "Client self-check",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(result["successful"], 24);
    assert_eq!(result["total_output_tokens"], 768);
    assert_eq!(result["records"].as_array().map(Vec::len), Some(24));
    // The model was discovered from /v1/models and recorded per probe.
    assert_eq!(result["records"][0]["request"]["model"], "bench-model");
    // Calibrated against /tokenize: the server counted exactly 128 prompt tokens.
    assert_eq!(result["records"][0]["usage"]["prompt_tokens"], 128);
}

#[tokio::test]
async fn bench_against_nothing_fails_with_a_clear_message() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmwatch"))
        .args(["bench", "--url", "http://127.0.0.1:9", "--requests", "1"])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("discovery failed") && stderr.contains("127.0.0.1:9"),
        "{stderr}"
    );
}
