//! Scraping: one GET of a `/metrics` page with a timeout and a body-size
//! limit, parsed and normalised into a [`ScrapeRecord`]; and the per-target
//! loop that does it on schedule. A target that is down, slow or returns
//! garbage yields a `up = false` record with the reason, never an error that
//! stops the loop.

use llmwatch_core::redact::{redact_url, redact_urls_in};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch_core::catalog::{detect_engine, normalize, Engine};
use llmwatch_core::exposition::{detect_format, parse_lenient, PageTemplate, TemplateSample};
use llmwatch_store::{RawSample, ScrapeRecord, Store};
use tokio::sync::{mpsc, watch};

use crate::events::Failure;
use crate::ticker::JitteredTicker;
use llmwatch_config::EngineChoice;

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

pub use crate::clock::now_ms;

/// What a page means: its engine, its samples, and whether it was readable.
pub struct Understood {
    pub engine: Engine,
    pub samples: Vec<llmwatch_core::catalog::NormalizedSample>,
    /// Every sample line, as the server wrote it (what the store keeps).
    pub raw: Vec<RawSample>,
    pub families: usize,
    pub parse_errors: Vec<llmwatch_core::exposition::ParseError>,
}

/// Parses and normalises a page. Pure apart from allocation.
pub fn understand(page: &Page, engine: EngineChoice) -> Understood {
    let format = detect_format(page.content_type.as_deref(), &page.body);
    let (exposition, parse_errors) = parse_lenient(&page.body, format);
    let engine = engine_of(engine, &exposition);
    Understood {
        engine,
        samples: normalize(engine, &exposition),
        raw: RawSample::all_of(&exposition),
        families: exposition.families.len(),
        parse_errors,
    }
}

/// What a scrape keeps of a page: every sample line and the engine.
pub struct PageLines {
    pub engine: Engine,
    pub raw: Vec<RawSample>,
    pub families: usize,
    pub parse_errors: Vec<llmwatch_core::exposition::ParseError>,
    /// The page's shape, for reading the next one without parsing (none
    /// when the page had errors or is not written canonically).
    template: Option<Arc<PageTemplate>>,
    /// Read through the last page's template, not parsed.
    pub from_template: bool,
}

/// What a target's last good page leaves for reading the next one.
#[derive(Default)]
pub struct LastPage {
    /// Its lines, whose strings the next page shares.
    raw: Vec<RawSample>,
    engine: Option<Engine>,
    families: usize,
    template: Option<Arc<PageTemplate>>,
}

impl LastPage {
    /// Remembers `lines` (a page that was up) for the next scrape.
    pub fn remember(&mut self, lines: &PageLines) {
        if !lines.from_template {
            // Read through the template, a page has the last one's very
            // strings: nothing to keep.
            self.raw.clone_from(&lines.raw);
        }
        self.engine = Some(lines.engine);
        self.families = lines.families;
        self.template.clone_from(&lines.template);
    }
}

/// Parses a page into its lines without normalising it: the store keeps
/// raw lines and signals are normalised when read, so the scrape path
/// skips the catalog (a fifth of a scrape's instructions). A page of the
/// last page's shape is read through its template (values only, no parse);
/// otherwise lines equal to the same line of the last page share its
/// strings.
pub fn page_lines(page: &Page, engine: EngineChoice, last: &LastPage) -> PageLines {
    let format = detect_format(page.content_type.as_deref(), &page.body);
    if let (Some(template), Some(last_engine)) = (&last.template, last.engine) {
        match template.values(&page.body, format) {
            Some(values) if values.len() == last.raw.len() => {
                let raw = last
                    .raw
                    .iter()
                    .zip(values)
                    .map(|(line, value)| RawSample {
                        name: line.name.clone(),
                        labels: line.labels.clone(),
                        value,
                    })
                    .collect();
                return PageLines {
                    engine: last_engine,
                    raw,
                    families: last.families,
                    parse_errors: Vec::new(),
                    template: Some(template.clone()),
                    from_template: true,
                };
            }
            _ => {}
        }
    }
    let (exposition, parse_errors) = parse_lenient(&page.body, format);
    let raw = RawSample::all_of_like(&exposition, &last.raw);
    let template = if parse_errors.is_empty() {
        PageTemplate::build(
            &page.body,
            format,
            raw.iter().map(|line| TemplateSample {
                name: &line.name,
                labels: &line.labels,
                value: line.value,
            }),
        )
        .map(Arc::new)
    } else {
        None
    };
    PageLines {
        engine: engine_of(engine, &exposition),
        raw,
        families: exposition.families.len(),
        parse_errors,
        template,
        from_template: false,
    }
}

fn engine_of(choice: EngineChoice, page: &llmwatch_core::exposition::Exposition) -> Engine {
    match choice {
        EngineChoice::Fixed(engine) => engine,
        EngineChoice::Auto => detect_engine(page),
    }
}

/// One scheduled scrape source.
#[derive(Debug, Clone)]
pub struct ScrapeJob {
    pub target_id: i64,
    pub name: String,
    pub url: String,
    pub engine: EngineChoice,
    pub interval: Duration,
    pub timeout: Duration,
    pub max_body_bytes: u64,
}

/// Counters of the scrape stage, for logs and llmwatch's own `/metrics`.
#[derive(Debug, Default)]
pub struct ScrapeCounters {
    pub scrapes: AtomicU64,
    pub failures: AtomicU64,
    pub samples_written: AtomicU64,
    pub write_failures: AtomicU64,
    /// Duration of each batched write.
    pub write_latency: crate::telemetry::LatencyHistogram,
    /// (scrapes, failures) per scrape source name.
    pub per_target: std::sync::Mutex<std::collections::BTreeMap<String, (u64, u64)>>,
}

