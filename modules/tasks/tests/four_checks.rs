//! Every module through the four runs a careful user makes (`--check --diff`, real, real again,
//! `--check`), in this process against an in-process simulated cluster: see `common/mod.rs`.
//! The ansible-playbook tests (tests/integration) prove the same end to end through Ansible; these
//! prove each module's own contract in seconds, and name the module whose check mode or
//! idempotence broke.

mod common;

use common::{Kind, Sim, assert_no_secret, four_checks, run_ok};
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const CONFIG: &Module = named("talos_config");
const APPLY: &Module = named("talos_apply");
const BOOTSTRAP: &Module = named("talos_bootstrap");
const HEALTH: &Module = named("talos_health");
const INFO: &Module = named("talos_info");
const KUBECONFIG: &Module = named("talos_kubeconfig");
const ETCD_SNAPSHOT: &Module = named("talos_etcd_snapshot");
const UPGRADE: &Module = named("talos_upgrade");
const KUBERNETES_UPGRADE: &Module = named("talos_kubernetes_upgrade");
const RESET: &Module = named("talos_reset");

const REBOOT: &Module = named("talos_reboot");
const SHUTDOWN: &Module = named("talos_shutdown");
const SUPPORT_BUNDLE: &Module = named("talos_support_bundle");
const LOGS: &Module = named("talos_logs");
const ETCD_RECOVER: &Module = named("talos_etcd_recover");
const RESOURCE_INFO: &Module = named("talos_resource_info");
const ETCD_MEMBER: &Module = named("talos_etcd_member");

/// The Kubernetes release the nodes are configured with, and the patch release after it.
const KUBERNETES_BEFORE: &str = "1.36.2";
const KUBERNETES_AFTER: &str = "1.36.3";

/// The cluster's bundle, made by talos_config as a user's first task makes it.
fn bundle(sim: &Sim) -> String {
    let secrets = sim.path("secrets.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "four"}),
    );
    secrets
}

/// talos_apply's `render` options for node `index`: its role from the simulator's layout.
fn render(sim: &Sim, index: usize) -> Value {
    let role = sim.cluster().nodes()[index].role.clone();
    json!({
        "machine_type": role,
        "cluster_name": "four",
        "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
        "install_disk": "/dev/vda",
        "kubernetes_version": KUBERNETES_BEFORE,
    })
}

fn apply_args(sim: &Sim, secrets: &str, index: usize) -> Value {
    json!({"node": sim.node(index), "secrets_file": secrets, "render": render(sim, index)})
}

/// Every node configured, etcd bootstrapped on the first control plane, and the cluster healthy
/// (its Kubernetes API up), as the cluster role leaves it.
fn bootstrapped(sim: &Sim) -> String {
    let secrets = bundle(sim);
    let nodes = sim.cluster().nodes();
    for index in 0..nodes.len() {
        run_ok(APPLY, &apply_args(sim, &secrets, index));
    }
    run_ok(
        BOOTSTRAP,
        &json!({"node": sim.node(0), "secrets_file": secrets}),
    );
    run_ok(HEALTH, &health_args(sim, &secrets));
    secrets
}

fn health_args(sim: &Sim, secrets: &str) -> Value {
    let (control_planes, workers): (Vec<_>, Vec<_>) = sim
        .cluster()
        .nodes()
        .into_iter()
        .partition(|n| n.role == "controlplane");
    let addresses = |nodes: Vec<ferro_talos_sim::NodeInfo>| -> Vec<String> {
        nodes.iter().map(|n| n.address.to_string()).collect()
    };
    json!({
        "node": sim.node(0), "secrets_file": secrets, "timeout": 60,
        "control_plane_nodes": addresses(control_planes), "worker_nodes": addresses(workers),
    })
}

