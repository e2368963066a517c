//! The legacy `MachineService/Upgrade` and a TRY apply in maintenance mode, as Talos 1.13.9
//! does them. Each test names the upstream source (tag v1.13.9 of siderolabs/talos) it encodes;
//! docs/talos-fidelity.md lists them.

mod common;

use std::time::Duration;

use common::*;
use ferro_talos_proto::common::Code as SequenceCode;
use ferro_talos_proto::machine::apply_configuration_request::Mode;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::*;
use ferro_talos_sim::Cluster;
use prost::Message;
use tonic::transport::Channel;

const INSTALLER: &str = "ghcr.io/siderolabs/installer:v1.13.9";

fn upgrade_req(force: bool) -> UpgradeRequest {
    UpgradeRequest {
        image: INSTALLER.into(),
        force,
        ..Default::default()
    }
}

/// A configured, bootstrapped cluster of `control_planes` control planes.
async fn bootstrapped(control_planes: usize, versions: &[(usize, &str)]) -> Cluster {
    let mut cfg = config(control_planes, 0);
    for (i, v) in versions {
        cfg.node_versions.insert(*i, v.to_string());
    }
    let cluster = Cluster::start(cfg).await.unwrap();
    for i in 0..control_planes {
        configure(&cluster, i, &CP).await;
    }
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    cluster
}

