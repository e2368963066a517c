//! The simulated cluster's Kubernetes objects and what the API server and the controllers do with
//! them: Nodes registered by each configured node's kubelet, the pods Talos's bootstrap manifests
//! and static pods create, workloads a test adds, PodDisruptionBudgets, cordons and evictions.
//!
//! Most objects are derived from the Talos side at read time (a node's kubelet version is the tag
//! of the kubelet image in its running config, a static pod's image is the one in the config, a
//! node is Ready while it is up and its kubelet has had time to start), so they follow reboots,
//! upgrades and config changes without a background loop. What Kubernetes itself keeps (cordons,
//! annotations, workload pods and where they run, PDBs) lives here.
//!
//! Behaviour follows the Kubernetes API server: the eviction rules of
//! `pkg/registry/core/pod/storage/eviction.go` (kubernetes/kubernetes, commit 01aa0f3f; 429 with a
//! `DisruptionBudget` cause naming the budget, pods that are not running bypass budgets), the
//! static pods' labels and `talos.dev/config-version` annotation of Talos's
//! `internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go` (v1.13.9), CoreDNS's
//! two replicas from `internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/coredns.go`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::control::KubeLogEntry;
use crate::state::Node;

/// How long a kubelet or a new pod takes to become Ready after its node starts or it is scheduled.
pub const READY_DELAY: Duration = Duration::from_millis(300);

/// The components Talos runs as static pods on a control plane, with where the v1alpha1 config
/// (and the Talos 1.14 documents) keep their images.
pub const STATIC_PODS: &[StaticComponent] = &[
    StaticComponent {
        name: "kube-apiserver",
        v1alpha1: &["cluster", "apiServer", "image"],
        kind: "KubeAPIServerConfig",
    },
    StaticComponent {
        name: "kube-controller-manager",
        v1alpha1: &["cluster", "controllerManager", "image"],
        kind: "KubeControllerManagerConfig",
    },
    StaticComponent {
        name: "kube-scheduler",
        v1alpha1: &["cluster", "scheduler", "image"],
        kind: "KubeSchedulerConfig",
    },
];

pub struct StaticComponent {
    pub name: &'static str,
    pub v1alpha1: &'static [&'static str],
    pub kind: &'static str,
}

const KUBELET_IMAGE: &[&str] = &["machine", "kubelet", "image"];
const PROXY_IMAGE: &[&str] = &["cluster", "proxy", "image"];
const DEFAULT_KUBELET: &str = "ghcr.io/siderolabs/kubelet:v1.36.3";

/// The kubelet's node name: the hostname in lower case (upstream's `nodename.FromHostname` in
/// `internal/app/machined/pkg/controllers/k8s/nodename.go` at v1.13.9).
pub fn node_name(n: &Node) -> String {
    n.active
        .as_ref()
        .and_then(|c| c.hostname())
        .unwrap_or_else(|| n.hostname.clone())
        .to_lowercase()
}

/// What Kubernetes keeps about a registered Node beyond what the kubelet reports.
#[derive(Clone, Debug)]
pub struct NodeRecord {
    pub uid: String,
    pub index: usize,
    pub created: SystemTime,
    pub unschedulable: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The taints Talos put there from the node's config (`node_apply.rs`).
    pub taints: Vec<Taint>,
    pub resource_version: u64,
}

/// A Node taint: key, value (may be empty) and effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    ReplicaSet { name: String, uid: String },
}

