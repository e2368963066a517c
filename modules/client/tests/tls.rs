//! End-to-end tests of the client against a tiny in-test apid stand-in: a tonic
//! server with the generated MachineService stubs behind tokio-rustls, on
//! 127.0.0.1:0, with a throw-away test CA. Proves mutual TLS with Ed25519 keys
//! (including Talos's `ED25519 PRIVATE KEY` label), `node` metadata, maintenance
//! connections, the mode probe, TLS error translation, streams and reboot waiting.

use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferro_talos_client::proto::common::Data;
use ferro_talos_client::proto::machine::machine_service_server::{
    MachineService, MachineServiceServer,
};
use ferro_talos_client::proto::machine::*;
use ferro_talos_client::{
    Apply, ApplyMode, ConnectOptions, Credentials, ErrorKind, NodeMode, TalosClient, probe,
    spki_fingerprint, wait_for_reboot,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ED25519,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

// ---------- test PKI ----------

struct TestCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new() -> TestCa {
        let key = KeyPair::generate_for(&PKCS_ED25519).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "talos");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// (cert PEM, key PEM) for a server with IP SAN 127.0.0.1.
    fn server(&self) -> (String, String) {
        let key = KeyPair::generate_for(&PKCS_ED25519).unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Talos-style admin client certificate; the key uses Talos's PEM label.
    fn client(&self) -> (String, String) {
        let key = KeyPair::generate_for(&PKCS_ED25519).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "os:admin");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let talos_key = key
            .serialize_pem()
            .replace("PRIVATE KEY-----", "ED25519 PRIVATE KEY-----");
        (cert.pem(), talos_key)
    }

    fn credentials(&self) -> Credentials {
        let (crt, key) = self.client();
        Credentials::from_pem(&self.pem, &crt, &key).unwrap()
    }
}

// ---------- fake node ----------

#[derive(Default)]
struct NodeState {
    boot_id: String,
    maintenance: bool,
    seen_node_metadata: Vec<Option<String>>,
    bootstrapped: bool,
    /// How long EtcdLeaveCluster takes, and EtcdRecover after the stream ended.
    leave_takes: Duration,
    recover_takes: Duration,
    /// How the last upload ended: the bytes of a complete one, or the stream's error.
    upload: Option<Result<usize, String>>,
}

#[derive(Clone)]
struct FakeNode(Arc<Mutex<NodeState>>);

/// Records an upload whose call was dropped before it completed.
struct Unfinished(Option<Arc<Mutex<NodeState>>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            state.lock().unwrap().upload = Some(Err("reset before its end".into()));
        }
    }
}

type Stream2<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn stream_of<T: Send + 'static>(items: Vec<Result<T, Status>>) -> Stream2<T> {
    Box::pin(tokio_stream::iter(items))
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not in this fake"))
}

