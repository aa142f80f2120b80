//! Notifiers: each runs in its own task and takes batches from a bounded
//! queue; the evaluator only ever `try_send`s, so a notifier that is down or
//! hangs costs it nothing (a full queue drops the batch, counted and logged).
//! Each request has a timeout; 5xx, 429 and connection failures are retried
//! with exponential backoff. URLs are never logged: they may hold secrets.
//!
//! Payloads: Alertmanager's `POST /api/v2/alerts` (a list of alerts with
//! `startsAt`/`endsAt`), Alertmanager's webhook v4 JSON, and a Slack
//! incoming-webhook message (`{"text": …}`).

use crate::StartError;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use llmwatch_config::{NotifierConfig, NotifierKind};
use llmwatch_core::redact::origin_only;

/// How many batches may wait for a notifier.
pub const QUEUE_CAPACITY: usize = 16;
/// Attempts per batch (the first try and three retries).
pub const MAX_ATTEMPTS: u32 = 4;
/// First retry delay; doubled each time.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// How long a shutdown waits for queued and in-flight notifications
/// (well inside the daemon's 9 s shutdown limit).
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(3);

/// One alert as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct OutAlert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `true` while firing, `false` once resolved.
    pub firing: bool,
    pub starts_at_ms: i64,
    /// For Alertmanager: the resolve time, or when a firing alert expires
    /// unless sent again.
    pub ends_at_ms: Option<i64>,
    pub value: Option<f64>,
    pub fingerprint: String,
    pub generator_url: String,
}

/// Counters of one notifier.
#[derive(Debug)]
pub struct NotifierCounters {
    pub name: String,
    pub kind: NotifierKind,
    /// Batches delivered.
    pub sent: AtomicU64,
    /// Batches given up on after every attempt.
    pub failed: AtomicU64,
    /// Failed attempts (retried or not).
    pub attempt_failures: AtomicU64,
    /// Batches dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// The evaluator's side of a notifier.
pub struct NotifierHandle {
    pub kind: NotifierKind,
    pub counters: Arc<NotifierCounters>,
    queue: mpsc::Sender<Vec<OutAlert>>,
}

impl NotifierHandle {
    /// Queues a batch without waiting; `false` when the queue is full or
    /// the notifier has stopped.
    pub fn offer(&self, batch: Vec<OutAlert>) -> bool {
        match self.queue.try_send(batch) {
            Ok(()) => true,
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    notifier = %self.counters.name,
                    "notifier queue full (it is down or slow): batch dropped"
                );
                false
            }
        }
    }
}

/// Why a batch could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("request failed: {0}")]
    Request(String),
    #[error("HTTP status {0}")]
    Status(u16),
}

impl NotifyError {
    fn retryable(&self) -> bool {
        match self {
            NotifyError::Timeout(_) | NotifyError::Request(_) => true,
            NotifyError::Status(code) => *code >= 500 || *code == 429,
        }
    }
}

/// Spawns notifier `index`'s task.
pub fn spawn(
    index: usize,
    config: &NotifierConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(NotifierHandle, JoinHandle<()>), StartError> {
    let name = config
        .name
        .clone()
        .unwrap_or_else(|| format!("{}-{index}", config.kind.as_str()));
    let url = config.resolved_url().ok_or_else(|| StartError::Notifier {
        field: format!("notifiers[{index}].url_env"),
        message: format!(
            "the environment variable {:?} is not set",
            config.url_env.as_deref().unwrap_or("")
        ),
    })?;
    let client = reqwest::Client::builder()
        .connect_timeout(config.timeout.min(Duration::from_secs(5)))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("llmwatch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| StartError::Notifier {
            field: format!("notifiers[{index}]"),
            message: format!("cannot build an HTTP client: {err}"),
        })?;
    let counters = Arc::new(NotifierCounters {
        name: name.clone(),
        kind: config.kind,
        sent: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        attempt_failures: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
    });
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    tracing::info!(notifier = %name, kind = config.kind.as_str(), url = %origin_only(&url), "notifier");
    let worker = Worker {
        client,
        url,
        kind: config.kind,
        timeout: config.timeout,
        counters: counters.clone(),
    };
    let task = tokio::spawn(worker.run(rx, shutdown));
    Ok((
        NotifierHandle {
            kind: config.kind,
            counters,
            queue: tx,
        },
        task,
    ))
}

struct Worker {
    client: reqwest::Client,
    url: String,
    kind: NotifierKind,
    timeout: Duration,
    counters: Arc<NotifierCounters>,
}

