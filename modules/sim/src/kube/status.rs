//! The `status` of a stored object as the controllers keep it, computed when it is read: the
//! DaemonSet and Deployment controllers' counts and conditions, a CRD's `Established`, a
//! Namespace's phase, a Service's load balancer.

use serde_json::{Value, json};

use super::model::KubeState;
use super::objects::ObjectKey;
use crate::state::Node;

impl KubeState {
    /// The object as a read returns it.
    pub fn with_status(&self, key: &ObjectKey, mut object: Value, st_nodes: &[Node]) -> Value {
        let status = match (key.group.as_str(), key.kind.as_str()) {
            ("apps", "DaemonSet") => Some(self.daemonset_status(
                &key.namespace,
                &key.name,
                object["metadata"]["generation"].as_i64().unwrap_or(1),
                st_nodes,
            )),
            ("apps", "Deployment") => {
                Some(self.deployment_status(&key.namespace, &key.name, &object, st_nodes))
            }
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                let storage: Vec<Value> = object
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                    .filter_map(|v| v.get("name").cloned())
                    .collect();
                Some(json!({
                    "acceptedNames": object.pointer("/spec/names").cloned().unwrap_or(json!({})),
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                         "message": "no conflicts found"},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                         "message": "the initial names have been accepted"},
                    ],
                    "storedVersions": storage,
                }))
            }
            ("", "Namespace") => Some(json!({"phase": "Active"})),
            ("", "Service") => Some(json!({"loadBalancer": {}})),
            _ => None,
        };
        if let Some(status) = status {
            object["status"] = status;
        }
        object
    }
}
