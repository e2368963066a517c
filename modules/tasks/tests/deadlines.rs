//! The deadlines modules give the Talos calls that may run for minutes: the task's `timeout`,
//! where a fixed 30 s once cut them short. In this process against an in-process simulated
//! cluster (`common/mod.rs`).

mod common;

use std::time::Duration;

use common::{Module, Run, Sim, run, run_ok};
use ferro_talos_tasks::{talos_apply, talos_bootstrap, talos_config, talos_etcd_member};
use serde_json::json;

const CONFIG: Module = Module {
    name: "talos_config",
    spec: talos_config::spec,
    run: talos_config::run,
};
const APPLY: Module = Module {
    name: "talos_apply",
    spec: talos_apply::spec,
    run: talos_apply::run,
};
const BOOTSTRAP: Module = Module {
    name: "talos_bootstrap",
    spec: talos_bootstrap::spec,
    run: talos_bootstrap::run,
};
const ETCD_MEMBER: Module = Module {
    name: "talos_etcd_member",
    spec: talos_etcd_member::spec,
    run: talos_etcd_member::run,
};

/// Every node configured and etcd bootstrapped on the first; returns the bundle's path.
fn bootstrapped(sim: &Sim) -> String {
    let secrets = sim.path("secrets.yaml").display().to_string();
    run_ok(
        &CONFIG,
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
            &APPLY,
            &json!({"node": sim.node(index), "secrets_file": secrets, "render": render}),
        );
    }
    run_ok(
        &BOOTSTRAP,
        &json!({"node": sim.node(0), "secrets_file": secrets}),
    );
    secrets
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
    let outcome = run(&ETCD_MEMBER, &bad, Run::Real);
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

    let left = run_ok(&ETCD_MEMBER, &args(2));
    assert_eq!(left["method"], json!("leave"), "{left}");
    assert_eq!(
        sim.cluster().last_deadline(leave),
        Some(Duration::from_secs(600))
    );
    let mut longer = args(1);
    longer["timeout"] = json!(517);
    let left = run_ok(&ETCD_MEMBER, &longer);
    assert_eq!(left["method"], json!("leave"), "{left}");
    assert_eq!(
        sim.cluster().last_deadline(leave),
        Some(Duration::from_secs(517))
    );
}
