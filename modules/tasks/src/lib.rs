//! What each ferro.talos module does.
//!
//! One folder per Ansible module (`mod.rs`: its argument spec and `run`; `args.rs`: its typed `Args`), listed once
//! in [`catalog::MODULES`]; the program only calls these. This crate decides changed/check/diff behaviour and writes files
//! (atomically, 0600); it never prints: the protocol crate owns stdout.

pub mod catalog;
pub mod shared;
pub mod talos_apply;
pub mod talos_bootstrap;
pub mod talos_config;
pub mod talos_etcd_member;
pub mod talos_etcd_recover;
pub mod talos_etcd_snapshot;
pub mod talos_health;
pub mod talos_image_factory;
pub mod talos_info;
pub mod talos_kubeconfig;
pub mod talos_kubernetes_upgrade;
pub mod talos_logs;
pub mod talos_reboot;
pub mod talos_reset;
pub mod talos_resource_info;
pub mod talos_shutdown;
pub mod talos_support_bundle;
pub mod talos_upgrade;

/// Lower-case hex SHA-256, the form every `*_sha256` result uses.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
