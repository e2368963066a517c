//! The modules that take a node down (talos_shutdown, talos_reset, talos_reboot) against what
//! Talos does while it goes: reached through an endpoint, a drain that fails, a reset that Talos
//! aborts, a static address that a reset to maintenance mode loses, a reboot with a drain.

mod common;

use std::time::{Duration, Instant};

use common::{Sim, run, run_ok};
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const CONFIG: &Module = named("talos_config");
const APPLY: &Module = named("talos_apply");
const BOOTSTRAP: &Module = named("talos_bootstrap");
const HEALTH: &Module = named("talos_health");
const REBOOT: &Module = named("talos_reboot");
const RESET: &Module = named("talos_reset");
const SHUTDOWN: &Module = named("talos_shutdown");

/// The cluster's bundle and every node configured from it, with `patches` on node `patched`.
fn configured(sim: &Sim, patched: Option<(usize, Value)>) -> String {
    let secrets = sim.path("secrets.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "power"}),
    );
    for index in 0..sim.cluster().nodes().len() {
        let role = sim.cluster().nodes()[index].role.clone();
        let mut args = json!({
            "node": sim.node(index), "secrets_file": secrets,
            "render": {
                "machine_type": role, "cluster_name": "power",
                "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
                "install_disk": "/dev/vda", "kubernetes_version": "1.36.2",
            },
        });
        if let Some((i, patches)) = &patched
            && *i == index
        {
            args["render"]["patches"] = patches.clone();
        }
        run_ok(APPLY, &args);
    }
    secrets
}

