//! The Kubernetes side of talos_upgrade and of talos_reboot's `drain`: cordon and drain the node
//! before it reboots, wait until its Node is Ready on the new boot afterwards, then uncordon it, as
//! `talosctl upgrade` does by default and `talosctl reboot --drain` does when asked (`--drain`,
//! `--drain-timeout 5m`; `cmd/talosctl/cmd/talos/upgrade.go`, `cmd/talosctl/cmd/talos/reboot.go`
//! and `drain.go`, `cmd/talosctl/pkg/talos/nodedrain/` at v1.13.9 and v1.14.1). On the
//! LifecycleService path Talos itself drains nothing, and on the legacy path its own drain ignores
//! PodDisruptionBudget refusals; Reboot never drains; so the module does it.
//!
//! Which pods go is kubectl's drain filters with talosctl's settings (`ferro_talos_kube::drain`): a
//! static pod or a pod of an existing DaemonSet stays, a pod of a DaemonSet that is gone is
//! evicted like a pod without a controller, and both are named in a warning.
//!
//! Where this differs from talosctl, on purpose: a drain that fails uncordons the node again
//! (talosctl leaves it cordoned) and happens before the installer writes anything (talosctl
//! installs first), so a refused drain leaves the node exactly as it was; a node that was already
//! cordoned before the upgrade stays cordoned afterwards (talosctl uncordons it regardless).

use std::time::{Duration, Instant};

use ferro_talos_client::{ClientError, ConnectOptions, Credentials, TalosClient};
use ferro_talos_config::MachineConfig;
use ferro_talos_kube::{DrainPlan, Kube, KubeErrorKind};

use crate::shared::connection::Target;
pub use crate::shared::kube_access::KubeCredentials;
use serde_json::{Value, json};

/// talosctl's `--drain-timeout` default (`nodedrain.DefaultDrainTimeout`).
pub const DEFAULT_DRAIN_TIMEOUT_SECS: i64 = 300;

/// What the drain needs from the task besides the Talos connection.
pub struct KubeInputs {
    pub credentials: KubeCredentials,
    /// The talosconfig context's endpoints: where a worker's upgrade asks Talos for a kubeconfig.
    pub talosconfig_endpoints: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct DrainOptions {
    pub enabled: bool,
    pub timeout: Duration,
}

/// What the node is drained for, so that messages say what happened to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainFor {
    /// talos_upgrade's OS upgrade.
    Upgrade,
    /// talos_reboot's reboot.
    Reboot,
}

impl DrainFor {
    /// The remedy that ends a failure before anything moved.
    fn without(self) -> &'static str {
        match self {
            DrainFor::Upgrade => "set drain: false to upgrade without draining",
            DrainFor::Reboot => "set drain: false to reboot without draining",
        }
    }

    /// What was done to the node once it is back.
    fn done(self) -> &'static str {
        match self {
            DrainFor::Upgrade => "Talos was upgraded",
            DrainFor::Reboot => "the node rebooted",
        }
    }

    /// What was not done when the drain failed.
    fn not_done(self) -> &'static str {
        match self {
            DrainFor::Upgrade => "Talos was not upgraded",
            DrainFor::Reboot => "the node was not rebooted",
        }
    }
}

/// A node that is drained around its reboot.
pub struct Drainer {
    kube: Kube,
    pub node_name: String,
    boot_id: String,
    already_cordoned: bool,
    cordoned_here: bool,
    around: DrainFor,
}

/// The cluster's Kubernetes endpoint as the node's config names it (`cluster.controlPlane.endpoint`),
/// where a bundle's admin certificate is used.
pub fn cluster_endpoint(config: &MachineConfig) -> Option<&str> {
    // Either config shape: Talos 1.14 keeps it in KubeClusterConfig.
    crate::shared::kubernetes_config::cluster_endpoint(config)
}

/// The Talos connection that issues a kubeconfig when the task gives no other Kubernetes
/// credentials: Talos issues one from a control plane, so the endpoint the task goes through,
/// else the node itself when it is a control plane, else (a worker) the talosconfig's first
/// endpoint, which is where talosctl asks (`BuildRandomEndpointClient` in `drain.go`).
pub async fn kubeconfig_source(
    target: &Target,
    client: &TalosClient,
    creds: &Credentials,
    opts: &ConnectOptions,
    kube: &KubeInputs,
    control_plane: bool,
) -> Result<TalosClient, ClientError> {
    let issuer = if target.routed() {
        Some(target.endpoint.clone())
    } else if control_plane {
        None
    } else {
        kube.talosconfig_endpoints.first().cloned()
    };
    match (issuer, &kube.credentials) {
        (Some(endpoint), KubeCredentials::TalosApi) => {
            TalosClient::connect(&endpoint, creds, opts.clone()).await
        }
        _ => Ok(client.clone()),
    }
}

