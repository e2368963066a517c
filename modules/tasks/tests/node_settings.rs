//! `node_settings`: one node's inventory (hostname, install disk selector, interfaces, name
//! servers, labels, annotations, taints) rendered where each contract reads it, accepted by the
//! simulator's decoder of upstream's Go types for that release, and refused with the option's
//! name when it cannot be right. Upstream's places: `pkg/machinery/config/types/network/hostname.go`
//! and `resolver.go` (the documents that refuse the v1alpha1 fields) and `v1alpha1/v1alpha1_types.go`
//! (`InstallDiskSelector`, `nodeLabels`, `nodeTaints`), v1.13.9 and v1.14.0-rc.1.

mod common;

use common::{Kind, Run, Sim, four_checks, run, run_ok};
use ferro_talos_config::MachineConfig;
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const CONFIG: &Module = named("talos_config");
const APPLY: &Module = named("talos_apply");

fn settings() -> Value {
    json!({
        "hostname": "cp-1",
        "install_disk_selector": {"size": ">= 100GB", "type": "nvme"},
        "network_interfaces": [{"interface": "eth0", "dhcp": false,
                                "addresses": ["192.168.1.11/24"],
                                "routes": [{"network": "0.0.0.0/0", "gateway": "192.168.1.1"}],
                                "vip": {"ip": "192.168.1.10"}}],
        "nameservers": ["192.168.1.1", "1.1.1.1"],
        "node_labels": {"topology.kubernetes.io/zone": "rack-a", "rank": 1},
        "node_annotations": {"example.com/owner": "homelab"},
        "node_taints": {"dedicated": "storage:NoSchedule"},
    })
}

/// The documents talos_config renders for a control plane of `talos_version` with `settings`.
fn rendered(sim: &Sim, talos_version: &str, settings: Value) -> Vec<Value> {
    let secrets = sim.path("secrets.yaml").display().to_string();
    let dest = sim.path(&format!("cp-{talos_version}.yaml"));
    run_ok(
        CONFIG,
        &json!({
            "secrets_file": secrets, "generate_secrets": true, "dest": dest.display().to_string(),
            "machine_type": "controlplane", "cluster_name": "inventory",
            "cluster_endpoint": "https://192.168.1.10:6443", "talos_version": talos_version,
            "node_settings": settings,
        }),
    );
    let text = std::fs::read_to_string(dest).unwrap();
    MachineConfig::parse(&text).unwrap().docs
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} document in {docs:?}"))
}

#[test]
fn the_1_13_contract_keeps_v1alpha1_fields_and_a_hostname_document() {
    let sim = Sim::start(1, 0);
    let docs = rendered(&sim, "v1.13", settings());
    let machine = &docs[0]["machine"];
    assert_eq!(
        kind(&docs, "HostnameConfig"),
        &json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off", "hostname": "cp-1"})
    );
    assert_eq!(machine["network"].get("hostname"), None);
    assert_eq!(
        machine["network"]["nameservers"],
        json!(["192.168.1.1", "1.1.1.1"])
    );
    assert_eq!(
        machine["network"]["interfaces"][0]["vip"]["ip"],
        "192.168.1.10"
    );
    // The installer uses the selector when there is one: the config says the disk once.
    assert_eq!(
        machine["install"]["diskSelector"],
        json!({"size": ">= 100GB", "type": "nvme"})
    );
    assert_eq!(machine["install"].get("disk"), None);
    // Merged with the label the render gives every control plane.
    assert_eq!(
        machine["nodeLabels"],
        json!({"node.kubernetes.io/exclude-from-external-load-balancers": "",
               "topology.kubernetes.io/zone": "rack-a", "rank": "1"})
    );
    assert_eq!(
        machine["nodeTaints"],
        json!({"dedicated": "storage:NoSchedule"})
    );
    assert_eq!(machine["nodeAnnotations"]["example.com/owner"], "homelab");
}

#[test]
fn the_1_11_contract_writes_the_hostname_in_v1alpha1() {
    let sim = Sim::start(1, 0);
    let docs = rendered(&sim, "v1.11", json!({"hostname": "cp-1"}));
    assert_eq!(docs[0]["machine"]["network"]["hostname"], "cp-1");
    assert!(
        docs.iter().all(|d| d["kind"] != "HostnameConfig"),
        "{docs:?}"
    );
}

