//! A control plane's boot before and after bootstrap, as upstream's does it:
//! - the boot sequence ends with `StartAllServices`
//!   (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go` @ v1.14.1),
//!   which waits for every service to be up or finished; etcd's pre stage
//!   (`buildInitialCluster`, `internal/app/machined/pkg/system/services/etcd.go`) waits to join
//!   until bootstrap, so a control plane stays BOOTING, with the unmet conditions
//!   `internal/app/machined/pkg/controllers/runtime/machine_status.go` lists;
//! - `EtcdMemberList` (`v1alpha1_server.go`, through clientv3 with WaitForReady: the comment of
//!   `PromoteMember` in `internal/pkg/etcd/etcd.go`) blocks until the caller's deadline while
//!   no etcd answers, and answers once one does.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferro_talos_proto::cosi::resource::GetRequest;
use ferro_talos_proto::cosi::resource::state_client::StateClient;
use ferro_talos_proto::machine::{BootstrapRequest, EtcdMemberListRequest};
use ferro_talos_proto::resource::runtime::{MachineStage, MachineStatusSpec};
use ferro_talos_sim::Cluster;
use prost::Message;
use tonic::Code;

/// Stage, readiness and unmet conditions (name: reason) of node `i`'s MachineStatus.
async fn machine_status(cluster: &Cluster, i: usize) -> (MachineStage, bool, Vec<String>) {
    let ch = channel(cluster.endpoint(i).unwrap(), admin())
        .await
        .unwrap();
    let got = StateClient::new(ch)
        .get(GetRequest {
            namespace: "runtime".into(),
            r#type: "MachineStatuses.runtime.talos.dev".into(),
            id: "machine".into(),
            options: None,
        })
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let spec = MachineStatusSpec::decode(got.spec.unwrap().proto_spec.as_slice()).unwrap();
    let stage = spec.stage();
    let status = spec.status.unwrap_or_default();
    let unmet = status
        .unmet_conditions
        .iter()
        .map(|c| format!("{}: {}", c.name, c.reason))
        .collect();
    (stage, status.ready, unmet)
}

async fn wait_stage(cluster: &Cluster, i: usize, want: MachineStage, ready: bool) {
    let mut last = None;
    for _ in 0..200 {
        let got = machine_status(cluster, i).await;
        if got.0 == want && got.1 == ready {
            return;
        }
        last = Some(got);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("node {i} did not reach {want:?} (ready {ready}): {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_boots_only_once_etcd_is_bootstrapped() {
    let cluster = start(3, 1).await;
    for i in 0..3 {
        configure(&cluster, i, &CP).await;
    }
    configure(&cluster, 3, &WORKER).await;

    // Before bootstrap: every control plane waits for etcd, the worker's boot is over.
    for i in 0..3 {
        let (stage, ready, unmet) = machine_status(&cluster, i).await;
        assert_eq!(stage, MachineStage::Booting, "control plane {i}");
        assert!(!ready, "control plane {i}");
        assert!(
            unmet.contains(&"services: etcd not running".to_string()),
            "{unmet:?}"
        );
        let hostname = cluster.node(i).unwrap().hostname;
        assert!(
            unmet.contains(&format!(
                "nodeReady: node {hostname:?} status is not available yet"
            )),
            "{unmet:?}"
        );
    }
    let (stage, ready, unmet) = machine_status(&cluster, 3).await;
    assert_eq!(stage, MachineStage::Running);
    assert!(
        !ready,
        "no Kubernetes API yet, so no Node status: {unmet:?}"
    );

    // Upstream's bootstrapper accepts BOOTING (pkg/cluster/bootstrap.go @ v1.14.1), and the
    // bootstrap ends the first control plane's boot; the others join etcd and end theirs.
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    for i in 0..4 {
        wait_stage(&cluster, i, MachineStage::Running, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_list_before_bootstrap_waits_for_the_deadline_then_answers_once_etcd_does() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;

    let mut req = tonic::Request::new(EtcdMemberListRequest::default());
    req.set_timeout(Duration::from_millis(1200));
    let started = Instant::now();
    let e = m.etcd_member_list(req).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1000),
        "it failed at once ({took:?}): {e:?}"
    );
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );

    // A waiting call answers as soon as etcd does.
    let waiting = {
        let mut m = m.clone();
        tokio::spawn(async move {
            let mut req = tonic::Request::new(EtcdMemberListRequest::default());
            req.set_timeout(Duration::from_secs(20));
            let started = Instant::now();
            let r = m.etcd_member_list(req).await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    let (r, took) = waiting.await.unwrap();
    let members = r.unwrap().into_inner().messages[0].members.len();
    assert_eq!(members, 1);
    assert!(took < Duration::from_secs(5), "{took:?}");
}
