//! Talos's cluster health checks that ask the Kubernetes API, run against the real API server as
//! `talosctl health` runs them: the same requests, the same pass conditions, the same texts
//! (`pkg/cluster/check/kubernetes.go` and `default.go` @ v1.14.1; `NodesMatch` in
//! `pkg/cluster/cluster.go`). What they read is then what the real controllers and the simulated
//! kubelets wrote, not the model.

use std::net::{Ipv4Addr, SocketAddr};

use serde_json::Value;

use super::RealKubernetes;
use super::client::Client;
use crate::state::Shared;

/// A check that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    /// Upstream's `conditions.ErrSkipAssertion`: reported as `SKIP`, and the next check runs.
    Skipped,
}

/// The checks of `DefaultClusterChecks` that list Kubernetes objects, by their descriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum K8sCheck {
    NodesReported,
    ControlPlaneComponentsReady,
    NodesReady,
    KubeProxyReady,
    CoreDnsReady,
    NodesSchedulable,
}

impl K8sCheck {
    pub fn named(description: &str) -> Option<K8sCheck> {
        Some(match description {
            "all k8s nodes to report" => K8sCheck::NodesReported,
            "all control plane components to be ready" => K8sCheck::ControlPlaneComponentsReady,
            "all k8s nodes to report ready" => K8sCheck::NodesReady,
            "kube-proxy to report ready" => K8sCheck::KubeProxyReady,
            "coredns to report ready" => K8sCheck::CoreDnsReady,
            "all k8s nodes to report schedulable" => K8sCheck::NodesSchedulable,
            _ => return None,
        })
    }
}

/// What a health check was asked about, as the node that runs it knows it.
pub struct Asked<'a> {
    pub control_planes: &'a [String],
    pub workers: &'a [String],
    /// The node's BootstrapManifestsConfig's CNI name; None without one (`cniDisabledStatus`
    /// skips the checks that need a CNI then, and for `none`).
    pub cni: Option<String>,
    /// The cluster endpoint of the node's config: where the kubeconfig Talos gives points.
    pub endpoint: String,
    pub ca: Option<(String, String)>,
}

/// Runs one check once; Err is the text Talos reports while it fails.
pub fn evaluate(
    rk: &RealKubernetes,
    check: K8sCheck,
    asked: &Asked<'_>,
) -> Result<Verdict, String> {
    let cni_disabled = asked.cni.as_deref().is_none_or(|name| name == "none");
    if cni_disabled && matches!(check, K8sCheck::NodesReady | K8sCheck::CoreDnsReady) {
        return Ok(Verdict::Skipped);
    }
    let api = Api::new(rk, asked)?;
    match check {
        K8sCheck::NodesReported => {
            let nodes = api.list("/api/v1/nodes")?;
            let expected: Vec<&String> = asked.control_planes.iter().chain(asked.workers).collect();
            nodes_match(&expected, nodes.iter().map(node_ips).collect())?;
        }
        K8sCheck::ControlPlaneComponentsReady => control_plane_components(&api, asked)?,
        K8sCheck::NodesReady => {
            let nodes = api.list("/api/v1/nodes")?;
            let names = not_ready(&nodes);
            if !names.is_empty() {
                return Err(format!("some nodes are not ready: [{}]", names.join(" ")));
            }
        }
        K8sCheck::KubeProxyReady => {
            let sets = api.list(
                "/apis/apps/v1/namespaces/kube-system/daemonsets?labelSelector=k8s-app%3Dkube-proxy",
            )?;
            let replicas = sets
                .first()
                .and_then(|d| d["status"]["desiredNumberScheduled"].as_u64())
                .unwrap_or(0);
            if replicas == 0 {
                return Ok(Verdict::Skipped);
            }
            pods_ready(&api, replicas, "k8s-app=kube-proxy")?;
        }
        K8sCheck::CoreDnsReady => {
            let deployments = api.list(
                "/apis/apps/v1/namespaces/kube-system/deployments?labelSelector=k8s-app%3Dkube-dns",
            )?;
            let Some(deployment) = deployments.first() else {
                return Ok(Verdict::Skipped);
            };
            let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(0);
            pods_ready(&api, replicas, "k8s-app=kube-dns")?;
        }
        K8sCheck::NodesSchedulable => {
            let nodes = api.list("/api/v1/nodes")?;
            // Upstream stops at the first one (a `break`): the text names one node.
            if let Some(name) = nodes
                .iter()
                .find(|n| n["spec"]["unschedulable"] == true)
                .and_then(|n| n["metadata"]["name"].as_str())
            {
                return Err(format!("some nodes are not schedulable: [{name}]"));
            }
        }
    }
    Ok(Verdict::Passed)
}

