//! `talos-sim`: run a simulated Talos cluster until SIGTERM/SIGINT.
//!
//! Two ways to use it:
//! - flags only (tests, Molecule, `make demo`): `talos-sim --control-planes 3 ...` runs a cluster
//!   that lives in memory and prints `READY {"nodes":[...],"control":"addr"}` once every node
//!   listens;
//! - subcommands for a cluster kept in a state directory: `up`, `stop`, `status`, `fault`
//!   (see docs/talos-sim.md).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use ferro_talos_sim::store::{self, StoredCluster};
use ferro_talos_sim::{Cluster, FaultKind, SimConfig, run};
use serde_json::{Value, json};

/// A real node refuses Bootstrap for a few seconds after boot (CRI not up, clock not synced);
/// the simulator's binary does the same by default, so clients have to retry as they must
/// against Talos.
const BOOTSTRAP_SETTLE_MS: u64 = 2000;

#[derive(Parser, Debug)]
#[command(
    name = "talos-sim",
    about = "A simulated Talos cluster (not Talos; only the RPCs ferro.talos calls)",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a cluster whose state lives in --state-dir (or bring the stored one back) and serve
    /// it until stopped.
    Up(UpArgs),
    /// Stop the simulator serving --state-dir and wait until it has exited.
    Stop {
        #[arg(long)]
        state_dir: PathBuf,
        /// Give up waiting for the exit after this many seconds.
        #[arg(long, default_value_t = 30)]
        timeout_secs: u64,
    },
    /// Show every node's state: from the running simulator, else from the stored state.
    Status {
        #[arg(long)]
        state_dir: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Inject a fault into a node of the running simulator, or clear its faults.
    Fault {
        #[arg(long)]
        state_dir: PathBuf,
        /// Node index (0-based, control planes first) or address.
        #[arg(long)]
        node: String,
        /// The fault to switch on.
        #[arg(long, value_enum, required_unless_present = "clear")]
        kind: Option<FaultKind>,
        /// For --kind slow: how long every answer of the node is delayed.
        #[arg(long)]
        delay_ms: Option<u64>,
        /// Clear every fault of the node instead.
        #[arg(long, conflicts_with = "kind")]
        clear: bool,
    },
    /// Print the running simulator's Kubernetes view as JSON: Nodes, pods, and the log of the
    /// cordons, evictions and reboots its API server saw.
    Kube {
        #[arg(long)]
        state_dir: PathBuf,
    },
    /// Add a Deployment-like workload to the running simulator's Kubernetes (its pods go on the
    /// workers), with a PodDisruptionBudget when --min-available is given.
    Workload {
        #[arg(long)]
        state_dir: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "default")]
        namespace: String,
        #[arg(long, default_value_t = 2)]
        replicas: u32,
        #[arg(long)]
        min_available: Option<u32>,
    },
}

/// The flag-only invocation (cluster in memory).
#[derive(Args, Debug)]
struct RunArgs {
    /// Number of control-plane nodes (first addresses).
    #[arg(long, default_value_t = 1)]
    control_planes: usize,
    /// Number of worker nodes (addresses after the control planes).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Address of the first node; the others follow. Must be in 127.0.0.0/8.
    #[arg(long, default_value = "127.0.10.1")]
    base_address: Ipv4Addr,
    /// apid port of every node.
    #[arg(long, default_value_t = 50000)]
    port: u16,
    /// Initial Talos version of every node (`v1.13.6` or `1.13.6`).
    #[arg(long, default_value = "v1.13.6")]
    talos_version: String,
    /// Per-node initial version, INDEX=VERSION (repeatable), e.g. --node-version 2=v1.10.7.
    #[arg(long = "node-version", value_name = "INDEX=VERSION")]
    node_versions: Vec<String>,
    /// How long a rebooting node is unreachable, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    reboot_downtime_ms: u64,
    /// For how long after a node's services start Bootstrap is refused (FailedPrecondition, as
    /// on a real node whose CRI or clock is not ready yet), in milliseconds.
    #[arg(long, default_value_t = BOOTSTRAP_SETTLE_MS)]
    bootstrap_settle_ms: u64,
    /// Serve the JSON-lines control protocol here (fault injection, inspection), e.g. 127.0.0.1:50999.
    #[arg(long)]
    control_address: Option<SocketAddr>,
    /// Write the process id to this file.
    #[arg(long)]
    pid_file: Option<PathBuf>,
}

