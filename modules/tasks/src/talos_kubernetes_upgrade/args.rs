//! `talos_kubernetes_upgrade`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};
use semver::Version;

use super::DEFAULT_TIMEOUT_SECS;
use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::kubernetes_manifests::{self, ManifestSettings};
use crate::shared::options::wait_seconds;
use crate::talos_health::node_list;
use crate::talos_upgrade::parse_version;

pub struct Args {
    pub connection: ConnectionArgs,
    /// `node`: where Talos issues a kubeconfig when no other Kubernetes credentials are given.
    pub target: Target,
    /// `control_plane_nodes`, in their order, each reached through `endpoint` when set.
    pub control_planes: Vec<Target>,
    /// `worker_nodes`, in their order, each reached through `endpoint` when set.
    pub workers: Vec<Target>,
    /// `kubernetes_version`.
    pub version: Version,
    pub pre_pull: bool,
    pub upgrade_kubelet: bool,
    /// `timeout`: how long each component on each node may take.
    pub timeout: Duration,
    /// The bootstrap manifests' sync; None when `sync_manifests: false`.
    pub manifests: Option<ManifestSettings>,
    pub kubeconfig: Option<PathBuf>,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let version = parse_version(p.str("kubernetes_version").unwrap_or_default())
            .map_err(|e| ModuleError::new(format!("kubernetes_version: {e}")))?;
        let control_planes = node_list(p, "control_plane_nodes")?.unwrap_or_default();
        let workers = node_list(p, "worker_nodes")?.unwrap_or_default();
        if let Some(both) = workers.iter().find(|w| control_planes.contains(w)) {
            return Err(ModuleError::new(format!(
                "worker_nodes: {both} is also listed in control_plane_nodes; a node is either a control plane or a worker"
            )));
        }
        let timeout = wait_seconds(p, "timeout", DEFAULT_TIMEOUT_SECS)?;
        let manifests = kubernetes_manifests::settings(p)?;
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let targets = |nodes: &[String], option: &str| -> Result<Vec<Target>, ModuleError> {
            nodes.iter().map(|n| connection.target(n, option)).collect()
        };
        let control_planes = targets(&control_planes, "control_plane_nodes")?;
        let workers = targets(&workers, "worker_nodes")?;
        Ok(Args {
            target,
            control_planes,
            workers,
            version,
            pre_pull: p.bool("pre_pull"),
            upgrade_kubelet: p.bool("upgrade_kubelet"),
            timeout,
            manifests,
            kubeconfig: p.path("kubeconfig"),
            connection,
        })
    }
}

#[cfg(test)]
mod tests {
    use ferro_talos_kube::{InventoryPolicy, Pruning};
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(
            json!({
                "node": "10.5.0.2", "kubernetes_version": "v1.36.3",
                "control_plane_nodes": ["10.5.0.2", " 10.5.0.3 "],
            }),
            extra,
        );
        Args::from_params(&params(super::super::spec(), given))
    }

    fn refusal(extra: serde_json::Value) -> String {
        args(extra).err().expect("refused").msg
    }

    fn nodes(targets: &[Target]) -> Vec<&str> {
        targets.iter().map(|t| t.node.as_str()).collect()
    }

    #[test]
    fn defaults_pre_pull_move_the_kubelets_and_sync_the_manifests() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.version, Version::new(1, 36, 3));
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(nodes(&a.control_planes), ["10.5.0.2", "10.5.0.3"]);
        assert!(a.control_planes.iter().all(|t| !t.routed()));
        assert!(a.workers.is_empty());
        assert!(a.pre_pull && a.upgrade_kubelet);
        assert_eq!(a.timeout, Duration::from_secs(300));
        let m = a.manifests.expect("synced by default");
        assert_eq!(m.pruning, Pruning::Prune);
        assert_eq!(m.policy, InventoryPolicy::AdoptIfNoInventory);
        assert_eq!(m.timeout, Duration::from_secs(300));
        assert_eq!(a.kubeconfig, None);
    }

    #[test]
    fn every_node_goes_through_the_endpoint_when_one_is_set() {
        let a = args(json!({"endpoint": "10.5.0.9", "worker_nodes": ["10.5.0.4"],
                            "pre_pull": false, "upgrade_kubelet": false,
                            "sync_manifests": false, "kubeconfig": "/tmp/kc"}))
        .unwrap();
        assert_eq!(nodes(&a.workers), ["10.5.0.4"]);
        assert!(
            a.control_planes
                .iter()
                .chain(&a.workers)
                .all(Target::routed)
        );
        assert!(a.workers.iter().all(|t| t.endpoint == "10.5.0.9"));
        assert!(!a.pre_pull && !a.upgrade_kubelet);
        assert!(a.manifests.is_none());
        assert_eq!(a.kubeconfig, Some(PathBuf::from("/tmp/kc")));
    }

    #[test]
    fn refusals_name_their_option() {
        let msg = refusal(json!({"kubernetes_version": "latest"}));
        assert!(msg.starts_with("kubernetes_version: "), "{msg}");
        let msg = refusal(json!({"control_plane_nodes": []}));
        assert!(
            msg.starts_with("control_plane_nodes must list at least one"),
            "{msg}"
        );
        let msg = refusal(json!({"worker_nodes": ["10.5.0.4", ""]}));
        assert!(
            msg.starts_with("worker_nodes[1] must be a node address"),
            "{msg}"
        );
        let msg = refusal(json!({"worker_nodes": ["10.5.0.3"]}));
        assert!(
            msg.starts_with("worker_nodes: 10.5.0.3 is also listed in control_plane_nodes"),
            "{msg}"
        );
        let msg = refusal(json!({"timeout": 0}));
        assert!(msg.starts_with("timeout must be between 1 and"), "{msg}");
        let msg = refusal(json!({"manifests_timeout": 0}));
        assert!(
            msg.starts_with("manifests_timeout must be between 1 and"),
            "{msg}"
        );
        let msg = refusal(json!({"connect_timeout": 601}));
        assert!(msg.starts_with("connect_timeout"), "{msg}");
    }
}
