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
