//! What one node's inventory says about it (hostname, install disk selector, interfaces, name
//! servers, Kubernetes labels, annotations and taints), rendered into that node's config as the
//! contract's own documents: talhelper's per-node fields, so a user describes each node once in
//! host_vars instead of writing a patch per node.
//!
//! Where each setting lives depends on the contract (upstream's types at v1.13.9 and
//! v1.14.0-rc.1, `pkg/machinery/config/types/`):
//! - the hostname is `.machine.network.hostname` up to 1.11; from 1.12 the render holds a
//!   `HostnameConfig` (`auto: stable`), whose validation refuses a hostname next to `auto` other
//!   than `off` and refuses a static hostname in v1alpha1 (`network/hostname.go`);
//! - name servers are `.machine.network.nameservers` up to 1.13; the 1.14 render holds a
//!   `ResolverConfig`, which refuses them in v1alpha1 (`network/resolver.go`), so they go there;
//! - the install disk selector, labels, annotations and taints are written in the v1alpha1 shape
//!   and, for 1.14, converted by the same converter `convert_patches` uses
//!   (`ferro_talos_config::convert_114`: `UnattendedInstallConfig`, `KubeNodeConfig`);
//! - interfaces stay `.machine.network.interfaces`, which every contract still reads.
//!
//! The settings are applied before the task's patches, so an explicit patch still has the last
//! word.

use ferro_ansible_protocol::{Context, ModuleError, Opt, Params, Spec, Type};
use ferro_talos_config::contract::Contract;
use ferro_talos_config::convert_114::convert_patch;
use ferro_talos_config::disk_size::SizeCondition;
use ferro_talos_config::generate::MachineType;
use ferro_talos_config::patch::Patch;
use serde_json::{Map, Value, json};

/// The selector's options and the v1alpha1 keys they become (`InstallDiskSelector`).
const SELECTOR_KEYS: [(&str, &str); 9] = [
    ("size", "size"),
    ("name", "name"),
    ("model", "model"),
    ("serial", "serial"),
    ("modalias", "modalias"),
    ("uuid", "uuid"),
    ("wwid", "wwid"),
    ("type", "type"),
    ("bus_path", "busPath"),
];

/// The disk types `InstallDiskType` knows (`v1alpha1_types.go`).
const DISK_TYPES: [&str; 4] = ["ssd", "hdd", "nvme", "sd"];

/// The `node_settings` option, shared by `talos_config` and `talos_apply`'s `render`: one dict, so
/// the cluster role hands a host's `talos_cluster_node` over as it is.
pub fn options(spec: Spec) -> Spec {
    spec.option(Opt::dict("node_settings").options(settings()))
}

fn settings() -> Spec {
    let mut selector = Spec::new();
    for (option, _) in SELECTOR_KEYS {
        selector = selector.option(if option == "type" {
            Opt::str(option).choices(&DISK_TYPES)
        } else {
            Opt::str(option)
        });
    }
    Spec::new()
        .option(Opt::str("hostname"))
        .option(Opt::dict("install_disk_selector").options(selector))
        .option(Opt::list("network_interfaces").elements(Type::Dict))
        .option(Opt::list("nameservers").elements(Type::Str))
        .option(Opt::dict("node_labels"))
        .option(Opt::dict("node_annotations"))
        .option(Opt::dict("node_taints"))
}

/// One node's settings, read and checked.
#[derive(Default)]
pub struct NodeSettings {
    hostname: Option<String>,
    disk_selector: Option<Map<String, Value>>,
    interfaces: Vec<Value>,
    nameservers: Vec<String>,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    taints: Map<String, Value>,
}

impl NodeSettings {
    /// The settings of the render options `p` (none when `node_settings` is not given).
    pub fn from_params(p: &Params) -> Result<NodeSettings, ModuleError> {
        match p.sub("node_settings") {
            Some(settings) => Self::read(settings)
                .map_err(|e| ModuleError::new(format!("node_settings.{}", e.msg()))),
            None => Ok(NodeSettings::default()),
        }
    }

    fn read(p: &Params) -> Result<NodeSettings, ModuleError> {
        let hostname = p.str("hostname").filter(|h| !h.is_empty());
        if let Some(h) = hostname {
            check_hostname(h)?;
        }
        Ok(NodeSettings {
            hostname: hostname.map(str::to_string),
            disk_selector: p.sub("install_disk_selector").map(selector).transpose()?,
            interfaces: p.list("network_interfaces").unwrap_or_default().to_vec(),
            nameservers: crate::shared::render::strings(p, "nameservers"),
            labels: string_map(p, "node_labels")?,
            annotations: string_map(p, "node_annotations")?,
            taints: taints(p)?,
        })
    }

    /// Whether the render's own install disk gives way: the installer uses a selector when there
    /// is one (`Install` in `v1alpha1_sequencer_tasks.go`), so a 1.13 config says it once. The
    /// 1.14 render keeps its disk document for the converted selector to replace.
    pub fn replaces_install_disk(&self, contract: Contract) -> bool {
        self.disk_selector.is_some() && contract < Contract::V1_14
    }

