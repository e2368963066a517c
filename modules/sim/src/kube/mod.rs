//! The Kubernetes API of the simulated cluster: each control plane serves it once etcd is
//! bootstrapped (`listener.rs`), the requests it answers (`api.rs` for Nodes, Pods, evictions
//! and budgets, `objects_api.rs` for stored objects, `discovery.rs`), the objects and what the
//! API server and controllers do with them (`model.rs`; `objects.rs`, `writes.rs` and `apply.rs`
//! for stored objects and server-side apply; `daemonsets.rs`, `deployments.rs`, `status.rs` for
//! the workloads that follow them), the labels, annotations and taints Talos puts on its Node
//! (`node_apply.rs`), Talos's own cordon and drain before its upgrade, shutdown and reset
//! sequences (`talos_drain.rs`), the components Talos runs and the versions of their config
//! resources (`components.rs`), the bootstrap manifests Talos renders (`manifests.rs`,
//! `templates.rs`, `structs.rs`) and applies (`bootstrap.rs`), and their JSON (`render.rs`).

mod api;
mod apply;
mod bootstrap;
mod components;
mod daemonsets;
mod deployments;
mod discovery;
pub mod for_real;
mod kinds;
mod listener;
mod manifests;
mod model;
mod node_apply;
mod objects;
mod objects_api;
mod render;
mod status;
mod structs;
mod talos_drain;
mod templates;
mod writes;

pub use api::{request, snapshot};
pub use components::{Components, has_final_configs};
pub use listener::run;
pub(crate) use listener::{serving, serving_names};
pub use model::{KubeState, kubelet_image, node_name, node_ready};
pub use render::pods as cluster_pods;
pub use structs::to_struct;
pub use talos_drain::{DrainTimes, cordon_and_drain};
