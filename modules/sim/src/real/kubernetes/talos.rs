//! Talos's own controllers and sequences against the real API server, with the cluster admin
//! identity Talos's control planes use (`system:masters`). The rules are the model's
//! (`kube::for_real`, citing upstream), carried out over HTTP:
//! - NodeApplyController and the cordon of NodeCordonedSpec: the Node read, changed and written
//!   back in full (an update with its resourceVersion), as `node_apply.go` @ v1.14.1 does;
//! - the bootstrap manifests of each control plane's config (`manifest_apply.go`): an object
//!   that exists is only recorded in the inventory, a missing one is applied server-side with
//!   field manager `talos` and no force;
//! - `CordonAndDrainNode` (`v1alpha1_sequencer_tasks.go`, `pkg/kubernetes/kubernetes.go`
//!   `Drain`): wait for the cordon, list the node's pods, evict those a controller other than a
//!   DaemonSet owns, retry the ones a budget holds until the drain's time is up.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::RealKubernetes;
use super::client::Client;
use super::kubelet::View;
use crate::kube::for_real;
use crate::state::Shared;

/// How often Talos looks at its Node again when nothing asked it to.
const LOOK_EVERY: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(100);
const INVENTORY: &str = "/api/v1/namespaces/kube-system/configmaps";

#[derive(Default)]
pub struct TalosState {
    cordons: BTreeMap<usize, bool>,
    last_look: BTreeMap<usize, Instant>,
    /// The control-plane configs whose bootstrap manifests were applied.
    pub bootstrap_applied: BTreeSet<String>,
}

fn admin(rk: &RealKubernetes, ca: &(String, String)) -> Option<Client> {
    rk.kubelets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .client("admin", &["system:masters"], ca)
}

/// Talos's round for one node whose kubelet has registered.
pub(super) fn tick(rk: &RealKubernetes, server: SocketAddr, view: &View) {
    let Some(client) = admin(rk, &view.ca) else {
        return;
    };
    let due = {
        let mut kubelets = rk.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        let talos = &mut kubelets.talos;
        let changed = match view.cordon {
            Some(wanted) => talos.cordons.insert(view.idx, wanted) != Some(wanted),
            None => false,
        };
        changed
            || talos
                .last_look
                .get(&view.idx)
                .is_none_or(|t| t.elapsed() >= LOOK_EVERY)
    };
    if due {
        let cordon = rk
            .kubelets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .talos
            .cordons
            .get(&view.idx)
            .copied();
        if let Err(e) = apply_node(&client, server, view, cordon) {
            rk.kubelets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .failed(view.idx, format!("Talos's update of its Node: {e}"));
        } else {
            rk.kubelets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .talos
                .last_look
                .insert(view.idx, Instant::now());
        }
    }
    if let Some(manifests) = &view.manifests {
        match apply_manifests(&client, server, manifests) {
            Ok(()) => {
                rk.kubelets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .talos
                    .bootstrap_applied
                    .insert(view.cfg.digest.clone());
            }
            Err(e) => rk
                .kubelets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .failed(view.idx, format!("Talos's bootstrap manifests: {e}")),
        }
    }
}

fn apply_node(
    client: &Client,
    server: SocketAddr,
    view: &View,
    cordon: Option<bool>,
) -> Result<(), String> {
    let path = format!("/api/v1/nodes/{}", view.report.name);
    let node = client.get(server, &path)?;
    if node.code == 404 {
        return Ok(());
    }
    if !node.ok() {
        return Err(format!("{} reading the Node", node.code));
    }
    let Some(update) = for_real::talos_node_update(&node.body, &view.cfg, cordon) else {
        return Ok(());
    };
    let a = client.send(server, "PUT", &path, "application/json", Some(&update))?;
    // 409: changed meanwhile; the next look reads it again.
    if a.ok() || a.code == 409 {
        Ok(())
    } else {
        Err(format!(
            "{} {}",
            a.code,
            a.body["message"].as_str().unwrap_or("")
        ))
    }
}

