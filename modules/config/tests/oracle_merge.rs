//! Which fields a strategic patch replaces instead of merging, against upstream's own types and
//! merge (tests/oracle, machinery v1.13.9 and v1.14.1): the oracle lists every field whose Go
//! struct tag says `merge:"replace"` (read by pkg/machinery/config/merge/merge.go), and renders
//! with patches that replace, clear and append lists come out byte for byte as upstream's.

// Each test file uses part of what the differential tests share.
#[allow(dead_code)]
mod oracle;

use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_config::known_keys::known_kinds;
use ferro_talos_config::merge::replaced_wholesale;
use ferro_talos_config::normalize::Rules;
use ferro_talos_oracle::{Oracle, Release};
use ferro_talos_secrets::Bundle;
use oracle::{Outcome, explain, ours, theirs};
use serde_json::json;

fn rules_of(release: Release) -> Rules {
    match release {
        Release::V1_13_9 => Rules::V1_13,
        Release::V1_14_1 => Rules::V1_14,
    }
}

#[test]
fn the_replaced_fields_are_upstreams_merge_replace_tags() {
    for release in Release::ALL {
        let Some(mut oracle) = Oracle::start(release) else {
            return;
        };
        let answer = oracle.ask(&json!({"op": "merge_replace", "kinds": known_kinds()}));
        let upstream: Vec<&str> = answer["replace"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: {answer}", release.tag()))
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        let refused = answer["refused"].as_object().unwrap();
        // 1.13.9 has none of the 1.14 kinds; every kind it refuses is one it does not register.
        for (kind, error) in refused {
            assert!(
                release == Release::V1_13_9 && error.as_str().unwrap().contains("not registered"),
                "{}: {kind}: {error}",
                release.tag()
            );
        }
        let ours: Vec<&str> = replaced_wholesale(rules_of(release))
            .into_iter()
            .filter(|path| {
                let kind = path.split('.').next().unwrap();
                !refused.contains_key(kind)
            })
            .collect();
        assert_eq!(ours, upstream, "{}", release.tag());
    }
}

/// (name, contract, patches applied in order)
fn cases() -> Vec<(&'static str, Contract, Vec<&'static str>)> {
    let resolver_a =
        "apiVersion: v1alpha1\nkind: ResolverConfig\nsearchDomains:\n  domains:\n    - a.example\n";
    let resolver_b =
        "apiVersion: v1alpha1\nkind: ResolverConfig\nsearchDomains:\n  domains:\n    - b.example\n";
    let resolver_empty =
        "apiVersion: v1alpha1\nkind: ResolverConfig\nsearchDomains:\n  domains: []\n";
    let bgp = |advertise: &'static str| -> &'static str {
        match advertise {
            "a" => {
                "apiVersion: v1alpha1\nkind: BGPInstanceConfig\nname: bgp0\nlocalASN: 64512\nadvertise:\n  - 10.10.0.0/24\n"
            }
            "b" => {
                "apiVersion: v1alpha1\nkind: BGPInstanceConfig\nname: bgp0\nlocalASN: 64512\nadvertise:\n  - 10.20.0.0/24\n"
            }
            _ => {
                "apiVersion: v1alpha1\nkind: BGPInstanceConfig\nname: bgp0\nlocalASN: 64512\nadvertise: []\n"
            }
        }
    };
    let pods = "cluster:\n  network:\n    podSubnets:\n      - 10.200.0.0/16\n";
    let no_pods = "cluster:\n  network:\n    podSubnets: []\n";
    let sans = "machine:\n  certSANs:\n    - 10.0.0.1\n";
    let no_sans = "machine:\n  certSANs: []\n";
    let mut cases = Vec::new();
    for contract in [Contract::V1_13, Contract::V1_14] {
        cases.push(("pod subnets replaced", contract, vec![pods]));
        cases.push(("pod subnets cleared", contract, vec![no_pods]));
        cases.push((
            "cert SANs appended, then [] keeps them",
            contract,
            vec![sans, no_sans],
        ));
        cases.push((
            "search domains twice",
            contract,
            vec![resolver_a, resolver_b],
        ));
        cases.push((
            "search domains, then []",
            contract,
            vec![resolver_a, resolver_empty],
        ));
    }
    cases.push((
        "BGP advertise twice",
        Contract::V1_14,
        vec![bgp("a"), bgp("b")],
    ));
    cases.push((
        "BGP advertise, then []",
        Contract::V1_14,
        vec![bgp("a"), bgp("")],
    ));
    cases
}

#[test]
fn replaced_cleared_and_appended_lists_render_as_upstream_renders_them() {
    let mut differences = Vec::new();
    let mut compared = 0;
    for (name, contract, patches) in cases() {
        let release = oracle::releases_for(contract)[0];
        let Some(mut oracle) = Oracle::start(release) else {
            return;
        };
        let bundle = Bundle::generate((contract.major.into(), contract.minor.into())).unwrap();
        let opts = GenerateOptions::new(
            contract,
            MachineType::ControlPlane,
            "oracle",
            "https://oracle:6443",
        );
        let patches: Vec<String> = patches.iter().map(|p| p.to_string()).collect();
        let mine = ours(&bundle, &opts, &patches);
        let upstream = theirs(&mut oracle, &bundle.to_yaml(), &opts, &patches)
            .unwrap_or_else(|| panic!("[{name}] the oracle cannot render this"));
        assert!(
            matches!(upstream, Outcome::Config(_)),
            "[{name}] upstream refused: {upstream:?}"
        );
        compared += 1;
        if !mine.same_verdict(&upstream) {
            differences.push(format!(
                "[{name}] contract {contract}: {}",
                explain(&mine, &upstream)
            ));
        }
    }
    assert_eq!(compared, cases().len());
    assert!(differences.is_empty(), "{}", differences.join("\n\n"));
}
