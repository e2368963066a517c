//! What a node's disks hold across the first apply, resets and Bootstrap, as Talos 1.13.9 does
//! it. Each test names the upstream source (tag v1.13.9 of siderolabs/talos) it encodes;
//! docs/talos-fidelity.md lists them.

mod common;

use std::time::Duration;

use common::*;
use ferro_talos_proto::machine::apply_configuration_request::Mode;
use ferro_talos_proto::machine::reset_request::WipeMode;
use ferro_talos_proto::machine::*;
use ferro_talos_sim::{Cluster, SimConfig};
use tonic::Code;

fn reset_req(labels: &[&str], mode: WipeMode, reboot: bool) -> ResetRequest {
    ResetRequest {
        graceful: false,
        reboot,
        system_partitions_to_wipe: labels
            .iter()
            .map(|l| ResetPartitionSpec {
                label: l.to_string(),
                wipe: true,
            })
            .collect(),
        user_disks_to_wipe: vec![],
        mode: mode as i32,
    }
}

/// Waits until `f` holds for node `i`'s status.
async fn wait_for(
    cluster: &Cluster,
    i: usize,
    what: &str,
    f: impl Fn(&ferro_talos_sim::NodeInfo) -> bool,
) {
    for _ in 0..400 {
        if f(&cluster.node(i).unwrap()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "node {i}: timed out waiting for {what}: {:?}",
        cluster.node(i).unwrap()
    );
}

/// Waits until node `i` runs its config: RUNNING, or BOOTING for a control plane whose boot
/// waits for etcd before bootstrap (boot_stage.rs).
async fn running(cluster: &Cluster, i: usize) {
    wait_for(cluster, i, "running its config", |n| {
        !n.maintenance && (n.stage == "running" || n.stage == "booting") && n.listening
    })
    .await;
}

/// `internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go` (ApplyConfiguration in
/// maintenance: NO_REBOOT, "Applied configuration without a reboot"), `pkg/controllers/config/
/// acquire.go` (maintenance ends once the config is complete) and `pkg/runtime/v1alpha1/
/// v1alpha1_sequencer.go` (Install only when not installed, then a reboot): a node booted from
/// installation media answers with mutual TLS while it installs, and only then reboots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_apply_from_media_answers_mtls_before_the_install_reboot() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    let boot_in_maintenance = cluster.node(0).unwrap().boot_id;
    assert!(!cluster.node(0).unwrap().installed);
    let mut m = machine(ep, insecure()).await;
    let r = m
        .apply_configuration(apply_req(&CP, Mode::Auto, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.messages[0].mode, Mode::NoReboot as i32);
    assert_eq!(
        r.messages[0].mode_details,
        "Applied configuration without a reboot"
    );
    // Installing, same boot, and already serving the admin over mutual TLS.
    wait_for(&cluster, 0, "installing", |n| n.stage == "installing").await;
    let mut a = machine(ep, admin()).await;
    assert!(
        a.version(()).await.is_ok(),
        "mTLS answers during the install"
    );
    assert_eq!(cluster.node(0).unwrap().boot_id, boot_in_maintenance);
    // Then the install reboot: a new boot, from disk, with the config.
    running(&cluster, 0).await;
    let n = cluster.node(0).unwrap();
    assert_ne!(n.boot_id, boot_in_maintenance);
    assert!(n.installed && !n.maintenance);
    assert!(
        !n.boot_media,
        "after the install the node boots from its disk"
    );
    cluster.shutdown().await;
}

/// `v1alpha1_server.go` Reset + `v1alpha1_sequencer.go` Reset (ResetSystemDiskSpec drops only
/// the named volumes) and the kernel argument docs ("resets ephemeral and state partitions.
/// Doing this reverts Talos into maintenance mode"): STATE + EPHEMERAL brings an installed node
/// back in maintenance mode, and a new config then boots on without any reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_of_state_and_ephemeral_returns_to_maintenance_and_the_next_apply_needs_no_reboot() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    configure(&cluster, 0, &CP).await;
    running(&cluster, 0).await;
    let mut a = machine(ep, admin()).await;
    let r = a
        .reset(reset_req(&["STATE", "EPHEMERAL"], WipeMode::All, true))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.messages[0].actor_id.is_empty());
    wait_for(&cluster, 0, "maintenance", |n| n.maintenance && n.listening).await;
    let n = cluster.node(0).unwrap();
    assert!(n.installed, "the bootloader and META are kept");
    let boot = n.boot_id;

    let mut m = machine(ep, insecure()).await;
    m.apply_configuration(apply_req(&CP, Mode::Auto, false))
        .await
        .unwrap();
    running(&cluster, 0).await;
    let n = cluster.node(0).unwrap();
    assert_eq!(n.boot_id, boot, "installed already: no install reboot");
    assert!(!n.maintenance);
    cluster.shutdown().await;
}

/// `v1alpha1_server.go` Reset (no labels and a mode other than USER_DISKS: `GetSystemDiskPaths`)
/// + `v1alpha1_sequencer_tasks.go` ResetSystemDisk (`WipeWithSignatures`: partition table and
/// bootloader gone): without installation media the node has nothing to boot; with media it
/// is back in maintenance mode with nothing installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_without_labels_wipes_the_whole_system_disk() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    configure(&cluster, 0, &CP).await;
    running(&cluster, 0).await;
    let mut a = machine(ep, admin()).await;
    a.reset(reset_req(&[], WipeMode::All, true)).await.unwrap();
    wait_for(&cluster, 0, "no bootable device", |n| n.unbootable).await;
    let n = cluster.node(0).unwrap();
    assert!(!n.installed && !n.up && !n.listening);

    cluster.set_boot_media(0, true).unwrap();
    cluster.power_on(0).unwrap();
    wait_for(&cluster, 0, "maintenance", |n| n.maintenance && n.listening).await;
    assert!(!cluster.node(0).unwrap().installed);
    cluster.shutdown().await;
}

