//! API discovery as kube-rs, client-go and the Python client read it: `/api/v1` and
//! `/apis/{group}/{version}` (APIResourceList) and `/apis` (APIGroupList), in the shapes of
//! `k8s.io/apimachinery/pkg/apis/meta/v1` (types.go: APIResourceList, APIResource,
//! APIGroupList, APIGroup, GroupVersionForDiscovery). `/api` stays in `api.rs`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::kinds::{self, ResourceType};
use super::objects::ObjectStore;

fn resource(r: &ResourceType) -> Value {
    let mut v = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    v
}

fn subresource(r: &ResourceType, sub: &str, kind: &str, verbs: &[&str]) -> Value {
    json!({
        "name": format!("{}/{sub}", r.plural),
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": kind,
        "verbs": verbs,
    })
}

/// The APIResourceList of one group version; None when the server has no such version.
pub fn resource_list(store: &ObjectStore, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in kinds::all(store)
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(resource(r));
        if r.kind == "Pod" {
            // The API server names the group and version an eviction is posted in; kubectl's
            // drain (and Talos's, which is kubectl's: go-kubernetes nodedrain) evicts only when
            // they are there, and deletes the pods otherwise (`CheckEvictionSupport`,
            // k8s.io/kubectl pkg/drain/drain.go @ v0.37.0). Found by talosctl's upgrade drain.
            let mut eviction = subresource(r, "eviction", "Eviction", &["create"]);
            eviction["group"] = json!("policy");
            eviction["version"] = json!("v1");
            resources.push(eviction);
        }
        if matches!(r.kind.as_str(), "DaemonSet" | "Deployment") {
            resources.push(subresource(r, "status", &r.kind, &["get"]));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// `/apis`: every named group with its versions, the first served one preferred.
pub fn group_list(store: &ObjectStore) -> Value {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in kinds::all(store)
        .into_iter()
        .filter(|r| !r.group.is_empty())
    {
        let versions = groups.entry(r.group.clone()).or_default();
        if !versions.contains(&r.version) {
            versions.push(r.version.clone());
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let listed: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({
                "name": name,
                "versions": listed,
                "preferredVersion": listed.first().cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`: one APIGroup.
pub fn group(store: &ObjectStore, name: &str) -> Option<Value> {
    let list = group_list(store);
    let found = list["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == name)?
        .clone();
    let mut g = found;
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_groups_are_discoverable() {
        let store = ObjectStore::default();
        let core = resource_list(&store, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        for n in [
            "configmaps",
            "namespaces",
            "nodes",
            "pods",
            "pods/eviction",
            "secrets",
        ] {
            assert!(names.contains(&n), "{n} in {names:?}");
        }
        let eviction = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/eviction")
            .unwrap();
        assert_eq!(
            (&eviction["group"], &eviction["version"]),
            (&json!("policy"), &json!("v1"))
        );
        let apps = resource_list(&store, "apps", "v1").unwrap();
        let ds = &apps["resources"][0];
        assert_eq!(
            (
                &ds["name"],
                &ds["kind"],
                &ds["namespaced"],
                &ds["singularName"]
            ),
            (
                &json!("daemonsets"),
                &json!("DaemonSet"),
                &json!(true),
                &json!("daemonset")
            )
        );
        let groups = group_list(&store);
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "apiextensions.k8s.io",
                "apps",
                "policy",
                "rbac.authorization.k8s.io"
            ]
        );
        assert_eq!(
            groups["groups"][1]["preferredVersion"],
            json!({"groupVersion": "apps/v1", "version": "v1"})
        );
        assert!(resource_list(&store, "apps", "v2").is_none());
    }
}
