//! The simulator's shared handle: the locked state with the channels, store and backends
//! beside it, and how a new one is laid out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, broadcast, watch};

use super::persistence::restore_into;
use super::{EventRec, Faults, Node, RunState, Stage, State, default_hostname, new_uuid};
use crate::config::SimConfig;
use crate::store::{Restored, Store};

pub struct Shared {
    pub(super) state: Mutex<State>,
    pub run: Vec<watch::Sender<RunState>>,
    pub events: Vec<broadcast::Sender<EventRec>>,
    pub shutdown: watch::Sender<bool>,
    /// Set when the state lives in a state directory: every change is written there.
    pub store: Option<Store>,
    /// The control protocol asked the simulator to stop.
    pub stop: Notify,
    /// The deadline (`grpc-timeout`) the last call of each method came with, by method path:
    /// what tests read to see which deadline a module gave a call.
    pub deadlines: Mutex<BTreeMap<String, Duration>>,
    /// With the real backend: the etcd members the control planes run.
    pub real: Option<Arc<crate::real::RealEtcd>>,
    /// With `--kubernetes real`: the Kubernetes control planes and the kubelets.
    pub real_kube: Option<Arc<crate::real::kubernetes::RealKubernetes>>,
}

impl Shared {
    /// A fresh cluster (every node boots into maintenance mode) or, with `restored`, the stored
    /// one as it was. With a `store`, every later change is written to its directory.
    pub fn new(
        cfg: SimConfig,
        store: Option<Store>,
        restored: Option<Restored>,
    ) -> anyhow::Result<Arc<Shared>> {
        cfg.validate()?;
        let real = real_etcd(&cfg, store.as_ref())?;
        let real_kube = real_kubernetes(&cfg, store.as_ref())?;
        let mut state = initial_state(&cfg)?;
        if let Some(r) = &restored {
            restore_into(&mut state, r)?;
        }
        let mut run = Vec::new();
        let mut events = Vec::new();
        for n in &state.nodes {
            run.push(watch::channel(n.run_state()).0);
            events.push(broadcast::channel(256).0);
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            run,
            events,
            shutdown: watch::channel(false).0,
            store,
            stop: Notify::new(),
            deadlines: Mutex::default(),
            real,
            real_kube,
        });
        shared.boot_or_resume_all(restored)?;
        Ok(shared)
    }

    /// Tell the node's listener about a change of address/up state/boot.
    pub fn notify(&self, st: &State, idx: usize) {
        if let (Some(tx), Some(n)) = (self.run.get(idx), st.nodes.get(idx)) {
            tx.send_replace(n.run_state());
        }
    }

    /// Node index for a routing target: one of its addresses or its hostname.
    pub fn resolve(&self, target: &str) -> Option<usize> {
        let st = self.lock();
        let t = target.trim_start_matches('[').trim_end_matches(']');
        st.nodes
            .iter()
            .find(|n| n.address.to_string() == t || n.hostname == t)
            .map(|n| n.index)
    }
}

/// With the real backend: the supervisor of the etcd members the control planes run.
fn real_etcd(
    cfg: &SimConfig,
    store: Option<&Store>,
) -> anyhow::Result<Option<Arc<crate::real::RealEtcd>>> {
    Ok(match &cfg.backend {
        crate::config::Backend::Model => None,
        crate::config::Backend::Real(bins) => {
            let dir = store.map(|s| s.dir());
            let in_memory = store.is_none_or(|s| !s.persists());
            Some(Arc::new(crate::real::RealEtcd::new(
                bins.clone(),
                dir,
                in_memory,
            )?))
        }
    })
}

/// With `--kubernetes real`: the Kubernetes control planes and the kubelets.
fn real_kubernetes(
    cfg: &SimConfig,
    store: Option<&Store>,
) -> anyhow::Result<Option<Arc<crate::real::kubernetes::RealKubernetes>>> {
    Ok(match &cfg.kubernetes {
        crate::config::Kubernetes::Model => None,
        crate::config::Kubernetes::Real(bins) => {
            let dir = store.map(|s| s.dir());
            let in_memory = store.is_none_or(|s| !s.persists());
            Some(Arc::new(crate::real::kubernetes::RealKubernetes::new(
                bins.clone(),
                dir,
                in_memory,
            )?))
        }
    })
}

/// The state of a new cluster laid out by `cfg`: every node down and not yet booted, etcd not
/// bootstrapped.
pub(super) fn initial_state(cfg: &SimConfig) -> anyhow::Result<State> {
    let mut nodes = Vec::new();
    for index in 0..cfg.node_count() {
        nodes.push(fresh_node(cfg, index)?);
    }
    Ok(State {
        nodes,
        etcd: None,
        health_fail: None,
        reboot_downtime: cfg.reboot_downtime,
        bootstrap_settle: cfg.bootstrap_settle,
        kube: Default::default(),
        event_counter: 0,
    })
}

