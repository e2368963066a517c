//! The JSON the simulated Kubernetes API answers with, in the shapes of the Kubernetes API
//! (core/v1 Node and Pod, policy/v1 PodDisruptionBudget, meta/v1 Status and lists), written by
//! hand from the API reference so that clients decode it as they decode a real API server's.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::model::{
    ApiError, Budget, KubeState, NodeRecord, Owner, PodRecord, STATIC_PODS, config_image,
    kubelet_image, node_name, node_ready, version_of_image,
};
use crate::state::{Node, State};

pub(super) fn timestamp(t: SystemTime) -> String {
    OffsetDateTime::from(t)
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

fn stable_uid(seed: &str) -> String {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(seed.as_bytes()));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn status_error(e: &ApiError) -> Value {
    let mut details = serde_json::Map::new();
    if let Some((name, kind)) = &e.details_name {
        details.insert("name".into(), json!(name));
        details.insert("kind".into(), json!(kind));
    }
    if !e.causes.is_empty() {
        details.insert(
            "causes".into(),
            Value::Array(
                e.causes
                    .iter()
                    .map(|(reason, message)| json!({"reason": reason, "message": message}))
                    .collect(),
            ),
        );
    }
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": e.message,
        "reason": e.reason,
        "code": e.code,
    });
    if !details.is_empty() {
        status["details"] = Value::Object(details);
    }
    status
}

pub fn status_success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

pub fn list(kind: &str, api_version: &str, resource_version: u64, items: Vec<Value>) -> Value {
    json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"resourceVersion": resource_version.to_string()},
        "items": items,
    })
}

/// `/version`: the API server of the serving node, from its config's kube-apiserver image.
pub fn version(n: &Node) -> Value {
    let image = n
        .active
        .as_ref()
        .and_then(|c| config_image(c, STATIC_PODS[0].v1alpha1, STATIC_PODS[0].kind))
        .unwrap_or_default();
    let git = version_of_image(&image);
    let core = git.trim_start_matches('v');
    let mut parts = core.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": git,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn condition(kind: &str, ok: bool, since: SystemTime) -> Value {
    json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": timestamp(since),
    })
}

pub fn node(name: &str, rec: &NodeRecord, n: &Node) -> Value {
    let kubelet = version_of_image(&reported_kubelet_image(n));
    let ready = node_ready(n);
    let ready_condition = if !n.up {
        json!({
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": timestamp(SystemTime::now()),
            "lastTransitionTime": timestamp(SystemTime::now()),
        })
    } else {
        json!({
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
            "message": if ready { "kubelet is posting ready status" } else { "container runtime status check may not have completed yet" },
            "lastHeartbeatTime": timestamp(SystemTime::now()),
            "lastTransitionTime": timestamp(SystemTime::now()),
        })
    };
    let mut spec = serde_json::Map::new();
    let mut taints = Vec::new();
    if rec
        .labels
        .contains_key("node-role.kubernetes.io/control-plane")
    {
        taints
            .push(json!({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}));
    }
    for t in &rec.taints {
        let mut taint = json!({"key": t.key, "effect": t.effect});
        if !t.value.is_empty() {
            taint["value"] = json!(t.value);
        }
        taints.push(taint);
    }
    if rec.unschedulable {
        spec.insert("unschedulable".into(), json!(true));
        taints.push(
            json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                           "timeAdded": timestamp(SystemTime::now())}),
        );
    }
    if !taints.is_empty() {
        spec.insert("taints".into(), Value::Array(taints));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": rec.uid,
            "resourceVersion": rec.resource_version.to_string(),
            "creationTimestamp": timestamp(rec.created),
            "labels": rec.labels,
            "annotations": rec.annotations,
        },
        "spec": spec,
        "status": {
            "conditions": [ready_condition],
            "addresses": [
                {"type": "InternalIP", "address": n.address.to_string()},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": stable_uid(&format!("machine-{}", n.index)).replace('-', ""),
                "systemUUID": stable_uid(&format!("system-{}", n.index)),
                "bootID": n.boot_id,
                "kernelVersion": "6.12.57-talos",
                "osImage": format!("Talos ({})", n.version),
                "containerRuntimeVersion": "containerd://2.1.5",
                "kubeletVersion": kubelet,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

struct PodView<'a> {
    namespace: &'a str,
    name: String,
    uid: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    owner: Value,
    node: Option<&'a str>,
    host_ip: Option<String>,
    container: &'a str,
    image: String,
    ready: bool,
    created: SystemTime,
    resource_version: u64,
}

fn pod_json(v: PodView<'_>) -> Value {
    let phase = if v.node.is_some() {
        "Running"
    } else {
        "Pending"
    };
    let mut spec = json!({
        "containers": [{"name": v.container, "image": v.image}],
        "terminationGracePeriodSeconds": 30,
    });
    if let Some(node) = v.node {
        spec["nodeName"] = json!(node);
    }
    let mut status = json!({
        "phase": phase,
        "conditions": [condition("Ready", v.ready, v.created), condition("PodScheduled", v.node.is_some(), v.created)],
    });
    if let Some(ip) = v.host_ip {
        status["hostIP"] = json!(ip);
        status["containerStatuses"] = json!([{
            "name": v.container, "image": v.image, "imageID": "", "ready": v.ready,
            "restartCount": 0, "started": v.ready,
        }]);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": v.name,
            "namespace": v.namespace,
            "uid": v.uid,
            "resourceVersion": v.resource_version.to_string(),
            "creationTimestamp": timestamp(v.created),
            "labels": v.labels,
            "annotations": v.annotations,
            "ownerReferences": [v.owner],
        },
        "spec": spec,
        "status": status,
    })
}

