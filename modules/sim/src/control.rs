//! The control protocol: one JSON object per line over TCP (loopback), one JSON reply per line.
//! For fault injection and inspection from tests that run the `talos-sim` binary.
//!
//! Requests (`node` is an index or a current address):
//! `{"op":"status"}`, `{"op":"reboot","node":0}`, `{"op":"power_on","node":0}`,
//! `{"op":"boot_media","node":0,"attached":true}` (installation media for a wiped node),
//! `{"op":"fault","node":0,"never_return":true,"next_address":"127.0.10.50","unreachable":false,
//!   "etcd_down":false,"reject_config":"text","slow_ms":2000}` (only the given fields change;
//!   null clears), or one fault by name: `{"op":"fault","node":0,"kind":"slow","delay_ms":2000}`
//!   (kinds: never_return, unreachable, firewalled, etcd_down, upgrade_mutex_held, installer_fails,
//!   apiserver_never_ready, kubelet_version_stuck, daemonset_rollout_stuck, slow),
//! `{"op":"clear_faults","node":0}`, `{"op":"health_fail","text":"..."}` (null clears),
//! `{"op":"set_version","node":0,"version":"v1.10.3"}`, `{"op":"downtime","ms":1500}`,
//! `{"op":"kube"}` (the Kubernetes API's nodes, pods and the log of cordons, evictions and
//! reboots), `{"op":"workload","namespace":"default","name":"web","replicas":2,"min_available":1}`
//! (a Deployment's pods on the workers, and a PodDisruptionBudget when `min_available` is given),
//! `{"op":"stop"}` (the simulator exits after replying).
//! Replies: `{"ok":true,...}` or `{"ok":false,"error":"..."}`.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::fault_kind::FaultKind;
use crate::state::{Faults, Shared, new_uuid};
use crate::{NodeInfo, version};

pub fn node_infos(shared: &Shared) -> Vec<NodeInfo> {
    let st = shared.lock();
    st.nodes
        .iter()
        .map(|n| NodeInfo {
            index: n.index,
            role: if n.planned_control_plane {
                "controlplane"
            } else {
                "worker"
            },
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
            stage: n.stage.yaml_name(),
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

pub fn update_faults(shared: &Shared, index: usize, f: impl FnOnce(&mut Faults)) -> Result<()> {
    check_index(shared, index)?;
    let mut st = shared.lock();
    f(&mut st.nodes[index].faults);
    shared.notify(&st, index);
    Ok(())
}

pub fn set_version(shared: &Shared, index: usize, v: &str) -> Result<()> {
    version::parse(v)?;
    check_index(shared, index)?;
    shared.lock().nodes[index].version = v.to_string();
    Ok(())
}

pub fn reboot(shared: &Arc<Shared>, index: usize) -> Result<String> {
    check_index(shared, index)?;
    let actor = new_uuid();
    shared.reboot(index, actor.clone(), "reboot");
    Ok(actor)
}

pub fn power_on(shared: &Shared, index: usize) -> Result<()> {
    check_index(shared, index)?;
    if shared.lock().nodes[index].up {
        bail!("node {index} is already up");
    }
    shared.boot(index)
}

pub fn set_boot_media(shared: &Shared, index: usize, attached: bool) -> Result<()> {
    check_index(shared, index)?;
    shared.lock().nodes[index].boot_media = attached;
    Ok(())
}

fn node_index(shared: &Shared, req: &Value) -> Result<usize> {
    match req.get("node") {
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| anyhow!("node index must be a non-negative integer")),
        Some(Value::String(s)) => shared
            .resolve(s)
            .ok_or_else(|| anyhow!("no node with address or hostname {s:?}")),
        _ => bail!("expected \"node\": an index or an address"),
    }
}

fn opt_string(v: &Value) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => bail!("expected a string or null"),
    }
}

fn opt_u64(v: &Value) -> Result<Option<u64>> {
    match v {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| anyhow!("expected a non-negative integer or null")),
    }
}

/// `"kind": NAME` switches one fault on (`slow` takes `delay_ms`).
fn set_fault_kind(faults: &mut Faults, kind: &Value, req: &Value) -> Result<()> {
    let Some(kind) = kind.as_str().and_then(FaultKind::parse) else {
        bail!(
            "unknown fault kind {kind}; expected {} (next_address and reject_config are set by field)",
            FaultKind::names()
        );
    };
    kind.set(faults, req.get("delay_ms").and_then(Value::as_u64))
        .map_err(|e| anyhow!(e))
}

