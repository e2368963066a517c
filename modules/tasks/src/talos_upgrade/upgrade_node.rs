//! The run against one node: read what it reports, plan everything and refuse before anything
//! moves, then preview it (check mode) or do it: drain, OS upgrade, uncordon, Kubernetes.

use std::time::Instant;

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::{ConnectOptions, Credentials, TalosClient};
use ferro_talos_config::MachineConfig;
use semver::Version;
use serde_json::{Value, json};

use super::etcd_quorum::etcd_quorum_guard;
use super::image::OsTarget;
use super::kubernetes::{plan_kubernetes, upgrade_kubernetes};
use super::os::{NodeAccess, OsUpgrade, plan_os, upgrade_os};
use super::report::Report;
use super::request::Request;
use super::version_policy::parse_version;
use crate::shared::connection::{self, Target};
use crate::shared::kubernetes_config::cluster_endpoint;
use crate::shared::live_config::{self, ReadError};
use crate::shared::upgrade_drain::{self, DrainFor, KubeInputs, NoDrain};

/// The whole run against one node; returns the summary message.
pub(super) async fn upgrade_node(
    target: &Target,
    creds: &Credentials,
    opts: ConnectOptions,
    req: &Request,
    kube: &KubeInputs,
    check_mode: bool,
    report: &mut Report,
) -> Result<String, ModuleError> {
    let deadline = Instant::now() + req.timeout;
    let client = connection::connect(target, creds, opts.clone())
        .await
        .map_err(|e| report.client_fail(e))?;
    let (current_tag, current) = server_version(&client, report).await?;
    report.set("current_version", current_tag.clone());
    report.set("target_version", req.os.as_ref().map(OsTarget::tag));
    report.set("target_image", req.os.as_ref().map(|os| os.image.clone()));
    report.set("upgrade_path", Value::Null);
    let config = read_config(&client, report).await?;
    let v1 = config.v1alpha1().cloned().unwrap_or(Value::Null);
    let machine_type = v1
        .pointer("/machine/type")
        .and_then(Value::as_str)
        .map(str::to_string);
    report.set("machine_type", machine_type);

    // Plan everything before touching the node, so each refusal leaves it as it was.
    let os_plan = plan_os(&client, &current, &config, req, report)
        .await
        .map_err(|why| report.fail(format!("{}: {why}; nothing was changed", target.node)))?;
    let talos_after = os_plan
        .as_ref()
        .map_or(&current, |plan| &plan.to.version)
        .clone();
    let mut k8s_plan = None;
    if let Some(want) = &req.kubernetes {
        let plan = plan_kubernetes(&config, want, &talos_after)
            .map_err(|why| report.fail(format!("{}: {why}; nothing was changed", target.node)))?;
        report.set("kubernetes", plan.to_json());
        report.set("manifests_not_synced", json!([]));
        if plan.changes() {
            k8s_plan = Some(plan);
        }
    }

    let control_plane = matches!(
        report.fields.get("machine_type").and_then(Value::as_str),
        Some("controlplane" | "init")
    );
    if os_plan.is_some() && control_plane {
        etcd_quorum_guard(target, &client, report).await?;
    }
    let mut drainer = None;
    if os_plan.is_some() && req.drain.enabled {
        let endpoint = cluster_endpoint(&config);
        let endpoint_client =
            upgrade_drain::kubeconfig_source(target, &client, creds, &opts, kube, control_plane)
                .await
                .map_err(|e| report.client_fail(e))?;
        match upgrade_drain::connect(
            &client,
            &endpoint_client,
            &target.node,
            &kube.credentials,
            endpoint,
            DrainFor::Upgrade,
        )
        .await
        .map_err(|m| report.fail(m))?
        {
            Ok(d) => drainer = Some(d),
            Err(NoDrain(why)) => {
                report.warnings.push(why.clone());
                report.set("drain", json!({"skipped": why}));
            }
        }
    }

    let mut done = Vec::new();
    if check_mode {
        report.changed = os_plan.is_some() || k8s_plan.is_some();
        if let Some(plan) = &os_plan {
            done.push(format!("would {}", plan.reason));
        }
        if let Some(d) = &drainer {
            let preview = d.preview(&target.node).await.map_err(|m| report.fail(m))?;
            let pods = preview["evict"].as_array().map_or(0, Vec::len);
            done.push(format!(
                "would drain Node {} ({pods} pods to evict)",
                d.node_name
            ));
            report.set("drain", preview);
        }
        if let Some(plan) = &k8s_plan {
            done.push(format!(
                "would move Kubernetes {} -> {}",
                plan.current, plan.target
            ));
            report.set("manifests_not_synced", plan.unsynced_manifests());
        }
    } else {
        if let Some(plan) = os_plan {
            if let Some(d) = drainer.as_mut() {
                let (drained, warnings) = d
                    .cordon_and_drain(&target.node, req.drain.timeout)
                    .await
                    .map_err(|m| report.fail(m))?;
                report.warnings.extend(warnings);
                report.set("drain", drained);
            }
            let node = NodeAccess {
                target,
                client: &client,
                creds,
            };
            let upgrade = OsUpgrade {
                from: &current,
                to: plan.to,
                api: plan.api,
                stage: req.stage,
                reboot: req.reboot,
                wait: req.wait,
                deadline,
            };
            let upgraded = upgrade_os(&node, upgrade, report).await;
            let summary = match (upgraded, drainer.as_mut()) {
                (Ok(summary), _) => summary,
                (Err(mut e), Some(d)) => {
                    e.msg = format!("{}; {}", e.msg, d.uncordon_if_cordoned_here().await);
                    return Err(e);
                }
                (Err(e), None) => return Err(e),
            };
            done.push(format!("{} ({summary})", plan.reason));
            if let Some(d) = drainer.as_mut() {
                let uncordoned = d
                    .back_and_uncordon(&target.node, deadline)
                    .await
                    .map_err(|m| report.fail(m))?;
                if let Some(drain) = report.fields.get_mut("drain") {
                    drain["uncordoned"] = json!(uncordoned);
                }
                done.push(format!(
                    "Node {} drained{}",
                    d.node_name,
                    if uncordoned {
                        " and uncordoned"
                    } else {
                        ", left cordoned as it was"
                    }
                ));
            }
            if !req.wait {
                return Ok(format!("{}: {}", target.node, done.join("; ")));
            }
        }
        if let Some(want) = &req.kubernetes {
            // The OS upgrade rebooted the node: read the config it runs now.
            let client = if report.changed {
                let c = connection::connect(target, creds, opts.clone())
                    .await
                    .map_err(|e| report.client_fail(e))?;
                let config = read_config(&c, report).await?;
                let plan = plan_kubernetes(&config, want, &talos_after)
                    .map_err(|why| report.fail(format!("{}: {why}", target.node)))?;
                report.set("kubernetes", plan.to_json());
                k8s_plan = plan.changes().then_some(plan);
                c
            } else {
                client
            };
            if let Some(plan) = &k8s_plan {
                upgrade_kubernetes(&client, plan, &talos_after, deadline, report).await?;
                done.push(format!("Kubernetes {} -> {}", plan.current, plan.target));
                report.warnings.push(format!(
                    "{}: only this node's Kubernetes components moved; across a cluster a node's new \
                     kubelet must not run ahead of other control planes' API servers, so upgrade a \
                     cluster with ferro.talos.talos_kubernetes_upgrade (talosctl upgrade-k8s's \
                     order, waiting for each pod and Node)",
                    target.node
                ));
            }
        }
    }
    if done.is_empty() {
        let mut parts = Vec::new();
        if let Some(os) = &req.os {
            parts.push(format!("Talos {current_tag} is at the target {}", os.tag()));
        }
        if let Some(k) = &req.kubernetes {
            parts.push(format!("Kubernetes is at the target {k}"));
        }
        return Ok(format!("{}: up to date: {}", target.node, parts.join("; ")));
    }
    Ok(format!("{}: {}", target.node, done.join("; ")))
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
