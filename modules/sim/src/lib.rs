//! Not Talos; only the RPCs our modules call.
//!
//! `talos-sim` simulates a Talos cluster in one process: every node is an apid on its own loopback
//! address (127.0.0.0/8) speaking the Talos gRPC API — maintenance mode with a self-signed
//! certificate, mutual TLS from the applied config's OS CA, `node`/`nodes` routing, apply modes
//! with simulated reboots, bootstrap and etcd members, upgrades, health checks, kubeconfig — plus
//! fault injection for tests. With a state directory (`SimConfig::state_dir`, `store.rs`) every
//! change is written there atomically and a restarted simulator brings the cluster back as it
//! was. It owns simulated state only: it never touches real machines or files outside its state
//! directory, and it is not a reference for wire facts (those come from `shared/talos/api.md`).
//!
//! Library use (tests):
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use ferro_talos_sim::{Cluster, SimConfig};
//! let cfg = SimConfig { control_planes: 3, workers: 1, port: 0, ..SimConfig::default() };
//! let cluster = Cluster::start(cfg).await?; // every node listens, in maintenance mode
//! let endpoint = cluster.endpoint(0).unwrap(); // e.g. 127.0.10.1:<port>
//! cluster.update_faults(1, |f| f.never_return = true)?; // node 1's next reboot never ends
//! # let _ = endpoint;
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Binary: `talos-sim --control-planes 3 --workers 2 --base-address 127.0.10.1 --port 50000
//! --talos-version v1.13.6 --node-version 4=v1.12.5 --reboot-downtime-ms 1500
//! --control-address 127.0.0.1:50999 --pid-file sim.pid` prints `READY {"nodes":[...],
//! "control":"127.0.0.1:50999"}` once listening and exits cleanly on SIGTERM/SIGINT. The control
//! protocol (JSON lines over TCP) is [`control::Request`] and [`control::Reply`]: `status`,
//! `reboot`, `power_on`, `boot_media`, `fault`, `clear_faults`, `health_fail`, `set_version`,
//! `downtime`, `kube`, `workload`, `stop`. The subcommands `up`, `stop`,
//! `status` and `fault` run and inspect a cluster kept in a state directory (docs/talos-sim.md).

mod apply;
pub mod blocks;
mod boot_stage;
pub mod config;
pub mod control;
mod decode;
pub mod encode;
mod etcd_snapshot;
pub mod factory;
mod fatal;
mod fault_kind;
mod install;
mod kube;
mod listeners;
pub mod mcfg;
pub mod pki;
pub mod real;
mod reboot;
mod registry;
mod reset;
mod routing;
pub mod sample;
mod server;
mod service_logs;
mod services;
mod shutdown;
mod state;
pub mod store;
mod tls;
mod upgrade;
mod validate;
pub mod version;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

pub use blocks::AddressBlocks;
pub use config::{Backend, Kubernetes, SimConfig};
pub use fault_kind::FaultKind;
pub use kube::DrainTimes;
pub use real::EtcdBinaries;
pub use real::kubernetes::KubeBinaries;
pub use state::Faults;

use state::Shared;

/// What the simulator reports about a node (control endpoint `status`, `READY` line, tests).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeInfo {
    pub index: usize,
    /// `controlplane` or `worker`: the role this node is meant to play (from the node counts).
    pub role: String,
    pub address: Ipv4Addr,
    pub port: u16,
    pub hostname: String,
    /// machine.type of the running config; None in maintenance mode.
    pub machine_type: Option<String>,
    pub maintenance: bool,
    pub up: bool,
    pub listening: bool,
    pub version: String,
    pub pending_version: Option<String>,
    pub schematic: Option<String>,
    pub boot_id: String,
    pub stage: String,
    pub etcd_member: bool,
    pub has_staged_config: bool,
    /// Talos is on the system disk (false after a full system disk wipe, before an install).
    pub installed: bool,
    /// Installation media is attached.
    pub boot_media: bool,
    /// The last boot found nothing to boot from: down until powered on with media.
    pub unbootable: bool,
    pub images: Vec<String>,
    pub faults: Faults,
}

/// A running simulated cluster. Dropping it without [`Cluster::shutdown`] leaves the listener
/// tasks running until the runtime stops.
pub struct Cluster {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    control: Option<SocketAddr>,
}