fn workload_pod(k: &KubeState, p: &PodRecord, st: &State) -> Value {
    let Owner::ReplicaSet { name, uid } = &p.owner;
    let host_ip = p
        .node
        .as_ref()
        .and_then(|n| k.nodes.get(n))
        .and_then(|r| st.nodes.get(r.index))
        .map(|n| n.address.to_string());
    pod_json(PodView {
        namespace: &p.namespace,
        name: p.name.clone(),
        uid: p.uid.clone(),
        labels: p.labels.clone(),
        annotations: BTreeMap::new(),
        owner: json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid,
                      "controller": true, "blockOwnerDeletion": true}),
        node: p.node.as_deref(),
        host_ip,
        container: &p.container,
        image: p.image.clone(),
        ready: k.pod_ready(p, &st.nodes),
        created: p.created,
        resource_version: p.resource_version,
    })
}

/// The kubelet image whose version the Node reports: the one before the last change while the
/// kubelet restarts (and for good under the `kubelet_version_stuck` fault).
fn reported_kubelet_image(n: &Node) -> String {
    let Some(cfg) = n.active.as_ref() else {
        return String::new();
    };
    let previous = n
        .components
        .get("kubelet")
        .filter(|s| s.restarting() || n.faults.kubelet_version_stuck)
        .and_then(|s| s.previous_image.clone());
    previous.unwrap_or_else(|| kubelet_image(cfg))
}

