//! What Talos itself does to its Node before an upgrade, a shutdown or a graceful reset: its
//! controllers cordon the Node once the machine's stage says so, and the sequence's
//! `cordonAndDrainNode` task waits for that cordon and then evicts the node's pods, retrying the
//! ones a PodDisruptionBudget holds until its time is up. The same at v1.13.9 and v1.14.1:
//!
//! - `internal/app/machined/pkg/controllers/k8s/node_cordoned_spec.go`: the stages SHUTTING_DOWN,
//!   UPGRADING and RESETTING want the Node cordoned, BOOTING and RUNNING want it not, every other
//!   stage (REBOOTING, which a failed sequence leaves) changes nothing; `node_apply.go`
//!   `ApplyCordoned` cordons a schedulable Node and marks it `talos.dev/cordoned: "true"`, and
//!   uncordons only a Node that carries that mark, so a cordon an operator made stays.
//! - `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go`
//!   `CordonAndDrainNode`: nothing to do while the kubelet has not joined (no client
//!   certificate); `waitForNodeCordoned` waits at most a minute for the Node to be unschedulable
//!   and fails the task with the context's error; then `Drain`.
//! - `pkg/kubernetes/kubernetes.go` `Drain` and `evict`: the pods bound to the node (a failed
//!   list fails the task), every one at once, skipping mirror (static) pods, pods no controller
//!   owns and pods whose controller is a DaemonSet (by kind alone, whether or not that DaemonSet
//!   still exists); a pod already being deleted is evicted anyway (upstream logs "skipping" and
//!   does not skip). An eviction answered 429 (a budget) is tried again after 5 s, a 404 counts
//!   as done, any other error gives that pod up with a warning. The whole drain has
//!   `DrainTimeout` (5 minutes); at its end the evictions still refused fail with the expired
//!   context, which is only logged: the drain itself succeeds.
//!
//! So the drain fails only when the Node never gets cordoned or its pods cannot be listed: here,
//! when no control plane's API server answers the nodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::model::{NodeRecord, node_name};
use super::render;
use crate::state::{Node, Shared, Stage};

/// The annotation Talos puts on a Node it cordoned (`constants.AnnotationCordonedKey`).
pub const CORDONED_BY_TALOS: &str = "talos.dev/cordoned";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// How often the simulator looks again while Talos waits for its cordon.
const POLL: Duration = Duration::from_millis(100);

/// The times of Talos's own drain. Upstream's are constants; the simulator's tests shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainTimes {
    /// How long `waitForNodeCordoned` waits for the Node to be cordoned (a minute).
    pub cordon: Duration,
    /// `DrainTimeout`: how long the evictions may take all together (5 minutes).
    pub drain: Duration,
    /// How long `evict` sleeps after a 429 before it asks again (5 s).
    pub retry: Duration,
}

impl DrainTimes {
    /// Upstream's: `time.Minute` in `waitForNodeCordoned`, `DrainTimeout`, `5 * time.Second`.
    pub const UPSTREAM: DrainTimes = DrainTimes {
        cordon: Duration::from_secs(60),
        drain: Duration::from_secs(300),
        retry: Duration::from_secs(5),
    };
}

impl Default for DrainTimes {
    fn default() -> Self {
        DrainTimes::UPSTREAM
    }
}

/// Whether a Node's kubelet on some node reaches a Kubernetes API server: a control plane that
/// runs its services in a bootstrapped cluster (KubePrism or the cluster endpoint lead there).
pub fn api_answers_nodes(st_nodes: &[Node]) -> bool {
    st_nodes
        .iter()
        .any(|n| n.up && n.is_control_plane() && n.active.is_some() && !n.services_stopped)
}

/// `NodeCordonedSpecController`: the cordon a node's Talos wants once its stage is `stage`:
/// Some(true) cordoned, Some(false) not, None whatever it wanted before.
pub(super) fn wanted_cordon(stage: Stage) -> Option<bool> {
    match stage {
        Stage::ShuttingDown | Stage::Upgrading | Stage::Resetting => Some(true),
        Stage::Booting | Stage::Running => Some(false),
        _ => None,
    }
}

/// `ApplyCordoned` on one Node; the change made, if any (`cordon` or `uncordon`, for the log).
pub(super) fn apply_cordon(rec: &mut NodeRecord, cordon: bool) -> Option<&'static str> {
    if cordon && !rec.unschedulable {
        rec.unschedulable = true;
        rec.annotations
            .insert(CORDONED_BY_TALOS.to_string(), "true".to_string());
        Some("cordon")
    } else if !cordon && rec.unschedulable && rec.annotations.contains_key(CORDONED_BY_TALOS) {
        rec.unschedulable = false;
        rec.annotations.remove(CORDONED_BY_TALOS);
        Some("uncordon")
    } else {
        None
    }
}

/// A listed pod's namespace and name.
pub fn pod_key(pod: &Value) -> (String, String) {
    let field = |f: &str| pod["metadata"][f].as_str().unwrap_or("").to_string();
    (field("namespace"), field("name"))
}

/// What `Drain` does with one pod (by its JSON as the API server lists it).
pub fn evicts(pod: &Value) -> bool {
    let meta = &pod["metadata"];
    if meta["annotations"].get(MIRROR_ANNOTATION).is_some() {
        return false;
    }
    let controller = meta["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"] == Value::Bool(true)));
    match controller {
        None => false,
        Some(c) => c["kind"] != "DaemonSet",
    }
}

