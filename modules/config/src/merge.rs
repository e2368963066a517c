//! Strategic-merge value rules (config.md §4.4) on untyped documents.
//!
//! Talos decodes patches into typed structs and merges field by field. We keep documents as
//! `serde_json::Value`, so the per-field behaviour comes from the small tables below, keyed by a
//! *schema path*: keys joined with `.`, list items as `[]`, map entries as `*`, and non-v1alpha1
//! documents prefixed with their kind (`KubeNetworkConfig.podSubnets`).
//!
//! The pragmatic field table (documented in the crate README-level docs of [`merge_document`]):
//!
//! * **Plain string / number** (Go non-pointer): every string or number reached through typed
//!   (non-free-form, non-map) fields. A `""` or `0` in the patch leaves the config value alone,
//!   because Talos cannot tell it apart from "not given". Almost every string in v1alpha1 and the
//!   multi-doc kinds is such a field, and so are ports, MTUs, metrics, VLAN IDs and sizes.
//! * **Pointer-like** (Go pointer or always-replaced): every boolean (`dhcp`, `enabled`, `wipe`,
//!   `debug`, `persist`, ...), so `false` in a patch wins; sub-objects merge recursively.
//! * **Map values** (nodeLabels, sysctls, env, extraManifestHeaders, ...): the same scalar rule,
//!   so an existing label cannot be set to `""` by a merge (Talos's merge.go does the same);
//!   keys missing on the left are set as given.
//! * **Free-form objects** (kubelet `extraConfig`, admission `configuration`, ...): maps merge,
//!   lists append, scalars replace by the same rule, and a scalar of another type (string vs
//!   number vs boolean) is a type-mismatch error, as in Talos.
//! * **Except** `*.extraArgs`: per flag, the patch value replaces wholesale, `""` included.

use ferro_talos_secrets::yaml::kind_name;
use serde_json::{Map, Value};

use crate::diff::push_key;
use crate::error::{Error, ErrorKind, Result};
use crate::normalize::Rules;

/// Lists that the patch replaces instead of appending to (`merge:"replace"` on the Go field): a
/// patch's `[]` clears them. `modules/config/tests/oracle_merge.rs` checks this and the two
/// tables below against the tags of upstream's types at v1.13.9 and v1.14.1.
const REPLACE_LISTS: &[&str] = &[
    "cluster.network.podSubnets",
    "cluster.network.serviceSubnets",
    "KubeNetworkConfig.podSubnets",
    "KubeNetworkConfig.serviceSubnets",
    "NetworkRuleConfig.ingress",
    "NetworkRuleConfig.portSelector.ports",
    "BGPInstanceConfig.advertise",
    "BGPInstanceConfig.importRoutes",
    "BGPInstanceConfig.neighbors",
];

/// Lists Talos 1.14 replaces and 1.13 appends to: `network.SearchDomainList` in
/// `types/network/resolver.go` @ v1.14.1 (a plain `[]string` at v1.13.9 and v1.14.0-rc.1).
const REPLACE_LISTS_SINCE_1_14: &[&str] = &["ResolverConfig.searchDomains.domains"];

/// Objects that a non-empty patch value replaces wholesale.
const REPLACE_OBJECTS: &[&str] = &[
    "cluster.apiServer.auditPolicy",
    // 1.14 documents.
    "CRIBaseRuntimeSpecConfig.overrides",
    "KubeAuditPolicyConfig.configuration",
    "KubeAuthenticationConfig.configuration",
    "KubeCredentialProviderConfig.configuration",
    "KubeStaticPodConfig.pod",
];

/// Typed maps with free keys: scalar values replace (even `""`), keys below are `*`.
const MAP_PATHS: &[&str] = &[
    "machine.nodeLabels",
    "machine.nodeAnnotations",
    "machine.nodeTaints",
    "machine.sysctls",
    "machine.sysfs",
    "machine.env",
    "machine.registries.mirrors",
    "machine.registries.config",
    "machine.kubelet.extraArgs",
    "cluster.extraManifestHeaders",
    "cluster.apiServer.extraArgs",
    "cluster.apiServer.env",
    "cluster.controllerManager.extraArgs",
    "cluster.controllerManager.env",
    "cluster.scheduler.extraArgs",
    "cluster.scheduler.env",
    "cluster.proxy.extraArgs",
    "cluster.etcd.extraArgs",
];

