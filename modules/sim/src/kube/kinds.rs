//! The API resources the simulated API server knows: the built-in ones (core, apps, rbac,
//! apiextensions, policy) and the custom resources of the CustomResourceDefinitions it stores.
//! Names, scopes, short names and verbs as `kubectl api-resources` shows them on Kubernetes 1.36.

use serde_json::Value;

use super::objects::ObjectStore;

#[derive(Clone, Debug, PartialEq)]
pub struct ResourceType {
    /// Empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// The categories discovery lists it in (`kubectl get all` reads `all`).
    pub categories: Vec<String>,
    /// Served from the generic object store (Nodes, Pods and PodDisruptionBudgets have routes
    /// of their own in `api.rs`).
    pub stored: bool,
    /// `metadata.generation` is kept: the registry strategies of workloads, CRDs and custom
    /// resources set it, those of ConfigMaps, Secrets, RBAC and the like do not.
    pub generation: bool,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `daemonsets.apps`, `configmaps`: how Kubernetes names a resource in its messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        if self.stored {
            vec![
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        } else if self.kind == "Node" {
            vec!["get", "list", "patch"]
        } else {
            vec!["get", "list"]
        }
    }
}

/// (group, version, kind, plural, namespaced, short names, stored, generation)
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    bool,
);

const BUILTIN: &[Builtin] = &[
    (
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        true,
        &["cm"],
        true,
        false,
    ),
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        true,
        false,
    ),
    ("", "v1", "Node", "nodes", false, &["no"], false, false),
    ("", "v1", "Pod", "pods", true, &["po"], false, false),
    ("", "v1", "Secret", "secrets", true, &[], true, false),
    ("", "v1", "Service", "services", true, &["svc"], true, false),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        true,
        false,
    ),
    (
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        true,
        &["ds"],
        true,
        true,
    ),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        true,
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        true,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        true,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        true,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        true,
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
        true,
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
        false,
        false,
    ),
];

/// The built-in resources in the `all` category: their registries' `Categories()` (pods,
/// services, replication controllers and the workloads; `pkg/registry/*/storage` @ v1.36.3), as
/// kube-apiserver's discovery lists them.
fn builtin_categories(group: &str, plural: &str) -> Vec<String> {
    let all = matches!(
        (group, plural),
        ("", "pods" | "services" | "replicationcontrollers")
            | (
                "apps",
                "daemonsets" | "deployments" | "replicasets" | "statefulsets"
            )
            | ("batch", "jobs" | "cronjobs")
    );
    if all { vec!["all".to_string()] } else { vec![] }
}

fn builtin() -> impl Iterator<Item = ResourceType> {
    BUILTIN.iter().map(
        |(group, version, kind, plural, namespaced, short, stored, generation)| ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            namespaced: *namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: builtin_categories(group, plural),
            stored: *stored,
            generation: *generation,
        },
    )
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The served versions of one stored CustomResourceDefinition.
fn custom(crd: &Value) -> Vec<ResourceType> {
    let kind = text(crd, "/spec/names/kind");
    let plural = text(crd, "/spec/names/plural");
    let group = text(crd, "/spec/group");
    if kind.is_empty() || plural.is_empty() || group.is_empty() {
        return vec![];
    }
    let singular = match text(crd, "/spec/names/singular") {
        s if s.is_empty() => kind.to_lowercase(),
        s => s,
    };
    let short_names: Vec<String> = crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let categories: Vec<String> = crd
        .pointer("/spec/names/categories")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let namespaced = text(crd, "/spec/scope") != "Cluster";
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .map(|version| ResourceType {
            group: group.clone(),
            version: version.to_string(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            stored: true,
            generation: true,
        })
        .collect()
}

/// Every resource the API serves now.
pub fn all(store: &ObjectStore) -> Vec<ResourceType> {
    let mut out: Vec<ResourceType> = builtin().collect();
    for crd in store.of_kind("apiextensions.k8s.io", "CustomResourceDefinition") {
        out.extend(custom(crd));
    }
    out
}

/// The resource at `/api/v1/...` (empty group) or `/apis/{group}/{version}/...`.
pub fn by_plural(
    store: &ObjectStore,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<ResourceType> {
    all(store)
        .into_iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource an object names with its apiVersion and kind.
pub fn by_kind(store: &ObjectStore, api_version: &str, kind: &str) -> Option<ResourceType> {
    all(store)
        .into_iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

/// `apps/v1` -> (`apps`, `v1`); `v1` -> (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}