/// A workload pod (owned by a ReplicaSet); static and DaemonSet pods are derived, not stored.
#[derive(Clone, Debug)]
pub struct PodRecord {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub container: String,
    pub image: String,
    pub owner: Owner,
    /// None while Pending (no schedulable node).
    pub node: Option<String>,
    /// When the pod was bound to its node: it is Ready `READY_DELAY` later.
    pub scheduled: Option<Instant>,
    pub created: SystemTime,
    pub resource_version: u64,
    /// The workload it belongs to (for replacements).
    pub workload: String,
    /// Only on control planes (CoreDNS tolerates their taint; test workloads run on workers).
    pub tolerates_control_plane: bool,
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub namespace: String,
    pub name: String,
    pub replicas: u32,
    pub labels: BTreeMap<String, String>,
    pub image: String,
    pub replica_set: String,
    pub replica_set_uid: String,
    pub tolerates_control_plane: bool,
    /// The pods' container name (the workload's name when None).
    pub container: Option<String>,
    /// Set for the workload of a stored Deployment (CoreDNS, or one a client applied); None for
    /// one a test added through the control protocol.
    pub deployment: Option<super::deployments::DeploymentLink>,
}

#[derive(Clone, Debug)]
pub struct Budget {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub selector: BTreeMap<String, String>,
    pub min_available: u32,
    pub created: SystemTime,
}

/// One write the Kubernetes API accepted, or a node going down, in order: tests read the log to
/// prove what happened before what (through the control protocol's `kube`).
#[derive(Clone, Debug)]
pub struct KubeEvent {
    pub seq: u64,
    /// `cordon`, `uncordon`, `evict`, `eviction_blocked`, `node_down`, `node_up`, and `restart`
    /// (a component Talos runs restarts for a new config; `pod` names the component); for writes
    /// of stored objects `apply`, `create`, `update`, `patch` and `delete`, with an empty `node`
    /// and `pod` = `Kind/namespace/name` (`Kind/name` when cluster-scoped).
    pub action: &'static str,
    pub node: String,
    pub pod: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl KubeEvent {
    /// The entry as the control protocol carries it.
    pub fn to_entry(&self) -> KubeLogEntry {
        KubeLogEntry {
            seq: self.seq,
            action: self.action.to_string(),
            node: self.node.clone(),
            pod: self.pod.clone(),
            at_ms: self.at_ms,
        }
    }
}

#[derive(Default)]
pub struct KubeState {
    resource_version: u64,
    pub nodes: BTreeMap<String, NodeRecord>,
    pub pods: Vec<PodRecord>,
    pub workloads: Vec<Workload>,
    pub budgets: Vec<Budget>,
    pub log: Vec<KubeEvent>,
    /// Every other object clients and Talos wrote (Namespaces, ConfigMaps, DaemonSets, ...).
    pub objects: super::objects::ObjectStore,
    /// The pods the DaemonSet controller keeps, by DaemonSet and node.
    pub daemon_pods: BTreeMap<super::daemonsets::DaemonPodKey, super::daemonsets::DaemonPod>,
    /// The control-plane configs (digests) Talos's bootstrap apply ran for.
    pub bootstrap_applied: std::collections::BTreeSet<String>,
    /// The times of Talos's own drain (`talos_drain.rs`), upstream's unless a test shortens them.
    pub talos_drain: super::talos_drain::DrainTimes,
    /// By node index, whether that node's Talos wants its Node cordoned (its NodeCordonedSpec,
    /// which follows the machine's stage and is applied once an API server answers).
    pub talos_cordons: BTreeMap<usize, bool>,
    /// By node index, the boot on which its Node was deleted while the machine ran: its kubelet
    /// registers once per start (`registerWithAPIServer` returns once `registrationCompleted`,
    /// pkg/kubelet/kubelet_node_status.go @ v1.36.3), so the Node comes back only after a reboot.
    pub deleted_on_boot: BTreeMap<usize, String>,
    /// With `--kubernetes real`: the Nodes the simulator's kubelets registered with the real
    /// API server (and have not seen deleted).
    pub real_nodes: std::collections::BTreeSet<String>,
}

/// How a PATCH body is read (its Content-Type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/merge-patch+json`
    Merge,
}

