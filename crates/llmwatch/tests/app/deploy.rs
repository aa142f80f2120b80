//! The shipped deployment files are safe as shipped: every config parses,
//! one that listens beyond loopback names a token (so the daemon refuses to
//! start without it), the image runs as an unprivileged user and its build
//! context leaves the build tree and databases out.

use std::path::{Path, PathBuf};

use llmwatch_config::Config;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn shipped_configs_parse_and_a_network_listener_needs_a_token() {
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("deploy")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let config = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if !config.server.listen.ip().is_loopback() {
            assert!(
                config.server.token.is_some() || config.server.token_env.is_some(),
                "{} listens on {} without a token",
                path.display(),
                config.server.listen
            );
            assert!(!config.server.allow_unauthenticated, "{}", path.display());
            // Without the variable it names, the daemon would not start.
            let err = config.access_token().expect_err("fails closed");
            assert!(err.to_string().contains("token"), "{err}");
        }
        checked += 1;
    }
    assert!(checked >= 2, "deploy/ has its configs");
}

#[test]
fn the_image_runs_unprivileged_from_a_clean_context() {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let user = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("USER "))
        .next_back()
        .expect("a USER line");
    let uid = user.split(':').next().unwrap_or("");
    assert!(uid != "0" && uid != "root", "runs as {user}");
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    for entry in ["target/", "*.db", ".git/"] {
        assert!(
            ignore.lines().any(|l| l.trim().ends_with(entry)),
            ".dockerignore lacks {entry}"
        );
    }
    let compose = std::fs::read_to_string(repo().join("docker-compose.yml")).unwrap();
    assert!(
        compose.contains("LLMWATCH_TOKEN"),
        "compose passes the token"
    );
    assert!(Path::new(&repo().join("deploy/compose.toml")).exists());
}

/// Every YAML document of `text` (kubectl's `---` separated stream).
fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|doc: &serde_json::Value| !doc.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// `kubernetes-validate --strict` (PyPI; `.ci/run` installs it) on `paths`:
/// every built-in kind against the Kubernetes API's schema, unknown fields
/// refused. The ServiceMonitor (a CRD) is only warned about: it is checked
/// by [`check_deployment_set`] instead.
fn kubernetes_validate(paths: &[PathBuf]) {
    let output = std::process::Command::new("kubernetes-validate")
        .arg("--strict")
        .arg("--quiet")
        .args(paths)
        .output()
        .expect("kubernetes-validate runs (pip install kubernetes-validate)");
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(!said.contains("ERROR"), "{said}");
}

/// What both the plain manifests and the chart must hold: llmwatch runs
/// non-root on a read-only root filesystem, writes only to its database
/// volume and an emptyDir /tmp, is probed on /healthz, takes its token from
/// the Secret, and its config (from the ConfigMap) loads and discovers
/// targets with kubernetes_sd.
fn check_deployment_set(docs: &[serde_json::Value]) {
    let deployment = of_kind(docs, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 1, "SQLite has one writer");
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(pod["securityContext"]["runAsUser"].as_u64() > Some(0));
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["path"], "/healthz", "{probe}");
    }
    let volumes = pod["volumes"].as_array().expect("volumes");
    for mount in container["volumeMounts"].as_array().expect("mounts") {
        if mount["readOnly"] == true {
            continue;
        }
        let volume = volumes
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("the mount's volume");
        let writable_where_needed = match mount["mountPath"].as_str() {
            Some("/var/lib/llmwatch") => volume["persistentVolumeClaim"].is_object(),
            Some("/tmp") => volume["emptyDir"].is_object(),
            _ => false,
        };
        assert!(writable_where_needed, "writable mount {mount}");
    }
    let token = &container["env"][0];
    assert_eq!(token["name"], "LLMWATCH_TOKEN");
    let secret_name = &token["valueFrom"]["secretKeyRef"]["name"];
    let secret = of_kind(docs, "Secret");
    assert_eq!(&secret[0]["metadata"]["name"], secret_name);
    assert_eq!(
        secret[0]["stringData"]["token"], "",
        "shipped without a token"
    );
    let config_map = of_kind(docs, "ConfigMap")[0];
    let toml = config_map["data"]["llmwatch.toml"]
        .as_str()
        .expect("llmwatch.toml");
    let config = Config::parse(toml, Path::new("llmwatch.toml"))
        .unwrap_or_else(|e| panic!("the ConfigMap's config: {e}"));
    assert_eq!(config.server.token_env.as_deref(), Some("LLMWATCH_TOKEN"));
    assert!(config.server.database.starts_with("/var/lib/llmwatch"));
    let sd = config.discovery[0]
        .kubernetes
        .as_ref()
        .expect("kubernetes_sd");
    // In a pod, the service account's files and the API server's address.
    let in_cluster = sd
        .connection(|var| (var.starts_with("KUBERNETES_SERVICE_")).then(|| "443".into()))
        .expect("in-cluster settings");
    assert!(in_cluster
        .token_file
        .starts_with("/var/run/secrets/kubernetes.io/serviceaccount"));
    let rules = of_kind(docs, "ClusterRole")[0]["rules"].to_string();
    assert!(rules.contains("pods") && rules.contains("watch"), "{rules}");
    let service = of_kind(docs, "Service")[0];
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    if let Some(monitor) = of_kind(docs, "ServiceMonitor").first() {
        let endpoint = &monitor["spec"]["endpoints"][0];
        assert_eq!(endpoint["path"], "/metrics");
        assert_eq!(endpoint["port"], "http");
        assert_eq!(
            &endpoint["authorization"]["credentials"]["name"],
            secret_name
        );
    }
}