/// The text client-go gives when nothing listens at the endpoint.
pub fn dial_refused(endpoint: &str, path: &str) -> String {
    let dial = endpoint
        .trim_start_matches("https://")
        .trim_end_matches('/');
    format!("Get \"{endpoint}{path}\": dial tcp {dial}: connect: connection refused")
}

/// The admin client and the API server the kubeconfig points at.
struct Api<'a> {
    client: Client,
    server: SocketAddr,
    endpoint: &'a str,
}

impl<'a> Api<'a> {
    fn new(rk: &RealKubernetes, asked: &'a Asked<'_>) -> Result<Api<'a>, String> {
        let endpoint = asked.endpoint.trim_end_matches('/');
        let refused = || dial_refused(endpoint, "/api/v1/nodes");
        let servers = rk.servers();
        // The endpoint is a control plane's address, or a name or VIP in front of all of them.
        let at_endpoint = endpoint_address(endpoint);
        let server = match at_endpoint {
            Some(addr) if servers.iter().any(|(_, s)| s.ip() == addr.ip()) => servers
                .iter()
                .find(|(_, s)| *s == addr)
                .map(|(_, s)| *s)
                .ok_or_else(refused)?,
            _ => servers.first().map(|(_, s)| *s).ok_or_else(refused)?,
        };
        let ca = asked.ca.as_ref().ok_or_else(refused)?;
        let client = rk
            .kubelets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .client("admin", &["system:masters"], ca)
            .ok_or_else(refused)?;
        Ok(Api {
            client,
            server,
            endpoint,
        })
    }

    /// The items of a list; Err with client-go's text when the request fails.
    fn list(&self, path: &str) -> Result<Vec<Value>, String> {
        let answer =
            self.client
                .get(self.server, path)
                .map_err(|e| match e.contains("refused") {
                    true => dial_refused(self.endpoint, path),
                    false => format!("Get \"{}{path}\": {e}", self.endpoint),
                })?;
        if !answer.ok() {
            let why = answer.body["message"].as_str().unwrap_or("unknown error");
            return Err(why.to_owned());
        }
        Ok(answer.body["items"].as_array().cloned().unwrap_or_default())
    }
}

fn endpoint_address(endpoint: &str) -> Option<SocketAddr> {
    let hostport = endpoint.trim_start_matches("https://");
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        // `DefaultControlPlanePort` when the endpoint names none.
        None => (hostport, 6443),
    };
    Some(SocketAddr::new(host.parse::<Ipv4Addr>().ok()?.into(), port))
}

/// The node's InternalIP and ExternalIP addresses (`K8sAllNodesReportedAssertion`).
fn node_ips(node: &Value) -> Vec<String> {
    node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["type"] == "InternalIP" || a["type"] == "ExternalIP")
        .filter_map(|a| a["address"].as_str().map(String::from))
        .collect()
}