/// A patch whose value has the wrong type for its field: 422 Invalid, as kube-apiserver v1.36.3
/// answers (modules/sim/tests/real_kube_api.rs). A strategic merge patch fails in the patch's
/// own check (`unrecognized type`, with the patch printed as Go prints a map); a merge patch when
/// the patched object is decoded (Go's JSON error, after the object, which the model does not
/// print byte for byte).
fn invalid_patch(
    kind: PatchKind,
    patch: &Value,
    field: &str,
    go_type: &str,
    value: &Value,
) -> ApiError {
    let message = match kind {
        PatchKind::Strategic => format!(
            " \"\" is invalid: patch: Invalid value: \"{}\": unrecognized type: {go_type}",
            go_value(patch)
        ),
        PatchKind::Merge => format!(
            " \"\" is invalid: patch: Invalid value: {}: json: cannot unmarshal {} into Go struct field {field} of type {go_type}",
            serde_json::to_string(&patch.to_string()).unwrap_or_default(),
            json_type(value)
        ),
    };
    ApiError {
        code: 422,
        reason: "Invalid",
        message,
        causes: vec![],
        details_name: None,
    }
}

/// A decoded JSON value as Go's `%v` prints it: `map[k:v]` with sorted keys, `[a b]`, `<nil>`.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_value).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            format!(
                "map[{}]",
                entries
                    .iter()
                    .map(|(k, v)| format!("{k}:{}", go_value(v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
    }
}

/// The Kubernetes API's answer to a request that did not succeed.
#[derive(Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub causes: Vec<(&'static str, String)>,
    pub details_name: Option<(String, String)>,
}

impl ApiError {
    pub fn not_found(kind: &'static str, name: &str) -> ApiError {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{kind} \"{name}\" not found"),
            causes: vec![],
            details_name: Some((name.to_string(), kind.to_string())),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            causes: vec![],
            details_name: None,
        }
    }
}

fn uid() -> String {
    crate::state::new_uuid()
}

fn short_hash() -> String {
    let b: [u8; 4] = rand::random();
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    b.iter()
        .map(|x| alphabet[*x as usize % alphabet.len()] as char)
        .collect::<String>()
        + &(rand::random::<u8>() % 10).to_string()
}

