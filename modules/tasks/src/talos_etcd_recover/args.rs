//! `talos_etcd_recover`'s options, checked once before anything is read or connected.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::{other_control_planes, wait_seconds};

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `snapshot`: the file to restore, read (and checked) in `run`.
    pub snapshot: PathBuf,
    /// `skip_hash_check`: accept a snapshot without a SHA-256 trailer, or one that does not match.
    pub skip_hash_check: bool,
    /// `control_plane_nodes` without blanks and without `node`: asked for etcd members first.
    pub others: Vec<Target>,
    /// `wait`: for etcd to run after the recovery.
    pub wait: bool,
    /// `timeout`: the upload, the bootstrap and the wait together.
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let others = other_control_planes(p, &target.node)
            .iter()
            .map(|node| connection.target(node, "control_plane_nodes"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Args {
            snapshot: p.path("snapshot").unwrap_or_default(),
            skip_hash_check: p.bool("skip_hash_check"),
            others,
            wait: p.bool("wait"),
            timeout: wait_seconds(p, "timeout", 600)?,
            connection,
            target,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(
            json!({"node": " 10.5.0.2 ", "snapshot": "backups/etcd.db"}),
            extra,
        );
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_check_the_hash_ask_only_the_node_and_wait_ten_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(a.snapshot, PathBuf::from("backups/etcd.db"));
        assert!(!a.skip_hash_check);
        assert!(a.others.is_empty());
        assert!(a.wait);
        assert_eq!(a.timeout, Duration::from_secs(600));
    }

    #[test]
    fn the_other_control_planes_are_reached_through_the_endpoint() {
        let a = args(json!({
            "endpoint": "10.5.0.1",
            "control_plane_nodes": ["10.5.0.2", " 10.5.0.3 ", ""],
            "skip_hash_check": true,
            "wait": false,
        }))
        .unwrap();
        let others: Vec<(&str, &str)> = a
            .others
            .iter()
            .map(|t| (t.node.as_str(), t.endpoint.as_str()))
            .collect();
        assert_eq!(others, [("10.5.0.3", "10.5.0.1")]);
        assert!(a.skip_hash_check);
        assert!(!a.wait);
    }

    #[test]
    fn a_blank_node_or_a_timeout_out_of_range_names_the_option() {
        let e = args(json!({"node": " "})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
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
