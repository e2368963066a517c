//! `talos-sim`: run a simulated Talos cluster until SIGTERM/SIGINT.
//!
//! Two ways to use it:
//! - flags only (`make demo`, benchmarks): `talos-sim --control-planes 3 ...` runs a cluster
//!   that lives in memory and prints `READY {"nodes":[...],"control":"addr"}` once every node
//!   listens;
//! - subcommands for a cluster served from a state directory (the tests and Molecule launch it
//!   with `up --detach --base-address auto`): `up`, `stop`, `status`, `fault`, `control`,
//!   `kube`, `workload` (see docs/talos-sim.md).
//!
//! `cli.rs` holds the command line, `lifecycle.rs` runs and stops the simulator, `status.rs`
//! shows it and `requests.rs` sends it single requests over the control protocol
//! (`ferro_talos_sim::control`).

mod cli;
mod lifecycle;
mod requests;
mod status;

use std::time::Duration;

use clap::Parser;

use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        None => lifecycle::run_flags(cli.run),
        Some(Command::Up(a)) => lifecycle::up(*a),
        Some(Command::Stop {
            state_dir,
            timeout_secs,
        }) => lifecycle::stop(&state_dir, Duration::from_secs(timeout_secs)),
        Some(Command::Status { state_dir, json }) => status::status(&state_dir, json),
        Some(Command::Fault {
            state_dir,
            node,
            kind,
            delay_ms,
            clear,
        }) => requests::fault(&state_dir, node, kind, delay_ms, clear),
        Some(Command::Control { state_dir, request }) => requests::control(&state_dir, &request),
        Some(Command::Kube { state_dir }) => requests::kube(&state_dir),
        Some(Command::Factory { listen, parent_pid }) => lifecycle::factory(listen, parent_pid),
        Some(Command::Workload {
            state_dir,
            name,
            namespace,
            replicas,
            min_available,
        }) => requests::workload(&state_dir, namespace, name, replicas, min_available),
    };
    if let Err(e) = result {
        eprintln!("talos-sim: {e:#}");
        std::process::exit(1);
    }
}
