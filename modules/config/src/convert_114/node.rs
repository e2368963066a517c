//! The kubelet and the node: `.machine.kubelet`, `.machine.node{Labels,Annotations,Taints}`,
//! `.machine.pods` and `.cluster.allowSchedulingOn{ControlPlanes,Masters}` → KubeletConfig,
//! KubeNodeConfig, KubeCredentialProviderConfig and KubeStaticPodConfig
//! (`pkg/machinery/config/types/k8s/{kubelet,node,credential_provider,static_pod}.go` and the
//! shims `K8sKubeletConfig`, `K8sNodeConfig`, `K8sStaticPodConfigs` in
//! `types/v1alpha1/v1alpha1_k8s_bridge.go`, v1.14.0-rc.1).

use serde_json::{Value, json};

use super::builder::{Builder, named, single};
use super::network::is_dns_subdomain;

const KUBELET: &str = "KubeletConfig";
const NODE: &str = "KubeNodeConfig";
const CREDENTIAL_PROVIDER: &str = "KubeCredentialProviderConfig";
const STATIC_POD: &str = "KubeStaticPodConfig";

/// The control-plane taint and label the 1.13 shim adds by itself and the 1.14 generator writes
/// into KubeNodeConfig (`generate/kubernetes.go`).
pub(super) const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// Kubelet configuration fields Talos sets itself (`pkg/machinery/kubelet/kubelet.go`
/// `ProtectedConfigurationFields`); both shapes refuse them.
const PROTECTED_KUBELET_FIELDS: &[&str] = &[
    "apiVersion",
    "authentication",
    "authorization",
    "cgroupRoot",
    "kind",
    "kubeletCgroups",
    "port",
    "protectKernelDefaults",
    "resolvConf",
    "rotateCertificates",
    "systemCgroups",
    "staticPodPath",
    "seccompDefault",
];

pub(super) fn convert(b: &mut Builder) {
    node_maps(b);
    kubelet(b);
    scheduling(b);
    pods(b);
}

/// The label, annotation and taint maps move as they are (per-key merge in both shapes), with
/// their per-key `$patch: delete`s. Deleting a whole map is refused for labels and taints: 1.13
/// keeps the control-plane label and taint the shim adds, 1.14 would lose them with the map.
fn node_maps(b: &mut Builder) {
    for (legacy, field, carry_delete) in [
        ("nodeLabels", "labels", false),
        ("nodeAnnotations", "annotations", true),
        ("nodeTaints", "taints", false),
    ] {
        let from = format!(".machine.{legacy}");
        if let Some(v) = b.take(&from) {
            b.move_to(&from, v, single(NODE), field, carry_delete);
        }
    }
}

fn kubelet(b: &mut Builder) {
    let Some(mut s) = b.take_section(".machine.kubelet", "KubeletConfig and KubeNodeConfig") else {
        return;
    };
    // (legacy key, document, field, a whole-field delete means the same in both shapes)
    for (key, kind, field, carry_delete) in [
        ("image", KUBELET, "image", false),
        ("clusterDNS", KUBELET, "clusterDNS", true),
        ("extraArgs", KUBELET, "extraArgs", true),
        (
            "defaultRuntimeSeccompProfileEnabled",
            KUBELET,
            "defaultRuntimeSeccompProfileEnabled",
            false,
        ),
        ("registerWithFQDN", NODE, "registerWithFQDN", false),
        ("skipNodeRegistration", NODE, "skipNodeRegistration", false),
        ("nodeIP", NODE, "nodeIP", true),
    ] {
        if let Some(v) = s.take(key) {
            b.move_to(&s.at(key), v, single(kind), field, carry_delete);
        }
    }
    if let Some(v) = s.take("extraConfig") {
        let from = s.at("extraConfig");
        let protected: Vec<&str> = PROTECTED_KUBELET_FIELDS
            .iter()
            .copied()
            .filter(|f| v.get(*f).is_some())
            .collect();
        for field in &protected {
            b.refuse(
                &from,
                format!("kubelet configuration field \"{field}\" can't be overridden; remove it"),
            );
        }
        if protected.is_empty() {
            b.move_to(&from, v, single(KUBELET), "config", true);
        }
    }
    // Legacy deep-merges this blob, the new field replaces it (`merge:"replace"`): the base has
    // no credential provider config, so the first patch's value is the same either way.
    if let Some(v) = s.take("credentialProviderConfig") {
        let from = s.at("credentialProviderConfig");
        b.move_to(
            &from,
            v,
            single(CREDENTIAL_PROVIDER),
            "configuration",
            false,
        );
    }
    if let Some(v) = s.take("disableManifestsDirectory") {
        let from = s.at("disableManifestsDirectory");
        match b.boolean(&from, &v) {
            Some(true) => b.warn(format!(
                "{from} is dropped: KubeletConfig always disables the manifests directory"
            )),
            Some(false) => b.refuse(
                &from,
                "KubeletConfig always disables the kubelet manifests directory \
                 (DisableManifestsDirectory is locked to true); write static pods as \
                 KubeStaticPodConfig documents instead",
            ),
            None => {}
        }
    }
    if let Some(v) = s.take("extraMounts")
        && v.as_array().is_none_or(|l| !l.is_empty())
    {
        b.refuse(
            &s.at("extraMounts"),
            "KubeletConfig has no extra mounts (removed in multi-doc config); the kubelet sees \
             /var/lib/kubelet and the user volumes under /var/mnt: put the data on a \
             UserVolumeConfig volume instead",
        );
    }
    b.finish(s);
}

