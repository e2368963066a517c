//! One node's machine config, rendered from the secrets bundle and the cluster's options the way
//! `talosctl gen config` and its patches do: what `talos_config` writes to `dest`, and what
//! `talos_apply` renders in place with its `render` option (so that no rendered config, secrets and
//! all, is ever written to disk between two tasks).

use std::path::Path;

use ferro_ansible_protocol::{Context, ModuleError, Opt, Params, Spec, Type};
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{
    GenerateOptions, KUBERNETES_API_PORT, MachineType, endpoint_url, installer_for_release,
};
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::patch::{Patch, duplicate_warnings};
use ferro_talos_config::{MachineConfig, known_keys, redact, validate};
use ferro_talos_secrets::Bundle;
use ferro_talos_secrets::yaml::kind_name;
use serde_json::{Value, json};

use crate::shared::config_shape::{
    LabelledPatch, OldShape, check_null_items, patches_for_contract,
};
use crate::shared::files::read_file_or_content;
use crate::shared::node_settings::{self, NodeSettings};

/// The options that decide a rendered config, shared by `talos_config` (top-level options) and
/// `talos_apply` (sub-options of `render`); documented in both modules' sidecars.
pub fn options(spec: Spec) -> Spec {
    let spec = spec
        .option(Opt::str("machine_type").choices(&["controlplane", "worker"]))
        .option(Opt::str("cluster_name"))
        .option(Opt::str("cluster_endpoint"))
        .option(Opt::str("talos_version").default("v1.13"))
        .option(Opt::str("kubernetes_version"))
        .option(Opt::str("install_disk").default("/dev/sda"))
        .option(Opt::str("install_image"))
        .option(
            Opt::list("additional_sans")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::str("dns_domain").default("cluster.local"))
        .option(
            Opt::list("pod_subnets")
                .elements(Type::Str)
                .default(json!(["10.244.0.0/16"])),
        )
        .option(
            Opt::list("service_subnets")
                .elements(Type::Str)
                .default(json!(["10.96.0.0/12"])),
        )
        .option(Opt::bool("allow_scheduling_on_control_planes").default(false))
        .option(Opt::dict("registry_mirrors").default(json!({})))
        .option(
            Opt::list("install_extra_kernel_args")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::int("local_api_server_port"))
        .option(Opt::list("patches").elements(Type::Raw).default(json!([])))
        .option(Opt::str("base_config"))
        .option(Opt::bool("validate").default(true))
        .option(Opt::bool("convert_patches").default(false))
        .mutually_exclusive(&["base_config", "machine_type"]);
    node_settings::options(spec)
}

/// The version contract from `talos_version`, and why it is that one (for the result).
pub fn contract(p: &Params) -> Result<(Contract, String), ModuleError> {
    let contract = Contract::parse(p.str("talos_version").unwrap_or("v1.13"))
        .map_err(|e| option_error("talos_version", e))?;
    // The 1.14 config shape changes what patches may say.
    let reason = match p.str("talos_version") {
        Some(v) => format!("talos_version is {v}"),
        None => "talos_version is not set: the default contract, v1.13".to_string(),
    };
    Ok((contract, reason))
}

/// A config rendered, checked and ready to write or send.
pub struct Rendered {
    pub config: MachineConfig,
    /// The text talosctl of the contract's release would write (its Go types' yaml tags decide).
    pub text: String,
    pub rules: Rules,
    /// What happened to fields of the old config shape, under `shape_key` in results.
    pub shape_records: Vec<Value>,
    pub shape_key: &'static str,
}

/// Renders the config that `p` (the options of [`options`]) describes. Every secret value in it is
/// masked from here on; duplicate patch targets and validation findings are warnings, and a config
/// that fails validation (with `validate: true`) is an error.
pub fn render(
    ctx: &mut Context,
    p: &Params,
    contract: Contract,
    bundle: Option<&Bundle>,
) -> Result<Rendered, ModuleError> {
    let (config, shape_records) = patched(ctx, p, contract, bundle)?;
    for s in redact::secret_values(&config) {
        ctx.mask(s);
    }
    for w in duplicate_warnings(&config) {
        ctx.warn(w);
    }
    // Talos 1.13 refuses the whole config for a document kind it does not know; say so now, not
    // at apply time on the node.
    // A base config, or a JSON patch, can carry a null item Talos 1.14 refuses too.
    check_null_items(ctx, "the rendered config", &config.docs, contract)?;
    let unknown = known_keys::kinds_unknown_to(&config, contract);
    if !unknown.is_empty() {
        return Err(ModuleError::new(format!(
            "the rendered config has documents Talos {contract} does not know ({}); write their \
             settings in the v1alpha1 document instead (the README's \"Moving to Talos 1.14's config \
             shape\"), or set talos_version to 1.14 or later",
            unknown.join("; ")
        )));
    }
    if p.bool("validate") {
        match validate::validate(&config) {
            Ok(warnings) => warnings.into_iter().for_each(|w| ctx.warn(w)),
            Err(errors) => {
                return Err(ModuleError::new(format!(
                    "the rendered config is not valid: {}; fix the inputs or patches (or set validate: false)",
                    errors.join("; ")
                )));
            }
        }
    }
    let rules = Rules::for_contract(contract);
    let text = config.to_yaml_with(rules);
    Ok(Rendered {
        config,
        text,
        rules,
        shape_records,
        shape_key: if contract >= Contract::V1_14 {
            "converted_patches"
        } else {
            "deprecated_for_1_14"
        },
    })
}

