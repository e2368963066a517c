//! Draining a node the way `talosctl upgrade` does: it drives k8s.io/kubectl's drain helper with
//! `Force`, `IgnoreAllDaemonSets` and `DeleteEmptyDirData` set (`cmd/talosctl/pkg/talos/nodedrain/nodedrain.go`
//! at Talos v1.13.9 with kubectl v0.36.3; at v1.14.1 through go-kubernetes v0.2.41
//! `kubernetes/nodedrain`, the same settings). Every pod bound to the node is evicted through the
//! Eviction API (policy/v1), so PodDisruptionBudgets hold, except what kubectl's filters
//! (`k8s.io/kubectl/pkg/drain/filters.go`, v0.35.0 to v0.36.3 alike) leave: static (mirror) pods,
//! and pods of a DaemonSet that exists. A pod whose controller is a DaemonSet (kind `DaemonSet`,
//! API version `apps/v1`) that is not finished is looked up: found, it stays; gone (404), it is
//! orphaned and evicted with a warning, as `--force` does; any other answer fails the drain before
//! anything is evicted, as kubectl does. Pods without a controller, with emptyDir data, or already
//! finished are evicted too. A pod is gone when the API server no longer has it or has a new pod
//! under its name (another UID). An eviction that a budget refuses (429) is tried again until the
//! deadline; kubectl's CLI waits 5 s between tries, talosctl not at all, this waits one second.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::core::params::ListParams;

use crate::access::Kube;
use crate::error::{KubeError, KubeErrorKind, Result};
use crate::objects::{Budget, Pod, budgets, daemonsets, pods};
use crate::transport::RequestError;

const RETRY: Duration = Duration::from_secs(1);
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A pod the drain evicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodToEvict {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `ReplicaSet/web-5d4f8`, or None for a pod no controller will bring back.
    pub controller: Option<String>,
    /// The pod's controller is a DaemonSet the API server no longer has: nothing recreates it.
    pub orphaned: bool,
    pub labels: BTreeMap<String, String>,
}

impl PodToEvict {
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A pod the drain leaves where it is, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedPod {
    pub namespace: String,
    pub name: String,
    pub reason: &'static str,
}

/// What a drain of one node would do.
#[derive(Clone, Debug, Default)]
pub struct DrainPlan {
    pub node: String,
    pub evict: Vec<PodToEvict>,
    pub skipped: Vec<SkippedPod>,
}

#[derive(Clone, Debug, Default)]
pub struct DrainReport {
    pub evicted: Vec<String>,
    pub skipped: Vec<SkippedPod>,
    pub seconds: f64,
}

enum Progress {
    Evict,
    Deleting,
}

/// A pod still on its way out, and the budget's words if its last eviction was refused.
struct Pending {
    pod: PodToEvict,
    progress: Progress,
    blocked: Option<String>,
}

impl Kube {
    /// The pods on `node` and what a drain does with each.
    pub async fn drain_plan(&self, node: &str) -> Result<DrainPlan> {
        let list = self
            .list::<Pod>(
                &pods(None),
                &ListParams::default().fields(&format!("spec.nodeName={node}")),
            )
            .await
            .map_err(|e| self.error(&format!("list the pods on Node {node}"), e))?;
        let mut plan = DrainPlan {
            node: node.to_string(),
            ..DrainPlan::default()
        };
        let mut daemonsets: BTreeMap<(String, String), bool> = BTreeMap::new();
        for p in list.items {
            let meta = p.metadata;
            let controller = meta
                .owner_references
                .iter()
                .find(|o| o.controller == Some(true));
            let finished = matches!(p.status.phase.as_str(), "Succeeded" | "Failed");
            // kubectl's daemonSetFilter: an unfinished pod of an apps/v1 DaemonSet stays while
            // the DaemonSet exists.
            let mut orphaned = false;
            if let Some(c) = controller
                .filter(|c| c.kind == "DaemonSet" && c.api_version == "apps/v1" && !finished)
            {
                let key = (meta.namespace.clone(), c.name.clone());
                let exists = match daemonsets.get(&key) {
                    Some(exists) => *exists,
                    None => {
                        let exists = self.daemonset_exists(&key.0, &key.1, &meta.name).await?;
                        daemonsets.insert(key, exists);
                        exists
                    }
                };
                if exists {
                    plan.skipped.push(SkippedPod {
                        namespace: meta.namespace,
                        name: meta.name,
                        reason: "DaemonSet pod (it belongs on every node)",
                    });
                    continue;
                }
                orphaned = true;
            }
            // mirrorPodFilter.
            if meta.annotations.contains_key(MIRROR_ANNOTATION) {
                plan.skipped.push(SkippedPod {
                    namespace: meta.namespace,
                    name: meta.name,
                    reason: "static pod (the kubelet runs it from the node's config)",
                });
                continue;
            }
            // localStorageFilter and unreplicatedFilter let everything else go (DeleteEmptyDirData,
            // Force).
            plan.evict.push(PodToEvict {
                controller: controller.map(|c| format!("{}/{}", c.kind, c.name)),
                orphaned,
                namespace: meta.namespace,
                name: meta.name,
                uid: meta.uid,
                labels: meta.labels,
            });
        }
        Ok(plan)
    }

