//! The connection to one apid endpoint: how it is opened (mutual TLS, or maintenance mode with
//! no client certificate), its timeouts and retry budget, and which node its calls target.
//!
//! Every call carries a deadline. Calls aimed at another node than the endpoint
//! carry single-valued `node` metadata (one-to-one proxying, api.md §3); `nodes`
//! is never sent, so replies have no proxy metadata and errors are plain statuses.
//! The calls themselves are in `call.rs` (plumbing) and `rpc/` (one file per topic).

use std::time::{Duration, SystemTime};

use rustls::ClientConfig;
use tonic::transport::Channel;

use crate::credentials::{CredentialOrigin, Credentials, maintenance_tls_config};
use crate::endpoint::Endpoint;
use crate::error::{ClientError, Result};
use crate::transport::open_channel;

/// talosctl raises the 4 MiB default to 32 MiB (api.md §1).
pub const MAX_MESSAGE_SIZE: usize = 32 * 1024 * 1024;

/// Timeouts and retry budget for one client.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// TCP connect plus TLS handshake.
    pub connect_timeout: Duration,
    /// Deadline of each unary call.
    pub call_timeout: Duration,
    /// Deadline of each streaming call, from start to end of stream.
    pub stream_timeout: Duration,
    /// Extra attempts for idempotent reads that fail with Unavailable.
    pub read_retries: u32,
    /// First retry delay; doubled per attempt, capped at 5 s.
    pub retry_backoff: Duration,
    /// Optional SPKI pin for maintenance connections (base64 SHA-256).
    pub maintenance_spki_pin: Option<String>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            stream_timeout: Duration::from_secs(600),
            read_retries: 3,
            retry_backoff: Duration::from_millis(500),
            maintenance_spki_pin: None,
        }
    }
}

/// Who we are to the node: no client certificate (maintenance mode), or one from `CredentialOrigin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Identity {
    Anonymous,
    Client(CredentialOrigin),
}

impl Identity {
    /// Where the client certificate came from, for errors that blame it (unspecified for a
    /// maintenance connection, which has none).
    fn credentials(self) -> CredentialOrigin {
        match self {
            Identity::Client(origin) => origin,
            Identity::Anonymous => CredentialOrigin::Unspecified,
        }
    }
}

/// A connection to one apid endpoint, optionally targeting another node through it.
#[derive(Clone)]
pub struct TalosClient {
    pub(crate) channel: Channel,
    endpoint: Endpoint,
    /// How messages name the endpoint (`Endpoint::name`).
    endpoint_name: String,
    identity: Identity,
    pub(crate) node: Option<String>,
    pub(crate) opts: ConnectOptions,
}

impl TalosClient {
    /// Connect with mutual TLS: trust only `creds.ca_pem`, verify the endpoint host
    /// (IP SAN for an IP, DNS SAN for a name), present the client certificate.
    pub async fn connect(
        endpoint: &str,
        creds: &Credentials,
        opts: ConnectOptions,
    ) -> Result<TalosClient> {
        let ep = Endpoint::parse(endpoint)?;
        let origin = creds.origin;
        creds
            .check_validity(SystemTime::now())
            .map_err(|e| relabel(e, &ep.name(), "connect").with_credentials(origin))?;
        let config = creds
            .tls_config()
            .map_err(|e| relabel(e, &ep.name(), "connect").with_credentials(origin))?;
        Self::connect_with(ep, config, Identity::Client(origin), opts).await
    }

    /// Connect to a node in maintenance mode: accept its self-signed certificate
    /// (optionally pinned), send no client certificate.
    pub async fn connect_maintenance(endpoint: &str, opts: ConnectOptions) -> Result<TalosClient> {
        let ep = Endpoint::parse(endpoint)?;
        let config = maintenance_tls_config(opts.maintenance_spki_pin.as_deref())
            .map_err(|e| relabel(e, &ep.name(), "connect"))?;
        Self::connect_with(ep, config, Identity::Anonymous, opts).await
    }

    async fn connect_with(
        ep: Endpoint,
        config: ClientConfig,
        identity: Identity,
        opts: ConnectOptions,
    ) -> Result<TalosClient> {
        let channel =
            open_channel(&ep, config, opts.connect_timeout, identity.credentials()).await?;
        Ok(TalosClient {
            channel,
            endpoint_name: ep.name(),
            endpoint: ep,
            identity,
            node: None,
            opts,
        })
    }

    /// A client for the same connection that targets `node` through the endpoint
    /// (`node` metadata). Passing the endpoint's own host sends no metadata.
    pub fn with_node(&self, node: &str) -> TalosClient {
        let mut c = self.clone();
        c.node = if node.is_empty() || node == self.endpoint.host {
            None
        } else {
            Some(node.to_string())
        };
        c
    }

    /// The node calls are aimed at (the `node` target, else the endpoint host).
    pub fn target(&self) -> &str {
        self.node.as_deref().unwrap_or(&self.endpoint_name)
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Whether this connection was made in maintenance mode (no client cert).
    pub fn is_maintenance(&self) -> bool {
        self.identity == Identity::Anonymous
    }

    /// Where this connection's client certificate came from, for errors that blame it.
    pub(crate) fn credentials(&self) -> CredentialOrigin {
        self.identity.credentials()
    }

    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }
}

/// A credential or TLS-setup error, reported as a failure to connect to `node`.
fn relabel(mut e: ClientError, node: &str, op: &str) -> ClientError {
    e.node = node.to_string();
    e.operation = op.to_string();
    e
}
