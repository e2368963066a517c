//! talos-sim's real backend: each control plane runs a real etcd member (upstream's etcd
//! v3.7.1, built from the Go module proxy by tools/etcd/build), so what the Talos API's etcd
//! calls answer is etcd's own: the membership Talos builds (a learner, then promoted:
//! `addMember`, `promoteMember` in `internal/app/machined/pkg/system/services/etcd.go`
//! @ v1.14.1), etcd's strict reconfiguration checks, its snapshot and its restore.
//!
//! The same steps as `etcd_membership.rs` runs against the model; where the model answers
//! differently, the model is wrong (docs/talos-fidelity.md).

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::*;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::*;
use ferro_talos_sim::real::gateway::Gateway;
use ferro_talos_sim::{Backend, Cluster, EtcdBinaries};
use tonic::Code;
use tonic::transport::Channel;

fn real_backend() -> Option<Backend> {
    let (etcd, etcdutl) = ferro_talos_oracle::etcd_programs()?;
    Some(Backend::Real(EtcdBinaries { etcd, etcdutl }))
}

async fn start_real(backend: Backend, control_planes: usize, workers: usize) -> Cluster {
    let cfg = ferro_talos_sim::SimConfig {
        backend,
        ..config(control_planes, workers)
    };
    let cluster = Cluster::start(cfg).await.expect("cluster starts");
    for i in 0..control_planes {
        configure(&cluster, i, &CP).await;
    }
    for i in control_planes..control_planes + workers {
        configure(&cluster, i, &WORKER).await;
    }
    cluster
}

fn gateway(cluster: &Cluster, i: usize) -> Gateway {
    let ip: Ipv4Addr = cluster.node(i).unwrap().address;
    ferro_talos_sim::real::RealEtcd::gateway(ip)
}

async fn list(m: &mut MachineServiceClient<Channel>) -> Vec<EtcdMember> {
    let mut members = m
        .etcd_member_list(EtcdMemberListRequest::default())
        .await
        .unwrap()
        .into_inner()
        .messages
        .remove(0)
        .members;
    members.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    members
}

/// Waits until etcd lists `n` voting members, every one started (named).
async fn voting_members(m: &mut MachineServiceClient<Channel>, n: usize) -> Vec<EtcdMember> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = list(m).await;
        if now.len() == n && now.iter().all(|m| !m.is_learner && !m.hostname.is_empty()) {
            return now;
        }
        assert!(Instant::now() < deadline, "not {n} voting members: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn id_of(members: &[EtcdMember], hostname: &str) -> u64 {
    members.iter().find(|m| m.hostname == hostname).unwrap().id
}

