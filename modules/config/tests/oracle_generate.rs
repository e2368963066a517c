//! talos_config's renders against upstream's own `generate` and `configpatcher` (tests/oracle,
//! machinery v1.13.9 and v1.14.1 from the Go module proxy), byte for byte: every machine type ×
//! contract 1.11-1.14 × each render option alone and all at once × the patch corpus.
//!
//! Without Go the test prints why and returns; `FERRO_REQUIRE_UPSTREAM=1` (CI) makes that a
//! failure. The random counterpart is oracle_properties.rs.

mod oracle;

use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{Cni, GenerateOptions, MachineType};
use ferro_talos_oracle::Oracle;
use ferro_talos_secrets::Bundle;
use oracle::{explain, ours, releases_for, theirs};
use std::collections::BTreeMap;

const CONTRACTS: [Contract; 4] = [
    Contract::V1_11,
    Contract::V1_12,
    Contract::V1_13,
    Contract::V1_14,
];

/// One render option changed from talosctl's defaults, by name.
type Variant = (&'static str, fn(&mut GenerateOptions));

fn variants() -> Vec<Variant> {
    vec![
        ("defaults", |_| {}),
        ("no install disk or image", |o| {
            o.install_disk = None;
            o.install_image = None;
        }),
        ("install disk nvme", |o| {
            o.install_disk = Some("/dev/nvme0n1".into())
        }),
        ("install image", |o| {
            o.install_image = Some("registry.example.com/talos/installer:v1.13.9".into())
        }),
        ("SANs", |o| {
            o.additional_sans = vec![
                "10.0.0.10".into(),
                "k8s.example.com".into(),
                "fd00::10".into(),
            ]
        }),
        ("DNS domain", |o| o.dns_domain = "cluster.example".into()),
        ("IPv6 subnets", |o| {
            o.pod_subnets = vec!["fd00:10:244::/56".into()];
            o.service_subnets = vec!["fd00:10:96::/112".into()];
        }),
        ("dual-stack subnets", |o| {
            o.pod_subnets = vec!["10.244.0.0/16".into(), "fd00:10:244::/56".into()];
            o.service_subnets = vec!["10.96.0.0/12".into(), "fd00:10:96::/112".into()];
        }),
        ("scheduling on control planes", |o| {
            o.allow_scheduling_on_control_planes = true
        }),
        ("local API server port", |o| {
            o.local_api_server_port = Some(5443)
        }),
        ("kernel args", |o| {
            o.install_extra_kernel_args = vec!["console=ttyS0".into(), "net.ifnames=0".into()]
        }),
        ("sysctls", |o| {
            o.sysctls = BTreeMap::from([
                ("net.core.somaxconn".into(), "65535".into()),
                ("vm.nr_hugepages".into(), "128".into()),
            ])
        }),
        ("custom CNI", |o| {
            o.cni = Some(Cni {
                name: "custom".into(),
                urls: vec!["https://example.com/cilium.yaml".into()],
            })
        }),
        ("no CNI", |o| {
            o.cni = Some(Cni {
                name: "none".into(),
                urls: vec![],
            })
        }),
        ("flannel named", |o| {
            o.cni = Some(Cni {
                name: "flannel".into(),
                urls: vec![],
            })
        }),
        ("registry mirrors", |o| {
            o.registry_mirrors = vec![
                ("docker.io".into(), "https://mirror.example.com".into()),
                ("ghcr.io".into(), "https://ghcr.example.com".into()),
            ]
        }),
        ("KubeSpan", |o| o.kubespan = true),
        ("Kubernetes 1.36.3", |o| {
            o.kubernetes_version = "1.36.3".into()
        }),
        ("IPv6 endpoint", |o| {
            o.endpoint = "https://[fd00::10]:6443".into()
        }),
        ("endpoint on 443", |o| {
            o.endpoint = "https://k8s.example.com".into()
        }),
    ]
}

/// Everything at once, as the stability test's "with overrides".
fn all_at_once(o: &mut GenerateOptions) {
    for (name, change) in variants() {
        if !matches!(
            name,
            "no CNI" | "flannel named" | "no install disk or image"
        ) {
            change(o);
        }
    }
}

/// Patches users write (docs, the seed's playbooks, tests/), each alone. A patch that does not
/// fit a contract (a 1.14 document on 1.11, JSON 6902 on several documents) must be refused by
/// both programs alike.
fn patch_corpus() -> Vec<(&'static str, String)> {
    [
        ("none", ""),
        ("hostname", "machine:\n  network:\n    hostname: cp-1\n"),
        (
            "install wipe and image",
            "machine:\n  install:\n    wipe: true\n    image: ghcr.io/siderolabs/installer:v1.13.9\n",
        ),
        ("proxy disabled", "cluster:\n  proxy:\n    disabled: true\n"),
        (
            "kubelet extra args",
            "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n",
        ),
        ("cert SANs appended", "machine:\n  certSANs:\n    - 192.168.1.10\n"),
        (
            "node labels",
            "machine:\n  nodeLabels:\n    topology.kubernetes.io/zone: a\n",
        ),
        (
            "files",
            "machine:\n  files:\n    - path: /var/etc/x.conf\n      permissions: 0o644\n      op: create\n      content: |\n        x = 1\n",
        ),
        (
            "discovery deleted",
            "cluster:\n  discovery:\n    $patch: delete\n",
        ),
        (
            "time servers",
            "machine:\n  time:\n    servers:\n      - time.cloudflare.com\n",
        ),
        (
            "hostname document",
            "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: cp-1\nauto: off\n",
        ),
        (
            "1.14 kubelet document",
            "apiVersion: v1alpha1\nkind: KubeletConfig\nclusterDNS:\n  - 3.3.3.3\n",
        ),
        (
            "json 6902",
            "- op: add\n  path: /machine/network/hostname\n  value: cp-1\n",
        ),
        (
            "json 6902 remove",
            "[{\"op\": \"remove\", \"path\": \"/cluster/discovery\"}]",
        ),
    ]
    .into_iter()
    .map(|(n, p)| (n, p.to_string()))
    .collect()
}

#[test]
fn every_render_option_and_patch_matches_upstream_byte_for_byte() {
    let mut oracles: Vec<Oracle> = Vec::new();
    for release in ferro_talos_oracle::Release::ALL {
        match Oracle::start(release) {
            Some(o) => oracles.push(o),
            None => return,
        }
    }
    let mut compared = 0;
    let mut differences = std::collections::BTreeMap::<String, (usize, String)>::new();
    for contract in CONTRACTS {
        let bundle = Bundle::generate((contract.major.into(), contract.minor.into())).unwrap();
        let bundle_yaml = bundle.to_yaml();
        for machine_type in [MachineType::ControlPlane, MachineType::Worker] {
            let mut cases: Vec<(String, GenerateOptions)> = variants()
                .into_iter()
                .map(|(name, change)| {
                    let mut o = GenerateOptions::new(
                        contract,
                        machine_type,
                        "oracle",
                        "https://oracle:6443",
                    );
                    change(&mut o);
                    (name.to_string(), o)
                })
                .collect();
            let mut all =
                GenerateOptions::new(contract, machine_type, "oracle", "https://oracle:6443");
            all_at_once(&mut all);
            cases.push(("all at once".into(), all));
            for (name, opts) in &cases {
                for (patch_name, patch) in patch_corpus() {
                    let patches: Vec<String> = if patch.is_empty() {
                        vec![]
                    } else {
                        vec![patch]
                    };
                    let mine = ours(&bundle, opts, &patches);
                    for oracle in oracles.iter_mut() {
                        if !releases_for(contract).contains(&oracle.release()) {
                            continue;
                        }
                        let Some(upstream) = theirs(oracle, &bundle_yaml, opts, &patches) else {
                            continue;
                        };
                        compared += 1;
                        if let (oracle::Outcome::Config(a), oracle::Outcome::Config(b)) =
                            (&mine, &upstream)
                            && a != b
                            && oracle::upstream_loses_what_we_keep(oracle, a, b)
                                .unwrap_or_else(|e| panic!("[{name}] [{patch_name}]: {e}"))
                        {
                            continue;
                        }
                        if !mine.same_verdict(&upstream) {
                            // One line per kind of difference: the same patch usually differs
                            // the same way under every option.
                            let why = explain(&mine, &upstream);
                            let kind = format!(
                                "patch [{patch_name}] vs {}: {}",
                                oracle.release().tag(),
                                why.split_once('\n').map_or(why.as_str(), |(_, rest)| rest)
                            );
                            let entry = differences.entry(kind).or_insert((0, String::new()));
                            entry.0 += 1;
                            entry.1 =
                                format!("contract {contract} {} [{name}]", machine_type.as_str());
                        }
                    }
                }
            }
        }
    }
    eprintln!("compared {compared} renders with upstream's");
    assert!(compared > 1000, "only {compared} renders compared");
    let total: usize = differences.values().map(|(n, _)| n).sum();
    assert!(
        differences.is_empty(),
        "{total} of {compared} renders differ from upstream's, in {} ways:\n{}",
        differences.len(),
        differences
            .iter()
            .map(|(kind, (n, last))| format!("{n}x (e.g. {last}) {kind}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
