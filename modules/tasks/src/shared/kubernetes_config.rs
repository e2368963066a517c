//! Where a node's machine config keeps its Kubernetes settings, in either shape.
//!
//! Up to Talos 1.13 every component's settings are a mapping of the v1alpha1 document
//! (`machine.kubelet`, `cluster.apiServer`, ...) and the cluster endpoint is
//! `cluster.controlPlane.endpoint`. Talos 1.14 gives each its own document (`KubeletConfig`,
//! `KubeAPIServerConfig`, `KubeControllerManagerConfig`, `KubeSchedulerConfig`, `KubeProxyConfig`,
//! and `KubeClusterConfig` for the endpoint; `pkg/machinery/config/types/k8s/*.go` @ v1.14.1), and
//! the two are exclusive: each document's `V1Alpha1ConflictValidate` refuses a config that also
//! sets the v1alpha1 mapping. A 1.14 node runs either shape (one rendered for 1.13 keeps working),
//! so the shape is decided per component from the config itself, as upstream does:
//! `Container.K8s*Config` (`pkg/machinery/config/container/container.go` @ v1.14.1) takes the
//! document when there is one, else the v1alpha1 fields, and `talosctl upgrade-k8s` patches the
//! document when the config has one (`stdpatches.GuessVersionContract*` in
//! `pkg/machinery/config/generate/stdpatches/guess.go`, `WithKube*Image` in `stdpatches.go`).

use ferro_talos_config::MachineConfig;
use ferro_talos_config::document::DocId;
use serde_json::{Map, Value};

/// The components whose settings moved, with their v1alpha1 mapping and their 1.14 document.
const SECTIONS: &[(&str, &str, &str)] = &[
    ("kubelet", "/machine/kubelet", "KubeletConfig"),
    (
        "kube-apiserver",
        "/cluster/apiServer",
        "KubeAPIServerConfig",
    ),
    (
        "kube-controller-manager",
        "/cluster/controllerManager",
        "KubeControllerManagerConfig",
    ),
    (
        "kube-scheduler",
        "/cluster/scheduler",
        "KubeSchedulerConfig",
    ),
    ("kube-proxy", "/cluster/proxy", "KubeProxyConfig"),
];

/// Where one component's settings are in one config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// A Talos 1.14 document of this kind.
    Document(&'static str),
    /// A mapping of the v1alpha1 document, as a JSON pointer (`/machine/kubelet`).
    V1alpha1(&'static str),
}

fn document<'a>(config: &'a MachineConfig, kind: &str) -> Option<&'a Value> {
    config.docs.iter().find(|d| is_kind(d, kind))
}

fn is_kind(doc: &Value, kind: &str) -> bool {
    let id = DocId::of(doc);
    !id.is_v1alpha1() && id.kind == kind
}

impl Section {
    /// Where `component` (`kubelet`, `kube-apiserver`, ...) keeps its settings in `config`: its
    /// 1.14 document when the config has one, else the v1alpha1 mapping. None for a component
    /// that has no settings of its own.
    pub fn of(config: &MachineConfig, component: &str) -> Option<Section> {
        let &(_, pointer, kind) = SECTIONS.iter().find(|(name, _, _)| *name == component)?;
        Some(if document(config, kind).is_some() {
            Section::Document(kind)
        } else {
            Section::V1alpha1(pointer)
        })
    }

    /// The field `key` of the section (`image`, `extraArgs`, ...).
    pub fn get<'a>(self, config: &'a MachineConfig, key: &str) -> Option<&'a Value> {
        match self {
            Section::Document(kind) => document(config, kind)?.get(key),
            Section::V1alpha1(pointer) => config.v1alpha1()?.pointer(pointer)?.get(key),
        }
    }

    /// A string field, trimmed; None when absent or empty.
    pub fn get_str<'a>(self, config: &'a MachineConfig, key: &str) -> Option<&'a str> {
        self.get(config, key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// Sets the field `key`, as upstream's patch of only that field merges it (the missing
    /// v1alpha1 mappings created on the way). False when there is nowhere to put it: the
    /// document is gone, or the config has no v1alpha1 document.
    pub fn set(self, config: &mut MachineConfig, key: &str, value: Value) -> bool {
        let section = match self {
            Section::Document(kind) => config.docs.iter_mut().find(|d| is_kind(d, kind)),
            Section::V1alpha1(pointer) => {
                config.v1alpha1_mut().and_then(|v1| mapping_at(v1, pointer))
            }
        };
        match section.and_then(Value::as_object_mut) {
            Some(map) => {
                map.insert(key.to_string(), value);
                true
            }
            None => false,
        }
    }

    /// The field's place as a user writes it: `KubeletConfig.image`, `machine.kubelet.image`.
    pub fn path(self, key: &str) -> String {
        match self {
            Section::Document(kind) => format!("{kind}.{key}"),
            Section::V1alpha1(pointer) => {
                format!(
                    "{}.{key}",
                    pointer.trim_start_matches('/').replace('/', ".")
                )
            }
        }
    }

    /// The component is switched off: `enabled: false` in its 1.14 document, `disabled: true` in
    /// v1alpha1 (`types/k8s/proxy.go` `Enabled` @ v1.14.1; `v1alpha1_types.go` `ProxyConfig`).
    pub fn disabled(self, config: &MachineConfig) -> bool {
        match self {
            Section::Document(_) => {
                self.get(config, "enabled").and_then(Value::as_bool) == Some(false)
            }
            Section::V1alpha1(_) => {
                self.get(config, "disabled").and_then(Value::as_bool) == Some(true)
            }
        }
    }
}

