//! The legacy `MachineService/Upgrade`, as Talos 1.13.9 carries it out.
//!
//! Upstream (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`, Upgrade) the
//! handler checks only what it can check at once: Talos is installed, the installer image can be
//! pulled, and on a control plane (unless `force` or `preserve`) it takes etcd's upgrade mutex
//! and runs `ValidateForUpgrade` (`internal/pkg/etcd/etcd.go`): two members cannot keep quorum
//! while one is down, every member must be started and healthy. Then it starts the upgrade
//! sequence in the background and answers "Upgrade request received" with an actor id.
//!
//! The sequence (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`, Upgrade)
//! drains the node, stops its pods and services and unmounts EPHEMERAL *before* it runs the
//! installer. The installer checks that it accepts the running version
//! (`cmd/installer/pkg/install/preflight.go`, `pkg/machinery/compatibility/talos_version.go`);
//! when it refuses, the task fails with `task "upgrade" failed: exit code 1`
//! (`internal/pkg/install/install.go`), the controller publishes a failed sequence event
//! (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_controller.go`, Run) and nothing reboots:
//! the node keeps running the old version with its services stopped until someone reboots it.
//! MachineStatus then says REBOOTING, because the status controller reads every fatal sequence
//! error that way (`internal/app/machined/pkg/controllers/runtime/machine_status.go`).
//!
//! The drain is Talos's own (`kube::cordon_and_drain`); when it fails (the Node was never
//! cordoned, its pods could not be listed) the sequence fails in that phase the same way, with
//! nothing stopped yet: the node keeps running the old version with its pods and services, and
//! stays cordoned, since REBOOTING changes no cordon, until it boots again.

use std::sync::Arc;
use std::time::Duration;

use ferro_talos_proto::common;
use ferro_talos_proto::machine as pb;
use ferro_talos_proto::machine::UpgradeRequest;
use tonic::Status;

use crate::registry;
use crate::routing::Target;
use crate::state::{
    Shared, Stage, State, machine_status_event, new_uuid, phase_event, sequence_error_event,
    sequence_event, task_event,
};
use crate::version;

/// The upgrade sequence's phases up to the installer, in upstream's order, as Talos 1.13.9 and
/// Talos 1.14.1 list them (`Upgrade` in `v1alpha1_sequencer.go`; the drain is there because
/// the simulated kubelets never skip node registration). The simulator takes 1.13.9's for every
/// release before 1.14.
const PHASES_BEFORE_INSTALLER_1_13: &[&str] = &[
    "drain",
    "cleanup",
    "dbus",
    "stopServices",
    "unmount",
    "unmountBind",
    "unmountSystem",
    "volumeFinalize",
];
const PHASES_BEFORE_INSTALLER_1_14: &[&str] = &[
    "denyNewServices",
    "drain",
    "cleanup",
    "preShutdown",
    "dbus",
    "stopContainers",
    "stopServices",
    "unmount",
    "unmountBind",
    "unmountPromotable",
    "unmountSystem",
    "volumeFinalize",
];

/// The phases before the installer for a node running `version`.
fn phases_before_installer(version: &str) -> &'static [&'static str] {
    let v = version::parse(version).map(|v| (v.major, v.minor));
    if v.is_ok_and(|v| v >= (1, 14)) {
        PHASES_BEFORE_INSTALLER_1_14
    } else {
        PHASES_BEFORE_INSTALLER_1_13
    }
}

/// The phase the services stop in: from there on the node keeps them stopped until it reboots.
const STOP_SERVICES: &str = "stopServices";

/// What the installer image will do when the sequence runs it.
struct Installer {
    host: String,
    target: String,
    /// The installer_fails fault.
    fails: bool,
}

impl Installer {
    /// Why the installer exits 1, or `None` when it installs.
    fn refusal(&self) -> Option<String> {
        version::run_installer(&self.host, &self.target, self.fails).err()
    }
}

