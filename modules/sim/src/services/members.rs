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

/// The 62-letter alphabet of `github.com/jxskiss/base62`'s StdEncoding (`default.go` @ v1.1.0).
const BASE62_ALPHABET: &[u8; 62] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Base62 as upstream's node identity is written (`internal/app/machined/pkg/adapters/cluster/
/// identity.go` `Generate` @ v1.14.1: 32 random bytes, `base62.EncodeToString` of
/// `github.com/jxskiss/base62` v1.1.0). That is not a number in base 62: it reads the bytes as a
/// bit string from the end, six bits a letter, and a six-bit group whose middle four bits are
/// all set (30, 31, 62, 63: more than 61) keeps only its low five bits and gives its top bit
/// back to the next letter (`encodeV2` and `get6bits` in `base62.go`). 32 bytes are 43 to 52
/// letters.
fn base62(src: &[u8]) -> String {
    const COMPACT: u8 = 0x1E;
    const LOW_FIVE: u8 = 0x1F;
    let mut out = String::with_capacity(src.len() * 8 / 5 + 1);
    // Bits not yet written, counted from the start of `src`.
    let mut left = src.len() * 8;
    while left > 0 {
        let mut letter = six_bits_before(src, left);
        let mut used = 6;
        if letter & COMPACT == COMPACT {
            if left > 6 || letter > LOW_FIVE {
                used = 5;
            }
            letter &= LOW_FIVE;
        }
        out.push(char::from(BASE62_ALPHABET[usize::from(letter)]));
        left = left.saturating_sub(used);
    }
    out
}

/// The six bits that end at bit `end` of `src` (fewer at its start, zero-filled above).
fn six_bits_before(src: &[u8], end: usize) -> u8 {
    let (mut byte, mut bits) = (end / 8, end % 8);
    if bits == 0 {
        byte -= 1;
        bits = 8;
    }
    let mut b = src[byte] >> (8 - bits);
    if bits < 6 && byte > 0 {
        b |= src[byte - 1] << bits;
    }
    b & 0x3F
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
    use ferro_talos_oracle::{Oracle, Release};
    use serde_json::json;

    #[test]
    fn base62_reads_bits_from_the_end_as_upstreams_encoder() {
        // Worked by hand from base62.go @ v1.1.0: 0x3d is 111101, whose middle bits are all set,
        // so its letter takes five bits (11101 = 29 = 'd') and the top bit goes on.
        assert_eq!(base62(&[0, 0, 61]), "9AAA");
        assert_eq!(base62(&[]), "");
        let id = base62(&[0xff; 32]);
        assert!((43..=52).contains(&id.len()), "{id}");
    }

    /// The same bytes, the same identity as upstream's encoder (the oracle links
    /// github.com/jxskiss/base62 at Talos's pin), over lengths and bit patterns that take every
    /// branch: all zeros, all ones, the compact groups at the very start.
    #[test]
    fn base62_matches_upstream() {
        let Some(mut oracle) = Oracle::start(Release::V1_14_1) else {
            return;
        };
        let mut cases: Vec<Vec<u8>> = vec![
            vec![0; 32],
            vec![0xff; 32],
            vec![0x3d],
            vec![0x1f],
            vec![0x3e, 0],
        ];
        for len in 1..=40 {
            cases.push((0..len).map(|_| rand::random::<u8>()).collect());
            cases.push(
                (0..len)
                    .map(|i| if i % 3 == 0 { 0xfe } else { 0x7b })
                    .collect(),
            );
        }
        for _ in 0..500 {
            cases.push((0..32).map(|_| rand::random::<u8>()).collect());
        }
        for bytes in cases {
            let upstream = oracle.ask(&json!({"op": "node_id", "hex": hex::encode(&bytes)}));
            assert_eq!(
                upstream["encoded"],
                base62(&bytes),
                "{}",
                hex::encode(&bytes)
            );
        }
    }
}
