//! The real Kubernetes backend (`--kubernetes real`, with `--backend real`): each control plane
//! runs upstream's kube-apiserver, kube-controller-manager and kube-scheduler on its own etcd
//! member, so what a client of the cluster's API sees (admission, evictions and their budgets,
//! server-side apply, discovery, the controllers' pods and statuses) is Kubernetes' own.
//!
//! talos-sim plays what is not a program here: each node's kubelet (`kubelet.rs`: it registers
//! the Node, posts its status and lease, keeps the static pods' mirror pods, reports the pods
//! bound to it as running and confirms their deletion) and Talos's own controllers
//! (`talos.rs`: the Node's labels, annotations, taints and cordon, the bootstrap manifests,
//! the drain before an upgrade, a shutdown or a reset). Both take their facts from the
//! simulated node (`kube::for_real`). The simulator's log of what the API server accepted is read
//! from the API servers' audit logs (`audit.rs`).
//!
//! A supervisor thread starts a control plane's programs once its API server would serve
//! (`kube::serving`: up, configured, bootstrapped, its services running) and its etcd member
//! runs, and stops them when either ends; a config that changes their inputs (the CA, the keys,
//! the endpoint, the subnets) restarts them. Every child dies with
//! the simulator (`dies_with_parent`); their files live in the state directory's `kubernetes/`.

pub mod audit;
pub mod client;
pub mod health;
pub mod kubelet;
pub mod programs;
pub mod talos;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use programs::{KUBERNETES_VERSION, KubeBinaries, Program};

use crate::state::Shared;

/// How often the supervisor compares the programs with the model, and the kubelets report.
const TICK: Duration = Duration::from_millis(200);
/// How long a program that exited waits before the next start.
const RETRY: Duration = Duration::from_secs(2);

struct Running {
    children: BTreeMap<Program, Child>,
    /// kube-apiserver answered `/readyz` once since it started.
    serving: bool,
    /// When each program last exited by itself (it starts again `RETRY` later).
    exited: BTreeMap<Program, Instant>,
    /// What the programs were started with (`programs::fingerprint`).
    fingerprint: String,
    server: SocketAddr,
    started: Instant,
}

pub struct RealKubernetes {
    bins: KubeBinaries,
    root: PathBuf,
    temporary: bool,
    running: Mutex<BTreeMap<usize, Running>>,
    stopping: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) kubelets: Mutex<kubelet::Kubelets>,
}

impl RealKubernetes {
    /// The backend for a cluster whose files live under `state_dir/kubernetes` (removed when
    /// the simulator stops if the cluster lives in memory), else in a temporary directory.
    pub fn new(
        bins: KubeBinaries,
        state_dir: Option<&Path>,
        in_memory: bool,
    ) -> anyhow::Result<RealKubernetes> {
        bins.check()?;
        let (root, temporary) = crate::real::files_root(state_dir, in_memory, "kubernetes")?;
        Ok(RealKubernetes {
            bins,
            root,
            temporary,
            running: Mutex::default(),
            stopping: AtomicBool::new(false),
            threads: Mutex::default(),
            kubelets: Mutex::default(),
        })
    }

    fn dir_of(&self, idx: usize) -> PathBuf {
        self.root.join(format!("node-{idx}"))
    }