impl KubeState {
    pub(super) fn bump(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// Whether the cluster has a Node of this name, in the model or the real API server.
    pub fn has_node(&self, name: &str) -> bool {
        self.nodes.contains_key(name) || self.real_nodes.contains(name)
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn record(&mut self, action: &'static str, node: &str, pod: Option<String>) {
        let seq = self.log.len() as u64 + 1;
        self.log.push(KubeEvent {
            seq,
            action,
            node: node.to_string(),
            pod,
            at_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        });
    }

    /// Adds a Deployment-like workload (and its PodDisruptionBudget when `min_available` is set),
    /// scheduled at once on the schedulable nodes.
    pub fn add_workload(
        &mut self,
        namespace: &str,
        name: &str,
        replicas: u32,
        min_available: Option<u32>,
        tolerates_control_plane: bool,
    ) -> Result<(), String> {
        if self
            .workloads
            .iter()
            .any(|w| w.namespace == namespace && w.name == name)
        {
            return Err(format!("workload {namespace}/{name} exists already"));
        }
        let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
        self.workloads.push(Workload {
            namespace: namespace.into(),
            name: name.into(),
            replicas,
            labels: labels.clone(),
            image: format!("registry.example/{name}:1.0"),
            replica_set: format!("{name}-{}", short_hash()),
            replica_set_uid: uid(),
            tolerates_control_plane,
            container: None,
            deployment: None,
        });
        if let Some(min) = min_available {
            self.budgets.push(Budget {
                uid: uid(),
                namespace: namespace.into(),
                name: name.into(),
                selector: labels,
                min_available: min,
                created: SystemTime::now(),
            });
        }
        self.bump();
        Ok(())
    }

    /// Registers every configured node of a bootstrapped cluster (its kubelet registers the Node),
    /// lets Talos apply its bootstrap manifests (`bootstrap.rs`), and runs the DaemonSet,
    /// Deployment and ReplicaSet controllers and the scheduler.
    pub fn refresh(&mut self, st_nodes: &[Node], bootstrapped: bool) {
        if !bootstrapped {
            return;
        }
        for n in st_nodes {
            let Some(cfg) = n.active.as_ref() else {
                continue;
            };
            if !n.up {
                continue;
            }
            let name = node_name(n);
            if self.nodes.contains_key(&name)
                || self.deleted_on_boot.get(&n.index) == Some(&n.boot_id)
            {
                continue;
            }
            self.deleted_on_boot.remove(&n.index);
            let labels = registration_labels(&name, cfg);
            let rv = self.bump();
            self.nodes.insert(
                name,
                NodeRecord {
                    uid: uid(),
                    index: n.index,
                    created: SystemTime::now(),
                    unschedulable: false,
                    labels,
                    annotations: BTreeMap::new(),
                    taints: Vec::new(),
                    resource_version: rv,
                },
            );
        }
        self.apply_node_settings(st_nodes);
        self.seed_namespaces();
        self.bootstrap_apply(st_nodes);
        self.sync_daemonsets(st_nodes);
        self.sync_deployments();
        self.reconcile(st_nodes);
    }

    /// Each running node's Talos puts its config's labels, annotations and taints on its Node,
    /// and cordons or uncordons it as its stage asks (`talos_drain.rs`), through an API server
    /// that answers the nodes.
    fn apply_node_settings(&mut self, st_nodes: &[Node]) {
        let api = super::talos_drain::api_answers_nodes(st_nodes);
        for n in st_nodes.iter().filter(|n| n.up) {
            let Some(cfg) = n.active.as_ref() else {
                continue;
            };
            let name = node_name(n);
            if let Some(wanted) = super::talos_drain::wanted_cordon(n.stage) {
                self.talos_cordons.insert(n.index, wanted);
            }
            let wanted = self.talos_cordons.get(&n.index).copied();
            let (changed, cordon) = match self.nodes.get_mut(&name) {
                Some(rec) => {
                    let changed = super::node_apply::apply(rec, cfg);
                    let cordon = match wanted {
                        Some(wanted) if api => super::talos_drain::apply_cordon(rec, wanted),
                        _ => None,
                    };
                    (changed || cordon.is_some(), cordon)
                }
                None => (false, None),
            };
            if changed {
                let rv = self.bump();
                if let Some(rec) = self.nodes.get_mut(&name) {
                    rec.resource_version = rv;
                }
            }
            if let Some(action) = cordon {
                self.record(action, &name, None);
            }
        }
    }

    /// The ReplicaSet controller and the scheduler: missing replicas are created, Pending pods are
    /// bound to the schedulable node that runs the fewest pods of their workload.
    fn reconcile(&mut self, st_nodes: &[Node]) {
        for wi in 0..self.workloads.len() {
            let have = self
                .pods
                .iter()
                .filter(|p| {
                    p.workload == self.workloads[wi].name
                        && p.namespace == self.workloads[wi].namespace
                })
                .count() as u32;
            // Scaled down: the newest pods go first.
            let extra = have.saturating_sub(self.workloads[wi].replicas) as usize;
            for _ in 0..extra {
                let w = &self.workloads[wi];
                if let Some(pi) = self
                    .pods
                    .iter()
                    .rposition(|p| p.workload == w.name && p.namespace == w.namespace)
                {
                    self.pods.remove(pi);
                    self.bump();
                }
            }
            for _ in have..self.workloads[wi].replicas {
                let w = &mut self.workloads[wi];
                let pod = PodRecord {
                    uid: uid(),
                    namespace: w.namespace.clone(),
                    name: format!("{}-{}", w.replica_set, short_hash()),
                    labels: w.labels.clone(),
                    container: w.container.clone().unwrap_or_else(|| w.name.clone()),
                    image: w.image.clone(),
                    owner: Owner::ReplicaSet {
                        name: w.replica_set.clone(),
                        uid: w.replica_set_uid.clone(),
                    },
                    node: None,
                    scheduled: None,
                    created: SystemTime::now(),
                    resource_version: 0,
                    workload: w.name.clone(),
                    tolerates_control_plane: w.tolerates_control_plane,
                };
                self.pods.push(pod);
                let rv = self.bump();
                if let Some(p) = self.pods.last_mut() {
                    p.resource_version = rv;
                }
            }
        }
        for pi in 0..self.pods.len() {
            if self.pods[pi].node.is_some() {
                continue;
            }
            let Some(target) = self.pick_node(&self.pods[pi], st_nodes) else {
                continue;
            };
            let rv = self.bump();
            let p = &mut self.pods[pi];
            p.node = Some(target);
            p.scheduled = Some(Instant::now());
            p.resource_version = rv;
        }
    }

    fn pick_node(&self, pod: &PodRecord, st_nodes: &[Node]) -> Option<String> {
        let schedulable = |name: &String, rec: &NodeRecord| {
            let n = &st_nodes[rec.index];
            let control_plane = rec
                .labels
                .contains_key("node-role.kubernetes.io/control-plane");
            !rec.unschedulable
                && node_ready(n)
                && node_name(n) == *name
                && (!control_plane || pod.tolerates_control_plane)
        };
        self.nodes
            .iter()
            .filter(|(name, rec)| schedulable(name, rec))
            .min_by_key(|(name, _)| {
                let same = self
                    .pods
                    .iter()
                    .filter(|p| p.workload == pod.workload && p.node.as_ref() == Some(*name))
                    .count();
                let all = self
                    .pods
                    .iter()
                    .filter(|p| p.node.as_ref() == Some(*name))
                    .count();
                (same, all, (*name).clone())
            })
            .map(|(name, _)| name.clone())
    }

    /// A strategic-merge or JSON-merge patch of a Node: `spec.unschedulable`, labels, annotations.
    pub fn patch_node(
        &mut self,
        name: &str,
        patch: &Value,
        kind: PatchKind,
    ) -> Result<(), ApiError> {
        let Some(rec) = self.nodes.get_mut(name) else {
            return Err(ApiError::not_found("nodes", name));
        };
        let was = rec.unschedulable;
        if let Some(v) = patch.pointer("/spec/unschedulable") {
            rec.unschedulable = match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                other => {
                    return Err(invalid_patch(
                        kind,
                        patch,
                        "NodeSpec.spec.unschedulable",
                        "bool",
                        other,
                    ));
                }
            };
        }
        for (field, map) in [
            ("labels", &mut rec.labels),
            ("annotations", &mut rec.annotations),
        ] {
            if let Some(Value::Object(entries)) = patch.pointer(&format!("/metadata/{field}")) {
                for (k, v) in entries {
                    match v {
                        Value::Null => {
                            map.remove(k);
                        }
                        Value::String(s) => {
                            map.insert(k.clone(), s.clone());
                        }
                        other => {
                            return Err(invalid_patch(
                                kind,
                                patch,
                                &format!("ObjectMeta.metadata.{field}"),
                                "string",
                                other,
                            ));
                        }
                    }
                }
            }
        }
        let now = rec.unschedulable;
        self.resource_version += 1;
        let rv = self.resource_version;
        if let Some(rec) = self.nodes.get_mut(name) {
            rec.resource_version = rv;
        }
        if was != now {
            self.record(if now { "cordon" } else { "uncordon" }, name, None);
        }
        Ok(())
    }

    /// Every object goes with etcd's data: a cluster whose last member's data was wiped keeps no
    /// Kubernetes state (the API server stores everything in etcd), so a rebuilt cluster starts
    /// with no Nodes but those its kubelets register. The log of what the API server saw stays:
    /// it is the simulator's record for tests, not API state.
    pub fn forget_cluster(&mut self) {
        let log = std::mem::take(&mut self.log);
        let resource_version = self.resource_version;
        let talos_drain = self.talos_drain;
        *self = KubeState::default();
        self.log = log;
        self.resource_version = resource_version;
        self.talos_drain = talos_drain;
    }

    /// DELETE of a Node: the object goes, and the pod garbage collector deletes the pods bound to
    /// it (`gcOrphaned` in kubernetes `pkg/controller/podgc/gc_controller.go`), which their
    /// ReplicaSets replace elsewhere. A node whose kubelet still runs registers again only after
    /// its next boot (`deleted_on_boot`). None when there is no such Node.
    pub fn delete_node(&mut self, name: &str, st_nodes: &[Node]) -> Option<NodeRecord> {
        let rec = self.nodes.remove(name)?;
        if let Some(n) = st_nodes.get(rec.index).filter(|n| n.up) {
            self.deleted_on_boot.insert(rec.index, n.boot_id.clone());
        }
        self.pods.retain(|p| p.node.as_deref() != Some(name));
        self.bump();
        self.record("delete_node", name, None);
        self.reconcile(st_nodes);
        Some(rec)
    }

    /// POST `pods/{name}/eviction`: the budget check, then the pod is deleted and its ReplicaSet
    /// creates a replacement on another schedulable node.
    pub fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        st_nodes: &[Node],
    ) -> Result<(), ApiError> {
        let Some(pi) = self
            .pods
            .iter()
            .position(|p| p.namespace == namespace && p.name == name)
        else {
            return self.evict_daemon_pod(namespace, name, st_nodes);
        };
        let pod = self.pods[pi].clone();
        let node = pod.node.clone().unwrap_or_default();
        // Pods that are not running (Pending here) may always go (upstream's canIgnorePDB).
        let running = pod.node.is_some();
        if running {
            let matching: Vec<&Budget> = self
                .budgets
                .iter()
                .filter(|b| {
                    b.namespace == namespace
                        && !b.selector.is_empty()
                        && b.selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
                })
                .collect();
            if matching.len() > 1 {
                return Err(ApiError {
                    code: 500,
                    reason: "InternalError",
                    message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                    causes: vec![],
                    details_name: None,
                });
            }
            if let Some(b) = matching.first() {
                let healthy = self.healthy_pods(b, st_nodes);
                if healthy <= b.min_available {
                    let message = format!(
                        "The disruption budget {} needs {} healthy pods and has {} currently",
                        b.name, b.min_available, healthy
                    );
                    self.record(
                        "eviction_blocked",
                        &node,
                        Some(format!("{namespace}/{name}")),
                    );
                    return Err(ApiError {
                        code: 429,
                        reason: "TooManyRequests",
                        message:
                            "Cannot evict pod as it would violate the pod's disruption budget."
                                .into(),
                        causes: vec![("DisruptionBudget", message)],
                        details_name: None,
                    });
                }
            }
        }
        self.pods.remove(pi);
        self.bump();
        self.record("evict", &node, Some(format!("{namespace}/{name}")));
        self.reconcile(st_nodes);
        Ok(())
    }

