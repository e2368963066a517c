//! `talos_etcd_member`'s options, checked once before anything connects.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use super::LEAVE_TIMEOUT_SECS;
use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `member`, trimmed: its node's address, its hostname, or its id in hex.
    pub member: String,
    /// `timeout`: how long the member's leave may take.
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let member = p.str("member").unwrap_or_default().trim().to_string();
        if member.is_empty() {
            return Err(ModuleError::new(
                "member must name the etcd member to remove: its node's address (10.0.0.4), its \
                 hostname, or its id as `talosctl etcd members` prints it",
            ));
        }
        Ok(Args {
            connection,
            target,
            member,
            timeout: wait_seconds(p, "timeout", LEAVE_TIMEOUT_SECS)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": "10.5.0.2", "member": " cp-3 "}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_trim_the_member_and_give_the_leave_ten_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(a.member, "cp-3");
        assert_eq!(a.timeout, Duration::from_secs(600));
        let a = args(json!({"timeout": 90})).unwrap();
        assert_eq!(a.timeout, Duration::from_secs(90));
    }

    #[test]
    fn a_blank_member_is_refused_naming_the_option() {
        let e = args(json!({"member": "   "})).err().unwrap();
        assert!(
            e.msg.starts_with("member must name the etcd member"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn a_blank_node_or_a_timeout_out_of_range_names_the_option() {
        let e = args(json!({"node": " "})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
        let e = args(json!({"timeout": 0})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
    }
}
