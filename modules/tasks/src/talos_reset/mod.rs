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

use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_client::proto::machine::{ResetPartitionSpec, ResetRequest, reset_request};
use ferro_talos_client::{
    ConnectOptions, Credentials, NodeMode, SequenceFailure, TalosClient, sequence_failure,
    wait_for_reboot,
};
use ferro_talos_config::MachineConfig;
use serde_json::{Value, json};

use crate::shared::connection::{self, Target, with_connection_options};
use crate::shared::failure::OrFail;
use crate::shared::kube_access::KubeCredentials;
use crate::shared::live_config;
use crate::shared::node_power::{self, Seen, Want};
use crate::shared::node_removal::{self, KubeNode};

mod args;
pub use args::Args;

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
pub struct Plan {
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

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        plan,
        kubeconfig,
    } = args;
    let mut opts = connection.connect_options(Duration::from_secs(60));
    // The sequence's events are watched for as long as the task waits.
    opts.stream_timeout = plan.timeout + Duration::from_secs(30);
    let creds = connection::credentials(ctx, &connection)?;
    let kube_creds = match plan.kubernetes_node {
        KubernetesNode::Delete => {
            KubeCredentials::load(ctx, kubeconfig.as_deref(), &connection.secrets)?
        }
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
        .or_fail()?;
    if mode == NodeMode::Maintenance {
        return in_maintenance(base, &node, &plan);
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
        .or_fail()?;
    if plan.graceful {
        refuse_unless_etcd_can_lose_it(&client, &node).await?;
    }
    let kube_node = match plan.kubernetes_node {
        KubernetesNode::Keep => None,
        KubernetesNode::Delete => find_kubernetes_node(&client, &node, kube_creds).await?,
    };
    if let Some((k, existed)) = &kube_node {
        result = result.with(
            "kubernetes_node",
            json!({"name": k.name, "deleted": false, "existed": existed}),
        );
    }
    let kube_node = kube_node.map(|(k, _)| k);
    let static_address = address_the_wipe_takes(&client, &node, plan.wipe).await;
    if let Some(s) = &static_address {
        ctx.warn(new_address_warning(&node, s));
        result = result.with(
            "static_address",
            json!({"address": s.address, "source": s.source}),
        );
    }
    if ctx.check_mode {
        let node_words = kube_node
            .as_ref()
            .map(|k| format!(", then delete its Kubernetes Node {}", k.name))
            .unwrap_or_default();
        return Ok(result.msg(format!("would {}{node_words}", plan.summary(&node))));
    }
    let (actor_id, old_boot_id) = start_reset(ctx, &client, &plan, &node).await?;
    result = result.with("actor_id", actor_id.clone());
    if !plan.wait {
        return Ok(result.msg(format!(
            "asked {node} to {}; not waiting",
            plan.summary(&node)
        )));
    }
    let awaited = Awaited::after(&plan, static_address.is_some());
    let waited = wait_for(
        awaited,
        target,
        &creds,
        &opts,
        old_boot_id.as_deref(),
        plan.timeout,
    );
    let state = unless_aborted(waited, &client, &actor_id, &node, &plan, awaited).await?;
    let mut deleted_words = String::new();
    if let Some(k) = &kube_node {
        let deleted = delete_kubernetes_node(k, &node, &plan).await?;
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

/// A node in maintenance mode: already where `wipe: maintenance` takes it; any other wipe
/// needs the admin API, which Talos does not serve there.
fn in_maintenance(
    base: ModuleResult,
    node: &str,
    plan: &Plan,
) -> Result<ModuleResult, ModuleError> {
    if plan.wipe == Wipe::Maintenance {
        return Ok(base.msg(format!("{node} is already in maintenance mode")));
    }
    Err(ModuleError::new(format!(
        "node {node} is in maintenance mode, where Talos refuses Reset (it needs the admin \
         API); to wipe {}, apply a config first, or boot the machine from installation media",
        plan.wiped().join(", ")
    ))
    .with("node", node.to_string()))
}

/// A graceful reset leaves etcd first: refused here, before anything is drained, when etcd
/// would lose its quorum of healthy members without the node (Talos would fail the reset there).
async fn refuse_unless_etcd_can_lose_it(
    client: &TalosClient,
    node: &str,
) -> Result<(), ModuleError> {
    node_removal::etcd_guard(client, node).await.map_err(|why| {
        ModuleError::new(format!(
            "not resetting {node}: a graceful reset leaves etcd before it wipes anything, and {why}; \
             Talos would fail the reset there with the node drained, then reboot it; bring the \
             unhealthy members back first, or set graceful: false to reset it without leaving \
             etcd (then remove its member with ferro.talos.talos_etcd_member); nothing was changed"
        ))
        .with("node", node.to_string())
    })
}

/// The node's Kubernetes Node and whether it exists now, looked up while the node still runs
/// its config (which names it and the API server); None when the node does not register one.
async fn find_kubernetes_node(
    client: &TalosClient,
    node: &str,
    kube_creds: &KubeCredentials,
) -> Result<Option<(KubeNode, bool)>, ModuleError> {
    let fail = |why: String| ModuleError::new(why).with("node", node.to_string());
    let Some(k) = node_removal::find(client, node, kube_creds)
        .await
        .map_err(fail)?
    else {
        return Ok(None);
    };
    let exists = k.exists().await.map_err(fail)?;
    Ok(Some((k, exists)))
}

/// The node's address when its config sets it and the wipe takes that config (STATE): then it
/// comes back elsewhere. Only the config's own addresses go with it; kernel arguments and
/// platform ones stay.
async fn address_the_wipe_takes(
    client: &TalosClient,
    node: &str,
    wipe: Wipe,
) -> Option<StaticAddress> {
    match wipe {
        Wipe::Maintenance | Wipe::SystemDisk => match live_config::read(client).await {
            Ok(config) => static_address_of(&config, connection::host_of(node)),
            // Not knowing changes nothing about the reset; the wait then looks at the old address.
            Err(_) => None,
        },
        Wipe::UserDisks | Wipe::Ephemeral => None,
    }
}

/// Where to look for a node whose config set its address, once that config is wiped.
fn new_address_warning(node: &str, s: &StaticAddress) -> String {
    format!(
        "{node}: its address {} is set in its machine config ({}); the reset wipes that config \
         with STATE, and a node without a config takes its addresses from DHCP on every link, \
         so it comes back in maintenance mode most likely on another address: find it on the \
         machine's console (the Talos dashboard shows it) or in your DHCP server's leases (by \
         the machine's MAC address), then apply its config there (ferro.talos.talos_apply \
         with node set to that address)",
        s.address, s.source
    )
}

/// What the wait after the reset looks for: what the node does once it is wiped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Awaited {
    /// Its config set its address and goes with STATE: it leaves the address, and if it comes
    /// back there at all, it is in maintenance mode.
    LeftAddress,
    /// It is back in maintenance mode at its address.
    Maintenance,
    /// It is back with its config, on a new boot.
    WithConfig,
    /// Powered off, or nothing left to boot: it stops answering.
    Down,
}

impl Awaited {
    fn after(plan: &Plan, static_address: bool) -> Awaited {
        match (plan.reboot, plan.wipe) {
            // The old address is gone with the config: the node is not looked for there.
            (true, Wipe::Maintenance) if static_address => Awaited::LeftAddress,
            (true, Wipe::Maintenance) => Awaited::Maintenance,
            (true, Wipe::UserDisks | Wipe::Ephemeral) => Awaited::WithConfig,
            _ => Awaited::Down,
        }
    }

    /// What did not happen in time, in words.
    fn missed(self) -> &'static str {
        match self {
            Awaited::LeftAddress => "it did not leave its address",
            Awaited::Maintenance => "it was not back in maintenance mode",
            Awaited::WithConfig => "it was not back with its config",
            Awaited::Down => "it did not go down",
        }
    }
}

/// Until the node does what `awaited` says, for up to `timeout`: the state it reached in words,
/// or the last thing seen.
async fn wait_for(
    awaited: Awaited,
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    old_boot_id: Option<&str>,
    timeout: Duration,
) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let host = connection::host_of(&target.node);
    match awaited {
        Awaited::LeftAddress => node_power::wait_until(
            target,
            Some(creds),
            opts,
            deadline,
            Want::DownOrMaintenance,
        )
        .await
        .map(|seen| match seen {
            Seen::Maintenance => format!(
                "it is back in maintenance mode at {host} (its DHCP server leased it the same \
                 address)"
            ),
            _ => format!(
                "it left {host}: it boots into maintenance mode on DHCP, at an address this task \
                 cannot know"
            ),
        }),
        Awaited::Maintenance => {
            node_power::wait_until(target, Some(creds), opts, deadline, Want::Maintenance)
                .await
                .map(|_| "it is back in maintenance mode".to_string())
        }
        Awaited::WithConfig => wait_for_reboot(
            &target.endpoint,
            target.routed().then_some(target.node.as_str()),
            creds,
            old_boot_id,
            timeout,
            Duration::from_millis(500),
        )
        .await
        .map(|_| "it is back with its config".to_string())
        .map_err(|e| e.message),
        Awaited::Down => node_power::wait_until(target, Some(creds), opts, deadline, Want::Down)
            .await
            .map(|_| "it no longer answers".to_string()),
    }
}