fn apply_manifests(
    client: &Client,
    server: SocketAddr,
    manifests: &[for_real::ManifestObject],
) -> Result<(), String> {
    let mut inventory = BTreeSet::new();
    for m in manifests {
        let path = format!("{}/{}", m.collection, m.name);
        let existing = client.get(server, &path)?;
        if existing.ok() {
            inventory.insert(m.inventory_key.clone());
            continue;
        }
        let a = client.send(
            server,
            "PATCH",
            &format!("{path}?fieldManager={}", for_real::FIELD_MANAGER),
            "application/apply-patch+yaml",
            Some(&m.object),
        )?;
        if a.ok() {
            inventory.insert(m.inventory_key.clone());
        } else if a.code >= 500 || a.code == 404 {
            // Not ready for it yet (a CRD's kind not served yet, a namespace being made).
            return Err(format!(
                "{} applying {path}: {}",
                a.code,
                a.body["message"].as_str().unwrap_or("")
            ));
        }
    }
    let path = format!("{INVENTORY}/{}", for_real::INVENTORY_NAME);
    let body = |data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": for_real::INVENTORY_NAME, "namespace": "kube-system"},
               "data": data})
    };
    let existing = client.get(server, &path)?;
    if existing.code == 404 {
        let a = client.send(
            server,
            "POST",
            INVENTORY,
            "application/json",
            Some(&body(json!({}))),
        )?;
        if !a.ok() && a.code != 409 {
            return Err(format!("{} creating the inventory", a.code));
        }
    }
    let before: serde_json::Map<String, Value> = existing.body["data"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut data = before.clone();
    for key in inventory {
        data.insert(key, json!(""));
    }
    if existing.ok() && data == before {
        // The same contents: writing them again would change nothing.
        return Ok(());
    }
    let a = client.send(
        server,
        "PUT",
        &path,
        "application/json",
        Some(&body(Value::Object(data))),
    )?;
    if a.ok() {
        Ok(())
    } else {
        Err(format!("{} writing the inventory", a.code))
    }
}

/// What `CordonAndDrainNode` needs: the admin client, a server, the Node's name.
fn drain_target(rk: &RealKubernetes, shared: &Shared, idx: usize) -> Option<(Client, String)> {
    let (ca, name) = {
        let st = shared.lock();
        let n = st.nodes.get(idx)?;
        (n.active.as_ref()?.k8s_ca()?, crate::kube::node_name(n))
    };
    Some((admin(rk, &ca)?, name))
}

fn any_server(rk: &RealKubernetes) -> Option<SocketAddr> {
    rk.servers().first().map(|(_, s)| *s)
}

/// `CordonAndDrainNode` for node `idx` against the real API server; Err with upstream's
/// reason when the Node is never cordoned or its pods cannot be listed.
pub async fn cordon_and_drain(
    rk: Arc<RealKubernetes>,
    shared: Arc<Shared>,
    idx: usize,
) -> Result<(), String> {
    let times = shared.lock().kube.talos_drain;
    let started = Instant::now();
    let Some((client, name)) = drain_target(&rk, &shared, idx) else {
        return Ok(());
    };
    let node_path = format!("/api/v1/nodes/{name}");
    let blocking = |f: Box<dyn FnOnce() -> Result<super::client::Answer, String> + Send>| {
        tokio::task::spawn_blocking(f)
    };
    // No Node: the kubelet has not joined, nothing to drain.
    let Some(server) = any_server(&rk) else {
        return Ok(());
    };
    let (c, p) = (client.clone(), node_path.clone());
    match blocking(Box::new(move || c.get(server, &p))).await {
        Ok(Ok(a)) if a.code == 404 => return Ok(()),
        _ => {}
    }
    loop {
        if let Some(server) = any_server(&rk) {
            let (c, p) = (client.clone(), node_path.clone());
            if let Ok(Ok(a)) = blocking(Box::new(move || c.get(server, &p))).await
                && a.body["spec"]["unschedulable"] == true
            {
                break;
            }
        }
        if started.elapsed() >= times.cordon {
            return Err("context deadline exceeded".into());
        }
        tokio::time::sleep(POLL).await;
    }
    let deadline = Instant::now() + times.drain;
    let listed = match any_server(&rk) {
        Some(server) => {
            let c = client.clone();
            let path = format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{name}");
            blocking(Box::new(move || c.get(server, &path))).await
        }
        None => {
            return Err(format!(
                "cannot get pods for node {name}: no Kubernetes API server answers"
            ));
        }
    };
    let pods = match listed {
        Ok(Ok(a)) if a.ok() => a.body["items"].as_array().cloned().unwrap_or_default(),
        _ => return Err(format!("cannot get pods for node {name}")),
    };
    let mut pending: Vec<(String, String)> = pods
        .iter()
        .filter(|p| for_real::evicts(p))
        .map(for_real::pod_key)
        .collect();
    loop {
        let mut still = Vec::new();
        for (namespace, pod) in pending {
            let Some(server) = any_server(&rk) else {
                continue;
            };
            let c = client.clone();
            let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/eviction");
            let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                              "metadata": {"name": pod, "namespace": namespace}});
            let answer = blocking(Box::new(move || {
                c.send(server, "POST", &path, "application/json", Some(&body))
            }))
            .await;
            // A 429 (a budget) is tried again; anything else ends that pod's eviction.
            if matches!(answer, Ok(Ok(ref a)) if a.code == 429) {
                still.push((namespace, pod));
            }
        }
        pending = still;
        if pending.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(times.retry).await;
        if Instant::now() >= deadline {
            return Ok(());
        }
    }
}

