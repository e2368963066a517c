//! MachineService/Shutdown's sequence, and Talos's own drain of a node (shared with Reset), as
//! Talos 1.13.9 and 1.14.1 run them.
//!
//! Upstream: the handler (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`
//! Shutdown) answers with an actor id and runs the "shutdown" sequence in the background
//! (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go` Shutdown): phase
//! `storeShutdown` (power off is the intent if anything fails), `drain` unless `force`
//! (`CordonAndDrainNode`, **not** wrapped in an error handler as Reset's is, so a failed drain
//! fails the sequence there), `cleanup` (stop the pods), the stop phases ending with
//! `stopEverything` (task `stopAllServices`, where `talosctl shutdown --wait` stops waiting) and
//! `shutdown` (power off). A failed sequence is fatal to machined, which stops its services and
//! powers the machine off all the same (`crate::fatal`), without the cleanup.
//!
//! `CordonAndDrainNode` (`v1alpha1_sequencer_tasks.go`): a node whose kubelet never joined is
//! left alone; otherwise it waits up to a minute for its Node to show cordoned (Talos's
//! controllers cordon it through the Kubernetes API) and lists the pods to evict, so it fails
//! when the Kubernetes API does not work for it. Evictions a budget refuses are retried and
//! then only logged (`pkg/kubernetes/kubernetes.go` Drain): they do not fail it.

use std::sync::Arc;
use std::time::Duration;

use ferro_talos_proto::common;
use ferro_talos_proto::machine as pb;

use crate::fatal::{self, Afterwards};
use crate::state::{
    Shared, Stage, State, machine_status_event, phase_event, sequence_error_event, sequence_event,
    task_event,
};

/// How long Talos's drain waits for its Node to show cordoned before it gives up: a minute
/// upstream (`waitForNodeCordoned`), shortened here.
pub const CORDON_WAIT: Duration = Duration::from_millis(1500);

/// Whether the Kubernetes API works for the node's kubelet: an API server listens and etcd, where
/// it keeps everything, has a quorum of live members.
fn kubernetes_api_works(st: &State) -> bool {
    let Some(members) = st.etcd.as_ref() else {
        return false;
    };
    let live = members
        .iter()
        .filter(|m| {
            st.nodes
                .get(m.node)
                .is_some_and(|n| n.up && n.etcd_data && !n.etcd_stopped())
        })
        .count();
    live > members.len() / 2 && st.nodes.iter().any(|n| n.kube_api_listening)
}

/// Talos's `CordonAndDrainNode` on node `idx`: nothing for a node whose kubelet never registered
/// its Node; an error (after the wait for the cordon) when the Kubernetes API does not work;
/// else the cordon and the evictions as upstream makes them (`kube/talos_drain.rs`).
pub async fn talos_drain(shared: &Arc<Shared>, idx: usize) -> Result<(), String> {
    let works = {
        let st = shared.lock();
        let Some(n) = st.nodes.get(idx) else {
            return Ok(());
        };
        if !st.kube.has_node(&crate::kube::node_name(n)) {
            return Ok(());
        }
        kubernetes_api_works(&st)
    };
    if !works {
        tokio::time::sleep(CORDON_WAIT).await;
        // The watch for the cordon ends with its context's error.
        return Err("context deadline exceeded".into());
    }
    // The cordon, then evictions as upstream makes them (kube/talos_drain.rs).
    crate::kube::cordon_and_drain(shared, idx).await
}

/// Publishes the start and the end of a phase that does nothing the simulator models.
pub fn empty_phase(shared: &Shared, st: &mut State, idx: usize, actor: &str, phase: &str) {
    use pb::phase_event::Action as P;
    shared.publish(st, idx, actor, phase_event(phase, P::Start));
    shared.publish(st, idx, actor, phase_event(phase, P::Stop));
}

/// The shutdown sequence on node `idx`, after the handler answered with `actor`.
pub fn run(shared: &Arc<Shared>, idx: usize, actor: String, drain: bool) {
    let shared = shared.clone();
    tokio::spawn(async move {
        use pb::phase_event::Action as P;
        use pb::sequence_event::Action as A;
        tokio::time::sleep(Duration::from_millis(100)).await;
        {
            let mut st = shared.lock();
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            n.stage = Stage::ShuttingDown;
            shared.publish(&mut st, idx, &actor, sequence_event("shutdown", A::Start));
            shared.publish(
                &mut st,
                idx,
                "",
                machine_status_event(Stage::ShuttingDown, false),
            );
            empty_phase(&shared, &mut st, idx, &actor, "storeShutdown");
            if drain {
                shared.publish(&mut st, idx, &actor, phase_event("drain", P::Start));
            }
        }
        if drain {
            let drained = talos_drain(&shared, idx).await;
            let mut st = shared.lock();
            shared.publish(&mut st, idx, &actor, phase_event("drain", P::Stop));
            if let Err(e) = drained {
                shared.publish(&mut st, idx, &actor, sequence_event("shutdown", A::Stop));
                // The drain is the second phase, after storeShutdown.
                let message = format!(
                    "sequence failed: error running phase 2 in shutdown sequence: task 1/1: failed, {e}"
                );
                shared.publish(
                    &mut st,
                    idx,
                    &actor,
                    sequence_error_event("shutdown", common::Code::Fatal, &message),
                );
                drop(st);
                fatal::handle(&shared, idx, actor, Afterwards::PowerOff);
                return;
            }
        }
        {
            let mut st = shared.lock();
            empty_phase(&shared, &mut st, idx, &actor, "cleanup");
            shared.publish(
                &mut st,
                idx,
                &actor,
                task_event("stopAllServices", pb::task_event::Action::Start),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        shared.power_off(idx, actor);
    });
}
