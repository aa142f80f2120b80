//! The `llamacpp` flavor against the real llama-server captures in
//! `fixtures/llamacpp-live/`: event shapes, several tokens per event, the
//! connection closed after a stream that advertised keep-alive, `/tokenize`
//! of raw text only, `/apply-template`, `/props`, errors, and the metrics
//! page through llmwatch's parser and catalog.

use std::collections::BTreeSet;
use std::time::Duration;

use llmwatch_core::catalog::{detect_engine, Engine};
use llmwatch_core::exposition::{parse_lenient, Format};
use llmwatch_sim::{Flavor, Profile};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;

fn llamacpp(max_model_len: usize) -> llmwatch_sim::SimConfig {
    let mut p = Profile::named("balanced").expect("known");
    p.eos_probability = 0.0;
    p.max_model_len = max_model_len;
    let mut cfg = config(p, 50.0);
    cfg.flavor = Flavor::Llamacpp;
    cfg
}

/// A client that opens a connection per request: the server closes each
/// after a stream, and a pooled one would race that (what llmwatch's probe
/// client handles; here the wire is under test, not a client).
fn unpooled() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

fn captured(rel: &str) -> Vec<String> {
    fixture(rel)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// The distinct event shapes of a stream.
fn shapes(events: &[String]) -> BTreeSet<String> {
    events.iter().map(|e| skeleton(e)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_has_the_capture_shapes_and_some_events_carry_two_tokens() {
    let t = spawn(llamacpp(2048)).await;
    let body = json!({"model": "tiny-llama", "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 16, "stream": true, "stream_options": {"include_usage": true}});
    let s = post_stream(
        &unpooled(),
        &format!("{}/v1/chat/completions", t.base),
        &body,
    )
    .await;
    assert_eq!(s.status, 200);
    assert_eq!(s.content_type, "text/event-stream");
    let ours: Vec<String> = s.events.iter().map(|(_, e)| e.clone()).collect();
    let real = captured("llamacpp-live/sse_llamacpp_chat.txt");
    assert_eq!(shapes(&ours), shapes(&real), "ours {ours:#?}");
    // Role first (content null), finish with an empty delta, then usage.
    let events = s.json();
    assert_eq!(
        events[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    let finish = &events[events.len() - 2];
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let usage = &events[events.len() - 1];
    assert_eq!(usage["usage"]["completion_tokens"], 16);
    assert_eq!(usage["timings"]["predicted_n"], 16);
    // 16 tokens in fewer text events: some events carry two.
    let text_events = events.len() - 3;
    assert!(
        (8..16).contains(&text_events),
        "{text_events} text events for 16 tokens"
    );
    assert_eq!(ours.last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_stream_has_the_capture_shapes_with_usage_on_the_last_chunk() {
    let t = spawn(llamacpp(2048)).await;
    // No stream_options: llama-server puts usage and timings on the
    // finish chunk of a completion anyway.
    let body = json!({"model": "tiny-llama", "prompt": "Hello there", "max_tokens": 16,
        "stream": true});
    let s = post_stream(&unpooled(), &format!("{}/v1/completions", t.base), &body).await;
    let ours: Vec<String> = s.events.iter().map(|(_, e)| e.clone()).collect();
    let real = captured("llamacpp-live/sse_llamacpp_completions.txt");
    assert_eq!(shapes(&ours), shapes(&real), "ours {ours:#?}");
    let events = s.json();
    let last = &events[events.len() - 1];
    assert_eq!(last["choices"][0]["text"], "");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["usage"]["completion_tokens"], 16);
    assert!(last["id"].as_str().expect("id").starts_with("chatcmpl-"));
}

/// Sends one streaming request on a raw connection and reads until the
/// server closes it; the whole response as text.
async fn one_stream_on_raw_tcp(base: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body =
        json!({"model": "tiny-llama", "prompt": "hi", "max_tokens": 4, "stream": true}).to_string();
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: keep-alive\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    // read_to_end returns only at EOF: the server closed the connection.
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut response))
        .await
        .expect("the server closes the connection after the stream")
        .expect("read");
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_closes_after_a_stream_that_advertised_keep_alive() {
    let t = spawn(llamacpp(2048)).await;
    let response = one_stream_on_raw_tcp(&t.base).await;
    let head = response.split("\r\n\r\n").next().unwrap_or_default();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("keep-alive: timeout=5, max=100"), "{head}");
    assert!(head.contains("server: llama.cpp"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    assert!(response.ends_with("0\r\n\r\n"), "whole chunked body read");
    assert!(response.contains("data: [DONE]"));
    // A non-streamed answer keeps the connection: a second request on it
    // is answered.
    let addr = t.base.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    for _ in 0..2 {
        let req = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        sock.write_all(req.as_bytes()).await.expect("write");
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut buf))
            .await
            .expect("answered")
            .expect("read");
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.contains(r#"{"status":"ok"}"#), "{text}");
    }
}

async fn post_json(t: &TestSim, path: &str, body: &Value) -> (u16, Value) {
    let resp = unpooled()
        .post(format!("{}{path}", t.base))
        .json(body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json"))
}

async fn get_json(t: &TestSim, path: &str) -> Value {
    serde_json::from_str(&get_text(&unpooled(), &format!("{}{path}", t.base)).await).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_counts_raw_content_only_and_the_template_comes_from_apply_template() {
    let t = spawn(llamacpp(2048)).await;
    let text = prompt_tokens(50, 3);
    // vLLM-shaped bodies get an empty list, as from the real server.
    let (status, vllm_shaped) = post_json(
        &t,
        "/tokenize",
        &json!({"model": "tiny-llama", "prompt": text}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(vllm_shaped, json!({"tokens": []}));
    let (_, messages) = post_json(
        &t,
        "/tokenize",
        &json!({"messages": [{"role": "user", "content": text}]}),
    )
    .await;
    assert_eq!(messages, json!({"tokens": []}));
    // `content` counts; BOS only with add_special.
    let (_, plain) = post_json(&t, "/tokenize", &json!({"content": text})).await;
    let (_, special) = post_json(
        &t,
        "/tokenize",
        &json!({"content": text, "add_special": true}),
    )
    .await;
    let count = |v: &Value| v["tokens"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(count(&special), count(&plain) + 1);

    // Completions: usage equals the count with BOS.
    let body = json!({"model": "tiny-llama", "prompt": text, "max_tokens": 2, "stream": true});
    let s = post_stream(&unpooled(), &format!("{}/v1/completions", t.base), &body).await;
    let events = s.json();
    let usage = &events[events.len() - 1]["usage"];
    assert_eq!(usage["prompt_tokens"], count(&special));

    // Chat: usage equals the count of the rendered template.
    let messages = json!([{"role": "user", "content": text}]);
    let (_, rendered) = post_json(&t, "/apply-template", &json!({ "messages": messages })).await;
    let prompt = rendered["prompt"].as_str().expect("prompt");
    assert!(prompt.contains(&text) && prompt.len() > text.len());
    let (_, templated) = post_json(
        &t,
        "/tokenize",
        &json!({"content": prompt, "add_special": true}),
    )
    .await;
    let body = json!({"model": "tiny-llama", "messages": messages, "max_tokens": 2,
        "stream": true, "stream_options": {"include_usage": true}});
    let s = post_stream(
        &unpooled(),
        &format!("{}/v1/chat/completions", t.base),
        &body,
    )
    .await;
    let events = s.json();
    assert_eq!(
        events[events.len() - 1]["usage"]["prompt_tokens"],
        count(&templated)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_context_per_slot_is_in_props_not_in_models_and_a_longer_prompt_is_refused() {
    let t = spawn(llamacpp(64)).await;
    let props = get_json(&t, "/props").await;
    assert_eq!(props["default_generation_settings"]["n_ctx"], 64);
    assert_eq!(props["total_slots"], 64);
    let models = get_json(&t, "/v1/models").await;
    assert_eq!(models["data"][0]["id"], "tiny-llama");
    assert!(models["data"][0].get("max_model_len").is_none(), "{models}");
    assert_eq!(get_json(&t, "/health").await, json!({"status": "ok"}));

    let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(80, 1), "max_tokens": 4,
        "stream": true});
    let (status, error) = post_json(&t, "/v1/completions", &body).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["type"], "exceed_context_size_error");
    assert_eq!(error["error"]["n_ctx"], 64);
    assert!(error["error"]["message"]
        .as_str()
        .expect("message")
        .contains("exceeds the available context size (64 tokens)"));
    // A prompt that fits but asks for more than the slot holds is cut at
    // the context instead of refused.
    let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(40, 2), "max_tokens": 100,
        "stream": true});
    let s = post_stream(&unpooled(), &format!("{}/v1/completions", t.base), &body).await;
    let events = s.json();
    let last = &events[events.len() - 1];
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["usage"]["completion_tokens"], 64 - 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_page_has_the_capture_names_and_counts_the_traffic() {
    let t = spawn(llamacpp(2048)).await;
    let idle = get_text(&unpooled(), &format!("{}/metrics", t.base)).await;
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(' ').next())
            .map(str::to_string)
            .collect()
    };
    let real = fixture("llamacpp-live/metrics_llamacpp_idle.txt");
    assert_eq!(names(&idle), names(&real));
    assert_eq!(idle, real, "an idle page equals the capture byte for byte");

    for i in 0..3 {
        let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(30, i),
            "max_tokens": 8, "stream": true});
        let _ = post_stream(&unpooled(), &format!("{}/v1/completions", t.base), &body).await;
    }
    let text = get_text(&unpooled(), &format!("{}/metrics", t.base)).await;
    let (page, errors) = parse_lenient(text.as_bytes(), Format::PrometheusText);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(detect_engine(&page), Engine::Llamacpp);
    let value = |name: &str| -> f64 {
        page.families
            .iter()
            .flat_map(|f| f.samples.iter())
            .find(|s| s.name == name)
            .map(|s| s.value)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(value("llamacpp:tokens_predicted_total"), 24.0);
    assert_eq!(value("llamacpp:prompt_tokens_total"), 90.0);
    assert!(value("llamacpp:tokens_predicted_seconds_total") > 0.0);
    assert!(value("llamacpp:prompt_seconds_total") > 0.0);
    assert!(value("llamacpp:n_decode_total") >= 8.0);
    assert!(value("llamacpp:predicted_tokens_seconds") > 0.0);
    assert_eq!(value("llamacpp:requests_processing"), 0.0);
    // Integers as llama-server prints them, not `24.0`.
    assert!(
        text.contains("\nllamacpp:tokens_predicted_total 24\n"),
        "{text}"
    );
}
