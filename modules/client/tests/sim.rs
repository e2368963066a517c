//! End-to-end: the client against `talos-sim` (a simulated Talos cluster on loopback
//! addresses), through the whole life of a node: maintenance probe, apply in
//! maintenance mode, reboot into mutual TLS with credentials derived from the
//! secrets bundle, bootstrap, etcd, config read-back, kubeconfig, reboot waiting
//! and the LifecycleService upgrade.

use std::net::Ipv4Addr;
use std::time::Duration;

use ferro_talos_client::proto::machine::ResetRequest;
use ferro_talos_client::proto::resource::config::MachineType;
use ferro_talos_client::proto::resource::runtime::MachineStage;
use ferro_talos_client::{
    Apply, ApplyMode, ConnectOptions, Credentials, ErrorKind, NodeMode, RebootMode, TalosClient,
    containerd_system, probe, wait_for_reboot,
};
use ferro_talos_sim::sample::SampleCluster;
use ferro_talos_sim::{Cluster, SimConfig};

/// One bundle and its control-plane config per test binary, from the collection's generator.
static SAMPLE: std::sync::LazyLock<SampleCluster> =
    std::sync::LazyLock::new(SampleCluster::generate);

fn controlplane_config() -> String {
    SAMPLE.controlplane.clone()
}

async fn start_cluster() -> Cluster {
    let b: [u8; 2] = rand::random();
    Cluster::start(SimConfig {
        control_planes: 1,
        workers: 0,
        // A random 127.x.y.1 so parallel test binaries never share addresses.
        base_address: Ipv4Addr::new(127, 100 + b[0] % 100, b[1], 1),
        port: 0,
        reboot_downtime: Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(10),
        stream_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_lifecycle_against_the_simulator() {
    let cluster = start_cluster().await;
    let ep = cluster.endpoint(0).unwrap().to_string();
    let bundle = SAMPLE.bundle.clone();
    let creds =
        Credentials::from_bundle(&bundle, &["os:admin"], Duration::from_secs(3600)).unwrap();

    // Maintenance mode: no client certificate, read-only, no config.
    assert_eq!(probe(&ep, &opts()).await.unwrap(), NodeMode::Maintenance);
    let m = TalosClient::connect_maintenance(&ep, opts()).await.unwrap();
    assert!(m.version().await.unwrap().features.is_none());
    let err = m.bootstrap().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::PermissionDenied, "{err}");
    let err = m.etcd_member_list().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::MaintenanceMode, "{err}");
    let err = m
        .apply_configuration(b"machine: [", ApplyMode::Auto, Apply::ForReal, None)
        .await
        .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::InvalidConfig { .. }), "{err}");

    let config = format!("# applied by the client test\n{}", controlplane_config());
    let applied = m
        .apply_configuration(config.as_bytes(), ApplyMode::Auto, Apply::ForReal, None)
        .await
        .unwrap();
    assert_eq!(applied.mode, ApplyMode::NoReboot as i32);
    assert_eq!(
        applied.mode_details,
        "Applied configuration without a reboot"
    );

    // The node installs, reboots and comes back requiring mutual TLS.
    wait_for_reboot(
        &ep,
        None,
        &creds,
        None,
        Duration::from_secs(20),
        Duration::from_millis(100),
    )
    .await
    .unwrap();
    assert_eq!(probe(&ep, &opts()).await.unwrap(), NodeMode::Configured);

    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    let v = c.version().await.unwrap();
    assert_eq!(v.version.unwrap().tag, "v1.13.6");
    assert!(v.features.is_some());
    assert_eq!(c.get_machine_config().await.unwrap(), config.as_bytes());
    assert_eq!(c.machine_type().await.unwrap(), MachineType::ControlPlane);
    // A control plane's boot waits for etcd until it is bootstrapped (StartAllServices in
    // internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go @ v1.14.1).
    let status = c.machine_status().await.unwrap();
    assert_eq!(status.stage, MachineStage::Booting);
    assert!(!c.hostname().await.unwrap().is_empty());
    assert!(!c.service_list().await.unwrap().is_empty());

    // Bootstrap once; the second time is AlreadyExists.
    c.bootstrap().await.unwrap();
    assert_eq!(
        c.machine_status().await.unwrap().stage,
        MachineStage::Running
    );
    let err = c.bootstrap().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::AlreadyExists, "{err}");
    let members = tokio_retry(|| c.etcd_member_list()).await;
    assert_eq!(members.len(), 1);

    let kubeconfig = c.kubeconfig().await.unwrap();
    assert!(String::from_utf8_lossy(&kubeconfig).contains("clusters:"));

    // Reboot and wait for a new boot ID.
    let old = c.boot_id().await.unwrap().expect("admin may read boot_id");
    let actor = c.reboot(RebootMode::Default).await.unwrap();
    assert!(!actor.is_empty());
    let done = wait_for_reboot(
        &ep,
        None,
        &creds,
        Some(&old),
        Duration::from_secs(20),
        Duration::from_millis(100),
    )
    .await
    .unwrap();
    assert_ne!(done.boot_id.as_deref(), Some(old.as_str()));

    // New upgrade path: pull, then run the installer (no reboot).
    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    let image = "ghcr.io/siderolabs/installer:v1.13.6";
    let pulled = c.image_pull(image, containerd_system()).await.unwrap();
    assert!(pulled.contains("installer"), "{pulled}");
    let outcome = c
        .lifecycle_upgrade(image, containerd_system())
        .await
        .unwrap();
    assert_eq!(outcome.exit_code, 0, "{:?}", outcome.lines);

    // A wrong-role certificate is told apart from a wrong CA.
    let reader =
        Credentials::from_bundle(&bundle, &["os:reader"], Duration::from_secs(3600)).unwrap();
    let r = TalosClient::connect(&ep, &reader, opts()).await.unwrap();
    let err = r.reset(ResetRequest::default()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::PermissionDenied, "{err}");
    assert_eq!(
        r.boot_id().await.unwrap(),
        None,
        "reader may not read files"
    );

    cluster.shutdown().await;
}

/// etcd may need a moment after bootstrap before it lists members.
async fn tokio_retry<F, Fut, T>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ferro_talos_client::Result<T>>,
{
    let mut last = None;
    for _ in 0..50 {
        match f().await {
            Ok(v) => return v,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("still failing: {}", last.unwrap());
}
