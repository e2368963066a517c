//! Leaving maintenance mode after the first config, as Talos 1.13.9 does it.
//!
//! Upstream, ApplyConfiguration in maintenance mode stores the config (persisted and active) and
//! answers at once; it starts neither an install nor a reboot itself
//! (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`, ApplyConfiguration).
//! Once the active config is complete the config controller ends the maintenance service
//! (`internal/app/machined/pkg/controllers/config/acquire.go`), apid swaps its listener to
//! mutual TLS, and machined runs the Install sequence, then Boot
//! (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`). Install has steps only
//! on a node where Talos is not installed yet: it pulls the installer, writes the system disk and
//! reboots into it (stages BOOTING, INSTALLING, REBOOTING, BOOTING, RUNNING). A node that is
//! already installed (booted from disk after a STATE reset) boots on without a reboot.

use std::sync::Arc;
use std::time::Duration;

use ferro_talos_proto::machine as pb;

use crate::state::{Shared, Stage, machine_status_event, new_uuid, sequence_event};

/// Runs what follows a first config: the install and its reboot, or the rest of the boot.
pub fn leave_maintenance(shared: &Arc<Shared>, idx: usize) {
    let shared = shared.clone();
    tokio::spawn(async move {
        // The apply's answer goes out before anything else happens.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let install_time = {
            let mut st = shared.lock();
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            if n.installed {
                None
            } else {
                n.stage = Stage::Installing;
                let downtime = st.reboot_downtime;
                use pb::sequence_event::Action as A;
                shared.publish(&mut st, idx, "", sequence_event("install", A::Start));
                shared.publish(
                    &mut st,
                    idx,
                    "",
                    machine_status_event(Stage::Installing, false),
                );
                Some(downtime / 2)
            }
        };
        let Some(install_time) = install_time else {
            if let Err(e) = shared.start(idx) {
                eprintln!("talos-sim: node {idx} failed to leave maintenance mode: {e:#}");
            }
            return;
        };
        tokio::time::sleep(install_time).await;
        {
            let mut st = shared.lock();
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            n.installed = true;
            // From now on the node boots from its disk; the ISO or PXE entry is no longer what
            // it starts from (an operator ejects it), so a full wipe leaves nothing to boot.
            n.boot_media = false;
            use pb::sequence_event::Action as A;
            shared.publish(&mut st, idx, "", sequence_event("install", A::Stop));
        }
        shared.reboot(idx, new_uuid(), "install");
    });
}
