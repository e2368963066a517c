//! The simulated cluster's state: nodes, their configs, versions, boots, etcd and faults.
//!
//! All state sits behind one mutex; nothing awaits while holding it. Each node's listener task
//! watches a [`RunState`] and (re)binds or drops its socket when it changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use ferro_talos_proto::machine as pb;
use prost::Message;
use tokio::sync::{Notify, broadcast, watch};

use crate::config::SimConfig;
use crate::mcfg::{MachineType, StoredConfig};
use crate::store::{Restored, Store};
use crate::tls;

/// What a node's listener needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub listening: bool,
    pub address: Ipv4Addr,
    pub generation: u64,
}

/// Faults injected from tests or the control endpoint.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// The next reboot never finishes: the node stays down.
    pub never_return: bool,
    /// After the next reboot the node listens on this address instead.
    pub next_address: Option<Ipv4Addr>,
    /// The node's listener is closed while the node itself keeps running.
    pub unreachable: bool,
    /// The controller's connections are refused, but the other nodes still reach this one: a
    /// firewall that lets only the cluster in, so the controller must route through a control plane.
    pub firewalled: bool,
    /// The node's etcd member is down (not healthy, status fails).
    pub etcd_down: bool,
    /// ApplyConfiguration on this node fails validation with this text.
    pub reject_config: Option<String>,
    /// Every RPC answer of this node (as endpoint or as routing target) is delayed this long.
    pub slow_ms: Option<u64>,
    /// The link to this node carries an upload (EtcdRecover's snapshot) at this many bytes per
    /// second.
    pub upload_bytes_per_sec: Option<u64>,
    /// etcd's upgrade mutex is held by another session (another control plane's legacy
    /// upgrade is in its pre-checks): this node's legacy Upgrade cannot take it.
    pub upgrade_mutex_held: bool,
    /// The installer exits 1 after its checks (a disk it cannot write, say): a lifecycle
    /// upgrade reports the exit code, a legacy upgrade's sequence fails.
    pub installer_fails: bool,
    /// The kube-apiserver static pod never becomes Ready once its image has changed (a new
    /// version that crash-loops on this node's flags, say).
    pub apiserver_never_ready: bool,
    /// The kubelet restarts with a new image but the Node keeps reporting the old version (the
    /// new binary failed and the old one came back).
    pub kubelet_version_stuck: bool,
    /// DaemonSet pods this node runs never become Ready once their DaemonSet's generation
    /// changed (a new image that crash-loops here), so the rollout never finishes.
    pub daemonset_rollout_stuck: bool,
    /// This node's pods of a DaemonSet stay when the DaemonSet is deleted, their controller
    /// reference naming a DaemonSet the API server no longer has: the garbage collector has not
    /// removed them (kube-controller-manager down or behind).
    pub orphaned_daemon_pods: bool,
}

impl Faults {
    /// The faults that are set, in words (`-` for none), for status output.
    pub fn describe(&self) -> String {
        let mut out = Vec::new();
        if self.never_return {
            out.push("never_return".to_string());
        }
        if let Some(a) = self.next_address {
            out.push(format!("next_address={a}"));
        }
        if self.unreachable {
            out.push("unreachable".into());
        }
        if self.firewalled {
            out.push("firewalled".into());
        }
        if self.etcd_down {
            out.push("etcd_down".into());
        }
        if self.reject_config.is_some() {
            out.push("reject_config".into());
        }
        if let Some(ms) = self.slow_ms {
            out.push(format!("slow={ms}ms"));
        }
        if let Some(rate) = self.upload_bytes_per_sec {
            out.push(format!("upload={rate}B/s"));
        }
        if self.upgrade_mutex_held {
            out.push("upgrade_mutex_held".into());
        }
        if self.installer_fails {
            out.push("installer_fails".into());
        }
        if self.apiserver_never_ready {
            out.push("apiserver_never_ready".into());
        }
        if self.kubelet_version_stuck {
            out.push("kubelet_version_stuck".into());
        }
        if self.daemonset_rollout_stuck {
            out.push("daemonset_rollout_stuck".into());
        }
        if self.orphaned_daemon_pods {
            out.push("orphaned_daemon_pods".into());
        }
        if out.is_empty() {
            "-".into()
        } else {
            out.join(",")
        }
    }
}

/// One buffered event (api.md §18).
#[derive(Clone, Debug)]
pub struct EventRec {
    pub id: String,
    pub actor_id: String,
    pub data: prost_types::Any,
    pub at: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Booting,
    Installing,
    Maintenance,
    Running,
    Rebooting,
    ShuttingDown,
    Resetting,
    Upgrading,
}

impl Stage {
    pub fn proto(self) -> pb::machine_status_event::MachineStage {
        use pb::machine_status_event::MachineStage as S;
        match self {
            Stage::Booting => S::Booting,
            Stage::Installing => S::Installing,
            Stage::Maintenance => S::Maintenance,
            Stage::Running => S::Running,
            Stage::Rebooting => S::Rebooting,
            Stage::ShuttingDown => S::ShuttingDown,
            Stage::Resetting => S::Resetting,
            Stage::Upgrading => S::Upgrading,
        }
    }
    pub fn yaml_name(self) -> &'static str {
        match self {
            Stage::Booting => "booting",
            Stage::Installing => "installing",
            Stage::Maintenance => "maintenance",
            Stage::Running => "running",
            Stage::Rebooting => "rebooting",
            Stage::ShuttingDown => "shutting down",
            Stage::Resetting => "resetting",
            Stage::Upgrading => "upgrading",
        }
    }
}

