//! The inventory of the bootstrap manifests: which objects the last sync applied, so the next one
//! can prune what Talos no longer renders. It is the ConfigMap
//! `kube-system/talos-bootstrap-manifests-inventory` whose `data` keys name the objects (values
//! empty), the layout go-kubernetes v0.2.38 `kubernetes/ssa/internal/inventory/configmap` writes
//! and Talos's own bootstrap apply (`internal/app/machined/pkg/controllers/k8s/manifest_apply.go`
//! at v1.13.9) reads; keys are cli-utils' `ObjMetadata` strings
//! (`pkg/object/objmetadata.go`, fluxcd/cli-utils v1.2.0).

use std::collections::BTreeSet;
use std::fmt;

use kube::core::Request;
use kube::core::params::{GetParams, PostParams};
use serde_json::{Value, json};

use crate::access::Kube;
use crate::error::Result;
use crate::objects::built;
use crate::transport::RequestError;

pub const INVENTORY_NAMESPACE: &str = "kube-system";
pub const INVENTORY_NAME: &str = "talos-bootstrap-manifests-inventory";
/// The annotation that says which inventory owns an object; its value is the inventory's name.
pub const OWNING_INVENTORY: &str = "config.k8s.io/owning-inventory";

/// An object by what identifies it across API versions: group, kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub group: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

/// RBAC object names may hold `:`, which the key format reserves (cli-utils' `RBACGroup`).
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const COLON: &str = "__";

impl ObjectRef {
    /// `<namespace>_<name>_<group>_<Kind>`.
    pub fn inventory_key(&self) -> String {
        let name = if self.group == RBAC_GROUP {
            self.name.replace(':', COLON)
        } else {
            self.name.clone()
        };
        format!("{}_{}_{}_{}", self.namespace, name, self.group, self.kind)
    }

    /// The inverse of [`inventory_key`](Self::inventory_key): the namespace ends at the first `_`,
    /// the kind starts after the last, the group after the one before it. None for a key that is
    /// not one.
    pub fn from_inventory_key(key: &str) -> Option<ObjectRef> {
        let (namespace, rest) = key.split_once('_')?;
        let (rest, kind) = rest.rsplit_once('_')?;
        let (name, group) = rest.rsplit_once('_')?;
        if name.is_empty() || kind.is_empty() {
            return None;
        }
        let name = if group == RBAC_GROUP {
            name.replace(COLON, ":")
        } else {
            name.to_string()
        };
        Some(ObjectRef {
            group: group.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name,
        })
    }
}

/// `DaemonSet/kube-system/kube-proxy`, `ClusterRole/flannel`: how talosctl names an object.
impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// What the inventory ConfigMap lists, and whether it exists yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    pub objects: BTreeSet<ObjectRef>,
    pub exists: bool,
}

fn config_maps() -> String {
    format!("/api/v1/namespaces/{INVENTORY_NAMESPACE}/configmaps")
}

impl Kube {
    /// The inventory as the cluster holds it; an absent ConfigMap is an empty inventory (a
    /// cluster bootstrapped by a Talos before 1.13 has none). Keys that do not parse are ignored,
    /// as the upstream reader skips them.
    pub async fn read_inventory(&self) -> Result<Inventory> {
        let what = format!("read the inventory {INVENTORY_NAMESPACE}/{INVENTORY_NAME}");
        let req = built(Request::new(config_maps()).get(INVENTORY_NAME, &GetParams::default()))
            .map_err(|e| self.error(&what, e))?;
        match self.transport.send::<Value>(req).await {
            Ok(cm) => {
                let objects = cm["data"]
                    .as_object()
                    .map(|data| {
                        data.keys()
                            .filter_map(|k| ObjectRef::from_inventory_key(k))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Inventory {
                    objects,
                    exists: true,
                })
            }
            Err(e) if e.code() == Some(404) => Ok(Inventory::default()),
            Err(e) => Err(self.error(&what, e)),
        }
    }

    /// Replaces the inventory with `objects`: a fresh ConfigMap with only its name, namespace and
    /// data, written with an unconditional update (or created when it does not exist), as the
    /// upstream writer does.
    pub async fn write_inventory(&self, inventory: &Inventory) -> Result<()> {
        let what = format!("write the inventory {INVENTORY_NAMESPACE}/{INVENTORY_NAME}");
        let data: serde_json::Map<String, Value> = inventory
            .objects
            .iter()
            .map(|o| (o.inventory_key(), Value::String(String::new())))
            .collect();
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": INVENTORY_NAME, "namespace": INVENTORY_NAMESPACE},
            "data": data,
        });
        let bytes = serde_json::to_vec(&body).map_err(|e| {
            self.error(
                &what,
                RequestError::Transport(format!("cannot encode: {e}")),
            )
        })?;
        let params = PostParams::default();
        let req = if inventory.exists {
            Request::new(config_maps()).replace(INVENTORY_NAME, &params, bytes)
        } else {
            Request::new(config_maps()).create(&params, bytes)
        };
        let req = built(req).map_err(|e| self.error(&what, e))?;
        self.transport
            .send::<Value>(req)
            .await
            .map(|_| ())
            .map_err(|e| self.error(&what, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(group: &str, kind: &str, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn keys_follow_cli_utils_obj_metadata() {
        let proxy = obj("apps", "DaemonSet", "kube-system", "kube-proxy");
        assert_eq!(
            proxy.inventory_key(),
            "kube-system_kube-proxy_apps_DaemonSet"
        );
        let sa = obj("", "ServiceAccount", "kube-system", "kube-proxy");
        assert_eq!(sa.inventory_key(), "kube-system_kube-proxy__ServiceAccount");
        let crb = obj(RBAC_GROUP, "ClusterRoleBinding", "", "system:talos-nodes");
        assert_eq!(
            crb.inventory_key(),
            "_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding"
        );
        for o in [proxy, sa, crb] {
            assert_eq!(ObjectRef::from_inventory_key(&o.inventory_key()), Some(o));
        }
    }

    #[test]
    fn names_with_underscores_survive_and_junk_is_refused() {
        let o = obj("", "ConfigMap", "default", "my_config");
        assert_eq!(ObjectRef::from_inventory_key(&o.inventory_key()), Some(o));
        assert_eq!(ObjectRef::from_inventory_key("nonsense"), None);
        assert_eq!(ObjectRef::from_inventory_key("a_b"), None);
    }

    #[test]
    fn subjects_read_like_talosctl_s() {
        assert_eq!(
            obj("apps", "DaemonSet", "kube-system", "kube-proxy").to_string(),
            "DaemonSet/kube-system/kube-proxy"
        );
        assert_eq!(
            obj(RBAC_GROUP, "ClusterRole", "", "flannel").to_string(),
            "ClusterRole/flannel"
        );
    }
}