/// Handles the request: checks, then the sequence in the background. Answers the actor id.
pub fn upgrade(shared: &Arc<Shared>, t: &Target, req: &UpgradeRequest) -> Result<String, Status> {
    let mut st = shared.lock();
    let n = &st.nodes[t.idx];
    if !n.installed {
        return Err(Status::failed_precondition("Talos is not installed"));
    }
    let image = req.image.trim().to_string();
    // `PullAndValidateInstallerImage` pulls before anything else happens; a reference its registry
    // does not have fails the call (`internal/pkg/install/pull.go` @ v1.14.1).
    if registry::missing(&image) {
        return Err(Status::unknown(format!(
            "error validating installer image {image:?}: {}",
            registry::pull_error(&image)
        )));
    }
    let Some(target) = version::from_image(&image) else {
        // The sim's stand-in for a failed pull: no version tag means no installer to run.
        return Err(Status::unknown(format!(
            "error validating installer image {image:?}: image reference has no version tag"
        )));
    };
    if n.is_control_plane() && !n.maintenance() && !req.force && !req.preserve {
        if n.faults.upgrade_mutex_held {
            return Err(Status::unknown(
                "failed to acquire upgrade mutex: error trying to lock etcd upgrade mutex: mutex: Locked by another session",
            ));
        }
        if let Some(reason) = etcd_refuses_upgrade(&st) {
            return Err(Status::unknown(format!(
                "error validating etcd for upgrade: {reason}"
            )));
        }
    }
    let actor = new_uuid();
    let sequence = match (n.maintenance(), req.stage) {
        (true, _) => "maintenanceUpgrade",
        (false, true) => "stageUpgrade",
        (false, false) => "upgrade",
    };
    let n = &mut st.nodes[t.idx];
    if n.upgrade_running || n.reboot_pending {
        // The controller's sequence lock is taken: the answer still says "received", and the
        // LOCKED event goes out without the actor id (`Publish(context.Background(), …)` in
        // v1alpha1_controller.go Run), so a client watching its actor never sees it.
        let locked = sequence_error_event(
            sequence,
            common::Code::Locked,
            "sequence not started: locked",
        );
        shared.publish(&mut st, t.idx, "", locked);
        return Ok(actor);
    }
    n.upgrade_running = true;
    let host = n.version.clone();
    let installer_fails = n.faults.installer_fails;
    if let Some(s) = version::schematic_from_image(&image) {
        n.pending_schematic = Some(s);
    }
    drop(st);
    run_sequence(
        shared,
        t.idx,
        actor.clone(),
        sequence,
        Installer {
            host,
            target,
            fails: installer_fails,
        },
    );
    Ok(actor)
}

/// `ValidateForUpgrade`'s refusal, in upstream's words, or `None` when etcd can lose this member.
fn etcd_refuses_upgrade(st: &State) -> Option<String> {
    let members = st.etcd.as_ref()?;
    if members.len() == 2 {
        return Some(format!(
            "etcd member count({}) is insufficient to maintain quorum if upgrade commences",
            members.len()
        ));
    }
    let down = members.iter().find(|m| {
        st.nodes
            .get(m.node)
            .is_none_or(|n| n.etcd_stopped() || !n.listening())
    })?;
    // etcd's client gives up dialling a member that does not answer with its own deadline.
    Some(format!(
        "etcd member {:016x} is not healthy; all members must be healthy to perform an upgrade: context deadline exceeded",
        down.id
    ))
}

