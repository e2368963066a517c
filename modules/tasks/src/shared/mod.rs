//! What more than one module uses: the connection options and credentials, the option readers,
//! rendering, files written atomically, and the pieces of Talos and Kubernetes behaviour that two
//! or more modules rely on. A module's own behaviour lives in its folder, never here.

pub(crate) mod config_shape;
pub mod connection;
pub(crate) mod etcd_members;
pub mod failure;
pub mod files;
pub(crate) mod kube_access;
pub(crate) mod kubernetes_config;
pub(crate) mod kubernetes_manifests;
pub(crate) mod kubernetes_removed;
pub(crate) mod live_config;
pub(crate) mod node_power;
pub(crate) mod node_removal;
pub mod node_settings;
pub(crate) mod options;
pub mod render;
pub mod resource_types;
pub(crate) mod upgrade_drain;