/// `up`: layout flags are optional so that, with a stored cluster, only flags actually given
/// can conflict with it.
#[derive(Args, Debug)]
struct UpArgs {
    /// Where the cluster's state lives (created if missing).
    #[arg(long)]
    state_dir: PathBuf,
    /// Number of control-plane nodes [default: 1].
    #[arg(long, visible_alias = "control-planes")]
    controlplanes: Option<usize>,
    /// Number of worker nodes [default: 0].
    #[arg(long)]
    workers: Option<usize>,
    /// Address of the first node [default: 127.0.10.1].
    #[arg(long)]
    base_address: Option<Ipv4Addr>,
    /// apid port of every node [default: 50000].
    #[arg(long)]
    port: Option<u16>,
    /// Initial Talos version of every node [default: v1.13.6].
    #[arg(long)]
    talos_version: Option<String>,
    /// Per-node initial version, INDEX=VERSION (repeatable).
    #[arg(long = "node-version", value_name = "INDEX=VERSION")]
    node_versions: Vec<String>,
    /// How long a rebooting node is unreachable, in milliseconds [default: 1500, or the stored one].
    #[arg(long)]
    reboot_downtime_ms: Option<u64>,
    /// For how long after a node's services start Bootstrap is refused, in milliseconds.
    #[arg(long, default_value_t = BOOTSTRAP_SETTLE_MS)]
    bootstrap_settle_ms: u64,
    /// Control protocol address [default: 127.0.0.1 on a free port]; recorded in DIR/run.json.
    #[arg(long)]
    control_address: Option<SocketAddr>,
    /// Also write the process id to this file.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// Run in the background (output in DIR/talos-sim.log); return once the cluster is ready.
    #[arg(long)]
    detach: bool,
}

/// `v1.13.4` from `1.13.4` or `v1.13.4`.
fn normalize_version(v: &str) -> Result<String> {
    let v = v.trim();
    let tagged = if v.starts_with('v') {
        v.to_string()
    } else {
        format!("v{v}")
    };
    ferro_talos_sim::version::parse(&tagged)?;
    Ok(tagged)
}

fn parse_node_versions(items: &[String]) -> Result<BTreeMap<usize, String>> {
    items
        .iter()
        .map(|s| {
            let (i, v) = s
                .split_once('=')
                .ok_or_else(|| anyhow!("--node-version expects INDEX=VERSION, got {s:?}"))?;
            let i: usize = i
                .parse()
                .with_context(|| format!("--node-version: {i:?} is not a node index"))?;
            Ok((i, normalize_version(v)?))
        })
        .collect()
}

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

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run_flags(cli.run),
        Some(Command::Up(a)) => up(a),
        Some(Command::Stop {
            state_dir,
            timeout_secs,
        }) => stop(&state_dir, Duration::from_secs(timeout_secs)),
        Some(Command::Status { state_dir, json }) => status(&state_dir, json),
        Some(Command::Fault {
            state_dir,
            node,
            kind,
            delay_ms,
            clear,
        }) => fault(&state_dir, &node, kind, delay_ms, clear),
        Some(Command::Kube { state_dir }) => running_control(&state_dir, &json!({"op": "kube"}))
            .map(|mut reply| {
                if let Some(o) = reply.as_object_mut() {
                    o.remove("ok");
                }
                println!("{reply}");
            }),
        Some(Command::Workload {
            state_dir,
            name,
            namespace,
            replicas,
            min_available,
        }) => running_control(
            &state_dir,
            &json!({"op": "workload", "name": name, "namespace": namespace,
                    "replicas": replicas, "min_available": min_available}),
        )
        .map(|_| println!("ok")),
    };
    if let Err(e) = result {
        eprintln!("talos-sim: {e:#}");
        std::process::exit(1);
    }
}

