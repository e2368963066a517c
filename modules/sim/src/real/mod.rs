//! The real backend: each control plane's etcd is a real etcd member (upstream's server, built
//! from the Go module proxy by `tools/etcd/build`), so membership, quorum, snapshots and
//! recovery are etcd's own.
//!
//! The simulated node stays the model of Talos (its boot, its services, whether etcd should run
//! there); this module makes the processes follow it. A supervisor thread looks at the model
//! every [`TICK`] and starts, stops, joins and promotes members the way Talos's etcd service
//! does (`internal/app/machined/pkg/system/services/etcd.go` @ v1.14.1):
//! - a bootstrapped node starts a new cluster of one (`--initial-cluster-state new`);
//! - any other control plane that should run etcd with an empty data directory removes a member
//!   of its own name, adds itself as a learner through a running member, starts with the list
//!   etcd answered (`existing`) and is promoted once etcd lets it (`addMember`,
//!   `buildInitialCluster`, `promoteMember`);
//! - a node that is down, faulted (`etcd_down`), left or failed has no process; a node whose
//!   data the model dropped (a wipe, a removal) has no data directory either.
//!
//! The member ids the model lists are refreshed from etcd's own list, so what the Talos API
//! answers (`services/machine.rs`) is etcd's.

pub mod answers;
pub mod gateway;
pub mod kubernetes;
pub mod process;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gateway::{Gateway, GatewayError, Member};
use process::{InitialCluster, MemberSpec};

use crate::state::{EtcdMember, Shared};

/// How often the supervisor compares the processes with the model.
const TICK: Duration = Duration::from_millis(100);
/// How long a failed join or a crashed member waits before the next try (Talos retries its
/// join every 3 s; the simulator is quicker, its clusters being on one machine).
const RETRY: Duration = Duration::from_secs(1);

/// Where upstream's etcd programs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdBinaries {
    pub etcd: PathBuf,
    pub etcdutl: PathBuf,
}

impl EtcdBinaries {
    /// The ones `tools/etcd/build` writes into `dir` (`target/upstream`).
    pub fn in_dir(dir: &Path) -> EtcdBinaries {
        EtcdBinaries {
            etcd: dir.join(format!("etcd-{ETCD_VERSION}")),
            etcdutl: dir.join(format!("etcdutl-{ETCD_VERSION}")),
        }
    }

    pub fn check(&self) -> anyhow::Result<()> {
        for bin in [&self.etcd, &self.etcdutl] {
            if !bin.is_file() {
                anyhow::bail!(
                    "{} does not exist: build upstream's etcd with tools/etcd/build (the real backend runs it)",
                    bin.display()
                );
            }
        }
        Ok(())
    }
}

/// The etcd release the real backend runs: Talos v1.14.1's default (`DefaultEtcdVersion` in
/// pkg/machinery/constants/constants.go).
pub const ETCD_VERSION: &str = "v3.7.1";

/// A member asked to end (SIGTERM) and not gone yet: its port stays taken and its peers still see
/// it until then, so the node starts no new member meanwhile.
struct Stopping {
    child: Child,
    kill_at: Instant,
    /// Its data directory goes once it has ended (the model dropped the node's etcd data).
    wipe: Option<PathBuf>,
}

#[derive(Default)]
struct Processes {
    children: BTreeMap<usize, Child>,
    /// Members ending. The supervisor does not wait for them: while etcd serves a Kubernetes API
    /// server's watches, a SIGTERM takes it seconds, and the other nodes' stops and answers
    /// must not queue behind one.
    stopping: BTreeMap<usize, Stopping>,
    /// Nodes whose Bootstrap asked for a new cluster they have not started yet.
    bootstrap: BTreeSet<usize>,
    /// Learners this simulator added, by node, until etcd promotes them.
    learners: BTreeMap<usize, u64>,
    /// When a node's last join or start failed.
    backoff: BTreeMap<usize, Instant>,
    /// The model's count of each node's data drops the supervisor has carried out.
    drops_seen: BTreeMap<usize, u64>,
    /// Why each node's last start or join failed, printed once until it changes.
    last_failure: BTreeMap<usize, String>,
    /// The nodes whose member answered its status at the last tick.
    serving: BTreeSet<usize>,
}

