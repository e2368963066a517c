//! What Talos's NodeApplyController does to its Node: the labels, annotations and taints of the
//! node's config are put on the Node object, and Talos remembers which keys it owns in the
//! `talos.dev/owned-labels`, `talos.dev/owned-annotations` and `talos.dev/owned-taints`
//! annotations (sorted JSON lists), so that it takes over a key only when it is absent or already
//! holds the value, changes only keys it owns, and removes owned keys the config no longer has
//! (`internal/app/machined/pkg/controllers/k8s/node_apply.go`, `applyNodeKV`, `ApplyTaints`,
//! v1.13.9). The taints are read from the config as `NodeTaintSpecController` reads them: `value:Effect`,
//! or an effect alone (`node_taint_spec.go`).

use std::collections::{BTreeMap, BTreeSet};

use super::model::{NodeRecord, Taint};
use crate::mcfg::StoredConfig;

const OWNED_LABELS: &str = "talos.dev/owned-labels";
const OWNED_ANNOTATIONS: &str = "talos.dev/owned-annotations";
const OWNED_TAINTS: &str = "talos.dev/owned-taints";

/// What Talos puts on its Node: labels, annotations, taints.
pub(super) struct NodeSpec {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// Talos's `K8sNodeConfig()` of `cfg`: its node labels, annotations and taints, and for a
/// v1alpha1 control plane the role label and (unless `allowSchedulingOnControlPlanes`) the
/// role's NoSchedule taint (`k8sNodeConfigShim.Labels`/`Taints`,
/// pkg/machinery/config/types/v1alpha1/v1alpha1_k8s_bridge.go @ v1.14.1; a KubeNodeConfig
/// document lists them itself).
pub(super) fn talos_spec(cfg: &StoredConfig) -> NodeSpec {
    let mut spec = NodeSpec {
        labels: cfg.node_labels(),
        annotations: cfg.node_annotations(),
        taints: taints_of(cfg),
    };
    let shim = !cfg
        .docs()
        .iter()
        .any(|d| d.get("kind").and_then(serde_json::Value::as_str) == Some("KubeNodeConfig"));
    if shim && cfg.machine_type().is_some_and(|t| t.is_control_plane()) {
        spec.labels.insert(CONTROL_PLANE_ROLE.into(), String::new());
        let schedules = cfg
            .v1alpha1()
            .and_then(|d| d.pointer("/cluster/allowSchedulingOnControlPlanes"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        if !schedules && !spec.taints.iter().any(|t| t.key == CONTROL_PLANE_ROLE) {
            spec.taints.push(Taint {
                key: CONTROL_PLANE_ROLE.into(),
                value: String::new(),
                effect: "NoSchedule".into(),
            });
        }
    }
    spec
}

/// Brings `rec` to what `cfg` asks for; whether anything changed (the Node's resourceVersion moves).
pub(super) fn apply(rec: &mut NodeRecord, cfg: &StoredConfig) -> bool {
    let spec = NodeSpec {
        labels: cfg.node_labels(),
        annotations: cfg.node_annotations(),
        taints: taints_of(cfg),
    };
    apply_spec(rec, &spec)
}

/// Brings `rec` to `spec` under Talos's ownership rules; whether anything changed.
pub(super) fn apply_spec(rec: &mut NodeRecord, spec: &NodeSpec) -> bool {
    let before = (
        rec.labels.clone(),
        rec.annotations.clone(),
        rec.taints.clone(),
    );
    let mut owned_labels = owned(rec, OWNED_LABELS);
    let mut owned_annotations = owned(rec, OWNED_ANNOTATIONS);
    let mut owned_taints = owned(rec, OWNED_TAINTS);
    apply_kv(&mut rec.labels, &mut owned_labels, &spec.labels);
    apply_kv(
        &mut rec.annotations,
        &mut owned_annotations,
        &spec.annotations,
    );
    apply_taints(&mut rec.taints, &mut owned_taints, &spec.taints);
    set_owned(rec, OWNED_LABELS, &owned_labels);
    set_owned(rec, OWNED_ANNOTATIONS, &owned_annotations);
    set_owned(rec, OWNED_TAINTS, &owned_taints);
    before
        != (
            rec.labels.clone(),
            rec.annotations.clone(),
            rec.taints.clone(),
        )
}

fn owned(rec: &NodeRecord, annotation: &str) -> BTreeSet<String> {
    rec.annotations
        .get(annotation)
        .and_then(|json| serde_json::from_str::<Vec<String>>(json).ok())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

fn set_owned(rec: &mut NodeRecord, annotation: &str, owned: &BTreeSet<String>) {
    if owned.is_empty() {
        rec.annotations.remove(annotation);
    } else {
        let list: Vec<&String> = owned.iter().collect();
        rec.annotations.insert(
            annotation.to_string(),
            serde_json::to_string(&list).expect("a list of strings serializes"),
        );
    }
}

fn apply_kv(
    node: &mut BTreeMap<String, String>,
    owned: &mut BTreeSet<String>,
    spec: &BTreeMap<String, String>,
) {
    for (key, value) in spec {
        match node.get(key) {
            None => {
                node.insert(key.clone(), value.clone());
                owned.insert(key.clone());
            }
            Some(current) if current == value => {
                owned.insert(key.clone());
            }
            // Someone else's key: left alone.
            Some(_) if !owned.contains(key) => {}
            Some(_) => {
                node.insert(key.clone(), value.clone());
            }
        }
    }
    owned.retain(|key| {
        let keep = spec.contains_key(key);
        if !keep {
            node.remove(key);
        }
        keep
    });
}

fn apply_taints(node: &mut Vec<Taint>, owned: &mut BTreeSet<String>, spec: &[Taint]) {
    for taint in spec {
        match node.iter().position(|t| t.key == taint.key) {
            None => {
                node.push(taint.clone());
                owned.insert(taint.key.clone());
            }
            Some(i) if node[i] == *taint => {
                owned.insert(taint.key.clone());
            }
            Some(_) if !owned.contains(&taint.key) => {}
            Some(i) => node[i] = taint.clone(),
        }
    }
    owned.retain(|key| {
        let keep = spec.iter().any(|t| &t.key == key);
        if !keep {
            node.retain(|t| &t.key != key);
        }
        keep
    });
}

fn taints_of(cfg: &StoredConfig) -> Vec<Taint> {
    cfg.node_taints()
        .into_iter()
        .map(|(key, text)| {
            let (value, effect) = match text.split_once(':') {
                Some((value, effect)) => (value.to_string(), effect.to_string()),
                None => (String::new(), text),
            };
            Taint { key, value, effect }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `applyNodeKV` in node_apply.go @ v1.13.9: takes over absent keys and keys that already
    /// hold the value, never changes a key it does not own, removes owned keys the spec dropped.
    #[test]
    fn labels_follow_upstreams_ownership_rules() {
        let mut node = map(&[("theirs", "x"), ("same", "v")]);
        let mut owned = BTreeSet::new();
        apply_kv(
            &mut node,
            &mut owned,
            &map(&[("theirs", "mine"), ("same", "v"), ("new", "n")]),
        );
        assert_eq!(node, map(&[("theirs", "x"), ("same", "v"), ("new", "n")]));
        assert_eq!(owned, ["new", "same"].map(String::from).into());
        apply_kv(&mut node, &mut owned, &map(&[("same", "w")]));
        assert_eq!(node, map(&[("theirs", "x"), ("same", "w")]));
        assert_eq!(owned, ["same"].map(String::from).into());
    }

    #[test]
    fn taints_are_owned_by_key() {
        let taint = |k: &str, v: &str, e: &str| Taint {
            key: k.into(),
            value: v.into(),
            effect: e.into(),
        };
        let mut node = vec![taint("theirs", "", "NoSchedule")];
        let mut owned = BTreeSet::new();
        let spec = vec![
            taint("theirs", "x", "NoExecute"),
            taint("dedicated", "storage", "NoSchedule"),
        ];
        apply_taints(&mut node, &mut owned, &spec);
        assert_eq!(
            node,
            vec![
                taint("theirs", "", "NoSchedule"),
                taint("dedicated", "storage", "NoSchedule")
            ]
        );
        apply_taints(&mut node, &mut owned, &[]);
        assert_eq!(node, vec![taint("theirs", "", "NoSchedule")]);
        assert!(owned.is_empty());
    }
}
