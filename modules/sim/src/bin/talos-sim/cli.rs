//! The command line: the flag-only run, the subcommands, and the flags they share.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};
use ferro_talos_sim::control::NodeRef;
use ferro_talos_sim::store::StoredCluster;
use ferro_talos_sim::{
    AddressBlocks, Backend, DrainTimes, EtcdBinaries, FaultKind, KubeBinaries, Kubernetes,
    SimConfig,
};

/// A real node refuses Bootstrap for a few seconds after boot (CRI not up, clock not synced);
/// the simulator's binary does the same by default, so clients have to retry as they must
/// against Talos.
pub const BOOTSTRAP_SETTLE_MS: u64 = 2000;

#[derive(Parser, Debug)]
#[command(
    name = "talos-sim",
    about = "A simulated Talos cluster (not Talos; only the RPCs ferro.talos calls)",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand: run a cluster that lives in memory and print
    /// `READY {"nodes":[...],"control":...}` once every node listens.
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a cluster whose state lives in --state-dir (or bring the stored one back) and serve
    /// it until stopped.
    Up(Box<UpArgs>),
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
        node: NodeRef,
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
    /// Send one control protocol request (JSON, e.g. '{"op":"health_fail","text":null}') to the
    /// running simulator and print its reply.
    Control {
        #[arg(long)]
        state_dir: PathBuf,
        /// The request: a JSON object with "op" (docs/talos-sim.md lists the ops).
        request: String,
    },
    /// Print the running simulator's Kubernetes view as JSON: Nodes, pods, and the log of the
    /// cordons, evictions and reboots its API server saw.
    Kube {
        #[arg(long)]
        state_dir: PathBuf,
    },
    /// Serve a small Talos Image Factory (schematics, versions, extensions, overlays) over plain
    /// HTTP until stopped; prints `READY {"url": ...}` once it listens.
    Factory {
        /// Where to listen, e.g. 127.0.250.9:0 (port 0 picks a free one).
        #[arg(long)]
        listen: SocketAddr,
        /// Stop once process PID has exited.
        #[arg(long, value_name = "PID")]
        parent_pid: Option<u32>,
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
pub struct RunArgs {
    #[command(flatten)]
    pub layout: Layout,
    #[command(flatten)]
    pub process: ProcessArgs,
}

/// `up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the cluster's state lives (created if missing).
    #[arg(long)]
    pub state_dir: PathBuf,
    #[command(flatten)]
    pub layout: Layout,
    #[command(flatten)]
    pub process: ProcessArgs,
    /// Run in the background (output in DIR/talos-sim.log); return once the cluster is ready.
    #[arg(long)]
    pub detach: bool,
    /// Keep the cluster in memory only: DIR then holds just run.json, the lock and the log, and
    /// nothing is left to bring back (the configs' secrets never reach the disk).
    #[arg(long)]
    pub in_memory: bool,
}

/// How the cluster is laid out, for the flag-only run and `up`. Every flag is optional, so `up`
/// can tell the flags given (which must agree with a stored cluster) from the defaults.
#[derive(Args, Debug, Default)]
pub struct Layout {
    /// Number of control-plane nodes, the first addresses [default: 1].
    #[arg(
        long = "controlplanes",
        visible_alias = "control-planes",
        value_name = "N"
    )]
    pub control_planes: Option<usize>,
    /// Number of worker nodes, the addresses after the control planes [default: 0].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Address of the first node; the others follow. Must be in 127.0.0.0/8. `auto`: 127.0.B.1
    /// in a free block B of --address-blocks [default: 127.0.10.1].
    #[arg(long, value_name = "ADDRESS|auto")]
    pub base_address: Option<BaseAddress>,
    /// With --base-address auto: the blocks B of 127.0.B.0/24 to choose from, e.g. 2-9,11-19
    /// [default: 11-249]. The first free one from a random start is taken; one another process
    /// takes meanwhile is skipped.
    #[arg(long, value_name = "LIST")]
    pub address_blocks: Option<AddressBlocks>,
    /// apid port of every node (0: a free port per node) [default: 50000].
    #[arg(long)]
    pub port: Option<u16>,
    /// Initial Talos version of every node, `v1.13.6` or `1.13.6` [default: v1.13.6].
    #[arg(long, value_name = "VERSION", value_parser = parse_version)]
    pub talos_version: Option<String>,
    /// Per-node initial version, INDEX=VERSION (repeatable), e.g. --node-version 2=v1.10.7.
    #[arg(long = "node-version", value_name = "INDEX=VERSION", value_parser = parse_node_version)]
    pub node_versions: Vec<(usize, String)>,
    /// How long a rebooting node is unreachable, in milliseconds [default: 1500; with a stored
    /// cluster, the stored one].
    #[arg(long, value_name = "MS")]
    pub reboot_downtime_ms: Option<u64>,
}

