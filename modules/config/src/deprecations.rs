//! The v1alpha1 fields Talos 1.14 deprecates, and where each setting goes in 1.14.
//!
//! Talos 1.14 moves most of the v1alpha1 document into documents of their own (KubeletConfig,
//! KubeAPIServerConfig, UnattendedInstallConfig, ...). The list is the difference between the
//! v1alpha1 definitions of upstream's JSON schemas 1.13.6 and 1.14.0-rc.1 (13 fields under
//! `machine`, 21 under `cluster`, 4 under `machine.features`), plus the nested fields the Go types
//! mark `Deprecated:` at v1.14.0-rc.1 and not at v1.13.9 (`.machine.controlPlane.*.disabled`,
//! `.cluster.controlPlane.localAPIServerPort`, `.machine.kubelet.extraMounts`, ...) and
//! `.cluster.allowSchedulingOnMasters`, which 1.14 still checks. Rows go down to the leaves, so
//! a warning can name the exact field a setting moves to.
//!
//! `tests/deprecations_upstream.rs` checks the table against the GA: every field machinery v1.14.1
//! marks `Deprecated:` (and v1.13.9 does not) or drops from its schema is a row, and every row is
//! such a field or lies under one.
//!
//! [`deprecated_fields`] reports what a document sets, for warnings when rendering for a 1.13
//! contract (where nothing is converted: none of the new kinds exists in Talos 1.13).
//! [`crate::convert_114`] does the conversion for a 1.14 contract.
//!
//! `upstream` cites files under `pkg/machinery/config/types/` of siderolabs/talos at
//! v1.14.0-rc.1; `v1alpha1_types.go:N` is the line of the field's `Deprecated:` comment.

use serde_json::Value;

use crate::document::DocId;

/// One deprecated v1alpha1 field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeprecatedField {
    /// The v1alpha1 path, as upstream's messages write it: `.machine.kubelet.image`.
    pub path: &'static str,
    /// Where Talos 1.14 takes the setting instead.
    pub replacement: Replacement,
    /// Where upstream says so.
    pub upstream: &'static str,
}

/// Where a deprecated field's setting goes in Talos 1.14.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// The document kind and field it moves to: `KubeNodeConfig.labels`.
    MovesTo(&'static str),
    /// No 1.14 document takes it: what to do instead.
    NoEquivalent(&'static str),
}

/// A deprecated field that a document sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deprecated {
    pub field: &'static DeprecatedField,
    /// A sentence for a warning; it names paths and kinds only, never a value.
    pub message: String,
}

impl DeprecatedField {
    /// The warning sentence for this field.
    pub fn message(&self) -> String {
        match self.replacement {
            Replacement::MovesTo(to) => {
                format!(
                    "{} is deprecated in Talos 1.14: it moves to {to}",
                    self.path
                )
            }
            Replacement::NoEquivalent(instead) => format!(
                "{} is deprecated in Talos 1.14 and has no equivalent there: {instead}",
                self.path
            ),
        }
    }
}

const fn moves(path: &'static str, to: &'static str, upstream: &'static str) -> DeprecatedField {
    DeprecatedField {
        path,
        replacement: Replacement::MovesTo(to),
        upstream,
    }
}

const fn none(
    path: &'static str,
    instead: &'static str,
    upstream: &'static str,
) -> DeprecatedField {
    DeprecatedField {
        path,
        replacement: Replacement::NoEquivalent(instead),
        upstream,
    }
}

