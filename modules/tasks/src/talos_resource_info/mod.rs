//! `talos_resource_info`: read any Talos resource, as `talosctl get` does: one by id or every one
//! of a type, over COSI `State/Get` and `State/List`, from a configured node or one in maintenance
//! mode (where the reader role may read what is not sensitive). The disks and volumes an install
//! disk is chosen from are `Disks.block.talos.dev` and `VolumeStatuses.block.talos.dev`.
//!
//! The type may be named as `talosctl get` takes it: its full name or any alias, regardless of
//! case (`pkg/machinery/client/resources.go` `ResolveResourceKind` @ v1.13.9), and without a
//! namespace the type's own default namespace is read, as talosctl reads it.
//!
//! Sensitive types are refused, whatever the credentials. Upstream marks a type sensitive in its
//! resource definition (`Sensitivity: meta.Sensitive`, `pkg/machinery/resources/*` @ v1.13.9 and
//! v1.14.1) and apid then serves it to os:admin only (`internal/app/resources/access.go`
//! `AccessPolicy`); this module holds admin credentials, and the values would land in the task's
//! result. The list is upstream's own (`resource_types`, generated from those definitions), plus
//! the whole `secrets` namespace, checked before connecting; after connecting, the node's own
//! definition of the type (`ResourceDefinitions.meta.cosi.dev`) is read too, so a type a newer
//! release marks sensitive is refused as well. Refused rather than redacted: upstream marks sensitivity per
//! type, not per field, so no field of such a spec is known to be safe to show; `talosctl
//! support` likewise drops the spec of every sensitive type (go-talos-support
//! `support/collectors/talos.go` `talosResource`: `<REDACTED>`).

use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::proto::cosi::resource::Resource;
use ferro_talos_client::{ErrorKind, NodeMode, TalosClient, probe};
use serde_json::{Value, json};

use crate::shared::connection::{self, with_connection_options};
use crate::shared::failure::{OrFail, client_failure};
use crate::shared::resource_types::{self, Lookup, ResourceType};

mod args;
pub use args::Args;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("type").required())
        .option(Opt::str("namespace"))
        .option(Opt::str("id"))
}

/// COSI's own type of resource definitions, one per registered type, id the type in lower case
/// (cosi-project/runtime v1.14.1 `pkg/resource/meta/resource_definition.go`); not sensitive, so
/// every role reads it, in maintenance mode too.
const DEFINITIONS: (&str, &str) = ("meta", "ResourceDefinitions.meta.cosi.dev");

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        kind,
        namespace: table_namespace,
        id,
    } = args;
    let creds = connection::credentials(ctx, &connection)?.map(|c| c.0);
    let opts = connection.connect_options(Duration::from_secs(30));
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
        .or_fail()?;
        // The node's own definition of the type has the last word: its release may mark
        // sensitive a type the table does not know, or not register the type at all.
        let definition = node_definition(&client, &kind).await.or_fail()?;
        let definition = readable_on_node(&target.node, &kind, definition)?;
        let kind = definition.name;
        let namespace = table_namespace.unwrap_or(definition.default_namespace);
        if namespace == "secrets" {
            return Err(ModuleError::new(format!(
                "{kind} lives in namespace secrets, which holds the cluster's keys; they would land \
                 in the task's result, so talos_resource_info does not read it"
            )));
        }
        let resources = match &id {
            Some(id) => match client.get_resource(&namespace, &kind, id).await {
                Ok(r) => vec![r],
                Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(client_failure(e)),
            },
            None => client.list_resources(&namespace, &kind).await.or_fail()?,
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

/// The type to read and, when the user gave one or the table knows the type, its namespace, from
/// what the user wrote; a sensitive type, the `secrets` namespace, an ambiguous name or a short
/// name the table does not know is an error.
fn readable_type(
    written: &str,
    namespace: Option<&str>,
) -> Result<(String, Option<String>), ModuleError> {
    if written.is_empty() {
        return Err(ModuleError::new(
            "type must name a resource type, like Disks.block.talos.dev or disks (talosctl get rd lists them)",
        ));
    }
    let t = match resource_types::resolve(written) {
        Lookup::Ambiguous(types) => {
            return Err(ModuleError::new(format!(
                "type {written:?} names more than one resource type ({}); write the full name of \
                 the one you mean",
                types.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
            )));
        }
        Lookup::Known(t) if t.is_sensitive() => return Err(ModuleError::new(refusal(written, t))),
        Lookup::Known(t) => Some(t),
        Lookup::Unknown => None,
    };
    if namespace == Some("secrets") {
        return Err(ModuleError::new(format!(
            "namespace secrets holds the cluster's keys, which would land in the task's result; \
             they are in the cluster's secrets bundle (talos_config's secrets_file), so \
             talos_resource_info does not read {written} there"
        )));
    }
    match t {
        Some(t) => Ok((
            t.name.to_string(),
            Some(namespace.unwrap_or(t.default_namespace).to_string()),
        )),
        // A type the table does not know (a newer release's, an extension's), written in full:
        // the node's own definition of it decides (`node_definition`).
        None if written.contains('.') => Ok((written.to_string(), namespace.map(str::to_string))),
        None => Err(ModuleError::new(format!(
            "type {written:?} is no resource type or alias Talos {} registers; write a resource \
             type's full name, like Disks.block.talos.dev, or an alias, like disks (talosctl get \
             rd lists them)",
            resource_types::releases_text(resource_types::upstream())
        ))),
    }
}

/// Why a sensitive type is not read, and what to read instead.
fn refusal(written: &str, t: &ResourceType) -> String {
    let instead = if t.name == "MachineConfigs.config.talos.dev" {
        "read the machine config's facts with ferro.talos.talos_info, or its changes, masked, \
         with ferro.talos.talos_apply in check mode"
            .to_string()
    } else if t.default_namespace == "secrets" {
        "the cluster's keys and certificates are in its secrets bundle (talos_config's \
         secrets_file)"
            .to_string()
    } else if let Some(status) = status_of(t) {
        format!(
            "{} holds what Talos made of it, with no secret values, and may be read",
            status.name
        )
    } else {
        format!(
            "talosctl get {} shows it on your terminal, outside any task result",
            t.short_name()
        )
    };
    let named = if written == t.name {
        t.name.to_string()
    } else {
        format!("type {written:?} is {}, which", t.name)
    };
    format!(
        "{named} may hold secrets: Talos {} mark{} it sensitive (only os:admin may read it; {}), \
         and its values would land in the task's result, so talos_resource_info does not read \
         it; {instead}",
        resource_types::releases_text(t.sensitive_in),
        if t.sensitive_in.len() == 1 { "s" } else { "" },
        t.source
    )
}

/// The status type beside a spec or config type (`LinkSpecs` and `LinkStatuses`), when upstream
/// has one that is not sensitive itself.
fn status_of(t: &ResourceType) -> Option<&'static ResourceType> {
    let (plural, suffix) = t.name.split_once('.')?;
    let stem = plural
        .strip_suffix("Specs")
        .or_else(|| plural.strip_suffix("Configs"))?;
    resource_types::by_name(&format!("{stem}Statuses.{suffix}")).filter(|s| !s.is_sensitive())
}

