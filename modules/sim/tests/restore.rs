//! A cluster kept in a state directory, restarted in-process: staged and try configs, a node
//! held down by `never_return`, faults and the stored layout all come back as they were.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use ferro_talos_client::{Apply, ApplyMode, ConnectOptions, Credentials, ErrorKind, TalosClient};
use ferro_talos_sim::sample::SampleCluster;
use ferro_talos_sim::{Cluster, SimConfig};

/// One bundle and its control-plane config per test binary, from the collection's generator.
static SAMPLE: std::sync::LazyLock<SampleCluster> =
    std::sync::LazyLock::new(SampleCluster::generate);

fn config(comment: &str) -> String {
    let cfg = &SAMPLE.controlplane;
    format!("# {comment}\n{cfg}")
}

fn opts(call: Duration) -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(5),
        call_timeout: call,
        stream_timeout: Duration::from_secs(30),
        read_retries: 0,
        ..ConnectOptions::default()
    }
}

async fn start(dir: &Path, base: Ipv4Addr, control_planes: usize) -> Cluster {
    Cluster::start(SimConfig {
        control_planes,
        base_address: base,
        port: 0,
        reboot_downtime: Duration::from_millis(200),
        state_dir: Some(dir.to_path_buf()),
        ..SimConfig::default()
    })
    .await
    .expect("cluster starts")
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..100 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_try_down_nodes_and_faults_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let b: [u8; 2] = rand::random();
    let base = Ipv4Addr::new(127, 50 + b[0] % 50, b[1], 1);
    let bundle = SAMPLE.bundle.clone();
    let creds =
        Credentials::from_bundle(&bundle, &["os:admin"], Duration::from_secs(3600)).unwrap();
    let first = config("first");

    let cluster = start(dir, base, 3).await;
    let maintenance_boots: Vec<_> = cluster.nodes().into_iter().map(|n| n.boot_id).collect();
    for i in 0..3 {
        let ep = cluster.endpoint(i).unwrap().to_string();
        let m = TalosClient::connect_maintenance(&ep, opts(Duration::from_secs(10)))
            .await
            .unwrap();
        m.apply_configuration(first.as_bytes(), ApplyMode::Auto, Apply::ForReal, None)
            .await
            .unwrap();
    }
    wait_until("every node rebooted into its config", || {
        cluster
            .nodes()
            .iter()
            .zip(&maintenance_boots)
            .all(|(n, old)| !n.maintenance && n.listening && n.boot_id != *old)
    })
    .await;
    let ep0 = cluster.endpoint(0).unwrap().to_string();
    let c0 = TalosClient::connect(&ep0, &creds, opts(Duration::from_secs(10)))
        .await
        .unwrap();
    // Node 0: a staged config waits for the next boot.
    let staged = config("staged");
    c0.apply_configuration(staged.as_bytes(), ApplyMode::Staged, Apply::ForReal, None)
        .await
        .unwrap();
    // Node 2: a try config, rolled back after 1.5 s even across the restart.
    let node2 = cluster.node(2).unwrap().address.to_string();
    let tried = config("tried");
    c0.with_node(&node2)
        .apply_configuration(
            tried.as_bytes(),
            ApplyMode::Try,
            Apply::ForReal,
            Some(Duration::from_millis(1500)),
        )
        .await
        .unwrap();
    assert_eq!(
        c0.with_node(&node2).get_machine_config().await.unwrap(),
        tried.as_bytes()
    );
    cluster
        .update_faults(2, |f| f.slow_ms = Some(3000))
        .unwrap();
    // Node 1: rebooted into a fault that keeps it down.
    cluster.update_faults(1, |f| f.never_return = true).unwrap();
    cluster.reboot(1).unwrap();
    wait_until("node 1 down", || !cluster.node(1).unwrap().up).await;
    let boot0 = cluster.node(0).unwrap().boot_id;
    let addresses: Vec<_> = (0..3).map(|i| cluster.endpoint(i).unwrap()).collect();
    drop(c0);
    cluster.shutdown().await;
    assert!(!dir.join("run.json").exists());

    // The stored layout (3 nodes) wins over the one asked for (1).
    let cluster = start(dir, Ipv4Addr::new(127, 0, 10, 1), 1).await;
    assert_eq!(cluster.nodes().len(), 3);
    let again: Vec<_> = (0..3).map(|i| cluster.endpoint(i).unwrap()).collect();
    assert_eq!(again, addresses);
    assert!(dir.join("run.json").exists());
    let n0 = cluster.node(0).unwrap();
    assert_eq!(n0.boot_id, boot0);
    assert!(n0.has_staged_config, "the staged config is still staged");
    let n1 = cluster.node(1).unwrap();
    assert!(!n1.up && !n1.listening, "node 1 stays down");
    assert!(n1.faults.never_return);
    assert_eq!(cluster.node(2).unwrap().faults.slow_ms, Some(3000));

    let c0 = TalosClient::connect(&ep0, &creds, opts(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(c0.get_machine_config().await.unwrap(), first.as_bytes());
    // A slow routing target: the deadline expires and the error names that node.
    let short = TalosClient::connect(&ep0, &creds, opts(Duration::from_millis(400)))
        .await
        .unwrap();
    let err = short.with_node(&node2).version().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains(&node2), "{err}");
    cluster.update_faults(2, |f| f.slow_ms = None).unwrap();
    // The try config is rolled back on time.
    let mut rolled_back = false;
    for _ in 0..60 {
        if c0.with_node(&node2).get_machine_config().await.unwrap() == first.as_bytes() {
            rolled_back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        rolled_back,
        "the try config was rolled back after the restart"
    );

    // The staged config runs after node 0's next boot; node 1 comes back when powered on.
    cluster.reboot(0).unwrap();
    wait_until("node 0 rebooted", || {
        cluster
            .node(0)
            .is_some_and(|n| n.boot_id != boot0 && n.listening)
    })
    .await;
    let c0 = TalosClient::connect(&ep0, &creds, opts(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(c0.get_machine_config().await.unwrap(), staged.as_bytes());
    cluster.power_on(1).unwrap();
    wait_until("node 1 up", || cluster.node(1).unwrap().listening).await;
    assert!(!cluster.node(1).unwrap().maintenance);
    cluster.shutdown().await;

    // The directory holds exactly the configs still in use.
    let mut names: Vec<_> = std::fs::read_dir(dir.join("configs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "first and staged only: {names:?}");
}
