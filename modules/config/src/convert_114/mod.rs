//! Converting an old-shape (v1alpha1) strategic patch into the Talos 1.14 documents with the
//! same settings.
//!
//! A config rendered for the 1.14 contract already holds the new documents (KubeletConfig,
//! KubeNodeConfig, KubeAPIServerConfig, ...: see `generate.rs`), so a patch written for 1.13 such
//! as `machine: {nodeLabels: {a: b}}` either fails Talos's conflict checks
//! (`.machine.nodeLabels is already set in v1alpha1 config`, see `validate.rs`) or is silently
//! ignored. [`convert_patch`] rewrites such a patch: every deprecated field (the table in
//! [`crate::deprecations`]) becomes a merge into the 1.14 document that takes it, and the
//! v1alpha1 part keeps only what 1.14 still reads there.
//!
//! "Same settings" means what upstream's bridge shims read from the legacy fields
//! (`pkg/machinery/config/types/v1alpha1/v1alpha1_*_bridge.go` at v1.14.0-rc.1): Talos 1.14 reads
//! the old fields through them when no new document is present, so a converted document must
//! give the node what the shim gives. The rules, one file per concern, cite the upstream file
//! each follows:
//!
//! * `node.rs`: `.machine.kubelet`, `.machine.node{Labels,Annotations,Taints}`, `.machine.pods`,
//!   `.cluster.allowSchedulingOn*` → KubeletConfig, KubeNodeConfig, KubeCredentialProviderConfig,
//!   KubeStaticPodConfig;
//! * `cluster.rs`: cluster name, endpoint, API port, discovery and its identity;
//! * `network.rs`: `.cluster.network`, the CNI and the extra and inline manifests;
//! * `control_plane.rs`: kube-apiserver and its satellites, controller manager, scheduler,
//!   kube-proxy, CoreDNS, `.machine.controlPlane`;
//! * `pki.rs`: the Kubernetes CAs (base64 `crt`/`key` → PEM `cert`/`key`), the service account
//!   key and etcd encryption;
//! * `features.rs`: KubePrism, Talos API access, host DNS, the image cache;
//! * `host.rs`: sysctls, sysfs, kernel modules, udev rules, base runtime spec overrides;
//! * `files.rs`: `.machine.files` → EtcFileConfig / CRICustomizationConfig (or left in v1alpha1);
//! * `install.rs`: `.machine.install` → UnattendedInstallConfig, disk selectors as CEL.
//!
//! The converter sees the patch, not the base it will be applied to. It assumes that base is a
//! 1.14-contract render of [`crate::MachineConfig::generate`], which holds the Kubernetes
//! documents on every machine: where the legacy meaning depends on the base (presence means
//! enabled, a replace that must delete first), the converted patch is written for that render.
//! Fields with no 1.14 equivalent are refused ([`ConversionError`] names each field and what to
//! write instead), and settings whose 1.14 document is control-plane-only are dropped with a
//! warning on workers, where they had no effect in 1.13 either.
//!
//! Secrets: values are moved, never formatted. Errors, warnings, [`Converted`] records and the
//! `Debug` forms name paths and kinds only.

mod builder;
mod cluster;
mod control_plane;
mod features;
mod files;
mod host;
mod install;
mod network;
mod node;
mod pki;

use serde_json::Value;

use crate::document::DocId;
use crate::generate::MachineType;
use crate::merge::merge_document;
use crate::normalize::Rules;
use crate::patch::Patch;
use builder::{Builder, contains_marker};

/// One deprecated field and where its setting went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converted {
    /// The legacy path, as `.machine.kubelet.image`.
    pub from: String,
    /// The 1.14 place: `KubeletConfig.image`, `KubeAdmissionControlConfig(PodSecurity).configuration`,
    /// `KubeFlannelCNIConfig $patch: delete`, or a whole document such as `KubePrismConfig`.
    pub to: String,
}

/// The converted patch.
#[derive(Clone, PartialEq)]
pub struct Conversion {
    /// The documents to apply instead of the patch: its v1alpha1 part without the deprecated
    /// fields (left out when nothing else remains), then the 1.14 documents in the order
    /// `talosctl gen config` writes them (a `$patch: delete` before a merge of the same
    /// document), then the patch's own 1.14 documents. Where the patch has a document the
    /// conversion also writes, it is merged on top of the converted fields.
    pub docs: Vec<Value>,
    /// Each deprecated field and where it went.
    pub converted: Vec<Converted>,
    /// Fields dropped (no effect on this machine type, or the value 1.14 has locked) or kept in
    /// v1alpha1 (files under `/var`), and settings that rely on the base render.
    pub warnings: Vec<String>,
}

impl Conversion {
    /// The converted documents as a strategic patch.
    pub fn into_patch(self) -> Patch {
        Patch::Strategic(self.docs)
    }
}

// Debug names the documents only: a patch may carry keys and tokens.
impl std::fmt::Debug for Conversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let docs: Vec<String> = self
            .docs
            .iter()
            .map(|d| {
                let id = DocId::of(d);
                let label = if id.is_v1alpha1() {
                    "v1alpha1".to_string()
                } else if id.name.is_empty() {
                    id.kind
                } else {
                    format!("{}({})", id.kind, id.name)
                };
                if builder::is_delete_marker(d) {
                    format!("{label} $patch: delete")
                } else {
                    label
                }
            })
            .collect();
        f.debug_struct("Conversion")
            .field("docs", &docs)
            .field("converted", &self.converted)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// A field the conversion cannot carry over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The legacy path, as `.machine.kubelet.extraMounts`.
    pub path: String,
    /// What is wrong and what to write instead.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Why a patch cannot be converted: every refused field, each with what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionError {
    pub refusals: Vec<Refusal>,
}

