//! The run against one node: read what it reports, plan everything and refuse before anything
//! moves, then preview it (check mode) or do it: drain, OS upgrade, uncordon, Kubernetes.

use std::time::Instant;

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::{ConnectOptions, Credentials, TalosClient};
use ferro_talos_config::MachineConfig;
use semver::Version;
use serde_json::{Value, json};

use super::args::Args;
use super::etcd_quorum::etcd_quorum_guard;
use super::image::OsTarget;
use super::kubernetes::{KubernetesPlan, plan_kubernetes, upgrade_kubernetes};
use super::os::{NodeAccess, OsPlan, OsUpgrade, plan_os, upgrade_os};
use super::report::Report;
use super::version_policy::parse_version;
use crate::shared::connection;
use crate::shared::kubernetes_config::cluster_endpoint;
use crate::shared::live_config::{self, ReadError};
use crate::shared::upgrade_drain::{self, DrainFor, Drainer, KubeInputs, NoDrain};

/// What the run against the node works from: the task's options and how to reach the node.
pub(super) struct Run<'a> {
    pub(super) args: &'a Args,
    pub(super) creds: &'a Credentials,
    pub(super) opts: ConnectOptions,
    pub(super) kube: &'a KubeInputs,
    pub(super) check_mode: bool,
}

/// What the node runs, as read before anything is planned.
struct Found {
    /// The Talos version tag as the node reports it.
    tag: String,
    version: Version,
    config: MachineConfig,
    control_plane: bool,
}

/// Everything the run will do, decided before anything moves.
struct Plan<'a> {
    os: Option<OsPlan<'a>>,
    /// The Kubernetes move, None when every component is at `kubernetes_version` (or it is unset).
    kubernetes: Option<KubernetesPlan>,
    /// The Talos the node runs once its OS move is done: the one that must support Kubernetes.
    talos_after: Version,
}

/// The whole run against one node; returns the summary message.
pub(super) async fn upgrade_node(
    run: &Run<'_>,
    report: &mut Report,
) -> Result<String, ModuleError> {
    let deadline = Instant::now() + run.args.timeout;
    let client = run.connect(report).await?;
    let found = read_node(&client, run.args, report).await?;
    // Plan everything before touching the node, so each refusal leaves it as it was.
    let plan = run.plan(&client, &found, report).await?;
    if plan.os.is_some() && found.control_plane {
        etcd_quorum_guard(&run.args.target, &client, report).await?;
    }
    let drainer = match &plan.os {
        Some(_) if run.args.drain.enabled => run.drainer(&client, &found, report).await?,
        _ => None,
    };
    let done = if run.check_mode {
        run.preview(&plan, drainer.as_ref(), report).await?
    } else {
        run.carry_out(client, &found.version, plan, drainer, deadline, report)
            .await?
    };
    Ok(run.summary(&found.tag, &done))
}

