//! The machine config as a node holds it: the exact bytes applied, the decoded documents, and
//! the few facts the simulator reads from them (machine type, CAs, names, endpoint).
//!
//! Everything a node decides about a config is the simulator's own reading of upstream, not the
//! collection's `ferro-talos-config`: decoding (`crate::decode`, from its table of upstream's Go
//! types), validation (`crate::validate`, upstream's checks and texts), the live-change rule
//! (`crate::reboot`, `CanApplyImmediate`) and the YAML Talos prints (`crate::encode`, go-yaml's
//! output of the Go structs). This file adds the accessors and the unified diffs.

use base64::Engine;

pub use crate::decode::Release;
use serde_json::Value;
use std::collections::BTreeMap;

/// A config as applied to a node: the exact bytes plus the decoded documents.
#[derive(Clone)]
pub struct StoredConfig {
    pub raw: Vec<u8>,
    /// The documents as decoded, in the order applied (the v1alpha1 one has no `kind`).
    pub docs: Vec<Value>,
    /// The release whose types decoded them (and encode them back).
    pub release: Release,
    /// SHA-256 of `raw` (hex): the config's file name in a state directory.
    pub digest: String,
}

// Secrets live inside; never print them.
impl std::fmt::Debug for StoredConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoredConfig({} bytes)", self.raw.len())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineType {
    Init,
    ControlPlane,
    Worker,
}

impl MachineType {
    pub fn is_control_plane(self) -> bool {
        matches!(self, MachineType::Init | MachineType::ControlPlane)
    }
}

fn decode_b64_pem(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?.trim();
    if s.is_empty() {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    String::from_utf8(bytes)
        .ok()
        .filter(|p| p.contains("-----BEGIN"))
}

fn get_path<'a>(doc: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, k| v.get(*k))
}

impl StoredConfig {
    /// Decodes every document the way a node running `release` does (`crate::decode`: the
    /// simulator's own reading of upstream's config loader), with upstream's error texts.
    pub fn parse(raw: &[u8], release: Release) -> Result<StoredConfig, String> {
        let text = std::str::from_utf8(raw)
            .map_err(|_| "decode error: yaml: invalid leading UTF-8 octet".to_string())?;
        let docs = crate::decode::decode(text, release)?;
        use sha2::Digest;
        Ok(StoredConfig {
            raw: raw.to_vec(),
            docs,
            release,
            digest: hex::encode(sha2::Sha256::digest(raw)),
        })
    }

    pub fn docs(&self) -> &[Value] {
        &self.docs
    }

    pub fn v1alpha1(&self) -> Option<&Value> {
        self.docs.iter().find(|d| crate::encode::is_legacy(d))
    }

    fn v1(&self, path: &[&str]) -> Option<&Value> {
        self.v1alpha1().and_then(|d| get_path(d, path))
    }

    pub fn machine_type(&self) -> Option<MachineType> {
        match self.v1(&["machine", "type"])?.as_str()? {
            "init" => Some(MachineType::Init),
            "controlplane" => Some(MachineType::ControlPlane),
            "worker" => Some(MachineType::Worker),
            _ => None,
        }
    }

    /// The OS CA certificate and (control planes only) its key, as PEM.
    pub fn os_ca(&self) -> Option<(String, Option<String>)> {
        let crt = decode_b64_pem(self.v1(&["machine", "ca", "crt"]))?;
        Some((crt, decode_b64_pem(self.v1(&["machine", "ca", "key"]))))
    }

    pub fn accepted_cas(&self) -> Vec<String> {
        self.v1(&["machine", "acceptedCAs"])
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|c| decode_b64_pem(c.get("crt")))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A Talos 1.14 document of this kind, if the config has one.
    fn document(&self, kind: &str) -> Option<&Value> {
        self.docs()
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
    }

