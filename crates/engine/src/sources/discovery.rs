//! Service discovery, the I/O part: every `refresh_interval`, reads a
//! `[[discovery]]` group's file_sd files or its http_sd URL and puts what
//! they list (this shard's share) into the [`TargetSet`]. A file or answer
//! that cannot be read or parsed is read once more a moment later (a file
//! caught mid-rewrite), then keeps that source's last good list, as
//! Prometheus does, so a half-written file never drops a fleet. A change
//! shows within one refresh of the write: the targets that left stop at
//! once (a scrape in flight is dropped), so they never delay the new ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmwatch_config::discovery::{parse_groups, targets_of, DocumentFormat, Shard, TargetGroup};
use llmwatch_config::{DiscoveryConfig, TargetConfig};
use tokio::sync::watch;

use crate::targets::TargetSet;
use crate::ticker::JitteredTicker;

/// The largest discovery document read (file or HTTP answer).
pub const MAX_DOCUMENT_BYTES: usize = 4 << 20;

/// A source that failed is read once more after a tenth of the refresh
/// interval, at most this long (a file caught half-written).
const MAX_RETRY_AFTER: Duration = Duration::from_millis(250);

/// The longest an http_sd request may take.
const MAX_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Counts for own `/metrics`.
#[derive(Debug, Default)]
pub struct DiscoveryCounters {
    pub refreshes: AtomicU64,
    pub failures: AtomicU64,
    /// Targets found in the last refresh of every group, this shard's.
    pub targets: AtomicU64,
}

/// One `[[discovery]]` group and what it needs to run.
pub struct DiscoveryJob {
    pub config: DiscoveryConfig,
    /// The bearer token for `http_url` (already checked at start).
    pub token: Option<String>,
    pub shard: Option<Shard>,
}

/// Why one source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("bad pattern {0:?}: {1}")]
    Pattern(String, String),
}

/// The files a group reads now: each configured path, with `*`/`?` in the
/// name expanded; a pattern that matches nothing is no files.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReadError> {
    let mut files = Vec::new();
    for path in paths {
        let pattern = path.to_string_lossy();
        if !pattern.contains(['*', '?', '[']) {
            files.push(path.clone());
            continue;
        }
        let matches = glob::glob(&pattern)
            .map_err(|err| ReadError::Pattern(pattern.to_string(), err.to_string()))?;
        files.extend(matches.filter_map(Result::ok));
    }
    files.sort();
    files.dedup();
    Ok(files)
}

async fn read_file(path: &Path) -> Result<Vec<TargetGroup>, ReadError> {
    let error = |message: String| ReadError::File {
        path: path.display().to_string(),
        message,
    };
    let metadata = tokio::fs::metadata(path)
        .await
        .map_err(|e| error(e.to_string()))?;
    if metadata.len() > MAX_DOCUMENT_BYTES as u64 {
        return Err(error(format!(
            "{} bytes, over the {MAX_DOCUMENT_BYTES}-byte limit",
            metadata.len()
        )));
    }
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| error(e.to_string()))?;
    parse_groups(&bytes, DocumentFormat::of_path(path)).map_err(|e| error(e.to_string()))
}

