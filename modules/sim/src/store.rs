//! The state directory: what a simulated cluster remembers across a restart of the simulator.
//!
//! Layout of `DIR`:
//! - `state.json`: the cluster (layout, etcd members, health failure) and every node (address,
//!   port, hostname, versions, boot id, faults, which config runs and which one the next boot
//!   loads). Rewritten (temp file + rename) whenever it changes, so it is never half written.
//! - `configs/<sha256>.yaml`: machine configs exactly as applied, named by their SHA-256 and
//!   written before the `state.json` that refers to them; unreferenced ones are removed after.
//! - `run.json`: `{"pid":…,"control":"127.0.0.1:…","block":…}` while a simulator serves from
//!   `DIR` (`block`: B when the nodes start at 127.0.B.1, else null).
//! - `lock`: held (flock) by the simulator serving from `DIR`; free means nothing runs.
//!
//! The configs hold the cluster's secrets, as a real node's disk does: files are created 0600
//! and the directory 0700. Nothing is fsynced: the rename protects against a simulator that
//! dies, not against a host that loses power.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::mcfg::StoredConfig;
use crate::state::{EtcdMember, Faults, Node, State};

pub const STATE_FILE: &str = "state.json";
pub const RUN_FILE: &str = "run.json";
pub const LOCK_FILE: &str = "lock";
pub const CONFIG_DIR: &str = "configs";
/// Bumped when `state.json` changes incompatibly.
const FORMAT: u32 = 1;

/// `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredCluster {
    pub format: u32,
    pub control_planes: usize,
    pub workers: usize,
    /// The layout the cluster was created with (a node may have moved since, see its address).
    pub base_address: Ipv4Addr,
    pub port: u16,
    pub talos_version: String,
    #[serde(default)]
    pub node_versions: BTreeMap<usize, String>,
    pub reboot_downtime_ms: u64,
    /// Members once etcd is bootstrapped; null before.
    pub etcd_members: Option<Vec<StoredMember>>,
    pub health_fail: Option<String>,
    pub nodes: Vec<StoredNode>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredMember {
    pub node: usize,
    pub id: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredNode {
    pub index: usize,
    /// `controlplane` or `worker` (from the node counts; informative).
    pub role: String,
    pub hostname: String,
    pub address: Ipv4Addr,
    pub port: u16,
    /// Booted; false while rebooting or after a reboot that never came back.
    pub up: bool,
    pub version: String,
    /// Installed by an upgrade, running after the next boot.
    pub pending_version: Option<String>,
    pub schematic: Option<String>,
    /// Installed by an upgrade with the version above, running after the next boot.
    #[serde(default)]
    pub pending_schematic: Option<String>,
    #[serde(default)]
    pub images: Vec<String>,
    pub boot_id: String,
    /// `configs/<sha256>.yaml` of the running config; null = maintenance mode.
    pub running_config: Option<String>,
    /// The config the next boot loads (ahead of the running one after a staged apply, behind
    /// it during a try); null = maintenance mode after the next boot.
    pub next_boot_config: Option<String>,
    pub etcd_data: bool,
    /// An apply asked for a reboot that had not happened yet.
    pub reboot_pending: bool,
    pub config_version: u64,
    pub config_updated_unix_ms: u64,
    /// A try-mode config is rolled back at this time.
    pub try_rollback_unix_ms: Option<u64>,
    #[serde(default)]
    pub faults: Faults,
    /// Talos is on the system disk; absent in older state files, where a node with a config
    /// was installed.
    #[serde(default)]
    pub installed: Option<bool>,
    #[serde(default = "media_attached")]
    pub boot_media: bool,
}

fn media_attached() -> bool {
    true
}

/// `run.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub pid: u32,
    pub control: Option<SocketAddr>,
    /// B when the nodes start at 127.0.B.1 (as `--base-address auto` places them), so scripts
    /// can address node N as 127.0.B.N.
    #[serde(default)]
    pub block: Option<u8>,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn from_unix_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

fn config_ref(c: Option<&StoredConfig>) -> Option<String> {
    c.map(|c| format!("{CONFIG_DIR}/{}.yaml", c.digest))
}

fn stored_node(n: &Node) -> StoredNode {
    StoredNode {
        index: n.index,
        role: if n.planned_control_plane {
            "controlplane"
        } else {
            "worker"
        }
        .into(),
        hostname: n.hostname.clone(),
        address: n.address,
        port: n.port,
        up: n.up,
        version: n.version.clone(),
        pending_version: n.pending_version.clone(),
        schematic: n.schematic.clone(),
        pending_schematic: n.pending_schematic.clone(),
        images: n.images.iter().cloned().collect(),
        boot_id: n.boot_id.clone(),
        running_config: config_ref(n.active.as_ref()),
        next_boot_config: config_ref(n.persisted.as_ref()),
        etcd_data: n.etcd_data,
        reboot_pending: n.reboot_pending,
        config_version: n.config_version,
        config_updated_unix_ms: unix_ms(n.config_updated),
        try_rollback_unix_ms: n.try_rollback_at.map(unix_ms),
        faults: n.faults.clone(),
        installed: Some(n.installed),
        boot_media: n.boot_media,
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{} has no file name", path.display()))?;
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("cannot write {}: {e}", path.display())
    })
}

