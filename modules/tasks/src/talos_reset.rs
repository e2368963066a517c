//! `talos_reset`: wipe a node, destructively and only when confirmed, with modes that say what
//! they leave behind.
//!
//! Upstream (tag v1.13.9 of siderolabs/talos, `internal/app/machined/internal/server/v1alpha1/
//! v1alpha1_server.go` Reset and `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`
//! Reset): a request without system partition labels wipes the whole system disk, bootloader
//! included, so the node boots again only from installation media; the labels STATE and
//! EPHEMERAL wipe the config and etcd's data and keep the installation, so the node comes back
//! in maintenance mode (`talosctl reset --system-labels-to-wipe STATE --system-labels-to-wipe
//! EPHEMERAL`); USER_DISKS wipes only the disks named and keeps the config. Reset is admin-only,
//! so a node in maintenance mode refuses it.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec, Type};
use ferro_talos_client::proto::machine::{ResetPartitionSpec, ResetRequest, reset_request};
use ferro_talos_client::{ConnectOptions, Credentials, NodeMode, wait_for_reboot};
use serde_json::json;

use crate::connection::{self, Target, client_error, with_connection_options};
use crate::kube_access::KubeCredentials;
use crate::node_power;
use crate::node_removal;

/// The value `confirm` must have for a reset that keeps the installation.
const CONFIRM_RESET: &str = "reset";
/// The value `confirm` must have to wipe the whole system disk: a separate word, so a play that
/// confirms ordinary resets cannot erase a bootloader by changing `wipe` alone.
const CONFIRM_SYSTEM_DISK: &str = "wipe-system-disk";
/// The volumes a return to maintenance mode wipes: the config (STATE) and etcd's data and the
/// pods (EPHEMERAL).
const MAINTENANCE_VOLUMES: [&str; 2] = ["STATE", "EPHEMERAL"];

/// What a reset wipes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wipe {
    /// STATE and EPHEMERAL: the node comes back in maintenance mode, still installed.
    Maintenance,
    /// The whole system disk, bootloader included: the node needs installation media.
    SystemDisk,
    /// Only the user disks named: the node keeps its config.
    UserDisks,
    /// EPHEMERAL only (etcd's data, the pods): the node keeps its config and comes back with an
    /// empty etcd, as the disaster-recovery procedure wipes every control plane before
    /// bootstrapping one from a snapshot.
    Ephemeral,
}

impl Wipe {
    fn from_params(p: &Params) -> Wipe {
        match p.str("wipe") {
            Some("system_disk") => Wipe::SystemDisk,
            Some("user_disks") => Wipe::UserDisks,
            Some("ephemeral") => Wipe::Ephemeral,
            _ => Wipe::Maintenance,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Wipe::Maintenance => "maintenance",
            Wipe::SystemDisk => "system_disk",
            Wipe::UserDisks => "user_disks",
            Wipe::Ephemeral => "ephemeral",
        }
    }

    fn confirmation(self) -> &'static str {
        match self {
            Wipe::SystemDisk => CONFIRM_SYSTEM_DISK,
            _ => CONFIRM_RESET,
        }
    }
}

/// A checked reset: the request for Talos and what the task then waits for.
struct Plan {
    wipe: Wipe,
    user_disks: Vec<String>,
    graceful: bool,
    reboot: bool,
    wait: bool,
    timeout: Duration,
    kubernetes_node: KubernetesNode,
}

/// What becomes of the node's Kubernetes Node object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KubernetesNode {
    /// It stays (NotReady) until someone deletes it.
    Keep,
    /// It is deleted once the machine has left, as `kubectl delete node` would.
    Delete,
}

impl Plan {
    fn request(&self) -> ResetRequest {
        let (mode, labels) = match self.wipe {
            // talosctl's --system-labels-to-wipe: mode stays ALL, each label wiped.
            Wipe::Maintenance => (reset_request::WipeMode::All, &MAINTENANCE_VOLUMES[..]),
            Wipe::SystemDisk => (reset_request::WipeMode::SystemDisk, &[][..]),
            Wipe::UserDisks => (reset_request::WipeMode::UserDisks, &[][..]),
            Wipe::Ephemeral => (reset_request::WipeMode::All, &["EPHEMERAL"][..]),
        };
        ResetRequest {
            graceful: self.graceful,
            reboot: self.reboot,
            system_partitions_to_wipe: labels
                .iter()
                .map(|label| ResetPartitionSpec {
                    label: label.to_string(),
                    wipe: true,
                })
                .collect(),
            user_disks_to_wipe: self.user_disks.clone(),
            mode: mode as i32,
        }
    }

    /// What goes, in words.
    fn wiped(&self) -> Vec<String> {
        match self.wipe {
            Wipe::Maintenance => MAINTENANCE_VOLUMES.iter().map(|v| v.to_string()).collect(),
            Wipe::SystemDisk => vec!["the whole system disk".into()],
            Wipe::UserDisks => self.user_disks.clone(),
            Wipe::Ephemeral => vec!["EPHEMERAL".into()],
        }
    }