/// Multi-doc map fields (matched on the last key of `Kind.field`).
const MULTIDOC_MAP_FIELDS: &[&str] = &[
    "extraArgs",
    "env",
    "labels",
    "annotations",
    "taints",
    "variables",
    "sysctls",
    "sysfs",
    // SysctlConfig/SysfsConfig.params and KubeExternalManifestConfig.headers (map[string]string).
    "params",
    "headers",
];

/// Subtrees decoded by Talos as untyped (`map[string]any`) data.
const FREE_FORM: &[&str] = &[
    "machine.kubelet.extraConfig",
    "machine.kubelet.credentialProviderConfig",
    "machine.pods[]",
    "machine.baseRuntimeSpecOverrides",
    "machine.seccompProfiles[].value",
    "cluster.apiServer.admissionControl[].configuration",
    "cluster.apiServer.auditPolicy",
    "cluster.apiServer.authorizationConfig[].webhook",
    "cluster.scheduler.config",
];

/// 1.14 Kubernetes and CRI documents carry free-form configuration under these keys.
const MULTIDOC_FREE_FORM_FIELDS: &[&str] = &["config", "configuration", "pod", "overrides"];

/// Where the merge currently is.
#[derive(Clone)]
pub(crate) struct At {
    /// Schema path used for table look-ups.
    pub schema: String,
    /// Human path with concrete indices and keys, used in errors.
    pub display: String,
    /// Kind of the non-v1alpha1 document, empty for v1alpha1.
    kind: String,
    /// The release whose merge tags decide.
    rules: Rules,
}

impl At {
    pub(crate) fn root(kind: &str, display: &str, rules: Rules) -> At {
        At {
            schema: kind.to_string(),
            display: display.to_string(),
            kind: kind.to_string(),
            rules,
        }
    }

    /// Whether a patch's list replaces the config's here instead of being appended to it.
    fn replaces_list(&self) -> bool {
        let schema = self.schema.as_str();
        REPLACE_LISTS.contains(&schema) || lists_replaced_since_1_14(self.rules).contains(&schema)
    }

    fn key(&self, k: &str, dynamic: bool) -> At {
        let mut schema = self.schema.clone();
        if !schema.is_empty() {
            schema.push('.');
        }
        schema.push_str(if dynamic { "*" } else { k });
        let mut display = self.display.clone();
        push_key(&mut display, k);
        At {
            schema,
            display,
            kind: self.kind.clone(),
            rules: self.rules,
        }
    }

    fn index(&self, i: usize) -> At {
        At {
            schema: format!("{}[]", self.schema),
            display: format!("{}[{i}]", self.display),
            kind: self.kind.clone(),
            rules: self.rules,
        }
    }

