//! What the modules that take a node down share (talos_reboot, talos_shutdown, talos_reset): a
//! configured node and an admin client for it, and waiting until it stops answering or is back
//! with its config.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError};
use ferro_talos_client::proto::resource::runtime::MachineStage;
use ferro_talos_client::{ConnectOptions, Credentials, ErrorKind, NodeMode, TalosClient, probe};

use crate::connection::{self, Target, client_error};

/// How often a wait asks the node again.
pub const POLL: Duration = Duration::from_millis(500);

/// Seconds since `started`, to a tenth, for results.
pub fn seconds_since(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 10.0).round() / 10.0
}

/// What asking a node before taking it down found.
pub enum Reached {
    /// It runs its config; an admin client for it.
    Configured(Box<TalosClient>),
    /// Nothing answered: why, in words.
    Down(String),
}

/// An admin client for a configured node, or `Down` when nothing answers. A node in maintenance
/// mode gives every client only the Reader role, so Talos refuses `action` there with
/// PermissionDenied (`internal/app/machined/pkg/controllers/runtime/api_service_config.go`
/// @ v1.13.9): that is said before anything is sent.
pub async fn reach(
    ctx: &Context,
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    action: &str,
) -> Result<Reached, ModuleError> {
    let mode = match connection::node_mode(target, Some(creds), opts).await {
        Ok(mode) => mode,
        Err(e) if e.kind == ErrorKind::Unreachable => return Ok(Reached::Down(e.to_string())),
        Err(e) => return Err(client_error(ctx, e)),
    };
    match mode {
        NodeMode::Maintenance => Err(ModuleError::new(format!(
            "node {} is in maintenance mode, where Talos refuses {action} (it answers every client with \
             the reader role only); apply its config first (ferro.talos.talos_apply), or power-cycle \
             the machine from its console",
            target.node
        ))
        .with("node", target.node.clone())),
        NodeMode::Unreachable => Ok(Reached::Down(format!(
            "nothing answers at {}",
            target.maintenance_address()
        ))),
        NodeMode::Configured => connection::connect(target, creds, opts.clone())
            .await
            .map(|client| Reached::Configured(Box::new(client)))
            .map_err(|e| client_error(ctx, e)),
    }
}

/// Like [`reach`], for an action that needs the node up: a node that does not answer fails.
pub async fn configured_client(
    ctx: &Context,
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    action: &str,
) -> Result<TalosClient, ModuleError> {
    match reach(ctx, target, creds, opts, action).await? {
        Reached::Configured(client) => Ok(*client),
        Reached::Down(why) => Err(ModuleError::new(format!(
            "node {} does not answer ({why}); nothing was sent: check that it is powered on and that \
             node (or endpoint) is its Talos API address",
            target.node
        ))
        .with("node", target.node.clone())),
    }
}

/// Probes the node until it is `wanted` (back in maintenance mode, or down: powered off or left
/// without a bootable disk); the last state seen otherwise.
pub async fn wait_for_probe(
    target: &Target,
    opts: &ConnectOptions,
    deadline: Instant,
    wanted: NodeMode,
) -> Result<(), String> {
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        match probe(target.maintenance_address(), opts).await {
            Ok(mode) if mode == wanted => return Ok(()),
            Ok(mode) => last = format!("{mode:?}").to_lowercase(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(POLL).await;
    }
    Err(last)
}

/// After a reboot: asks the node's MachineStatus until it is RUNNING and ready, which is what
/// `talosctl reboot --wait` waits for (`action.MachineReadyEventFn` in
/// `cmd/talosctl/pkg/talos/action/` @ v1.13.9) besides a new boot id.
pub async fn wait_until_ready(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    deadline: Instant,
) -> Result<(), String> {
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        let status = match connection::connect(target, creds, opts.clone()).await {
            Ok(client) => client.machine_status().await,
            Err(e) => Err(e),
        };
        match status {
            Ok(s) if s.stage == MachineStage::Running && s.ready => return Ok(()),
            Ok(s) => {
                let unmet: Vec<String> = s
                    .unmet_conditions
                    .iter()
                    .map(|(name, why)| format!("{name}: {why}"))
                    .collect();
                last = format!(
                    "stage {}",
                    s.stage
                        .as_str_name()
                        .trim_start_matches("MACHINE_STAGE_")
                        .to_lowercase()
                );
                if !unmet.is_empty() {
                    last = format!("{last}, not ready ({})", unmet.join("; "));
                }
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(POLL).await;
    }
    Err(last)
}
