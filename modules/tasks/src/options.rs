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
