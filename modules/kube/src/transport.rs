//! HTTPS to the API server: one HTTP/1.1 request per TLS connection (`ferro_talos_oneshot`), with
//! the cluster's CA as the only root and the kubeconfig's client certificate (or bearer token).
//!
//! kube's own client (its `client` feature: a hyper/tower stack with JSONPath, regex and auth
//! plugins) would add about 4 MiB to the one program every module is; the requests a drain makes
//! need none of it (docs/decisions/0007-kubernetes-client.md). Requests are built with kube's
//! request builders (`kube::core::Request`); answers other than 2xx are kube's `Status`.

use std::sync::Arc;
use std::time::Duration;

use ferro_talos_oneshot::{ClientIdentity, IdentityError, Target, TlsSetupError};
use kube::core::Status;
use rustls::pki_types::ServerName;
use serde::de::DeserializeOwned;

use crate::kubeconfig::Login;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request did not succeed.
#[derive(Debug)]
pub enum RequestError {
    /// The API server answered with a failure status (`Status.code` is the HTTP status).
    Api(Box<Status>),
    /// No answer: connection, TLS, timeout, or an answer that is not HTTP/JSON.
    Transport(String),
}

impl RequestError {
    pub fn code(&self) -> Option<u16> {
        match self {
            RequestError::Api(s) => Some(s.code),
            RequestError::Transport(_) => None,
        }
    }
}

/// Where and how to reach one API server.
#[derive(Clone)]
pub struct Transport {
    target: Target,
    authorization: Option<String>,
}

impl Transport {
    pub fn from_login(login: &Login) -> Result<Transport, String> {
        let uri: http::Uri = login
            .server
            .parse()
            .map_err(|_| format!("the cluster server {:?} is not a URL", login.server))?;
        if uri.scheme_str() != Some("https") {
            return Err(format!(
                "the cluster server {uri} is not https: the Kubernetes API is reached over TLS"
            ));
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("the cluster server {uri} has no host"))?
            .trim_matches(|c| c == '[' || c == ']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let name = login
            .tls_server_name
            .clone()
            .unwrap_or_else(|| host.clone());
        let server_name = ServerName::try_from(name.clone()).map_err(|_| {
            format!("{name} is not a host name or address a certificate can be checked against")
        })?;
        let roots = ferro_talos_oneshot::roots_from_pem(&login.ca_pem).map_err(|e| match e {
            TlsSetupError::NotPem => "the cluster's certificate authority is not PEM".to_string(),
            TlsSetupError::NoCertificate => {
                "the cluster's certificate authority holds no certificate".to_string()
            }
            TlsSetupError::Rustls(e) => format!("the cluster's certificate authority: {e}"),
        })?;
        let identity = login
            .client_identity
            .as_ref()
            .map(|(cert, key)| ClientIdentity {
                certificate_pem: cert,
                key_pem: key,
            });
        let tls = ferro_talos_oneshot::client_config(roots, identity).map_err(|e| match e {
            IdentityError::CertificateNotPem => "the client certificate is not PEM".to_string(),
            IdentityError::KeyNotPem => "the client key is not a PEM private key".to_string(),
            IdentityError::Refused(e) => format!("the client certificate and key: {e}"),
        })?;
        Ok(Transport {
            target: Target::tls(&host, port, server_name, Arc::new(tls)),
            authorization: login.token.as_ref().map(|t| format!("Bearer {t}")),
        })
    }

    /// Sends one request (a path and query, as kube's builders make them) and decodes a 2xx
    /// answer as `T`.
    pub async fn send<T: DeserializeOwned>(
        &self,
        req: http::Request<Vec<u8>>,
    ) -> Result<T, RequestError> {
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(req))
            .await
            .map_err(|_| {
                RequestError::Transport(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs()))
            })??;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| {
                RequestError::Transport(format!("the answer is not the JSON expected: {e}"))
            });
        }
        let mut s: Status = serde_json::from_slice(&body).unwrap_or_else(|_| Status {
            message: String::from_utf8_lossy(&body)
                .trim()
                .chars()
                .take(300)
                .collect(),
            ..Status::default()
        });
        s.code = status.as_u16();
        if s.reason.is_empty() {
            s.reason = status.canonical_reason().unwrap_or("").to_string();
        }
        Err(RequestError::Api(Box::new(s)))
    }

    async fn exchange(
        &self,
        req: http::Request<Vec<u8>>,
    ) -> Result<(http::StatusCode, bytes::Bytes), RequestError> {
        let (mut parts, body) = req.into_parts();
        parts.headers.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/json"),
        );
        if let Some(a) = &self.authorization {
            let mut value = http::HeaderValue::from_str(a)
                .map_err(|_| RequestError::Transport("token: not a header value".to_string()))?;
            value.set_sensitive(true);
            parts.headers.insert(http::header::AUTHORIZATION, value);
        }
        self.target
            .exchange(http::Request::from_parts(parts, body), CONNECT_TIMEOUT)
            .await
            .map_err(|failure| RequestError::Transport(failure.to_string()))
    }
}