/// Sends the reset: its actor id, and the node's boot id before it (to tell its next boot).
async fn start_reset(
    ctx: &mut Context,
    client: &TalosClient,
    plan: &Plan,
    node: &str,
) -> Result<(String, Option<String>), ModuleError> {
    let old_boot_id = client.boot_id().await.unwrap_or(None);
    let actor_id = client.reset(plan.request()).await.or_fail()?;
    if plan.wipe == Wipe::SystemDisk {
        ctx.warn(format!(
            "{node}: its system disk is wiped, bootloader included; it boots again only from \
             installation media (ISO, PXE): attach it, then apply a config to install Talos"
        ));
    }
    Ok((actor_id, old_boot_id))
}

/// The state `waited` reached, in words, unless the node first reports that the reset's
/// sequence failed (it says so before anything else happens to it).
async fn unless_aborted(
    waited: impl Future<Output = Result<String, String>>,
    client: &TalosClient,
    actor_id: &str,
    node: &str,
    plan: &Plan,
    awaited: Awaited,
) -> Result<String, ModuleError> {
    tokio::pin!(waited);
    let outcome = tokio::select! {
        outcome = &mut waited => outcome,
        failed = sequence_failure(client, actor_id) => {
            return Err(aborted(node, plan, &failed));
        }
    };
    outcome.map_err(|last| {
        ModuleError::new(format!(
            "reset {node} ({}), but {} within {}s (last: {last}); check its console",
            plan.wiped().join(", "),
            awaited.missed(),
            plan.timeout.as_secs()
        ))
        .with("node", node.to_string())
        .changed(true)
    })
}