#[test]
fn talos_config_writes_the_bundle_and_the_config_once() {
    let sim = Sim::start(1, 0);
    let secrets = sim.path("secrets.yaml");
    let args = json!({
        "secrets_file": secrets,
        "generate_secrets": true,
        "machine_type": "controlplane",
        "cluster_name": "four",
        "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
        "dest": sim.path("controlplane.yaml"),
    });
    let runs = four_checks(&sim, CONFIG, &args, Kind::Converges);
    for name in ["secrets.yaml", "controlplane.yaml"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(sim.path(name))
                .expect("written")
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{name} holds secrets");
    }
    assert_eq!(runs.real["config_sha256"], runs.again["config_sha256"]);
    assert_no_secret(&secrets, &[&runs.real, &runs.again, &runs.check_after]);
}

/// An install image that upstream never published (the stock installer at ghcr.io for 1.14: the
/// v1.14.0 release notes, "Default Installer Image") fails before anything is written, naming the
/// Image Factory installer of that release; a node booted from media would retry its pull forever.
#[test]
fn talos_config_refuses_an_installer_that_is_not_published() {
    let dir = tempfile::tempdir().expect("a directory");
    for talos_version in ["v1.14", "v1.13"] {
        let args = json!({
            "secrets_file": dir.path().join("secrets.yaml"),
            "generate_secrets": true,
            "machine_type": "worker",
            "cluster_name": "four",
            "cluster_endpoint": "https://10.0.0.10:6443",
            "talos_version": talos_version,
            "install_image": "ghcr.io/siderolabs/installer:v1.14.1",
            "dest": dir.path().join("worker.yaml"),
        });
        for how in [common::Run::Check, common::Run::Real] {
            let outcome = common::run(CONFIG, &args, how);
            let msg = outcome.msg().unwrap_or_default().to_string();
            assert!(outcome.failed(), "{}", outcome.json);
            assert!(msg.starts_with("install_image: "), "{msg}");
            assert!(
                msg.contains(
                    "factory.talos.dev/metal-installer/\
                     376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1"
                ),
                "{msg}"
            );
            assert!(!dir.path().join("worker.yaml").exists());
        }
    }
}

#[test]
fn talos_apply_configures_a_node_in_maintenance_once() {
    let sim = Sim::start(1, 0);
    let secrets = bundle(&sim);
    let args = apply_args(&sim, &secrets, 0);
    let runs = four_checks(&sim, APPLY, &args, Kind::Converges);
    assert_eq!(runs.check["maintenance"], json!(true), "{}", runs.check);
    assert!(
        !sim.cluster().nodes()[0].maintenance,
        "the node runs its config"
    );
    assert_no_secret(
        sim.path("secrets.yaml").as_path(),
        &[&runs.check, &runs.real, &runs.again, &runs.check_after],
    );
}

#[test]
fn talos_apply_of_a_changed_config_applies_only_the_change() {
    let sim = Sim::start(1, 0);
    let secrets = bundle(&sim);
    run_ok(APPLY, &apply_args(&sim, &secrets, 0));
    let mut args = apply_args(&sim, &secrets, 0);
    args["render"]["patches"] = json!([{"machine": {"nodeLabels": {"rack": "r2"}}}]);
    let runs = four_checks(&sim, APPLY, &args, Kind::Converges);
    let paths = runs.check["changed_paths"].to_string();
    assert!(paths.contains("machine.nodeLabels.rack"), "{}", runs.check);
}

#[test]
fn talos_bootstrap_bootstraps_etcd_once() {
    let sim = Sim::start(1, 0);
    let secrets = bundle(&sim);
    run_ok(APPLY, &apply_args(&sim, &secrets, 0));
    let args = json!({"node": sim.node(0), "secrets_file": secrets});
    four_checks(&sim, BOOTSTRAP, &args, Kind::Converges);
    assert!(sim.cluster().nodes()[0].etcd_member);
}

