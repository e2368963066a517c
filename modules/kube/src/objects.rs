//! The few fields of Nodes, Pods and PodDisruptionBudgets the drain and the upgrade read, decoded from the API
//! server's JSON into small structs of our own. k8s-openapi's full `Pod` and `Node` types would
//! decode everything (a Pod's spec alone has dozens of nested types) and make the one program
//! several MiB larger for fields nothing reads (docs/decisions/0007-kubernetes-client.md);
//! requests are built with kube's own request builders (`transport.rs` sends them).

use std::collections::BTreeMap;

use kube::core::Request;
use kube::core::params::{DeleteParams, GetParams, ListParams, Patch, PatchParams};
use kube::core::subresource::EvictParams;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::access::Kube;
use crate::transport::RequestError;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owner_references: Vec<OwnerRef>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub controller: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
}

/// Whether the condition `kind` is `True` (how Nodes and Pods say Ready).
pub fn condition_true(conditions: &[Condition], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.kind == kind && c.status == "True")
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Node {
    pub metadata: Meta,
    pub spec: NodeSpec,
    pub status: NodeStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeSpec {
    pub unschedulable: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeStatus {
    pub conditions: Vec<Condition>,
    pub addresses: Vec<NodeAddress>,
    pub node_info: NodeInfo,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeAddress {
    pub address: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeInfo {
    pub kubelet_version: String,
    #[serde(rename = "bootID")]
    pub boot_id: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: Meta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    pub containers: Vec<Container>,
    pub node_name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Container {
    pub image: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    pub phase: String,
    #[serde(rename = "hostIP")]
    pub host_ip: String,
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Budget {
    pub metadata: Meta,
    pub spec: BudgetSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct BudgetSpec {
    pub selector: Option<Selector>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct List<T> {
    pub items: Vec<T>,
}

pub const NODES: &str = "/api/v1/nodes";

pub fn pods(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("/api/v1/namespaces/{ns}/pods"),
        None => "/api/v1/pods".into(),
    }
}

pub fn daemonsets(namespace: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/daemonsets")
}

pub fn budgets(namespace: &str) -> String {
    format!("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")
}

/// A request from kube's builders, its build error as a transport error.
pub(crate) fn built(
    r: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<http::Request<Vec<u8>>, RequestError> {
    r.map_err(|e| RequestError::Transport(format!("cannot build the request: {e}")))
}

/// A plain GET of `path` (a discovery document: kube's builders only build object and collection
/// paths).
pub(crate) fn get_path(path: &str) -> Result<http::Request<Vec<u8>>, RequestError> {
    http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| RequestError::Transport(format!("cannot build the request: {e}")))
}

impl Kube {
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        collection: &str,
        name: &str,
    ) -> Result<T, RequestError> {
        let req = built(Request::new(collection).get(name, &GetParams::default()))?;
        self.transport.send(req).await
    }

    pub(crate) async fn list<T: DeserializeOwned>(
        &self,
        collection: &str,
        params: &ListParams,
    ) -> Result<List<T>, RequestError> {
        let req = built(Request::new(collection).list(params))?;
        self.transport.send(req).await
    }

    pub(crate) async fn patch_strategic(
        &self,
        collection: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), RequestError> {
        let req = built(Request::new(collection).patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        ))?;
        self.transport
            .send::<serde_json::Value>(req)
            .await
            .map(|_| ())
    }

    /// DELETE of one object; a 404 is `Ok(false)`: already gone.
    pub(crate) async fn delete_object(
        &self,
        collection: &str,
        name: &str,
    ) -> Result<bool, RequestError> {
        let req = built(Request::new(collection).delete(name, &DeleteParams::default()))?;
        match self.transport.send::<serde_json::Value>(req).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), RequestError> {
        let req = built(Request::new(pods(Some(namespace))).evict(name, &EvictParams::default()))?;
        self.transport
            .send::<serde_json::Value>(req)
            .await
            .map(|_| ())
    }
}