    /// The eviction of a DaemonSet's pod: it is deleted, and the DaemonSet controller makes a
    /// new one if the DaemonSet still wants one there. Budgets are not consulted for these
    /// (the simulator's budgets count workload pods only).
    fn evict_daemon_pod(
        &mut self,
        namespace: &str,
        name: &str,
        st_nodes: &[Node],
    ) -> Result<(), ApiError> {
        let Some(key) = self
            .daemon_pods
            .iter()
            .find(|(k, p)| k.namespace == namespace && p.name == name)
            .map(|(k, _)| k.clone())
        else {
            return Err(ApiError::not_found("pods", name));
        };
        self.daemon_pods.remove(&key);
        self.bump();
        self.record("evict", &key.node, Some(format!("{namespace}/{name}")));
        self.sync_daemonsets(st_nodes);
        Ok(())
    }

    fn healthy_pods(&self, b: &Budget, st_nodes: &[Node]) -> u32 {
        self.pods
            .iter()
            .filter(|p| {
                p.namespace == b.namespace
                    && b.selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
                    && self.pod_ready(p, st_nodes)
            })
            .count() as u32
    }

    pub fn budget_status(&self, b: &Budget, st_nodes: &[Node]) -> (u32, u32, u32) {
        let expected = self
            .pods
            .iter()
            .filter(|p| {
                p.namespace == b.namespace
                    && b.selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
            })
            .count() as u32;
        let healthy = self.healthy_pods(b, st_nodes);
        (healthy, expected, healthy.saturating_sub(b.min_available))
    }