    /// The API servers running now, by node (the node's own first when asked for one).
    pub fn servers(&self) -> Vec<(usize, SocketAddr)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.iter().map(|(i, r)| (*i, r.server)).collect()
    }

    /// The audit logs of every control plane that ran an API server.
    pub(crate) fn audit_logs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return vec![];
        };
        let mut logs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join(programs::AUDIT_LOG))
            .filter(|p| p.is_file())
            .collect();
        logs.sort();
        logs
    }

    /// Starts the supervisor and the kubelets' thread for `shared`'s cluster. The supervisor
    /// stops the programs when it ends: they die with the thread that started them.
    pub fn supervise(self: &Arc<Self>, shared: Weak<Shared>) {
        let supervisor = self.every_tick("kubernetes-supervisor", shared.clone(), |me, shared| {
            me.tick(shared)
        });
        let kubelets = self.every_tick("kubelets", shared, kubelet::tick);
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads.push(supervisor);
        threads.push(kubelets);
    }

    /// A thread that runs `round` every [`TICK`] until the backend stops or the cluster goes,
    /// then stops the programs: the backend is ending.
    fn every_tick(
        self: &Arc<Self>,
        name: &str,
        shared: Weak<Shared>,
        round: impl Fn(&RealKubernetes, &Shared) + Send + 'static,
    ) -> JoinHandle<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !me.stopping.load(Ordering::SeqCst) {
                    let Some(shared) = shared.upgrade() else {
                        break;
                    };
                    round(&me, &shared);
                    drop(shared);
                    std::thread::sleep(TICK);
                }
                me.stop_all();
            })
            .expect("a thread starts")
    }

    /// Stops every program and waits for the threads; a temporary root goes too.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        self.stop_all();
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn stop_all(&self) {
        let running = std::mem::take(&mut *self.running.lock().unwrap_or_else(|p| p.into_inner()));
        let children: Vec<Child> = running
            .into_values()
            .flat_map(|r| r.children.into_values())
            .collect();
        crate::real::process::stop_all(children);
    }

    /// One comparison of the programs with the model.
    fn tick(&self, shared: &Shared) {
        let etcd = shared.real.clone();
        let count = shared.lock().nodes.len();
        for idx in 0..count {
            let want = crate::kube::serving(shared, idx)
                .filter(|_| etcd.as_ref().is_some_and(|e| e.running(idx)));
            let fingerprint = want
                .as_ref()
                .map(|(s, cfg)| programs::fingerprint(cfg, s.address, s.port));
            let stale = {
                let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                let stale = running
                    .get(&idx)
                    .is_some_and(|r| Some(&r.fingerprint) != fingerprint.as_ref());
                if stale { running.remove(&idx) } else { None }
            };
            if let Some(r) = stale {
                crate::real::process::stop_all(r.children.into_values().collect());
            }
            self.publish_listening(shared, idx);
            let (Some((serving, cfg)), Some(fingerprint)) = (want, fingerprint) else {
                continue;
            };
            let dir = self.dir_of(idx);
            let cp = programs::ControlPlane {
                dir: &dir,
                cfg: &cfg,
                address: serving.address,
                port: serving.port,
                etcd_url: crate::real::process::client_url(serving.address),
            };
            let new = !self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&idx);
            if new {
                if let Err(e) = programs::write_files(&cp) {
                    // Said each tick while it lasts: a config without the keys is rare.
                    eprintln!(
                        "talos-sim: node {idx}: the Kubernetes control plane cannot start: {e:#}"
                    );
                    continue;
                }
                self.running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(
                        idx,
                        Running {
                            children: BTreeMap::new(),
                            serving: false,
                            exited: BTreeMap::new(),
                            fingerprint,
                            server: programs::server(serving.address, serving.port),
                            started: Instant::now(),
                        },
                    );
            }
            self.keep_running(idx, &cp);
            self.publish_listening(shared, idx);
        }
    }

    /// Starts each of node `idx`'s programs that is not running: kube-apiserver at once, the
    /// other two once it is ready (as the kubelet restarts static pods that fail, they would
    /// fail until then); a program that exited by itself waits `RETRY` first.
    fn keep_running(&self, idx: usize, cp: &programs::ControlPlane<'_>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = running.get_mut(&idx) else {
            return;
        };
        let ended: Vec<Program> = r
            .children
            .iter_mut()
            .filter_map(|(p, c)| (!matches!(c.try_wait(), Ok(None))).then_some(*p))
            .collect();
        for p in ended {
            r.children.remove(&p);
            if p == Program::ApiServer {
                r.serving = false;
            }
            r.exited.insert(p, Instant::now());
            report_exit(idx, &self.dir_of(idx), p, r.started);
        }
        let server = r.server;
        let check_serving = !r.serving && r.children.contains_key(&Program::ApiServer);
        drop(running);
        if check_serving
            && self.ready(server, cp)
            && let Some(r) = self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&idx)
        {
            r.serving = true;
        }
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = running.get(&idx) else {
            return;
        };
        let missing: Vec<Program> = Program::ALL
            .into_iter()
            .filter(|p| !r.children.contains_key(p))
            .filter(|p| r.exited.get(p).is_none_or(|t| t.elapsed() >= RETRY))
            .collect();
        drop(running);
        if missing.is_empty() {
            return;
        }
        let api_ready = !missing.contains(&Program::ApiServer) && self.ready(server, cp);
        for p in missing {
            if p != Program::ApiServer && !api_ready {
                continue;
            }
            match programs::start(&self.bins, p, cp) {
                Ok(child) => {
                    if let Some(r) = self
                        .running
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_mut(&idx)
                    {
                        r.children.insert(p, child);
                    }
                }
                Err(e) => eprintln!("talos-sim: node {idx}: {e:#}"),
            }
        }
    }

    /// The node's `kube_api_listening`, which Talos's health checks and shutdown read: its API
    /// server runs and has served.
    fn publish_listening(&self, shared: &Shared, idx: usize) {
        let listening = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&idx)
            .is_some_and(|r| r.serving && r.children.contains_key(&Program::ApiServer));
        let mut st = shared.lock();
        if let Some(n) = st.nodes.get_mut(idx) {
            n.kube_api_listening = listening;
        }
    }

    /// Whether the API server at `server` serves the other two: `/readyz` answers 200 and the
    /// controller manager may read the authentication ConfigMap both read first (right after
    /// the start the authorizer's cache may not have the bootstrap roles yet, and they exit).
    fn ready(&self, server: SocketAddr, cp: &programs::ControlPlane<'_>) -> bool {
        let Some(ca) = cp.cfg.k8s_ca() else {
            return false;
        };
        let (admin, controller_manager) = {
            let mut kubelets = self.kubelets.lock().unwrap_or_else(|p| p.into_inner());
            (
                kubelets.client("admin", &["system:masters"], &ca),
                kubelets.client("system:kube-controller-manager", &[], &ca),
            )
        };
        let answers = |c: Option<client::Client>, path: &str| {
            c.is_some_and(|c| c.get(server, path).is_ok_and(|a| a.code == 200))
        };
        answers(admin, "/readyz")
            && answers(
                controller_manager,
                "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
            )
    }
}

/// A program that ended by itself: said with the end of its log.
fn report_exit(idx: usize, dir: &Path, program: Program, since: Instant) {
    let text = std::fs::read_to_string(dir.join(program.log())).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    eprintln!(
        "talos-sim: node {idx}: {} exited {:.1}s after the control plane started; its log ends:\n{}",
        program.name(),
        since.elapsed().as_secs_f64(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

impl Drop for RealKubernetes {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop_all();
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// The control protocol's `kube` with the real API server: its Nodes and pods, and the log
/// read from its audit.
pub fn snapshot(rk: &RealKubernetes, shared: &Shared) -> crate::control::KubeSnapshot {
    let (nodes, pods) = talos::list(rk, shared);
    let model: Vec<crate::control::KubeLogEntry> = {
        let st = shared.lock();
        st.kube.log.iter().map(|e| e.to_entry()).collect()
    };
    let pod_nodes = rk
        .kubelets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pod_nodes
        .clone();
    crate::control::KubeSnapshot {
        nodes,
        pods,
        log: audit::log(&rk.audit_logs(), &pod_nodes, &model),
    }
}
