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
//!
//! `talosctl reboot --drain` (`cmd/talosctl/cmd/talos/reboot.go` and `drain.go` @ v1.14.1, the
//! same in v1.13.9) cordons the Node and evicts its pods first (`--drain-timeout`, 5 minutes by
//! default), turns `--wait` on, and once the node is back waits for its Node to be Ready and
//! uncordons it. `drain` does that with talos_upgrade's drain (`upgrade_drain.rs`), with its
//! differences: a drain that fails uncordons the Node again and nothing is rebooted, and a Node an
//! operator had cordoned stays cordoned.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::proto::resource::config::MachineType;
use ferro_talos_client::{ConnectOptions, Credentials, RebootMode, TalosClient, wait_for_reboot};
use serde_json::json;

use crate::shared::connection::{self, Target, with_connection_options};
use crate::shared::failure::OrFail;
use crate::shared::live_config::{self, ReadError};
use crate::shared::node_power;
use crate::shared::upgrade_drain::{
    self, DEFAULT_DRAIN_TIMEOUT_SECS, DrainFor, Drainer, KubeCredentials, KubeInputs, NoDrain,
};

mod args;
pub use args::Args;

/// How a node reboots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Stop everything cleanly, then kexec into the kernel when the node can.
    Default,
    /// Stop everything cleanly, then a full restart through the firmware (no kexec).
    Powercycle,
    /// No cleanup: straight to the reboot.
    Force,
}