    /// The last schema segment when this is a direct field of a multi-doc document.
    fn multidoc_field(&self) -> Option<&str> {
        if self.kind.is_empty() {
            return None;
        }
        self.schema
            .strip_prefix(self.kind.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .filter(|f| !f.contains('.') && !f.contains('['))
    }

    fn is_map(&self) -> bool {
        MAP_PATHS.contains(&self.schema.as_str())
            || self
                .multidoc_field()
                .is_some_and(|f| MULTIDOC_MAP_FIELDS.contains(&f))
    }

    fn is_extra_args(&self) -> bool {
        // `cluster.network.cni.flannel.extraArgs` is a plain list and never reaches here as a map.
        self.schema.ends_with(".extraArgs")
    }

    fn is_free_form(&self) -> bool {
        FREE_FORM.contains(&self.schema.as_str())
            || self.multidoc_field().is_some_and(|f| {
                MULTIDOC_FREE_FORM_FIELDS.contains(&f)
                    && (self.kind.starts_with("Kube") || self.kind.starts_with("CRI"))
            })
    }
}

/// Whether the value at `kind` + `keys` is a map (free keys) rather than a struct: used by
/// deletes, where a missing map key is an error but a missing struct field is not.
pub(crate) fn parent_is_map(kind: &str, keys: &[String]) -> bool {
    // Maps and free-form fields are the same in every release.
    let mut at = At::root(kind, "", Rules::V1_14);
    for k in keys {
        if at.is_free_form() {
            return true;
        }
        let dynamic = at.is_map();
        at = at.key(k, dynamic);
    }
    at.is_free_form() || at.is_map()
}

/// Whether the current value is typed (field tables apply) or untyped data.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Typed struct fields and typed maps.
    Typed,
    /// Untyped data: maps merge, lists append, no field tables.
    Free,
}

/// Merges patch document `right` into config document `left` (both the same identity).
///
/// `kind` is empty for the v1alpha1 document; `display` is the prefix used in error messages.
pub(crate) fn merge_document(
    left: &mut Value,
    right: &Value,
    kind: &str,
    display: &str,
    rules: Rules,
) -> Result<()> {
    merge_value(left, right, &At::root(kind, display, rules), Mode::Typed)
}

/// The fields a patch's value replaces wholesale under `rules`, as schema paths: what upstream's
/// `merge:"replace"` tags say (pkg/machinery/config/merge/merge.go).
pub fn replaced_wholesale(rules: Rules) -> Vec<&'static str> {
    let mut all: Vec<&'static str> = [
        REPLACE_LISTS,
        lists_replaced_since_1_14(rules),
        REPLACE_OBJECTS,
    ]
    .concat();
    all.sort_unstable();
    all
}

/// The lists `rules`' release replaces beyond [`REPLACE_LISTS`].
fn lists_replaced_since_1_14(rules: Rules) -> &'static [&'static str] {
    match rules {
        Rules::V1_13 => &[],
        Rules::V1_14 => REPLACE_LISTS_SINCE_1_14,
    }
}

fn merge_value(left: &mut Value, right: &Value, at: &At, mode: Mode) -> Result<()> {
    if right.is_null() {
        return Ok(());
    }
    if left.is_null() {
        *left = right.clone();
        return Ok(());
    }
    if mode != Mode::Free
        && REPLACE_OBJECTS.contains(&at.schema.as_str())
        && right.as_object().is_some_and(|r| !r.is_empty())
    {
        *left = right.clone();
        return Ok(());
    }
    let mode = if mode != Mode::Free && at.is_free_form() {
        Mode::Free
    } else {
        mode
    };
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            if r.is_empty() {
                return Ok(());
            }
            if mode == Mode::Free {
                return merge_free_object(l, r, at);
            }
            if at.is_extra_args() {
                // Per flag, the patch value replaces wholesale: a list of values is not appended.
                for (k, v) in r {
                    if !v.is_null() {
                        l.insert(k.clone(), v.clone());
                    }
                }
                return Ok(());
            }
            let is_map = at.is_map();
            for (k, rv) in r {
                let child = at.key(k, is_map);
                match l.get_mut(k) {
                    Some(lv) if !lv.is_null() => merge_value(lv, rv, &child, Mode::Typed)?,
                    _ => {
                        l.insert(k.clone(), rv.clone());
                    }
                }
            }
            Ok(())
        }
        (Value::Array(l), Value::Array(r)) => {
            // A replaced list takes the patch's even when it is `[]`: Go's merge skips only a nil
            // slice, and a `[]` in YAML decodes to an empty one.
            if mode != Mode::Free && at.replaces_list() {
                *l = r.clone();
                return Ok(());
            }
            if r.is_empty() {
                return Ok(());
            }
            if mode == Mode::Free {
                l.extend(r.iter().cloned());
                return Ok(());
            }
            match keyed_list(at) {
                Some((matcher, replace)) => merge_keyed(l, r, at, matcher, replace),
                None => {
                    l.extend(r.iter().cloned());
                    Ok(())
                }
            }
        }
        (l, r) if is_scalar(l) && is_scalar(r) => {
            if mode == Mode::Free && std::mem::discriminant(l) != std::mem::discriminant(r) {
                return Err(Error::new(
                    ErrorKind::PatchFailed,
                    format!(
                        "cannot merge patch value into {}: type mismatch, the config has {} there, the patch has {}",
                        at.display,
                        kind_name(l),
                        kind_name(r)
                    ),
                ));
            }
            // Booleans always win (false included); "" and 0 mean "not given".
            if is_zero(r) {
                return Ok(());
            }
            *l = r.clone();
            Ok(())
        }
        (l, r) => Err(Error::new(
            ErrorKind::PatchFailed,
            format!(
                "cannot merge patch value into {}: the config has {} there, the patch has {}",
                if at.display.is_empty() {
                    "the document root"
                } else {
                    &at.display
                },
                kind_name(l),
                kind_name(r)
            ),
        )),
    }
}