/// Upstream's `NodesMatch`: each expected node (one address each, as `--control-plane-nodes`
/// gives them) takes a distinct Kubernetes node sharing an address; none may be left over.
fn nodes_match(expected: &[&String], mut actual: Vec<Vec<String>>) -> Result<(), String> {
    for ip in expected {
        let Some(found) = actual.iter().position(|ips| ips.contains(ip)) else {
            return Err(format!("can't find expected node with IPs [{ip:?}]"));
        };
        actual.remove(found);
    }
    if actual.is_empty() {
        return Ok(());
    }
    let mut left: Vec<String> = actual.into_iter().flatten().collect();
    left.sort_by_key(|ip| ip.parse::<Ipv4Addr>().ok());
    let quoted: Vec<String> = left.iter().map(|ip| format!("{ip:?}")).collect();
    Err(format!("unexpected nodes with IPs [{}]", quoted.join(" ")))
}

/// `K8sFullControlPlaneAssertion`: the Nodes labelled control plane are the control planes
/// asked about, and each component has one pod per such Node, none of them not Ready.
fn control_plane_components(api: &Api<'_>, asked: &Asked<'_>) -> Result<(), String> {
    let nodes = api.list("/api/v1/nodes")?;
    let control_planes: Vec<Vec<String>> = nodes
        .iter()
        .filter(|n| n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"].is_string())
        .map(node_ips)
        .collect();
    let count = control_planes.len();
    let expected: Vec<&String> = asked.control_planes.iter().collect();
    nodes_match(&expected, control_planes)?;
    for app in [
        "kube-apiserver",
        "kube-scheduler",
        "kube-controller-manager",
    ] {
        // `k8s-app = <app>`, spaces and all, as upstream writes the selector.
        let path =
            format!("/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%20%3D%20{app}");
        let pods: Vec<Value> = api
            .list(&path)
            .map_err(|e| format!("error listing pods for app {app}: {e}"))?
            .into_iter()
            .filter(|p| {
                p["metadata"]["annotations"]["checkpointer.alpha.coreos.com/checkpoint-of"]
                    .is_null()
            })
            .collect();
        if pods.len() != count {
            return Err(format!(
                "expected number of pods for {app} to be {count}, got {}",
                pods.len()
            ));
        }
        let names = not_ready(&pods);
        if !names.is_empty() {
            return Err(format!(
                "some pods are not ready for {app}: [{}]",
                names.join(" ")
            ));
        }
    }
    Ok(())
}

/// The names of the objects (Nodes, pods) whose Ready condition is there and not True.
fn not_ready(objects: &[Value]) -> Vec<&str> {
    objects
        .iter()
        .filter(|o| condition_not_true(o, "Ready"))
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect()
}

/// An object has the condition and it is not True (one without it counts as fine, as upstream
/// only looks for a condition that says otherwise).
fn condition_not_true(object: &Value, kind: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] != "True")
}

/// `K8sPodReadyAssertion` for the pods in kube-system matching `selector`.
fn pods_ready(api: &Api<'_>, replicas: u64, selector: &str) -> Result<(), String> {
    let path = format!(
        "/api/v1/namespaces/kube-system/pods?labelSelector={}",
        selector.replace('=', "%3D")
    );
    ready_pods_are(&api.list(&path)?, replicas, selector)
}

/// `K8sPodReadyAssertion`'s verdict on the pods listed.
fn ready_pods_are(pods: &[Value], replicas: u64, selector: &str) -> Result<(), String> {
    let namespace = "kube-system";
    if pods.is_empty() {
        return Err(format!(
            "no pods found for namespace {namespace:?} and label selector {selector:?}"
        ));
    }
    let (mut ready, mut not_ready) = (0u64, Vec::new());
    for pod in pods {
        let finished = pod["status"]["containerStatuses"]
            .as_array()
            .is_none_or(|cs| cs.iter().all(|c| !c["state"]["terminated"].is_null()));
        // Going, failed or completed pods are not counted (a pod without container statuses
        // yet counts as completed there too).
        if !pod["metadata"]["deletionTimestamp"].is_null()
            || pod["status"]["phase"] == "Failed"
            || finished
        {
            continue;
        }
        let is_ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if is_ready {
            ready += 1;
        } else if let Some(name) = pod["metadata"]["name"].as_str() {
            not_ready.push(name);
        }
    }
    if ready == 0 {
        return Err(format!(
            "no ready pods found for namespace {namespace:?} and label selector {selector:?}"
        ));
    }
    if !not_ready.is_empty() {
        return Err(format!(
            "some pods are not ready: [{}]",
            not_ready.join(" ")
        ));
    }
    if ready != replicas {
        return Err(format!("expected {replicas} ready pods, got {ready}"));
    }
    Ok(())
}

