//! MachineService/Reset, as Talos 1.13.9 validates and carries it out.
//!
//! Upstream: the handler in `internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`
//! (Reset) checks the request, starts the Reset sequence in the background and answers at once
//! with an actor id; the sequence (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`
//! Reset and `v1alpha1_sequencer_tasks.go`) leaves etcd when graceful on a control plane, stops
//! everything, wipes, then reboots (`reboot: true`) or powers off. What it wipes:
//! - no system partition labels and a mode other than USER_DISKS: the whole system disk,
//!   partition table and bootloader included, so the node boots only from installation media;
//! - labels: only those volumes (STATE holds the config, EPHEMERAL etcd's data); a node booting
//!   from disk without STATE comes up in maintenance mode;
//! - USER_DISKS with no disks: nothing at all.
//!
//! Validation errors are plain Go errors there, so they reach a client as code Unknown.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use ferro_talos_proto::common;
use ferro_talos_proto::machine as pb;
use ferro_talos_proto::machine::reset_request::WipeMode;
use ferro_talos_proto::machine::{ResetPartitionSpec, ResetRequest};
use tonic::Status;

use crate::shutdown::empty_phase;
use crate::state::{
    EtcdRefusal, Node, Shared, Stage, State, machine_status_event, phase_event,
    sequence_error_event, sequence_event, task_event,
};

/// The system volumes a reset can name (upstream's system VolumeConfigs:
/// `internal/app/machined/pkg/controllers/block/internal/volumes/volumeconfig/system_volumes.go`).
const SYSTEM_VOLUMES: [&str; 3] = ["META", "STATE", "EPHEMERAL"];

/// What a reset request wipes on the system disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SystemWipe {
    /// The whole disk, bootloader included.
    WholeDisk,
    /// These volumes (a subset of [`SYSTEM_VOLUMES`]); empty wipes nothing.
    Volumes(Vec<String>),
}

/// A validated reset: what goes and what happens afterwards.
#[derive(Clone, Debug)]
pub struct ResetPlan {
    pub graceful: bool,
    pub reboot: bool,
    pub system: SystemWipe,
    pub user_disks: Vec<String>,
}

/// Checks a request against the node the way the upstream handler does.
pub fn plan(node: &Node, req: &ResetRequest) -> Result<ResetPlan, Status> {
    let mode = WipeMode::try_from(req.mode).unwrap_or(WipeMode::All);
    if !req.user_disks_to_wipe.is_empty() {
        if mode == WipeMode::SystemDisk {
            return Err(Status::unknown(
                "reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter",
            ));
        }
        for device in &req.user_disks_to_wipe {
            if device == node.system_disk() {
                return Err(Status::unknown(format!(
                    "reset user disk failed: device {device} is the system disk"
                )));
            }
            if !node.user_disks().contains(&device.as_str()) {
                return Err(Status::unknown(format!(
                    "reset user disk failed: device {device} wasn't found"
                )));
            }
        }
    }
    if !req.system_partitions_to_wipe.is_empty() && mode == WipeMode::UserDisks {
        return Err(Status::unknown(
            "reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter",
        ));
    }
    for ResetPartitionSpec { label, .. } in &req.system_partitions_to_wipe {
        if !SYSTEM_VOLUMES.contains(&label.as_str()) {
            // Upstream wraps the resource store's not-found error after this prefix.
            return Err(Status::unknown(format!(
                "failed to get volume status with label {label:?}: volume not found"
            )));
        }
    }
    let system = if mode != WipeMode::UserDisks && req.system_partitions_to_wipe.is_empty() {
        SystemWipe::WholeDisk
    } else {
        SystemWipe::Volumes(
            req.system_partitions_to_wipe
                .iter()
                .filter(|s| s.wipe)
                .map(|s| s.label.clone())
                .collect(),
        )
    };
    let user_disks = if mode == WipeMode::SystemDisk {
        Vec::new()
    } else {
        req.user_disks_to_wipe.clone()
    };
    Ok(ResetPlan {
        graceful: req.graceful,
        reboot: req.reboot,
        system,
        user_disks,
    })
}

