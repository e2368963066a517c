//! `talos_resource_info`'s options, checked once before anything connects.

use ferro_ansible_protocol::{ModuleError, Params};

use super::readable_type;
use crate::shared::connection::{ConnectionArgs, Target, node_target};

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `type`, resolved: the type's full name when the table knows it, else as written (in full),
    /// for the node's own definition to judge. Never a type the table marks sensitive.
    pub kind: String,
    /// `namespace`, else the known type's default one; None when neither is known (the node's
    /// definition of the type names it). Never `secrets`.
    pub namespace: Option<String>,
    /// `id`: the one resource to read; None to list every one of the type.
    pub id: Option<String>,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let written = p.str("type").unwrap_or_default().trim();
        let given_namespace = p.str("namespace").map(str::trim).filter(|s| !s.is_empty());
        let id = p
            .str("id")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let (kind, namespace) = readable_type(written, given_namespace)?;
        Ok(Args {
            connection,
            target,
            kind,
            namespace,
            id,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": " 10.5.0.2 ", "type": " disks "}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn an_alias_lists_its_type_in_its_default_namespace() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(a.kind, "Disks.block.talos.dev");
        assert_eq!(a.namespace.as_deref(), Some("runtime"));
        assert_eq!(a.id, None);
    }

    #[test]
    fn namespace_and_id_are_trimmed_and_blanks_left_out() {
        let a =
            args(json!({"namespace": " k8s ", "type": "nodename", "id": " nodename "})).unwrap();
        assert_eq!(a.kind, "Nodenames.kubernetes.talos.dev");
        assert_eq!(a.namespace.as_deref(), Some("k8s"));
        assert_eq!(a.id.as_deref(), Some("nodename"));
        let a = args(json!({"namespace": " ", "id": ""})).unwrap();
        assert_eq!(a.namespace.as_deref(), Some("runtime"));
        assert_eq!(a.id, None);
        // A full name the table does not know is passed on, namespace and all, for the node.
        let a = args(json!({"type": "Widgets.example.dev"})).unwrap();
        assert_eq!(a.kind, "Widgets.example.dev");
        assert_eq!(a.namespace, None);
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(json!({"type": " "})).err().unwrap();
        assert!(
            e.msg.starts_with("type must name a resource type"),
            "{}",
            e.msg
        );
        let e = args(json!({"type": "nosuchthing"})).err().unwrap();
        assert!(e.msg.starts_with("type \"nosuchthing\""), "{}", e.msg);
        let e = args(json!({"namespace": " secrets "})).err().unwrap();
        assert!(e.msg.starts_with("namespace secrets"), "{}", e.msg);
        let e = args(json!({"type": "MachineConfigs.config.talos.dev"}))
            .err()
            .unwrap();
        assert!(e.msg.contains("may hold secrets"), "{}", e.msg);
        let e = args(json!({"node": ""})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
    }
}
