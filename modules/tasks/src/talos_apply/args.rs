//! `talos_apply`'s options, checked once before anything is read, rendered or connected.

use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};
use ferro_talos_client::{ApplyMode, NodeMode};

use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;
use crate::shared::render::RenderArgs;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    pub config: ConfigSource,
    pub mode: ApplyMode,
    /// `mode` as written, for messages and the result.
    pub mode_name: String,
    pub try_timeout: Duration,
    /// `insecure`: `always` is Maintenance, `never` Configured, `auto` (None) asks the node.
    pub node_mode: Option<NodeMode>,
    pub wait: bool,
    pub timeout: Duration,
    /// `expected_address`, else the node's own address.
    pub expected_address: String,
    /// A config that turns a control plane into a worker (or back) is applied only when asked.
    pub allow_machine_type_change: bool,
    /// Stop before applying anything that `risk::risky_changes` lists.
    pub refuse_risky_changes: bool,
}

/// Where the config to apply comes from.
pub enum ConfigSource {
    /// `config`: a config's text, or the path of a file holding one.
    Given(String),
    /// `render`: rendered in place from the task's secrets bundle, as `talos_config` would.
    Render(Box<RenderArgs>),
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        let config = match p.sub("render") {
            Some(options) => {
                let in_render = |e: ModuleError| ModuleError::new(format!("render: {}", e.msg()));
                match RenderArgs::from_params(options).map_err(in_render)? {
                    Some(render) => ConfigSource::Render(Box::new(render)),
                    None => {
                        return Err(ModuleError::new(
                            "render needs render.machine_type (controlplane or worker) to generate a config, or \
                             render.base_config to patch one",
                        ));
                    }
                }
            }
            None => ConfigSource::Given(p.str("config").unwrap_or_default().to_string()),
        };
        let mode_name = p.str("mode").unwrap_or("auto").to_string();
        let mode = match mode_name.as_str() {
            "no_reboot" => ApplyMode::NoReboot,
            "reboot" => ApplyMode::Reboot,
            "staged" => ApplyMode::Staged,
            "try" => ApplyMode::Try,
            _ => ApplyMode::Auto,
        };
        let expected_address = p
            .str("expected_address")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or(&target.node)
            .to_string();
        Ok(Args {
            connection,
            target,
            config,
            mode,
            mode_name,
            try_timeout: wait_seconds(p, "try_timeout", 1)?,
            node_mode: match p.str("insecure") {
                Some("always") => Some(NodeMode::Maintenance),
                Some("never") => Some(NodeMode::Configured),
                _ => None,
            },
            wait: p.bool("wait"),
            timeout: wait_seconds(p, "timeout", 1)?,
            expected_address,
            allow_machine_type_change: p.bool("allow_machine_type_change"),
            refuse_risky_changes: p.bool("refuse_risky_changes"),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": "10.5.0.2"}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    fn render(extra: Value) -> Value {
        let options = merged(
            json!({
                "machine_type": "worker", "cluster_name": "c", "cluster_endpoint": "10.5.0.1",
            }),
            extra,
        );
        json!({ "render": options })
    }

    #[test]
    fn a_given_config_applies_in_auto_mode_to_the_node_itself() {
        let a = args(json!({"config": "/tmp/x.yaml"})).unwrap();
        assert!(matches!(&a.config, ConfigSource::Given(c) if c == "/tmp/x.yaml"));
        assert_eq!(a.mode, ApplyMode::Auto);
        assert_eq!(a.node_mode, None);
        assert_eq!(a.expected_address, "10.5.0.2");
        assert_eq!(a.timeout, Duration::from_secs(600));
    }

    #[test]
    fn render_options_are_checked_at_the_door_and_prefixed() {
        let a = args(render(json!({"talos_version": "v1.14"}))).unwrap();
        let ConfigSource::Render(r) = &a.config else {
            panic!("a render")
        };
        assert_eq!(r.contract.to_string(), "1.14");
        let e = args(render(json!({"talos_version": "v9"}))).err().unwrap();
        assert!(e.msg.starts_with("render: talos_version"), "{}", e.msg);
        let e = args(render(json!({"cluster_endpoint": ""}))).err().unwrap();
        assert!(e.msg.contains("needs cluster_endpoint"), "{}", e.msg);
        let e = args(render(json!({"local_api_server_port": 70000})))
            .err()
            .unwrap();
        assert!(
            e.msg.contains("local_api_server_port must be a TCP port"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn render_without_machine_type_or_base_config_says_which_to_set() {
        let e = args(json!({"render": {"cluster_name": "c"}}))
            .err()
            .unwrap();
        assert!(e.msg.contains("render.machine_type") && e.msg.contains("render.base_config"));
    }

    #[test]
    fn insecure_and_mode_become_their_types() {
        let a = args(
            json!({"config": "x", "insecure": "always", "mode": "staged",
                            "expected_address": " 10.9.9.9 "}),
        )
        .unwrap();
        assert_eq!(a.node_mode, Some(NodeMode::Maintenance));
        assert_eq!(a.mode, ApplyMode::Staged);
        assert_eq!(a.expected_address, "10.9.9.9");
        let e = args(json!({"config": "x", "try_timeout": 0}))
            .err()
            .unwrap();
        assert!(e.msg.starts_with("try_timeout"), "{}", e.msg);
    }
}