/// Creates the state directory (0700) if needed, with its `configs/` when `configs`.
pub fn create_dir(dir: &Path, configs: bool) -> Result<()> {
    let path = if configs {
        dir.join(CONFIG_DIR)
    } else {
        dir.to_path_buf()
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .with_context(|| format!("cannot create state directory {}", dir.display()))
}

/// Whether a simulator holds the directory's lock right now. A directory without a lock file
/// has never been served from.
pub fn is_running(dir: &Path) -> Result<bool> {
    let path = dir.join(LOCK_FILE);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(anyhow!("cannot open {}: {e}", path.display())),
    };
    match f.try_lock() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(anyhow!("cannot check the lock {}: {e}", path.display()))
        }
    }
}

pub fn read_run_info(dir: &Path) -> Result<Option<RunInfo>> {
    let path = dir.join(RUN_FILE);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .with_context(|| format!("{} is not a talos-sim run file", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!("cannot read {}: {e}", path.display())),
    }
}

/// Reads `state.json`; None when the directory holds no state yet.
pub fn read_cluster(dir: &Path) -> Result<Option<StoredCluster>> {
    let path = dir.join(STATE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    let c: StoredCluster = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow!(
            "{} is not a valid talos-sim state file ({e}); move it away to start a new cluster",
            path.display()
        )
    })?;
    if c.format != FORMAT {
        bail!(
            "{} has state format {}, this talos-sim reads format {FORMAT}",
            path.display(),
            c.format
        );
    }
    if c.nodes.len() != c.control_planes + c.workers || c.nodes.is_empty() {
        bail!(
            "{} is inconsistent: {} nodes for {} control planes and {} workers",
            path.display(),
            c.nodes.len(),
            c.control_planes,
            c.workers
        );
    }
    if let Some(n) = c.nodes.iter().enumerate().find(|(i, n)| n.index != *i) {
        bail!(
            "{} is inconsistent: node {} listed at position {}",
            path.display(),
            n.1.index,
            n.0
        );
    }
    Ok(Some(c))
}

/// Loads a config named in `state.json`, checking the name (no path escapes) and the digest.
pub fn read_config(dir: &Path, name: &str) -> Result<StoredConfig> {
    let digest = name
        .strip_prefix("configs/")
        .and_then(|n| n.strip_suffix(".yaml"))
        .filter(|d| d.len() == 64 && d.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| {
            anyhow!("state.json names config {name:?}; expected configs/<sha256>.yaml")
        })?;
    let path = dir.join(name);
    let raw = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    // The node accepted this config when it was applied; the newest release's types read what
    // any release accepted (the node's version may have changed since).
    let cfg = StoredConfig::parse(&raw, crate::mcfg::Release::V1_14)
        .map_err(|e| anyhow!("{} is not a machine config: {e}", path.display()))?;
    if cfg.digest != digest.to_ascii_lowercase() {
        bail!(
            "{} does not match its name (SHA-256 {})",
            path.display(),
            cfg.digest
        );
    }
    Ok(cfg)
}

/// The cluster layout a state file describes, as a [`SimConfig`] (runtime settings from `base`).
pub fn layout_config(c: &StoredCluster, base: &SimConfig) -> SimConfig {
    SimConfig {
        control_planes: c.control_planes,
        workers: c.workers,
        base_address: c.base_address,
        port: c.port,
        talos_version: c.talos_version.clone(),
        node_versions: c.node_versions.clone(),
        ..base.clone()
    }
}

