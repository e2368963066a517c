//! How the probes reach a node: the talosconfig's credentials, directly or routed through an
//! endpoint (`node` metadata), exactly as the modules' `node` and `endpoint` options do.

use std::time::Duration;

use ferro_talos_client::{ClientError, ConnectOptions, Credentials, TalosClient};

pub struct Session {
    pub creds: Credentials,
    /// Route every call through this apid (like the modules' `endpoint`), else connect to each node.
    pub endpoint: Option<String>,
    pub opts: ConnectOptions,
}

impl Session {
    pub fn new(creds: Credentials, endpoint: Option<String>) -> Session {
        let opts = ConnectOptions {
            // One attempt per call: a retry would hide how the node answered and how long it took.
            read_retries: 0,
            call_timeout: Duration::from_secs(30),
            stream_timeout: Duration::from_secs(120),
            ..ConnectOptions::default()
        };
        Session {
            creds,
            endpoint,
            opts,
        }
    }

    /// A client whose calls are aimed at `node`: through the endpoint with `node` metadata when
    /// there is one, else connected to the node itself (no metadata, as the modules do).
    pub async fn client(&self, node: &str) -> Result<TalosClient, ClientError> {
        match &self.endpoint {
            Some(endpoint) => {
                let client = TalosClient::connect(endpoint, &self.creds, self.opts.clone()).await?;
                Ok(client.with_node(node))
            }
            None => TalosClient::connect(node, &self.creds, self.opts.clone()).await,
        }
    }
}
