//! kubernetes_sd, the I/O part: per namespace (or cluster-wide), list the
//! role's objects (in pages), then watch from the list's
//! `resourceVersion`; each event updates the object set and the group's
//! targets at once. A watch the server ends (its `timeoutSeconds`) resumes
//! from the last version seen (bookmarks included); `410 Gone` (as an
//! event or a status) lists again. Every call has a timeout and a size
//! limit; a failure keeps the last known objects, is counted and logged,
//! and is retried after the group's `refresh_interval`. The bearer token
//! file is re-read for every call (projected service-account tokens
//! rotate); https trusts only the configured CA bundle.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llmwatch_config::kubernetes::{ApiConnection, KubernetesSdConfig};
use llmwatch_config::kubernetes_objects::{parse_list, KubeObject, KubernetesError, ObjectSet};
use tokio::sync::watch;

use super::discovery::{this_shards, DiscoveryCounters, DiscoveryJob};
use crate::targets::TargetSet;

/// Objects asked for per list page.
const PAGE_LIMIT: u32 = 500;
/// The largest list page read.
pub const MAX_PAGE_BYTES: usize = 16 << 20;
/// Pages followed per list before giving up (500 × 200 objects).
const MAX_PAGES: usize = 200;
/// The largest watch event (one line) read.
pub const MAX_EVENT_BYTES: usize = 4 << 20;
/// The largest token file read.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// A list page must answer within this.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// A watch may run this much past its `timeoutSeconds` before it is cut.
const WATCH_GRACE: Duration = Duration::from_secs(15);

/// Why a list or watch failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{0}")]
    Api(#[from] KubernetesError),
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("token file {path}: {message}")]
    Token { path: String, message: String },
    #[error("ca_file {path}: {message}")]
    CaFile { path: String, message: String },
    #[error("the API client cannot be built: {0}")]
    Client(String),
}

impl KubeError {
    fn is_gone(&self) -> bool {
        matches!(self, KubeError::Api(KubernetesError::Gone(_)))
    }
}

/// The HTTP client for one API server: the CA bundle as the only roots.
pub fn api_client(connection: &ApiConnection) -> Result<reqwest::Client, KubeError> {
    let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    if let Some(ca) = &connection.ca_file {
        let ca_error = |message: String| KubeError::CaFile {
            path: ca.display().to_string(),
            message,
        };
        let pem = std::fs::read(ca).map_err(|e| ca_error(e.to_string()))?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
        builder = builder.tls_certs_only(certs);
    }
    builder
        .build()
        .map_err(|e| KubeError::Client(e.to_string()))
}

/// What every namespace's loop shares: the objects each knows, and how to
/// turn all of them into the group's targets.
struct Shared {
    job: DiscoveryJob,
    targets: TargetSet,
    counters: Arc<DiscoveryCounters>,
    state: Mutex<SharedState>,
}

struct SharedState {
    sets: BTreeMap<String, ObjectSet>,
    found_before: u64,
}

impl Shared {
    /// Recomputes the group's targets from every namespace's objects.
    fn publish(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let groups: Vec<_> = state.sets.values().flat_map(ObjectSet::groups).collect();
        let found = this_shards(&self.job, &groups);
        let count = found.len() as u64;
        for clash in self.targets.replace_group(&self.job.config.name, found) {
            tracing::warn!(discovery = %self.job.config.name, target = %clash.name, "a discovered target's name is already taken; left out");
        }
        self.counters.targets.fetch_add(count, Ordering::Relaxed);
        self.counters
            .targets
            .fetch_sub(state.found_before, Ordering::Relaxed);
        state.found_before = count;
    }

    fn with_set<T>(&self, key: &str, f: impl FnOnce(&mut ObjectSet) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let role = self.sd().role;
        f(state
            .sets
            .entry(key.to_string())
            .or_insert_with(|| ObjectSet::new(role)))
    }

