//! `talos_upgrade`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};
use ferro_talos_config::image::stock_installer_repository;
use semver::Version;

use super::DEFAULT_TIMEOUT_SECS;
use super::image::{OsTarget, check_repository, parse_installer_image, unpublished};
use super::version_policy::parse_version;
use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;
use crate::shared::upgrade_drain::{DEFAULT_DRAIN_TIMEOUT_SECS, DrainOptions};

/// How the node reboots into the new Talos (`reboot_mode`): Talos's reboot modes of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reboot {
    Default,
    Powercycle,
}

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// The Talos target, from `image` or from `talos_version` (with `installer_repository`);
    /// None when only Kubernetes moves.
    pub os: Option<OsTarget>,
    /// `kubernetes_version`; None when Kubernetes is left as it is.
    pub kubernetes: Option<Version>,
    pub allow_downgrade: bool,
    pub stage: bool,
    pub reboot: Reboot,
    pub wait: bool,
    pub timeout: Duration,
    pub drain: DrainOptions,
    pub kubeconfig: Option<PathBuf>,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let os = os_target(p)?;
        let kubernetes = match p.str("kubernetes_version") {
            Some(v) => Some(
                parse_version(v)
                    .map_err(|e| ModuleError::new(format!("kubernetes_version: {e}")))?,
            ),
            None => None,
        };
        let timeout = wait_seconds(p, "timeout", DEFAULT_TIMEOUT_SECS)?;
        let wait = p.bool("wait");
        let drain_timeout = wait_seconds(p, "drain_timeout", DEFAULT_DRAIN_TIMEOUT_SECS)?;
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
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        Ok(Args {
            connection,
            target,
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
            kubeconfig: p.path("kubeconfig"),
        })
    }
}

/// The Talos target `image` names, or `talos_version` in `installer_repository`; None when neither
/// is set.
fn os_target(p: &Params) -> Result<Option<OsTarget>, ModuleError> {
    Ok(match (p.str("image"), p.str("talos_version")) {
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
            let version =
                parse_version(v).map_err(|e| ModuleError::new(format!("talos_version: {e}")))?;
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
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::params;
    use crate::talos_upgrade::test_support::{FACTORY, v};

    fn args(given: serde_json::Value) -> Result<Args, ModuleError> {
        let mut all = json!({"node": " 10.5.0.3 ", "endpoint": "10.5.0.2"});
        all.as_object_mut()
            .unwrap()
            .extend(given.as_object().unwrap().clone());
        Args::from_params(&params(super::super::spec(), all))
    }

    fn refusal(given: serde_json::Value) -> String {
        args(given).err().expect("refused").msg
    }

    #[test]
    fn defaults_drain_wait_and_reboot_normally() {
        let a = args(json!({"talos_version": "v1.13.9"})).unwrap();
        assert_eq!(a.target.node, "10.5.0.3");
        assert!(a.target.routed());
        let os = a.os.unwrap();
        assert_eq!(os.image, "ghcr.io/siderolabs/installer:v1.13.9");
        assert_eq!(os.version, v("1.13.9"));
        assert_eq!(a.kubernetes, None);
        assert!(!a.allow_downgrade && !a.stage);
        assert_eq!(a.reboot, Reboot::Default);
        assert!(a.wait);
        assert_eq!(a.timeout, Duration::from_secs(1800));
        assert!(a.drain.enabled);
        assert_eq!(a.drain.timeout, Duration::from_secs(300));
        assert_eq!(a.kubeconfig, None);
    }

    #[test]
    fn the_target_comes_from_the_image_or_the_version_in_a_repository() {
        let a = args(
            json!({"image": format!("{FACTORY}:v1.13.6"), "reboot_mode": "powercycle",
                            "stage": true, "kubeconfig": "/tmp/kc"}),
        )
        .unwrap();
        assert_eq!(a.os.unwrap().image, format!("{FACTORY}:v1.13.6"));
        assert_eq!(a.reboot, Reboot::Powercycle);
        assert!(a.stage);
        assert_eq!(a.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        let a = args(json!({"talos_version": "1.13.6", "installer_repository": " registry.local/installer "}))
            .unwrap();
        assert_eq!(a.os.unwrap().image, "registry.local/installer:v1.13.6");
        let a = args(json!({"talos_version": "v1.14.1"})).unwrap();
        assert!(
            a.os.unwrap()
                .image
                .starts_with("factory.talos.dev/metal-installer/"),
            "from 1.14 the stock installer is the Image Factory's"
        );
        let a = args(json!({"kubernetes_version": "v1.36.1"})).unwrap();
        assert!(a.os.is_none());
        assert_eq!(a.kubernetes, Some(v("1.36.1")));
    }

    #[test]
    fn a_bad_target_names_its_option() {
        let msg = refusal(json!({"image": "ghcr.io/siderolabs/installer"}));
        assert!(
            msg.starts_with("image: ") && msg.contains("no version tag"),
            "{msg}"
        );
        let msg = refusal(json!({"image": "ghcr.io/siderolabs/installer:v1.14.1"}));
        assert!(msg.starts_with("image: "), "{msg}");
        let msg = refusal(json!({"image": format!("{FACTORY}:v1.13.6"),
                                 "installer_repository": "registry.local/installer"}));
        assert!(
            msg.starts_with("installer_repository only applies with talos_version"),
            "{msg}"
        );
        let msg = refusal(json!({"talos_version": "latest"}));
        assert!(msg.starts_with("talos_version: "), "{msg}");
        let msg = refusal(json!({"talos_version": "1.13.6",
                                 "installer_repository": "registry.local/installer:v1"}));
        assert!(
            msg.starts_with("installer_repository: ") && msg.contains("tag"),
            "{msg}"
        );
        let msg = refusal(json!({"talos_version": "1.14.1",
                                 "installer_repository": "ghcr.io/siderolabs/installer"}));
        assert!(msg.starts_with("installer_repository: "), "{msg}");
        let msg = refusal(json!({"kubernetes_version": "one"}));
        assert!(msg.starts_with("kubernetes_version: "), "{msg}");
    }

    #[test]
    fn not_waiting_refuses_a_drain_and_a_kubernetes_move_after_the_os() {
        let msg = refusal(json!({"talos_version": "v1.13.9", "wait": false}));
        assert!(
            msg.contains("wait=false") && msg.contains("drain: false"),
            "{msg}"
        );
        let msg = refusal(
            json!({"talos_version": "v1.13.9", "wait": false, "drain": false,
                                 "kubernetes_version": "v1.36.1"}),
        );
        assert!(
            msg.contains("kubernetes_version") && msg.contains("two tasks"),
            "{msg}"
        );
        // Without a Talos target nothing reboots: neither needs the wait.
        let a = args(json!({"kubernetes_version": "v1.36.1", "wait": false})).unwrap();
        assert!(!a.wait && a.drain.enabled);
        assert!(args(json!({"talos_version": "v1.13.9", "wait": false, "drain": false})).is_ok());
    }

    #[test]
    fn waits_out_of_range_name_their_option() {
        for option in ["timeout", "drain_timeout"] {
            let msg = refusal(json!({"talos_version": "v1.13.9", option: 0}));
            assert!(
                msg.starts_with(&format!("{option} must be between 1 and")),
                "{msg}"
            );
        }
        let msg = refusal(json!({"talos_version": "v1.13.9", "connect_timeout": 0}));
        assert!(msg.starts_with("connect_timeout"), "{msg}");
        let msg = refusal(json!({"talos_version": "v1.13.9", "node": " "}));
        assert!(msg.starts_with("node must be the address"), "{msg}");
    }
}
