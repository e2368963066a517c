//! `talos_bootstrap`: bootstrap etcd once, after asking the cluster whether it already was.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec, Type};
use ferro_talos_client::{ConnectOptions, Credentials, ErrorKind, NodeMode, probe};
use serde_json::json;

use crate::shared::connection::{self, Target, with_connection_options};
use crate::shared::etcd_members::{self, EtcdWait, Members};
use crate::shared::failure::{OrFail, client_failure};

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

fn run_params(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let target = Target::from_params_p(p)?;
    let timeout = crate::shared::options::wait_seconds(p, "timeout", 300)?;
    let others: Vec<String> = crate::shared::options::other_control_planes(p, &target.node);
    let opts = connection::connect_options_p(p, Duration::from_secs(20))?;
    let creds = connection::credentials_p(ctx, p)?;
    connection::block_on(bootstrap(
        ctx,
        p,
        &target,
        &others,
        creds.map(|c| c.0),
        opts,
        timeout,
    ))?
}

async fn bootstrap(
    ctx: &mut Context,
    p: &Params,
    target: &Target,
    others: &[String],
    creds: Option<Credentials>,
    opts: ConnectOptions,
    timeout: Duration,
) -> Result<ModuleResult, ModuleError> {
    let result = ModuleResult::unchanged().with("node", target.node.clone());
    let Some(creds) = creds else {
        // Without credentials we can only tell maintenance mode from the rest.
        let mode = probe(target.maintenance_address(), &opts).await.or_fail()?;
        if mode == NodeMode::Maintenance && ctx.check_mode {
            return Ok(maintenance_answer(result, target));
        }
        return Err(connection::require_credentials_p(ctx, p)
            .err()
            .unwrap_or_else(|| ModuleError::new("no credentials for the Talos API")));
    };

    // Ask this node and the other control planes: any member anywhere means the cluster exists,
    // and bootstrapping a second node would split it.
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
    let answers: Vec<(String, Members)> = nodes
        .into_iter()
        .cloned()
        .zip(etcd_members::ask_all(&targets, &creds, &opts).await)
        .collect();
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
    let deadline = Instant::now() + timeout;
    let client = connection::connect(target, &creds, opts.clone())
        .await
        .or_fail()?;
    loop {
        match client.bootstrap().await {
            Ok(()) => break,
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                return Ok(result.with("bootstrap_needed", false).msg(format!(
                    "etcd on {} is already bootstrapped (etcd data directory is not empty)",
                    target.node
                )));
            }
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
    if p.bool("wait") {
        wait_for_etcd(target, &creds, &opts, timeout).await?;
    }
    Ok(ModuleResult::changed()
        .with("node", target.node.clone())
        .with("bootstrap_needed", true)
        .msg(format!("bootstrapped etcd on {}", target.node)))
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

// PLACEHOLDER until this module reads typed arguments in args.rs.
pub struct Args(Params);
impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        Ok(Args(p.clone()))
    }
}
pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    run_params(ctx, &args.0)
}