/// A Deployment's pods on the workers (and its PodDisruptionBudget with `min_available`).
pub fn add_workload(
    shared: &Shared,
    namespace: &str,
    name: &str,
    replicas: u32,
    min_available: Option<u32>,
) -> Result<()> {
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

fn handle(shared: &Arc<Shared>, line: &str) -> Result<Value> {
    let req: Value = serde_json::from_str(line).context("request is not JSON")?;
    let op = req
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("expected \"op\""))?;
    match op {
        "status" => {
            let nodes = node_infos(shared);
            let st = shared.lock();
            Ok(json!({
                "ok": true,
                "nodes": nodes,
                "health_fail": st.health_fail,
                "bootstrapped": st.etcd.is_some(),
                "etcd_members": st.etcd.as_ref().map_or(0, Vec::len),
                "reboot_downtime_ms": st.reboot_downtime.as_millis() as u64,
                "state_dir": shared.store.as_ref().map(|s| s.dir().display().to_string()),
                "pid": std::process::id(),
            }))
        }
        "stop" => Ok(json!({"ok": true, "stopping": true})),
        "reboot" => {
            let actor = reboot(shared, node_index(shared, &req)?)?;
            Ok(json!({"ok": true, "actor_id": actor}))
        }
        "power_on" => {
            power_on(shared, node_index(shared, &req)?)?;
            Ok(json!({"ok": true}))
        }
        "boot_media" => {
            let attached = req
                .get("attached")
                .and_then(Value::as_bool)
                .context("attached: expected a bool")?;
            set_boot_media(shared, node_index(shared, &req)?, attached)?;
            Ok(json!({"ok": true}))
        }
        "fault" => {
            let idx = node_index(shared, &req)?;
            let mut faults = shared
                .lock()
                .nodes
                .get(idx)
                .map(|n| n.faults.clone())
                .ok_or_else(|| anyhow!("no node {idx}"))?;
            if let Some(kind) = req.get("kind") {
                set_fault_kind(&mut faults, kind, &req)?;
            }
            for (key, v) in req.as_object().into_iter().flatten() {
                match key.as_str() {
                    "op" | "node" | "kind" | "delay_ms" => {}
                    "slow_ms" => faults.slow_ms = opt_u64(v).context("slow_ms")?,
                    "never_return" => {
                        faults.never_return =
                            v.as_bool().context("never_return: expected a bool")?
                    }
                    "unreachable" => {
                        faults.unreachable = v.as_bool().context("unreachable: expected a bool")?
                    }
                    "firewalled" => {
                        faults.firewalled = v.as_bool().context("firewalled: expected a bool")?
                    }
                    "etcd_down" => {
                        faults.etcd_down = v.as_bool().context("etcd_down: expected a bool")?
                    }
                    "installer_fails" => {
                        faults.installer_fails =
                            v.as_bool().context("installer_fails: expected a bool")?
                    }
                    "apiserver_never_ready" => {
                        faults.apiserver_never_ready = v
                            .as_bool()
                            .context("apiserver_never_ready: expected a bool")?
                    }
                    "kubelet_version_stuck" => {
                        faults.kubelet_version_stuck = v
                            .as_bool()
                            .context("kubelet_version_stuck: expected a bool")?
                    }
                    "daemonset_rollout_stuck" => {
                        faults.daemonset_rollout_stuck = v
                            .as_bool()
                            .context("daemonset_rollout_stuck: expected a bool")?
                    }
                    "upgrade_mutex_held" => {
                        faults.upgrade_mutex_held =
                            v.as_bool().context("upgrade_mutex_held: expected a bool")?
                    }
                    "reject_config" => {
                        faults.reject_config = opt_string(v).context("reject_config")?
                    }
                    "next_address" => {
                        faults.next_address = match opt_string(v).context("next_address")? {
                            None => None,
                            Some(s) => {
                                let a: Ipv4Addr = s.parse().with_context(|| {
                                    format!("next_address: not an IPv4 address: {s:?}")
                                })?;
                                if !a.is_loopback() {
                                    bail!("next_address must be in 127.0.0.0/8");
                                }
                                Some(a)
                            }
                        }
                    }
                    other => bail!("unknown fault {other:?}"),
                }
            }
            update_faults(shared, idx, |f| *f = faults)?;
            Ok(json!({"ok": true}))
        }
        "clear_faults" => {
            update_faults(shared, node_index(shared, &req)?, |f| {
                *f = Faults::default()
            })?;
            Ok(json!({"ok": true}))
        }
        "health_fail" => {
            let text = opt_string(req.get("text").unwrap_or(&Value::Null))?;
            shared.lock().health_fail = text;
            Ok(json!({"ok": true}))
        }
        "set_version" => {
            let idx = node_index(shared, &req)?;
            let v = req
                .get("version")
                .and_then(Value::as_str)
                .ok_or_else(|| anyhow!("expected \"version\""))?;
            set_version(shared, idx, v)?;
            Ok(json!({"ok": true}))
        }
        "downtime" => {
            let ms = req
                .get("ms")
                .and_then(Value::as_u64)
                .ok_or_else(|| anyhow!("expected \"ms\""))?;
            shared.lock().reboot_downtime = Duration::from_millis(ms);
            Ok(json!({"ok": true}))
        }
        "kube" => {
            let mut out = crate::kube::snapshot(shared);
            out["ok"] = json!(true);
            Ok(out)
        }
        "workload" => {
            let text = |key: &str| req.get(key).and_then(Value::as_str);
            let name = text("name").ok_or_else(|| anyhow!("expected \"name\""))?;
            let replicas = req.get("replicas").and_then(Value::as_u64).unwrap_or(2) as u32;
            let min_available = req
                .get("min_available")
                .and_then(Value::as_u64)
                .map(|n| n as u32);
            add_workload(
                shared,
                text("namespace").unwrap_or("default"),
                name,
                replicas,
                min_available,
            )?;
            Ok(json!({"ok": true}))
        }
        other => bail!("unknown op {other:?}"),
    }
}

pub async fn serve(shared: Arc<Shared>, listener: TcpListener) {
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
                let reply = handle(&shared, &line)
                    .unwrap_or_else(|e| json!({"ok": false, "error": format!("{e:#}")}));
                let mut text = reply.to_string();
                text.push('\n');
                let sent = w.write_all(text.as_bytes()).await.is_ok();
                // Stop only once the reply is out, so the caller knows it was understood.
                if reply.get("stopping") == Some(&Value::Bool(true)) {
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
