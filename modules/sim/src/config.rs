//! How a simulated cluster is laid out: node counts, addresses, port, versions, timings.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::blocks::AddressBlocks;

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub control_planes: usize,
    pub workers: usize,
    /// Address of the first node; the others follow (control planes first, then workers).
    pub base_address: Ipv4Addr,
    /// apid port every node listens on (Talos: 50000). 0 = a free port per node, chosen at start.
    pub port: u16,
    /// Initial Talos version of every node, e.g. `v1.13.6`.
    pub talos_version: String,
    /// Per-node initial version override, by node index (0-based, control planes first).
    pub node_versions: BTreeMap<usize, String>,
    /// How long a rebooting node stays unreachable.
    pub reboot_downtime: Duration,
    /// How long after a node's services start Bootstrap is refused with FailedPrecondition
    /// ("bootstrap is not available yet", then "time is not in sync yet"), as a real node
    /// refuses it until its CRI is up and its clock is synced.
    pub bootstrap_settle: Duration,
    /// The times of Talos's own cordon and drain before an upgrade, a shutdown or a graceful
    /// reset (upstream's: a minute for the cordon, 5 minutes for the drain, 5 s between
    /// refused evictions); tests shorten them.
    pub talos_drain: crate::kube::DrainTimes,
    /// Where to serve the line-based JSON control protocol (fault injection, inspection).
    pub control_address: Option<SocketAddr>,
    /// Keep the state here (see `store.rs`). A directory that already holds a cluster brings it
    /// back as it was: its node counts, addresses, port, versions and reboot downtime replace
    /// the ones above.
    pub state_dir: Option<PathBuf>,
    /// With `state_dir`: keep the cluster in memory only. The directory then holds just the run
    /// file and the lock (so `stop` and `status` find the simulator), nothing to bring back.
    pub in_memory: bool,
    /// Ignore `base_address` and start a new cluster at 127.0.B.1 in a free block of these
    /// (`blocks.rs`); a stored cluster keeps its addresses.
    pub address_blocks: Option<AddressBlocks>,
    /// What answers for etcd: the simulator's model, or real etcd members (`real/mod.rs`).
    pub backend: Backend,
    /// What answers the cluster's Kubernetes API: the model (`kube/`), or upstream's
    /// kube-apiserver, controller manager and scheduler (`real/kubernetes`; needs the real
    /// etcd backend).
    pub kubernetes: Kubernetes,
}

/// What plays the Kubernetes control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Kubernetes {
    #[default]
    Model,
    Real(crate::real::kubernetes::KubeBinaries),
}

/// What plays etcd behind the simulated control planes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The simulator's own model of etcd's membership, quorum and snapshots (fast; the default).
    #[default]
    Model,
    /// A real etcd member per control plane, run from upstream's programs.
    Real(crate::real::EtcdBinaries),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            control_planes: 1,
            workers: 0,
            base_address: Ipv4Addr::new(127, 0, 10, 1),
            port: 50000,
            talos_version: "v1.13.6".into(),
            node_versions: BTreeMap::new(),
            reboot_downtime: Duration::from_millis(1500),
            bootstrap_settle: Duration::ZERO,
            talos_drain: crate::kube::DrainTimes::UPSTREAM,
            control_address: None,
            state_dir: None,
            in_memory: false,
            address_blocks: None,
            backend: Backend::Model,
            kubernetes: Kubernetes::Model,
        }
    }
}

impl SimConfig {
    pub fn node_count(&self) -> usize {
        self.control_planes + self.workers
    }

    /// Address of node `index` at start-up.
    pub fn address_of(&self, index: usize) -> Option<Ipv4Addr> {
        let base = u32::from(self.base_address);
        let last = base.checked_add(u32::try_from(index).ok()?)?;
        let addr = Ipv4Addr::from(last);
        addr.is_loopback().then_some(addr)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.node_count() == 0 {
            anyhow::bail!("the cluster needs at least one node");
        }
        if matches!(self.kubernetes, Kubernetes::Real(_)) && self.backend == Backend::Model {
            anyhow::bail!(
                "--kubernetes real needs --backend real: upstream's kube-apiserver stores the cluster in a real etcd"
            );
        }
        if self.address_of(self.node_count() - 1).is_none() {
            anyhow::bail!(
                "{} nodes starting at {} do not fit in 127.0.0.0/8",
                self.node_count(),
                self.base_address
            );
        }
        for v in std::iter::once(&self.talos_version).chain(self.node_versions.values()) {
            crate::version::parse(v)?;
        }
        if let Some((i, _)) = self
            .node_versions
            .iter()
            .find(|(i, _)| **i >= self.node_count())
        {
            anyhow::bail!(
                "version override for node {i}, but the cluster has {} nodes",
                self.node_count()
            );
        }
        Ok(())
    }
}
