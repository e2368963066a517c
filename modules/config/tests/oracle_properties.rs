//! Random render options and patches, rendered by talos_config's code and by upstream's own
//! (tests/oracle): the two must agree, byte for byte or in refusing. proptest shrinks any
//! difference to a small case; pin each one found in oracle_generate.rs's corpus.
//!
//! CI runs `FERRO_ORACLE_CASES` cases (default 5,000, seed 30); `tools/oracle-properties` runs
//! 100,000 (four seeds).
//! Without Go the test prints why and returns; `FERRO_REQUIRE_UPSTREAM=1` makes that a failure.

mod oracle;

use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{Cni, GenerateOptions, MachineType};
use ferro_talos_oracle::{Oracle, Release};
use ferro_talos_secrets::Bundle;
use oracle::{explain, ours, releases_for, theirs};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// Characters that decide how YAML quotes a string, and some that only escapes can carry.
/// Left out: the line breaks other than `\n` (U+0085, U+2028, U+2029). Upstream's go-yaml writes
/// them raw inside single quotes, where a reader folds them into a space: the value read back is
/// not the value written. The collection writes their escapes (`"\N"`, `"\L"`, `"\P"`), which
/// read back as written; a deliberate divergence (docs/talos-fidelity.md).
const CHARS: &[char] = &[
    'a', 'b', 'z', 'A', 'Z', '0', '1', '9', '.', '-', '_', '/', ':', ' ', '#', '\'', '"', '\\',
    '{', '}', '[', ']', ',', '&', '*', '!', '|', '>', '%', '@', '`', '?', '=', '+', '~', '\n',
    '\t', 'é', '漢', '🙂', '\u{feff}',
];

/// Whole words YAML resolves as something other than a string, in some release or other.
const WORDS: &[&str] = &[
    "",
    "yes",
    "no",
    "on",
    "off",
    "Off",
    "y",
    "N",
    "true",
    "False",
    "null",
    "~",
    "0",
    "0o644",
    "0x1F",
    "1e3",
    "1_000",
    "12:30",
    "1:20:30",
    "2001-01-01",
    ".5",
    ".inf",
    "-.Inf",
    ".nan",
    "<<",
    "-",
    "- x",
    "a: b",
    "#x",
    "x #y",
    " lead",
    "trail ",
    "multi\nline\n",
    "tab\tin",
    "3.3.3.3",
    "10.0.0.0/8",
    "fd00::1",
    "https://example.com/x?y=1#z",
    "${VAR}",
    "@file",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        select(WORDS).prop_map(String::from),
        prop::collection::vec(select(CHARS), 0..10).prop_map(String::from_iter),
    ]
}

/// A map key that a Kubernetes-style map can hold (the loader keeps any string as a key).
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        select(
            &[
                "a",
                "b.c/d",
                "node.kubernetes.io/x",
                "on",
                "1",
                "a b",
                "x:y"
            ][..]
        )
        .prop_map(String::from),
        text(),
    ]
}

fn yaml_quoted(s: &str) -> String {
    // A JSON string is a YAML double-quoted scalar: the patch says exactly this string.
    serde_json::to_string(s).unwrap()
}

fn map_patch(path: &[&str], entries: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (depth, p) in path.iter().enumerate() {
        out.push_str(&format!("{}{p}:\n", "  ".repeat(depth)));
    }
    let indent = "  ".repeat(path.len());
    for (k, v) in entries {
        out.push_str(&format!("{indent}{}: {}\n", yaml_quoted(k), yaml_quoted(v)));
    }
    out
}

fn list_patch(path: &[&str], items: &[String]) -> String {
    let mut out = String::new();
    for (depth, p) in path.iter().enumerate() {
        out.push_str(&format!("{}{p}:\n", "  ".repeat(depth)));
    }
    let indent = "  ".repeat(path.len());
    for i in items {
        out.push_str(&format!("{indent}- {}\n", yaml_quoted(i)));
    }
    out
}

