//! Cluster identity: `.cluster.clusterName`, `.cluster.controlPlane`, `.cluster.discovery`,
//! `.cluster.id` and `.cluster.secret` → KubeClusterConfig, KubeAPIServerConfig.apiPort,
//! DiscoveryServiceConfig and DiscoveryIdentityConfig (`types/k8s/cluster.go`,
//! `types/cluster/discovery_{service,identity}.go`, and the shims `K8sClusterConfig`,
//! `K8sAPIServerConfig` in `types/v1alpha1/v1alpha1_k8s_bridge.go` and
//! `types/v1alpha1/v1alpha1_discoveryconfig.go`, v1.14.0-rc.1).

use super::builder::{Builder, named, single};

const CLUSTER: &str = "KubeClusterConfig";
const DISCOVERY: &str = "DiscoveryServiceConfig";
const IDENTITY: &str = "DiscoveryIdentityConfig";
/// The name `talosctl gen config` gives its discovery document (`generate/init.go`).
const DISCOVERY_NAME: &str = "default";

pub(super) fn convert(b: &mut Builder) {
    if let Some(v) = b.take(".cluster.clusterName") {
        b.move_to(
            ".cluster.clusterName",
            v,
            single(CLUSTER),
            "clusterName",
            false,
        );
    }
    control_plane(b);
    discovery(b);
    for (key, field) in [("id", "clusterID"), ("secret", "clusterSecret")] {
        let from = format!(".cluster.{key}");
        if let Some(v) = b.take(&from) {
            // Copied as they are: the identity is never decoded (cluster/discovery_identity.go).
            b.move_to(&from, v, single(IDENTITY), field, false);
        }
    }
}

fn control_plane(b: &mut Builder) {
    let Some(mut s) = b.take_section(
        ".cluster.controlPlane",
        "KubeClusterConfig and KubeAPIServerConfig",
    ) else {
        return;
    };
    if let Some(v) = s.take("endpoint") {
        let from = s.at("endpoint");
        // The legacy service-account issuer is the endpoint itself (`K8sServiceAccountConfig`);
        // the 1.14 document holds a copy (generate/kubernetes.go), so it moves along.
        if !b.is_worker() && !super::builder::is_delete_marker(&v) {
            b.put(
                &from,
                single("KubeServiceAccountConfig"),
                "issuer.issuerURL",
                v.clone(),
            );
        }
        b.move_to(&from, v, single(CLUSTER), "endpoint", false);
    }
    if let Some(v) = s.take("localAPIServerPort") {
        let from = s.at("localAPIServerPort");
        if !b.drop_on_worker(&from, "KubeAPIServerConfig") {
            b.move_to(&from, v, single("KubeAPIServerConfig"), "apiPort", false);
        }
    }
    b.finish(s);
}

/// Legacy discovery is on when `enabled` is true and the service registry is not disabled; its
/// endpoint is `registries.service.endpoint` or the public service (`DiscoveryServiceConfigs` in
/// v1alpha1_discoveryconfig.go). In 1.14 a DiscoveryServiceConfig being there means on, and the
/// Kubernetes registry is always off (`internal/app/machined/pkg/controllers/cluster/config.go`).
fn discovery(b: &mut Builder) {
    let path = ".cluster.discovery";
    if b.take_delete_marker(path) {
        // Deleting the legacy section leaves discovery disabled.
        b.delete(path, named(DISCOVERY, DISCOVERY_NAME));
        return;
    }
    let Some(mut s) = b.take_section(path, DISCOVERY) else {
        return;
    };
    let enabled = match s.take("enabled") {
        Some(v) => b
            .boolean(&s.at("enabled"), &v)
            .map(|e| (s.at("enabled"), e)),
        None => None,
    };
    let mut service_on = None;
    let mut endpoint = None;
    if let Some(v) = s.take("registries")
        && let Some(mut registries) = b.section(&s.at("registries"), v, DISCOVERY)
    {
        if let Some(v) = registries.take("kubernetes")
            && let Some(mut kubernetes) = b.section(&registries.at("kubernetes"), v, DISCOVERY)
        {
            if let Some(v) = kubernetes.take("disabled") {
                let from = kubernetes.at("disabled");
                match b.boolean(&from, &v) {
                    Some(true) => {
                        b.record(&from, "nothing (the Kubernetes registry is off)".into())
                    }
                    Some(false) => b.refuse(
                        &from,
                        "the Kubernetes discovery registry has no Talos 1.14 document (it is \
                         always off with DiscoveryServiceConfig, and does not work with Kubernetes \
                         1.32 and later); remove it and use the discovery service",
                    ),
                    None => {}
                }
            }
            b.finish(kubernetes);
        }
        if let Some(v) = registries.take("service")
            && let Some(mut service) = b.section(&registries.at("service"), v, DISCOVERY)
        {
            if let Some(v) = service.take("disabled") {
                let from = service.at("disabled");
                service_on = b.boolean(&from, &v).map(|disabled| (from, !disabled));
            }
            if let Some(v) = service.take("endpoint") {
                endpoint = Some((service.at("endpoint"), v));
            }
            b.finish(service);
        }
        b.finish(registries);
    }
    // Off if either says off; on (the document made sure of) if either says on.
    let (mut off_from, mut on_from) = (None, None);
    for (from, on) in [enabled, service_on].into_iter().flatten() {
        let slot = if on { &mut on_from } else { &mut off_from };
        slot.get_or_insert(from);
    }
    let doc = named(DISCOVERY, DISCOVERY_NAME);
    match (off_from, endpoint) {
        (Some(off), endpoint) => {
            b.delete(&off, doc);
            if let Some((from, _)) = endpoint {
                b.warn(format!("{from} is dropped: {off} disables discovery"));
            }
        }
        (None, endpoint) => {
            if let Some(from) = on_from {
                b.ensure(&from, doc);
            }
            if let Some((from, v)) = endpoint {
                b.move_to(&from, v, doc, "endpoint", false);
            }
        }
    }
    b.finish(s);
}
