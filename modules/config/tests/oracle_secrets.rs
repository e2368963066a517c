//! Secrets bundles against upstream's own (tests/oracle, machinery v1.13.9 and v1.14.1):
//! `talos_config`'s bundle from a control plane's config is `talosctl gen secrets
//! --from-controlplane-config`'s, byte for byte, for configs of every contract rendered by either
//! program; and a bundle the collection generates passes upstream's `Bundle.Validate` and has the
//! certificates upstream's `gen secrets` makes (same subjects, key types, usages and lifetimes).
//!
//! Without Go the tests print why and return; `FERRO_REQUIRE_UPSTREAM=1` makes that a failure.

use ferro_talos_config::MachineConfig;
use ferro_talos_config::adopt::bundle_from_config;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_oracle::{Oracle, Release};
use ferro_talos_secrets::Bundle;
use serde_json::{Value, json};

const CONTRACTS: [Contract; 4] = [
    Contract::V1_11,
    Contract::V1_12,
    Contract::V1_13,
    Contract::V1_14,
];

fn release_for(contract: Contract) -> Release {
    if contract.greater_than(1, 13) {
        Release::V1_14_1
    } else {
        Release::V1_13_9
    }
}

fn oracles() -> Option<Vec<Oracle>> {
    Release::ALL.into_iter().map(Oracle::start).collect()
}

fn oracle_for(oracles: &mut [Oracle], release: Release) -> &mut Oracle {
    oracles.iter_mut().find(|o| o.release() == release).unwrap()
}

/// Where two texts first differ, by line number only: these are secrets (of test bundles, but
/// the habit holds).
fn first_difference(a: &str, b: &str) -> Option<usize> {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .map(|i| i + 1)
}

#[test]
fn the_bundle_from_a_control_plane_config_is_upstreams() {
    let Some(mut oracles) = oracles() else { return };
    let mut compared = 0;
    for contract in CONTRACTS {
        let bundle = Bundle::generate((contract.major.into(), contract.minor.into())).unwrap();
        let oracle = oracle_for(&mut oracles, release_for(contract));
        let mut opts =
            GenerateOptions::new(contract, MachineType::ControlPlane, "c", "https://c:6443");
        opts.additional_sans = vec!["10.0.0.10".into()];
        let ours = MachineConfig::generate(&bundle, &opts)
            .unwrap()
            .to_yaml_with(ferro_talos_config::normalize::Rules::for_contract(contract));
        let theirs = oracle.ask(&json!({
            "op": "generate",
            "secrets": bundle.to_yaml(),
            "options": {"contract": contract.to_string(), "machine_type": "controlplane",
                "cluster_name": "c", "endpoint": "https://c:6443", "kubernetes_version": "1.36.3"},
        }))["config"]
            .as_str()
            .expect("upstream renders the control plane")
            .to_string();
        for (who, config) in [("ours", &ours), ("upstream's", &theirs)] {
            let derived = oracle.ask(&json!({"op": "secrets_from_config", "config": config}));
            let expected = derived["secrets"]
                .as_str()
                .unwrap_or_else(|| panic!("{contract} {who}: {}", derived["error"]));
            let got = bundle_from_config(&MachineConfig::parse(config).unwrap())
                .unwrap_or_else(|e| panic!("{contract} {who}: {e}"))
                .to_yaml();
            assert_eq!(
                first_difference(&got, expected),
                None,
                "contract {contract}, {who} config: our bundle differs from upstream's at that line"
            );
            // And it is the bundle the config was made from.
            assert_eq!(got, bundle.to_yaml(), "contract {contract}, {who} config");
            compared += 1;
        }
    }
    assert_eq!(compared, 8);
}