/// Deletes the Node once the machine has left (a running kubelet would register it again):
/// whether there was one to delete.
async fn delete_kubernetes_node(
    k: &KubeNode,
    node: &str,
    plan: &Plan,
) -> Result<bool, ModuleError> {
    k.delete().await.map_err(|why| {
        ModuleError::new(format!(
            "reset {node} ({}), but its Kubernetes Node {} could not be deleted: {why}; \
             delete it with kubectl delete node {}",
            plan.wiped().join(", "),
            k.name,
            k.name
        ))
        .with("node", node.to_string())
        .changed(true)
    })
}

/// Talos stopped the reset: what it said, what it had done by then and what happens next. Any
/// failed sequence is fatal to machined, which reboots the node
/// (`internal/app/machined/main.go`; MachineStatus reads REBOOTING, `machine_status.go`).
fn aborted(node: &str, plan: &Plan, failed: &SequenceFailure) -> ModuleError {
    let before = match failed.failed_phase() {
        // Reset's phases @ v1.13.9 and v1.14.1: drain, cleanup, (preShutdown,) dbus, leave, and
        // only then the wipe.
        Some("leave") => format!(
            "nothing was wiped ({} intact), but Talos had already cordoned and drained its Node, \
             removed its pods and stopped its kubelet. Talos treats a failed sequence as fatal \
             and reboots the node, which comes back with its config, still an etcd member (Talos \
             uncordons its Node as it boots). Make etcd healthy first (talos_health shows its \
             members), or set graceful: false to reset it without leaving etcd (then remove its \
             member with ferro.talos.talos_etcd_member)",
            plan.wiped().join(", ")
        ),
        Some(phase) => format!(
            "the phases before {phase} had run (the drain and the removal of its pods come first, \
             the wipe after leaving etcd), and Talos treats a failed sequence as fatal and reboots \
             the node: check what is left on its console (talosctl -n {node} dmesg)"
        ),
        None => format!(
            "Talos treats a failed sequence as fatal and reboots the node: check what is left on \
             its console (talosctl -n {node} dmesg)"
        ),
    };
    let phase = failed
        .failed_phase()
        .map(|p| format!(" in its {p} phase"))
        .unwrap_or_default();
    ModuleError::new(format!(
        "Talos stopped the reset of {node}{phase}: {}; {before}",
        failed.message
    ))
    .with("node", node.to_string())
    .with(
        "sequence_error",
        json!({"phase": failed.failed_phase(), "message": failed.message}),
    )
    .changed(true)
}

