//! Taking a node down as Talos 1.13.9 and 1.14.1 do it: a shutdown whose drain fails
//! (`v1alpha1_sequencer.go` Shutdown, where `CordonAndDrainNode` has no error handler), a
//! graceful reset that etcd stops at its `leave` phase (`v1alpha1_sequencer.go` Reset), what
//! machined does after either (`internal/app/machined/main.go`: a failed sequence is fatal), and
//! the address of a node whose config set it statically after a reset to maintenance mode
//! (`internal/app/machined/pkg/controllers/network/operator_config.go`: no config, DHCP).

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::*;
use prost::Message;
use tonic::transport::Channel;

/// The node's Node is registered (its kubelet joined).
async fn node_registered(cluster: &ferro_talos_sim::Cluster, index: usize) {
    let name = cluster.node(index).unwrap().hostname.to_lowercase();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.kube_snapshot()["nodes"]
        .as_array()
        .is_some_and(|nodes| nodes.iter().any(|n| n["metadata"]["name"] == name.as_str()))
    {
        assert!(Instant::now() < deadline, "no Node for node {index}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the events stream of `actor` said until it ended or went quiet: sequence errors, the
/// phases started, and the machine stages published.
#[derive(Default, Debug)]
struct Seen {
    errors: Vec<(String, i32, String)>,
    phases: Vec<String>,
    stages: Vec<i32>,
    tasks: Vec<String>,
}

async fn watch(m: &mut MachineServiceClient<Channel>, actor: &str, quiet: Duration) -> Seen {
    let mut ev = m
        .events(EventsRequest {
            tail_events: -1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Seen::default();
    while let Ok(Ok(Some(e))) = tokio::time::timeout(quiet, ev.message()).await {
        let Some(d) = e.data else { continue };
        match d.type_url.as_str() {
            "talos/runtime/machine.SequenceEvent" if e.actor_id == actor => {
                let s = SequenceEvent::decode(d.value.as_slice()).unwrap();
                if let Some(err) = s.error {
                    seen.errors.push((s.sequence, err.code, err.message));
                }
            }
            "talos/runtime/machine.PhaseEvent" if e.actor_id == actor => {
                let p = PhaseEvent::decode(d.value.as_slice()).unwrap();
                if p.action == phase_event::Action::Start as i32 {
                    seen.phases.push(p.phase);
                }
            }
            "talos/runtime/machine.TaskEvent" if e.actor_id == actor => {
                let t = TaskEvent::decode(d.value.as_slice()).unwrap();
                seen.tasks.push(t.task);
            }
            "talos/runtime/machine.MachineStatusEvent" => {
                let s = MachineStatusEvent::decode(d.value.as_slice()).unwrap();
                seen.stages.push(s.stage);
            }
            _ => {}
        }
    }
    seen
}

fn kube_actions(cluster: &ferro_talos_sim::Cluster, index: usize) -> Vec<String> {
    let name = cluster.node(index).unwrap().hostname.to_lowercase();
    cluster.kube_snapshot()["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == name.as_str())
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect()
}

/// With the Kubernetes API down (etcd, where it keeps everything, without a quorum), Talos's
/// drain cannot cordon the Node: the shutdown sequence fails at its drain phase, the second
/// (`Shutdown` in `v1alpha1_sequencer.go` @ v1.14.1: storeShutdown, then drain unwrapped), with
/// code FATAL; the node still powers off, through machined's fatal-error path, because the
/// sequence stored power-off as its intent first (`StoreShutdownEmergency`,
/// `internal/app/machined/main.go` handle), and MachineStatus stays SHUTTING_DOWN
/// (`machine_status.go` watchEvents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_whose_drain_fails_stops_there_and_powers_off_all_the_same() {
    let cluster = bootstrapped(1, 1).await;
    node_registered(&cluster, 1).await;
    cluster.update_faults(0, |f| f.etcd_down = true).unwrap();
    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    let actor = m
        .shutdown(ShutdownRequest { force: false })
        .await
        .unwrap()
        .into_inner()
        .messages[0]
        .actor_id
        .clone();
    // The node drains (waits for a cordon that never comes) before it goes.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(cluster.node(1).unwrap().up, "down before the drain gave up");
    let seen = watch(&mut m, &actor, Duration::from_secs(5)).await;
    assert_eq!(seen.phases, ["storeShutdown", "drain"], "{seen:?}");
    assert_eq!(seen.errors.len(), 1, "{seen:?}");
    let (sequence, code, message) = &seen.errors[0];
    assert_eq!(sequence, "shutdown");
    assert_eq!(*code, ferro_talos_proto::common::Code::Fatal as i32);
    assert_eq!(
        message,
        "sequence failed: error running phase 2 in shutdown sequence: task 1/1: failed, context deadline exceeded"
    );
    assert!(
        !seen.tasks.contains(&"stopAllServices".to_string()),
        "{seen:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.node(1).unwrap().up {
        assert!(
            Instant::now() < deadline,
            "still up after the failed shutdown"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cluster.node(1).unwrap().stage, "shutting down");
    assert!(
        !kube_actions(&cluster, 1).contains(&"cordon".to_string()),
        "{:?}",
        kube_actions(&cluster, 1)
    );
    cluster.shutdown().await;
}

/// A graceful reset of etcd's only member: etcd refuses the leave (not enough started members),
/// and upstream's Reset sequence fails at its `leave` phase, after `drain` and `cleanup` (the
/// pods removed, the kubelet stopped) and before anything is wiped (`Reset` in
/// `v1alpha1_sequencer.go` @ v1.13.9: drain, cleanup, dbus, leave; v1.14.1 adds preShutdown).
/// The failure is FATAL, MachineStatus reads REBOOTING (`machine_status.go`), and machined
/// reboots the node (`internal/app/machined/main.go`): it comes back with its config and its
/// member, on a new boot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_graceful_reset_reboots_the_node_with_nothing_wiped() {
    let cluster = bootstrapped(1, 0).await;
    node_registered(&cluster, 0).await;
    let boot_before = cluster.node(0).unwrap().boot_id;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    let actor = m
        .reset(ResetRequest {
            graceful: true,
            reboot: true,
            system_partitions_to_wipe: ["STATE", "EPHEMERAL"]
                .map(|label| ResetPartitionSpec {
                    label: label.into(),
                    wipe: true,
                })
                .to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .messages[0]
        .actor_id
        .clone();
    let seen = watch(&mut m, &actor, Duration::from_secs(3)).await;
    assert_eq!(
        seen.phases,
        ["drain", "cleanup", "dbus", "leave"],
        "{seen:?}"
    );
    assert_eq!(seen.errors.len(), 1, "{seen:?}");
    let (sequence, code, message) = &seen.errors[0];
    assert_eq!(sequence, "reset");
    assert_eq!(*code, ferro_talos_proto::common::Code::Fatal as i32);
    assert!(
        message.starts_with(
            "sequence failed: error running phase 4 in reset sequence: task 1/1: failed, failed to leave cluster: failed to remove member "
        ) && message.ends_with(
            ": etcdserver: re-configuration failed due to not enough started members"
        ),
        "{message}"
    );
    assert_eq!(
        seen.stages.last(),
        Some(&(machine_status_event::MachineStage::Rebooting as i32)),
        "{seen:?}"
    );
    assert!(
        !seen.tasks.contains(&"stopAllServices".to_string()),
        "{seen:?}"
    );
    assert_eq!(
        kube_actions(&cluster, 0).first().map(String::as_str),
        Some("cordon")
    );
    wait_back(&cluster, 0).await;
    let n = cluster.node(0).unwrap();
    assert!(
        n.up && !n.maintenance && n.etcd_member && n.stage == "running",
        "{n:?}"
    );
    assert_ne!(
        n.boot_id, boot_before,
        "machined reboots after the fatal error"
    );
    cluster.shutdown().await;
}

/// A worker whose config sets its address statically: a reset to maintenance mode wipes STATE,
/// the config with it, so the node boots with no config, and without one Talos runs DHCP on
/// every physical link (`operator_config.go` @ v1.14.1): it comes back in maintenance mode on
/// the address its DHCP server leases, not the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_to_maintenance_moves_a_statically_addressed_node_to_dhcp() {
    let cluster = start(1, 1).await;
    configure(&cluster, 0, &CP).await;
    let old = cluster.node(1).unwrap().address;
    let mut cfg = ferro_talos_config::MachineConfig::parse(&WORKER).unwrap();
    cfg.docs[0]["machine"]["network"] = serde_json::json!({
        "interfaces": [{"interface": "eth0", "addresses": [format!("{old}/24")]}],
    });
    configure(&cluster, 1, &cfg.to_yaml()).await;
    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    m.reset(ResetRequest {
        graceful: false,
        reboot: true,
        system_partitions_to_wipe: ["STATE", "EPHEMERAL"]
            .map(|label| ResetPartitionSpec {
                label: label.into(),
                wipe: true,
            })
            .to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_back(&cluster, 1).await;
    let n = cluster.node(1).unwrap();
    assert!(n.maintenance, "{n:?}");
    assert_ne!(n.address, old, "{n:?}");
    assert!(
        tokio::net::TcpStream::connect((old, n.port)).await.is_err(),
        "the old address still answers"
    );
    // A node that got its address from DHCP keeps its lease.
    let cp = cluster.node(0).unwrap().address;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.reset(ResetRequest {
        graceful: false,
        reboot: true,
        system_partitions_to_wipe: ["STATE", "EPHEMERAL"]
            .map(|label| ResetPartitionSpec {
                label: label.into(),
                wipe: true,
            })
            .to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_back(&cluster, 0).await;
    assert_eq!(cluster.node(0).unwrap().address, cp);
    assert!(cluster.node(0).unwrap().maintenance);
    cluster.shutdown().await;
}
