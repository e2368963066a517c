//! `talos_info`'s options, checked once before anything connects.

use ferro_ansible_protocol::{ModuleError, Params};

use crate::shared::connection::{ConnectionArgs, Target, node_target};

pub struct Args {
    pub connection: ConnectionArgs,
    pub nodes: Nodes,
}

/// Which nodes are read.
pub enum Nodes {
    /// `node`: its facts are the task's result, and a node that does not answer fails it.
    One(Target),
    /// `nodes`: read concurrently, each one's facts or error reported in the order given.
    Many(Vec<Target>),
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let nodes = match p.str_list("nodes") {
            Some(list) => Nodes::Many(
                list.iter()
                    .enumerate()
                    .map(|(i, n)| connection.target(n, &format!("nodes[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => Nodes::One(node_target(p, &connection)?),
        };
        Ok(Args { connection, nodes })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::shared::options::params;

    fn args(given: serde_json::Value) -> Result<Args, ModuleError> {
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn node_reads_one_node_with_the_default_connect_timeout() {
        let a = args(json!({"node": " 10.5.0.2 "})).unwrap();
        let Nodes::One(t) = &a.nodes else {
            panic!("node reads one node")
        };
        assert_eq!(t.node, "10.5.0.2");
        assert!(!t.routed());
        assert_eq!(a.connection.connect_timeout, Duration::from_secs(10));
    }

    #[test]
    fn nodes_are_read_in_order_through_the_endpoint() {
        let a = args(json!({"nodes": ["10.5.0.2", " 10.5.0.3"], "endpoint": "10.5.0.1"})).unwrap();
        let Nodes::Many(targets) = &a.nodes else {
            panic!("nodes reads many nodes")
        };
        let names: Vec<&str> = targets.iter().map(|t| t.node.as_str()).collect();
        assert_eq!(names, ["10.5.0.2", "10.5.0.3"]);
        assert!(targets.iter().all(|t| t.endpoint == "10.5.0.1"));
        let a = args(json!({"nodes": []})).unwrap();
        assert!(matches!(&a.nodes, Nodes::Many(t) if t.is_empty()));
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(json!({"node": "  "})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
        let e = args(json!({"nodes": ["10.5.0.2", ""]})).err().unwrap();
        assert!(
            e.msg.starts_with("nodes[1] must be the address"),
            "{}",
            e.msg
        );
        let e = args(json!({"node": "10.5.0.2", "connect_timeout": 0}))
            .err()
            .unwrap();
        assert!(
            e.msg.starts_with("connect_timeout must be between"),
            "{}",
            e.msg
        );
    }
}