    fn summary(&self, node: &str) -> String {
        let afterwards = if !self.reboot {
            "power it off"
        } else {
            match self.wipe {
                Wipe::Maintenance => "reboot it into maintenance mode",
                Wipe::SystemDisk => "leave it with nothing to boot but installation media",
                Wipe::UserDisks | Wipe::Ephemeral => "reboot it with its config",
            }
        };
        format!(
            "wipe {} of {node} and {afterwards}",
            self.wiped().join(", ")
        )
    }
}

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("confirm").required())
        .option(
            Opt::str("wipe")
                .choices(&["maintenance", "system_disk", "user_disks", "ephemeral"])
                .default("maintenance"),
        )
        .option(
            Opt::list("user_disks")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::bool("graceful").default(true))
        .option(Opt::bool("reboot").default(true))
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
        .option(Opt::bool("delete_kubernetes_node").default(false))
        .option(Opt::path("kubeconfig"))
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let plan = plan(p)?;
    let target = Target::from_params(p)?;
    let opts = connection::connect_options(p, Duration::from_secs(60))?;
    let creds = connection::credentials(ctx, p)?;
    let kube_creds = match plan.kubernetes_node {
        KubernetesNode::Delete => KubeCredentials::from_params(ctx, p)?,
        KubernetesNode::Keep => KubeCredentials::Unused,
    };
    connection::block_on(reset(
        ctx,
        &target,
        creds.map(|c| c.0),
        &kube_creds,
        opts,
        plan,
    ))?
}

fn plan(p: &Params) -> Result<Plan, ModuleError> {
    let wipe = Wipe::from_params(p);
    let confirm = p.str("confirm").unwrap_or_default();
    if confirm != wipe.confirmation() {
        let why = match wipe {
            Wipe::SystemDisk => {
                "wiping the whole system disk erases the bootloader too: the node then boots only \
                 from installation media"
            }
            _ => "resetting wipes the node and removes it from the cluster",
        };
        return Err(ModuleError::new(format!(
            "confirm must be {:?} for wipe={}: {why}",
            wipe.confirmation(),
            wipe.name()
        )));
    }
    let user_disks: Vec<String> = p
        .str_list("user_disks")
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect();
    match wipe {
        Wipe::UserDisks if user_disks.is_empty() => {
            return Err(ModuleError::new(
                "user_disks must name the disks to wipe (e.g. [/dev/sdb]) when wipe=user_disks; \
                 Talos wipes nothing without them",
            ));
        }
        Wipe::Maintenance | Wipe::SystemDisk | Wipe::Ephemeral if !user_disks.is_empty() => {
            return Err(ModuleError::new(format!(
                "user_disks is only used with wipe=user_disks, not wipe={}: remove user_disks, or \
                 set wipe: user_disks to wipe only those disks",
                wipe.name()
            )));
        }
        _ => {}
    }
    if let Some(bad) = user_disks.iter().find(|d| !d.starts_with("/dev/")) {
        return Err(ModuleError::new(format!(
            "user_disks: {bad:?} is not a device path; write it like /dev/sdb or /dev/nvme1n1"
        )));
    }
    let timeout = crate::options::wait_seconds(p, "timeout", 600)?;
    let kubernetes_node = if p.bool("delete_kubernetes_node") {
        KubernetesNode::Delete
    } else {
        KubernetesNode::Keep
    };
    if kubernetes_node == KubernetesNode::Delete && !p.bool("wait") {
        return Err(ModuleError::new(
            "delete_kubernetes_node needs wait: true: the Node can only go once the machine has \
             left (a running kubelet registers it again); remove wait: false",
        ));
    }
    if kubernetes_node == KubernetesNode::Delete
        && matches!(wipe, Wipe::UserDisks | Wipe::Ephemeral)
    {
        return Err(ModuleError::new(
            "delete_kubernetes_node is for a node that leaves the cluster, and wipe=user_disks or \
             wipe=ephemeral keeps its config (its kubelet registers the Node again); remove \
             delete_kubernetes_node",
        ));
    }
    Ok(Plan {
        wipe,
        user_disks,
        graceful: p.bool("graceful"),
        reboot: p.bool("reboot"),
        wait: p.bool("wait"),
        timeout,
        kubernetes_node,
    })
}