/// The generated (or base) config with the patches applied, and what happened to fields of the old
/// config shape (see `config_shape`).
fn patched(
    ctx: &mut Context,
    p: &Params,
    contract: Contract,
    bundle: Option<&Bundle>,
) -> Result<(MachineConfig, Vec<Value>), ModuleError> {
    let settings = NodeSettings::from_params(p)?;
    let mut cfg = if let Some(base) = p.str("base_config") {
        let text = read_file_or_content(base).map_err(|e| option_error("base_config", e))?;
        MachineConfig::parse(&text).map_err(|e| option_error("base_config", e))?
    } else {
        let bundle = bundle.ok_or_else(|| {
            ModuleError::new(
                "rendering a machine config needs the secrets bundle: set secrets_file or secrets",
            )
        })?;
        let mut opts = generate_options(ctx, p, contract)?;
        if settings.replaces_install_disk(contract) {
            opts.install_disk = None;
        }
        MachineConfig::generate(bundle, &opts).map_err(module_error)?
    };
    let machine = machine_type_of(p, &cfg)?;
    // The node's own settings first, so the task's patches still have the last word.
    if let Some(patch) = settings.patch(ctx, contract, machine)? {
        cfg.apply_patches_with(&[patch], Rules::for_contract(contract))
            .map_err(|e| ModuleError::new(format!("the node's settings: {e:#}")))?;
    }
    let old_shape = if p.bool("convert_patches") {
        OldShape::Convert
    } else {
        OldShape::Refuse
    };
    let (patches, records) =
        patches_for_contract(ctx, load_patches(p)?, contract, machine, old_shape)?;
    cfg.apply_patches_with(&patches, Rules::for_contract(contract))
        .map_err(|e| ModuleError::new(format!("patches: {e:#}")))?;
    Ok((cfg, records))
}

/// The machine type patches are converted for: the one rendered, or the base config's.
fn machine_type_of(p: &Params, cfg: &MachineConfig) -> Result<MachineType, ModuleError> {
    let name = match p.str("machine_type") {
        Some(t) => t.to_string(),
        None => cfg
            .v1alpha1()
            .and_then(|d| d.pointer("/machine/type"))
            .and_then(Value::as_str)
            .unwrap_or("worker")
            .to_string(),
    };
    Ok(match name.as_str() {
        "controlplane" | "init" => MachineType::ControlPlane,
        _ => MachineType::Worker,
    })
}

