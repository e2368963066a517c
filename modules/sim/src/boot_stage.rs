//! When a configured node's boot is over (stage BOOTING becomes RUNNING) and what its
//! MachineStatus says about readiness meanwhile.
//!
//! Upstream's boot sequence ends with `StartAllServices`
//! (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go` @ v1.13.9 and
//! v1.14.1), which waits until every service it started is up (running and healthy) or finished.
//! On a control plane that includes etcd, whose pre stage (`buildInitialCluster` in
//! `internal/app/machined/pkg/system/services/etcd.go`) keeps retrying "etcd is waiting to join
//! the cluster" until bootstrap or until a member lets it join. So a control plane stays BOOTING
//! until then; `Bootstrap` (`BootstrapEtcd`, same file) marks the waiting etcd service finished,
//! which ends the boot at once. A worker starts no etcd and reaches RUNNING with its services.
//! Readiness (`internal/app/machined/pkg/controllers/runtime/machine_status.go`): in BOOTING and
//! RUNNING the checks are time, network, services (required services running and healthy; etcd
//! among them on a control plane) and the Node's readiness; other stages have no checks and are
//! ready.

use std::sync::Arc;
use std::time::Duration;

use crate::state::{Node, Shared, Stage, State};

/// One unmet readiness condition, as MachineStatus lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmetCondition {
    pub name: &'static str,
    pub reason: String,
}

/// Whether node `idx`'s etcd service is up: a member of the bootstrapped cluster with its data,
/// not stopped, failed or failing its health check.
pub fn etcd_up(st: &State, idx: usize) -> bool {
    let Some(n) = st.nodes.get(idx) else {
        return false;
    };
    let member = st
        .etcd
        .as_ref()
        .is_some_and(|members| members.iter().any(|m| m.node == idx));
    member && n.etcd_data && n.etcd_failed.is_none() && !n.etcd_stopped()
}

/// The stage a configured node's boot has reached once its services started: a control plane
/// whose etcd is not up is still BOOTING.
pub fn stage_after_services(st: &State, idx: usize) -> Stage {
    let Some(n) = st.nodes.get(idx) else {
        return Stage::Booting;
    };
    if n.active.is_none() {
        Stage::Maintenance
    } else if n.is_control_plane() && !etcd_up(st, idx) {
        Stage::Booting
    } else {
        Stage::Running
    }
}

/// What MachineStatus lists as unmet for node `idx` (empty: ready). Only the checks whose state
/// the simulator models are evaluated: its clocks and networks are always ready.
pub fn unmet_conditions(st: &State, idx: usize) -> Vec<UnmetCondition> {
    let Some(n) = st.nodes.get(idx) else {
        return Vec::new();
    };
    if !matches!(n.stage, Stage::Booting | Stage::Running) || n.active.is_none() {
        return Vec::new();
    }
    let mut unmet = Vec::new();
    if n.is_control_plane() {
        let reason = if etcd_up(st, idx) && !n.faults.etcd_down {
            None
        } else if n.etcd_data && st.etcd.is_some() && n.faults.etcd_down {
            // Running, failing its health check.
            Some("etcd not healthy")
        } else {
            Some("etcd not running")
        };
        if let Some(reason) = reason {
            unmet.push(UnmetCondition {
                name: "services",
                reason: reason.into(),
            });
        }
    }
    if let Some(reason) = node_unready_reason(st, n) {
        unmet.push(UnmetCondition {
            name: "nodeReady",
            reason,
        });
    }
    unmet
}

/// `nodeReadyCheck`: the Node's status comes from the Kubernetes API, which answers only once
/// etcd is bootstrapped; then the kubelet's Ready condition.
fn node_unready_reason(st: &State, n: &Node) -> Option<String> {
    let name = crate::kube::node_name(n);
    if st.etcd.is_none() {
        return Some(format!("node {name:?} status is not available yet"));
    }
    (!crate::kube::node_ready(n)).then(|| format!("node {name:?} is not ready"))
}

/// Nodes whose boot just ended: BOOTING control planes whose etcd is now up. The caller
/// publishes the RUNNING MachineStatus of each.
pub fn boots_ended(st: &mut State) -> Vec<usize> {
    let ended: Vec<usize> = (0..st.nodes.len())
        .filter(|&i| {
            let n = &st.nodes[i];
            n.up && n.stage == Stage::Booting
                && n.active.is_some()
                && stage_after_services(st, i) == Stage::Running
        })
        .collect();
    for &i in &ended {
        st.nodes[i].stage = Stage::Running;
    }
    ended
}

/// Whether node `idx`'s MachineStatus says something else now than its last one did.
fn status_changed(st: &State, idx: usize) -> bool {
    let n = &st.nodes[idx];
    if !n.up || n.active.is_none() || !matches!(n.stage, Stage::Booting | Stage::Running) {
        return false;
    }
    let now = (n.stage, unmet_conditions(st, idx));
    n.published_status.as_ref() != Some(&now)
}

/// Publishes a node's MachineStatus again whenever its readiness changes, as upstream's
/// MachineStatusController re-evaluates its checks whenever their inputs change: a watcher then
/// sees RUNNING and ready once the kubelet posts Ready, or once etcd is healthy again.
pub async fn watch_readiness(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        if *shutdown.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = shutdown.changed() => return,
        }
        // Read first, and lock for writing only to publish: a write lock saves the state.
        let changed: Vec<usize> = {
            let st = shared.lock();
            (0..st.nodes.len())
                .filter(|&i| status_changed(&st, i))
                .collect()
        };
        if changed.is_empty() {
            continue;
        }
        let mut st = shared.lock();
        for idx in changed {
            if status_changed(&st, idx) {
                shared.publish_stage(&mut st, idx);
            }
        }
    }
}
