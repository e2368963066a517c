//! What a Kubernetes minor version removes that a cluster may still use: feature gates, component
//! flags, admission plugins and API resources. A move to the next minor is refused while any of
//! them is in use, before anything changes, as `talosctl upgrade-k8s` does.
//!
//! The table holds the facts of siderolabs/go-kubernetes v0.2.38 (`kubernetes/upgrade/checks.go`,
//! the version Talos v1.13.9's go.mod pins), for the moves a Talos 1.13 or 1.14 cluster can make.
//! talosctl reads the flags from the rendered static pods and the kubelet spec; the collection
//! reads them where users set them, the `extraArgs` of each component in the machine config.

use ferro_talos_config::MachineConfig;
use serde_json::Value;

use crate::shared::kubernetes_config::Section;

/// The removals of one minor move, by component.
pub struct Removals {
    pub feature_gates: &'static [&'static str],
    pub apiserver_flags: &'static [&'static str],
    pub admission_plugins: &'static [&'static str],
    pub controller_manager_flags: &'static [&'static str],
    pub kubelet_flags: &'static [&'static str],
    /// `resource.version.group`, as go-kubernetes spells them.
    pub api_resources: &'static [&'static str],
}

const NONE: &[&str] = &[];

/// The removals of a move from minor `from` to minor `from + 1` (1.x), if any are known.
pub fn removals(from_minor: u64, to_minor: u64) -> Option<Removals> {
    if to_minor != from_minor + 1 {
        return None;
    }
    Some(match to_minor {
        31 => Removals {
            feature_gates: &[
                "APIPriorityAndFairness",
                "CSINodeExpandSecret",
                "ConsistentHTTPGetHandlers",
                "DefaultHostNetworkHostPortsInPodTemplates",
                "ServiceNodePortStaticSubrange",
                "SkipReadOnlyValidationGCE",
            ],
            apiserver_flags: NONE,
            admission_plugins: NONE,
            controller_manager_flags: &[
                "volume-host-cidr-denylist",
                "volume-host-allow-local-loopback",
                "horizontal-pod-autoscaler-upscale-delay",
                "horizontal-pod-autoscaler-downscale-delay",
            ],
            kubelet_flags: &[
                "keep-terminated-pod-volumes",
                "iptables-masquerade-bit",
                "iptables-drop-bit",
            ],
            api_resources: NONE,
        },
        32 => Removals {
            feature_gates: &[
                "AllowServiceLBStatusOnNonLB",
                "CloudDualStackNodeIPs",
                "DRAControlPlaneController",
                "HPAContainerMetrics",
                "KMSv2",
                "KMSv2KDF",
                "LegacyServiceAccountTokenCleanUp",
                "MinDomainsInPodTopologySpread",
                "NewVolumeManagerReconstruction",
                "NodeOutOfServiceVolumeDetach",
                "ServerSideApply",
                "ServerSideFieldValidation",
                "StableLoadBalancerNodeSet",
                "ValidatingAdmissionPolicy",
                "ZeroLimitedNominalConcurrencyShares",
            ],
            apiserver_flags: NONE,
            admission_plugins: NONE,
            controller_manager_flags: NONE,
            kubelet_flags: NONE,
            api_resources: &["podschedulingcontexts.v1alpha3.resource.k8s.io"],
        },
        33 => Removals {
            feature_gates: &[
                "AppArmor",
                "AppArmorFields",
                "CPUManager",
                "DisableCloudProviders",
                "DisableKubeletCloudCredentialProviders",
                "JobPodFailurePolicy",
                "KubeProxyDrainingTerminatingNodes",
                "PDBUnhealthyPodEvictionPolicy",
                "PersistentVolumeLastPhaseTransitionTime",
                "VolumeCapacityPriority",
            ],
            apiserver_flags: &["cloud-config"],
            admission_plugins: NONE,
            controller_manager_flags: NONE,
            kubelet_flags: NONE,
            api_resources: NONE,
        },
        34 => Removals {
            feature_gates: &[
                "DevicePluginCDIDevices",
                "LegacySidecarContainers",
                "PodDisruptionConditions",
            ],
            apiserver_flags: NONE,
            admission_plugins: NONE,
            controller_manager_flags: NONE,
            kubelet_flags: &["cloud-config"],
            api_resources: NONE,
        },
        35 => Removals {
            feature_gates: &[
                "SizeMemoryBackedVolumes",
                "UserNamespacesHostNetworkSupport",
            ],
            apiserver_flags: NONE,
            admission_plugins: NONE,
            controller_manager_flags: NONE,
            kubelet_flags: &["pod-infra-container-image"],
            api_resources: NONE,
        },
        36 => Removals {
            feature_gates: &[
                "CSIMigrationPortworx",
                "HonorPVReclaimPolicy",
                "InTreePluginPortworxUnregister",
                "WatchFromStorageWithoutResourceVersion",
            ],
            apiserver_flags: NONE,
            admission_plugins: NONE,
            controller_manager_flags: NONE,
            kubelet_flags: NONE,
            api_resources: NONE,
        },
        _ => return None,
    })
}

/// The API path that lists `resource.version.group` (`/apis/<group>/<version>/<resource>`).
pub fn api_path(resource: &str) -> Option<String> {
    let (name, rest) = resource.split_once('.')?;
    let (version, group) = rest.split_once('.')?;
    Some(format!("/apis/{group}/{version}/{name}"))
}

