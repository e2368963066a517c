//! Each document kind's `V1Alpha1ConflictValidate`: run once per document of that kind when a
//! v1alpha1 document exists (`Container.Validate`), returning its first error only. Read in
//! `pkg/machinery/config/types/*/*.go` at v1.13.9 (five kinds: block/volume_config.go,
//! network/hostname.go, kubespan.go, resolver.go, time_sync.go) and v1.14.1 (all below).
//!
//! Upstream tests Go nil-ness of the decoded fields: a section written at all (even `{}` or
//! `[]`) is non-nil; only an absent or `null` one is nil.

use serde_json::Value;

use super::v1alpha1::{flag, get, list, path};
use crate::decode::Release;

/// A field of the v1alpha1 document that is non-nil.
fn set(v1: &Value, keys: &[&str]) -> bool {
    path(v1, keys).is_some()
}

/// A list field with at least one entry.
fn any(v1: &Value, keys: &[&str]) -> bool {
    let (last, parent) = keys.split_last().expect("a path");
    !list(path(v1, parent), last).is_empty()
}

/// A string field that is not empty.
fn text(v1: &Value, keys: &[&str]) -> bool {
    path(v1, keys)
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// A Go `time.Duration` that is not zero (`0`, `0s`, `0m0s`, ... are zero).
fn duration_set(v: Option<&Value>) -> bool {
    match v {
        None => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => s.chars().any(|c| c.is_ascii_digit() && c != '0'),
        Some(_) => true,
    }
}

/// The first conflict of `doc` with the v1alpha1 document, as upstream words it.
pub fn conflict(doc: &Value, v1: &Value, release: Release) -> Option<String> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let v14 = release == Release::V1_14;
    let first = |checks: &[(bool, &str)]| {
        checks
            .iter()
            .find(|(hit, _)| *hit)
            .map(|(_, msg)| msg.to_string())
    };
    match kind {
        // block/volume_config.go
        "VolumeConfig" => {
            let name = doc.get("name").and_then(Value::as_str).unwrap_or("");
            let legacy = match name {
                "STATE" => "state",
                "EPHEMERAL" => "ephemeral",
                _ => return None,
            };
            let encrypted = get(doc, "encryption")
                .and_then(Value::as_object)
                .is_some_and(|o| o.values().any(|v| !v.is_null()));
            (encrypted && set(v1, &["machine", "systemDiskEncryption", legacy])).then(|| {
                format!("system disk encryption for {name:?} is configured in both v1alpha1.Config and VolumeConfig")
            })
        }
        // network/hostname.go: `Hostname()`, then `AutoHostname()` (stable when
        // `.machine.features.stableHostname` is true).
        "HostnameConfig" => first(&[
            (
                text(v1, &["machine", "network", "hostname"]),
                "static hostname is already set in v1alpha1 config",
            ),
            (
                flag(path(v1, &["machine", "features"]), "stableHostname"),
                "stable hostname is already set in v1alpha1 config",
            ),
        ]),
        // network/kubespan.go: `NetworkKubeSpanConfig() != nil`.
        "KubeSpanConfig" => first(&[(
            set(v1, &["machine", "network", "kubespan"]),
            "kubespan is already configured in v1alpha1 machine.network.kubespan",
        )]),
        // network/resolver.go: `SearchDomains()` present, `Resolvers()` (parsable nameservers)
        // non-nil, `DisableSearchDomain()`; 1.14.1 also a hostDNS section in both.
        "ResolverConfig" => {
            let network = path(v1, &["machine", "network"]);
            let resolvers = list(network, "nameservers")
                .iter()
                .filter_map(Value::as_str)
                .any(super::goparse::is_ip);
            let host_dns = v14
                && get(doc, "hostDNS").is_some_and(|h| !super::empty(h))
                && set(v1, &["machine", "features", "hostDNS"]);
            first(&[
                (
                    set(v1, &["machine", "network", "searchDomains"]),
                    ".machine.network.searchDomains is already set in v1alpha1 config",
                ),
                (
                    resolvers,
                    ".machine.network.nameservers is already set in v1alpha1 config",
                ),
                (
                    flag(network, "disableSearchDomain"),
                    ".machine.network.disableSearchDomain is already set in v1alpha1 config",
                ),
                (
                    host_dns,
                    ".machine.features.hostDNS is already set in v1alpha1 config",
                ),
            ])
        }
        // network/time_sync.go: only when `.machine.time` is set.
        "TimeSyncConfig" => {
            let time = path(v1, &["machine", "time"])?;
            first(&[
                (
                    flag(Some(time), "disabled"),
                    "time sync cannot be disabled in both v1alpha1 and new-style configuration",
                ),
                (
                    !list(Some(time), "servers").is_empty(),
                    "time servers cannot be specified in both v1alpha1 and new-style configuration",
                ),
                (
                    duration_set(get(time, "bootTimeout")),
                    "boot timeout cannot be specified in both v1alpha1 and new-style configuration",
                ),
            ])
        }
        _ if !v14 => None,
        "DiscoveryIdentityConfig" => first(&[(
            text(v1, &["cluster", "id"]) || text(v1, &["cluster", "secret"]),
            "cluster identity is already configured in .cluster.id/.cluster.secret of the v1alpha1 config",
        )]),
        "DiscoveryServiceConfig" => first(&[(
            set(v1, &["cluster", "discovery"]),
            "discovery service is already configured in .cluster.discovery of the v1alpha1 config",
        )]),
        "CRIBaseRuntimeSpecConfig" => first(&[(
            set(v1, &["machine", "baseRuntimeSpecOverrides"]),
            "base runtime spec overrides are already set in v1alpha1 config",
        )]),
        "ImageCacheConfig" => first(&[(
            set(v1, &["machine", "features", "imageCache"]),
            "image cache config is already set in v1alpha1 config",
        )]),
        // k8s/admission_control.go and (checking the same field) k8s/authorization.go.
        "KubeAdmissionControlConfig" | "KubeAuthorizerConfig" => first(&[(
            any(v1, &["cluster", "apiServer", "admissionControl"]),
            "admission control plugin config is already set in v1alpha1 config",
        )]),
        "KubeAggregatorCAConfig" => first(&[(
            set(v1, &["cluster", "aggregatorCA"]),
            "kube-apiserver aggregator CA is already set in v1alpha1 config (.cluster.aggregatorCA), please remove it and use the new KubeAggregatorCAConfig document instead",
        )]),
        "KubeAPIServerConfig" => first(&[
            (
                set(v1, &["cluster", "apiServer"]),
                "kube-apiserver config is already set in v1alpha1 config (.cluster.apiServer)",
            ),
            (
                path(v1, &["cluster", "controlPlane", "localAPIServerPort"])
                    .and_then(Value::as_i64)
                    .is_some_and(|p| p != 0),
                "kube-apiserver API port is already set in v1alpha1 config (.cluster.controlPlane.localAPIServerPort)",
            ),
        ]),
        "KubeAPIServerCAConfig" => first(&[(
            set(v1, &["cluster", "ca"]),
            "kube-apiserver CA is already set in v1alpha1 config (.cluster.ca)",
        )]),
        "KubeAuditPolicyConfig" => first(&[(
            path(v1, &["cluster", "apiServer", "auditPolicy"])
                .and_then(Value::as_object)
                .is_some_and(|o| !o.is_empty()),
            "audit policy config is already set in v1alpha1 config",
        )]),
        "KubeClusterConfig" => first(&[
            (
                text(v1, &["cluster", "clusterName"]),
                "cluster name is already set in the v1alpha1 config (.cluster.clusterName). Please remove it and use only the new KubeClusterConfig document to avoid conflicts",
            ),
            (
                set(v1, &["cluster", "controlPlane", "endpoint"]),
                "cluster endpoint is already set in the v1alpha1 config (.cluster.controlPlane.endpoint). Please remove it and use only the new KubeClusterConfig document to avoid conflicts",
            ),
        ]),
        "KubeControllerManagerConfig" => first(&[
            (
                set(v1, &["cluster", "controllerManager"]),
                "kube-controller-manager config is already set in v1alpha1 config (.cluster.controllerManager)",
            ),
            (
                set(v1, &["machine", "controlPlane", "controllerManager"]),
                "kube-controller-manager config is already set in v1alpha1 config (.machine.controlplane.controllerManager)",
            ),
        ]),
        "KubeCoreDNSConfig" => first(&[(
            set(v1, &["cluster", "coreDNS"]),
            "CoreDNS config is already set in v1alpha1 config (.cluster.coreDNS)",
        )]),
        "KubeCredentialProviderConfig" => first(&[(
            set(v1, &["machine", "kubelet"]),
            "cannot use KubeCredentialProviderConfig with legacy kubelet configuration (.machine.kubelet)",
        )]),
        "KubeEtcdEncryptionConfig" => first(&[(
            text(v1, &["cluster", "secretboxEncryptionSecret"])
                || text(v1, &["cluster", "aescbcEncryptionSecret"]),
            "etcd encryption config is already set in v1alpha1 config",
        )]),
        "KubeFlannelCNIConfig" => first(&[(
            set(v1, &["cluster", "network"]),
            "cluster network config in v1alpha1 config (.machine.cluster.network) can't be used with KubeFlannelCNIConfig document, please remove it to avoid conflicts",
        )]),
        "KubeletConfig" => first(&[(
            set(v1, &["machine", "kubelet"]),
            "kubelet config is already set in v1alpha1 config (.machine.kubelet)",
        )]),
        "KubePrismConfig" => first(&[(
            set(v1, &["machine", "features", "kubePrism"]),
            "KubePrism config in v1alpha1 config (.machine.features.kubePrism) can't be used with KubePrismConfig document, please remove it to avoid conflicts",
        )]),
        "KubeNetworkConfig" => first(&[(
            set(v1, &["cluster", "network"]),
            "cluster network config is already set in the v1alpha1 config (.machine.cluster.network). Please remove it and use only the new KubeNetworkConfig document to avoid conflicts",
        )]),
        "KubeNodeConfig" => first(&[
            (
                set(v1, &["cluster", "allowSchedulingOnControlPlanes"]),
                ".cluster.allowSchedulingOnControlPlanes is already set in v1alpha1 config",
            ),
            (
                set(v1, &["cluster", "allowSchedulingOnMasters"]),
                ".cluster.allowSchedulingOnMasters is already set in v1alpha1 config",
            ),
            (
                set(v1, &["machine", "kubelet", "skipNodeRegistration"]),
                ".machine.kubelet.skipNodeRegistration is already set in v1alpha1 config",
            ),
            (
                set(v1, &["machine", "kubelet", "registerWithFQDN"]),
                ".machine.kubelet.registerWithFQDN is already set in v1alpha1 config",
            ),
            (
                set(v1, &["machine", "kubelet", "nodeIP"]),
                ".machine.kubelet.nodeIP is already set in v1alpha1 config",
            ),
            (
                set(v1, &["machine", "nodeLabels"]),
                ".machine.nodeLabels is already set in v1alpha1 config",
            ),
            (
                set(v1, &["machine", "nodeAnnotations"]),
                ".machine.nodeAnnotations is already set in v1alpha1 config",
            ),
            (
                set(v1, &["machine", "nodeTaints"]),
                ".machine.nodeTaints is already set in v1alpha1 config",
            ),
        ]),
        "KubeProxyConfig" => first(&[(
            set(v1, &["cluster", "proxy"]),
            "cluster proxy config in v1alpha1 config (.machine.cluster.proxy) can't be used with KubeProxyConfig document, please remove it to avoid conflicts",
        )]),
        "KubeSchedulerConfig" => first(&[
            (
                set(v1, &["cluster", "scheduler"]),
                "kube-scheduler config is already set in v1alpha1 config (.cluster.scheduler)",
            ),
            (
                set(v1, &["machine", "controlPlane", "scheduler"]),
                "kube-scheduler config is already set in v1alpha1 config (.machine.controlplane.scheduler)",
            ),
        ]),
        "KubeServiceAccountConfig" => first(&[(
            set(v1, &["cluster", "serviceAccount"]),
            "service account is already set in v1alpha1 config (.cluster.serviceAccount)",
        )]),
        "KubeTalosAPIAccessConfig" => first(&[(
            set(v1, &["machine", "features", "kubernetesTalosAPIAccess"]),
            ".machine.features.kubernetesTalosAPIAccess is already set in v1alpha1 config",
        )]),
        "UnattendedInstallConfig" => first(&[(
            set(v1, &["machine", "install"]),
            "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)",
        )]),
        _ => None,
    }
}
