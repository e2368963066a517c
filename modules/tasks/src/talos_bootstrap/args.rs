//! `talos_bootstrap`'s options, checked once before anything connects.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::{other_control_planes, wait_seconds};

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `control_plane_nodes` without blanks and without `node`: asked for etcd members too.
    pub others: Vec<String>,
    /// `wait`: for etcd to run and be healthy after the bootstrap.
    pub wait: bool,
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let timeout = wait_seconds(p, "timeout", 300)?;
        let others = other_control_planes(p, &target.node);
        Ok(Args {
            connection,
            target,
            others,
            wait: p.bool("wait"),
            timeout,
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
    fn defaults_ask_only_the_node_and_wait_five_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert!(a.others.is_empty());
        assert!(a.wait);
        assert_eq!(a.timeout, Duration::from_secs(300));
    }

    #[test]
    fn the_other_control_planes_leave_out_blanks_and_the_node() {
        let a = args(json!({
            "control_plane_nodes": ["10.5.0.2", " 10.5.0.3 ", "", "10.5.0.4"],
            "wait": false,
        }))
        .unwrap();
        assert_eq!(a.others, ["10.5.0.3", "10.5.0.4"]);
        assert!(!a.wait);
    }

    #[test]
    fn a_blank_node_or_a_timeout_out_of_range_names_the_option() {
        let e = args(json!({"node": ""})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
        let e = args(json!({"timeout": -1})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
        let e = args(json!({"connect_timeout": 601})).err().unwrap();
        assert!(e.msg.starts_with("connect_timeout"), "{}", e.msg);
    }
}
