//! Keys Talos would refuse: its config loader decodes every document into its Go type and then
//! fails on any key no field takes ("unknown keys found during decoding",
//! `pkg/machinery/config/configloader/internal/decoder/decoder.go` at v1.13.9), and on a document
//! kind it has not registered. This check finds the same mistakes from the collection's own field
//! table (`fields.rs`, generated from upstream's Go types), so a typo in a patch fails before
//! anything reaches a node, with the path and the key that was probably meant.
//!
//! The table is the union of the 1.13 and 1.14 fields, and free-form fields take anything: the
//! check never refuses what either release accepts, and catches what it can name.

use serde_json::Value;

use crate::document::DocId;
use crate::encode::{F, Shape};
use crate::fields;
use ferro_talos_goyaml::YAML_1_1_BOOLS;

/// A key Talos's decoder has no field for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// Where, as `machine.kubelet.extraArgz` (list items as `[0]`).
    pub path: String,
    /// The known key at the same place that is closest to it, when one is close.
    pub did_you_mean: Option<String>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path)?;
        if let Some(s) = &self.did_you_mean {
            write!(f, " (did you mean {s}?)")?;
        }
        Ok(())
    }
}

/// A value of a kind its field cannot take: a string where a bool goes, a string where a list
/// goes, a list where a string goes (go-yaml's `cannot construct !!str `x` into bool`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrongType {
    /// Where, as in [`UnknownKey`].
    pub path: String,
    /// What the field takes: `a bool`, `a list`, `a string`, `a map`.
    pub expected: &'static str,
    /// What is there, as go-yaml shows it: `!!str `sometimes``, `!!seq`, `!!int `1``; a long
    /// scalar is cut after 7 characters, as go-yaml cuts it.
    pub found: String,
}

impl std::fmt::Display for WrongType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} must be {}, not {}",
            self.path, self.expected, self.found
        )
    }
}

/// What in a document Talos would refuse to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The document's kind is not one Talos registers.
    UnknownKind { kind: String },
    /// A known kind under an apiVersion Talos does not register it with.
    UnknownVersion { kind: String, api_version: String },
    /// Values their fields cannot take (go-yaml refuses these before it looks at keys).
    WrongTypes(Vec<WrongType>),
    /// Keys no field takes.
    UnknownKeys(Vec<UnknownKey>),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::UnknownKind { kind } => {
                write!(f, "unknown document kind {kind:?}")?;
                let kinds: Vec<&str> = known_kinds();
                if let Some(k) = nearest(kind, kinds.iter().copied()) {
                    write!(f, " (did you mean {k}?)")?;
                }
                write!(f, "; Talos refuses document kinds it has not registered")
            }
            Refusal::UnknownVersion { kind, api_version } => write!(
                f,
                "{kind:?} {api_version:?}: not registered; Talos registers {kind} as apiVersion v1alpha1"
            ),
            Refusal::WrongTypes(wrong) => {
                let list: Vec<String> = wrong.iter().map(WrongType::to_string).collect();
                write!(
                    f,
                    "cannot decode: {}; Talos refuses a value its field cannot take",
                    list.join(", ")
                )
            }
            Refusal::UnknownKeys(keys) => {
                let list: Vec<String> = keys.iter().map(UnknownKey::to_string).collect();
                write!(
                    f,
                    "unknown keys found during decoding: {}; Talos refuses keys its config types have no field for",
                    list.join(", ")
                )
            }
        }
    }
}

/// Checks one document. `$patch` markers (strategic-merge deletes) are not config keys and are
/// skipped.
pub fn check_document(doc: &Value) -> Result<(), Refusal> {
    let id = DocId::of(doc);
    let fields = if id.is_v1alpha1() {
        fields::V1ALPHA1
    } else {
        match fields::KINDS.iter().find(|(k, _)| *k == id.kind) {
            Some((_, fields)) => *fields,
            None => return Err(Refusal::UnknownKind { kind: id.kind }),
        }
    };
    if !id.is_v1alpha1() && id.api_version != "v1alpha1" {
        // Every kind Talos 1.13 and 1.14 register is v1alpha1 (the sim's tables of upstream's
        // types, modules/sim/src/decode/config-types-*.json).
        return Err(Refusal::UnknownVersion {
            kind: id.kind,
            api_version: id.api_version,
        });
    }
    let mut found = Findings::default();
    let prefix = if id.is_v1alpha1() {
        String::new()
    } else {
        format!("{}.", id.kind)
    };
    walk(doc, Shape::Struct(fields), &prefix, &mut found);
    if !found.wrong_types.is_empty() {
        Err(Refusal::WrongTypes(found.wrong_types))
    } else if !found.unknown_keys.is_empty() {
        Err(Refusal::UnknownKeys(found.unknown_keys))
    } else {
        Ok(())
    }
}

