//! `talos_support_bundle`: what a bug report about a Talos cluster needs, from every node, in
//! one tar.gz on the controller, like `talosctl support` (`cmd/talosctl/cmd/talos/support.go` @
//! v1.13.9 collects versions, services, resources and service logs per node).
//!
//! Unlike talosctl's, the bundle holds no machine config, kubeconfig or other secret resource,
//! and every secret of the cluster's bundle (when the task has it) is replaced by `***` in
//! everything collected, so the file can be attached to an issue. No resource type upstream
//! marks sensitive is ever collected (`resource_types`, upstream's own list); talosctl keeps
//! their metadata with the spec replaced by `<REDACTED>` (go-talos-support v0.2.1
//! `support/collectors/talos.go` `talosResource`), this bundle leaves them out altogether. It is still written 0600,
//! through a temporary file renamed into place. What could not be read is listed in
//! `errors.txt` instead of failing the task: a bundle is wanted most when nodes misbehave.

use std::io::Write;
use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_client::proto::cosi::resource::Resource;
use ferro_talos_client::{Credentials, NodeMode, TalosClient, probe};
use serde_json::json;

use crate::shared::connection::{self, Target, with_connection_options_for_nodes};
use crate::shared::etcd_members::{self, Members};
use crate::shared::files::{SECRET_MODE, write_atomic_with};
use crate::shared::resource_types;

mod args;
pub use args::Args;

/// The services whose logs are collected unless `services` says otherwise.
const DEFAULT_SERVICES: [&str; 6] = [
    "machined",
    "apid",
    "trustd",
    "containerd",
    "etcd",
    "kubelet",
];
/// The resources collected from every node: (file, namespace, type). Each must be `collectable`.
const RESOURCES: [(&str, &str, &str); 5] = [
    (
        "machinestatus",
        "runtime",
        "MachineStatuses.runtime.talos.dev",
    ),
    (
        "extensions",
        "runtime",
        "ExtensionStatuses.runtime.talos.dev",
    ),
    ("disks", "runtime", "Disks.block.talos.dev"),
    ("volumes", "runtime", "VolumeStatuses.block.talos.dev"),
    ("nodename", "k8s", "Nodenames.kubernetes.talos.dev"),
];

/// A type the bundle may hold: one upstream defines and does not mark sensitive.
fn collectable(kind: &str) -> bool {
    resource_types::by_name(kind).is_some_and(|t| !t.is_sensitive())
}

pub fn spec() -> Spec {
    with_connection_options_for_nodes(Spec::new())
        .option(Opt::path("dest").required())
        .option(
            Opt::list("services")
                .elements(Type::Str)
                .default(json!(DEFAULT_SERVICES)),
        )
        .option(Opt::int("tail_lines").default(5000))
        .option(Opt::int("timeout").default(120))
}

/// One file of the bundle.
struct Entry {
    path: String,
    content: Vec<u8>,
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        targets,
        dest,
        services,
        tail_lines,
        timeout,
    } = args;
    if dest.is_dir() {
        return Err(ModuleError::new(args::DEST_NOT_A_FILE));
    }
    let nodes: Vec<String> = targets.iter().map(|t| t.node.clone()).collect();
    let secrets: Vec<String> = connection::load_bundle(ctx, &connection.secrets)?
        .map(|b| ferro_talos_secrets::secret_strings(&b))
        .unwrap_or_default();
    let creds = connection::credentials(ctx, &connection)?.map(|c| c.0);
    let mut opts = connection.connect_options(Duration::from_secs(30));
    opts.stream_timeout = timeout;
    let result = ModuleResult::changed()
        .with("dest", dest.display().to_string())
        .with("nodes", nodes.clone());
    if ctx.check_mode {
        return Ok(result.msg(format!(
            "would collect a support bundle of {} node(s) into {}",
            nodes.len(),
            dest.display()
        )));
    }
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    connection::block_on(async {
        for target in &targets {
            collect(
                target,
                creds.as_ref(),
                &opts,
                &services,
                tail_lines,
                &mut entries,
                &mut errors,
            )
            .await;
        }
    })?;
    if !errors.is_empty() {
        entries.push(Entry {
            path: "errors.txt".into(),
            content: format!("{}\n", errors.join("\n")).into_bytes(),
        });
    }
    for entry in &mut entries {
        entry.content = scrub(&entry.content, &secrets);
    }
    let files = entries.len();
    write_atomic_with(&dest, SECRET_MODE, |file| {
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        for entry in &entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(entry.content.len() as u64);
            header.set_mode(0o600);
            header.set_cksum();
            tar.append_data(&mut header, &entry.path, entry.content.as_slice())?;
        }
        tar.into_inner()?.finish()?.flush()?;
        Ok(())
    })
    .map_err(|e| ModuleError::new(format!("dest {}: {e:#}", dest.display())))?;
    if !errors.is_empty() {
        ctx.warn(format!(
            "{} thing(s) could not be read; errors.txt in the bundle lists them",
            errors.len()
        ));
    }
    Ok(result
        .with("files", files)
        .with("errors", errors)
        .msg(format!(
            "wrote a support bundle of {} node(s), {files} file(s), to {}",
            nodes.len(),
            dest.display()
        )))
}

