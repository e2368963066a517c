//! The simulated nodes' kubelets against the real API server, each with its own identity
//! (`system:node:<name>` in `system:nodes`, so the Node authorizer and NodeRestriction judge
//! it as they judge a kubelet). What each does, from upstream's kubelet @ v1.36.3:
//! - registers its Node once per start (`registerWithAPIServer`, pkg/kubelet/kubelet_node_status.go),
//!   with its labels and registration taints; a Node deleted while it runs stays gone until
//!   the next boot;
//! - posts the Node's status when it changes, and renews its Lease in `kube-node-lease` every
//!   10 s (a quarter of `NodeLeaseDurationSeconds` 40: `nodeLeaseRenewIntervalFraction` in
//!   pkg/kubelet/kubelet.go, the defaults in pkg/kubelet/apis/config/v1beta1/defaults.go, the
//!   lease controller in k8s.io/component-helpers apimachinery/lease/controller.go). Upstream
//!   checks its status every 10 s (`NodeStatusUpdateFrequency`) and posts an unchanged one every
//!   5 minutes (`NodeStatusReportFrequency`); this one posts an unchanged status every 10 s too,
//!   which changes nothing a client reads;
//! - keeps a mirror pod for each static pod, replaced when the static pod changes
//!   (pkg/kubelet/pod/mirror_client.go);
//! - reports the pods bound to it as running (Ready while the node is) and, for a pod being
//!   deleted, confirms the deletion with a grace period of 0 and the pod's uid as precondition
//!   (the status manager's `canBeDeleted`/`Delete`, pkg/kubelet/status/status_manager.go).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::RealKubernetes;
use super::client::{Answer, Client};
use crate::kube::for_real::{self, KubeletReport};
use crate::mcfg::StoredConfig;
use crate::state::Shared;

const STATUS_EVERY: Duration = Duration::from_secs(10);
const LEASE_EVERY: Duration = Duration::from_secs(10);
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
const CONFIG_VERSION: &str = "talos.dev/config-version";

/// One node's kubelet, for its current boot.
#[derive(Default)]
struct Kubelet {
    boot: String,
    registered: bool,
    /// Its Node was deleted while it ran: it registers again after the next boot.
    gone: bool,
    node_uid: String,
    last_status: Option<Value>,
    last_post: Option<Instant>,
    last_lease: Option<Instant>,
}

#[derive(Default)]
pub struct Kubelets {
    by_node: BTreeMap<usize, Kubelet>,
    clients: BTreeMap<String, Client>,
    /// The node each pod was last seen bound to (the log names the node of an eviction).
    pub pod_nodes: BTreeMap<String, String>,
    /// Talos's side, by node: the cordon its stage last asked for, and when it last looked.
    pub(super) talos: super::talos::TalosState,
    last_error: BTreeMap<usize, String>,
}

impl Kubelets {
    /// A client with identity `cn` in `orgs`, issued from `ca` (cached).
    pub(super) fn client(
        &mut self,
        cn: &str,
        orgs: &[&str],
        ca: &(String, String),
    ) -> Option<Client> {
        let key = format!("{cn}\n{}", ca.0);
        if let Some(c) = self.clients.get(&key) {
            return Some(c.clone());
        }
        let id = super::programs::issue(ca, cn, orgs).ok()?;
        let client = Client::new(&ca.0, &id.cert_pem, &id.key_pem).ok()?;
        self.clients.insert(key, client.clone());
        Some(client)
    }

    /// Says once what a node's kubelet failed with, until it changes.
    pub(super) fn failed(&mut self, idx: usize, what: String) {
        if self.last_error.get(&idx) != Some(&what) {
            eprintln!("talos-sim: node {idx}: {what} (retrying)");
            self.last_error.insert(idx, what);
        }
    }
}

/// What the kubelet's thread takes from the model each tick, for one node.
pub(super) struct View {
    pub idx: usize,
    pub boot: String,
    pub host_ip: String,
    pub ca: (String, String),
    pub cfg: StoredConfig,
    pub report: KubeletReport,
    pub cordon: Option<bool>,
    /// Talos's bootstrap manifests, for a control plane whose config has not applied them yet.
    pub manifests: Option<Vec<for_real::ManifestObject>>,
}