/// Before bootstrap a control plane stays BOOTING (its boot waits for etcd: `StartAllServices` in
/// `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go`, etcd's
/// `buildInitialCluster` in `internal/app/machined/pkg/system/services/etcd.go` @ v1.14.1) and
/// its EtcdMemberList blocks until the caller's deadline (`NewClient` in
/// `internal/pkg/etcd/etcd.go`). The first apply of each control plane ends at BOOTING, as
/// upstream's bootstrapper accepts it (`pkg/cluster/bootstrap.go`), and talos_bootstrap tells
/// "not bootstrapped" from the etcd services' own state in seconds, not a deadline per node.
#[test]
fn the_first_bootstrap_waits_for_nothing_that_comes_only_after_it() {
    let sim = Sim::start(3, 0);
    let secrets = bundle(&sim);
    for index in 0..3 {
        let mut args = apply_args(&sim, &secrets, index);
        args["timeout"] = json!(60);
        let started = std::time::Instant::now();
        let applied = run_ok(APPLY, &args);
        assert_eq!(applied["waiting_for_etcd"], json!(true), "{applied}");
        let msg = applied["msg"].as_str().unwrap_or_default();
        assert!(msg.contains("its boot waits for etcd"), "{msg}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
    assert!(
        sim.cluster().nodes().iter().all(|n| n.stage == "booting"),
        "{:?}",
        sim.cluster().nodes()
    );
    let control_planes: Vec<String> = (0..3).map(|i| sim.node(i)).collect();
    let args = json!({"node": sim.node(0), "secrets_file": secrets,
                      "control_plane_nodes": control_planes});
    let started = std::time::Instant::now();
    let check = common::run(BOOTSTRAP, &args, common::Run::Check);
    let took = started.elapsed();
    assert!(!check.failed(), "{}", check.json);
    assert_eq!(check.json["changed"], json!(true), "{}", check.json);
    let msg = check.json["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("would bootstrap etcd") && msg.contains("etcd service Preparing"),
        "{msg}"
    );
    assert!(
        took < std::time::Duration::from_secs(10),
        "it asked for {took:?}"
    );
    run_ok(BOOTSTRAP, &args);
    // The bootstrap ends the first control plane's boot; the others join and end theirs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !sim.cluster().nodes().iter().all(|n| n.stage == "running") {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            sim.cluster().nodes()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn talos_health_and_talos_info_only_read() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    four_checks(&sim, HEALTH, &health_args(&sim, &secrets), Kind::Reads);
    let info = json!({"nodes": [sim.node(0), sim.node(1)], "secrets_file": secrets});
    let runs = four_checks(&sim, INFO, &info, Kind::Reads);
    // Check mode reads the same facts as a real run.
    assert_eq!(runs.check["nodes"], runs.real["nodes"]);
}

#[test]
fn talos_kubeconfig_writes_the_kubeconfig_once() {
    let sim = Sim::start(1, 0);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(0), "secrets_file": secrets, "dest": sim.path("kubeconfig"),
    });
    let runs = four_checks(&sim, KUBECONFIG, &args, Kind::Converges);
    assert_no_secret(
        sim.path("secrets.yaml").as_path(),
        &[&runs.check, &runs.real, &runs.again, &runs.check_after],
    );
}

#[test]
fn talos_etcd_snapshot_saves_a_new_snapshot_each_real_run() {
    let sim = Sim::start(1, 0);
    let secrets = bootstrapped(&sim);
    let dest = sim.path("etcd.snapshot");
    let args = json!({"node": sim.node(0), "secrets_file": secrets, "dest": dest});
    let runs = four_checks(&sim, ETCD_SNAPSHOT, &args, Kind::MakesNew);
    assert!(std::fs::metadata(&dest).expect("saved").len() > 0);
    assert!(runs.real["sha256"].is_string(), "{}", runs.real);
}

#[test]
fn talos_upgrade_upgrades_a_worker_once() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "talos_version": "v1.13.9",
        "timeout": 120, "drain_timeout": 60,
    });
    four_checks(&sim, UPGRADE, &args, Kind::Converges);
    assert_eq!(sim.cluster().nodes()[1].version, "v1.13.9");
    assert_eq!(
        sim.cluster().nodes()[0].version,
        "v1.13.6",
        "only the named node upgrades"
    );
}

