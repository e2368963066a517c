//! `talos_logs`: a Talos service's log from a node, like `talosctl logs <service>`, returned as
//! lines or written to a file on the controller (for a bug report).
//!
//! Upstream (tag v1.13.9): MachineService/Logs (`v1alpha1_server.go`) reads the system
//! namespace's service logs (and the kubelet's) from machined's in-memory log buffers, so they
//! start afresh at every boot and a service that never wrote has an empty log; `tail_lines`
//! keeps the last lines. The reader role may read them.

use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::{NodeMode, TalosClient};

use crate::shared::connection::{self, with_connection_options};
use crate::shared::failure::OrFail;
use crate::shared::files::{SECRET_MODE, write_atomic};

mod args;
pub use args::Args;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("service").required())
        .option(Opt::int("tail_lines"))
        .option(Opt::path("dest"))
        .option(Opt::int("timeout").default(60))
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        service,
        tail_lines: tail,
        dest,
        timeout,
    } = args;
    if dest.as_ref().is_some_and(|d| d.is_dir()) {
        return Err(ModuleError::new(
            "dest must be a file path for the log, not a directory",
        ));
    }
    let creds = connection::credentials(ctx, &connection)?.map(|c| c.0);
    let mut opts = connection.connect_options(Duration::from_secs(30));
    opts.stream_timeout = timeout;
    let bytes = connection::block_on(async {
        let client = match &creds {
            Some(creds) => match connection::node_mode(&target, Some(creds), &opts).await {
                Ok(NodeMode::Maintenance) => {
                    TalosClient::connect_maintenance(target.maintenance_address(), opts.clone())
                        .await
                }
                Ok(_) => connection::connect(&target, creds, opts.clone()).await,
                Err(e) => Err(e),
            },
            None => {
                TalosClient::connect_maintenance(target.maintenance_address(), opts.clone()).await
            }
        }
        .or_fail()?;
        client.service_log(&service, tail).await.or_fail()
    })??;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let count = lines.len();
    let result = ModuleResult::unchanged()
        .with("node", target.node.clone())
        .with("service", service.clone())
        .with("line_count", count);
    let Some(dest) = dest else {
        return Ok(result.with("lines", lines).msg(format!(
            "{count} line(s) of the {service} log of {}",
            target.node
        )));
    };
    // The file is the task's output, like a fetched file: changed when its content changes.
    let same = std::fs::read(&dest).is_ok_and(|old| old == bytes);
    if same {
        return Ok(result
            .with("dest", dest.display().to_string())
            .msg(format!("{} already holds this log", dest.display())));
    }
    if !ctx.check_mode {
        write_atomic(&dest, &bytes, SECRET_MODE)
            .map_err(|e| ModuleError::new(format!("dest {}: {e:#}", dest.display())))?;
    }
    let mut result = result.with("dest", dest.display().to_string());
    result.changed = true;
    Ok(result.msg(format!(
        "{} {count} line(s) of the {service} log of {} to {}",
        if ctx.check_mode {
            "would write"
        } else {
            "wrote"
        },
        target.node,
        dest.display()
    )))
}