#[tonic::async_trait]
impl MachineService for FakeNode {
    async fn apply_configuration(
        &self,
        req: Request<ApplyConfigurationRequest>,
    ) -> Result<Response<ApplyConfigurationResponse>, Status> {
        let req = req.into_inner();
        if !req.data.starts_with(b"version: v1alpha1") {
            return Err(Status::invalid_argument("missing kind"));
        }
        Ok(Response::new(ApplyConfigurationResponse {
            messages: vec![ApplyConfiguration {
                metadata: None,
                warnings: vec![],
                mode: req.mode,
                mode_details: format!(
                    "dry_run={} try={:?}",
                    req.dry_run,
                    req.try_mode_timeout.map(|d| d.seconds)
                ),
            }],
        }))
    }
    async fn bootstrap(
        &self,
        _: Request<BootstrapRequest>,
    ) -> Result<Response<BootstrapResponse>, Status> {
        let mut st = self.0.lock().unwrap();
        if st.bootstrapped {
            return Err(Status::already_exists("etcd data directory is not empty"));
        }
        st.bootstrapped = true;
        Ok(Response::new(BootstrapResponse {
            messages: vec![Bootstrap { metadata: None }],
        }))
    }
    type EventsStream = Stream2<Event>;
    async fn events(
        &self,
        _: Request<EventsRequest>,
    ) -> Result<Response<Self::EventsStream>, Status> {
        Ok(Response::new(stream_of(vec![Ok(Event::default())])))
    }
    async fn etcd_member_list(
        &self,
        _: Request<EtcdMemberListRequest>,
    ) -> Result<Response<EtcdMemberListResponse>, Status> {
        Ok(Response::new(EtcdMemberListResponse {
            messages: vec![EtcdMembers {
                metadata: None,
                legacy_members: vec![],
                members: vec![EtcdMember {
                    id: 42,
                    hostname: "cp1".into(),
                    peer_urls: vec!["https://127.0.0.1:2380".into()],
                    client_urls: vec!["https://127.0.0.1:2379".into()],
                    is_learner: false,
                }],
            }],
        }))
    }
    async fn etcd_remove_member_by_id(
        &self,
        _: Request<EtcdRemoveMemberByIdRequest>,
    ) -> Result<Response<EtcdRemoveMemberByIdResponse>, Status> {
        unimplemented()
    }
    async fn etcd_leave_cluster(
        &self,
        _: Request<EtcdLeaveClusterRequest>,
    ) -> Result<Response<EtcdLeaveClusterResponse>, Status> {
        let takes = self.0.lock().unwrap().leave_takes;
        tokio::time::sleep(takes).await;
        Ok(Response::new(EtcdLeaveClusterResponse {
            messages: vec![EtcdLeaveCluster { metadata: None }],
        }))
    }
    async fn etcd_forfeit_leadership(
        &self,
        _: Request<EtcdForfeitLeadershipRequest>,
    ) -> Result<Response<EtcdForfeitLeadershipResponse>, Status> {
        unimplemented()
    }
    type EtcdSnapshotStream = Stream2<Data>;
    async fn etcd_snapshot(
        &self,
        _: Request<EtcdSnapshotRequest>,
    ) -> Result<Response<Self::EtcdSnapshotStream>, Status> {
        unimplemented()
    }
    async fn etcd_status(&self, _: Request<()>) -> Result<Response<EtcdStatusResponse>, Status> {
        unimplemented()
    }
    async fn hostname(&self, req: Request<()>) -> Result<Response<HostnameResponse>, Status> {
        let node = req
            .metadata()
            .get("node")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.0.lock().unwrap().seen_node_metadata.push(node.clone());
        Ok(Response::new(HostnameResponse {
            messages: vec![Hostname {
                metadata: None,
                hostname: node.unwrap_or_else(|| "endpoint".into()),
            }],
        }))
    }
    type KubeconfigStream = Stream2<Data>;
    async fn kubeconfig(&self, _: Request<()>) -> Result<Response<Self::KubeconfigStream>, Status> {
        unimplemented()
    }
    async fn memory(&self, _: Request<()>) -> Result<Response<MemoryResponse>, Status> {
        // Slow on purpose: exercises the client-side deadline.
        tokio::time::sleep(Duration::from_secs(5)).await;
        unimplemented()
    }
    type ReadStream = Stream2<Data>;
    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        if req.get_ref().path != "/proc/sys/kernel/random/boot_id" {
            return Err(Status::not_found("no such file"));
        }
        let text = format!("{}\n", self.0.lock().unwrap().boot_id);
        // Two chunks, as Talos splits files into 1024-byte pieces.
        let (a, b) = text.as_bytes().split_at(4);
        let chunk = |bytes: &[u8]| {
            Ok(Data {
                metadata: None,
                bytes: bytes.to_vec(),
            })
        };
        Ok(Response::new(stream_of(vec![chunk(a), chunk(b)])))
    }
    async fn reboot(&self, _: Request<RebootRequest>) -> Result<Response<RebootResponse>, Status> {
        unimplemented()
    }
    async fn reset(&self, _: Request<ResetRequest>) -> Result<Response<ResetResponse>, Status> {
        unimplemented()
    }
    async fn shutdown(
        &self,
        _: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        unimplemented()
    }
    type LogsStream = std::pin::Pin<
        Box<
            dyn tokio_stream::Stream<Item = Result<ferro_talos_proto::common::Data, Status>> + Send,
        >,
    >;
    async fn logs(&self, _: Request<LogsRequest>) -> Result<Response<Self::LogsStream>, Status> {
        unimplemented()
    }
    async fn etcd_recover(
        &self,
        req: Request<tonic::Streaming<ferro_talos_proto::common::Data>>,
    ) -> Result<Response<EtcdRecoverResponse>, Status> {
        // Dropped before the upload completes: the call was reset.
        let mut unfinished = Unfinished(Some(self.0.clone()));
        let mut stream = req.into_inner();
        let mut got = 0;
        let ended = loop {
            match stream.message().await {
                Ok(Some(chunk)) => got += chunk.bytes.len(),
                Ok(None) => break Ok(got),
                Err(s) => break Err(s.to_string()),
            }
        };
        // tonic's server reads a client's reset (RST_STREAM CANCEL) as the end of the stream; once
        // this call waits, hyper sees the reset and drops it (grpc-go's Recv fails with Canceled).
        tokio::task::yield_now().await;
        unfinished.0 = None;
        let takes = {
            let mut st = self.0.lock().unwrap();
            st.upload = Some(ended);
            st.recover_takes
        };
        tokio::time::sleep(takes).await;
        Ok(Response::new(EtcdRecoverResponse {
            messages: vec![EtcdRecover { metadata: None }],
        }))
    }
    async fn service_list(&self, _: Request<()>) -> Result<Response<ServiceListResponse>, Status> {
        unimplemented()
    }
    async fn service_restart(
        &self,
        _: Request<ServiceRestartRequest>,
    ) -> Result<Response<ServiceRestartResponse>, Status> {
        unimplemented()
    }
    async fn service_start(
        &self,
        _: Request<ServiceStartRequest>,
    ) -> Result<Response<ServiceStartResponse>, Status> {
        unimplemented()
    }
    async fn service_stop(
        &self,
        _: Request<ServiceStopRequest>,
    ) -> Result<Response<ServiceStopResponse>, Status> {
        unimplemented()
    }
    async fn upgrade(
        &self,
        _: Request<UpgradeRequest>,
    ) -> Result<Response<UpgradeResponse>, Status> {
        unimplemented()
    }
    async fn version(&self, _: Request<()>) -> Result<Response<VersionResponse>, Status> {
        let maintenance = self.0.lock().unwrap().maintenance;
        Ok(Response::new(VersionResponse {
            messages: vec![Version {
                metadata: None,
                version: Some(VersionInfo {
                    tag: "v1.13.6".into(),
                    arch: "amd64".into(),
                    os: "linux".into(),
                    ..Default::default()
                }),
                platform: None,
                features: (!maintenance).then_some(FeaturesInfo { rbac: true }),
            }],
        }))
    }
    async fn generate_client_configuration(
        &self,
        _: Request<GenerateClientConfigurationRequest>,
    ) -> Result<Response<GenerateClientConfigurationResponse>, Status> {
        unimplemented()
    }
    async fn image_pull(
        &self,
        _: Request<ImagePullRequest>,
    ) -> Result<Response<ImagePullResponse>, Status> {
        unimplemented()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// How the fake node authenticates clients.
enum Auth<'a> {
    /// Require a client certificate signed by this CA (configured node).
    Mutual(&'a TestCa),
    /// No client certificate requested (maintenance mode).
    None,
}

/// Start a fake node; returns its `127.0.0.1:port` endpoint and its state.
async fn start_node(
    server_ca: &TestCa,
    auth: Auth<'_>,
    state: NodeState,
) -> (String, Arc<Mutex<NodeState>>) {
    let (crt, key) = server_ca.server();
    let client_ca = match auth {
        Auth::Mutual(ca) => Some(ca.pem.clone()),
        Auth::None => None,
    };
    start_node_with(&crt, &key, client_ca.as_deref(), state).await
}

/// Start a fake node with the given server certificate and key; with `client_ca`,
/// client certificates signed by it are required.
async fn start_node_with(
    crt: &str,
    key: &str,
    client_ca: Option<&str>,
    state: NodeState,
) -> (String, Arc<Mutex<NodeState>>) {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(crt.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    // Talos labels Ed25519 keys `ED25519 PRIVATE KEY`; the body is PKCS#8.
    let key = key.replace("ED25519 PRIVATE KEY", "PRIVATE KEY");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let mut config = match client_ca {
        Some(client_ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .unwrap();
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .unwrap()
        }
        None => builder
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                break;
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                // Failed handshakes (rejected clients) are dropped, not fatal.
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = tx.send(Ok::<_, std::io::Error>(tls)).await;
                }
            });
        }
    });
    let state = Arc::new(Mutex::new(state));
    let service = MachineServiceServer::new(FakeNode(state.clone()));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx)),
    );
    (addr.to_string(), state)
}

