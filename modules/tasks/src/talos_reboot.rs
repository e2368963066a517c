//! `talos_reboot`: reboot a node and wait until it is back, running and ready, on a new boot.
//!
//! Upstream (tag v1.13.9 of siderolabs/talos): MachineService/Reboot
//! (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`) answers with an actor id
//! at once and runs the "reboot" sequence afterwards; DEFAULT and POWERCYCLE stop pods and
//! services and unmount first (POWERCYCLE skips kexec, so the firmware runs again), FORCE skips
//! that cleanup. The sequence does not cordon or drain. `talosctl reboot --wait` reads
//! `/proc/sys/kernel/random/boot_id` before, waits for a MachineStatus RUNNING and ready, and
//! for a different boot id (`cmd/talosctl/cmd/talos/reboot.go`, `cmd/talosctl/pkg/talos/action/`).
//! A reboot is an action, so every real run changes the node: like `ansible.builtin.reboot`.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec};
use ferro_talos_client::{RebootMode, wait_for_reboot};

use crate::connection::{self, Target, client_error, with_connection_options};
use crate::node_power;

/// How a node reboots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Stop everything cleanly, then kexec into the kernel when the node can.
    Default,
    /// Stop everything cleanly, then a full restart through the firmware (no kexec).
    Powercycle,
    /// No cleanup: straight to the reboot.
    Force,
}

impl Mode {
    fn from_params(p: &Params) -> Mode {
        match p.str("mode") {
            Some("powercycle") => Mode::Powercycle,
            Some("force") => Mode::Force,
            _ => Mode::Default,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Powercycle => "powercycle",
            Mode::Force => "force",
        }
    }

    fn request(self) -> RebootMode {
        match self {
            Mode::Default => RebootMode::Default,
            Mode::Powercycle => RebootMode::Powercycle,
            Mode::Force => RebootMode::Force,
        }
    }
}

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(
            Opt::str("mode")
                .choices(&["default", "powercycle", "force"])
                .default("default"),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let target = Target::from_params(p)?;
    let mode = Mode::from_params(p);
    let wait = p.bool("wait");
    let timeout = crate::options::wait_seconds(p, "timeout", 600)?;
    let (creds, _) = connection::require_credentials(ctx, p)?;
    let opts = connection::connect_options(p, Duration::from_secs(30))?;
    connection::block_on(async {
        let node = target.node.clone();
        let client = node_power::configured_client(ctx, &target, &creds, &opts, "Reboot").await?;
        let boot_id_before = client.boot_id().await.map_err(|e| client_error(ctx, e))?;
        let result = ModuleResult::changed()
            .with("node", node.clone())
            .with("mode", mode.name())
            .with("boot_id_before", boot_id_before.clone());
        if ctx.check_mode {
            return Ok(result.msg(format!("would reboot {node} (mode {})", mode.name())));
        }
        let actor_id = client
            .reboot(mode.request())
            .await
            .map_err(|e| client_error(ctx, e))?;
        let result = result.with("actor_id", actor_id);
        if !wait {
            return Ok(result.msg(format!("asked {node} to reboot; not waiting")));
        }
        let started = Instant::now();
        let deadline = started + timeout;
        let back = wait_for_reboot(
            &target.endpoint,
            target.routed().then_some(node.as_str()),
            &creds,
            boot_id_before.as_deref(),
            timeout,
            node_power::POLL,
        )
        .await
        .map_err(|e| {
            ModuleError::new(format!("{node} was asked to reboot, but {}", e.message))
                .with("node", node.clone())
                .changed(true)
        })?;
        node_power::wait_until_ready(&target, &creds, &opts, deadline)
            .await
            .map_err(|last| {
                ModuleError::new(format!(
                    "{node} rebooted, but it was not running and ready within {}s (last: {last}); \
                     talos_health or `talosctl -n {node} dmesg` shows what it waits for",
                    timeout.as_secs()
                ))
                .with("node", node.clone())
                .changed(true)
            })?;
        let seconds = node_power::seconds_since(started);
        Ok(result
            .with("boot_id", back.boot_id)
            .with("version", back.version_tag)
            .with("seconds", seconds)
            .msg(format!(
                "rebooted {node} (mode {}); it is running and ready again after {seconds}s",
                mode.name()
            )))
    })?
}
