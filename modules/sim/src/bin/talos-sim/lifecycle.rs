//! Running the simulator and stopping it: the flag-only run, `up` (in the foreground or
//! detached), `stop`, and how the other subcommands find the simulator serving a state
//! directory.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use ferro_talos_sim::control::{ControlClient, Ready, Request};
use ferro_talos_sim::store;
use ferro_talos_sim::{Cluster, SimConfig, run};

use crate::cli::{ProcessArgs, RunArgs, UpArgs};

/// How often `up --detach` and `stop` look whether the simulator is ready or gone.
const POLL: Duration = Duration::from_millis(2);

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers, run until killed.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}

fn ready_line(cluster: &Cluster) -> String {
    let ready = Ready {
        nodes: cluster.nodes(),
        control: cluster.control_address(),
    };
    format!(
        "READY {}",
        serde_json::to_string(&ready).expect("READY serializes")
    )
}

/// Process `pid`'s start time (field 22 of /proc/PID/stat), which tells it from a later
/// process given the same pid; None once it has exited (or is a zombie).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: field 3 (the state) onwards.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    if matches!(fields.first(), Some(&("Z" | "X"))) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Resolves once process `pid`, started at `started`, has exited.
async fn exited(pid: u32, started: u64) {
    while process_start(pid) == Some(started) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Not eprintln!: a closed stderr must not keep the simulator from stopping cleanly.
    let _ = writeln!(
        std::io::stderr(),
        "talos-sim: process {pid} (--parent-pid) has exited; stopping"
    );
}

/// Runs `cfg` until SIGTERM/SIGINT, the control `stop` op or the exit of --parent-pid;
/// `on_ready` prints what the caller wants once every node listens.
fn serve(cfg: SimConfig, process: &ProcessArgs, on_ready: impl FnOnce(&Cluster)) -> Result<()> {
    let parent = process
        .parent_pid
        .map(|pid| {
            process_start(pid)
                .map(|started| (pid, started))
                .ok_or_else(|| anyhow!("--parent-pid {pid}: no such process (in /proc)"))
        })
        .transpose()?;
    let pid_file = process.pid_file.as_deref();
    if let Some(p) = pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing pid file {}", p.display()))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let shutdown = async move {
        match parent {
            Some((pid, started)) => tokio::select! {
                _ = shutdown_signal() => {},
                _ = exited(pid, started) => {},
            },
            None => shutdown_signal().await,
        }
    };
    let result = rt.block_on(run(cfg, on_ready, shutdown));
    // Connection tasks may still be winding down; do not wait for them.
    rt.shutdown_timeout(Duration::from_millis(200));
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
    result
}

/// The flag-only run: a cluster in memory, announced by its READY line only.
pub fn run_flags(args: RunArgs) -> Result<()> {
    let cfg = args.layout.config(&args.process)?;
    serve(cfg, &args.process, |cluster| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", ready_line(cluster));
        let _ = out.flush();
    })
}

pub fn up(a: UpArgs) -> Result<()> {
    let dir = a.state_dir.clone();
    if store::is_running(&dir)? {
        let pid = store::read_run_info(&dir)
            .ok()
            .flatten()
            .map(|r| format!(" (pid {})", r.pid))
            .unwrap_or_default();
        bail!(
            "a talos-sim already serves {}{pid}; see `talos-sim status --state-dir {0}` or stop it with `talos-sim stop --state-dir {0}`",
            dir.display()
        );
    }
    if a.in_memory && dir.join(store::STATE_FILE).exists() {
        bail!(
            "{} holds a stored cluster, which --in-memory would ignore: use another directory, or leave --in-memory out to bring it back",
            dir.display()
        );
    }
    let stored = store::read_cluster(&dir)?;
    if let Some(c) = &stored {
        let bad = a.layout.conflicts(c);
        if !bad.is_empty() {
            bail!(
                "{} already holds a cluster ({} control plane(s), {} worker(s) from {}, port {}, Talos {}); \
                 these flags disagree with it: {}. Leave them out to bring the stored cluster back, \
                 or use another --state-dir",
                dir.display(),
                c.control_planes,
                c.workers,
                c.base_address,
                c.port,
                c.talos_version,
                bad.join(", ")
            );
        }
    }
    if a.detach {
        return detach(&dir);
    }
    let cfg = SimConfig {
        // stop/status/fault need a control port.
        control_address: Some(
            a.process
                .control_address
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
        ),
        state_dir: Some(dir.clone()),
        in_memory: a.in_memory,
        ..a.layout.config(&a.process)?
    };
    let restored = stored.is_some();
    let downtime = a.layout.reboot_downtime_ms.map(Duration::from_millis);
    serve(cfg, &a.process, |cluster| {
        if let Some(d) = downtime {
            // An explicit flag wins over the stored downtime.
            cluster.set_reboot_downtime(d);
        }
        let mut out = std::io::stdout().lock();
        let what = if restored {
            "brought back the cluster stored in"
        } else {
            "started a new cluster in"
        };
        let _ = writeln!(out, "talos-sim: {what} {}", dir.display());
        for n in cluster.nodes() {
            let _ = writeln!(
                out,
                "  node {}  {:<12}  {}:{}  {:<11}  {}",
                n.index,
                n.role,
                n.address,
                n.port,
                if n.maintenance {
                    "maintenance"
                } else {
                    "configured"
                },
                n.version
            );
        }
        if let Some(c) = cluster.control_address() {
            let _ = writeln!(out, "control: {c}  pid: {}", std::process::id());
        }
        let _ = writeln!(
            out,
            "stop with: talos-sim stop --state-dir {}",
            dir.display()
        );
        let _ = writeln!(out, "{}", ready_line(cluster));
        let _ = out.flush();
    })
}