/// What node `idx` knows for the checks: its config's endpoint and CA, its manifests' CNI.
pub fn asked<'a>(
    shared: &Shared,
    idx: usize,
    control_planes: &'a [String],
    workers: &'a [String],
) -> Asked<'a> {
    let st = shared.lock();
    let node = &st.nodes[idx];
    let cfg = node.active.as_ref();
    Asked {
        control_planes,
        workers,
        cni: crate::services::k8s_configs::manifests(node).map(|m| m.cni_name),
        endpoint: cfg.map(|c| c.endpoint()).unwrap_or_default(),
        ca: cfg.and_then(|c| c.k8s_ca()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nodes_match_both_ways_with_upstreams_texts() {
        let a = "10.5.0.2".to_string();
        let b = "10.5.0.3".to_string();
        assert_eq!(
            nodes_match(&[&a, &b], vec![ips(&["10.5.0.3"]), ips(&["10.5.0.2"])]),
            Ok(())
        );
        assert_eq!(
            nodes_match(&[&a, &b], vec![ips(&["10.5.0.2"])]),
            Err("can't find expected node with IPs [\"10.5.0.3\"]".into())
        );
        assert_eq!(
            nodes_match(
                &[&a],
                vec![ips(&["10.5.0.10"]), ips(&["10.5.0.2"]), ips(&["10.5.0.9"])]
            ),
            Err("unexpected nodes with IPs [\"10.5.0.9\" \"10.5.0.10\"]".into())
        );
    }

    #[test]
    fn the_endpoint_names_a_server_or_none() {
        assert_eq!(
            endpoint_address("https://127.0.10.1:6443"),
            Some("127.0.10.1:6443".parse().unwrap())
        );
        assert_eq!(endpoint_address("https://cluster.local:6443"), None);
    }

    #[test]
    fn pods_are_ready_as_upstream_counts_them() {
        let running = |name: &str, ready: &str| {
            serde_json::json!({"metadata": {"name": name}, "status": {"phase": "Running",
                "containerStatuses": [{"state": {"running": {}}}],
                "conditions": [{"type": "Ready", "status": ready}]}})
        };
        let pending =
            serde_json::json!({"metadata": {"name": "new"}, "status": {"phase": "Pending"}});
        let sel = "k8s-app=kube-proxy";
        assert_eq!(
            ready_pods_are(&[running("a", "True"), running("b", "True")], 2, sel),
            Ok(())
        );
        // Not yet reporting containers: not counted either way.
        assert_eq!(
            ready_pods_are(&[running("a", "True"), pending.clone()], 2, sel),
            Err("expected 2 ready pods, got 1".into())
        );
        assert_eq!(
            ready_pods_are(&[running("a", "True"), running("b", "False")], 2, sel),
            Err("some pods are not ready: [b]".into())
        );
        assert_eq!(
            ready_pods_are(&[pending], 1, sel),
            Err("no ready pods found for namespace \"kube-system\" and label selector \"k8s-app=kube-proxy\"".into())
        );
        assert_eq!(
            ready_pods_are(&[], 1, sel),
            Err("no pods found for namespace \"kube-system\" and label selector \"k8s-app=kube-proxy\"".into())
        );
    }
}