fn quick() -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(3),
        call_timeout: Duration::from_secs(3),
        stream_timeout: Duration::from_secs(3),
        read_retries: 0,
        ..ConnectOptions::default()
    }
}

fn booted(boot_id: &str) -> NodeState {
    NodeState {
        boot_id: boot_id.into(),
        ..NodeState::default()
    }
}

// ---------- tests ----------

#[tokio::test]
async fn mtls_version_round_trip_with_talos_key_label() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("a")).await;
    let creds = ca.credentials();
    assert!(creds.key_pem.contains("BEGIN ED25519 PRIVATE KEY"));
    let client = TalosClient::connect(&ep, &creds, quick()).await.unwrap();
    let v = client.version().await.unwrap();
    assert_eq!(v.version.unwrap().tag, "v1.13.6");
    assert_eq!(v.features, Some(FeaturesInfo { rbac: true }));
}

#[tokio::test]
async fn node_metadata_is_sent_only_when_targeting_another_node() {
    let ca = TestCa::new();
    let (ep, state) = start_node(&ca, Auth::Mutual(&ca), booted("a")).await;
    let client = TalosClient::connect(&ep, &ca.credentials(), quick())
        .await
        .unwrap();
    assert_eq!(client.hostname().await.unwrap(), "endpoint");
    let other = client.with_node("10.5.0.3");
    assert_eq!(other.target(), "10.5.0.3");
    assert_eq!(other.hostname().await.unwrap(), "10.5.0.3");
    // Naming the endpoint itself sends no metadata.
    assert_eq!(
        client.with_node("127.0.0.1").hostname().await.unwrap(),
        "endpoint"
    );
    let seen = state.lock().unwrap().seen_node_metadata.clone();
    assert_eq!(seen, [None, Some("10.5.0.3".to_string()), None]);
}

