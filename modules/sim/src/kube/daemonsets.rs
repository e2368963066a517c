//! The DaemonSet controller: one pod per registered node for each stored DaemonSet (control
//! planes only when its tolerations allow their taint), with the image of the DaemonSet's pod
//! template. When a DaemonSet's generation changes, every node's pod is replaced at once (the
//! simulator does not pace a rolling update by `maxUnavailable`) and is not Ready until it has
//! run `READY_DELAY`; the `daemonset_rollout_stuck` fault keeps a node's replaced pods from ever
//! becoming Ready. A DaemonSet's `status` reports this truthfully, in the fields kstatus reads
//! (`github.com/fluxcd/cli-utils` pkg/kstatus/status/core.go daemonsetConditions: current once
//! `observedGeneration == generation` and `desiredNumberScheduled` <= current, updated,
//! available and ready).
//!
//! A deleted DaemonSet's pods go at once (the garbage collector's background deletion), unless
//! their node has the `orphaned_daemon_pods` fault: then they stay, owned by a DaemonSet the API
//! server no longer has, until they are evicted or their Node is deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime};

use serde_json::{Value, json};

use super::model::{KubeState, READY_DELAY, node_name, node_ready};
use crate::state::Node;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DaemonPodKey {
    pub namespace: String,
    pub daemonset: String,
    pub node: String,
}

#[derive(Clone, Debug)]
pub struct DaemonPod {
    pub uid: String,
    pub name: String,
    /// The DaemonSet's uid and generation this pod was made for.
    pub owner_uid: String,
    pub generation: i64,
    pub started: Instant,
    pub created: SystemTime,
    /// Made to replace a pod of an older generation (what `daemonset_rollout_stuck` holds back).
    pub replaced: bool,
    /// The pod template's labels, first container's name and image when the pod was made.
    pub labels: BTreeMap<String, String>,
    pub container: String,
    pub image: String,
}

/// A pod spec's tolerations allow the control-plane NoSchedule taint.
pub fn tolerates_control_plane(pod_spec: &Value) -> bool {
    pod_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                let key = t.get("key").and_then(Value::as_str).unwrap_or("");
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
                let exists = t.get("operator").and_then(Value::as_str) == Some("Exists");
                (key.is_empty() && exists || key == "node-role.kubernetes.io/control-plane")
                    && (effect.is_empty() || effect == "NoSchedule")
            })
        })
}

fn short_suffix(seed: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(seed.as_bytes());
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    h.iter()
        .take(5)
        .map(|b| alphabet[*b as usize % alphabet.len()] as char)
        .collect()
}

impl KubeState {
    /// Creates, replaces and removes DaemonSet pods so each stored DaemonSet has one of its
    /// current generation on each node it should run on.
    pub fn sync_daemonsets(&mut self, st_nodes: &[Node]) {
        let sets: Vec<(String, String, String, i64, bool, Value)> = self
            .objects
            .list("apps", "DaemonSet", None)
            .map(|(k, v)| {
                (
                    k.namespace.clone(),
                    k.name.clone(),
                    v["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                    v["metadata"]["generation"].as_i64().unwrap_or(1),
                    tolerates_control_plane(&v["spec"]["template"]["spec"]),
                    v["spec"]["template"].clone(),
                )
            })
            .collect();
        let nodes: Vec<(String, bool)> = self
            .nodes
            .iter()
            .filter(|(name, rec)| {
                st_nodes
                    .get(rec.index)
                    .is_some_and(|n| node_name(n) == **name)
            })
            .map(|(name, rec)| {
                let cp = rec
                    .labels
                    .contains_key("node-role.kubernetes.io/control-plane");
                (name.clone(), cp)
            })
            .collect();
        let mut wanted = BTreeSet::new();
        let mut changed = false;
        for (namespace, daemonset, uid, generation, tolerates_cp, template) in &sets {
            for (node, cp) in &nodes {
                if *cp && !tolerates_cp {
                    continue;
                }
                let key = DaemonPodKey {
                    namespace: namespace.clone(),
                    daemonset: daemonset.clone(),
                    node: node.clone(),
                };
                let replaced = match self.daemon_pods.get(&key) {
                    Some(p) if p.owner_uid == *uid && p.generation == *generation => {
                        wanted.insert(key);
                        continue;
                    }
                    Some(p) => p.owner_uid == *uid,
                    None => false,
                };
                let seed = format!("{daemonset}-{node}-{uid}-{generation}");
                let container = &template["spec"]["containers"][0];
                self.daemon_pods.insert(
                    key.clone(),
                    DaemonPod {
                        uid: crate::state::new_uuid(),
                        name: format!("{daemonset}-{}", short_suffix(&seed)),
                        owner_uid: uid.clone(),
                        generation: *generation,
                        started: Instant::now(),
                        created: SystemTime::now(),
                        replaced,
                        labels: super::deployments::labels_of(template),
                        container: container["name"].as_str().unwrap_or(daemonset).to_string(),
                        image: container["image"].as_str().unwrap_or("").to_string(),
                    },
                );
                wanted.insert(key);
                changed = true;
            }
        }
        let before = self.daemon_pods.len();
        let gone = |k: &DaemonPodKey| {
            !sets
                .iter()
                .any(|(ns, name, ..)| *ns == k.namespace && *name == k.daemonset)
        };
        let orphans_stay = |k: &DaemonPodKey| {
            self.nodes
                .get(&k.node)
                .and_then(|r| st_nodes.get(r.index))
                .is_some_and(|n| n.faults.orphaned_daemon_pods)
        };
        let keep: BTreeSet<DaemonPodKey> = self
            .daemon_pods
            .keys()
            .filter(|k| wanted.contains(*k) || gone(k) && orphans_stay(k))
            .cloned()
            .collect();
        self.daemon_pods.retain(|k, _| keep.contains(k));
        if changed || before != self.daemon_pods.len() {
            self.bump();
        }
    }

    /// A DaemonSet pod is Ready once it has run `READY_DELAY` on a Ready node.
    pub fn daemon_pod_ready(&self, key: &DaemonPodKey, p: &DaemonPod, st_nodes: &[Node]) -> bool {
        let Some(n) = self
            .nodes
            .get(&key.node)
            .and_then(|r| st_nodes.get(r.index))
        else {
            return false;
        };
        node_ready(n)
            && p.started.elapsed() >= READY_DELAY
            && !(p.replaced && n.faults.daemonset_rollout_stuck)
    }

    /// The DaemonSet's `status` from its pods.
    pub fn daemonset_status(
        &self,
        namespace: &str,
        name: &str,
        generation: i64,
        st_nodes: &[Node],
    ) -> Value {
        let pods: BTreeMap<&DaemonPodKey, &DaemonPod> = self
            .daemon_pods
            .iter()
            .filter(|(k, _)| k.namespace == namespace && k.daemonset == name)
            .collect();
        let desired = pods.len();
        let updated = pods.values().filter(|p| p.generation == generation).count();
        let ready = pods
            .iter()
            .filter(|(k, p)| self.daemon_pod_ready(k, p, st_nodes))
            .count();
        let mut status = json!({
            "currentNumberScheduled": desired,
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": updated,
            "observedGeneration": generation,
        });
        if desired > ready {
            status["numberUnavailable"] = json!(desired - ready);
        }
        status
    }
}
