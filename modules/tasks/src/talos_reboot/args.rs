//! `talos_reboot`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use super::Mode;
use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;
use crate::shared::upgrade_drain::DEFAULT_DRAIN_TIMEOUT_SECS;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    pub mode: Mode,
    pub wait: bool,
    pub timeout: Duration,
    /// `drain`: the drain's timeout when the Node is drained first, None when it is not.
    pub drain: Option<Duration>,
    pub kubeconfig: Option<PathBuf>,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let mode = match p.str("mode") {
            Some("powercycle") => Mode::Powercycle,
            Some("force") => Mode::Force,
            _ => Mode::Default,
        };
        let wait = p.bool("wait");
        let timeout = wait_seconds(p, "timeout", 600)?;
        let drain_timeout = wait_seconds(p, "drain_timeout", DEFAULT_DRAIN_TIMEOUT_SECS)?;
        let drain = p.bool("drain").then_some(drain_timeout);
        if drain.is_some() && !wait {
            return Err(ModuleError::new(
                "drain=true cannot be combined with wait=false: the Node is uncordoned once the node is \
                 back and Ready, which needs the wait (talosctl reboot --drain turns --wait on too); \
                 remove wait: false, or set drain: false to reboot without draining",
            ));
        }
        Ok(Args {
            connection,
            target,
            mode,
            wait,
            timeout,
            drain,
            kubeconfig: p.path("kubeconfig"),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": " 10.5.0.2 ", "endpoint": "10.5.0.1"}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_reboot_without_drain_and_wait_ten_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert!(a.target.routed());
        assert_eq!(a.mode, Mode::Default);
        assert!(a.wait);
        assert_eq!(a.timeout, Duration::from_secs(600));
        assert_eq!(a.drain, None);
    }

    #[test]
    fn drain_carries_its_timeout_and_needs_the_wait() {
        let a = args(json!({"drain": true, "drain_timeout": 42, "mode": "force"})).unwrap();
        assert_eq!(a.drain, Some(Duration::from_secs(42)));
        assert_eq!(a.mode, Mode::Force);
        let e = args(json!({"drain": true, "wait": false})).err().unwrap();
        assert!(e.msg.contains("drain: false"), "{}", e.msg);
    }

    #[test]
    fn a_timeout_out_of_range_names_the_option() {
        let e = args(json!({"timeout": 0})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
        let e = args(json!({"connect_timeout": 601})).err().unwrap();
        assert!(e.msg.starts_with("connect_timeout"), "{}", e.msg);
    }
}