fn views(rk: &RealKubernetes, shared: &Shared) -> Vec<View> {
    let st = shared.lock();
    if st.etcd.is_none() {
        return vec![];
    }
    // A worker's config holds the cluster CA's certificate only: its kubelet's certificate is
    // what the controller manager's signer issues from the CA's key (a control plane's).
    let Some(cluster_ca) = st
        .nodes
        .iter()
        .find_map(|n| n.active.as_ref().filter(|_| n.is_control_plane())?.k8s_ca())
    else {
        return vec![];
    };
    let applied = &rk
        .kubelets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .talos
        .bootstrap_applied
        .clone();
    st.nodes
        .iter()
        .filter_map(|n| {
            let cfg = n.active.as_ref()?;
            let report = for_real::kubelet_report(n)?;
            let control_plane = n.is_control_plane();
            Some(View {
                idx: n.index,
                boot: n.boot_id.clone(),
                host_ip: n.address.to_string(),
                ca: cfg.k8s_ca().unwrap_or_else(|| cluster_ca.clone()),
                cfg: cfg.clone(),
                report,
                cordon: for_real::wanted_cordon(n),
                manifests: (control_plane && !applied.contains(&cfg.digest))
                    .then(|| for_real::bootstrap_manifests(n)),
            })
        })
        .collect()
}

/// One round of every running node's kubelet and Talos.
pub(super) fn tick(rk: &RealKubernetes, shared: &Shared) {
    let servers = rk.servers();
    if servers.is_empty() {
        return;
    }
    for view in views(rk, shared) {
        // KubePrism: a node's components reach any control plane's API server, its own first.
        let server = servers
            .iter()
            .find(|(i, _)| *i == view.idx)
            .or(servers.first())
            .map(|(_, s)| *s)
            .expect("there is a server");
        let mut kubelets = rk.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        let name = view.report.name.clone();
        let Some(client) =
            kubelets.client(&format!("system:node:{name}"), &["system:nodes"], &view.ca)
        else {
            continue;
        };
        let state = kubelets.by_node.entry(view.idx).or_default();
        if state.boot != view.boot {
            *state = Kubelet {
                boot: view.boot.clone(),
                ..Kubelet::default()
            };
        }
        if state.gone {
            continue;
        }
        let mut state = std::mem::take(state);
        drop(kubelets);
        let result = run_kubelet(&client, server, &view, &mut state);
        {
            let mut st = shared.lock();
            if state.registered && !state.gone {
                st.kube.real_nodes.insert(name.clone());
            } else {
                st.kube.real_nodes.remove(&name);
            }
        }
        let mut kubelets = rk.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(pods) => {
                for (pod, node) in pods {
                    kubelets.pod_nodes.insert(pod, node);
                }
            }
            Err(e) => kubelets.failed(view.idx, format!("the kubelet of {name}: {e}")),
        }
        let registered = state.registered;
        kubelets.by_node.insert(view.idx, state);
        drop(kubelets);
        if registered {
            super::talos::tick(rk, server, &view);
        }
    }
}

fn check(what: &str, a: Answer) -> Result<Answer, String> {
    if a.ok() {
        Ok(a)
    } else {
        Err(format!(
            "{what}: {} {}",
            a.code,
            a.body["message"].as_str().unwrap_or("")
        ))
    }
}

/// Without the times that change on every post.
fn comparable(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conditions) = s["conditions"].as_array_mut() {
        for c in conditions {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastHeartbeatTime");
                c.remove("lastTransitionTime");
            }
        }
    }
    s
}

pub(super) fn micro_time() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

