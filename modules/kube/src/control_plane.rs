//! What the Kubernetes upgrade waits on: a control plane's static pod (the mirror pod the kubelet
//! posts for it) and a Node found by its address, the way talosctl finds them (upstream
//! `pkg/cluster/kubernetes/talos_managed.go` `checkPodStatus` and `kubelet.go`
//! `checkNodeKubeletVersion` at v1.13.9: pods of `kube-system` with label `k8s-app=<component>`
//! whose `status.hostIP` is the node, Nodes with the node among `status.addresses`), and how many
//! objects of an API resource Kubernetes still stores. When Talos names the node's Node
//! (COSI `k8s/Nodename`), pods and the Node are found by that name instead, so the address the
//! controller uses need not be one the node reports.

use kube::core::params::ListParams;

use crate::access::Kube;
use crate::error::Result;
use crate::nodes::NodeState;
use crate::objects::{NODES, Node, Pod, condition_true, pods};

/// The annotation Talos writes on a static pod: the version of the config resource it runs.
pub const CONFIG_VERSION_ANNOTATION: &str = "talos.dev/config-version";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticPodState {
    pub name: String,
    pub image: String,
    pub config_version: Option<String>,
    pub ready: bool,
}

impl Kube {
    /// The static pod of `component` on a node, if the API server lists one: the pod bound to
    /// the Node `node_name` when the node's Kubernetes name is known (so an address the
    /// controller uses, a NAT or a VIP, need not be the node's own), else the pod whose host IP
    /// is `address`, as talosctl matches it.
    pub async fn static_pod(
        &self,
        component: &str,
        node_name: Option<&str>,
        address: &str,
    ) -> Result<Option<StaticPodState>> {
        let params = ListParams::default().labels(&format!("k8s-app={component}"));
        let list = self
            .list::<Pod>(&pods(Some("kube-system")), &params)
            .await
            .map_err(|e| self.error(&format!("list the {component} pods"), e))?;
        Ok(list
            .items
            .into_iter()
            .find(|p| match node_name {
                Some(name) => p.spec.node_name == name,
                None => p.status.host_ip == address,
            })
            .map(|p| StaticPodState {
                ready: condition_true(&p.status.conditions, "Ready"),
                image: p
                    .spec
                    .containers
                    .first()
                    .map(|c| c.image.clone())
                    .unwrap_or_default(),
                config_version: p
                    .metadata
                    .annotations
                    .get(CONFIG_VERSION_ANNOTATION)
                    .cloned(),
                name: p.metadata.name,
            }))
    }

    /// The Node that lists `address` among its addresses.
    pub async fn node_by_address(&self, address: &str) -> Result<Option<NodeState>> {
        let list = self
            .list::<Node>(NODES, &ListParams::default())
            .await
            .map_err(|e| self.error("list Nodes", e))?;
        Ok(list
            .items
            .iter()
            .find(|n| n.status.addresses.iter().any(|a| a.address == address))
            .map(|n| NodeState::from_node(&n.metadata.name, n)))
    }

    /// How many objects the API server stores at `collection` (a path such as
    /// `/apis/resource.k8s.io/v1alpha3/podschedulingcontexts`); None when it does not serve
    /// that resource at all (404), which is what a removed API looks like once it is gone.
    pub async fn count(&self, collection: &str) -> Result<Option<usize>> {
        match self
            .list::<serde::de::IgnoredAny>(collection, &ListParams::default())
            .await
        {
            Ok(list) => Ok(Some(list.items.len())),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(self.error(&format!("list {collection}"), e)),
        }
    }
}
