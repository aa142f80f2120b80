//! The lean client against real servers on loopback: axum (hyper) for the
//! common answers, and a scripted TCP server for the strange ones a
//! production server can give (a dropped keep-alive, a cut body, garbage).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmwatch_http::{split_url, Client, ClientConfig, Error, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn client_for(url: &str) -> (Client, String) {
    let (origin, target) = split_url(url).expect("a plain http URL");
    (Client::new(origin, ClientConfig::default()), target)
}

fn get(target: &str) -> Request<'_> {
    Request {
        method: "GET",
        target,
        headers: &[],
        body: b"",
    }
}

/// How the scripted server treats a connection after each answer.
#[derive(Clone, Copy, PartialEq)]
enum After {
    KeepOpen,
    Close,
}

/// A server that answers each request with the next of `answers` (the last
/// one repeats), counting connections.
async fn scripted(answers: Vec<Vec<u8>>, after: After) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let answers = answers.clone();
            let served = served.clone();
            tokio::spawn(serve_connection(stream, answers, served, after));
        }
    });
    (address, connections)
}

async fn serve_connection(
    mut stream: TcpStream,
    answers: Vec<Vec<u8>>,
    served: Arc<AtomicUsize>,
    after: After,
) {
    let mut request = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        // One request: its head, and a body of its Content-Length.
        let end = loop {
            if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break end + 4 + length;
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buffer[..n]),
            }
        };
        request.drain(..end);
        let index = served.fetch_add(1, Ordering::SeqCst).min(answers.len() - 1);
        if stream.write_all(&answers[index]).await.is_err() {
            return;
        }
        if after == After::Close {
            return;
        }
    }
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_kept_alive_connection_carries_the_next_request() {
    let (address, connections) = scripted(vec![ok("first"), ok("second")], After::KeepOpen).await;
    let (client, target) = client_for(&format!("http://{address}/metrics"));
    let mut answer = client.send(&get(&target)).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.header("content-type"), Some("text/plain"));
    assert_eq!(answer.read_to_end(1 << 20).await.unwrap(), b"first");
    assert_eq!(client.idle_connections(), 1);
    let mut answer = client.send(&get(&target)).await.unwrap();
    assert_eq!(answer.read_to_end(1 << 20).await.unwrap(), b"second");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_keep_alive_the_server_dropped_is_replaced_and_the_request_resent() {
    // llama-server's way: keep-alive advertised, the connection closed.
    let (address, connections) = scripted(vec![ok("one"), ok("two")], After::Close).await;
    let (client, target) = client_for(&format!("http://{address}/"));
    let mut answer = client.send(&get(&target)).await.unwrap();
    assert_eq!(answer.read_to_end(1 << 20).await.unwrap(), b"one");
    let mut answer = client.send(&get(&target)).await.unwrap();
    assert_eq!(answer.read_to_end(1 << 20).await.unwrap(), b"two");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_fresh_connection_closed_without_an_answer_is_an_error_saying_so() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer).await;
            drop(stream);
        }
    });
    let (client, target) = client_for(&format!("http://{address}/"));
    let err = client.send(&get(&target)).await.unwrap_err();
    assert!(matches!(err, Error::ClosedBeforeAnswer), "{err}");
    assert_eq!(
        err.to_string(),
        "the server closed the connection before answering"
    );
}

#[tokio::test]
async fn strange_answers_are_errors_with_their_reason() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort".to_vec(),
            "the connection closed before the body ended",
        ),
        (
            b"this is not http\r\n\r\n".to_vec(),
            "malformed response head",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n".to_vec(),
            "malformed chunked body: a chunk size is not a hexadecimal number",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab".to_vec(),
            "the connection closed before the body ended",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: nine\r\n\r\n".to_vec(),
            "invalid Content-Length \"nine\"",
        ),
    ];
    for (answer, reason) in cases {
        let (address, _) = scripted(vec![answer], After::Close).await;
        let (client, target) = client_for(&format!("http://{address}/"));
        let outcome = match client.send(&get(&target)).await {
            Ok(mut response) => response.read_to_end(1 << 20).await.map(|_| ()),
            Err(err) => Err(err),
        };
        let err = outcome.expect_err(reason);
        assert!(err.to_string().contains(reason), "{err} / {reason}");
    }
}

