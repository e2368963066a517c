//! `talos_shutdown`: power a node off, and wait until it no longer answers.
//!
//! Upstream (tag v1.13.9 of siderolabs/talos): MachineService/Shutdown
//! (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`) answers with an actor id
//! at once; the "shutdown" sequence (`internal/app/machined/pkg/runtime/v1alpha1/
//! v1alpha1_sequencer.go`) cordons and drains the node first unless `force` is set (a drain that
//! fails is only logged), stops its pods and services, and powers off. `talosctl shutdown --wait`
//! stops waiting at the `stopAllServices` task event; this module waits until the node stops
//! answering, which is what a play that powers a rack down needs to know.
//!
//! A node that does not answer at all is reported unchanged with a warning: a machine that is off
//! already and one that cannot be reached look the same from here, and nothing was sent to it.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec};
use ferro_talos_client::NodeMode;

use crate::connection::{self, Target, client_error, with_connection_options};
use crate::node_power::{self, Reached};

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::bool("force").default(false))
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let target = Target::from_params(p)?;
    let force = p.bool("force");
    let wait = p.bool("wait");
    let timeout = crate::options::wait_seconds(p, "timeout", 600)?;
    let (creds, _) = connection::require_credentials(ctx, p)?;
    let opts = connection::connect_options(p, Duration::from_secs(30))?;
    connection::block_on(async {
        let node = target.node.clone();
        let result = ModuleResult::unchanged()
            .with("node", node.clone())
            .with("force", force);
        let client = match node_power::reach(ctx, &target, &creds, &opts, "Shutdown").await? {
            Reached::Configured(client) => client,
            Reached::Down(why) => {
                ctx.warn(format!(
                    "{node} does not answer ({why}): it is off already, or unreachable from here; \
                     nothing was sent to it"
                ));
                return Ok(result
                    .with("answered", false)
                    .msg(format!("{node} does not answer; nothing to shut down")));
            }
        };
        // One call that answers proves the credentials before the node is asked to go.
        client.version().await.map_err(|e| client_error(ctx, e))?;
        let how = if force {
            "without draining it (force)"
        } else {
            "after it cordons and drains itself"
        };
        let mut result = result.with("answered", true);
        result.changed = true;
        if ctx.check_mode {
            return Ok(result.msg(format!("would shut down {node} {how}")));
        }
        let actor_id = client
            .shutdown(force)
            .await
            .map_err(|e| client_error(ctx, e))?;
        let result = result.with("actor_id", actor_id);
        if !wait {
            return Ok(result.msg(format!("asked {node} to shut down {how}; not waiting")));
        }
        let started = Instant::now();
        node_power::wait_for_probe(&target, &opts, started + timeout, NodeMode::Unreachable)
            .await
            .map_err(|last| {
                ModuleError::new(format!(
                    "{node} was asked to shut down, but it still answered after {}s (last: {last}); \
                     a drain that PodDisruptionBudgets hold back can take minutes (force: true skips it); \
                     check its console",
                    timeout.as_secs()
                ))
                .with("node", node.clone())
                .changed(true)
            })?;
        let seconds = node_power::seconds_since(started);
        Ok(result
            .with("seconds", seconds)
            .msg(format!("shut down {node} {how}; it no longer answers")))
    })?
}
