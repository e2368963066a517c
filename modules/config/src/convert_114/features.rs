//! `.machine.features.{kubePrism, kubernetesTalosAPIAccess, hostDNS, imageCache}` →
//! KubePrismConfig, KubeTalosAPIAccessConfig, ResolverConfig.hostDNS and ImageCacheConfig
//! (`types/k8s/{kubeprism,talos_api_access}.go`, `types/network/resolver.go`,
//! `types/cri/image_cache.go`, and the shims `K8sKubePrismConfig`, `K8sTalosAPIAccessConfig` in
//! `types/v1alpha1/v1alpha1_k8s_bridge.go`, v1.14.0-rc.1).

use serde_json::json;

use super::builder::{Builder, single};

const KUBEPRISM: &str = "KubePrismConfig";
const TALOS_API_ACCESS: &str = "KubeTalosAPIAccessConfig";

pub(super) fn convert(b: &mut Builder) {
    kubeprism(b);
    talos_api_access(b);
    if let Some(mut s) = b.take_section(".machine.features.hostDNS", "ResolverConfig.hostDNS") {
        // The same three booleans under ResolverConfig.hostDNS; the legacy rule that
        // forwarding needs `enabled` applies to the merged document.
        for key in ["enabled", "forwardKubeDNSToHost", "resolveMemberNames"] {
            if let Some(v) = s.take(key) {
                let from = s.at(key);
                if let Some(on) = b.boolean(&from, &v) {
                    b.put(
                        &from,
                        single("ResolverConfig"),
                        &format!("hostDNS.{key}"),
                        json!(on),
                    );
                }
            }
        }
        b.finish(s);
    }
    if let Some(mut s) = b.take_section(".machine.features.imageCache", "ImageCacheConfig") {
        if let Some(v) = s.take("localEnabled") {
            let from = s.at("localEnabled");
            if let Some(on) = b.boolean(&from, &v) {
                b.put(
                    &from,
                    single("ImageCacheConfig"),
                    "local.enabled",
                    json!(on),
                );
            }
        }
        b.finish(s);
    }
}

/// Legacy KubePrism is on when `enabled` is true, on `port` or 7445 (`K8sKubePrismConfig`); in
/// 1.14 the document being there turns it on ("remove it to disable KubePrism", release notes).
/// The 1.14 render has the document on every machine, so `enabled: true` keeps it (a header-only
/// merge), `enabled: false` and a delete of the section delete it, and a port sets its port.
fn kubeprism(b: &mut Builder) {
    let path = ".machine.features.kubePrism";
    let doc = single(KUBEPRISM);
    if b.take_delete_marker(path) {
        b.delete(path, doc);
        return;
    }
    let Some(mut s) = b.take_section(path, KUBEPRISM) else {
        return;
    };
    let enabled = s
        .take("enabled")
        .and_then(|v| b.boolean(&s.at("enabled"), &v));
    let port = s.take("port").map(|v| (s.at("port"), v));
    match (enabled, port) {
        (Some(false), port) => {
            b.delete(&s.at("enabled"), doc);
            if let Some((from, _)) = port {
                b.warn(format!("{from} is dropped: KubePrism is disabled"));
            }
        }
        (enabled, port) => {
            if enabled == Some(true) {
                b.ensure(&s.at("enabled"), doc);
            }
            if let Some((from, v)) = port {
                b.move_to(&from, v, doc, "port", false);
            }
        }
    }
    b.finish(s);
}

/// Legacy access is on only with `enabled: true` (`K8sTalosAPIAccessConfig`); the 1.14 document
/// being there turns it on, and a control plane's base has none. A worker with it enabled was
/// refused in 1.13 already ("feature Kubernetes Talos API Access can only be enabled on control
/// plane machines"), and the kind is control-plane-only in 1.14.
fn talos_api_access(b: &mut Builder) {
    let path = ".machine.features.kubernetesTalosAPIAccess";
    if b.take_delete_marker(path) {
        b.warn(format!(
            "{path}: the delete is dropped: the base config has no KubeTalosAPIAccessConfig"
        ));
        return;
    }
    let Some(mut s) = b.take_section(path, TALOS_API_ACCESS) else {
        return;
    };
    let enabled = s
        .take("enabled")
        .and_then(|v| b.boolean(&s.at("enabled"), &v));
    let lists: Vec<(String, serde_json::Value, &str)> =
        ["allowedRoles", "allowedKubernetesNamespaces"]
            .into_iter()
            .filter_map(|key| s.take(key).map(|v| (s.at(key), v, key)))
            .collect();
    let doc = single(TALOS_API_ACCESS);
    match enabled {
        Some(true) if b.is_worker() => b.refuse(
            &s.at("enabled"),
            "feature Kubernetes Talos API Access can only be enabled on control plane machines; \
             remove it from the worker's patch",
        ),
        Some(true) => {
            b.ensure(&s.at("enabled"), doc);
            for (from, v, key) in lists {
                b.move_to(&from, v, doc, key, false);
            }
        }
        _ => b.warn(format!(
            "{path} is dropped: the access is off unless enabled is true, and the base config has \
             no KubeTalosAPIAccessConfig"
        )),
    }
    b.finish(s);
}
