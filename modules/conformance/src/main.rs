//! `ferro-talos-conformance`: asks a Talos cluster everything the ferro.talos modules ask, without
//! changing anything, and prints what it answered as JSON with node-specific values normalised.
//! `tools/conformance` runs it against a real cluster and against a talos-sim cluster of the same
//! layout and compares the two (docs/talos-fidelity.md, "Conformance run").
//!
//! Read-only by construction: the RPCs are reads and dry runs, and every module runs in check mode
//! (`check_mode.rs` refuses to start one otherwise). The one exception is the maintenance-mode
//! run (`--maintenance-node`, `maintenance.rs`), which takes a spare machine through a config,
//! bootstrap and a reset, and only with `--i-understand-this-wipes-the-node`.

mod check_mode;
mod dry_runs;
mod files;
mod layout;
mod maintenance;
mod modules;
mod normalise;
mod record;
mod rpcs;
mod session;
mod shape;
mod timeline;
mod wire_shape;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Parser;
use ferro_talos_client::{Credentials, read_talosconfig, select_context};
use serde_json::json;

use crate::layout::Node;
use crate::modules::{Connection, ModuleProbes};
use crate::normalise::Normaliser;
use crate::rpcs::RpcProbes;
use crate::session::Session;

#[derive(Parser, Debug)]
#[command(
    name = "ferro-talos-conformance",
    about = "Read-only probes of a Talos cluster: every read-only RPC the ferro.talos modules make and \
             every module in check mode, recorded as JSON with node-specific values normalised"
)]
struct Cli {
    /// The cluster's talosconfig.
    #[arg(long, required_unless_present = "maintenance_node")]
    talosconfig: Option<PathBuf>,
    /// The talosconfig context (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// Route every call through this apid endpoint (like the modules' `endpoint`); default: each
    /// node directly.
    #[arg(long)]
    endpoint: Option<String>,
    /// The nodes to probe, comma-separated: every control plane and worker to compare.
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "maintenance_node"
    )]
    nodes: Vec<String>,
    /// Where the module binaries are (default: beside this program, as cargo builds them).
    #[arg(long)]
    modules_dir: Option<PathBuf>,
    /// Timeout of the health checks (Talos's HealthCheck and talos_health), in seconds.
    #[arg(long, default_value_t = 60)]
    health_timeout: u64,
    /// Write the JSON here (a new file, mode 0600) instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Instead of probing a cluster: take this one spare machine, booted into maintenance mode,
    /// through a control-plane config, etcd's bootstrap and a reset back to maintenance mode
    /// (STATE and EPHEMERAL wiped). Destructive: needs --i-understand-this-wipes-the-node.
    #[arg(
        long,
        value_name = "ADDRESS",
        conflicts_with_all = ["talosconfig", "nodes", "context", "endpoint"]
    )]
    maintenance_node: Option<String>,
    /// The confirmation --maintenance-node needs: the machine is installed and wiped again.
    #[arg(long, requires = "maintenance_node")]
    i_understand_this_wipes_the_node: bool,
    /// --maintenance-node: the install disk of the config.
    #[arg(long, default_value = "/dev/sda", requires = "maintenance_node")]
    install_disk: String,
    /// --maintenance-node: the installer image of the config [default: the installer of the
    /// release the machine runs].
    #[arg(long, requires = "maintenance_node")]
    install_image: Option<String>,
    /// --maintenance-node: seconds MachineStatus and the etcd service must stay the same before
    /// the member list is timed and etcd bootstrapped.
    #[arg(long, default_value_t = 20.0, requires = "maintenance_node")]
    settle: f64,
    /// --maintenance-node: seconds each wait may take (until settled, until running and ready,
    /// until back in maintenance mode).
    #[arg(long, default_value_t = 1800, requires = "maintenance_node")]
    wait_timeout: u64,
    /// --maintenance-node: the deadline of each EtcdMemberList, in seconds.
    #[arg(long, default_value_t = 10.0, requires = "maintenance_node")]
    member_list_deadline: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferro-talos-conformance: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    if let Some(node) = &cli.maintenance_node {
        return run_maintenance(cli, node);
    }
    let Some(talosconfig) = &cli.talosconfig else {
        bail!("--talosconfig is required (or --maintenance-node for one spare machine)");
    };
    let nodes: Vec<String> = cli
        .nodes
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    if nodes.is_empty() {
        bail!(
            "--nodes names no node: pass the cluster's node addresses, e.g. --nodes 10.0.0.2,10.0.0.5"
        );
    }
    let modules_dir = modules_dir(cli)?;
    let mut normaliser = Normaliser::new();
    let (context_name, creds) = credentials(cli, talosconfig, &mut normaliser)?;
    let session = Session::new(creds, cli.endpoint.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let found = runtime.block_on(layout::discover(&session, &nodes))?;
    let workdir = tempfile::Builder::new()
        .prefix("ferro-conformance-")
        .tempdir()
        .context("cannot create a private temporary directory")?;

    for node in &found {
        normaliser.known(&node.address, &format!("<{}>", node.label));
        normaliser.known(&node.hostname, &format!("<{} hostname>", node.label));
        for secret in ferro_talos_config::redact::secret_values(&node.parsed_config) {
            normaliser.secret(&secret);
        }
    }
    if let Some(endpoint) = &cli.endpoint {
        normaliser.known(endpoint, "<endpoint>");
    }
    // tools/conformance names the simulated cluster like this one, so where the name shows in a
    // message both sides read the same; the placeholder keeps it out of the report.
    let cluster_name = found.iter().find_map(|n| n.cluster_name.clone());
    if let Some(cluster) = &cluster_name {
        normaliser.known(cluster, "<cluster>");
    }
    normaliser.known(&context_name, "<context>");
    normaliser.known(&workdir.path().display().to_string(), "<tmp>");
    normaliser.known(&talosconfig.display().to_string(), "<talosconfig>");
    normaliser.known(&modules_dir.display().to_string(), "<modules>");

    let health_timeout = Duration::from_secs(cli.health_timeout.max(1));
    let connection = Connection {
        talosconfig: talosconfig.clone(),
        context: cli.context.clone(),
        endpoint: cli.endpoint.clone(),
    };
    let rpcs = RpcProbes {
        session: &session,
        normaliser: &normaliser,
        nodes: &found,
        health_timeout,
    };
    let modules = ModuleProbes {
        modules_dir: &modules_dir,
        workdir: workdir.path(),
        connection: &connection,
        normaliser: &normaliser,
        nodes: &found,
        health_timeout,
    };
    let records = probe_all(&runtime, &rpcs, &modules, &found);
    // Where the real run's endpoint is among the nodes, the simulated run uses the same node.
    let endpoint_label = cli.endpoint.as_deref().map(|e| {
        found
            .iter()
            .find(|n| n.address == e)
            .map_or("other".to_string(), |n| n.label.clone())
    });
    let output = json!({
        "format": 1,
        "tool": "ferro-talos-conformance",
        "layout": {
            "cluster_name": cluster_name,
            "nodes": found.iter().map(|n| &n.summary).collect::<Vec<_>>(),
            "endpoint": endpoint_label,
        },
        "records": records,
    });
    write_output(cli, &output)
}