fn generate_options(
    ctx: &mut Context,
    p: &Params,
    contract: Contract,
) -> Result<GenerateOptions, ModuleError> {
    let machine_type = match p.str("machine_type") {
        Some("controlplane") => MachineType::ControlPlane,
        _ => MachineType::Worker,
    };
    let cluster_name = p
        .str("cluster_name")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ModuleError::new("machine_type needs cluster_name"))?;
    let endpoint = p
        .str("cluster_endpoint")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ModuleError::new(
                "machine_type needs cluster_endpoint, the Kubernetes API address or URL (e.g. 10.0.0.10 or https://10.0.0.10:6443)",
            )
        })?;
    let endpoint = endpoint_url(endpoint).map_err(|e| option_error("cluster_endpoint", e))?;
    if endpoint.implicit_443 {
        ctx.warn(format!(
            "cluster_endpoint {} names no port, so Kubernetes clients use 443; the API server \
             listens on {KUBERNETES_API_PORT}: write the port unless a load balancer forwards 443",
            endpoint.url
        ));
    }
    let mut opts = GenerateOptions::new(contract, machine_type, cluster_name, endpoint.url);
    if let Some(version) = p.str("kubernetes_version") {
        let bare = version.trim_start_matches('v');
        if semver::Version::parse(bare).is_err() {
            return Err(ModuleError::new(format!(
                "kubernetes_version must be a version like 1.36.2, got {version:?}"
            )));
        }
        opts.kubernetes_version = bare.to_string();
    }
    opts.install_disk = non_empty(p.str("install_disk"));
    if p.is_set("install_image") {
        opts.install_image = non_empty(p.str("install_image"));
        if let Some(image) = &opts.install_image {
            ferro_talos_config::image::check_reference(image)
                .map_err(|why| ModuleError::new(format!("install_image: {why}")))?;
            refuse_unpublished_installer(image)?;
        }
    } else if let Some(release) = p.str("talos_version").filter(|v| is_full_release(v)) {
        // A full release (v1.13.9) is the installer a user means, as talosctl of that release
        // writes its own tag: a node booted from that release's media is never pointed at an
        // older installer by a default.
        opts.install_image = Some(installer_for_release(contract, release));
    }
    opts.additional_sans = strings(p, "additional_sans");
    opts.dns_domain = p.str("dns_domain").unwrap_or("cluster.local").to_string();
    opts.pod_subnets = strings(p, "pod_subnets");
    opts.service_subnets = strings(p, "service_subnets");
    opts.allow_scheduling_on_control_planes = p.bool("allow_scheduling_on_control_planes");
    opts.install_extra_kernel_args = strings(p, "install_extra_kernel_args");
    if let Some(port) = p.int("local_api_server_port") {
        opts.local_api_server_port =
            Some(u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| {
                ModuleError::new(format!(
                    "local_api_server_port must be a TCP port (1-65535), got {port}"
                ))
            })?);
    }
    for (host, url) in p.dict("registry_mirrors").into_iter().flatten() {
        let url = url.as_str().filter(|u| !u.is_empty()).ok_or_else(|| {
            ModuleError::new(format!(
                "registry_mirrors.{host}: expected the mirror URL as a string, e.g. https://mirror.example.com"
            ))
        })?;
        opts.registry_mirrors.push((host.clone(), url.to_string()));
    }
    Ok(opts)
}

/// Patches in order; empty ones are dropped (Talos would turn them into an empty JSON patch that
/// fails on every multi-document config).
fn load_patches(p: &Params) -> Result<Vec<LabelledPatch>, ModuleError> {
    let mut out = Vec::new();
    for (i, item) in p.list("patches").unwrap_or_default().iter().enumerate() {
        let label = format!("patches[{i}]");
        let text = match item {
            Value::String(s) if s.starts_with('@') => {
                let path = Path::new(&s[1..]);
                std::fs::read_to_string(path).map_err(|e| {
                    ModuleError::new(format!(
                        "{label}: cannot read patch file {}: {e}",
                        path.display()
                    ))
                })?
            }
            Value::String(s) => s.clone(),
            Value::Object(_) | Value::Array(_) => item.to_string(),
            Value::Null => continue,
            other => {
                return Err(ModuleError::new(format!(
                    "{label}: expected YAML text, a dict, a list of JSON patch operations or @file, got {}",
                    kind_name(other)
                )));
            }
        };
        match Patch::parse_optional(&text) {
            Ok(Some(patch)) => out.push(LabelledPatch { label, patch }),
            Ok(None) => {}
            Err(e) => return Err(ModuleError::new(format!("{label}: {e:#}"))),
        }
    }
    Ok(out)
}

pub(crate) fn strings(p: &Params, name: &str) -> Vec<String> {
    p.str_list(name)
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// `v1.13.9` or `1.13.9-rc.0` (a release), not just the contract `v1.13`.
/// A node installs from `image` only if its registry has it: the stock installer of a release
/// ghcr.io no longer carries (1.14 on) would be pulled again and again and never installed.
fn refuse_unpublished_installer(image: &str) -> Result<(), ModuleError> {
    use ferro_talos_config::image::{split_image, unpublished_installer};
    let (repository, tag) = split_image(image.trim());
    let release = tag.and_then(|t| semver::Version::parse(t.trim_start_matches('v')).ok());
    match release.and_then(|r| unpublished_installer(repository, &r)) {
        Some(why) => Err(ModuleError::new(format!("install_image: {why}"))),
        None => Ok(()),
    }
}

fn is_full_release(version: &str) -> bool {
    version.trim().trim_start_matches('v').split('.').count() >= 3
}

fn non_empty(value: Option<&str>) -> Option<String> {
    value.filter(|s| !s.is_empty()).map(str::to_string)
}

/// The whole error chain (`{:#}`), of an anyhow error or of a library crate's typed one.
fn option_error(option: &str, e: impl std::fmt::Display) -> ModuleError {
    ModuleError::new(format!("{option}: {e:#}"))
}

/// The whole error chain (`{:#}`), of an anyhow error or of a library crate's typed one.
fn module_error(e: impl std::fmt::Display) -> ModuleError {
    ModuleError::new(format!("{e:#}"))
}
