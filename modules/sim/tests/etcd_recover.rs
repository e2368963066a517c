//! EtcdRecover as Talos takes an upload (`internal/app/machined/internal/server/v1alpha1/
//! v1alpha1_server.go` EtcdRecover @ v1.13.9 and @ v1.14.1): the precondition and control-plane
//! checks come before the stream is read; the stream is then taken as it comes, whatever its size,
//! with no deadline but the caller's; only a complete upload counts. At v1.13.9 an upload truncates
//! `/var/lib/etcd.snapshot` as it starts and removes it when it breaks; at v1.14.1 it is written
//! to a temporary file and renamed into place once complete, so a broken one keeps the earlier
//! upload. grpc-go's server fails `Recv` with Canceled when the client resets the stream.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferro_talos_proto::common::Data;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::*;
use sha2::{Digest, Sha256};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// A snapshot as an etcd server saves one: a bbolt meta page's magic at offset 16, whole pages,
/// and the SHA-256 of the database appended (etcd v3.6.12 `v3rpc/maintenance.go`).
fn snapshot(pages: usize) -> Vec<u8> {
    let mut db = vec![0u8; pages * 4096];
    db[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
    let sum = Sha256::digest(&db);
    db.extend_from_slice(&sum);
    db
}

/// Uploads `data` in 16 KiB messages under a 30 s deadline. Complete, it ends the stream and
/// returns the answer; otherwise it resets the call once the messages are sent (a client whose
/// deadline passed), and returns None.
async fn upload(
    m: &mut MachineServiceClient<Channel>,
    data: &[u8],
    complete: bool,
) -> Option<Result<(), Status>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for c in data.chunks(16 * 1024) {
        tx.send(Data {
            metadata: None,
            bytes: c.to_vec(),
        })
        .unwrap();
    }
    let mut req = tonic::Request::new(UnboundedReceiverStream::new(rx));
    req.set_timeout(Duration::from_secs(30));
    let call = m.etcd_recover(req);
    if complete {
        drop(tx);
        return Some(call.await.map(|_| ()));
    }
    let cut = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(cut.is_err(), "an upload that never ended was answered");
    drop(tx);
    None
}

/// Bootstraps etcd from the upload, as `talosctl bootstrap --recover-from` does after it, and says
/// how the etcd service took it: `Running`, or `Failed: <its message>`.
async fn recover(m: &mut MachineServiceClient<Channel>) -> String {
    let req = BootstrapRequest {
        recover_etcd: true,
        recover_skip_hash_check: false,
    };
    for _ in 0..100 {
        match m.bootstrap(req).await {
            Ok(_) => break,
            Err(s) if s.code() == Code::FailedPrecondition => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(s) => panic!("bootstrap: {s:?}"),
        }
    }
    let services = m.service_list(()).await.unwrap().into_inner().messages;
    let etcd = services[0]
        .services
        .iter()
        .find(|s| s.id == "etcd")
        .unwrap();
    match etcd.state.as_str() {
        "Failed" => {
            let events = etcd.events.as_ref().unwrap();
            format!("Failed: {}", events.events.last().unwrap().msg)
        }
        state => state.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_upload_keeps_nothing_at_1_13_and_the_earlier_upload_at_1_14() {
    for (version, after_a_broken_upload) in [
        (
            "v1.13.9",
            "Failed: Failed to run pre stage: error verifying snapshot: stat /var/lib/etcd.snapshot: no such file or directory",
        ),
        ("v1.14.1", "Running"),
    ] {
        let mut cfg = config(1, 0);
        cfg.talos_version = version.into();
        let cluster = ferro_talos_sim::Cluster::start(cfg).await.unwrap();
        configure(&cluster, 0, &CP).await;
        let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
        upload(&mut m, &snapshot(64), true).await.unwrap().unwrap();
        // A second upload, reset half-way.
        assert!(
            upload(&mut m, &snapshot(64)[..100_000], false)
                .await
                .is_none()
        );
        assert_eq!(recover(&mut m).await, after_a_broken_upload, "{version}");
        cluster.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_checked_before_it_is_read_and_read_at_the_link_s_pace() {
    let cluster = start(1, 1).await;
    configure(&cluster, 0, &CP).await;
    configure(&cluster, 1, &WORKER).await;

    // A worker refuses at once, while the client still has the stream open.
    let mut worker = machine(cluster.endpoint(1).unwrap(), admin()).await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Data>();
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        worker.etcd_recover(UnboundedReceiverStream::new(rx)),
    )
    .await
    .expect("refused before the stream ends")
    .unwrap_err();
    drop(tx);
    assert_eq!(
        (refused.code(), refused.message()),
        (
            Code::Unimplemented,
            "etcd recover is only available on control plane nodes"
        )
    );

    // A link of 256 KiB/s takes 2 s for 512 KiB; the node got the caller's deadline.
    cluster
        .update_faults(0, |f| f.upload_bytes_per_sec = Some(256 * 1024))
        .unwrap();
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    let started = Instant::now();
    upload(&mut m, &snapshot(128), true).await.unwrap().unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert_eq!(
        cluster.last_deadline("/machine.MachineService/EtcdRecover"),
        Some(Duration::from_secs(30))
    );
    assert_eq!(recover(&mut m).await, "Running");
}
