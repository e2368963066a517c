//! Test helpers: start a cluster on a random loopback range and talk to it with the generated
//! tonic client stubs over our own rustls connections (mTLS or maintenance skip-verify).
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_sim::sample::SampleCluster;
use ferro_talos_sim::{Cluster, SimConfig};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tonic::transport::{Channel, Endpoint, Uri};

/// One bundle and its configs per test binary, rendered by the collection's own generator.
pub static SAMPLE: std::sync::LazyLock<SampleCluster> =
    std::sync::LazyLock::new(SampleCluster::generate);
pub static CP: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| SAMPLE.controlplane.clone());
pub static WORKER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| SAMPLE.worker.clone());

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A random 127.x.y.1 base so parallel tests never share addresses.
pub fn config(control_planes: usize, workers: usize) -> SimConfig {
    let b: [u8; 2] = rand::random();
    SimConfig {
        control_planes,
        workers,
        base_address: Ipv4Addr::new(127, 100 + b[0] % 100, b[1], 1),
        // Port 0: every node gets its own free port (kept across reboots).
        port: 0,
        reboot_downtime: Duration::from_millis(300),
        ..SimConfig::default()
    }
}

pub async fn start(control_planes: usize, workers: usize) -> Cluster {
    Cluster::start(config(control_planes, workers))
        .await
        .expect("cluster starts")
}

#[derive(Debug)]
struct NoVerify;

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Maintenance mode: skip verification, no client certificate.
pub fn insecure() -> ClientConfig {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify))
        .with_no_client_auth();
    c.alpn_protocols = vec![b"h2".to_vec()];
    c
}

/// Configured node: trust the OS CA, present a client certificate.
pub fn mtls(ca_pem: &str, cert_pem: &str, key_pem: &str) -> ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<_> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    c.alpn_protocols = vec![b"h2".to_vec()];
    c
}

/// The sample cluster's OS CA (crt, key) PEM.
pub fn os_ca() -> (String, String) {
    let cfg = ferro_talos_sim::mcfg::StoredConfig::parse(
        CP.as_bytes(),
        ferro_talos_sim::mcfg::Release::V1_13,
    )
    .unwrap();
    let (crt, key) = cfg.os_ca().unwrap();
    (crt, key.unwrap())
}

pub fn client_tls(roles: &[&str]) -> ClientConfig {
    let (ca, key) = os_ca();
    let issued = ferro_talos_sim::pki::issue_client_cert(&ca, &key, roles).unwrap();
    mtls(&ca, &issued.cert_pem, &issued.key_pem)
}

pub fn admin() -> ClientConfig {
    client_tls(&["os:admin"])
}

/// A channel to `addr` whose TLS is done by our connector (so the test controls everything).
pub async fn channel(
    addr: SocketAddr,
    tls: ClientConfig,
) -> Result<Channel, tonic::transport::Error> {
    let tls = Arc::new(tls);
    let connector = tower::service_fn(move |_: Uri| {
        let tls = tls.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let name = ServerName::IpAddress(addr.ip().into());
            let s = tokio_rustls::TlsConnector::from(tls)
                .connect(name, tcp)
                .await?;
            Ok::<_, std::io::Error>(TokioIo::new(s))
        }
    });
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(connector)
        .await
}

/// A MachineService client. A node that has just come back swaps its listener's TLS personality
/// (maintenance, then mutual TLS); a connection that meets the swap is reset, as a real apid's
/// would be during a restart, so connecting is tried again for a moment, as any client retries.
pub async fn machine(addr: SocketAddr, tls: ClientConfig) -> MachineServiceClient<Channel> {
    let mut last = None;
    for _ in 0..20 {
        match channel(addr, tls.clone()).await {
            Ok(c) => return MachineServiceClient::new(c),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("connects: {last:?}")
}

pub fn with_node<T>(msg: T, node: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert("node", node.parse().unwrap());
    r
}

pub fn with_nodes<T>(msg: T, nodes: &[&str]) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    for n in nodes {
        r.metadata_mut().append("nodes", n.parse().unwrap());
    }
    r
}

pub fn apply_req(
    data: &str,
    mode: ferro_talos_proto::machine::apply_configuration_request::Mode,
    dry_run: bool,
) -> ferro_talos_proto::machine::ApplyConfigurationRequest {
    ferro_talos_proto::machine::ApplyConfigurationRequest {
        data: data.as_bytes().to_vec(),
        mode: mode as i32,
        dry_run,
        try_mode_timeout: None,
    }
}

/// Applies a config to node `i` in maintenance mode and waits until it runs it: after the
/// install reboot when it booted from media, at once when Talos was installed already; a
/// control plane then waits in BOOTING for etcd.
pub async fn configure(cluster: &Cluster, i: usize, cfg: &str) {
    use ferro_talos_proto::machine::apply_configuration_request::Mode;
    let ep = cluster.endpoint(i).unwrap();
    let mut m = machine(ep, insecure()).await;
    let r = m
        .apply_configuration(apply_req(cfg, Mode::Auto, false))
        .await
        .expect("apply in maintenance")
        .into_inner();
    assert_eq!(
        r.messages[0].mode_details,
        "Applied configuration without a reboot"
    );
    for _ in 0..400 {
        let n = cluster.node(i).unwrap();
        // A control plane stays BOOTING until etcd is bootstrapped (boot_stage.rs).
        let booted = n.stage == "running" || n.stage == "booting";
        if !n.maintenance && booted && n.listening {
            assert!(cluster.wait_listening(i, Duration::from_secs(5)).await);
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("node {i} does not run its config");
}

/// Waits until node `i` is down and up again (a reboot).
pub async fn wait_back(cluster: &Cluster, i: usize) {
    let before = cluster.node(i).unwrap().boot_id;
    for _ in 0..200 {
        let n = cluster.node(i).unwrap();
        if n.boot_id != before && n.listening {
            assert!(cluster.wait_listening(i, Duration::from_secs(5)).await);
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("node {i} did not come back");
}

/// A cluster whose control planes and workers are configured and whose etcd is bootstrapped, so
/// its Kubernetes API serves.
pub async fn bootstrapped(control_planes: usize, workers: usize) -> Cluster {
    let cluster = start(control_planes, workers).await;
    for i in 0..control_planes {
        configure(&cluster, i, &CP).await;
    }
    for i in control_planes..control_planes + workers {
        configure(&cluster, i, &WORKER).await;
    }
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.bootstrap(ferro_talos_proto::machine::BootstrapRequest::default())
        .await
        .unwrap();
    cluster
}