fn patch() -> impl Strategy<Value = String> {
    let entries = || prop::collection::btree_map(key(), text(), 1..4);
    let items = || prop::collection::vec(text(), 1..4);
    prop_oneof![
        entries().prop_map(|e| map_patch(&["machine", "nodeLabels"], &e)),
        entries().prop_map(|e| map_patch(&["machine", "nodeAnnotations"], &e)),
        entries().prop_map(|e| map_patch(&["machine", "sysctls"], &e)),
        entries().prop_map(|e| map_patch(&["machine", "env"], &e)),
        entries().prop_map(|e| map_patch(&["machine", "kubelet", "extraArgs"], &e)),
        entries().prop_map(|e| map_patch(&["cluster", "apiServer", "extraArgs"], &e)),
        items().prop_map(|i| list_patch(&["machine", "certSANs"], &i)),
        items().prop_map(|i| list_patch(&["machine", "install", "extraKernelArgs"], &i)),
        items().prop_map(|i| list_patch(&["machine", "time", "servers"], &i)),
        items().prop_map(|i| list_patch(&["cluster", "apiServer", "certSANs"], &i)),
        text().prop_map(|h| format!("machine:\n  network:\n    hostname: {}\n", yaml_quoted(&h))),
        (text(), text()).prop_map(|(path, content)| format!(
            "machine:\n  files:\n    - path: {}\n      permissions: 0o644\n      op: create\n      content: {}\n",
            yaml_quoted(&format!("/var/{path}")),
            yaml_quoted(&content)
        )),
        select(&["cluster:\n  discovery:\n    $patch: delete\n", "machine:\n  features:\n    $patch: delete\n",
            "cluster:\n  proxy:\n    disabled: true\n", "machine:\n  install:\n    wipe: true\n",
            "cluster:\n  allowSchedulingOnControlPlanes: true\n"][..]).prop_map(String::from),
        text().prop_map(|h| format!("apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: {}\nauto: off\n", yaml_quoted(&h))),
        entries().prop_map(|e| {
            let mut p = "apiVersion: v1alpha1\nkind: KubeletConfig\n".to_string();
            p.push_str(&map_patch(&["extraArgs"], &e));
            p
        }),
        // Not the key `<<`: upstream's JSON 6902 path writes it back unquoted (ghodss/yaml's
        // JSONToYAML), where its loader takes it for a merge key and refuses the config
        // ("map merge requires map or sequence of maps"); the collection keeps the label.
        (key().prop_filter("upstream writes a plain << key", |k| k != "<<"), text()).prop_map(|(k, v)| format!(
            "[{{\"op\": \"add\", \"path\": \"/machine/nodeLabels/{}\", \"value\": {}}}]",
            k.replace('~', "~0").replace('/', "~1").replace('\\', "\\\\").replace('"', "\\\""),
            yaml_quoted(&v)
        )),
    ]
}

/// Pod and service subnets: IPv4, IPv6 and dual-stack.
type Subnets = (&'static [&'static str], &'static [&'static str]);
const SUBNETS: &[Subnets] = &[
    (&["10.244.0.0/16"], &["10.96.0.0/12"]),
    (&["fd00:10:244::/56"], &["fd00:10:96::/112"]),
    (
        &["10.244.0.0/16", "fd00:10:244::/56"],
        &["10.96.0.0/12", "fd00:10:96::/112"],
    ),
];

const CONTRACTS: [Contract; 4] = [
    Contract::V1_11,
    Contract::V1_12,
    Contract::V1_13,
    Contract::V1_14,
];

fn options() -> impl Strategy<Value = GenerateOptions> {
    let names = select(&["c", "home-lab", "yes", "on", "a.b", "x_y", "1", "Cluster 1"][..]);
    let endpoints = select(
        &[
            "https://c:6443",
            "https://10.0.0.10:6443",
            "https://[fd00::10]:6443",
            "https://k8s.example.com",
            "https://c:6443/",
            "https://c:443",
        ][..],
    );
    let disks = prop::option::of(select(
        &["/dev/sda", "/dev/nvme0n1", "/dev/disk/by-id/x"][..],
    ));
    let images = prop::option::of(select(
        &[
            "ghcr.io/siderolabs/installer:v1.13.9",
            "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
        ][..],
    ));
    let subnets = select(SUBNETS);
    let cnis = prop::option::of(select(
        &[
            ("custom", 1usize),
            ("none", 0),
            ("flannel", 0),
            ("custom", 2),
        ][..],
    ));
    (
        (
            select(&CONTRACTS[..]),
            any::<bool>(),
            names,
            endpoints,
            select(&["1.28.0", "1.36.3", "1.37.0", "v1.35.1"][..]),
        ),
        (
            disks,
            images,
            prop::collection::vec(text(), 0..3),
            select(&["cluster.local", "example.com"][..]),
            subnets,
        ),
        (
            any::<bool>(),
            prop::option::of(select(&[5443u16, 6443][..])),
            prop::collection::vec(text(), 0..3),
            prop::collection::btree_map(key(), text(), 0..3),
        ),
        (
            cnis,
            prop::collection::vec(
                (
                    select(&["docker.io", "ghcr.io", "*"][..]),
                    select(&["https://m.example.com", "http://10.0.0.1:5000"][..]),
                ),
                0..3,
            ),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (contract, worker, name, endpoint, k8s),
                (disk, image, sans, dns, (pods, services)),
                (sched, port, kargs, sysctls),
                (cni, mirrors, kubespan),
            )| {
                let machine_type = if worker {
                    MachineType::Worker
                } else {
                    MachineType::ControlPlane
                };
                let mut o = GenerateOptions::new(contract, machine_type, name, endpoint);
                o.kubernetes_version = k8s.into();
                o.install_disk = disk.map(String::from);
                o.install_image = image.map(String::from);
                o.additional_sans = sans;
                o.dns_domain = dns.into();
                o.pod_subnets = pods.iter().map(|s| s.to_string()).collect();
                o.service_subnets = services.iter().map(|s| s.to_string()).collect();
                o.allow_scheduling_on_control_planes = sched;
                o.local_api_server_port = port;
                o.install_extra_kernel_args = kargs;
                o.sysctls = sysctls;
                o.cni = cni.map(|(name, urls)| Cni {
                    name: name.into(),
                    urls: (0..urls)
                        .map(|i| format!("https://example.com/cni-{i}.yaml"))
                        .collect(),
                });
                o.registry_mirrors = mirrors
                    .into_iter()
                    .map(|(h, u)| (h.to_string(), u.to_string()))
                    .collect();
                o.kubespan = kubespan;
                o
            },
        )
}