impl Worker {
    /// Sends batches until the evaluator drops its queue handle (it does when
    /// it stops), so what it queued before a shutdown is still sent: a
    /// restarted daemon resumes a firing alert as already notified, and a
    /// batch dropped here would never be sent. Once shutdown is signalled the
    /// rest (the batch in flight included) gets at most [`SHUTDOWN_DRAIN`].
    async fn run(
        self,
        mut batches: mpsc::Receiver<Vec<OutAlert>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut drain_until: Option<Instant> = None;
        loop {
            let next = match drain_until {
                None => tokio::select! {
                    batch = batches.recv() => batch,
                    _ = shutdown.changed() => {
                        drain_until = Some(Instant::now() + SHUTDOWN_DRAIN);
                        continue;
                    }
                },
                Some(deadline) => match tokio::time::timeout_at(deadline, batches.recv()).await {
                    Ok(batch) => batch,
                    Err(_) => return self.give_up_on_rest(&mut batches, 0),
                },
            };
            let Some(batch) = next else { return };
            let delivery = self.deliver(&batch);
            tokio::pin!(delivery);
            if drain_until.is_none() {
                tokio::select! {
                    _ = &mut delivery => continue,
                    _ = shutdown.changed() => drain_until = Some(Instant::now() + SHUTDOWN_DRAIN),
                }
            }
            let Some(deadline) = drain_until else {
                continue;
            };
            if tokio::time::timeout_at(deadline, &mut delivery)
                .await
                .is_err()
            {
                return self.give_up_on_rest(&mut batches, 1);
            }
        }
    }

    /// Past the shutdown drain: counts what is left as failed, and says so.
    fn give_up_on_rest(&self, batches: &mut mpsc::Receiver<Vec<OutAlert>>, in_flight: u64) {
        batches.close();
        let mut left = in_flight;
        while batches.try_recv().is_ok() {
            left += 1;
        }
        if left > 0 {
            self.counters.failed.fetch_add(left, Ordering::Relaxed);
            tracing::warn!(
                notifier = %self.counters.name,
                batches = left,
                limit = ?SHUTDOWN_DRAIN,
                "shutdown: notifications not sent in time"
            );
        }
    }