pub struct Node {
    pub index: usize,
    /// The role the simulator plays for this node (from the node counts), used for names only;
    /// the applied config's machine.type decides the real behaviour.
    pub planned_control_plane: bool,
    pub hostname: String,
    pub address: Ipv4Addr,
    /// apid port (the configured one, or the one the OS picked for port 0; kept across reboots).
    pub port: u16,
    /// Powered on and booted (not rebooting).
    pub up: bool,
    pub generation: u64,
    pub version: String,
    /// Installed on the inactive slot; becomes `version` at the next boot.
    pub pending_version: Option<String>,
    pub schematic: Option<String>,
    /// The schematic a legacy upgrade's installer writes; the node boots into it.
    pub pending_schematic: Option<String>,
    pub images: BTreeSet<String>,
    pub boot_id: String,
    /// The running config (`v1alpha1` resource). None = maintenance mode.
    pub active: Option<StoredConfig>,
    /// What the next boot loads (may be ahead of `active` after STAGED, behind after TRY).
    pub persisted: Option<StoredConfig>,
    /// Bumped to cancel a pending TRY rollback.
    pub try_token: u64,
    pub etcd_data: bool,
    /// How many times the node's etcd data went (a leave, a wipe): the real backend removes
    /// the member's data directory for each, however soon the node joins again.
    pub etcd_data_drops: u64,
    pub reboot_pending: bool,
    pub upgrade_running: bool,
    /// A legacy upgrade stopped the node's services before its installer refused to run; they
    /// stay stopped until the next boot (upstream's upgrade sequence has no way back).
    pub services_stopped: bool,
    /// The node left etcd (EtcdLeaveCluster): its etcd service is stopped ("Finished") and its
    /// data gone until the next boot, when it joins again (`LeaveCluster` in
    /// `internal/pkg/etcd/etcd.go` @ v1.13.9).
    pub etcd_left: bool,
    /// The snapshot uploaded with EtcdRecover (`/var/lib/etcd.snapshot` on EPHEMERAL upstream),
    /// as far as the restore looks at it.
    pub etcd_snapshot: Option<crate::etcd_snapshot::Uploaded>,
    /// The etcd service failed its pre stage (a recovery from a bad snapshot) with this message;
    /// it stays failed until the node boots again.
    pub etcd_failed: Option<String>,
    pub stage: Stage,
    pub events: Vec<EventRec>,
    pub faults: Faults,
    /// TLS personality of the current boot; the listener reads it per connection.
    pub tls: Option<Arc<tls::NodeTls>>,
    pub config_version: u64,
    pub config_updated: SystemTime,
    /// A try-mode config runs and is rolled back at this time (kept across a restart).
    pub try_rollback_at: Option<SystemTime>,
    /// Talos is installed on the system disk (upstream: its META partition exists), so the node
    /// boots from disk: with the config on STATE, or into maintenance mode without one.
    pub installed: bool,
    /// Installation media (ISO, PXE) is attached: a node with nothing installed boots from it
    /// into maintenance mode; without it such a node has nothing to boot.
    pub boot_media: bool,
    /// The last boot found nothing to boot from (system disk wiped, no media): the node stays
    /// down until it is powered on with media.
    pub unbootable: bool,
    /// When the node's services started this boot; Bootstrap is refused for a while after it.
    pub running_since: Option<Instant>,
    /// The Kubernetes components Talos runs here and the versions of their config resources.
    pub components: crate::kube::Components,
    /// This node's kube-apiserver accepts connections (`kube/listener.rs` binds it a poll after
    /// the node starts serving): the health check's Kubernetes checks ask it, as upstream's do.
    pub kube_api_listening: bool,
    /// The stage and unmet conditions the last MachineStatus of `Shared::publish_stage` said,
    /// so `boot_stage::watch_readiness` publishes again only when they change.
    pub published_status: Option<(Stage, Vec<crate::boot_stage::UnmetCondition>)>,
}

impl Node {
    pub fn machine_type(&self) -> Option<MachineType> {
        self.active.as_ref().and_then(StoredConfig::machine_type)
    }
    pub fn is_control_plane(&self) -> bool {
        self.machine_type()
            .is_some_and(MachineType::is_control_plane)
    }
    pub fn maintenance(&self) -> bool {
        self.active.is_none()
    }
    /// The node's etcd data is gone (left the cluster, or wiped).
    pub fn drop_etcd_data(&mut self) {
        self.etcd_data = false;
        self.etcd_data_drops += 1;
    }

