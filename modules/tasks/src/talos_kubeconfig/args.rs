//! `talos_kubeconfig`'s options, checked once before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};

use super::dest_is_a_directory;
use crate::shared::connection::{ConnectionArgs, Target, node_target};

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    /// `dest`: the kubeconfig's file on the controller (never empty nor ending in `/`; whether
    /// it is a directory is found in `run`, since it asks the filesystem).
    pub dest: PathBuf,
    /// `force`: write the fetched kubeconfig even when the one in `dest` is current.
    pub force: bool,
    /// `renew_before` (days): rewrite when the client certificate in `dest` expires this soon.
    pub renew_before: Duration,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let dest = p.path("dest").unwrap_or_default();
        if dest.as_os_str().is_empty() {
            return Err(ModuleError::new(
                "dest must be the path of the kubeconfig file to write, got an empty string",
            ));
        }
        if dest.to_string_lossy().ends_with('/') {
            return Err(dest_is_a_directory(&dest));
        }
        let days = p.int("renew_before").unwrap_or(30);
        if !(0..=3650).contains(&days) {
            return Err(ModuleError::new(format!(
                "renew_before must be a number of days between 0 and 3650, got {days}"
            )));
        }
        Ok(Args {
            connection,
            target,
            dest,
            force: p.bool("force"),
            renew_before: Duration::from_secs(days as u64 * 86_400),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(
            json!({"node": " 10.5.0.2 ", "dest": "out/kubeconfig"}),
            extra,
        );
        Args::from_params(&params(super::super::spec(), given))
    }

    #[test]
    fn defaults_renew_thirty_days_before_expiry() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        assert_eq!(a.dest, PathBuf::from("out/kubeconfig"));
        assert!(!a.force);
        assert_eq!(a.renew_before, Duration::from_secs(30 * 86_400));
        let a = args(json!({"force": true, "renew_before": 0})).unwrap();
        assert!(a.force);
        assert_eq!(a.renew_before, Duration::ZERO);
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(json!({"dest": ""})).err().unwrap();
        assert!(e.msg.starts_with("dest must be the path"), "{}", e.msg);
        let e = args(json!({"dest": "out/"})).err().unwrap();
        assert_eq!(e.msg, "dest must be a file path, but out/ is a directory");
        for days in [-1, 3651] {
            let e = args(json!({"renew_before": days})).err().unwrap();
            assert_eq!(
                e.msg,
                format!("renew_before must be a number of days between 0 and 3650, got {days}")
            );
        }
        let e = args(json!({"node": ""})).err().unwrap();
        assert!(e.msg.starts_with("node must be the address"), "{}", e.msg);
    }
}