    /// Kubernetes CA certificate and key, as PEM: `KubeAPIServerCAConfig.issuingCA` (PEM text,
    /// Talos 1.14, `types/k8s/apiserver_ca.go` @ v1.14.1), else `cluster.ca` (base64). Upstream
    /// reads the document first (`Container.K8sAPIServerCAConfig`), and the two are exclusive.
    pub fn k8s_ca(&self) -> Option<(String, String)> {
        if let Some(doc) = self.document("KubeAPIServerCAConfig") {
            let pem = |key: &str| {
                doc.pointer(&format!("/issuingCA/{key}"))
                    .and_then(Value::as_str)
                    .filter(|s| s.contains("-----BEGIN"))
                    .map(String::from)
            };
            return Some((pem("cert")?, pem("key")?));
        }
        Some((
            decode_b64_pem(self.v1(&["cluster", "ca", "crt"]))?,
            decode_b64_pem(self.v1(&["cluster", "ca", "key"]))?,
        ))
    }

    /// The service-account signing key, as PEM: `KubeServiceAccountConfig.issuer.privateKey`
    /// (PEM text, Talos 1.14, `types/k8s/service_account.go` @ v1.14.1), else
    /// `cluster.serviceAccount.key` (base64).
    pub fn service_account_key(&self) -> Option<String> {
        if let Some(doc) = self.document("KubeServiceAccountConfig") {
            return doc
                .pointer("/issuer/privateKey")
                .and_then(Value::as_str)
                .filter(|s| s.contains("-----BEGIN"))
                .map(String::from);
        }
        decode_b64_pem(self.v1(&["cluster", "serviceAccount", "key"]))
    }

    /// `KubeClusterConfig`'s field (Talos 1.14, `types/k8s/cluster.go` @ v1.14.1), else the
    /// v1alpha1 one: upstream's `Container.K8sClusterConfig` takes the document when there is one.
    fn cluster_field(&self, field: &str, v1alpha1: &[&str]) -> String {
        let value = match self.document("KubeClusterConfig") {
            Some(doc) => doc.get(field),
            None => self.v1(v1alpha1),
        };
        value.and_then(Value::as_str).unwrap_or("").to_string()
    }

    pub fn cluster_name(&self) -> String {
        self.cluster_field("clusterName", &["cluster", "clusterName"])
    }

    pub fn endpoint(&self) -> String {
        self.cluster_field("endpoint", &["cluster", "controlPlane", "endpoint"])
    }

    pub fn cert_sans(&self) -> Vec<String> {
        self.v1(&["machine", "certSANs"])
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn install_image(&self) -> Option<String> {
        self.v1(&["machine", "install", "image"])
            .and_then(Value::as_str)
            .map(String::from)
    }

    /// `.machine.nodeLabels`, or KubeNodeConfig's `labels` where the config has one (1.14,
    /// `types/k8s/node.go`, which Talos reads instead).
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        self.node_field("nodeLabels", "labels")
    }

    pub fn node_annotations(&self) -> BTreeMap<String, String> {
        self.node_field("nodeAnnotations", "annotations")
    }

    /// Taints as written: `key` to `value:Effect` or `Effect`.
    pub fn node_taints(&self) -> BTreeMap<String, String> {
        self.node_field("nodeTaints", "taints")
    }