    /// The node's etcd member does not serve: the etcd_down fault, or services stopped.
    pub fn etcd_stopped(&self) -> bool {
        self.faults.etcd_down || self.services_stopped || self.etcd_left
    }
    /// The disk Talos is installed on (the simulator's nodes have one system disk).
    pub fn system_disk(&self) -> &'static str {
        SYSTEM_DISK
    }
    /// The disks beside the system disk that `Reset` can wipe as user disks.
    pub fn user_disks(&self) -> &'static [&'static str] {
        USER_DISKS
    }
    /// The node's API is up and answers the other nodes (routed calls, cluster checks).
    pub fn listening(&self) -> bool {
        self.up && !self.faults.unreachable
    }
    /// The node's listener is bound: the controller (a test, a module) can connect to it.
    pub fn reachable_from_controller(&self) -> bool {
        self.listening() && !self.faults.firewalled
    }
    pub fn run_state(&self) -> RunState {
        RunState {
            listening: self.reachable_from_controller(),
            address: self.address,
            generation: self.generation,
        }
    }
}

/// Every simulated node has the same two disks: Talos on the first, a data disk beside it.
const SYSTEM_DISK: &str = "/dev/sda";
const USER_DISKS: &[&str] = &["/dev/sdb"];

#[derive(Clone, Debug, serde::Serialize)]
pub struct EtcdMember {
    pub node: usize,
    pub id: u64,
    /// A control plane that joins is a learner until then, when etcd promotes it (Talos adds it
    /// with `MemberAddAsLearner` and promotes it once it has caught up: `addMember`,
    /// `promoteMember` in services/etcd.go @ v1.14.1). None: a voting member.
    #[serde(skip)]
    pub learner_until: Option<Instant>,
}

/// How long the model keeps a joining control plane a learner. Real etcd promotes it once it has
/// caught up with the leader, and takes one learner at a time (the real backend shows both:
/// `modules/sim/tests/real_etcd.rs`); the model admits every joiner at once and keeps it a
/// learner only briefly, so tests stay fast, but a learner is there to be seen (talos_health
/// waits it out).
pub const LEARNER_CATCH_UP: Duration = Duration::from_millis(300);

impl EtcdMember {
    /// A voting member (the bootstrapped one, one restored from the state directory).
    pub fn voting(node: usize, id: u64) -> EtcdMember {
        EtcdMember {
            node,
            id,
            learner_until: None,
        }
    }

    pub fn is_learner(&self) -> bool {
        self.learner_until.is_some_and(|t| Instant::now() < t)
    }
}

/// Why etcd refuses to remove a member: its own errors (etcd v3.6.12
/// `server/etcdserver/errors/errors.go`, `api/v3rpc/rpctypes/error.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdRefusal {
    MemberNotFound,
    NotEnoughStartedMembers,
    Unhealthy,
    /// Fewer than a quorum of the voting members run, so raft has no leader.
    NoLeader,
}

impl EtcdRefusal {
    pub fn text(self) -> &'static str {
        match self {
            EtcdRefusal::MemberNotFound => "etcdserver: member not found",
            EtcdRefusal::NotEnoughStartedMembers => {
                "etcdserver: re-configuration failed due to not enough started members"
            }
            EtcdRefusal::Unhealthy => "etcdserver: unhealthy cluster",
            EtcdRefusal::NoLeader => "etcdserver: no leader",
        }
    }
}

pub struct State {
    pub nodes: Vec<Node>,
    /// None until Bootstrap; then the member list.
    pub etcd: Option<Vec<EtcdMember>>,
    /// HealthCheck fails with this text while set.
    pub health_fail: Option<String>,
    pub reboot_downtime: Duration,
    /// For this long after a node's services start, Bootstrap answers FailedPrecondition.
    pub bootstrap_settle: Duration,
    /// The Kubernetes objects the cluster's API server keeps (not kept in the state directory).
    pub kube: crate::kube::KubeState,
    event_counter: u64,
}

pub struct Shared {
    state: Mutex<State>,
    pub run: Vec<watch::Sender<RunState>>,
    pub events: Vec<broadcast::Sender<EventRec>>,
    pub shutdown: watch::Sender<bool>,
    /// Set when the state lives in a state directory: every change is written there.
    pub store: Option<Store>,
    /// The control protocol asked the simulator to stop.
    pub stop: Notify,
    /// The deadline (`grpc-timeout`) the last call of each method came with, by method path:
    /// what tests read to see which deadline a module gave a call.
    pub deadlines: Mutex<BTreeMap<String, Duration>>,
    /// With the real backend: the etcd members the control planes run.
    pub real: Option<Arc<crate::real::RealEtcd>>,
    /// With `--kubernetes real`: the Kubernetes control planes and the kubelets.
    pub real_kube: Option<Arc<crate::real::kubernetes::RealKubernetes>>,
}

/// The locked state. Dropping it saves the state to the state directory (if any) when it
/// changed, so no mutation anywhere can forget to persist itself. Only a guard that was used
/// mutably is compared with what is on disk; plain reads cost nothing.
pub struct StateGuard<'a> {
    guard: MutexGuard<'a, State>,
    store: Option<&'a Store>,
    mutated: bool,
}

impl Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.mutated = true;
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if let (Some(store), true) = (self.store, self.mutated) {
            store.save(&self.guard);
        }
    }
}

pub fn new_uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn any<M: Message>(name: &str, m: &M) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("talos/runtime/machine.{name}"),
        value: m.encode_to_vec(),
    }
}

pub fn sequence_event(seq: &str, action: pb::sequence_event::Action) -> prost_types::Any {
    any(
        "SequenceEvent",
        &pb::SequenceEvent {
            sequence: seq.into(),
            action: action as i32,
            error: None,
        },
    )
}