/// Nothing to drain, and why (a warning for the result).
pub struct NoDrain(pub String);

/// Connects to Kubernetes and finds the node's Node object. `Ok(Err(NoDrain))` when there is
/// nothing to drain (the node does not register with Kubernetes, or has not yet).
/// `kubeconfig_source` is the Talos connection that issues a kubeconfig when no other
/// credentials were given: the task's endpoint, which talosctl expects to be a control plane.
pub async fn connect(
    talos: &TalosClient,
    kubeconfig_source: &TalosClient,
    talos_node: &str,
    creds: &KubeCredentials,
    cluster_endpoint: Option<&str>,
    around: DrainFor,
) -> Result<Result<Drainer, NoDrain>, String> {
    let without = around.without();
    let access = creds
        .access(talos_node, kubeconfig_source, cluster_endpoint, without)
        .await?;
    let node_name = match talos.nodename().await {
        Ok(Some(name)) => name,
        Ok(None) => {
            return Ok(Err(NoDrain(format!(
                "{talos_node} does not register with Kubernetes (kubelet skipNodeRegistration): nothing to drain"
            ))));
        }
        Err(e) => {
            return Err(format!(
                "{talos_node}: cannot read the node's Kubernetes node name to drain it: {e}; {without}"
            ));
        }
    };
    let kube = access
        .connect()
        .await
        .map_err(|e| format!("{talos_node}: {e}"))?;
    let node = match kube.node(&node_name).await {
        Ok(n) => n,
        Err(e) if e.kind == KubeErrorKind::NotFound => {
            return Ok(Err(NoDrain(format!(
                "{talos_node}: Kubernetes has no Node {node_name} (not registered yet): nothing to drain"
            ))));
        }
        Err(e) => {
            return Err(format!(
                "{talos_node}: {e}; the node was not touched ({without})"
            ));
        }
    };
    Ok(Ok(Drainer {
        kube,
        node_name,
        boot_id: node.boot_id,
        already_cordoned: node.unschedulable,
        cordoned_here: false,
        around,
    }))
}

fn plan_json(plan: &DrainPlan) -> Value {
    json!({
        "evict": plan.evict.iter().map(|p| {
            let mut pod = json!({"pod": p.id(), "controller": p.controller});
            if p.orphaned {
                pod["orphaned"] = json!(true);
            }
            pod
        }).collect::<Vec<_>>(),
        "skip": plan.skipped.iter().map(|s| json!({
            "pod": format!("{}/{}", s.namespace, s.name),
            "reason": s.reason,
        })).collect::<Vec<_>>(),
    })
}

impl Drainer {
    /// What a drain would do (check mode), as the `drain` result.
    pub async fn preview(&self, talos_node: &str) -> Result<Value, String> {
        let plan = self
            .kube
            .drain_plan(&self.node_name)
            .await
            .map_err(|e| format!("{talos_node}: {e}"))?;
        let mut out = plan_json(&plan);
        out["node_name"] = json!(self.node_name);
        out["already_cordoned"] = json!(self.already_cordoned);
        Ok(out)
    }

    /// Pods that no controller brings back, in words for a warning: pods without a controller,
    /// and pods of a DaemonSet that no longer exists.
    pub fn unmanaged(plan: &DrainPlan) -> Vec<String> {
        plan.evict
            .iter()
            .filter_map(|p| match (&p.controller, p.orphaned) {
                (None, _) => Some(format!("pod {} has no controller", p.id())),
                (Some(c), true) => Some(format!(
                    "pod {} belongs to {c}, which no longer exists",
                    p.id()
                )),
                (Some(_), false) => None,
            })
            .collect()
    }