    fn node_field(&self, legacy: &str, field: &str) -> BTreeMap<String, String> {
        let node_doc = self
            .docs()
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some("KubeNodeConfig"));
        let map = match node_doc {
            Some(doc) => doc.get(field),
            None => self.v1(&["machine", legacy]),
        };
        map.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect()
    }

    pub fn hostname(&self) -> Option<String> {
        if let Some(h) = self
            .v1(&["machine", "network", "hostname"])
            .and_then(Value::as_str)
        {
            return Some(h.to_string());
        }
        self.docs()
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some("HostnameConfig"))
            .and_then(|d| d.get("hostname"))
            .and_then(Value::as_str)
            .map(String::from)
    }

    /// The IPv4 addresses the config sets on the node's links: v1alpha1's
    /// `machine.network.interfaces[].addresses` (and the older `cidr`, and each VLAN's), and the
    /// `addresses[].address` of the link documents (`LinkConfig`, `BondConfig`, `VLANConfig`, ...:
    /// `CommonLinkConfig` in `pkg/machinery/config/types/network/link.go` @ v1.14.1).
    pub fn static_addresses(&self) -> Vec<std::net::Ipv4Addr> {
        fn ip(cidr: &Value) -> Option<std::net::Ipv4Addr> {
            cidr.as_str()?.split('/').next()?.parse().ok()
        }
        fn strings(v: Option<&Value>) -> Vec<&Value> {
            v.and_then(Value::as_array).into_iter().flatten().collect()
        }
        let mut out = Vec::new();
        for iface in strings(self.v1(&["machine", "network", "interfaces"])) {
            let vlans = strings(iface.get("vlans"));
            for link in std::iter::once(iface).chain(vlans) {
                out.extend(strings(link.get("addresses")).into_iter().filter_map(ip));
                out.extend(link.get("cidr").and_then(ip));
            }
        }
        for doc in self.docs().iter().filter(|d| d.get("kind").is_some()) {
            out.extend(
                strings(doc.get("addresses"))
                    .into_iter()
                    .filter_map(|a| a.get("address").and_then(ip)),
            );
        }
        out
    }

    /// ApplyConfiguration's checks on a node that is not installed yet (metal mode requires
    /// the install section): `Ok(warnings)` or `Err(upstream's message)`.
    pub fn validate(&self, maintenance: bool) -> Result<Vec<String>, String> {
        self.validate_on(maintenance, false)
    }

    /// ApplyConfiguration's checks (`ApplyConfiguration` in `internal/app/machined/internal/
    /// server/v1alpha1/v1alpha1_server.go` @ v1.13.9 / v1.14.1): outside maintenance mode the
    /// config must have a v1alpha1 document; then upstream's validation in metal mode, which
    /// asks for install instructions only while the node is not `installed` (`modeWrapper`).
    pub fn validate_on(&self, maintenance: bool, installed: bool) -> Result<Vec<String>, String> {
        if self.v1alpha1().is_none() && !maintenance {
            return Err("the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?".into());
        }
        let mode = crate::validate::Mode {
            requires_install: !installed,
        };
        crate::validate::validate(&self.docs, self.release, mode)
    }

    /// Every document as Talos encodes it (`crate::encode`).
    pub fn to_yaml(&self) -> String {
        crate::encode::encode_config(&self.docs, self.release)
    }
}

/// `Ok(())` when Talos 1.13 applies `new` over `old` at once, else its error text
/// ("this config change can't be applied in immediate mode\ndiff:\n…", `crate::reboot`).
pub fn can_apply_immediate(old: &StoredConfig, new: &StoredConfig) -> Result<(), String> {
    crate::reboot::can_apply_immediate(Some(&old.docs), &new.docs, new.release)
}

/// `None` when the change can be applied immediately, otherwise the diff Talos shows.
pub fn reboot_diff(old: &StoredConfig, new: &StoredConfig) -> Option<String> {
    let err = can_apply_immediate(old, new).err()?;
    Some(
        err.split_once("diff:\n")
            .map(|(_, d)| d.to_string())
            .unwrap_or(err),
    )
}

/// Unified diff with Talos's `--- a` / `+++ b` headers (`textdiff.Diff`: empty when equal).
pub fn unified(old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header("a", "b")
        .to_string()
}

