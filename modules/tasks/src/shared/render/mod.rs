//! One node's machine config, rendered from the secrets bundle and the cluster's options the way
//! `talosctl gen config` and its patches do: what `talos_config` writes to `dest`, and what
//! `talos_apply` renders in place with its `render` option (so that no rendered config, secrets and
//! all, is ever written to disk between two tasks).

use std::path::Path;

use ferro_ansible_protocol::{Context, ModuleError, Opt, Spec, Type};
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{
    GenerateOptions, KUBERNETES_API_PORT, MachineType, installer_for_release,
};
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::patch::{Patch, duplicate_warnings};
use ferro_talos_config::{MachineConfig, known_keys, redact, validate};
use ferro_talos_secrets::Bundle;
use ferro_talos_secrets::yaml::kind_name;
use serde_json::{Value, json};

use crate::shared::config_shape::{LabelledPatch, check_null_items, patches_for_contract};
use crate::shared::files::read_file_or_content;
use crate::shared::node_settings;

mod args;
pub(crate) use args::strings;
pub use args::{Generate, InstallImage, RenderArgs, Source, contract};

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

/// Renders the config that `args` describes. Every secret value in it is masked from here on;
/// duplicate patch targets and validation findings are warnings, and a config that fails
/// validation (with `validate: true`) is an error.
pub fn render(
    ctx: &mut Context,
    args: &RenderArgs,
    bundle: Option<&Bundle>,
) -> Result<Rendered, ModuleError> {
    let contract = args.contract;
    let (config, shape_records) = patched(ctx, args, bundle)?;
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
    if args.validate {
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
    args: &RenderArgs,
    bundle: Option<&Bundle>,
) -> Result<(MachineConfig, Vec<Value>), ModuleError> {
    let contract = args.contract;
    let mut cfg = match &args.source {
        Source::Base(base) => {
            let text = read_file_or_content(base).map_err(|e| option_error("base_config", e))?;
            MachineConfig::parse(&text).map_err(|e| option_error("base_config", e))?
        }
        Source::Generate(generate) => {
            let bundle = bundle.ok_or_else(|| {
                ModuleError::new(
                    "rendering a machine config needs the secrets bundle: set secrets_file or secrets",
                )
            })?;
            let mut opts = generate_options(ctx, generate, contract);
            if args.settings.replaces_install_disk(contract) {
                opts.install_disk = None;
            }
            MachineConfig::generate(bundle, &opts).map_err(module_error)?
        }
    };
    let machine = args.machine_type().unwrap_or_else(|| machine_type_of(&cfg));
    // The node's own settings first, so the task's patches still have the last word.
    if let Some(patch) = args.settings.patch(ctx, contract, machine)? {
        cfg.apply_patches_with(&[patch], Rules::for_contract(contract))
            .map_err(|e| ModuleError::new(format!("the node's settings: {e:#}")))?;
    }
    let (patches, records) = patches_for_contract(
        ctx,
        load_patches(&args.patches)?,
        contract,
        machine,
        args.old_shape,
    )?;
    cfg.apply_patches_with(&patches, Rules::for_contract(contract))
        .map_err(|e| ModuleError::new(format!("patches: {e:#}")))?;
    Ok((cfg, records))
}

/// The machine type a base config says it is.
fn machine_type_of(cfg: &MachineConfig) -> MachineType {
    let name = cfg
        .v1alpha1()
        .and_then(|d| d.pointer("/machine/type"))
        .and_then(Value::as_str)
        .unwrap_or("worker");
    match name {
        "controlplane" | "init" => MachineType::ControlPlane,
        _ => MachineType::Worker,
    }
}

/// talosctl's defaults for the contract, with what the task sets; a port-less endpoint is warned
/// about, since Kubernetes clients then use 443.
fn generate_options(ctx: &mut Context, g: &Generate, contract: Contract) -> GenerateOptions {
    let endpoint = &g.cluster_endpoint;
    if endpoint.implicit_443 {
        ctx.warn(format!(
            "cluster_endpoint {} names no port, so Kubernetes clients use 443; the API server \
             listens on {KUBERNETES_API_PORT}: write the port unless a load balancer forwards 443",
            endpoint.url
        ));
    }
    let mut opts = GenerateOptions::new(
        contract,
        g.machine_type,
        &g.cluster_name,
        endpoint.url.clone(),
    );
    if let Some(version) = &g.kubernetes_version {
        opts.kubernetes_version = version.clone();
    }
    opts.install_disk = g.install_disk.clone();
    match &g.install_image {
        InstallImage::ContractDefault => {}
        InstallImage::Given(image) => opts.install_image = image.clone(),
        // A full release (v1.13.9) is the installer a user means, as talosctl of that release
        // writes its own tag: a node booted from that release's media is never pointed at an
        // older installer by a default.
        InstallImage::Release(release) => {
            opts.install_image = Some(installer_for_release(contract, release))
        }
    }
    opts.additional_sans = g.additional_sans.clone();
    opts.dns_domain = g.dns_domain.clone();
    opts.pod_subnets = g.pod_subnets.clone();
    opts.service_subnets = g.service_subnets.clone();
    opts.allow_scheduling_on_control_planes = g.allow_scheduling_on_control_planes;
    opts.install_extra_kernel_args = g.install_extra_kernel_args.clone();
    opts.local_api_server_port = g.local_api_server_port;
    opts.registry_mirrors = g.registry_mirrors.clone();
    opts
}

/// Patches in order; empty ones are dropped (Talos would turn them into an empty JSON patch that
/// fails on every multi-document config).
fn load_patches(given: &[Value]) -> Result<Vec<LabelledPatch>, ModuleError> {
    let mut out = Vec::new();
    for (i, item) in given.iter().enumerate() {
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

/// A node installs from `image` only if its registry has it: the stock installer of a release
/// ghcr.io no longer carries (1.14 on) would be pulled again and again and never installed.
pub(super) fn refuse_unpublished_installer(image: &str) -> Result<(), ModuleError> {
    use ferro_talos_config::image::{split_image, unpublished_installer};
    let (repository, tag) = split_image(image.trim());
    let release = tag.and_then(|t| semver::Version::parse(t.trim_start_matches('v')).ok());
    match release.and_then(|r| unpublished_installer(repository, &r)) {
        Some(why) => Err(ModuleError::new(format!("install_image: {why}"))),
        None => Ok(()),
    }
}

pub(super) fn non_empty(value: Option<&str>) -> Option<String> {
    value.filter(|s| !s.is_empty()).map(str::to_string)
}

/// The whole error chain (`{:#}`), of an anyhow error or of a library crate's typed one.
pub(super) fn option_error(option: &str, e: impl std::fmt::Display) -> ModuleError {
    ModuleError::new(format!("{option}: {e:#}"))
}

/// The whole error chain (`{:#}`), of an anyhow error or of a library crate's typed one.
fn module_error(e: impl std::fmt::Display) -> ModuleError {
    ModuleError::new(format!("{e:#}"))
}
