//! talos_resource_info and talos_support_bundle never put a resource type upstream marks
//! sensitive into a result, though the task's admin credentials would let them read it: apid
//! serves such types to os:admin (`internal/app/resources/access.go` `AccessPolicy` @ v1.13.9 and
//! v1.14.1), and the list is upstream's own (`ferro_talos_tasks::shared::resource_types`, generated from
//! `pkg/machinery/resources/*` at both releases).

mod common;

use common::{Kind, Sim, four_checks, run_ok};
use ferro_talos_tasks::catalog::{Module, named};
use ferro_talos_tasks::shared::resource_types::{self, Lookup};
use serde_json::json;

const CONFIG: &Module = named("talos_config");
const RESOURCE_INFO: &Module = named("talos_resource_info");
const SUPPORT_BUNDLE: &Module = named("talos_support_bundle");

/// A configured control plane (and its secrets bundle): it serves its discovery config and its
/// API server config to an admin.
fn configured(sim: &Sim) -> String {
    let secrets = sim.path("secrets.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "sensitive"}),
    );
    run_ok(
        named("talos_apply"),
        &json!({
            "node": sim.node(0), "secrets_file": secrets,
            "render": {
                "machine_type": "controlplane", "cluster_name": "sensitive",
                "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
                "install_disk": "/dev/vda",
            },
        }),
    );
    secrets
}

/// What the node serves an admin for (namespace, type): the YAML specs, read with the task's own
/// kind of credentials (an admin certificate from the bundle).
fn served(sim: &Sim, secrets: &str, namespace: &str, ty: &str) -> Vec<String> {
    let text = std::fs::read_to_string(secrets).expect("the bundle reads");
    let bundle = ferro_talos_secrets::Bundle::from_yaml(&text).expect("the bundle parses");
    let creds = ferro_talos_client::Credentials::from_bundle(
        &bundle,
        &["os:admin"],
        std::time::Duration::from_secs(600),
    )
    .expect("admin credentials");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let client = ferro_talos_client::TalosClient::connect(
            &sim.node(0),
            &creds,
            ferro_talos_client::ConnectOptions::default(),
        )
        .await
        .expect("connects");
        client
            .list_resources(namespace, ty)
            .await
            .expect("an admin may list it")
            .into_iter()
            .map(|r| r.spec.map(|s| s.yaml_spec).unwrap_or_default())
            .collect()
    })
}

fn assert_refused(outcome: &ferro_ansible_protocol::Outcome, type_name: &str, leaked: &[String]) {
    assert!(outcome.failed(), "{}", outcome.json);
    let msg = outcome.msg().unwrap_or_default();
    assert!(msg.contains(type_name), "{msg}");
    assert!(
        msg.contains("would land in the task's result") || msg.contains("more than one"),
        "{msg}"
    );
    assert!(outcome.json.get("resources").is_none(), "{}", outcome.json);
    let text = outcome.json.to_string();
    for value in leaked {
        assert!(!text.contains(value.as_str()), "{value} leaked: {text}");
    }
}

/// The node does serve its discovery config (the cluster's discovery secret, as bytes) and its
/// API server config to an admin; the module, with admin credentials, refuses both by every
/// name `talosctl get` takes for them, in check mode and for real, and returns nothing of them.
#[test]
fn sensitive_resources_the_node_serves_never_reach_the_result() {
    let sim = Sim::start(1, 0);
    let secrets = configured(&sim);
    for (namespace, ty) in [
        ("config", "DiscoveryConfigs.cluster.talos.dev"),
        ("controlplane", "APIServerConfigs.kubernetes.talos.dev"),
    ] {
        let specs = served(&sim, &secrets, namespace, ty);
        assert_eq!(specs.len(), 1, "the node serves {ty}: {specs:?}");
        // Every value of the spec: a line's text after its key (the key bytes are one per line).
        let values: Vec<String> = specs[0]
            .lines()
            .filter_map(|l| l.split_once(": ").map(|(_, v)| v.trim().to_string()))
            .chain(std::iter::once(specs[0].trim().to_string()))
            .filter(|v| v.len() >= 8)
            .collect();
        assert!(!values.is_empty(), "{}", specs[0]);
        let t = resource_types::by_name(ty).expect("upstream defines it");
        let mut spellings = vec![t.name.to_string(), t.name.to_lowercase()];
        spellings.extend(t.aliases.iter().map(|a| a.to_string()));
        for spelling in spellings {
            for how in [common::Run::Check, common::Run::Real] {
                for namespace in [None, Some(namespace)] {
                    let mut args = json!({
                        "node": sim.node(0), "secrets_file": secrets, "type": spelling,
                    });
                    if let Some(ns) = namespace {
                        args["namespace"] = json!(ns);
                    }
                    let before = sim.world();
                    let outcome = common::run(RESOURCE_INFO, &args, how);
                    assert_refused(&outcome, t.name, &values);
                    assert_eq!(sim.world(), before);
                }
            }
        }
    }
}

