//! kubernetes_sd, the pure part of what the API answers: the few fields of
//! pods, Endpoints and EndpointSlices discovery reads, the object set a
//! list fills and watch events change, and the target groups it describes,
//! labelled with the `__meta_kubernetes_*` labels Prometheus gives them (so
//! Prometheus users' `relabel_configs` work unchanged).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::discovery::TargetGroup;
use crate::kubernetes::KubernetesRole;

// ---- The fields of the API objects discovery reads (the rest ignored). ----

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owner_references: Vec<OwnerReference>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct OwnerReference {
    pub kind: String,
    pub name: String,
    pub controller: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    pub node_name: String,
    pub containers: Vec<Container>,
    pub init_containers: Vec<Container>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: String,
    pub ports: Vec<ContainerPort>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    pub name: String,
    pub container_port: u16,
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    pub phase: String,
    #[serde(rename = "podIP")]
    pub pod_ip: String,
    #[serde(rename = "hostIP")]
    pub host_ip: String,
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Endpoints {
    pub metadata: ObjectMeta,
    pub subsets: Vec<EndpointSubset>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointSubset {
    pub addresses: Vec<EndpointAddress>,
    pub not_ready_addresses: Vec<EndpointAddress>,
    pub ports: Vec<EndpointPort>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointAddress {
    pub ip: String,
    pub hostname: Option<String>,
    pub node_name: Option<String>,
    pub target_ref: Option<ObjectReference>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ObjectReference {
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EndpointPort {
    pub name: Option<String>,
    pub port: Option<u16>,
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointSlice {
    pub metadata: ObjectMeta,
    pub address_type: String,
    pub endpoints: Vec<SliceEndpoint>,
    pub ports: Vec<EndpointPort>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SliceEndpoint {
    pub addresses: Vec<String>,
    pub conditions: SliceConditions,
    pub hostname: Option<String>,
    pub node_name: Option<String>,
    pub zone: Option<String>,
    pub target_ref: Option<ObjectReference>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SliceConditions {
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
}

/// One discovered object.
#[derive(Debug, Clone)]
pub enum KubeObject {
    Pod(Box<Pod>),
    Endpoints(Box<Endpoints>),
    EndpointSlice(Box<EndpointSlice>),
}

impl KubeObject {
    fn parse(role: KubernetesRole, value: serde_json::Value) -> serde_json::Result<KubeObject> {
        Ok(match role {
            KubernetesRole::Pod => KubeObject::Pod(serde_json::from_value(value)?),
            KubernetesRole::Endpoints => KubeObject::Endpoints(serde_json::from_value(value)?),
            KubernetesRole::Endpointslice => {
                KubeObject::EndpointSlice(serde_json::from_value(value)?)
            }
        })
    }

    fn metadata(&self) -> &ObjectMeta {
        match self {
            KubeObject::Pod(o) => &o.metadata,
            KubeObject::Endpoints(o) => &o.metadata,
            KubeObject::EndpointSlice(o) => &o.metadata,
        }
    }
}

// ---- Lists and watch events. ----

#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    #[error("not a Kubernetes list: {0}")]
    List(serde_json::Error),
    #[error("not a watch event: {0}")]
    Event(serde_json::Error),
    /// 410 Gone: the version watched from is too old; list again.
    #[error("resource version too old (410 Gone): {0}")]
    Gone(String),
    #[error("the API server answered an error in the watch: {code} {message}")]
    Status { code: u16, message: String },
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<serde_json::Value>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ListMeta {
    resource_version: String,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

#[derive(Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Status {
    code: u16,
    message: String,
}

/// One page of a list: its objects, its version, the token of the next page.
#[derive(Debug)]
pub struct ListPage {
    pub objects: Vec<KubeObject>,
    pub resource_version: String,
    pub continue_token: Option<String>,
}

/// Parses one page of a list answer.
pub fn parse_list(role: KubernetesRole, body: &[u8]) -> Result<ListPage, KubernetesError> {
    let list: List = serde_json::from_slice(body).map_err(KubernetesError::List)?;
    let objects = list
        .items
        .into_iter()
        .map(|item| KubeObject::parse(role, item))
        .collect::<Result<_, _>>()
        .map_err(KubernetesError::List)?;
    Ok(ListPage {
        objects,
        resource_version: list.metadata.resource_version,
        continue_token: list.metadata.continue_token.filter(|t| !t.is_empty()),
    })
}

/// The objects one list-and-watch knows, by namespace and name, and the
/// version to watch from.
#[derive(Debug, Clone)]
pub struct ObjectSet {
    role: KubernetesRole,
    objects: BTreeMap<(String, String), KubeObject>,
    pub resource_version: String,
}

impl ObjectSet {
    pub fn new(role: KubernetesRole) -> ObjectSet {
        ObjectSet {
            role,
            objects: BTreeMap::new(),
            resource_version: String::new(),
        }
    }

    /// Replaces everything with a full list's objects.
    pub fn replace(&mut self, objects: Vec<KubeObject>, resource_version: String) {
        self.objects = objects
            .into_iter()
            .map(|o| (key_of(o.metadata()), o))
            .collect();
        self.resource_version = resource_version;
    }

    /// Applies one line of a watch stream; true when the objects changed
    /// (a bookmark only moves the version).
    pub fn apply(&mut self, line: &[u8]) -> Result<bool, KubernetesError> {
        let event: WatchEvent = serde_json::from_slice(line).map_err(KubernetesError::Event)?;
        if event.kind == "ERROR" {
            let status: Status = serde_json::from_value(event.object).unwrap_or_default();
            return Err(if status.code == 410 {
                KubernetesError::Gone(status.message)
            } else {
                KubernetesError::Status {
                    code: status.code,
                    message: status.message,
                }
            });
        }
        let object = KubeObject::parse(self.role, event.object).map_err(KubernetesError::Event)?;
        let meta = object.metadata();
        if !meta.resource_version.is_empty() {
            self.resource_version = meta.resource_version.clone();
        }
        let key = key_of(meta);
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => {
                self.objects.insert(key, object);
                Ok(true)
            }
            "DELETED" => Ok(self.objects.remove(&key).is_some()),
            _ => Ok(false),
        }
    }

    /// Every object's targets, one group each.
    pub fn groups(&self) -> Vec<TargetGroup> {
        self.objects.values().flat_map(groups_of).collect()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

fn key_of(meta: &ObjectMeta) -> (String, String) {
    (meta.namespace.clone(), meta.name.clone())
}

// ---- Targets and their __meta_kubernetes_* labels. ----

type Labels = BTreeMap<String, String>;

/// Prometheus' `SanitizeLabelName`: anything but `[a-zA-Z0-9_]` becomes `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `{prefix}_label_*`, `_labelpresent_*`, `_annotation_*`,
/// `_annotationpresent_*` of an object's metadata.
fn meta_labels(prefix: &str, meta: &ObjectMeta, out: &mut Labels) {
    out.insert("__meta_kubernetes_namespace".into(), meta.namespace.clone());
    for (kind, map) in [("label", &meta.labels), ("annotation", &meta.annotations)] {
        for (name, value) in map {
            let name = sanitize(name);
            out.insert(format!("{prefix}_{kind}_{name}"), value.clone());
            out.insert(format!("{prefix}_{kind}present_{name}"), "true".into());
        }
    }
}

fn group(address: String, labels: Labels) -> TargetGroup {
    TargetGroup {
        targets: vec![address],
        labels,
    }
}

fn host_port(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

fn groups_of(object: &KubeObject) -> Vec<TargetGroup> {
    match object {
        KubeObject::Pod(pod) => pod_groups(pod),
        KubeObject::Endpoints(endpoints) => endpoints_groups(endpoints),
        KubeObject::EndpointSlice(slice) => slice_groups(slice),
    }
}

/// As Prometheus' pod role: one target per container port; a container
/// without ports gives one port-less target (for relabelling to add one);
/// a pod without an IP (not scheduled yet) gives none.
fn pod_groups(pod: &Pod) -> Vec<TargetGroup> {
    let status = &pod.status;
    if status.pod_ip.is_empty() {
        return Vec::new();
    }
    let mut common = Labels::new();
    meta_labels("__meta_kubernetes_pod", &pod.metadata, &mut common);
    let ready = status
        .conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True");
    for (name, value) in [
        ("pod_name", pod.metadata.name.as_str()),
        ("pod_ip", status.pod_ip.as_str()),
        ("pod_ready", if ready { "true" } else { "false" }),
        ("pod_phase", status.phase.as_str()),
        ("pod_node_name", pod.spec.node_name.as_str()),
        ("pod_host_ip", status.host_ip.as_str()),
        ("pod_uid", pod.metadata.uid.as_str()),
    ] {
        common.insert(format!("__meta_kubernetes_{name}"), value.to_string());
    }
    if let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .find(|o| o.controller == Some(true))
    {
        common.insert(
            "__meta_kubernetes_pod_controller_kind".into(),
            owner.kind.clone(),
        );
        common.insert(
            "__meta_kubernetes_pod_controller_name".into(),
            owner.name.clone(),
        );
    }
    let containers = pod
        .spec
        .containers
        .iter()
        .map(|c| (c, false))
        .chain(pod.spec.init_containers.iter().map(|c| (c, true)));
    let mut groups = Vec::new();
    for (container, init) in containers {
        let mut labels = common.clone();
        labels.insert(
            "__meta_kubernetes_pod_container_name".into(),
            container.name.clone(),
        );
        labels.insert(
            "__meta_kubernetes_pod_container_image".into(),
            container.image.clone(),
        );
        labels.insert(
            "__meta_kubernetes_pod_container_init".into(),
            init.to_string(),
        );
        if container.ports.is_empty() {
            groups.push(group(status.pod_ip.clone(), labels));
            continue;
        }
        for port in &container.ports {
            let mut labels = labels.clone();
            labels.insert(
                "__meta_kubernetes_pod_container_port_name".into(),
                port.name.clone(),
            );
            labels.insert(
                "__meta_kubernetes_pod_container_port_number".into(),
                port.container_port.to_string(),
            );
            labels.insert(
                "__meta_kubernetes_pod_container_port_protocol".into(),
                port.protocol.clone().unwrap_or_else(|| "TCP".into()),
            );
            groups.push(group(
                host_port(&status.pod_ip, port.container_port),
                labels,
            ));
        }
    }
    groups
}

/// As Prometheus' endpoints role (without the service's and pod's own
/// labels, which would need watching those too): one target per address
/// (ready or not) and port.
fn endpoints_groups(endpoints: &Endpoints) -> Vec<TargetGroup> {
    let mut common = Labels::new();
    meta_labels(
        "__meta_kubernetes_endpoints",
        &endpoints.metadata,
        &mut common,
    );
    common.insert(
        "__meta_kubernetes_endpoints_name".into(),
        endpoints.metadata.name.clone(),
    );
    let mut groups = Vec::new();
    for subset in &endpoints.subsets {
        let addresses = subset
            .addresses
            .iter()
            .map(|a| (a, true))
            .chain(subset.not_ready_addresses.iter().map(|a| (a, false)));
        for (address, ready) in addresses {
            for port in &subset.ports {
                let Some(number) = port.port else { continue };
                let mut labels = common.clone();
                labels.insert("__meta_kubernetes_endpoint_ready".into(), ready.to_string());
                let optional = [
                    ("endpoint_port_name", port.name.as_ref()),
                    ("endpoint_port_protocol", port.protocol.as_ref()),
                    ("endpoint_hostname", address.hostname.as_ref()),
                    ("endpoint_node_name", address.node_name.as_ref()),
                    (
                        "endpoint_address_target_kind",
                        address.target_ref.as_ref().map(|r| &r.kind),
                    ),
                    (
                        "endpoint_address_target_name",
                        address.target_ref.as_ref().map(|r| &r.name),
                    ),
                ];
                for (name, value) in optional {
                    if let Some(value) = value {
                        labels.insert(format!("__meta_kubernetes_{name}"), value.clone());
                    }
                }
                groups.push(group(host_port(&address.ip, number), labels));
            }
        }
    }
    groups
}

/// As Prometheus' endpointslice role (again without service and pod
/// labels): one target per endpoint's first address and port.
fn slice_groups(slice: &EndpointSlice) -> Vec<TargetGroup> {
    let mut common = Labels::new();
    meta_labels(
        "__meta_kubernetes_endpointslice",
        &slice.metadata,
        &mut common,
    );
    common.insert(
        "__meta_kubernetes_endpointslice_name".into(),
        slice.metadata.name.clone(),
    );
    common.insert(
        "__meta_kubernetes_endpointslice_address_type".into(),
        slice.address_type.clone(),
    );
    let mut groups = Vec::new();
    for endpoint in &slice.endpoints {
        // Consumers use the first address (the API's own guidance).
        let Some(ip) = endpoint.addresses.first() else {
            continue;
        };
        for port in &slice.ports {
            let Some(number) = port.port else { continue };
            let mut labels = common.clone();
            let conditions = [
                ("ready", endpoint.conditions.ready),
                ("serving", endpoint.conditions.serving),
                ("terminating", endpoint.conditions.terminating),
            ];
            for (name, value) in conditions {
                if let Some(value) = value {
                    labels.insert(
                        format!("__meta_kubernetes_endpointslice_endpoint_conditions_{name}"),
                        value.to_string(),
                    );
                }
            }
            labels.insert(
                "__meta_kubernetes_endpointslice_port".into(),
                number.to_string(),
            );
            let optional = [
                ("port_name", port.name.as_ref()),
                ("port_protocol", port.protocol.as_ref()),
                ("endpoint_hostname", endpoint.hostname.as_ref()),
                ("endpoint_node_name", endpoint.node_name.as_ref()),
                ("endpoint_zone", endpoint.zone.as_ref()),
                (
                    "address_target_kind",
                    endpoint.target_ref.as_ref().map(|r| &r.kind),
                ),
                (
                    "address_target_name",
                    endpoint.target_ref.as_ref().map(|r| &r.name),
                ),
            ];
            for (name, value) in optional {
                if let Some(value) = value {
                    labels.insert(
                        format!("__meta_kubernetes_endpointslice_{name}"),
                        value.clone(),
                    );
                }
            }
            groups.push(group(host_port(ip, number), labels));
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../fixtures/kubernetes/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn listed(role: KubernetesRole, names: &[&str]) -> ObjectSet {
        let mut set = ObjectSet::new(role);
        let mut objects = Vec::new();
        let mut version = String::new();
        for name in names {
            let page = parse_list(role, &fixture(name)).expect("a list page");
            objects.extend(page.objects);
            version = page.resource_version;
        }
        set.replace(objects, version);
        set
    }

    fn by_address(groups: &[TargetGroup]) -> BTreeMap<String, Labels> {
        groups
            .iter()
            .map(|g| (g.targets[0].clone(), g.labels.clone()))
            .collect()
    }

    #[test]
    fn pods_give_a_target_per_container_port_with_prometheus_meta_labels() {
        let page = parse_list(KubernetesRole::Pod, &fixture("pods_list_page1.json")).expect("page");
        assert_eq!(page.resource_version, "4711");
        assert!(
            page.continue_token.is_some(),
            "a first page says where to go on"
        );
        let set = listed(
            KubernetesRole::Pod,
            &["pods_list_page1.json", "pods_list_page2.json"],
        );
        assert_eq!(set.len(), 4);
        let targets = by_address(&set.groups());
        // vllm-0, vllm-1 and vllm-3 have IPs, two ports each; vllm-2 is pending.
        let addresses: Vec<&str> = targets.keys().map(String::as_str).collect();
        assert_eq!(
            addresses,
            [
                "127.0.10.1:8000",
                "127.0.10.1:9400",
                "127.0.10.2:8000",
                "127.0.10.2:9400",
                "127.0.10.4:8000",
                "127.0.10.4:9400"
            ]
        );
        let vllm0 = &targets["127.0.10.1:8000"];
        for (name, value) in [
            ("__meta_kubernetes_namespace", "ml"),
            ("__meta_kubernetes_pod_name", "vllm-0"),
            ("__meta_kubernetes_pod_ip", "127.0.10.1"),
            ("__meta_kubernetes_pod_ready", "true"),
            ("__meta_kubernetes_pod_phase", "Running"),
            ("__meta_kubernetes_pod_node_name", "gpu-node-a"),
            ("__meta_kubernetes_pod_host_ip", "192.168.7.21"),
            ("__meta_kubernetes_pod_container_name", "vllm"),
            ("__meta_kubernetes_pod_container_init", "false"),
            ("__meta_kubernetes_pod_container_port_name", "http"),
            ("__meta_kubernetes_pod_container_port_number", "8000"),
            ("__meta_kubernetes_pod_container_port_protocol", "TCP"),
            ("__meta_kubernetes_pod_controller_kind", "StatefulSet"),
            ("__meta_kubernetes_pod_controller_name", "vllm"),
            ("__meta_kubernetes_pod_label_app_kubernetes_io_name", "vllm"),
            ("__meta_kubernetes_pod_labelpresent_model", "true"),
            (
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape",
                "true",
            ),
        ] {
            assert_eq!(vllm0.get(name).map(String::as_str), Some(value), "{name}");
        }
        assert_eq!(
            targets["127.0.10.1:9400"]["__meta_kubernetes_pod_container_port_name"],
            "dcgm"
        );
    }

    #[test]
    fn watch_events_add_change_and_remove_pods_and_410_asks_for_a_list() {
        let mut set = listed(
            KubernetesRole::Pod,
            &["pods_list_page1.json", "pods_list_page2.json"],
        );
        let watch = fixture("pods_watch_1.jsonl");
        let changed: Vec<bool> = watch
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|line| set.apply(line).expect("an event"))
            .collect();
        // Three object changes, then a bookmark that only moves the version.
        assert_eq!(changed, [true, true, true, false]);
        assert_eq!(set.resource_version, "4720");
        let targets = by_address(&set.groups());
        assert!(targets.contains_key("127.0.10.3:8000"), "vllm-2 got its IP");
        assert!(!targets.contains_key("127.0.10.1:8000"), "vllm-0 deleted");
        assert_eq!(
            targets["127.0.10.2:8000"]["__meta_kubernetes_pod_label_model"],
            "llama-70b"
        );
        let gone = set.apply(fixture("pods_watch_2.jsonl").trim_ascii_end());
        assert!(matches!(gone, Err(KubernetesError::Gone(m)) if m.contains("too old")));
        assert!(matches!(
            set.apply(b"{\"type\":"),
            Err(KubernetesError::Event(_))
        ));
    }

    #[test]
    fn endpoints_and_slices_label_readiness_ports_and_targets() {
        let eps = listed(KubernetesRole::Endpoints, &["endpoints_list.json"]);
        let targets = by_address(&eps.groups());
        assert_eq!(targets.len(), 2);
        let ready = &targets["10.42.1.17:8000"];
        assert_eq!(ready["__meta_kubernetes_endpoint_ready"], "true");
        assert_eq!(ready["__meta_kubernetes_endpoints_name"], "vllm");
        assert_eq!(ready["__meta_kubernetes_endpoint_port_name"], "http");
        assert_eq!(
            ready["__meta_kubernetes_endpoint_address_target_kind"],
            "Pod"
        );
        assert_eq!(
            ready["__meta_kubernetes_endpoint_address_target_name"],
            "vllm-0"
        );
        assert_eq!(ready["__meta_kubernetes_endpoint_node_name"], "gpu-node-a");
        assert_eq!(
            targets["10.42.2.9:8000"]["__meta_kubernetes_endpoint_ready"],
            "false"
        );

        let slices = listed(KubernetesRole::Endpointslice, &["endpointslices_list.json"]);
        let targets = by_address(&slices.groups());
        assert_eq!(targets.len(), 2);
        let serving = &targets["10.42.1.17:8000"];
        assert_eq!(
            serving["__meta_kubernetes_endpointslice_name"],
            "vllm-x7k2p"
        );
        assert_eq!(
            serving["__meta_kubernetes_endpointslice_address_type"],
            "IPv4"
        );
        assert_eq!(
            serving["__meta_kubernetes_endpointslice_endpoint_conditions_ready"],
            "true"
        );
        assert_eq!(
            serving["__meta_kubernetes_endpointslice_endpoint_zone"],
            "eu-west-1a"
        );
        assert_eq!(serving["__meta_kubernetes_endpointslice_port"], "8000");
        assert_eq!(
            serving["__meta_kubernetes_endpointslice_label_kubernetes_io_service_name"],
            "vllm"
        );
        let leaving = &targets["10.42.2.9:8000"];
        assert_eq!(
            leaving["__meta_kubernetes_endpointslice_endpoint_conditions_terminating"],
            "true"
        );
    }
}
