//! `talos_info`: read-only facts about one node.

use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Params, Spec};
use ferro_talos_client::{ConnectOptions, NodeMode, TalosClient, probe};
use serde_json::{Value, json};

use crate::connection::{self, Target, client_error, with_connection_options};
use crate::sha256_hex;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let target = Target::from_params(p)?;
    let opts = connection::connect_options(p, Duration::from_secs(30))?;
    let creds = connection::credentials(ctx, p)?;
    let facts = connection::block_on(async {
        match creds {
            Some((creds, source)) => {
                // A configured node answers mutual TLS; one in maintenance mode does not
                // know the cluster's CA yet, so a failed handshake is checked with a probe.
                match connection::connect(&target, &creds, opts.clone()).await {
                    Ok(client) => match configured_facts(&client, &target).await {
                        Ok(mut f) => {
                            f["credentials"] = json!(source.describe());
                            Ok(f)
                        }
                        Err(e) => maintenance_or(e, &target, &opts).await,
                    },
                    Err(e) => maintenance_or(e, &target, &opts).await,
                }
            }
            None => match probe(target.maintenance_address(), &opts).await {
                Ok(NodeMode::Maintenance) => maintenance_facts(&target, &opts).await,
                Ok(NodeMode::Configured) => Err(ferro_talos_client::ClientError::new(
                    &target.node,
                    "read node facts",
                    ferro_talos_client::ErrorKind::Credentials,
                    "the node is configured and needs client credentials: set talosconfig, secrets_file or secrets",
                )),
                Ok(NodeMode::Unreachable) => Err(ferro_talos_client::ClientError::new(
                    &target.node,
                    "read node facts",
                    ferro_talos_client::ErrorKind::Unreachable,
                    "nothing answered",
                )),
                Err(e) => Err(e),
            },
        }
    })?
    .map_err(|e| client_error(ctx, e))?;
    let msg = format!(
        "{} is {} and runs Talos {}",
        target.node,
        facts["mode"].as_str().unwrap_or("?"),
        facts["version"]["tag"].as_str().unwrap_or("?")
    );
    Ok(ModuleResult::unchanged().msg(msg).with("talos", facts))
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
        match client.etcd_member_list().await {
            Ok(m) => (
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
            Err(e) => (Vec::new(), json!(e.message)),
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