/// The run's seed: fixed by default, so a CI failure reproduces; `FERRO_ORACLE_SEED` picks
/// another (tools/oracle-properties runs several).
fn seed() -> u64 {
    std::env::var("FERRO_ORACLE_SEED")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(30)
}

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes
}

fn cases() -> u32 {
    std::env::var("FERRO_ORACLE_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(5000)
}

#[test]
fn random_options_and_patches_render_as_upstream_renders_them() {
    let mut oracles = BTreeMap::new();
    for release in Release::ALL {
        match Oracle::start(release) {
            Some(o) => oracles.insert(release.tag(), RefCell::new(o)),
            None => return,
        };
    }
    // One bundle per contract: generating keys is the slow part, and the options are what vary.
    let bundles: BTreeMap<String, (Bundle, String)> = CONTRACTS
        .iter()
        .map(|c| {
            let b = Bundle::generate((c.major.into(), c.minor.into())).unwrap();
            let yaml = b.to_yaml();
            (c.to_string(), (b, yaml))
        })
        .collect();
    let compared = RefCell::new(0u64);
    let unloadable = RefCell::new(0u64);
    let seed = seed();
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: cases(),
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    // JSON 6902 patches go first. After a strategic patch has set a kubelet or API server
    // argument to a YAML 1.1 word (`yes`), upstream's JSON 6902 path re-reads the whole config as
    // YAML 1.1 (configpatcher/json6902.go: ghodss/yaml on yaml.v2) and writes `"true"`: the value
    // changes. The collection keeps `yes`, as a node reads it; a deliberate divergence
    // (docs/talos-fidelity.md), which this order keeps out of the comparison.
    let strategy = (
        options(),
        prop::collection::vec(patch(), 0..4).prop_map(|mut patches| {
            patches.sort_by_key(|p| !p.starts_with('['));
            patches
        }),
    );
    let result = runner.run(&strategy, |(opts, patches)| {
        let (bundle, bundle_yaml) = &bundles[&opts.contract.to_string()];
        let mine = ours(bundle, &opts, &patches);
        for release in releases_for(opts.contract) {
            let mut oracle = oracles[release.tag()].borrow_mut();
            let Some(upstream) = theirs(&mut oracle, bundle_yaml, &opts, &patches) else {
                continue;
            };
            *compared.borrow_mut() += 1;
            if let (oracle::Outcome::Config(ours_text), oracle::Outcome::Config(theirs_text)) =
                (&mine, &upstream)
                && ours_text != theirs_text
            {
                match oracle::upstream_loses_what_we_keep(&mut oracle, ours_text, theirs_text) {
                    Ok(true) => {
                        *unloadable.borrow_mut() += 1;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => return Err(TestCaseError::fail(e)),
                }
            }
            if !mine.same_verdict(&upstream) {
                return Err(TestCaseError::fail(format!(
                    "vs {}: {}\npatches: {patches:?}",
                    release.tag(),
                    explain(&mine, &upstream)
                )));
            }
        }
        Ok(())
    });
    eprintln!(
        "seed {seed}: {} random cases, {} renders compared with upstream's ({} where upstream's text does not read back as written and ours holds its values)",
        cases(),
        compared.borrow(),
        unloadable.borrow()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