/// Pods the kubelet keeps on a node: the control plane's static pods (mirror pods owned by the
/// Node).
pub(super) fn node_pods(
    name: &str,
    rec: &NodeRecord,
    n: &Node,
    resource_version: u64,
) -> Vec<Value> {
    let Some(cfg) = n.active.as_ref() else {
        return vec![];
    };
    let ready = node_ready(n);
    let host_ip = Some(n.address.to_string());
    let mut out = Vec::new();
    if rec
        .labels
        .contains_key("node-role.kubernetes.io/control-plane")
    {
        for c in STATIC_PODS {
            let Some(image) = config_image(cfg, c.v1alpha1, c.kind) else {
                continue;
            };
            let component = n.components.get(c.name);
            let config_version = n
                .components
                .pod_config_version(c.name, &n.version)
                .unwrap_or(1);
            let restarted_at = component.map_or(n.config_updated, |s| s.changed_at);
            let never_ready = c.name == "kube-apiserver" && n.faults.apiserver_never_ready;
            let ready = ready
                && component.is_none_or(|s| !(s.restarting() || never_ready && s.image_changed()));
            let labels = BTreeMap::from([
                ("k8s-app".to_string(), c.name.to_string()),
                ("component".to_string(), c.name.to_string()),
                ("tier".to_string(), "control-plane".to_string()),
                ("app.kubernetes.io/name".to_string(), c.name.to_string()),
                (
                    "app.kubernetes.io/version".to_string(),
                    version_of_image(&image),
                ),
                (
                    "app.kubernetes.io/component".to_string(),
                    "control-plane".to_string(),
                ),
            ]);
            let annotations = BTreeMap::from([
                (
                    "kubernetes.io/config.hash".to_string(),
                    stable_uid(&image).replace('-', "")[..32].to_string(),
                ),
                (
                    "kubernetes.io/config.mirror".to_string(),
                    stable_uid(&image).replace('-', "")[..32].to_string(),
                ),
                (
                    "kubernetes.io/config.source".to_string(),
                    "file".to_string(),
                ),
                (
                    "talos.dev/config-version".to_string(),
                    config_version.to_string(),
                ),
            ]);
            out.push(pod_json(PodView {
                namespace: "kube-system",
                name: format!("{}-{name}", c.name),
                uid: stable_uid(&format!(
                    "{}-{name}-{}-{config_version}",
                    c.name, n.generation
                )),
                labels,
                annotations,
                owner: json!({"apiVersion": "v1", "kind": "Node", "name": name, "uid": rec.uid, "controller": true}),
                node: Some(name),
                host_ip: host_ip.clone(),
                container: c.name,
                image,
                ready,
                created: restarted_at,
                resource_version,
            }));
        }
    }
    out
}

/// Every pod in the cluster, optionally of one namespace.
pub fn pods(k: &KubeState, st: &State, namespace: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    for (name, rec) in &k.nodes {
        if let Some(n) = st.nodes.get(rec.index)
            && node_name(n) == *name
        {
            out.extend(node_pods(name, rec, n, k.resource_version()));
        }
    }
    out.extend(daemon_pods(k, st));
    out.extend(k.pods.iter().map(|p| workload_pod(k, p, st)));
    out.retain(|p| namespace.is_none_or(|ns| p["metadata"]["namespace"] == ns));
    out
}

/// The DaemonSet controller's pods (kube-proxy, flannel, any DaemonSet a client applied), with
/// the labels and first container of their DaemonSet's pod template.
fn daemon_pods(k: &KubeState, st: &State) -> Vec<Value> {
    let mut out = Vec::new();
    for (key, p) in &k.daemon_pods {
        let host_ip = k
            .nodes
            .get(&key.node)
            .and_then(|r| st.nodes.get(r.index))
            .map(|n| n.address.to_string());
        out.push(pod_json(PodView {
            namespace: &key.namespace,
            name: p.name.clone(),
            uid: p.uid.clone(),
            labels: p.labels.clone(),
            annotations: BTreeMap::new(),
            owner: json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": key.daemonset,
                          "uid": p.owner_uid, "controller": true, "blockOwnerDeletion": true}),
            node: Some(&key.node),
            host_ip,
            container: &p.container,
            image: p.image.clone(),
            ready: k.daemon_pod_ready(key, p, &st.nodes),
            created: p.created,
            resource_version: k.resource_version(),
        }));
    }
    out
}

pub fn budget(k: &KubeState, b: &Budget, st: &State) -> Value {
    let (healthy, expected, allowed) = k.budget_status(b, &st.nodes);
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": b.name,
            "namespace": b.namespace,
            "uid": b.uid,
            "resourceVersion": k.resource_version().to_string(),
            "creationTimestamp": timestamp(b.created),
            "generation": 1,
        },
        "spec": {"minAvailable": b.min_available, "selector": {"matchLabels": b.selector}},
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": b.min_available,
            "expectedPods": expected,
        },
    })
}