fn merge_free_object(l: &mut Map<String, Value>, r: &Map<String, Value>, at: &At) -> Result<()> {
    for (k, rv) in r {
        let child = at.key(k, true);
        match l.get_mut(k) {
            Some(lv) if !lv.is_null() => merge_value(lv, rv, &child, Mode::Free)?,
            _ => {
                l.insert(k.clone(), rv.clone());
            }
        }
    }
    Ok(())
}

type Matcher = fn(&Value, &Value) -> bool;

/// The keyed-merge rule for a list, if it has one: (does config item match patch item, replace?).
fn keyed_list(at: &At) -> Option<(Matcher, bool)> {
    match at.schema.as_str() {
        "machine.network.interfaces" => Some((same_interface, false)),
        "machine.network.interfaces[].vlans" => Some((|l, r| same_field(l, r, "vlanId"), false)),
        "cluster.apiServer.admissionControl" => Some((|l, r| same_field(l, r, "name"), false)),
        "ExtensionServiceConfig.configFiles" => Some((|l, r| same_field(l, r, "mountPath"), false)),
        "ImageVerificationConfig.rules" => Some((|l, r| same_field(l, r, "image"), true)),
        _ => None,
    }
}

fn merge_keyed(
    l: &mut Vec<Value>,
    r: &[Value],
    at: &At,
    matcher: Matcher,
    replace: bool,
) -> Result<()> {
    for item in r {
        match l.iter().position(|existing| matcher(existing, item)) {
            Some(i) if replace => l[i] = item.clone(),
            Some(i) => merge_value(&mut l[i], item, &at.index(i), Mode::Typed)?,
            None => l.push(item.clone()),
        }
    }
    Ok(())
}

fn same_field(left: &Value, right: &Value, key: &str) -> bool {
    match (left.get(key), right.get(key)) {
        (Some(a), Some(b)) if !b.is_null() && !is_zero(b) => a == b,
        _ => false,
    }
}

/// Interfaces match by name when the patch item has one, otherwise by an equal `deviceSelector`.
fn same_interface(left: &Value, right: &Value) -> bool {
    if let Some(name) = right.get("interface").and_then(Value::as_str)
        && !name.is_empty()
    {
        return left.get("interface").and_then(Value::as_str) == Some(name);
    }
    match (left.get("deviceSelector"), right.get("deviceSelector")) {
        (Some(a), Some(Value::Object(b))) if !b.is_empty() => {
            // Talos compares the `physical` flag by pointer identity, so a selector that sets it
            // never matches and the device is appended again (config.md §4.4). We do the same so
            // that rendering matches what the node would build.
            if b.get("physical").is_some_and(|p| !p.is_null()) {
                return false;
            }
            a.as_object() == Some(b)
        }
        _ => false,
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Object(_) | Value::Array(_))
}

