//! A cluster's inputs for tests and benchmarks, made with the collection's own generator: a fresh
//! secrets bundle and the control-plane and worker configs rendered from it, so nothing that
//! drives talos-sim needs upstream's golden fixtures. (The simulator itself never uses this.)

use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_secrets::Bundle;

/// The cluster name and Kubernetes endpoint of a sample cluster.
pub const CLUSTER_NAME: &str = "base";
pub const ENDPOINT: &str = "https://base:6443";

/// A secrets bundle and the two machine configs rendered from it (1.13 contract unless
/// rendered for another, install disk `/dev/sda`, which a metal node requires, and no install
/// image).
pub struct SampleCluster {
    pub bundle: Bundle,
    pub controlplane: String,
    pub worker: String,
}

impl SampleCluster {
    /// Generates a new bundle (an RSA-4096 service-account key: up to a second) and renders.
    pub fn generate() -> SampleCluster {
        let bundle = Bundle::generate((1, 13)).expect("a secrets bundle generates");
        SampleCluster::render(&bundle, Contract::V1_13)
    }

    /// The two configs of `bundle` rendered for `contract` (Talos 1.14's shape for `V1_14`).
    pub fn render(bundle: &Bundle, contract: Contract) -> SampleCluster {
        let render = |machine_type| {
            let mut opts = GenerateOptions::new(contract, machine_type, CLUSTER_NAME, ENDPOINT);
            opts.kubernetes_version = "1.28.0".into();
            opts.install_image = None;
            MachineConfig::generate(bundle, &opts)
                .expect("the sample config renders")
                .to_yaml()
        };
        SampleCluster {
            controlplane: render(MachineType::ControlPlane),
            worker: render(MachineType::Worker),
            bundle: bundle.clone(),
        }
    }
}
