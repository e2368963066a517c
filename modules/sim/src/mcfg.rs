//! The few machine-config facts the simulator needs, read from the applied YAML.
//!
//! Decoding is the simulator's own (`crate::decode`, from its table of upstream's Go types);
//! validation, the live-change rule and YAML encoding still come from `ferro-talos-config` (the
//! code the modules use, see docs/talos-fidelity.md); this file adds the accessors the simulator
//! needs (machine type, CAs, names, endpoint) and the unified diffs Talos prints.

use base64::Engine;
use ferro_talos_config::MachineConfig;

pub use crate::decode::Release;
use serde_json::Value;
use std::collections::BTreeMap;

/// A config as applied to a node: the exact bytes plus the decoded documents.
#[derive(Clone)]
pub struct StoredConfig {
    pub raw: Vec<u8>,
    pub cfg: MachineConfig,
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
            cfg: MachineConfig { docs },
            digest: hex::encode(sha2::Sha256::digest(raw)),
        })
    }

    pub fn docs(&self) -> &[Value] {
        &self.cfg.docs
    }

    pub fn v1alpha1(&self) -> Option<&Value> {
        self.cfg.v1alpha1()
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

    /// Talos's checks as far as `ferro-talos-config` knows them, plus the CA key a control plane
    /// needs to sign apid's certificate. `Ok(warnings)` or `Err(message)`.
    pub fn validate(&self, maintenance: bool) -> Result<Vec<String>, String> {
        if self.v1alpha1().is_none() && !maintenance {
            return Err("the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?".into());
        }
        let (warnings, mut errors) = match ferro_talos_config::validate::validate(&self.cfg) {
            Ok(w) => (w, Vec::new()),
            Err(e) => (Vec::new(), e),
        };
        if self
            .machine_type()
            .is_some_and(MachineType::is_control_plane)
            && self.os_ca().and_then(|(_, k)| k).is_none()
        {
            errors.push("machine.ca.key is required on control plane nodes".to_string());
        }
        if errors.is_empty() {
            return Ok(warnings);
        }
        Err(multi_error(&errors))
    }
}

/// go-multierror's text, as Talos prints aggregated validation errors.
pub fn multi_error(errors: &[String]) -> String {
    let noun = if errors.len() == 1 { "error" } else { "errors" };
    let mut s = format!("{} {noun} occurred:", errors.len());
    for e in errors {
        s.push_str(&format!("\n\t* {e}"));
    }
    s.push_str("\n\n");
    s
}

/// `None` when the change can be applied immediately, otherwise the diff Talos shows.
pub fn reboot_diff(old: &StoredConfig, new: &StoredConfig) -> Option<String> {
    let (Some(o), Some(n)) = (old.v1alpha1(), new.v1alpha1()) else {
        // Changes confined to other documents never need a reboot.
        return None;
    };
    if !ferro_talos_config::live::reboot_required(&old.cfg, &new.cfg) {
        return None;
    }
    let masked = ferro_talos_config::live::without_live_changes(o, n);
    let target = if &masked == o { n } else { &masked };
    Some(unified(&to_yaml(o), &to_yaml(target)))
}

fn to_yaml(v: &Value) -> String {
    ferro_talos_config::encode::encode_document(v)
}

fn docs_yaml(cfg: &StoredConfig) -> String {
    cfg.cfg.to_yaml()
}

/// Unified diff with Talos's `--- a` / `+++ b` headers.
pub fn unified(old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header("a", "b")
        .to_string()
}

/// The dry-run "Config diff" body: whole configs, comments stripped, or `No changes.`.
pub fn dry_run_diff(old: Option<&StoredConfig>, new: &StoredConfig) -> String {
    let before = old.map(docs_yaml).unwrap_or_default();
    let after = docs_yaml(new);
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