/// `up --detach`: run the same `up` in a new process group with its output in
/// DIR/talos-sim.log, and return once it printed READY (or failed).
fn detach(dir: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;
    store::create_dir(dir, false)?;
    let log_path = dir.join("talos-sim.log");
    let log = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let args: Vec<_> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--detach")
        .collect();
    let exe = std::env::current_exe().context("cannot find the talos-sim executable")?;
    let mut child = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal does not reach it.
        .process_group(0)
        .spawn()
        .context("cannot start talos-sim in the background")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.lines().any(|l| l.starts_with("READY ")) {
            print!("{text}");
            println!(
                "running in the background (pid {}); log: {}",
                child.id(),
                log_path.display()
            );
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the background talos-sim exited ({status}) before it was ready:\n{}",
                text.trim_end()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "the background talos-sim (pid {}) was not ready after 60 s; see {}",
                child.id(),
                log_path.display()
            );
        }
        std::thread::sleep(POLL);
    }
}

fn nothing_runs(dir: &Path) -> anyhow::Error {
    anyhow!(
        "no talos-sim is running from {} (start one with `talos-sim up --state-dir {0}`)",
        dir.display()
    )
}

/// The simulator serving a state directory, as its run.json records it.
pub struct Running {
    pub client: ControlClient,
    pub pid: u32,
    /// B when the nodes started at 127.0.B.1.
    pub block: Option<u8>,
}

/// The simulator serving `dir`, from its run.json, without checking that it still runs.
fn recorded(dir: &Path) -> Result<Running> {
    let info = store::read_run_info(dir)?.ok_or_else(|| {
        anyhow!(
            "{} has no run.json: no talos-sim is serving it",
            dir.display()
        )
    })?;
    let addr = info.control.ok_or_else(|| {
        anyhow!(
            "the talos-sim serving {} (pid {}) has no control port",
            dir.display(),
            info.pid
        )
    })?;
    Ok(Running {
        client: ControlClient::new(addr),
        pid: info.pid,
        block: info.block,
    })
}

/// The simulator serving `dir`; an error when none runs.
pub fn running(dir: &Path) -> Result<Running> {
    if !store::is_running(dir)? {
        return Err(nothing_runs(dir));
    }
    recorded(dir)
}

pub fn stop(dir: &Path, timeout: Duration) -> Result<()> {
    if !store::is_running(dir)? {
        return Err(nothing_runs(dir));
    }
    let pid = store::read_run_info(dir)?.map(|i| i.pid);
    let asked = recorded(dir).and_then(|r| r.client.send(&Request::Stop));
    if let Err(e) = asked {
        // The control port is gone or hangs: fall back to SIGTERM.
        let Some(pid) = pid else {
            return Err(e.context("and no pid is recorded"));
        };
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !sent {
            bail!("cannot stop pid {pid}: the control port failed ({e:#}) and kill failed");
        }
    }
    let deadline = Instant::now() + timeout;
    while store::is_running(dir)? {
        if Instant::now() > deadline {
            bail!(
                "the talos-sim serving {} (pid {}) did not exit within {} s",
                dir.display(),
                pid.map_or("?".into(), |p| p.to_string()),
                timeout.as_secs()
            );
        }
        std::thread::sleep(POLL);
    }
    let kept = if dir.join(store::STATE_FILE).exists() {
        format!("; state kept in {}", dir.display())
    } else {
        String::new()
    };
    println!(
        "talos-sim: stopped{}{kept}",
        pid.map_or(String::new(), |p| format!(" (pid {p})"))
    );
    Ok(())
}

/// `talos-sim factory`: the test Image Factory until SIGTERM/SIGINT or the exit of --parent-pid.
pub fn factory(listen: std::net::SocketAddr, parent_pid: Option<u32>) -> Result<()> {
    let parent = parent_pid
        .map(|pid| {
            process_start(pid)
                .map(|started| (pid, started))
                .ok_or_else(|| anyhow!("--parent-pid {pid}: no such process (in /proc)"))
        })
        .transpose()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = ferro_talos_sim::factory::FactoryServer::start(listen).await?;
        let ready = serde_json::json!({"url": server.url()});
        let _ = writeln!(std::io::stdout(), "READY {ready}");
        let _ = std::io::stdout().flush();
        match parent {
            Some((pid, started)) => tokio::select! {
                _ = shutdown_signal() => {},
                _ = exited(pid, started) => {},
            },
            None => shutdown_signal().await,
        }
        server.stop();
        Ok(())
    })
}