pub fn phase_event(phase: &str, action: pb::phase_event::Action) -> prost_types::Any {
    any(
        "PhaseEvent",
        &pb::PhaseEvent {
            phase: phase.into(),
            action: action as i32,
        },
    )
}

/// A sequence that failed or never started (upstream publishes it with action NOOP).
pub fn sequence_error_event(
    seq: &str,
    code: ferro_talos_proto::common::Code,
    message: &str,
) -> prost_types::Any {
    any(
        "SequenceEvent",
        &pb::SequenceEvent {
            sequence: seq.into(),
            action: pb::sequence_event::Action::Noop as i32,
            error: Some(ferro_talos_proto::common::Error {
                code: code as i32,
                message: message.into(),
                details: vec![],
            }),
        },
    )
}

pub fn task_event(task: &str, action: pb::task_event::Action) -> prost_types::Any {
    any(
        "TaskEvent",
        &pb::TaskEvent {
            task: task.into(),
            action: action as i32,
        },
    )
}

pub fn machine_status_event(stage: Stage, ready: bool) -> prost_types::Any {
    machine_status_event_with(stage, ready, &[])
}

/// A MachineStatus event with the unmet readiness conditions it lists.
pub fn machine_status_event_with(
    stage: Stage,
    ready: bool,
    unmet: &[crate::boot_stage::UnmetCondition],
) -> prost_types::Any {
    use pb::machine_status_event::machine_status::UnmetCondition;
    let status = pb::machine_status_event::MachineStatus {
        ready,
        unmet_conditions: unmet
            .iter()
            .map(|c| UnmetCondition {
                name: c.name.to_string(),
                reason: c.reason.clone(),
            })
            .collect(),
    };
    any(
        "MachineStatusEvent",
        &pb::MachineStatusEvent {
            stage: stage.proto() as i32,
            status: Some(status),
        },
    )
}

pub fn service_event(
    service: &str,
    action: pb::service_state_event::Action,
    msg: &str,
) -> prost_types::Any {
    any(
        "ServiceStateEvent",
        &pb::ServiceStateEvent {
            service: service.into(),
            action: action as i32,
            message: msg.into(),
            health: None,
        },
    )
}

impl State {
    /// Removes a node's etcd member and data; with no member left, etcd is back to "not
    /// bootstrapped" (a rebuilt cluster bootstraps again).
    pub fn leave_etcd(&mut self, node: usize) {
        if let Some(members) = self.etcd.as_mut() {
            members.retain(|m| m.node != node);
            if members.is_empty() {
                self.etcd = None;
                self.kube.forget_cluster();
            }
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.drop_etcd_data();
            n.etcd_left = true;
        }
    }

    /// Whether a node's etcd member serves: up, with its data, and its etcd running.
    pub fn etcd_active(&self, node: usize) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| n.up && n.etcd_data && !n.etcd_stopped())
    }

    /// Whether etcd has a leader: raft elects one only among a majority of the voting members.
    /// Talos asks etcd with `clientv3.WithRequireLeader` for the member list, a removal and a
    /// leave (`v1alpha1_server.go` @ v1.14.1), and etcd refuses every such call at once while it
    /// has none, `etcdserver: no leader` (`server/etcdserver/api/v3rpc/interceptor.go` @ v3.7.1).
    /// The real backend showed it: without the leader rule a linearizable call waits out its
    /// deadline.
    pub fn etcd_has_leader(&self) -> bool {
        let voting: Vec<&EtcdMember> = self
            .etcd
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|m| !m.is_learner())
            .collect();
        let running = voting.iter().filter(|m| self.etcd_active(m.node)).count();
        running > voting.len() / 2
    }

    /// Whether etcd lets member `id` go when a member on node `via` is asked: etcd v3.6.12's
    /// strict reconfiguration checks (`mayRemoveMember` in `server/etcdserver/server.go`,
    /// `IsReadyToRemoveVotingMember` in `server/etcdserver/api/membership/cluster.go`), which
    /// are all the quorum protection Talos has. Every simulated member has started, so the first
    /// check refuses only the removal of the last member; a member that is down may always go;
    /// removing a live one needs the live members but one to still be a quorum of the rest.
    pub fn may_remove_member(&self, via: usize, id: u64) -> Result<(), EtcdRefusal> {
        if !self.etcd_has_leader() {
            return Err(EtcdRefusal::NoLeader);
        }
        let members = self.etcd.as_deref().unwrap_or_default();
        let Some(removed) = members.iter().find(|m| m.id == id) else {
            return Err(EtcdRefusal::MemberNotFound);
        };
        let remaining = members.len() - 1;
        if remaining < remaining / 2 + 1 {
            return Err(EtcdRefusal::NotEnoughStartedMembers);
        }
        if removed.node != via && !self.etcd_active(removed.node) {
            return Ok(());
        }
        let active = members
            .iter()
            .filter(|m| m.node == via || self.etcd_active(m.node))
            .count();
        if active - 1 < 1 + (members.len() - 1) / 2 {
            return Err(EtcdRefusal::Unhealthy);
        }
        Ok(())
    }

    /// Sortable 20-character id (like Talos's xids: time first, then a counter).
    fn next_event_id(&mut self) -> String {
        self.event_counter += 1;
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        format!(
            "{:012x}{:08x}",
            ms & 0xffff_ffff_ffff,
            self.event_counter & 0xffff_ffff
        )
    }
}

