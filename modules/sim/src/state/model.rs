//! The cluster's data model: the state behind the lock, its nodes, their stage and services.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ferro_talos_proto::machine as pb;

use super::{EtcdMember, EventRec, Faults};
use crate::mcfg::{MachineType, StoredConfig};
use crate::tls;

/// What a node's listener needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub listening: bool,
    pub address: Ipv4Addr,
    pub generation: u64,
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
    pub(super) event_counter: u64,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcfg::Release;
    use crate::state::shared::tests::state;

    const ALL: [Stage; 8] = [
        Stage::Booting,
        Stage::Installing,
        Stage::Maintenance,
        Stage::Running,
        Stage::Rebooting,
        Stage::ShuttingDown,
        Stage::Resetting,
        Stage::Upgrading,
    ];

    #[test]
    fn stages_have_their_machine_api_values_and_names() {
        use pb::machine_status_event::MachineStage as S;
        let protos: Vec<S> = ALL.iter().map(|s| s.proto()).collect();
        assert_eq!(
            protos,
            [
                S::Booting,
                S::Installing,
                S::Maintenance,
                S::Running,
                S::Rebooting,
                S::ShuttingDown,
                S::Resetting,
                S::Upgrading
            ]
        );
        let names: Vec<&str> = ALL.iter().map(|s| s.yaml_name()).collect();
        assert_eq!(
            names,
            [
                "booting",
                "installing",
                "maintenance",
                "running",
                "rebooting",
                "shutting down",
                "resetting",
                "upgrading"
            ]
        );
        // The JSON name (status output) is the variant in lower case, without a space.
        assert_eq!(
            serde_json::to_value(Stage::ShuttingDown).unwrap(),
            "shuttingdown"
        );
        assert_eq!(serde_json::to_value(Stage::Running).unwrap(), "running");
    }

    fn config(machine_type: &str) -> StoredConfig {
        let yaml = format!("version: v1alpha1\nmachine:\n  type: {machine_type}\n");
        StoredConfig::parse(yaml.as_bytes(), Release::V1_13).expect("a minimal config decodes")
    }

    #[test]
    fn the_running_config_decides_the_role() {
        let mut n = state(1, 0).nodes.remove(0);
        assert!(n.maintenance());
        assert_eq!(n.machine_type(), None);
        assert!(
            !n.is_control_plane(),
            "planned as one, but in maintenance mode"
        );
        n.persisted = Some(config("controlplane"));
        assert!(n.maintenance(), "only the running config counts");
        n.active = Some(config("worker"));
        assert_eq!(n.machine_type(), Some(MachineType::Worker));
        assert!(!n.is_control_plane() && !n.maintenance());
        n.active = Some(config("init"));
        assert!(n.is_control_plane());
        n.active = Some(config("controlplane"));
        assert!(n.is_control_plane());
    }

    #[test]
    fn the_listener_follows_up_and_the_reachability_faults() {
        let mut n = state(1, 0).nodes.remove(0);
        assert!(!n.listening() && !n.reachable_from_controller());
        n.up = true;
        assert!(n.listening() && n.reachable_from_controller());
        n.faults.firewalled = true;
        assert!(n.listening(), "the other nodes still reach it");
        assert!(!n.reachable_from_controller());
        n.faults.firewalled = false;
        n.faults.unreachable = true;
        assert!(!n.listening() && !n.reachable_from_controller());
        n.generation = 4;
        assert_eq!(
            n.run_state(),
            RunState {
                listening: false,
                address: n.address,
                generation: 4,
            }
        );
    }

    #[test]
    fn etcd_stops_for_each_of_its_causes_and_drops_are_counted() {
        let mut n = state(1, 0).nodes.remove(0);
        assert!(!n.etcd_stopped());
        n.faults.etcd_down = true;
        assert!(n.etcd_stopped());
        n.faults.etcd_down = false;
        n.services_stopped = true;
        assert!(n.etcd_stopped());
        n.services_stopped = false;
        n.etcd_left = true;
        assert!(n.etcd_stopped());
        n.etcd_data = true;
        n.drop_etcd_data();
        n.drop_etcd_data();
        assert!(!n.etcd_data);
        assert_eq!(n.etcd_data_drops, 2);
    }

    #[test]
    fn every_node_has_the_same_disks() {
        let n = state(1, 0).nodes.remove(0);
        assert_eq!(n.system_disk(), "/dev/sda");
        assert_eq!(n.user_disks(), ["/dev/sdb"]);
    }

    #[test]
    fn control_planes_also_run_etcd_and_trustd() {
        // The relation, not a copy of the lists: a control plane runs what a worker runs, plus
        // etcd and trustd, each listed once in id order.
        let control_plane = services_for(true);
        let worker = services_for(false);
        let extra: Vec<&str> = control_plane
            .iter()
            .copied()
            .filter(|s| !worker.contains(s))
            .collect();
        assert_eq!(extra, ["etcd", "trustd"]);
        assert!(worker.iter().all(|s| control_plane.contains(s)));
        for list in [&control_plane, &worker] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
    }
}