/// Every node configured, etcd bootstrapped, the cluster healthy and every Node registered.
fn bootstrapped(sim: &Sim) -> String {
    let secrets = configured(sim, None);
    run_ok(
        BOOTSTRAP,
        &json!({"node": sim.node(0), "secrets_file": secrets}),
    );
    let (cps, workers): (Vec<_>, Vec<_>) = sim
        .cluster()
        .nodes()
        .into_iter()
        .partition(|n| n.role == "controlplane");
    let addresses = |nodes: Vec<ferro_talos_sim::NodeInfo>| -> Vec<String> {
        nodes.iter().map(|n| n.address.to_string()).collect()
    };
    run_ok(
        HEALTH,
        &json!({
            "node": sim.node(0), "secrets_file": secrets, "timeout": 60,
            "control_plane_nodes": addresses(cps), "worker_nodes": addresses(workers),
        }),
    );
    secrets
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A controller that reaches only the endpoint (the worker is firewalled from it, as nodes on a
/// private network are) learns nothing from probing the worker directly: the module asks through
/// the endpoint, as every other call of the task goes, and says the node is down only once the
/// endpoint's apid no longer reaches it (`internal/app/apid/pkg/backend/apid.go`,
/// `internal/app/apid/pkg/director/director.go` @ v1.14.1: a routed call to a node that is gone
/// fails with the endpoint's dial error). Here the node also takes its time: with etcd down
/// the Kubernetes API does not work, so Talos's drain waits for a cordon that never comes and
/// fails, which fails the shutdown sequence (`Shutdown` in `v1alpha1_sequencer.go` @ v1.14.1);
/// machined powers the node off all the same (`internal/app/machined/main.go`), and the module
/// says what Talos reported instead of calling it a clean shutdown.
#[test]
fn talos_shutdown_through_an_endpoint_waits_until_the_node_is_down_and_says_its_drain_failed() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    sim.cluster()
        .update_faults(1, |f| f.firewalled = true)
        .expect("the fault is set");
    sim.cluster()
        .update_faults(0, |f| f.etcd_down = true)
        .expect("the fault is set");
    let args = json!({
        "node": sim.node(1), "endpoint": sim.node(0), "secrets_file": secrets, "timeout": 30,
    });
    let result = run_ok(SHUTDOWN, &args);
    assert_eq!(result["changed"], json!(true), "{result}");
    assert!(
        !sim.cluster().nodes()[1].up,
        "the module said the node was down while it still ran: {result}"
    );
    let warnings = result["warnings"].to_string();
    assert!(
        warnings.contains("drain phase")
            && warnings.contains("sequence failed: error running phase 2 in shutdown sequence")
            && warnings.contains("powers the machine off all the same"),
        "{result}"
    );
    let msg = result["msg"].as_str().unwrap_or_default();
    assert!(msg.contains("not cleanly"), "{msg}");
    assert!(!msg.contains("PodDisruptionBudget"), "{msg}");
    // Asked again, the endpoint says the node does not answer: nothing is sent.
    let again = run(SHUTDOWN, &args, common::Run::Real);
    assert!(!again.failed(), "{}", again.json);
    assert_eq!(again.json["answered"], json!(false), "{}", again.json);
}

/// A graceful reset that etcd stops: the node's own etcd member does not answer (`etcd_down`), so
/// its leave fails, which fails upstream's Reset sequence in its `leave` phase, after `drain` and
/// `cleanup` (pods removed, kubelet stopped) and before any wipe (`Reset` in
/// `v1alpha1_sequencer.go` @ v1.13.9 and v1.14.1); machined reboots the node after the fatal
/// error (`internal/app/machined/main.go`). The module says so at once instead of waiting out its
/// timeout for a maintenance mode that never comes.
#[test]
fn talos_reset_reports_a_reset_that_talos_aborted_at_its_leave_phase() {
    let sim = Sim::start(3, 0);
    let secrets = bootstrapped(&sim);
    sim.cluster()
        .update_faults(2, |f| f.etcd_down = true)
        .expect("the fault is set");
    let boot_before = sim.cluster().nodes()[2].boot_id.clone();
    let args = json!({
        "node": sim.node(2), "secrets_file": secrets, "confirm": "reset", "timeout": 20,
    });
    let started = Instant::now();
    let outcome = run(RESET, &args, common::Run::Real);
    assert!(outcome.failed(), "{}", outcome.json);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "waited out the timeout"
    );
    assert_eq!(outcome.json["changed"], json!(true), "{}", outcome.json);
    assert_eq!(
        outcome.json["sequence_error"]["phase"],
        json!("leave"),
        "{}",
        outcome.json
    );
    let msg = outcome.msg().unwrap_or_default();
    assert!(
        msg.contains("Talos stopped the reset")
            && msg.contains("failed to leave cluster")
            && msg.contains("nothing was wiped")
            && msg.contains("stopped its kubelet")
            && msg.contains("reboots the node"),
        "{msg}"
    );
    // Nothing was wiped: the node comes back with its config, on a new boot.
    wait_for(
        "the node back with its config",
        Duration::from_secs(20),
        || {
            let n = &sim.cluster().nodes()[2];
            n.up && n.listening && !n.maintenance && n.boot_id != boot_before
        },
    );
}

/// A worker whose config sets its address statically: a reset to maintenance mode wipes the
/// config, and a node without one runs DHCP on every link
/// (`internal/app/machined/pkg/controllers/network/operator_config.go` @ v1.14.1), so it comes
/// back on another address. The module warns before it resets, names the old address and where
/// to find the new one, and does not wait at the old address for the node to return.
#[test]
fn talos_reset_of_a_statically_addressed_node_says_it_returns_on_dhcp() {
    let sim = Sim::start(1, 1);
    let old = sim.node(1);
    let patch = json!([{"machine": {"network": {"interfaces": [
        {"interface": "eth0", "addresses": [format!("{old}/24")]},
    ]}}}]);
    let secrets = configured(&sim, Some((1, patch)));
    let args = json!({
        "node": old, "secrets_file": secrets, "confirm": "reset", "timeout": 20,
        "graceful": false,
    });
    let check = run(RESET, &args, common::Run::Check);
    assert!(!check.failed(), "{}", check.json);
    assert_eq!(
        check.json["static_address"],
        json!({"address": old, "source": "machine.network.interfaces[eth0].addresses"}),
        "{}",
        check.json
    );
    let started = Instant::now();
    let result = run_ok(RESET, &args);
    assert!(started.elapsed() < Duration::from_secs(15), "{result}");
    let warnings = result["warnings"].to_string();
    assert!(
        warnings.contains(&old) && warnings.contains("DHCP") && warnings.contains("console"),
        "{result}"
    );
    assert!(
        result["state"]
            .as_str()
            .unwrap_or_default()
            .contains("on DHCP"),
        "{result}"
    );
    wait_for(
        "the node in maintenance mode",
        Duration::from_secs(10),
        || {
            let n = &sim.cluster().nodes()[1];
            n.maintenance && n.listening
        },
    );
    assert_ne!(sim.node(1), old, "the node kept its static address");
}

