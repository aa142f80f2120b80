//! `llmwatch bench` and `llmwatch sweep` end to end: the real binary
//! against a simulated engine on loopback, printed table and JSON checked
//! for content.
#![allow(clippy::disallowed_methods)] // tests and benches read their own knobs and the wall clock

use llmwatch::cli::sim::{self, SimArgs};
use llmwatch_sim::Sim;

use crate::common::llmwatch;

/// A balanced simulated engine serving `model`, and its base URL.
async fn sim(model: &str) -> (Sim, String) {
    let (sim, engine, _) = sim::start(&SimArgs::loopback("balanced", model, 8.0))
        .await
        .unwrap();
    (sim, format!("http://{engine}"))
}

/// Runs the binary's bench against a simulated engine with `extra` flags;
/// asserts the table and JSON, returns the JSON and the printed table.
async fn bench_against_the_sim(extra: &[&str]) -> (serde_json::Value, String) {
    let (_sim, url) = sim("bench-model").await;
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("run.json");
    let json_arg = json_path.display().to_string();
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = llmwatch(&args).await;
    assert!(ok, "{stdout}\n{stderr}");
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
    (result, stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_prints_the_table_and_writes_json() {
    let (result, stdout) = bench_against_the_sim(&[]).await;
    // `--spin auto`: the measuring thread spins only while streams are
    // active below 4 cores.
    let measure = match llmwatch_probe::Spin::Auto.mode() {
        llmwatch_probe::SpinMode::On => "spin_busy",
        llmwatch_probe::SpinMode::Adaptive => "adaptive_busy",
        llmwatch_probe::SpinMode::Off => "measuring_thread",
    };
    assert_eq!(result["self_check"]["cpu_measure"], measure);
    let cores = result["self_check"]["cpu_cores"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&cores), "one thread: {cores}");
    assert!(stdout.contains("(measuring thread"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_spin_busy_polls_and_says_so() {
    let (result, stdout) = bench_against_the_sim(&["--spin", "on"]).await;
    assert_eq!(result["self_check"]["cpu_measure"], "spin_busy");
    let busy = result["self_check"]["cpu_cores"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&busy), "{busy}");
    assert!(stdout.contains("busy-polling"), "{stdout}");
}

/// Issue 16: two measuring workers share the run; every record streams to
/// `--records` (one JSON line each) and the `--json` document still holds
/// them all (in the order the requests ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_two_workers_streams_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let arg = records.display().to_string();
    let (result, stdout) = bench_against_the_sim(&["--workers", "2", "--records", &arg]).await;
    assert_eq!(
        result["self_check"]["workers"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(stdout.contains("Measuring workers:"), "{stdout}");
    let text = std::fs::read_to_string(&records).unwrap();
    let mut seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    seqs.sort_unstable();
    // 2 warm-ups, then 24 measured requests, each written once.
    assert_eq!(seqs, (2..26).collect::<Vec<u64>>());
    let in_json: Vec<u64> = result["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(in_json.len(), 24);
}

/// One `bench` run against `url`: its JSON result and stderr.
async fn bench_run(url: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("run.json");
    let json_arg = json_path.display().to_string();
    let mut args = vec![
        "bench",
        "--url",
        url,
        "--api",
        "completions",
        "--shape",
        "512x8",
        "--concurrency",
        "1",
        "--requests",
        "10",
        "--json",
        &json_arg,
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = llmwatch(&args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("Cached input tokens:"), "{stdout}");
    let result = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    (result, stderr)
}

/// Issue 11: a rerun with identical default flags (same default seed)
/// must not hit the prefix cache the first run filled; `--reuse-prompts`
/// repeats the prompts on purpose, hits, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reruns_send_new_prompts_unless_asked_to_reuse_them() {
    let (_sim, url) = sim("cache-model").await;
    reruns_miss_the_cache_unless_asked(&url).await;
}

/// The same against a server that counts tokens with a real byte-level
/// BPE (the 4 096-token tokenizer of the model `shared/peers` serves with
/// vLLM), whose prefix cache keys on those tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reruns_on_a_real_bpe_send_new_prompts_unless_asked_to_reuse_them() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/tokenizers/tiny-bpe-4096.json"
    );
    let mut config =
        llmwatch_sim::SimConfig::new(llmwatch_sim::Profile::named("balanced").unwrap());
    config.model = "bpe-model".to_string();
    config.time_scale = 8.0;
    config.tokenizer = std::sync::Arc::new(
        llmwatch_sim::HfTokenizer::from_file(std::path::Path::new(path))
            .unwrap_or_else(|err| panic!("{err}")),
    );
    let sim = Sim::start(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(llmwatch_sim::serve(listener, sim.router()));
    reruns_miss_the_cache_unless_asked(&url).await;
}

/// Two default runs: the second hits nothing (new salts); two runs with
/// `--reuse-prompts`: the second hits, and the run says so.
async fn reruns_miss_the_cache_unless_asked(url: &str) {
    let (first, _) = bench_run(url, &[]).await;
    // Every prompt exactly the asked 512 tokens.
    assert_eq!(first["input_tokens_per_request"]["min"], 512.0, "{first}");
    assert_eq!(first["input_tokens_per_request"]["max"], 512.0, "{first}");
    assert_eq!(first["successful"], 10);
    assert!(first["total_input_tokens"].as_u64().unwrap() >= 5000);
    let (second, stderr) = bench_run(url, &[]).await;
    assert_eq!(second["successful"], 10);
    assert_eq!(second["total_cached_tokens"], 0, "rerun hit the cache");
    assert_eq!(
        second["server_prefix_cache_hit_ratio"], 0.0,
        "the server's own counters agree"
    );
    assert!(second["cache_contaminated"].is_null(), "{second}");
    assert!(!stderr.contains("--reuse-prompts"), "{stderr}");

    let (_, _) = bench_run(url, &["--reuse-prompts"]).await;
    let (reused, stderr) = bench_run(url, &["--reuse-prompts"]).await;
    let cached = reused["total_cached_tokens"].as_u64().unwrap();
    assert!(cached >= 10 * 256, "reused prompts should hit: {cached}");
    assert!(stderr.contains("--reuse-prompts"), "{stderr}");
}

/// Issue 11: against a server that reports no cached tokens per request
/// (vLLM's default, without `--enable-prompt-tokens-details`) but whose
/// prefix-cache counters show random prompts hitting the cache, the run
/// says the per-request figure is missing, shows the counters' hit ratio
/// and labels the run cache-contaminated, in the table and the JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_judged_by_the_servers_cache_counters_is_labelled() {
    let mut config =
        llmwatch_sim::SimConfig::new(llmwatch_sim::Profile::named("balanced").unwrap());
    config.model = "counters-model".to_string();
    config.time_scale = 8.0;
    config.prompt_tokens_details = false;
    config.report_all_cached = true;
    let sim = Sim::start(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(llmwatch_sim::serve(listener, sim.router()));

    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("run.json");
    let (ok, stdout, stderr) = llmwatch(&[
        "bench",
        "--url",
        &url,
        "--shape",
        "256x8",
        "--concurrency",
        "2",
        "--requests",
        "10",
        "--json",
        &json_path.display().to_string(),
    ])
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("not reported by the server"), "{stdout}");
    assert!(
        stdout.contains("Prefix-cache hit ratio (server):         1.000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Cache hygiene:") && stdout.contains("CONTAMINATED"),
        "{stdout}"
    );
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(result["cached_tokens_unreported"], 10);
    assert_eq!(result["server_prefix_cache_hit_ratio"], 1.0);
    let why = result["cache_contaminated"].as_str().unwrap_or_default();
    assert!(
        why.contains("server's counters") && why.contains("0.00 intended"),
        "{why}"
    );
}

/// Issue 11: a shape past the model's context is refused before any
/// request, naming the limit and where it was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_refuses_a_shape_past_the_context_before_sending() {
    let (sim, url) = sim("small-model").await;
    // The refusal names the pre-flight check, which runs before the load.
    let (ok, stdout, stderr) = llmwatch(&[
        "bench",
        "--url",
        &url,
        "--shape",
        "1000000x8",
        "--requests",
        "2",
    ])
    .await;
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("1000008 tokens")
            && stderr.contains("max_model_len")
            && stderr.contains("no request was sent"),
        "{stderr}"
    );
    drop(sim);
}

#[tokio::test]
async fn bench_refuses_an_unknown_spin_mode() {
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        "http://127.0.0.1:9",
        "--spin",
        "sometimes",
    ])
    .await;
    assert!(!ok);
    assert!(
        stderr.contains("--spin") && stderr.contains("expected auto, on or off"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bench_against_nothing_fails_with_a_clear_message() {
    let (ok, _, stderr) =
        llmwatch(&["bench", "--url", "http://127.0.0.1:9", "--requests", "1"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("discovery failed") && stderr.contains("127.0.0.1:9"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_cli_takes_the_shared_workload_flags() {
    let (_sim, url) = sim("sweep-model").await;
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("sweep.json");
    let json_arg = json_path.display().to_string();
    let (ok, stdout, stderr) = llmwatch(&[
        "sweep",
        "--url",
        &url,
        "--api",
        "completions",
        "--shape",
        "64x8",
        "--prompt",
        "shared-prefix:0.5",
        "--concurrency",
        "1,2",
        "--requests-per-step",
        "4",
        "--min-step-duration",
        "200ms",
        "--scrape-interval",
        "100ms",
        "--seed",
        "7",
        "--spin",
        "on",
        "--slo-e2e-p95",
        "30s",
        "--no-store",
        "--json",
        &json_arg,
    ])
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let settings = &report["settings"];
    assert_eq!(settings["api"], "completions", "{settings}");
    assert_eq!(settings["shape"], "64x8");
    assert_eq!(settings["seed"], 7);
    assert_eq!(settings["spin"], "on");
    assert_eq!(settings["objectives"]["e2e_p95_s"], 30.0);
    assert!(stdout.contains("p95 e2e ≤ 30"), "{stdout}");
    // Each step's line gives its input tokens per request and its cache
    // hits, as `bench` does: exact 64-token prompts, the shared prefix hit.
    assert!(
        stdout.contains("in tok min/med/max") && stdout.contains("cached"),
        "{stdout}"
    );
    let step_lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("c="))
        .collect();
    let json_steps = report["steps"].as_array().unwrap();
    assert_eq!(step_lines.len(), json_steps.len(), "{stdout}");
    for (line, step) in step_lines.iter().zip(json_steps) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let at = cells
            .iter()
            .position(|c| *c == "64/64/64")
            .unwrap_or_else(|| panic!("{line}"));
        let run = &step["run"];
        let cached = run["total_cached_tokens"].as_u64().unwrap();
        let input = run["total_input_tokens"].as_u64().unwrap();
        assert!(cached > 0, "{line}");
        assert_eq!(cells[at + 1], cached.to_string(), "{line}");
        assert_eq!(
            cells[at + 2],
            format!("{:.2}", cached as f64 / input as f64),
            "{line}"
        );
    }
    assert_eq!(report["model"], "sweep-model");
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{report}");
    for step in steps {
        assert_eq!(
            step["run"]["self_check"]["cpu_measure"], "spin_busy",
            "{step}"
        );
    }
}

/// Issue 11: `llmwatch bench` with default flags against a llama-server
/// (the simulator's `llamacpp` flavor, which closes the connection after
/// every stream and counts raw text in `/tokenize`): no request lost and
/// every prompt exactly the asked length, chat (template from
/// `/apply-template`) and completions alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_against_llama_server_is_exact_and_loses_no_request() {
    let args = SimArgs {
        flavor: "llamacpp".to_string(),
        ..SimArgs::loopback("balanced", "tiny-llama", 8.0)
    };
    let (_sim, engine, _) = sim::start(&args).await.unwrap();
    let url = format!("http://{engine}");
    let dir = tempfile::tempdir().unwrap();
    for api in ["chat", "completions"] {
        let json_path = dir.path().join(format!("{api}.json"));
        let (ok, stdout, stderr) = llmwatch(&[
            "bench",
            "--url",
            &url,
            "--api",
            api,
            "--shape",
            "128x8",
            "--concurrency",
            "4",
            "--requests",
            "100",
            "--json",
            &json_path.display().to_string(),
        ])
        .await;
        assert!(ok, "{api}: {stdout}\n{stderr}");
        assert!(!stderr.contains("not exact"), "{api}: {stderr}");
        let result: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
        assert_eq!(result["successful"], 100, "{api}: {stdout}");
        assert_eq!(result["failed"], 0, "{api}: {stdout}");
        assert_eq!(result["total_output_tokens"], 800, "{api}");
        let inputs = &result["input_tokens_per_request"];
        assert_eq!(
            (inputs["min"].as_f64(), inputs["max"].as_f64()),
            (Some(128.0), Some(128.0)),
            "{api}: {inputs}"
        );
    }
}

/// Issue 11: a shape past llama-server's context per slot, which only its
/// `/props` states, is refused before any request, naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shape_past_llama_servers_slot_context_is_refused_before_any_request() {
    let args = SimArgs {
        flavor: "llamacpp".to_string(),
        ..SimArgs::loopback("balanced", "tiny-llama", 8.0)
    };
    let (sim, engine, _) = sim::start(&args).await.unwrap();
    let context = sim.config().profile.max_model_len;
    let shape = format!("{}x64", context - 32);
    let (ok, stdout, stderr) = llmwatch(&[
        "bench",
        "--url",
        &format!("http://{engine}"),
        "--shape",
        &shape,
        "--requests",
        "4",
    ])
    .await;
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(&format!("needs {} tokens of context", context + 32))
            && stderr.contains(&format!("has {context} (n_ctx per slot in"))
            && stderr.contains("no request was sent"),
        "{stderr}"
    );
    assert_eq!(sim.snapshot().prompt_tokens, 0);
}

/// A request as a schedule has it: number, scheduled instant (ns after
/// the start), prompt length, prompt tokens the server counted.
type ScheduledRequest = (Option<u64>, Option<u64>, usize, Option<u64>);

/// Issue 38, part 4: three processes of the real binary each send their
/// part (`--part I/3`) of one open-loop schedule anchored at the same
/// `--start-at`; `bench merge` makes one result of them. It holds the very
/// requests one run of the schedule sends — same numbers, prompts and
/// scheduled instants (to the nanosecond), counts exact — and its
/// statistics are those of one accumulator fed every part's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_parts_merge_into_the_single_runs_schedule() {
    // Two servers: the single run and the parts send the same prompts at
    // the same instants, and must not warm each other's prefix cache.
    let ((_sim_parts, parts_url), (_sim_one, one_url)) =
        tokio::join!(sim("parts-model"), sim("parts-model"));
    let dir = tempfile::tempdir().unwrap();
    // Ahead enough for four processes to start and calibrate on a loaded
    // 2-core machine (they refuse a start time that has passed).
    let start_at = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    let start_at = humantime::format_rfc3339_nanos(start_at).to_string();
    let run = |url: &str, part: Option<u32>| {
        let json = dir.path().join(match part {
            Some(i) => format!("part{i}.json"),
            None => "single.json".to_string(),
        });
        let mut args: Vec<String> = [
            "bench",
            "--url",
            url,
            "--api",
            "completions",
            "--shape",
            "64x8",
            "--rate",
            "60",
            "--concurrency",
            "6",
            "--requests",
            "30",
            "--warmup",
            "3",
            "--seed",
            "38",
            "--workers",
            "1",
            "--start-at",
            &start_at,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(["--json".to_string(), json.display().to_string()]);
        if let Some(i) = part {
            args.extend(["--part".to_string(), format!("{i}/3")]);
        }
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (ok, stdout, stderr) = llmwatch(&args).await;
            assert!(ok, "{stdout}\n{stderr}");
            json
        }
    };
    let (single, p0, p1, p2) = tokio::join!(
        run(&one_url, None),
        run(&parts_url, Some(0)),
        run(&parts_url, Some(1)),
        run(&parts_url, Some(2)),
    );
    let read = |path: &std::path::Path| -> llmwatch_probe::RunResult {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let single = read(&single);
    let parts: Vec<_> = [&p0, &p1, &p2].iter().map(|p| read(p)).collect();
    for (i, part) in parts.iter().enumerate() {
        assert_eq!(part.part_of.map(|o| o.part.index), Some(i as u32));
        assert!(
            part.records.iter().all(|r| r.seq.unwrap() % 3 == i as u64),
            "part {i} sent another part's request"
        );
        // Each part keeps its share of the in-flight cap (6 / 3).
        assert!(matches!(
            part.load,
            llmwatch_probe::Load::Rate {
                max_concurrency: Some(2),
                ..
            }
        ));
    }

    let merged_path = dir.path().join("merged.json");
    let mut args = vec!["bench".to_string(), "merge".to_string()];
    args.extend([&p2, &p0, &p1].iter().map(|p| p.display().to_string()));
    args.extend(["--json".to_string(), merged_path.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = llmwatch(&args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Successful requests:                     30"),
        "{stdout}"
    );
    let merged = read(&merged_path);

    // The same schedule: request numbers, scheduled instants, prompts.
    let schedule = |r: &llmwatch_probe::RunResult| -> Vec<ScheduledRequest> {
        r.records
            .iter()
            .map(|x| {
                let input = x.usage.as_ref().and_then(|u| u.prompt_tokens);
                (x.seq, x.scheduled_ns, x.request.prompt_chars, input)
            })
            .collect()
    };
    assert_eq!(merged.records.len(), 30);
    // (A streamed run writes its records in the order they ended.)
    let mut single_schedule = schedule(&single);
    single_schedule.sort_by_key(|r| r.0);
    assert_eq!(schedule(&merged), single_schedule);
    assert_eq!(merged.records[0].seq, Some(3), "warm-ups stay out");
    assert!(merged.records.iter().all(|r| r.scheduled_ns.is_some()));
    // Counts exact.
    assert_eq!(merged.requests, single.requests);
    assert_eq!(merged.successful, single.successful);
    assert_eq!(merged.warmup_requests, 3);
    assert_eq!(merged.total_input_tokens, single.total_input_tokens);
    assert_eq!(merged.total_output_tokens, single.total_output_tokens);
    assert_eq!(
        merged.load,
        llmwatch_probe::Load::Rate {
            per_second: 60.0,
            burstiness: 1.0,
            max_concurrency: Some(6)
        }
    );
    // The merged statistics are one accumulator's over every record
    // (exact below 2^19 samples per metric).
    let all: Vec<_> = parts.iter().flat_map(|p| p.records.clone()).collect();
    let config = llmwatch_probe::RunConfig {
        load: merged.load,
        ..llmwatch_probe::RunConfig::closed(6, 30)
    };
    let one = llmwatch_probe::RunResult::from_records(
        &config,
        3,
        all,
        std::time::Duration::from_secs_f64(merged.duration_s),
        &llmwatch_probe::Monitored::default(),
    );
    for (name, a, b) in [
        ("ttft", &merged.ttft_ms, &one.ttft_ms),
        ("itl", &merged.itl_ms, &one.itl_ms),
        ("e2e", &merged.e2e_ms, &one.e2e_ms),
        (
            "ttft from scheduled",
            &merged.ttft_from_scheduled_ms,
            &one.ttft_from_scheduled_ms,
        ),
    ] {
        assert!(
            a.exact && a.n == b.n && a.missing == b.missing,
            "{name}: {a:?} {b:?}"
        );
        // Equal but for the last bit serde_json's float parsing may lose.
        let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(1.0),
            (x, y) => x == y,
        };
        for (x, y) in [
            (a.mean, b.mean),
            (a.p50, b.p50),
            (a.p95, b.p95),
            (a.p99, b.p99),
            (a.max, b.max),
        ] {
            assert!(close(x, y), "{name}: {a:?} {b:?}");
        }
    }

    // A missing part is refused, naming it.
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "merge",
        &p0.display().to_string(),
        &p2.display().to_string(),
    ])
    .await;
    assert!(!ok);
    assert!(stderr.contains("parts [1] of 3 are missing"), "{stderr}");
}

