//! llama-server as it really behaves (seen against a real one built from
//! llama.cpp's sources): it closes every connection after a stream while
//! advertising keep-alive, and its `/tokenize` counts raw text only (the
//! chat template is rendered by `/apply-template`).

use std::net::SocketAddr;

use axum::routing::post;
use axum::{Json, Router};
use llmwatch_probe::{
    run, Api, Calibrator, ClientConfig, ProbeClient, ProbeRequest, PromptKind, RunConfig,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::{chat_chunk, finish_chunk, role_chunk};

/// Reads one request (head and Content-Length body); false at EOF.
async fn read_request(sock: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return true;
            }
        }
        match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// One HTTP chunk holding one whole SSE event (`data: …\n\n`).
fn http_chunk(event: &str) -> String {
    format!("{:x}\r\n{event}\r\n", event.len())
}

/// Streams 4 tokens per request, says `Keep-Alive`, then closes the
/// connection — as llama-server does.
async fn closing_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                if !read_request(&mut sock).await {
                    return;
                }
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                     Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n",
                );
                out.push_str(&http_chunk(&role_chunk(false)));
                for _ in 0..4 {
                    out.push_str(&http_chunk(&chat_chunk("tok", None)));
                }
                out.push_str(&http_chunk(&finish_chunk(4)));
                out.push_str(&http_chunk("data: [DONE]\n\n"));
                out.push_str("0\r\n\r\n");
                let _ = sock.write_all(out.as_bytes()).await;
                // Closed here: the client may already have pooled it.
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_every_connection_loses_no_request() {
    let addr = closing_server().await;
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let result = run(&client, &RunConfig::closed(2, 200), |i| {
        ProbeRequest::fixed(Api::Chat, "m", format!("req-{i}"), 4)
    })
    .await
    .unwrap();
    assert_eq!(result.failed, 0, "{:?}", result.error_examples);
    assert_eq!(result.successful, 200);
}

/// `/tokenize` counts whitespace-separated words of `content` plus a BOS and
/// answers `{"tokens": []}` to any other body; `/apply-template` wraps the
/// messages in a ChatML template.
async fn llama_server_tokenizer() -> SocketAddr {
    async fn tokenize(Json(body): Json<Value>) -> Json<Value> {
        let tokens: Vec<u32> = match body["content"].as_str() {
            Some(text) => (0..=text.split_whitespace().count() as u32).collect(),
            None => Vec::new(),
        };
        Json(json!({ "tokens": tokens }))
    }
    async fn apply_template(Json(body): Json<Value>) -> Json<Value> {
        let mut prompt = String::new();
        for m in body["messages"].as_array().into_iter().flatten() {
            let (role, content) = (m["role"].as_str().unwrap(), m["content"].as_str().unwrap());
            prompt.push_str(&format!("<|im_start|> {role}\n{content} <|im_end|>\n"));
        }
        prompt.push_str("<|im_start|> assistant\n");
        Json(json!({ "prompt": prompt }))
    }
    let app = Router::new()
        .route("/tokenize", post(tokenize))
        .route("/apply-template", post(apply_template));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_calibration_on_llama_server_counts_the_rendered_template() {
    let addr = llama_server_tokenizer().await;
    let client = ProbeClient::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let calibration = Calibrator::new()
        .calibrate(&client, Api::Chat, "m", PromptKind::Random, 100)
        .await;
    assert!(calibration.exact, "{calibration:?}");
    assert_eq!(calibration.tokens, Some(100));
    // 4 template words + BOS: the prompt text itself counts 95.
    let completions = Calibrator::new()
        .calibrate(&client, Api::Completions, "m", PromptKind::Random, 100)
        .await;
    assert_eq!(completions.tokens, Some(100));
    assert!(
        completions.words > calibration.words,
        "chat {calibration:?} vs completions {completions:?}"
    );
}
