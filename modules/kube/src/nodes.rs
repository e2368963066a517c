//! Nodes: what the kubelet reports (Ready, version, boot id) and the cordon an operator sets.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::access::Kube;
use crate::error::{KubeError, KubeErrorKind, Result};
use crate::objects::{NODES, Node, condition_true};

/// How often a wait for a Node asks again (talosctl polls every 5 s; a shorter interval costs the
/// API server little and ends the wait sooner).
const POLL: Duration = Duration::from_secs(1);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub unschedulable: bool,
    pub ready: bool,
    pub kubelet_version: String,
    pub boot_id: String,
}

impl NodeState {
    pub(crate) fn from_node(name: &str, n: &Node) -> NodeState {
        NodeState {
            name: name.to_string(),
            unschedulable: n.spec.unschedulable == Some(true),
            ready: condition_true(&n.status.conditions, "Ready"),
            kubelet_version: n.status.node_info.kubelet_version.clone(),
            boot_id: n.status.node_info.boot_id.clone(),
        }
    }
}

impl Kube {
    pub async fn node(&self, name: &str) -> Result<NodeState> {
        let n: Node = self
            .get(NODES, name)
            .await
            .map_err(|e| self.error(&format!("read Node {name}"), e))?;
        Ok(NodeState::from_node(name, &n))
    }

    /// Cordon (`true`) or uncordon: the strategic merge patch kubectl's cordon helper sends
    /// (`spec.unschedulable: true`, and null to clear it; k8s.io/kubectl pkg/drain/cordon.go).
    pub async fn set_unschedulable(&self, name: &str, unschedulable: bool) -> Result<()> {
        let value = if unschedulable {
            json!(true)
        } else {
            json!(null)
        };
        let patch = json!({"spec": {"unschedulable": value}});
        let what = if unschedulable { "cordon" } else { "uncordon" };
        self.patch_strategic(NODES, name, patch)
            .await
            .map_err(|e| self.error(&format!("{what} Node {name}"), e))?;
        Ok(())
    }

    /// Deletes the Node object, as `kubectl delete node` does after a machine is removed: its
    /// pods go with it (the pod garbage collector), and a kubelet that still runs would register it
    /// again. `false` when there was no such Node.
    pub async fn delete_node(&self, name: &str) -> Result<bool> {
        self.delete_object(NODES, name)
            .await
            .map_err(|e| self.error(&format!("delete Node {name}"), e))
    }

    /// Waits until the Node reports Ready and `until` holds for it (e.g. a new boot id), asking
    /// every second; errors while the API server restarts are part of waiting.
    pub async fn wait_node(
        &self,
        name: &str,
        deadline: Instant,
        until: impl Fn(&NodeState) -> bool,
    ) -> Result<NodeState> {
        loop {
            let last = match self.node(name).await {
                Ok(n) if n.ready && until(&n) => return Ok(n),
                Ok(n) if n.ready => format!(
                    "Ready, kubelet {}, boot id {}",
                    n.kubelet_version, n.boot_id
                ),
                Ok(_) => "not Ready".to_string(),
                Err(e) => e.message,
            };
            if Instant::now() + POLL > deadline {
                return Err(KubeError::new(
                    KubeErrorKind::Other,
                    format!("Node {name} did not become Ready in time (last seen: {last})"),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