/// `v1alpha1_sequencer.go` Reset: with mode USER_DISKS and no disks no wipe phase runs; the
/// node reboots with its config and its etcd data. With `reboot: false` it powers off
/// (`Shutdown` task) and stays off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_disks_with_no_disks_wipes_nothing_and_reboot_false_powers_off() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    configure(&cluster, 0, &CP).await;
    running(&cluster, 0).await;
    let mut a = machine(ep, admin()).await;
    a.bootstrap(BootstrapRequest::default()).await.unwrap();
    let boot = cluster.node(0).unwrap().boot_id;
    a.reset(reset_req(&[], WipeMode::UserDisks, true))
        .await
        .unwrap();
    wait_for(&cluster, 0, "a new boot", |n| {
        n.boot_id != boot && n.stage == "running"
    })
    .await;
    let n = cluster.node(0).unwrap();
    assert!(!n.maintenance && n.installed && n.etcd_member);
    assert!(matches!(
        machine(ep, admin())
            .await
            .bootstrap(BootstrapRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::AlreadyExists
    ));

    let mut a = machine(ep, admin()).await;
    a.reset(reset_req(&[], WipeMode::UserDisks, false))
        .await
        .unwrap();
    wait_for(&cluster, 0, "powered off", |n| {
        !n.up && n.stage == "shutting down"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!cluster.node(0).unwrap().up, "a powered-off node stays off");
    cluster.shutdown().await;
}

/// `v1alpha1_server.go` Reset: the request checks are plain Go errors (code Unknown) with these
/// texts; machined's rules make Reset admin-only, so maintenance mode refuses it
/// (`internal/app/machined/pkg/system/services/machined.go`, PermissionDenied "not authorized").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_requests_are_checked_like_upstream() {
    let cluster = start(2, 0).await;
    let ep0 = cluster.endpoint(0).unwrap();
    let ep1 = cluster.endpoint(1).unwrap();
    let err = machine(ep1, insecure())
        .await
        .reset(reset_req(&["STATE"], WipeMode::All, true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(err.message(), "not authorized");

    configure(&cluster, 0, &CP).await;
    running(&cluster, 0).await;
    let mut a = machine(ep0, admin()).await;
    let with_disks = |mode: WipeMode, disks: &[&str]| {
        let mut r = reset_req(&[], mode, true);
        r.user_disks_to_wipe = disks.iter().map(|d| d.to_string()).collect();
        r
    };
    let cases = [
        (
            with_disks(WipeMode::SystemDisk, &["/dev/sdb"]),
            "reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter".to_string(),
        ),
        (
            with_disks(WipeMode::UserDisks, &["/dev/sda"]),
            "reset user disk failed: device /dev/sda is the system disk".into(),
        ),
        (
            with_disks(WipeMode::UserDisks, &["/dev/sdz"]),
            "reset user disk failed: device /dev/sdz wasn't found".into(),
        ),
        (
            reset_req(&["STATE"], WipeMode::UserDisks, true),
            "reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter".into(),
        ),
    ];
    for (req, text) in cases {
        let err = a.reset(req).await.unwrap_err();
        assert_eq!(err.code(), Code::Unknown, "{}", err.message());
        assert_eq!(err.message(), text);
    }
    let err = a
        .reset(reset_req(&["BOOT"], WipeMode::All, true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unknown);
    assert!(
        err.message()
            .starts_with("failed to get volume status with label \"BOOT\""),
        "{}",
        err.message()
    );
    // Nothing happened to the node: its boot still waits for etcd (not bootstrapped here).
    assert_eq!(cluster.node(0).unwrap().stage, "booting");
    cluster.shutdown().await;
}

/// `v1alpha1_server.go` Bootstrap at v1.13.9: FailedPrecondition "bootstrap is not available yet"
/// (CRI not up), then "time is not in sync yet", until the node has settled; then it works once
/// and AlreadyExists "etcd data directory is not empty" after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_is_refused_until_the_node_has_settled() {
    let cluster = Cluster::start(SimConfig {
        bootstrap_settle: Duration::from_millis(1200),
        ..config(1, 0)
    })
    .await
    .unwrap();
    let ep = cluster.endpoint(0).unwrap();
    configure(&cluster, 0, &CP).await;
    running(&cluster, 0).await;
    let mut a = machine(ep, admin()).await;
    let mut seen = Vec::new();
    let done = loop {
        match a.bootstrap(BootstrapRequest::default()).await {
            Ok(_) => break true,
            Err(e) => {
                assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
                if seen.last().map(String::as_str) != Some(e.message()) {
                    seen.push(e.message().to_string());
                }
            }
        }
        if seen.len() > 2 {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(done, "{seen:?}");
    assert_eq!(
        seen,
        ["bootstrap is not available yet", "time is not in sync yet"]
    );
    let err = a.bootstrap(BootstrapRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert_eq!(err.message(), "etcd data directory is not empty");
    cluster.shutdown().await;
}
