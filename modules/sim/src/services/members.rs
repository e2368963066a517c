//! `cluster/Members.cluster.talos.dev`: the cluster members a node learns through discovery
//! (upstream `pkg/machinery/resources/cluster/member.go` @ v1.13.9 and v1.14.1, written by
//! `internal/app/machined/pkg/controllers/cluster/member.go` from the affiliates, each node's own
//! from `local_affiliate.go`). `talosctl get members` reads them, and `talosctl health` takes
//! the cluster's nodes from them when none are given on its command line.
//!
//! The simulator has no discovery service: a node with a discovery registry enabled sees as
//! members every node of the simulated cluster that runs a config with the same cluster id
//! (what the discovery service would hand it), itself included. Affiliates of nodes that went
//! away linger upstream until their TTL runs out; here a node is a member while it runs a config.

use std::collections::BTreeMap;

use ferro_talos_proto::resource::cluster::{ControlPlane, MachineType, MemberSpec, NetIp};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::discovery;
use crate::state::{Node, State};

pub const MEMBERS: (&str, &str) = ("cluster", "Members.cluster.talos.dev");

/// The cluster id a node announces itself under, when its config enables a discovery registry.
fn cluster_id(n: &Node) -> Option<String> {
    let cfg = n.active.as_ref()?;
    let yaml = discovery::spec_yaml(cfg, crate::version::minor(&n.version))?;
    let spec: Value = serde_saphyr::from_str(&yaml).ok()?;
    let on = |key: &str| spec.get(key).and_then(Value::as_bool).unwrap_or(false);
    if !(on("registryServiceEnabled") || on("registryKubernetesEnabled")) {
        return None;
    }
    let id = cfg
        .v1alpha1()
        .and_then(|v| v.get("cluster")?.get("id")?.as_str().map(str::to_string))
        .or_else(|| {
            cfg.docs()
                .iter()
                .find(|d| d.get("kind").and_then(Value::as_str) == Some("DiscoveryIdentityConfig"))
                .and_then(|d| d.get("clusterID")?.as_str().map(str::to_string))
        })?;
    Some(id)
}

/// Base62 (0-9, A-Z, a-z) of a big-endian number, as upstream's node identity is written
/// (`internal/app/machined/pkg/adapters/cluster/identity.go` `Generate`: 32 random bytes,
/// `base62.EncodeToString`).
fn base62(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut digits = bytes.to_vec();
    let mut out = Vec::new();
    while digits.iter().any(|&d| d != 0) {
        let mut rem = 0u32;
        for d in digits.iter_mut() {
            let acc = (rem << 8) | u32::from(*d);
            *d = (acc / 62) as u8;
            rem = acc % 62;
        }
        out.push(ALPHABET[rem as usize]);
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The node identity. Upstream generates it at random once and keeps it on STATE
/// (`node_identity.go`); the simulator derives it from the node and its cluster, so it is
/// stable across reboots (and, unlike upstream, across a STATE wipe).
fn node_id(n: &Node, cluster: &str) -> String {
    let digest = Sha256::digest(format!("talos-sim node identity {} {cluster}", n.index));
    base62(&digest)
}

fn hostname(n: &Node) -> String {
    n.active
        .as_ref()
        .and_then(|c| c.hostname())
        .unwrap_or_else(|| n.hostname.clone())
}

/// `cluster.localAPIServerPort`, 6443 when unset (`APIServerConfig` `LocalPort`, which
/// `local_affiliate.go` announces as the control plane's API server port).
fn api_server_port(n: &Node) -> i64 {
    n.active
        .as_ref()
        .and_then(|c| c.v1alpha1())
        .and_then(|v| v.get("cluster")?.get("localAPIServerPort")?.as_i64())
        .filter(|p| *p > 0)
        .unwrap_or(6443)
}

/// (id, proto spec, YAML spec) of every member node `idx` sees.
pub fn members(st: &State, idx: usize) -> BTreeMap<String, (MemberSpec, String)> {
    let mut out = BTreeMap::new();
    let Some(cluster) = cluster_id(&st.nodes[idx]) else {
        return out;
    };
    for m in &st.nodes {
        if cluster_id(m).as_deref() != Some(cluster.as_str()) {
            continue;
        }
        let Some(machine_type) = m.machine_type() else {
            continue;
        };
        let (ty, ty_name) = match machine_type {
            crate::mcfg::MachineType::Init => (MachineType::TypeInit, "init"),
            crate::mcfg::MachineType::ControlPlane => {
                (MachineType::TypeControlPlane, "controlplane")
            }
            crate::mcfg::MachineType::Worker => (MachineType::TypeWorker, "worker"),
        };
        let control_plane = machine_type.is_control_plane().then(|| ControlPlane {
            api_server_port: api_server_port(m),
        });
        let spec = MemberSpec {
            node_id: node_id(m, &cluster),
            addresses: vec![NetIp {
                ip: m.address.octets().to_vec(),
            }],
            hostname: hostname(m),
            machine_type: ty as i32,
            operating_system: format!("Talos ({})", m.version),
            control_plane,
        };
        let mut yaml = format!(
            "nodeId: {}\naddresses:\n    - {}\nhostname: {}\nmachineType: {ty_name}\noperatingSystem: Talos ({})\n",
            spec.node_id, m.address, spec.hostname, m.version
        );
        if let Some(cp) = &spec.control_plane {
            yaml.push_str(&format!(
                "controlPlane:\n    apiServerPort: {}\n",
                cp.api_server_port
            ));
        }
        out.insert(crate::kube::node_name(m), (spec, yaml));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base62;

    #[test]
    fn base62_of_32_bytes_is_43_characters_or_so() {
        assert_eq!(base62(&[0, 0, 61]), "z");
        assert_eq!(base62(&[0, 62]), "10");
        assert!((42..=43).contains(&base62(&[0xff; 32]).len()));
    }
}
