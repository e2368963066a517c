//! `.machine.files` → CRICustomizationConfig and EtcFileConfig, where upstream has a document for
//! the file; the rest stays in v1alpha1, which Talos 1.14 still writes (with a deprecation
//! warning, `types/v1alpha1/v1alpha1_validation.go`).
//!
//! How legacy writes the files (`WriteUserFiles`,
//! `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go`, v1.14.0-rc.1):
//! `op` is `create`, `overwrite` (the file must exist) or `append`; files outside `/var` are
//! written under `/var` and bind-mounted over the real path, and `create` is refused there.
//! `/etc/cri/conf.d/20-customization.part` is skipped: the CRI customization shim takes the first
//! file with that path, whatever its `op` (`v1alpha1_cri_bridge.go`).

use serde_json::{Value, json};

use super::builder::{Builder, contains_marker, named};

/// The legacy CRI customization file.
const CRI_CUSTOMIZATION_PART: &str = "/etc/cri/conf.d/20-customization.part";
/// Any qualified name except the reserved `customization` (cri/customization.go) keeps the part
/// among the other `20-*.part` files (`internal/app/machined/pkg/controllers/files/cri_config.go`).
const CRI_CUSTOMIZATION_NAME: &str = "legacy-customization";
/// The default mode of an EtcFileConfig (`NewEtcFileConfigV1Alpha1`, runtime/etc_file.go).
const ETC_FILE_MODE: u64 = 0o644;

/// Files under `/etc` that Talos manages itself and EtcFileConfig refuses (runtime/etc_file.go).
const MANAGED_ETC_FILES: &[&str] = &[
    "resolv.conf",
    "hosts",
    "machine-id",
    "extensions.yaml",
    "localtime",
    "os-release",
    "xattr.conf",
];
const MANAGED_ETC_PREFIXES: &[&str] = &[
    "apparmor.d/",
    "apparmor/",
    "ca-certificates/",
    "cni/",
    "cri/",
    "iscsi/",
    "kubernetes/",
    "lvm/",
    "nvme/",
    "pki/",
    "selinux/",
    "ssl/",
];

pub(super) fn convert(b: &mut Builder) {
    let from = ".machine.files";
    let Some(v) = b.take(from) else {
        return;
    };
    let Some(items) = b.list(from, v) else {
        return;
    };
    let mut kept = Vec::new();
    let mut cri_part_done = false;
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{from}[{i}]");
        if !item.is_object() || contains_marker(&item) {
            b.refuse(
                &at,
                "expected a file (a `$patch: delete` of a file can't be converted; delete the \
                 EtcFileConfig or CRICustomizationConfig document instead)",
            );
            continue;
        }
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
        let path = text("path").to_string();
        let op = text("op").to_string();
        if path == CRI_CUSTOMIZATION_PART {
            if cri_part_done {
                b.warn(format!(
                    "{at} is dropped: only the first {CRI_CUSTOMIZATION_PART} counts"
                ));
            } else {
                let doc = named("CRICustomizationConfig", CRI_CUSTOMIZATION_NAME);
                b.put(
                    &at,
                    doc,
                    "content",
                    item.get("content").cloned().unwrap_or(json!("")),
                );
                cri_part_done = true;
            }
            continue;
        }
        if path.starts_with("/etc/kubernetes/manifests/") {
            b.refuse(
                &at,
                "KubeletConfig disables the kubelet manifests directory, so a file there does \
                 nothing; write the pod as a KubeStaticPodConfig document instead",
            );
            continue;
        }
        let Some(rel) = path.strip_prefix("/etc/") else {
            b.warn(format!(
                "{at} stays in .machine.files: Talos 1.14 has no document for files outside /etc \
                 (it still writes them, and warns that .machine.files is deprecated)"
            ));
            kept.push(item);
            continue;
        };
        match op.as_str() {
            "overwrite" => {
                if let Some(why) = etc_file_refusal(rel) {
                    b.refuse(&format!("{at}.path"), why);
                    continue;
                }
                let doc = named("EtcFileConfig", rel);
                b.put(&at, doc, "mode", mode(item.get("permissions")));
                b.put(
                    &at,
                    doc,
                    "contents",
                    item.get("content").cloned().unwrap_or(json!("")),
                );
                b.warn(format!(
                    "{at} becomes EtcFileConfig({rel}): Talos now owns the whole file (legacy \
                     overwrote it read-only over the stock file)"
                ));
            }
            "create" => b.refuse(
                &format!("{at}.op"),
                "create is not allowed outside /var; use op: overwrite, which becomes an \
                 EtcFileConfig document",
            ),
            _ => {
                b.warn(format!(
                    "{at} stays in .machine.files: EtcFileConfig replaces a whole file and has no \
                     form for op {op:?}"
                ));
                kept.push(item);
            }
        }
    }
    if !kept.is_empty() {
        b.keep(from, Value::Array(kept));
    }
}

/// Why EtcFileConfig refuses a path relative to `/etc` (`validateEtcFilePath`), with what to do.
fn etc_file_refusal(rel: &str) -> Option<String> {
    let local = !rel.is_empty()
        && !rel.starts_with('.')
        && !rel.starts_with('/')
        && !rel.split('/').any(|part| part == ".." || part.is_empty());
    if !local {
        return Some(format!(
            "user etc file {rel:?} must be a local path below /etc for EtcFileConfig"
        ));
    }
    if MANAGED_ETC_FILES.contains(&rel) || MANAGED_ETC_PREFIXES.iter().any(|p| rel.starts_with(p)) {
        return Some(format!(
            "user etc file {rel:?} is managed by Talos, and EtcFileConfig refuses it; configure \
             it with the document Talos has for it"
        ));
    }
    None
}

/// The legacy `permissions` as EtcFileConfig's octal `mode` (0 means 0o644 in both shapes).
fn mode(permissions: Option<&Value>) -> Value {
    match permissions {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|m| m != 0) => json!(n),
        Some(Value::String(s)) if !s.trim_start_matches(['0', 'o', 'O']).is_empty() => json!(s),
        _ => json!(ETC_FILE_MODE),
    }
}
