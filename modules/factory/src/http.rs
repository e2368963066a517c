//! A factory's endpoint: its URL checked once, plain HTTP (a factory on a private network, or the
//! tests' own) or HTTPS with the system's roots or a CA file for a factory behind a private CA,
//! its credentials and timeout. Each request is one connection (`ferro_talos_oneshot`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferro_talos_oneshot::Target;
use rustls::pki_types::ServerName;

use crate::error::{FactoryError, FactoryErrorKind};

/// Where one factory is and how to reach it.
#[derive(Clone)]
pub struct Endpoint {
    pub base: String,
    target: Target,
    timeout: Duration,
    /// The `Authorization` header's value, if any. A secret: never in a message.
    authorization: Option<String>,
}

/// A factory's answer: its status and body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

fn config_error(message: String) -> FactoryError {
    FactoryError::new(FactoryErrorKind::Config, message)
}

impl Endpoint {
    /// `base` is the factory's URL (`https://factory.talos.dev`); `ca_file` replaces the system's
    /// roots for HTTPS.
    pub fn new(
        base: &str,
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<Endpoint, FactoryError> {
        let base = base.trim().trim_end_matches('/').to_string();
        let uri: http::Uri = base.parse().map_err(|_| {
            config_error(format!(
                "{base:?} is not a URL; write it like https://factory.talos.dev"
            ))
        })?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(config_error(format!(
                    "{base:?} has no http:// or https:// scheme; write it like https://factory.talos.dev"
                )));
            }
        };
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(config_error(format!(
                "{base:?} has a path; the factory's URL is its scheme and host, like https://factory.talos.dev"
            )));
        }
        let host = uri
            .host()
            .ok_or_else(|| config_error(format!("{base:?} has no host")))?
            .trim_matches(|c| c == '[' || c == ']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let target = if https {
            let name = ServerName::try_from(host.clone()).map_err(|_| {
                config_error(format!(
                    "{host} is not a host name a certificate can be checked against"
                ))
            })?;
            Target::tls(&host, port, name, Arc::new(tls_config(ca_file)?))
        } else {
            Target::plain(&host, port)
        };
        Ok(Endpoint {
            base,
            target,
            timeout,
            authorization: None,
        })
    }

    /// `Authorization: Basic base64(username:password)` on every request.
    pub fn set_basic_auth(&mut self, username: &str, password: &str) {
        use base64::Engine;
        let token =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        self.authorization = Some(format!("Basic {token}"));
    }

    pub async fn get(&self, path: &str) -> Result<Answer, FactoryError> {
        self.send(http::Method::GET, path, None).await
    }

    pub async fn post_yaml(&self, path: &str, body: &str) -> Result<Answer, FactoryError> {
        self.send(http::Method::POST, path, Some(body.as_bytes().to_vec()))
            .await
    }

    async fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, FactoryError> {
        let what = format!("{method} {}{path}", self.base);
        tokio::time::timeout(self.timeout, self.exchange(method, path, body))
            .await
            .map_err(|_| {
                FactoryError::new(
                    FactoryErrorKind::Unreachable,
                    format!("{what}: no answer within {}s", self.timeout.as_secs()),
                )
            })?
            .map_err(|why| {
                FactoryError::new(FactoryErrorKind::Unreachable, format!("{what}: {why}"))
            })
    }

    async fn exchange(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, String> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::USER_AGENT, "ferro.talos");
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/yaml");
        }
        if let Some(value) = &self.authorization {
            let mut value = http::HeaderValue::from_str(value)
                .map_err(|_| "the credentials are not a header value".to_string())?;
            value.set_sensitive(true);
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let request = request
            .body(body.unwrap_or_default())
            .map_err(|e| format!("the request: {e}"))?;
        let (status, body) = self
            .target
            .exchange(request, self.timeout)
            .await
            .map_err(|failure| failure.to_string())?;
        Ok(Answer {
            status: status.as_u16(),
            body,
        })
    }
}

fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, FactoryError> {
    let roots = match ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                config_error(format!("ca_file {}: cannot read it ({e})", path.display()))
            })?;
            ferro_talos_oneshot::roots_from_pem(&pem)
                .map_err(|e| config_error(format!("ca_file {}: {e}", path.display())))?
        }
        None => {
            let mut roots = rustls::RootCertStore::empty();
            for der in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(der);
            }
            if roots.is_empty() {
                return Err(config_error(
                    "no certificate authority to check the factory's certificate against: the \
                     system has none (install ca-certificates) and ca_file is not set"
                        .into(),
                ));
            }
            roots
        }
    };
    ferro_talos_oneshot::client_config(roots, None).map_err(|e| config_error(format!("TLS: {e}")))
}