    /// Cordons the node (unless an operator already did) and evicts its pods. A drain that does
    /// not finish uncordons the node again; the error says what blocked it.
    pub async fn cordon_and_drain(
        &mut self,
        talos_node: &str,
        timeout: Duration,
    ) -> Result<(Value, Vec<String>), String> {
        if !self.already_cordoned {
            self.kube
                .set_unschedulable(&self.node_name, true)
                .await
                .map_err(|e| format!("{talos_node}: {e}; the node was not touched"))?;
            self.cordoned_here = true;
        }
        let deadline = Instant::now() + timeout;
        let drained = match self.kube.drain_plan(&self.node_name).await {
            Ok(plan) => {
                let unmanaged = Self::unmanaged(&plan);
                self.kube
                    .drain(&plan, deadline)
                    .await
                    .map(|report| (plan, report, unmanaged))
            }
            Err(e) => Err(e),
        };
        match drained {
            Ok((plan, report, unmanaged)) => {
                let mut out = plan_json(&plan);
                out["node_name"] = json!(self.node_name);
                out["evicted"] = json!(report.evicted);
                out["seconds"] = json!((report.seconds * 10.0).round() / 10.0);
                out["already_cordoned"] = json!(self.already_cordoned);
                let warnings = unmanaged
                    .into_iter()
                    .map(|why| {
                        format!(
                            "{talos_node}: {why}, so nothing recreates it after its eviction (talosctl's drain, \
                             kubectl drain --force, evicts such pods too)"
                        )
                    })
                    .collect();
                Ok((out, warnings))
            }
            Err(e) => {
                let undo = self.uncordon_if_cordoned_here().await;
                let advice = match e.kind {
                    KubeErrorKind::DrainTimeout => {
                        "; raise drain_timeout, let the budget allow a disruption (more replicas), or set drain: false"
                    }
                    _ => "",
                };
                Err(format!(
                    "{talos_node}: {}{advice}; {undo}, and {}",
                    e.message,
                    self.around.not_done()
                ))
            }
        }
    }

    /// After the reboot: waits until the Node is Ready on a new boot, then uncordons it (if the
    /// module cordoned it). Returns the `uncordoned` flag.
    pub async fn back_and_uncordon(
        &mut self,
        talos_node: &str,
        deadline: Instant,
    ) -> Result<bool, String> {
        let before = self.boot_id.clone();
        self.kube
            .wait_node(&self.node_name, deadline, |n| n.boot_id != before)
            .await
            .map_err(|e| {
                format!(
                    "{talos_node}: {}, but {e}; it stays cordoned until you uncordon it (kubectl uncordon {})",
                    self.around.done(),
                    self.node_name
                )
            })?;
        if !self.cordoned_here {
            return Ok(false);
        }
        self.kube
            .set_unschedulable(&self.node_name, false)
            .await
            .map_err(|e| format!("{talos_node}: {}, but {e}", self.around.done()))?;
        self.cordoned_here = false;
        Ok(true)
    }

    /// After a failed upgrade or reboot: uncordon (as talosctl's deferred uncordon does), in words
    /// for the error message.
    pub async fn uncordon_if_cordoned_here(&mut self) -> String {
        if !self.cordoned_here {
            return if self.already_cordoned {
                format!("Node {} stays cordoned as it was before", self.node_name)
            } else {
                format!("Node {} was not cordoned", self.node_name)
            };
        }
        match self.kube.set_unschedulable(&self.node_name, false).await {
            Ok(()) => {
                self.cordoned_here = false;
                format!("Node {} was uncordoned again", self.node_name)
            }
            Err(e) => format!(
                "Node {} could not be uncordoned ({e}): run kubectl uncordon {}",
                self.node_name, self.node_name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_talos_kube::PodToEvict;

    fn pod(name: &str, controller: Option<&str>, orphaned: bool) -> PodToEvict {
        PodToEvict {
            namespace: "default".into(),
            name: name.into(),
            uid: String::new(),
            controller: controller.map(String::from),
            orphaned,
            labels: Default::default(),
        }
    }

    /// What nothing recreates after its eviction is named: a pod without a controller, and a
    /// pod of a DaemonSet that is gone (kubectl's `unreplicatedFilter` and `daemonSetFilter`
    /// warnings under `--force`, `k8s.io/kubectl/pkg/drain/filters.go` @ v0.36.3).
    #[test]
    fn pods_nothing_recreates_are_named_and_why() {
        let plan = DrainPlan {
            node: "w1".into(),
            evict: vec![
                pod("web-1", Some("ReplicaSet/web-5d4f8"), false),
                pod("bare", None, false),
                pod("agent-x", Some("DaemonSet/agent"), true),
            ],
            skipped: vec![],
        };
        assert_eq!(
            Drainer::unmanaged(&plan),
            [
                "pod default/bare has no controller",
                "pod default/agent-x belongs to DaemonSet/agent, which no longer exists"
            ]
        );
        let json = plan_json(&plan);
        assert_eq!(json["evict"][2]["orphaned"], true);
        assert!(json["evict"][0].get("orphaned").is_none());
    }
}
