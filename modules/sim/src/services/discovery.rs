//! `config/DiscoveryConfigs.cluster.talos.dev` (id `cluster`): the discovery settings machined
//! derives from the active config, the cluster's discovery secret (`serviceEncryptionKey`, the
//! bytes of `cluster.secret`) among them. Upstream marks the type sensitive
//! (`pkg/machinery/resources/cluster/config.go` @ v1.13.9 and v1.14.1: `Sensitivity:
//! meta.Sensitive`, default namespace `config`), so apid serves it to os:admin only.
//!
//! What goes in it: `internal/app/machined/pkg/controllers/cluster/config.go`
//! `NewConfigController`. At v1.13.9 from the v1alpha1 `cluster.discovery` section and
//! `cluster.id`/`cluster.secret`; at v1.14.1 from the discovery service configs (the v1alpha1
//! service registry when discovery and it are enabled, named `legacy`, else the
//! `DiscoveryServiceConfig` documents) and the cluster identity (v1alpha1 `cluster.id`/`secret`
//! when either is set, else the `DiscoveryIdentityConfig` document), with `discoveryEnabled` no
//! longer set. Endpoints are normalised to host:port (443, or 80 for http). The spec is served
//! as YAML only (no proto spec), in the struct's field order; a `[]byte` is a sequence of
//! integers in go-yaml's output.

use base64::Engine;
use serde_json::Value;

use crate::mcfg::StoredConfig;

pub const DISCOVERY_CONFIG: (&str, &str) = ("config", "DiscoveryConfigs.cluster.talos.dev");
pub const DISCOVERY_CONFIG_ID: &str = "cluster";

const DEFAULT_ENDPOINT: &str = "https://discovery.talos.dev/";

fn at<'a>(doc: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, key| v.get(*key))
}

fn flag(doc: &Value, path: &[&str]) -> bool {
    at(doc, path).and_then(Value::as_bool).unwrap_or(false)
}

fn text<'a>(doc: &'a Value, path: &[&str]) -> &'a str {
    at(doc, path).and_then(Value::as_str).unwrap_or_default()
}

/// `host:port` and whether it is plain http, as upstream normalises a discovery endpoint.
fn normalise(endpoint: &str) -> (String, bool) {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("https", endpoint));
    let host_port = rest.split('/').next().unwrap_or_default();
    let insecure = scheme == "http";
    let with_port = if host_port
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !host_port.ends_with(']')
    {
        host_port.to_string()
    } else {
        format!("{host_port}:{}", if insecure { 80 } else { 443 })
    };
    (with_port, insecure)
}

fn bytes_yaml(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return " []\n".into();
    }
    let mut out = String::from("\n");
    for b in bytes {
        out.push_str(&format!("    - {b}\n"));
    }
    out
}

