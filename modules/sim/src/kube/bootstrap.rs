//! Talos's own apply of its bootstrap manifests (upstream
//! `internal/app/machined/pkg/controllers/k8s/manifest_apply.go` at v1.13.9): once etcd is
//! bootstrapped each control plane takes its Manifest resources sorted by id, flattens them,
//! moves Namespaces and then CRDs to the front, and for each object that is neither in the
//! inventory nor in the cluster yet applies it (server-side, field manager `talos`, no force)
//! with the annotation `config.k8s.io/owning-inventory: talos-bootstrap-manifests-inventory`.
//! Objects that exist are only recorded in the inventory ConfigMap
//! `kube-system/talos-bootstrap-manifests-inventory`. It never updates or prunes: a changed
//! `cluster.proxy.image` re-renders the Manifest resource, but the DaemonSet stays until
//! `talosctl upgrade-k8s` syncs it.
//!
//! Upstream runs when its inputs change; the simulator runs it when a control plane's config
//! changes (or one comes up), which is when the rendered manifests can change.
//!
//! The inventory's keys are cli-utils' `ObjMetadata.String()` (`github.com/fluxcd/cli-utils`
//! pkg/object/objmetadata.go): `<namespace>_<name>_<group>_<Kind>` with an empty namespace for
//! cluster-scoped objects, an empty group for core, and `:` written `__` in the names of RBAC
//! kinds; the ConfigMap is read and written as `github.com/siderolabs/go-kubernetes`
//! ssa/internal/inventory/configmap/inventory.go does (created empty when missing, then a full
//! update of name, namespace and data with empty values).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::kinds::{self, split_api_version};
use super::model::KubeState;
use super::objects::{ObjectKey, name_of, namespace_of};
use super::writes::Writer;
use crate::state::Node;

pub const INVENTORY_NAMESPACE: &str = "kube-system";
pub const INVENTORY_NAME: &str = "talos-bootstrap-manifests-inventory";
pub const INVENTORY_ANNOTATION: &str = "config.k8s.io/owning-inventory";
pub const FIELD_MANAGER: &str = "talos";

const RBAC_KINDS: &[&str] = &["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];

/// One inventory key.
pub fn inventory_key(namespace: &str, name: &str, group: &str, kind: &str) -> String {
    let name = if group == "rbac.authorization.k8s.io" && RBAC_KINDS.contains(&kind) {
        name.replace(':', "__")
    } else {
        name.to_string()
    };
    format!("{namespace}_{name}_{group}_{kind}")
}

fn inventory_object_key() -> ObjectKey {
    ObjectKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: INVENTORY_NAMESPACE.into(),
        name: INVENTORY_NAME.into(),
    }
}

/// Namespaces first, then CRDs, the rest in their order (upstream's stable sort).
/// The objects of a control plane's Manifest resources, flattened, Namespaces and then CRDs first.
pub(super) fn manifest_objects(n: &Node) -> Vec<Value> {
    let mut objects: Vec<Value> = n
        .components
        .manifests()
        .iter()
        .flat_map(|(_, r)| r.objects.iter().cloned())
        .collect();
    objects.sort_by_key(|o| {
        apply_order(
            o["kind"].as_str().unwrap_or(""),
            o["apiVersion"].as_str().unwrap_or(""),
        )
    });
    objects
}

fn apply_order(kind: &str, api_version: &str) -> u8 {
    match (kind, api_version) {
        ("Namespace", "v1") => 0,
        ("CustomResourceDefinition", v) if v.starts_with("apiextensions.k8s.io/") => 1,
        _ => 2,
    }
}

