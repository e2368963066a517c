//! Talos secrets: the `secrets.yaml` bundle, the PKI built on it and the talosconfig client file.
//!
//! Owns key and certificate generation (OS CA, etcd/Kubernetes/aggregator CAs, service-account key,
//! admin client certificates, node server certificates) exactly as `talosctl gen secrets` and
//! `gen config` produce them. Never prints anything and never reads module arguments.

pub mod bundle;

pub use bundle::{Bundle, CertAndKey, ClusterSecrets, Certs, KeyOnly, Secrets, TrustdInfo};
