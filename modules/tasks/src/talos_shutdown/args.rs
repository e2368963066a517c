//! `talos_shutdown`'s options, checked once before anything connects.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `force`: shut down without Talos's drain of the node.
    pub force: bool,
    pub wait: bool,
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        Ok(Args {
            connection,
            target,
            force: p.bool("force"),
            wait: p.bool("wait"),
            timeout: wait_seconds(p, "timeout", 600)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": " 10.5.0.2 "}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_drain_and_wait_ten_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert!(!a.target.routed());
        assert!(!a.force);
        assert!(a.wait);
        assert_eq!(a.timeout, Duration::from_secs(600));
        let a = args(json!({"force": true, "wait": false, "timeout": 30, "endpoint": "10.5.0.1"}))
            .unwrap();
        assert!(a.force);
        assert!(!a.wait);
        assert!(a.target.routed());
        assert_eq!(a.timeout, Duration::from_secs(30));
    }

    #[test]
    fn a_blank_node_or_a_timeout_out_of_range_names_the_option() {
        let e = args(json!({"node": "  "})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
        let e = args(json!({"timeout": 0})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
        let e = args(json!({"timeout": 86_401})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
        let e = args(json!({"connect_timeout": 0})).err().unwrap();
        assert!(e.msg.starts_with("connect_timeout"), "{}", e.msg);
    }
}
