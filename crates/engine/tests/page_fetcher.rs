//! A scrape's fetch: plain HTTP through the lean client, the rest (TLS,
//! credentials in the URL, redirects) through reqwest, against a real
//! server on loopback with a real engine's page.

use std::time::Duration;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use llmwatch_engine::sources::scrape::{scrape_client, FetchError, PageFetcher};

const LIMIT: u64 = 4 << 20;
const TIMEOUT: Duration = Duration::from_secs(5);

fn vllm_page() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/vllm-live/metrics_vllm_load_after.txt"
    );
    std::fs::read_to_string(path).expect("the live vLLM capture")
}

async fn serve() -> String {
    let page = vllm_page();
    let metrics = move || {
        let page = page.clone();
        async move {
            (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                page,
            )
        }
    };
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route(
            "/old",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/metrics")]) }),
        )
        .route(
            "/private",
            get(|headers: HeaderMap| async move {
                // "user:secret" in base64.
                if headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    == Some("Basic dXNlcjpzZWNyZXQ=")
                {
                    "up 1\n".into_response()
                } else {
                    StatusCode::UNAUTHORIZED.into_response()
                }
            }),
        )
        .route("/big", get(|| async { "x".repeat(10_000) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

#[tokio::test]
async fn a_plain_http_page_comes_whole_through_the_lean_client() {
    let base = serve().await;
    let fetcher = PageFetcher::new(scrape_client().unwrap(), &format!("{base}/metrics"));
    assert!(fetcher.is_lean());
    for _ in 0..3 {
        let page = fetcher.fetch(TIMEOUT, LIMIT).await.unwrap();
        assert_eq!(page.body, vllm_page().as_bytes());
        assert_eq!(
            page.content_type.as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
    }
}

#[tokio::test]
async fn a_redirect_is_followed_through_reqwest() {
    let base = serve().await;
    let fetcher = PageFetcher::new(scrape_client().unwrap(), &format!("{base}/old"));
    assert!(fetcher.is_lean());
    let page = fetcher.fetch(TIMEOUT, LIMIT).await.unwrap();
    assert_eq!(page.body, vllm_page().as_bytes());
}

#[tokio::test]
async fn credentials_in_the_url_go_through_reqwest_as_basic_auth() {
    let base = serve().await;
    let url = base.replace("http://", "http://user:secret@") + "/private";
    let fetcher = PageFetcher::new(scrape_client().unwrap(), &url);
    assert!(!fetcher.is_lean());
    let page = fetcher.fetch(TIMEOUT, LIMIT).await.unwrap();
    assert_eq!(page.body, b"up 1\n");
    assert!(!PageFetcher::new(scrape_client().unwrap(), "https://127.0.0.1:1/metrics").is_lean());
}

#[tokio::test]
async fn failures_say_what_went_wrong() {
    let base = serve().await;
    let fetch = |path: &str| {
        let fetcher = PageFetcher::new(scrape_client().unwrap(), &format!("{base}{path}"));
        async move { fetcher.fetch(TIMEOUT, 4096).await }
    };
    assert!(matches!(
        fetch("/missing").await,
        Err(FetchError::Status(404))
    ));
    assert!(matches!(
        fetch("/big").await,
        Err(FetchError::TooLarge(4096))
    ));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let fetcher = PageFetcher::new(
        scrape_client().unwrap(),
        &format!("http://{address}/metrics"),
    );
    let err = fetcher
        .fetch(TIMEOUT, LIMIT)
        .await
        .err()
        .expect("nothing listens");
    assert!(matches!(err, FetchError::Connect(_)), "{err}");
    assert!(err.to_string().contains("refused"), "{err}");

    // A server that accepts and never answers: the scrape's timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let fetcher = PageFetcher::new(
        scrape_client().unwrap(),
        &format!("http://{address}/metrics"),
    );
    let err = fetcher
        .fetch(Duration::from_millis(200), LIMIT)
        .await
        .err()
        .expect("no answer");
    assert!(matches!(err, FetchError::Timeout(_)), "{err}");
    drop(silent);
}