/// The failed sequence event published for `actor`, waiting up to five seconds for it.
async fn sequence_failure(m: &mut MachineServiceClient<Channel>, actor: &str) -> SequenceEvent {
    for _ in 0..100 {
        let mut events = m
            .events(EventsRequest {
                tail_events: -1,
                with_actor_id: actor.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        while let Ok(Ok(Some(e))) =
            tokio::time::timeout(Duration::from_millis(100), events.message()).await
        {
            let Some(data) = e.data.filter(|d| d.type_url.ends_with(".SequenceEvent")) else {
                continue;
            };
            let seq = SequenceEvent::decode(data.value.as_slice()).unwrap();
            if seq.error.is_some() {
                return seq;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no failed sequence event for actor {actor}");
}

fn service_state(list: &ServiceListResponse, id: &str) -> String {
    list.messages[0]
        .services
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.state.clone())
        .unwrap_or_default()
}

/// `v1alpha1_server.go` Upgrade answers before the sequence runs; the sequence
/// (`v1alpha1_sequencer.go` Upgrade) stops the node's services before the installer, whose
/// version check (`cmd/installer/pkg/install/preflight.go`) fails with exit code 1
/// (`internal/pkg/install/install.go`); `v1alpha1_controller.go` Run publishes the failure as a
/// FATAL sequence event and nothing reboots, and `controllers/runtime/machine_status.go` reads a
/// fatal sequence error as REBOOTING. The node stays down that way until it is rebooted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_installer_fails_the_sequence_after_the_answer_and_leaves_services_stopped() {
    let cluster = bootstrapped(1, &[(0, "v1.10.7")]).await;
    let ep = cluster.endpoint(0).unwrap();
    let mut m = machine(ep, admin()).await;
    let boot = cluster.node(0).unwrap().boot_id;
    let r = m.upgrade(upgrade_req(false)).await.unwrap().into_inner();
    assert_eq!(r.messages[0].ack, "Upgrade request received");
    let actor = r.messages[0].actor_id.clone();

    let failed = sequence_failure(&mut m, &actor).await;
    assert_eq!(failed.sequence, "upgrade");
    assert_eq!(failed.action, sequence_event::Action::Noop as i32);
    let error = failed.error.unwrap();
    assert_eq!(error.code, SequenceCode::Fatal as i32);
    assert_eq!(
        error.message,
        "sequence failed: error running phase 9 in upgrade sequence: task 1/1: failed, task \"upgrade\" failed: exit code 1"
    );

    let n = cluster.node(0).unwrap();
    assert_eq!(n.boot_id, boot, "nothing rebooted");
    assert_eq!(n.version, "v1.10.7");
    assert_eq!(n.stage, "rebooting");
    let services = m.service_list(()).await.unwrap().into_inner();
    assert_eq!(service_state(&services, "etcd"), "Finished");
    assert_eq!(service_state(&services, "kubelet"), "Finished");
    assert_eq!(service_state(&services, "apid"), "Running");

    // A reboot brings the old version back with its services.
    cluster.reboot(0).unwrap();
    wait_back(&cluster, 0).await;
    let mut m = machine(ep, admin()).await;
    let services = m.service_list(()).await.unwrap().into_inner();
    assert_eq!(service_state(&services, "kubelet"), "Running");
    assert_eq!(cluster.node(0).unwrap().version, "v1.10.7");
    cluster.shutdown().await;
}

/// `internal/pkg/etcd/etcd.go` ValidateForUpgrade and `v1alpha1_server.go` tryLockUpgradeMutex:
/// a control plane's legacy upgrade is refused at once (plain Go errors, so code Unknown) when
/// two members could not keep quorum, when a member is not healthy, or when another session holds
/// etcd's upgrade mutex; `force` skips all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_planes_upgrade_is_refused_when_etcd_could_lose_quorum() {
    let cluster = bootstrapped(3, &[]).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;

    cluster.update_faults(2, |f| f.etcd_down = true).unwrap();
    let e = m.upgrade(upgrade_req(false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    let members = m
        .etcd_member_list(EtcdMemberListRequest::default())
        .await
        .unwrap()
        .into_inner();
    let down = members.messages[0]
        .members
        .iter()
        .find(|x| x.hostname == cluster.node(2).unwrap().hostname)
        .unwrap()
        .id;
    assert_eq!(
        e.message(),
        format!(
            "error validating etcd for upgrade: etcd member {down:016x} is not healthy; all members must be healthy to perform an upgrade: context deadline exceeded"
        )
    );
    cluster.update_faults(2, |f| f.etcd_down = false).unwrap();

    cluster
        .update_faults(0, |f| f.upgrade_mutex_held = true)
        .unwrap();
    let e = m.upgrade(upgrade_req(false)).await.unwrap_err();
    assert_eq!(
        e.message(),
        "failed to acquire upgrade mutex: error trying to lock etcd upgrade mutex: mutex: Locked by another session"
    );
    cluster
        .update_faults(0, |f| f.upgrade_mutex_held = false)
        .unwrap();

    // Two members: one down would leave no quorum.
    m.etcd_remove_member_by_id(EtcdRemoveMemberByIdRequest { member_id: down })
        .await
        .unwrap();
    let e = m.upgrade(upgrade_req(false)).await.unwrap_err();
    assert_eq!(
        e.message(),
        "error validating etcd for upgrade: etcd member count(2) is insufficient to maintain quorum if upgrade commences"
    );
    let r = m.upgrade(upgrade_req(true)).await.unwrap().into_inner();
    assert_eq!(r.messages[0].ack, "Upgrade request received");
    cluster.shutdown().await;
}

/// `v1alpha1_server.go` ApplyConfiguration keeps TRY in maintenance mode (only REBOOT and AUTO
/// become NO_REBOOT) and only activates the config (`SetConfig`, no `SetPersistedConfig`);
/// `controllers/config/acquire.go` ends maintenance on any complete active config. A node booted
/// from media therefore installs and reboots with nothing on STATE: it is back in maintenance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_in_maintenance_activates_without_persisting() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    let boot = cluster.node(0).unwrap().boot_id;
    let mut m = machine(ep, insecure()).await;
    let r = m
        .apply_configuration(apply_req(&CP, Mode::Try, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.messages[0].mode, Mode::Try as i32);
    assert_eq!(
        r.messages[0].mode_details,
        "Applied configuration without a reboot\nThe config is applied in 'try' mode and will be automatically reverted back in 1m0s"
    );
    assert!(
        !cluster.node(0).unwrap().maintenance,
        "the config is active"
    );
    for _ in 0..400 {
        let n = cluster.node(0).unwrap();
        if n.boot_id != boot && n.listening {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let n = cluster.node(0).unwrap();
    assert_ne!(n.boot_id, boot, "the install rebooted the node");
    assert!(n.installed);
    assert!(n.maintenance, "nothing was persisted: maintenance again");
    cluster.shutdown().await;
}