/// The unknown keys alone, of a document of a known kind (an unknown kind has none): for checks
/// of the key table itself, whose synthesised values are placeholders of no particular type.
pub fn unknown_keys(doc: &Value) -> Vec<UnknownKey> {
    let id = DocId::of(doc);
    let fields = if id.is_v1alpha1() {
        fields::V1ALPHA1
    } else {
        match fields::KINDS.iter().find(|(k, _)| *k == id.kind) {
            Some((_, fields)) => *fields,
            None => return Vec::new(),
        }
    };
    let prefix = if id.is_v1alpha1() {
        String::new()
    } else {
        format!("{}.", id.kind)
    };
    let mut found = Findings::default();
    walk(doc, Shape::Struct(fields), &prefix, &mut found);
    found.unknown_keys
}

#[derive(Default)]
struct Findings {
    unknown_keys: Vec<UnknownKey>,
    wrong_types: Vec<WrongType>,
}

/// go-yaml's name for a value's node (`!!str `x``, `!!seq`), with its cut of long scalars
/// (`internal/libyaml/constructor.go` @ v4.0.0-rc.4: more than 10 characters keep 7 and `...`).
fn node_name(v: &Value) -> String {
    let scalar = |tag: &str, text: String| {
        let shown = if text.chars().count() > 10 {
            format!("{}...", text.chars().take(7).collect::<String>())
        } else {
            text
        };
        format!("{tag} `{shown}`")
    };
    match v {
        Value::Array(_) => "!!seq".into(),
        Value::Object(_) => "!!map".into(),
        Value::String(s) => scalar("!!str", s.clone()),
        Value::Bool(b) => scalar("!!bool", b.to_string()),
        Value::Number(n) if n.is_f64() => scalar("!!float", n.to_string()),
        Value::Number(n) => scalar("!!int", n.to_string()),
        Value::Null => "!!null".into(),
    }
}

// YAML 1.1's booleans go-yaml v4 still takes into a Go bool (tests/oracle at v1.13.9: `wipe: yes`
// loads, `wipe: 'true'` does not; our parser reads both as strings): YAML_1_1_BOOLS.

/// What a value of this shape must be, when what is there is not that.
fn wrong_type(shape: Shape, v: &Value) -> Option<&'static str> {
    match (shape, v) {
        (_, Value::Null) => None,
        // A strategic-merge delete (`certSANs: {$patch: delete}`) stands in for any value.
        (_, Value::Object(m)) if m.keys().any(|k| k.starts_with("$patch")) => None,
        (Shape::Bool, Value::Bool(_)) => None,
        (Shape::Bool, Value::String(s)) if YAML_1_1_BOOLS.contains(&s.as_str()) => None,
        (Shape::Bool, _) => Some("a bool"),
        (Shape::Seq(_), Value::Array(_)) => None,
        (Shape::Seq(_), _) => Some("a list"),
        (Shape::Str, Value::Array(_) | Value::Object(_)) => Some("a string"),
        (Shape::Struct(_) | Shape::Map(_) | Shape::StrMap, Value::Object(_)) => None,
        (Shape::Struct(_) | Shape::Map(_) | Shape::StrMap, _) => Some("a map"),
        _ => None,
    }
}

