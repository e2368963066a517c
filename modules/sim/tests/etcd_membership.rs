//! etcd membership changes as Talos and etcd make them: EtcdRemoveMemberByID and
//! EtcdLeaveCluster (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`,
//! `internal/pkg/etcd/etcd.go` @ v1.13.9), refused by etcd's own strict reconfiguration checks
//! (etcd v3.6.12 `mayRemoveMember`, `server/etcdserver/server.go`), which are the only quorum
//! protection upstream has; and the MachineService/Shutdown sequence.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::*;
use tonic::Code;
use tonic::transport::Channel;

async fn members(m: &mut MachineServiceClient<Channel>) -> Vec<(String, u64)> {
    let mut list: Vec<(String, u64)> = m
        .etcd_member_list(EtcdMemberListRequest::default())
        .await
        .unwrap()
        .into_inner()
        .messages[0]
        .members
        .iter()
        .map(|m| (m.hostname.clone(), m.id))
        .collect();
    list.sort();
    list
}

fn id_of(list: &[(String, u64)], hostname: &str) -> u64 {
    list.iter().find(|(h, _)| h == hostname).unwrap().1
}

async fn etcd_state(m: &mut MachineServiceClient<Channel>) -> String {
    m.service_list(()).await.unwrap().into_inner().messages[0]
        .services
        .iter()
        .find(|s| s.id == "etcd")
        .unwrap()
        .state
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_go_only_as_etcd_lets_them() {
    let cluster = bootstrapped(3, 1).await;
    let host = |i: usize| cluster.node(i).unwrap().hostname;
    let mut cp: Vec<MachineServiceClient<Channel>> = Vec::new();
    for i in 0..3 {
        cp.push(machine(cluster.endpoint(i).unwrap(), admin()).await);
    }
    let all = members(&mut cp[0]).await;
    assert_eq!(all.len(), 3, "{all:?}");

    // A worker has no etcd API.
    let mut worker = machine(cluster.endpoint(3).unwrap(), admin()).await;
    let e = worker
        .etcd_leave_cluster(EtcdLeaveClusterRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::Unimplemented,
            "etcd leave is only available on control plane nodes"
        )
    );

    // An id etcd does not know: NotFound, the id in decimal.
    let e = cp[0]
        .etcd_remove_member_by_id(EtcdRemoveMemberByIdRequest { member_id: 12345 })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::NotFound,
            "failed to remove member 12345: etcdserver: member not found"
        )
    );

    // With the third member down, removing a live one would leave one live member of two.
    cluster.update_faults(2, |f| f.etcd_down = true).unwrap();
    let second = id_of(&all, &host(1));
    let e = cp[0]
        .etcd_remove_member_by_id(EtcdRemoveMemberByIdRequest { member_id: second })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    assert_eq!(
        e.message(),
        format!(
            "failed to remove member: failed to remove member {second}: etcdserver: unhealthy cluster"
        )
    );
    let e = cp[1]
        .etcd_leave_cluster(EtcdLeaveClusterRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            "failed to leave cluster: failed to remove member {second}: etcdserver: unhealthy cluster"
        )
    );
    // The member that is down may go.
    let third = id_of(&all, &host(2));
    cp[0]
        .etcd_remove_member_by_id(EtcdRemoveMemberByIdRequest { member_id: third })
        .await
        .unwrap();
    assert_eq!(members(&mut cp[0]).await.len(), 2);
    // A node whose etcd is down cannot leave: it has no local member id.
    let e = cp[2]
        .etcd_leave_cluster(EtcdLeaveClusterRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        "failed to leave cluster: failed to get local etcd member ID: context deadline exceeded"
    );
    cluster.update_faults(2, |f| f.etcd_down = false).unwrap();

    // Two live members: the second leaves; its etcd stays stopped until its next boot.
    cp[1]
        .etcd_leave_cluster(EtcdLeaveClusterRequest {})
        .await
        .unwrap();
    assert_eq!(
        members(&mut cp[0]).await,
        vec![(host(0), id_of(&all, &host(0)))]
    );
    assert_eq!(etcd_state(&mut cp[1]).await, "Finished");
    // The last member may not leave.
    let first = id_of(&all, &host(0));
    let e = cp[0]
        .etcd_leave_cluster(EtcdLeaveClusterRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            "failed to leave cluster: failed to remove member {first}: etcdserver: re-configuration failed due to not enough started members"
        )
    );

    // After a reboot a control plane that left joins again (upstream's addMember).
    cluster.reboot(1).unwrap();
    wait_back(&cluster, 1).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = members(&mut cp[0]).await;
        if now.iter().any(|(h, _)| *h == host(1)) {
            break;
        }
        assert!(Instant::now() < deadline, "{now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.shutdown().await;
}

/// Shutdown answers with an actor id, runs the "shutdown" sequence (a worker drains itself
/// unless forced) and powers the node off: it stops answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_powers_the_node_off() {
    let cluster = bootstrapped(1, 1).await;
    let name = cluster.node(1).unwrap().hostname.to_lowercase();
    let deadline = Instant::now() + Duration::from_secs(10);
    // The worker's kubelet registers its Node once the API server runs.
    while !cluster.kube_snapshot()["nodes"]
        .as_array()
        .is_some_and(|nodes| nodes.iter().any(|n| n["metadata"]["name"] == name.as_str()))
    {
        assert!(Instant::now() < deadline, "no Node for the worker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    let reply = m
        .shutdown(ShutdownRequest { force: false })
        .await
        .unwrap()
        .into_inner();
    assert!(!reply.messages[0].actor_id.is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.node(1).unwrap().up {
        assert!(Instant::now() < deadline, "still up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = cluster.node(1).unwrap();
    assert_eq!(n.stage, "shutting down");
    let log = cluster.kube_snapshot()["log"].clone();
    let actions: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == name.as_str())
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions.first(), Some(&"cordon"), "{actions:?}");
    assert_eq!(actions.last(), Some(&"node_down"), "{actions:?}");
    // A reader may not shut a node down.
    let mut reader = machine(cluster.endpoint(0).unwrap(), client_tls(&["os:reader"])).await;
    let e = reader
        .shutdown(ShutdownRequest { force: true })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not authorized")
    );
    cluster.shutdown().await;
}
