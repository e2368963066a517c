//! Structural comparison of two machine configs: which key paths changed.
//!
//! Paths are readable rather than JSON pointers: `machine.install.image`,
//! `machine.disks[0].partitions`, `machine.nodeLabels["node.kubernetes.io/x"]`. Non-v1alpha1
//! documents are prefixed with their identity, `HostnameConfig.auto` or
//! `Layer2VIPConfig(192.168.1.100).link`. Paths never carry values, so they are safe to show even
//! when the changed value is a secret.

use serde_json::Value;

use crate::document::{DocId, MachineConfig};
use crate::normalize::Rules;

/// Appends `key` to a readable path: `.key` for identifier-like keys, `["key"]` otherwise.
pub(crate) fn push_key(path: &mut String, key: &str) {
    let simple = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if simple {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push_str(&format!("[{}]", Value::String(key.to_string())));
    }
}

/// How a document is named in paths: empty for v1alpha1, `Kind` or `Kind(name)` otherwise.
pub fn doc_label(id: &DocId) -> String {
    if id.is_v1alpha1() {
        String::new()
    } else if id.name.is_empty() {
        id.kind.clone()
    } else {
        format!("{}({})", id.kind, id.name)
    }
}

/// Pairs up the documents of two configs by identity, in `after` order then removed ones.
/// Each entry is (identity, before doc, after doc).
pub(crate) fn pair_documents<'a>(
    before: &'a MachineConfig,
    after: &'a MachineConfig,
) -> Vec<(DocId, Option<&'a Value>, Option<&'a Value>)> {
    let mut used = vec![false; before.docs.len()];
    let mut out = Vec::new();
    for a in &after.docs {
        let id = DocId::of(a);
        let b = before
            .docs
            .iter()
            .enumerate()
            .find(|(i, d)| !used[*i] && DocId::of(d) == id)
            .map(|(i, d)| {
                used[i] = true;
                d
            });
        out.push((id, b, Some(a)));
    }
    for (i, b) in before.docs.iter().enumerate() {
        if !used[i] {
            out.push((DocId::of(b), Some(b), None));
        }
    }
    out
}

/// Key paths that differ between two configs.
///
/// Added and removed documents are reported as `+Kind(name)` / `-Kind(name)` (`+v1alpha1` for the
/// main document). A list whose length changed is reported once at the list path; lists of equal
/// length are compared item by item.
///
/// Both sides are compared as Talos's encoder sees them (`normalize`): zero values written or
/// left out are no change.
pub fn changed_paths(before: &MachineConfig, after: &MachineConfig) -> Vec<String> {
    let before = before.normalized(Rules::V1_13);
    let after = after.normalized(Rules::V1_13);
    let mut out = Vec::new();
    for (id, b, a) in pair_documents(&before, &after) {
        let label = doc_label(&id);
        let shown = if label.is_empty() {
            "v1alpha1".to_string()
        } else {
            label.clone()
        };
        match (b, a) {
            (Some(b), Some(a)) => diff_value(b, a, &label, &mut out),
            (None, Some(_)) => out.push(format!("+{shown}")),
            (Some(_), None) => out.push(format!("-{shown}")),
            (None, None) => {}
        }
    }
    out
}

fn diff_value(b: &Value, a: &Value, path: &str, out: &mut Vec<String>) {
    if b == a {
        return;
    }
    match (b, a) {
        (Value::Object(bo), Value::Object(ao)) => {
            for (k, bv) in bo {
                let mut p = path.to_string();
                push_key(&mut p, k);
                match ao.get(k) {
                    Some(av) => diff_value(bv, av, &p, out),
                    None => out.push(p),
                }
            }
            for k in ao.keys().filter(|k| !bo.contains_key(*k)) {
                let mut p = path.to_string();
                push_key(&mut p, k);
                out.push(p);
            }
        }
        (Value::Array(bl), Value::Array(al)) if bl.len() == al.len() => {
            for (i, (bv, av)) in bl.iter().zip(al).enumerate() {
                diff_value(bv, av, &format!("{path}[{i}]"), out);
            }
        }
        _ => out.push(if path.is_empty() {
            "(document)".to_string()
        } else {
            path.to_string()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(docs: Vec<Value>) -> MachineConfig {
        MachineConfig { docs }
    }

    #[test]
    fn reports_scalar_key_and_list_paths() {
        let before = cfg(vec![json!({"version": "v1alpha1", "machine": {
            "install": {"image": "a", "disk": "/dev/sda"},
            "disks": [{"device": "/dev/sdb", "partitions": [{"mountpoint": "/var/a"}]}],
            "certSANs": ["x"],
            "nodeLabels": {"node.kubernetes.io/x": ""}}, "cluster": {"extraManifests": ["u1"]}})]);
        let after = cfg(vec![json!({"version": "v1alpha1", "machine": {
            "install": {"image": "b", "disk": "/dev/sda"},
            "disks": [{"device": "/dev/sdb", "partitions": [{"mountpoint": "/var/a"}, {"mountpoint": "/var/b"}]}],
            "certSANs": ["x", "y"],
            "nodeLabels": {}, "type": "worker"}, "cluster": {}})]);
        let paths = changed_paths(&before, &after);
        // In Go struct order; an empty map is no map to Talos's encoder (omitempty).
        assert_eq!(
            paths,
            vec![
                "machine.type",
                "machine.certSANs",
                "machine.disks[0].partitions",
                "machine.install.image",
                "machine.nodeLabels",
                "cluster.extraManifests",
            ]
        );
    }

    #[test]
    fn prefixes_multidoc_and_reports_added_removed_documents() {
        let before = cfg(vec![
            json!({"version": "v1alpha1"}),
            json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}),
            json!({"apiVersion": "v1alpha1", "kind": "Layer2VIPConfig", "name": "192.168.1.100", "link": "eth0"}),
            json!({"apiVersion": "v1alpha1", "kind": "KubeSpanConfig", "enabled": true}),
        ]);
        let after = cfg(vec![
            json!({"version": "v1alpha1"}),
            json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off", "hostname": "n1"}),
            json!({"apiVersion": "v1alpha1", "kind": "Layer2VIPConfig", "name": "192.168.1.100", "link": "eth1"}),
            json!({"apiVersion": "v1alpha1", "kind": "UserVolumeConfig", "name": "data"}),
        ]);
        assert_eq!(
            changed_paths(&before, &after),
            vec![
                "HostnameConfig.auto",
                "HostnameConfig.hostname",
                "Layer2VIPConfig(192.168.1.100).link",
                "+UserVolumeConfig(data)",
                "-KubeSpanConfig",
            ]
        );
    }

    #[test]
    fn equal_configs_have_no_paths() {
        let c = cfg(vec![json!({"machine": {"a": [1, {"b": 2}]}})]);
        assert!(changed_paths(&c, &c.clone()).is_empty());
        assert_eq!(changed_paths(&cfg(vec![]), &c), vec!["+v1alpha1"]);
    }
}
