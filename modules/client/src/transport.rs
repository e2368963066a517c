//! The gRPC channel to one apid endpoint: TCP, then our own TLS handshake, then HTTP/2.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tonic::codegen::Service;
use tonic::transport::{Channel, Uri};

use crate::credentials::CredentialOrigin;
use crate::endpoint::Endpoint;
use crate::error::{ClientError, ErrorKind, Result, human_duration};

/// Open the channel to `ep` with `config` (mutual TLS or the maintenance verifier). `credentials`
/// says where a client certificate came from, so a handshake refusal names what to check.
pub(crate) async fn open_channel(
    ep: &Endpoint,
    config: ClientConfig,
    connect_timeout: Duration,
    credentials: CredentialOrigin,
) -> Result<Channel> {
    let server_name = ServerName::try_from(ep.host.clone()).map_err(|_| {
        ClientError::new(
            ep.name(),
            "connect",
            ErrorKind::InvalidEndpoint,
            "the host is neither an IP address nor a valid DNS name",
        )
    })?;
    let connector = TlsConnector {
        config: Arc::new(config),
        host: ep.host.clone(),
        port: ep.port,
        server_name,
        timeout: connect_timeout,
    };
    let uri = format!("http://{}", ep.authority());
    Channel::from_shared(uri)
        .map_err(|e| {
            ClientError::new(
                ep.name(),
                "connect",
                ErrorKind::InvalidEndpoint,
                e.to_string(),
            )
        })?
        // Keepalives as talosctl uses them, so a node that vanishes during a
        // reboot is noticed instead of hanging a call until its deadline.
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .connect_with_connector(connector)
        .await
        .map_err(|e| {
            ClientError::from_transport(&ep.name(), "connect", &e).with_credentials(credentials)
        })
}

/// Dials TCP and runs the TLS handshake ourselves, so the TLS configuration (our
/// CA only, or the maintenance verifier) and the handshake errors stay in our hands.
#[derive(Clone)]
struct TlsConnector {
    config: Arc<ClientConfig>,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    timeout: Duration,
}

type TlsIo = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl Service<Uri> for TlsConnector {
    type Response = TlsIo;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<TlsIo>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let handshake = async {
                let tcp = TcpStream::connect((this.host.as_str(), this.port)).await?;
                tcp.set_nodelay(true)?;
                tokio_rustls::TlsConnector::from(this.config.clone())
                    .connect(this.server_name.clone(), tcp)
                    .await
            };
            match tokio::time::timeout(this.timeout, handshake).await {
                Ok(stream) => stream.map(TokioIo::new),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "connection to port {} timed out after {}",
                        this.port,
                        human_duration(this.timeout)
                    ),
                )),
            }
        })
    }
}
