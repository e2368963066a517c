//! The simulated cluster's state: nodes, their configs, versions, boots, etcd and faults.
//!
//! All state sits behind one mutex; nothing awaits while holding it. Each node's listener task
//! watches a [`RunState`] and (re)binds or drops its socket when it changes.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use ferro_talos_proto::machine as pb;
use prost::Message;
use tokio::sync::{broadcast, watch};

use crate::config::SimConfig;
use crate::mcfg::{MachineType, StoredConfig};
use crate::tls;

/// What a node's listener needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub listening: bool,
    pub address: Ipv4Addr,
    pub generation: u64,
}

/// Faults injected from tests or the control endpoint.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Faults {
    /// The next reboot never finishes: the node stays down.
    pub never_return: bool,
    /// After the next reboot the node listens on this address instead.
    pub next_address: Option<Ipv4Addr>,
    /// The node's listener is closed while the node itself keeps running.
    pub unreachable: bool,
    /// The node's etcd member is down (not healthy, status fails).
    pub etcd_down: bool,
    /// ApplyConfiguration on this node fails validation with this text.
    pub reject_config: Option<String>,
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
    Maintenance,
    Running,
    Rebooting,
    Resetting,
    Upgrading,
}

impl Stage {
    pub fn proto(self) -> pb::machine_status_event::MachineStage {
        use pb::machine_status_event::MachineStage as S;
        match self {
            Stage::Booting => S::Booting,
            Stage::Maintenance => S::Maintenance,
            Stage::Running => S::Running,
            Stage::Rebooting => S::Rebooting,
            Stage::Resetting => S::Resetting,
            Stage::Upgrading => S::Upgrading,
        }
    }
    pub fn yaml_name(self) -> &'static str {
        match self {
            Stage::Booting => "booting",
            Stage::Maintenance => "maintenance",
            Stage::Running => "running",
            Stage::Rebooting => "rebooting",
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
    pub images: BTreeSet<String>,
    pub boot_id: String,
    /// The running config (`v1alpha1` resource). None = maintenance mode.
    pub active: Option<StoredConfig>,
    /// What the next boot loads (may be ahead of `active` after STAGED, behind after TRY).
    pub persisted: Option<StoredConfig>,
    /// Bumped to cancel a pending TRY rollback.
    pub try_token: u64,
    pub etcd_data: bool,
    pub reboot_pending: bool,
    pub upgrade_running: bool,
    pub stage: Stage,
    pub events: Vec<EventRec>,
    pub faults: Faults,
    /// TLS personality of the current boot; the listener reads it per connection.
    pub tls: Option<Arc<tls::NodeTls>>,
    pub config_version: u64,
    pub config_updated: SystemTime,
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
    pub fn listening(&self) -> bool {
        self.up && !self.faults.unreachable
    }
    pub fn run_state(&self) -> RunState {
        RunState {
            listening: self.listening(),
            address: self.address,
            generation: self.generation,
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct EtcdMember {
    pub node: usize,
    pub id: u64,
}

pub struct State {
    pub nodes: Vec<Node>,
    /// None until Bootstrap; then the member list.
    pub etcd: Option<Vec<EtcdMember>>,
    /// HealthCheck fails with this text while set.
    pub health_fail: Option<String>,
    pub reboot_downtime: Duration,
    event_counter: u64,
}

pub struct Shared {
    state: Mutex<State>,
    pub run: Vec<watch::Sender<RunState>>,
    pub events: Vec<broadcast::Sender<EventRec>>,
    pub shutdown: watch::Sender<bool>,
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
    let status = pb::machine_status_event::MachineStatus {
        ready,
        unmet_conditions: vec![],
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
            }
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.etcd_data = false;
        }
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
    pub fn new(cfg: SimConfig) -> anyhow::Result<Arc<Shared>> {
        cfg.validate()?;
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
                images: BTreeSet::new(),
                boot_id: new_uuid(),
                active: None,
                persisted: None,
                try_token: 0,
                etcd_data: false,
                reboot_pending: false,
                upgrade_running: false,
                stage: Stage::Booting,
                events: Vec::new(),
                faults: Faults::default(),
                tls: None,
                config_version: 0,
                config_updated: SystemTime::now(),
            };
            run.push(watch::channel(node.run_state()).0);
            events.push(broadcast::channel(256).0);
            nodes.push(node);
        }
        let state = State {
            nodes,
            etcd: None,
            health_fail: None,
            reboot_downtime: cfg.reboot_downtime,
            event_counter: 0,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            run,
            events,
            shutdown: watch::channel(false).0,
        });
        for i in 0..shared.run.len() {
            shared.boot(i)?;
        }
        Ok(shared)
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking handler must not take the whole simulator down with a poisoned lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Finish a boot: load the persisted config, take pending versions/addresses, new boot id,
    /// fresh TLS personality, start listening.
    pub fn boot(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let ca_key = st
            .nodes
            .get(idx)
            .and_then(|n| n.persisted.as_ref())
            .and_then(|c| trustd_key(&st, c));
        let Some(n) = st.nodes.get_mut(idx) else {
            anyhow::bail!("no node {idx}");
        };
        if let Some(a) = n.faults.next_address.take() {
            n.address = a;
        }
        if let Some(v) = n.pending_version.take() {
            n.version = v;
        }
        n.active = n.persisted.clone();
        n.boot_id = new_uuid();
        n.events.clear();
        n.reboot_pending = false;
        n.upgrade_running = false;
        n.try_token += 1;
        if let Some(h) = n.active.as_ref().and_then(StoredConfig::hostname) {
            n.hostname = h;
        }
        let node_tls = tls::NodeTls::build(n, ca_key)?;
        n.tls = Some(Arc::new(node_tls));
        n.up = true;
        n.generation += 1;
        n.stage = if n.active.is_some() {
            Stage::Running
        } else {
            Stage::Maintenance
        };
        let stage = n.stage;
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
        self.publish(&mut st, idx, "", sequence_event("boot", A::Stop));
        self.publish(&mut st, idx, "", machine_status_event(stage, true));
        self.sync_etcd(&mut st);
        refresh_unsigned_tls(&mut st);
        self.notify(&st, idx);
        Ok(())
    }

    /// Control planes with a config join an existing etcd cluster automatically.
    pub fn sync_etcd(&self, st: &mut State) {
        let Some(members) = st.etcd.as_mut() else {
            return;
        };
        for n in st.nodes.iter_mut() {
            if n.up && n.is_control_plane() && !members.iter().any(|m| m.node == n.index) {
                members.push(EtcdMember {
                    node: n.index,
                    id: rand::random::<u64>() >> 1,
                });
                n.etcd_data = true;
            }
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
