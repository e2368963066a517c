//! The Kubernetes side of ferro.talos: kube's request builders and Status type (kube-core, with
//! k8s-openapi underneath), a kubeconfig reader and a small rustls transport of its own.
//!
//! - [`access`]: an admin client from the cluster's secrets bundle (a short-lived certificate
//!   issued in memory from the Kubernetes CA, so nothing has to be on disk) or from a kubeconfig;
//! - [`nodes`]: a Node's readiness and kubelet version, cordon and uncordon;
//! - [`control_plane`]: a control plane's static pods and a Node by address, what the Kubernetes
//!   upgrade waits on, and whether removed APIs still hold objects;
//! - [`manifest_sync`]: the bootstrap manifests server-side applied with an inventory ConfigMap,
//!   pruned and waited on, as `talosctl upgrade-k8s` ends;
//! - [`drain`]: which pods a drain evicts and the drain itself, through the Eviction API so that
//!   PodDisruptionBudgets hold, the way talosctl's drain does;
//! - [`error`]: what went wrong, in words that name the API server, the node or the pod.

pub mod access;
pub mod control_plane;
mod discovery;
pub mod drain;
pub mod error;
mod inventory;
mod kubeconfig;
pub mod manifest_sync;
pub mod nodes;
mod objects;
mod reconcile;
mod transport;

pub use access::{Kube, KubeAccess};
pub use control_plane::StaticPodState;
pub use drain::{DrainPlan, DrainReport, PodToEvict, SkippedPod};
pub use error::{KubeError, KubeErrorKind};
pub use inventory::{INVENTORY_NAME, INVENTORY_NAMESPACE, ObjectRef};
pub use manifest_sync::{
    Action, Change, InventoryPolicy, Pruning, SyncMode, SyncOptions, SyncReport,
};
pub use nodes::NodeState;