/// What a node's resource definition says of a type (its YAML spec: `type`, `defaultNamespace`,
/// `sensitivity` only when `sensitive`; cosi-project/runtime `pkg/resource/meta/spec/spec.go`).
struct NodeDefinition {
    name: String,
    default_namespace: String,
    sensitive: bool,
}

/// The node's definition of `kind` (matched without regard to case, as apid's access filter
/// looks it up: `internal/app/resources/access.go` `AccessPolicy`); `None` when the node
/// registers no such type.
async fn node_definition(
    client: &TalosClient,
    kind: &str,
) -> Result<Option<NodeDefinition>, ferro_talos_client::ClientError> {
    let r = match client
        .get_resource(DEFINITIONS.0, DEFINITIONS.1, &kind.to_lowercase())
        .await
    {
        Ok(r) => r,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let yaml = r.spec.map(|s| s.yaml_spec).unwrap_or_default();
    Ok(Some(parse_definition(kind, &yaml)))
}

fn parse_definition(kind: &str, yaml: &str) -> NodeDefinition {
    let spec = serde_saphyr::from_str::<Value>(yaml).unwrap_or(Value::Null);
    let text = |key: &str| spec.get(key).and_then(Value::as_str).map(str::to_string);
    NodeDefinition {
        name: text("type").unwrap_or_else(|| kind.to_string()),
        default_namespace: text("defaultNamespace").unwrap_or_else(|| "runtime".to_string()),
        // Anything but the one non-sensitive value (empty, left out) is treated as sensitive.
        sensitive: text("sensitivity").is_some_and(|s| !s.is_empty()),
    }
}

/// The node's definition of the type, when the node has one that is not sensitive.
fn readable_on_node(
    node: &str,
    kind: &str,
    definition: Option<NodeDefinition>,
) -> Result<NodeDefinition, ModuleError> {
    match definition {
        None => Err(ModuleError::new(format!(
            "node {node} registers no resource type {kind}: write one it has (talosctl get rd \
             lists them)"
        ))),
        Some(d) if d.sensitive => Err(ModuleError::new(format!(
            "{} may hold secrets: node {node}'s own definition of it marks it sensitive (only \
             os:admin may read it), and its values would land in the task's result, so \
             talos_resource_info does not read it; talosctl get {} shows it on your terminal, \
             outside any task result",
            d.name, d.name
        ))),
        Some(d) => Ok(d),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name `talosctl get` takes for a type, as a user may write it.
    fn spellings(t: &ResourceType) -> Vec<String> {
        let mut out = vec![
            t.name.to_string(),
            t.name.to_lowercase(),
            t.name.to_uppercase(),
        ];
        for alias in t.aliases {
            out.push(alias.to_string());
            out.push(alias.to_uppercase());
        }
        out
    }

    /// Each type upstream marks sensitive at v1.13.9 or v1.14.1 (the generated table), by each of
    /// its names, in any namespace: refused before anything is read, naming the type, where
    /// upstream marks it, and what to read instead.
    #[test]
    fn every_sensitive_type_is_refused_by_every_name() {
        let sensitive: Vec<&ResourceType> = resource_types::all()
            .iter()
            .filter(|t| t.is_sensitive())
            .collect();
        assert!(sensitive.len() >= 38, "{}", sensitive.len());
        for t in sensitive {
            for spelling in spellings(t) {
                for namespace in [
                    None,
                    Some(t.default_namespace),
                    Some("runtime"),
                    Some("secrets"),
                ] {
                    let err = readable_type(&spelling, namespace)
                        .expect_err(&format!("{spelling} in {namespace:?} is refused"))
                        .msg;
                    assert!(err.contains(t.name), "{spelling}: {err}");
                    if err.contains("more than one resource type") {
                        continue;
                    }
                    assert!(err.contains("would land in the task's result"), "{err}");
                    assert!(err.contains(t.source), "{err}");
                    assert!(
                        err.contains(&resource_types::releases_text(t.sensitive_in)),
                        "{err}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_types_resolve_to_their_name_and_default_namespace() {
        for t in resource_types::all().iter().filter(|t| !t.is_sensitive()) {
            for spelling in spellings(t) {
                match resource_types::resolve(&spelling) {
                    Lookup::Known(_) => assert_eq!(
                        readable_type(&spelling, None).expect("readable"),
                        (t.name.to_string(), Some(t.default_namespace.to_string())),
                        "{spelling}"
                    ),
                    Lookup::Ambiguous(_) => {
                        let err = readable_type(&spelling, None).expect_err("ambiguous").msg;
                        assert!(err.contains("write the full name"), "{err}");
                    }
                    Lookup::Unknown => panic!("{spelling} is one of {}'s names", t.name),
                }
            }
        }
        assert_eq!(
            readable_type("nodename", Some("k8s")).expect("readable"),
            ("Nodenames.kubernetes.talos.dev".into(), Some("k8s".into()))
        );
    }

    #[test]
    fn what_to_read_instead() {
        let refused = |spelling: &str| readable_type(spelling, None).unwrap_err().msg;
        assert!(refused("MachineConfigs.config.talos.dev").contains("ferro.talos.talos_info"));
        assert!(refused("osrootsecrets").contains("secrets bundle"));
        assert!(refused("LinkSpecs.net.talos.dev").contains("LinkStatuses.net.talos.dev"));
        assert!(refused("volumeconfigs").contains("VolumeStatuses.block.talos.dev"));
        let ksi = refused("ksi");
        assert!(
            ksi.starts_with("type \"ksi\" is KubeSpanIdentities.kubespan.talos.dev"),
            "{ksi}"
        );
        assert!(ksi.contains("talosctl get ksi"), "{ksi}");
        let secrets_namespace = readable_type("Disks.block.talos.dev", Some("secrets"))
            .unwrap_err()
            .msg;
        assert!(
            secrets_namespace.contains("namespace secrets"),
            "{secrets_namespace}"
        );
    }

    /// A release newer than the table may mark sensitive a type the table does not know: the
    /// node's resource definition (`sensitivity: sensitive` in its YAML spec) refuses it.
    #[test]
    fn the_nodes_own_definition_refuses_what_it_marks_sensitive() {
        let newer = parse_definition(
            "widgets.example.dev",
            "type: Widgets.example.dev\ndisplayType: Widget\ndefaultNamespace: widgets\n\
             aliases: []\nallAliases: []\nprintColumns: []\nsensitivity: sensitive\n",
        );
        let err = readable_on_node("10.0.0.5", "widgets.example.dev", Some(newer))
            .err()
            .expect("refused")
            .msg;
        assert!(
            err.starts_with("Widgets.example.dev may hold secrets"),
            "{err}"
        );
        assert!(err.contains("node 10.0.0.5's own definition"), "{err}");
        let plain = parse_definition(
            "widgets.example.dev",
            "type: Widgets.example.dev\ndefaultNamespace: widgets\n",
        );
        let d = readable_on_node("10.0.0.5", "widgets.example.dev", Some(plain)).expect("readable");
        assert_eq!(
            (d.name.as_str(), d.default_namespace.as_str()),
            ("Widgets.example.dev", "widgets")
        );
        let none = readable_on_node("10.0.0.5", "Widgets.example.dev", None)
            .err()
            .expect("refused")
            .msg;
        assert!(
            none.contains("registers no resource type Widgets.example.dev"),
            "{none}"
        );
    }

    #[test]
    fn a_name_that_is_no_type_says_what_to_write() {
        let err = readable_type("nosuchthing", None).unwrap_err().msg;
        assert!(err.contains("type \"nosuchthing\""), "{err}");
        assert!(err.contains("Disks.block.talos.dev"), "{err}");
        // A full name the table does not know (a newer release's) is for the node to judge.
        assert_eq!(
            readable_type("Widgets.example.dev", None).expect("passed on"),
            ("Widgets.example.dev".into(), None)
        );
        assert!(readable_type("", None).is_err());
    }
}
