//! One real etcd member as a child process: its command line, start and stop.
//!
//! The flags are the ones Talos's etcd service passes on a control plane
//! (`argsForControlPlane` in `internal/app/machined/pkg/system/services/etcd.go` @ v1.14.1),
//! but over plain HTTP on the node's loopback address: talos-sim has no etcd PKI of its own, and
//! nothing a module sees of etcd goes over etcd's own TLS (they ask Talos's API).

use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The etcd client and peer ports Talos uses (`EtcdClientPort`, `EtcdPeerPort` in
/// pkg/machinery/constants/constants.go @ v1.14.1).
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

pub fn peer_url(ip: Ipv4Addr) -> String {
    format!("http://{ip}:{PEER_PORT}")
}

pub fn client_url(ip: Ipv4Addr) -> String {
    format!("http://{ip}:{CLIENT_PORT}")
}

/// How a member that has no data yet starts (`--initial-cluster-state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialCluster {
    /// Its data directory already holds a member: etcd ignores the initial-cluster flags.
    FromData,
    /// Bootstrap: a cluster of this one member.
    New,
    /// A join: the `name=peer-url` list etcd answered the member add with.
    Existing(String),
}

/// One member's identity on the simulated node.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub name: String,
    pub ip: Ipv4Addr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

/// Whether etcd's data directory holds a member (`member/` exists), as Talos checks it is
/// empty (`IsDirEmpty` in services/etcd.go) before it builds the initial-cluster flags.
pub fn has_data(data_dir: &Path) -> bool {
    data_dir.join("member").is_dir()
}

/// Starts etcd for `spec`. The child gets SIGKILL when the thread that starts it ends (the
/// supervisor thread lives as long as the simulator), so a simulator killed by a signal leaves
/// no etcd behind.
pub fn start(etcd: &Path, spec: &MemberSpec, initial: &InitialCluster) -> std::io::Result<Child> {
    std::fs::create_dir_all(&spec.data_dir)?;
    let log = open_log(&spec.log)?;
    let mut cmd = Command::new(etcd);
    cmd.arg("--name")
        .arg(&spec.name)
        .arg("--data-dir")
        .arg(&spec.data_dir)
        .arg("--listen-client-urls")
        .arg(client_url(spec.ip))
        .arg("--advertise-client-urls")
        .arg(client_url(spec.ip))
        .arg("--listen-peer-urls")
        .arg(peer_url(spec.ip))
        .arg("--initial-advertise-peer-urls")
        .arg(peer_url(spec.ip))
        // Talos's own (services/etcd.go @ v1.14.1).
        .arg("--feature-gates=InitialCorruptCheck=true,CompactHashCheck=true")
        .arg("--watch-progress-notify-interval=5s")
        .arg("--log-level=warn");
    match initial {
        InitialCluster::FromData => {}
        InitialCluster::New => {
            cmd.arg("--initial-cluster")
                .arg(format!("{}={}", spec.name, peer_url(spec.ip)))
                .arg("--initial-cluster-state=new");
        }
        InitialCluster::Existing(list) => {
            cmd.arg("--initial-cluster")
                .arg(list)
                .arg("--initial-cluster-state=existing");
        }
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    dies_with_parent(&mut cmd);
    cmd.spawn()
}

/// The child `cmd` starts is killed when the thread that starts it ends (`PR_SET_PDEATHSIG`),
/// so a simulator or test killed by a signal leaves no server behind. Start it from a thread
/// that lives as long as the child should.
pub fn dies_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn open_log(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// How long a program has to end after SIGTERM before SIGKILL. etcd uses nearly all of it while
/// clients hold watches (its servers' graceful stop waits up to the request timeout, 5 s and
/// two election timeouts: `embed/etcd.go` @ v3.7.1), which a Kubernetes API server always does.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Asks a child to end, as Talos's service runner does first: SIGTERM.
pub fn terminate(child: &Child) {
    // SAFETY: the pid is our own child's, not reaped yet (the caller still owns the Child).
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
}

/// Whether a child has ended; one past `kill_at` is killed and reaped now.
pub fn ended_or_killed(child: &mut Child, kill_at: Instant) -> bool {
    if !matches!(child.try_wait(), Ok(None)) {
        return true;
    }
    if Instant::now() < kill_at {
        return false;
    }
    let _ = child.kill();
    let _ = child.wait();
    true
}

/// Stops children as Talos's service runner does, all at once: SIGTERM, then SIGKILL for those
/// still running after [`STOP_GRACE`].
pub fn stop_all(mut children: Vec<Child>) {
    children.iter().for_each(terminate);
    let kill_at = Instant::now() + STOP_GRACE;
    while !children.is_empty() {
        children.retain_mut(|c| !ended_or_killed(c, kill_at));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs etcdutl (`snapshot status`, `snapshot restore`): Ok, or what it said it failed with
/// (its `Error: ` prefix dropped, as Talos wraps the library's error).
pub fn etcdutl(etcdutl: &Path, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = Command::new(etcdutl)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", etcdutl.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("Error: "))
        .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("etcdutl failed");
    Err(line.trim_start_matches("Error: ").trim().to_owned())
}