fn ready_line(cluster: &Cluster) -> String {
    let ready = json!({
        "nodes": cluster.nodes(),
        "control": cluster.control_address().map(|a| a.to_string()),
    });
    format!("READY {ready}")
}

/// Runs `cfg` until SIGTERM/SIGINT or the control `stop` op; `on_ready` prints what the caller
/// wants once every node listens.
fn serve(cfg: SimConfig, pid_file: Option<&Path>, on_ready: impl FnOnce(&Cluster)) -> Result<()> {
    if let Some(p) = pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing pid file {}", p.display()))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(run(cfg, on_ready, shutdown_signal()));
    // Connection tasks may still be winding down; do not wait for them.
    rt.shutdown_timeout(Duration::from_millis(200));
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
    result
}

fn run_flags(args: RunArgs) -> Result<()> {
    let cfg = SimConfig {
        control_planes: args.control_planes,
        workers: args.workers,
        base_address: args.base_address,
        port: args.port,
        talos_version: normalize_version(&args.talos_version)?,
        node_versions: parse_node_versions(&args.node_versions)?,
        reboot_downtime: Duration::from_millis(args.reboot_downtime_ms),
        bootstrap_settle: Duration::from_millis(args.bootstrap_settle_ms),
        control_address: args.control_address,
        state_dir: None,
    };
    serve(cfg, args.pid_file.as_deref(), |cluster| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", ready_line(cluster));
        let _ = out.flush();
    })
}

/// Flags of `up` that disagree with the stored cluster, as `--flag given (stored x)`.
fn conflicts(
    a: &UpArgs,
    c: &StoredCluster,
    versions: &BTreeMap<usize, String>,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut check = |flag: &str, given: Option<String>, stored: String| {
        if let Some(g) = given
            && g != stored
        {
            out.push(format!("--{flag} {g} (stored: {stored})"));
        }
    };
    check(
        "controlplanes",
        a.controlplanes.map(|v| v.to_string()),
        c.control_planes.to_string(),
    );
    check(
        "workers",
        a.workers.map(|v| v.to_string()),
        c.workers.to_string(),
    );
    check(
        "base-address",
        a.base_address.map(|v| v.to_string()),
        c.base_address.to_string(),
    );
    check("port", a.port.map(|v| v.to_string()), c.port.to_string());
    check(
        "talos-version",
        a.talos_version
            .as_deref()
            .map(normalize_version)
            .transpose()?,
        c.talos_version.clone(),
    );
    if !versions.is_empty() && *versions != c.node_versions {
        out.push(format!(
            "--node-version {versions:?} (stored: {:?})",
            c.node_versions
        ));
    }
    Ok(out)
}

