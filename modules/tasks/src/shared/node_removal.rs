//! What talos_reset does about the node's Kubernetes side: the etcd guard before a graceful reset
//! of a control plane, and, with `delete_kubernetes_node`, the Node object deleted once the machine
//! has left (what the upstream docs have operators do with `kubectl delete node` after
//! `talosctl reset`: a Node left behind fails Talos's health check, `some nodes are not ready`
//! and `unexpected nodes with IPs`, `pkg/cluster/check/kubernetes.go` @ v1.13.9).

use ferro_talos_client::TalosClient;
use ferro_talos_client::proto::resource::config::MachineType;
use ferro_talos_kube::Kube;

use crate::shared::etcd_members;
use crate::shared::kube_access::KubeCredentials;
use crate::shared::kubernetes_config::cluster_endpoint;
use crate::shared::live_config::{self, ReadError};

/// Refuses a graceful reset of a control plane that etcd would not let go: the Reset sequence
/// leaves etcd before it wipes anything, and a failed leave aborts it
/// (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go` Reset @ v1.13.9), so the
/// node would only be drained, then rebooted (machined's fatal-sequence handling). Err is the
/// reason, in words.
pub async fn etcd_guard(client: &TalosClient, node: &str) -> Result<(), String> {
    let machine_type = client.machine_type().await.map_err(|e| e.to_string())?;
    if !matches!(machine_type, MachineType::ControlPlane | MachineType::Init) {
        return Ok(());
    }
    // No members to read: etcd was never bootstrapped (the node's etcd waits to join, and a
    // member list there would block until its deadline: etcd_members::members_of asks briefly),
    // or no control plane's etcd answers; there is no quorum to keep, and Talos's LeaveEtcd
    // skips a node that never joined. A list that fails where etcd runs (no leader: the quorum
    // is lost) is a refusal: the leave would fail the same way.
    let members = match etcd_members::members_of(client).await {
        etcd_members::Members::Present(members) => members,
        etcd_members::Members::Unknown(why) => {
            return Err(format!("etcd's members could not be listed ({why})"));
        }
        etcd_members::Members::NotRunning { .. } | etcd_members::Members::Maintenance => {
            return Ok(());
        }
    };
    let host = node
        .trim_start_matches('[')
        .split(']')
        .next()
        .unwrap_or(node);
    let hostname = client.hostname().await.unwrap_or_default();
    let Some(own) = members
        .iter()
        .find(|m| etcd_members::host(m).as_deref() == Some(host) || m.hostname == hostname)
        .map(|m| m.id)
    else {
        return Ok(());
    };
    let checked = etcd_members::check_all(client, members).await;
    etcd_members::removal_verdict(&checked, own)
}

/// The node's Node object, reached with the task's Kubernetes credentials.
pub struct KubeNode {
    kube: Kube,
    pub name: String,
}

/// Finds the node's Node before it is reset (its name and the cluster's API server are only
/// known while it runs its config). None when the node does not register with Kubernetes.
pub async fn find(
    client: &TalosClient,
    node: &str,
    creds: &KubeCredentials,
) -> Result<Option<KubeNode>, String> {
    let Some(name) = client
        .nodename()
        .await
        .map_err(|e| format!("{node}: cannot read its Kubernetes node name: {e}"))?
    else {
        return Ok(None);
    };
    let config = match live_config::read(client).await {
        Ok(c) => c,
        Err(ReadError::Client(e)) => return Err(e.to_string()),
        Err(ReadError::Unusable(why)) => {
            return Err(format!(
                "{node}: cannot use the node's machine config: {why}"
            ));
        }
    };
    let endpoint = cluster_endpoint(&config);
    let access = creds
        .access(
            node,
            client,
            endpoint,
            "set delete_kubernetes_node: false and delete the Node yourself",
        )
        .await?;
    let kube = access.connect().await.map_err(|e| format!("{node}: {e}"))?;
    Ok(Some(KubeNode { kube, name }))
}

impl KubeNode {
    /// Whether the Node exists now.
    pub async fn exists(&self) -> Result<bool, String> {
        match self.kube.node(&self.name).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind == ferro_talos_kube::KubeErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Deletes the Node; false when it was gone already.
    pub async fn delete(&self) -> Result<bool, String> {
        self.kube
            .delete_node(&self.name)
            .await
            .map_err(|e| e.to_string())
    }
}