/// Random-looking but stable host part, as Talos's default `talos-xxx-yyy` names.
fn default_hostname(index: usize) -> String {
    let b: [u8; 2] = rand::random();
    format!("talos-{}-{}", index + 1, hex::encode(b))
}

impl Shared {
    /// A fresh cluster (every node boots into maintenance mode) or, with `restored`, the stored
    /// one as it was. With a `store`, every later change is written to its directory.
    pub fn new(
        cfg: SimConfig,
        store: Option<Store>,
        restored: Option<Restored>,
    ) -> anyhow::Result<Arc<Shared>> {
        cfg.validate()?;
        let real = match &cfg.backend {
            crate::config::Backend::Model => None,
            crate::config::Backend::Real(bins) => {
                let dir = store.as_ref().map(|s| s.dir());
                let in_memory = store.as_ref().is_none_or(|s| !s.persists());
                Some(Arc::new(crate::real::RealEtcd::new(
                    bins.clone(),
                    dir,
                    in_memory,
                )?))
            }
        };
        let real_kube = match &cfg.kubernetes {
            crate::config::Kubernetes::Model => None,
            crate::config::Kubernetes::Real(bins) => {
                let dir = store.as_ref().map(|s| s.dir());
                let in_memory = store.as_ref().is_none_or(|s| !s.persists());
                Some(Arc::new(crate::real::kubernetes::RealKubernetes::new(
                    bins.clone(),
                    dir,
                    in_memory,
                )?))
            }
        };
        let mut nodes = Vec::new();
        let mut run = Vec::new();
        let mut events = Vec::new();
        for index in 0..cfg.node_count() {
            let address = cfg
                .address_of(index)
                .ok_or_else(|| anyhow::anyhow!("no loopback address for node {index}"))?;
            let version = cfg
                .node_versions
                .get(&index)
                .cloned()
                .unwrap_or_else(|| cfg.talos_version.clone());
            let node = Node {
                index,
                planned_control_plane: index < cfg.control_planes,
                hostname: default_hostname(index),
                address,
                port: cfg.port,
                up: false,
                generation: 0,
                version,
                pending_version: None,
                schematic: None,
                pending_schematic: None,
                images: BTreeSet::new(),
                boot_id: new_uuid(),
                active: None,
                persisted: None,
                try_token: 0,
                etcd_data: false,
                etcd_data_drops: 0,
                reboot_pending: false,
                upgrade_running: false,
                services_stopped: false,
                etcd_left: false,
                etcd_snapshot: None,
                etcd_failed: None,
                stage: Stage::Booting,
                events: Vec::new(),
                faults: Faults::default(),
                tls: None,
                config_version: 0,
                config_updated: SystemTime::now(),
                try_rollback_at: None,
                // A new machine: an empty disk, booted from installation media.
                installed: false,
                boot_media: true,
                unbootable: false,
                running_since: None,
                components: Default::default(),
                kube_api_listening: false,
                published_status: None,
            };
            nodes.push(node);
        }
        let mut state = State {
            nodes,
            etcd: None,
            health_fail: None,
            reboot_downtime: cfg.reboot_downtime,
            bootstrap_settle: cfg.bootstrap_settle,
            kube: Default::default(),
            event_counter: 0,
        };
        if let Some(r) = &restored {
            restore_into(&mut state, r)?;
        }
        for n in &state.nodes {
            run.push(watch::channel(n.run_state()).0);
            events.push(broadcast::channel(256).0);
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            run,
            events,
            shutdown: watch::channel(false).0,
            store,
            stop: Notify::new(),
            deadlines: Mutex::default(),
            real,
            real_kube,
        });
        match restored {
            None => {
                for i in 0..shared.run.len() {
                    shared.boot(i)?;
                }
            }
            Some(r) => {
                for (i, n) in r.cluster.nodes.iter().enumerate() {
                    if n.up && !n.reboot_pending {
                        shared.resume(i)?;
                        shared.resume_try_rollback(i);
                    } else if n.faults.never_return {
                        // A reboot that never comes back stays down until power_on.
                        shared.lock().nodes[i].stage = Stage::Rebooting;
                    } else {
                        // A reboot in flight when the simulator stopped finishes now.
                        shared.boot(i)?;
                    }
                }
            }
        }
        Ok(shared)
    }

    /// A try-mode config that was running when the simulator stopped is still rolled back on
    /// time (at once if that time has passed).
    fn resume_try_rollback(self: &Arc<Self>, idx: usize) {
        let (at, token) = {
            let st = self.lock();
            let Some(n) = st.nodes.get(idx) else { return };
            let trying =
                n.active.as_ref().map(|c| &c.digest) != n.persisted.as_ref().map(|c| &c.digest);
            match n.try_rollback_at {
                Some(at) if trying => (at, n.try_token),
                _ => return,
            }
        };
        let left = at.duration_since(SystemTime::now()).unwrap_or_default();
        crate::apply::schedule_try_rollback(self, idx, token, left);
    }

    /// A stored node that was up comes back without a reboot: same boot id, same running and
    /// next-boot configs, same versions; only the TLS personality is rebuilt (from the stored
    /// config's CA, so existing client credentials keep working).
    fn resume(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let stage = come_up(&mut st, idx)?;
        // It kept running while the simulator was stopped: long past its settling time.
        let settled = Instant::now()
            .checked_sub(st.bootstrap_settle)
            .unwrap_or_else(Instant::now);
        st.nodes[idx].running_since = (stage != Stage::Maintenance).then_some(settled);
        st.nodes[idx].components =
            crate::kube::Components::boot(st.nodes[idx].active.as_ref(), settled);
        self.publish_stage(&mut st, idx);
        self.sync_etcd(&mut st);
        refresh_unsigned_tls(&mut st);
        self.notify(&st, idx);
        Ok(())
    }

    pub fn lock(&self) -> StateGuard<'_> {
        // A panicking handler must not take the whole simulator down with a poisoned lock.
        StateGuard {
            guard: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            store: self.store.as_ref(),
            mutated: false,
        }
    }

    /// Tell the node's listener about a change of address/up state/boot.
    pub fn notify(&self, st: &State, idx: usize) {
        if let (Some(tx), Some(n)) = (self.run.get(idx), st.nodes.get(idx)) {
            tx.send_replace(n.run_state());
        }
    }

    pub fn publish(&self, st: &mut State, idx: usize, actor_id: &str, data: prost_types::Any) {
        let id = st.next_event_id();
        let rec = EventRec {
            id,
            actor_id: actor_id.to_string(),
            data,
            at: Instant::now(),
        };
        if let Some(n) = st.nodes.get_mut(idx) {
            n.events.push(rec.clone());
            if n.events.len() > 1000 {
                n.events.remove(0);
            }
        }
        if let Some(tx) = self.events.get(idx) {
            let _ = tx.send(rec);
        }
    }

    /// Finish a boot: take pending versions/addresses, new boot id, then boot from what the
    /// disks hold. An installed node boots from its system disk with the config on STATE (or
    /// into maintenance mode without one); a node with nothing installed boots from
    /// installation media into maintenance mode, or, without media, does not come up at all.
    pub fn boot(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let Some(n) = st.nodes.get_mut(idx) else {
            anyhow::bail!("no node {idx}");
        };
        if let Some(a) = n.faults.next_address.take() {
            n.address = a;
        }
        if let Some(v) = n.pending_version.take() {
            n.version = v;
        }
        if let Some(s) = n.pending_schematic.take() {
            n.schematic = Some(s);
        }
        n.services_stopped = false;
        n.etcd_left = false;
        n.etcd_failed = None;
        n.boot_id = new_uuid();
        n.events.clear();
        n.reboot_pending = false;
        n.upgrade_running = false;
        n.try_token += 1;
        n.try_rollback_at = None;
        n.running_since = None;
        if !n.installed && !n.boot_media {
            // Nothing to boot: the firmware stops at "no bootable device".
            n.unbootable = true;
            n.up = false;
            n.active = None;
            n.stage = Stage::Booting;
            self.notify(&st, idx);
            return Ok(());
        }
        n.unbootable = false;
        // From media there is no STATE partition, so no config: maintenance mode.
        n.active = if n.installed {
            n.persisted.clone()
        } else {
            None
        };
        if let Some(h) = n.active.as_ref().and_then(StoredConfig::hostname) {
            n.hostname = h;
        }
        drop(st);
        self.start(idx)
    }

    /// The rest of a boot, also run when a node leaves maintenance mode without a reboot:
    /// a TLS personality for the running config, listening, services and the stage.
    pub fn start(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let stage = come_up(&mut st, idx)?;
        let n = &mut st.nodes[idx];
        // Services start with the boot whatever stage it then waits in (BOOTING until etcd is
        // up on a control plane, boot_stage.rs).
        n.running_since = (stage != Stage::Maintenance).then(Instant::now);
        n.components = crate::kube::Components::boot(n.active.as_ref(), Instant::now());
        let control_plane = n.is_control_plane();
        let configured = n.active.is_some();
        use pb::sequence_event::Action as A;
        self.publish(&mut st, idx, "", sequence_event("boot", A::Start));
        self.publish(
            &mut st,
            idx,
            "",
            machine_status_event(Stage::Booting, false),
        );
        if configured {
            use pb::service_state_event::Action as S;
            for svc in services_for(control_plane) {
                if svc != "etcd" {
                    self.publish(
                        &mut st,
                        idx,
                        "",
                        service_event(svc, S::Running, "Health check successful"),
                    );
                }
            }
        }
        if stage != Stage::Booting {
            self.publish(&mut st, idx, "", sequence_event("boot", A::Stop));
            self.publish_stage(&mut st, idx);
        }
        // A control plane that is not a member yet joins here if etcd lets it, which ends its
        // boot; otherwise it waits in BOOTING.
        self.sync_etcd(&mut st);
        refresh_unsigned_tls(&mut st);
        self.notify(&st, idx);
        Ok(())
    }

    /// Control planes with a config join an existing etcd cluster automatically, while it has a
    /// quorum: joining is a member change (`addMember` in
    /// `internal/app/machined/pkg/system/services/etcd.go` @ v1.13.9), which etcd makes only with a
    /// leader, so a node whose EPHEMERAL was wiped after etcd lost its quorum waits, empty, for a
    /// recovery.
    pub fn sync_etcd(&self, st: &mut State) {
        Self::join_etcd(st);
        self.end_boots(st);
    }

    /// The etcd half of [`Shared::sync_etcd`]: control planes that are up join while etcd has
    /// a quorum.
    fn join_etcd(st: &mut State) {
        let Some(members) = st.etcd.as_ref() else {
            return;
        };
        let live = members
            .iter()
            .filter(|m| {
                st.nodes
                    .get(m.node)
                    .is_some_and(|n| n.up && n.etcd_data && !n.etcd_stopped())
            })
            .count();
        if live < members.len() / 2 + 1 {
            return;
        }
        let Some(members) = st.etcd.as_mut() else {
            return;
        };
        for n in st.nodes.iter_mut() {
            if n.up && n.is_control_plane() && !n.etcd_left {
                // A node joining with no data first removes a member of its own hostname (one a
                // reset without leaving etcd left registered), then joins under a new id
                // (`addMember` in internal/app/machined/pkg/system/services/etcd.go @ v1.14.1;
                // real etcd showed it: modules/sim/tests/real_etcd.rs).
                if !n.etcd_data {
                    members.retain(|m| m.node != n.index);
                }
                if !members.iter().any(|m| m.node == n.index) {
                    members.push(EtcdMember {
                        node: n.index,
                        id: rand::random::<u64>() >> 1,
                        learner_until: Some(Instant::now() + LEARNER_CATCH_UP),
                    });
                }
                n.etcd_data = true;
            }
        }
    }

    /// Publishes node `idx`'s MachineStatus as it stands: its stage and unmet conditions.
    pub fn publish_stage(&self, st: &mut State, idx: usize) {
        let unmet = crate::boot_stage::unmet_conditions(st, idx);
        let stage = st.nodes[idx].stage;
        let ev = machine_status_event_with(stage, unmet.is_empty(), &unmet);
        st.nodes[idx].published_status = Some((stage, unmet));
        self.publish(st, idx, "", ev);
    }

    /// Ends the boot of every control plane that waited in BOOTING for its etcd and now has it
    /// (after a bootstrap or once etcd lets it join): the boot sequence's last task finishes,
    /// and MachineStatus says RUNNING (boot_stage.rs).
    pub fn end_boots(&self, st: &mut State) {
        for idx in crate::boot_stage::boots_ended(st) {
            use pb::sequence_event::Action as A;
            self.publish(st, idx, "", sequence_event("boot", A::Stop));
            self.publish_stage(st, idx);
            self.notify(st, idx);
        }
    }

    /// Bootstrap marks the waiting etcd service finished (`BootstrapEtcd` in
    /// `internal/app/machined/pkg/system/services/etcd.go` @ v1.14.1), so the node's boot ends
    /// even when the etcd it then starts fails (a recovery whose snapshot does not restore).
    pub fn end_boot_for_bootstrap(&self, st: &mut State, idx: usize) {
        if st.nodes[idx].stage == Stage::Booting {
            st.nodes[idx].stage = Stage::Running;
            use pb::sequence_event::Action as A;
            self.publish(st, idx, "", sequence_event("boot", A::Stop));
            self.publish_stage(st, idx);
            self.notify(st, idx);
        }
    }

    /// Reboot node `idx` asynchronously: events now, down shortly after (so the RPC reply still
    /// reaches the client), back after the configured downtime unless a fault keeps it down.
    pub fn reboot(self: &Arc<Self>, idx: usize, actor_id: String, sequence: &'static str) {
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let downtime = {
                let mut st = shared.lock();
                use pb::sequence_event::Action as A;
                shared.publish(&mut st, idx, &actor_id, sequence_event(sequence, A::Start));
                shared.publish(
                    &mut st,
                    idx,
                    &actor_id,
                    task_event("stopAllServices", pb::task_event::Action::Start),
                );
                shared.publish(
                    &mut st,
                    idx,
                    "",
                    machine_status_event(Stage::Rebooting, false),
                );
                st.reboot_downtime
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            let never_return = {
                let mut st = shared.lock();
                let Some(n) = st.nodes.get_mut(idx) else {
                    return;
                };
                n.up = false;
                n.stage = Stage::Rebooting;
                n.generation += 1;
                let never = n.faults.never_return;
                let name = crate::kube::node_name(n);
                if st.kube.has_node(&name) {
                    st.kube.record("node_down", &name, None);
                }
                shared.notify(&st, idx);
                never
            };
            if never_return {
                return;
            }
            tokio::time::sleep(downtime).await;
            if *shared.shutdown.borrow() {
                return;
            }
            if let Err(e) = shared.boot(idx) {
                eprintln!("talos-sim: node {idx} failed to boot: {e:#}");
            }
        });
    }

    /// Power node `idx` off after a reset with `reboot: false`: it stays down until powered on.
    pub fn power_off(self: &Arc<Self>, idx: usize, actor_id: String) {
        let shared = self.clone();
        tokio::spawn(async move {
            let mut st = shared.lock();
            shared.publish(
                &mut st,
                idx,
                &actor_id,
                machine_status_event(Stage::ShuttingDown, false),
            );
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            n.up = false;
            n.stage = Stage::ShuttingDown;
            n.generation += 1;
            let name = crate::kube::node_name(n);
            if st.kube.has_node(&name) {
                st.kube.record("node_down", &name, None);
            }
            shared.notify(&st, idx);
        });
    }

    /// Node index for a routing target: one of its addresses or its hostname.
    pub fn resolve(&self, target: &str) -> Option<usize> {
        let st = self.lock();
        let t = target.trim_start_matches('[').trim_end_matches(']');
        st.nodes
            .iter()
            .find(|n| n.address.to_string() == t || n.hostname == t)
            .map(|n| n.index)
    }
}

