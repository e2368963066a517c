//! One HTTP/1.1 request per connection: connect (TCP, then TLS when asked), send, read the whole
//! answer, close. The Kubernetes client (a drain's few dozen requests) and the Image Factory
//! client (a handful per task) need no pool, no HTTP/2 and no redirects, and each module is a
//! short-lived process, so a connection per request costs a handshake and saves a client stack
//! (docs/decisions/0007-kubernetes-client.md).
//!
//! [`Target`] is where to connect and how; [`Target::exchange`] sends one request and gives the
//! status and body, or a [`Failure`] that says which step failed. TLS settings come from
//! [`client_config`], with the roots from [`roots_from_pem`] or the caller's own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

/// Where one server is, and the TLS settings when it is reached over HTTPS.
#[derive(Clone)]
pub struct Target {
    host: String,
    port: u16,
    tls: Option<(ServerName<'static>, Arc<rustls::ClientConfig>)>,
}

/// Which step of a request failed, and why.
#[derive(Debug)]
pub enum Failure {
    ConnectTimeout(Duration),
    Connect(std::io::Error),
    Tls(std::io::Error),
    Http(hyper::Error),
    /// The request could not be built (a header value that is not one).
    Request(String),
    Send(hyper::Error),
    Read(hyper::Error),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::ConnectTimeout(after) => {
                write!(f, "connect: no answer within {}s", after.as_secs())
            }
            Failure::Connect(e) => write!(f, "connect: {e}"),
            Failure::Tls(e) => write!(f, "TLS handshake: {e}"),
            Failure::Http(e) => write!(f, "HTTP: {e}"),
            Failure::Request(why) => write!(f, "the request: {why}"),
            Failure::Send(e) => write!(f, "request: {e}"),
            Failure::Read(e) => write!(f, "reading the answer: {e}"),
        }
    }
}

impl std::error::Error for Failure {}

/// Why TLS settings could not be made.
#[derive(Debug)]
pub enum TlsSetupError {
    /// The text holds something that is not a PEM certificate.
    NotPem,
    /// The text holds no certificate at all.
    NoCertificate,
    /// rustls refused a certificate, the key or the protocol versions.
    Rustls(rustls::Error),
}

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsSetupError::NotPem => f.write_str("not PEM"),
            TlsSetupError::NoCertificate => f.write_str("holds no certificate"),
            TlsSetupError::Rustls(e) => write!(f, "{e}"),
        }
    }
}

/// The certificates of a PEM text, as the only roots to trust.
pub fn roots_from_pem(pem: &[u8]) -> Result<rustls::RootCertStore, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|_| TlsSetupError::NotPem)?;
        roots.add(der).map_err(TlsSetupError::Rustls)?;
    }
    if roots.is_empty() {
        return Err(TlsSetupError::NoCertificate);
    }
    Ok(roots)
}

/// A client certificate chain and its key, both PEM.
pub struct ClientIdentity<'a> {
    pub certificate_pem: &'a [u8],
    pub key_pem: &'a [u8],
}

/// Why a client identity was refused, by part: the certificate, the key, or the pair.
#[derive(Debug)]
pub enum IdentityError {
    CertificateNotPem,
    KeyNotPem,
    Refused(rustls::Error),
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::CertificateNotPem => f.write_str("the client certificate is not PEM"),
            IdentityError::KeyNotPem => f.write_str("the client key is not a PEM private key"),
            IdentityError::Refused(e) => write!(f, "{e}"),
        }
    }
}

