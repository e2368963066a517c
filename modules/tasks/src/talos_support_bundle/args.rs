//! `talos_support_bundle`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target};
use crate::shared::options::wait_seconds;

/// Said when `dest` is empty, or (found in `run`, since it asks the filesystem) a directory.
pub(super) const DEST_NOT_A_FILE: &str =
    "dest must be a file path for the bundle, like reports/support.tar.gz";

pub struct Args {
    pub connection: ConnectionArgs,
    /// `nodes`, else `node`: every node collected from, in order.
    pub targets: Vec<Target>,
    pub dest: PathBuf,
    /// `services`: whose logs are collected.
    pub services: Vec<String>,
    /// `tail_lines`: the last lines of each service log.
    pub tail_lines: u32,
    /// `timeout`: how long each stream (a service log) may take.
    pub timeout: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let dest = p.path("dest").unwrap_or_default();
        if dest.as_os_str().is_empty() {
            return Err(ModuleError::new(DEST_NOT_A_FILE));
        }
        let connection = ConnectionArgs::from_params(p)?;
        let nodes: Vec<&str> = match p.str_list("nodes") {
            Some(list) => list,
            None => vec![p.str("node").unwrap_or_default()],
        };
        let targets = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| connection.target(n, &format!("nodes[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let tail = p.int("tail_lines").unwrap_or(5000);
        if tail < 0 {
            return Err(ModuleError::new(format!(
                "tail_lines must be 0 or more, got {tail}"
            )));
        }
        let services = p
            .str_list("services")
            .unwrap_or_default()
            .into_iter()
            .map(str::to_string)
            .collect();
        Ok(Args {
            connection,
            targets,
            dest,
            services,
            tail_lines: u32::try_from(tail).unwrap_or(u32::MAX),
            timeout: wait_seconds(p, "timeout", 120)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"dest": "out/support.tar.gz"}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    fn nodes(a: &Args) -> Vec<&str> {
        a.targets.iter().map(|t| t.node.as_str()).collect()
    }

    #[test]
    fn defaults_collect_the_usual_services_from_the_node() {
        let a = args(json!({"node": " 10.5.0.2 "})).unwrap();
        assert_eq!(nodes(&a), ["10.5.0.2"]);
        assert_eq!(a.dest, PathBuf::from("out/support.tar.gz"));
        assert_eq!(a.services, super::super::DEFAULT_SERVICES);
        assert_eq!(a.tail_lines, 5000);
        assert_eq!(a.timeout, Duration::from_secs(120));
    }

    #[test]
    fn nodes_are_each_reached_through_the_endpoint() {
        let a = args(json!({
            "nodes": ["10.5.0.2", " 10.5.0.3"],
            "endpoint": "10.5.0.1",
            "services": ["etcd"],
            "tail_lines": 0,
        }))
        .unwrap();
        assert_eq!(nodes(&a), ["10.5.0.2", "10.5.0.3"]);
        assert!(a.targets.iter().all(|t| t.endpoint == "10.5.0.1"));
        assert_eq!(a.services, ["etcd"]);
        assert_eq!(a.tail_lines, 0);
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(json!({"node": "10.5.0.2", "dest": ""})).err().unwrap();
        assert!(e.msg.starts_with("dest must be a file path"), "{}", e.msg);
        let e = args(json!({"nodes": ["10.5.0.2", " "]})).err().unwrap();
        assert!(
            e.msg.starts_with("nodes[1] must be the address"),
            "{}",
            e.msg
        );
        let e = args(json!({"node": "10.5.0.2", "tail_lines": -1}))
            .err()
            .unwrap();
        assert_eq!(e.msg, "tail_lines must be 0 or more, got -1");
        let e = args(json!({"node": "10.5.0.2", "timeout": 0}))
            .err()
            .unwrap();
        assert!(
            e.msg.starts_with("timeout must be between 1 and"),
            "{}",
            e.msg
        );
    }
}
