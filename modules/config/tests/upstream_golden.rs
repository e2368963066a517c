//! talos_config's renders against upstream's own golden configs at the releases the oracle links
//! (machinery v1.13.9 and v1.14.1, read from the Go module cache: the stability test's
//! `config/types/v1alpha1/testdata/stability/<contract>/{base,overrides}-{controlplane,worker}.yaml`
//! with its secrets and patches, `v1alpha1_stability_test.go`), byte for byte. These are the
//! golden fixtures of 1.14 as released, where `../shared/talos/fixtures` has only v1.14.0-rc.1's.
//!
//! Without Go the test prints why and returns; `FERRO_REQUIRE_UPSTREAM=1` makes that a failure.

use ferro_talos_config::MachineConfig;
use ferro_talos_config::adopt::bundle_from_config;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::MachineType;
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::patch::Patch;
use ferro_talos_oracle::{Release, machinery_source};

mod stability;
use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn renders_match_upstreams_own_golden_configs_at_both_releases() {
    let mut compared = 0;
    for (release, contracts) in [
        (
            Release::V1_13_9,
            &[Contract::V1_11, Contract::V1_12, Contract::V1_13][..],
        ),
        (Release::V1_14_1, &[Contract::V1_14][..]),
    ] {
        let Some(source) = machinery_source(release) else {
            return;
        };
        let stability = source.join("config/types/v1alpha1/testdata/stability");
        // The golden configs' bundle comes back from their control plane config, the way
        // talos_config adopts a cluster (adopt_golden.rs checks that path on its own).
        let secrets = read(&stability.join("secrets.yaml"));
        assert!(secrets.contains("trustdinfo"), "{}", stability.display());
        for &contract in contracts {
            let dir = stability.join(format!("v{contract}"));
            let base_cp = MachineConfig::parse(&read(&dir.join("base-controlplane.yaml"))).unwrap();
            let bundle = bundle_from_config(&base_cp).unwrap();
            // The patch file the stability test applies for this contract.
            let patch_file = match (release, contract >= Contract::V1_14) {
                (Release::V1_14_1, false) => "patch-pre14.yaml",
                _ => "patch.yaml",
            };
            let patch = Patch::parse(&read(&stability.join(patch_file))).unwrap();
            for machine_type in [MachineType::ControlPlane, MachineType::Worker] {
                for overrides in [false, true] {
                    let name = format!(
                        "{}-{}.yaml",
                        if overrides { "overrides" } else { "base" },
                        machine_type.as_str()
                    );
                    let golden = read(&dir.join(&name));
                    let opts = if overrides {
                        stability::overrides(contract, machine_type)
                    } else {
                        stability::base(contract, machine_type)
                    };
                    let mut cfg = MachineConfig::generate(&bundle, &opts).unwrap();
                    if overrides {
                        cfg.apply_patches(std::slice::from_ref(&patch)).unwrap();
                    }
                    let ours = cfg.to_yaml_with(Rules::for_contract(contract));
                    if ours != golden {
                        let diff = similar::TextDiff::from_lines(&golden, &ours);
                        panic!(
                            "{} v{contract}/{name} differs:\n{}",
                            release.tag(),
                            diff.unified_diff().header("upstream", "ours")
                        );
                    }
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 16);
}