/// Retries `call` until it gives the error `want` says, for a refusal etcd gives only once it
/// has noticed a member is gone (its peers' health, a few heartbeats).
async fn eventually_refused<F, Fut>(
    mut call: F,
    want: impl Fn(&tonic::Status) -> bool,
) -> tonic::Status
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match call().await {
            Err(e) if want(&e) => return e,
            other => assert!(Instant::now() < deadline, "still {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_members_go_only_as_etcd_lets_them() {
    let Some(backend) = real_backend() else {
        return;
    };
    let cluster = start_real(backend, 3, 1).await;
    let host = |i: usize| cluster.node(i).unwrap().hostname;
    let mut cp: Vec<MachineServiceClient<Channel>> = Vec::new();
    for i in 0..3 {
        cp.push(machine(cluster.endpoint(i).unwrap(), admin()).await);
    }
    cp[0].bootstrap(BootstrapRequest::default()).await.unwrap();
    // The others join as learners and are promoted, as Talos's etcd service does.
    let all = voting_members(&mut cp[0], 3).await;
    let from_etcd = gateway(&cluster, 1).member_list().unwrap();
    assert_eq!(from_etcd.len(), 3);
    for m in &from_etcd {
        assert_eq!(
            id_of(&all, &m.name),
            m.id,
            "the Talos API lists etcd's own ids"
        );
    }
    // The status is the member's own.
    let status = cp[1].etcd_status(()).await.unwrap().into_inner().messages[0]
        .member_status
        .clone()
        .unwrap();
    assert_eq!(status.member_id, id_of(&all, &host(1)));
    assert_eq!(status.protocol_version, "3.7.1");
    assert!(all.iter().any(|m| m.id == status.leader), "{status:?}");

    // An id etcd does not know: NotFound, etcd's text.
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

    // With the third member down, removing a live one would leave one live member of two:
    // etcd refuses once it has noticed the third is gone.
    cluster.update_faults(2, |f| f.etcd_down = true).unwrap();
    let second = id_of(&all, &host(1));
    let e = eventually_refused(
        || {
            let mut c = cp[0].clone();
            async move {
                c.etcd_remove_member_by_id(EtcdRemoveMemberByIdRequest { member_id: second })
                    .await
                    .map(drop)
            }
        },
        |e| e.code() == Code::Unknown,
    )
    .await;
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
    assert_eq!(list(&mut cp[0]).await.len(), 2);
    assert_eq!(gateway(&cluster, 0).member_list().unwrap().len(), 2);
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

    // Two live members: the second leaves.
    cp[1]
        .etcd_leave_cluster(EtcdLeaveClusterRequest {})
        .await
        .unwrap();
    let left = list(&mut cp[0]).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].hostname, host(0));
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

    // After a reboot a control plane that left joins again, as a new member.
    cluster.reboot(1).unwrap();
    wait_back(&cluster, 1).await;
    let back = voting_members(&mut cp[0], 2).await;
    assert_ne!(
        id_of(&back, &host(1)),
        second,
        "a new member, not the old one"
    );
    cluster.shutdown().await;
}