/// How the simulator process runs, for the flag-only run and `up`.
#[derive(Args, Debug)]
pub struct ProcessArgs {
    /// For how long after a node's services start Bootstrap is refused (FailedPrecondition, as
    /// on a real node whose CRI or clock is not ready yet), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = BOOTSTRAP_SETTLE_MS)]
    pub bootstrap_settle_ms: u64,
    /// How long Talos's own drain (before an upgrade, a shutdown or a graceful reset) may
    /// evict, in milliseconds [default: 300000, upstream's DrainTimeout].
    #[arg(long, value_name = "MS")]
    pub talos_drain_timeout_ms: Option<u64>,
    /// How long Talos's own drain waits for its Node to be cordoned, in milliseconds
    /// [default: 60000, upstream's].
    #[arg(long, value_name = "MS")]
    pub talos_cordon_timeout_ms: Option<u64>,
    /// How long Talos's own drain waits before it asks again for an eviction a budget refused,
    /// in milliseconds [default: 5000, upstream's].
    #[arg(long, value_name = "MS")]
    pub talos_eviction_retry_ms: Option<u64>,
    /// Serve the JSON-lines control protocol here (fault injection, inspection), e.g.
    /// 127.0.0.1:50999 or 127.0.0.1:0 for a free port [`up`: 127.0.0.1:0, recorded in
    /// DIR/run.json; flag-only: none].
    #[arg(long, value_name = "ADDRESS:PORT")]
    pub control_address: Option<SocketAddr>,
    /// Write the process id to this file.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Stop (as on SIGTERM) once process PID has exited: a test harness's simulators never
    /// outlive it, even when it is killed.
    #[arg(long, value_name = "PID")]
    pub parent_pid: Option<u32>,
    /// What plays etcd behind the control planes: the simulator's own model (fast), or a real
    /// etcd member per control plane (upstream's etcd, built by tools/etcd/build).
    #[arg(long, value_enum, default_value_t = BackendKind::Model)]
    pub backend: BackendKind,
    /// What answers the cluster's Kubernetes API: the simulator's model (fast), or upstream's
    /// kube-apiserver, kube-controller-manager and kube-scheduler on each control plane (built
    /// by tools/kube-apiserver/build; needs --backend real).
    #[arg(long, value_enum, default_value_t = BackendKind::Model)]
    pub kubernetes: BackendKind,
    /// With --backend real: the directory holding upstream's programs [default:
    /// $FERRO_UPSTREAM_DIR, else target/upstream].
    #[arg(long, value_name = "DIR")]
    pub upstream_dir: Option<PathBuf>,
}

/// `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    Model,
    Real,
}

impl ProcessArgs {
    /// The backend the flags ask for; for `real`, where its programs are.
    fn backend(&self) -> Backend {
        match self.backend {
            BackendKind::Model => Backend::Model,
            BackendKind::Real => Backend::Real(EtcdBinaries::in_dir(&self.upstream_dir())),
        }
    }

    fn upstream_dir(&self) -> PathBuf {
        self.upstream_dir.clone().unwrap_or_else(|| {
            std::env::var_os("FERRO_UPSTREAM_DIR")
                .map_or_else(|| PathBuf::from("target/upstream"), PathBuf::from)
        })
    }

    /// What the flags ask to answer the Kubernetes API.
    fn kubernetes(&self) -> Kubernetes {
        match self.kubernetes {
            BackendKind::Model => Kubernetes::Model,
            BackendKind::Real => Kubernetes::Real(KubeBinaries::in_dir(&self.upstream_dir())),
        }
    }

