//! The deadlines modules give the Talos calls that may run for minutes: the task's `timeout`,
//! where a fixed 30 s once cut them short. In this process against an in-process simulated
//! cluster (`common/mod.rs`).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Run, Sim, run, run_ok};
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const CONFIG: &Module = named("talos_config");
const APPLY: &Module = named("talos_apply");
const BOOTSTRAP: &Module = named("talos_bootstrap");
const ETCD_SNAPSHOT: &Module = named("talos_etcd_snapshot");
const RESET: &Module = named("talos_reset");
const ETCD_RECOVER: &Module = named("talos_etcd_recover");
const ETCD_MEMBER: &Module = named("talos_etcd_member");

/// Every node configured and etcd bootstrapped on the first; returns the bundle's path.
fn bootstrapped(sim: &Sim) -> String {
    let secrets = sim.path("secrets.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "deadlines"}),
    );
    for index in 0..sim.cluster().nodes().len() {
        let render = json!({
            "machine_type": sim.cluster().nodes()[index].role,
            "cluster_name": "deadlines",
            "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
            "install_disk": "/dev/vda",
        });
        run_ok(
            APPLY,
            &json!({"node": sim.node(index), "secrets_file": secrets, "render": render}),
        );
    }
    run_ok(
        BOOTSTRAP,
        &json!({"node": sim.node(0), "secrets_file": secrets}),
    );
    secrets
}

/// A one-control-plane cluster after the disaster, as the recovery procedure leaves it: a
/// snapshot saved, then EPHEMERAL wiped, so etcd is empty. Returns the bundle and the snapshot.
fn wiped(sim: &Sim) -> (String, PathBuf) {
    let secrets = bootstrapped(sim);
    let snapshot = sim.path("etcd.snapshot");
    run_ok(
        ETCD_SNAPSHOT,
        &json!({"node": sim.node(0), "secrets_file": secrets, "dest": snapshot}),
    );
    run_ok(
        RESET,
        &json!({
            "node": sim.node(0), "secrets_file": secrets, "confirm": "reset",
            "wipe": "ephemeral", "graceful": false, "timeout": 60,
        }),
    );
    assert!(!sim.cluster().nodes()[0].etcd_member);
    (secrets, snapshot)
}

/// A link to node 0 that carries the snapshot in `seconds`.
fn slow_link(sim: &Sim, snapshot: &PathBuf, seconds: u64) {
    let size = std::fs::metadata(snapshot).expect("saved").len();
    sim.cluster()
        .update_faults(0, |f| f.upload_bytes_per_sec = Some(size / seconds))
        .expect("the fault is set");
}

fn recover_args(sim: &Sim, secrets: &str, snapshot: &PathBuf, timeout: u64) -> Value {
    json!({
        "node": sim.node(0), "secrets_file": secrets, "snapshot": snapshot,
        "control_plane_nodes": [sim.node(0)], "timeout": timeout,
    })
}

/// Talos reads an upload until its stream ends, with no limit of its own, and talosctl sets none
/// (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go` EtcdRecover,
/// `cmd/talosctl/cmd/talos/bootstrap.go`, `pkg/machinery/client/client.go` EtcdRecover @
/// v1.14.1): over a slow link the upload runs as long as the task's timeout allows, past the
/// 30 s the module once gave it.
#[test]
fn talos_etcd_recover_uploads_for_as_long_as_its_timeout_allows() {
    let sim = Sim::start(1, 0);
    let (secrets, snapshot) = wiped(&sim);
    slow_link(&sim, &snapshot, 32);
    let started = Instant::now();
    let result = run_ok(ETCD_RECOVER, &recover_args(&sim, &secrets, &snapshot, 120));
    let took = started.elapsed();
    eprintln!("talos_etcd_recover over a slow link: {took:.1?}");
    assert!(took >= Duration::from_secs(32), "{took:?}");
    assert_eq!(result["changed"], json!(true), "{result}");
    assert!(sim.cluster().nodes()[0].etcd_member);
}