/// An address of the node that its machine config sets, and where.
#[derive(Debug, PartialEq, Eq)]
struct StaticAddress {
    address: String,
    source: String,
}

/// Whether `host` (the node's address as the task names it) is one its config sets: v1alpha1's
/// `machine.network.interfaces[].addresses` (the older `cidr`, and each VLAN's), or the
/// `addresses[].address` of a link document (`LinkConfig`, `BondConfig`, `VLANConfig`, ...,
/// which share `CommonLinkConfig` in `pkg/machinery/config/types/network/link.go` @ v1.14.1).
/// Without a config Talos runs DHCP on every physical link that the kernel arguments or the
/// platform do not configure (`internal/app/machined/pkg/controllers/network/operator_config.go`
/// @ v1.14.1), so such an address does not survive a wipe of STATE.
fn static_address_of(config: &MachineConfig, host: &str) -> Option<StaticAddress> {
    let wanted: IpAddr = host.parse().ok()?;
    let matches = |cidr: &Value| {
        cidr.as_str()
            .and_then(|c| c.split('/').next())
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            == Some(wanted)
    };
    let list = |v: Option<&Value>| -> Vec<Value> {
        v.and_then(Value::as_array).cloned().unwrap_or_default()
    };
    let found = |source: String| {
        Some(StaticAddress {
            address: wanted.to_string(),
            source,
        })
    };
    let v1 = config.v1alpha1();
    for iface in list(v1.and_then(|d| d.pointer("/machine/network/interfaces"))) {
        let name = iface
            .get("interface")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let here = format!("machine.network.interfaces[{name}]");
        if list(iface.get("addresses")).iter().any(matches) {
            return found(format!("{here}.addresses"));
        }
        if iface.get("cidr").is_some_and(matches) {
            return found(format!("{here}.cidr"));
        }
        for vlan in list(iface.get("vlans")) {
            let id = vlan.get("vlanId").map(Value::to_string).unwrap_or_default();
            if list(vlan.get("addresses")).iter().any(matches)
                || vlan.get("cidr").is_some_and(matches)
            {
                return found(format!("{here}.vlans[{id}]"));
            }
        }
    }
    for doc in &config.docs {
        let Some(kind) = doc.get("kind").and_then(Value::as_str) else {
            continue;
        };
        if list(doc.get("addresses"))
            .iter()
            .any(|a| a.get("address").is_some_and(matches))
        {
            let name = doc.get("name").and_then(Value::as_str).unwrap_or("?");
            return found(format!("{kind} {name}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> MachineConfig {
        MachineConfig::parse(yaml).expect("the test config parses")
    }

    #[test]
    fn a_static_address_is_found_where_either_config_shape_sets_it() {
        let v1 = config(
            "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n      \
             - interface: eth0\n        addresses: [10.0.0.5/24]\n      - interface: eth1\n        \
             vlans:\n          - vlanId: 7\n            addresses: [10.7.0.5/24]\n",
        );
        assert_eq!(
            static_address_of(&v1, "10.0.0.5"),
            Some(StaticAddress {
                address: "10.0.0.5".into(),
                source: "machine.network.interfaces[eth0].addresses".into()
            })
        );
        assert_eq!(
            static_address_of(&v1, "10.7.0.5").map(|s| s.source),
            Some("machine.network.interfaces[eth1].vlans[7]".into())
        );
        assert_eq!(static_address_of(&v1, "10.0.0.6"), None);
        assert_eq!(static_address_of(&v1, "node-1.example.com"), None);
        let link = config(
            "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: \
             LinkConfig\nname: enp1s0\naddresses:\n  - address: fd00::5/64\n",
        );
        assert_eq!(
            static_address_of(&link, "fd00:0::5").map(|s| s.source),
            Some("LinkConfig enp1s0".into())
        );
        let dhcp = config(
            "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n      \
             - interface: eth0\n        dhcp: true\n",
        );
        assert_eq!(static_address_of(&dhcp, "10.0.0.5"), None);
    }
}