/// Every type upstream marks sensitive, at v1.13.9 or v1.14.1, by every one of its names: a
/// `failed` result naming it, with no `resources` and no secret of the bundle in it.
#[test]
fn every_sensitive_type_is_refused_by_every_name() {
    let sim = Sim::start(1, 0);
    let secrets = configured(&sim);
    let bundle_secrets = common::bundle_secrets(std::path::Path::new(&secrets));
    let sensitive: Vec<_> = resource_types::all()
        .iter()
        .filter(|t| t.is_sensitive())
        .collect();
    assert!(sensitive.len() >= 38, "{}", sensitive.len());
    for t in sensitive {
        let mut spellings = vec![t.name.to_string(), t.name.to_uppercase()];
        spellings.extend(t.aliases.iter().map(|a| a.to_string()));
        for spelling in spellings {
            let args = json!({
                "node": sim.node(0), "secrets_file": secrets, "type": spelling,
                "namespace": t.default_namespace,
            });
            let outcome = common::run(RESOURCE_INFO, &args, common::Run::Real);
            assert_refused(&outcome, t.name, &bundle_secrets);
            if !matches!(resource_types::resolve(&spelling), Lookup::Ambiguous(_)) {
                let msg = outcome.msg().unwrap_or_default();
                assert!(msg.contains(t.source), "{msg}");
            }
        }
    }
}

/// A type named by an alias, with no namespace, is read from its own default namespace, as
/// `talosctl get` reads it (the node name lives in `k8s`, the disks in `runtime`).
#[test]
fn aliases_and_default_namespaces_read_as_talosctl_get_reads_them() {
    let sim = Sim::start(1, 0);
    let secrets = configured(&sim);
    let args = json!({"node": sim.node(0), "secrets_file": secrets, "type": "nodename"});
    let runs = four_checks(&sim, RESOURCE_INFO, &args, Kind::Reads);
    let found = runs.real["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(found.len(), 1, "{}", runs.real);
    assert_eq!(found[0]["type"], json!("Nodenames.kubernetes.talos.dev"));
    assert_eq!(found[0]["namespace"], json!("k8s"));
    let disks = run_ok(
        RESOURCE_INFO,
        &json!({"node": sim.node(0), "secrets_file": secrets, "type": "Disk"}),
    );
    assert_eq!(
        disks["resources"].as_array().map(Vec::len),
        Some(2),
        "{disks}"
    );
    let ambiguous = common::run(
        RESOURCE_INFO,
        &json!({"node": sim.node(0), "secrets_file": secrets, "type": "apisc"}),
        common::Run::Real,
    );
    assert!(ambiguous.failed());
    assert!(
        ambiguous
            .msg()
            .unwrap_or_default()
            .contains("APIServiceConfigs.runtime.talos.dev"),
        "{}",
        ambiguous.json
    );
    // A full name the table does not know goes to the node, whose resource definitions decide.
    let unknown = common::run(
        RESOURCE_INFO,
        &json!({"node": sim.node(0), "secrets_file": secrets, "type": "Widgets.example.dev"}),
        common::Run::Real,
    );
    assert!(unknown.failed());
    assert!(
        unknown
            .msg()
            .unwrap_or_default()
            .contains("registers no resource type Widgets.example.dev"),
        "{}",
        unknown.json
    );
}

/// The support bundle holds no resource of a sensitive type: none of the files it writes per node
/// is one, and nothing of what the node serves of them is anywhere in the archive.
#[test]
fn the_support_bundle_holds_no_sensitive_resource() {
    let sim = Sim::start(1, 0);
    let secrets = configured(&sim);
    let discovery = served(
        &sim,
        &secrets,
        "config",
        "DiscoveryConfigs.cluster.talos.dev",
    );
    let dest = sim.path("support.tar.gz");
    let outcome = run_ok(
        SUPPORT_BUNDLE,
        &json!({"nodes": [sim.node(0)], "secrets_file": secrets, "dest": dest}),
    );
    assert_eq!(outcome["errors"], json!([]), "{outcome}");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&dest).expect("the bundle opens"),
    ));
    let mut everything = String::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("an entry");
        std::io::Read::read_to_string(&mut entry, &mut everything).expect("text");
    }
    for t in resource_types::all().iter().filter(|t| t.is_sensitive()) {
        assert!(
            !everything.contains(&format!("# {} ", t.name)),
            "{} collected",
            t.name
        );
    }
    assert_eq!(discovery.len(), 1, "the node serves it");
    assert!(!everything.contains("serviceEncryptionKey"));
}
