//! What the cluster is made of: each node's role, Talos version and the few config values the
//! other side of a comparison needs to be built alike (Kubernetes version, installer image).

use anyhow::{Context as _, Result, anyhow};
use ferro_talos_config::MachineConfig;
use ferro_talos_config::image::split_image;
use serde::Serialize;
use serde_json::Value;

use crate::session::Session;

/// One node as the probes know it. The live config stays in memory: it holds the cluster's secrets.
pub struct Node {
    /// `cp1`, `cp2`, ... for control planes and `w1`, ... for workers, in the order given.
    pub label: String,
    pub address: String,
    pub control_plane: bool,
    pub summary: NodeSummary,
    pub hostname: String,
    pub cluster_name: Option<String>,
    pub live_config: Vec<u8>,
    pub parsed_config: MachineConfig,
}

/// The part of a node that goes into the JSON output (no address, no hostname, no secret).
#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    pub label: String,
    /// `machine.type` of the live config: `controlplane`, `init` or `worker`.
    pub machine_type: String,
    /// The Talos version tag the node reports.
    pub version: String,
    /// The tag of `machine.kubelet.image`, without `v`.
    pub kubernetes_version: Option<String>,
    /// `machine.install.image` of the live config.
    pub install_image: Option<String>,
}

struct Discovered {
    address: String,
    machine_type: String,
    version: String,
    hostname: String,
    cluster_name: Option<String>,
    kubernetes_version: Option<String>,
    install_image: Option<String>,
    live_config: Vec<u8>,
    parsed_config: MachineConfig,
}

/// Reads every node's version and live config; fails naming the node when one cannot be read,
/// since a comparison needs every node configured and reachable.
pub async fn discover(session: &Session, addresses: &[String]) -> Result<Vec<Node>> {
    let mut found = Vec::new();
    for address in addresses {
        found.push(discover_one(session, address).await.with_context(|| {
            format!(
                "node {address}: cannot read its version and machine config; the conformance run needs \
                 every node configured and reachable with the talosconfig's credentials"
            )
        })?);
    }
    let is_control_plane =
        |d: &Discovered| matches!(d.machine_type.as_str(), "controlplane" | "init");
    let (cps, workers): (Vec<_>, Vec<_>) = found.into_iter().partition(is_control_plane);
    if cps.is_empty() {
        return Err(anyhow!(
            "none of the nodes is a control plane: name at least one control plane in --nodes"
        ));
    }
    let label = |prefix: &str, i: usize| format!("{prefix}{}", i + 1);
    let cps = cps
        .into_iter()
        .enumerate()
        .map(|(i, d)| (label("cp", i), true, d));
    let workers = workers
        .into_iter()
        .enumerate()
        .map(|(i, d)| (label("w", i), false, d));
    Ok(cps
        .chain(workers)
        .map(|(label, control_plane, d)| Node {
            summary: NodeSummary {
                label: label.clone(),
                machine_type: d.machine_type,
                version: d.version,
                kubernetes_version: d.kubernetes_version,
                install_image: d.install_image,
            },
            label,
            address: d.address,
            control_plane,
            hostname: d.hostname,
            cluster_name: d.cluster_name,
            live_config: d.live_config,
            parsed_config: d.parsed_config,
        })
        .collect())
}

async fn discover_one(session: &Session, address: &str) -> Result<Discovered> {
    let client = session.client(address).await?;
    let version = client.version().await?;
    let hostname = client.hostname().await.unwrap_or_default();
    let live_config = client.get_machine_config().await?;
    let text = std::str::from_utf8(&live_config).context("its machine config is not UTF-8")?;
    let parsed_config = MachineConfig::parse(text).context("its machine config does not parse")?;
    let v1 = parsed_config
        .v1alpha1()
        .ok_or_else(|| anyhow!("its machine config has no v1alpha1 document"))?;
    let text_at = |pointer: &str| {
        v1.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let machine_type = text_at("/machine/type")
        .ok_or_else(|| anyhow!("its machine config has no machine.type"))?;
    Ok(Discovered {
        address: address.to_string(),
        machine_type,
        version: version.version.map(|v| v.tag).unwrap_or_default(),
        hostname,
        cluster_name: text_at("/cluster/clusterName"),
        kubernetes_version: text_at("/machine/kubelet/image")
            .and_then(|image| tag_of(&image).map(|t| t.trim_start_matches('v').to_string())),
        install_image: ferro_talos_config::image::config_installer(&parsed_config)
            .map(str::to_string),
        live_config,
        parsed_config,
    })
}

/// The tag of an image reference (`repo:tag`, digest dropped).
pub fn tag_of(image: &str) -> Option<&str> {
    let (_, tag) = split_image(image);
    tag
}

/// The repository of an image reference, without tag and digest.
pub fn repository_of(image: &str) -> &str {
    split_image(image).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_parts() {
        assert_eq!(
            tag_of("ghcr.io/siderolabs/kubelet:v1.36.1"),
            Some("v1.36.1")
        );
        assert_eq!(
            repository_of("factory.talos.dev/installer/abc:v1.13.6@sha256:00"),
            "factory.talos.dev/installer/abc"
        );
        assert_eq!(
            repository_of("registry:5000/installer"),
            "registry:5000/installer"
        );
        assert_eq!(tag_of("registry:5000/installer"), None);
    }
}
