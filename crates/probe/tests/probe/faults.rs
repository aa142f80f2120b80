//! Bad targets: every failure is a record with a clear error, never a panic,
//! and failed requests stay in the run's statistics.

use std::time::{Duration, Instant};

use llmwatch_probe::{
    render_table, run, Api, ClientConfig, ErrorKind, ProbeClient, ProbeError, ProbeRecord,
    ProbeRequest, RunConfig, TimeoutPhase,
};

use crate::helpers::*;

fn req() -> ProbeRequest {
    ProbeRequest::fixed(Api::Chat, "m", "req-0", 8)
}

async fn probe_with(url: String, tweak: impl FnOnce(&mut ClientConfig)) -> ProbeRecord {
    let mut cfg = ClientConfig::new(url);
    tweak(&mut cfg);
    let client = ProbeClient::new(cfg).unwrap();
    client.probe(&req(), Instant::now()).await
}

fn tokens(n: u64) -> Vec<Ev> {
    let mut v = vec![Ev {
        at: ms(1),
        data: role_chunk(false).into(),
    }];
    for i in 0..n {
        v.push(Ev {
            at: ms(2 + i),
            data: chat_chunk("tok", None).into(),
        });
    }
    v
}

fn done(mut v: Vec<Ev>) -> Vec<Ev> {
    let t = v.last().map(|e| e.at).unwrap_or_default();
    v.push(Ev {
        at: t + ms(1),
        data: finish_chunk(v.len() as u64 - 1).into(),
    });
    v.push(Ev {
        at: t + ms(2),
        data: "data: [DONE]\n\n".into(),
    });
    v
}

#[tokio::test]
async fn unreachable_target_is_a_connect_error() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rec = probe_with(format!("http://127.0.0.1:{port}"), |_| {}).await;
    let err = rec.error.clone().unwrap();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "cannot connect to http://127.0.0.1:{port}/v1/chat/completions"
        )),
        "{msg}"
    );
    assert!(msg.to_lowercase().contains("refused"), "{msg}");
    eprintln!("{msg}");
    assert_eq!(rec.ttfb_ns, None);
    assert_eq!(rec.http_status, None);
}

#[tokio::test]
async fn https_to_a_plain_http_port_is_a_tls_error() {
    let server = spawn_server(stream_script(ms(0), done(tokens(2))));
    let rec = probe_with(format!("https://{}", server.addr), |_| {}).await;
    let err = rec.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(
        err.to_string()
            .starts_with("TLS failure talking to https://"),
        "{err}"
    );
    eprintln!("{err}");
}

#[tokio::test]
async fn http_4xx_surfaces_the_servers_message() {
    let body = r#"{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 4096 tokens.","type":"BadRequestError","param":null,"code":400}"#;
    let server = spawn_server(Script::Status {
        status: 400,
        body: body.into(),
    });
    let rec = probe_with(server.url(), |_| {}).await;
    assert_eq!(rec.http_status, Some(400));
    assert!(rec.ttfb_ns.is_some());
    let err = rec.error.unwrap();
    assert_eq!(
        err.to_string(),
        "HTTP 400 from server: This model's maximum context length is 2048 tokens. However, you requested 4096 tokens."
    );
}

#[tokio::test]
async fn http_5xx_openai_shape_and_plain_text() {
    let server = spawn_server(Script::Status {
        status: 503,
        body: r#"{"error":{"message":"server overloaded","type":"overloaded","code":503}}"#.into(),
    });
    let rec = probe_with(server.url(), |_| {}).await;
    assert_eq!(
        rec.error.unwrap().to_string(),
        "HTTP 503 from server: server overloaded"
    );
    let server = spawn_server(Script::Status {
        status: 502,
        body: "<html>Bad Gateway</html>".into(),
    });
    let rec = probe_with(server.url(), |_| {}).await;
    assert_eq!(
        rec.error.unwrap().to_string(),
        "HTTP 502 from server: <html>Bad Gateway</html>"
    );
}

#[tokio::test]
async fn invalid_json_in_an_event() {
    let mut ev = tokens(2);
    ev.push(Ev {
        at: ms(10),
        data: b"data: {\"choices\": [oops\n\n".to_vec(),
    });
    let server = spawn_server(stream_script(ms(0), done(ev)));
    let rec = probe_with(server.url(), |_| {}).await;
    let err = rec.error.clone().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidJson);
    let msg = err.to_string();
    assert!(msg.starts_with("invalid JSON in stream event #4:"), "{msg}");
    assert!(msg.contains("{\"choices\": [oops"), "{msg}");
    // What was measured before the failure is kept.
    assert_eq!(rec.events.len(), 2);
    assert!(rec.ttft_ns.is_some());
}

#[tokio::test]
async fn oversized_event_is_invalid_sse() {
    let mut ev = tokens(1);
    let big = format!("data: {}\n\n", "x".repeat(10_000));
    ev.push(Ev {
        at: ms(5),
        data: big.into(),
    });
    let server = spawn_server(stream_script(ms(0), done(ev)));
    let rec = probe_with(server.url(), |c| c.max_event_bytes = 4096).await;
    let err = rec.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidSse);
    assert_eq!(
        err.to_string(),
        "invalid SSE stream: an SSE event exceeded the limit of 4096 bytes per event"
    );
}

#[tokio::test]
async fn body_over_the_limit() {
    let server = spawn_server(stream_script(ms(0), done(tokens(200))));
    let rec = probe_with(server.url(), |c| c.max_body_bytes = 2000).await;
    let err = rec.error.unwrap();
    assert_eq!(err, ProbeError::BodyTooLarge { limit_bytes: 2000 });
    assert_eq!(
        err.to_string(),
        "response body exceeded the limit of 2000 bytes"
    );
}