    /// The settings as one strategic patch for `contract`, or none when the inventory says nothing.
    pub fn patch(
        &self,
        ctx: &mut Context,
        contract: Contract,
        machine: MachineType,
    ) -> Result<Option<Patch>, ModuleError> {
        let mut machine_section = Map::new();
        let mut network = Map::new();
        let mut docs = Vec::new();
        if let Some(hostname) = &self.hostname {
            if contract.greater_than(1, 11) {
                docs.push(json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig",
                                 "auto": "off", "hostname": hostname}));
            } else {
                network.insert("hostname".into(), json!(hostname));
            }
        }
        if !self.interfaces.is_empty() {
            network.insert("interfaces".into(), json!(self.interfaces));
        }
        if !self.nameservers.is_empty() {
            if contract >= Contract::V1_14 {
                let servers: Vec<Value> = self
                    .nameservers
                    .iter()
                    .map(|a| json!({"address": a}))
                    .collect();
                docs.push(json!({"apiVersion": "v1alpha1", "kind": "ResolverConfig",
                                 "nameservers": servers}));
            } else {
                network.insert("nameservers".into(), json!(self.nameservers));
            }
        }
        if !network.is_empty() {
            machine_section.insert("network".into(), Value::Object(network));
        }
        if let Some(selector) = &self.disk_selector {
            machine_section.insert("install".into(), json!({"diskSelector": selector}));
        }
        for (key, map) in [
            ("nodeLabels", &self.labels),
            ("nodeAnnotations", &self.annotations),
            ("nodeTaints", &self.taints),
        ] {
            if !map.is_empty() {
                machine_section.insert(key.into(), Value::Object(map.clone()));
            }
        }
        if !machine_section.is_empty() {
            docs.insert(0, json!({"machine": machine_section}));
        }
        if docs.is_empty() {
            return Ok(None);
        }
        if contract < Contract::V1_14 {
            return Ok(Some(Patch::Strategic(docs)));
        }
        let conversion = convert_patch(&docs, machine)
            .map_err(|e| ModuleError::new(format!("the node's settings: {e}")))?;
        for w in &conversion.warnings {
            ctx.warn(format!("the node's settings: {w}"));
        }
        Ok(Some(conversion.into_patch()))
    }
}

/// RFC 1123 labels, as Talos's hostname validation reads them (`network/hostname.go`: the first
/// label 1-63 characters, the whole name at most 253).
fn check_hostname(name: &str) -> Result<(), ModuleError> {
    let first = name.split('.').next().unwrap_or_default();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || first.is_empty() || !name.split('.').all(label_ok) {
        return Err(ModuleError::new(format!(
            "hostname {name:?} is not a host name: write letters, digits and '-' (such as cp-1 or \
             cp-1.lab.example), at most 63 characters before the first dot"
        )));
    }
    Ok(())
}

fn selector(p: &Params) -> Result<Map<String, Value>, ModuleError> {
    let mut out = Map::new();
    for (option, key) in SELECTOR_KEYS {
        let Some(value) = p.str(option).filter(|v| !v.is_empty()) else {
            continue;
        };
        if option == "size" {
            SizeCondition::parse(value)
                .map_err(|e| ModuleError::new(format!("install_disk_selector.size: {e}")))?;
        }
        out.insert(key.into(), json!(value));
    }
    if out.is_empty() {
        return Err(ModuleError::new(
            "install_disk_selector names nothing to match: give at least one of size, model, \
             serial, wwid, type, bus_path, name, modalias or uuid (such as size: '>= 100GB')",
        ));
    }
    Ok(out)
}

/// A dict of strings; numbers and booleans are written as the strings YAML would show.
fn string_map(p: &Params, option: &str) -> Result<Map<String, Value>, ModuleError> {
    let mut out = Map::new();
    for (key, value) in p.dict(option).into_iter().flatten() {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(ModuleError::new(format!(
                    "{option}.{key}: expected a string value, such as {key}: \"value\""
                )));
            }
        };
        out.insert(key.clone(), json!(text));
    }
    Ok(out)
}

/// Taints as Talos reads them: `key: value:Effect`, or `key: Effect` for no value (upstream cuts
/// at the first `:`, `NodeTaintSpecController` in `controllers/k8s/node_taint_spec.go`, v1.13.9),
/// checked for the effects Kubernetes knows.
fn taints(p: &Params) -> Result<Map<String, Value>, ModuleError> {
    let taints = string_map(p, "node_taints")?;
    for (key, value) in &taints {
        let text = value.as_str().unwrap_or_default();
        let effect = text.split_once(':').map_or(text, |(_, effect)| effect);
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(ModuleError::new(format!(
                "node_taints.{key}: expected value:Effect or Effect, with Effect one of \
                 NoSchedule, PreferNoSchedule or NoExecute (such as {key}: \"true:NoSchedule\"), \
                 got {text:?}"
            )));
        }
    }
    Ok(taints)
}
