//! `talos_shutdown`: power a node off, and wait until it no longer answers.
//!
//! Upstream (tags v1.13.9 and v1.14.1 of siderolabs/talos): MachineService/Shutdown
//! (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`) answers with an actor id
//! at once; the "shutdown" sequence (`internal/app/machined/pkg/runtime/v1alpha1/
//! v1alpha1_sequencer.go`) stores power-off as its intent, cordons and drains the node unless
//! `force` is set, stops its pods and services, and powers off. Its drain has no error handler
//! (Reset's has): when it fails (the Kubernetes API does not work for the node, so its Node is not
//! cordoned within a minute or its pods cannot be listed; budget refusals are retried for up to
//! 5 minutes and then only logged, `pkg/kubernetes/kubernetes.go` Drain) the sequence fails
//! there, and machined, for which a failed sequence is fatal, stops its services and powers the
//! machine off without the rest (`internal/app/machined/main.go` handle, the stored intent).
//! `talosctl shutdown --wait` stops waiting at the `stopAllServices` task event; this module
//! waits until the node stops answering, asked the way the task reaches it (through the
//! endpoint when there is one), and watches the sequence's events to say whether it went down
//! cleanly.
//!
//! A node that does not answer at all is reported unchanged with a warning: a machine that is off
//! already and one that cannot be reached look the same from here, and nothing was sent to it.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::{SequenceFailure, sequence_failure};
use serde_json::json;

use crate::shared::connection::{self, with_connection_options};
use crate::shared::failure::OrFail;
use crate::shared::node_power::{self, Reached, Want};

mod args;
pub use args::Args;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::bool("force").default(false))
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        force,
        wait,
        timeout,
    } = args;
    let (creds, _) = connection::require_credentials(ctx, &connection)?;
    let mut opts = connection.connect_options(Duration::from_secs(30));
    // The sequence's events are watched for as long as the task waits.
    opts.stream_timeout = timeout + Duration::from_secs(30);
    connection::block_on(async {
        let node = target.node.clone();
        let result = ModuleResult::unchanged()
            .with("node", node.clone())
            .with("force", force);
        let client = match node_power::reach(&target, &creds, &opts, "Shutdown").await? {
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
        client.version().await.or_fail()?;
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
        let actor_id = client.shutdown(force).await.or_fail()?;
        let result = result.with("actor_id", actor_id.clone());
        if !wait {
            return Ok(result.msg(format!("asked {node} to shut down {how}; not waiting")));
        }
        let started = Instant::now();
        let deadline = started + timeout;
        let mut failure = None;
        let gone = {
            let wait = node_power::wait_until(&target, Some(&creds), &opts, deadline, Want::Down);
            tokio::pin!(wait);
            tokio::select! {
                gone = &mut wait => gone,
                failed = sequence_failure(&client, &actor_id) => {
                    failure = Some(failed);
                    wait.await
                }
            }
        };
        let mut result = result;
        if let Some(f) = &failure {
            result = result.with(
                "sequence_error",
                json!({"phase": f.failed_phase(), "message": f.message}),
            );
        }
        if let Err(last) = gone {
            let stage = node_power::stage(&target, &creds, &opts)
                .await
                .map(|s| format!("; Talos reports stage {s}"))
                .unwrap_or_default();
            let msg = still_answering(&node, failure.as_ref(), &last, &stage, timeout);
            return Err(ModuleError::new(msg)
                .with("node", node.clone())
                .changed(true));
        }
        let seconds = node_power::seconds_since(started);
        let result = result.with("seconds", seconds);
        let Some(f) = failure else {
            return Ok(result.msg(format!("shut down {node} {how}; it no longer answers")));
        };
        ctx.warn(unclean_warning(&node, &f));
        Ok(result.msg(format!(
            "shut down {node}, but not cleanly: its shutdown sequence failed in {} and it went \
             down through machined's fatal-error path; it no longer answers",
            phase_words(&f)
        )))
    })?
}

/// Why a node asked to shut down still answered at the deadline, with what it last said and
/// what to do.
fn still_answering(
    node: &str,
    failure: Option<&SequenceFailure>,
    last: &str,
    stage: &str,
    timeout: Duration,
) -> String {
    match failure {
        Some(f) => format!(
            "{node}: Talos reported that its shutdown sequence failed in {}: {}; it still \
             answered after {}s (last: {last}){stage}, although machined powers a node off \
             after a failed shutdown: check its console (talosctl -n {node} dmesg)",
            phase_words(f),
            f.message,
            timeout.as_secs()
        ),
        None => format!(
            "{node} was asked to shut down, but it still answered after {}s (last: \
             {last}){stage}; unless force is set Talos drains the node first, retrying for \
             up to 5 minutes the evictions a PodDisruptionBudget refuses: raise timeout, \
             read talosctl -n {node} dmesg for what it waits on, or set force: true to \
             skip its drain",
            timeout.as_secs()
        ),
    }
}

/// The warning for a node that went down after its shutdown sequence failed: how, and what its
/// failed drain means for its pods.
fn unclean_warning(node: &str, f: &SequenceFailure) -> String {
    let drain_words = if f.failed_phase() == Some("drain") {
        "; its drain did not finish, so its pods were not evicted first: Talos's drain fails \
         when the Kubernetes API does not work for the node (its Node not cordoned within a \
         minute, or its pods not listed); check the cluster (ferro.talos.talos_health) before \
         the next shutdown, or set force: true to shut down without Talos's drain"
    } else {
        ""
    };
    format!(
        "{node}: Talos reported that its shutdown sequence failed in {}: {}. Talos powers the \
         machine off all the same after a failed shutdown (machined's fatal-error path), \
         without stopping its pods and services in order{drain_words}",
        phase_words(f),
        f.message
    )
}

/// "its drain phase", or "a phase" when the node named none.
fn phase_words(f: &SequenceFailure) -> String {
    match f.failed_phase() {
        Some(p) => format!("its {p} phase"),
        None => "a phase".into(),
    }
}