impl Cluster {
    /// Starts every node in maintenance mode and returns once all of them accept connections.
    /// With `cfg.state_dir` holding a stored cluster, the stored cluster comes back instead.
    pub async fn start(cfg: SimConfig) -> Result<Cluster> {
        cfg.validate()?;
        let (mut cfg, store, restored) = match cfg.state_dir.clone() {
            None => (cfg, None, None),
            Some(dir) => {
                // Lock before reading, so no other simulator writes the directory meanwhile.
                let store = store::Store::open(&dir, !cfg.in_memory)?;
                let restored = if cfg.in_memory {
                    None
                } else {
                    store::load(&dir)?
                };
                let cfg = match &restored {
                    Some(r) => store::layout_config(&r.cluster, &cfg),
                    None => cfg,
                };
                cfg.validate()
                    .with_context(|| format!("the cluster stored in {}", dir.display()))?;
                (cfg, Some(store), restored)
            }
        };
        // Bind up front: port conflicts fail here, and port 0 gets a real port per node. A stored
        // node that will not listen (down, unreachable) is not bound: it must refuse connections.
        let listeners = match (&restored, cfg.address_blocks.take()) {
            (Some(r), _) => listeners::bind_stored(&r.cluster)?,
            (None, None) => listeners::bind_new(&cfg)?,
            (None, Some(blocks)) => {
                let (base, listeners) = listeners::bind_in_a_free_block(&cfg, &blocks)?;
                cfg.base_address = base;
                listeners
            }
        };
        let store = store.map(|s| s.with_layout(&cfg));
        let control_cfg = cfg.control_address;
        let talos_drain = cfg.talos_drain;
        let shared = Shared::new(cfg, store, restored)?;
        if let Some(real) = &shared.real {
            real.supervise(Arc::downgrade(&shared));
        }
        if let Some(kube) = &shared.real_kube {
            kube.supervise(Arc::downgrade(&shared));
        }
        {
            let mut st = shared.lock();
            st.kube.talos_drain = talos_drain;
            for (n, l) in st.nodes.iter_mut().zip(&listeners) {
                if let Some(l) = l {
                    n.port = l.local_addr()?.port();
                }
            }
        }
        let mut tasks = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let l = l.map(tokio::net::TcpListener::from_std).transpose()?;
            tasks.push(tokio::spawn(server::run_node(shared.clone(), i, l)));
            tasks.push(tokio::spawn(kube::run(shared.clone(), i)));
        }
        tasks.push(tokio::spawn(boot_stage::watch_readiness(shared.clone())));
        let control = match control_cfg {
            Some(a) => {
                let listener = tokio::net::TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen on control address {a}"))?;
                let local = listener.local_addr()?;
                tasks.push(tokio::spawn(control::serve(shared.clone(), listener)));
                Some(local)
            }
            None => None,
        };
        let cluster = Cluster {
            shared,
            tasks,
            control,
        };
        for i in 0..cluster.shared.run.len() {
            let listens = cluster.shared.lock().nodes[i].reachable_from_controller();
            if listens && !cluster.wait_listening(i, Duration::from_secs(10)).await {
                bail!("node {i} did not start listening");
            }
        }
        if let Some(store) = &cluster.shared.store {
            store.write_run_info(control)?;
        }
        Ok(cluster)
    }

    /// The state directory, if the cluster keeps its state in one.
    pub fn state_dir(&self) -> Option<&std::path::Path> {
        self.shared.store.as_ref().map(|s| s.dir())
    }

    /// Where the control protocol listens, if configured.
    pub fn control_address(&self) -> Option<SocketAddr> {
        self.control
    }

    pub fn nodes(&self) -> Vec<NodeInfo> {
        control::node_infos(&self.shared)
    }

    pub fn node(&self, index: usize) -> Option<NodeInfo> {
        self.nodes().into_iter().nth(index)
    }

    /// The deadline the last call of `method` (a path such as
    /// `/machine.MachineService/EtcdLeaveCluster`) came with to any node, as its `grpc-timeout`
    /// said; None if no such call carried one.
    pub fn last_deadline(&self, method: &str) -> Option<Duration> {
        let deadlines = self.shared.deadlines.lock().ok()?;
        deadlines.get(method).copied()
    }

    /// The node's current apid endpoint.
    pub fn endpoint(&self, index: usize) -> Option<SocketAddr> {
        let st = self.shared.lock();
        st.nodes
            .get(index)
            .map(|n| SocketAddr::from((n.address, n.port)))
    }

    /// SHA-256 (hex) of the machine config the node runs and of the one it boots with next
    /// (different after a staged apply); None in maintenance mode. What a test compares to see
    /// whether an apply changed anything.
    pub fn config_digests(&self, index: usize) -> Option<(String, Option<String>)> {
        let st = self.shared.lock();
        let n = st.nodes.get(index)?;
        let active = n.active.as_ref()?.digest.clone();
        Some((active, n.persisted.as_ref().map(|p| p.digest.clone())))
    }

    /// PEM of the node's current maintenance-mode CA (None once configured).
    pub fn maintenance_ca(&self, index: usize) -> Option<String> {
        let st = self.shared.lock();
        st.nodes.get(index)?.tls.as_ref()?.maintenance_ca.clone()
    }

    /// Adds a Deployment-like workload of `replicas` pods on the workers, with a
    /// PodDisruptionBudget (`minAvailable`) when `min_available` is given.
    pub fn add_workload(
        &self,
        namespace: &str,
        name: &str,
        replicas: u32,
        min_available: Option<u32>,
    ) -> Result<()> {
        control::add_workload(&self.shared, namespace, name, replicas, min_available)
    }

    /// The Kubernetes API's nodes and pods, and the log of cordons, evictions and reboots.
    pub fn kube_snapshot(&self) -> serde_json::Value {
        serde_json::to_value(kube::snapshot(&self.shared)).unwrap_or_default()
    }

    /// One request to the Kubernetes API server of control plane `serving`, as an admin
    /// (system:masters) and without TLS: for tests of the API's answers. Returns the status
    /// code and the JSON body.
    pub fn kube_request(
        &self,
        serving: usize,
        method: &str,
        path_and_query: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> (u16, serde_json::Value) {
        kube::request(
            &self.shared,
            serving,
            method,
            path_and_query,
            content_type,
            body,
        )
    }

    /// Change a node's faults in place.
    pub fn update_faults(&self, index: usize, f: impl FnOnce(&mut Faults)) -> Result<()> {
        control::update_faults(&self.shared, index, f)
    }

    /// HealthCheck fails with this text (check "all k8s nodes to report ready") while set.
    pub fn set_health_failure(&self, text: Option<String>) {
        self.shared.lock().health_fail = text;
    }

    /// Sets the running Talos version of a node right away (e.g. an old node before a test).
    pub fn set_version(&self, index: usize, version: &str) -> Result<()> {
        control::set_version(&self.shared, index, version)
    }

    pub fn set_reboot_downtime(&self, d: Duration) {
        self.shared.lock().reboot_downtime = d;
    }

    /// The times of Talos's own cordon and drain from now on.
    pub fn set_talos_drain(&self, times: DrainTimes) {
        self.shared.lock().kube.talos_drain = times;
    }

    /// Reboot a node as if `talosctl reboot` had been called. Returns the actor id.
    pub fn reboot(&self, index: usize) -> Result<String> {
        control::reboot(&self.shared, index)
    }

    /// Bring a node that stayed down (fault `never_return`, powered off, nothing to boot) back up.
    pub fn power_on(&self, index: usize) -> Result<()> {
        control::power_on(&self.shared, index)
    }

    /// Attach or detach installation media (ISO, PXE): what a node without Talos on its disk
    /// boots from.
    pub fn set_boot_media(&self, index: usize, attached: bool) -> Result<()> {
        control::set_boot_media(&self.shared, index, attached)
    }

    /// Waits until the node accepts TCP connections on its current address.
    pub async fn wait_listening(&self, index: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(ep) = self.endpoint(index) {
                let listening = self
                    .shared
                    .lock()
                    .nodes
                    .get(index)
                    .is_some_and(|n| n.reachable_from_controller());
                if listening && tokio::net::TcpStream::connect(ep).await.is_ok() {
                    return true;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Stops every listener and background task. The state directory (if any) already holds
    /// the last state; only its run file goes.
    pub async fn shutdown(self) {
        self.shared.shutdown.send_replace(true);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
        if let Some(kube) = &self.shared.real_kube {
            kube.shutdown();
        }
        if let Some(real) = &self.shared.real {
            real.shutdown();
        }
        if let Some(store) = &self.shared.store {
            store.close();
        }
    }

    /// Resolves once the control protocol's `stop` op asks the simulator to stop.
    pub async fn stop_requested(&self) {
        self.shared.stop.notified().await
    }
}

/// Runs a cluster until `shutdown` resolves. `on_ready` receives the started cluster's nodes
/// (the binary prints them as the `READY` line).
pub async fn run(
    cfg: SimConfig,
    on_ready: impl FnOnce(&Cluster),
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let cluster = Cluster::start(cfg).await?;
    on_ready(&cluster);
    tokio::select! {
        _ = shutdown => {},
        _ = cluster.stop_requested() => {},
    }
    cluster.shutdown().await;
    Ok(())
}
