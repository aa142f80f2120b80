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

/// A `sweep --json` file whose steps are what the analytic model predicts
/// for `truth` at 512x128: the fit must find `truth`'s costs again.
fn synthetic_sweep_json(truth: &llmwatch_sim::Profile, ladder: &[f64]) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = ladder
        .iter()
        .map(|&c| {
            let step = llmwatch_sim::FitStep {
                concurrency: c,
                input_tokens: 512.0,
                output_tokens: 128.0,
                ttft_p50_s: None,
                itl_p50_s: None,
                output_tps: None,
                running_mean: None,
            };
            let p = llmwatch_sim::predict_step(&llmwatch_sim::CostParams::of(truth), truth, &step);
            serde_json::json!({
                "step": {
                    "load": { "concurrency": c },
                    "requests_ok": 100,
                    "error_rate": 0.0,
                    "ttft_s": { "p50": p.ttft_p50_s },
                    "itl_s": { "p50": p.itl_p50_s },
                    "output_token_throughput": p.output_tps,
                    "server": { "requests_running_mean": p.running },
                },
                "run": { "successful": 100, "total_input_tokens": 51200, "total_output_tokens": 12800 },
            })
        })
        .collect();
    serde_json::json!({
        "settings": { "shape": "512x128" },
        "card": { "num_gpu_blocks": "4096", "kv_block_size": "16", "prefix_caching": "true" },
        "steps": steps,
    })
}

#[test]
fn sim_vllm_flags_then_fit_then_predict_a_change() {
    // Flags are checked before anything is served; errors name the flag.
    let (ok, _, stderr) = llmwatch(&[
        "sim",
        "--port",
        "0",
        "--vllm-args",
        "--max-num-seqs 4 --port-ignored 1",
    ]);
    assert!(!ok);
    assert!(stderr.contains("`--port-ignored`"), "{stderr}");
    let (ok, _, stderr) = llmwatch(&["sim", "--port", "0", "--", "--max-num-seqs", "four"]);
    assert!(!ok);
    assert!(
        stderr.contains("`--max-num-seqs`") && stderr.contains("four"),
        "{stderr}"
    );
    let (ok, _, stderr) = llmwatch(&["sim", "--vllm-args=--tensor-parallel-size 2"]);
    assert!(!ok);
    assert!(stderr.contains("--interconnect"), "{stderr}");

    // Fit: a sweep of known costs gives them back, with its error.
    let dir = tempfile::tempdir().expect("temp dir");
    let truth = llmwatch_sim::Profile {
        frontend_per_request_s: 0.002,
        ..llmwatch_sim::Profile::named("balanced").expect("known")
    };
    let sweep = dir.path().join("sweep.json");
    let sweep_json = synthetic_sweep_json(&truth, &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
    std::fs::write(&sweep, sweep_json.to_string()).expect("write sweep");
    let profile = dir.path().join("fitted.json");
    let (ok, stdout, stderr) = llmwatch(&[
        "sim",
        "--fit",
        sweep.to_str().expect("utf-8"),
        "--out",
        profile.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("fit error on"), "{stdout}");
    let fitted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).expect("profile written"))
            .expect("JSON");
    for (field, want) in [
        ("step_base_s", truth.step_base_s),
        ("decode_per_seq_s", truth.decode_per_seq_s),
        ("prefill_per_token_s", truth.prefill_per_token_s),
        ("frontend_per_request_s", truth.frontend_per_request_s),
    ] {
        let got = fitted[field].as_f64().expect(field);
        assert!((got - want).abs() / want < 0.10, "{field}: {got} vs {want}");
    }
    assert!(fitted["fit"]["rms_rel_err"].as_f64().expect("fit error") < 0.01);

    // Predict a change: the fitted twin with --max-num-seqs 2 runs the
    // sweep's own runner; the running plateau is the new cap.
    let json = dir.path().join("prediction.json");
    let (ok, stdout, stderr) = llmwatch(&[
        "predict",
        "--profile-file",
        profile.to_str().expect("utf-8"),
        "--vllm-args",
        "--max-num-seqs 2 --port 9000",
        "--shape",
        "64x16",
        "--concurrency",
        "1,2,4",
        "--time-scale",
        "4",
        "--requests-per-step",
        "6",
        "--requests-per-slot",
        "2",
        "--min-step-duration",
        "400ms",
        "--json",
        json.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{stderr}\n{stdout}");
    for expected in [
        "changed: max_num_seqs 64 → 2",
        "ignored vLLM flags (no effect on scheduling): --port 9000",
        "TTFT p50",
        "c=4",
        "Sweep of http://127.0.0.1:",
        "the fitted model on the sweep it was fitted to",
        "fit error on",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?}:\n{stdout}");
    }
    let predicted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("JSON");
    assert_eq!(predicted["prediction"]["profile"]["max_num_seqs"], 2);
    let steps = predicted["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 3);
    let server = &steps[2]["step"]["server"];
    let running = server["requests_running_max"].as_f64().expect("scraped");
    assert!(running <= 2.0, "running {running} above --max-num-seqs 2");
    let waiting = server["requests_waiting_max"].as_f64().expect("scraped");
    assert!(waiting >= 1.0, "4 clients, 2 slots: {server}");
}