fn up(a: UpArgs) -> Result<()> {
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
    let node_versions = parse_node_versions(&a.node_versions)?;
    let stored = store::read_cluster(&dir)?;
    if let Some(c) = &stored {
        let bad = conflicts(&a, c, &node_versions)?;
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
    let defaults = SimConfig::default();
    let cfg = SimConfig {
        control_planes: a.controlplanes.unwrap_or(defaults.control_planes),
        workers: a.workers.unwrap_or(defaults.workers),
        base_address: a.base_address.unwrap_or(defaults.base_address),
        port: a.port.unwrap_or(defaults.port),
        talos_version: match &a.talos_version {
            Some(v) => normalize_version(v)?,
            None => defaults.talos_version,
        },
        node_versions,
        reboot_downtime: a
            .reboot_downtime_ms
            .map(Duration::from_millis)
            .unwrap_or(defaults.reboot_downtime),
        bootstrap_settle: Duration::from_millis(a.bootstrap_settle_ms),
        // stop/status/fault need a control port.
        control_address: Some(
            a.control_address
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
        ),
        state_dir: Some(dir.clone()),
    };
    let restored = stored.is_some();
    let downtime = a.reboot_downtime_ms.map(Duration::from_millis);
    serve(cfg, a.pid_file.as_deref(), |cluster| {
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
    store::create_dir(dir)?;
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
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request on the control port of the simulator serving `dir`.
fn control(dir: &Path, req: &Value) -> Result<Value> {
    let info = store::read_run_info(dir)?.ok_or_else(|| {
        anyhow!(
            "{} has no run.json: no talos-sim is serving it",
            dir.display()
        )
    })?;
    let addr = info.control.ok_or_else(|| {
        anyhow!(
            "the talos-sim serving {} has no control port",
            dir.display()
        )
    })?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .with_context(|| format!("cannot reach the control port {addr} (pid {})", info.pid))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(format!("{req}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .with_context(|| format!("no answer on the control port {addr}"))?;
    let reply: Value = serde_json::from_str(&line)
        .with_context(|| format!("the control port {addr} answered {line:?}"))?;
    if reply["ok"] != Value::Bool(true) {
        bail!(
            "{}",
            reply["error"]
                .as_str()
                .unwrap_or("the simulator refused the request")
        );
    }
    Ok(reply)
}

fn nothing_runs(dir: &Path) -> anyhow::Error {
    anyhow!(
        "no talos-sim is running from {} (start one with `talos-sim up --state-dir {0}`)",
        dir.display()
    )
}

fn stop(dir: &Path, timeout: Duration) -> Result<()> {
    if !store::is_running(dir)? {
        return Err(nothing_runs(dir));
    }
    let info = store::read_run_info(dir)?;
    let pid = info.as_ref().map(|i| i.pid);
    if let Err(e) = control(dir, &json!({"op": "stop"})) {
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
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "talos-sim: stopped{}; state kept in {}",
        pid.map_or(String::new(), |p| format!(" (pid {p})")),
        dir.display()
    );
    Ok(())
}

/// One control request to the simulator serving `dir`.
fn running_control(dir: &Path, req: &Value) -> Result<Value> {
    if !store::is_running(dir)? {
        return Err(nothing_runs(dir));
    }
    control(dir, req)
}

fn fault(
    dir: &Path,
    node: &str,
    kind: Option<FaultKind>,
    delay_ms: Option<u64>,
    clear: bool,
) -> Result<()> {
    if !store::is_running(dir)? {
        return Err(nothing_runs(dir));
    }
    let node = match node.parse::<u64>() {
        Ok(i) => json!(i),
        Err(_) => json!(node),
    };
    let req = if clear {
        json!({"op": "clear_faults", "node": node})
    } else {
        let mut r = json!({"op": "fault", "node": node, "kind": kind.map(FaultKind::name)});
        if let Some(ms) = delay_ms {
            r["delay_ms"] = json!(ms);
        }
        r
    };
    control(dir, &req)?;
    println!("ok");
    Ok(())
}

/// One node as `status` shows it, from a running simulator or from the state file.
fn node_view_running(n: &Value) -> Value {
    let up = n["up"].as_bool().unwrap_or(false);
    let state = if up && n["listening"].as_bool().unwrap_or(false) {
        "up"
    } else if up {
        "unreachable"
    } else if n["faults"]["never_return"].as_bool().unwrap_or(false) {
        "down"
    } else {
        "rebooting"
    };
    let faults: ferro_talos_sim::Faults =
        serde_json::from_value(n["faults"].clone()).unwrap_or_default();
    json!({
        "index": n["index"],
        "address": format!("{}:{}", n["address"].as_str().unwrap_or("?"), n["port"]),
        "role": n["role"],
        "mode": if n["maintenance"].as_bool().unwrap_or(true) { "maintenance" } else { "configured" },
        "version": n["version"],
        "pending_version": n["pending_version"],
        "state": state,
        "etcd_member": n["etcd_member"],
        "faults": n["faults"],
        "faults_text": faults.describe(),
    })
}

fn view_stored(c: &StoredCluster) -> Vec<Value> {
    c.nodes
        .iter()
        .map(|n| {
            let member = c.etcd_members.iter().flatten().any(|m| m.node == n.index);
            json!({
                "index": n.index,
                "address": format!("{}:{}", n.address, n.port),
                "role": n.role,
                "mode": if n.running_config.is_some() { "configured" } else { "maintenance" },
                "version": n.version,
                "pending_version": n.pending_version,
                "state": "stopped",
                "etcd_member": member,
                "faults": n.faults,
                "faults_text": n.faults.describe(),
            })
        })
        .collect()
}

fn status(dir: &Path, as_json: bool) -> Result<()> {
    let running = store::is_running(dir)?;
    let report = if running {
        let info = store::read_run_info(dir)?;
        let reply = control(dir, &json!({"op": "status"})).with_context(|| {
            format!(
                "a talos-sim holds {} (pid {}) but does not answer",
                dir.display(),
                info.as_ref().map_or("?".into(), |i| i.pid.to_string())
            )
        })?;
        let nodes: Vec<Value> = reply["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(node_view_running)
            .collect();
        json!({
            "running": true,
            "state_dir": dir.display().to_string(),
            "pid": reply["pid"],
            "control": info.and_then(|i| i.control).map(|a| a.to_string()),
            "bootstrapped": reply["bootstrapped"],
            "etcd_members": reply["etcd_members"],
            "health_fail": reply["health_fail"],
            "nodes": nodes,
        })
    } else {
        let c = store::read_cluster(dir)?.ok_or_else(|| {
            anyhow!(
                "no talos-sim state in {} (create one with `talos-sim up --state-dir {0}`)",
                dir.display()
            )
        })?;
        json!({
            "running": false,
            "state_dir": dir.display().to_string(),
            "pid": null,
            "control": null,
            "bootstrapped": c.etcd_members.is_some(),
            "etcd_members": c.etcd_members.as_ref().map_or(0, Vec::len),
            "health_fail": c.health_fail,
            "nodes": view_stored(&c),
        })
    };
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print!("{}", render_status(&report));
    Ok(())
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

fn render_status(r: &Value) -> String {
    let mut out = String::new();
    if r["running"] == Value::Bool(true) {
        out.push_str(&format!(
            "talos-sim: running (pid {}, control {}), state in {}\n",
            text(&r["pid"]),
            text(&r["control"]),
            text(&r["state_dir"])
        ));
    } else {
        out.push_str(&format!(
            "talos-sim: stopped; stored state in {} (start it with `talos-sim up --state-dir {}`)\n",
            text(&r["state_dir"]),
            text(&r["state_dir"])
        ));
    }
    if r["bootstrapped"] == Value::Bool(true) {
        out.push_str(&format!(
            "etcd: bootstrapped, {} member(s)\n",
            text(&r["etcd_members"])
        ));
    } else {
        out.push_str("etcd: not bootstrapped\n");
    }
    if let Some(h) = r["health_fail"].as_str() {
        out.push_str(&format!("health check: failing ({h})\n"));
    }
    let header = [
        "NODE", "ADDRESS", "ROLE", "MODE", "VERSION", "STATE", "ETCD", "FAULTS",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for n in r["nodes"].as_array().into_iter().flatten() {
        let version = match n["pending_version"].as_str() {
            Some(p) => format!("{} (next boot {p})", text(&n["version"])),
            None => text(&n["version"]),
        };
        rows.push(vec![
            text(&n["index"]),
            text(&n["address"]),
            text(&n["role"]),
            text(&n["mode"]),
            version,
            text(&n["state"]),
            if n["etcd_member"] == Value::Bool(true) {
                "member".into()
            } else {
                "-".into()
            },
            text(&n["faults_text"]),
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