/// Every deprecated field, sections first and their fields after them.
pub const DEPRECATED_FIELDS: &[DeprecatedField] = &[
    // machine
    moves(
        ".machine.baseRuntimeSpecOverrides",
        "CRIBaseRuntimeSpecConfig.overrides",
        "v1alpha1_types.go:229; cri/base_runtime_spec.go",
    ),
    moves(
        ".machine.controlPlane",
        "KubeControllerManagerConfig and KubeSchedulerConfig",
        "v1alpha1_types.go:147",
    ),
    moves(
        ".machine.controlPlane.controllerManager",
        "KubeControllerManagerConfig",
        "v1alpha1_types.go:426",
    ),
    moves(
        ".machine.controlPlane.controllerManager.disabled",
        "KubeControllerManagerConfig.enabled (inverted)",
        "v1alpha1_types.go:436; k8s/controller_manager.go",
    ),
    moves(
        ".machine.controlPlane.scheduler",
        "KubeSchedulerConfig",
        "v1alpha1_types.go:430",
    ),
    moves(
        ".machine.controlPlane.scheduler.disabled",
        "KubeSchedulerConfig.enabled (inverted)",
        "v1alpha1_types.go:447; k8s/scheduler.go",
    ),
    moves(
        ".machine.files",
        "EtcFileConfig (files under /etc) and CRICustomizationConfig \
         (/etc/cri/conf.d/20-customization.part); files under /var have no document and stay",
        "v1alpha1_types.go:172; runtime/etc_file.go; cri/customization.go",
    ),
    moves(
        ".machine.install",
        "UnattendedInstallConfig",
        "v1alpha1_types.go:168; runtime/unattended_install.go",
    ),
    moves(
        ".machine.install.disk",
        "UnattendedInstallConfig.provisioning.diskSelector.match (disk.dev_path == \"...\")",
        "generate/init.go (the generator's disk expression)",
    ),
    moves(
        ".machine.install.diskSelector",
        "UnattendedInstallConfig.provisioning.diskSelector.match (a CEL expression)",
        "v1alpha1/v1alpha1_provider.go (DiskMatchExpression)",
    ),
    moves(
        ".machine.install.image",
        "UnattendedInstallConfig.installer.image",
        "runtime/unattended_install.go",
    ),
    moves(
        ".machine.install.wipe",
        "UnattendedInstallConfig.provisioning.wipe",
        "runtime/unattended_install.go",
    ),
    none(
        ".machine.install.extraKernelArgs",
        "set kernel arguments in the boot assets (an Image Factory schematic), or delete the \
         UnattendedInstallConfig document and keep .machine.install",
        "v1alpha1_types.go:630; generate/init.go drops them",
    ),
    none(
        ".machine.install.extensions",
        "use an installer image with the extensions built in (Image Factory)",
        "v1alpha1_types.go:641",
    ),
    none(
        ".machine.install.bootloader",
        "it never worked: remove it",
        "v1alpha1_types.go:645",
    ),
    none(
        ".machine.install.legacyBIOSSupport",
        "UnattendedInstallConfig installs without it; delete the UnattendedInstallConfig \
         document and keep .machine.install if you need it",
        "internal/app/machined/pkg/controllers/runtime/unattended_install.go",
    ),
    none(
        ".machine.install.grubUseUKICmdline",
        "UnattendedInstallConfig always uses the UKI command line: remove it",
        "internal/app/machined/pkg/controllers/runtime/unattended_install.go",
    ),
    moves(
        ".machine.kernel",
        "KernelModuleConfig",
        "v1alpha1_types.go:220",
    ),
    moves(
        ".machine.kernel.modules",
        "KernelModuleConfig (one document per module, named by the module)",
        "v1alpha1_types.go:2509; runtime/kernel_module.go",
    ),
    moves(
        ".machine.kernel.modules.name",
        "KernelModuleConfig.name",
        "v1alpha1_types.go:2522 @ v1.14.1; runtime/kernel_module.go",
    ),
    moves(
        ".machine.kernel.modules.parameters",
        "KernelModuleConfig.parameters",
        "v1alpha1_types.go:2527 @ v1.14.1; runtime/kernel_module.go",
    ),
    moves(
        ".machine.kubelet",
        "KubeletConfig, KubeNodeConfig and KubeCredentialProviderConfig",
        "v1alpha1_types.go:151",
    ),
    moves(
        ".machine.kubelet.image",
        "KubeletConfig.image",
        "v1alpha1_types.go:464; k8s/kubelet.go",
    ),
    moves(
        ".machine.kubelet.clusterDNS",
        "KubeletConfig.clusterDNS",
        "v1alpha1_types.go:468",
    ),
    moves(
        ".machine.kubelet.extraArgs",
        "KubeletConfig.extraArgs",
        "v1alpha1_types.go:472",
    ),
    none(
        ".machine.kubelet.extraMounts",
        "KubeletConfig has no extra mounts; the kubelet sees /var/lib/kubelet and the user \
         volumes under /var/mnt (UserVolumeConfig)",
        "v1alpha1_types.go:476 (removed in multi-doc config)",
    ),
    moves(
        ".machine.kubelet.extraConfig",
        "KubeletConfig.config",
        "v1alpha1_types.go:480",
    ),
    moves(
        ".machine.kubelet.credentialProviderConfig",
        "KubeCredentialProviderConfig.configuration",
        "k8s/credential_provider.go:92",
    ),
    moves(
        ".machine.kubelet.defaultRuntimeSeccompProfileEnabled",
        "KubeletConfig.defaultRuntimeSeccompProfileEnabled",
        "v1alpha1_types.go:491",
    ),
    moves(
        ".machine.kubelet.registerWithFQDN",
        "KubeNodeConfig.registerWithFQDN",
        "v1alpha1_types.go:495; k8s/node.go",
    ),
    moves(
        ".machine.kubelet.nodeIP",
        "KubeNodeConfig.nodeIP",
        "v1alpha1_types.go:499",
    ),
    moves(
        ".machine.kubelet.nodeIP.validSubnets",
        "KubeNodeConfig.nodeIP.validSubnets",
        "v1alpha1_types.go:499",
    ),
    moves(
        ".machine.kubelet.skipNodeRegistration",
        "KubeNodeConfig.skipNodeRegistration",
        "v1alpha1_types.go:503",
    ),
    none(
        ".machine.kubelet.disableManifestsDirectory",
        "KubeletConfig always disables the manifests directory; write static pods as \
         KubeStaticPodConfig documents",
        "v1alpha1_types.go:507 (locked to true in multi-doc config)",
    ),
    moves(
        ".machine.nodeAnnotations",
        "KubeNodeConfig.annotations",
        "v1alpha1_types.go:237",
    ),
    moves(
        ".machine.nodeLabels",
        "KubeNodeConfig.labels",
        "v1alpha1_types.go:233",
    ),
    moves(
        ".machine.nodeTaints",
        "KubeNodeConfig.taints",
        "v1alpha1_types.go:241",
    ),
    moves(
        ".machine.pods",
        "KubeStaticPodConfig (one document per pod, named <namespace>-<name>)",
        "v1alpha1_types.go:155; v1alpha1/v1alpha1_k8s_bridge.go (the pod name)",
    ),
    moves(
        ".machine.sysctls",
        "SysctlConfig.params",
        "v1alpha1_types.go:184",
    ),
    moves(
        ".machine.sysfs",
        "SysfsConfig.params",
        "v1alpha1_types.go:188",
    ),
    moves(".machine.udev", "UdevRulesConfig", "v1alpha1_types.go:210"),
    moves(
        ".machine.udev.rules",
        "UdevRulesConfig.rules",
        "v1alpha1_types.go:2474",
    ),
    moves(
        ".machine.features.hostDNS",
        "ResolverConfig.hostDNS",
        "v1alpha1_types.go:2141; network/resolver.go",
    ),
    moves(
        ".machine.features.hostDNS.enabled",
        "ResolverConfig.hostDNS.enabled",
        "v1alpha1_types.go:2199",
    ),
    moves(
        ".machine.features.hostDNS.forwardKubeDNSToHost",
        "ResolverConfig.hostDNS.forwardKubeDNSToHost",
        "v1alpha1_types.go:2199",
    ),
    moves(
        ".machine.features.hostDNS.resolveMemberNames",
        "ResolverConfig.hostDNS.resolveMemberNames",
        "v1alpha1_types.go:2199",
    ),
    moves(
        ".machine.features.imageCache",
        "ImageCacheConfig",
        "v1alpha1_types.go:2145; cri/image_cache.go",
    ),
    moves(
        ".machine.features.imageCache.localEnabled",
        "ImageCacheConfig.local.enabled",
        "v1alpha1_types.go:2145",
    ),
    moves(
        ".machine.features.kubePrism",
        "KubePrismConfig",
        "v1alpha1_types.go:2137; k8s/kubeprism.go",
    ),
    moves(
        ".machine.features.kubePrism.enabled",
        "KubePrismConfig (the document being there enables KubePrism)",
        "v1alpha1_types.go:2159",
    ),
    moves(
        ".machine.features.kubePrism.port",
        "KubePrismConfig.port",
        "v1alpha1_types.go:2159",
    ),
    moves(
        ".machine.features.kubernetesTalosAPIAccess",
        "KubeTalosAPIAccessConfig",
        "v1alpha1_types.go:2127; k8s/talos_api_access.go",
    ),
    moves(
        ".machine.features.kubernetesTalosAPIAccess.enabled",
        "KubeTalosAPIAccessConfig (the document being there enables the access)",
        "v1alpha1_types.go:2182",
    ),
    moves(
        ".machine.features.kubernetesTalosAPIAccess.allowedRoles",
        "KubeTalosAPIAccessConfig.allowedRoles",
        "v1alpha1_types.go:2182",
    ),
    moves(
        ".machine.features.kubernetesTalosAPIAccess.allowedKubernetesNamespaces",
        "KubeTalosAPIAccessConfig.allowedKubernetesNamespaces",
        "v1alpha1_types.go:2182",
    ),
    // cluster
    moves(
        ".cluster.acceptedCAs",
        "KubeAPIServerCAConfig.acceptedCAs (PEM text, not base64)",
        "v1alpha1_types.go:304; k8s/apiserver_ca.go",
    ),
    moves(
        ".cluster.aescbcEncryptionSecret",
        "KubeEtcdEncryptionConfig.config (an aescbc provider)",
        "v1alpha1_types.go:292; k8s/etcd_encryption.go",
    ),
    moves(
        ".cluster.aggregatorCA",
        "KubeAggregatorCAConfig.issuingCA (PEM text, not base64)",
        "v1alpha1_types.go:308 (it says KubeAPIServerAggregatorCAConfig); k8s/aggregator_ca.go",
    ),
    moves(
        ".cluster.aggregatorCA.crt",
        "KubeAggregatorCAConfig.issuingCA.cert (PEM text, not base64)",
        "v1alpha1_types.go:308",
    ),
    moves(
        ".cluster.aggregatorCA.key",
        "KubeAggregatorCAConfig.issuingCA.key (PEM text, not base64)",
        "v1alpha1_types.go:308",
    ),
    moves(
        ".cluster.allowSchedulingOnControlPlanes",
        "KubeNodeConfig.taints (without the node-role.kubernetes.io/control-plane taint to allow \
         scheduling)",
        "v1alpha1_types.go:372; k8s/node.go",
    ),
    moves(
        ".cluster.allowSchedulingOnMasters",
        "KubeNodeConfig.taints (without the node-role.kubernetes.io/control-plane taint to allow \
         scheduling)",
        "v1alpha1_types.go:368; k8s/node.go",
    ),
    moves(
        ".cluster.apiServer",
        "KubeAPIServerConfig, KubeAdmissionControlConfig, KubeAuditPolicyConfig, \
         KubeAuthenticationConfig and KubeAuthorizerConfig",
        "v1alpha1_types.go:316; k8s/apiserver.go",
    ),
    moves(
        ".cluster.apiServer.image",
        "KubeAPIServerConfig.image",
        "k8s/apiserver.go",
    ),
    moves(
        ".cluster.apiServer.extraArgs",
        "KubeAPIServerConfig.extraArgs (authentication and authorization flags: \
         KubeAuthenticationConfig and KubeAuthorizerConfig)",
        "k8s/apiserver.go (validateArgs)",
    ),
    none(
        ".cluster.apiServer.extraVolumes",
        "KubeAPIServerConfig mounts only its fixed ca-roots volume",
        "k8s/apiserver.go (ExtraVolumes)",
    ),
    moves(
        ".cluster.apiServer.env",
        "KubeAPIServerConfig.env",
        "k8s/apiserver.go",
    ),
    moves(
        ".cluster.apiServer.certSANs",
        "KubeAPIServerConfig.certExtraSANs",
        "k8s/apiserver.go",
    ),
    none(
        ".cluster.apiServer.disablePodSecurityPolicy",
        "PodSecurityPolicy is gone from supported Kubernetes versions: remove it",
        "absent from the 1.13 and 1.14 schemas",
    ),
    moves(
        ".cluster.apiServer.admissionControl",
        "KubeAdmissionControlConfig (one document per plugin, named by the plugin)",
        "v1alpha1_types.go:955; k8s/admission_control.go",
    ),
    moves(
        ".cluster.apiServer.auditPolicy",
        "KubeAuditPolicyConfig.configuration",
        "v1alpha1_types.go:959; k8s/audit_policy.go",
    ),
    moves(
        ".cluster.apiServer.resources",
        "KubeAPIServerConfig.resources",
        "k8s/apiserver.go",
    ),
    moves(
        ".cluster.apiServer.authorizationConfig",
        "KubeAuthorizerConfig (one document per authorizer, named by it)",
        "v1alpha1_types.go:968; k8s/authorization.go",
    ),
    moves(
        ".cluster.ca",
        "KubeAPIServerCAConfig.issuingCA on control planes, .acceptedCAs on workers (PEM text, \
         not base64)",
        "v1alpha1_types.go:300; k8s/apiserver_ca.go",
    ),
    moves(
        ".cluster.ca.crt",
        "KubeAPIServerCAConfig.issuingCA.cert on control planes, .acceptedCAs on workers (PEM \
         text, not base64)",
        "v1alpha1_types.go:300",
    ),
    moves(
        ".cluster.ca.key",
        "KubeAPIServerCAConfig.issuingCA.key (PEM text, not base64)",
        "v1alpha1_types.go:300",
    ),
    moves(
        ".cluster.clusterName",
        "KubeClusterConfig.clusterName",
        "v1alpha1_types.go:278; k8s/cluster.go",
    ),
    moves(
        ".cluster.controlPlane",
        "KubeClusterConfig",
        "v1alpha1_types.go:274",
    ),
    moves(
        ".cluster.controlPlane.endpoint",
        "KubeClusterConfig.endpoint",
        "v1alpha1_types.go:274; k8s/cluster.go",
    ),
    moves(
        ".cluster.controlPlane.localAPIServerPort",
        "KubeAPIServerConfig.apiPort",
        "v1alpha1_types.go:913; k8s/apiserver.go:198",
    ),
    moves(
        ".cluster.controllerManager",
        "KubeControllerManagerConfig",
        "v1alpha1_types.go:320; k8s/controller_manager.go",
    ),
    moves(
        ".cluster.controllerManager.image",
        "KubeControllerManagerConfig.image",
        "v1alpha1_types.go:1053",
    ),
    moves(
        ".cluster.controllerManager.extraArgs",
        "KubeControllerManagerConfig.extraArgs",
        "v1alpha1_types.go:1053",
    ),
    none(
        ".cluster.controllerManager.extraVolumes",
        "KubeControllerManagerConfig has no extra volumes",
        "k8s/controller_manager.go (ExtraVolumes)",
    ),
    moves(
        ".cluster.controllerManager.env",
        "KubeControllerManagerConfig.env",
        "v1alpha1_types.go:1053",
    ),
    moves(
        ".cluster.controllerManager.resources",
        "KubeControllerManagerConfig.resources",
        "v1alpha1_types.go:1053",
    ),
    moves(
        ".cluster.coreDNS",
        "KubeCoreDNSConfig",
        "v1alpha1_types.go:341; k8s/coredns.go",
    ),
    moves(
        ".cluster.coreDNS.disabled",
        "KubeCoreDNSConfig.enabled (inverted)",
        "k8s/coredns.go",
    ),
    moves(
        ".cluster.coreDNS.image",
        "KubeCoreDNSConfig.image",
        "k8s/coredns.go",
    ),
    moves(
        ".cluster.discovery",
        "DiscoveryServiceConfig",
        "v1alpha1_types.go:332; cluster/discovery_service.go",
    ),
    moves(
        ".cluster.discovery.enabled",
        "DiscoveryServiceConfig (the document being there enables discovery)",
        "v1alpha1_types.go:2391",
    ),
    moves(
        ".cluster.discovery.registries",
        "DiscoveryServiceConfig",
        "v1alpha1_types.go:2398",
    ),
    moves(
        ".cluster.discovery.registries.kubernetes",
        "nothing: the Kubernetes registry is off with DiscoveryServiceConfig",
        "v1alpha1_types.go:2417",
    ),
    none(
        ".cluster.discovery.registries.kubernetes.disabled",
        "the Kubernetes registry is always off with DiscoveryServiceConfig (it does not work \
         with Kubernetes 1.32 and later)",
        "v1alpha1_types.go:2432; internal/app/machined/pkg/controllers/cluster/config.go",
    ),
    moves(
        ".cluster.discovery.registries.service",
        "DiscoveryServiceConfig",
        "v1alpha1_types.go:2424",
    ),
    moves(
        ".cluster.discovery.registries.service.disabled",
        "DiscoveryServiceConfig (the document being there enables the service registry)",
        "v1alpha1_types.go:2450",
    ),
    moves(
        ".cluster.discovery.registries.service.endpoint",
        "DiscoveryServiceConfig.endpoint",
        "v1alpha1_types.go:2459",
    ),
    moves(
        ".cluster.extraManifestHeaders",
        "KubeExternalManifestConfig.headers",
        "v1alpha1_types.go:354; k8s/external_manifest.go",
    ),
    moves(
        ".cluster.extraManifests",
        "KubeExternalManifestConfig (one document per URL)",
        "v1alpha1_types.go:350; k8s/external_manifest.go",
    ),
    moves(
        ".cluster.id",
        "DiscoveryIdentityConfig.clusterID",
        "v1alpha1_types.go:266; cluster/discovery_identity.go",
    ),
    moves(
        ".cluster.inlineManifests",
        "KubeInlineManifestConfig (one document per manifest, contents in manifest)",
        "v1alpha1_types.go:358; k8s/inline_manifest.go",
    ),
    moves(
        ".cluster.network",
        "KubeNetworkConfig and KubeFlannelCNIConfig",
        "v1alpha1_types.go:282; k8s/network.go",
    ),
    moves(
        ".cluster.network.dnsDomain",
        "KubeNetworkConfig.dnsDomain",
        "k8s/network.go",
    ),
    moves(
        ".cluster.network.podSubnets",
        "KubeNetworkConfig.podSubnets",
        "k8s/network.go",
    ),
    moves(
        ".cluster.network.serviceSubnets",
        "KubeNetworkConfig.serviceSubnets",
        "k8s/network.go",
    ),
    moves(
        ".cluster.network.cni",
        "KubeFlannelCNIConfig (flannel) or KubeExternalManifestConfig (custom)",
        "k8s/flannel.go; generate/kubernetes.go (custom-cni)",
    ),
    moves(
        ".cluster.network.cni.name",
        "KubeFlannelCNIConfig (there for flannel, deleted for custom and none)",
        "generate/kubernetes.go",
    ),
    moves(
        ".cluster.network.cni.urls",
        "KubeExternalManifestConfig.url (custom-cni)",
        "generate/kubernetes.go",
    ),
    moves(
        ".cluster.network.cni.flannel",
        "KubeFlannelCNIConfig",
        "k8s/flannel.go",
    ),
    moves(
        ".cluster.network.cni.flannel.extraArgs",
        "KubeFlannelCNIConfig.extraArgs",
        "k8s/flannel.go",
    ),
    moves(
        ".cluster.network.cni.flannel.kubeNetworkPoliciesEnabled",
        "KubeFlannelCNIConfig.kubeNetworkPoliciesEnabled",
        "k8s/flannel.go",
    ),
    moves(
        ".cluster.proxy",
        "KubeProxyConfig",
        "v1alpha1_types.go:324; k8s/proxy.go",
    ),
    moves(
        ".cluster.proxy.disabled",
        "KubeProxyConfig.enabled (inverted)",
        "v1alpha1_types.go:1091",
    ),
    moves(
        ".cluster.proxy.image",
        "KubeProxyConfig.image",
        "k8s/proxy.go",
    ),
    moves(
        ".cluster.proxy.mode",
        "KubeProxyConfig.mode",
        "k8s/proxy.go",
    ),
    moves(
        ".cluster.proxy.extraArgs",
        "KubeProxyConfig.config (kube-proxy runs with a configuration file in 1.14; flags \
         without a configuration field stay in KubeProxyConfig.extraArgs)",
        "k8s/proxy.go; internal/app/machined/pkg/controllers/k8s/control_plane.go",
    ),
    moves(
        ".cluster.scheduler",
        "KubeSchedulerConfig",
        "v1alpha1_types.go:328; k8s/scheduler.go",
    ),
    moves(
        ".cluster.scheduler.image",
        "KubeSchedulerConfig.image",
        "v1alpha1_types.go:1124",
    ),
    moves(
        ".cluster.scheduler.extraArgs",
        "KubeSchedulerConfig.extraArgs",
        "v1alpha1_types.go:1124",
    ),
    none(
        ".cluster.scheduler.extraVolumes",
        "KubeSchedulerConfig has no extra volumes",
        "k8s/scheduler.go (ExtraVolumes)",
    ),
    moves(
        ".cluster.scheduler.env",
        "KubeSchedulerConfig.env",
        "v1alpha1_types.go:1124",
    ),
    moves(
        ".cluster.scheduler.resources",
        "KubeSchedulerConfig.resources",
        "v1alpha1_types.go:1124",
    ),
    moves(
        ".cluster.scheduler.config",
        "KubeSchedulerConfig.config",
        "v1alpha1_types.go:1124",
    ),
    moves(
        ".cluster.secret",
        "DiscoveryIdentityConfig.clusterSecret",
        "v1alpha1_types.go:270; cluster/discovery_identity.go",
    ),
    moves(
        ".cluster.secretboxEncryptionSecret",
        "KubeEtcdEncryptionConfig.config (a secretbox provider)",
        "v1alpha1_types.go:296; k8s/etcd_encryption.go",
    ),
    moves(
        ".cluster.serviceAccount",
        "KubeServiceAccountConfig.issuer",
        "v1alpha1_types.go:312; k8s/service_account.go",
    ),
    moves(
        ".cluster.serviceAccount.key",
        "KubeServiceAccountConfig.issuer.privateKey (PEM text, not base64)",
        "v1alpha1_types.go:312",
    ),
];

