//! What the real Kubernetes backend (`real/kubernetes`) takes from the simulated node: what its
//! kubelet knows (its Node's labels and status, its static pods, whether it is Ready) and what
//! its Talos does to its Node (labels, annotations, taints, the cordon of its stage), applied to
//! a Node as upstream's API server returned it. The rules are the ones the model follows, so the
//! two backends differ only in who answers the API.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::model::{NodeRecord, Taint, node_name, node_ready, registration_labels};
use super::render;
use crate::state::Node;

pub use super::bootstrap::{FIELD_MANAGER, INVENTORY_ANNOTATION, INVENTORY_NAME, inventory_key};
pub use super::talos_drain::{evicts, pod_key};

/// What a node's kubelet reports.
pub struct KubeletReport {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The taints the kubelet registers with (`--register-with-taints`: Talos's control-plane
    /// taint).
    pub taints: Vec<Value>,
    /// The Node's `status` (conditions, addresses, nodeInfo, capacity).
    pub status: Value,
    /// The mirror pods of its static pods (without an owner's uid), and whether each is Ready.
    pub mirror_pods: Vec<(Value, bool)>,
    pub ready: bool,
}

fn record_of(name: &str, n: &Node) -> Option<NodeRecord> {
    let cfg = n.active.as_ref()?;
    Some(NodeRecord {
        uid: String::new(),
        index: n.index,
        created: SystemTime::now(),
        unschedulable: false,
        labels: registration_labels(name, cfg),
        annotations: BTreeMap::new(),
        taints: Vec::new(),
        resource_version: 0,
    })
}

/// The kubelet of a node that runs one (up, configured, its services running).
pub fn kubelet_report(n: &Node) -> Option<KubeletReport> {
    if !n.up || n.services_stopped {
        return None;
    }
    let name = node_name(n);
    let rec = record_of(&name, n)?;
    let node = render::node(&name, &rec, n);
    let cfg = n.active.as_ref()?;
    // NodeRestriction refuses a kubelet the node-role labels: Talos's NodeApplyController puts
    // the control-plane one (`talos_node_update`). The kubelet registers with Talos's taints
    // (`RegisterWithTaints`, kubelet_config.go @ v1.14.1).
    let mut labels = rec.labels.clone();
    labels.retain(|k, _| !k.starts_with("node-role.kubernetes.io/"));
    let taints: Vec<Value> = super::node_apply::talos_spec(cfg)
        .taints
        .iter()
        .map(taint_json)
        .collect();
    let mut status = node["status"].clone();
    let resources = json!({"cpu": "4", "memory": "8131452Ki", "pods": "110",
                           "ephemeral-storage": "19306004Ki"});
    status["capacity"] = resources.clone();
    status["allocatable"] = resources;
    let mirror_pods = render::node_pods(&name, &rec, n, 0)
        .into_iter()
        .map(|mut p| {
            let ready = p["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if let Some(meta) = p["metadata"].as_object_mut() {
                for generated in ["uid", "resourceVersion", "creationTimestamp"] {
                    meta.remove(generated);
                }
            }
            if let Some(pod) = p.as_object_mut() {
                pod.remove("status");
            }
            (p, ready)
        })
        .collect();
    Some(KubeletReport {
        taints,
        labels,
        name,
        status,
        mirror_pods,
        ready: node_ready(n),
    })
}

fn strings(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn taint_json(t: &Taint) -> Value {
    let mut taint = json!({"key": t.key, "effect": t.effect});
    if !t.value.is_empty() {
        taint["value"] = json!(t.value);
    }
    taint
}

/// The taints the controllers put there (`node.kubernetes.io/*`: not-ready, unreachable,
/// unschedulable), which Talos's taint list does not hold.
fn foreign_taint(t: &Value) -> bool {
    t["key"]
        .as_str()
        .unwrap_or("")
        .starts_with("node.kubernetes.io/")
}

/// Talos's NodeApplyController and its cordon on a Node as the API server returned it: the Node
/// to write back (a full update, as upstream's controller does), or None when nothing changes.
/// `cordon` is what the node's stage wants (`wanted_cordon`), None for no change.
pub fn talos_node_update(
    node: &Value,
    cfg: &crate::mcfg::StoredConfig,
    cordon: Option<bool>,
) -> Option<Value> {
    let taints: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut rec = NodeRecord {
        uid: String::new(),
        index: 0,
        created: SystemTime::now(),
        unschedulable: node["spec"]["unschedulable"].as_bool().unwrap_or(false),
        labels: strings(&node["metadata"]["labels"]),
        annotations: strings(&node["metadata"]["annotations"]),
        taints: taints
            .iter()
            .filter(|t| !foreign_taint(t))
            .map(|t| Taint {
                key: t["key"].as_str().unwrap_or("").to_string(),
                value: t["value"].as_str().unwrap_or("").to_string(),
                effect: t["effect"].as_str().unwrap_or("").to_string(),
            })
            .collect(),
        resource_version: 0,
    };
    let mut changed = super::node_apply::apply_spec(&mut rec, &super::node_apply::talos_spec(cfg));
    if let Some(wanted) = cordon {
        changed |= super::talos_drain::apply_cordon(&mut rec, wanted).is_some();
    }
    if !changed {
        return None;
    }
    let mut out = node.clone();
    out["metadata"]["labels"] = json!(rec.labels);
    out["metadata"]["annotations"] = json!(rec.annotations);
    let mut new_taints: Vec<Value> = taints.into_iter().filter(foreign_taint).collect();
    new_taints.extend(rec.taints.iter().map(taint_json));
    out["spec"]["taints"] = json!(new_taints);
    out["spec"]["unschedulable"] = json!(rec.unschedulable);
    Some(out)
}

/// What the node's stage wants of its cordon (`NodeCordonedSpecController`).
pub fn wanted_cordon(n: &Node) -> Option<bool> {
    super::talos_drain::wanted_cordon(n.stage)
}

/// The kind of the built-in resource `plural` of API group `group` (empty for core).
pub fn kind_of(group: &str, plural: &str) -> Option<String> {
    let store = super::objects::ObjectStore::default();
    super::kinds::all(&store)
        .into_iter()
        .find(|r| r.group == group && r.plural == plural)
        .map(|r| r.kind)
}

/// One bootstrap manifest object with where it lives in the API.
pub struct ManifestObject {
    pub object: Value,
    /// `/api/v1/namespaces/kube-system/serviceaccounts` and the like.
    pub collection: String,
    pub name: String,
    /// The inventory's key for it.
    pub inventory_key: String,
}

/// Talos's bootstrap manifests of a control plane, in the order its apply takes them, each with
/// its path; objects of kinds the simulator's table does not know are left out (upstream
/// skips those it cannot map).
pub fn bootstrap_manifests(n: &Node) -> Vec<ManifestObject> {
    let store = super::objects::ObjectStore::default();
    super::bootstrap::manifest_objects(n)
        .into_iter()
        .filter_map(|mut object| {
            let api_version = object["apiVersion"].as_str()?.to_string();
            let kind = object["kind"].as_str()?.to_string();
            let rt = super::kinds::by_kind(&store, &api_version, &kind)?;
            let name = object["metadata"]["name"].as_str()?.to_string();
            let namespace = match object["metadata"]["namespace"].as_str() {
                _ if !rt.namespaced => String::new(),
                Some(ns) if !ns.is_empty() => ns.to_string(),
                _ => "default".to_string(),
            };
            let base = if rt.group.is_empty() {
                format!("/api/{}", rt.version)
            } else {
                format!("/apis/{}/{}", rt.group, rt.version)
            };
            let collection = if rt.namespaced {
                format!("{base}/namespaces/{namespace}/{}", rt.plural)
            } else {
                format!("{base}/{}", rt.plural)
            };
            object["metadata"]["annotations"][INVENTORY_ANNOTATION] = json!(INVENTORY_NAME);
            Some(ManifestObject {
                inventory_key: inventory_key(&namespace, &name, &rt.group, &kind),
                object,
                collection,
                name,
            })
        })
        .collect()
}
