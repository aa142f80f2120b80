//! Scraping: one GET of a `/metrics` page with a timeout and a body-size
//! limit ([`fetch`]), parsed and normalised into a [`ScrapeRecord`]
//! ([`read`]); the per-target loop that does it on schedule (here); and the
//! writer that stores the records in batches ([`writer`]). A target that is
//! down, slow or returns garbage yields a `up = false` record with the
//! reason, never an error that stops the loop.

pub mod fetch;
pub mod read;
pub mod writer;

use llmwatch_core::redact::{redact_url, redact_urls_in};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch_store::ScrapeRecord;
use tokio::sync::{mpsc, watch};

use crate::ticker::JitteredTicker;
use llmwatch_config::EngineChoice;

pub use self::fetch::{fetch_page, scrape_client, FetchError, Page, PageFetcher};
pub use self::read::{page_lines, understand, LastPage, PageLines, Understood};
pub use self::writer::{run_writer, WRITE_GATHER};
pub use crate::clock::now_ms;

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
