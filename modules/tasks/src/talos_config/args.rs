//! `talos_config`'s options, checked once before any file is read or written.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};
use ferro_talos_config::contract::Contract;

use super::FROM_CONFIG;
use crate::shared::connection::SecretsSource;
use crate::shared::render::{self, RenderArgs, strings};

pub struct Args {
    pub contract: Contract,
    /// Why it is that contract, for the result.
    pub contract_reason: String,
    /// `secrets` or `secrets_file` (with the action plugin's decrypted copy of a vaulted file).
    pub secrets: SecretsSource,
    pub missing_secrets: MissingSecrets,
    /// The machine config to render; None when the task names none (no `machine_type` or
    /// `base_config`).
    pub render: Option<RenderArgs>,
    pub dest: Option<PathBuf>,
    pub return_content: bool,
    pub talosconfig: Option<TalosconfigArgs>,
    /// `cluster_name`, when given: the talosconfig's context name (else the rendered config's).
    pub cluster_name: Option<String>,
}

/// What to do when `secrets_file` does not exist yet.
pub enum MissingSecrets {
    /// Fail, saying how to create or recover one.
    Refuse,
    /// `generate_secrets`: a new bundle, for a new cluster.
    Generate,
    /// `secrets_from_controlplane_config`: recover the bundle of the cluster that config is from.
    DeriveFrom(PathBuf),
}

/// The talosconfig to converge.
pub struct TalosconfigArgs {
    pub path: PathBuf,
    pub endpoints: Vec<String>,
    pub nodes: Vec<String>,
    /// `talosconfig_renew_before`: renew the client certificate this long before it expires.
    pub renew_before: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let (contract, contract_reason) = render::contract(p)?;
        let secrets = SecretsSource::from_params(p);
        let missing_secrets = match p.path(FROM_CONFIG) {
            Some(from) => MissingSecrets::DeriveFrom(from),
            None if p.bool("generate_secrets") => MissingSecrets::Generate,
            None => MissingSecrets::Refuse,
        };
        let render = RenderArgs::from_params(p)?;
        let dest = p.path("dest");
        if render.is_none() && dest.is_some() {
            return Err(ModuleError::new(
                "dest needs a config to write: set machine_type (to generate one) or base_config (to patch one)",
            ));
        }
        let talosconfig = match p.path("talosconfig") {
            Some(path) => {
                let days = p.int("talosconfig_renew_before").unwrap_or(30);
                if !(0..=3650).contains(&days) {
                    return Err(ModuleError::new(format!(
                        "talosconfig_renew_before must be a number of days between 0 and 3650, got {days}"
                    )));
                }
                Some(TalosconfigArgs {
                    path,
                    endpoints: strings(p, "endpoints"),
                    nodes: strings(p, "nodes"),
                    renew_before: Duration::from_secs(days as u64 * 86_400),
                })
            }
            None => None,
        };
        Ok(Args {
            contract,
            contract_reason,
            secrets,
            missing_secrets,
            render,
            dest,
            return_content: p.bool("return_content"),
            talosconfig,
            cluster_name: p
                .str("cluster_name")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        })
    }

    /// `secrets_file`, when the task names one.
    pub fn secrets_file(&self) -> Option<&std::path::Path> {
        match &self.secrets {
            SecretsSource::File { path, .. } => Some(path),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::shared::options::params;

    fn args(given: Value) -> Result<Args, ModuleError> {
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn a_bundle_alone_renders_nothing_and_refuses_a_missing_file() {
        let a = args(json!({"secrets_file": "/tmp/s.yaml"})).unwrap();
        assert!(a.render.is_none() && a.talosconfig.is_none());
        assert!(matches!(a.missing_secrets, MissingSecrets::Refuse));
        assert_eq!(a.secrets_file(), Some(std::path::Path::new("/tmp/s.yaml")));
        assert_eq!(a.contract_reason, "talos_version is v1.13");
    }

    #[test]
    fn generating_or_deriving_the_bundle_is_chosen_once() {
        let a = args(json!({"secrets_file": "/tmp/s.yaml", "generate_secrets": true})).unwrap();
        assert!(matches!(a.missing_secrets, MissingSecrets::Generate));
        let a = args(json!({"secrets_file": "/tmp/s.yaml", FROM_CONFIG: "/tmp/cp.yaml"})).unwrap();
        assert!(
            matches!(&a.missing_secrets, MissingSecrets::DeriveFrom(p) if p.ends_with("cp.yaml"))
        );
    }

    #[test]
    fn dest_without_a_config_to_render_says_what_to_set() {
        let e = args(json!({"secrets_file": "/tmp/s.yaml", "dest": "/tmp/c.yaml"}))
            .err()
            .unwrap();
        assert!(
            e.msg.contains("machine_type") && e.msg.contains("base_config"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn the_talosconfig_renewal_window_is_checked_in_days() {
        let a = args(json!({"talosconfig": "/tmp/tc", "endpoints": ["10.5.0.2"],
                            "talosconfig_renew_before": 7}))
        .unwrap();
        let t = a.talosconfig.unwrap();
        assert_eq!(t.renew_before, Duration::from_secs(7 * 86_400));
        assert_eq!(t.endpoints, ["10.5.0.2"]);
        let e = args(json!({"talosconfig": "/tmp/tc", "talosconfig_renew_before": 4000}))
            .err()
            .unwrap();
        assert!(e.msg.starts_with("talosconfig_renew_before"), "{}", e.msg);
    }
}
