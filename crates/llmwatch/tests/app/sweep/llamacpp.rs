//! llama-server (the simulator's `llamacpp` flavor): its page reports no KV
//! cache, neither size nor usage, and each of its slots runs one sequence in
//! its own share of the context. Its slots (`total_slots` in `/props`) are
//! then the cap a queue waits behind, and the verdict and the advice must
//! say so in llama-server's words, not vLLM's.

use std::time::Instant;

use llmwatch::cli::sim::{start, SimArgs};
use llmwatch_core::analysis::{Confidence, Verdict};
use llmwatch_engine::runners::sweep::run_sweep;

use super::{settings, shape, show, sim_shape, Target, MODEL, SERIAL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_servers_slots_are_its_scheduler_limit_in_its_own_words() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let ts = 4.0;
    let args = SimArgs {
        flavor: "llamacpp".to_string(),
        vllm_args: vec!["--max-num-seqs".to_string(), "2".to_string()],
        ..SimArgs::loopback("balanced", MODEL, ts)
    };
    let (sim, engine, gpu) = start(&args.with_gpu_page())
        .await
        .expect("simulator starts");
    let t = Target {
        sim,
        url: format!("http://{engine}"),
        gpu_url: format!("http://{}/metrics", gpu.expect("GPU page requested")),
    };
    let sh = shape(64, 32);
    let mut s = settings(&t, sh, &[1, 2, 4, 8]);
    // One and a half times a whole request at the floor: far above the
    // floor's TTFT (whatever the loopback adds), while at concurrency 8 a
    // request waits about three whole requests for one of the two slots.
    let p = t.sim.config().predict(sim_shape(sh));
    let e2e_c1 = p.ttft_c1_s + f64::from(sh.output_tokens) * p.itl_c1_s;
    s.objectives.ttft_p95 = Some(1.5 * e2e_c1);
    let report = run_sweep(s, None, |_| {}).await.expect("sweep runs");
    show("llama-server, 2 slots", &report, started);

    assert_eq!(report.card.engine.as_deref(), Some("llamacpp"));
    assert_eq!(report.card.max_num_seqs, Some(2), "total_slots in /props");
    let findings = &report.verdict.findings;
    let binding = findings.first().expect("a finding");
    assert_eq!(binding.verdict, Verdict::SchedulerLimit, "{findings:#?}");
    assert_eq!(binding.confidence, Confidence::High, "{binding:?}");
    assert!(
        binding.evidence.contains("llama-server's 2 slots"),
        "{binding:?}"
    );
    assert!(
        binding.what_to_try.contains("--parallel") && !binding.what_to_try.contains("max-num-seqs"),
        "{binding:?}"
    );
    assert!(
        !findings
            .iter()
            .any(|f| f.verdict == Verdict::KvCacheCapacity),
        "no cache was reported, and none filled: {findings:#?}"
    );
}
