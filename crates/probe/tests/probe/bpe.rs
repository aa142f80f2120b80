//! Exact input length against a real byte-level BPE tokenizer: the
//! simulator counts prompt tokens with the 4 096-token BPE of the tiny
//! model that `shared/peers` serves with a real vLLM 0.32
//! (`fixtures/tokenizers/tiny-bpe-4096.json`, loaded by Hugging Face's
//! `tokenizers`). Its merges split digit runs irregularly, which is what
//! made input lengths wander by ±3 tokens on the real server.

use std::sync::Arc;

use llmwatch_probe::{
    run, Api, Calibrator, ClientConfig, ProbeClient, PromptKind, RunConfig, Shape, Workload,
};
use llmwatch_sim::{serve, HfTokenizer, Profile, Sim, SimConfig, TextTokenizer};

fn bpe() -> HfTokenizer {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/tokenizers/tiny-bpe-4096.json"
    );
    HfTokenizer::from_file(std::path::Path::new(path)).unwrap_or_else(|err| panic!("{err}"))
}

/// The control: on this tokenizer a bare 16-digit run is *not* a fixed
/// number of tokens (so the test below means something).
#[test]
fn the_fixture_bpe_counts_digit_runs_irregularly() {
    let bpe = bpe();
    let counts: std::collections::BTreeSet<usize> = (0..40u64)
        .map(|i| {
            let nonce = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10_000_000_000_000_000;
            bpe.encode(&format!("[{nonce:016}] the prompt"), true).len()
        })
        .collect();
    assert!(counts.len() > 1, "every digit run counted {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_the_exact_input_length_on_a_real_bpe() {
    let mut config = SimConfig::new(Profile::named("balanced").unwrap());
    config.time_scale = 50.0;
    config.tokenizer = Arc::new(bpe());
    let sim = Sim::start(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, sim.router()));
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let calibrator = Calibrator::new();
    let mut failures = Vec::new();
    for api in [Api::Completions, Api::Chat] {
        for input in [128, 512, 2000] {
            let shape = Shape::new(input, 8);
            let workload = Workload::prepare(
                &client,
                &calibrator,
                api,
                "sim-llama",
                shape,
                PromptKind::Random,
                0,
            )
            .await;
            assert!(
                workload.calibration.exact,
                "{api:?} {shape}: {:?}",
                workload.calibration
            );
            let result = run(&client, &RunConfig::closed(16, 200), |i| {
                workload.request(i)
            })
            .await
            .unwrap();
            assert_eq!(result.successful, 200, "{:?}", result.error_examples);
            let exact = result
                .records
                .iter()
                .filter(|r| {
                    r.usage.as_ref().and_then(|u| u.prompt_tokens) == Some(u64::from(input))
                })
                .count();
            let per_request = &result.input_tokens_per_request;
            println!(
                "{api:?} {shape}: {exact}/200 exact; min/median/max {:?}/{:?}/{:?}",
                per_request.min, per_request.p50, per_request.max
            );
            // ≥ 99 % exact (the bar); in fact every one is.
            if exact < 198 {
                failures.push(format!(
                    "{api:?} {shape}: {exact}/200 exact, {per_request:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