#[derive(Default)]
struct Written {
    /// The last `state.json` bytes written (or read back at start).
    state: Vec<u8>,
    configs: BTreeSet<String>,
    /// The last write error, reported once rather than on every change.
    error: Option<String>,
    /// Held until [`Store::close`]: the flock that tells others this directory is served.
    lock: Option<File>,
}

/// An open state directory, locked for this simulator.
pub struct Store {
    dir: PathBuf,
    layout: SimConfig,
    /// Write the state; false keeps the cluster in memory (the directory holds the run file and
    /// the lock only).
    persist: bool,
    written: Mutex<Written>,
}

impl Store {
    /// Creates or opens `dir` and takes its lock; fails when another simulator serves it. With
    /// `persist` false the state is never written, and a directory that holds a stored cluster
    /// is refused rather than ignored.
    pub fn open(dir: &Path, persist: bool) -> Result<Store> {
        create_dir(dir, persist)?;
        let path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let who = read_run_info(dir)
                    .ok()
                    .flatten()
                    .map(|r| format!(" (pid {})", r.pid))
                    .unwrap_or_default();
                bail!(
                    "another talos-sim already serves {}{who}; stop it first with `talos-sim stop --state-dir {}`",
                    dir.display(),
                    dir.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                bail!("cannot lock {}: {e}", path.display())
            }
        }
        let existing = std::fs::read(dir.join(STATE_FILE)).unwrap_or_default();
        if !persist && !existing.is_empty() {
            bail!(
                "{} holds a stored cluster, which a cluster kept in memory would ignore: use another directory",
                dir.display()
            );
        }
        // Configs already on disk: known, and removed once nothing refers to them.
        let configs = std::fs::read_dir(dir.join(CONFIG_DIR))
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".yaml"))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Store {
            dir: dir.to_path_buf(),
            layout: SimConfig::default(),
            persist,
            written: Mutex::new(Written {
                state: existing,
                configs,
                error: None,
                lock: Some(lock),
            }),
        })
    }

    /// The layout recorded in `state.json` (node counts, first address, port, versions).
    pub fn with_layout(mut self, layout: &SimConfig) -> Store {
        self.layout = layout.clone();
        self
    }

    /// Whether the state is written to the directory (not an in-memory cluster).
    pub fn persists(&self) -> bool {
        self.persist
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn snapshot(&self, st: &State) -> StoredCluster {
        StoredCluster {
            format: FORMAT,
            control_planes: self.layout.control_planes,
            workers: self.layout.workers,
            base_address: self.layout.base_address,
            port: self.layout.port,
            talos_version: self.layout.talos_version.clone(),
            node_versions: self.layout.node_versions.clone(),
            reboot_downtime_ms: st.reboot_downtime.as_millis() as u64,
            etcd_members: st.etcd.as_ref().map(|m| {
                m.iter()
                    .map(|m| StoredMember {
                        node: m.node,
                        id: m.id,
                    })
                    .collect()
            }),
            health_fail: st.health_fail.clone(),
            nodes: st.nodes.iter().map(stored_node).collect(),
        }
    }

    /// Writes the state if it changed since the last write. Called with the state lock held, so
    /// writes happen in the order of the changes.
    pub fn save(&self, st: &State) {
        if !self.persist {
            return;
        }
        let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if w.lock.is_none() {
            return;
        }
        let Ok(bytes) = serde_json::to_vec_pretty(&self.snapshot(st)) else {
            return;
        };
        if w.state == bytes {
            return;
        }
        match self.write(st, &bytes, &mut w) {
            Ok(()) => {
                w.state = bytes;
                w.error = None;
            }
            Err(e) => {
                let text = format!("{e:#}");
                if w.error.as_deref() != Some(text.as_str()) {
                    eprintln!("talos-sim: cannot save the state: {text}");
                    w.error = Some(text);
                }
            }
        }
    }

    fn write(&self, st: &State, state: &[u8], w: &mut Written) -> Result<()> {
        let mut referenced = BTreeSet::new();
        for c in st
            .nodes
            .iter()
            .flat_map(|n| [n.active.as_ref(), n.persisted.as_ref()])
            .flatten()
        {
            let name = format!("{}.yaml", c.digest);
            if !w.configs.contains(&name) {
                let path = self.dir.join(CONFIG_DIR).join(&name);
                if !path.exists() {
                    write_atomic(&path, &c.raw)?;
                }
                w.configs.insert(name.clone());
            }
            referenced.insert(name);
        }
        write_atomic(&self.dir.join(STATE_FILE), state)?;
        // Only now are old configs unreferenced on disk too.
        let stale: Vec<String> = w.configs.difference(&referenced).cloned().collect();
        for name in stale {
            let _ = std::fs::remove_file(self.dir.join(CONFIG_DIR).join(&name));
            w.configs.remove(&name);
        }
        Ok(())
    }

    pub fn write_run_info(&self, control: Option<SocketAddr>) -> Result<()> {
        let info = RunInfo {
            pid: std::process::id(),
            control,
            block: crate::blocks::AddressBlocks::block_of(self.layout.base_address),
        };
        let bytes = serde_json::to_vec_pretty(&info)?;
        write_atomic(&self.dir.join(RUN_FILE), &bytes)
    }

    /// Stops writing and releases the directory (run file, then lock). Tasks of the stopped
    /// cluster that still hold its state can no longer touch the directory, which a new
    /// simulator may take over at once.
    pub fn close(&self) {
        let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let _ = std::fs::remove_file(self.dir.join(RUN_FILE));
        w.lock = None;
    }
}