pub struct RealEtcd {
    bins: EtcdBinaries,
    root: PathBuf,
    /// The root is the simulator's own temporary directory (a cluster without a state
    /// directory), removed when it stops.
    temporary: bool,
    procs: Mutex<Processes>,
    stopping: AtomicBool,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

/// What the model wants of one node's etcd.
struct Want {
    idx: usize,
    spec: MemberSpec,
    run: bool,
    keep_data: bool,
    data_drops: u64,
}

/// Where a real backend keeps its files: `state_dir/<what>`, or without a state directory a
/// temporary directory of its own; and whether the simulator removes it when it stops (a
/// temporary one, or a cluster that lives in memory). Created here.
pub(crate) fn files_root(
    state_dir: Option<&Path>,
    in_memory: bool,
    what: &str,
) -> std::io::Result<(PathBuf, bool)> {
    let (root, temporary) = match state_dir {
        Some(dir) => (dir.join(what), in_memory),
        None => {
            let unique = format!(
                "talos-sim-{what}-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            );
            (std::env::temp_dir().join(unique), true)
        }
    };
    std::fs::create_dir_all(&root)?;
    Ok((root, temporary))
}

impl RealEtcd {
    /// The backend for a cluster whose etcd data lives under `state_dir/etcd` (removed when the
    /// simulator stops if the cluster lives in memory), or, without a state directory, in a
    /// temporary directory of its own.
    pub fn new(
        bins: EtcdBinaries,
        state_dir: Option<&Path>,
        in_memory: bool,
    ) -> anyhow::Result<RealEtcd> {
        bins.check()?;
        let (root, temporary) = files_root(state_dir, in_memory, "etcd")?;
        Ok(RealEtcd {
            bins,
            root,
            temporary,
            procs: Mutex::default(),
            stopping: AtomicBool::new(false),
            supervisor: Mutex::new(None),
        })
    }

    fn procs(&self) -> std::sync::MutexGuard<'_, Processes> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn spec(&self, idx: usize, name: &str, ip: Ipv4Addr) -> MemberSpec {
        MemberSpec {
            name: name.to_owned(),
            ip,
            data_dir: self.root.join(format!("node-{idx}")),
            log: self.root.join(format!("node-{idx}.log")),
        }
    }

    /// Where node `idx` keeps the snapshot EtcdRecover uploaded (`/var/lib/etcd.snapshot`).
    pub fn snapshot_path(&self, idx: usize) -> PathBuf {
        self.root.join(format!("node-{idx}.snapshot"))
    }

    /// The gateway of the member on `ip`.
    pub fn gateway(ip: Ipv4Addr) -> Gateway {
        Gateway::new(SocketAddr::from((ip, process::CLIENT_PORT)))
    }

    /// Whether node `idx` has an etcd process.
    pub fn running(&self, idx: usize) -> bool {
        self.procs().children.contains_key(&idx)
    }

    /// Whether node `idx`'s member answered its status at the supervisor's last look: a member
    /// that was just started is running before it serves (Talos's health check asks the member).
    pub fn serving(&self, idx: usize) -> bool {
        self.procs().serving.contains(&idx)
    }

    /// Bootstrap: node `idx` starts a new cluster at its next tick.
    pub fn request_bootstrap(&self, idx: usize) {
        self.procs().bootstrap.insert(idx);
    }

    /// Bootstrap with recover_etcd: the uploaded snapshot restored into the node's data
    /// directory by etcd's own restore (`recoverFromSnapshot` in services/etcd.go @ v1.14.1:
    /// the snapshot's status first, then the restore as a cluster of this one member), the
    /// snapshot file removed after. Err is the message the etcd service fails with.
    pub fn restore(
        &self,
        spec: &MemberSpec,
        snapshot: &Path,
        skip_hash_check: bool,
    ) -> Result<(), String> {
        use std::ffi::OsStr;
        if !snapshot.is_file() {
            return Err("Failed to run pre stage: error verifying snapshot: stat /var/lib/etcd.snapshot: no such file or directory".into());
        }
        let file = snapshot.as_os_str();
        process::etcdutl(
            &self.bins.etcdutl,
            &[OsStr::new("snapshot"), OsStr::new("status"), file],
        )
        .map_err(|e| format!("Failed to run pre stage: error verifying snapshot: {e}"))?;
        let _ = std::fs::remove_dir_all(&spec.data_dir);
        let cluster = format!("{}={}", spec.name, process::peer_url(spec.ip));
        let peer = process::peer_url(spec.ip);
        let mut args = vec![
            OsStr::new("snapshot"),
            OsStr::new("restore"),
            file,
            OsStr::new("--name"),
            OsStr::new(&spec.name),
            OsStr::new("--data-dir"),
            spec.data_dir.as_os_str(),
            OsStr::new("--initial-cluster"),
            OsStr::new(&cluster),
            OsStr::new("--initial-advertise-peer-urls"),
            OsStr::new(&peer),
        ];
        if skip_hash_check {
            args.push(OsStr::new("--skip-hash-check"));
        }
        process::etcdutl(&self.bins.etcdutl, &args).map_err(|e| {
            let _ = std::fs::remove_dir_all(&spec.data_dir);
            format!("Failed to run pre stage: error recovering from the snapshot: {e}")
        })?;
        let _ = std::fs::remove_file(snapshot);
        Ok(())
    }

    /// Starts the supervisor thread for `shared`'s cluster.
    pub fn supervise(self: &Arc<Self>, shared: Weak<Shared>) {
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name("etcd-supervisor".into())
            .spawn(move || {
                while !me.stopping.load(Ordering::SeqCst) {
                    let Some(shared) = shared.upgrade() else {
                        break;
                    };
                    me.tick(&shared);
                    drop(shared);
                    std::thread::sleep(TICK);
                }
                me.stop_all();
            })
            .expect("the supervisor thread starts");
        *self.supervisor.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    }

    /// Stops every member and waits for the supervisor to end; a temporary root goes too.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let handle = self
            .supervisor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        self.stop_all();
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn stop_all(&self) {
        let (children, stopping) = {
            let mut procs = self.procs();
            (
                std::mem::take(&mut procs.children),
                std::mem::take(&mut procs.stopping),
            )
        };
        let all = children
            .into_values()
            .chain(stopping.into_values().map(|s| s.child));
        process::stop_all(all.collect());
    }

    /// Node `idx`'s member is asked to end (if it runs), its data directory removed once it has
    /// when `wipe`. Returns whether it is still ending.
    fn begin_stop(&self, idx: usize, wipe: Option<&Path>) -> bool {
        let mut procs = self.procs();
        if let Some(child) = procs.children.remove(&idx) {
            process::terminate(&child);
            let kill_at = Instant::now() + process::STOP_GRACE;
            procs.stopping.insert(
                idx,
                Stopping {
                    child,
                    kill_at,
                    wipe: None,
                },
            );
        }
        let Some(ending) = procs.stopping.get_mut(&idx) else {
            return false;
        };
        if let Some(dir) = wipe {
            ending.wipe = Some(dir.to_owned());
        }
        true
    }

    /// Forgets the members that have ended since the last tick (killing those past their
    /// grace), removing the data directories that were to go with them.
    fn finish_stops(&self) {
        let mut procs = self.procs();
        let ended: Vec<usize> = procs
            .stopping
            .iter_mut()
            .filter_map(|(&idx, s)| {
                process::ended_or_killed(&mut s.child, s.kill_at).then_some(idx)
            })
            .collect();
        for idx in ended {
            if let Some(dir) = procs.stopping.remove(&idx).and_then(|s| s.wipe) {
                let _ = std::fs::remove_dir_all(dir);
                procs.learners.remove(&idx);
            }
        }
    }

    fn ending(&self, idx: usize) -> bool {
        self.procs().stopping.contains_key(&idx)
    }

    fn wants(&self, shared: &Shared) -> Vec<Want> {
        let st = shared.lock();
        st.nodes
            .iter()
            .map(|n| Want {
                idx: n.index,
                spec: self.spec(n.index, &n.hostname, n.address),
                run: n.up
                    && n.is_control_plane()
                    && n.etcd_data
                    && !n.etcd_stopped()
                    && n.etcd_failed.is_none(),
                keep_data: n.etcd_data,
                data_drops: n.etcd_data_drops,
            })
            .collect()
    }

    /// One comparison of the processes with the model.
    fn tick(&self, shared: &Shared) {
        let wants = self.wants(shared);
        self.finish_stops();
        for want in &wants {
            self.reap(want.idx);
            self.carry_out_drops(want);
            if !want.run {
                let data = want.spec.data_dir.as_path();
                let ending = self.begin_stop(want.idx, (!want.keep_data).then_some(data));
                if !ending && !want.keep_data && data.exists() {
                    let _ = std::fs::remove_dir_all(data);
                    self.procs().learners.remove(&want.idx);
                }
            }
        }
        for want in wants.iter().filter(|w| w.run) {
            if !self.running(want.idx)
                && !self.ending(want.idx)
                && self.may_try(want.idx)
                && let Err(why) = self.bring_up(want, &wants)
            {
                let mut procs = self.procs();
                procs.backoff.insert(want.idx, Instant::now());
                if procs.last_failure.get(&want.idx) != Some(&why) {
                    // Retried every second while it lasts: said once, not every time.
                    eprintln!("talos-sim: etcd on node {}: {why} (retrying)", want.idx);
                    procs.last_failure.insert(want.idx, why);
                }
            }
        }
        self.promote(&wants);
        self.refresh_ids(shared, &wants);
        self.refresh_serving(&wants);
    }

    fn refresh_serving(&self, wants: &[Want]) {
        for want in wants {
            let serves = self.running(want.idx) && Self::gateway(want.spec.ip).status().is_ok();
            let mut procs = self.procs();
            if serves {
                procs.serving.insert(want.idx);
            } else {
                procs.serving.remove(&want.idx);
            }
        }
    }

    /// A node whose data the model dropped since the last tick loses its member's process and
    /// data directory as soon as the process has ended, even when it wants etcd again already (it left, rebooted and
    /// joins: it starts again once the old member is gone).
    fn carry_out_drops(&self, want: &Want) {
        let seen = self.procs().drops_seen.insert(want.idx, want.data_drops);
        if seen.is_none_or(|seen| seen == want.data_drops) {
            return;
        }
        if !self.begin_stop(want.idx, Some(&want.spec.data_dir)) {
            let _ = std::fs::remove_dir_all(&want.spec.data_dir);
            self.procs().learners.remove(&want.idx);
        }
    }

    /// Forgets a member whose process ended by itself (etcd exits when it learns it was
    /// removed); the next tick starts it again if the model still wants it.
    fn reap(&self, idx: usize) {
        let mut procs = self.procs();
        let ended = procs
            .children
            .get_mut(&idx)
            .is_some_and(|c| !matches!(c.try_wait(), Ok(None)));
        if ended {
            procs.children.remove(&idx);
            procs.backoff.insert(idx, Instant::now());
        }
    }

    fn may_try(&self, idx: usize) -> bool {
        self.procs()
            .backoff
            .get(&idx)
            .is_none_or(|t| t.elapsed() >= RETRY)
    }

    /// Starts node `want`'s member: from its data, as a new cluster, or by joining.
    fn bring_up(&self, want: &Want, wants: &[Want]) -> Result<(), String> {
        let bootstrap = self.procs().bootstrap.remove(&want.idx);
        let initial = if process::has_data(&want.spec.data_dir) {
            InitialCluster::FromData
        } else if bootstrap {
            InitialCluster::New
        } else {
            let (id, list) = self.join(want, wants)?;
            self.procs().learners.insert(want.idx, id);
            InitialCluster::Existing(list)
        };
        let child = process::start(&self.bins.etcd, &want.spec, &initial)
            .map_err(|e| format!("{}: {e}", self.bins.etcd.display()))?;
        let mut procs = self.procs();
        procs.children.insert(want.idx, child);
        procs.last_failure.remove(&want.idx);
        Ok(())
    }

    /// The gateways of the members running now, other than node `except`'s.
    fn running_gateways(&self, wants: &[Want], except: usize) -> Vec<Gateway> {
        let procs = self.procs();
        wants
            .iter()
            .filter(|w| w.idx != except && procs.children.contains_key(&w.idx))
            .map(|w| Self::gateway(w.spec.ip))
            .collect()
    }

    /// Talos's `addMember` and `buildInitialCluster`: a member of the same name goes, this one
    /// is added as a learner; the answer is its id and the `--initial-cluster` list.
    fn join(&self, want: &Want, wants: &[Want]) -> Result<(u64, String), String> {
        let peer = process::peer_url(want.spec.ip);
        let mut last = "no running etcd member to join through".to_owned();
        for gw in self.running_gateways(wants, want.idx) {
            let attempt = || -> Result<(u64, Vec<Member>), GatewayError> {
                for m in gw.member_list()? {
                    if m.name == want.spec.name {
                        gw.member_remove(m.id)?;
                    }
                }
                match gw.member_add_learner(std::slice::from_ref(&peer)) {
                    Err(GatewayError::Refused { message, .. })
                        if message.contains("Peer URLs already exists") =>
                    {
                        // Our own learner from an earlier try that never started.
                        let list = gw.member_list()?;
                        let mine = list
                            .iter()
                            .find(|m| {
                                m.is_learner && m.name.is_empty() && m.peer_urls == [peer.clone()]
                            })
                            .map(|m| m.id)
                            .ok_or(GatewayError::Refused { code: 9, message })?;
                        Ok((mine, list))
                    }
                    other => other,
                }
            };
            match attempt() {
                Ok((id, members)) => {
                    let list: Vec<String> = members
                        .iter()
                        .flat_map(|m| {
                            let name = if m.id == id {
                                want.spec.name.clone()
                            } else {
                                m.name.clone()
                            };
                            m.peer_urls.iter().map(move |u| format!("{name}={u}"))
                        })
                        .collect();
                    return Ok((id, list.join(",")));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("joining etcd: {last}"))
    }

    /// Talos's `promoteMember`: each learner it added is promoted as soon as etcd lets it
    /// (etcd refuses while the learner has not caught up with the leader).
    fn promote(&self, wants: &[Want]) {
        let learners: Vec<(usize, u64)> = self
            .procs()
            .learners
            .iter()
            .map(|(&n, &id)| (n, id))
            .collect();
        for (node, id) in learners {
            if !self.running(node) {
                continue;
            }
            let promoted = self
                .running_gateways(wants, node)
                .iter()
                .any(|gw| gw.member_promote(id).is_ok());
            if promoted {
                self.procs().learners.remove(&node);
            }
        }
    }

    /// etcd's member list, read through any running member: None when none answers.
    pub fn members(&self, ips: &[Ipv4Addr]) -> Option<Vec<Member>> {
        answers::first_answer(ips, Gateway::member_list).ok()
    }

    /// The model's member ids become etcd's: each member is the node of its name, or for a
    /// learner not started yet, of its peer address.
    fn refresh_ids(&self, shared: &Shared, wants: &[Want]) {
        let running: Vec<Ipv4Addr> = {
            let procs = self.procs();
            wants
                .iter()
                .filter(|w| procs.children.contains_key(&w.idx))
                .map(|w| w.spec.ip)
                .collect()
        };
        let Some(members) = self.members(&running) else {
            return;
        };
        let node_of = |m: &Member| {
            wants
                .iter()
                .find(|w| {
                    (!m.name.is_empty() && w.spec.name == m.name)
                        || m.peer_urls.contains(&process::peer_url(w.spec.ip))
                })
                .map(|w| w.idx)
        };
        let mut st = shared.lock();
        let Some(model) = st.etcd.as_mut() else {
            return;
        };
        for m in &members {
            let Some(node) = node_of(m) else { continue };
            match model.iter_mut().find(|e| e.node == node) {
                Some(e) => e.id = m.id,
                None => model.push(EtcdMember::voting(node, m.id)),
            }
        }
    }
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop_all();
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