/// TLS settings over aws-lc-rs (ring is never linked) that trust `roots`, present `identity`
/// when given, and speak HTTP/1.1.
pub fn client_config(
    roots: rustls::RootCertStore,
    identity: Option<ClientIdentity<'_>>,
) -> Result<rustls::ClientConfig, IdentityError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(IdentityError::Refused)?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => {
            let chain = CertificateDer::pem_slice_iter(id.certificate_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| IdentityError::CertificateNotPem)?;
            let key =
                PrivateKeyDer::from_pem_slice(id.key_pem).map_err(|_| IdentityError::KeyNotPem)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(IdentityError::Refused)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl Target {
    /// Plain HTTP to `host:port` (an IPv6 address without brackets).
    pub fn plain(host: &str, port: u16) -> Target {
        Target {
            host: host.to_string(),
            port,
            tls: None,
        }
    }

    /// HTTPS to `host:port`, checking the server's certificate for `server_name`.
    pub fn tls(
        host: &str,
        port: u16,
        server_name: ServerName<'static>,
        config: Arc<rustls::ClientConfig>,
    ) -> Target {
        Target {
            host: host.to_string(),
            port,
            tls: Some((server_name, config)),
        }
    }

    /// `host:port` as a `Host` header writes it (`[::1]:443` for IPv6).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Sends `request` (a path and query as its URI) on a new connection, with a `Host` header
    /// when it has none, and reads the whole answer. Connecting gives up after `connect_timeout`;
    /// the caller bounds the whole exchange.
    pub async fn exchange(
        &self,
        request: http::Request<Vec<u8>>,
        connect_timeout: Duration,
    ) -> Result<(http::StatusCode, Bytes), Failure> {
        let tcp = tokio::time::timeout(
            connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| Failure::ConnectTimeout(connect_timeout))?
        .map_err(Failure::Connect)?;
        let _ = tcp.set_nodelay(true);
        let (mut parts, body) = request.into_parts();
        if !parts.headers.contains_key(http::header::HOST) {
            let host = http::HeaderValue::from_str(&self.authority())
                .map_err(|e| Failure::Request(e.to_string()))?;
            parts.headers.insert(http::header::HOST, host);
        }
        let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
        match &self.tls {
            Some((name, config)) => {
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(Failure::Tls)?;
                round_trip(TokioIo::new(tls), request).await
            }
            None => round_trip(TokioIo::new(tcp), request).await,
        }
    }
}

async fn round_trip<T>(
    io: T,
    request: http::Request<Full<Bytes>>,
) -> Result<(http::StatusCode, Bytes), Failure>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(Failure::Http)?;
    let driver = tokio::spawn(connection);
    let answer = sender.send_request(request).await.map_err(Failure::Send)?;
    let status = answer.status();
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(Failure::Read)?
        .to_bytes();
    driver.abort();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn an_ipv6_authority_is_bracketed() {
        assert_eq!(Target::plain("::1", 8080).authority(), "[::1]:8080");
        assert_eq!(Target::plain("10.0.0.1", 80).authority(), "10.0.0.1:80");
    }

    #[test]
    fn roots_refuse_text_that_is_not_a_certificate() {
        assert!(matches!(
            roots_from_pem(b"nothing here"),
            Err(TlsSetupError::NoCertificate)
        ));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn one_request_gets_the_whole_answer_and_a_host_header() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            socket
                .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\r\nhello")
                .await
                .unwrap();
            String::from_utf8(seen).unwrap()
        });
        let request = http::Request::get("/x?y=1").body(Vec::new()).unwrap();
        let (status, body) = Target::plain("127.0.0.1", port)
            .exchange(request, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(status, 201);
        assert_eq!(&body[..], b"hello");
        let seen = server.await.unwrap();
        assert!(seen.starts_with("GET /x?y=1 HTTP/1.1\r\n"), "{seen}");
        assert!(
            seen.to_ascii_lowercase()
                .contains(&format!("host: 127.0.0.1:{port}\r\n")),
            "{seen}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_port_is_a_connect_failure() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let request = http::Request::get("/").body(Vec::new()).unwrap();
        let failure = Target::plain("127.0.0.1", port)
            .exchange(request, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(failure.to_string().starts_with("connect: "), "{failure}");
    }
}