impl ScrapeCounters {
    /// Counts one scrape of `name`.
    pub fn count(&self, name: &str, up: bool) {
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        if !up {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut map) = self.per_target.lock() {
            // Looked up by `&str` first: the name is copied once per target.
            let failed = u64::from(!up);
            match map.get_mut(name) {
                Some(entry) => *entry = (entry.0 + 1, entry.1 + failed),
                None => {
                    map.insert(name.to_string(), (1, failed));
                }
            }
        }
    }
}

/// Scrapes `job.url` once and describes the outcome; `last` is what the
/// target's last good page left (or nothing), updated when this one is up.
pub async fn scrape_once(
    fetcher: &PageFetcher,
    job: &ScrapeJob,
    last: &mut LastPage,
) -> ScrapeRecord {
    let ts_ms = now_ms();
    let started = Instant::now();
    let fetched = fetcher.fetch(job.timeout, job.max_body_bytes).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut record = ScrapeRecord {
        target_id: job.target_id,
        ts_ms,
        up: false,
        duration_ms,
        body_bytes: 0,
        error: None,
        engine: None,
        samples: Vec::new(),
        raw: Vec::new(),
    };
    match fetched {
        Err(err) => record.error = Some(err.to_string()),
        Ok(page) => {
            record.body_bytes = page.body.len() as u64;
            let understood = page_lines(&page, job.engine, last);
            if understood.families == 0 && !understood.parse_errors.is_empty() {
                record.error = Some(format!(
                    "unparseable page: {} ({} errors)",
                    understood.parse_errors[0],
                    understood.parse_errors.len()
                ));
            } else {
                record.up = true;
                record.engine = Some(understood.engine.as_str().to_string());
                if let Some(first) = understood.parse_errors.first() {
                    record.error = Some(format!(
                        "{} lines skipped; first: {first}",
                        understood.parse_errors.len()
                    ));
                }
                last.remember(&understood);
                // The whole page is kept; signals are normalised from it
                // when read.
                record.raw = understood.raw;
            }
        }
    }
    record
}

/// Scrapes `job` every `job.interval` until `shutdown` turns true (a scrape
/// in flight then is dropped, not awaited), sending each record to the
/// writer. Each scrape is bounded by its timeout, so a hanging target never
/// delays its own schedule beyond one interval, and never touches any other
/// target's.
pub async fn run_scrape_loop(
    client: reqwest::Client,
    job: ScrapeJob,
    records: mpsc::Sender<ScrapeRecord>,
    counters: Arc<ScrapeCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Up to 2 % of the interval (at most 250 ms), fresh each time.
    let max_jitter = (job.interval / 50).min(Duration::from_millis(250));
    let mut ticker = JitteredTicker::new(&job.name, job.interval, max_jitter);
    let mut last_page = LastPage::default();
    let fetcher = PageFetcher::new(client, &job.url);
    while ticker.tick(&mut shutdown).await {
        // Stopping abandons a scrape in flight: a target that left (often
        // because it hangs) must not hold up the supervisor, which starts
        // the targets that came in the same discovery refresh only once the
        // leaving ones have stopped.
        let record = tokio::select! {
            record = scrape_once(&fetcher, &job, &mut last_page) => record,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        counters.count(&job.name, record.up);
        if !record.up {
            tracing::warn!(
                target = %job.name,
                url = %redact_url(&job.url),
                error = %redact_urls_in(record.error.as_deref().unwrap_or("")),
                "scrape failed"
            );
        }
        if records.send(record).await.is_err() {
            return;
        }
    }
}

/// How long the writer gathers records after the first of a batch. Targets
/// are scraped at phases spread over their interval, so without it nearly
/// every scrape was a transaction of its own; a commit (WAL frames, index
/// pages, checkpoints) cost more than the rest of the write.
pub const WRITE_GATHER: Duration = Duration::from_millis(100);

/// Writes records in batches: the first record waits up to [`WRITE_GATHER`]
/// for others (or until the batch is full), and the batch goes into one
/// transaction.
pub async fn run_writer(
    store: Store,
    mut records: mpsc::Receiver<ScrapeRecord>,
    counters: Arc<ScrapeCounters>,
) {
    const MAX_BATCH: usize = 256;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while records.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let gather_until = tokio::time::Instant::now() + WRITE_GATHER;
        while batch.len() < MAX_BATCH {
            let room = MAX_BATCH - batch.len();
            match tokio::time::timeout_at(gather_until, records.recv_many(&mut batch, room)).await {
                // More came, or the senders are gone (the batch is still written).
                Ok(received) if received > 0 => {}
                Ok(_) | Err(_) => break,
            }
        }
        let started = Instant::now();
        let written = store.write_scrapes(&batch).await;
        counters.write_latency.observe(started.elapsed());
        match written {
            Ok(samples) => {
                counters
                    .samples_written
                    .fetch_add(samples, Ordering::Relaxed);
            }
            Err(err) => {
                counters.write_failures.fetch_add(1, Ordering::Relaxed);
                Failure::ScrapeWrite.emit(None, &format!("{err} ({} records)", batch.len()));
            }
        }
        batch.clear();
    }
    // A clean stop compresses what is still in the heads.
    if let Err(err) = store.seal_heads().await {
        tracing::warn!(error = %err, "sealing the scrape heads at shutdown failed");
    }
}