#[test]
fn the_1_14_contract_moves_each_setting_into_its_document() {
    let sim = Sim::start(1, 0);
    let docs = rendered(&sim, "v1.14", settings());
    let machine = &docs[0]["machine"];
    assert_eq!(kind(&docs, "HostnameConfig")["hostname"], "cp-1");
    assert_eq!(
        kind(&docs, "ResolverConfig")["nameservers"],
        json!([{"address": "192.168.1.1"}, {"address": "1.1.1.1"}])
    );
    assert_eq!(machine["network"].get("nameservers"), None);
    assert_eq!(machine["network"]["interfaces"][0]["interface"], "eth0");
    let node = kind(&docs, "KubeNodeConfig");
    assert_eq!(node["labels"]["topology.kubernetes.io/zone"], "rack-a");
    assert_eq!(node["annotations"]["example.com/owner"], "homelab");
    assert!(machine.get("nodeLabels").is_none(), "{machine}");
    let install = kind(&docs, "UnattendedInstallConfig");
    let selector = install["provisioning"]["diskSelector"]["match"]
        .as_str()
        .unwrap();
    assert!(
        selector.starts_with(
            "disk.size >= 100000000000u && disk.transport != \"\" && disk.transport == \"nvme\""
        ),
        "{selector}"
    );
    assert!(
        !selector.contains("dev_path"),
        "the selector replaces the render's disk: {selector}"
    );
    assert_eq!(node["taints"]["dedicated"], "storage:NoSchedule");
}

/// Applied to a node of each release, the config is what that release decodes, the node takes
/// the hostname, and a second run finds nothing to do.
#[test]
fn a_node_takes_its_settings_and_the_rerun_changes_nothing() {
    for version in ["v1.13.6", "v1.14.0-rc.1"] {
        let sim = Sim::start_version(1, 0, version);
        let secrets = sim.path("secrets.yaml").display().to_string();
        run_ok(
            CONFIG,
            &json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "inventory"}),
        );
        let contract = &version[..5];
        let args = json!({
            "node": sim.node(0), "secrets_file": secrets,
            "render": {
                "machine_type": "controlplane", "cluster_name": "inventory",
                "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
                "talos_version": contract, "node_settings": settings(),
            },
        });
        four_checks(&sim, APPLY, &args, Kind::Converges);
        let node = &sim.cluster().nodes()[0];
        assert!(!node.maintenance, "{version}: the node runs its config");
        assert_eq!(node.hostname, "cp-1", "{version}");
    }
}

fn failure(settings: Value) -> String {
    let sim = Sim::start(1, 0);
    let secrets = sim.path("secrets.yaml").display().to_string();
    let outcome = run(
        CONFIG,
        &json!({
            "secrets_file": secrets, "generate_secrets": true,
            "dest": sim.path("cp.yaml").display().to_string(),
            "machine_type": "controlplane", "cluster_name": "inventory",
            "cluster_endpoint": "https://192.168.1.10:6443", "node_settings": settings,
        }),
        Run::Real,
    );
    assert!(outcome.failed(), "expected a failure: {}", outcome.json);
    assert!(
        !sim.path("cp.yaml").exists(),
        "nothing is written on a failure"
    );
    outcome.json["msg"].as_str().unwrap_or_default().to_string()
}

#[test]
fn bad_settings_fail_naming_the_option_and_what_to_write() {
    let msg = failure(json!({"hostname": "cp_1"}));
    assert!(
        msg.starts_with("node_settings.hostname \"cp_1\" is not a host name"),
        "{msg}"
    );
    let msg = failure(json!({"install_disk_selector": {"size": "huge"}}));
    assert!(
        msg.starts_with("node_settings.install_disk_selector.size: cannot read")
            && msg.contains(">= 100GB"),
        "{msg}"
    );
    let msg = failure(json!({"install_disk_selector": {}}));
    assert!(msg.contains("names nothing to match"), "{msg}");
    let msg = failure(json!({"install_disk_selector": {"type": "floppy"}}));
    assert!(
        msg.contains("install_disk_selector") && msg.contains("nvme"),
        "{msg}"
    );
    let msg = failure(json!({"node_taints": {"dedicated": "storage"}}));
    assert!(
        msg.starts_with("node_settings.node_taints.dedicated: expected value:Effect or Effect")
            && msg.ends_with("got \"storage\""),
        "{msg}"
    );
    // An effect alone is a taint without a value, as upstream reads it.
    let sim = Sim::start(1, 0);
    rendered(
        &sim,
        "v1.13",
        json!({"node_taints": {"dedicated": "NoExecute"}}),
    );
    let msg = failure(json!({"node_labels": {"zone": ["a"]}}));
    assert!(
        msg.starts_with("node_settings.node_labels.zone: expected a string"),
        "{msg}"
    );
    let msg = failure(json!({"hostnmae": "cp-1"}));
    assert!(
        msg.contains("node_settings.hostnmae") && msg.contains("hostname"),
        "{msg}"
    );
}