/// The Reset sequence, after the handler has answered: its phases in upstream's order
/// (`v1alpha1_sequencer.go` Reset @ v1.13.9 and v1.14.1): `drain` (graceful; Talos's own drain,
/// whose failure is only logged), `cleanup` (the pods removed and the kubelet stopped, or only
/// stopped without graceful), `preShutdown` (1.14) and `dbus`, `leave` (graceful, control planes),
/// then the wipe and the reboot or power-off. `leave` is not wrapped in an error handler: when
/// etcd refuses, the sequence fails there, after the pods and the kubelet are gone and before
/// anything is wiped, and machined's fatal-error path reboots the node (`crate::fatal`), which
/// comes back with its config and its etcd member.
pub fn run(shared: &Arc<Shared>, idx: usize, plan: ResetPlan, actor: String) {
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        use pb::phase_event::Action as P;
        use pb::sequence_event::Action as A;
        let (leave, refusal) = {
            let mut st = shared.lock();
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            n.stage = Stage::Resetting;
            let leave = plan.graceful && n.is_control_plane() && n.etcd_data;
            // Leaving fails where etcd is down here, or where etcd refuses to let this member
            // go (the last one, or a live one whose going breaks the active quorum).
            let own_id = st
                .etcd
                .as_ref()
                .and_then(|ms| ms.iter().find(|m| m.node == idx))
                .map(|m| m.id);
            let refusal = match own_id {
                _ if st.nodes[idx].etcd_stopped() => Some(format!(
                    "failed to remove member {}: {}",
                    own_id.unwrap_or_default(),
                    EtcdRefusal::Unhealthy.text()
                )),
                Some(id) => st
                    .may_remove_member(idx, id)
                    .err()
                    .map(|r| format!("failed to remove member {id}: {}", r.text())),
                None => None,
            };
            shared.publish(&mut st, idx, &actor, sequence_event("reset", A::Start));
            shared.publish(
                &mut st,
                idx,
                &actor,
                machine_status_event(Stage::Resetting, false),
            );
            if plan.graceful {
                shared.publish(&mut st, idx, &actor, phase_event("drain", P::Start));
            }
            (leave, refusal)
        };
        if plan.graceful {
            // The drain comes first and never stops the reset (upstream logs its errors).
            let _ = crate::shutdown::talos_drain(&shared, idx).await;
        }
        // With the real backend, etcd itself lets the member go or refuses.
        let refusal = match shared.real.clone() {
            Some(real) if leave => {
                let on = shared.clone();
                tokio::task::spawn_blocking(move || crate::real::answers::leave(&on, &real, idx))
                    .await
                    .map_or_else(|e| Some(e.to_string()), Result::err)
            }
            _ => refusal,
        };
        let aborted = {
            let mut st = shared.lock();
            let mut phases = Vec::new();
            if plan.graceful {
                shared.publish(&mut st, idx, &actor, phase_event("drain", P::Stop));
                phases.push("drain");
            }
            phases.push("cleanup");
            if crate::version::minor(&st.nodes[idx].version) >= 14 {
                phases.push("preShutdown");
            }
            phases.push("dbus");
            for phase in &phases[usize::from(plan.graceful)..] {
                empty_phase(&shared, &mut st, idx, &actor, phase);
            }
            if leave {
                shared.publish(&mut st, idx, &actor, phase_event("leave", P::Start));
                phases.push("leave");
            }
            match (leave, refusal) {
                (true, Some(why)) => {
                    // LeaveEtcd fails, which fails the whole sequence upstream: nothing is wiped.
                    shared.publish(&mut st, idx, &actor, phase_event("leave", P::Stop));
                    shared.publish(&mut st, idx, &actor, sequence_event("reset", A::Stop));
                    let message = format!(
                        "sequence failed: error running phase {} in reset sequence: task 1/1: failed, \
                         failed to leave cluster: {why}",
                        phases.len()
                    );
                    shared.publish(
                        &mut st,
                        idx,
                        &actor,
                        sequence_error_event("reset", common::Code::Fatal, &message),
                    );
                    st.nodes[idx].stage = Stage::Rebooting;
                    shared.publish(
                        &mut st,
                        idx,
                        &actor,
                        machine_status_event(Stage::Rebooting, false),
                    );
                    true
                }
                (true, None) => {
                    st.leave_etcd(idx);
                    shared.publish(&mut st, idx, &actor, phase_event("leave", P::Stop));
                    false
                }
                (false, _) => false,
            }
        };
        if aborted {
            crate::fatal::handle(&shared, idx, actor, crate::fatal::Afterwards::Reboot);
            return;
        }
        {
            let mut st = shared.lock();
            // talosctl reset --wait counts this task as done (before anything is wiped).
            shared.publish(
                &mut st,
                idx,
                &actor,
                task_event("stopAllServices", pb::task_event::Action::Start),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        {
            let mut st = shared.lock();
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            // A config that set the node's address goes with STATE: the node boots without one,
            // and without a config Talos runs DHCP on every physical link
            // (`internal/app/machined/pkg/controllers/network/operator_config.go` @ v1.14.1).
            let static_address = n
                .persisted
                .as_ref()
                .is_some_and(|c| c.static_addresses().contains(&n.address));
            match &plan.system {
                SystemWipe::WholeDisk => {
                    n.installed = false;
                    n.persisted = None;
                    n.pending_version = None;
                    n.drop_etcd_data();
                    n.etcd_snapshot = None;
                }
                SystemWipe::Volumes(labels) => {
                    for label in labels {
                        match label.as_str() {
                            "META" => n.installed = false,
                            "STATE" => n.persisted = None,
                            "EPHEMERAL" => {
                                n.drop_etcd_data();
                                n.etcd_snapshot = None;
                            }
                            _ => {}
                        }
                    }
                }
            }
            if static_address && n.persisted.is_none() {
                let lease = dhcp_lease(&st, idx);
                st.nodes[idx].faults.next_address = Some(lease);
            }
            if !plan.user_disks.is_empty() {
                // The simulated data disks hold nothing the simulator tracks; the task shows in
                // the events as upstream's does.
                shared.publish(
                    &mut st,
                    idx,
                    &actor,
                    task_event("resetUserDisks", pb::task_event::Action::Stop),
                );
            }
            // With no member's data left anywhere, the etcd cluster is gone: the next control
            // plane has to be bootstrapped again.
            if st.etcd.is_some() && !st.nodes.iter().any(|n| n.etcd_data) {
                st.etcd = None;
                st.kube.forget_cluster();
            }
            shared.publish(&mut st, idx, &actor, sequence_event("reset", A::Stop));
        }
        if plan.reboot {
            shared.reboot(idx, actor, "reboot");
        } else {
            shared.power_off(idx, actor);
        }
    });
}

/// The address a DHCP server leases node `idx` when it boots without its static one: the
/// highest host of its /24 that no node of the cluster uses. The simulator moves a node to
/// another address at its next boot through `faults.next_address`, as a test does.
fn dhcp_lease(st: &State, idx: usize) -> Ipv4Addr {
    let [a, b, c, _] = st.nodes[idx].address.octets();
    (1..=254u8)
        .rev()
        .map(|host| Ipv4Addr::new(a, b, c, host))
        .find(|addr| st.nodes.iter().all(|n| n.address != *addr))
        .unwrap_or(st.nodes[idx].address)
}