#[tokio::test]
async fn server_signed_by_another_ca_is_wrong_ca() {
    let node_ca = TestCa::new();
    let other_ca = TestCa::new();
    let (ep, _) = start_node(&node_ca, Auth::Mutual(&node_ca), booted("a")).await;
    // Client cert from the node's CA, but trusting another CA.
    let (crt, key) = node_ca.client();
    let creds = Credentials::from_pem(&other_ca.pem, &crt, &key).unwrap();
    let err = match TalosClient::connect(&ep, &creds, quick()).await {
        Ok(c) => c.version().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::WrongCa, "{err}");
    let text = err.to_string();
    // The node is named with its port: it is not apid's usual 50000.
    assert!(text.starts_with(&format!("node {ep}: ")), "{text}");
    assert!(text.contains("wrong CA?"), "{text}");
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

#[tokio::test]
async fn client_cert_from_another_ca_is_rejected_by_the_node() {
    let node_ca = TestCa::new();
    let other_ca = TestCa::new();
    let (ep, _) = start_node(&node_ca, Auth::Mutual(&node_ca), booted("a")).await;
    // Trust the node's CA, but present a certificate the node does not accept.
    let (crt, key) = other_ca.client();
    let creds = Credentials::from_pem(&node_ca.pem, &crt, &key).unwrap();
    let err = match TalosClient::connect(&ep, &creds, quick()).await {
        Ok(c) => c.version().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::ClientCertRejected, "{err}");
}

#[tokio::test]
async fn maintenance_connection_and_probe() {
    let ca = TestCa::new();
    let state = NodeState {
        maintenance: true,
        ..NodeState::default()
    };
    let (ep, _) = start_node(&ca, Auth::None, state).await;
    let client = TalosClient::connect_maintenance(&ep, quick())
        .await
        .unwrap();
    assert!(client.is_maintenance());
    let v = client.version().await.unwrap();
    assert!(v.features.is_none());
    assert_eq!(probe(&ep, &quick()).await.unwrap(), NodeMode::Maintenance);
}

#[tokio::test]
async fn probe_tells_configured_and_unreachable_nodes() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("a")).await;
    assert_eq!(probe(&ep, &quick()).await.unwrap(), NodeMode::Configured);

    // A port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    assert_eq!(probe(&addr, &quick()).await.unwrap(), NodeMode::Unreachable);
    let err = TalosClient::connect(&addr, &ca.credentials(), quick())
        .await
        .err()
        .unwrap();
    assert_eq!(err.kind, ErrorKind::Unreachable, "{err}");
}