/// `allowSchedulingOnControlPlanes` (or the older `allowSchedulingOnMasters`, which the shim
/// reads only when the first is unset) decides whether the 1.13 shim adds the control-plane
/// taint (`Taints` in v1alpha1_k8s_bridge.go). In 1.14 the taint is in KubeNodeConfig, so `true`
/// deletes it and `false` sets it. Workers never get the taint: there the field does nothing.
/// The delete needs the taint in the base (a render with scheduling not allowed, the default):
/// deleting a map key the base lacks fails, in Talos as here.
fn scheduling(b: &mut Builder) {
    let current = ".cluster.allowSchedulingOnControlPlanes";
    let older = ".cluster.allowSchedulingOnMasters";
    let (from, value) = match (b.take(current), b.take(older)) {
        (Some(v), Some(_)) => {
            b.warn(format!(
                "{older} is dropped: {current} is set too, and Talos reads only that one"
            ));
            (current, v)
        }
        (Some(v), None) => (current, v),
        (None, Some(v)) => (older, v),
        (None, None) => return,
    };
    let Some(allow) = b.boolean(from, &value) else {
        return;
    };
    if b.is_worker() {
        b.warn(format!(
            "{from} has no effect on worker machines and is dropped: workers have no \
             control-plane taint"
        ));
        return;
    }
    let taint = if allow {
        json!({"$patch": "delete"})
    } else {
        json!("NoSchedule")
    };
    b.put(
        from,
        single(NODE),
        "taints",
        json!({ CONTROL_PLANE_ROLE: taint }),
    );
}

/// One KubeStaticPodConfig per pod, named as the shim names it so the static pod keeps its ID:
/// `<metadata.namespace or default>-<metadata.name or default>` (`kubeStaticPodShim.Name`).
/// The new `pod` field replaces instead of merging, which for a new document is the same.
fn pods(b: &mut Builder) {
    let from = ".machine.pods";
    let Some(v) = b.take(from) else {
        return;
    };
    let Some(items) = b.list(from, v) else {
        return;
    };
    for (i, pod) in items.into_iter().enumerate() {
        let at = format!("{from}[{i}]");
        if !pod.is_object() || super::builder::contains_marker(&pod) {
            b.refuse(
                &at,
                "expected a pod manifest (a `$patch: delete` of a pod can't be converted; \
                 delete its KubeStaticPodConfig document instead)",
            );
            continue;
        }
        let meta = |key: &str| {
            pod.pointer(&format!("/metadata/{key}"))
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string()
        };
        let name = format!("{}-{}", meta("namespace"), meta("name"));
        if !is_dns_subdomain(&name) {
            b.refuse(
                &at,
                format!(
                    "the static pod name {name:?} (namespace-name) is not a valid DNS-1123 \
                     subdomain, which KubeStaticPodConfig requires; use lowercase letters, digits \
                     and '-' in the pod's name and namespace"
                ),
            );
            continue;
        }
        b.put(&at, named(STATIC_POD, &name), "pod", pod);
    }
}
