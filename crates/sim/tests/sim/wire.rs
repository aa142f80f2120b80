//! Request/response shapes: streams, usage, errors, auxiliary endpoints.

use std::time::Duration;

use llmwatch_sim::Profile;
use serde_json::{json, Value};

use crate::helpers::*;

fn fast() -> Profile {
    let mut p = Profile::named("balanced").expect("known");
    p.eos_probability = 0.0;
    p
}

/// Splits a captured SSE body into its `data:` payloads.
fn captured_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_matches_the_vllm_capture_event_by_event() {
    let mut cfg = config(fast(), 50.0);
    cfg.prompt_tokens_details = false; // the capture's server had it off
    let t = spawn(cfg).await;
    let body = json!({"model": "tiny-llama", "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 16, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true}});
    let s = post_stream(&t.client, &format!("{}/v1/chat/completions", t.base), &body).await;
    assert_eq!(s.status, 200);
    assert_eq!(s.content_type, "text/event-stream; charset=utf-8");
    let ours: Vec<String> = s.events.iter().map(|(_, e)| e.clone()).collect();
    let real = captured_events(&fixture("vllm-live/sse_vllm_chat.txt"));
    assert_eq!(
        ours.len(),
        real.len(),
        "1 role + 16 tokens + usage + [DONE]"
    );
    for (i, (a, b)) in ours.iter().zip(&real).enumerate() {
        assert_eq!(skeleton(a), skeleton(b), "event {i}: {a}\nvs capture {b}");
    }
    // The first event is role-only with empty content.
    let first: Value = serde_json::from_str(&ours[0]).expect("json");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(first["id"].as_str().expect("id").starts_with("chatcmpl-"));
    let usage: Value = serde_json::from_str(&ours[ours.len() - 2]).expect("json");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 16);
    assert_eq!(ours.last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_stream_matches_the_vllm_capture_event_by_event() {
    let mut cfg = config(fast(), 50.0);
    cfg.prompt_tokens_details = false;
    let t = spawn(cfg).await;
    let body = json!({"model": "tiny-llama", "prompt": "Hello there", "max_tokens": 16,
        "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}});
    let s = post_stream(&t.client, &format!("{}/v1/completions", t.base), &body).await;
    let ours: Vec<String> = s.events.iter().map(|(_, e)| e.clone()).collect();
    let real = captured_events(&fixture("vllm-live/sse_vllm_completions.txt"));
    assert_eq!(ours.len(), real.len());
    for (i, (a, b)) in ours.iter().zip(&real).enumerate() {
        assert_eq!(skeleton(a), skeleton(b), "event {i}: {a}\nvs capture {b}");
    }
    let last: Value = serde_json::from_str(&ours[ours.len() - 3]).expect("json");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(last["id"].as_str().expect("id").starts_with("cmpl-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_match_tokenize_and_report_cached_tokens() {
    let t = spawn(config(fast(), 50.0)).await;
    let prompt = prompt_tokens(100, 1);
    let tok: Value = t
        .client
        .post(format!("{}/tokenize", t.base))
        .json(&json!({"model": "tiny-llama", "prompt": prompt}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(tok["count"], 100);
    assert_eq!(tok["tokens"].as_array().expect("tokens").len(), 100);
    assert_eq!(tok["max_model_len"], 4096);
    assert_eq!(tok["token_strs"], Value::Null);
    let mut cached = Vec::new();
    for _ in 0..2 {
        let body = json!({"model": "tiny-llama", "prompt": prompt, "max_tokens": 5, "stream": true,
            "stream_options": {"include_usage": true}});
        let s = post_stream(&t.client, &format!("{}/v1/completions", t.base), &body).await;
        let ev = s.json();
        let usage = &ev[ev.len() - 1]["usage"];
        assert_eq!(usage["prompt_tokens"], 100);
        assert_eq!(usage["completion_tokens"], 5);
        assert_eq!(usage["total_tokens"], 105);
        cached.push(
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .expect("cached"),
        );
    }
    // Second time round, the 6 full blocks of the prompt are cached.
    assert_eq!(cached, vec![0, 96]);
    // Chat: /tokenize with messages agrees with usage.prompt_tokens.
    let messages = json!([{"role": "user", "content": "How many tokens is this, exactly?"}]);
    let tok: Value = t
        .client
        .post(format!("{}/tokenize", t.base))
        .json(&json!({"model": "tiny-llama", "messages": messages}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let resp: Value = t
        .client
        .post(format!("{}/v1/chat/completions", t.base))
        .json(&json!({"model": "tiny-llama", "messages": messages, "max_tokens": 3}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(resp["usage"]["prompt_tokens"], tok["count"]);
    assert_eq!(resp["object"], "chat.completion");
    assert_eq!(resp["choices"][0]["finish_reason"], "length");
    assert_eq!(resp["choices"][0]["message"]["role"], "assistant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuous_usage_stats_ride_on_every_chunk() {
    let t = spawn(config(fast(), 50.0)).await;
    let body = json!({"model": "tiny-llama", "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 6, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let s = post_stream(&t.client, &format!("{}/v1/chat/completions", t.base), &body).await;
    let ev = s.json();
    assert_eq!(ev.len(), 1 + 6 + 1);
    for (i, e) in ev.iter().enumerate() {
        let completion = e["usage"]["completion_tokens"]
            .as_u64()
            .expect("usage on every chunk");
        // role chunk: 0; token chunks 1..=6; final usage chunk 6.
        assert_eq!(completion, (i as u64).min(6), "event {i}");
        assert_eq!(
            e["usage"]["total_tokens"].as_u64(),
            Some(e["usage"]["prompt_tokens"].as_u64().expect("prompt") + completion)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_tokens_and_pseudo_eos() {
    let mut p = fast();
    p.eos_probability = 0.2;
    let t = spawn(config(p, 50.0)).await;
    let mut lengths = Vec::new();
    for i in 0..6 {
        let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(20, i), "max_tokens": 64,
            "min_tokens": 10, "stream": true, "stream_options": {"include_usage": true}});
        let s = post_stream(&t.client, &format!("{}/v1/completions", t.base), &body).await;
        let ev = s.json();
        let n = ev[ev.len() - 1]["usage"]["completion_tokens"]
            .as_u64()
            .expect("n");
        let finish = ev[ev.len() - 2]["choices"][0]["finish_reason"].clone();
        assert!(n >= 11 || finish == "length", "min_tokens respected: {n}");
        if finish == "stop" {
            assert_eq!(
                ev[ev.len() - 2]["choices"][0]["text"],
                "",
                "EOS has no text"
            );
        }
        lengths.push((n, finish));
        // Deterministic: the same prompt stops at the same place.
        let again = post_stream(&t.client, &format!("{}/v1/completions", t.base), &body).await;
        let ev2 = again.json();
        assert_eq!(
            ev2[ev2.len() - 1]["usage"]["completion_tokens"].as_u64(),
            Some(n)
        );
    }
    assert!(lengths.iter().any(|(_, f)| f == "stop"), "{lengths:?}");
    // ignore_eos always runs to max_tokens.
    let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(20, 0), "max_tokens": 64,
        "ignore_eos": true});
    let resp: Value = t
        .client
        .post(format!("{}/v1/completions", t.base))
        .json(&body)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(resp["usage"]["completion_tokens"], 64);
    assert_eq!(resp["choices"][0]["finish_reason"], "length");
    assert_eq!(resp["object"], "text_completion");
}

async fn post_raw(t: &TestSim, path: &str, body: &str) -> (u16, Value) {
    let resp = t
        .client
        .post(format!("{}{path}", t.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("error body is JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_use_vllm_status_and_shape() {
    let t = spawn(config(fast(), 50.0)).await;
    let (status, body) = post_raw(&t, "/v1/completions", "{not json").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "Bad Request");
    assert_eq!(body["error"]["code"], 400);
    assert_eq!(body["error"]["param"], Value::Null);
    assert!(body["error"]["message"]
        .as_str()
        .expect("msg")
        .contains("json_invalid"));

    let (status, body) = post_raw(&t, "/v1/chat/completions", r#"{"messages": 3}"#).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "Bad Request");

    let (status, body) = post_raw(
        &t,
        "/v1/completions",
        r#"{"model": "gpt-9", "prompt": "hi", "max_tokens": 4}"#,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"error": {"message": "The model `gpt-9` does not exist.", "type": "NotFoundError",
            "param": "model", "code": 404}})
    );

    let (status, body) = post_raw(
        &t,
        "/v1/completions",
        &json!({"model": "tiny-llama", "prompt": prompt_tokens(100, 0), "max_tokens": 4000})
            .to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "BadRequestError");
    assert_eq!(
        body["error"]["message"],
        "'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum context length is 4096 tokens and your request has 100 input tokens (4000 > 4096 - 100)."
    );

    t.sim.set_failing(true);
    let (status, body) = post_raw(
        &t,
        "/v1/chat/completions",
        r#"{"model": "tiny-llama", "messages": [{"role": "user", "content": "x"}]}"#,
    )
    .await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["code"], 500);
    t.sim.set_failing(false);
    let (status, _) = post_raw(
        &t,
        "/v1/chat/completions",
        r#"{"model": "tiny-llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(status, 200);
    let metrics = get_text(&t.client, &format!("{}/metrics", t.base)).await;
    assert!(metrics.contains(
        r#"vllm:request_success_total{engine="0",finished_reason="error",model_name="tiny-llama"} 1.0"#
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_version_health() {
    let t = spawn(config(fast(), 50.0)).await;
    let models: Value = t
        .client
        .get(format!("{}/v1/models", t.base))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny-llama");
    assert_eq!(models["data"][0]["max_model_len"], 4096);
    let version: Value = t
        .client
        .get(format!("{}/version", t.base))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert!(version["version"]
        .as_str()
        .expect("v")
        .starts_with("0.32.0"));
    let health = t
        .client
        .get(format!("{}/health", t.base))
        .send()
        .await
        .expect("send");
    assert_eq!(health.status().as_u16(), 200);
    assert!(health.bytes().await.expect("body").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_the_sequence() {
    // Real time: 1000 tokens would take ~8 s.
    let t = spawn(config(fast(), 1.0)).await;
    let body = json!({"model": "tiny-llama", "prompt": prompt_tokens(200, 3), "max_tokens": 1000,
        "ignore_eos": true, "stream": true});
    let resp = t
        .client
        .post(format!("{}/v1/completions", t.base))
        .json(&body)
        .send()
        .await
        .expect("send");
    let mut stream = futures_util::StreamExt::boxed(resp.bytes_stream());
    let mut got = 0;
    while got < 3 {
        let _ = futures_util::StreamExt::next(&mut stream)
            .await
            .expect("event");
        got += 1;
    }
    assert_eq!(t.sim.snapshot().running, 1);
    assert!(t.sim.snapshot().kv_blocks_used >= 13);
    drop(stream);
    let sim = t.sim.clone();
    assert!(
        wait_for(Duration::from_secs(2), || {
            let s = sim.snapshot();
            s.running == 0 && s.kv_blocks_used == 0
        })
        .await,
        "blocks freed: {:?}",
        t.sim.snapshot()
    );
    assert_eq!(t.sim.snapshot().finished_aborted, 1);
}
