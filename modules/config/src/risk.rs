//! Risky config changes that a human should look at before applying (design.md lessons):
//! dropped manifests, changed disks, a changed install image or disk, removed certificate SANs,
//! a changed machine type or CA. Reasons are short sentences without secret values.

use serde_json::Value;

use crate::diff::{doc_label, pair_documents};
use crate::document::MachineConfig;
use crate::normalize::Rules;

/// One risky change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Risk {
    /// Readable path of what changed, e.g. `cluster.extraManifests` or `UserVolumeConfig(data)`.
    pub path: String,
    /// Why it matters, as a short sentence.
    pub reason: String,
}

fn risk(path: &str, reason: String) -> Risk {
    Risk {
        path: path.to_string(),
        reason,
    }
}

/// Risky differences between the current config (`before`) and the new one (`after`).
/// An empty `before` (a node without a config) has nothing to lose, so gives no risks.
pub fn risky_changes(before: &MachineConfig, after: &MachineConfig) -> Vec<Risk> {
    let mut out = Vec::new();
    if before.docs.is_empty() {
        return out;
    }
    let (before, after) = (
        &before.normalized(Rules::V1_13),
        &after.normalized(Rules::V1_13),
    );
    let null = Value::Null;
    let b = before.v1alpha1().unwrap_or(&null);
    let a = after.v1alpha1().unwrap_or(&null);
    let at = |v: &Value, p: &str| v.pointer(p).cloned().unwrap_or(Value::Null);

    // Manifests that Talos would stop applying (it does not delete what is in the cluster, but
    // the cluster silently loses its source of truth).
    let removed_urls = removed(
        &strings(&at(b, "/cluster/extraManifests")),
        &strings(&at(a, "/cluster/extraManifests")),
    );
    if !removed_urls.is_empty() {
        let shown: Vec<String> = removed_urls.iter().map(|u| safe_url(u)).collect();
        out.push(risk(
            "cluster.extraManifests",
            format!("extra manifests removed: {}", shown.join(", ")),
        ));
    }
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("name").and_then(Value::as_str).map(str::to_string))
            .collect()
    };
    let removed_inline = removed(
        &names(&at(b, "/cluster/inlineManifests")),
        &names(&at(a, "/cluster/inlineManifests")),
    );
    if !removed_inline.is_empty() {
        out.push(risk(
            "cluster.inlineManifests",
            format!("inline manifests removed: {}", removed_inline.join(", ")),
        ));
    }

    if at(b, "/machine/disks") != at(a, "/machine/disks") {
        out.push(risk(
            "machine.disks",
            "machine.disks changed: partitions may be created again or data disks re-provisioned"
                .to_string(),
        ));
    }
    let (bi, ai) = (
        at(b, "/machine/install/image"),
        at(a, "/machine/install/image"),
    );
    if bi != ai {
        out.push(risk(
            "machine.install.image",
            format!("install image changes from {} to {}", show(&bi), show(&ai)),
        ));
    }
    for (p, label) in [
        ("/machine/install/disk", "machine.install.disk"),
        (
            "/machine/install/diskSelector",
            "machine.install.diskSelector",
        ),
    ] {
        if at(b, p) != at(a, p) {
            out.push(risk(
                label,
                format!("{label} changed: the node may install to another disk"),
            ));
        }
    }
    for (p, label) in [
        ("/machine/certSANs", "machine.certSANs"),
        ("/cluster/apiServer/certSANs", "cluster.apiServer.certSANs"),
    ] {
        let gone = removed(&strings(&at(b, p)), &strings(&at(a, p)));
        if !gone.is_empty() {
            out.push(risk(
                label,
                format!(
                    "certificate SANs removed: {} (clients using them will fail TLS)",
                    gone.join(", ")
                ),
            ));
        }
    }
    let (bt, at_) = (at(b, "/machine/type"), at(a, "/machine/type"));
    if bt != at_ {
        out.push(risk(
            "machine.type",
            format!("machine type changes from {} to {}", show(&bt), show(&at_)),
        ));
    }
    for (p, label, what) in [
        (
            "/machine/ca/crt",
            "machine.ca.crt",
            "the Talos API CA certificate changed: clients and nodes must trust the new CA",
        ),
        (
            "/cluster/ca/crt",
            "cluster.ca.crt",
            "the Kubernetes CA certificate changed: kubeconfigs and nodes must trust the new CA",
        ),
    ] {
        let (x, y) = (at(b, p), at(a, p));
        if x != y && !x.is_null() {
            out.push(risk(label, what.to_string()));
        }
    }

    // 1.14 multi-document equivalents.
    for (id, bd, ad) in pair_documents(before, after) {
        let label = doc_label(&id);
        match (id.kind.as_str(), bd, ad) {
            ("UnattendedInstallConfig", Some(_), None) => out.push(risk(
                &format!("-{label}"),
                "unattended install config removed".to_string(),
            )),
            ("UnattendedInstallConfig", Some(x), Some(y)) => {
                let (xi, yi) = (at(x, "/installer/image"), at(y, "/installer/image"));
                if xi != yi {
                    out.push(risk(
                        &format!("{label}.installer.image"),
                        format!("install image changes from {} to {}", show(&xi), show(&yi)),
                    ));
                }
                if at(x, "/provisioning/diskSelector") != at(y, "/provisioning/diskSelector") {
                    out.push(risk(
                        &format!("{label}.provisioning.diskSelector"),
                        "install disk selector changed: the node may install to another disk".to_string(),
                    ));
                }
            }
            ("KubeExternalManifestConfig", Some(_), None) => out.push(risk(
                &format!("-{label}"),
                format!("external manifest {} removed", id.name),
            )),
            ("KubeInlineManifestConfig", Some(_), None) => out.push(risk(
                &format!("-{label}"),
                format!("inline manifest {} removed", id.name),
            )),
            ("UserVolumeConfig", Some(_), None) => out.push(risk(
                &format!("-{label}"),
                format!("user volume {} removed: its data will no longer be mounted", id.name),
            )),
            ("KubeAPIServerCAConfig", Some(x), Some(y))
                if at(x, "/issuingCA/cert") != at(y, "/issuingCA/cert") =>
            {
                out.push(risk(
                    &format!("{label}.issuingCA.cert"),
                    "the Kubernetes CA certificate changed: kubeconfigs and nodes must trust the new CA"
                        .to_string(),
                ))
            }
            _ => {}
        }
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// Items of `before` missing from `after`, in `before` order, without repeats.
fn removed(before: &[String], after: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for b in before {
        if !after.contains(b) && !out.contains(b) {
            out.push(b.clone());
        }
    }
    out
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "(none)".to_string(),
        Value::String(s) if s.is_empty() => "(none)".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A URL without credentials or query string, which may carry tokens.
pub(crate) fn safe_url(u: &str) -> String {
    let no_query = u.split(['?', '#']).next().unwrap_or(u);
    match no_query.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{scheme}://{host}{path}")
        }
        None => no_query.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> MachineConfig {
        MachineConfig {
            docs: vec![json!({"version": "v1alpha1", "machine": {
                "type": "controlplane", "ca": {"crt": "OSCA", "key": "k"}, "certSANs": ["a", "b"],
                "install": {"disk": "/dev/sda", "image": "ghcr.io/siderolabs/installer:v1.13.5"}},
                "cluster": {"ca": {"crt": "K8SCA"}, "apiServer": {"certSANs": ["api.example"]},
                    "extraManifests": ["https://user:pw@example.com/a.yaml?token=s3cret", "https://example.com/b.yaml"],
                    "inlineManifests": [{"name": "cilium", "contents": "x"}, {"name": "flux", "contents": "y"}]}})],
        }
    }

    fn paths(r: &[Risk]) -> Vec<&str> {
        r.iter().map(|r| r.path.as_str()).collect()
    }

    #[test]
    fn no_change_no_risk_and_fresh_node_no_risk() {
        assert!(risky_changes(&base(), &base()).is_empty());
        assert!(risky_changes(&MachineConfig::default(), &base()).is_empty());
    }

    #[test]
    fn dropped_manifests_are_named_without_credentials() {
        let mut after = base();
        after.docs[0]["cluster"]["extraManifests"] = json!(["https://example.com/b.yaml"]);
        after.docs[0]["cluster"]
            .as_object_mut()
            .unwrap()
            .shift_remove("inlineManifests");
        let r = risky_changes(&base(), &after);
        assert_eq!(
            paths(&r),
            ["cluster.extraManifests", "cluster.inlineManifests"]
        );
        assert_eq!(
            r[0].reason,
            "extra manifests removed: https://example.com/a.yaml"
        );
        assert!(!r[0].reason.contains("s3cret") && !r[0].reason.contains("pw"));
        assert_eq!(r[1].reason, "inline manifests removed: cilium, flux");
        // Adding manifests is not risky.
        let mut more = base();
        more.docs[0]["cluster"]["extraManifests"]
            .as_array_mut()
            .unwrap()
            .push(json!("https://c"));
        assert!(risky_changes(&base(), &more).is_empty());
    }

    #[test]
    fn disks_install_sans_type_and_ca() {
        let mut after = base();
        let m = &mut after.docs[0]["machine"];
        m["disks"] = json!([{"device": "/dev/sdb"}]);
        m["install"]["image"] = json!("ghcr.io/siderolabs/installer:v1.13.6");
        m["install"]["disk"] = json!("/dev/vda");
        m["certSANs"] = json!(["a", "c"]);
        m["type"] = json!("worker");
        m["ca"]["crt"] = json!("OTHER");
        after.docs[0]["cluster"]["apiServer"]["certSANs"] = json!([]);
        after.docs[0]["cluster"]["ca"]["crt"] = json!("OTHER");
        let r = risky_changes(&base(), &after);
        assert_eq!(
            paths(&r),
            [
                "machine.disks",
                "machine.install.image",
                "machine.install.disk",
                "machine.certSANs",
                "cluster.apiServer.certSANs",
                "machine.type",
                "machine.ca.crt",
                "cluster.ca.crt"
            ]
        );
        assert_eq!(
            r[1].reason,
            "install image changes from ghcr.io/siderolabs/installer:v1.13.5 to ghcr.io/siderolabs/installer:v1.13.6"
        );
        assert!(r[3].reason.contains("removed: b"));
        assert!(
            !r.iter()
                .any(|r| r.reason.contains("OSCA") || r.reason.contains("OTHER"))
        );
    }

    #[test]
    fn multidoc_equivalents() {
        let doc =
            |kind: &str, name: &str| json!({"apiVersion": "v1alpha1", "kind": kind, "name": name});
        let mut before = base();
        before.docs.push(
            json!({"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig",
            "installer": {"image": "factory.talos.dev/metal-installer/x:v1.14.0"},
            "provisioning": {"diskSelector": {"match": "disk.dev_path == \"/dev/sda\""}}}),
        );
        before.docs.push(doc("KubeInlineManifestConfig", "cilium"));
        before.docs.push(doc("KubeExternalManifestConfig", "flux"));
        before.docs.push(doc("UserVolumeConfig", "data"));
        let mut after = base();
        after.docs.push(
            json!({"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig",
            "installer": {"image": "factory.talos.dev/metal-installer/x:v1.14.1"},
            "provisioning": {"diskSelector": {"match": "disk.dev_path == \"/dev/sdb\""}}}),
        );
        let r = risky_changes(&before, &after);
        assert_eq!(
            paths(&r),
            [
                "UnattendedInstallConfig.installer.image",
                "UnattendedInstallConfig.provisioning.diskSelector",
                "-KubeInlineManifestConfig(cilium)",
                "-KubeExternalManifestConfig(flux)",
                "-UserVolumeConfig(data)"
            ]
        );
        assert!(r[4].reason.contains("user volume data removed"));
    }

    #[test]
    fn safe_url_strips_userinfo_and_query() {
        assert_eq!(safe_url("https://u:p@h:1/x?t=1#f"), "https://h:1/x");
        assert_eq!(safe_url("https://h"), "https://h");
    }
}
