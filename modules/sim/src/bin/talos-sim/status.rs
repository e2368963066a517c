//! `status`: every node's state, from the running simulator or from the stored state, as a
//! table or as JSON.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use ferro_talos_sim::store::{self, StoredCluster};
use ferro_talos_sim::{AddressBlocks, Faults, NodeInfo};
use serde::Serialize;

use crate::lifecycle;

/// What `status` shows (`--json` prints it as is).
#[derive(Debug, Serialize)]
pub struct Report {
    pub running: bool,
    pub state_dir: String,
    pub pid: Option<u32>,
    pub control: Option<SocketAddr>,
    /// B when the nodes start at 127.0.B.1 (`--base-address auto` chose block B).
    pub block: Option<u8>,
    pub bootstrapped: bool,
    pub etcd_members: usize,
    pub health_fail: Option<String>,
    pub nodes: Vec<NodeView>,
}

/// One node as `status` shows it.
#[derive(Debug, Serialize)]
pub struct NodeView {
    pub index: usize,
    /// `address:port`.
    pub address: String,
    pub role: String,
    pub mode: Mode,
    pub version: String,
    pub pending_version: Option<String>,
    pub state: NodeState,
    pub etcd_member: bool,
    pub faults: Faults,
    pub faults_text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Maintenance,
    Configured,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Up,
    /// Booted, but its listener is closed (fault).
    Unreachable,
    Rebooting,
    /// A reboot that never returns.
    Down,
    /// No simulator runs.
    Stopped,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Maintenance => "maintenance",
            Mode::Configured => "configured",
        })
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Up => "up",
            NodeState::Unreachable => "unreachable",
            NodeState::Rebooting => "rebooting",
            NodeState::Down => "down",
            NodeState::Stopped => "stopped",
        })
    }
}

impl NodeView {
    fn running(n: &NodeInfo) -> NodeView {
        let state = match (n.up, n.listening) {
            (true, true) => NodeState::Up,
            (true, false) => NodeState::Unreachable,
            (false, _) if n.faults.never_return => NodeState::Down,
            (false, _) => NodeState::Rebooting,
        };
        NodeView {
            index: n.index,
            address: format!("{}:{}", n.address, n.port),
            role: n.role.clone(),
            mode: if n.maintenance {
                Mode::Maintenance
            } else {
                Mode::Configured
            },
            version: n.version.clone(),
            pending_version: n.pending_version.clone(),
            state,
            etcd_member: n.etcd_member,
            faults: n.faults.clone(),
            faults_text: n.faults.describe(),
        }
    }

    fn stored(c: &StoredCluster) -> Vec<NodeView> {
        c.nodes
            .iter()
            .map(|n| NodeView {
                index: n.index,
                address: format!("{}:{}", n.address, n.port),
                role: n.role.clone(),
                mode: if n.running_config.is_some() {
                    Mode::Configured
                } else {
                    Mode::Maintenance
                },
                version: n.version.clone(),
                pending_version: n.pending_version.clone(),
                state: NodeState::Stopped,
                etcd_member: c.etcd_members.iter().flatten().any(|m| m.node == n.index),
                faults: n.faults.clone(),
                faults_text: n.faults.describe(),
            })
            .collect()
    }
}

/// The report for `dir`: from the simulator serving it, else from its state file.
pub fn report(dir: &Path) -> Result<Report> {
    let state_dir = dir.display().to_string();
    if store::is_running(dir)? {
        let running = lifecycle::running(dir)?;
        let reply = running.client.status().with_context(|| {
            format!(
                "a talos-sim holds {} (pid {}) but does not answer",
                dir.display(),
                running.pid
            )
        })?;
        return Ok(Report {
            running: true,
            state_dir,
            pid: Some(reply.pid),
            control: Some(running.client.address()),
            block: running.block,
            bootstrapped: reply.bootstrapped,
            etcd_members: reply.etcd_members,
            health_fail: reply.health_fail,
            nodes: reply.nodes.iter().map(NodeView::running).collect(),
        });
    }
    let c = store::read_cluster(dir)?.ok_or_else(|| {
        anyhow!(
            "no talos-sim state in {} (create one with `talos-sim up --state-dir {0}`)",
            dir.display()
        )
    })?;
    Ok(Report {
        running: false,
        state_dir,
        pid: None,
        control: None,
        block: AddressBlocks::block_of(c.base_address),
        bootstrapped: c.etcd_members.is_some(),
        etcd_members: c.etcd_members.as_ref().map_or(0, Vec::len),
        health_fail: c.health_fail.clone(),
        nodes: NodeView::stored(&c),
    })
}

