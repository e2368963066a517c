//! The control protocol: one JSON object per line over TCP (loopback), one JSON reply per line,
//! for fault injection and inspection from tests and the `talos-sim` subcommands. The messages
//! are [`protocol::Request`] and [`protocol::Reply`] (see `protocol.rs` and docs/talos-sim.md);
//! this file serves them.

mod client;
pub mod protocol;

pub use client::ControlClient;
pub use protocol::{
    FaultChange, FaultFields, KubeLogEntry, KubeSnapshot, NodeRef, Ready, Reply, ReplyError,
    Request, StatusReply,
};

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::state::{Faults, Shared, new_uuid};
use crate::{NodeInfo, version};

pub(crate) fn node_infos(shared: &Shared) -> Vec<NodeInfo> {
    let st = shared.lock();
    st.nodes
        .iter()
        .map(|n| NodeInfo {
            index: n.index,
            role: if n.planned_control_plane {
                "controlplane"
            } else {
                "worker"
            }
            .into(),
            address: n.address,
            port: n.port,
            hostname: n.hostname.clone(),
            machine_type: n.active.as_ref().and_then(|c| {
                c.v1alpha1()?
                    .get("machine")?
                    .get("type")?
                    .as_str()
                    .map(String::from)
            }),
            maintenance: n.maintenance(),
            up: n.up,
            listening: n.listening(),
            version: n.version.clone(),
            pending_version: n.pending_version.clone(),
            schematic: n.schematic.clone(),
            boot_id: n.boot_id.clone(),
            stage: n.stage.yaml_name().into(),
            etcd_member: st
                .etcd
                .as_ref()
                .is_some_and(|m| m.iter().any(|m| m.node == n.index)),
            has_staged_config: n.persisted.as_ref().map(|p| &p.raw)
                != n.active.as_ref().map(|a| &a.raw),
            installed: n.installed,
            boot_media: n.boot_media,
            unbootable: n.unbootable,
            images: n.images.iter().cloned().collect(),
            faults: n.faults.clone(),
        })
        .collect()
}

fn check_index(shared: &Shared, index: usize) -> Result<()> {
    let count = shared.lock().nodes.len();
    if index >= count {
        bail!("no node {index}: the cluster has {count} nodes");
    }
    Ok(())
}

pub(crate) fn update_faults(
    shared: &Shared,
    index: usize,
    f: impl FnOnce(&mut Faults),
) -> Result<()> {
    check_index(shared, index)?;
    let mut st = shared.lock();
    f(&mut st.nodes[index].faults);
    shared.notify(&st, index);
    Ok(())
}

pub(crate) fn set_version(shared: &Shared, index: usize, v: &str) -> Result<()> {
    version::parse(v)?;
    check_index(shared, index)?;
    shared.lock().nodes[index].version = v.to_string();
    Ok(())
}

pub(crate) fn reboot(shared: &Arc<Shared>, index: usize) -> Result<String> {
    check_index(shared, index)?;
    let actor = new_uuid();
    shared.reboot(index, actor.clone(), "reboot");
    Ok(actor)
}

pub(crate) fn power_on(shared: &Shared, index: usize) -> Result<()> {
    check_index(shared, index)?;
    if shared.lock().nodes[index].up {
        bail!("node {index} is already up");
    }
    shared.boot(index)
}

pub(crate) fn set_boot_media(shared: &Shared, index: usize, attached: bool) -> Result<()> {
    check_index(shared, index)?;
    shared.lock().nodes[index].boot_media = attached;
    Ok(())
}

fn node_index(shared: &Shared, node: &NodeRef) -> Result<usize> {
    match node {
        NodeRef::Index(i) => Ok(*i),
        NodeRef::Name(s) => shared
            .resolve(s)
            .ok_or_else(|| anyhow!("no node with address or hostname {s:?}")),
    }
}

