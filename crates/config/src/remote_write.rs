//! `[[remote_write]]`: where every stored sample is sent (Prometheus
//! remote-write 1.0), with its secret taken from the environment, and the
//! checks that name the field. The secret itself is never kept in the
//! config (only the variable's name), so printing a config cannot leak it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::fields::{check_http_url, check_name, duration, optional_duration};

/// One remote-write endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// Names the endpoint in logs, metrics and its cursor.
    pub name: String,
    /// E.g. `http://prometheus:9090/api/v1/write`. Credentials in the URL
    /// are refused: use the `_env` fields.
    pub url: String,
    /// Environment variable holding a bearer token.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Basic auth: the user name, with `password_env`.
    #[serde(default)]
    pub basic_auth_username: Option<String>,
    /// Environment variable holding the basic-auth password.
    #[serde(default)]
    pub basic_auth_password_env: Option<String>,
    /// Extra request headers (e.g. `X-Scope-OrgID` for Mimir/Cortex).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Per request.
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub queue: RemoteWriteQueue,
}

/// `[remote_write.queue]`: batching and retry bounds (Prometheus'
/// `queue_config` names where they mean the same).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteQueue {
    /// Samples in one request.
    #[serde(default = "default_max_samples_per_send")]
    pub max_samples_per_send: usize,
    /// First retry delay; doubled per failure up to `max_backoff`.
    #[serde(default = "default_min_backoff", deserialize_with = "duration")]
    pub min_backoff: Duration,
    #[serde(default = "default_max_backoff", deserialize_with = "duration")]
    pub max_backoff: Duration,
    /// How often the store is read for new samples once caught up.
    #[serde(default = "default_poll_interval", deserialize_with = "duration")]
    pub poll_interval: Duration,
    /// How far before the daemon's start a new endpoint (no cursor yet)
    /// starts: "0s" (default) sends from that start on; at most the
    /// retention is there.
    #[serde(default, deserialize_with = "optional_duration")]
    pub backfill: Option<Duration>,
}

impl Default for RemoteWriteQueue {
    fn default() -> Self {
        RemoteWriteQueue {
            max_samples_per_send: default_max_samples_per_send(),
            min_backoff: default_min_backoff(),
            max_backoff: default_max_backoff(),
            poll_interval: default_poll_interval(),
            backfill: None,
        }
    }
}

fn default_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_samples_per_send() -> usize {
    2000
}
fn default_min_backoff() -> Duration {
    Duration::from_millis(30)
}
fn default_max_backoff() -> Duration {
    Duration::from_secs(5)
}
fn default_poll_interval() -> Duration {
    Duration::from_secs(1)
}

/// How a request authenticates, with the secret read from the environment.
/// `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum RemoteWriteAuth {
    Bearer(String),
    Basic { username: String, password: String },
}

impl std::fmt::Debug for RemoteWriteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteWriteAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            RemoteWriteAuth::Basic { username, .. } => {
                write!(
                    f,
                    "Basic {{ username: {username:?}, password: <redacted> }}"
                )
            }
        }
    }
}

/// Headers the sender sets itself; a config may not override them.
const RESERVED_HEADERS: [&str; 6] = [
    "authorization",
    "content-encoding",
    "content-type",
    "content-length",
    "user-agent",
    "x-prometheus-remote-write-version",
];

/// The most samples one request may carry (Prometheus' own bound order).
const MAX_SAMPLES_PER_SEND: usize = 100_000;

impl RemoteWriteConfig {
    /// The auth, its secret read from the environment now. A named variable
    /// that is unset or empty is an error naming the field (fail closed:
    /// never send unauthenticated what was meant to be authenticated).
    pub fn auth(&self) -> Result<Option<RemoteWriteAuth>, (String, String)> {
        let read = |field: &str, var: &str| {
            match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => Ok(value),
            _ => Err((
                field.to_string(),
                format!("the environment variable {var} is unset or empty; refusing to send without the secret it should hold"),
            )),
        }
        };
        match (&self.bearer_token_env, &self.basic_auth_password_env) {
            (Some(var), None) => Ok(Some(RemoteWriteAuth::Bearer(read(
                "bearer_token_env",
                var,
            )?))),
            (None, Some(var)) => Ok(Some(RemoteWriteAuth::Basic {
                username: self.basic_auth_username.clone().unwrap_or_default(),
                password: read("basic_auth_password_env", var)?,
            })),
            (None, None) => Ok(None),
            (Some(_), Some(_)) => Err((
                "bearer_token_env".to_string(),
                "set either bearer_token_env or basic_auth_password_env, not both".to_string(),
            )),
        }
    }
}

/// `[[remote_write]]`: unique names, a credential-free URL, the secret's
/// variable set, headers that are valid and not the sender's own, bounds.
pub(crate) fn validate_remote_write(
    endpoints: &[RemoteWriteConfig],
) -> Result<(), (String, String)> {
    let mut names = std::collections::HashSet::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        let field = |name: &str| format!("remote_write[{i}].{name}");
        check_name(&endpoint.name).map_err(|m| (field("name"), m))?;
        if !names.insert(endpoint.name.as_str()) {
            return Err((
                field("name"),
                format!("duplicate name {:?}: names must be unique", endpoint.name),
            ));
        }
        // The URL is never echoed: it may hold a secret.
        check_http_url(&endpoint.url).map_err(|_| {
            (
                field("url"),
                "must be an http:// or https:// URL".to_string(),
            )
        })?;
        if url::Url::parse(&endpoint.url)
            .is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
        {
            return Err((
                field("url"),
                "holds credentials: use basic_auth_username and basic_auth_password_env"
                    .to_string(),
            ));
        }
        if endpoint.basic_auth_username.is_some() != endpoint.basic_auth_password_env.is_some() {
            return Err((
                field("basic_auth_password_env"),
                "basic auth needs both basic_auth_username and basic_auth_password_env".to_string(),
            ));
        }
        endpoint.auth().map_err(|(name, m)| (field(&name), m))?;
        for name in endpoint.headers.keys() {
            let lower = name.to_ascii_lowercase();
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token || RESERVED_HEADERS.contains(&lower.as_str()) {
                return Err((
                    field(&format!("headers.{name}")),
                    "not a header a config may set (invalid name, or one the sender sets itself)"
                        .to_string(),
                ));
            }
        }
        if endpoint
            .headers
            .values()
            .any(|v| v.bytes().any(|b| b < 0x20 && b != b'\t'))
        {
            return Err((
                field("headers"),
                "a header value holds a control character".to_string(),
            ));
        }
        if endpoint.timeout.is_zero() {
            return Err((field("timeout"), "must be longer than zero".to_string()));
        }
        let queue = &endpoint.queue;
        if !(1..=MAX_SAMPLES_PER_SEND).contains(&queue.max_samples_per_send) {
            return Err((
                field("queue.max_samples_per_send"),
                format!("must be 1 to {MAX_SAMPLES_PER_SEND}"),
            ));
        }
        if queue.min_backoff.is_zero() || queue.max_backoff < queue.min_backoff {
            return Err((
                field("queue.max_backoff"),
                "backoffs must be positive, max_backoff at least min_backoff".to_string(),
            ));
        }
        if queue.poll_interval.is_zero() {
            return Err((
                field("queue.poll_interval"),
                "must be longer than zero".to_string(),
            ));
        }
    }
    Ok(())
}