async fn reset(
    ctx: &mut Context,
    target: &Target,
    creds: Option<Credentials>,
    kube_creds: &KubeCredentials,
    opts: ConnectOptions,
    plan: Plan,
) -> Result<ModuleResult, ModuleError> {
    let node = target.node.clone();
    let base = ModuleResult::unchanged()
        .with("node", node.clone())
        .with("wipe", plan.wipe.name())
        .with("reboot", plan.reboot);
    let mode = connection::node_mode(target, creds.as_ref(), &opts)
        .await
        .map_err(|e| client_error(ctx, e))?;
    if mode == NodeMode::Maintenance {
        if plan.wipe == Wipe::Maintenance {
            return Ok(base.msg(format!("{node} is already in maintenance mode")));
        }
        return Err(ModuleError::new(format!(
            "node {node} is in maintenance mode, where Talos refuses Reset (it needs the admin \
             API); to wipe {}, apply a config first, or boot the machine from installation media",
            plan.wiped().join(", ")
        ))
        .with("node", node));
    }
    let creds = creds.ok_or_else(|| {
        ModuleError::new(format!(
            "node {node} is configured; resetting it needs admin credentials: set talosconfig, secrets_file or secrets"
        ))
    })?;
    let mut result = base
        .with("graceful", plan.graceful)
        .with("wiped", plan.wiped())
        .with("needs_installation_media", plan.wipe == Wipe::SystemDisk);
    result.changed = true;
    let client = connection::connect(target, &creds, opts.clone())
        .await
        .map_err(|e| client_error(ctx, e))?;
    if plan.graceful {
        node_removal::etcd_guard(&client, &node).await.map_err(|why| {
            ModuleError::new(format!(
                "not resetting {node}: a graceful reset leaves etcd before it wipes anything, and {why}; \
                 Talos would stop the reset there with the node cordoned and drained; bring the \
                 unhealthy members back first, or set graceful: false to reset it without leaving \
                 etcd (then remove its member with ferro.talos.talos_etcd_member); nothing was changed"
            ))
            .with("node", node.clone())
        })?;
    }
    let kube_node = match plan.kubernetes_node {
        KubernetesNode::Keep => None,
        KubernetesNode::Delete => node_removal::find(&client, &node, kube_creds)
            .await
            .map_err(|why| ModuleError::new(why).with("node", node.clone()))?,
    };
    if let Some(k) = &kube_node {
        let exists = k
            .exists()
            .await
            .map_err(|why| ModuleError::new(why).with("node", node.clone()))?;
        result = result.with(
            "kubernetes_node",
            json!({"name": k.name, "deleted": false, "existed": exists}),
        );
    }
    if ctx.check_mode {
        let node_words = kube_node
            .as_ref()
            .map(|k| format!(", then delete its Kubernetes Node {}", k.name))
            .unwrap_or_default();
        return Ok(result.msg(format!("would {}{node_words}", plan.summary(&node))));
    }
    let old_boot_id = client.boot_id().await.unwrap_or(None);
    client
        .reset(plan.request())
        .await
        .map_err(|e| client_error(ctx, e))?;
    if plan.wipe == Wipe::SystemDisk {
        ctx.warn(format!(
            "{node}: its system disk is wiped, bootloader included; it boots again only from \
             installation media (ISO, PXE): attach it, then apply a config to install Talos"
        ));
    }
    if !plan.wait {
        return Ok(result.msg(format!(
            "asked {node} to {}; not waiting",
            plan.summary(&node)
        )));
    }
    let deadline = Instant::now() + plan.timeout;
    let outcome = match (plan.reboot, plan.wipe) {
        (true, Wipe::Maintenance) => {
            node_power::wait_for_probe(target, &opts, deadline, NodeMode::Maintenance)
                .await
                .map(|()| "it is back in maintenance mode".to_string())
        }
        (true, Wipe::UserDisks | Wipe::Ephemeral) => wait_for_reboot(
            &target.endpoint,
            target.routed().then_some(node.as_str()),
            &creds,
            old_boot_id.as_deref(),
            plan.timeout,
            Duration::from_millis(500),
        )
        .await
        .map(|_| "it is back with its config".to_string())
        .map_err(|e| e.message),
        // Powered off, or nothing left to boot: the outcome is that it stops answering.
        _ => node_power::wait_for_probe(target, &opts, deadline, NodeMode::Unreachable)
            .await
            .map(|()| "it no longer answers".to_string()),
    };
    match outcome {
        Ok(state) => {
            let mut deleted_words = String::new();
            if let Some(k) = &kube_node {
                let deleted = k.delete().await.map_err(|why| {
                    ModuleError::new(format!(
                        "reset {node} ({}), but its Kubernetes Node {} could not be deleted: {why}; \
                         delete it with kubectl delete node {}",
                        plan.wiped().join(", "),
                        k.name,
                        k.name
                    ))
                    .with("node", node.clone())
                    .changed(true)
                })?;
                result = result.with(
                    "kubernetes_node",
                    json!({"name": k.name, "deleted": deleted, "existed": deleted}),
                );
                if deleted {
                    deleted_words = format!("; deleted its Kubernetes Node {}", k.name);
                }
            }
            Ok(result.with("state", state.clone()).msg(format!(
                "reset {node} ({}); {state}{deleted_words}",
                plan.wiped().join(", ")
            )))
        }
        Err(last) => Err(ModuleError::new(format!(
            "reset {node} ({}), but {} within {}s (last: {last}); check its console",
            plan.wiped().join(", "),
            match (plan.reboot, plan.wipe) {
                (true, Wipe::Maintenance) => "it was not back in maintenance mode",
                (true, Wipe::UserDisks | Wipe::Ephemeral) => "it was not back with its config",
                _ => "it did not go down",
            },
            plan.timeout.as_secs()
        ))
        .with("node", node)
        .changed(true)),
    }
}