fn walk(v: &Value, shape: Shape, at: &str, found: &mut Findings) {
    if let Some(expected) = wrong_type(shape, v) {
        found.wrong_types.push(WrongType {
            path: at.trim_end_matches('.').to_string(),
            expected,
            found: node_name(v),
        });
        return;
    }
    match (shape, v) {
        (Shape::Struct(fields), Value::Object(m)) => {
            for (k, x) in m {
                if k.starts_with("$patch") {
                    continue;
                }
                let path = format!("{at}{k}");
                match fields.iter().find(|F(name, _, _)| name == k) {
                    Some(F(_, inner, _)) => walk(x, *inner, &format!("{path}."), found),
                    None => found.unknown_keys.push(UnknownKey {
                        did_you_mean: closest(k, fields).map(|s| format!("{at}{s}")),
                        path,
                    }),
                }
            }
        }
        (Shape::Seq(inner), Value::Array(items)) => {
            let base = at.trim_end_matches('.');
            for (i, x) in items.iter().enumerate() {
                walk(x, *inner, &format!("{base}[{i}]."), found);
            }
        }
        (Shape::Map(inner), Value::Object(m)) => {
            for (k, x) in m {
                walk(x, *inner, &format!("{at}{k}."), found);
            }
        }
        (Shape::StrMap, Value::Object(m)) => {
            for (k, x) in m {
                walk(x, Shape::Str, &format!("{at}{k}."), found);
            }
        }
        // Free-form maps, strings, numbers and fields of unknown type take anything.
        _ => {}
    }
}

/// The field name nearest to `key` by edit distance, when it is near enough to be a typo
/// (at most a third of the key's length, and at least one edit).
fn closest(key: &str, fields: &[F]) -> Option<&'static str> {
    nearest(key, fields.iter().map(|F(name, _, _)| *name))
}

fn nearest<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = key.to_ascii_lowercase();
    candidates
        .map(|name| (name, distance(&lower, &name.to_ascii_lowercase())))
        .filter(|(_, d)| *d <= (key.chars().count() / 3).max(1))
        .min_by_key(|(_, d)| *d)
        .map(|(n, _)| n)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Every kind the table knows, for messages.
/// Document kinds Talos registers only from 1.14 on: a 1.13 node's loader refuses each one with
/// `"Kind" "v1alpha1": not registered`. Taken from upstream's own loader (machinery v1.13.9
/// against v1.14.1, tests/oracle); `tests/oracle_kinds.rs` checks this list against it.
pub const KINDS_SINCE_1_14: &[&str] = &[
    "BGPInstanceConfig",
    "CRIBaseRuntimeSpecConfig",
    "CRICustomizationConfig",
    "ContainerConfig",
    "DiscoveryIdentityConfig",
    "DiscoveryServiceConfig",
    "EtcFileConfig",
    "FilesystemScrubConfig",
    "FilesystemTrimConfig",
    "HTTPProbeConfig",
    "ImageCacheConfig",
    "KernelModuleConfig",
    "KubeAPIServerCAConfig",
    "KubeAPIServerConfig",
    "KubeAdmissionControlConfig",
    "KubeAggregatorCAConfig",
    "KubeAuditPolicyConfig",
    "KubeAuthenticationConfig",
    "KubeAuthorizerConfig",
    "KubeClusterConfig",
    "KubeControllerManagerConfig",
    "KubeCoreDNSConfig",
    "KubeCredentialProviderConfig",
    "KubeEtcdEncryptionConfig",
    "KubeExternalManifestConfig",
    "KubeFlannelCNIConfig",
    "KubeInlineManifestConfig",
    "KubeNetworkConfig",
    "KubeNodeConfig",
    "KubePrismConfig",
    "KubeProxyConfig",
    "KubeSchedulerConfig",
    "KubeServiceAccountConfig",
    "KubeStaticPodConfig",
    "KubeTalosAPIAccessConfig",
    "KubeletConfig",
    "LVMLogicalVolumeConfig",
    "LVMVolumeGroupConfig",
    "RAIDArrayConfig",
    "SecurityProfileConfig",
    "SysctlConfig",
    "SysfsConfig",
    "UdevRulesConfig",
    "UnattendedInstallConfig",
    "VethConfig",
];

/// The documents of `cfg` a node of `contract`'s release does not know, with the error text its
/// loader gives (`internal/registry/registry.go` "not registered" @ v1.13.9).
pub fn kinds_unknown_to(
    cfg: &crate::MachineConfig,
    contract: crate::contract::Contract,
) -> Vec<String> {
    if contract >= crate::contract::Contract::V1_14 {
        return Vec::new();
    }
    cfg.docs
        .iter()
        .filter_map(|d| d.get("kind").and_then(Value::as_str))
        .filter(|kind| KINDS_SINCE_1_14.contains(kind))
        .map(|kind| format!("{kind:?} \"v1alpha1\": not registered"))
        .collect()
}