/// Node `idx` listens again with a TLS personality for its running config: up, a new listener
/// generation, and the stage its services reach (`boot_stage::stage_after_services`: RUNNING,
/// BOOTING while a control plane's etcd is not up, or MAINTENANCE without a config).
fn come_up(st: &mut State, idx: usize) -> anyhow::Result<Stage> {
    let ca_key = st
        .nodes
        .get(idx)
        .and_then(|n| n.active.as_ref())
        .and_then(|c| trustd_key(st, c));
    let Some(n) = st.nodes.get_mut(idx) else {
        anyhow::bail!("no node {idx}");
    };
    n.tls = Some(Arc::new(tls::NodeTls::build(n, ca_key)?));
    n.up = true;
    n.generation += 1;
    st.nodes[idx].stage = crate::boot_stage::stage_after_services(st, idx);
    Ok(st.nodes[idx].stage)
}

/// The OS CA key a control plane's trustd would sign a worker's certificate with: any node's
/// config that carries the same CA certificate and its key.
pub fn trustd_key(st: &State, cfg: &StoredConfig) -> Option<String> {
    let (crt, _) = cfg.os_ca()?;
    st.nodes
        .iter()
        .flat_map(|n| [n.active.as_ref(), n.persisted.as_ref()])
        .flatten()
        .filter_map(StoredConfig::os_ca)
        .find(|(c, k)| *c == crt && k.is_some())
        .and_then(|(_, k)| k)
}