fn run_sequence(
    shared: &Arc<Shared>,
    idx: usize,
    actor: String,
    sequence: &'static str,
    installer: Installer,
) {
    let shared = shared.clone();
    tokio::spawn(async move {
        use pb::phase_event::Action as P;
        use pb::sequence_event::Action as A;
        // The answer goes out before the sequence publishes anything.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let phases = {
            let mut st = shared.lock();
            shared.publish(&mut st, idx, &actor, sequence_event(sequence, A::Start));
            st.nodes[idx].stage = Stage::Upgrading;
            shared.publish(
                &mut st,
                idx,
                &actor,
                machine_status_event(Stage::Upgrading, false),
            );
            phases_before_installer(&installer.host)
        };
        for (i, phase) in phases.iter().enumerate() {
            shared.publish(
                &mut shared.lock(),
                idx,
                &actor,
                phase_event(phase, P::Start),
            );
            // Only the "upgrade" sequence drains (`StageUpgrade` and `MaintenanceUpgrade` do not).
            if *phase == "drain" && sequence == "upgrade" {
                const TASK: &str = "cordonAndDrainNode";
                let task = pb::task_event::Action::Start;
                shared.publish(&mut shared.lock(), idx, &actor, task_event(TASK, task));
                let drained = crate::kube::cordon_and_drain(&shared, idx).await;
                let mut st = shared.lock();
                let task = pb::task_event::Action::Stop;
                shared.publish(&mut st, idx, &actor, task_event(TASK, task));
                if let Err(reason) = drained {
                    let failure = Failure {
                        phase,
                        number: i + 1,
                        reason: &reason,
                    };
                    fail_sequence(&shared, &mut st, idx, &actor, sequence, failure);
                    eprintln!("talos-sim: node {idx}: upgrade failed at its drain: {reason}");
                    return;
                }
            }
            let mut st = shared.lock();
            shared.publish(&mut st, idx, &actor, phase_event(phase, P::Stop));
            if *phase == STOP_SERVICES {
                // From here the node's services are stopped, whatever the installer decides.
                st.nodes[idx].services_stopped = true;
            }
        }
        let refused = {
            let mut st = shared.lock();
            shared.publish(&mut st, idx, &actor, phase_event("upgrade", P::Start));
            shared.publish(
                &mut st,
                idx,
                &actor,
                task_event("upgrade", pb::task_event::Action::Start),
            );
            let refused = installer.refusal();
            if refused.is_some() {
                shared.publish(
                    &mut st,
                    idx,
                    &actor,
                    task_event("upgrade", pb::task_event::Action::Stop),
                );
                let failure = Failure {
                    phase: "upgrade",
                    number: phases.len() + 1,
                    reason: "task \"upgrade\" failed: exit code 1",
                };
                fail_sequence(&shared, &mut st, idx, &actor, sequence, failure);
            }
            refused
        };
        if let Some(msg) = refused {
            eprintln!("talos-sim: node {idx}: upgrade failed: the installer refused: {msg}");
            return;
        }
        {
            let mut st = shared.lock();
            st.nodes[idx].pending_version = Some(installer.target);
            if let Some(s) = st.nodes[idx].pending_schematic.take() {
                st.nodes[idx].schematic = Some(s);
            }
        }
        shared.reboot(idx, actor, sequence);
    });
}

/// Where a sequence failed: the phase (counted from 1, as upstream counts) and its task's error.
struct Failure<'a> {
    phase: &'a str,
    number: usize,
    reason: &'a str,
}

/// A task failed: its phase and the sequence stop, the controller publishes the failure
/// (`v1alpha1_controller.go` Run: "sequence failed: error running phase N in S sequence: task
/// 1/1: failed, ERR"), and nothing reboots. What the phases before it stopped stays stopped.
fn fail_sequence(
    shared: &Shared,
    st: &mut State,
    idx: usize,
    actor: &str,
    sequence: &str,
    failure: Failure<'_>,
) {
    use pb::phase_event::Action as P;
    use pb::sequence_event::Action as A;
    shared.publish(st, idx, actor, phase_event(failure.phase, P::Stop));
    shared.publish(st, idx, actor, sequence_event(sequence, A::Stop));
    let message = format!(
        "sequence failed: error running phase {} in {sequence} sequence: task 1/1: failed, {}",
        failure.number, failure.reason
    );
    let failed = sequence_error_event(sequence, common::Code::Fatal, &message);
    shared.publish(st, idx, actor, failed);
    let n = &mut st.nodes[idx];
    n.upgrade_running = false;
    n.pending_schematic = None;
    n.stage = Stage::Rebooting;
    shared.publish(
        st,
        idx,
        actor,
        machine_status_event(Stage::Rebooting, false),
    );
}