pub fn known_kinds() -> Vec<&'static str> {
    fields::KINDS.iter().map(|(k, _)| *k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MachineConfig;

    fn doc(text: &str) -> Value {
        MachineConfig::parse(text).unwrap().docs.remove(0)
    }

    #[test]
    fn a_typo_is_found_with_its_path_and_the_key_meant() {
        let e = check_document(&doc("machine:\n  kubelet:\n    extraArgz: {a: b}\n")).unwrap_err();
        assert_eq!(
            e,
            Refusal::UnknownKeys(vec![UnknownKey {
                path: "machine.kubelet.extraArgz".into(),
                did_you_mean: Some("machine.kubelet.extraArgs".into()),
            }])
        );
        let e = check_document(&doc(
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcpp: true\n",
        ));
        let Err(Refusal::UnknownKeys(keys)) = e else {
            panic!("{e:?}")
        };
        assert_eq!(keys[0].path, "machine.network.interfaces[0].dhcpp");
        assert_eq!(
            keys[0].did_you_mean.as_deref(),
            Some("machine.network.interfaces[0].dhcp")
        );
    }

    #[test]
    fn free_form_fields_and_patch_markers_take_anything() {
        let ok = "machine:\n  nodeLabels: {any: thing}\n  kubelet:\n    extraConfig: {x: [1]}\n    extraArgs: {a: b}\n  network:\n    interfaces:\n      - $patch: delete\n        interface: eth0\n";
        assert_eq!(check_document(&doc(ok)), Ok(()));
        let far = check_document(&doc("machine:\n  zzzzzzzz: 1\n")).unwrap_err();
        assert_eq!(
            far,
            Refusal::UnknownKeys(vec![UnknownKey {
                path: "machine.zzzzzzzz".into(),
                did_you_mean: None
            }])
        );
    }

    #[test]
    fn kinds_are_checked_and_named() {
        let e = check_document(&doc(
            "apiVersion: v1alpha1\nkind: HostnameConfg\nhostname: a\n",
        ));
        assert_eq!(
            e,
            Err(Refusal::UnknownKind {
                kind: "HostnameConfg".into()
            })
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "unknown document kind \"HostnameConfg\" (did you mean HostnameConfig?); Talos refuses document kinds it has not registered"
        );
        let e = check_document(&doc(
            "apiVersion: v1alpha1\nkind: HostnameConfig\nhostnme: a\n",
        ));
        let Err(Refusal::UnknownKeys(keys)) = e else {
            panic!("{e:?}")
        };
        assert_eq!(keys[0].path, "HostnameConfig.hostnme");
        for kind in [
            "ImageVerificationConfig",
            "KubeSpanEndpointsConfig",
            "UnattendedInstallConfig",
        ] {
            assert!(known_kinds().contains(&kind), "{kind}");
        }
    }

    /// `machine.acceptedCAs` is a list of `{crt}` in Go (`[]*x509.PEMEncodedCertificate` in
    /// `pkg/machinery/config/types/v1alpha1/v1alpha1_types.go`), whatever the schema says.
    #[test]
    fn accepted_cas_are_a_list_of_certificates() {
        let ok = "machine:\n  acceptedCAs:\n    - crt: Zm9v\n";
        assert_eq!(check_document(&doc(ok)), Ok(()));
        assert!(check_document(&doc("machine:\n  acceptedCAs:\n    - cert: Zm9v\n")).is_err());
    }

    /// Keys Talos 1.14.1 added after v1.14.0-rc.1: `security.machinedAccess` of a ContainerConfig
    /// (`pkg/machinery/config/types/container/security.go` @ v1.14.1).
    #[test]
    fn keys_new_in_the_1_14_ga_are_known() {
        let container = "apiVersion: v1alpha1\nkind: ContainerConfig\nname: probe\nimage: x\nsecurity:\n  machinedAccess: true\n";
        assert_eq!(check_document(&doc(container)), Ok(()));
        let typo = container.replace("machinedAccess", "machinedAcess");
        assert!(check_document(&doc(&typo)).is_err());
    }
}