impl std::fmt::Display for ConversionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.refusals.iter().map(Refusal::to_string).collect();
        write!(
            f,
            "cannot convert the patch to the Talos 1.14 documents: {}",
            list.join("; ")
        )
    }
}

impl std::error::Error for ConversionError {}

/// Converts the deprecated v1alpha1 fields of a strategic patch (one `Value` per document, as in
/// [`Patch::Strategic`]) into the Talos 1.14 documents with the same settings, for a machine of
/// type `machine`. A patch without deprecated fields comes back unchanged.
///
/// Apply the result, instead of the patch, to a config rendered for the 1.14 contract. For the
/// 1.11-1.13 contracts nothing is converted: warn with [`crate::deprecations::deprecated_fields`].
pub fn convert_patch(docs: &[Value], machine: MachineType) -> Result<Conversion, ConversionError> {
    let unchanged = || Conversion {
        docs: docs.to_vec(),
        converted: Vec::new(),
        warnings: Vec::new(),
    };
    let mut legacy_docs = docs.iter().filter(|d| DocId::of(d).is_v1alpha1());
    let Some(legacy) = legacy_docs.next() else {
        return Ok(unchanged());
    };
    let refuse = |reason: &str| ConversionError {
        refusals: vec![Refusal {
            path: "v1alpha1".into(),
            reason: reason.into(),
        }],
    };
    if legacy_docs.next().is_some() {
        return Err(refuse(
            "the patch holds more than one v1alpha1 document; merge them into one",
        ));
    }
    let Some(legacy) = legacy.as_object() else {
        return Err(refuse("expected a mapping"));
    };

    let mut b = Builder::new(machine, legacy.clone());
    node::convert(&mut b);
    cluster::convert(&mut b);
    network::convert(&mut b);
    control_plane::convert(&mut b);
    pki::convert(&mut b);
    features::convert(&mut b);
    host::convert(&mut b);
    files::convert(&mut b);
    install::convert(&mut b);
    let drained = b.drain();
    if !drained.refusals.is_empty() {
        return Err(ConversionError {
            refusals: drained.refusals,
        });
    }
    if drained.legacy == *legacy && drained.out.is_empty() && drained.warnings.is_empty() {
        return Ok(unchanged());
    }

    let mut converted_docs = drained.out;
    converted_docs.sort_by_key(|d| kind_rank(d.kind));
    let mut own = Vec::new();
    for doc in docs.iter().filter(|d| !DocId::of(d).is_v1alpha1()) {
        if !merge_into_converted(&mut converted_docs, doc) {
            own.push(doc.clone());
        }
    }

    let mut out = Vec::new();
    if drained.legacy.keys().any(|k| k != "version") {
        out.push(Value::Object(drained.legacy));
    }
    out.extend(converted_docs.into_iter().map(|d| Value::Object(d.body)));
    out.extend(own);
    Ok(Conversion {
        docs: out,
        converted: drained.converted,
        warnings: drained.warnings,
    })
}

/// Merges one of the patch's own documents over the converted document of the same identity,
/// as applying it after the conversion would. Documents with `$patch` markers are left to be
/// applied in order instead (a merge part cannot hold a delete of what it also sets).
fn merge_into_converted(converted: &mut [builder::OutDoc], doc: &Value) -> bool {
    if contains_marker(doc) {
        return false;
    }
    let id = DocId::of(doc);
    let Some(target) = converted.iter_mut().find(|d| {
        !d.delete
            && d.kind == id.kind
            && d.name == id.name
            && id.api_version == "v1alpha1"
            && !contains_marker(&Value::Object(d.body.clone()))
    }) else {
        return false;
    };
    let mut merged = Value::Object(target.body.clone());
    // The converted documents are 1.14's: merged by 1.14's rules.
    if merge_document(&mut merged, doc, &id.kind, &id.kind, Rules::V1_14).is_err() {
        return false;
    }
    if let Value::Object(body) = merged {
        target.body = body;
    }
    true
}

/// The order `talosctl gen config` writes the documents in (the 1.14 goldens), then the kinds it
/// never writes, in the order of the research note's §7.
const KIND_ORDER: &[&str] = &[
    "DiscoveryServiceConfig",
    "DiscoveryIdentityConfig",
    "UnattendedInstallConfig",
    "ResolverConfig",
    "SysctlConfig",
    "KubeClusterConfig",
    "KubeNodeConfig",
    "KubeletConfig",
    "KubeNetworkConfig",
    "KubeAPIServerCAConfig",
    "KubePrismConfig",
    "KubeAggregatorCAConfig",
    "KubeAdmissionControlConfig",
    "KubeAuditPolicyConfig",
    "KubeAuthorizerConfig",
    "KubeEtcdEncryptionConfig",
    "KubeServiceAccountConfig",
    "KubeAPIServerConfig",
    "KubeControllerManagerConfig",
    "KubeSchedulerConfig",
    "KubeProxyConfig",
    "KubeFlannelCNIConfig",
    "KubeCoreDNSConfig",
    "KubeExternalManifestConfig",
    "KubeCredentialProviderConfig",
    "KubeInlineManifestConfig",
    "KubeStaticPodConfig",
    "KubeTalosAPIAccessConfig",
    "ImageCacheConfig",
    "SysfsConfig",
    "KernelModuleConfig",
    "UdevRulesConfig",
    "CRIBaseRuntimeSpecConfig",
    "CRICustomizationConfig",
    "EtcFileConfig",
];

fn kind_rank(kind: &str) -> usize {
    KIND_ORDER
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(KIND_ORDER.len())
}
