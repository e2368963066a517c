//! Every module of the collection, run in check mode against the cluster with arguments that make
//! sense read-only: the node's own live config and version (a real-cluster idempotence check:
//! both should report no change), a kubeconfig and a snapshot to paths that do not exist yet.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::check_mode::{self, CheckModeArgs};
use crate::files::write_private;
use crate::layout::{Node, repository_of};
use crate::normalise::Normaliser;
use crate::record::Record;
use crate::shape::Shape;

/// The options every run shares: how to reach the node.
pub struct Connection {
    pub talosconfig: PathBuf,
    pub context: Option<String>,
    pub endpoint: Option<String>,
}

pub struct ModuleProbes<'a> {
    pub modules_dir: &'a Path,
    /// Private (0700) directory for args files, the live config and the kubeconfig/snapshot paths.
    pub workdir: &'a Path,
    pub connection: &'a Connection,
    pub normaliser: &'a Normaliser,
    pub nodes: &'a [Node],
    pub health_timeout: Duration,
}

impl ModuleProbes<'_> {
    /// The modules that act on one node, run for `node`.
    pub fn node(&self, node: &Node) -> Vec<Record> {
        let config_path = self
            .workdir
            .join(format!("{}-live-config.yaml", node.label));
        let config = match write_private(&config_path, &node.live_config) {
            Ok(()) => json!(config_path.display().to_string()),
            Err(e) => {
                let msg = format!(
                    "cannot write the live config to {}: {e}",
                    config_path.display()
                );
                let probe = "module talos_apply (own live config)";
                return vec![Record::not_run(probe, &node.label, &msg, self.normaliser)];
            }
        };
        let version = &node.summary.version;
        // When the config names no installer: the stock one of the node's release, where upstream
        // publishes it (ghcr.io up to 1.13, the Image Factory's from 1.14).
        let stock = semver::Version::parse(version.trim_start_matches('v'))
            .map(|v| ferro_talos_config::image::stock_installer_repository(&v))
            .unwrap_or(ferro_talos_config::image::GHCR_INSTALLER_REPOSITORY);
        let repository = node
            .summary
            .install_image
            .as_deref()
            .map(repository_of)
            .filter(|r| !r.is_empty())
            .unwrap_or(stock);
        let records = vec![
            self.run("talos_info", "", node, json!({})),
            self.run(
                "talos_apply",
                " (own live config)",
                node,
                json!({"config": config}),
            ),
            self.run(
                "talos_upgrade",
                " (to its own version)",
                node,
                json!({"image": format!("{repository}:{version}")}),
            ),
            self.run("talos_reset", "", node, json!({"confirm": "reset"})),
        ];
        let _ = std::fs::remove_file(&config_path);
        records
    }

    /// The modules that act on the cluster, run against the first control plane.
    pub fn cluster(&self, first_cp: &Node) -> Vec<Record> {
        let addresses = |cp: bool| -> Vec<String> {
            self.nodes
                .iter()
                .filter(|n| n.control_plane == cp)
                .map(|n| n.address.clone())
                .collect()
        };
        let in_workdir = |name: &str| json!(self.workdir.join(name).display().to_string());
        // The version the API server runs now: asking for it is a cluster-wide idempotence check.
        let kubernetes = first_cp
            .parsed_config
            .v1alpha1()
            .and_then(|v| v.pointer("/cluster/apiServer/image"))
            .and_then(Value::as_str)
            .and_then(|image| image.split('@').next())
            .and_then(|image| image.rsplit_once(':'))
            .map(|(_, tag)| tag.trim_start_matches('v').to_string())
            .unwrap_or_default();
        vec![
            self.run(
                "talos_kubernetes_upgrade",
                " (to its own version)",
                first_cp,
                json!({
                    "control_plane_nodes": addresses(true),
                    "worker_nodes": addresses(false),
                    "kubernetes_version": kubernetes,
                }),
            ),
            self.run(
                "talos_health",
                "",
                first_cp,
                json!({
                    "control_plane_nodes": addresses(true),
                    "worker_nodes": addresses(false),
                    "timeout": self.health_timeout.as_secs(),
                }),
            ),
            self.run(
                "talos_bootstrap",
                " (already bootstrapped)",
                first_cp,
                json!({"control_plane_nodes": addresses(true)}),
            ),
            self.run(
                "talos_kubeconfig",
                " (to a new file)",
                first_cp,
                json!({"dest": in_workdir("kubeconfig")}),
            ),
            self.run(
                "talos_etcd_snapshot",
                " (to a new file)",
                first_cp,
                json!({"dest": in_workdir("etcd.snapshot")}),
            ),
        ]
    }

    fn run(&self, module: &str, what: &str, node: &Node, options: Value) -> Record {
        let probe = format!("module {module}{what}");
        let mut args = Map::new();
        args.insert("node".into(), json!(node.address));
        if let Some(endpoint) = &self.connection.endpoint {
            args.insert("endpoint".into(), json!(endpoint));
        }
        args.insert(
            "talosconfig".into(),
            json!(self.connection.talosconfig.display().to_string()),
        );
        if let Some(context) = &self.connection.context {
            args.insert("context".into(), json!(context));
        }
        if let Value::Object(options) = options {
            args.extend(options);
        }
        // The collection's one program runs the module its arguments name, as under Ansible.
        args.insert("_ansible_module_name".into(), json!(module));
        let binary = self.modules_dir.join("ferro-talos");
        match check_mode::run(&binary, &CheckModeArgs::new(args), self.workdir) {
            Ok(run) => self.record(&probe, &node.label, &run.result, run.ms),
            Err(why) => Record::not_run(probe, &node.label, &why, self.normaliser),
        }
    }

    /// changed, failed and skipped, the message and warnings (normalised), and the shape of the
    /// rest of the result (its keys and kinds, never a value).
    fn record(&self, probe: &str, label: &str, result: &Value, ms: u64) -> Record {
        let flag = |key: &str| result.get(key).and_then(Value::as_bool).unwrap_or(false);
        let code = if flag("failed") {
            "failed"
        } else if flag("skipped") {
            "skipped"
        } else {
            "ok"
        };
        let text = |v: &Value| self.normaliser.text(v.as_str().unwrap_or_default());
        let mut rest = result.clone();
        if let Value::Object(map) = &mut rest {
            for key in ["msg", "warnings", "deprecations", "invocation"] {
                map.remove(key);
            }
        }
        let mut shape = Shape::new();
        shape.json("", &rest);
        let warnings = result
            .get("warnings")
            .and_then(Value::as_array)
            .map(|w| w.iter().map(text).collect())
            .unwrap_or_default();
        let mut record = Record::new(probe, label, std::time::Instant::now())
            .shape(shape)
            .ids(warnings)
            .fact("changed", flag("changed").to_string());
        record.code = code.to_string();
        record.message = text(result.get("msg").unwrap_or(&Value::Null));
        record.ms = ms;
        record
    }
}
