//! talos_config's `secrets_from_controlplane_config`: recovering the bundle of a cluster that
//! already exists from its control plane's config, through the four runs of a careful user, and
//! the cases where it must refuse (see `four_checks.rs` for the layer).

mod common;

use common::{Kind, Run, Sim, assert_no_secret, four_checks, run, run_ok};
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const CONFIG: &Module = named("talos_config");

/// A cluster's bundle and the control plane's config rendered from it; then the bundle is moved
/// to `original.yaml`, as if only controlplane.yaml had survived.
fn only_the_config_left(sim: &Sim) -> (String, String) {
    let secrets = sim.path("secrets.yaml").display().to_string();
    let cp = sim.path("controlplane.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({
            "secrets_file": secrets,
            "generate_secrets": true,
            "machine_type": "controlplane",
            "cluster_name": "adopt",
            "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
            "dest": cp,
        }),
    );
    std::fs::rename(&secrets, sim.path("original.yaml")).unwrap();
    (secrets, cp)
}

fn failure(args: &Value) -> String {
    let outcome = run(CONFIG, args, Run::Real);
    assert!(outcome.failed(), "expected a failure: {}", outcome.json);
    outcome.json["msg"].as_str().unwrap_or_default().to_string()
}

#[test]
fn the_bundle_is_derived_once_and_byte_equal_to_the_original() {
    let sim = Sim::start(1, 0);
    let (secrets, cp) = only_the_config_left(&sim);
    let args = json!({"secrets_file": secrets, "secrets_from_controlplane_config": cp});
    let runs = four_checks(&sim, CONFIG, &args, Kind::Converges);
    assert_eq!(runs.check["secrets_derived"], json!(true));
    assert_eq!(runs.real["secrets_derived"], json!(true));
    assert_eq!(runs.again["secrets_derived"], json!(false));
    assert_eq!(runs.real["secrets_generated"], json!(false));
    assert!(
        runs.check["msg"]
            .as_str()
            .unwrap()
            .starts_with("would write the secrets bundle derived from"),
        "{}",
        runs.check
    );
    assert_eq!(
        std::fs::read(&secrets).unwrap(),
        std::fs::read(sim.path("original.yaml")).unwrap(),
        "the derived bundle is the original, byte for byte"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&secrets).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert_no_secret(
        &sim.path("original.yaml"),
        &[&runs.check, &runs.real, &runs.again, &runs.check_after],
    );

    // The same task may issue the talosconfig from the derived bundle.
    let tc = sim.path("talosconfig").display().to_string();
    let with_talosconfig = json!({
        "secrets_file": secrets,
        "secrets_from_controlplane_config": cp,
        "cluster_name": "adopt",
        "talosconfig": tc,
        "endpoints": [sim.node(0)],
    });
    let out = run_ok(CONFIG, &with_talosconfig);
    assert_eq!(out["talosconfig_changed"], json!(true), "{out}");
}

#[test]
fn a_different_bundle_is_never_overwritten() {
    let sim = Sim::start(1, 0);
    let (secrets, cp) = only_the_config_left(&sim);
    // Another cluster's bundle where this one's belongs.
    run_ok(
        CONFIG,
        &json!({"secrets_file": secrets, "generate_secrets": true}),
    );
    let before = std::fs::read(&secrets).unwrap();
    let msg = failure(&json!({"secrets_file": secrets, "secrets_from_controlplane_config": cp}));
    assert!(
        msg.contains(&secrets) && msg.contains(&cp) && msg.contains("never overwritten"),
        "{msg}"
    );
    assert!(
        msg.contains("certs.os.key") && msg.contains("trustdinfo.token"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&secrets).unwrap(), before);
    assert_no_secret(std::path::Path::new(&secrets), &[&json!(msg)]);
    assert_no_secret(&sim.path("original.yaml"), &[&json!(msg)]);
}

#[test]
fn bad_input_names_the_option_and_what_to_give_instead() {
    let sim = Sim::start(1, 0);
    let (secrets, cp) = only_the_config_left(&sim);
    let with =
        |from: &str| json!({"secrets_file": secrets, "secrets_from_controlplane_config": from});

    let missing = sim.path("nowhere.yaml").display().to_string();
    let msg = failure(&with(&missing));
    assert!(
        msg.starts_with(&format!(
            "secrets_from_controlplane_config {missing}: does not exist"
        )),
        "{msg}"
    );

    let worker = sim.path("worker.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({
            "secrets_file": sim.path("original.yaml"),
            "machine_type": "worker",
            "cluster_name": "adopt",
            "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
            "dest": worker,
        }),
    );
    let msg = failure(&with(&worker));
    assert!(
        msg.contains("a worker config holds no CA keys; use the control plane's config"),
        "{msg}"
    );

    let junk = sim.path("junk.yaml");
    std::fs::write(&junk, "machine: [unclosed\n").unwrap();
    let msg = failure(&with(&junk.display().to_string()));
    assert!(
        msg.contains("not a machine config") && msg.contains("controlplane.yaml"),
        "{msg}"
    );

    let vaulted = sim.path("vaulted.yaml");
    std::fs::write(&vaulted, "$ANSIBLE_VAULT;1.1;AES256\n6162\n").unwrap();
    let msg = failure(&with(&vaulted.display().to_string()));
    assert!(msg.contains("encrypted with Ansible Vault"), "{msg}");

    let msg = failure(&json!({
        "secrets_file": secrets, "secrets_from_controlplane_config": cp, "generate_secrets": true,
    }));
    assert!(
        msg.contains("mutually exclusive: secrets_from_controlplane_config|generate_secrets"),
        "{msg}"
    );
    let msg = failure(&json!({"secrets_from_controlplane_config": cp, "talosconfig": "/tmp/x"}));
    assert!(msg.contains("secrets_file"), "{msg}");
    assert!(
        !std::path::Path::new(&secrets).exists(),
        "nothing was written"
    );
}