/// One removed item a node still uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InUse {
    pub node: String,
    pub component: &'static str,
    pub what: &'static str,
    pub value: String,
    /// Where in the machine config it is set.
    pub path: String,
}

/// Removed flags, feature gates and admission plugins in one node's config, read from each
/// component's `extraArgs` where the config keeps them (its Talos 1.14 document, else v1alpha1:
/// `crate::shared::kubernetes_config`).
pub fn in_use(node: &str, config: &MachineConfig, control_plane: bool, r: &Removals) -> Vec<InUse> {
    let mut out = Vec::new();
    let mut components: Vec<(&'static str, &[&str], &[&str])> =
        vec![("kubelet", r.kubelet_flags, NONE)];
    if control_plane {
        components.push(("kube-apiserver", r.apiserver_flags, r.admission_plugins));
        components.push(("kube-controller-manager", r.controller_manager_flags, NONE));
        components.push(("kube-scheduler", NONE, NONE));
    }
    for (component, flags, plugins) in components {
        let Some(section) = Section::of(config, component) else {
            continue;
        };
        let Some(args) = section.get(config, "extraArgs").and_then(Value::as_object) else {
            continue;
        };
        let path = section.path("extraArgs");
        for (flag, value) in args {
            let values = arg_values(value);
            if flags.contains(&flag.as_str()) {
                out.push(InUse {
                    node: node.into(),
                    component,
                    what: "flag",
                    value: flag.clone(),
                    path: format!("{path}.{flag}"),
                });
            }
            let listed = |name: &str| {
                values
                    .iter()
                    .flat_map(|v| v.split(','))
                    .map(|item| item.split('=').next().unwrap_or("").trim().to_string())
                    .filter(|item| item == name)
                    .count()
                    > 0
            };
            if flag == "feature-gates" {
                for gate in r.feature_gates.iter().filter(|g| listed(g)) {
                    out.push(InUse {
                        node: node.into(),
                        component,
                        what: "feature gate",
                        value: gate.to_string(),
                        path: format!("{path}.feature-gates"),
                    });
                }
            }
            if flag == "enable-admission-plugins" {
                for plugin in plugins.iter().filter(|p| listed(p)) {
                    out.push(InUse {
                        node: node.into(),
                        component,
                        what: "admission plugin",
                        value: plugin.to_string(),
                        path: format!("{path}.enable-admission-plugins"),
                    });
                }
            }
        }
    }
    out
}

/// An extraArgs value: a string, or (Talos 1.12+) a list of strings.
fn arg_values(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        other => vec![other.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_move_to_the_next_minor_has_removals() {
        assert!(removals(36, 36).is_none());
        assert!(removals(34, 36).is_none());
        assert!(removals(35, 36).is_some());
        assert_eq!(
            api_path("podschedulingcontexts.v1alpha3.resource.k8s.io").as_deref(),
            Some("/apis/resource.k8s.io/v1alpha3/podschedulingcontexts")
        );
    }

    #[test]
    fn removed_gates_flags_and_plugins_are_found_where_they_are_set() {
        let cfg = MachineConfig {
            docs: vec![json!({
                "machine": {"kubelet": {"extraArgs": {
                    "feature-gates": "HonorPVReclaimPolicy=true,Other=false",
                    "pod-infra-container-image": "x",
                }}},
                "cluster": {"apiServer": {"extraArgs": {"feature-gates": ["WatchFromStorageWithoutResourceVersion=true"]}}},
            })],
        };
        let found = in_use("10.0.0.2", &cfg, true, &removals(35, 36).unwrap());
        let names: Vec<_> = found
            .iter()
            .map(|f| (f.component, f.value.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("kubelet", "HonorPVReclaimPolicy"),
                ("kube-apiserver", "WatchFromStorageWithoutResourceVersion")
            ]
        );
        let found = in_use("10.0.0.2", &cfg, false, &removals(34, 35).unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].what, "flag");
        assert_eq!(
            found[0].path,
            "machine.kubelet.extraArgs.pod-infra-container-image"
        );
    }

    /// Talos 1.14 keeps each component's `extraArgs` in its own document
    /// (`pkg/machinery/config/types/k8s/kubelet.go`, `apiserver.go` @ v1.14.1).
    #[test]
    fn removed_items_are_found_in_the_1_14_documents_too() {
        let cfg = MachineConfig {
            docs: vec![
                json!({"version": "v1alpha1", "machine": {"type": "controlplane"}, "cluster": {}}),
                json!({"apiVersion": "v1alpha1", "kind": "KubeletConfig", "image": "k",
                       "extraArgs": {"pod-infra-container-image": "x"}}),
                json!({"apiVersion": "v1alpha1", "kind": "KubeAPIServerConfig", "image": "a",
                       "extraArgs": {"feature-gates": "WatchFromStorageWithoutResourceVersion=true"}}),
            ],
        };
        let found = in_use("10.0.0.2", &cfg, true, &removals(35, 36).unwrap());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, "KubeAPIServerConfig.extraArgs.feature-gates");
        let found = in_use("10.0.0.2", &cfg, true, &removals(34, 35).unwrap());
        assert_eq!(
            found[0].path,
            "KubeletConfig.extraArgs.pod-infra-container-image"
        );
    }
}