/// Everything one node answers, as files under its address; what it does not answer goes into
/// `errors`.
async fn collect(
    target: &Target,
    creds: Option<&Credentials>,
    opts: &ferro_talos_client::ConnectOptions,
    services: &[String],
    tail: u32,
    entries: &mut Vec<Entry>,
    errors: &mut Vec<String>,
) {
    let node = target.node.clone();
    let dir = node.replace(['/', ':'], "_");
    let client = match connect(target, creds, opts).await {
        Ok(c) => c,
        Err(e) => {
            errors.push(format!("{node}: {e}"));
            return;
        }
    };
    let mut add = |name: &str, content: Vec<u8>| {
        entries.push(Entry {
            path: format!("{dir}/{name}"),
            content,
        });
    };
    match client.version().await {
        Ok(v) => {
            let info = v.version.unwrap_or_default();
            add(
                "version.yaml",
                format!(
                    "tag: {}\nsha: {}\narch: {}\n",
                    info.tag, info.sha, info.arch
                )
                .into_bytes(),
            );
        }
        Err(e) => errors.push(format!("{node}: version: {e}")),
    }
    match client.service_list().await {
        Ok(list) => {
            let text: String = list
                .iter()
                .map(|s| {
                    let health = s
                        .health
                        .as_ref()
                        .map(|h| if h.healthy { "healthy" } else { "unhealthy" })
                        .unwrap_or("?");
                    format!("{}: {} ({health})\n", s.id, s.state)
                })
                .collect();
            add("services.txt", text.into_bytes());
        }
        Err(e) => errors.push(format!("{node}: services: {e}")),
    }
    add("etcd-members.txt", etcd_members_text(&client).await);
    for (file, namespace, kind) in RESOURCES {
        if !collectable(kind) {
            errors.push(format!(
                "{node}: {kind}: not collected: not a type upstream defines as not sensitive"
            ));
            continue;
        }
        match client.list_resources(namespace, kind).await {
            Ok(list) => add(
                &format!("{file}.yaml"),
                resources_yaml(&list, namespace, kind),
            ),
            Err(e) => errors.push(format!("{node}: {kind}: {e}")),
        }
    }
    for service in services {
        match client.service_log(service, Some(tail)).await {
            Ok(log) => add(&format!("logs/{service}.log"), log),
            Err(e) => errors.push(format!("{node}: {service} log: {e}")),
        }
    }
}

/// The etcd members the node lists, one a line, or a comment saying why there are none.
async fn etcd_members_text(client: &TalosClient) -> Vec<u8> {
    match etcd_members::members_of(client).await {
        Members::Present(members) => {
            let text: String = members
                .iter()
                .map(|m| format!("{:016x} {} {}\n", m.id, m.hostname, m.peer_urls.join(",")))
                .collect();
            text.into_bytes()
        }
        // Workers and nodes without etcd have none: worth a line, not an alarm.
        Members::NotRunning { service } => format!("# no etcd answers ({service})\n").into_bytes(),
        Members::Maintenance => b"# maintenance mode\n".to_vec(),
        Members::Unknown(why) => format!("# {why}\n").into_bytes(),
    }
}

/// Resources of one type as a YAML stream, each spec under a comment naming it.
fn resources_yaml(list: &[Resource], namespace: &str, kind: &str) -> Vec<u8> {
    list.iter()
        .map(|r| {
            let id = r
                .metadata
                .as_ref()
                .map(|m| m.id.clone())
                .unwrap_or_default();
            let spec = r
                .spec
                .as_ref()
                .map(|s| s.yaml_spec.clone())
                .unwrap_or_default();
            format!("---\n# {kind} {namespace}/{id}\n{spec}")
        })
        .collect::<String>()
        .into_bytes()
}

async fn connect(
    target: &Target,
    creds: Option<&Credentials>,
    opts: &ferro_talos_client::ConnectOptions,
) -> Result<TalosClient, ferro_talos_client::ClientError> {
    match creds {
        Some(creds) => match connection::node_mode(target, Some(creds), opts).await? {
            NodeMode::Maintenance => {
                TalosClient::connect_maintenance(target.maintenance_address(), opts.clone()).await
            }
            _ => connection::connect(target, creds, opts.clone()).await,
        },
        None => match probe(target.maintenance_address(), opts).await? {
            NodeMode::Configured => Err(ferro_talos_client::ClientError::new(
                &target.node,
                "collect support data",
                ferro_talos_client::ErrorKind::Credentials,
                "the node is configured and needs client credentials: set talosconfig, secrets_file or secrets",
            )),
            _ => TalosClient::connect_maintenance(target.maintenance_address(), opts.clone()).await,
        },
    }
}

/// Every known secret replaced by `***`, whatever the text around it.
fn scrub(content: &[u8], secrets: &[String]) -> Vec<u8> {
    if secrets.is_empty() {
        return content.to_vec();
    }
    let mut text = String::from_utf8_lossy(content).into_owned();
    for s in secrets.iter().filter(|s| s.len() >= 8) {
        text = text.replace(s.as_str(), "***");
    }
    text.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collected_type_is_one_upstream_does_not_mark_sensitive() {
        for (_, namespace, kind) in RESOURCES {
            let t = resource_types::by_name(kind).expect("upstream defines every collected type");
            assert!(!t.is_sensitive(), "{kind} is sensitive ({})", t.source);
            assert_eq!(t.default_namespace, namespace, "{kind}");
        }
    }

    #[test]
    fn sensitive_and_unknown_types_are_never_collectable() {
        for t in resource_types::all().iter().filter(|t| t.is_sensitive()) {
            assert!(!collectable(t.name), "{}", t.name);
        }
        assert!(!collectable("NoSuchThings.talos.dev"));
        assert!(collectable("Disks.block.talos.dev"));
    }
}