/// The kubelet's round; the pods it saw bound to the node (`namespace/name`, node).
fn run_kubelet(
    client: &Client,
    server: SocketAddr,
    view: &View,
    state: &mut Kubelet,
) -> Result<Vec<(String, String)>, String> {
    let name = &view.report.name;
    let json_patch = "application/strategic-merge-patch+json";
    if !state.registered {
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": view.report.labels},
            "spec": {"taints": view.report.taints},
            "status": view.report.status,
        });
        let a = client.send(
            server,
            "POST",
            "/api/v1/nodes",
            "application/json",
            Some(&node),
        )?;
        if a.code != 409 {
            check("registering the Node", a)?;
        }
        state.registered = true;
        state.last_post = None;
    }
    let status = comparable(&view.report.status);
    let due = state.last_post.is_none_or(|t| t.elapsed() >= STATUS_EVERY)
        || state.last_status.as_ref() != Some(&status);
    if due {
        let a = client.send(
            server,
            "PATCH",
            &format!("/api/v1/nodes/{name}/status"),
            json_patch,
            Some(&json!({"status": view.report.status})),
        )?;
        if a.code == 404 {
            // Deleted while this kubelet runs.
            state.gone = true;
            return Ok(vec![]);
        }
        let a = check("posting the Node's status", a)?;
        state.node_uid = a.body["metadata"]["uid"].as_str().unwrap_or("").to_string();
        state.last_status = Some(status);
        state.last_post = Some(Instant::now());
    }
    if state.last_lease.is_none_or(|t| t.elapsed() >= LEASE_EVERY) {
        renew_lease(client, server, name)?;
        state.last_lease = Some(Instant::now());
    }
    let pods = client.get(
        server,
        &format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{name}"),
    )?;
    let pods = check("listing the node's pods", pods)?;
    let items = pods.body["items"].as_array().cloned().unwrap_or_default();
    let mut seen = Vec::new();
    let mut mirrors = BTreeSet::new();
    for pod in &items {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
        seen.push((format!("{ns}/{pod_name}"), name.clone()));
        let mirror = pod["metadata"]["annotations"]
            .get(MIRROR_ANNOTATION)
            .is_some();
        let wanted = view
            .report
            .mirror_pods
            .iter()
            .find(|(p, _)| p["metadata"]["name"] == pod_name);
        let stale_mirror = mirror
            && wanted.is_none_or(|(p, _)| {
                p["metadata"]["annotations"][CONFIG_VERSION]
                    != pod["metadata"]["annotations"][CONFIG_VERSION]
                    || p["spec"]["containers"][0]["image"] != pod["spec"]["containers"][0]["image"]
            });
        if !pod["metadata"]["deletionTimestamp"].is_null() || stale_mirror {
            delete_pod(client, server, pod)?;
            continue;
        }
        let ready = match wanted {
            Some((_, ready)) if mirror => {
                mirrors.insert(pod_name.to_string());
                *ready
            }
            _ => view.report.ready,
        };
        report_running(client, server, pod, &view.host_ip, ready)?;
    }
    for (pod, _) in &view.report.mirror_pods {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
        if mirrors.contains(pod_name) || state.node_uid.is_empty() {
            continue;
        }
        let mut pod = pod.clone();
        pod["metadata"]["ownerReferences"][0]["uid"] = json!(state.node_uid);
        pod["spec"]["tolerations"] = json!([{"operator": "Exists", "effect": "NoExecute"}]);
        let a = client.send(
            server,
            "POST",
            "/api/v1/namespaces/kube-system/pods",
            "application/json",
            Some(&pod),
        )?;
        if a.code != 409 {
            check("creating a mirror pod", a)?;
        }
    }
    Ok(seen)
}

fn renew_lease(client: &Client, server: SocketAddr, name: &str) -> Result<(), String> {
    let collection = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_time()},
    });
    let renew = json!({"spec": {"holderIdentity": name, "renewTime": micro_time()}});
    let a = client.send(
        server,
        "PATCH",
        &format!("{collection}/{name}"),
        "application/merge-patch+json",
        Some(&renew),
    )?;
    if a.code == 404 {
        let a = client.send(server, "POST", collection, "application/json", Some(&lease))?;
        check("creating the node's Lease", a)?;
        return Ok(());
    }
    check("renewing the node's Lease", a).map(|_| ())
}

fn pod_path(pod: &Value) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or("")
    )
}

fn delete_pod(client: &Client, server: SocketAddr, pod: &Value) -> Result<(), String> {
    let options = json!({
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": pod["metadata"]["uid"]},
    });
    let a = client.send(
        server,
        "DELETE",
        &pod_path(pod),
        "application/json",
        Some(&options),
    )?;
    // Gone already, or a new pod of the same name (the precondition failed): nothing to do.
    if matches!(a.code, 404 | 409) {
        return Ok(());
    }
    check("confirming a pod's deletion", a).map(|_| ())
}

fn condition_is(pod: &Value, kind: &str, wanted: bool) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == kind && c["status"] == if wanted { "True" } else { "False" })
    })
}

/// The pod's containers run (the simulator runs none): phase Running, Ready as the node is.
fn report_running(
    client: &Client,
    server: SocketAddr,
    pod: &Value,
    host_ip: &str,
    ready: bool,
) -> Result<(), String> {
    if pod["status"]["phase"] == "Running" && condition_is(pod, "Ready", ready) {
        return Ok(());
    }
    let now = micro_time();
    let since = pod["status"]["startTime"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| now.clone());
    let status = if ready { "True" } else { "False" };
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "", "ready": ready,
                "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": since}},
            })
        })
        .collect();
    let conditions: Vec<Value> = [
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("Ready", status),
        ("ContainersReady", status),
        ("PodScheduled", "True"),
    ]
    .iter()
    .map(|(kind, s)| json!({"type": kind, "status": s, "lastProbeTime": null, "lastTransitionTime": now}))
    .collect();
    let patch = json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": since,
        "conditions": conditions,
        "containerStatuses": containers,
    }});
    let a = client.send(
        server,
        "PATCH",
        &format!("{}/status", pod_path(pod)),
        "application/strategic-merge-patch+json",
        Some(&patch),
    )?;
    if a.code == 404 {
        return Ok(());
    }
    check("reporting a pod's status", a).map(|_| ())
}
