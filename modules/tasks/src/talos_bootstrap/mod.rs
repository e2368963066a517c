//! `talos_bootstrap`: bootstrap etcd once, after asking the cluster whether it already was.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_client::{ConnectOptions, Credentials, ErrorKind, NodeMode, probe};
use serde_json::json;

use crate::shared::connection::{self, Target, with_connection_options};
use crate::shared::etcd_members::{self, EtcdWait, Members};
use crate::shared::failure::{OrFail, client_failure};

mod args;
pub use args::Args;

/// How long to wait before asking a node that was not ready to bootstrap again.
const BOOTSTRAP_RETRY: Duration = Duration::from_millis(500);

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(
            Opt::list("control_plane_nodes")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(300))
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let opts = args.connection.connect_options(Duration::from_secs(20));
    let creds = connection::credentials(ctx, &args.connection)?;
    connection::block_on(bootstrap(ctx, &args, creds.map(|c| c.0), opts))?
}

async fn bootstrap(
    ctx: &mut Context,
    args: &Args,
    creds: Option<Credentials>,
    opts: ConnectOptions,
) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        others,
        wait,
        timeout,
    } = args;
    let timeout = *timeout;
    let result = ModuleResult::unchanged().with("node", target.node.clone());
    let Some(creds) = creds else {
        // Without credentials we can only tell maintenance mode from the rest.
        let mode = probe(target.maintenance_address(), &opts).await.or_fail()?;
        if mode == NodeMode::Maintenance && ctx.check_mode {
            return Ok(maintenance_answer(result, target));
        }
        return Err(connection::require_credentials(ctx, connection)
            .err()
            .unwrap_or_else(|| ModuleError::new("no credentials for the Talos API")));
    };

    // Ask this node and the other control planes: any member anywhere means the cluster exists,
    // and bootstrapping a second node would split it.
    let answers = ask_every_control_plane(target, others, &creds, &opts).await;
    if let Some((node, n)) = answers.iter().find_map(|(node, a)| match a {
        Members::Present(m) => Some((node, m.len())),
        _ => None,
    }) {
        return Ok(result
            .with("bootstrap_needed", false)
            .with("etcd_members", n)
            .msg(format!(
                "etcd is already bootstrapped ({n} member(s), asked {node})"
            )));
    }
    if matches!(answers.first(), Some((_, Members::Maintenance))) {
        if ctx.check_mode {
            return Ok(maintenance_answer(result, target));
        }
        return Err(ModuleError::new(format!(
            "node {} is in maintenance mode: apply its config (ferro.talos.talos_apply) before bootstrapping",
            target.node
        ))
        .with("node", target.node.clone()));
    }
    let unknown: Vec<String> = answers
        .iter()
        .filter_map(|(node, a)| match a {
            Members::Unknown(why) => Some(format!("{node}: {why}")),
            _ => None,
        })
        .collect();
    if !unknown.is_empty() {
        // Never claim "would bootstrap" (or do it) without having asked every control plane.
        let msg = format!(
            "cannot tell whether etcd is bootstrapped: {}; fix access to every control plane first",
            unknown.join("; ")
        );
        if ctx.check_mode {
            ctx.warn(msg.clone());
            return Ok(result.with("bootstrap_needed", "unknown").msg(msg));
        }
        return Err(ModuleError::new(msg).with("node", target.node.clone()));
    }
    // What each control plane said of its etcd: the evidence behind "not bootstrapped".
    let evidence: Vec<String> = answers
        .iter()
        .filter_map(|(node, a)| match a {
            Members::NotRunning { service } => Some(format!("{node}: {service}")),
            _ => None,
        })
        .collect();
    if ctx.check_mode {
        return Ok(ModuleResult::changed()
            .with("node", target.node.clone())
            .with("bootstrap_needed", true)
            .msg(format!(
                "would bootstrap etcd on {} (no control plane has etcd members; {})",
                target.node,
                evidence.join("; ")
            )));
    }
    if !bootstrap_when_ready(target, &creds, &opts, timeout).await? {
        return Ok(result.with("bootstrap_needed", false).msg(format!(
            "etcd on {} is already bootstrapped (etcd data directory is not empty)",
            target.node
        )));
    }
    if *wait {
        wait_for_etcd(target, &creds, &opts, timeout).await?;
    }
    Ok(ModuleResult::changed()
        .with("node", target.node.clone())
        .with("bootstrap_needed", true)
        .msg(format!("bootstrapped etcd on {}", target.node)))
}

