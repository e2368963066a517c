//! The subcommands that send one request to the running simulator: `fault`, `control`, `kube`,
//! `workload`.

use std::path::Path;

use anyhow::{Result, anyhow};
use ferro_talos_sim::FaultKind;
use ferro_talos_sim::control::{FaultChange, NodeRef, Request, protocol};

use crate::lifecycle;

pub fn fault(
    dir: &Path,
    node: NodeRef,
    kind: Option<FaultKind>,
    delay_ms: Option<u64>,
    clear: bool,
) -> Result<()> {
    let request = match kind {
        Some(kind) if !clear => Request::Fault {
            node,
            change: FaultChange::Kind { kind, delay_ms },
        },
        // clap lets only --clear come without --kind.
        _ => Request::ClearFaults { node },
    };
    lifecycle::running(dir)?.client.send(&request)?;
    println!("ok");
    Ok(())
}

/// Any request, checked before it is sent; prints the reply line.
pub fn control(dir: &Path, request: &str) -> Result<()> {
    let request = Request::parse(request).map_err(|e| anyhow!(e))?;
    let reply = lifecycle::running(dir)?.client.send(&request)?;
    println!("{}", protocol::reply_line(&Ok(reply)));
    Ok(())
}

/// Prints the Kubernetes view as one line of JSON.
pub fn kube(dir: &Path) -> Result<()> {
    let snapshot = lifecycle::running(dir)?.client.kube()?;
    println!("{}", serde_json::to_string(&snapshot)?);
    Ok(())
}

pub fn workload(
    dir: &Path,
    namespace: String,
    name: String,
    replicas: u32,
    min_available: Option<u32>,
) -> Result<()> {
    lifecycle::running(dir)?.client.send(&Request::Workload {
        namespace,
        name,
        replicas,
        min_available,
    })?;
    println!("ok");
    Ok(())
}
