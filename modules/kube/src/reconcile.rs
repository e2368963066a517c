//! Whether an applied object has been reconciled: the rules of kstatus
//! (fluxcd/cli-utils v1.2.0 `pkg/kstatus/status`), which `talosctl upgrade-k8s` waits on after
//! its manifest sync (go-kubernetes v0.2.38 `kubernetes/ssa/wait.go`, fluxcd/pkg `ssa`
//! `manager_wait.go`). Only the kinds the bootstrap manifests hold have rules of their own;
//! anything else is reconciled unless its conditions say otherwise.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// Done.
    Current,
    /// Still rolling out; the words say what is missing (`updated 1 of 3 pods`).
    InProgress(String),
    /// Will not get there without help (a Deployment past its progress deadline).
    Failed(String),
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn condition_is(obj: &Value, kind: &str, status: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c["status"] == status)
}

/// The status of one object as the API server returned it.
pub fn reconciled(obj: &Value) -> Reconciled {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return Reconciled::InProgress("being deleted".into());
    }
    let generation = int(obj, "/metadata/generation");
    let observed = int(obj, "/status/observedGeneration");
    if let (Some(g), Some(o)) = (generation, observed)
        && o != g
    {
        return Reconciled::InProgress(format!("the controller has seen generation {o} of {g}"));
    }
    match obj["kind"].as_str().unwrap_or("") {
        "DaemonSet" => daemon_set(obj, generation, observed),
        "Deployment" => deployment(obj, generation, observed),
        "CustomResourceDefinition" => definition(obj),
        "Service" => service(obj),
        _ => generic(obj),
    }
}

fn daemon_set(obj: &Value, generation: Option<i64>, observed: Option<i64>) -> Reconciled {
    if generation.is_none() || observed.is_none() {
        return Reconciled::InProgress("the controller has not seen it yet".into());
    }
    let Some(desired) = int(obj, "/status/desiredNumberScheduled") else {
        return Reconciled::InProgress("no pods are scheduled yet".into());
    };
    for (field, words) in [
        ("currentNumberScheduled", "scheduled"),
        ("updatedNumberScheduled", "updated"),
        ("numberAvailable", "available"),
        ("numberReady", "ready"),
    ] {
        let have = int(obj, &format!("/status/{field}")).unwrap_or(0);
        if have < desired {
            return Reconciled::InProgress(format!("{words} {have} of {desired} pods"));
        }
    }
    Reconciled::Current
}

fn deployment(obj: &Value, generation: Option<i64>, observed: Option<i64>) -> Reconciled {
    if generation.is_none() || observed.is_none() {
        return Reconciled::InProgress("the controller has not seen it yet".into());
    }
    if condition(obj, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
        return Reconciled::Failed("its progress deadline was exceeded".into());
    }
    let spec = int(obj, "/spec/replicas").unwrap_or(1);
    let status = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    let (replicas, updated, available, ready) = (
        status("replicas"),
        status("updatedReplicas"),
        status("availableReplicas"),
        status("readyReplicas"),
    );
    if spec > replicas {
        return Reconciled::InProgress(format!("{replicas} of {spec} replicas exist"));
    }
    if spec > updated {
        return Reconciled::InProgress(format!("updated {updated} of {spec} replicas"));
    }
    if replicas > spec {
        return Reconciled::InProgress(format!("{} old replicas are terminating", replicas - spec));
    }
    if updated > available {
        return Reconciled::InProgress(format!("available {available} of {updated} replicas"));
    }
    if spec > ready {
        return Reconciled::InProgress(format!("ready {ready} of {spec} replicas"));
    }
    let progressing = condition(obj, "Progressing")
        .is_some_and(|c| c["status"] == "True" && c["reason"] == "NewReplicaSetAvailable");
    if !progressing {
        return Reconciled::InProgress("the new replica set is not available yet".into());
    }
    if !condition_is(obj, "Available", "True") {
        return Reconciled::InProgress("not Available".into());
    }
    Reconciled::Current
}

