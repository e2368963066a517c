//! `talos_info`: read-only facts about one node, or about many at once.
//!
//! With `nodes`, every node is read concurrently in this one process (a role's check run asks about
//! a whole cluster without a module process per node); a node that does not answer is reported
//! beside the others rather than failing the task, so the caller decides what that means.

use std::sync::Arc;
use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Spec};
use ferro_talos_client::{ClientError, ConnectOptions, Credentials, NodeMode, TalosClient, probe};
use serde_json::{Value, json};

use crate::sha256_hex;
use crate::shared::connection::{
    self, CredentialSource, Target, with_connection_options_for_nodes,
};
use crate::shared::etcd_members::Members;
use crate::shared::failure::OrFail;

mod args;
pub use args::{Args, Nodes};

/// How many nodes are read at the same time: enough for a large homelab in one round, few enough
/// that a slow network is not flooded with handshakes.
const CONCURRENT_READS: usize = 32;

pub fn spec() -> Spec {
    with_connection_options_for_nodes(Spec::new())
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args { connection, nodes } = args;
    let opts = connection.connect_options(Duration::from_secs(30));
    let creds = connection::credentials(ctx, &connection)?;
    let target = match nodes {
        Nodes::Many(targets) => return run_many(targets, creds, opts),
        Nodes::One(target) => target,
    };
    let facts = connection::block_on(read(&target, creds.as_ref(), &opts))?.or_fail()?;
    let msg = format!(
        "{} is {} and runs Talos {}",
        target.node,
        facts["mode"].as_str().unwrap_or("?"),
        facts["version"]["tag"].as_str().unwrap_or("?")
    );
    Ok(ModuleResult::unchanged().msg(msg).with("talos", facts))
}

/// Every node read concurrently: `nodes` holds each one's facts, or its `error`, in the order given.
fn run_many(
    targets: Vec<Target>,
    creds: Option<(Credentials, CredentialSource)>,
    opts: ConnectOptions,
) -> Result<ModuleResult, ModuleError> {
    let count = targets.len();
    let answers = connection::block_on(async move {
        let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_READS));
        let creds = Arc::new(creds);
        let mut reads = tokio::task::JoinSet::new();
        for (i, target) in targets.into_iter().enumerate() {
            let (limit, creds, opts) = (limit.clone(), creds.clone(), opts.clone());
            reads.spawn(async move {
                let _turn = limit.acquire_owned().await;
                let answer = read(&target, creds.as_ref().as_ref(), &opts).await;
                (i, target.node, answer)
            });
        }
        let mut answers = Vec::with_capacity(count);
        while let Some(done) = reads.join_next().await {
            if let Ok(answer) = done {
                answers.push(answer);
            }
        }
        answers.sort_by_key(|(i, _, _)| *i);
        answers
    })?;
    let mut unanswered = Vec::new();
    let nodes: Vec<Value> = answers
        .into_iter()
        .map(|(_, node, answer)| match answer {
            Ok(facts) => facts,
            Err(e) => {
                unanswered.push(node.clone());
                json!({"node": node, "error": e.to_string(), "grpc_code": e.grpc_code})
            }
        })
        .collect();
    let msg = if unanswered.is_empty() {
        format!("read {count} nodes")
    } else {
        format!(
            "read {count} nodes; {} did not answer: {}",
            unanswered.len(),
            unanswered.join(", ")
        )
    };
    Ok(ModuleResult::unchanged()
        .msg(msg)
        .with("nodes", nodes)
        .with("unanswered", unanswered))
}

/// One node's facts, whether it is configured or in maintenance mode.
async fn read(
    target: &Target,
    creds: Option<&(Credentials, CredentialSource)>,
    opts: &ConnectOptions,
) -> Result<Value, ClientError> {
    match creds {
        Some((creds, source)) => {
            // A configured node answers mutual TLS; one in maintenance mode does not
            // know the cluster's CA yet, so a failed handshake is checked with a probe.
            match connection::connect(target, creds, opts.clone()).await {
                Ok(client) => match configured_facts(&client, target).await {
                    Ok(mut f) => {
                        f["credentials"] = json!(source.describe());
                        Ok(f)
                    }
                    Err(e) => maintenance_or(e, target, opts).await,
                },
                Err(e) => maintenance_or(e, target, opts).await,
            }
        }
        None => match probe(target.maintenance_address(), opts).await {
            Ok(NodeMode::Maintenance) => maintenance_facts(target, opts).await,
            Ok(NodeMode::Configured) => Err(ClientError::new(
                &target.node,
                "read node facts",
                ferro_talos_client::ErrorKind::Credentials,
                "the node is configured and needs client credentials: set talosconfig, secrets_file or secrets",
            )),
            Ok(NodeMode::Unreachable) => Err(ClientError::new(
                &target.node,
                "read node facts",
                ferro_talos_client::ErrorKind::Unreachable,
                "nothing answered",
            )),
            Err(e) => Err(e),
        },
    }
}