/// A Deployment's pods on the workers (and its PodDisruptionBudget with `min_available`).
pub(crate) fn add_workload(
    shared: &Shared,
    namespace: &str,
    name: &str,
    replicas: u32,
    min_available: Option<u32>,
) -> Result<()> {
    if let Some(real) = &shared.real_kube {
        if shared.lock().etcd.is_none() {
            bail!("the cluster is not bootstrapped: Kubernetes has no workloads yet");
        }
        return crate::real::kubernetes::talos::add_workload(
            real,
            shared,
            namespace,
            name,
            replicas,
            min_available,
        )
        .map_err(|e| anyhow!(e));
    }
    let mut guard = shared.lock();
    let st = &mut *guard;
    if st.etcd.is_none() {
        bail!("the cluster is not bootstrapped: Kubernetes has no workloads yet");
    }
    st.kube
        .add_workload(namespace, name, replicas, min_available, false)
        .map_err(|e| anyhow!(e))?;
    st.kube.refresh(&st.nodes, true);
    Ok(())
}

fn handle(shared: &Arc<Shared>, line: &str) -> Result<Reply> {
    let request = Request::parse(line).map_err(|e| anyhow!(e))?;
    Ok(match request {
        Request::Status => Reply::Status(Box::new(status(shared))),
        Request::Stop => Reply::Stopping,
        Request::Reboot { node } => Reply::Rebooted {
            actor_id: reboot(shared, node_index(shared, &node)?)?,
        },
        Request::PowerOn { node } => {
            power_on(shared, node_index(shared, &node)?)?;
            Reply::Done
        }
        Request::BootMedia { node, attached } => {
            set_boot_media(shared, node_index(shared, &node)?, attached)?;
            Reply::Done
        }
        Request::Fault { node, change } => {
            let idx = node_index(shared, &node)?;
            check_index(shared, idx)?;
            let mut faults = shared.lock().nodes[idx].faults.clone();
            change.apply(&mut faults).map_err(|e| anyhow!(e))?;
            update_faults(shared, idx, |f| *f = faults)?;
            Reply::Done
        }
        Request::ClearFaults { node } => {
            update_faults(shared, node_index(shared, &node)?, |f| {
                *f = Faults::default()
            })?;
            Reply::Done
        }
        Request::HealthFail { text } => {
            shared.lock().health_fail = text;
            Reply::Done
        }
        Request::SetVersion { node, version } => {
            set_version(shared, node_index(shared, &node)?, &version)?;
            Reply::Done
        }
        Request::Downtime { ms } => {
            shared.lock().reboot_downtime = Duration::from_millis(ms);
            Reply::Done
        }
        Request::Kube => Reply::Kube(Box::new(crate::kube::snapshot(shared))),
        Request::Workload {
            namespace,
            name,
            replicas,
            min_available,
        } => {
            add_workload(shared, &namespace, &name, replicas, min_available)?;
            Reply::Done
        }
    })
}

fn status(shared: &Shared) -> StatusReply {
    let nodes = node_infos(shared);
    let st = shared.lock();
    StatusReply {
        nodes,
        health_fail: st.health_fail.clone(),
        bootstrapped: st.etcd.is_some(),
        etcd_members: st.etcd.as_ref().map_or(0, Vec::len),
        reboot_downtime_ms: st.reboot_downtime.as_millis() as u64,
        state_dir: shared.store.as_ref().map(|s| s.dir().to_path_buf()),
        pid: std::process::id(),
    }
}

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let (r, mut w) = sock.into_split();
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim().is_empty() {
                    continue;
                }
                let reply = handle(&shared, &line).map_err(|e| format!("{e:#}"));
                let mut text = protocol::reply_line(&reply);
                text.push('\n');
                let sent = w.write_all(text.as_bytes()).await.is_ok();
                // Stop only once the reply is out, so the caller knows it was understood.
                if matches!(reply, Ok(Reply::Stopping)) {
                    let _ = w.flush().await;
                    shared.stop.notify_one();
                }
                if !sent {
                    return;
                }
            }
        });
    }
}