fn write_output(cli: &Cli, output: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(output)? + "\n";
    match &cli.out {
        Some(path) => files::write_private(path, text.as_bytes())
            .with_context(|| format!("cannot write {} (it must not exist yet)", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// `--maintenance-node`: the destructive run against one spare machine. The report is written
/// also when the machine did not come back, and the run then fails saying what to do.
fn run_maintenance(cli: &Cli, node: &str) -> Result<()> {
    let seconds = |name: &str, s: f64| {
        Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow!("--{name} must be a positive number of seconds, e.g. 10"))
    };
    let opts = maintenance::Options {
        node: node.trim().to_string(),
        confirmed: cli.i_understand_this_wipes_the_node,
        install_disk: cli.install_disk.clone(),
        install_image: cli.install_image.clone(),
        settle: seconds("settle", cli.settle)?,
        timeout: Duration::from_secs(cli.wait_timeout.max(1)),
        member_list_deadline: seconds("member-list-deadline", cli.member_list_deadline)?,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(maintenance::run(&opts))?;
    write_output(cli, &outcome.report)?;
    if let Some(why) = outcome.not_back {
        bail!("{why}");
    }
    if outcome.interrupted {
        bail!("interrupted; {node} was reset to maintenance mode and the report written");
    }
    Ok(())
}

/// Where the module binaries are, each one checked to be there.
fn modules_dir(cli: &Cli) -> Result<PathBuf> {
    let dir = match &cli.modules_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .ok_or_else(|| anyhow!("cannot tell where this program is; pass --modules-dir"))?,
    };
    // Every module is the collection's one program, ferro-talos.
    let program = dir.join("ferro-talos");
    if !program.is_file() {
        bail!(
            "the modules' program {} was not found: build it (cargo build --release -p ferro-talos) \
             or pass --modules-dir",
            program.display()
        );
    }
    Ok(dir)
}

/// The talosconfig context's credentials; their key material is registered as secrets first.
fn credentials(
    cli: &Cli,
    talosconfig: &Path,
    normaliser: &mut Normaliser,
) -> Result<(String, Credentials)> {
    let config = read_talosconfig(talosconfig).map_err(|e| anyhow!("{e}"))?;
    let (name, context) =
        select_context(&config, cli.context.as_deref()).map_err(|e| anyhow!("{e}"))?;
    for secret in [&context.ca, &context.crt, &context.key] {
        normaliser.secret(secret);
    }
    let creds = Credentials::from_context(context).map_err(|e| anyhow!("{e}"))?;
    for pem in [&creds.ca_pem, &creds.cert_pem, &creds.key_pem] {
        for line in pem.lines() {
            normaliser.secret(line);
        }
    }
    Ok((name.to_string(), creds))
}

/// The RPC probes of every node, Talos's health check, then the module runs: the modules come
/// last, so whatever they ask cannot change what the RPC probes saw.
fn probe_all(
    runtime: &tokio::runtime::Runtime,
    rpcs: &RpcProbes,
    modules: &ModuleProbes,
    nodes: &[Node],
) -> Vec<record::Record> {
    let mut records = Vec::new();
    for node in nodes {
        records.extend(runtime.block_on(rpcs.node(node)));
    }
    // `discover` made sure there is a control plane.
    let first_cp = nodes.iter().find(|n| n.control_plane);
    if let Some(cp) = first_cp {
        records.push(runtime.block_on(rpcs.health_check(cp)));
    }
    for node in nodes {
        records.extend(modules.node(node));
    }
    if let Some(cp) = first_cp {
        records.extend(modules.cluster(cp));
    }
    records
}