fn definition(obj: &Value) -> Reconciled {
    if condition_is(obj, "NamesAccepted", "False") {
        let why = condition(obj, "NamesAccepted")
            .and_then(|c| c["message"].as_str())
            .unwrap_or("its names were not accepted");
        return Reconciled::Failed(why.to_string());
    }
    if condition_is(obj, "Established", "True") {
        Reconciled::Current
    } else {
        Reconciled::InProgress("not Established".into())
    }
}

fn service(obj: &Value) -> Reconciled {
    let load_balancer = obj.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
    let cluster_ip = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    if load_balancer && cluster_ip.is_empty() {
        return Reconciled::InProgress("no cluster IP yet".into());
    }
    Reconciled::Current
}

fn generic(obj: &Value) -> Reconciled {
    if condition_is(obj, "Stalled", "True") {
        return Reconciled::Failed("Stalled".into());
    }
    if condition_is(obj, "Reconciling", "True") {
        return Reconciled::InProgress("Reconciling".into());
    }
    if condition_is(obj, "Ready", "False") {
        return Reconciled::InProgress("not Ready".into());
    }
    Reconciled::Current
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn daemon_set_with(status: Value) -> Value {
        json!({"kind": "DaemonSet", "metadata": {"generation": 2}, "status": status})
    }

    #[test]
    fn a_daemon_set_is_current_once_every_pod_is_updated_and_ready() {
        let rolled = daemon_set_with(json!({"observedGeneration": 2, "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3, "numberReady": 3}));
        assert_eq!(reconciled(&rolled), Reconciled::Current);
        let rolling = daemon_set_with(json!({"observedGeneration": 2, "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3, "updatedNumberScheduled": 1, "numberAvailable": 3, "numberReady": 3}));
        assert_eq!(
            reconciled(&rolling),
            Reconciled::InProgress("updated 1 of 3 pods".into())
        );
        let unseen = daemon_set_with(json!({"observedGeneration": 1, "desiredNumberScheduled": 3}));
        assert!(matches!(reconciled(&unseen), Reconciled::InProgress(_)));
        let no_status = json!({"kind": "DaemonSet", "metadata": {"generation": 1}});
        assert!(matches!(reconciled(&no_status), Reconciled::InProgress(_)));
    }

    #[test]
    fn a_deployment_needs_its_replicas_and_both_conditions() {
        let conditions = json!([
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            {"type": "Available", "status": "True"}
        ]);
        let done = json!({"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2,
                "readyReplicas": 2, "conditions": conditions}});
        assert_eq!(reconciled(&done), Reconciled::Current);
        let mut surging = done.clone();
        surging["status"]["replicas"] = json!(3);
        assert!(
            matches!(reconciled(&surging), Reconciled::InProgress(w) if w.contains("terminating"))
        );
        let mut stuck = done.clone();
        stuck["status"]["conditions"][0]["reason"] = json!("ProgressDeadlineExceeded");
        assert!(matches!(reconciled(&stuck), Reconciled::Failed(_)));
    }

    #[test]
    fn definitions_services_and_plain_objects() {
        let crd = json!({"kind": "CustomResourceDefinition", "status": {"conditions": [
            {"type": "Established", "status": "True"}]}});
        assert_eq!(reconciled(&crd), Reconciled::Current);
        let pending = json!({"kind": "CustomResourceDefinition"});
        assert!(matches!(reconciled(&pending), Reconciled::InProgress(_)));
        let lb = json!({"kind": "Service", "spec": {"type": "LoadBalancer"}});
        assert!(matches!(reconciled(&lb), Reconciled::InProgress(_)));
        let cm = json!({"kind": "ConfigMap", "data": {}});
        assert_eq!(reconciled(&cm), Reconciled::Current);
        let deleting =
            json!({"kind": "ConfigMap", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(matches!(reconciled(&deleting), Reconciled::InProgress(_)));
    }
}
