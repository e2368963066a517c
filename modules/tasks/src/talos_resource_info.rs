//! `talos_resource_info`: read any Talos resource, as `talosctl get` does: one by id or every one
//! of a type, over COSI `State/Get` and `State/List`, from a configured node or one in maintenance
//! mode (where the reader role may read what is not sensitive). The disks and volumes an install
//! disk is chosen from are `Disks.block.talos.dev` and `VolumeStatuses.block.talos.dev`.
//!
//! Upstream (tag v1.13.9): the COSI API behind apid with `talosctl get`'s namespaces
//! (`pkg/machinery/resources/*`); sensitive resources need os:admin. This module refuses the
//! `secrets` namespace and the machine config outright, since their values would land in the
//! task's result: talos_info and talos_apply's masked diff show what those hold.

use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec};
use ferro_talos_client::proto::cosi::resource::Resource;
use ferro_talos_client::{ErrorKind, NodeMode, TalosClient, probe};
use serde_json::{Value, json};

use crate::connection::{self, Target, client_error, with_connection_options};

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("type").required())
        .option(Opt::str("namespace").default("runtime"))
        .option(Opt::str("id"))
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let target = Target::from_params(p)?;
    let kind = p.str("type").unwrap_or_default().trim().to_string();
    let namespace = p.str("namespace").unwrap_or("runtime").trim().to_string();
    let id = p
        .str("id")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if kind.is_empty() || !kind.contains('.') {
        return Err(ModuleError::new(format!(
            "type must be a resource type's full name, like Disks.block.talos.dev or \
             MachineStatuses.runtime.talos.dev, got {kind:?} (talosctl get rd lists them)"
        )));
    }
    if namespace == "secrets" || kind.starts_with("MachineConfigs.") {
        return Err(ModuleError::new(format!(
            "{namespace}/{kind} holds the cluster's secrets, which would land in the task's result; \
             read the machine config's facts with ferro.talos.talos_info, or its changes, masked, \
             with ferro.talos.talos_apply in check mode"
        )));
    }
    let creds = connection::credentials(ctx, p)?.map(|c| c.0);
    let opts = connection::connect_options(p, Duration::from_secs(30))?;
    connection::block_on(async {
        let client = match &creds {
            Some(creds) => match connection::node_mode(&target, Some(creds), &opts).await {
                Ok(NodeMode::Maintenance) => {
                    TalosClient::connect_maintenance(target.maintenance_address(), opts.clone()).await
                }
                Ok(_) => connection::connect(&target, creds, opts.clone()).await,
                Err(e) => Err(e),
            },
            None => match probe(target.maintenance_address(), &opts).await {
                Ok(NodeMode::Configured) => {
                    return Err(ModuleError::new(format!(
                        "node {} is configured and needs client credentials: set talosconfig, secrets_file \
                         or secrets",
                        target.node
                    )));
                }
                Ok(_) => {
                    TalosClient::connect_maintenance(target.maintenance_address(), opts.clone()).await
                }
                Err(e) => Err(e),
            },
        }
        .map_err(|e| client_error(ctx, e))?;
        let resources = match &id {
            Some(id) => match client.get_resource(&namespace, &kind, id).await {
                Ok(r) => vec![r],
                Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(client_error(ctx, e)),
            },
            None => client
                .list_resources(&namespace, &kind)
                .await
                .map_err(|e| client_error(ctx, e))?,
        };
        let found: Vec<Value> = resources.iter().map(resource_json).collect();
        let what = match &id {
            Some(id) if found.is_empty() => format!("no {kind} {namespace}/{id}"),
            Some(id) => format!("{kind} {namespace}/{id}"),
            None => format!("{} {kind} in {namespace}", found.len()),
        };
        Ok(ModuleResult::unchanged()
            .with("node", target.node.clone())
            .with("resources", Value::Array(found))
            .msg(format!("{}: {what}", target.node)))
    })?
}

/// A resource as the task returns it: its metadata, and its spec parsed from the YAML Talos sends
/// (the text itself when it does not parse).
fn resource_json(r: &Resource) -> Value {
    let m = r.metadata.clone().unwrap_or_default();
    let yaml = r
        .spec
        .as_ref()
        .map(|s| s.yaml_spec.clone())
        .unwrap_or_default();
    let spec = serde_saphyr::from_str::<Value>(&yaml).unwrap_or(Value::String(yaml));
    json!({
        "namespace": m.namespace,
        "type": m.r#type,
        "id": m.id,
        "version": m.version,
        "phase": m.phase,
        "labels": m.labels,
        "spec": spec,
    })
}