/// Workers whose certificate could not be signed yet (no CA key known) get a proper one as soon
/// as some node's config provides the key, as trustd would then answer their request.
pub fn refresh_unsigned_tls(st: &mut State) {
    for i in 0..st.nodes.len() {
        let n = &st.nodes[i];
        if !n.tls.as_ref().is_some_and(|t| t.awaiting_ca_key) {
            continue;
        }
        let Some(key) = n.active.as_ref().and_then(|c| trustd_key(st, c)) else {
            continue;
        };
        let n = &mut st.nodes[i];
        match tls::NodeTls::build(n, Some(key)) {
            Ok(t) => n.tls = Some(Arc::new(t)),
            Err(e) => eprintln!("talos-sim: node {i}: cannot sign the server certificate: {e:#}"),
        }
    }
}

/// Services a configured node runs, by id.
pub fn services_for(control_plane: bool) -> Vec<&'static str> {
    if control_plane {
        vec![
            "apid",
            "containerd",
            "cri",
            "etcd",
            "kubelet",
            "machined",
            "trustd",
        ]
    } else {
        vec!["apid", "containerd", "cri", "kubelet", "machined"]
    }
}

/// Puts the stored cluster's facts into freshly laid-out nodes (same count, checked by the
/// caller's layout) before anything listens.
fn restore_into(st: &mut State, r: &Restored) -> anyhow::Result<()> {
    let c = &r.cluster;
    if c.nodes.len() != st.nodes.len() || r.configs.len() != st.nodes.len() {
        anyhow::bail!(
            "the state has {} nodes, the layout {}",
            c.nodes.len(),
            st.nodes.len()
        );
    }
    if let Some(m) = c
        .etcd_members
        .iter()
        .flatten()
        .find(|m| m.node >= st.nodes.len())
    {
        anyhow::bail!(
            "the state lists an etcd member on node {}, which does not exist",
            m.node
        );
    }
    for ((n, s), (running, next)) in st.nodes.iter_mut().zip(&c.nodes).zip(&r.configs) {
        for v in std::iter::once(&s.version).chain(&s.pending_version) {
            crate::version::parse(v).map_err(|e| anyhow::anyhow!("node {}: {e:#}", s.index))?;
        }
        n.hostname = s.hostname.clone();
        n.address = s.address;
        n.port = s.port;
        n.version = s.version.clone();
        n.pending_version = s.pending_version.clone();
        n.pending_schematic = s.pending_schematic.clone();
        n.schematic = s.schematic.clone();
        n.images = s.images.iter().cloned().collect();
        n.boot_id = s.boot_id.clone();
        n.active = running.clone();
        n.persisted = next.clone();
        n.etcd_data = s.etcd_data;
        n.reboot_pending = s.reboot_pending;
        n.config_version = s.config_version;
        n.config_updated = crate::store::from_unix_ms(s.config_updated_unix_ms);
        n.try_rollback_at = s.try_rollback_unix_ms.map(crate::store::from_unix_ms);
        n.faults = s.faults.clone();
        n.installed = s
            .installed
            .unwrap_or(s.running_config.is_some() || s.next_boot_config.is_some());
        n.boot_media = s.boot_media;
    }
    st.etcd = c
        .etcd_members
        .as_ref()
        .map(|m| m.iter().map(EtcdMember::from_stored).collect());
    st.health_fail = c.health_fail.clone();
    st.reboot_downtime = Duration::from_millis(c.reboot_downtime_ms);
    Ok(())
}
