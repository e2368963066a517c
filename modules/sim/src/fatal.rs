//! What machined does when a sequence fails, as Talos 1.13.9 and 1.14.1 do it.
//!
//! Upstream: the controller publishes a failed sequence as a SequenceEvent with an error, code
//! FATAL (`Run` in `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_controller.go`);
//! machined's event watcher takes every sequence error but LOCKED and CANCELED as fatal
//! (`runEntrypoint` in `internal/app/machined/main.go`): the entrypoint returns, every service
//! stops (its deferred `Shutdown`, apid with them, so the node stops answering), and `handle`
//! reboots the machine after a 10 s countdown, or powers it off when the sequence had stored
//! that intent first (`StoreShutdownEmergency`, the shutdown sequence's first task; the command
//! is `emergency.RebootCmd`, RESTART unless stored). MachineStatus reads REBOOTING after a fatal
//! error, except while the sequence was a shutdown (`machine_status.go` watchEvents). A kernel
//! command line with `panic=0` makes `handle` sleep instead, the machine on and silent: not
//! modelled (the simulated nodes have no kernel command line).

use std::sync::Arc;
use std::time::Duration;

use crate::state::Shared;

/// What machined does once the services are stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Afterwards {
    /// `LINUX_REBOOT_CMD_RESTART`: the machine boots again with what its disks hold.
    Reboot,
    /// `LINUX_REBOOT_CMD_POWER_OFF`, stored by the shutdown sequence.
    PowerOff,
}

/// How long stopping every service takes before apid is gone (upstream stops them one after
/// another; seconds, shortened here so that the failure event still reaches a watcher).
const SERVICES_STOP: Duration = Duration::from_millis(200);

/// machined's answer to a sequence on node `idx` that has just published its fatal error.
pub fn handle(shared: &Arc<Shared>, idx: usize, actor: String, afterwards: Afterwards) {
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(SERVICES_STOP).await;
        if afterwards == Afterwards::PowerOff {
            if let Some(n) = shared.lock().nodes.get_mut(idx) {
                n.services_stopped = true;
            }
            shared.power_off(idx, actor);
            return;
        }
        let (downtime, never_return) = {
            let mut st = shared.lock();
            let downtime = st.reboot_downtime;
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            n.services_stopped = true;
            n.up = false;
            n.stage = crate::state::Stage::Rebooting;
            n.generation += 1;
            let never_return = n.faults.never_return;
            let name = crate::kube::node_name(n);
            if st.kube.has_node(&name) {
                st.kube.record("node_down", &name, None);
            }
            shared.notify(&st, idx);
            (downtime, never_return)
        };
        if never_return {
            return;
        }
        // The 10 s countdown and the firmware, as one reboot's downtime.
        tokio::time::sleep(downtime).await;
        if *shared.shutdown.borrow() {
            return;
        }
        if let Err(e) = shared.boot(idx) {
            eprintln!("talos-sim: node {idx} failed to boot: {e:#}");
        }
    });
}
