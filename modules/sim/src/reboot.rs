//! When Talos 1.13 applies a config change at once and when it needs a reboot: the simulator's
//! own reading of `CanApplyImmediate` (`internal/app/machined/pkg/runtime/v1alpha1/
//! v1alpha1_runtime.go` @ v1.13.9).
//!
//! Only the v1alpha1 documents are compared; every other document (HostnameConfig, LinkConfig,
//! UserVolumeConfig, ...) changes live. The node copies the live subtrees of its current config
//! into a copy of the new one and compares the two decoded Go values with `reflect.DeepEqual`;
//! anything left over needs a reboot, and the error shows `configdiff.DiffConfigs` of the
//! current document against that copy. Talos 1.14 dropped the check: ApplyConfiguration there
//! never calls it (`v1alpha1_server.go` @ v1.14.1, AUTO becomes NO_REBOOT).

use serde_json::Value;

use crate::decode::Release;

/// `.debug` and `.cluster`, then these `.machine` fields (the function's own list).
const LIVE_MACHINE: &[&str] = &[
    "ca",
    "acceptedCAs",
    "time",
    "certSANs",
    "install",
    "network",
    "sysfs",
    "sysctls",
    "logging",
    "controlPlane",
    "kubelet",
    "kernel",
    "registries",
    "pods",
    "seccompProfiles",
    "nodeAnnotations",
    "nodeLabels",
    "nodeTaints",
];

/// `.machine.features` fields, copied only when both configs have `features`.
const LIVE_FEATURES: &[&str] = &[
    "kubernetesTalosAPIAccess",
    "kubePrism",
    "hostDNS",
    "imageCache",
    "nodeAddressSortAlgorithm",
];

fn legacy(docs: &[Value]) -> Option<&Value> {
    docs.iter().find(|d| crate::encode::is_legacy(d))
}

/// Go's `field = current.field`: the value, or nil when the current config has none.
fn copy(from: Option<&Value>, to: &mut serde_json::Map<String, Value>, key: &str) {
    match from.and_then(|f| f.get(key)) {
        Some(v) => {
            to.insert(key.to_string(), v.clone());
        }
        None => {
            to.shift_remove(key);
        }
    }
}

fn non_nil(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null())
}

/// The new v1alpha1 document with the current one's live fields.
fn masked(current: &Value, new: &Value) -> Value {
    let mut out = new.clone();
    let Some(o) = out.as_object_mut() else {
        return out;
    };
    copy(Some(current), o, "debug");
    copy(Some(current), o, "cluster");
    let cur_machine = current.get("machine");
    if !(non_nil(o.get("machine")) && non_nil(cur_machine)) {
        return out;
    }
    let Some(m) = o.get_mut("machine").and_then(Value::as_object_mut) else {
        return out;
    };
    for key in LIVE_MACHINE {
        copy(cur_machine, m, key);
    }
    let cur_features = cur_machine.and_then(|c| c.get("features"));
    if non_nil(m.get("features"))
        && non_nil(cur_features)
        && let Some(f) = m.get_mut("features").and_then(Value::as_object_mut)
    {
        for key in LIVE_FEATURES {
            copy(cur_features, f, key);
        }
    }
    out
}

/// `Ok(())` when the change applies immediately, else upstream's error text (which ApplyConfiguration
/// returns for NO_REBOOT/TRY and appends to AUTO's "with a reboot" details).
pub fn can_apply_immediate(
    current: Option<&[Value]>,
    new: &[Value],
    release: Release,
) -> Result<(), String> {
    let Some(current) = current else {
        return Err("no current config".into());
    };
    let Some(cur) = legacy(current) else {
        return Err("current config is not v1alpha1".into());
    };
    let Some(new) = legacy(new) else {
        return Err("new config is not v1alpha1".into());
    };
    let target = masked(cur, new);
    let table = release.table();
    if crate::encode::go_value(cur, table) == crate::encode::go_value(&target, table) {
        return Ok(());
    }
    let diff = crate::mcfg::unified(
        &crate::encode::encode_document(cur, release, table),
        &crate::encode::encode_document(&target, release, table),
    );
    Err(format!(
        "this config change can't be applied in immediate mode\ndiff:\n{diff}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "version: v1alpha1\nmachine:\n  type: worker\n  token: t\n  ca: {crt: LS0t}\n  features: {rbac: true}\ncluster:\n  controlPlane: {endpoint: \"https://1.2.3.4:6443\"}\n";

    fn docs(yaml: &str) -> Vec<Value> {
        crate::decode::decode(yaml, Release::V1_13).expect("decodes")
    }

    fn immediate(old: &str, new: &str) -> Result<(), String> {
        can_apply_immediate(Some(&docs(old)), &docs(new), Release::V1_13)
    }

    /// `CanApplyImmediate`'s list (v1alpha1_runtime.go @ v1.13.9): `.cluster`, `.machine.certSANs`,
    /// `.machine.features.hostDNS` (both configs have `features`), other documents.
    #[test]
    fn live_fields_apply_at_once() {
        let changed = BASE.replace("1.2.3.4:6443", "5.6.7.8:6443").replace(
            "  features: {rbac: true}\n",
            "  features: {rbac: true, hostDNS: {enabled: true}}\n  certSANs: [a]\n",
        );
        assert_eq!(immediate(BASE, &changed), Ok(()));
        let with_doc =
            format!("{BASE}---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n");
        assert_eq!(immediate(BASE, &with_doc), Ok(()));
    }

    /// Anything else needs a reboot; the error shows `configdiff.DiffConfigs` of the current
    /// document against the new one with the live fields put back (so the endpoint change
    /// does not show).
    #[test]
    fn other_changes_show_the_remaining_diff() {
        let changed = BASE
            .replace("token: t", "token: u")
            .replace("1.2.3.4:6443", "5.6.7.8:6443");
        assert_eq!(
            immediate(BASE, &changed).unwrap_err(),
            "this config change can't be applied in immediate mode\ndiff:\n--- a\n+++ b\n@@ -1,7 +1,7 @@\n version: v1alpha1\n machine:\n     type: worker\n-    token: t\n+    token: u\n     ca:\n         crt: LS0t\n         key: \"\"\n"
        );
    }

    /// Live feature fields are copied only when both configs have `.machine.features`; and
    /// `reflect.DeepEqual` tells an empty list from none even when the YAML looks the same.
    #[test]
    fn go_value_equality_decides() {
        let no_features = BASE.replace("  features: {rbac: true}\n", "");
        let host_dns = BASE.replace(
            "  features: {rbac: true}\n",
            "  features: {hostDNS: {enabled: true}}\n",
        );
        assert!(immediate(&no_features, &host_dns).is_err());
        let files = BASE.replace("  token: t\n", "  token: t\n  files: []\n");
        assert_eq!(
            immediate(BASE, &files).unwrap_err(),
            "this config change can't be applied in immediate mode\ndiff:\n"
        );
        // A plain scalar left out is its zero value: writing `type: ""` makes no difference.
        let empty_type = BASE.replace("type: worker", "type: \"\"");
        let no_type = BASE.replace("  type: worker\n", "");
        assert_eq!(immediate(&empty_type, &no_type), Ok(()));
    }

    /// The messages for configs without a v1alpha1 document.
    #[test]
    fn without_v1alpha1() {
        let doc = "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n";
        assert_eq!(
            immediate(doc, BASE),
            Err("current config is not v1alpha1".into())
        );
        assert_eq!(
            can_apply_immediate(None, &docs(BASE), Release::V1_13),
            Err("no current config".into())
        );
    }
}
