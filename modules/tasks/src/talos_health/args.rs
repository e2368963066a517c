//! `talos_health`'s options, checked once before anything connects.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    pub timeout: Duration,
    /// `control_plane_nodes`; None: discovered from the etcd members `node` sees.
    pub control_planes: Option<Vec<String>>,
    /// `worker_nodes`, empty when not given.
    pub workers: Vec<String>,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let timeout = wait_seconds(p, "timeout", 300)?;
        let control_planes = node_list(p, "control_plane_nodes")?;
        let workers = node_list(p, "worker_nodes")?.unwrap_or_default();
        if let Some(both) = control_planes
            .as_ref()
            .and_then(|cps| workers.iter().find(|w| cps.contains(w)))
        {
            return Err(ModuleError::new(format!(
                "worker_nodes: {both} is also listed in control_plane_nodes; a node is either a control plane or a worker"
            )));
        }
        Ok(Args {
            connection,
            target,
            timeout,
            control_planes,
            workers,
        })
    }
}

/// A list option of node addresses: None when not given; entries must be plain hosts.
pub(crate) fn node_list(p: &Params, name: &str) -> Result<Option<Vec<String>>, ModuleError> {
    let Some(items) = p.str_list(name) else {
        return Ok(None);
    };
    let mut out: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let node = item.trim();
        if node.is_empty() {
            return Err(ModuleError::new(format!(
                "{name}[{i}] must be a node address, got an empty string"
            )));
        }
        if node.contains(char::is_whitespace) || node.contains('/') || node.contains(',') {
            return Err(ModuleError::new(format!(
                "{name}[{i}] must be a node address such as 10.5.0.2 (no scheme, path or spaces), got {node:?}"
            )));
        }
        if out.iter().any(|n| n == node) {
            return Err(ModuleError::new(format!("{name}: {node} is listed twice")));
        }
        out.push(node.to_string());
    }
    if name == "control_plane_nodes" && out.is_empty() {
        return Err(ModuleError::new(
            "control_plane_nodes must list at least one control plane; leave it out to discover them from etcd members",
        ));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": "10.5.0.2"}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    fn refusal(extra: serde_json::Value) -> String {
        args(extra).err().expect("refused").msg
    }

    #[test]
    fn defaults_discover_the_control_planes_and_wait_five_minutes() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert!(!a.target.routed());
        assert_eq!(a.timeout, Duration::from_secs(300));
        assert_eq!(a.control_planes, None);
        assert!(a.workers.is_empty());
    }

    #[test]
    fn node_lists_are_trimmed_and_kept_in_order() {
        let a = args(json!({"control_plane_nodes": [" 10.5.0.2", "10.5.0.3 "],
                            "worker_nodes": ["10.5.0.4"], "endpoint": "10.5.0.9"}))
        .unwrap();
        assert_eq!(
            a.control_planes.as_deref(),
            Some(&["10.5.0.2".to_string(), "10.5.0.3".to_string()][..])
        );
        assert_eq!(a.workers, ["10.5.0.4"]);
        assert!(a.target.routed());
    }

    #[test]
    fn a_bad_node_list_names_the_option_and_the_entry() {
        let msg = refusal(json!({"worker_nodes": ["10.5.0.4", " "]}));
        assert_eq!(
            msg,
            "worker_nodes[1] must be a node address, got an empty string"
        );
        let msg = refusal(json!({"control_plane_nodes": ["https://10.5.0.2"]}));
        assert!(
            msg.starts_with("control_plane_nodes[0] must be a node address such as"),
            "{msg}"
        );
        let msg = refusal(json!({"worker_nodes": ["10.5.0.4", "10.5.0.4"]}));
        assert_eq!(msg, "worker_nodes: 10.5.0.4 is listed twice");
        let msg = refusal(json!({"control_plane_nodes": []}));
        assert!(
            msg.starts_with("control_plane_nodes must list at least one"),
            "{msg}"
        );
        // An empty worker list is no list of workers.
        assert!(args(json!({"worker_nodes": []})).is_ok());
    }

    #[test]
    fn a_node_is_a_control_plane_or_a_worker() {
        let msg = refusal(json!({"control_plane_nodes": ["10.5.0.2"],
                                 "worker_nodes": ["10.5.0.2"]}));
        assert!(
            msg.starts_with("worker_nodes: 10.5.0.2 is also listed in control_plane_nodes"),
            "{msg}"
        );
        // Without control_plane_nodes they are discovered, and nothing is checked against them.
        assert!(args(json!({"worker_nodes": ["10.5.0.2"]})).is_ok());
    }

    #[test]
    fn waits_out_of_range_name_their_option() {
        let msg = refusal(json!({"timeout": 86_401}));
        assert!(msg.starts_with("timeout must be between 1 and"), "{msg}");
        let msg = refusal(json!({"connect_timeout": 0}));
        assert!(msg.starts_with("connect_timeout"), "{msg}");
        let msg = refusal(json!({"node": ""}));
        assert!(msg.starts_with("node must be the address"), "{msg}");
    }
}
