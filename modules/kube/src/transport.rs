//! HTTPS to the API server: one HTTP/1.1 request per TLS connection, over rustls with the
//! cluster's CA as the only root and the kubeconfig's client certificate (or bearer token).
//!
//! kube's own client (its `client` feature: a hyper/tower stack with JSONPath, regex and auth
//! plugins) would add about 4 MiB to the one program every module is; the requests a drain makes
//! need none of it (docs/decisions/0007-kubernetes-client.md). Requests are built with kube's
//! request builders (`kube::core::Request`); answers other than 2xx are kube's `Status`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kube::core::Status;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;

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
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    authorization: Option<String>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
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
        let mut roots = rustls::RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(&login.ca_pem) {
            let der =
                der.map_err(|_| "the cluster's certificate authority is not PEM".to_string())?;
            roots
                .add(der)
                .map_err(|e| format!("the cluster's certificate authority: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the cluster's certificate authority holds no certificate".into());
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let mut tls = match &login.client_identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| "the client certificate is not PEM".to_string())?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|_| "the client key is not a PEM private key".to_string())?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate and key: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Transport {
            host,
            port,
            server_name,
            tls: Arc::new(tls),
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
    ) -> Result<(http::StatusCode, Bytes), RequestError> {
        let transport =
            |what: &str, e: &dyn std::fmt::Display| RequestError::Transport(format!("{what}: {e}"));
        let tcp = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| {
            RequestError::Transport(format!(
                "connect: no answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| transport("connect", &e))?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| transport("TLS handshake", &e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| transport("HTTP", &e))?;
        let driver = tokio::spawn(conn);
        let (mut parts, body) = req.into_parts();
        let authority = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        parts.headers.insert(
            http::header::HOST,
            http::HeaderValue::from_str(&authority).map_err(|e| transport("host header", &e))?,
        );
        parts.headers.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/json"),
        );
        if let Some(a) = &self.authorization {
            let mut value = http::HeaderValue::from_str(a)
                .map_err(|_| transport("token", &"not a header value"))?;
            value.set_sensitive(true);
            parts.headers.insert(http::header::AUTHORIZATION, value);
        }
        let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
        let answer = sender
            .send_request(request)
            .await
            .map_err(|e| transport("request", &e))?;
        let status = answer.status();
        let body = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| transport("reading the answer", &e))?
            .to_bytes();
        driver.abort();
        Ok((status, body))
    }
}