/// A snapshot the Talos API streams is etcd's own database; a recovery from it restores with
/// etcd's own restore, and a damaged one fails the etcd service with etcd's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_snapshot_restores_into_a_new_cluster() {
    let Some(backend) = real_backend() else {
        return;
    };
    let source = start_real(backend.clone(), 1, 0).await;
    let mut m = machine(source.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    voting_members(&mut m, 1).await;
    let gw = gateway(&source, 0);
    gw.put("/registry/ferro/marker", "kept").unwrap();
    let mut stream = m
        .etcd_snapshot(EtcdSnapshotRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut snapshot = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        snapshot.extend(chunk.bytes);
    }
    // A bbolt file (its magic at byte 16) with etcd's SHA-256 appended.
    assert_eq!(snapshot.len() % 4096, 32, "{} bytes", snapshot.len());
    assert_eq!(&snapshot[16..20], &0xED0CDAEDu32.to_le_bytes());
    source.shutdown().await;

    let target = start_real(backend, 1, 0).await;
    let mut m = machine(target.endpoint(0).unwrap(), admin()).await;
    let upload = |bytes: Vec<u8>| {
        let chunks: Vec<ferro_talos_proto::common::Data> = bytes
            .chunks(64 * 1024)
            .map(|c| ferro_talos_proto::common::Data {
                metadata: None,
                bytes: c.to_vec(),
            })
            .collect();
        tokio_stream::iter(chunks)
    };
    // A damaged snapshot: etcd's restore refuses it and the etcd service fails with why.
    let mut damaged = snapshot.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    m.etcd_recover(upload(damaged)).await.unwrap();
    m.bootstrap(BootstrapRequest {
        recover_etcd: true,
        recover_skip_hash_check: false,
    })
    .await
    .unwrap();
    let service = m.service_list(()).await.unwrap().into_inner().messages[0]
        .services
        .iter()
        .find(|s| s.id == "etcd")
        .cloned()
        .unwrap();
    assert_eq!(service.state, "Failed", "{service:?}");
    let why = &service.events.as_ref().unwrap().events.last().unwrap().msg;
    assert!(
        why.starts_with("Failed to run pre stage: error recovering from the snapshot: ")
            && why.contains("sha256"),
        "{why}"
    );
    // After a reboot the node recovers from the snapshot as it was: the key is back.
    target.reboot(0).unwrap();
    wait_back(&target, 0).await;
    let mut m = machine(target.endpoint(0).unwrap(), admin()).await;
    m.etcd_recover(upload(snapshot)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = m
            .bootstrap(BootstrapRequest {
                recover_etcd: true,
                recover_skip_hash_check: false,
            })
            .await;
        match r {
            Ok(_) => break,
            Err(e) if e.code() == Code::FailedPrecondition && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let restored = voting_members(&mut m, 1).await;
    assert_eq!(restored[0].hostname, target.node(0).unwrap().hostname);
    assert_eq!(
        gateway(&target, 0)
            .get("/registry/ferro/marker")
            .unwrap()
            .as_deref(),
        Some("kept")
    );
    target.shutdown().await;
}

/// The etcd and Kubernetes processes of a simulator killed with SIGKILL (no chance to stop them)
/// end with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_simulator_leaves_no_etcd_or_kubernetes_behind() {
    use ferro_talos_proto::machine::apply_configuration_request::Mode;
    use std::process::{Command, Stdio};
    let Some((etcd, _)) = ferro_talos_oracle::etcd_programs() else {
        return;
    };
    let Some(apiserver) = ferro_talos_oracle::kube_apiserver_program() else {
        return;
    };
    let etcd = etcd.canonicalize().unwrap();
    let upstream = etcd.parent().unwrap().to_path_buf();
    let programs: Vec<std::path::PathBuf> = [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    .iter()
    .map(|p| {
        upstream.join(format!(
            "{p}-{}",
            ferro_talos_oracle::KUBE_APISERVER_VERSION
        ))
    })
    .collect();
    assert_eq!(apiserver.canonicalize().unwrap(), programs[0]);
    let b: [u8; 2] = rand::random();
    let base = format!("127.{}.{}.1", 200 + b[0] % 50, b[1]);
    let port = 20000 + rand::random::<u16>() % 30000;
    let mut sim = Command::new(env!("CARGO_BIN_EXE_talos-sim"))
        .args(["--control-planes", "1", "--base-address", &base])
        .args(["--port", &port.to_string(), "--bootstrap-settle-ms", "0"])
        .args([
            "--backend",
            "real",
            "--kubernetes",
            "real",
            "--upstream-dir",
        ])
        .arg(&upstream)
        // Should this test fail half-way, the simulator still ends with it.
        .args(["--parent-pid", &std::process::id().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(sim.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("READY "), "{line}");
    let ep: std::net::SocketAddr = format!("{base}:{port}").parse().unwrap();
    let mut m = machine(ep, insecure()).await;
    m.apply_configuration(apply_req(&CP, Mode::Auto, false))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut m = machine(ep, admin()).await;
        match m.bootstrap(BootstrapRequest::default()).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "{e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The processes the simulator started running `program`: upstream's etcd member, and the
    // control plane's kube-apiserver, kube-controller-manager and kube-scheduler.
    let child_running = |program: &std::path::Path| -> Option<u32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", sim.id())).ok()?;
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
            .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .filter_map(|pid| pid.parse().ok())
            .find(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == program)
            })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut children = Vec::new();
    for program in std::iter::once(&etcd).chain(&programs) {
        let pid = loop {
            if let Some(pid) = child_running(program) {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "no {} process under the simulator",
                program.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        children.push((program.clone(), pid));
    }
    sim.kill().unwrap();
    sim.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // Gone, or a zombie only until its parent (init) reaps it.
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    for (program, pid) in children {
        while alive(pid) {
            assert!(
                Instant::now() < deadline,
                "{} ({pid}) outlived the simulator",
                program.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A control plane reset without leaving etcd (EPHEMERAL wiped, not graceful) leaves its member
/// registered; booting again with no data, its etcd removes the member of its hostname and joins
/// under a new id (`addMember` in services/etcd.go @ v1.14.1). The same steps on both backends.
async fn wiped_member_rejoins_under_a_new_id(backend: Backend) {
    let cluster = start_real(backend, 3, 0).await;
    let host = |i: usize| cluster.node(i).unwrap().hostname;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    let before = voting_members(&mut m, 3).await;
    let old = id_of(&before, &host(2));
    let mut third = machine(cluster.endpoint(2).unwrap(), admin()).await;
    third
        .reset(ResetRequest {
            graceful: false,
            reboot: true,
            system_partitions_to_wipe: vec![ResetPartitionSpec {
                label: "EPHEMERAL".into(),
                wipe: true,
            }],
            user_disks_to_wipe: vec![],
            mode: 0,
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let now = list(&mut m).await;
        let rejoined = now
            .iter()
            .any(|e| e.hostname == host(2) && e.id != old && !e.is_learner);
        if rejoined && now.len() == 3 {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "no rejoin under a new id: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(after.iter().all(|e| e.id != old), "{after:?}");
    assert_eq!(id_of(&after, &host(0)), id_of(&before, &host(0)));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_wiped_member_rejoins_under_a_new_id() {
    wiped_member_rejoins_under_a_new_id(Backend::Model).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_wiped_member_rejoins_under_a_new_id() {
    let Some(backend) = real_backend() else {
        return;
    };
    wiped_member_rejoins_under_a_new_id(backend).await;
}

/// A control plane whose own etcd is down still answers the cluster's member list (Talos's
/// client asks the other control planes' members), but not the local one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_member_list_from_a_node_whose_etcd_is_down() {
    let Some(backend) = real_backend() else {
        return;
    };
    let cluster = start_real(backend, 3, 0).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    voting_members(&mut m, 3).await;
    cluster.update_faults(1, |f| f.etcd_down = true).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut sick = machine(cluster.endpoint(1).unwrap(), admin()).await;
    let mut req = tonic::Request::new(EtcdMemberListRequest::default());
    req.set_timeout(Duration::from_secs(5));
    let started = Instant::now();
    let answer = sick.etcd_member_list(req).await;
    let members = answer.expect("the cluster's list").into_inner().messages[0]
        .members
        .len();
    assert_eq!(members, 3);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    cluster.shutdown().await;
}

/// A cluster kept in a state directory keeps its etcd there: a simulator started again on the
/// directory brings the same members back, with their data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_members_come_back_with_the_state_directory() {
    let Some(backend) = real_backend() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = ferro_talos_sim::SimConfig {
        backend,
        state_dir: Some(dir.path().to_path_buf()),
        ..config(1, 0)
    };
    let cluster = Cluster::start(cfg.clone()).await.expect("cluster starts");
    configure(&cluster, 0, &CP).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    let before = voting_members(&mut m, 1).await;
    gateway(&cluster, 0)
        .put("/registry/ferro/kept", "yes")
        .unwrap();
    cluster.shutdown().await;
    assert!(dir.path().join("etcd/node-0/member").is_dir());

    let cluster = Cluster::start(cfg)
        .await
        .expect("the stored cluster comes back");
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    let after = voting_members(&mut m, 1).await;
    assert_eq!(after[0].id, before[0].id, "the same member");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match gateway(&cluster, 0).get("/registry/ferro/kept") {
            Ok(v) => {
                assert_eq!(v.as_deref(), Some("yes"));
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.shutdown().await;
}

/// The control planes that join after the bootstrap are learners first, then voting members
/// (Talos's `addMember` and `promoteMember`). The same steps on both backends.
async fn joining_control_planes_are_learners_first(backend: Backend) {
    let cluster = start_real(backend, 3, 0).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    let mut seen_learner = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = list(&mut m).await;
        seen_learner |= now.iter().any(|e| e.is_learner);
        if now.len() == 3 && now.iter().all(|e| !e.is_learner && !e.hostname.is_empty()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not three voting members: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen_learner, "no member was ever a learner");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_joining_control_planes_are_learners_first() {
    joining_control_planes_are_learners_first(Backend::Model).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_joining_control_planes_are_learners_first() {
    let Some(backend) = real_backend() else {
        return;
    };
    joining_control_planes_are_learners_first(backend).await;
}
