//! Talos API client for the ferro.talos modules: finds and reads the talosconfig,
//! holds credentials in memory, opens the mutual-TLS (or maintenance-mode) gRPC
//! channel to an apid endpoint, routes calls to nodes with `node` metadata, and
//! offers typed calls with deadlines, safe retries, a maintenance-mode probe and
//! reboot waiting. Failures become [`ClientError`]s that say which node, what
//! failed and what to do. This crate never reads module arguments, never writes
//! stdout, never writes credentials to disk and never puts key material in an
//! error or a `Debug` output. It is the only crate that knows tonic and rustls.
//!
//! The API is async; modules are short-lived, so a current-thread runtime is enough:
//!
//! ```no_run
//! # async fn demo() -> Result<(), ferro_talos_client::ClientError> {
//! use ferro_talos_client::{ConnectOptions, Credentials, TalosClient, load_talosconfig, select_context};
//! let cfg = load_talosconfig(None)?;
//! let (_, ctx) = select_context(&cfg, None)?;
//! let creds = Credentials::from_context(ctx)?;
//! let client = TalosClient::connect(&ctx.endpoints[0], &creds, ConnectOptions::default()).await?;
//! let version = client.with_node("10.5.0.3").version().await?;
//! # let _ = version; Ok(()) }
//! ```

mod call;
mod client;
mod control_plane;
mod credentials;
mod decode;
mod endpoint;
mod error;
mod manifests;
mod rpc;
mod talosconfig;
mod transport;
mod wait;

pub use client::{ConnectOptions, MAX_MESSAGE_SIZE, TalosClient};
pub use control_plane::{ComponentConfig, StaticPodComponent};
pub use credentials::{CredentialOrigin, Credentials, spki_fingerprint};
pub use decode::{MachineStatus, decode_machine_config, decode_machine_status, extract_kubeconfig};
pub use endpoint::{DEFAULT_PORT, Endpoint};
pub use error::{ClientError, ErrorKind, Result};
pub use manifests::{BootstrapManifest, struct_to_json};
pub use rpc::{
    Apply, ApplyMode, BOOT_ID_PATH, EventStream, InstallOutcome, RebootMode, UpgradeRebootMode,
    containerd_system,
};
pub use talosconfig::{
    Context, TalosConfig, load_talosconfig, read_talosconfig, resolve_path, select_context,
};
pub use wait::{
    FirstBoot, NodeMode, RebootDone, SequenceFailure, probe, sequence_failure, wait_for_reboot,
    wait_until_running,
};

/// The generated protocol types, for callers that need request/reply messages.
pub use ferro_talos_proto as proto;