    /// Whether the DaemonSet `namespace/name` that controls `pod` exists; an answer other than
    /// the DaemonSet or a 404 fails the drain, naming the pod (kubectl: `cannot delete ...`).
    async fn daemonset_exists(&self, namespace: &str, name: &str, pod: &str) -> Result<bool> {
        match self
            .get::<serde_json::Value>(&daemonsets(namespace), name)
            .await
        {
            Ok(_) => Ok(true),
            Err(RequestError::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(self.error(
                &format!(
                    "read DaemonSet {namespace}/{name}, the controller of pod {namespace}/{pod}, so nothing was evicted"
                ),
                e,
            )),
        }
    }

    /// Evicts every pod of `plan` and waits until each is gone, until `deadline`.
    pub async fn drain(&self, plan: &DrainPlan, deadline: Instant) -> Result<DrainReport> {
        let started = Instant::now();
        let mut pending: Vec<Pending> = plan
            .evict
            .iter()
            .cloned()
            .map(|pod| Pending {
                pod,
                progress: Progress::Evict,
                blocked: None,
            })
            .collect();
        let mut evicted = Vec::new();
        loop {
            let mut still = Vec::new();
            for mut p in pending {
                match p.progress {
                    Progress::Evict => match self.evict_pod(&p.pod.namespace, &p.pod.name).await {
                        Ok(()) => {
                            p.progress = Progress::Deleting;
                            p.blocked = None;
                            still.push(p);
                        }
                        Err(RequestError::Api(s)) if s.code == 404 => evicted.push(p.pod.id()),
                        Err(RequestError::Api(s)) if s.code == 429 => {
                            let cause = s
                                .details
                                .as_ref()
                                .and_then(|d| {
                                    d.causes.iter().find(|c| c.reason == "DisruptionBudget")
                                })
                                .map(|c| c.message.clone())
                                .unwrap_or_else(|| s.message.clone());
                            p.blocked = Some(cause);
                            still.push(p);
                        }
                        Err(e) => {
                            return Err(self.error(
                                &format!("evict pod {} from Node {}", p.pod.id(), plan.node),
                                e,
                            ));
                        }
                    },
                    Progress::Deleting => {
                        match self
                            .get::<Pod>(&pods(Some(&p.pod.namespace)), &p.pod.name)
                            .await
                        {
                            Err(RequestError::Api(s)) if s.code == 404 => evicted.push(p.pod.id()),
                            Ok(now) if now.metadata.uid != p.pod.uid => evicted.push(p.pod.id()),
                            Ok(_) => still.push(p),
                            Err(e) => {
                                return Err(self.error(&format!("read pod {}", p.pod.id()), e));
                            }
                        }
                    }
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(DrainReport {
                    evicted,
                    skipped: plan.skipped.clone(),
                    seconds: started.elapsed().as_secs_f64(),
                });
            }
            if Instant::now() + RETRY > deadline {
                return Err(self.drain_timeout(plan, &pending, started).await);
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    async fn drain_timeout(
        &self,
        plan: &DrainPlan,
        pending: &[Pending],
        started: Instant,
    ) -> KubeError {
        let mut reasons = Vec::new();
        for p in pending {
            let why = match (&p.progress, &p.blocked) {
                (Progress::Evict, Some(cause)) => {
                    let budget = self.budget_of(&p.pod, cause).await;
                    format!("its eviction is blocked by PodDisruptionBudget {budget} ({cause})")
                }
                (Progress::Evict, None) => "it was not evicted yet".to_string(),
                (Progress::Deleting, _) => "it was evicted but is still terminating".to_string(),
            };
            reasons.push(format!("pod {}: {why}", p.pod.id()));
        }
        KubeError::new(
            KubeErrorKind::DrainTimeout,
            format!(
                "draining Node {} did not finish within {:.0}s: {}",
                plan.node,
                started.elapsed().as_secs_f64(),
                reasons.join("; ")
            ),
        )
    }

    /// `namespace/name` of the budget that refused an eviction: from the API server's cause
    /// ("The disruption budget NAME needs N healthy pods ...", kubernetes
    /// pkg/registry/core/pod/storage/eviction.go), else the budget whose selector matches the pod.
    async fn budget_of(&self, pod: &PodToEvict, cause: &str) -> String {
        if let Some(rest) = cause.strip_prefix("The disruption budget ")
            && let Some(name) = rest.split_whitespace().next()
        {
            return format!("{}/{name}", pod.namespace);
        }
        let Ok(list) = self
            .list::<Budget>(&budgets(&pod.namespace), &ListParams::default())
            .await
        else {
            return "(unknown)".into();
        };
        list.items
            .iter()
            .find(|b| {
                b.spec.selector.as_ref().is_some_and(|s| {
                    !s.match_labels.is_empty()
                        && s.match_labels
                            .iter()
                            .all(|(k, v)| pod.labels.get(k) == Some(v))
                })
            })
            .map(|b| format!("{}/{}", pod.namespace, b.metadata.name))
            .unwrap_or_else(|| "(unknown)".into())
    }
}