    fn sd(&self) -> &KubernetesSdConfig {
        self.job
            .config
            .kubernetes
            .as_ref()
            .expect("a kubernetes_sd job has its settings")
    }

    fn failed(&self, namespace: Option<&str>, err: &KubeError) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(discovery = %self.job.config.name, namespace = namespace.unwrap_or("(all)"), error = %err, "kubernetes_sd call failed; keeping the last known objects");
    }
}

/// Runs one kubernetes_sd group until shutdown.
pub async fn run_kubernetes_discovery(
    job: DiscoveryJob,
    connection: ApiConnection,
    targets: TargetSet,
    counters: Arc<DiscoveryCounters>,
    shutdown: watch::Receiver<bool>,
) {
    let Some(sd) = job.config.kubernetes.clone() else {
        return;
    };
    let client = loop {
        match api_client(&connection) {
            Ok(client) => break client,
            Err(err) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(discovery = %job.config.name, error = %err, "kubernetes_sd cannot build its client");
                if !pause(job.config.refresh_interval, &mut shutdown.clone()).await {
                    return;
                }
            }
        }
    };
    let shared = Arc::new(Shared {
        job,
        targets,
        counters,
        state: Mutex::new(SharedState {
            sets: BTreeMap::new(),
            found_before: 0,
        }),
    });
    let namespaces: Vec<Option<String>> = if sd.namespaces.is_empty() {
        vec![None]
    } else {
        sd.namespaces.iter().cloned().map(Some).collect()
    };
    // Dropped with this task (the daemon aborting it): the loops end too.
    let mut loops = tokio::task::JoinSet::new();
    for namespace in namespaces {
        let api = Api {
            client: client.clone(),
            connection: connection.clone(),
            sd: sd.clone(),
            namespace,
        };
        loops.spawn(namespace_loop(api, shared.clone(), shutdown.clone()));
    }
    while loops.join_next().await.is_some() {}
}

/// Waits `delay`; false when shutdown came first.
async fn pause(delay: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        _ = shutdown.changed() => false,
    }
}

/// One namespace's calls.
struct Api {
    client: reqwest::Client,
    connection: ApiConnection,
    sd: KubernetesSdConfig,
    namespace: Option<String>,
}

impl Api {
    fn key(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn url(&self, query: &[(&str, String)]) -> String {
        let base = format!(
            "{}{}",
            self.connection.api_server,
            self.sd.role.path(self.namespace.as_deref())
        );
        let mut url = match url::Url::parse(&base) {
            Ok(url) => url,
            Err(_) => return base,
        };
        {
            let mut pairs = url.query_pairs_mut();
            if let Some(selector) = &self.sd.label_selector {
                pairs.append_pair("labelSelector", selector);
            }
            for (name, value) in query {
                pairs.append_pair(name, value);
            }
        }
        url.to_string()
    }

    async fn token(&self) -> Result<String, KubeError> {
        let path = &self.connection.token_file;
        let error = |message: String| KubeError::Token {
            path: path.display().to_string(),
            message,
        };
        let meta = tokio::fs::metadata(path)
            .await
            .map_err(|e| error(e.to_string()))?;
        if meta.len() > MAX_TOKEN_BYTES {
            return Err(error(format!("over {MAX_TOKEN_BYTES} bytes")));
        }
        let token = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| error(e.to_string()))?;
        Ok(token.trim().to_string())
    }