/// When mutual TLS fails, the node may simply be in maintenance mode: report that instead.
async fn maintenance_or(
    err: ferro_talos_client::ClientError,
    target: &Target,
    opts: &ConnectOptions,
) -> Result<Value, ferro_talos_client::ClientError> {
    match probe(target.maintenance_address(), opts).await {
        Ok(NodeMode::Maintenance) => maintenance_facts(target, opts).await,
        _ => Err(err),
    }
}

async fn maintenance_facts(
    target: &Target,
    opts: &ConnectOptions,
) -> Result<Value, ferro_talos_client::ClientError> {
    let client =
        TalosClient::connect_maintenance(target.maintenance_address(), opts.clone()).await?;
    let version = client.version().await?;
    let hostname = client.hostname().await.ok();
    Ok(json!({
        "node": target.node,
        "mode": "maintenance",
        "version": version_json(&version),
        "hostname": hostname,
        "machine_type": Value::Null,
        "config_sha256": Value::Null,
        "etcd_members": [],
        "services": [],
    }))
}

/// Everything a configured node tells an admin. Parts that a node legitimately lacks (etcd on
/// a worker or before bootstrap) are reported, not failed.
pub async fn configured_facts(
    client: &TalosClient,
    target: &Target,
) -> Result<Value, ferro_talos_client::ClientError> {
    let version = client.version().await?;
    let hostname = client.hostname().await.ok();
    let config = client.get_machine_config().await?;
    let machine_type = machine_type_of(&config);
    let services: Vec<Value> = client
        .service_list()
        .await?
        .into_iter()
        .map(|s| {
            let health = s.health.unwrap_or_default();
            json!({
                "id": s.id,
                "state": s.state,
                "healthy": !health.unknown && health.healthy,
                "health_unknown": health.unknown,
                "last_message": health.last_message,
            })
        })
        .collect();
    let status = client.machine_status().await.ok();
    let (members, etcd_error) = if machine_type.as_deref() == Some("worker") {
        (Vec::new(), Value::Null)
    } else {
        // Asked as the bootstrap asks it: before bootstrap a member list blocks until its
        // deadline (etcd_members::members_of), and facts must not wait for that.
        match crate::shared::etcd_members::members_of(client).await {
            Members::Present(m) => (
                m.into_iter()
                    .map(|m| {
                        json!({
                            "id": format!("{:x}", m.id),
                            "hostname": m.hostname,
                            "peer_urls": m.peer_urls,
                            "client_urls": m.client_urls,
                            "is_learner": m.is_learner,
                        })
                    })
                    .collect(),
                Value::Null,
            ),
            Members::NotRunning { service } => {
                (Vec::new(), json!(format!("no etcd answers ({service})")))
            }
            Members::Maintenance => (Vec::new(), json!("the node is in maintenance mode")),
            Members::Unknown(why) => (Vec::new(), json!(why)),
        }
    };
    Ok(json!({
        "node": target.node,
        "mode": "configured",
        "version": version_json(&version),
        "hostname": hostname,
        "machine_type": machine_type,
        "config_sha256": sha256_hex(&config),
        "stage": status.as_ref().map(|s| format!("{:?}", s.stage).to_lowercase()),
        "ready": status.as_ref().map(|s| s.ready),
        "etcd_members": members,
        "etcd_error": etcd_error,
        "services": services,
    }))
}

pub fn version_json(v: &ferro_talos_client::proto::machine::Version) -> Value {
    let info = v.version.clone().unwrap_or_default();
    let platform = v.platform.clone().unwrap_or_default();
    json!({
        "tag": info.tag,
        "sha": info.sha,
        "arch": info.arch,
        "os": info.os,
        "platform": platform.name,
        "platform_mode": platform.mode,
    })
}

/// `machine.type` of a config, read without a full parse.
pub fn machine_type_of(config: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(config).ok()?;
    let cfg = ferro_talos_config::MachineConfig::parse(text).ok()?;
    cfg.v1alpha1()?
        .pointer("/machine/type")?
        .as_str()
        .map(str::to_string)
}
