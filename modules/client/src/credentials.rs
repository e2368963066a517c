//! Client credentials (CA, client certificate, client key) and the rustls
//! configurations built from them.
//!
//! Credentials live in memory only: they come from a talosconfig context or are
//! derived from a secrets bundle, and are never written to disk. Debug output and
//! errors never contain the key.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::Digest;

use crate::error::{ClientError, ErrorKind, Result};

/// Where credentials came from: errors about certificates name what the user should check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CredentialOrigin {
    /// PEM text handed over directly.
    #[default]
    Unspecified,
    /// A talosconfig context.
    Talosconfig,
    /// An admin certificate derived in memory from the cluster's secrets bundle.
    SecretsBundle,
}

/// PEM material for mutual TLS with a configured Talos node.
#[derive(Clone)]
pub struct Credentials {
    /// One or more PEM CA certificates; the only trusted roots.
    pub ca_pem: String,
    /// PEM client certificate (optionally followed by intermediates).
    pub cert_pem: String,
    /// PEM client key. Talos's `ED25519 PRIVATE KEY` label is accepted.
    pub key_pem: String,
    pub origin: CredentialOrigin,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("ca_pem", &format_args!("<{} bytes>", self.ca_pem.len()))
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .field("origin", &self.origin)
            .finish()
    }
}

/// How far derived certificates are backdated (node clocks may lag the controller's).
const CLOCK_SKEW_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(600);

fn cred_error(what: impl Into<String>) -> ClientError {
    ClientError::new("", "load credentials", ErrorKind::Credentials, what)
}

impl Credentials {
    /// Build credentials from PEM text, checking that every part parses.
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Credentials> {
        let creds = Credentials {
            ca_pem: ca_pem.to_string(),
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            origin: CredentialOrigin::Unspecified,
        };
        // Building the TLS configuration parses every part and loads the key.
        creds.tls_config()?;
        Ok(creds)
    }

    fn roots(&self) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| cred_error(format!("the CA is not valid PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| cred_error(format!("the CA certificate cannot be used: {e}")))?;
        }
        if roots.is_empty() {
            return Err(cred_error(
                "the CA contains no PEM `CERTIFICATE` block (expected the cluster's OS CA)",
            ));
        }
        Ok(roots)
    }

    fn chain(&self) -> Result<Vec<CertificateDer<'static>>> {
        let chain = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| cred_error(format!("the client certificate is not valid PEM: {e}")))?;
        if chain.is_empty() {
            return Err(cred_error(
                "the client certificate contains no PEM `CERTIFICATE` block",
            ));
        }
        Ok(chain)
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>> {
        // Talos's `ED25519 PRIVATE KEY` label becomes the PKCS#8 one the PEM parser knows.
        let relabelled = ferro_talos_secrets::pki::normalize_key_pem_for_rustls(&self.key_pem);
        // The parser's error may quote input; report only the expected forms.
        PrivateKeyDer::from_pem_slice(relabelled.as_bytes()).map_err(|_| {
            cred_error(
                "the client key is not a PEM private key (expected ED25519/EC/RSA PRIVATE KEY or PRIVATE KEY)",
            )
        })
    }

    /// Credentials from a talosconfig context (`ca`, `crt`, `key` are base64 of PEM).
    pub fn from_context(ctx: &ferro_talos_secrets::Context) -> Result<Credentials> {
        if ctx.crt.is_empty() || ctx.key.is_empty() {
            return Err(cred_error(
                "the talosconfig context has no client certificate (`crt`/`key`)",
            ));
        }
        let (ca, crt, key) = ctx
            .admin_identity()
            .map_err(|e| cred_error(format!("{e:#}")))?;
        Ok(Credentials {
            origin: CredentialOrigin::Talosconfig,
            ..Credentials::from_pem(&ca, &crt, &key)?
        })
    }

    /// Credentials derived in memory from a secrets bundle: a fresh client
    /// certificate with `roles` signed by the bundle's OS CA. Nothing touches disk,
    /// so check mode can talk to a cluster before any talosconfig was written.
    pub fn from_bundle(
        bundle: &ferro_talos_secrets::Bundle,
        roles: &[&str],
        validity: std::time::Duration,
    ) -> Result<Credentials> {
        let (ca_crt, ca_key) = bundle
            .os_ca_pem()
            .map_err(|e| cred_error(format!("{e:#}")))?;
        // Backdated so a node whose clock runs a little behind still accepts it.
        let now = time::OffsetDateTime::now_utc() - CLOCK_SKEW_ALLOWANCE;
        let issued = ferro_talos_secrets::pki::issue_admin_cert(
            &ca_crt,
            &ca_key,
            roles,
            validity + CLOCK_SKEW_ALLOWANCE,
            now,
        )
        .map_err(|e| cred_error(format!("{e:#}")))?;
        Ok(Credentials {
            origin: CredentialOrigin::SecretsBundle,
            ..Credentials::from_pem(&ca_crt, &issued.cert_pem, &issued.key_pem)?
        })
    }

    /// Fail early with `ClientCertExpired` when the client certificate is outside
    /// its validity window, instead of a vague handshake failure later.
    pub fn check_validity(&self, now: SystemTime) -> Result<()> {
        let chain = self.chain()?;
        let Some(leaf) = chain.first() else {
            return Ok(());
        };
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
            .map_err(|_| cred_error("the client certificate is not valid X.509"))?;
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let validity = cert.validity();
        if now > validity.not_after.timestamp() {
            return Err(ClientError::new(
                "",
                "load credentials",
                ErrorKind::ClientCertExpired,
                format!("the client certificate expired at {}", validity.not_after),
            ));
        }
        if now < validity.not_before.timestamp() {
            return Err(cred_error(format!(
                "the client certificate is not valid before {} (clock skew?)",
                validity.not_before
            )));
        }
        Ok(())
    }

    /// rustls configuration for mutual TLS: trust only our CA, present our cert.
    pub(crate) fn tls_config(&self) -> Result<ClientConfig> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| cred_error(format!("TLS setup failed: {e}")))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain()?, self.key()?)
            .map_err(|e| {
                cred_error(format!(
                    "the client certificate and key cannot be used together: {e}"
                ))
            })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// The one crypto provider in every binary (two providers make rustls panic).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// rustls configuration for maintenance mode: the node's certificate comes from a
