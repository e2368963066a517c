//! `talos_upgrade`: upgrade one node's Talos OS and/or its Kubernetes components.
//!
//! Everything is decided from what the node itself reports (its Version answer and its live
//! machine config), and every refusal happens before the first call that changes the node.
//!
//! Where things are: `args.rs` checks the options; `image.rs` and `schematic.rs` read
//! installer image references and the schematic a node runs; `version_policy.rs` holds the rules
//! about which moves Talos and Kubernetes allow; `upgrade_node.rs` is the run against one node
//! (read, plan, refuse, then preview or do), with `etcd_quorum.rs`, `os.rs` and `kubernetes.rs`
//! for its parts; `report.rs` is the result being built.

mod args;
mod etcd_quorum;
mod image;
mod kubernetes;
mod os;
mod report;
mod schematic;
mod upgrade_node;
mod version_policy;

use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use serde_json::Map;

use crate::shared::connection::{self, with_connection_options};
use crate::shared::upgrade_drain::{DEFAULT_DRAIN_TIMEOUT_SECS, KubeCredentials, KubeInputs};

pub use args::{Args, Reboot};
pub use image::{OsTarget, retag, split_image};
pub use kubernetes::{Component, KubernetesPlan, kubernetes_components, plan_kubernetes};
pub use os::{AfterReboot, after_reboot};
pub use schematic::{VANILLA_SCHEMATIC, schematic_from_extension_yaml, schematic_of};
pub use version_policy::{
    InstallerCheck, OsDecision, decide_os, has_lifecycle_api, installer_check, kubernetes_path_ok,
    kubernetes_supported, parse_version,
};

use report::Report;
use upgrade_node::{Run, upgrade_node};

/// Default overall timeout, talosctl's `--timeout` for upgrades.
const DEFAULT_TIMEOUT_SECS: i64 = 1800;

/// How often a wait asks the node again: for its reboot, and for its new Kubernetes components.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("image"))
        .option(Opt::str("talos_version"))
        .option(Opt::str("installer_repository"))
        .option(Opt::bool("allow_downgrade").default(false))
        .option(Opt::bool("stage").default(false))
        .option(
            Opt::str("reboot_mode")
                .choices(&["default", "powercycle"])
                .default("default"),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(DEFAULT_TIMEOUT_SECS))
        .option(Opt::str("kubernetes_version"))
        .option(Opt::bool("drain").default(true))
        .option(Opt::int("drain_timeout").default(DEFAULT_DRAIN_TIMEOUT_SECS))
        .option(Opt::path("kubeconfig"))
        .mutually_exclusive(&["image", "talos_version"])
        .required_one_of(&["image", "talos_version", "kubernetes_version"])
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let mut opts = args.connection.connect_options(Duration::from_secs(30));
    // Pulls and installer runs are streams; they may take as long as the whole upgrade.
    opts.stream_timeout = args.timeout;
    let (creds, source) = connection::require_credentials(ctx, &args.connection)?;
    let mut report = Report {
        fields: Map::new(),
        warnings: Vec::new(),
        changed: false,
    };
    report.set("node", args.target.node.clone());
    report.set("credentials", source.describe());
    let kube = KubeInputs {
        credentials: kube_credentials(ctx, &args)?,
        talosconfig_endpoints: connection::talosconfig_endpoints(&args.connection, &source),
    };
    let run = Run {
        args: &args,
        creds: &creds,
        opts,
        kube: &kube,
        check_mode: ctx.check_mode,
    };
    let outcome = connection::block_on(upgrade_node(&run, &mut report))?;
    for w in report.warnings.drain(..) {
        ctx.warn(w);
    }
    let msg = outcome?;
    let mut result = ModuleResult::new(report.changed).msg(msg);
    for (k, v) in report.fields {
        result = result.with(k, v);
    }
    Ok(result)
}

/// The Kubernetes credentials a drain uses: `kubeconfig`, else the secrets bundle.
fn kube_credentials(ctx: &mut Context, args: &Args) -> Result<KubeCredentials, ModuleError> {
    if args.os.is_none() || !args.drain.enabled {
        return Ok(KubeCredentials::Unused);
    }
    KubeCredentials::load(ctx, args.kubeconfig.as_deref(), &args.connection.secrets)
}

#[cfg(test)]
mod test_support {
    use semver::Version;

    use super::image::parse_installer_image;
    use super::{OsTarget, parse_version};

    pub fn v(s: &str) -> Version {
        parse_version(s).unwrap()
    }

    pub fn target(image: &str) -> OsTarget {
        parse_installer_image(image).unwrap()
    }

    pub const FACTORY: &str = "factory.talos.dev/installer/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
}
