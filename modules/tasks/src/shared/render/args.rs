//! The render options (`talos_config`'s top level, `talos_apply`'s `render`), checked once before
//! anything is read or generated. Files they name (`base_config`, `@file` patches) are read when
//! rendering, not here.

use ferro_ansible_protocol::{ModuleError, Params};
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{EndpointUrl, MachineType, endpoint_url};
use serde_json::Value;

use super::{non_empty, option_error};
use crate::shared::config_shape::OldShape;
use crate::shared::node_settings::NodeSettings;

/// What a render starts from, and everything it is told.
pub struct RenderArgs {
    pub contract: Contract,
    pub source: Source,
    pub settings: NodeSettings,
    /// `patches` as given: YAML text, a dict, JSON patch operations or `@file`.
    pub patches: Vec<Value>,
    pub validate: bool,
    pub old_shape: OldShape,
}

/// Where the config comes from before the node's settings and the patches.
pub enum Source {
    /// `base_config`: a config's text, or the path of a file holding one.
    Base(String),
    /// `machine_type`: a config generated from the secrets bundle, as `talosctl gen config` does.
    Generate(Box<Generate>),
}

/// The options of a generated config (`talosctl gen config`'s flags).
pub struct Generate {
    pub machine_type: MachineType,
    pub cluster_name: String,
    pub cluster_endpoint: EndpointUrl,
    /// `kubernetes_version` without its `v`.
    pub kubernetes_version: Option<String>,
    pub install_disk: Option<String>,
    pub install_image: InstallImage,
    pub additional_sans: Vec<String>,
    pub dns_domain: String,
    pub pod_subnets: Vec<String>,
    pub service_subnets: Vec<String>,
    pub allow_scheduling_on_control_planes: bool,
    pub install_extra_kernel_args: Vec<String>,
    pub local_api_server_port: Option<u16>,
    /// `registry_mirrors`: registry host and mirror URL, in the order given.
    pub registry_mirrors: Vec<(String, String)>,
}

/// The installer image the config names.
pub enum InstallImage {
    /// `install_image` unset, `talos_version` a contract: the contract's default installer.
    ContractDefault,
    /// `install_image` unset, `talos_version` a full release (`v1.13.9`): that release's installer.
    Release(String),
    /// `install_image` given (None when it was given empty).
    Given(Option<String>),
}

/// The contract `talos_version` names, and why it is that one (for the result).
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

impl RenderArgs {
    /// The render options in `p`, or None when they name nothing to render (neither
    /// `machine_type` nor `base_config`).
    pub fn from_params(p: &Params) -> Result<Option<RenderArgs>, ModuleError> {
        let (contract, _) = contract(p)?;
        let source = match (p.str("base_config"), p.str("machine_type")) {
            (Some(base), _) => Source::Base(base.to_string()),
            (None, Some(machine_type)) => Source::Generate(Box::new(generate(p, machine_type)?)),
            (None, None) => return Ok(None),
        };
        Ok(Some(RenderArgs {
            contract,
            source,
            settings: NodeSettings::from_params(p)?,
            patches: p.list("patches").unwrap_or_default().to_vec(),
            validate: p.bool("validate"),
            old_shape: if p.bool("convert_patches") {
                OldShape::Convert
            } else {
                OldShape::Refuse
            },
        }))
    }

    /// The machine type the render's patches are converted for, when the options say it (a base
    /// config says its own).
    pub fn machine_type(&self) -> Option<MachineType> {
        match &self.source {
            Source::Generate(g) => Some(g.machine_type),
            Source::Base(_) => None,
        }
    }
}

fn generate(p: &Params, machine_type: &str) -> Result<Generate, ModuleError> {
    let machine_type = match machine_type {
        "controlplane" => MachineType::ControlPlane,
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
    let cluster_endpoint =
        endpoint_url(endpoint).map_err(|e| option_error("cluster_endpoint", e))?;
    let kubernetes_version = match p.str("kubernetes_version") {
        Some(version) => {
            let bare = version.trim_start_matches('v');
            if semver::Version::parse(bare).is_err() {
                return Err(ModuleError::new(format!(
                    "kubernetes_version must be a version like 1.36.2, got {version:?}"
                )));
            }
            Some(bare.to_string())
        }
        None => None,
    };
    let install_image = if p.is_set("install_image") {
        let image = non_empty(p.str("install_image"));
        if let Some(image) = &image {
            ferro_talos_config::image::check_reference(image)
                .map_err(|why| ModuleError::new(format!("install_image: {why}")))?;
            super::refuse_unpublished_installer(image)?;
        }
        InstallImage::Given(image)
    } else {
        match p.str("talos_version").filter(|v| is_full_release(v)) {
            Some(release) => InstallImage::Release(release.to_string()),
            None => InstallImage::ContractDefault,
        }
    };
    let local_api_server_port = match p.int("local_api_server_port") {
        Some(port) => Some(u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| {
            ModuleError::new(format!(
                "local_api_server_port must be a TCP port (1-65535), got {port}"
            ))
        })?),
        None => None,
    };
    let mut registry_mirrors = Vec::new();
    for (host, url) in p.dict("registry_mirrors").into_iter().flatten() {
        let url = url.as_str().filter(|u| !u.is_empty()).ok_or_else(|| {
            ModuleError::new(format!(
                "registry_mirrors.{host}: expected the mirror URL as a string, e.g. https://mirror.example.com"
            ))
        })?;
        registry_mirrors.push((host.clone(), url.to_string()));
    }
    Ok(Generate {
        machine_type,
        cluster_name: cluster_name.to_string(),
        cluster_endpoint,
        kubernetes_version,
        install_disk: non_empty(p.str("install_disk")),
        install_image,
        additional_sans: strings(p, "additional_sans"),
        dns_domain: p.str("dns_domain").unwrap_or("cluster.local").to_string(),
        pod_subnets: strings(p, "pod_subnets"),
        service_subnets: strings(p, "service_subnets"),
        allow_scheduling_on_control_planes: p.bool("allow_scheduling_on_control_planes"),
        install_extra_kernel_args: strings(p, "install_extra_kernel_args"),
        local_api_server_port,
        registry_mirrors,
    })
}

/// A list of strings option (empty when unset).
pub(crate) fn strings(p: &Params, name: &str) -> Vec<String> {
    p.str_list(name)
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// `v1.13.9` or `1.13.9-rc.0` (a release), not just the contract `v1.13`.
fn is_full_release(version: &str) -> bool {
    version.trim().trim_start_matches('v').split('.').count() >= 3
}