/// What `target` and the other control planes say of their etcd members (the others asked
/// directly, at their own addresses), in that order.
async fn ask_every_control_plane(
    target: &Target,
    others: &[String],
    creds: &Credentials,
    opts: &ConnectOptions,
) -> Vec<(String, Members)> {
    let nodes: Vec<&String> = std::iter::once(&target.node).chain(others).collect();
    let targets: Vec<Target> = nodes
        .iter()
        .map(|node| Target {
            node: (*node).clone(),
            endpoint: if *node == &target.node {
                target.endpoint.clone()
            } else {
                (*node).clone()
            },
        })
        .collect();
    nodes
        .into_iter()
        .cloned()
        .zip(etcd_members::ask_all(&targets, creds, opts).await)
        .collect()
}

/// Bootstraps etcd on `target`, retrying while the node is not ready yet, for up to `timeout`:
/// false when its etcd data directory was not empty (it was bootstrapped before).
async fn bootstrap_when_ready(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    timeout: Duration,
) -> Result<bool, ModuleError> {
    let deadline = Instant::now() + timeout;
    let client = connection::connect(target, creds, opts.clone())
        .await
        .or_fail()?;
    loop {
        match client.bootstrap().await {
            Ok(()) => return Ok(true),
            Err(e) if e.kind == ErrorKind::AlreadyExists => return Ok(false),
            // A node that just booted refuses Bootstrap until its CRI is up and its clock is
            // synced (FailedPrecondition "bootstrap is not available yet", "time is not in sync
            // yet": v1alpha1_server.go at v1.13.9); talosctl cluster create retries these
            // (pkg/cluster/bootstrap.go), and so do we, until the task's timeout.
            Err(e) if e.kind == ErrorKind::NotReady && Instant::now() < deadline => {
                tokio::time::sleep(BOOTSTRAP_RETRY.min(deadline - Instant::now())).await;
            }
            Err(e) if e.kind == ErrorKind::NotReady => {
                return Err(ModuleError::new(format!(
                    "node {} was still not ready to bootstrap etcd after {}s: {}; check its time \
                     servers (machine.time) and that its services start (talosctl -n {} services)",
                    target.node,
                    timeout.as_secs(),
                    e.message,
                    target.node
                ))
                .with("node", target.node.clone()));
            }
            Err(e) => return Err(client_failure(e)),
        }
    }
}

fn maintenance_answer(result: ModuleResult, target: &Target) -> ModuleResult {
    let mut r = result.with("bootstrap_needed", true).msg(format!(
        "{} is in maintenance mode: etcd would be bootstrapped after the first apply",
        target.node
    ));
    r.changed = true;
    r
}

/// After Bootstrap: until etcd runs and is healthy with members.
async fn wait_for_etcd(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    timeout: Duration,
) -> Result<(), ModuleError> {
    let last = match etcd_members::wait_running(target, creds, opts, timeout).await {
        Ok(()) => return Ok(()),
        Err(EtcdWait::Failed(message)) => format!("the etcd service failed: {message}"),
        Err(EtcdWait::TimedOut(last)) => last,
    };
    Err(ModuleError::new(format!(
        "bootstrapped etcd on {}, but it did not become healthy within {}s (last: {last}); check the etcd service logs",
        target.node,
        timeout.as_secs()
    ))
    .with("node", target.node.clone())
    .changed(true))
}