/// Talos 1.14 is not published at `ghcr.io/siderolabs/installer` (commit cf6065238, first in
/// v1.14.0-alpha.1; the v1.14.0 release notes, "Default Installer Image"); talosctl upgrade 1.14
/// defaults to the Image Factory's installer of the empty schematic (`cmd/talosctl/cmd/talos/
/// upgrade.go` init, `pkg/images/images.go` InstallerImageRepository @ v1.14.1). talos-sim's
/// registry has no 1.14 image at the old path, so a default that pointed there fails the pull.
#[test]
fn talos_upgrade_to_1_14_installs_the_image_factory_installer() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "talos_version": "v1.14.1",
        "timeout": 120, "drain_timeout": 60,
    });
    let runs = four_checks(&sim, UPGRADE, &args, Kind::Converges);
    let factory = "factory.talos.dev/metal-installer/\
        376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1";
    assert_eq!(runs.check["target_image"], json!(factory), "{}", runs.check);
    assert_eq!(runs.real["target_image"], json!(factory), "{}", runs.real);
    assert_eq!(sim.cluster().nodes()[1].version, "v1.14.1");
}

/// The stock installer named for a release after ghcr.io stopped carrying it is refused before any
/// node is asked, with the Image Factory's reference of the same release to write instead.
#[test]
fn talos_upgrade_refuses_the_unpublished_ghcr_installer() {
    let node = "127.0.0.1:1";
    let factory = "factory.talos.dev/metal-installer/\
        376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1";
    for (args, option) in [
        (
            json!({"node": node, "image": "ghcr.io/siderolabs/installer:v1.14.1"}),
            "image",
        ),
        (
            json!({"node": node, "talos_version": "1.14.1",
                   "installer_repository": "ghcr.io/siderolabs/installer"}),
            "installer_repository",
        ),
    ] {
        for how in [common::Run::Check, common::Run::Real] {
            let outcome = common::run(UPGRADE, &args, how);
            let msg = outcome.msg().unwrap_or_default().to_string();
            assert!(outcome.failed(), "{}", outcome.json);
            assert!(msg.starts_with(&format!("{option}: ")), "{msg}");
            for word in ["not published", factory] {
                assert!(msg.contains(word), "{word:?} missing from {msg:?}");
            }
        }
    }
}

/// A legacy upgrade whose own drain fails stops nothing: the sequence's first phase is `drain`
/// (`Upgrade` in `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go` @ v1.13.9),
/// and `CordonAndDrainNode` (`v1alpha1_sequencer_tasks.go`) fails when the Node is not cordoned
/// within a minute, here because no API server answers the worker. The pods and services stop
/// only in the later `cleanup` and `stopServices` phases, so the module must not say the node
/// runs with etcd and the kubelet stopped.
#[test]
fn talos_upgrade_says_what_a_legacy_upgrade_that_failed_at_its_drain_had_done() {
    use common::{Run, run};
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let cluster = sim.cluster();
    cluster.set_talos_drain(ferro_talos_sim::DrainTimes {
        cordon: std::time::Duration::from_millis(500),
        ..ferro_talos_sim::DrainTimes::UPSTREAM
    });
    cluster.set_version(1, "v1.12.4").unwrap();
    // The only control plane goes away: the worker's Talos reaches no API server.
    cluster.update_faults(0, |f| f.never_return = true).unwrap();
    sim.within(|c| c.reboot(0)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cluster.nodes()[0].up {
        assert!(
            std::time::Instant::now() < deadline,
            "the control plane stays up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "talos_version": "v1.13.6",
        "drain": false, "timeout": 60,
    });
    let outcome = run(UPGRADE, &args, Run::Real);
    assert!(outcome.failed(), "{}", outcome.json);
    let msg = outcome.json["msg"].as_str().unwrap();
    assert!(
        msg.contains("in its drain phase, before Talos had stopped anything")
            && msg.contains("context deadline exceeded")
            && msg.contains("still runs v1.12.4 with its pods, etcd and the kubelet")
            && msg.contains("keeps its Node cordoned until it reboots"),
        "{msg}"
    );
    assert!(!msg.contains("stopped: reboot it"), "{msg}");
    assert_eq!(cluster.nodes()[1].version, "v1.12.4");
}

#[test]
fn talos_kubernetes_upgrade_upgrades_the_cluster_once() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(0), "secrets_file": secrets, "kubernetes_version": KUBERNETES_AFTER,
        "control_plane_nodes": [sim.node(0)], "worker_nodes": [sim.node(1)],
        "timeout": 120, "manifests_timeout": 60,
    });
    four_checks(&sim, KUBERNETES_UPGRADE, &args, Kind::Converges);
}