impl KubeState {
    /// The inventory's keys, empty when it does not exist.
    pub fn inventory(&self) -> BTreeSet<String> {
        self.objects
            .get(&inventory_object_key())
            .and_then(|cm| cm.get("data"))
            .and_then(Value::as_object)
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Runs each up control plane's bootstrap apply for a config it has not run for yet (a
    /// reboot with the same config finds everything in the inventory already).
    pub fn bootstrap_apply(&mut self, st_nodes: &[Node]) {
        let sources: Vec<&Node> = st_nodes
            .iter()
            .filter(|n| n.up && n.is_control_plane() && !n.services_stopped)
            .collect();
        for n in sources {
            let Some(digest) = n.active.as_ref().map(|c| c.digest.clone()) else {
                continue;
            };
            if self.bootstrap_applied.insert(digest) {
                self.apply_manifests_of(n);
            }
        }
    }

    fn apply_manifests_of(&mut self, n: &Node) {
        let writer = Writer {
            manager: FIELD_MANAGER,
            dry_run: false,
        };
        let objects = manifest_objects(n);
        let mut inventory = self.inventory();
        for mut object in objects {
            let api_version = object["apiVersion"].as_str().unwrap_or("").to_string();
            let kind = object["kind"].as_str().unwrap_or("").to_string();
            // No mapping for the kind (a custom resource whose CRD is missing): skipped, as
            // upstream records the error and goes on.
            let Some(rt) = kinds::by_kind(&self.objects, &api_version, &kind) else {
                continue;
            };
            if !rt.stored {
                continue;
            }
            let namespace = match namespace_of(&object) {
                "" if rt.namespaced => "default".to_string(),
                ns if rt.namespaced => ns.to_string(),
                _ => String::new(),
            };
            let name = name_of(&object).to_string();
            let (group, _) = split_api_version(&api_version);
            let entry = inventory_key(&namespace, &name, group, &kind);
            if inventory.contains(&entry) {
                continue;
            }
            let key = ObjectKey::new(&rt, &namespace, &name);
            if self.objects.get(&key).is_some() {
                inventory.insert(entry);
                continue;
            }
            let foreign = object
                .pointer(&format!(
                    "/metadata/annotations/{}",
                    INVENTORY_ANNOTATION.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .is_some_and(|v| v != INVENTORY_NAME);
            if foreign {
                continue;
            }
            object["metadata"]["annotations"][INVENTORY_ANNOTATION] = json!(INVENTORY_NAME);
            if self.apply_object(&rt, key, &object, false, &writer).is_ok() {
                inventory.insert(entry);
            }
        }
        self.write_inventory(&inventory, &writer);
    }

    /// GetInventory (created empty when missing) and Write (a full update).
    fn write_inventory(&mut self, inventory: &BTreeSet<String>, writer: &Writer<'_>) {
        let Some(rt) = kinds::by_kind(&self.objects, "v1", "ConfigMap") else {
            return;
        };
        let key = inventory_object_key();
        let body = |data: Map<String, Value>| {
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": INVENTORY_NAME, "namespace": INVENTORY_NAMESPACE},
                "data": data,
            })
        };
        if self.objects.get(&key).is_none() {
            let _ = self.create_object(&rt, key.clone(), &body(Map::new()), writer);
        } else if self.inventory() == *inventory {
            // The same contents: upstream writes them again, which changes nothing.
            return;
        }
        let data: Map<String, Value> = inventory.iter().map(|k| (k.clone(), json!(""))).collect();
        let _ = self.update_object(&rt, key, &body(data), writer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_keys_are_cli_utils_object_metadata() {
        assert_eq!(
            inventory_key("kube-system", "kube-proxy", "apps", "DaemonSet"),
            "kube-system_kube-proxy_apps_DaemonSet"
        );
        assert_eq!(
            inventory_key("kube-system", "kube-proxy", "", "ServiceAccount"),
            "kube-system_kube-proxy__ServiceAccount"
        );
        assert_eq!(
            inventory_key(
                "",
                "system:talos-nodes",
                "rbac.authorization.k8s.io",
                "ClusterRoleBinding"
            ),
            "_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding"
        );
    }
}
