//! The two TLS personalities of apid (api.md §9, §10): maintenance (self-signed, no client
//! certificate) and configured (OS-CA-issued server certificate, client certificate required).

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use crate::pki;
use crate::state::Node;

pub struct NodeTls {
    pub maintenance: bool,
    pub config: Arc<ServerConfig>,
    /// PEM of the maintenance CA (maintenance only), for inspection.
    pub maintenance_ca: Option<String>,
    /// Configured, but no OS CA key was available to sign the server certificate (a worker
    /// configured before any control plane): rebuilt once a key shows up.
    pub awaiting_ca_key: bool,
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| anyhow!("invalid certificate PEM"))
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| anyhow!("invalid key PEM"))
}

fn finish(
    builder: rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>,
    chain: &str,
    key_pem: &str,
) -> Result<ServerConfig> {
    let mut cfg = builder
        .with_single_cert(certs(chain)?, key(key_pem)?)
        .context("server certificate")?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    cfg.send_tls13_tickets = 0;
    Ok(cfg)
}

impl NodeTls {
    /// `ca_key` is the OS CA key to sign with: the node's own (control planes) or, for workers,
    /// the one a control plane's trustd would use.
    pub fn build(node: &Node, ca_key: Option<String>) -> Result<NodeTls> {
        let mut ips: Vec<IpAddr> = vec![IpAddr::V4(node.address), "127.0.0.1".parse()?];
        let builder = || {
            ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()
        };
        let Some(active) = node.active.as_ref() else {
            ips.push("::1".parse()?);
            let (ca, leaf) =
                pki::self_signed_maintenance(&ips, std::slice::from_ref(&node.hostname))?;
            let cfg = finish(
                builder()?.with_no_client_auth(),
                &leaf.cert_pem,
                &leaf.key_pem,
            )?;
            return Ok(NodeTls {
                maintenance: true,
                config: Arc::new(cfg),
                maintenance_ca: Some(ca),
                awaiting_ca_key: false,
            });
        };
        let (ca_crt, own_key) = active
            .os_ca()
            .ok_or_else(|| anyhow!("config has no machine.ca"))?;
        let mut dns = vec![node.hostname.clone()];
        for san in active.cert_sans() {
            match san.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => dns.push(san),
            }
        }
        let signing_key = own_key.or(ca_key);
        let awaiting_ca_key = signing_key.is_none();
        let leaf = match signing_key {
            Some(k) => pki::issue_server_cert(&ca_crt, &k, &node.hostname, &ips, &dns)?,
            // No CA key anywhere (a worker configured before any control plane): a real worker
            // would wait for trustd; the simulator serves a certificate nobody can verify.
            None => pki::self_signed_maintenance(&ips, &dns)?.1,
        };
        let mut roots = RootCertStore::empty();
        for pem in std::iter::once(ca_crt).chain(active.accepted_cas()) {
            for c in certs(&pem)? {
                roots.add(c).context("adding OS CA to the trust pool")?;
            }
        }
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .context("client verifier")?;
        let verifier = Arc::new(ClientAuthOnly { inner });
        let cfg = finish(
            builder()?.with_client_cert_verifier(verifier),
            &leaf.cert_pem,
            &leaf.key_pem,
        )?;
        Ok(NodeTls {
            maintenance: false,
            config: Arc::new(cfg),
            maintenance_ca: None,
            awaiting_ca_key,
        })
    }
}

/// webpki accepts any EKU list containing ClientAuth; Talos wants exactly `[ClientAuth]`.
#[derive(Debug)]
struct ClientAuthOnly {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for ClientAuthOnly {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        true
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if !pki::eku_is_exactly_client_auth(end_entity) {
            return Err(rustls::Error::General(
                "certificate is missing the client auth extended key usage".into(),
            ));
        }
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