    /// A workload pod is Ready once it has run `READY_DELAY` on a node that is itself Ready.
    pub fn pod_ready(&self, p: &PodRecord, st_nodes: &[Node]) -> bool {
        let Some(node) = p.node.as_ref().and_then(|n| self.nodes.get(n)) else {
            return false;
        };
        let n = &st_nodes[node.index];
        node_ready(n)
            && p.scheduled.is_some_and(|at| at.elapsed() >= READY_DELAY)
            && n.running_since
                .is_some_and(|at| at.elapsed() >= READY_DELAY * 2)
    }
}

/// The labels a node's kubelet registers its Node with (the well-known ones, and the
/// control-plane role Talos passes in `--node-labels`).
pub fn registration_labels(
    name: &str,
    cfg: &crate::mcfg::StoredConfig,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
    ]);
    if cfg.machine_type().is_some_and(|t| t.is_control_plane()) {
        labels.insert(
            "node-role.kubernetes.io/control-plane".into(),
            String::new(),
        );
    }
    labels
}

/// The kubelet posts Ready once it has run a moment on a node that is up with its config (and
/// not while it restarts for a new config).
pub fn node_ready(n: &Node) -> bool {
    n.up && n.active.is_some()
        && !n.services_stopped
        && !n.components.kubelet_restarting()
        && n.running_since
            .is_some_and(|at| at.elapsed() >= READY_DELAY)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The image a config sets at a v1alpha1 path or, in Talos 1.14's shape, in the `image` field of
/// the document of `kind`.
pub fn config_image(cfg: &crate::mcfg::StoredConfig, path: &[&str], kind: &str) -> Option<String> {
    let mut at = cfg.v1alpha1();
    for key in path {
        at = at.and_then(|v| v.get(*key));
    }
    if let Some(s) = at.and_then(Value::as_str) {
        return Some(s.to_string());
    }
    cfg.docs()
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
        .and_then(|d| d.get("image"))
        .and_then(Value::as_str)
        .map(String::from)
}

pub fn kubelet_image(cfg: &crate::mcfg::StoredConfig) -> String {
    config_image(cfg, KUBELET_IMAGE, "KubeletConfig").unwrap_or_else(|| DEFAULT_KUBELET.into())
}

pub fn proxy_image(cfg: &crate::mcfg::StoredConfig) -> Option<String> {
    config_image(cfg, PROXY_IMAGE, "KubeProxyConfig")
}

/// `v1.36.1` from `ghcr.io/siderolabs/kubelet:v1.36.1-fat@sha256:...`: what the binary reports.
pub fn version_of_image(image: &str) -> String {
    let no_digest = image.split('@').next().unwrap_or(image);
    let tag = match no_digest.rsplit_once(':') {
        Some((_, t)) if !t.contains('/') => t,
        _ => "latest",
    };
    let tag = tag
        .strip_suffix("-fat")
        .or_else(|| tag.strip_suffix("-slim"))
        .unwrap_or(tag);
    tag.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_images() {
        assert_eq!(
            version_of_image("ghcr.io/siderolabs/kubelet:v1.36.1"),
            "v1.36.1"
        );
        assert_eq!(
            version_of_image("ghcr.io/siderolabs/kubelet:v1.36.1-fat"),
            "v1.36.1"
        );
        assert_eq!(
            version_of_image("registry.k8s.io/kube-apiserver:v1.35.2@sha256:abcd"),
            "v1.35.2"
        );
        assert_eq!(version_of_image("localhost:5000/kubelet"), "latest");
    }
}