/// What the API server saw of Node `name`, in order: cordons, evictions, reboots.
fn kube_log(sim: &Sim, name: &str) -> Vec<(String, String)> {
    sim.cluster().kube_snapshot()["log"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["node"] == name)
        .map(|e| {
            (
                e["action"].as_str().unwrap_or_default().to_string(),
                e["pod"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `talosctl reboot --drain` (`cmd/talosctl/cmd/talos/reboot.go` @ v1.14.1, also in v1.13.9):
/// cordon and evict the node's pods first (`drainNodes`, `--drain-timeout` 5 minutes), reboot and
/// wait (`--drain` forces `--wait`), then wait for the Node to be Ready and uncordon it
/// (`uncordonNodes`). The module does the same with talos_upgrade's drain; check mode names the
/// pods it would evict and touches nothing.
#[test]
fn talos_reboot_with_drain_cordons_evicts_reboots_and_uncordons() {
    let sim = Sim::start(1, 2);
    let secrets = bootstrapped(&sim);
    sim.cluster()
        .add_workload("default", "web", 2, Some(1))
        .expect("the workload is added");
    let name = sim.cluster().nodes()[1].hostname.to_lowercase();
    let web_here = || -> Vec<String> {
        sim.cluster().kube_snapshot()["pods"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|p| {
                p["spec"]["nodeName"] == name.as_str()
                    && p["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("web-"))
            })
            .map(|p| format!("default/{}", p["metadata"]["name"].as_str().unwrap_or("")))
            .collect()
    };
    wait_for("a web pod on the worker", Duration::from_secs(10), || {
        !web_here().is_empty()
    });
    let on_worker = web_here();
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "timeout": 60, "drain": true,
    });
    let before = sim.world();
    let check = run(REBOOT, &args, common::Run::Check);
    assert!(!check.failed(), "{}", check.json);
    assert_eq!(sim.world(), before, "check mode changed something");
    let evict: Vec<&str> = check.json["drain"]["evict"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["pod"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        on_worker.iter().all(|p| evict.contains(&p.as_str())),
        "{on_worker:?} not all in {}",
        check.json
    );
    let msg = check.json["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("would drain Node") && msg.contains("reboot"),
        "{msg}"
    );
    assert!(
        kube_log(&sim, &name).is_empty(),
        "{:?}",
        kube_log(&sim, &name)
    );

    let boot_before = sim.cluster().nodes()[1].boot_id.clone();
    let result = run_ok(REBOOT, &args);
    assert_ne!(sim.cluster().nodes()[1].boot_id, boot_before, "{result}");
    assert_eq!(result["drain"]["uncordoned"], json!(true), "{result}");
    let log = kube_log(&sim, &name);
    let actions: Vec<&str> = log.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(actions.first(), Some(&"cordon"), "{actions:?}");
    assert_eq!(actions.last(), Some(&"uncordon"), "{actions:?}");
    let down = actions
        .iter()
        .position(|a| *a == "node_down")
        .expect("a reboot");
    let evicted: Vec<&str> = log
        .iter()
        .take(down)
        .filter(|(a, _)| a == "evict")
        .map(|(_, p)| p.as_str())
        .collect();
    assert!(
        on_worker.iter().all(|p| evicted.contains(&p.as_str())),
        "{on_worker:?} not evicted before the reboot: {actions:?}"
    );

    // Without wait there is no uncordon: refused, as talosctl forces --wait.
    let mut no_wait = args.clone();
    no_wait["wait"] = json!(false);
    let refused = run(REBOOT, &no_wait, common::Run::Check);
    assert!(refused.failed(), "{}", refused.json);
    let msg = refused.msg().unwrap_or_default();
    assert!(msg.contains("drain") && msg.contains("wait"), "{msg}");
}
