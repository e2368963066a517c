//! The Deployment and ReplicaSet controllers for stored Deployments: each has a workload whose
//! pods (workload pods, so drains and evictions treat them as before) run the pod template's
//! image, as many as `spec.replicas`. A changed pod template is a new ReplicaSet: the old
//! ReplicaSet's pods are replaced at once and the new ones are Ready `READY_DELAY` after they are
//! scheduled. The Deployment's `status` reports it in the fields kstatus reads
//! (`github.com/fluxcd/cli-utils` pkg/kstatus/status/core.go deploymentConditions:
//! `Progressing` True with reason `NewReplicaSetAvailable`, `Available` True, the replica
//! counts) and the messages of kubernetes `pkg/controller/deployment/util/deployment_util.go`.
//! CoreDNS is such a Deployment, applied by Talos at bootstrap.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::daemonsets::tolerates_control_plane;
use super::model::{KubeState, Owner, Workload};
use super::objects::timestamp;
use crate::state::Node;

/// What ties a workload to its Deployment object.
#[derive(Clone, Debug)]
pub struct DeploymentLink {
    pub uid: String,
    /// The pod template the current ReplicaSet runs.
    pub template: Value,
}

fn replica_set_name(name: &str, template: &Value) -> String {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(template.to_string().as_bytes()));
    format!("{name}-{}", &h[..10])
}

/// A pod template's labels (string values only).
pub(super) fn labels_of(template: &Value) -> BTreeMap<String, String> {
    template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn container(template: &Value) -> (String, String) {
    let c = &template["spec"]["containers"][0];
    (
        c["name"].as_str().unwrap_or("app").to_string(),
        c["image"].as_str().unwrap_or("").to_string(),
    )
}

/// `maxUnavailable` of a RollingUpdate strategy (default 25%, rounded down as Kubernetes does).
fn max_unavailable(spec: &Value, replicas: u32) -> u32 {
    let v = spec.pointer("/strategy/rollingUpdate/maxUnavailable");
    match v {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0) as u32,
        Some(Value::String(s)) => s
            .trim_end_matches('%')
            .parse::<u32>()
            .map(|pct| replicas * pct / 100)
            .unwrap_or(0),
        _ => replicas / 4,
    }
}

impl KubeState {
    /// Keeps one workload per stored Deployment, at its replica count and pod template; drops the
    /// workloads (and pods) of Deployments that are gone.
    pub fn sync_deployments(&mut self) {
        let deployments: Vec<(String, String, String, u32, Value)> = self
            .objects
            .list("apps", "Deployment", None)
            .map(|(k, v)| {
                (
                    k.namespace.clone(),
                    k.name.clone(),
                    v["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                    v["spec"]["replicas"].as_u64().unwrap_or(1) as u32,
                    v["spec"]["template"].clone(),
                )
            })
            .collect();
        let mut changed = false;
        for (namespace, name, uid, replicas, template) in &deployments {
            let (container, image) = container(template);
            let position = self
                .workloads
                .iter()
                .position(|w| w.namespace == *namespace && w.name == *name);
            let current = position.and_then(|i| self.workloads[i].deployment.as_ref());
            if current.is_some_and(|d| d.uid == *uid && d.template == *template) {
                if let Some(i) = position
                    && self.workloads[i].replicas != *replicas
                {
                    self.workloads[i].replicas = *replicas;
                    changed = true;
                }
                continue;
            }
            let workload = Workload {
                namespace: namespace.clone(),
                name: name.clone(),
                replicas: *replicas,
                labels: labels_of(template),
                image,
                replica_set: replica_set_name(name, template),
                replica_set_uid: crate::state::new_uuid(),
                tolerates_control_plane: tolerates_control_plane(&template["spec"]),
                container: Some(container),
                deployment: Some(DeploymentLink {
                    uid: uid.clone(),
                    template: template.clone(),
                }),
            };
            match position {
                Some(i) => self.workloads[i] = workload,
                None => self.workloads.push(workload),
            }
            // The new ReplicaSet replaces the old one's pods.
            let rs = replica_set_name(name, template);
            self.pods.retain(|p| {
                p.namespace != *namespace
                    || p.workload != *name
                    || matches!(&p.owner, Owner::ReplicaSet { name, .. } if *name == rs)
            });
            changed = true;
        }
        let before = self.workloads.len();
        self.workloads.retain(|w| {
            w.deployment.is_none()
                || deployments
                    .iter()
                    .any(|(ns, name, ..)| *ns == w.namespace && *name == w.name)
        });
        if before != self.workloads.len() {
            let workloads = &self.workloads;
            self.pods.retain(|p| {
                workloads
                    .iter()
                    .any(|w| w.namespace == p.namespace && w.name == p.workload)
            });
            changed = true;
        }
        if changed {
            self.bump();
        }
    }

    /// The Deployment's `status` from its workload's pods.
    pub fn deployment_status(
        &self,
        namespace: &str,
        name: &str,
        object: &Value,
        st_nodes: &[Node],
    ) -> Value {
        let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
        let spec_replicas = object["spec"]["replicas"].as_u64().unwrap_or(1) as u32;
        let Some(w) = self
            .workloads
            .iter()
            .find(|w| w.namespace == namespace && w.name == name)
        else {
            return json!({"observedGeneration": generation});
        };
        let pods: Vec<_> = self
            .pods
            .iter()
            .filter(|p| p.namespace == namespace && p.workload == name)
            .collect();
        let replicas = pods.len() as u32;
        let updated = pods
            .iter()
            .filter(
                |p| matches!(&p.owner, Owner::ReplicaSet { name, .. } if *name == w.replica_set),
            )
            .count() as u32;
        let ready = pods.iter().filter(|p| self.pod_ready(p, st_nodes)).count() as u32;
        let now = timestamp(SystemTime::now());
        let available =
            ready >= spec_replicas.saturating_sub(max_unavailable(&object["spec"], spec_replicas));
        let complete =
            updated == spec_replicas && replicas == spec_replicas && ready == spec_replicas;
        let (reason, message) = if complete {
            (
                "NewReplicaSetAvailable",
                format!(
                    "ReplicaSet \"{}\" has successfully progressed.",
                    w.replica_set
                ),
            )
        } else {
            (
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{}\" is progressing.", w.replica_set),
            )
        };
        let mut status = json!({
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": if available { "True" } else { "False" },
                    "reason": if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                    "message": if available { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." },
                    "lastUpdateTime": now,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastUpdateTime": now,
                    "lastTransitionTime": now,
                },
            ],
        });
        if replicas > ready {
            status["unavailableReplicas"] = json!(replicas - ready);
        }
        status
    }
}