#[tokio::test]
async fn statuses_become_kinds() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("a")).await;
    let client = TalosClient::connect(&ep, &ca.credentials(), quick())
        .await
        .unwrap();

    client.bootstrap().await.unwrap();
    let err = client.bootstrap().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::AlreadyExists);
    assert_eq!(err.grpc_code, Some(tonic::Code::AlreadyExists as i32));

    let err = client
        .apply_configuration(b"garbage", ApplyMode::Auto, Apply::ForReal, None)
        .await
        .unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::InvalidConfig {
            reason: "missing kind".into()
        }
    );

    let ok = client
        .apply_configuration(
            b"version: v1alpha1\n",
            ApplyMode::Try,
            Apply::DryRun,
            Some(Duration::from_secs(90)),
        )
        .await
        .unwrap();
    assert_eq!(ok.mode, ApplyMode::Try as i32);
    assert_eq!(ok.mode_details, "dry_run=true try=Some(90)");

    let err = client.read_file("/etc/missing").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert_eq!(err.operation, "read /etc/missing");

    let members = client.etcd_member_list().await.unwrap();
    assert_eq!(members[0].id, 42);

    let err = client.etcd_status().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unimplemented);
}

#[tokio::test]
async fn every_call_has_a_deadline() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("a")).await;
    let opts = ConnectOptions {
        call_timeout: Duration::from_millis(300),
        ..quick()
    };
    let client = TalosClient::connect(&ep, &ca.credentials(), opts)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = client.memory().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn boot_id_is_read_from_chunks() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("4f1c9e2a-boot")).await;
    let client = TalosClient::connect(&ep, &ca.credentials(), quick())
        .await
        .unwrap();
    assert_eq!(
        client.boot_id().await.unwrap().as_deref(),
        Some("4f1c9e2a-boot")
    );
}

#[tokio::test]
async fn wait_for_reboot_sees_the_boot_id_change() {
    let ca = TestCa::new();
    let (ep, state) = start_node(&ca, Auth::Mutual(&ca), booted("old")).await;
    let creds = ca.credentials();
    let flip = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        flip.lock().unwrap().boot_id = "new".into();
    });
    let done = wait_for_reboot(
        &ep,
        None,
        &creds,
        Some("old"),
        Duration::from_secs(10),
        Duration::from_millis(100),
    )
    .await
    .unwrap();
    assert_eq!(done.boot_id.as_deref(), Some("new"));
    assert_eq!(done.version_tag, "v1.13.6");
}

