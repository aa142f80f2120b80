//! kubernetes_sd's settings: `[discovery.kubernetes]` and where the API
//! server, token and CA are (in a cluster, from the environment and the
//! service account). What the API answers becomes targets in
//! [`crate::kubernetes_objects`]; talking to the API server is the engine's
//! job (`llmwatch_engine::sources::kubernetes`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::fields::{check_http_url, duration};

/// In-cluster service-account files (the kubelet mounts them in every pod).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What is discovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KubernetesRole {
    /// One target per declared container port of every pod with an IP.
    Pod,
    /// One target per address and port of every `Endpoints` object.
    Endpoints,
    /// One target per endpoint address and port of every `EndpointSlice`.
    Endpointslice,
}

impl KubernetesRole {
    /// The collection's path: in `namespace`, or cluster-wide.
    pub fn path(self, namespace: Option<&str>) -> String {
        let (prefix, resource) = match self {
            KubernetesRole::Pod => ("/api/v1", "pods"),
            KubernetesRole::Endpoints => ("/api/v1", "endpoints"),
            KubernetesRole::Endpointslice => ("/apis/discovery.k8s.io/v1", "endpointslices"),
        };
        match namespace {
            Some(ns) => format!("{prefix}/namespaces/{ns}/{resource}"),
            None => format!("{prefix}/{resource}"),
        }
    }
}

/// `[discovery.kubernetes]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSdConfig {
    pub role: KubernetesRole,
    /// Namespaces to watch; empty: every namespace (cluster-wide list).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A Kubernetes label selector (`app=vllm,tier!=canary`), applied by
    /// the API server.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// The API server; unset: in-cluster, from `KUBERNETES_SERVICE_HOST`
    /// and `KUBERNETES_SERVICE_PORT`, over https.
    #[serde(default)]
    pub api_server: Option<String>,
    /// The bearer token file (re-read at each list and watch: projected
    /// tokens rotate); unset: the pod's service-account token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The CA bundle that signs the API server's certificate (https only);
    /// unset: the service account's `ca.crt`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// How long the API server holds one watch open before it ends it
    /// (`timeoutSeconds`); the watch then resumes from the last version.
    #[serde(default = "default_watch_timeout", deserialize_with = "duration")]
    pub watch_timeout: Duration,
}

fn default_watch_timeout() -> Duration {
    Duration::from_secs(300)
}

/// Where and how to reach the API server, resolved at start.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiConnection {
    pub api_server: String,
    pub token_file: PathBuf,
    /// `None` over plain http (tests, `kubectl proxy`).
    pub ca_file: Option<PathBuf>,
}

impl KubernetesSdConfig {
    /// Checks what can be checked before start; errors name the field
    /// (relative to `[discovery.kubernetes]`).
    pub fn check(&self) -> Result<(), (String, String)> {
        for ns in &self.namespaces {
            if !is_dns_label(ns) {
                return Err((
                    "namespaces".into(),
                    format!("{ns:?} is not a namespace name (lowercase letters, digits, '-', at most 63)"),
                ));
            }
        }
        if let Some(selector) = &self.label_selector {
            if selector.trim().is_empty() || selector.chars().any(char::is_control) {
                return Err((
                    "label_selector".into(),
                    format!("{selector:?} is not a label selector"),
                ));
            }
        }
        if let Some(url) = &self.api_server {
            check_http_url(url).map_err(|m| ("api_server".into(), m))?;
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.watch_timeout) {
            return Err(("watch_timeout".into(), "must be between 1s and 1h".into()));
        }
        Ok(())
    }

    /// The connection: `api_server` as given, or in-cluster from the
    /// environment `env` reads; files default to the service account's.
    pub fn connection(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ApiConnection, String> {
        let api_server = match &self.api_server {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => {
                let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty());
                let port = env("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty());
                let (Some(host), Some(port)) = (host, port) else {
                    return Err(
                        "no api_server given and KUBERNETES_SERVICE_HOST/PORT are unset: \
                                not running in a cluster"
                            .into(),
                    );
                };
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                format!("https://{host}:{port}")
            }
        };
        let dir = PathBuf::from(SERVICE_ACCOUNT_DIR);
        let https = api_server.starts_with("https://");
        Ok(ApiConnection {
            token_file: self.token_file.clone().unwrap_or_else(|| dir.join("token")),
            ca_file: https.then(|| self.ca_file.clone().unwrap_or_else(|| dir.join("ca.crt"))),
            api_server,
        })
    }
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cluster_settings_come_from_the_environment() {
        let sd: KubernetesSdConfig = toml::from_str("role = \"pod\"\n").expect("parses");
        let env = |var: &str| match var {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        let c = sd.connection(env).expect("in cluster");
        assert_eq!(c.api_server, "https://[fd00::1]:443");
        assert_eq!(
            c.token_file,
            PathBuf::from(SERVICE_ACCOUNT_DIR).join("token")
        );
        assert_eq!(
            c.ca_file,
            Some(PathBuf::from(SERVICE_ACCOUNT_DIR).join("ca.crt"))
        );
        let err = sd.connection(|_| None).expect_err("not in a cluster");
        assert!(err.contains("KUBERNETES_SERVICE_HOST"), "{err}");
        let bad: KubernetesSdConfig =
            toml::from_str("role = \"pod\"\nnamespaces = [\"ML\"]\n").expect("parses");
        assert_eq!(bad.check().expect_err("refused").0, "namespaces");
        assert!(toml::from_str::<KubernetesSdConfig>("role = \"node\"\n").is_err());
    }
}