    /// Talos's drain times: the flags given, `upstream`'s for the others.
    fn talos_drain(&self, upstream: DrainTimes) -> DrainTimes {
        let ms = |flag: Option<u64>, d: Duration| flag.map_or(d, Duration::from_millis);
        DrainTimes {
            drain: ms(self.talos_drain_timeout_ms, upstream.drain),
            cordon: ms(self.talos_cordon_timeout_ms, upstream.cordon),
            retry: ms(self.talos_eviction_retry_ms, upstream.retry),
        }
    }
}

/// `--base-address`: an address, or `auto` for a free block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseAddress {
    At(Ipv4Addr),
    Auto,
}

impl std::str::FromStr for BaseAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(BaseAddress::Auto);
        }
        s.parse()
            .map(BaseAddress::At)
            .map_err(|_| format!("{s:?} is neither an IPv4 address nor `auto`"))
    }
}

/// The blocks `--base-address auto` chooses from without --address-blocks: all but 0
/// (127.0.0.1) and the demo's 10.
pub const DEFAULT_BLOCKS: &str = "11-249";

/// `v1.13.4` from `1.13.4` or `v1.13.4`.
pub fn parse_version(v: &str) -> Result<String, String> {
    let v = v.trim();
    let tagged = if v.starts_with('v') {
        v.to_string()
    } else {
        format!("v{v}")
    };
    ferro_talos_sim::version::parse(&tagged).map_err(|e| format!("{e:#}"))?;
    Ok(tagged)
}