/// Issue 38: the plain manifests are valid Kubernetes objects and hold
/// llmwatch's safety properties; the Indexed Job's parts cover the schedule.
#[test]
fn kubernetes_manifests_validate_and_run_llmwatch_safely() {
    let dir = repo().join("deploy/kubernetes");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    paths.sort();
    kubernetes_validate(&paths);
    let docs: Vec<serde_json::Value> = paths
        .iter()
        .flat_map(|p| documents(&std::fs::read_to_string(p).expect("manifest")))
        .collect();
    check_deployment_set(&docs);
    assert_eq!(of_kind(&docs, "ServiceMonitor").len(), 1);
    let job = of_kind(&docs, "Job")[0];
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let parts = job["spec"]["completions"].as_u64().expect("completions");
    assert_eq!(
        job["spec"]["parallelism"].as_u64(),
        Some(parts),
        "all parts at once"
    );
    let args = job["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    for flag in [
        format!("--part=$(JOB_COMPLETION_INDEX)/{parts}"),
        "--start-at=$(START_AT)".to_string(),
        "--json=/results/part-$(JOB_COMPLETION_INDEX).json".to_string(),
    ] {
        assert!(args.contains(&flag), "{flag} in {args}");
    }
}

/// Issue 38: the Helm chart rendered (by `ci/render_chart.py`, which
/// refuses any template construct beyond the chart's subset) validates and
/// holds the same properties, with and without its optional parts.
#[test]
fn the_helm_chart_renders_to_valid_safe_manifests() {
    let out = tempfile::tempdir().expect("temporary directory");
    for (name, sets) in [
        ("defaults", vec![]),
        (
            "monitored",
            vec![
                "serviceMonitor.enabled=true",
                "persistence.storageClassName=fast",
            ],
        ),
    ] {
        let mut command = std::process::Command::new("python3");
        command
            .arg(repo().join("ci/render_chart.py"))
            .arg(repo().join("deploy/helm/llmwatch"));
        for set in &sets {
            command.args(["--set", set]);
        }
        let rendered = command.output().expect("python3 runs");
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let text = String::from_utf8(rendered.stdout).expect("UTF-8");
        let path = out.path().join(format!("{name}.yaml"));
        std::fs::write(&path, &text).expect("rendered chart written");
        kubernetes_validate(&[path]);
        let docs = documents(&text);
        check_deployment_set(&docs);
        let monitored = !sets.is_empty();
        assert_eq!(
            of_kind(&docs, "ServiceMonitor").len(),
            usize::from(monitored)
        );
        let pvc = of_kind(&docs, "PersistentVolumeClaim")[0];
        assert_eq!(
            pvc["spec"]["storageClassName"].as_str(),
            monitored.then_some("fast")
        );
    }
}

/// Issue 38: the autoscaling examples validate, and every query they make
/// reads a gauge llmwatch exports (`llmwatch_core::autoscale`); the HPA
/// asks for exactly the external metrics the adapter's rules define.
#[test]
fn autoscaling_examples_validate_and_read_llmwatch_gauges() {
    use llmwatch_core::autoscale::AutoscaleSignals;
    let dir = repo().join("deploy/autoscaling");
    let path = |name: &str| dir.join(name);
    let files = [
        path("keda-scaledobject.yaml"),
        path("prometheus-adapter-rules.yaml"),
        path("hpa.yaml"),
    ];
    kubernetes_validate(&files);
    let read = |p: &PathBuf| documents(&std::fs::read_to_string(p).expect("manifest"));
    let exported: Vec<&str> = AutoscaleSignals::default()
        .named()
        .iter()
        .map(|(name, ..)| *name)
        .collect();
    let reads_a_gauge = |query: &str| {
        assert!(
            exported
                .iter()
                .any(|name| query.contains(&format!("{name}{{"))),
            "{query} reads none of {exported:?}"
        );
    };

    let keda = read(&files[0]);
    let scaled = of_kind(&keda, "ScaledObject")[0];
    let triggers = scaled["spec"]["triggers"].as_array().expect("triggers");
    assert_eq!(triggers.len(), 2);
    for trigger in triggers {
        assert_eq!(trigger["type"], "prometheus");
        reads_a_gauge(trigger["metadata"]["query"].as_str().expect("a query"));
        let threshold: f64 = trigger["metadata"]["threshold"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("a numeric threshold string");
        assert!(threshold > 0.0 && threshold <= 1.0, "{threshold}");
    }

    let adapter = read(&files[1]);
    let config = of_kind(&adapter, "ConfigMap")[0]["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml");
    let rules = documents(config);
    let mut defined = Vec::new();
    for rule in rules[0]["externalRules"].as_array().expect("externalRules") {
        reads_a_gauge(rule["seriesQuery"].as_str().expect("seriesQuery"));
        reads_a_gauge(rule["metricsQuery"].as_str().expect("metricsQuery"));
        defined.push(rule["name"]["as"].as_str().expect("a name").to_string());
    }

    let hpa_docs = read(&files[2]);
    let hpa = of_kind(&hpa_docs, "HorizontalPodAutoscaler")[0];
    let wanted: Vec<String> = hpa["spec"]["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| {
            m["external"]["metric"]["name"]
                .as_str()
                .expect("a name")
                .to_string()
        })
        .collect();
    assert_eq!(wanted, defined);
    assert_eq!(
        hpa["spec"]["scaleTargetRef"], scaled["spec"]["scaleTargetRef"],
        "both scale the same Deployment"
    );
}
