//! Real SSE captures (vLLM 0.32, llama.cpp) replayed by a loopback server
//! with their own headers; the client must read the same tokens and usage
//! the files hold. Expected counts are read from the files here, by a
//! separate, naive parse.

use std::time::Instant;

use llmwatch_probe::{
    Api, ClientConfig, ProbeClient, ProbeRecord, ProbeRequest, ServerTimingSource,
};

use crate::helpers::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");

struct Expected {
    data_events: u32,
    output_events: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: Option<u64>,
    finish_reason: String,
}

fn expected(body: &str) -> Expected {
    let mut e = Expected {
        data_events: 0,
        output_events: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: None,
        finish_reason: String::new(),
    };
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        e.data_events += 1;
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        for c in v["choices"].as_array().unwrap() {
            let text = c["text"]
                .as_str()
                .or(c["delta"]["content"].as_str())
                .unwrap_or("");
            if !text.is_empty() {
                e.output_events += 1;
            }
            if let Some(f) = c["finish_reason"].as_str() {
                e.finish_reason = f.to_string();
            }
        }
        if v["usage"].is_object() {
            e.prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
            e.completion_tokens = v["usage"]["completion_tokens"].as_u64().unwrap();
            e.cached_tokens = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
        }
    }
    e
}

/// Reads `NAME.txt` and `NAME_headers.txt`.
fn load(dir: &str, name: &str) -> (String, Vec<(String, String)>) {
    let body = std::fs::read_to_string(format!("{FIXTURES}/{dir}/{name}.txt")).unwrap();
    let head = std::fs::read_to_string(format!("{FIXTURES}/{dir}/{name}_headers.txt")).unwrap();
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (body, headers)
}

/// Chunks of the body: whole events, or `size`-byte pieces that cut lines
/// (and UTF-8 sequences) anywhere.
fn chunks(body: &str, size: Option<usize>) -> Vec<Ev> {
    let pieces: Vec<Vec<u8>> = match size {
        None => body
            .split_inclusive("\n\n")
            .map(|s| s.as_bytes().to_vec())
            .collect(),
        Some(n) => body.as_bytes().chunks(n).map(<[u8]>::to_vec).collect(),
    };
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, data)| Ev {
            at: ms(i as u64 / 4),
            data,
        })
        .collect()
}

async fn replay(dir: &str, name: &str, api: Api, chunk: Option<usize>) -> ProbeRecord {
    let (body, headers) = load(dir, name);
    let want = expected(&body);
    let events = chunks(&body, chunk);
    let server = spawn_server(Script::Stream {
        header_delay: ms(2),
        events,
        headers,
        abort_at_end: false,
        hang_at_end: false,
        phase_step: std::time::Duration::ZERO,
    });
    let client = ProbeClient::new(ClientConfig::new(server.url())).unwrap();
    let req = ProbeRequest::fixed(api, "tiny-llama", "req-0", 16);
    let rec = client.probe(&req, Instant::now()).await;
    assert!(rec.is_ok(), "{name}: {:?}", rec.error);
    assert_eq!(rec.http_status, Some(200));
    assert_eq!(rec.total_events, want.data_events, "{name}: data events");
    assert_eq!(
        rec.events.len(),
        want.output_events,
        "{name}: output events"
    );
    let usage = rec.usage.clone().unwrap();
    assert_eq!(usage.prompt_tokens, Some(want.prompt_tokens), "{name}");
    assert_eq!(
        usage.completion_tokens,
        Some(want.completion_tokens),
        "{name}"
    );
    assert_eq!(usage.cached_tokens, want.cached_tokens, "{name}");
    assert_eq!(rec.output_tokens, want.completion_tokens);
    assert!(!rec.output_tokens_estimated);
    assert_eq!(
        rec.finish_reason.as_deref(),
        Some(want.finish_reason.as_str())
    );
    assert!(rec.ttft_ns.is_some() && rec.ttft_ns <= Some(rec.e2e_ns));
    assert!(rec.tpot_ns().is_some());
    // The first event of both chat captures is role-only: TTFT is later.
    if api == Api::Chat {
        assert!(rec.ttft_ns.unwrap() >= rec.ttfb_ns.unwrap());
    }
    rec
}

#[test]
fn expected_counts_from_the_files() {
    // What the captures hold (read by the naive parse above), pinned so a
    // change to a fixture is noticed.
    let (b, _) = load("vllm-live", "sse_vllm_chat");
    let e = expected(&b);
    assert_eq!(
        (
            e.data_events,
            e.output_events,
            e.prompt_tokens,
            e.completion_tokens
        ),
        (18, 15, 22, 16)
    );
    let (b, _) = load("llamacpp-live", "sse_llamacpp_completions");
    let e = expected(&b);
    assert_eq!(
        (
            e.data_events,
            e.output_events,
            e.prompt_tokens,
            e.completion_tokens
        ),
        (17, 16, 13, 16)
    );
    assert_eq!(e.cached_tokens, Some(0));
}