fn parse_node_version(s: &str) -> Result<(usize, String), String> {
    let (i, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected INDEX=VERSION, got {s:?}"))?;
    let i = i
        .parse()
        .map_err(|_| format!("{i:?} is not a node index"))?;
    Ok((i, parse_version(v)?))
}

impl Layout {
    pub fn node_versions(&self) -> BTreeMap<usize, String> {
        self.node_versions.iter().cloned().collect()
    }

    /// The cluster these flags describe, with the defaults for those not given.
    pub fn config(&self, process: &ProcessArgs) -> Result<SimConfig> {
        let d = SimConfig::default();
        let address_blocks = match (self.base_address, &self.address_blocks) {
            (Some(BaseAddress::Auto), blocks) => Some(
                blocks
                    .clone()
                    .unwrap_or_else(|| DEFAULT_BLOCKS.parse().expect("the default blocks parse")),
            ),
            (_, Some(_)) => bail!("--address-blocks goes with --base-address auto"),
            (_, None) => None,
        };
        let base_address = match self.base_address {
            Some(BaseAddress::At(a)) => a,
            _ => d.base_address,
        };
        Ok(SimConfig {
            control_planes: self.control_planes.unwrap_or(d.control_planes),
            workers: self.workers.unwrap_or(d.workers),
            base_address,
            port: self.port.unwrap_or(d.port),
            talos_version: self.talos_version.clone().unwrap_or(d.talos_version),
            node_versions: self.node_versions(),
            reboot_downtime: self
                .reboot_downtime_ms
                .map_or(d.reboot_downtime, Duration::from_millis),
            bootstrap_settle: Duration::from_millis(process.bootstrap_settle_ms),
            talos_drain: process.talos_drain(d.talos_drain),
            control_address: process.control_address,
            state_dir: None,
            in_memory: false,
            address_blocks,
            backend: process.backend(),
            kubernetes: process.kubernetes(),
        })
    }

    /// The flags given that disagree with the stored cluster, as `--flag given (stored: x)`.
    /// The reboot downtime is no conflict: a flag overrides the stored one.
    pub fn conflicts(&self, c: &StoredCluster) -> Vec<String> {
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
            self.control_planes.map(|v| v.to_string()),
            c.control_planes.to_string(),
        );
        check(
            "workers",
            self.workers.map(|v| v.to_string()),
            c.workers.to_string(),
        );
        // `auto` is no conflict: the stored cluster keeps its addresses.
        let base = match self.base_address {
            Some(BaseAddress::At(a)) => Some(a.to_string()),
            _ => None,
        };
        check("base-address", base, c.base_address.to_string());
        check("port", self.port.map(|v| v.to_string()), c.port.to_string());
        check(
            "talos-version",
            self.talos_version.clone(),
            c.talos_version.clone(),
        );
        let versions = self.node_versions();
        if !versions.is_empty() && versions != c.node_versions {
            out.push(format!(
                "--node-version {versions:?} (stored: {:?})",
                c.node_versions
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn both_forms_share_the_layout_flags_and_defaults() {
        let run = Cli::parse_from(["talos-sim"]).run;
        let cfg = run.layout.config(&run.process).unwrap();
        assert_eq!(cfg.control_planes, 1);
        assert_eq!(cfg.workers, 0);
        assert_eq!(cfg.base_address, Ipv4Addr::new(127, 0, 10, 1));
        assert_eq!(cfg.port, 50000);
        assert_eq!(cfg.talos_version, "v1.13.6");
        assert_eq!(cfg.reboot_downtime, Duration::from_millis(1500));
        assert_eq!(cfg.bootstrap_settle, Duration::from_millis(2000));
        assert_eq!(cfg.control_address, None);
        assert_eq!(cfg.address_blocks, None);
        assert_eq!(cfg.talos_drain, DrainTimes::UPSTREAM);
        let run = Cli::parse_from([
            "talos-sim",
            "--talos-drain-timeout-ms",
            "2000",
            "--talos-eviction-retry-ms",
            "100",
        ])
        .run;
        let drain = run.layout.config(&run.process).unwrap().talos_drain;
        assert_eq!(
            drain,
            DrainTimes {
                drain: Duration::from_secs(2),
                retry: Duration::from_millis(100),
                ..DrainTimes::UPSTREAM
            }
        );

        let flags = [
            "--control-planes",
            "3",
            "--workers",
            "1",
            "--base-address",
            "127.0.30.1",
            "--talos-version",
            "1.12.0",
            "--node-version",
            "3=1.11.2",
        ];
        let run = Cli::parse_from(std::iter::once("talos-sim").chain(flags)).run;
        let Some(Command::Up(up)) = Cli::parse_from(
            ["talos-sim", "up", "--state-dir", "d"]
                .into_iter()
                .chain(flags),
        )
        .command
        else {
            panic!("not up");
        };
        for layout in [&run.layout, &up.layout] {
            let cfg = layout.config(&run.process).unwrap();
            assert_eq!((cfg.control_planes, cfg.workers), (3, 1));
            assert_eq!(cfg.talos_version, "v1.12.0");
            assert_eq!(cfg.node_versions[&3], "v1.11.2");
        }
        assert_eq!(up.layout.port, None, "not given, so no conflict");
    }

    #[test]
    fn auto_base_addresses_take_a_block_of_the_list() {
        let config = |args: &[&str]| {
            let run = Cli::try_parse_from(std::iter::once("talos-sim").chain(args.iter().copied()))
                .map_err(|e| e.to_string())?
                .run;
            run.layout.config(&run.process).map_err(|e| e.to_string())
        };
        let cfg = config(&["--base-address", "auto"]).unwrap();
        assert_eq!(cfg.address_blocks.unwrap().to_string(), DEFAULT_BLOCKS);
        let cfg = config(&["--base-address", "auto", "--address-blocks", "2-9,11-19"]).unwrap();
        assert_eq!(cfg.address_blocks.unwrap().blocks().len(), 17);
        let e = config(&["--address-blocks", "2-9"]).unwrap_err();
        assert!(e.contains("goes with --base-address auto"), "{e}");
        let e = config(&["--base-address", "somewhere"]).unwrap_err();
        assert!(e.contains("neither an IPv4 address nor `auto`"), "{e}");
        let e = config(&["--base-address", "auto", "--address-blocks", "0-3"]).unwrap_err();
        assert!(e.contains("1-254"), "{e}");
    }

    #[test]
    fn bad_versions_are_refused_while_parsing() {
        let e = Cli::try_parse_from(["talos-sim", "--node-version", "x=1.13.0"]).unwrap_err();
        assert!(e.to_string().contains("is not a node index"), "{e}");
        let e = Cli::try_parse_from(["talos-sim", "--node-version", "1.13.0"]).unwrap_err();
        assert!(e.to_string().contains("INDEX=VERSION"), "{e}");
        assert!(Cli::try_parse_from(["talos-sim", "--talos-version", "banana"]).is_err());
    }
}
