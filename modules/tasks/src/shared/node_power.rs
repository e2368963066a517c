//! What the modules that take a node down share (talos_reboot, talos_shutdown, talos_reset): a
//! configured node and an admin client for it, and waiting until it stops answering or is back
//! with its config.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::proto::resource::runtime::MachineStage;
use ferro_talos_client::{ConnectOptions, Credentials, ErrorKind, NodeMode, TalosClient, probe};

use crate::shared::connection::{self, Target};
use crate::shared::failure::{OrFail, client_failure};

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
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    action: &str,
) -> Result<Reached, ModuleError> {
    let mode = match connection::node_mode(target, Some(creds), opts).await {
        Ok(mode) => mode,
        Err(e) if e.kind == ErrorKind::Unreachable => return Ok(Reached::Down(e.to_string())),
        Err(e) => return Err(client_failure(e)),
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
            .or_fail(),
    }
}

/// Like [`reach`], for an action that needs the node up: a node that does not answer fails.
pub async fn configured_client(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    action: &str,
) -> Result<TalosClient, ModuleError> {
    match reach(target, creds, opts, action).await? {
        Reached::Configured(client) => Ok(*client),
        Reached::Down(why) => Err(ModuleError::new(format!(
            "node {} does not answer ({why}); nothing was sent: check that it is powered on and that \
             node (or endpoint) is its Talos API address",
            target.node
        ))
        .with("node", target.node.clone())),
    }
}

/// What the task's own path to a node says about it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// It answers with the cluster's credentials: it runs its config.
    Configured,
    /// It answers as a node in maintenance mode.
    Maintenance,
    /// It does not answer where the task reaches it: powered off, rebooting, nothing to boot.
    Gone(String),
    /// The path itself is broken (the endpoint does not answer), so nothing can be said about
    /// the node: why, in words.
    Unknown(String),
}

impl Seen {
    fn describe(&self) -> String {
        match self {
            Seen::Configured => "it still answers with its config".into(),
            Seen::Maintenance => "it answers in maintenance mode".into(),
            Seen::Gone(why) | Seen::Unknown(why) => why.clone(),
        }
    }
}

/// What a wait waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// The node no longer answers: powered off, or left without a bootable disk.
    Down,
    /// The node answers in maintenance mode.
    Maintenance,
    /// Either: the node left its address; if it comes back there at all, it is in maintenance mode.
    DownOrMaintenance,
}

impl Want {
    fn met_by(self, seen: &Seen) -> bool {
        matches!(
            (self, seen),
            (Want::Down | Want::DownOrMaintenance, Seen::Gone(_))
                | (
                    Want::Maintenance | Want::DownOrMaintenance,
                    Seen::Maintenance
                )
        )
    }
}

/// Asks about the node the way the task reaches it. Directly, a probe tells. Through an endpoint
/// (`node` routing), the endpoint's apid dials the node for us: while the node answers, the call
/// succeeds; once the node is gone, apid answers the call itself with Unavailable and grpc-go's
/// dial error (`internal/app/apid/pkg/backend/apid.go` GetConnection, `director/director.go`
/// singleDirector @ v1.14.1: one backend per `node`, the backend's connection error returned as
/// the call's). So a failure of the routed call means "down" only when the endpoint itself still
/// answers; a controller that cannot reach the node directly learns nothing from probing it.
/// A node back in maintenance mode fails the endpoint's TLS verification (`NotInCluster`).
pub async fn look(target: &Target, creds: Option<&Credentials>, opts: &ConnectOptions) -> Seen {
    let mut opts = opts.clone();
    // One answer per poll: the wait itself is the retry.
    opts.read_retries = 0;
    let (true, Some(creds)) = (target.routed(), creds) else {
        return match probe(target.maintenance_address(), &opts).await {
            Ok(NodeMode::Configured) => Seen::Configured,
            Ok(NodeMode::Maintenance) => Seen::Maintenance,
            Ok(NodeMode::Unreachable) => Seen::Gone(format!(
                "nothing answers at {}",
                target.maintenance_address()
            )),
            Err(e) => Seen::Unknown(e.to_string()),
        };
    };
    let routed = match connection::connect(target, creds, opts.clone()).await {
        Ok(client) => client.version().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let e = match routed {
        Ok(()) => return Seen::Configured,
        Err(e) if e.kind == ErrorKind::NotInCluster => return Seen::Maintenance,
        Err(e) => e,
    };
    if !matches!(
        e.kind,
        ErrorKind::Unreachable | ErrorKind::ConnectionClosed | ErrorKind::Timeout
    ) {
        return Seen::Unknown(e.to_string());
    }
    let endpoint_answers = match TalosClient::connect(&target.endpoint, creds, opts).await {
        Ok(client) => client.version().await.map(|_| ()),
        Err(e) => Err(e),
    };
    match endpoint_answers {
        Ok(()) => Seen::Gone(format!(
            "{} answers, but reaches no {} ({})",
            target.endpoint, target.node, e.message
        )),
        Err(endpoint) => Seen::Unknown(format!(
            "the endpoint {} does not answer either, so whether {} is down cannot be told ({})",
            target.endpoint, target.node, endpoint.message
        )),
    }
}

/// Asks the node (see [`look`]) until it is what `want` says; the last state seen otherwise.
pub async fn wait_until(
    target: &Target,
    creds: Option<&Credentials>,
    opts: &ConnectOptions,
    deadline: Instant,
    want: Want,
) -> Result<Seen, String> {
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        let seen = look(target, creds, opts).await;
        if want.met_by(&seen) {
            return Ok(seen);
        }
        last = seen.describe();
        tokio::time::sleep(POLL).await;
    }
    Err(last)
}

/// The stage the node's MachineStatus reports, in words (`shutting down`), when it answers.
pub async fn stage(target: &Target, creds: &Credentials, opts: &ConnectOptions) -> Option<String> {
    let client = connection::connect(target, creds, opts.clone())
        .await
        .ok()?;
    let status = client.machine_status().await.ok()?;
    Some(stage_words(status.stage))
}

fn stage_words(stage: MachineStage) -> String {
    stage
        .as_str_name()
        .trim_start_matches("MACHINE_STAGE_")
        .replace('_', " ")
        .to_lowercase()
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
                last = format!("stage {}", stage_words(s.stage));
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
