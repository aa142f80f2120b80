//! Getting a page: one GET with a timeout and a body-size limit, through
//! the lean HTTP/1.1 client for plain HTTP (kept alive, its request encoded
//! once) or reqwest otherwise.

use std::time::{Duration, Instant};

/// Why a page could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("body larger than the {0}-byte limit")]
    TooLarge(u64),
    #[error("reading the body failed: {0}")]
    Body(String),
    #[error("bad response: {0}")]
    BadResponse(String),
}

/// A fetched page.
pub struct Page {
    pub body: Vec<u8>,
    pub content_type: Option<String>,
}

/// The HTTP client used for scrapes: no redirects across hosts, rustls,
/// its own connect timeout.
pub fn scrape_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::limited(3))
        .user_agent(USER_AGENT)
        .build()
}

/// What a scrape asks for: the text format first, OpenMetrics after.
const SCRAPE_ACCEPT: &str =
    "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1";

const USER_AGENT: &str = concat!("llmwatch/", env!("CARGO_PKG_VERSION"));

/// How one scrape loop fetches its page. A plain-HTTP URL goes through the
/// lean client, its request written once and sent as is every interval,
/// over one kept-alive connection; anything else (TLS, credentials in the
/// URL) and any redirect go through reqwest.
pub struct PageFetcher {
    lean: Option<(llmwatch_http::Client, llmwatch_http::Encoded)>,
    reqwest: reqwest::Client,
    url: String,
}

impl PageFetcher {
    pub fn new(reqwest: reqwest::Client, url: &str) -> PageFetcher {
        let lean = llmwatch_http::split_url(url).and_then(|(origin, target)| {
            let client = llmwatch_http::Client::new(
                origin,
                llmwatch_http::ClientConfig {
                    user_agent: Some(USER_AGENT.to_string()),
                    max_idle: 1,
                    // Above any scrape interval a fleet uses (Prometheus'
                    // longest common one is 5 min): the connection lives
                    // as long as the server keeps it.
                    idle_timeout: Duration::from_secs(600),
                    ..llmwatch_http::ClientConfig::default()
                },
            );
            let request = llmwatch_http::Request {
                method: "GET",
                target: &target,
                headers: &[("Accept", SCRAPE_ACCEPT)],
                body: b"",
            };
            let encoded = client.encode(&request).ok()?;
            Some((client, encoded))
        });
        PageFetcher {
            lean,
            reqwest,
            url: url.to_string(),
        }
    }

    /// Whether pages come through the lean client.
    pub fn is_lean(&self) -> bool {
        self.lean.is_some()
    }

    /// GETs the page, giving up after `timeout` (headers and body together)
    /// and refusing bodies over `max_bytes` before reading them whole.
    pub async fn fetch(&self, timeout: Duration, max_bytes: u64) -> Result<Page, FetchError> {
        let Some((client, request)) = &self.lean else {
            return fetch_page(&self.reqwest, &self.url, timeout, max_bytes).await;
        };
        let started = Instant::now();
        let fetch = async {
            let mut response = client.send_encoded(request).await.map_err(|err| {
                if err.is_connect() {
                    FetchError::Connect(err.to_string())
                } else {
                    FetchError::BadResponse(err.to_string())
                }
            })?;
            let status = response.status();
            if (300..400).contains(&status) {
                return Ok(None);
            }
            if !(200..300).contains(&status) {
                return Err(FetchError::Status(status));
            }
            let content_type = response.header("content-type").map(str::to_string);
            let body = response
                .read_to_end(max_bytes)
                .await
                .map_err(|err| match err {
                    llmwatch_http::Error::TooLarge(limit) => FetchError::TooLarge(limit),
                    other => FetchError::Body(other.to_string()),
                })?;
            Ok(Some(Page { body, content_type }))
        };
        match tokio::time::timeout(timeout, fetch).await {
            Ok(Ok(Some(page))) => Ok(page),
            // A redirect: reqwest follows it, in the time that is left.
            Ok(Ok(None)) => {
                let left = timeout.saturating_sub(started.elapsed());
                fetch_page(&self.reqwest, &self.url, left, max_bytes).await
            }
            Ok(Err(err)) => Err(err),
            Err(_) => Err(FetchError::Timeout(timeout)),
        }
    }
}

/// GETs `url`, giving up after `timeout` (headers and body together) and
/// refusing bodies over `max_bytes` before reading them whole.
pub async fn fetch_page(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
    max_bytes: u64,
) -> Result<Page, FetchError> {
    let fetch = async {
        let mut response = client
            .get(url)
            .header(reqwest::header::ACCEPT, SCRAPE_ACCEPT)
            .send()
            .await
            .map_err(|err| FetchError::Connect(error_chain(&err)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        if response.content_length().is_some_and(|len| len > max_bytes) {
            return Err(FetchError::TooLarge(max_bytes));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| FetchError::Body(error_chain(&err)))?
        {
            if body.len() as u64 + chunk.len() as u64 > max_bytes {
                return Err(FetchError::TooLarge(max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Page { body, content_type })
    };
    match tokio::time::timeout(timeout, fetch).await {
        Ok(result) => result,
        Err(_) => Err(FetchError::Timeout(timeout)),
    }
}

/// reqwest's top-level message hides the cause ("error sending request");
/// the chain says "connection refused".
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