#[tokio::test]
async fn limits_hold_on_heads_and_bodies() {
    let huge_head = format!(
        "HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 << 10)
    );
    let (address, _) = scripted(vec![huge_head.into_bytes()], After::Close).await;
    let (client, target) = client_for(&format!("http://{address}/"));
    let err = client.send(&get(&target)).await.unwrap_err();
    assert!(matches!(err, Error::HeadTooLarge(65536)), "{err}");

    // A stated length over the limit is refused before reading.
    let (address, _) = scripted(vec![ok(&"x".repeat(5000))], After::KeepOpen).await;
    let (client, target) = client_for(&format!("http://{address}/"));
    let mut answer = client.send(&get(&target)).await.unwrap();
    assert!(matches!(
        answer.read_to_end(4096).await,
        Err(Error::TooLarge(4096))
    ));
    // An unstated one is refused when it passes the limit.
    let endless = [
        b"HTTP/1.0 200 OK\r\n\r\n".as_slice(),
        "y".repeat(9000).as_bytes(),
    ]
    .concat();
    let (address, _) = scripted(vec![endless], After::Close).await;
    let (client, target) = client_for(&format!("http://{address}/"));
    let mut answer = client.send(&get(&target)).await.unwrap();
    assert!(matches!(
        answer.read_to_end(4096).await,
        Err(Error::TooLarge(4096))
    ));
}

#[tokio::test]
async fn a_body_that_runs_to_the_close_is_read_whole_and_not_pooled() {
    let answer = [
        b"HTTP/1.0 200 OK\r\n\r\n".as_slice(),
        "z".repeat(40_000).as_bytes(),
    ]
    .concat();
    let (address, _) = scripted(vec![answer], After::Close).await;
    let (client, target) = client_for(&format!("http://{address}/"));
    let mut response = client.send(&get(&target)).await.unwrap();
    assert_eq!(response.content_length(), None);
    assert_eq!(response.read_to_end(1 << 20).await.unwrap().len(), 40_000);
    assert_eq!(client.idle_connections(), 0);
}

#[tokio::test]
async fn interim_answers_are_skipped() {
    let answer = [b"HTTP/1.1 100 Continue\r\n\r\n".as_slice(), &ok("done")].concat();
    let (address, _) = scripted(vec![answer], After::KeepOpen).await;
    let (client, target) = client_for(&format!("http://{address}/"));
    let mut response = client.send(&get(&target)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.read_to_end(1 << 20).await.unwrap(), b"done");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let (client, target) = client_for(&format!("http://{address}/"));
    let err = client.send(&get(&target)).await.unwrap_err();
    assert!(err.is_connect(), "{err}");
    assert!(err.to_string().contains("connecting to 127.0.0.1"), "{err}");
}

#[tokio::test]
async fn a_header_with_a_line_break_is_refused_before_sending() {
    let (client, target) = client_for("http://127.0.0.1:9/");
    let request = Request {
        method: "GET",
        target: &target,
        headers: &[("Authorization", "Bearer x\r\nX-Injected: 1")],
        body: b"",
    };
    let err = client.send(&request).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "header \"Authorization\" has a line break or NUL in its name or value"
    );
}

#[tokio::test]
async fn a_streamed_chunked_body_from_hyper_arrives_piece_by_piece() {
    use axum::body::Body;
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|body: String| async move {
            // Echo the request body, then stream 50 events with pauses, so
            // the pieces cross reads.
            let events = (0..50).map(move |i| {
                let event = if i == 0 {
                    format!("data: {body}\n\n")
                } else {
                    format!("data: {i}\n\n")
                };
                Ok::<_, std::convert::Infallible>(event)
            });
            let stream = futures_util::stream::iter(events).then(|event| async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                event
            });
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (client, target) = client_for(&format!("http://{address}/v1/chat/completions"));
    for _ in 0..3 {
        let request = Request {
            method: "POST",
            target: &target,
            headers: &[("Content-Type", "application/json")],
            body: br#"{"stream":true}"#,
        };
        let mut response = client.send(&request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.content_length(), None);
        let mut text = Vec::new();
        let mut pieces = 0;
        while let Some(piece) = response.chunk().await.unwrap() {
            pieces += 1;
            text.extend_from_slice(piece);
        }
        let expected: String = std::iter::once("data: {\"stream\":true}\n\n".to_string())
            .chain((1..50).map(|i| format!("data: {i}\n\n")))
            .collect();
        assert_eq!(String::from_utf8(text).unwrap(), expected);
        assert!(pieces > 10, "the events came in {pieces} pieces");
        // The connection went back to the pool for the next round.
        assert_eq!(client.idle_connections(), 1);
    }
}

use futures_util::StreamExt as _;