pub fn status(dir: &Path, as_json: bool) -> Result<()> {
    let r = report(dir)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render(&r));
    }
    Ok(())
}

/// The report as a table, with the process and etcd above it.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    if r.running {
        out.push_str(&format!(
            "talos-sim: running (pid {}, control {}), state in {}\n",
            dash(r.pid.map(|p| p.to_string())),
            dash(r.control.map(|c| c.to_string())),
            r.state_dir
        ));
    } else {
        out.push_str(&format!(
            "talos-sim: stopped; stored state in {} (start it with `talos-sim up --state-dir {}`)\n",
            r.state_dir, r.state_dir
        ));
    }
    if r.bootstrapped {
        out.push_str(&format!(
            "etcd: bootstrapped, {} member(s)\n",
            r.etcd_members
        ));
    } else {
        out.push_str("etcd: not bootstrapped\n");
    }
    if let Some(h) = &r.health_fail {
        out.push_str(&format!("health check: failing ({h})\n"));
    }
    let header = [
        "NODE", "ADDRESS", "ROLE", "MODE", "VERSION", "STATE", "ETCD", "FAULTS",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for n in &r.nodes {
        let version = match &n.pending_version {
            Some(p) => format!("{} (next boot {p})", n.version),
            None => n.version.clone(),
        };
        rows.push(vec![
            n.index.to_string(),
            n.address.clone(),
            n.role.clone(),
            n.mode.to_string(),
            version,
            n.state.to_string(),
            if n.etcd_member { "member" } else { "-" }.into(),
            n.faults_text.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: NodeState, pending: Option<&str>, faults: Faults) -> NodeView {
        NodeView {
            index: 1,
            address: "127.0.30.2:50000".into(),
            role: "controlplane".into(),
            mode: Mode::Configured,
            version: "v1.13.4".into(),
            pending_version: pending.map(String::from),
            state,
            etcd_member: true,
            faults_text: faults.describe(),
            faults,
        }
    }

    #[test]
    fn the_table_shows_the_process_etcd_and_every_node() {
        let slow = Faults {
            slow_ms: Some(2000),
            ..Faults::default()
        };
        let r = Report {
            running: true,
            state_dir: "/tmp/sim".into(),
            pid: Some(42),
            control: Some("127.0.0.1:41023".parse().unwrap()),
            block: Some(30),
            bootstrapped: true,
            etcd_members: 3,
            health_fail: Some("node x is not ready".into()),
            nodes: vec![
                node(NodeState::Up, None, slow),
                node(NodeState::Rebooting, Some("v1.13.6"), Faults::default()),
            ],
        };
        assert_eq!(
            render(&r),
            "talos-sim: running (pid 42, control 127.0.0.1:41023), state in /tmp/sim\n\
             etcd: bootstrapped, 3 member(s)\n\
             health check: failing (node x is not ready)\n\
             NODE  ADDRESS           ROLE          MODE        VERSION                      STATE      ETCD    FAULTS\n\
             1     127.0.30.2:50000  controlplane  configured  v1.13.4                      up         member  slow=2000ms\n\
             1     127.0.30.2:50000  controlplane  configured  v1.13.4 (next boot v1.13.6)  rebooting  member  -\n"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["control"], "127.0.0.1:41023");
        assert_eq!(json["block"], 30);
        assert_eq!(json["nodes"][1]["state"], "rebooting");
        assert_eq!(json["nodes"][0]["mode"], "configured");
        assert_eq!(json["nodes"][0]["faults"]["slow_ms"], 2000);
    }
}
