//! The module's options, validated into a `Request` before anything connects.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};
use ferro_talos_config::image::stock_installer_repository;
use semver::Version;

use super::DEFAULT_TIMEOUT_SECS;
use super::image::{OsTarget, check_repository, parse_installer_image, unpublished};
use super::version_policy::parse_version;
use crate::shared::upgrade_drain::{DEFAULT_DRAIN_TIMEOUT_SECS, DrainOptions};

/// How the node reboots into the new Talos (`reboot_mode`): Talos's reboot modes of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reboot {
    Default,
    Powercycle,
}

/// The validated options.
#[derive(Debug, Clone)]
pub struct Request {
    pub os: Option<OsTarget>,
    pub kubernetes: Option<Version>,
    pub allow_downgrade: bool,
    pub stage: bool,
    pub reboot: Reboot,
    pub wait: bool,
    pub timeout: Duration,
    pub drain: DrainOptions,
}

impl Request {
    pub fn from_params(p: &Params) -> Result<Request, ModuleError> {
        let os = match (p.str("image"), p.str("talos_version")) {
            (Some(image), _) => {
                if p.is_set("installer_repository") {
                    return Err(ModuleError::new(
                        "installer_repository only applies with talos_version; image already names the installer",
                    ));
                }
                let target = parse_installer_image(image)
                    .map_err(|e| ModuleError::new(format!("image: {e}")))?;
                if let Some(why) = unpublished(&target) {
                    return Err(ModuleError::new(format!("image: {why}")));
                }
                Some(target)
            }
            (None, Some(v)) => {
                let version = parse_version(v)
                    .map_err(|e| ModuleError::new(format!("talos_version: {e}")))?;
                // Unset: the stock installer of the target release, where upstream publishes it
                // and talosctl of that release upgrades to by default (ghcr.io's up to 1.13, the
                // Image Factory's vanilla installer from 1.14: `cmd/talosctl/cmd/talos/upgrade.go`
                // init @ v1.13.9 and @ v1.14.1).
                let repo = match p.str("installer_repository") {
                    Some(repo) => repo,
                    None => stock_installer_repository(&version),
                };
                check_repository(repo)
                    .map_err(|e| ModuleError::new(format!("installer_repository: {e}")))?;
                let target = OsTarget {
                    image: format!("{}:v{version}", repo.trim()),
                    version,
                };
                if let Some(why) = unpublished(&target) {
                    return Err(ModuleError::new(format!("installer_repository: {why}")));
                }
                Some(target)
            }
            (None, None) => None,
        };
        let kubernetes = match p.str("kubernetes_version") {
            Some(v) => Some(
                parse_version(v)
                    .map_err(|e| ModuleError::new(format!("kubernetes_version: {e}")))?,
            ),
            None => None,
        };
        let timeout = crate::shared::options::wait_seconds(p, "timeout", DEFAULT_TIMEOUT_SECS)?;
        let wait = p.bool("wait");
        let drain_timeout =
            crate::shared::options::wait_seconds(p, "drain_timeout", DEFAULT_DRAIN_TIMEOUT_SECS)?;
        let drain = p.bool("drain");
        if drain && !wait && os.is_some() {
            return Err(ModuleError::new(
                "wait=false cannot be combined with drain=true: the node is uncordoned once it is back \
                 and Ready, which needs the wait (talosctl turns --wait on for --drain too); set \
                 drain: false to upgrade without draining and waiting",
            ));
        }
        if !wait && os.is_some() && kubernetes.is_some() {
            return Err(ModuleError::new(
                "wait=false cannot be combined with a Talos target and kubernetes_version: the Kubernetes \
                 upgrade needs the node back from its OS upgrade; run them as two tasks",
            ));
        }
        Ok(Request {
            os,
            kubernetes,
            allow_downgrade: p.bool("allow_downgrade"),
            stage: p.bool("stage"),
            reboot: if p.str("reboot_mode") == Some("powercycle") {
                Reboot::Powercycle
            } else {
                Reboot::Default
            },
            wait,
            timeout,
            drain: DrainOptions {
                enabled: drain,
                timeout: drain_timeout,
            },
        })
    }
}