async fn read_http(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Vec<TargetGroup>, ReadError> {
    let error = |message: String| ReadError::Http {
        url: llmwatch_core::redact::redact_url(url),
        message,
    };
    let mut request = client
        .get(url)
        .timeout(timeout)
        .header("X-Prometheus-Refresh-Interval-Seconds", timeout.as_secs());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let mut response = request
        .send()
        .await
        .map_err(|e| error(e.without_url().to_string()))?;
    if !response.status().is_success() {
        return Err(error(format!("answered {}", response.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| error(e.without_url().to_string()))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(error(format!(
                "answer over the {MAX_DOCUMENT_BYTES}-byte limit"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    parse_groups(&body, DocumentFormat::Json).map_err(|e| error(e.to_string()))
}

/// A group's sources and the last good groups each gave.
struct Sources {
    last_good: BTreeMap<String, Vec<TargetGroup>>,
}

impl Sources {
    /// Reads every source; failures keep their last good groups and are
    /// returned. A file_sd file that no longer exists lists nothing.
    async fn refresh(
        &mut self,
        job: &DiscoveryJob,
        client: &reqwest::Client,
    ) -> (Vec<TargetGroup>, Vec<ReadError>) {
        let mut errors = Vec::new();
        if let Some(url) = &job.config.http_url {
            let timeout = job.config.refresh_interval.min(MAX_HTTP_TIMEOUT);
            match read_http(client, url, job.token.as_deref(), timeout).await {
                Ok(groups) => {
                    self.last_good.insert(url.clone(), groups);
                }
                Err(err) => errors.push(err),
            }
        } else {
            match expand(&job.config.files) {
                Ok(files) => {
                    let keys: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
                    self.last_good.retain(|key, _| keys.contains(key));
                    for (file, key) in files.iter().zip(keys) {
                        match read_file(file).await {
                            Ok(groups) => {
                                self.last_good.insert(key, groups);
                            }
                            Err(ReadError::File { message, .. })
                                if !tokio::fs::try_exists(file).await.unwrap_or(true) =>
                            {
                                // Gone between listing and reading: nothing listed.
                                tracing::debug!(file = %key, %message, "file_sd file went away");
                                self.last_good.remove(&key);
                            }
                            Err(err) => errors.push(err),
                        }
                    }
                }
                Err(err) => errors.push(err),
            }
        }
        let groups = self.last_good.values().flatten().cloned().collect();
        (groups, errors)
    }
}

/// The targets of `groups` this instance keeps (its shard's).
pub(crate) fn this_shards(job: &DiscoveryJob, groups: &[TargetGroup]) -> Vec<TargetConfig> {
    let (targets, skipped) = targets_of(&job.config, groups);
    for skip in skipped {
        tracing::warn!(discovery = %job.config.name, address = %skip.address, reason = %skip.reason, "discovered address skipped");
    }
    targets
        .into_iter()
        .filter(|t| job.shard.is_none_or(|shard| shard.owns(&t.metrics_url())))
        .collect()
}

/// Runs one group's discovery until shutdown.
pub async fn run_discovery(
    job: DiscoveryJob,
    client: reqwest::Client,
    targets: TargetSet,
    counters: Arc<DiscoveryCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut sources = Sources {
        last_good: BTreeMap::new(),
    };
    let mut ticker = JitteredTicker::starting_now(job.config.refresh_interval);
    let mut found_before = 0u64;
    while ticker.tick(&mut shutdown).await {
        let (mut groups, mut errors) = sources.refresh(&job, &client).await;
        if !errors.is_empty() {
            // A file rewritten in place can be caught between its truncation
            // and its last write: read once more a moment later, so that the
            // rewrite shows within this refresh instead of the next.
            let again = (job.config.refresh_interval / 10).min(MAX_RETRY_AFTER);
            tokio::select! {
                _ = tokio::time::sleep(again) => {}
                _ = shutdown.changed() => return,
            }
            (groups, errors) = sources.refresh(&job, &client).await;
        }
        counters.refreshes.fetch_add(1, Ordering::Relaxed);
        for err in &errors {
            counters.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(discovery = %job.config.name, error = %err, "discovery source unreadable; keeping its last good list");
        }
        let found = this_shards(&job, &groups);
        let count = found.len() as u64;
        for clash in targets.replace_group(&job.config.name, found) {
            tracing::warn!(discovery = %job.config.name, target = %clash.name, "a discovered target's name is already taken; left out");
        }
        counters.targets.fetch_add(count, Ordering::Relaxed);
        counters.targets.fetch_sub(found_before, Ordering::Relaxed);
        found_before = count;
    }
}