/// The node's Talos version and live config, reported as they are read.
async fn read_node(
    client: &TalosClient,
    args: &Args,
    report: &mut Report,
) -> Result<Found, ModuleError> {
    let (tag, version) = server_version(client, report).await?;
    report.set("current_version", tag.clone());
    report.set("target_version", args.os.as_ref().map(OsTarget::tag));
    report.set("target_image", args.os.as_ref().map(|os| os.image.clone()));
    report.set("upgrade_path", Value::Null);
    let config = read_config(client, report).await?;
    let machine_type = config
        .v1alpha1()
        .and_then(|v1| v1.pointer("/machine/type"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let control_plane = matches!(machine_type.as_deref(), Some("controlplane" | "init"));
    report.set("machine_type", machine_type);
    Ok(Found {
        tag,
        version,
        config,
        control_plane,
    })
}

impl<'a> Run<'a> {
    async fn connect(&self, report: &Report) -> Result<TalosClient, ModuleError> {
        connection::connect(&self.args.target, self.creds, self.opts.clone())
            .await
            .map_err(|e| report.client_fail(e))
    }

    /// The OS move and the Kubernetes move, or the rule that refuses one of them.
    async fn plan(
        &self,
        client: &TalosClient,
        found: &Found,
        report: &mut Report,
    ) -> Result<Plan<'a>, ModuleError> {
        let node = &self.args.target.node;
        let os = plan_os(client, &found.version, &found.config, self.args, report)
            .await
            .map_err(|why| report.fail(format!("{node}: {why}; nothing was changed")))?;
        let talos_after = os
            .as_ref()
            .map_or(&found.version, |plan| &plan.to.version)
            .clone();
        let mut kubernetes = None;
        if let Some(want) = &self.args.kubernetes {
            let plan = plan_kubernetes(&found.config, want, &talos_after)
                .map_err(|why| report.fail(format!("{node}: {why}; nothing was changed")))?;
            report.set("kubernetes", plan.to_json());
            report.set("manifests_not_synced", json!([]));
            kubernetes = plan.changes().then_some(plan);
        }
        Ok(Plan {
            os,
            kubernetes,
            talos_after,
        })
    }

    /// What drains the node's Node before its OS move, or None when there is nothing to drain
    /// (said in a warning and in the result's `drain`).
    async fn drainer(
        &self,
        client: &TalosClient,
        found: &Found,
        report: &mut Report,
    ) -> Result<Option<Drainer>, ModuleError> {
        let target = &self.args.target;
        let endpoint = cluster_endpoint(&found.config);
        let endpoint_client = upgrade_drain::kubeconfig_source(
            target,
            client,
            self.creds,
            &self.opts,
            self.kube,
            found.control_plane,
        )
        .await
        .map_err(|e| report.client_fail(e))?;
        let drainer = upgrade_drain::connect(
            client,
            &endpoint_client,
            &target.node,
            &self.kube.credentials,
            endpoint,
            DrainFor::Upgrade,
        )
        .await
        .map_err(|m| report.fail(m))?;
        match drainer {
            Ok(d) => Ok(Some(d)),
            Err(NoDrain(why)) => {
                report.warnings.push(why.clone());
                report.set("drain", json!({"skipped": why}));
                Ok(None)
            }
        }
    }

    /// Check mode: what the run would do, in words, with the drain's evictions in `drain`.
    async fn preview(
        &self,
        plan: &Plan<'_>,
        drainer: Option<&Drainer>,
        report: &mut Report,
    ) -> Result<Vec<String>, ModuleError> {
        report.changed = plan.os.is_some() || plan.kubernetes.is_some();
        let mut done = Vec::new();
        if let Some(os) = &plan.os {
            done.push(format!("would {}", os.reason));
        }
        if let Some(d) = drainer {
            let preview = d
                .preview(&self.args.target.node)
                .await
                .map_err(|m| report.fail(m))?;
            let pods = preview["evict"].as_array().map_or(0, Vec::len);
            done.push(format!(
                "would drain Node {} ({pods} pods to evict)",
                d.node_name
            ));
            report.set("drain", preview);
        }
        if let Some(k8s) = &plan.kubernetes {
            done.push(format!(
                "would move Kubernetes {} -> {}",
                k8s.current, k8s.target
            ));
            report.set("manifests_not_synced", k8s.unsynced_manifests());
        }
        Ok(done)
    }

    /// The real run: the OS move with its drain, then the Kubernetes move; what was done, in words.
    async fn carry_out(
        &self,
        client: TalosClient,
        current: &Version,
        plan: Plan<'_>,
        mut drainer: Option<Drainer>,
        deadline: Instant,
        report: &mut Report,
    ) -> Result<Vec<String>, ModuleError> {
        let mut done = Vec::new();
        if let Some(os) = plan.os {
            let moved = self
                .move_os(&client, current, os, &mut drainer, deadline, report)
                .await?;
            done.extend(moved);
            if !self.args.wait {
                // The node is still rebooting: there is nothing more to do on it.
                return Ok(done);
            }
        }
        if let Some(want) = &self.args.kubernetes {
            let moved = self
                .move_kubernetes(
                    client,
                    want,
                    plan.kubernetes,
                    &plan.talos_after,
                    deadline,
                    report,
                )
                .await?;
            done.extend(moved);
        }
        Ok(done)
    }

    /// Cordon and drain the Node (with a drainer), upgrade the OS, and uncordon the Node once the
    /// node is back. A failed upgrade uncordons a Node this run cordoned, and says so.
    async fn move_os(
        &self,
        client: &TalosClient,
        current: &Version,
        os: OsPlan<'_>,
        drainer: &mut Option<Drainer>,
        deadline: Instant,
        report: &mut Report,
    ) -> Result<Vec<String>, ModuleError> {
        let args = self.args;
        let node = &args.target.node;
        if let Some(d) = drainer.as_mut() {
            let (drained, warnings) = d
                .cordon_and_drain(node, args.drain.timeout)
                .await
                .map_err(|m| report.fail(m))?;
            report.warnings.extend(warnings);
            report.set("drain", drained);
        }
        let access = NodeAccess {
            target: &args.target,
            client,
            creds: self.creds,
        };
        let upgrade = OsUpgrade {
            from: current,
            to: os.to,
            api: os.api,
            stage: args.stage,
            reboot: args.reboot,
            wait: args.wait,
            deadline,
        };
        let upgraded = upgrade_os(&access, upgrade, report).await;
        let summary = match (upgraded, drainer.as_mut()) {
            (Ok(summary), _) => summary,
            (Err(mut e), Some(d)) => {
                e.msg = format!("{}; {}", e.msg, d.uncordon_if_cordoned_here().await);
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        let mut done = vec![format!("{} ({summary})", os.reason)];
        if let Some(d) = drainer.as_mut() {
            done.push(uncordon(d, node, deadline, report).await?);
        }
        Ok(done)
    }

    /// The Kubernetes move, once the OS is where it goes: re-planned from the config the node
    /// runs now when the OS upgrade rebooted it. What was done, in words (none when Kubernetes
    /// is at the target).
    async fn move_kubernetes(
        &self,
        client: TalosClient,
        want: &Version,
        planned: Option<KubernetesPlan>,
        talos_after: &Version,
        deadline: Instant,
        report: &mut Report,
    ) -> Result<Option<String>, ModuleError> {
        let node = &self.args.target.node;
        let (client, plan) = if report.changed {
            // The OS upgrade rebooted the node: read the config it runs now.
            let client = self.connect(report).await?;
            let config = read_config(&client, report).await?;
            let plan = plan_kubernetes(&config, want, talos_after)
                .map_err(|why| report.fail(format!("{node}: {why}")))?;
            report.set("kubernetes", plan.to_json());
            (client, plan.changes().then_some(plan))
        } else {
            (client, planned)
        };
        let Some(plan) = plan else {
            return Ok(None);
        };
        upgrade_kubernetes(&client, &plan, talos_after, deadline, report).await?;
        report.warnings.push(format!(
            "{node}: only this node's Kubernetes components moved; across a cluster a node's new \
             kubelet must not run ahead of other control planes' API servers, so upgrade a \
             cluster with ferro.talos.talos_kubernetes_upgrade (talosctl upgrade-k8s's \
             order, waiting for each pod and Node)"
        ));
        Ok(Some(format!(
            "Kubernetes {} -> {}",
            plan.current, plan.target
        )))
    }

    /// The message: what was done (or would be), else that the node is at its targets.
    fn summary(&self, current_tag: &str, done: &[String]) -> String {
        let node = &self.args.target.node;
        if !done.is_empty() {
            return format!("{node}: {}", done.join("; "));
        }
        let mut parts = Vec::new();
        if let Some(os) = &self.args.os {
            parts.push(format!("Talos {current_tag} is at the target {}", os.tag()));
        }
        if let Some(k) = &self.args.kubernetes {
            parts.push(format!("Kubernetes is at the target {k}"));
        }
        format!("{node}: up to date: {}", parts.join("; "))
    }
}

/// Once the node is back from its OS move: its Node uncordoned, unless an operator had cordoned
/// it before this run; the words for the drain.
async fn uncordon(
    drainer: &mut Drainer,
    node: &str,
    deadline: Instant,
    report: &mut Report,
) -> Result<String, ModuleError> {
    let uncordoned = drainer
        .back_and_uncordon(node, deadline)
        .await
        .map_err(|m| report.fail(m))?;
    if let Some(drain) = report.fields.get_mut("drain") {
        drain["uncordoned"] = json!(uncordoned);
    }
    Ok(format!(
        "Node {} drained{}",
        drainer.node_name,
        if uncordoned {
            " and uncordoned"
        } else {
            ", left cordoned as it was"
        }
    ))
}

async fn server_version(
    client: &TalosClient,
    report: &Report,
) -> Result<(String, Version), ModuleError> {
    let v = client.version().await.map_err(|e| report.client_fail(e))?;
    let tag = v.version.map(|i| i.tag).unwrap_or_default();
    let parsed = parse_version(&tag).map_err(|_| {
        report.fail(format!(
            "the node reports Talos version {tag:?}, which is not a semantic version"
        ))
    })?;
    Ok((tag, parsed))
}

pub(super) async fn read_config(
    client: &TalosClient,
    report: &Report,
) -> Result<MachineConfig, ModuleError> {
    live_config::read(client).await.map_err(|e| match e {
        ReadError::Client(e) => report.client_fail(e),
        ReadError::Unusable(why) => {
            report.fail(format!("cannot use the node's machine config: {why}"))
        }
    })
}
