//! Whether a config change needs a reboot on Talos 1.13 (config.md §8, api.md §14).
//!
//! The node compares only the v1alpha1 documents: it copies the live-applicable subtrees from
//! the current config into a copy of the new one and checks deep equality. Anything left over
//! needs a reboot. Talos 1.14 removed the check (every change applies without a reboot); callers
//! targeting 1.14 should not use this.

use serde_json::{Map, Value};

use crate::document::MachineConfig;

/// `machine.*` keys that change without a reboot.
const LIVE_MACHINE_KEYS: &[&str] = &[
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

/// `machine.features.*` keys that change without a reboot, only when `features` exists on both
/// sides.
const LIVE_FEATURE_KEYS: &[&str] = &[
    "kubernetesTalosAPIAccess",
    "kubePrism",
    "hostDNS",
    "imageCache",
    "nodeAddressSortAlgorithm",
];

/// Copies `key` from `old` into `new` (or removes it from `new` when `old` lacks it).
fn copy_key(old: &Map<String, Value>, new: &mut Map<String, Value>, key: &str) {
    match old.get(key) {
        Some(v) => {
            new.insert(key.to_string(), v.clone());
        }
        None => {
            new.shift_remove(key);
        }
    }
}

/// The new v1alpha1 document with every live-applicable subtree taken from the old one.
/// Equal to `old` exactly when the change can be applied without a reboot; what still differs
/// is what Talos shows in its "can't be applied in immediate mode" diff.
pub fn without_live_changes(old: &Value, new: &Value) -> Value {
    let mut out = new.clone();
    let (Some(o), Some(n)) = (old.as_object(), out.as_object_mut()) else {
        return out;
    };
    copy_key(o, n, "debug");
    copy_key(o, n, "cluster");
    let (Some(om), Some(nm)) = (
        o.get("machine").and_then(Value::as_object),
        n.get_mut("machine").and_then(Value::as_object_mut),
    ) else {
        return out;
    };
    for k in LIVE_MACHINE_KEYS {
        copy_key(om, nm, k);
    }
    if let (Some(of), Some(nf)) = (
        om.get("features").and_then(Value::as_object),
        nm.get_mut("features").and_then(Value::as_object_mut),
    ) {
        for k in LIVE_FEATURE_KEYS {
            copy_key(of, nf, k);
        }
    }
    out
}

/// True when applying `new` over `old` needs a reboot on Talos 1.13.
///
/// A node without a config (`old` has no v1alpha1 document: maintenance mode) applies
/// everything without this check, so that case is `false`. Changes confined to other documents
/// (HostnameConfig, LinkConfig, UserVolumeConfig, ...) never need a reboot. Removing the
/// v1alpha1 document is not something a node accepts; it counts as needing a reboot.
pub fn reboot_required(old: &MachineConfig, new: &MachineConfig) -> bool {
    // Talos compares decoded configs: a scalar left out is its zero value (but a nil list or map
    // is not an empty one).
    let (old, new) = (&old.decoded(), &new.decoded());
    let Some(old_doc) = old.v1alpha1() else {
        return false;
    };
    let Some(new_doc) = new.v1alpha1() else {
        return true;
    };
    without_live_changes(old_doc, new_doc) != *old_doc
}

/// Readable top-level paths that force the reboot (empty when none), for explaining why.
pub fn reboot_reasons(old: &MachineConfig, new: &MachineConfig) -> Vec<String> {
    let (old, new) = (&old.decoded(), &new.decoded());
    let (Some(old_doc), Some(new_doc)) = (old.v1alpha1(), new.v1alpha1()) else {
        return if reboot_required(old, new) {
            vec!["v1alpha1 document removed".to_string()]
        } else {
            Vec::new()
        };
    };
    let a = MachineConfig {
        docs: vec![old_doc.clone()],
    };
    let b = MachineConfig {
        docs: vec![without_live_changes(old_doc, new_doc)],
    };
    crate::diff::changed_paths(&a, &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> MachineConfig {
        MachineConfig {
            docs: vec![
                json!({"version": "v1alpha1", "debug": false, "persist": true,
                    "machine": {"type": "controlplane", "token": "t",
                        "install": {"disk": "/dev/sda", "image": "ghcr.io/siderolabs/installer:v1.13.5"},
                        "features": {"diskQuotaSupport": true, "kubePrism": {"enabled": true, "port": 7445}},
                        "nodeLabels": {"a": "b"}},
                    "cluster": {"clusterName": "c", "network": {"podSubnets": ["10.244.0.0/16"]}}}),
                json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}),
            ],
        }
    }

    fn with(f: impl FnOnce(&mut Value)) -> MachineConfig {
        let mut c = base();
        f(&mut c.docs[0]);
        c
    }

    #[test]
    fn identical_is_live() {
        assert!(!reboot_required(&base(), &base()));
        assert!(reboot_reasons(&base(), &base()).is_empty());
    }

    #[test]
    fn cluster_change_is_live() {
        let new = with(|d| {
            d["cluster"]["network"]["podSubnets"] = json!(["10.32.0.0/12"]);
            d["cluster"]["extraManifests"] = json!(["https://x/y.yaml"]);
        });
        assert!(!reboot_required(&base(), &new));
    }

    #[test]
    fn machine_disks_need_reboot() {
        let new = with(|d| d["machine"]["disks"] = json!([{"device": "/dev/sdb"}]));
        assert!(reboot_required(&base(), &new));
        assert_eq!(reboot_reasons(&base(), &new), vec!["machine.disks"]);
    }

    #[test]
    fn install_and_labels_are_live() {
        let new = with(|d| {
            d["machine"]["install"]["image"] = json!("ghcr.io/siderolabs/installer:v1.13.6");
            d["machine"]["nodeLabels"] = json!({});
            d["machine"]["network"] = json!({"hostname": "x"});
            d["debug"] = json!(true);
        });
        assert!(!reboot_required(&base(), &new));
    }

    #[test]
    fn kube_prism_live_but_disk_quota_reboots() {
        let new = with(|d| d["machine"]["features"]["kubePrism"]["port"] = json!(7446));
        assert!(!reboot_required(&base(), &new));
        let new = with(|d| d["machine"]["features"]["diskQuotaSupport"] = json!(false));
        assert!(reboot_required(&base(), &new));
        assert_eq!(
            reboot_reasons(&base(), &new),
            vec!["machine.features.diskQuotaSupport"]
        );
    }

    #[test]
    fn features_added_or_removed_as_a_whole_reboots() {
        let new = with(|d| {
            d["machine"]
                .as_object_mut()
                .unwrap()
                .shift_remove("features");
        });
        assert!(reboot_required(&base(), &new));
        // Even if only live keys differ, `features` must exist on both sides.
        let old = with(|d| {
            d["machine"]
                .as_object_mut()
                .unwrap()
                .shift_remove("features");
        });
        let new = with(|d| d["machine"]["features"] = json!({"kubePrism": {"enabled": true}}));
        assert!(reboot_required(&old, &new));
    }

    #[test]
    fn reboot_rows() {
        for f in [
            (|d: &mut Value| d["machine"]["type"] = json!("worker")) as fn(&mut Value),
            |d| d["machine"]["token"] = json!("u"),
            |d| d["persist"] = json!(false),
            |d| d["machine"]["env"] = json!({}),
            |d| d["machine"]["files"] = json!([{"path": "/var/f"}]),
            |d| d["machine"]["udev"] = json!({"rules": ["x"]}),
        ] {
            assert!(reboot_required(&base(), &with(f)));
        }
    }

    #[test]
    fn other_documents_only_is_live() {
        let mut new = base();
        new.docs[1] = json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off", "hostname": "n1"});
        new.docs
            .push(json!({"apiVersion": "v1alpha1", "kind": "UserVolumeConfig", "name": "data"}));
        assert!(!reboot_required(&base(), &new));
    }

    #[test]
    fn maintenance_mode_never_reboots() {
        assert!(!reboot_required(&MachineConfig::default(), &base()));
    }
}