/// A server whose API answers (`/readyz`), waiting up to 5 s for one (the control protocol's
/// clients wait 10 s for an answer).
fn wait_for_api(rk: &RealKubernetes, client: &Client) -> Result<SocketAddr, String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for (_, server) in rk.servers() {
            if client.get(server, "/readyz").is_ok_and(|a| a.code == 200) {
                return Ok(server);
            }
        }
        if Instant::now() >= deadline {
            return Err("no Kubernetes API server is ready yet (the control plane's programs start after the bootstrap)".into());
        }
        std::thread::sleep(POLL);
    }
}

/// The control protocol's `workload`: a Deployment of `replicas` pods on the workers (no
/// toleration of the control planes' taint), and its PodDisruptionBudget with `min_available`.
pub fn add_workload(
    rk: &RealKubernetes,
    shared: &Shared,
    namespace: &str,
    name: &str,
    replicas: u32,
    min_available: Option<u32>,
) -> Result<(), String> {
    let ca = {
        let st = shared.lock();
        st.nodes
            .iter()
            .find_map(|n| n.active.as_ref().filter(|_| n.is_control_plane())?.k8s_ca())
            .ok_or("no control plane has a config")?
    };
    let client = admin(rk, &ca).ok_or("no admin identity")?;
    let server = wait_for_api(rk, &client)?;
    let labels = json!({"app": name});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": format!("registry.example/{name}:1.0")}]},
            },
        },
    });
    let create = |collection: String, body: &Value, what: &str| -> Result<(), String> {
        let a = client.send(server, "POST", &collection, "application/json", Some(body))?;
        if a.ok() {
            Ok(())
        } else {
            Err(format!(
                "the {what}: {} {}",
                a.code,
                a.body["message"].as_str().unwrap_or("")
            ))
        }
    };
    create(
        format!("/apis/apps/v1/namespaces/{namespace}/deployments"),
        &deployment,
        "Deployment",
    )?;
    if let Some(min) = min_available {
        let budget = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min, "selector": {"matchLabels": labels}},
        });
        create(
            format!("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"),
            &budget,
            "PodDisruptionBudget",
        )?;
    }
    Ok(())
}

/// Every Node and pod as the API server lists them.
pub fn list(rk: &RealKubernetes, shared: &Shared) -> (Vec<Value>, Vec<Value>) {
    let ca = {
        let st = shared.lock();
        st.nodes
            .iter()
            .find_map(|n| n.active.as_ref().filter(|_| n.is_control_plane())?.k8s_ca())
    };
    let (Some(ca), Some(server)) = (ca, any_server(rk)) else {
        return (vec![], vec![]);
    };
    let Some(client) = admin(rk, &ca) else {
        return (vec![], vec![]);
    };
    let items = |path: &str| {
        client
            .get(server, path)
            .ok()
            .and_then(|a| a.body["items"].as_array().cloned())
            .unwrap_or_default()
    };
    (items("/api/v1/nodes"), items("/api/v1/pods"))
}
