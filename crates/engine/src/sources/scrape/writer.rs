//! Writing scrapes: records gathered into batches, one transaction each.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmwatch_store::{ScrapeRecord, Store};
use tokio::sync::mpsc;

use crate::events::Failure;

use super::ScrapeCounters;

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