/// Node `index` as a new machine: its layout address and version, nothing installed.
fn fresh_node(cfg: &SimConfig, index: usize) -> anyhow::Result<Node> {
    let address = cfg
        .address_of(index)
        .ok_or_else(|| anyhow::anyhow!("no loopback address for node {index}"))?;
    let version = cfg
        .node_versions
        .get(&index)
        .cloned()
        .unwrap_or_else(|| cfg.talos_version.clone());
    Ok(Node {
        index,
        planned_control_plane: index < cfg.control_planes,
        hostname: default_hostname(index),
        address,
        port: cfg.port,
        up: false,
        generation: 0,
        version,
        pending_version: None,
        schematic: None,
        pending_schematic: None,
        images: BTreeSet::new(),
        boot_id: new_uuid(),
        active: None,
        persisted: None,
        try_token: 0,
        etcd_data: false,
        etcd_data_drops: 0,
        reboot_pending: false,
        upgrade_running: false,
        services_stopped: false,
        etcd_left: false,
        etcd_snapshot: None,
        etcd_failed: None,
        stage: Stage::Booting,
        events: Vec::new(),
        faults: Faults::default(),
        tls: None,
        config_version: 0,
        config_updated: SystemTime::now(),
        try_rollback_at: None,
        // A new machine: an empty disk, booted from installation media.
        installed: false,
        boot_media: true,
        unbootable: false,
        running_since: None,
        components: Default::default(),
        kube_api_listening: false,
        published_status: None,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A booted cluster of fresh nodes (maintenance mode), kept in memory; nothing listens.
    pub(in crate::state) fn cluster(control_planes: usize, workers: usize) -> Arc<Shared> {
        let cfg = SimConfig {
            control_planes,
            workers,
            port: 0,
            ..SimConfig::default()
        };
        Shared::new(cfg, None, None).expect("a fresh cluster starts")
    }

    /// The state of a new cluster, before any node boots.
    pub(in crate::state) fn state(control_planes: usize, workers: usize) -> State {
        initial_state(&SimConfig {
            control_planes,
            workers,
            ..SimConfig::default()
        })
        .expect("the layout fits")
    }

    #[test]
    fn a_new_layout_has_consecutive_addresses_and_the_overridden_versions() {
        let cfg = SimConfig {
            control_planes: 2,
            workers: 1,
            base_address: "127.0.20.5".parse().unwrap(),
            port: 50123,
            node_versions: BTreeMap::from([(2, "v1.12.5".to_string())]),
            reboot_downtime: Duration::from_millis(7),
            ..SimConfig::default()
        };
        let st = initial_state(&cfg).unwrap();
        let addresses: Vec<String> = st.nodes.iter().map(|n| n.address.to_string()).collect();
        assert_eq!(addresses, ["127.0.20.5", "127.0.20.6", "127.0.20.7"]);
        let versions: Vec<&str> = st.nodes.iter().map(|n| n.version.as_str()).collect();
        assert_eq!(versions, ["v1.13.6", "v1.13.6", "v1.12.5"]);
        let planned: Vec<bool> = st.nodes.iter().map(|n| n.planned_control_plane).collect();
        assert_eq!(planned, [true, true, false]);
        for (i, n) in st.nodes.iter().enumerate() {
            assert_eq!(n.index, i);
            assert_eq!(n.port, 50123);
            assert!(
                n.hostname.starts_with(&format!("talos-{}-", i + 1)),
                "{}",
                n.hostname
            );
            assert!(!n.up && !n.installed && n.boot_media && n.maintenance());
            assert_eq!(n.stage, Stage::Booting);
        }
        assert_ne!(st.nodes[0].boot_id, st.nodes[1].boot_id);
        assert!(st.etcd.is_none());
        assert_eq!(st.reboot_downtime, Duration::from_millis(7));
    }

    #[test]
    fn a_layout_past_the_loopback_range_is_refused() {
        let cfg = SimConfig {
            control_planes: 2,
            base_address: "127.255.255.255".parse().unwrap(),
            ..SimConfig::default()
        };
        let e = initial_state(&cfg).err().expect("node 1 has no address");
        assert_eq!(e.to_string(), "no loopback address for node 1");
        assert!(Shared::new(cfg, None, None).is_err());
    }

    #[test]
    fn resolve_finds_a_node_by_address_or_hostname() {
        let shared = cluster(1, 1);
        let hostname = shared.lock().nodes[1].hostname.clone();
        assert_eq!(shared.resolve("127.0.10.1"), Some(0));
        assert_eq!(shared.resolve("[127.0.10.2]"), Some(1));
        assert_eq!(shared.resolve(&hostname), Some(1));
        assert_eq!(shared.resolve("127.0.10.3"), None);
        assert_eq!(shared.resolve(""), None);
    }

    #[test]
    fn notify_tells_the_listener_what_the_node_now_is() {
        let shared = cluster(1, 0);
        let rx = shared.run[0].subscribe();
        assert!(rx.borrow().listening);
        let mut st = shared.lock();
        st.nodes[0].faults.firewalled = true;
        assert!(rx.borrow().listening, "nothing is sent before notify");
        shared.notify(&st, 0);
        assert_eq!(*rx.borrow(), st.nodes[0].run_state());
        assert!(!rx.borrow().listening);
        shared.notify(&st, 9);
    }
}
