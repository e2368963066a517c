//! `talos_logs`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `service`, trimmed: a Talos service's id.
    pub service: String,
    /// `tail_lines`: the last lines kept; None for the whole log.
    pub tail_lines: Option<u32>,
    /// `dest`: the file on the controller the log is written to; None to return it as lines.
    pub dest: Option<PathBuf>,
    /// `timeout`: how long the log's stream may take.
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let service = p.str("service").unwrap_or_default().trim().to_string();
        if service.is_empty() || service.contains('/') {
            return Err(ModuleError::new(format!(
                "service must name a Talos service, like machined, etcd, kubelet or apid (talos_info lists \
                 them), got {service:?}"
            )));
        }
        let tail_lines = match p.int("tail_lines") {
            None => None,
            Some(n) if n >= 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            Some(n) => {
                return Err(ModuleError::new(format!(
                    "tail_lines must be 0 or more (leave it out for the whole log), got {n}"
                )));
            }
        };
        Ok(Args {
            connection,
            target,
            service,
            tail_lines,
            dest: p.path("dest"),
            timeout: wait_seconds(p, "timeout", 60)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": " 10.5.0.2 ", "service": " etcd "}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_return_the_whole_log_within_a_minute() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(a.service, "etcd");
        assert_eq!(a.tail_lines, None);
        assert_eq!(a.dest, None);
        assert_eq!(a.timeout, Duration::from_secs(60));
    }

    #[test]
    fn tail_lines_and_dest_are_kept() {
        let a = args(json!({"tail_lines": 0, "dest": "logs/etcd.log", "timeout": 5})).unwrap();
        assert_eq!(a.tail_lines, Some(0));
        assert_eq!(a.dest, Some(PathBuf::from("logs/etcd.log")));
        assert_eq!(a.timeout, Duration::from_secs(5));
        let a = args(json!({"tail_lines": 1_i64 << 40})).unwrap();
        assert_eq!(a.tail_lines, Some(u32::MAX));
    }

    #[test]
    fn refusals_name_the_option() {
        for bad in ["", "  ", "etcd/../x"] {
            let e = args(json!({"service": bad})).err().unwrap();
            assert!(
                e.msg.starts_with("service must name a Talos service"),
                "{}",
                e.msg
            );
        }
        let e = args(json!({"tail_lines": -1})).err().unwrap();
        assert!(
            e.msg.starts_with("tail_lines must be 0 or more"),
            "{}",
            e.msg
        );
        assert!(e.msg.ends_with("got -1"), "{}", e.msg);
        let e = args(json!({"timeout": 0})).err().unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
        let e = args(json!({"node": ""})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
    }
}
