//! The inputs of upstream's stability test (`config/types/v1alpha1/v1alpha1_stability_test.go`):
//! "base" and "with overrides", as the collection's render options. Shared by golden.rs (the
//! fixtures beside the checkout) and upstream_golden.rs (upstream's own, from the module cache).

use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{Cni, GenerateOptions, MachineType};
use std::collections::BTreeMap;

pub fn base(contract: Contract, machine_type: MachineType) -> GenerateOptions {
    let mut o = GenerateOptions::new(contract, machine_type, "base", "https://base:6443");
    o.kubernetes_version = "1.28.0".into();
    o.install_disk = None;
    o.install_image = None;
    o
}

pub fn overrides(contract: Contract, machine_type: MachineType) -> GenerateOptions {
    let mut o = base(contract, machine_type);
    o.additional_sans = vec!["foo".into(), "bar".into()];
    o.allow_scheduling_on_control_planes = true;
    o.dns_domain = "example.com".into();
    o.install_disk = Some("/dev/vda".into());
    o.install_extra_kernel_args = vec!["foo=bar".into(), "bar=baz".into()];
    o.local_api_server_port = Some(5443);
    o.sysctls = BTreeMap::from([("foo".to_string(), "bar".to_string())]);
    o.cni = Some(Cni {
        name: "custom".into(),
        urls: vec!["https://example.com/cni.yaml".into()],
    });
    o.registry_mirrors = vec![("ghcr.io".into(), "https://ghcr.io.my-mirror.com".into())];
    o
}
