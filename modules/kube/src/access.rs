//! Admin access to a cluster's Kubernetes API.
//!
//! From the secrets bundle, the way Talos issues the admin kubeconfig (`kubeconfig.GenerateAdmin`
//! in upstream's `pkg/machinery/config/generate/...`, reached through the Kubeconfig RPC): a
//! client certificate with CN `admin` and O `system:masters` signed by the cluster's Kubernetes
//! CA, for the cluster endpoint. It is issued in memory for one hour and never written anywhere,
//! so check mode and a first upgrade work before any kubeconfig file exists. Or from a kubeconfig
//! file, with a client certificate or a token.

use std::time::Duration;

use base64::Engine as _;
use ferro_talos_secrets::pki;
use time::OffsetDateTime;

use crate::error::{KubeError, KubeErrorKind, Result};
use crate::kubeconfig::Login;
use crate::transport::{RequestError, Transport};

const CERT_LIFETIME: Duration = Duration::from_secs(3600);

/// Where the credentials came from, for messages.
#[derive(Clone, Debug)]
pub enum Source {
    Bundle,
    KubeconfigFile(String),
}

/// Credentials and the API server they are for; [`KubeAccess::connect`] makes the client.
pub struct KubeAccess {
    login: Login,
    pub endpoint: String,
    pub source: Source,
}

impl KubeAccess {
    /// An admin identity from the bundle's Kubernetes CA (`certs.k8s`, base64 PEM as in the
    /// bundle) for `endpoint` (the cluster endpoint, `https://host:port`).
    pub fn from_bundle(ca_crt_b64: &str, ca_key_b64: &str, endpoint: &str) -> Result<KubeAccess> {
        let decode = |what: &str, b64: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    KubeError::new(
                        KubeErrorKind::Credentials,
                        format!("the secrets bundle's certs.k8s.{what} is not base64 of a PEM"),
                    )
                })
        };
        let ca_crt = decode("crt", ca_crt_b64)?;
        let ca_key = decode("key", ca_key_b64)?;
        let issued = pki::issue_client_cert(
            &ca_crt,
            &ca_key,
            Some("admin"),
            &["system:masters"],
            CERT_LIFETIME,
            OffsetDateTime::now_utc(),
        )
        .map_err(|e| {
            KubeError::new(
                KubeErrorKind::Credentials,
                format!(
                    "cannot issue a Kubernetes admin certificate from the secrets bundle: {e:#}"
                ),
            )
        })?;
        Ok(KubeAccess {
            login: Login {
                server: endpoint.to_string(),
                ca_pem: ca_crt.into_bytes(),
                tls_server_name: None,
                client_identity: Some((issued.cert_pem.into_bytes(), issued.key_pem.into_bytes())),
                token: None,
            },
            endpoint: endpoint.to_string(),
            source: Source::Bundle,
        })
    }

    /// The current context of a kubeconfig's text (`path` says where it came from, for messages).
    pub fn from_kubeconfig(path: &str, text: &str) -> Result<KubeAccess> {
        let login = Login::from_yaml(text).map_err(|why| {
            KubeError::new(
                KubeErrorKind::Credentials,
                format!("kubeconfig {path}: {why}"),
            )
        })?;
        Ok(KubeAccess {
            endpoint: login.server.clone(),
            login,
            source: Source::KubeconfigFile(path.to_string()),
        })
    }

    pub async fn connect(&self) -> Result<Kube> {
        let transport = Transport::from_login(&self.login).map_err(|why| {
            KubeError::new(
                KubeErrorKind::Credentials,
                format!("Kubernetes credentials ({}): {why}", self.describe()),
            )
        })?;
        Ok(Kube {
            transport,
            endpoint: self.endpoint.clone(),
        })
    }

    fn describe(&self) -> String {
        match &self.source {
            Source::Bundle => "from the secrets bundle".into(),
            Source::KubeconfigFile(p) => format!("kubeconfig {p}"),
        }
    }
}

/// A client for one API server, and its address (for messages).
#[derive(Clone)]
pub struct Kube {
    pub(crate) transport: Transport,
    pub endpoint: String,
}

impl Kube {
    pub fn error(&self, what: &str, e: RequestError) -> KubeError {
        KubeError::from_request(&self.endpoint, what, e)
    }
}