/// `CordonAndDrainNode` for node `idx`, run by a sequence without the state's lock held. Ok
/// once the pods are gone or the drain's time is up; Err with upstream's reason when the Node
/// was never cordoned or its pods could not be listed.
pub async fn cordon_and_drain(shared: &Arc<Shared>, idx: usize) -> Result<(), String> {
    if let Some(real) = shared.real_kube.clone() {
        return crate::real::kubernetes::talos::cordon_and_drain(real, shared.clone(), idx).await;
    }
    let started = Instant::now();
    let (name, times) = {
        let st = shared.lock();
        let Some(n) = st.nodes.get(idx) else {
            return Ok(());
        };
        let name = node_name(n);
        // No kubelet client certificate yet: the node has not joined, nothing to drain.
        if st.etcd.is_none() || !st.kube.nodes.contains_key(&name) {
            return Ok(());
        }
        (name, st.kube.talos_drain)
    };
    loop {
        {
            let mut guard = shared.lock();
            let st = &mut *guard;
            // Talos's controllers cordon the Node through the API server, when one answers.
            st.kube.refresh(&st.nodes, st.etcd.is_some());
            if st.kube.nodes.get(&name).is_some_and(|r| r.unschedulable) {
                break;
            }
        }
        if started.elapsed() >= times.cordon {
            return Err("context deadline exceeded".into());
        }
        tokio::time::sleep(POLL).await;
    }
    let deadline = Instant::now() + times.drain;
    let mut pending: Vec<(String, String)> = {
        let guard = shared.lock();
        let st = &*guard;
        if !api_answers_nodes(&st.nodes) {
            return Err(format!(
                "cannot get pods for node {name}: no Kubernetes API server answers"
            ));
        }
        render::pods(&st.kube, st, None)
            .iter()
            .filter(|p| p["spec"]["nodeName"] == name.as_str() && evicts(p))
            .map(pod_key)
            .collect()
    };
    loop {
        {
            let mut guard = shared.lock();
            let st = &mut *guard;
            let answers = api_answers_nodes(&st.nodes);
            pending.retain(|(namespace, pod)| {
                // An API server that went away fails the eviction: that pod is given up.
                answers
                    && matches!(
                        st.kube.evict(namespace, pod, &st.nodes),
                        Err(ref e) if e.code == 429
                    )
            });
        }
        if pending.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(times.retry).await;
        if Instant::now() >= deadline {
            // Each refused eviction's next try fails with the expired context, which `Drain`
            // only logs.
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `Drain`'s filters in `pkg/kubernetes/kubernetes.go` @ v1.14.1.
    #[test]
    fn talos_evicts_only_pods_a_controller_other_than_a_daemonset_owns() {
        let owned = |kind: &str| json!({"metadata": {"ownerReferences": [{"kind": kind, "name": "x", "controller": true}]}});
        assert!(evicts(&owned("ReplicaSet")));
        assert!(evicts(&owned("StatefulSet")));
        assert!(!evicts(&owned("DaemonSet")));
        assert!(!evicts(&json!({"metadata": {}})), "unmanaged");
        assert!(
            !evicts(&json!({"metadata": {
                "annotations": {MIRROR_ANNOTATION: "abc"},
                "ownerReferences": [{"kind": "Node", "name": "n", "controller": true}]}})),
            "mirror"
        );
        assert!(
            !evicts(
                &json!({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "x"}]}})
            ),
            "an owner that is not the controller"
        );
    }

    /// `node_cordoned_spec.go` and `node_apply.go` `ApplyCordoned` @ v1.14.1.
    #[test]
    fn talos_cordons_for_its_sequences_and_lifts_only_its_own_cordon() {
        assert_eq!(wanted_cordon(Stage::Upgrading), Some(true));
        assert_eq!(wanted_cordon(Stage::ShuttingDown), Some(true));
        assert_eq!(wanted_cordon(Stage::Resetting), Some(true));
        assert_eq!(wanted_cordon(Stage::Booting), Some(false));
        assert_eq!(wanted_cordon(Stage::Running), Some(false));
        // A failed sequence (REBOOTING) keeps what was wanted; so do the others.
        assert_eq!(wanted_cordon(Stage::Rebooting), None);
        assert_eq!(wanted_cordon(Stage::Maintenance), None);
        let mut rec = NodeRecord {
            uid: String::new(),
            index: 0,
            created: std::time::SystemTime::now(),
            unschedulable: false,
            labels: Default::default(),
            annotations: Default::default(),
            taints: vec![],
            resource_version: 0,
        };
        assert_eq!(apply_cordon(&mut rec, false), None);
        assert_eq!(apply_cordon(&mut rec, true), Some("cordon"));
        assert_eq!(rec.annotations[CORDONED_BY_TALOS], "true");
        assert_eq!(apply_cordon(&mut rec, true), None);
        assert_eq!(apply_cordon(&mut rec, false), Some("uncordon"));
        assert!(!rec.unschedulable && rec.annotations.is_empty());
        // An operator's cordon: Talos neither marks it nor lifts it.
        rec.unschedulable = true;
        assert_eq!(apply_cordon(&mut rec, true), None);
        assert_eq!(apply_cordon(&mut rec, false), None);
        assert!(rec.unschedulable);
    }
}
