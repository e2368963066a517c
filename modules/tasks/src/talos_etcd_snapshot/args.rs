//! `talos_etcd_snapshot`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use super::dest_not_a_file;
use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `dest`: the snapshot's file on the controller (never empty; whether it is a directory is
    /// found in `run`, since it asks the filesystem).
    pub dest: PathBuf,
    /// `timeout`: how long the snapshot's stream may take.
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let dest = p.path("dest").unwrap_or_default();
        if dest.as_os_str().is_empty() {
            return Err(dest_not_a_file(&dest));
        }
        Ok(Args {
            connection,
            target,
            dest,
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
        let given = merged(
            json!({"node": " 10.5.0.2 ", "dest": "backups/etcd.snapshot"}),
            extra,
        );
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_stream_for_up_to_ten_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(a.dest, PathBuf::from("backups/etcd.snapshot"));
        assert_eq!(a.timeout, Duration::from_secs(600));
        let a = args(json!({"timeout": 30, "endpoint": "10.5.0.1"})).unwrap();
        assert_eq!(a.timeout, Duration::from_secs(30));
        assert!(a.target.routed());
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(json!({"dest": ""})).err().unwrap();
        assert_eq!(e.msg, "dest must be a file path for the snapshot, got \"\"");
        let e = args(json!({"timeout": 86_401})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
        let e = args(json!({"node": " "})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
    }
}