/// The mapping at `pointer` in `doc`, created (and anything in the way replaced) if missing.
fn mapping_at<'a>(doc: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
    let mut at = doc;
    for key in pointer.trim_start_matches('/').split('/') {
        let map = at.as_object_mut()?;
        let next = map
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !next.is_object() {
            *next = Value::Object(Map::new());
        }
        at = next;
    }
    Some(at)
}

/// The cluster's Kubernetes API endpoint: `KubeClusterConfig.endpoint` (Talos 1.14,
/// `types/k8s/cluster.go` @ v1.14.1), else `cluster.controlPlane.endpoint`, as
/// `Container.K8sClusterConfig` reads it.
pub fn cluster_endpoint(config: &MachineConfig) -> Option<&str> {
    let from_document = document(config, "KubeClusterConfig").map(|d| d.get("endpoint"));
    let value = match from_document {
        Some(endpoint) => endpoint,
        None => config
            .v1alpha1()
            .and_then(|v| v.pointer("/cluster/controlPlane/endpoint")),
    };
    value
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Where a user finds the endpoint, for messages.
pub const ENDPOINT_PLACES: &str =
    "KubeClusterConfig.endpoint (Talos 1.14) or cluster.controlPlane.endpoint";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(docs: Vec<Value>) -> MachineConfig {
        MachineConfig { docs }
    }

    fn v1_13() -> MachineConfig {
        config(vec![json!({
            "version": "v1alpha1",
            "machine": {"type": "controlplane", "kubelet": {"image": "ghcr.io/siderolabs/kubelet:v1.36.2"}},
            "cluster": {"controlPlane": {"endpoint": "https://old:6443"},
                        "apiServer": {"image": "registry.k8s.io/kube-apiserver:v1.36.2"}},
        })])
    }

    fn v1_14() -> MachineConfig {
        config(vec![
            json!({"version": "v1alpha1", "machine": {"type": "controlplane"}, "cluster": {}}),
            json!({"apiVersion": "v1alpha1", "kind": "KubeClusterConfig", "clusterName": "c",
                   "endpoint": "https://new:6443"}),
            json!({"apiVersion": "v1alpha1", "kind": "KubeletConfig",
                   "image": "ghcr.io/siderolabs/kubelet:v1.36.2"}),
            json!({"apiVersion": "v1alpha1", "kind": "KubeProxyConfig", "enabled": false}),
        ])
    }

    /// `stdpatches/guess.go` @ v1.14.1: the document when the config has it, else v1alpha1; the
    /// two shapes in one config are per component.
    #[test]
    fn each_component_is_read_where_its_config_keeps_it() {
        let old = v1_13();
        let kubelet = Section::of(&old, "kubelet").unwrap();
        assert_eq!(kubelet, Section::V1alpha1("/machine/kubelet"));
        assert_eq!(
            kubelet.get_str(&old, "image"),
            Some("ghcr.io/siderolabs/kubelet:v1.36.2")
        );
        assert_eq!(kubelet.path("image"), "machine.kubelet.image");
        let new = v1_14();
        let kubelet = Section::of(&new, "kubelet").unwrap();
        assert_eq!(kubelet, Section::Document("KubeletConfig"));
        assert_eq!(kubelet.path("image"), "KubeletConfig.image");
        assert_eq!(
            kubelet.get_str(&new, "image"),
            Some("ghcr.io/siderolabs/kubelet:v1.36.2")
        );
        // No KubeAPIServerConfig in this one: the v1alpha1 place, which is empty.
        let api = Section::of(&new, "kube-apiserver").unwrap();
        assert_eq!(api, Section::V1alpha1("/cluster/apiServer"));
        assert_eq!(api.get_str(&new, "image"), None);
        assert!(Section::of(&new, "kube-proxy").unwrap().disabled(&new));
        assert!(!Section::of(&old, "kube-proxy").unwrap().disabled(&old));
        assert_eq!(Section::of(&new, "etcd"), None);
    }

    #[test]
    fn an_image_is_set_in_its_own_place_only() {
        let mut new = v1_14();
        let kubelet = Section::of(&new, "kubelet").unwrap();
        assert!(kubelet.set(&mut new, "image", json!("k:v1.36.3")));
        assert_eq!(new.docs[2]["image"], "k:v1.36.3");
        assert_eq!(new.docs[0]["machine"].get("kubelet"), None);
        let mut old = v1_13();
        let sched = Section::of(&old, "kube-scheduler").unwrap();
        assert!(sched.set(&mut old, "image", json!("s:v1.36.3")));
        assert_eq!(old.docs[0]["cluster"]["scheduler"]["image"], "s:v1.36.3");
        let mut none = config(vec![]);
        assert!(!Section::V1alpha1("/machine/kubelet").set(&mut none, "image", json!("x")));
    }

    /// `types/k8s/cluster.go` @ v1.14.1 and `Container.K8sClusterConfig`: the document first.
    #[test]
    fn the_endpoint_comes_from_either_shape() {
        assert_eq!(cluster_endpoint(&v1_13()), Some("https://old:6443"));
        assert_eq!(cluster_endpoint(&v1_14()), Some("https://new:6443"));
        assert_eq!(
            cluster_endpoint(&config(vec![json!({"machine": {}})])),
            None
        );
    }
}