fn quoted(s: &str) -> String {
    serde_saphyr::to_string(&s.to_string())
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// The resource's YAML spec for a node running `version` with `cfg` active; `None` when the
/// config has no cluster section (the controller makes no resource then).
pub fn spec_yaml(cfg: &StoredConfig, minor: u64) -> Option<String> {
    let v1 = cfg.v1alpha1()?;
    v1.get("cluster")?;
    let discovery_on = flag(v1, &["cluster", "discovery", "enabled"]);
    let kubernetes_on = discovery_on
        && !flag(
            v1,
            &[
                "cluster",
                "discovery",
                "registries",
                "kubernetes",
                "disabled",
            ],
        );
    let service_on = discovery_on
        && !flag(
            v1,
            &["cluster", "discovery", "registries", "service", "disabled"],
        );
    let legacy_endpoint = || {
        let e = text(
            v1,
            &["cluster", "discovery", "registries", "service", "endpoint"],
        );
        if e.is_empty() { DEFAULT_ENDPOINT } else { e }.to_string()
    };
    let decode = |secret: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(secret)
            .unwrap_or_default()
    };
    let legacy_id = text(v1, &["cluster", "id"]);
    let legacy_secret = text(v1, &["cluster", "secret"]);

    if minor < 14 {
        let mut yaml = format!(
            "discoveryEnabled: {discovery_on}\nregistryKubernetesEnabled: {kubernetes_on}\nregistryServiceEnabled: {service_on}\n"
        );
        let (endpoint, insecure, key, id) = if service_on {
            let (e, i) = normalise(&legacy_endpoint());
            (e, i, decode(legacy_secret), legacy_id.to_string())
        } else {
            (String::new(), false, Vec::new(), String::new())
        };
        yaml.push_str(&format!("serviceEndpoint: {}\n", quoted(&endpoint)));
        if insecure {
            yaml.push_str("serviceEndpointInsecure: true\n");
        }
        yaml.push_str(&format!("serviceEncryptionKey:{}", bytes_yaml(&key)));
        yaml.push_str(&format!("serviceClusterID: {}\n", quoted(&id)));
        return Some(yaml);
    }

    let docs = cfg.docs();
    let by_kind = |kind: &'static str| {
        docs.iter()
            .filter(move |d| d.get("kind").and_then(Value::as_str) == Some(kind))
    };
    let services: Vec<(String, String)> = if service_on {
        vec![("legacy".into(), legacy_endpoint())]
    } else {
        by_kind("DiscoveryServiceConfig")
            .map(|d| {
                (
                    text(d, &["name"]).to_string(),
                    text(d, &["endpoint"]).to_string(),
                )
            })
            .collect()
    };
    let (id, secret) = if !legacy_id.is_empty() || !legacy_secret.is_empty() {
        (legacy_id.to_string(), legacy_secret.to_string())
    } else {
        by_kind("DiscoveryIdentityConfig")
            .next()
            .map(|d| {
                (
                    text(d, &["clusterID"]).to_string(),
                    text(d, &["clusterSecret"]).to_string(),
                )
            })
            .unwrap_or_default()
    };
    let endpoints: Vec<(String, String, bool)> = services
        .iter()
        .map(|(name, e)| {
            let (e, i) = normalise(e);
            (name.clone(), e, i)
        })
        .collect();
    let (first, first_insecure, key, id) = match endpoints.first() {
        Some((_, e, i)) => (e.clone(), *i, decode(&secret), id),
        None => (String::new(), false, Vec::new(), String::new()),
    };
    let mut yaml = format!(
        "discoveryEnabled: false\nregistryKubernetesEnabled: {kubernetes_on}\nregistryServiceEnabled: {}\nserviceEndpoint: {}\n",
        !endpoints.is_empty(),
        quoted(&first)
    );
    if first_insecure {
        yaml.push_str("serviceEndpointInsecure: true\n");
    }
    yaml.push_str(&format!("serviceEncryptionKey:{}", bytes_yaml(&key)));
    yaml.push_str(&format!("serviceClusterID: {}\n", quoted(&id)));
    if endpoints.is_empty() {
        yaml.push_str("serviceEndpoints: []\n");
    } else {
        yaml.push_str("serviceEndpoints:\n");
        for (name, e, i) in &endpoints {
            yaml.push_str(&format!(
                "    - name: {}\n      endpoint: {}\n      insecure: {i}\n",
                quoted(name),
                quoted(e)
            ));
        }
    }
    Some(yaml)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Release;
    use ferro_talos_config::MachineConfig;
    use ferro_talos_config::contract::Contract;
    use ferro_talos_config::generate::{GenerateOptions, MachineType};
    use ferro_talos_secrets::Bundle;

    /// A control plane's config as the collection renders it for `contract`, and the bundle.
    fn rendered(contract: Contract, release: Release) -> (Bundle, StoredConfig) {
        let bundle = Bundle::generate((1, 13)).expect("a bundle");
        let opts = GenerateOptions::new(
            contract,
            MachineType::ControlPlane,
            "base",
            "https://base:6443",
        );
        let yaml = MachineConfig::generate(&bundle, &opts)
            .expect("renders")
            .to_yaml();
        let cfg = StoredConfig::parse(yaml.as_bytes(), release).expect("the node takes it");
        (bundle, cfg)
    }

    fn spec(cfg: &StoredConfig, minor: u64) -> Value {
        serde_saphyr::from_str(&spec_yaml(cfg, minor).expect("a cluster section"))
            .expect("the spec is YAML")
    }

    #[test]
    fn the_v1alpha1_discovery_section_at_1_13() {
        let (bundle, cfg) = rendered(Contract::V1_13, Release::V1_13);
        let s = spec(&cfg, 13);
        let key = base64::engine::general_purpose::STANDARD
            .decode(&bundle.cluster.secret)
            .expect("the secret is base64");
        assert_eq!(s["discoveryEnabled"], true, "{s}");
        assert_eq!(s["registryKubernetesEnabled"], false, "{s}");
        assert_eq!(s["registryServiceEnabled"], true, "{s}");
        assert_eq!(s["serviceEndpoint"], "discovery.talos.dev:443", "{s}");
        assert_eq!(s["serviceEncryptionKey"], serde_json::json!(key), "{s}");
        assert_eq!(s["serviceClusterID"], bundle.cluster.id.as_str(), "{s}");
        assert!(s.get("serviceEndpoints").is_none(), "{s}");
    }

    #[test]
    fn the_discovery_documents_at_1_14() {
        let (bundle, cfg) = rendered(Contract::V1_14, Release::V1_14);
        let s = spec(&cfg, 14);
        let key = base64::engine::general_purpose::STANDARD
            .decode(&bundle.cluster.secret)
            .expect("the secret is base64");
        assert_eq!(s["discoveryEnabled"], false, "{s}");
        assert_eq!(s["registryServiceEnabled"], true, "{s}");
        assert_eq!(s["serviceEndpoint"], "discovery.talos.dev:443", "{s}");
        assert_eq!(s["serviceEncryptionKey"], serde_json::json!(key), "{s}");
        assert_eq!(s["serviceClusterID"], bundle.cluster.id.as_str(), "{s}");
        assert_eq!(
            s["serviceEndpoints"],
            serde_json::json!([{"name": "default", "endpoint": "discovery.talos.dev:443", "insecure": false}]),
            "{s}"
        );
        // The v1alpha1 service registry of a 1.13 config, on a 1.14 node, is named `legacy`.
        let (_, old) = rendered(Contract::V1_13, Release::V1_14);
        assert_eq!(spec(&old, 14)["serviceEndpoints"][0]["name"], "legacy");
    }

    #[test]
    fn endpoints_are_normalised_as_upstream_normalises_them() {
        assert_eq!(
            normalise("https://discovery.talos.dev/"),
            ("discovery.talos.dev:443".into(), false)
        );
        assert_eq!(
            normalise("http://10.0.0.1:3000"),
            ("10.0.0.1:3000".into(), true)
        );
        assert_eq!(normalise("http://d.example"), ("d.example:80".into(), true));
        // go-yaml writes an empty string as "".
        assert_eq!(quoted(""), "\"\"");
    }
}