#[test]
fn talos_reset_returns_a_worker_to_maintenance_once() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "confirm": "reset", "timeout": 60,
    });
    four_checks(&sim, RESET, &args, Kind::Converges);
    assert!(sim.cluster().nodes()[1].maintenance);
}

/// Options that cannot go together fail before any node is asked, naming both options and what
/// to write instead, in one readable sentence.
#[test]
fn talos_upgrade_refuses_wait_false_with_a_drain_or_a_kubernetes_version() {
    let node = "127.0.0.1:1";
    for (args, words) in [
        (
            json!({"node": node, "talos_version": "v1.13.9", "wait": false}),
            ["wait=false", "drain=true", "drain: false"],
        ),
        (
            json!({"node": node, "talos_version": "v1.13.9", "wait": false, "drain": false,
                   "kubernetes_version": KUBERNETES_AFTER}),
            ["wait=false", "kubernetes_version", "two tasks"],
        ),
    ] {
        for how in [common::Run::Check, common::Run::Real] {
            let outcome = common::run(UPGRADE, &args, how);
            let msg = outcome.msg().unwrap_or_default().to_string();
            assert!(outcome.failed(), "{}", outcome.json);
            for word in words {
                assert!(msg.contains(word), "{word:?} missing from {msg:?}");
            }
            assert!(!msg.contains("  "), "a run of spaces in {msg:?}");
        }
    }
}

#[test]
fn talos_reboot_boots_the_node_anew_each_real_run() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({"node": sim.node(1), "secrets_file": secrets, "timeout": 60});
    let runs = four_checks(&sim, REBOOT, &args, Kind::MakesNew);
    assert_ne!(
        runs.real["boot_id"], runs.real["boot_id_before"],
        "{}",
        runs.real
    );
    assert_eq!(runs.again["boot_id_before"], runs.real["boot_id"]);
    assert_eq!(
        sim.cluster().nodes()[1].boot_id,
        runs.again["boot_id"].as_str().unwrap_or_default()
    );
}

#[test]
fn talos_shutdown_powers_a_worker_off_once() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "timeout": 60, "connect_timeout": 2,
    });
    let runs = four_checks(&sim, SHUTDOWN, &args, Kind::Converges);
    assert_eq!(runs.real["answered"], json!(true));
    assert_eq!(runs.again["answered"], json!(false), "{}", runs.again);
    assert!(
        runs.again["warnings"]
            .to_string()
            .contains("nothing was sent"),
        "{}",
        runs.again
    );
    assert!(!sim.cluster().nodes()[1].up);
}

#[test]
fn talos_etcd_member_lets_a_healthy_member_leave_once() {
    let sim = Sim::start(3, 0);
    let secrets = bootstrapped(&sim);
    let args = json!({"node": sim.node(0), "secrets_file": secrets, "member": sim.node(2)});
    let runs = four_checks(&sim, ETCD_MEMBER, &args, Kind::Converges);
    assert_eq!(runs.check["method"], json!("leave"), "{}", runs.check);
    assert_eq!(runs.real["members"].as_array().map(Vec::len), Some(2));
    let nodes = sim.cluster().nodes();
    assert!(nodes[0].etcd_member && nodes[1].etcd_member && !nodes[2].etcd_member);
}

