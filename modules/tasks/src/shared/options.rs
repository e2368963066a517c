//! Option values more than one module reads the same way.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

/// The longest wait any option allows: a day.
pub const MAX_WAIT_SECS: i64 = 86_400;

/// A wait in seconds from option `name` (`default` when unset), between 1 s and a day.
pub fn wait_seconds(p: &Params, name: &str, default: i64) -> Result<Duration, ModuleError> {
    let secs = p.int(name).unwrap_or(default);
    if !(1..=MAX_WAIT_SECS).contains(&secs) {
        return Err(ModuleError::new(format!(
            "{name} must be between 1 and {MAX_WAIT_SECS} seconds, got {secs}"
        )));
    }
    Ok(Duration::from_secs(secs as u64))
}

/// The `control_plane_nodes` option without blanks and without `node` itself: the other control
/// planes a module asks about etcd before it bootstraps or recovers it.
pub fn other_control_planes(p: &Params, node: &str) -> Vec<String> {
    p.str_list("control_plane_nodes")
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s != node)
        .collect()
}

/// For the unit tests of a module's `Args`: `args` validated against the module's spec as Ansible's
/// arguments would be (defaults filled in), ready for `Args::from_params`.
#[cfg(test)]
pub(crate) fn params(spec: ferro_ansible_protocol::Spec, args: serde_json::Value) -> Params {
    let serde_json::Value::Object(args) = args else {
        panic!("the arguments of a test are a JSON object")
    };
    spec.validate("test", &args)
        .unwrap_or_else(|e| panic!("the test's arguments do not fit the spec: {}", e.msg()))
}

/// `base` with the keys of `extra` set over it: a test's usual arguments and what one case changes.
#[cfg(test)]
pub(crate) fn merged(mut base: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(base), serde_json::Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}
