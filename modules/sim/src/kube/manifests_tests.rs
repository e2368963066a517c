//! Rendering: the ids, the conditional manifests, images following the config, inline manifests.

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::*;
use crate::decode::Release;

static SAMPLE: LazyLock<crate::sample::SampleCluster> =
    LazyLock::new(crate::sample::SampleCluster::generate);

/// The sample control-plane config with `patch` merged into its v1alpha1 document.
fn config(patch: Value) -> StoredConfig {
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&SAMPLE.controlplane).unwrap();
    super::super::apply::merge(&mut docs[0], &patch, true);
    let text = docs
        .iter()
        .map(|d| serde_saphyr::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    StoredConfig::parse(text.as_bytes(), Release::V1_13).unwrap()
}

fn ids(r: &Rendered) -> Vec<&str> {
    r.keys().map(String::as_str).collect()
}

fn find<'a>(r: &'a Rendered, id: &str, kind: &str) -> &'a Value {
    r[id].iter().find(|o| o["kind"] == kind).unwrap()
}

#[test]
fn a_default_control_plane_renders_upstreams_ids_in_list_order() {
    let r = render(&config(json!({})));
    assert_eq!(
        ids(&r),
        [
            "00-kubelet-bootstrapping-token",
            "01-csr-approver-role-binding",
            "01-csr-node-bootstrap",
            "01-csr-renewal-role-binding",
            "05-flannel",
            "10-kube-proxy",
            "11-core-dns",
            "11-core-dns-svc",
            "11-kube-config-in-cluster",
            "11-talos-node-rbac-template",
        ]
    );
    let kinds: Vec<&str> = r["11-core-dns"]
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment"
        ]
    );
    let secret = &r["00-kubelet-bootstrapping-token"][0];
    let token = SAMPLE.bundle.secrets.bootstrap_token.clone();
    let (id, secret_part) = token.split_once('.').unwrap();
    assert_eq!(secret["metadata"]["name"], format!("bootstrap-token-{id}"));
    assert_eq!(secret["stringData"]["token-secret"], secret_part);
    let rbac = &r["11-talos-node-rbac-template"];
    assert_eq!(rbac[0]["kind"], "ClusterRoleBinding");
    assert_eq!(rbac[0]["metadata"]["name"], "system:talos-nodes");
    let svc = find(&r, "11-core-dns-svc", "Service");
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.10");
    let flannel = find(&r, "05-flannel", "DaemonSet");
    assert_eq!(
        flannel["spec"]["template"]["spec"]["containers"][0]["image"],
        FLANNEL_IMAGE
    );
}

#[test]
fn images_follow_the_config_and_switches_drop_manifests() {
    let r = render(&config(json!({"cluster": {
        "proxy": {"image": "registry.k8s.io/kube-proxy:v1.35.2"},
        "coreDNS": {"image": "registry.k8s.io/coredns/coredns:v1.12.0"},
    }})));
    let proxy = find(&r, "10-kube-proxy", "DaemonSet");
    let c = &proxy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.k8s.io/kube-proxy:v1.35.2");
    assert!(
        c["command"]
            .as_array()
            .unwrap()
            .contains(&json!("--proxy-mode=nftables"))
    );
    let dns = find(&r, "11-core-dns", "Deployment");
    assert_eq!(
        dns["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.k8s.io/coredns/coredns:v1.12.0"
    );
    assert_eq!(dns["spec"]["replicas"], 2);

    let off = render(&config(json!({"cluster": {
        "proxy": {"disabled": true},
        "coreDNS": {"disabled": true},
        "network": {"cni": {"name": "none"}},
    }})));
    for id in [
        "10-kube-proxy",
        "11-core-dns",
        "11-core-dns-svc",
        "05-flannel",
    ] {
        assert!(!off.contains_key(id), "{id} in {:?}", ids(&off));
    }
    assert!(off.contains_key("11-kube-config-in-cluster"));
}

#[test]
fn inline_manifests_are_split_and_lists_unwrapped() {
    let contents = "---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: one\n    namespace: apps\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: two\n    namespace: apps\n";
    let r = render(&config(json!({"cluster": {
        "inlineManifests": [{"name": "apps", "contents": contents}],
        "extraManifests": ["https://example.com/not-fetched.yaml"],
    }})));
    let names: Vec<&str> = r["99-apps"]
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["apps", "one", "two"]);
    assert_eq!(r.keys().last().map(String::as_str), Some("99-apps"));
}

#[test]
fn versions_go_up_only_when_the_rendering_changes() {
    let mut v = ManifestVersions::boot(&config(json!({})), SystemTime::now());
    v.update(&config(json!({})));
    assert!(v.iter().all(|(_, r)| r.version == 1));
    v.update(&config(
        json!({"cluster": {"proxy": {"image": "registry.k8s.io/kube-proxy:v1.99.0"}}}),
    ));
    let versions: BTreeMap<&str, u64> = v.iter().map(|(id, r)| (id.as_str(), r.version)).collect();
    assert_eq!(versions["10-kube-proxy"], 2);
    assert_eq!(versions["11-core-dns"], 1);
}
