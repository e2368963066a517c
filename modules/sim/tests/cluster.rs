//! End-to-end behaviour of the simulated cluster through the generated tonic clients.

mod common;

use std::io::Read;
use std::time::Duration;

use common::*;
use ferro_talos_proto::cluster::{
    HealthCheckRequest, cluster_service_client::ClusterServiceClient,
};
use ferro_talos_proto::cosi::resource::{
    EventType, GetRequest, ListRequest, WatchRequest, state_client::StateClient,
};
use ferro_talos_proto::machine::apply_configuration_request::Mode;
use ferro_talos_proto::machine::image_service_client::ImageServiceClient;
use ferro_talos_proto::machine::lifecycle_service_client::LifecycleServiceClient;
use ferro_talos_proto::machine::lifecycle_service_install_progress::Response as Progress;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::*;
use ferro_talos_proto::resource::config::MachineConfigSpec;
use ferro_talos_proto::resource::runtime::{MachineStage, MachineStatusSpec};
use prost::Message;
use tonic::Code;

async fn boot_id(m: &mut MachineServiceClient<tonic::transport::Channel>) -> String {
    let mut s = m
        .read(ReadRequest {
            path: "/proc/sys/kernel/random/boot_id".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(d) = s.message().await.unwrap() {
        assert!(d.bytes.len() <= 1024);
        out.extend(d.bytes);
    }
    String::from_utf8(out).unwrap()
}

async fn refused(ep: std::net::SocketAddr, tls: rustls::ClientConfig) -> bool {
    match channel(ep, tls).await {
        Err(_) => true,
        Ok(ch) => MachineServiceClient::new(ch).version(()).await.is_err(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_then_mtls_and_exact_config_bytes() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    let mut m = machine(ep, insecure()).await;

    let v = m.version(()).await.unwrap().into_inner();
    assert_eq!(v.messages[0].version.as_ref().unwrap().tag, "v1.13.6");
    assert!(
        v.messages[0].features.is_none(),
        "no features in maintenance"
    );
    assert!(v.messages[0].metadata.is_none());

    // Routing metadata is ignored in maintenance mode.
    let h = m
        .hostname(with_nodes((), &["10.9.9.9"]))
        .await
        .unwrap()
        .into_inner();
    assert!(h.messages[0].metadata.is_none());

    let e = m.bootstrap(BootstrapRequest::default()).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not authorized")
    );
    let e = m
        .etcd_member_list(EtcdMemberListRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert_eq!(
        e.message(),
        "machine type is not set, cannot use member list API"
    );

    let bad = m
        .apply_configuration(apply_req("machine: [", Mode::Auto, false))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    // Talos keeps the bytes exactly, comments included.
    let data = format!("# applied by a test\n{}", *CP);
    let r = m
        .apply_configuration(apply_req(&data, Mode::Reboot, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.messages[0].mode, Mode::NoReboot as i32);
    assert_eq!(
        r.messages[0].mode_details,
        "Applied configuration without a reboot"
    );
    wait_back(&cluster, 0).await;

    // The maintenance connection style no longer works: mTLS is required.
    // With TLS 1.3 the client learns it from the "certificate required" alert.
    assert!(
        refused(ep, insecure()).await,
        "a client without certificate must be refused"
    );
    let tcp = tokio::net::TcpStream::connect(ep).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(ep.ip().into());
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(insecure()))
        .connect(name, tcp)
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let err = tokio::io::AsyncReadExt::read(&mut tls, &mut buf)
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("CertificateRequired"),
        "{err:?}"
    );

    let ch = channel(ep, admin()).await.unwrap();
    let mut m = MachineServiceClient::new(ch.clone());
    let v = m.version(()).await.unwrap().into_inner();
    assert_eq!(v.messages[0].features.as_ref().map(|f| f.rbac), Some(true));
    assert_eq!(v.messages[0].platform.as_ref().unwrap().name, "metal");

    let mut cosi = StateClient::new(ch.clone());
    let got = cosi
        .get(active_config_request())
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let md = got.metadata.unwrap();
    assert_eq!(
        md.annotations
            .get("talos.dev/yaml-spec")
            .map(String::as_str),
        Some("1")
    );
    let spec = got.spec.unwrap();
    let decoded = MachineConfigSpec::decode(spec.proto_spec.as_slice()).unwrap();
    assert_eq!(decoded.yaml_marshalled, data.as_bytes());
    let yaml_back: String = serde_saphyr::from_str(&spec.yaml_spec).unwrap();
    assert_eq!(yaml_back, data);

    // COSI rejects `nodes`.
    let mut req = tonic::Request::new(active_config_request());
    req.metadata_mut()
        .insert("nodes", ep.ip().to_string().parse().unwrap());
    let e = cosi.get(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with(
            "one-2-many proxying is not supported for method /cosi.resource.State/Get"
        )
    );

    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_are_enforced() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let ep = cluster.endpoint(0).unwrap();

    let ch = channel(ep, client_tls(&["os:reader"])).await.unwrap();
    let mut reader = MachineServiceClient::new(ch.clone());
    assert!(reader.version(()).await.is_ok());
    let e = reader
        .apply_configuration(apply_req(&CP, Mode::Auto, false))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not authorized")
    );
    let e = reader.reboot(RebootRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = StateClient::new(ch)
        .get(active_config_request())
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not authorized")
    );

    // etcd:backup may list members but not read the config. Before bootstrap the list waits
    // for etcd until the caller's deadline (boot_stage.rs), so it is asked with a short one.
    let mut backup = machine(ep, client_tls(&["os:etcd:backup"])).await;
    let mut req = tonic::Request::new(EtcdMemberListRequest::default());
    req.set_timeout(Duration::from_millis(500));
    let e = backup.etcd_member_list(req).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "authorized, but etcd not bootstrapped: {e:?}"
    );
    let e = backup.hostname(()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // A certificate of the right CA but with the ServerAuth EKU is refused.
    let (ca, key) = os_ca();
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let server_cert = ferro_talos_sim::pki::issue_server_cert(&ca, &key, "x", &[ip], &[]).unwrap();
    let wrong_eku = mtls(&ca, &server_cert.cert_pem, &server_cert.key_pem);
    assert!(
        refused(ep, wrong_eku).await,
        "ServerAuth-only client certificate must be refused"
    );
    // A certificate from another CA is refused.
    let (_, other) = ferro_talos_sim::pki::self_signed_maintenance(&[ip], &[]).unwrap();
    assert!(refused(ep, mtls(&ca, &other.cert_pem, &other.key_pem)).await);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_etcd_members_and_routing() {
    let cluster = start(3, 1).await;
    for i in 0..3 {
        configure(&cluster, i, &CP).await;
    }
    configure(&cluster, 3, &WORKER).await;
    let ep0 = cluster.endpoint(0).unwrap();
    let ip = |i: usize| cluster.endpoint(i).unwrap().ip().to_string();
    let mut m = machine(ep0, admin()).await;

    // Before bootstrap no etcd answers: the list waits until the caller's deadline
    // (`NewClient` in internal/pkg/etcd/etcd.go @ v1.14.1; boot_stage.rs).
    let mut req = tonic::Request::new(EtcdMemberListRequest::default());
    req.set_timeout(Duration::from_millis(500));
    let e = m.etcd_member_list(req).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );

    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    let e = m.bootstrap(BootstrapRequest::default()).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::AlreadyExists, "etcd data directory is not empty")
    );
    // The other control planes joined, so they refuse as well (through `node` routing).
    let e = m
        .bootstrap(with_node(BootstrapRequest::default(), &ip(1)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists);

    let list = m
        .etcd_member_list(EtcdMemberListRequest::default())
        .await
        .unwrap()
        .into_inner();
    let members = &list.messages[0].members;
    assert_eq!(members.len(), 3);
    let mut peers: Vec<String> = members.iter().map(|m| m.peer_urls[0].clone()).collect();
    peers.sort();
    let mut want: Vec<String> = (0..3).map(|i| format!("https://{}:2380", ip(i))).collect();
    want.sort();
    assert_eq!(peers, want);
    assert!(
        members
            .iter()
            .all(|m| m.client_urls[0].ends_with(":2379") && !m.hostname.is_empty())
    );

    // Worker: etcd APIs are control-plane only, through one-to-one routing.
    let e = m
        .etcd_member_list(with_node(EtcdMemberListRequest::default(), &ip(3)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert_eq!(
        e.message(),
        "member list is only available on control plane nodes"
    );

    // One-to-many: metadata.hostname is the target string; failures become error items.
    cluster.update_faults(2, |f| f.unreachable = true).unwrap();
    let v = m
        .version(with_nodes((), &[&ip(0), &ip(3), &ip(2)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.messages.len(), 3);
    let hosts: Vec<&str> = v
        .messages
        .iter()
        .map(|x| x.metadata.as_ref().unwrap().hostname.as_str())
        .collect();
    assert_eq!(hosts, vec![ip(0).as_str(), ip(3).as_str(), ip(2).as_str()]);
    let failed = v.messages[2].metadata.as_ref().unwrap();
    assert!(
        failed.error.contains("connection refused"),
        "{}",
        failed.error
    );
    assert_eq!(
        failed.status.as_ref().unwrap().code,
        Code::Unavailable as i32
    );
    assert!(v.messages[2].version.is_none());
    // One-to-one passes the reply through without metadata.
    let v = m.version(with_node((), &ip(3))).await.unwrap().into_inner();
    assert!(v.messages[0].metadata.is_none());
    cluster.update_faults(2, |f| f.unreachable = false).unwrap();

    // A worker cannot forward.
    let mut w = machine(cluster.endpoint(3).unwrap(), admin()).await;
    let e = w.version(with_node((), &ip(0))).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "no request forwarding")
    );
    assert!(
        w.version(with_nodes((), &[&ip(3)])).await.is_ok(),
        "naming itself is served locally"
    );

    // Health check passes once everything is up and bootstrapped.
    let mut health = ClusterServiceClient::new(channel(ep0, admin()).await.unwrap());
    let mut s = health
        .health_check(HealthCheckRequest {
            wait_timeout: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            cluster_info: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut lines = Vec::new();
    while let Some(p) = s.message().await.unwrap() {
        lines.push(p.message);
    }
    assert!(lines[0].starts_with("discovered nodes: [\""), "{lines:?}");
    assert!(lines.contains(&"waiting for etcd to be healthy: OK".to_string()));
    assert_eq!(
        lines.last().unwrap(),
        "waiting for all k8s nodes to report schedulable: OK"
    );

    // Faults: etcd member down fails the health check.
    cluster.update_faults(1, |f| f.etcd_down = true).unwrap();
    let mut s = health
        .health_check(HealthCheckRequest {
            wait_timeout: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            cluster_info: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut last = String::new();
    let err = loop {
        match s.message().await {
            Ok(Some(p)) => last = p.message,
            Ok(None) => panic!("health check passed with etcd down"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(err.message(), "context deadline exceeded");
    assert!(
        last.starts_with("waiting for etcd to be healthy: "),
        "{last}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_modes_and_dry_run_text() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;

    let same = m
        .apply_configuration(apply_req(&CP, Mode::Auto, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        same.messages[0].mode_details,
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\nNo changes."
    );

    let live = CP.replace("certSANs: []", "certSANs:\n        - 10.0.0.1");
    let dry = m
        .apply_configuration(apply_req(&live, Mode::Auto, true))
        .await
        .unwrap()
        .into_inner();
    let d = &dry.messages[0];
    assert_eq!(d.mode, Mode::NoReboot as i32);
    assert!(
        d.mode_details.starts_with(
            "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n--- a\n+++ b\n@@ "
        ),
        "{}",
        d.mode_details
    );
    assert!(
        d.mode_details.contains("+        - 10.0.0.1"),
        "{}",
        d.mode_details
    );

    let token = format!("token: {}", common::SAMPLE.bundle.trustd_info.token);
    let reboot = CP.replace(&token, "token: aaaaaa.bbbbbbbbbbbbbbbb");
    let e = m
        .apply_configuration(apply_req(&reboot, Mode::NoReboot, false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with(
        "this config change can't be applied in immediate mode\ndiff:\n--- a\n+++ b\n"
    ));
    let dry = m
        .apply_configuration(apply_req(&reboot, Mode::Auto, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dry.messages[0].mode, Mode::Reboot as i32);
    assert!(dry.messages[0].mode_details.starts_with(
        "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run)."
    ));

    // Staged: stored now, active after the next reboot.
    let staged = m
        .apply_configuration(apply_req(&reboot, Mode::Staged, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        staged.messages[0].mode_details,
        "Staged configuration to be applied after the next reboot"
    );
    assert!(cluster.node(0).unwrap().has_staged_config);

    // Try: applied now, reverted after the timeout.
    let mut req = apply_req(&live, Mode::Try, false);
    req.try_mode_timeout = Some(prost_types::Duration {
        seconds: 1,
        nanos: 0,
    });
    let tried = m.apply_configuration(req).await.unwrap().into_inner();
    assert_eq!(
        tried.messages[0].mode_details,
        "Applied configuration without a reboot\nThe config is applied in 'try' mode and will be automatically reverted back in 1s"
    );

    // Invalid configs are rejected with a reason; injected rejection too.
    let e = m
        .apply_configuration(apply_req(
            "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n",
            Mode::Auto,
            false,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("doesn't contain v1alpha1 config"));
    cluster
        .update_faults(0, |f| {
            f.reject_config = Some("1 error occurred:\n\t* simulated rejection\n\n".into())
        })
        .unwrap();
    let e = m
        .apply_configuration(apply_req(&CP, Mode::Auto, false))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::InvalidArgument,
            "1 error occurred:\n\t* simulated rejection\n\n"
        )
    );
    cluster
        .update_faults(0, |f| f.reject_config = None)
        .unwrap();

    // AUTO with a reboot-requiring change reboots; the staged/persisted config becomes active.
    let before = boot_id(&mut m).await;
    let r = m
        .apply_configuration(apply_req(&reboot, Mode::Auto, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.messages[0].mode, Mode::Reboot as i32);
    assert!(r.messages[0].mode_details.starts_with("Applied configuration with a reboot: this config change can't be applied in immediate mode\ndiff:\n"));
    wait_back(&cluster, 0).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    assert_ne!(boot_id(&mut m).await, before);
    assert!(!cluster.node(0).unwrap().has_staged_config);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_and_legacy_upgrades() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let ep = cluster.endpoint(0).unwrap();
    let ch = channel(ep, admin()).await.unwrap();
    let image = "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0";
    let up_req = LifecycleServiceUpgradeRequest {
        containerd: None,
        source: Some(InstallArtifactsSource {
            image_name: image.into(),
        }),
    };
    let mut lc = LifecycleServiceClient::new(ch.clone());
    let e = lc.upgrade(up_req.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert!(e.message().contains("not found in containerd store"));

    let mut img = ImageServiceClient::new(ch.clone());
    let mut pull = img
        .pull(ImageServicePullRequest {
            containerd: None,
            image_ref: image.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(p) = pull.message().await.unwrap() {
        last = p.response;
    }
    assert!(matches!(last, Some(image_service_pull_response::Response::Name(ref n)) if n == image));

    let mut s = lc.upgrade(up_req).await.unwrap().into_inner();
    let mut exit = None;
    while let Some(r) = s.message().await.unwrap() {
        if let Some(Progress::ExitCode(c)) = r.progress.and_then(|p| p.response) {
            exit = Some(c);
        }
    }
    assert_eq!(exit, Some(0));
    let mut m = MachineServiceClient::new(ch);
    let v = m.version(()).await.unwrap().into_inner();
    assert_eq!(
        v.messages[0].version.as_ref().unwrap().tag,
        "v1.13.6",
        "no reboot yet"
    );

    let r = m
        .reboot(RebootRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!r.messages[0].actor_id.is_empty());
    wait_back(&cluster, 0).await;
    let mut m = machine(ep, admin()).await;
    let v = m.version(()).await.unwrap().into_inner();
    assert_eq!(v.messages[0].version.as_ref().unwrap().tag, "v1.14.0");
    assert_eq!(
        cluster.node(0).unwrap().schematic.as_deref(),
        Some("376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba")
    );

    // The schematic is reported as the `schematic` extension, after the image's system extension:
    // extension statuses are numbered in install order (upstream's
    // internal/app/machined/pkg/controllers/runtime/extension_status.go at v1.13.9).
    let mut cosi = StateClient::new(channel(ep, admin()).await.unwrap());
    let mut list = cosi
        .list(ListRequest {
            namespace: "runtime".into(),
            r#type: "ExtensionStatuses.runtime.talos.dev".into(),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut extensions = Vec::new();
    while let Some(item) = list.message().await.unwrap() {
        let r = item.resource.unwrap();
        extensions.push((r.metadata.unwrap().id, r.spec.unwrap().yaml_spec));
    }
    assert_eq!(extensions.len(), 2, "{extensions:?}");
    assert_eq!(extensions[0].0, "0");
    assert!(extensions[0].1.contains("name: iscsi-tools"));
    assert_eq!(extensions[1].0, "1");
    assert!(
        extensions[1]
            .1
            .contains("version: 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba")
    );

    // 1.14 semantics now: REBOOT mode is gone.
    let e = m
        .apply_configuration(apply_req(&CP, Mode::Reboot, false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    // ...refused before the config is validated (`ApplyConfiguration` in v1alpha1_server.go
    // @ v1.14.1), so an invalid config gets the same answer.
    assert!(CP.contains("\npersist: true\n"));
    let invalid = CP.replacen("\npersist: true\n", "\npersist: false\n", 1);
    let e = m
        .apply_configuration(apply_req(&invalid, Mode::Reboot, false))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::Unimplemented,
            "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead"
        )
    );

    // Legacy upgrade: ack + actor id, then a reboot into the new version.
    let r = m
        .upgrade(UpgradeRequest {
            image: "ghcr.io/siderolabs/installer:v1.13.6".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.messages[0].ack, "Upgrade request received");
    assert!(!r.messages[0].actor_id.is_empty());
    wait_back(&cluster, 0).await;
    let mut m = machine(ep, admin()).await;
    let v = m.version(()).await.unwrap().into_inner();
    assert_eq!(v.messages[0].version.as_ref().unwrap().tag, "v1.13.6");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installer_refuses_hosts_out_of_range() {
    let mut cfg = config(1, 0);
    cfg.node_versions.insert(0, "v1.10.7".into());
    let cluster = ferro_talos_sim::Cluster::start(cfg).await.unwrap();
    configure(&cluster, 0, &CP).await;
    let ch = channel(cluster.endpoint(0).unwrap(), admin())
        .await
        .unwrap();
    let image = "ghcr.io/siderolabs/installer:v1.13.6";
    ImageServiceClient::new(ch.clone())
        .pull(ImageServicePullRequest {
            containerd: None,
            image_ref: image.into(),
        })
        .await
        .unwrap();
    let mut s = LifecycleServiceClient::new(ch.clone())
        .upgrade(LifecycleServiceUpgradeRequest {
            containerd: None,
            source: Some(InstallArtifactsSource {
                image_name: image.into(),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut lines = Vec::new();
    let mut exit = None;
    while let Some(r) = s.message().await.unwrap() {
        match r.progress.and_then(|p| p.response) {
            Some(Progress::Message(m)) => lines.push(m),
            Some(Progress::ExitCode(c)) => exit = Some(c),
            None => {}
        }
    }
    assert_eq!(exit, Some(1));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("host version v1.10.7 is too old to upgrade to Talos v1.13.6")),
        "{lines:?}"
    );
    // The legacy API answers first and fails later: tests/upgrade.rs.
    assert_eq!(cluster.node(0).unwrap().version, "v1.10.7");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_kubeconfig_reset_and_reboot_faults() {
    // Bootstrapped: a control plane without etcd would stay BOOTING after its reboot
    // (boot_stage.rs), never RUNNING and ready.
    let cluster = bootstrapped(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    let mut m = machine(ep, admin()).await;

    // Kubeconfig: one Data message, gzip tar with `kubeconfig` (0600).
    let mut s = m.kubeconfig(()).await.unwrap().into_inner();
    let mut msgs = Vec::new();
    while let Some(d) = s.message().await.unwrap() {
        msgs.push(d.bytes);
    }
    assert_eq!(msgs.len(), 1);
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(msgs[0].as_slice()));
    let mut entries = ar.entries().unwrap();
    let mut e = entries.next().unwrap().unwrap();
    assert_eq!(e.path().unwrap().to_str(), Some("kubeconfig"));
    assert_eq!(e.header().mode().unwrap() & 0o777, 0o600);
    let mut text = String::new();
    e.read_to_string(&mut text).unwrap();
    assert!(text.contains("server: https://base:6443"));
    assert!(text.contains("current-context: admin@base"));
    assert!(entries.next().is_none());

    // Read: NotFound for missing files.
    let e = m
        .read(ReadRequest {
            path: "/system/state/config.yaml".into(),
        })
        .await;
    let e = match e {
        Err(e) => e,
        Ok(s) => s.into_inner().message().await.unwrap_err(),
    };
    assert_eq!(e.code(), Code::NotFound);

    // Events: hello first, then the reboot's events with the actor id; after the reboot a
    // replay (tail -1) holds a RUNNING/ready machine status.
    let mut ev = m
        .events(EventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let hello = ev.message().await.unwrap().unwrap();
    assert!(hello.data.unwrap().type_url.is_empty());
    let before = boot_id(&mut m).await;
    let actor = m
        .reboot(RebootRequest::default())
        .await
        .unwrap()
        .into_inner()
        .messages[0]
        .actor_id
        .clone();
    let mut saw_reboot = false;
    while let Ok(Some(e)) = ev.message().await {
        if e.actor_id == actor
            && e.data
                .as_ref()
                .is_some_and(|d| d.type_url == "talos/runtime/machine.SequenceEvent")
        {
            let seq = SequenceEvent::decode(e.data.unwrap().value.as_slice()).unwrap();
            saw_reboot |= seq.sequence == "reboot";
        }
    }
    assert!(saw_reboot, "reboot sequence event with the actor id");
    wait_back(&cluster, 0).await;
    let mut m = machine(ep, admin()).await;
    assert_ne!(boot_id(&mut m).await, before);
    let mut ev = m
        .events(EventsRequest {
            tail_events: -1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    ev.message().await.unwrap();
    let mut running = false;
    for _ in 0..20 {
        // MachineStatus says ready only once the kubelet posted Ready, a moment after the boot.
        let Ok(Ok(Some(e))) = tokio::time::timeout(Duration::from_secs(3), ev.message()).await
        else {
            break;
        };
        if let Some(d) = e
            .data
            .filter(|d| d.type_url == "talos/runtime/machine.MachineStatusEvent")
        {
            let s = MachineStatusEvent::decode(d.value.as_slice()).unwrap();
            if s.stage == machine_status_event::MachineStage::Running as i32
                && s.status.is_some_and(|x| x.ready)
            {
                running = true;
                break;
            }
        }
    }
    assert!(running);

    // The node comes back on another address.
    let new_addr = std::net::Ipv4Addr::from(u32::from(cluster.node(0).unwrap().address) + 200);
    cluster
        .update_faults(0, |f| f.next_address = Some(new_addr))
        .unwrap();
    cluster.reboot(0).unwrap();
    wait_back(&cluster, 0).await;
    assert_eq!(cluster.node(0).unwrap().address, new_addr);
    assert!(
        tokio::net::TcpStream::connect(ep).await.is_err(),
        "old address is gone"
    );
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;

    // A graceful reset of etcd's only member stops at leaving etcd, which etcd refuses (not
    // enough started members): LeaveEtcd fails the Reset sequence before anything is wiped
    // (`v1alpha1_sequencer.go` @ v1.13.9), and machined reboots the node after the fatal error
    // (`internal/app/machined/main.go`): it comes back with its config (tests/power.rs). (Bootstrapped at the
    // start of the test.)
    let maintenance_reset = |graceful: bool| ResetRequest {
        graceful,
        reboot: true,
        system_partitions_to_wipe: ["STATE", "EPHEMERAL"]
            .map(|label| ResetPartitionSpec {
                label: label.into(),
                wipe: true,
            })
            .to_vec(),
        ..Default::default()
    };
    let boot_before = cluster.node(0).unwrap().boot_id;
    m.reset(maintenance_reset(true)).await.unwrap();
    wait_back(&cluster, 0).await;
    let n = cluster.node(0).unwrap();
    assert!(n.up && !n.maintenance && n.etcd_member, "{n:?}");
    assert_ne!(
        n.boot_id, boot_before,
        "machined reboots after an aborted reset"
    );
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;

    // Without leaving etcd: STATE and EPHEMERAL go, back to maintenance mode after the reboot,
    // etcd gone with its only member.
    m.reset(maintenance_reset(false)).await.unwrap();
    wait_back(&cluster, 0).await;
    assert!(cluster.node(0).unwrap().maintenance);
    let mut insecure_m = machine(cluster.endpoint(0).unwrap(), insecure()).await;
    assert!(
        insecure_m.version(()).await.unwrap().into_inner().messages[0]
            .features
            .is_none()
    );

    // A rebuilt node bootstraps a fresh etcd.
    configure(&cluster, 0, &CP).await;
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(BootstrapRequest::default()).await.unwrap();

    // A reboot that never comes back.
    cluster.update_faults(0, |f| f.never_return = true).unwrap();
    cluster.reboot(0).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!cluster.node(0).unwrap().up);
    assert!(
        tokio::net::TcpStream::connect(cluster.endpoint(0).unwrap())
            .await
            .is_err()
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_status_snapshot_health_and_status_watch() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let ep = cluster.endpoint(0).unwrap();
    let ch = channel(ep, admin()).await.unwrap();
    let mut m = MachineServiceClient::new(ch.clone());

    // Before bootstrap: etcd status fails like a refused local connection; health fails.
    let e = m.etcd_status(()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(
        e.message().starts_with("failed to query etcd status: "),
        "{}",
        e.message()
    );
    let services = m.service_list(()).await.unwrap().into_inner();
    let etcd = services.messages[0]
        .services
        .iter()
        .find(|s| s.id == "etcd")
        .unwrap();
    assert_ne!(etcd.state, "Running");
    let mut health = ClusterServiceClient::new(ch.clone());
    let mut s = health
        .health_check(HealthCheckRequest {
            wait_timeout: Some(prost_types::Duration {
                seconds: 0,
                nanos: 300_000_000,
            }),
            cluster_info: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut lines = Vec::new();
    let err = loop {
        match s.message().await {
            Ok(Some(p)) => lines.push(p.message),
            Ok(None) => panic!("health passed before bootstrap: {lines:?}"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("waiting for etcd to be healthy: ") && l.contains("Preparing")),
        "{lines:?}"
    );

    m.bootstrap(BootstrapRequest::default()).await.unwrap();
    let st = m.etcd_status(()).await.unwrap().into_inner();
    let ms = st.messages[0].member_status.as_ref().unwrap();
    assert_ne!(ms.member_id, 0);
    assert_eq!(ms.leader, ms.member_id);

    let mut snap = m
        .etcd_snapshot(EtcdSnapshotRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut bytes = 0;
    while let Some(d) = snap.message().await.unwrap() {
        bytes += d.bytes.len();
    }
    assert!(bytes > 0);
    let e = machine(ep, client_tls(&["os:reader"]))
        .await
        .etcd_snapshot(EtcdSnapshotRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // Health fault injection.
    cluster.set_health_failure(Some("node talos-1 is not ready".into()));
    let mut s = health
        .health_check(HealthCheckRequest {
            wait_timeout: Some(prost_types::Duration {
                seconds: 0,
                nanos: 300_000_000,
            }),
            cluster_info: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut progress = Vec::new();
    let err = loop {
        match s.message().await {
            Ok(Some(p)) => progress.push(p.message),
            Ok(None) => panic!("health passed despite the fault"),
            Err(e) => break e,
        }
    };
    // Upstream returns the bare context error when the wait runs out
    // (internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go at v1.13.9): the
    // failing check is only in the last progress line.
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(err.message(), "context deadline exceeded");
    assert_eq!(
        progress.last().map(String::as_str),
        Some("waiting for all k8s nodes to report ready: node talos-1 is not ready")
    );
    cluster.set_health_failure(None);

    // Single-resource watch: empty first message, then the current state.
    let mut w = StateClient::new(ch)
        .watch(WatchRequest {
            namespace: "runtime".into(),
            r#type: "MachineStatuses.runtime.talos.dev".into(),
            id: Some("machine".into()),
            options: None,
            api_version: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(w.message().await.unwrap().unwrap().event.is_empty());
    let first = w.message().await.unwrap().unwrap();
    assert_eq!(first.event[0].event_type, EventType::Created as i32);
    let spec = first.event[0]
        .resource
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap();
    let status = MachineStatusSpec::decode(spec.proto_spec.as_slice()).unwrap();
    assert_eq!(status.stage, MachineStage::Running as i32);
    assert!(spec.yaml_spec.starts_with("stage: running\n"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_staged_maintenance_and_moved_targets() {
    let cluster = start(2, 0).await;
    let ep1 = cluster.endpoint(1).unwrap();

    // STAGED in maintenance only writes the persistent config (upstream v1.13.9
    // v1alpha1_server.go ApplyConfiguration: SetPersistedConfig, no SetConfig), so the node stays
    // in maintenance mode; booted from installation media it has no STATE partition to keep it
    // on, so after a reboot it is in maintenance mode again.
    let mut m1 = machine(ep1, insecure()).await;
    let r = m1
        .apply_configuration(apply_req(&CP, Mode::Staged, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.messages[0].mode, Mode::Staged as i32);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cluster.node(1).unwrap().maintenance);
    assert!(cluster.node(1).unwrap().has_staged_config);
    cluster.reboot(1).unwrap();
    wait_back(&cluster, 1).await;
    assert!(cluster.node(1).unwrap().maintenance);

    configure(&cluster, 0, &CP).await;
    let ep0 = cluster.endpoint(0).unwrap();

    // Roles passed in talos-role count only for an os:impersonator peer.
    let mut imp = machine(ep0, client_tls(&["os:impersonator"])).await;
    let mut req = tonic::Request::new(());
    req.metadata_mut()
        .insert("talos-role", "os:reader".parse().unwrap());
    assert!(imp.version(req).await.is_ok());
    let mut req = tonic::Request::new(apply_req(&CP, Mode::Auto, true));
    req.metadata_mut()
        .insert("talos-role", "os:reader".parse().unwrap());
    assert_eq!(
        imp.apply_configuration(req).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    let mut reader = machine(ep0, client_tls(&["os:reader"])).await;
    let mut req = tonic::Request::new(BootstrapRequest::default());
    req.metadata_mut()
        .insert("talos-role", "os:admin".parse().unwrap());
    let e = reader.bootstrap(req).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not authorized")
    );

    // A node that moved: its old address refuses, its new one answers.
    let old_ip = ep1.ip().to_string();
    let new_addr = std::net::Ipv4Addr::from(u32::from(cluster.node(1).unwrap().address) + 100);
    cluster
        .update_faults(1, |f| f.next_address = Some(new_addr))
        .unwrap();
    cluster.reboot(1).unwrap();
    wait_back(&cluster, 1).await;
    let mut m0 = machine(ep0, admin()).await;
    let e = m0.hostname(with_node((), &old_ip)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(
        e.message().contains("connection refused"),
        "{}",
        e.message()
    );
    // Its new address is dialled: node 1 is still in maintenance mode (staged above), whose
    // certificate comes from a self-signed CA of its own (secrets/maintenance_root.go), and the
    // forwarding apid trusts only the cluster's OS CA (apid pkg/provider/provider.go ClientConfig,
    // both at v1.13.9): the handshake fails, as it does on real Talos.
    let e = m0
        .hostname(with_node((), &new_addr.to_string()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(
        e.message()
            .contains("x509: certificate signed by unknown authority"),
        "{}",
        e.message()
    );
    cluster.shutdown().await;
}

/// A COSI Get of the active machine config (`config/MachineConfigs.config.talos.dev` ID `v1alpha1`).
fn active_config_request() -> GetRequest {
    GetRequest {
        namespace: "config".into(),
        r#type: "MachineConfigs.config.talos.dev".into(),
        id: "v1alpha1".into(),
        options: None,
    }
}

/// The active machine config's bytes (`config/MachineConfigs.config.talos.dev` ID `v1alpha1`).
async fn active_config(ch: &tonic::transport::Channel) -> Vec<u8> {
    let got = StateClient::new(ch.clone())
        .get(active_config_request())
        .await
        .unwrap()
        .into_inner();
    let spec = got.resource.unwrap().spec.unwrap();
    MachineConfigSpec::decode(spec.proto_spec.as_slice())
        .unwrap()
        .yaml_marshalled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_mode_reverts_after_the_timeout() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let ch = channel(cluster.endpoint(0).unwrap(), admin())
        .await
        .unwrap();
    let live = CP.replace("certSANs: []", "certSANs:\n        - 10.0.0.1");
    let mut req = apply_req(&live, Mode::Try, false);
    req.try_mode_timeout = Some(prost_types::Duration {
        seconds: 0,
        nanos: 600_000_000,
    });
    let r = MachineServiceClient::new(ch.clone())
        .apply_configuration(req)
        .await
        .unwrap()
        .into_inner();
    assert!(
        r.messages[0]
            .mode_details
            .ends_with("reverted back in 600ms"),
        "{}",
        r.messages[0].mode_details
    );
    assert_eq!(active_config(&ch).await, live.as_bytes());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(active_config(&ch).await, CP.as_bytes());
    cluster.shutdown().await;
}

/// A dry run or a refused apply in another mode cancels a pending TRY rollback on 1.13.9 (the
/// cancel comes before the config is decoded) and not on 1.14.1 (it comes after validation and
/// after the dry-run answer): `ApplyConfiguration` in v1alpha1_server.go at both tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cancels_a_pending_try_rollback_depends_on_the_release() {
    for (release, cancelled) in [("v1.13.9", true), ("v1.14.1", false)] {
        let mut cfg = config(1, 0);
        cfg.node_versions.insert(0, release.into());
        let cluster = ferro_talos_sim::Cluster::start(cfg).await.unwrap();
        configure(&cluster, 0, &CP).await;
        let ch = channel(cluster.endpoint(0).unwrap(), admin())
            .await
            .unwrap();
        let mut m = MachineServiceClient::new(ch.clone());
        let live = CP.replace("certSANs: []", "certSANs:\n        - 10.0.0.1");
        let mut tried = apply_req(&live, Mode::Try, false);
        tried.try_mode_timeout = Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        });
        m.apply_configuration(tried).await.unwrap();
        // A dry run of the config that was running before, then a config that fails validation.
        m.apply_configuration(apply_req(&CP, Mode::NoReboot, true))
            .await
            .unwrap();
        let invalid = CP.replacen("\npersist: true\n", "\npersist: false\n", 1);
        let refused = m
            .apply_configuration(apply_req(&invalid, Mode::NoReboot, false))
            .await
            .unwrap_err();
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{release}: {refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(1600)).await;
        let running = active_config(&ch).await;
        let expected = if cancelled { &live } else { &CP.to_string() };
        assert_eq!(
            String::from_utf8(running).unwrap(),
            *expected,
            "{release}: the tried config should {}",
            if cancelled { "stay" } else { "be rolled back" }
        );
        cluster.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_configured_before_any_control_plane_gets_a_signed_cert_later() {
    let cluster = start(1, 1).await;
    configure(&cluster, 1, &WORKER).await;
    let wep = cluster.endpoint(1).unwrap();
    // No control plane has the CA key yet: the worker's certificate does not verify.
    assert!(
        channel(wep, admin()).await.is_err()
            || machine(wep, admin()).await.version(()).await.is_err()
    );
    configure(&cluster, 0, &CP).await;
    let v = machine(wep, admin())
        .await
        .version(())
        .await
        .unwrap()
        .into_inner();
    assert!(v.messages[0].features.is_some());
    cluster.shutdown().await;
}