/// What [`crate::state::Shared`] needs to rebuild the nodes of a stored cluster.
pub struct Restored {
    pub cluster: StoredCluster,
    /// Running and next-boot config per node.
    pub configs: Vec<(Option<StoredConfig>, Option<StoredConfig>)>,
}

/// Reads `state.json` and every config it names; None for a fresh directory.
pub fn load(dir: &Path) -> Result<Option<Restored>> {
    let Some(cluster) = read_cluster(dir)? else {
        return Ok(None);
    };
    let mut configs = Vec::new();
    for n in &cluster.nodes {
        let running = n
            .running_config
            .as_deref()
            .map(|c| read_config(dir, c))
            .transpose()
            .with_context(|| format!("node {}", n.index))?;
        let next = match (&n.next_boot_config, &running) {
            (Some(a), Some(r)) if *a == format!("{CONFIG_DIR}/{}.yaml", r.digest) => {
                Some(r.clone())
            }
            (Some(a), _) => Some(read_config(dir, a).with_context(|| format!("node {}", n.index))?),
            (None, _) => None,
        };
        configs.push((running, next));
    }
    Ok(Some(Restored { cluster, configs }))
}

impl EtcdMember {
    pub fn from_stored(m: &StoredMember) -> EtcdMember {
        EtcdMember::voting(m.node, m.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_cannot_leave_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "../state.json",
            "configs/../../etc/passwd",
            "configs/abc.yaml",
            "/etc/passwd",
        ] {
            let e = read_config(dir.path(), name).unwrap_err().to_string();
            assert!(e.contains("expected configs/<sha256>.yaml"), "{name}: {e}");
        }
    }

    #[test]
    fn a_config_must_match_its_digest() {
        let dir = tempfile::tempdir().unwrap();
        create_dir(dir.path(), true).unwrap();
        let name = format!("configs/{}.yaml", "a".repeat(64));
        std::fs::write(
            dir.path().join(&name),
            "version: v1alpha1\nmachine:\n  type: worker\n",
        )
        .unwrap();
        let e = format!("{:#}", read_config(dir.path(), &name).unwrap_err());
        assert!(e.contains("does not match its name"), "{e}");
    }

    #[test]
    fn state_files_are_checked_for_consistency() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_cluster(dir.path()).unwrap().is_none());
        let write = |text: &str| std::fs::write(dir.path().join(STATE_FILE), text).unwrap();
        write("not json");
        let e = format!("{:#}", read_cluster(dir.path()).unwrap_err());
        assert!(e.contains("is not a valid talos-sim state file"), "{e}");
        write(
            r#"{"format":1,"control_planes":2,"workers":0,"base_address":"127.0.10.1","port":1,
            "talos_version":"v1.13.6","reboot_downtime_ms":1,"etcd_members":null,
            "health_fail":null,"nodes":[]}"#,
        );
        let e = format!("{:#}", read_cluster(dir.path()).unwrap_err());
        assert!(e.contains("0 nodes for 2 control planes"), "{e}");
        write(r#"{"format":9}"#);
        assert!(read_cluster(dir.path()).is_err());
    }

    #[test]
    fn atomic_writes_leave_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(entries.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