#[test]
fn a_worker_config_gives_no_bundle_in_either() {
    let Some(mut oracles) = oracles() else { return };
    for contract in CONTRACTS {
        let bundle = Bundle::generate((contract.major.into(), contract.minor.into())).unwrap();
        let opts = GenerateOptions::new(contract, MachineType::Worker, "c", "https://c:6443");
        let worker = MachineConfig::generate(&bundle, &opts).unwrap();
        let text =
            worker.to_yaml_with(ferro_talos_config::normalize::Rules::for_contract(contract));
        let oracle = oracle_for(&mut oracles, release_for(contract));
        let theirs = oracle.ask(&json!({"op": "secrets_from_config", "config": text}));
        let ours = bundle_from_config(&worker);
        // Upstream derives a bundle with empty CA keys from a worker; the collection refuses, and
        // says to use the control plane's config. Pinned so a change on either side shows.
        assert!(ours.is_err(), "{contract}");
        if let Some(s) = theirs["secrets"].as_str() {
            let v: Value = serde_saphyr::from_str(s).unwrap();
            assert_eq!(v["certs"]["os"]["key"], json!(""), "{contract}: {v:?}");
        }
    }
}

#[test]
fn a_generated_bundle_passes_upstreams_checks_and_has_upstreams_certificates() {
    let Some(mut oracles) = oracles() else { return };
    for contract in CONTRACTS {
        let oracle = oracle_for(&mut oracles, release_for(contract));
        let ours = Bundle::generate((contract.major.into(), contract.minor.into()))
            .unwrap()
            .to_yaml();
        let theirs =
            oracle.ask(&json!({"op": "generate_secrets", "contract": contract.to_string()}));
        let theirs = theirs["secrets"]
            .as_str()
            .expect("upstream generates a bundle");
        let describe = |oracle: &mut Oracle, secrets: &str| {
            oracle.ask(&json!({"op": "describe_secrets", "secrets": secrets,
                "contract": contract.to_string()}))
        };
        let (mut a, mut b) = (describe(oracle, &ours), describe(oracle, theirs));
        // One ID may not show its alphabet; eight of each side do (below).
        a.as_object_mut().unwrap().remove("cluster_id_alphabet");
        b.as_object_mut().unwrap().remove("cluster_id_alphabet");
        assert_eq!(a.get("validate_error"), None, "{contract}: {a}");
        assert_eq!(b.get("validate_error"), None, "{contract}: {b}");
        let mut diffs = Vec::new();
        differences(&a, &b, "", &mut diffs);
        assert!(
            diffs.is_empty(),
            "contract {contract}: ours and upstream's differ:\n{}",
            diffs.join("\n")
        );
        for name in ["etcd", "k8s", "k8saggregator", "os"] {
            assert_eq!(
                a["certs"][name]["key_matches"], true,
                "{contract} {name}: {a}"
            );
        }
    }
}

/// The fields where two descriptions differ, as `path: ours vs upstream's`.
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                differences(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &format!("{at}/{k}"),
                    out,
                );
            }
        }
        _ if a != b => out.push(format!("{at}: {a} vs {b}")),
        _ => {}
    }
}

#[test]
fn cluster_ids_use_upstreams_base64_alphabet() {
    let Some(mut oracles) = oracles() else { return };
    // 1.11 and 1.12 make their IDs as 1.13 does. Eight IDs of 43 characters all miss both of
    // the alphabet's own two characters once in some 50,000 runs.
    for contract in [Contract::V1_13, Contract::V1_14] {
        let oracle = oracle_for(&mut oracles, release_for(contract));
        let mut alphabets = |make: &mut dyn FnMut(&mut Oracle) -> String| {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..8 {
                let secrets = make(oracle);
                let d = oracle.ask(&json!({"op": "describe_secrets", "secrets": secrets,
                    "contract": contract.to_string()}));
                seen.insert(d["cluster_id_alphabet"].as_str().unwrap().to_string());
            }
            seen.remove("either");
            seen
        };
        let ours = alphabets(&mut |_| {
            Bundle::generate((contract.major.into(), contract.minor.into()))
                .unwrap()
                .to_yaml()
        });
        let theirs = alphabets(&mut |o| {
            o.ask(&json!({"op": "generate_secrets", "contract": contract.to_string()}))["secrets"]
                .as_str()
                .unwrap()
                .to_string()
        });
        assert_eq!(ours.len(), 1, "{contract}: {ours:?}");
        assert_eq!(ours, theirs, "contract {contract}");
    }
}
