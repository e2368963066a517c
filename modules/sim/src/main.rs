//! `talos-sim`: run a simulated Talos cluster until SIGTERM/SIGINT.
//!
//! Prints `READY {"nodes":[...],"control":"addr"}` on stdout once every node listens.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Parser;
use ferro_talos_sim::{SimConfig, run};

#[derive(Parser, Debug)]
#[command(
    name = "talos-sim",
    about = "A simulated Talos cluster (not Talos; only the RPCs ferro.talos calls)"
)]
struct Args {
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
    /// Initial Talos version of every node.
    #[arg(long, default_value = "v1.13.6")]
    talos_version: String,
    /// Per-node initial version, INDEX=VERSION (repeatable), e.g. --node-version 2=v1.10.7.
    #[arg(long = "node-version", value_name = "INDEX=VERSION")]
    node_versions: Vec<String>,
    /// How long a rebooting node is unreachable, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    reboot_downtime_ms: u64,
    /// Serve the JSON-lines control protocol here (fault injection, inspection), e.g. 127.0.0.1:50999.
    #[arg(long)]
    control_address: Option<SocketAddr>,
    /// Write the process id to this file.
    #[arg(long)]
    pid_file: Option<PathBuf>,
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
            Ok((i, v.to_string()))
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
    let args = Args::parse();
    if let Err(e) = real_main(args) {
        eprintln!("talos-sim: {e:#}");
        std::process::exit(1);
    }
}

fn real_main(args: Args) -> Result<()> {
    let cfg = SimConfig {
        control_planes: args.control_planes,
        workers: args.workers,
        base_address: args.base_address,
        port: args.port,
        talos_version: args.talos_version,
        node_versions: parse_node_versions(&args.node_versions)?,
        reboot_downtime: Duration::from_millis(args.reboot_downtime_ms),
        control_address: args.control_address,
    };
    if let Some(p) = &args.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing pid file {}", p.display()))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(run(
        cfg,
        |cluster| {
            let ready = serde_json::json!({
                "nodes": cluster.nodes(),
                "control": cluster.control_address().map(|a| a.to_string()),
            });
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "READY {ready}");
            let _ = out.flush();
        },
        shutdown_signal(),
    ));
    // Connection tasks may still be winding down; do not wait for them.
    rt.shutdown_timeout(Duration::from_millis(200));
    if let Some(p) = &args.pid_file {
        let _ = std::fs::remove_file(p);
    }
    result
}