#[tokio::test]
async fn vllm_chat() {
    replay("vllm-live", "sse_vllm_chat", Api::Chat, None).await;
    replay("vllm-live", "sse_vllm_chat", Api::Chat, Some(7)).await;
}

#[tokio::test]
async fn vllm_completions() {
    replay("vllm-live", "sse_vllm_completions", Api::Completions, None).await;
    replay(
        "vllm-live",
        "sse_vllm_completions",
        Api::Completions,
        Some(13),
    )
    .await;
}

#[tokio::test]
async fn llamacpp_chat() {
    replay("llamacpp-live", "sse_llamacpp_chat", Api::Chat, None).await;
    replay("llamacpp-live", "sse_llamacpp_chat", Api::Chat, Some(5)).await;
}

#[tokio::test]
async fn llamacpp_completions() {
    replay(
        "llamacpp-live",
        "sse_llamacpp_completions",
        Api::Completions,
        None,
    )
    .await;
    replay(
        "llamacpp-live",
        "sse_llamacpp_completions",
        Api::Completions,
        Some(64),
    )
    .await;
}

/// The server's own timing of the request, as real vLLM 0.32 (with
/// `--enable-per-request-metrics`) and llama-server send it on their final
/// chunk, read into one shape; the numbers are the files' own.
#[tokio::test]
async fn server_timing_from_vllm_metrics_and_llamacpp_timings() {
    for (name, api, queue, prefill, decode) in [
        (
            "sse_vllm_chat_metrics",
            Api::Chat,
            0.101_481_000_456_260_52,
            42.224_450_000_503_566,
            71.441_891_999_711_52,
        ),
        (
            "sse_vllm_completions_metrics",
            Api::Completions,
            0.025_395_000_193_384_476,
            13.385_717_998_971_813,
            49.420_266_999_732_12,
        ),
    ] {
        let rec = replay("vllm-live", name, api, Some(11)).await;
        let t = rec
            .server_timing
            .unwrap_or_else(|| panic!("{name}: no timing"));
        assert_eq!(t.source, ServerTimingSource::VllmMetrics);
        // serde_json parses floats to within an ulp, not always the nearest.
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!(close(t.queue_ms, queue), "{name}: {t:?}");
        assert!(close(t.prefill_ms, prefill), "{name}: {t:?}");
        assert!(close(t.decode_ms, decode), "{name}: {t:?}");
        assert!(
            close(t.total_ms(), queue + prefill + decode),
            "{name}: {t:?}"
        );
        // The client's clock (here a replay, so only its own) minus the
        // server's: defined, whatever its sign on a replay.
        assert!(rec.outside_server_e2e_ms().is_some());
    }
    let rec = replay("llamacpp-live", "sse_llamacpp_chat", Api::Chat, None).await;
    let t = rec.server_timing.unwrap();
    assert_eq!(t.source, ServerTimingSource::LlamacppTimings);
    assert_eq!(
        (t.queue_ms, t.prefill_ms, t.decode_ms, t.cached_tokens),
        (None, Some(1.924), Some(9.009), Some(0))
    );
    let rec = replay("vllm-live", "sse_vllm_chat", Api::Chat, None).await;
    assert_eq!(
        rec.server_timing, None,
        "a server without the flag sends none"
    );
}

/// The reader alone, fed the raw captures one byte at a time.
#[test]
fn sse_reader_byte_by_byte_matches_whole() {
    for (dir, name) in [
        ("vllm-live", "sse_vllm_chat"),
        ("vllm-live", "sse_vllm_completions"),
        ("llamacpp-live", "sse_llamacpp_chat"),
        ("llamacpp-live", "sse_llamacpp_completions"),
    ] {
        let body = std::fs::read(format!("{FIXTURES}/{dir}/{name}.txt")).unwrap();
        let whole = llmwatch_probe::sse::parse_all(&body, 1 << 20);
        let mut r = llmwatch_probe::sse::SseReader::new(1 << 20);
        let mut got = Vec::new();
        for b in &body {
            r.feed(std::slice::from_ref(b));
            while let Some(e) = r.next_event() {
                got.push(e);
            }
        }
        r.finish();
        while let Some(e) = r.next_event() {
            got.push(e);
        }
        assert_eq!(got, whole, "{name}");
        let data_lines = body
            .split(|&b| b == b'\n')
            .filter(|l| l.starts_with(b"data:"))
            .count();
        assert_eq!(whole.len(), data_lines, "{name}");
    }
}