/// With one member down, the live ones stay (either going would leave one healthy member of
/// two) and the dead one is removed by id, in check mode as for real.
#[test]
fn talos_etcd_member_removes_a_dead_member_and_keeps_the_quorum() {
    let sim = Sim::start(3, 0);
    let secrets = bootstrapped(&sim);
    sim.cluster()
        .update_faults(2, |f| f.etcd_down = true)
        .expect("the fault is set");
    let live = json!({"node": sim.node(0), "secrets_file": secrets, "member": sim.node(1)});
    for how in [common::Run::Check, common::Run::Real] {
        let before = sim.world();
        let outcome = common::run(ETCD_MEMBER, &live, how);
        let msg = outcome.msg().unwrap_or_default().to_string();
        assert!(outcome.failed(), "{}", outcome.json);
        assert!(
            msg.contains("not removing etcd member")
                && msg.contains("keep 1 healthy member(s) of 2")
                && msg.contains("nothing was changed"),
            "{msg}"
        );
        assert_eq!(sim.world(), before, "a refused removal changed something");
    }
    let dead = json!({"node": sim.node(0), "secrets_file": secrets, "member": sim.node(2)});
    let runs = four_checks(&sim, ETCD_MEMBER, &dead, Kind::Converges);
    assert_eq!(runs.real["method"], json!("remove_by_id"), "{}", runs.real);
    assert!(!sim.cluster().nodes()[2].etcd_member);
}

/// Scaling down by one control plane: a graceful reset leaves etcd, and the Node is deleted once
/// the machine is back in maintenance mode, so Talos's health check of the nodes that stay passes
/// (it matches Nodes and nodes both ways: `pkg/cluster/check/kubernetes.go` @ v1.13.9).
#[test]
fn talos_reset_takes_a_control_plane_out_of_etcd_and_kubernetes_once() {
    let sim = Sim::start(3, 1);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(2), "secrets_file": secrets, "confirm": "reset", "timeout": 60,
        "delete_kubernetes_node": true,
    });
    let runs = four_checks(&sim, RESET, &args, Kind::Converges);
    assert_eq!(
        runs.check["kubernetes_node"]["existed"],
        json!(true),
        "{}",
        runs.check
    );
    assert_eq!(
        runs.real["kubernetes_node"]["deleted"],
        json!(true),
        "{}",
        runs.real
    );
    let nodes = sim.cluster().nodes();
    assert!(nodes[2].maintenance && !nodes[2].etcd_member);
    assert!(nodes[0].etcd_member && nodes[1].etcd_member);
    let mut health = health_args(&sim, &secrets);
    health["control_plane_nodes"] = json!([sim.node(0), sim.node(1)]);
    run_ok(HEALTH, &health);
}

/// etcd's only member cannot leave it, and Talos aborts a graceful reset whose leave fails: the
/// module says so before anything is sent, in check mode too.
#[test]
fn talos_reset_refuses_a_graceful_reset_of_etcds_last_member() {
    let sim = Sim::start(1, 0);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(0), "secrets_file": secrets, "confirm": "reset", "timeout": 60,
    });
    for how in [common::Run::Check, common::Run::Real] {
        let before = sim.world();
        let outcome = common::run(RESET, &args, how);
        let msg = outcome.msg().unwrap_or_default().to_string();
        assert!(outcome.failed(), "{}", outcome.json);
        assert!(
            msg.contains("etcd's only member") && msg.contains("graceful: false"),
            "{msg}"
        );
        assert_eq!(sim.world(), before, "a refused reset changed something");
    }
    let mut forced = args.clone();
    forced["graceful"] = json!(false);
    run_ok(RESET, &forced);
    assert!(sim.cluster().nodes()[0].maintenance);
}