#[tokio::test]
async fn stream_that_never_ends_times_out() {
    let server = spawn_server(Script::Stream {
        header_delay: ms(0),
        events: tokens(3),
        headers: vec![],
        abort_at_end: false,
        hang_at_end: true,
        phase_step: Duration::ZERO,
    });
    let started = Instant::now();
    let rec = probe_with(server.url(), |c| c.timeout = ms(300)).await;
    assert!(started.elapsed() < ms(2000));
    let err = rec.error.clone().unwrap();
    assert_eq!(
        err,
        ProbeError::Timeout {
            after_ms: 300,
            phase: TimeoutPhase::Stream
        }
    );
    assert_eq!(
        err.to_string(),
        "timed out after 300 ms while streaming, before the stream ended"
    );
    assert_eq!(rec.events.len(), 3);
    assert!(rec.e2e_ns >= 300_000_000);
}

#[tokio::test]
async fn server_that_never_answers_times_out_waiting_for_headers() {
    let server = spawn_server(Script::Hang);
    let rec = probe_with(server.url(), |c| c.timeout = ms(200)).await;
    assert_eq!(
        rec.error.unwrap().to_string(),
        "timed out after 200 ms waiting for response headers"
    );
}

#[tokio::test]
async fn stream_closed_before_done_is_cut() {
    // Clean close after 3 tokens: no [DONE], no finish reason.
    let server = spawn_server(stream_script(ms(0), tokens(3)));
    let rec = probe_with(server.url(), |_| {}).await;
    let err = rec.error.clone().unwrap();
    assert_eq!(
        err,
        ProbeError::StreamCut {
            events: 4,
            detail: None
        }
    );
    assert_eq!(
        err.to_string(),
        "stream cut after 4 events, before [DONE] or a finish reason"
    );
    assert_eq!(rec.events.len(), 3);
    assert!(rec.output_tokens_estimated);
    // Connection reset mid-stream.
    let server = spawn_server(Script::Stream {
        header_delay: ms(0),
        events: tokens(3),
        headers: vec![],
        abort_at_end: true,
        hang_at_end: false,
        phase_step: Duration::ZERO,
    });
    let rec = probe_with(server.url(), |_| {}).await;
    let err = rec.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::StreamCut);
    // hyper may drop unflushed events when the server aborts: the count
    // varies, the detail (the transport error) must be there.
    let msg = err.to_string();
    assert!(
        msg.starts_with("stream cut after ") && msg.contains("before [DONE] or a finish reason: "),
        "{msg}"
    );
    eprintln!("{msg}");
}

#[tokio::test]
async fn finish_reason_without_done_is_fine() {
    let mut ev = tokens(2);
    ev.push(Ev {
        at: ms(6),
        data: finish_chunk(2).into(),
    });
    let server = spawn_server(stream_script(ms(0), ev));
    let rec = probe_with(server.url(), |_| {}).await;
    assert!(rec.is_ok(), "{:?}", rec.error);
    assert_eq!(rec.output_tokens, 2);
}

#[tokio::test]
async fn error_object_inside_the_stream() {
    let mut ev = tokens(1);
    ev.push(Ev {
        at: ms(5),
        data: b"data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\n".to_vec(),
    });
    let server = spawn_server(stream_script(ms(0), ev));
    let rec = probe_with(server.url(), |_| {}).await;
    assert_eq!(
        rec.error.unwrap().to_string(),
        "server reported an error inside the stream: engine died"
    );
}

#[tokio::test]
async fn sse_error_event_and_empty_keepalives() {
    let mut ev = tokens(1);
    ev.push(Ev {
        at: ms(4),
        data: b"data:\n\n: ping\n\n".to_vec(),
    });
    ev.push(Ev {
        at: ms(5),
        data: b"event: error\ndata: {\"error\":\"Request failed during generation: CUDA OOM\"}\n\n"
            .to_vec(),
    });
    let server = spawn_server(stream_script(ms(0), ev));
    let rec = probe_with(server.url(), |_| {}).await;
    assert_eq!(
        rec.error.unwrap().to_string(),
        "server reported an error inside the stream: Request failed during generation: CUDA OOM"
    );
    assert_eq!(rec.total_events, 3);
}

#[tokio::test]
async fn cut_streams_stay_in_the_run_statistics() {
    // Every request is cut after 3 tokens; a run of 6 keeps all 6.
    let server = spawn_server(stream_script(ms(0), tokens(3)));
    let client = ProbeClient::new(ClientConfig::new(server.url())).unwrap();
    let result = run(&client, &RunConfig::closed(2, 6), |i| {
        ProbeRequest::fixed(Api::Chat, "m", format!("req-{i}"), 8)
    })
    .await
    .unwrap();
    assert_eq!(result.requests, 6);
    assert_eq!(result.failed, 6);
    assert_eq!(result.error_rate, 1.0);
    assert_eq!(result.errors.get("stream_cut"), Some(&6));
    assert_eq!(result.good_requests, 0);
    // Their TTFT and ITL gaps were real and are kept; e2e is missing.
    assert_eq!(result.ttft_ms.n, 6);
    assert_eq!(result.itl_ms.n, 12);
    assert_eq!(result.e2e_ms.n, 0);
    assert_eq!(result.e2e_ms.missing, 6);
    let table = render_table(&result);
    assert!(
        table.contains("Failed requests:                         6"),
        "{table}"
    );
    assert!(table.contains("stream_cut:"), "{table}");
}

#[tokio::test]
async fn invalid_base_url_is_refused_up_front() {
    let e = ProbeClient::new(ClientConfig::new("localhost:8000")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid base URL \"localhost:8000\""),
        "{e}"
    );
}