/// `""` and numeric zero: what a typed decoder cannot tell apart from "not given".
fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merge(left: Value, right: Value) -> Result<Value> {
        let mut l = left;
        merge_document(&mut l, &right, "", "", Rules::V1_13)?;
        Ok(l)
    }

    #[test]
    fn plain_scalars_keep_left_on_zero() {
        let out = merge(
            json!({"machine": {"install": {"image": "a", "disk": "/dev/sda"}, "network": {"interfaces": []}}}),
            json!({"machine": {"install": {"image": "", "disk": "/dev/vda"}}}),
        )
        .unwrap();
        assert_eq!(out["machine"]["install"]["image"], "a");
        assert_eq!(out["machine"]["install"]["disk"], "/dev/vda");
    }

    #[test]
    fn booleans_are_overwritten_by_false() {
        let out = merge(
            json!({"machine": {"install": {"wipe": true, "grubUseUKICmdline": true}}, "debug": true}),
            json!({"machine": {"install": {"grubUseUKICmdline": false}}, "debug": false}),
        )
        .unwrap();
        assert_eq!(out["machine"]["install"]["grubUseUKICmdline"], false);
        assert_eq!(out["machine"]["install"]["wipe"], true);
        assert_eq!(out["debug"], false);
    }

    #[test]
    fn map_values_merge_per_key_and_empty_does_not_overwrite() {
        let out = merge(
            json!({"machine": {"nodeLabels": {"a": "x", "b": "y"}}}),
            json!({"machine": {"nodeLabels": {"a": "", "b": "z", "c": ""}}}),
        )
        .unwrap();
        assert_eq!(
            out["machine"]["nodeLabels"],
            json!({"a": "x", "b": "z", "c": ""})
        );
    }

    #[test]
    fn lists_append_and_empty_patch_list_keeps_left() {
        let out = merge(
            json!({"machine": {"certSANs": ["a"], "install": {"extraKernelArgs": ["x"]}}}),
            json!({"machine": {"certSANs": ["a", "b"], "install": {"extraKernelArgs": []}}}),
        )
        .unwrap();
        assert_eq!(out["machine"]["certSANs"], json!(["a", "a", "b"]));
        assert_eq!(out["machine"]["install"]["extraKernelArgs"], json!(["x"]));
    }

    #[test]
    fn replace_lists_and_audit_policy() {
        let out = merge(
            json!({"cluster": {"network": {"podSubnets": ["10.244.0.0/16"], "serviceSubnets": ["10.96.0.0/12"]},
                   "apiServer": {"auditPolicy": {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}}}}),
            json!({"cluster": {"network": {"podSubnets": ["10.0.0.0/16"]},
                   "apiServer": {"auditPolicy": {"rules": [{"level": "None"}]}}}}),
        )
        .unwrap();
        assert_eq!(
            out["cluster"]["network"]["podSubnets"],
            json!(["10.0.0.0/16"])
        );
        assert_eq!(
            out["cluster"]["network"]["serviceSubnets"],
            json!(["10.96.0.0/12"])
        );
        assert_eq!(
            out["cluster"]["apiServer"]["auditPolicy"],
            json!({"rules": [{"level": "None"}]})
        );
    }

    #[test]
    fn multidoc_replace_list() {
        let mut l =
            json!({"apiVersion": "v1alpha1", "kind": "KubeNetworkConfig", "podSubnets": ["a"]});
        merge_document(
            &mut l,
            &json!({"podSubnets": ["b"]}),
            "KubeNetworkConfig",
            "KubeNetworkConfig",
            Rules::V1_14,
        )
        .unwrap();
        assert_eq!(l["podSubnets"], json!(["b"]));
    }

    #[test]
    fn extra_args_replace_per_key() {
        let out = merge(
            json!({"cluster": {"apiServer": {"extraArgs": {"a": ["1", "2"], "b": "x"}}}}),
            json!({"cluster": {"apiServer": {"extraArgs": {"a": ["3"], "c": "y"}}}}),
        )
        .unwrap();
        assert_eq!(
            out["cluster"]["apiServer"]["extraArgs"],
            json!({"a": ["3"], "b": "x", "c": "y"})
        );
    }

    #[test]
    fn interfaces_merge_by_name_and_vlans_by_id() {
        let out = merge(
            json!({"machine": {"network": {"interfaces": [
                {"interface": "eth0", "addresses": ["10.0.0.2/24"], "dhcp": true, "mtu": 1500,
                 "vlans": [{"vlanId": 10, "mtu": 1400}]},
                {"interface": "eth1", "dhcp": true}]}}}),
            json!({"machine": {"network": {"interfaces": [
                {"interface": "eth0", "addresses": ["10.0.0.3/24"], "dhcp": false, "mtu": 9000,
                 "vip": {"ip": "10.0.0.10"}, "vlans": [{"vlanId": 10, "mtu": 1300}, {"vlanId": 20}]},
                {"interface": "eth2"}]}}}),
        )
        .unwrap();
        let ifs = out["machine"]["network"]["interfaces"].as_array().unwrap();
        assert_eq!(ifs.len(), 3);
        assert_eq!(ifs[0]["addresses"], json!(["10.0.0.2/24", "10.0.0.3/24"]));
        assert_eq!(ifs[0]["dhcp"], false);
        assert_eq!(ifs[0]["mtu"], 9000);
        assert_eq!(ifs[0]["vip"]["ip"], "10.0.0.10");
        assert_eq!(
            ifs[0]["vlans"],
            json!([{"vlanId": 10, "mtu": 1300}, {"vlanId": 20}])
        );
        assert_eq!(ifs[2]["interface"], "eth2");
    }

    #[test]
    fn interfaces_by_device_selector_physical_never_matches() {
        let base = json!({"machine": {"network": {"interfaces": [
            {"deviceSelector": {"hardwareAddr": "aa:bb"}, "mtu": 1500},
            {"deviceSelector": {"physical": true}, "mtu": 1500}]}}});
        let out = merge(
            base,
            json!({"machine": {"network": {"interfaces": [
                {"deviceSelector": {"hardwareAddr": "aa:bb"}, "mtu": 9000},
                {"deviceSelector": {"physical": true}, "mtu": 9000}]}}}),
        )
        .unwrap();
        let ifs = out["machine"]["network"]["interfaces"].as_array().unwrap();
        assert_eq!(ifs.len(), 3);
        assert_eq!(ifs[0]["mtu"], 9000);
        assert_eq!(ifs[1]["mtu"], 1500);
    }

    #[test]
    fn admission_control_merges_by_name_and_inner_lists_append() {
        let out = merge(
            json!({"cluster": {"apiServer": {"admissionControl": [{"name": "PodSecurity", "configuration": {
                "defaults": {"enforce": "baseline"}, "exemptions": {"namespaces": ["kube-system"]}}}]}}}),
            json!({"cluster": {"apiServer": {"admissionControl": [{"name": "PodSecurity", "configuration": {
                "defaults": {"enforce": "privileged"}, "exemptions": {"namespaces": ["kube-system", "rook"]}}}]}}}),
        )
        .unwrap();
        let ac = &out["cluster"]["apiServer"]["admissionControl"];
        assert_eq!(ac.as_array().unwrap().len(), 1);
        assert_eq!(ac[0]["configuration"]["defaults"]["enforce"], "privileged");
        assert_eq!(
            ac[0]["configuration"]["exemptions"]["namespaces"],
            json!(["kube-system", "kube-system", "rook"])
        );
    }

    #[test]
    fn free_form_merges_maps_appends_lists_and_checks_types() {
        let out = merge(
            json!({"machine": {"kubelet": {"extraConfig": {"a": "x", "n": 5, "b": true, "l": [1], "m": {"k": 1}}}}}),
            json!({"machine": {"kubelet": {"extraConfig": {"a": "", "n": 7, "b": false, "l": [2], "m": {"j": 2}}}}}),
        )
        .unwrap();
        assert_eq!(
            out["machine"]["kubelet"]["extraConfig"],
            json!({"a": "x", "n": 7, "b": false, "l": [1, 2], "m": {"k": 1, "j": 2}})
        );
        let e = merge(
            json!({"machine": {"kubelet": {"extraConfig": {"maxPods": 110}}}}),
            json!({"machine": {"kubelet": {"extraConfig": {"maxPods": "250"}}}}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("machine.kubelet.extraConfig.maxPods") && e.contains("type mismatch"),
            "{e}"
        );
    }

    #[test]
    fn config_files_merge_by_mount_path() {
        let mut l = json!({"kind": "ExtensionServiceConfig", "configFiles": [{"mountPath": "/a", "content": "1"}]});
        merge_document(
            &mut l,
            &json!({"configFiles": [{"mountPath": "/a", "content": "2"}, {"mountPath": "/b", "content": "3"}]}),
            "ExtensionServiceConfig",
            "ExtensionServiceConfig(x)",
            Rules::V1_14,
        )
        .unwrap();
        assert_eq!(
            l["configFiles"],
            json!([{"mountPath": "/a", "content": "2"}, {"mountPath": "/b", "content": "3"}])
        );
    }

    #[test]
    fn multidoc_rules_for_114_kinds() {
        let mut audit = json!({"kind": "KubeAuditPolicyConfig", "configuration": {"rules": [{"level": "Metadata"}], "kind": "Policy"}});
        merge_document(
            &mut audit,
            &json!({"configuration": {"rules": [{"level": "None"}]}}),
            "KubeAuditPolicyConfig",
            "KubeAuditPolicyConfig",
            Rules::V1_14,
        )
        .unwrap();
        assert_eq!(
            audit["configuration"],
            json!({"rules": [{"level": "None"}]})
        );
        let mut kubelet = json!({"kind": "KubeletConfig", "config": {"a": [1]}, "extraArgs": {"x": ["1", "2"]}, "clusterDNS": ["10.96.0.10"]});
        merge_document(
            &mut kubelet,
            &json!({"config": {"a": [2]}, "extraArgs": {"x": "3"}, "clusterDNS": ["10.96.0.11"]}),
            "KubeletConfig",
            "KubeletConfig",
            Rules::V1_14,
        )
        .unwrap();
        assert_eq!(kubelet["config"], json!({"a": [1, 2]}));
        assert_eq!(kubelet["extraArgs"], json!({"x": "3"}));
        assert_eq!(kubelet["clusterDNS"], json!(["10.96.0.10", "10.96.0.11"]));
        let mut iv = json!({"kind": "ImageVerificationConfig", "rules": [{"image": "a/*", "deny": true, "skip": false}, {"image": "b/*", "skip": true}]});
        merge_document(
            &mut iv,
            &json!({"rules": [{"image": "a/*", "skip": true}, {"image": "c/*", "deny": true}]}),
            "ImageVerificationConfig",
            "ImageVerificationConfig",
            Rules::V1_14,
        )
        .unwrap();
        assert_eq!(
            iv["rules"],
            json!([{"image": "a/*", "skip": true}, {"image": "b/*", "skip": true}, {"image": "c/*", "deny": true}])
        );
    }

    #[test]
    fn type_mismatch_names_the_path() {
        let e = merge(
            json!({"machine": {"install": {"extraKernelArgs": ["a"]}}}),
            json!({"machine": {"install": {"extraKernelArgs": "b"}}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("machine.install.extraKernelArgs"), "{e}");
        assert!(e.contains("a list") && e.contains("a string"), "{e}");
    }

    #[test]
    fn null_in_patch_keeps_left_and_null_in_config_takes_right() {
        let out = merge(
            json!({"machine": {"type": "worker", "kubelet": null}}),
            json!({"machine": {"type": null, "kubelet": {"image": "k"}}}),
        )
        .unwrap();
        assert_eq!(out["machine"]["type"], "worker");
        assert_eq!(out["machine"]["kubelet"]["image"], "k");
    }
}