    async fn get(&self, url: &str, timeout: Duration) -> Result<reqwest::Response, KubeError> {
        let token = self.token().await?;
        let error = |message: String| KubeError::Http {
            url: llmwatch_core::redact::redact_url(url),
            message,
        };
        let response = self
            .client
            .get(url)
            .timeout(timeout)
            .bearer_auth(token)
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| error(e.without_url().to_string()))?;
        match response.status().as_u16() {
            200..=299 => Ok(response),
            410 => Err(KubernetesError::Gone(format!("{url} answered 410")).into()),
            status => Err(error(format!("answered {status}"))),
        }
    }

    /// Every page of the list, as one object set's contents.
    async fn list(&self) -> Result<(Vec<KubeObject>, String), KubeError> {
        let mut objects = Vec::new();
        let mut continue_token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![("limit", PAGE_LIMIT.to_string())];
            if let Some(token) = &continue_token {
                query.push(("continue", token.clone()));
            }
            let url = self.url(&query);
            let mut response = self.get(&url, LIST_TIMEOUT).await?;
            let mut body = Vec::new();
            while let Some(chunk) = next_chunk(&mut response, &url).await? {
                if body.len() + chunk.len() > MAX_PAGE_BYTES {
                    return Err(KubeError::Http {
                        url: llmwatch_core::redact::redact_url(&url),
                        message: format!("list page over the {MAX_PAGE_BYTES}-byte limit"),
                    });
                }
                body.extend_from_slice(&chunk);
            }
            let page = parse_list(self.sd.role, &body)?;
            objects.extend(page.objects);
            match page.continue_token {
                Some(token) => continue_token = Some(token),
                None => return Ok((objects, page.resource_version)),
            }
        }
        Err(KubeError::Http {
            url: llmwatch_core::redact::redact_url(&self.url(&[])),
            message: format!("list longer than {MAX_PAGES} pages"),
        })
    }

    /// One watch from `shared`'s version until the server ends it; every
    /// event is applied (and published) as it arrives.
    async fn watch(&self, shared: &Shared) -> Result<(), KubeError> {
        let version = shared.with_set(self.key(), |set| set.resource_version.clone());
        let url = self.url(&[
            ("watch", "1".to_string()),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true".to_string()),
            (
                "timeoutSeconds",
                self.sd.watch_timeout.as_secs().to_string(),
            ),
        ]);
        let mut response = self.get(&url, self.sd.watch_timeout + WATCH_GRACE).await?;
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = next_chunk(&mut response, &url).await? {
            pending.extend_from_slice(&chunk);
            let mut changed = false;
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                changed |= shared.with_set(self.key(), |set| set.apply(&line))?;
            }
            if pending.len() > MAX_EVENT_BYTES {
                return Err(KubeError::Http {
                    url: llmwatch_core::redact::redact_url(&url),
                    message: format!("watch event over the {MAX_EVENT_BYTES}-byte limit"),
                });
            }
            if changed {
                shared.publish();
            }
        }
        Ok(())
    }
}

async fn next_chunk(
    response: &mut reqwest::Response,
    url: &str,
) -> Result<Option<bytes::Bytes>, KubeError> {
    response.chunk().await.map_err(|e| KubeError::Http {
        url: llmwatch_core::redact::redact_url(url),
        message: e.without_url().to_string(),
    })
}

/// List, then watch until 410 Gone, again and again, until shutdown.
async fn namespace_loop(api: Api, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let retry = shared.job.config.refresh_interval;
    loop {
        let listed = tokio::select! {
            listed = api.list() => listed,
            _ = shutdown.changed() => return,
        };
        match listed {
            Ok((objects, version)) => {
                shared.counters.refreshes.fetch_add(1, Ordering::Relaxed);
                shared.with_set(api.key(), |set| set.replace(objects, version));
                shared.publish();
            }
            Err(err) => {
                shared.failed(api.namespace.as_deref(), &err);
                if !pause(retry, &mut shutdown).await {
                    return;
                }
                continue;
            }
        }
        loop {
            let watched = tokio::select! {
                watched = api.watch(&shared) => watched,
                _ = shutdown.changed() => return,
            };
            match watched {
                // The server ended the watch: resume from the last version.
                Ok(()) => {}
                Err(err) if err.is_gone() => {
                    tracing::debug!(discovery = %shared.job.config.name, error = %err, "watch version expired; listing again");
                    break;
                }
                Err(err) => {
                    shared.failed(api.namespace.as_deref(), &err);
                    if !pause(retry, &mut shutdown).await {
                        return;
                    }
                }
            }
        }
    }
}