/// `--part` needs a shared start and a result file, checked before any
/// request; a start time that has passed (after calibrating) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_parts_refuse_an_incomplete_or_late_schedule() {
    let unreachable = "http://127.0.0.1:9";
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        unreachable,
        "--model",
        "m",
        "--part",
        "0/2",
    ])
    .await;
    assert!(
        !ok && stderr.contains("--part needs --start-at"),
        "{stderr}"
    );
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        unreachable,
        "--model",
        "m",
        "--part",
        "0/2",
        "--start-at",
        "2030-01-01T00:00:00Z",
    ])
    .await;
    assert!(!ok && stderr.contains("--part needs --json"), "{stderr}");
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        unreachable,
        "--model",
        "m",
        "--part",
        "0/4",
        "--concurrency",
        "3",
        "--start-at",
        "2030-01-01T00:00:00Z",
        "--json",
        "/tmp/never-written.json",
    ])
    .await;
    assert!(
        !ok && stderr.contains("at least the number of parts"),
        "{stderr}"
    );
    let (_sim, url) = sim("late-model").await;
    let (ok, _, stderr) = llmwatch(&[
        "bench",
        "--url",
        &url,
        "--shape",
        "16x2",
        "--requests",
        "2",
        "--start-at",
        "1",
    ])
    .await;
    assert!(!ok && stderr.contains("that time passed"), "{stderr}");
}
