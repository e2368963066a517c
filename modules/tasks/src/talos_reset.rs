//! `talos_reset`: wipe a node back to maintenance mode. Destructive, so it asks for confirmation.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec};
use ferro_talos_client::proto::machine::{ResetRequest, reset_request::WipeMode};
use ferro_talos_client::{ConnectOptions, Credentials, NodeMode, probe};

use crate::connection::{self, Target, client_error, with_connection_options};

/// The value `confirm` must have: a reset destroys the node's data and its cluster membership.
const CONFIRMATION: &str = "reset";

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("confirm").required())
        .option(Opt::bool("graceful").default(true))
        .option(
            Opt::str("wipe_mode")
                .choices(&["all", "system_disk", "user_disks"])
                .default("all"),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    if p.str("confirm") != Some(CONFIRMATION) {
        return Err(ModuleError::new(format!(
            "confirm must be {CONFIRMATION:?}: resetting wipes the node and removes it from the cluster"
        )));
    }
    let target = Target::from_params(p)?;
    let timeout = p.int("timeout").unwrap_or(600);
    if !(1..=86_400).contains(&timeout) {
        return Err(ModuleError::new(format!(
            "timeout must be between 1 and 86400 seconds, got {timeout}"
        )));
    }
    let timeout = Duration::from_secs(timeout as u64);
    let mode = match p.str("wipe_mode") {
        Some("system_disk") => WipeMode::SystemDisk,
        Some("user_disks") => WipeMode::UserDisks,
        _ => WipeMode::All,
    };
    let request = ResetRequest {
        graceful: p.bool("graceful"),
        reboot: true,
        mode: mode as i32,
        ..ResetRequest::default()
    };
    let opts = connection::connect_options(p, Duration::from_secs(60))?;
    let creds = connection::credentials(ctx, p)?;
    connection::block_on(reset(
        ctx,
        &target,
        creds.map(|c| c.0),
        opts,
        request,
        p.bool("wait"),
        timeout,
    ))?
}

async fn reset(
    ctx: &mut Context,
    target: &Target,
    creds: Option<Credentials>,
    opts: ConnectOptions,
    request: ResetRequest,
    wait: bool,
    timeout: Duration,
) -> Result<ModuleResult, ModuleError> {
    let base = ModuleResult::unchanged().with("node", target.node.clone());
    // Already in maintenance mode: nothing to reset.
    if probe(&target.endpoint, &opts)
        .await
        .map_err(|e| client_error(ctx, e))?
        == NodeMode::Maintenance
    {
        return Ok(base.msg(format!("{} is already in maintenance mode", target.node)));
    }
    let creds = creds.ok_or_else(|| {
        ModuleError::new(format!(
            "node {} is configured; resetting it needs admin credentials: set talosconfig, secrets_file or secrets",
            target.node
        ))
    })?;
    let mut result = base.with("graceful", request.graceful);
    result.changed = true;
    if ctx.check_mode {
        return Ok(result.msg(format!("would reset {} to maintenance mode", target.node)));
    }
    let client = connection::connect(target, &creds, opts.clone())
        .await
        .map_err(|e| client_error(ctx, e))?;
    client
        .reset(request)
        .await
        .map_err(|e| client_error(ctx, e))?;
    if !wait {
        return Ok(result.msg(format!(
            "reset {}; not waiting for it to come back",
            target.node
        )));
    }
    // The node reboots into maintenance mode: wait until a probe says so.
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        match probe(&target.endpoint, &opts).await {
            Ok(NodeMode::Maintenance) => {
                return Ok(result.msg(format!(
                    "reset {}; it is back in maintenance mode",
                    target.node
                )));
            }
            Ok(mode) => last = format!("{mode:?}").to_lowercase(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(ModuleError::new(format!(
        "reset {}, but it was not back in maintenance mode within {}s (last: {last}); check its console",
        target.node,
        timeout.as_secs()
    ))
    .with("node", target.node.clone())
    .changed(true))
}
