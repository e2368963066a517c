//! A blocking HTTPS client for the real kube-apiserver, with which talos-sim plays the kubelets
//! and Talos's own controllers: one request per connection (HTTP/1.1, `Connection: close`), a
//! client certificate for who asks, JSON in and out.
//!
//! Blocking because its callers are the supervisor's threads, which also own the processes
//! (`dies_with_parent` ties each child to the thread that started it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Who talks to the API server, and how it checks the server.
#[derive(Clone)]
pub struct Client {
    tls: Arc<rustls::ClientConfig>,
}

/// An answer: the status code and the body as JSON (`Value::Null` when it is not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: u16,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

impl Client {
    /// A client with the identity in `cert_pem`/`key_pem`, trusting the cluster's CA.
    pub fn new(ca_pem: &str, cert_pem: &str, key_pem: &str) -> anyhow::Result<Client> {
        let mut roots = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(der?)?;
        }
        let chain =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
        let mut tls = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Client { tls: Arc::new(tls) })
    }

    /// Sends `method path` to the API server at `server`; Err when it cannot be reached.
    pub fn send(
        &self,
        server: SocketAddr,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> Result<Answer, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let name = ServerName::IpAddress(server.ip().into());
        let conn = rustls::ClientConnection::new(self.tls.clone(), name)
            .map_err(|e| format!("TLS: {e}"))?;
        let tcp = TcpStream::connect_timeout(&server, TIMEOUT).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(TIMEOUT))
            .and_then(|_| tcp.set_write_timeout(Some(TIMEOUT)))
            .map_err(|e| e.to_string())?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {server}\r\nAccept: application/json\r\n\
             Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        match stream.read_to_end(&mut raw) {
            Ok(_) => {}
            // The server closes without a TLS close_notify now and then: what came is the answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(e.to_string()),
        }
        parse(&raw)
    }

    pub fn get(&self, server: SocketAddr, path: &str) -> Result<Answer, String> {
        self.send(server, "GET", path, "application/json", None)
    }
}

/// The status line and the body, chunked or not.
fn parse(raw: &[u8]) -> Result<Answer, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the API server's answer has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("the API server's answer has no status code")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let rest = &raw[split + 4..];
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Ok(Answer {
        code,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        rest = &rest[line_end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_and_plain_answers_are_read() {
        let plain = b"HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\n{\"a\": 1}\n";
        let a = parse(plain).unwrap();
        assert_eq!((a.code, a.body["a"].as_i64()), (201, Some(1)));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"b\"\r\n3\r\n: 2\r\n1\r\n}\r\n0\r\n\r\n";
        let a = parse(chunked).unwrap();
        assert_eq!((a.code, a.body["b"].as_i64()), (200, Some(2)));
    }
}