impl Mode {
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
        .option(Opt::bool("drain").default(false))
        .option(Opt::int("drain_timeout").default(DEFAULT_DRAIN_TIMEOUT_SECS))
        .option(Opt::path("kubeconfig"))
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        mode,
        wait,
        timeout,
        drain,
        kubeconfig,
    } = args;
    let (creds, source) = connection::require_credentials(ctx, &connection)?;
    let kube = KubeInputs {
        credentials: match drain {
            Some(_) => KubeCredentials::load(ctx, kubeconfig.as_deref(), &connection.secrets)?,
            None => KubeCredentials::Unused,
        },
        talosconfig_endpoints: connection::talosconfig_endpoints(&connection, &source),
    };
    let opts = connection.connect_options(Duration::from_secs(30));
    connection::block_on(async {
        let node = target.node.clone();
        let client = node_power::configured_client(&target, &creds, &opts, "Reboot").await?;
        let boot_id_before = client.boot_id().await.or_fail()?;
        let mut result = ModuleResult::changed()
            .with("node", node.clone())
            .with("mode", mode.name())
            .with("boot_id_before", boot_id_before.clone());
        let mut drainer = None;
        if drain.is_some() {
            match drainer_for(&target, &client, &creds, &opts, &kube).await? {
                Ok(d) => drainer = Some(d),
                Err(NoDrain(why)) => {
                    ctx.warn(why.clone());
                    result = result.with("drain", json!({"skipped": why}));
                }
            }
        }
        if ctx.check_mode {
            let mut first = String::new();
            if let Some(d) = &drainer {
                let preview = d
                    .preview(&node)
                    .await
                    .map_err(|m| ModuleError::new(m).with("node", node.clone()))?;
                let pods = preview["evict"].as_array().map_or(0, Vec::len);
                first = format!(
                    "would drain Node {} ({pods} pods to evict), then ",
                    d.node_name
                );
                result = result.with("drain", preview);
            }
            let verb = if first.is_empty() {
                "would reboot"
            } else {
                "reboot"
            };
            return Ok(result.msg(format!("{first}{verb} {node} (mode {})", mode.name())));
        }
        if let (Some(d), Some(drain_timeout)) = (drainer.as_mut(), drain) {
            let (drained, warnings) = d
                .cordon_and_drain(&node, drain_timeout)
                .await
                .map_err(|m| ModuleError::new(m).with("node", node.clone()))?;
            for w in warnings {
                ctx.warn(w);
            }
            result = result.with("drain", drained);
        }
        // From here on the Node is cordoned (when drained): every failure says what became of it.
        let back = reboot_and_wait(
            &target,
            &client,
            &creds,
            &opts,
            mode,
            wait,
            timeout,
            boot_id_before,
        )
        .await;
        let (actor_id, back) = match (back, drainer.as_mut()) {
            (Ok(back), _) => back,
            (Err(mut e), Some(d)) => {
                e.msg = format!("{}; {}", e.msg, d.uncordon_if_cordoned_here().await);
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        result = result.with("actor_id", actor_id);
        let Some(back) = back else {
            return Ok(result.msg(format!("asked {node} to reboot; not waiting")));
        };
        let mut drained_words = String::new();
        if let Some(d) = drainer.as_mut() {
            let uncordoned = d
                .back_and_uncordon(&node, back.deadline)
                .await
                .map_err(|m| ModuleError::new(m).with("node", node.clone()).changed(true))?;
            if let Some(drain) = result.fields.get_mut("drain") {
                drain["uncordoned"] = json!(uncordoned);
            }
            drained_words = format!(
                "; Node {} drained{}",
                d.node_name,
                if uncordoned {
                    " and uncordoned"
                } else {
                    ", left cordoned as it was"
                }
            );
        }
        Ok(result
            .with("boot_id", back.boot_id)
            .with("version", back.version)
            .with("seconds", back.seconds)
            .msg(format!(
                "rebooted {node} (mode {}); it is running and ready again after {}s{drained_words}",
                mode.name(),
                back.seconds
            )))
    })?
}

/// The node's Node and a Kubernetes client to drain it with, or why there is nothing to drain.
async fn drainer_for(
    target: &Target,
    client: &TalosClient,
    creds: &Credentials,
    opts: &ConnectOptions,
    kube: &KubeInputs,
) -> Result<Result<Drainer, NoDrain>, ModuleError> {
    let node = &target.node;
    let fail = |m: String| ModuleError::new(m).with("node", node.clone());
    let machine_type = client
        .machine_type()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let control_plane = matches!(machine_type, MachineType::ControlPlane | MachineType::Init);
    let config = live_config::read(client).await.map_err(|e| match e {
        ReadError::Client(e) => fail(e.to_string()),
        ReadError::Unusable(why) => fail(format!(
            "{node}: cannot use the node's machine config: {why}; set drain: false to reboot \
             without draining"
        )),
    })?;
    let source = upgrade_drain::kubeconfig_source(target, client, creds, opts, kube, control_plane)
        .await
        .map_err(|e| fail(e.to_string()))?;
    upgrade_drain::connect(
        client,
        &source,
        node,
        &kube.credentials,
        upgrade_drain::cluster_endpoint(&config),
        DrainFor::Reboot,
    )
    .await
    .map_err(fail)
}

/// How the node came back from its reboot.
struct Back {
    boot_id: Option<String>,
    version: String,
    seconds: f64,
    deadline: Instant,
}

/// Reboots the node and, with `wait`, waits for a new boot and a MachineStatus RUNNING and ready:
/// the reboot's actor id, and how the node came back (None when not waiting).
#[allow(clippy::too_many_arguments)]
async fn reboot_and_wait(
    target: &Target,
    client: &TalosClient,
    creds: &Credentials,
    opts: &ConnectOptions,
    mode: Mode,
    wait: bool,
    timeout: Duration,
    boot_id_before: Option<String>,
) -> Result<(String, Option<Back>), ModuleError> {
    let node = &target.node;
    let actor_id = client.reboot(mode.request()).await.or_fail()?;
    if !wait {
        return Ok((actor_id, None));
    }
    let started = Instant::now();
    let deadline = started + timeout;
    let back = wait_for_reboot(
        &target.endpoint,
        target.routed().then_some(node.as_str()),
        creds,
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
    node_power::wait_until_ready(target, creds, opts, deadline)
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
    Ok((
        actor_id,
        Some(Back {
            boot_id: back.boot_id,
            version: back.version_tag,
            seconds: node_power::seconds_since(started),
            deadline,
        }),
    ))
}