/// The disks an install disk is chosen from, read from a node in maintenance mode (reader role,
/// no credentials) and from a configured one; the volumes follow what the node has; secrets are
/// refused.
#[test]
fn talos_resource_info_reads_disks_and_volumes_and_refuses_secrets() {
    let sim = Sim::start(1, 1);
    let disks = json!({"node": sim.node(1), "type": "Disks.block.talos.dev"});
    let runs = four_checks(&sim, RESOURCE_INFO, &disks, Kind::Reads);
    let found = runs.real["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let paths: Vec<&str> = found
        .iter()
        .filter_map(|r| r["spec"]["dev_path"].as_str())
        .collect();
    assert_eq!(paths, ["/dev/sda", "/dev/sdb"], "{}", runs.real);
    assert_eq!(found[1]["spec"]["pretty_size"], json!("107 GB"));

    let secrets = bootstrapped(&sim);
    let volumes = json!({
        "node": sim.node(1), "secrets_file": secrets, "type": "VolumeStatuses.block.talos.dev",
    });
    let runs = four_checks(&sim, RESOURCE_INFO, &volumes, Kind::Reads);
    let ids: Vec<&str> = runs.real["resources"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["EPHEMERAL", "META", "STATE"], "{}", runs.real);
    let one = json!({
        "node": sim.node(1), "secrets_file": secrets, "type": "VolumeStatuses.block.talos.dev",
        "id": "STATE",
    });
    let state = run_ok(RESOURCE_INFO, &one);
    assert_eq!(
        state["resources"][0]["spec"]["filesystem"],
        json!("xfs"),
        "{state}"
    );
    let missing = run_ok(
        RESOURCE_INFO,
        &json!({
            "node": sim.node(1), "secrets_file": secrets, "type": "VolumeStatuses.block.talos.dev",
            "id": "NOPE",
        }),
    );
    assert_eq!(missing["resources"], json!([]));

    for (namespace, kind) in [
        ("config", "MachineConfigs.config.talos.dev"),
        ("secrets", "OSRootSecrets.secrets.talos.dev"),
    ] {
        let outcome = common::run(
            RESOURCE_INFO,
            &json!({"node": sim.node(0), "secrets_file": secrets, "namespace": namespace, "type": kind}),
            common::Run::Real,
        );
        assert!(outcome.failed(), "{}", outcome.json);
        assert!(
            outcome.msg().unwrap_or_default().contains("secrets"),
            "{}",
            outcome.json
        );
    }
}

/// Disaster recovery as the upstream docs have it: a snapshot, every control plane's EPHEMERAL
/// wiped without leaving etcd (`talos_reset` `wipe: ephemeral`), then one control plane
/// recovers from the snapshot and the others join. A damaged snapshot is refused first.
#[test]
fn talos_etcd_recover_brings_etcd_back_from_a_snapshot_once() {
    let sim = Sim::start(3, 0);
    let secrets = bootstrapped(&sim);
    let snapshot = sim.path("etcd.snapshot");
    run_ok(
        ETCD_SNAPSHOT,
        &json!({"node": sim.node(0), "secrets_file": secrets, "dest": snapshot}),
    );
    // The disaster: etcd is down on every control plane, so it has no quorum left.
    for index in 0..3 {
        sim.cluster()
            .update_faults(index, |f| f.etcd_down = true)
            .expect("the fault is set");
    }
    for index in 0..3 {
        run_ok(
            RESET,
            &json!({
                "node": sim.node(index), "secrets_file": secrets, "confirm": "reset",
                "wipe": "ephemeral", "graceful": false, "timeout": 60,
            }),
        );
    }
    for index in 0..3 {
        sim.cluster()
            .update_faults(index, |f| f.etcd_down = false)
            .expect("the fault is cleared");
    }
    assert!(
        sim.cluster()
            .nodes()
            .iter()
            .all(|n| !n.etcd_member && !n.maintenance)
    );

    let cps: Vec<String> = (0..3).map(|i| sim.node(i)).collect();
    let damaged = sim.path("damaged.snapshot");
    let mut bytes = std::fs::read(&snapshot).expect("the snapshot reads");
    bytes[9000] ^= 1;
    std::fs::write(&damaged, bytes).expect("written");
    let refused = json!({
        "node": sim.node(0), "secrets_file": secrets, "snapshot": damaged,
        "control_plane_nodes": cps, "timeout": 60,
    });
    for how in [common::Run::Check, common::Run::Real] {
        let before = sim.world();
        let outcome = common::run(ETCD_RECOVER, &refused, how);
        assert!(outcome.failed(), "{}", outcome.json);
        assert!(
            outcome
                .msg()
                .unwrap_or_default()
                .contains("does not match its SHA-256 checksum"),
            "{}",
            outcome.json
        );
        assert_eq!(sim.world(), before);
    }

    let args = json!({
        "node": sim.node(0), "secrets_file": secrets, "snapshot": snapshot,
        "control_plane_nodes": cps, "timeout": 60,
    });
    let runs = four_checks(&sim, ETCD_RECOVER, &args, Kind::Converges);
    assert_eq!(
        runs.real["integrity"],
        json!("checksum verified"),
        "{}",
        runs.real
    );
    assert!(sim.cluster().nodes().iter().all(|n| n.etcd_member));
    run_ok(HEALTH, &health_args(&sim, &secrets));
}

/// A service's log: what machined logged of it since the node booted, the last lines with
/// `tail_lines`, written to a file once (0600) with `dest`.
#[test]
fn talos_logs_reads_a_service_log_and_writes_it_once() {
    let sim = Sim::start(1, 0);
    let secrets = bootstrapped(&sim);
    let args = json!({"node": sim.node(0), "secrets_file": secrets, "service": "etcd"});
    let runs = four_checks(&sim, LOGS, &args, Kind::Reads);
    let lines = runs.real["lines"].to_string();
    assert!(
        lines.contains("[talos] service[etcd](Running)"),
        "{}",
        runs.real
    );
    let machined = run_ok(
        LOGS,
        &json!({"node": sim.node(0), "secrets_file": secrets, "service": "machined", "tail_lines": 2}),
    );
    assert_eq!(machined["line_count"], json!(2), "{machined}");

    let dest = sim.path("etcd.log");
    let to_file = json!({
        "node": sim.node(0), "secrets_file": secrets, "service": "etcd", "dest": dest,
    });
    four_checks(&sim, LOGS, &to_file, Kind::Converges);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&dest).expect("written").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

/// A support bundle of every node: versions, services, etcd members, resources and service logs
/// per node, 0600, a new one each real run, and no secret of the cluster's bundle anywhere in it.
#[test]
fn talos_support_bundle_collects_every_node_and_no_secret() {
    let sim = Sim::start(1, 1);
    let secrets = bootstrapped(&sim);
    let dest = sim.path("support.tar.gz");
    let args = json!({
        "nodes": [sim.node(0), sim.node(1)], "secrets_file": secrets, "dest": dest,
    });
    let runs = four_checks(&sim, SUPPORT_BUNDLE, &args, Kind::MakesNew);
    assert_eq!(runs.real["errors"], json!([]), "{}", runs.real);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&dest).expect("written").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&dest).expect("the bundle opens"),
    ));
    let mut names = Vec::new();
    let mut everything = String::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("an entry");
        names.push(entry.path().expect("a path").display().to_string());
        std::io::Read::read_to_string(&mut entry, &mut everything).expect("text");
    }
    for node in [sim.node(0), sim.node(1)] {
        for file in [
            "version.yaml",
            "services.txt",
            "disks.yaml",
            "logs/machined.log",
        ] {
            assert!(
                names.contains(&format!("{node}/{file}")),
                "{node}/{file} in {names:?}"
            );
        }
    }
    assert!(
        everything.contains("[talos] service[etcd](Running)"),
        "{everything}"
    );
    let secrets_path = sim.path("secrets.yaml");
    for secret in common::bundle_secrets(&secrets_path) {
        assert!(
            !everything.contains(&secret),
            "a secret of the bundle is in the support bundle"
        );
    }
}