#[tokio::test]
async fn wait_for_reboot_times_out_with_a_clear_error() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("same")).await;
    let err = wait_for_reboot(
        &ep,
        None,
        &ca.credentials(),
        Some("same"),
        Duration::from_millis(600),
        Duration::from_millis(100),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    let text = err.to_string();
    assert!(text.contains("did not come back"), "{text}");
    assert!(text.contains("not rebooted yet"), "{text}");
}

#[tokio::test]
async fn bundle_derived_credentials_work_against_talos_style_certificates() {
    // Certificates in Talos's own layout, issued by the secrets crate: the node's
    // server cert and the in-memory admin cert both chain to the bundle's OS CA.
    let bundle = ferro_talos_secrets::Bundle::generate((1, 13)).unwrap();
    let (ca_crt, ca_key) = bundle.os_ca_pem().unwrap();
    let server = ferro_talos_secrets::pki::issue_server_cert(
        &ca_crt,
        &ca_key,
        "cp1",
        &["127.0.0.1".parse().unwrap()],
        &["cp1".to_string()],
        Duration::from_secs(24 * 3600),
    )
    .unwrap();
    let (ep, _) = start_node_with(
        &server.cert_pem,
        &server.key_pem,
        Some(&ca_crt),
        booted("a"),
    )
    .await;
    let creds =
        Credentials::from_bundle(&bundle, &["os:admin"], Duration::from_secs(3600)).unwrap();
    let client = TalosClient::connect(&ep, &creds, quick()).await.unwrap();
    assert_eq!(
        client.version().await.unwrap().version.unwrap().tag,
        "v1.13.6"
    );

    // A bundle of another cluster is told apart as a wrong CA, and the message points at the
    // bundle the credentials came from, not at a talosconfig that was never read.
    let other = ferro_talos_secrets::Bundle::generate((1, 13)).unwrap();
    let creds = Credentials::from_bundle(&other, &["os:admin"], Duration::from_secs(3600)).unwrap();
    let err = match TalosClient::connect(&ep, &creds, quick()).await {
        Ok(c) => c.version().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::WrongCa, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("not signed by the CA in the secrets bundle (a bundle of another cluster?)"),
        "{text}"
    );
    assert!(!text.contains("talosconfig"), "{text}");
}

#[tokio::test]
async fn a_server_that_hangs_up_during_the_handshake_is_not_called_unreachable() {
    // Something listens and closes every connection before the TLS handshake completes (another
    // service on the port, a proxy without a backend): the address answers, so it is not
    // unreachable. A close after reading our hello is an EOF; a close with it unread is a reset.
    for read_hello_first in [true, false] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                if read_hello_first {
                    let mut hello = [0u8; 16 * 1024];
                    let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut hello).await;
                }
                drop(socket);
            }
        });
        let ca = TestCa::new();
        let err = TalosClient::connect(&addr, &ca.credentials(), quick())
            .await
            .err()
            .unwrap();
        assert_eq!(err.kind, ErrorKind::ConnectionClosed, "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("node {addr}: connect: ")),
            "{text}"
        );
        assert!(
            text.contains("closed the connection during the TLS handshake"),
            "{text}"
        );
        assert!(!text.contains("unreachable"), "{text}");
    }
}

#[tokio::test]
async fn a_name_missing_from_the_certificate_is_a_name_mismatch() {
    let ca = TestCa::new();
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), booted("a")).await;
    let port = ep.rsplit(':').next().unwrap();
    // The test certificate only lists IP 127.0.0.1.
    let err = match TalosClient::connect(&format!("localhost:{port}"), &ca.credentials(), quick())
        .await
    {
        Ok(c) => c.version().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.kind, ErrorKind::ServerNameMismatch, "{err}");
    assert!(err.to_string().contains("machine.certSANs"), "{err}");
}