/// The table row for `path` (`.machine.nodeLabels`), if the field is deprecated.
pub fn lookup(path: &str) -> Option<&'static DeprecatedField> {
    DEPRECATED_FIELDS.iter().find(|f| f.path == path)
}

/// The deprecated fields a patch or config document sets, most specific first-come: a field is
/// reported, not its section, when both are set. Only the v1alpha1 document has such fields;
/// any other document gives nothing. A `$patch: delete` counts as setting the field.
pub fn deprecated_fields(doc: &Value) -> Vec<Deprecated> {
    if !DocId::of(doc).is_v1alpha1() {
        return Vec::new();
    }
    let set: Vec<&'static DeprecatedField> = DEPRECATED_FIELDS
        .iter()
        .filter(|f| value_at(doc, f.path).is_some_and(|v| !v.is_null()))
        .collect();
    set.iter()
        .filter(|f| {
            let prefix = format!("{}.", f.path);
            !set.iter().any(|other| other.path.starts_with(&prefix))
        })
        .map(|f| Deprecated {
            field: f,
            message: f.message(),
        })
        .collect()
}

/// The value at a dotted path (`.machine.kubelet.image`); every step must be a mapping.
fn value_at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(doc, |cur, key| cur.as_object()?.get(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A document that sets `path` to `leaf`.
    fn setting(path: &str, leaf: Value) -> Value {
        path.trim_start_matches('.')
            .rsplit('.')
            .fold(leaf, |inner, key| json!({ key: inner }))
    }

    #[test]
    fn every_row_is_reported_alone_when_set() {
        for field in DEPRECATED_FIELDS {
            let doc = setting(field.path, json!("x"));
            let found = deprecated_fields(&doc);
            assert_eq!(found.len(), 1, "{}: {found:?}", field.path);
            assert_eq!(found[0].field, field);
            assert!(
                found[0].message.starts_with(field.path),
                "{}",
                found[0].message
            );
            assert!(!found[0].message.contains("\"x\""));
        }
    }

    #[test]
    fn the_schema_difference_is_all_there() {
        // §3 of the research note: 13 under machine, 21 under cluster, 4 under machine.features.
        let sections = |prefix: &str| {
            DEPRECATED_FIELDS
                .iter()
                .filter(|f| {
                    f.path
                        .strip_prefix(prefix)
                        .is_some_and(|rest| !rest.contains('.'))
                })
                .count()
        };
        assert_eq!(sections(".machine."), 13);
        assert_eq!(
            sections(".cluster."),
            22,
            "21 plus allowSchedulingOnMasters"
        );
        assert_eq!(sections(".machine.features."), 4);
        let mut paths: Vec<&str> = DEPRECATED_FIELDS.iter().map(|f| f.path).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(
            paths.len(),
            DEPRECATED_FIELDS.len(),
            "a path is listed twice"
        );
    }

    #[test]
    fn the_field_is_reported_not_its_section() {
        let doc = json!({"machine": {"kubelet": {"image": "k", "nodeIP": {"validSubnets": ["10.0.0.0/8"]}},
            "nodeLabels": {"a": "b"}, "certSANs": ["x"]}});
        let paths: Vec<&str> = deprecated_fields(&doc)
            .iter()
            .map(|d| d.field.path)
            .collect();
        assert_eq!(
            paths,
            [
                ".machine.kubelet.image",
                ".machine.kubelet.nodeIP.validSubnets",
                ".machine.nodeLabels"
            ]
        );
        assert_eq!(
            deprecated_fields(&doc)[2].message,
            ".machine.nodeLabels is deprecated in Talos 1.14: it moves to KubeNodeConfig.labels"
        );
        // An empty section is still set (a non-nil pointer in Go).
        let paths: Vec<&str> = deprecated_fields(&json!({"machine": {"kubelet": {}}}))
            .iter()
            .map(|d| d.field.path)
            .collect();
        assert_eq!(paths, [".machine.kubelet"]);
    }

    #[test]
    fn no_equivalent_says_what_to_do_instead() {
        let d = deprecated_fields(
            &json!({"machine": {"kubelet": {"extraMounts": [{"source": "/var/opt"}]}}}),
        );
        assert_eq!(
            d[0].message,
            ".machine.kubelet.extraMounts is deprecated in Talos 1.14 and has no equivalent there: \
             KubeletConfig has no extra mounts; the kubelet sees /var/lib/kubelet and the user \
             volumes under /var/mnt (UserVolumeConfig)"
        );
    }

    #[test]
    fn other_documents_and_kept_fields_give_nothing() {
        assert!(
            deprecated_fields(
                &json!({"apiVersion": "v1alpha1", "kind": "KubeletConfig", "image": "k"})
            )
            .is_empty()
        );
        assert!(
            deprecated_fields(
                &json!({"machine": {"certSANs": ["a"], "features": {"diskQuotaSupport": true}},
                "cluster": {"token": "t", "etcd": {}}})
            )
            .is_empty()
        );
        assert_eq!(
            lookup(".machine.sysctls").unwrap().replacement,
            Replacement::MovesTo("SysctlConfig.params")
        );
        assert!(lookup(".machine.certSANs").is_none());
    }
}