/// The dry-run "Config diff" body (`generateDiff` in v1alpha1_server.go: `configdiff.DiffConfigs`
/// of the running config and the new one, comments disabled), or `No changes.`.
pub fn dry_run_diff(old: Option<&StoredConfig>, new: &StoredConfig) -> String {
    let before = old.map(StoredConfig::to_yaml).unwrap_or_default();
    let after = new.to_yaml();
    if before == after {
        return "No changes.".into();
    }
    unified(&before, &after)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::LazyLock;

    /// A control-plane config rendered by the collection's generator (with its install disk).
    static SAMPLE: LazyLock<crate::sample::SampleCluster> =
        LazyLock::new(crate::sample::SampleCluster::generate);

    #[test]
    fn parses_a_rendered_config() {
        let cp = &SAMPLE.controlplane;
        // Without an install disk a metal node refuses the config.
        let without_disk = cp.replacen("        disk: /dev/sda\n", "", 1);
        let c = StoredConfig::parse(without_disk.as_bytes(), Release::V1_13).unwrap();
        assert!(c.validate(false).unwrap_err().contains("install disk"));
        let c = StoredConfig::parse(cp.as_bytes(), Release::V1_13).unwrap();
        assert_eq!(c.machine_type(), Some(MachineType::ControlPlane));
        assert_eq!(c.cluster_name(), "base");
        assert_eq!(c.endpoint(), "https://base:6443");
        let (crt, key) = c.os_ca().unwrap();
        assert!(crt.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.unwrap().contains("ED25519 PRIVATE KEY"));
        assert!(c.k8s_ca().is_some());
        let v = c.validate(false);
        assert!(v.is_ok(), "{v:?}");
    }

    /// Talos 1.14 keeps the cluster's name and endpoint in `KubeClusterConfig` and the
    /// Kubernetes CA in `KubeAPIServerCAConfig` (`types/k8s/cluster.go`, `apiserver_ca.go` @
    /// v1.14.1); the v1alpha1 places are empty there.
    #[test]
    fn a_1_14_config_names_its_cluster_and_ca_in_their_documents() {
        let cp = crate::sample::SampleCluster::render(
            &SAMPLE.bundle,
            ferro_talos_config::contract::Contract::V1_14,
        )
        .controlplane;
        let c = StoredConfig::parse(cp.as_bytes(), Release::V1_14).unwrap();
        assert_eq!(c.v1(&["cluster", "controlPlane", "endpoint"]), None);
        assert_eq!(c.v1(&["cluster", "clusterName"]), None);
        assert_eq!(c.v1(&["cluster", "ca"]), None);
        assert_eq!(c.cluster_name(), "base");
        assert_eq!(c.endpoint(), "https://base:6443");
        let (crt, key) = c.k8s_ca().unwrap();
        assert!(crt.starts_with("-----BEGIN CERTIFICATE-----"), "{crt}");
        assert!(key.contains("PRIVATE KEY"));
    }

    #[test]
    fn live_vs_reboot() {
        let cp = &SAMPLE.controlplane;
        let old = StoredConfig::parse(cp.as_bytes(), Release::V1_13).unwrap();
        let live = cp.replace("certSANs: []", "certSANs: [\"10.0.0.1\"]");
        let live = StoredConfig::parse(live.as_bytes(), Release::V1_13).unwrap();
        assert_eq!(reboot_diff(&old, &live), None);
        let token = format!("token: {}", SAMPLE.bundle.trustd_info.token);
        let reboot = cp.replace(&token, "token: aaaaaa.bbbbbbbbbbbbbbbb");
        let reboot = StoredConfig::parse(reboot.as_bytes(), Release::V1_13).unwrap();
        let diff = reboot_diff(&old, &reboot).unwrap();
        assert!(diff.starts_with("--- a\n+++ b\n@@ "), "{diff}");
        assert!(diff.contains(&format!("-    {token}")), "{diff}");
    }

    #[test]
    fn rejects_bad_documents() {
        assert!(StoredConfig::parse(b"foo: [", Release::V1_13).is_err());
        // Without a kind, apiVersion v1alpha1 names the legacy document, which has no such keys.
        assert_eq!(
            StoredConfig::parse(b"apiVersion: v1alpha1\nname: x\n", Release::V1_13).unwrap_err(),
            "error decoding document v1alpha1/v1alpha1/x (line 1): unknown keys found during decoding:\napiVersion: v1alpha1\nname: x\n"
        );
        let worker_only = StoredConfig::parse(
            b"apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n",
            Release::V1_13,
        )
        .unwrap();
        assert!(
            worker_only
                .validate(false)
                .unwrap_err()
                .contains("doesn't contain v1alpha1")
        );
    }
}
