//! Benchmark (prints figures, asserts nothing): render 100 node configs from an existing secrets
//! bundle with 3 patches each, in one process, the way a playbook over 100 nodes would.
//!
//!     cargo run --release -p ferro-talos-config --example render_bench [SECRETS_FILE]
//!
//! Without a file it generates a bundle first (not counted).

use std::time::Instant;

use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_config::patch::Patch;
use ferro_talos_secrets::Bundle;

const PATCHES: [&str; 3] = [
    "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: true\n",
    "cluster:\n  extraManifests:\n    - https://example.com/approver.yaml\n    - https://example.com/metrics.yaml\n",
    "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: node-1\n",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A given bundle file, or a generated one (its generation is not part of the figure).
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(path)?,
        None => Bundle::generate((1, 13))?.to_yaml(),
    };
    let started = Instant::now();
    let bundle = Bundle::from_yaml(&text)?;
    let patches = PATCHES
        .iter()
        .map(|p| Patch::parse(p))
        .collect::<ferro_talos_config::Result<Vec<_>>>()?;
    let mut bytes = 0;
    for i in 0..100 {
        let machine_type = if i < 3 {
            MachineType::ControlPlane
        } else {
            MachineType::Worker
        };
        let opts = GenerateOptions::new(
            Contract::V1_13,
            machine_type,
            "bench",
            "https://10.0.0.1:6443",
        );
        let mut cfg = MachineConfig::generate(&bundle, &opts)?;
        cfg.apply_patches(&patches)?;
        bytes += cfg.to_yaml().len();
    }
    let elapsed = started.elapsed();
    println!(
        "rendered 100 configs (3 control planes, 97 workers) with 3 patches each in {:.1} ms, {bytes} bytes of YAML",
        elapsed.as_secs_f64() * 1000.0
    );
    Ok(())
}