#[tokio::test]
async fn maintenance_connection_honours_a_pinned_fingerprint() {
    let ca = TestCa::new();
    let (crt, key) = ca.server();
    let state = NodeState {
        maintenance: true,
        ..NodeState::default()
    };
    let (ep, _) = start_node_with(&crt, &key, None, state).await;
    let pinned = ConnectOptions {
        maintenance_spki_pin: Some(spki_fingerprint(&crt).unwrap()),
        ..quick()
    };
    let client = TalosClient::connect_maintenance(&ep, pinned).await.unwrap();
    assert!(client.version().await.unwrap().features.is_none());

    let (other_crt, _) = ca.server();
    let wrong = ConnectOptions {
        maintenance_spki_pin: Some(spki_fingerprint(&other_crt).unwrap()),
        ..quick()
    };
    let err = match TalosClient::connect_maintenance(&ep, wrong).await {
        Ok(c) => c.version().await.unwrap_err(),
        Err(e) => e,
    };
    assert!(
        err.to_string().contains("pinned certificate fingerprint"),
        "{err}"
    );
}

/// A call that Talos may answer only after minutes gets the caller's deadline, not the unary
/// one: EtcdLeaveCluster waits up to 3 minutes for the member id and retries the removal for 5
/// (`internal/pkg/etcd/etcd.go` LeaveCluster, `internal/pkg/etcd/local.go` @ v1.14.1).
#[tokio::test]
async fn a_leave_has_the_deadline_its_caller_gives() {
    let ca = TestCa::new();
    let state = NodeState {
        leave_takes: Duration::from_millis(800),
        ..booted("a")
    };
    let (ep, _) = start_node(&ca, Auth::Mutual(&ca), state).await;
    let opts = ConnectOptions {
        call_timeout: Duration::from_millis(300),
        ..quick()
    };
    let client = TalosClient::connect(&ep, &ca.credentials(), opts)
        .await
        .unwrap();
    client
        .etcd_leave_cluster(Duration::from_secs(5))
        .await
        .unwrap();
    let err = client
        .etcd_leave_cluster(Duration::from_millis(400))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("no answer within 400ms"), "{err}");
}

/// A file that reads `good` bytes, then fails.
struct FailsAfter {
    good: usize,
}

impl std::io::Read for FailsAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.good == 0 {
            return Err(std::io::Error::other("the disk went away"));
        }
        let n = buf.len().min(self.good);
        buf[..n].fill(7);
        self.good -= n;
        Ok(n)
    }
}

/// The upload streams the file and is bounded by the caller's limit, not by the unary deadline:
/// Talos reads an upload until it ends and sets no limit of its own (`v1alpha1_server.go`
/// EtcdRecover @ v1.14.1). A file that cannot be read to its end cancels the upload, so the node
/// never takes a cut-off snapshot for a whole one.
#[tokio::test]
async fn an_upload_is_bounded_by_its_limit_and_never_ends_short() {
    let ca = TestCa::new();
    let state = NodeState {
        recover_takes: Duration::from_millis(800),
        ..booted("a")
    };
    let (ep, state) = start_node(&ca, Auth::Mutual(&ca), state).await;
    let opts = ConnectOptions {
        call_timeout: Duration::from_millis(300),
        stream_timeout: Duration::from_millis(300),
        ..quick()
    };
    let client = TalosClient::connect(&ep, &ca.credentials(), opts)
        .await
        .unwrap();
    let size = 5 * 1024 * 1024 + 17;
    let sent = client
        .etcd_recover(std::io::repeat(1).take(size as u64), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(sent, size as u64);
    assert_eq!(state.lock().unwrap().upload, Some(Ok(size)));

    let err = client
        .etcd_recover(
            std::io::repeat(1).take(size as u64),
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(
        err.message
            .contains("5.0 MiB of the snapshot sent when the deadline (500ms) passed"),
        "{err}"
    );

    state.lock().unwrap().upload = None;
    let err = client
        .etcd_recover(FailsAfter { good: 3 << 20 }, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("reading the snapshot failed after 3.0 MiB (the disk went away)"),
        "{err}"
    );
    // The node saw the stream broken, not ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let ended = loop {
        if let Some(ended) = state.lock().unwrap().upload.clone() {
            break ended;
        }
        assert!(std::time::Instant::now() < deadline, "the node saw no end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(ended, Err("reset before its end".to_string()));
}