    async fn deliver(&self, batch: &[OutAlert]) {
        let (url, body) = match self.kind {
            NotifierKind::Alertmanager => (
                llmwatch_config::join_url(self.url.trim_end_matches('/'), "/api/v2/alerts"),
                alertmanager_payload(batch),
            ),
            NotifierKind::Webhook => (self.url.clone(), webhook_payload(batch)),
            NotifierKind::Slack => (self.url.clone(), slack_payload(batch)),
        };
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=MAX_ATTEMPTS {
            match self.post(&url, &body).await {
                Ok(()) => {
                    self.counters.sent.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(notifier = %self.counters.name, alerts = batch.len(), "notified");
                    return;
                }
                Err(err) => {
                    self.counters
                        .attempt_failures
                        .fetch_add(1, Ordering::Relaxed);
                    let last = attempt == MAX_ATTEMPTS || !err.retryable();
                    tracing::warn!(
                        notifier = %self.counters.name,
                        attempt,
                        error = %err,
                        giving_up = last,
                        "notification failed"
                    );
                    if last {
                        self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    async fn post(&self, url: &str, body: &Value) -> Result<(), NotifyError> {
        let send = async {
            let response = self
                .client
                .post(url)
                .json(body)
                .send()
                .await
                // without_url: the URL may hold a secret.
                .map_err(|err| NotifyError::Request(err.without_url().to_string()))?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(NotifyError::Status(status.as_u16()))
            }
        };
        match tokio::time::timeout(self.timeout, send).await {
            Ok(result) => result,
            Err(_) => Err(NotifyError::Timeout(self.timeout)),
        }
    }
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339_ms(ms: i64) -> String {
    let time = if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH
    };
    humantime::format_rfc3339_millis(time).to_string()
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(crate::clock::now()).to_string()
}

/// Alertmanager's `POST /api/v2/alerts` body.
pub fn alertmanager_payload(batch: &[OutAlert]) -> Value {
    Value::Array(
        batch
            .iter()
            .map(|alert| {
                let mut out = json!({
                    "labels": alert.labels,
                    "annotations": alert.annotations,
                    "startsAt": rfc3339_ms(alert.starts_at_ms),
                    "generatorURL": alert.generator_url,
                });
                if let Some(ends) = alert.ends_at_ms {
                    out["endsAt"] = Value::String(rfc3339_ms(ends));
                }
                out
            })
            .collect(),
    )
}

fn common(maps: Vec<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    let Some((first, rest)) = maps.split_first() else {
        return BTreeMap::new();
    };
    first
        .iter()
        .filter(|(k, v)| rest.iter().all(|m| m.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Alertmanager's webhook v4 JSON (as its `webhook_config` receiver sends).
pub fn webhook_payload(batch: &[OutAlert]) -> Value {
    let common_labels = common(batch.iter().map(|a| &a.labels).collect());
    let common_annotations = common(batch.iter().map(|a| &a.annotations).collect());
    let group_labels: BTreeMap<String, String> = common_labels
        .iter()
        .filter(|(k, _)| k.as_str() == "alertname")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let firing = batch.iter().any(|a| a.firing);
    let group_key = format!(
        "{{}}:{{{}}}",
        group_labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    json!({
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": if firing { "firing" } else { "resolved" },
        "receiver": "llmwatch",
        "groupLabels": group_labels,
        "commonLabels": common_labels,
        "commonAnnotations": common_annotations,
        "externalURL": batch.first().map(|a| a.generator_url.as_str()).unwrap_or(""),
        "alerts": batch.iter().map(|alert| json!({
            "status": if alert.firing { "firing" } else { "resolved" },
            "labels": alert.labels,
            "annotations": alert.annotations,
            "startsAt": rfc3339_ms(alert.starts_at_ms),
            "endsAt": match (alert.firing, alert.ends_at_ms) {
                (false, Some(ends)) => rfc3339_ms(ends),
                _ => "0001-01-01T00:00:00Z".to_string(),
            },
            "generatorURL": alert.generator_url,
            "fingerprint": alert.fingerprint,
        })).collect::<Vec<_>>(),
    })
}

/// A Slack incoming-webhook message: one line per alert.
pub fn slack_payload(batch: &[OutAlert]) -> Value {
    let lines: Vec<String> = batch
        .iter()
        .map(|alert| {
            let name = alert
                .labels
                .get("alertname")
                .map(String::as_str)
                .unwrap_or("alert");
            let target = alert.labels.get("target").map(String::as_str).unwrap_or("");
            let state = if alert.firing { "FIRING" } else { "RESOLVED" };
            let value = alert
                .value
                .map(|v| format!(" (value {})", llmwatch_core::alerts::format_value(v)))
                .unwrap_or_default();
            let summary = alert
                .annotations
                .get("summary")
                .or_else(|| alert.annotations.get("description"))
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            format!("[{state}] {name} on {target}{value}{summary}")
        })
        .collect();
    json!({ "text": lines.join("\n"), "ts": now_rfc3339() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(firing: bool) -> OutAlert {
        OutAlert {
            labels: [("alertname", "ttft"), ("target", "a")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: [("summary".to_string(), "slow".to_string())]
                .into_iter()
                .collect(),
            firing,
            starts_at_ms: 1_700_000_000_000,
            ends_at_ms: Some(1_700_000_060_000),
            value: Some(1.5),
            fingerprint: "abc".into(),
            generator_url: "http://127.0.0.1:9477/alerts".into(),
        }
    }

    #[test]
    fn alertmanager_shape() {
        let body = alertmanager_payload(&[alert(true)]);
        assert_eq!(body[0]["labels"]["alertname"], "ttft");
        assert_eq!(body[0]["startsAt"], "2023-11-14T22:13:20.000Z");
        assert_eq!(body[0]["endsAt"], "2023-11-14T22:14:20.000Z");
    }

    #[test]
    fn webhook_v4_shape() {
        let body = webhook_payload(&[alert(true), alert(false)]);
        assert_eq!(body["version"], "4");
        assert_eq!(body["status"], "firing");
        assert_eq!(body["groupLabels"]["alertname"], "ttft");
        assert_eq!(body["commonLabels"]["target"], "a");
        assert_eq!(body["groupKey"], "{}:{alertname=\"ttft\"}");
        assert_eq!(body["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(body["alerts"][1]["status"], "resolved");
        assert_eq!(body["alerts"][1]["endsAt"], "2023-11-14T22:14:20.000Z");
    }

    #[test]
    fn slack_text() {
        let body = slack_payload(&[alert(true)]);
        assert_eq!(body["text"], "[FIRING] ttft on a (value 1.5): slow");
    }

    #[test]
    fn retry_only_what_may_pass() {
        assert!(NotifyError::Status(503).retryable());
        assert!(NotifyError::Status(429).retryable());
        assert!(!NotifyError::Status(400).retryable());
        assert!(NotifyError::Timeout(Duration::from_secs(1)).retryable());
    }
}