/// throw-away self-signed CA, so the chain cannot be verified; no client cert is
/// sent. `spki_sha256_b64` optionally pins the server key (talosctl's
/// `--cert-fingerprint`: base64 of SHA-256 over SubjectPublicKeyInfo).
pub(crate) fn maintenance_tls_config(spki_sha256_b64: Option<&str>) -> Result<ClientConfig> {
    let provider = provider();
    let verifier = Arc::new(MaintenanceVerifier {
        provider: provider.clone(),
        pin: spki_sha256_b64.map(str::to_string),
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| cred_error(format!("TLS setup failed: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// talosctl's `--cert-fingerprint` for a PEM certificate: base64 (standard) of
/// SHA-256 over its SubjectPublicKeyInfo.
pub fn spki_fingerprint(cert_pem: &str) -> Result<String> {
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|_| cred_error("expected a PEM `CERTIFICATE` to fingerprint"))?;
    spki_sha256_of_der(der.as_ref())
        .ok_or_else(|| cred_error("the certificate to fingerprint is not valid X.509"))
}

fn spki_sha256_of_der(der: &[u8]) -> Option<String> {
    use base64::Engine;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let digest = sha2::Sha256::digest(cert.public_key().raw);
    Some(base64::engine::general_purpose::STANDARD.encode(digest))
}

/// Accepts any server certificate (optionally pinned by SPKI hash) but still checks
/// that the server holds the certificate's key (handshake signatures).
#[derive(Debug)]
struct MaintenanceVerifier {
    provider: Arc<CryptoProvider>,
    pin: Option<String>,
}

impl ServerCertVerifier for MaintenanceVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if let Some(pin) = &self.pin {
            let got = spki_sha256_of_der(end_entity.as_ref()).ok_or(
                rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding),
            )?;
            if &got != pin {
                return Err(rustls::Error::General(
                    "the node's key does not match the pinned certificate fingerprint".into(),
                ));
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_and_leaf() -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let leaf = params.signed_by(&key, &issuer).unwrap();
        (ca.pem(), leaf.pem(), key.serialize_pem())
    }

    #[test]
    fn talos_ed25519_label_is_accepted() {
        let (ca, crt, key) = ca_and_leaf();
        let talos_key = key.replace("PRIVATE KEY", "ED25519 PRIVATE KEY");
        assert!(talos_key.contains("BEGIN ED25519 PRIVATE KEY"));
        let creds = Credentials::from_pem(&ca, &crt, &talos_key).unwrap();
        creds.tls_config().unwrap();
    }

    #[test]
    fn expired_client_cert_is_reported_before_connecting() {
        let (ca, crt, key) = ca_and_leaf();
        let creds = Credentials::from_pem(&ca, &crt, &key).unwrap();
        let err = creds.check_validity(SystemTime::now()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::ClientCertExpired);
        let mid_2020 = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_593_561_600);
        creds.check_validity(mid_2020).unwrap();
    }

    #[test]
    fn bad_pem_is_a_clear_error_without_key_material() {
        let (ca, crt, _) = ca_and_leaf();
        let err = Credentials::from_pem(
            &ca,
            &crt,
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n",
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Credentials);
        assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
        let err = Credentials::from_pem("not pem", &crt, "x").unwrap_err();
        assert!(err.message.contains("CA"), "{err}");
    }

    #[test]
    fn bundle_derived_credentials_chain_to_the_os_ca() {
        let bundle = ferro_talos_secrets::Bundle::generate((1, 13)).unwrap();
        let creds =
            Credentials::from_bundle(&bundle, &["os:admin"], std::time::Duration::from_secs(3600))
                .unwrap();
        let (ca, _) = bundle.os_ca_pem().unwrap();
        assert_eq!(creds.ca_pem, ca);
        creds.check_validity(SystemTime::now()).unwrap();
        // The derived key carries Talos's label and still loads.
        assert!(creds.key_pem.contains("PRIVATE KEY"));
        let err =
            Credentials::from_bundle(&bundle, &[], std::time::Duration::from_secs(60)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Credentials);
    }

    #[test]
    fn talosconfig_context_round_trip() {
        let bundle = ferro_talos_secrets::Bundle::generate((1, 13)).unwrap();
        let now = time::OffsetDateTime::now_utc();
        let cfg = ferro_talos_secrets::TalosConfig::for_cluster(
            &bundle,
            "lab",
            &["10.5.0.2".into()],
            &[],
            now,
        )
        .unwrap();
        let creds = Credentials::from_context(&cfg.contexts["lab"]).unwrap();
        creds.check_validity(SystemTime::now()).unwrap();
    }

    #[test]
    fn debug_redacts_the_key() {
        let (ca, crt, key) = ca_and_leaf();
        let creds = Credentials::from_pem(&ca, &crt, &key).unwrap();
        let dbg = format!("{creds:?}");
        assert!(!dbg.contains("PRIVATE"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
    }
}