/// A deadline that passes during the upload fails the task with what to do, and nothing is
/// bootstrapped; the node keeps nothing of the cut-off upload (it sees the stream reset, as
/// Talos's EtcdRecover does: `v1alpha1_server.go` @ v1.14.1), and a later run uploads it again.
#[test]
fn talos_etcd_recover_fails_clearly_when_its_timeout_passes_during_the_upload() {
    let sim = Sim::start(1, 0);
    let (secrets, snapshot) = wiped(&sim);
    slow_link(&sim, &snapshot, 10);
    let before = sim.world();
    let started = Instant::now();
    let outcome = run(
        ETCD_RECOVER,
        &recover_args(&sim, &secrets, &snapshot, 3),
        Run::Real,
    );
    let took = started.elapsed();
    assert!(outcome.failed(), "{}", outcome.json);
    assert!(took < Duration::from_secs(8), "{took:?}");
    let msg = outcome.msg().unwrap_or_default().to_string();
    eprintln!("talos_etcd_recover after {took:.1?}: {msg}");
    let kib = std::fs::metadata(&snapshot)
        .expect("saved")
        .len()
        .div_ceil(1024);
    assert!(
        kib < 1024,
        "the snapshot is {kib} KiB: the sizes below say KiB"
    );
    let sent: u64 = msg
        .split("(about ")
        .nth(1)
        .and_then(|rest| rest.split(" KiB of it sent)").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no \"(about N KiB of it sent)\" in {msg}"));
    // What the module handed to the stream: a snapshot smaller than one 1 MiB message is all
    // handed over at once, and the slow link holds it back on the node's side.
    assert!(sent <= kib, "{sent} KiB of a {kib} KiB snapshot sent");
    for words in [
        format!("node {}: the upload of the {kib} KiB snapshot", sim.node(0)),
        "did not finish within the task's timeout of 3s".to_string(),
        "raise timeout".to_string(),
        "nothing was bootstrapped".to_string(),
    ] {
        assert!(msg.contains(&words), "{words:?} not in {msg}");
    }
    assert_eq!(outcome.json["node"], json!(sim.node(0)), "{}", outcome.json);
    assert_eq!(sim.world(), before, "a timed-out upload changed something");

    sim.cluster()
        .update_faults(0, |f| f.upload_bytes_per_sec = None)
        .expect("the fault is cleared");
    run_ok(ETCD_RECOVER, &recover_args(&sim, &secrets, &snapshot, 60));
    assert!(sim.cluster().nodes()[0].etcd_member);
}

/// Talos's EtcdLeaveCluster may take more than 8 minutes: up to 3 waiting for the node's member
/// id (`internal/pkg/etcd/local.go` GetLocalMemberID), up to 5 retrying the removal while etcd
/// calls the cluster unhealthy (`internal/pkg/etcd/etcd.go` LeaveCluster), then up to 10 s
/// stopping etcd (`internal/app/machined/pkg/system/runner/runner.go` GracefulShutdownTimeout),
/// at v1.13.9 and v1.14.1. The leave's deadline is the task's `timeout`, 600 s unless set.
#[test]
fn talos_etcd_member_gives_the_leave_the_task_s_timeout() {
    let sim = Sim::start(3, 0);
    let secrets = bootstrapped(&sim);
    let leave = "/machine.MachineService/EtcdLeaveCluster";
    let args = |member: usize| json!({"node": sim.node(0), "secrets_file": secrets, "member": sim.node(member)});

    let mut bad = args(2);
    bad["timeout"] = json!(0);
    let before = sim.world();
    let outcome = run(ETCD_MEMBER, &bad, Run::Real);
    assert!(outcome.failed(), "{}", outcome.json);
    assert!(
        outcome
            .msg()
            .unwrap_or_default()
            .contains("timeout must be between 1 and"),
        "{}",
        outcome.json
    );
    assert_eq!(sim.world(), before);

    let left = run_ok(ETCD_MEMBER, &args(2));
    assert_eq!(left["method"], json!("leave"), "{left}");
    assert_eq!(
        sim.cluster().last_deadline(leave),
        Some(Duration::from_secs(600))
    );
    let mut longer = args(1);
    longer["timeout"] = json!(517);
    let left = run_ok(ETCD_MEMBER, &longer);
    assert_eq!(left["method"], json!("leave"), "{left}");
    assert_eq!(
        sim.cluster().last_deadline(leave),
        Some(Duration::from_secs(517))
    );
}
