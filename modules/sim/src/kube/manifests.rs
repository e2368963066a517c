//! The bootstrap manifests a control plane renders from its machine config, as COSI resources
//! `Manifests.kubernetes.talos.dev` in namespace `controlplane`: one resource per manifest id,
//! each a list of Kubernetes objects.
//!
//! Upstream (v1.13.9): `internal/app/machined/pkg/controllers/k8s/manifest.go` (`render()`: the
//! ids and which are conditional), `control_plane.go` (BootstrapManifestsConfig from the config:
//! proxy and CoreDNS images and switches, flannel when the CNI is `flannel`, KubePrism's address,
//! `getProxyArgs`; ExtraManifestsConfig: inline manifests and URLs with priority `99`),
//! `extra_manifest.go` (ids `<priority>-<name>`), `adapters/k8s/manifest.go` (`SetYAML`: split
//! multi-document YAML, skip empty documents, unwrap `kind: List`), and the defaults of
//! `pkg/machinery/config/types/v1alpha1/v1alpha1_proxyconfig.go`, `v1alpha1_provider.go` and
//! `pkg/images/list.go` with `pkg/machinery/constants/constants.go`.
//!
//! `cluster.extraManifests` (and custom CNI URLs) name URLs Talos downloads; the simulator
//! cannot fetch them, so it renders no resource for them.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::Value;

use super::templates::{self, Inputs, Proxy};
use crate::mcfg::StoredConfig;

/// `constants.DefaultKubernetesVersion`: the default kube-proxy image's tag.
const DEFAULT_PROXY_IMAGE: &str = "registry.k8s.io/kube-proxy:v1.36.3";
/// `constants.CoreDNSImage:DefaultCoreDNSVersion`.
const DEFAULT_COREDNS_IMAGE: &str = "registry.k8s.io/coredns/coredns:v1.14.6";
/// `images.Flannel`: `ghcr.io/siderolabs/flannel:<constants.FlannelVersion>`, not configurable.
pub const FLANNEL_IMAGE: &str = "ghcr.io/siderolabs/flannel:v0.28.8";
const DEFAULT_POD_CIDR: &str = "10.244.0.0/16";
const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
const KUBEPRISM_PORT: u64 = 7445;

/// Every manifest of a config, by id (the order COSI's in-memory List returns them in).
pub type Rendered = BTreeMap<String, Vec<Value>>;

fn at<'a>(v: Option<&'a Value>, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v?, |v, k| v.get(*k))
}

fn doc<'a>(cfg: &'a StoredConfig, kind: &str) -> Option<&'a Value> {
    cfg.docs()
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
}

/// A switch that v1alpha1 writes as `disabled: true` and Talos 1.14's document as
/// `enabled: false`.
fn enabled(cfg: &StoredConfig, v1alpha1: &[&str], kind: &str) -> bool {
    let disabled = at(cfg.v1alpha1(), v1alpha1).and_then(Value::as_bool) == Some(true);
    let off = doc(cfg, kind)
        .and_then(|d| d.get("enabled"))
        .and_then(Value::as_bool)
        == Some(false);
    !disabled && !off
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The CNI is flannel unless `cluster.network.cni.name` says otherwise; a Talos 1.14 config
/// without that field deploys flannel when it has a KubeFlannelCNIConfig document.
fn flannel_enabled(cfg: &StoredConfig) -> bool {
    if let Some(name) = at(cfg.v1alpha1(), &["cluster", "network", "cni", "name"]) {
        return name.as_str() == Some("flannel");
    }
    let shaped_114 = cfg.docs().iter().any(|d| {
        d.get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.starts_with("Kube") && k != "KubeletConfig")
    });
    !shaped_114 || doc(cfg, "KubeFlannelCNIConfig").is_some()
}

/// The tenth address of the first IPv4 service network (upstream's DNS service IP).
fn dns_service_ip(service_cidrs: &[String]) -> String {
    let first_v4 = service_cidrs
        .iter()
        .filter_map(|c| c.split('/').next()?.parse::<std::net::Ipv4Addr>().ok())
        .next()
        .unwrap_or(std::net::Ipv4Addr::new(10, 96, 0, 0));
    std::net::Ipv4Addr::from(u32::from(first_v4).wrapping_add(10)).to_string()
}

fn minor_of(image: &str) -> Option<u64> {
    let version = super::model::version_of_image(image);
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u64 = parts.next()?.parse().ok()?;
    let minor: u64 = parts.next()?.parse().ok()?;
    Some(major * 1000 + minor)
}

/// `getProxyArgs`: the flags in the order upstream's args builder sorts them, then extra args.
fn proxy_args(cfg: &StoredConfig, image: &str, pod_cidrs: &[String]) -> Vec<String> {
    let v1 = cfg.v1alpha1();
    let mode = at(v1, &["cluster", "proxy", "mode"])
        .or_else(|| doc(cfg, "KubeProxyConfig").and_then(|d| d.get("mode")))
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| {
            if minor_of(image).is_some_and(|m| m >= 1031) {
                "nftables".into()
            } else {
                "iptables".into()
            }
        });
    let mut args = BTreeMap::from([
        ("cluster-cidr".to_string(), pod_cidrs.join(",")),
        ("conntrack-max-per-core".to_string(), "0".to_string()),
        ("hostname-override".to_string(), "$(NODE_NAME)".to_string()),
        (
            "kubeconfig".to_string(),
            "/etc/kubernetes/kubeconfig".to_string(),
        ),
        ("proxy-mode".to_string(), mode),
    ]);
    if let Some(Value::Object(extra)) = at(v1, &["cluster", "proxy", "extraArgs"]) {
        for (k, v) in extra {
            if k != "kubeconfig"
                && let Some(v) = v.as_str()
            {
                args.insert(k.clone(), v.to_string());
            }
        }
    }
    args.into_iter()
        .map(|(k, v)| format!("--{k}={v}"))
        .collect()
}

/// What the templates need, read from a control plane's config.
pub fn inputs(cfg: &StoredConfig) -> Inputs {
    let v1 = cfg.v1alpha1();
    let token = at(v1, &["cluster", "token"])
        .and_then(Value::as_str)
        .unwrap_or("");
    let (token_id, token_secret) = token.split_once('.').unwrap_or(("", ""));
    let mut pod_cidrs = strings(at(v1, &["cluster", "network", "podSubnets"]));
    if pod_cidrs.is_empty() {
        pod_cidrs.push(DEFAULT_POD_CIDR.into());
    }
    let mut service_cidrs = strings(at(v1, &["cluster", "network", "serviceSubnets"]));
    if service_cidrs.is_empty() {
        service_cidrs.push(DEFAULT_SERVICE_CIDR.into());
    }
    // v1alpha1 enables KubePrism with `enabled: true`; a Talos 1.14 KubePrismConfig document
    // enables it unless it says `enabled: false`.
    let prism = at(v1, &["machine", "features", "kubePrism"])
        .filter(|p| p.get("enabled").and_then(Value::as_bool) == Some(true))
        .or_else(|| {
            doc(cfg, "KubePrismConfig")
                .filter(|p| p.get("enabled").and_then(Value::as_bool) != Some(false))
        });
    let server = match prism {
        Some(p) => format!(
            "https://127.0.0.1:{}",
            p.get("port")
                .and_then(Value::as_u64)
                .unwrap_or(KUBEPRISM_PORT)
        ),
        None => cfg.endpoint(),
    };
    let proxy = enabled(cfg, &["cluster", "proxy", "disabled"], "KubeProxyConfig").then(|| {
        let image = super::model::proxy_image(cfg).unwrap_or_else(|| DEFAULT_PROXY_IMAGE.into());
        Proxy {
            args: proxy_args(cfg, &image, &pod_cidrs),
            image,
        }
    });
    let coredns_image = enabled(
        cfg,
        &["cluster", "coreDNS", "disabled"],
        "KubeCoreDNSConfig",
    )
    .then(|| {
        super::model::config_image(cfg, &["cluster", "coreDNS", "image"], "KubeCoreDNSConfig")
            .unwrap_or_else(|| DEFAULT_COREDNS_IMAGE.into())
    });
    Inputs {
        token_id: token_id.into(),
        token_secret: token_secret.into(),
        server,
        cluster_domain: at(v1, &["cluster", "network", "dnsDomain"])
            .and_then(Value::as_str)
            .unwrap_or("cluster.local")
            .into(),
        dns_service_ip: dns_service_ip(&service_cidrs),
        pod_cidrs,
        proxy,
        coredns_image,
        flannel_image: flannel_enabled(cfg).then(|| FLANNEL_IMAGE.to_string()),
        talos_api_access: at(
            v1,
            &["machine", "features", "kubernetesTalosAPIAccess", "enabled"],
        )
        .and_then(Value::as_bool)
            == Some(true)
            || doc(cfg, "KubeTalosAPIAccessConfig").is_some(),
    }
}

/// `SetYAML`: the objects of a multi-document YAML text; empty documents are skipped, a `List`
/// contributes its items, and a document that is not an object with apiVersion and kind is
/// dropped (upstream fails the whole manifest on it; the simulator keeps the rest).
pub fn objects_of_yaml(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_default();
    let mut out = Vec::new();
    for d in docs {
        let is_list = d.get("kind").and_then(Value::as_str) == Some("List");
        let items = if is_list {
            d.get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            vec![d]
        };
        out.extend(
            items
                .into_iter()
                .filter(|o| o.get("apiVersion").is_some() && o.get("kind").is_some()),
        );
    }
    out
}

/// `cluster.inlineManifests` (v1alpha1: `name`, `contents`) and Talos 1.14's
/// KubeInlineManifestConfig documents (`name`, `manifest`).
fn inline_manifests(cfg: &StoredConfig) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = at(cfg.v1alpha1(), &["cluster", "inlineManifests"])
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|m| {
                    Some((
                        m.get("name")?.as_str()?.to_string(),
                        m.get("contents")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    for d in cfg.docs() {
        if d.get("kind").and_then(Value::as_str) == Some("KubeInlineManifestConfig")
            && let Some(name) = d.get("name").and_then(Value::as_str)
        {
            let text = d.get("manifest").and_then(Value::as_str).unwrap_or("");
            out.push((name.to_string(), text.to_string()));
        }
    }
    out
}

/// Every manifest a control plane with this config renders, by id.
pub fn render(cfg: &StoredConfig) -> Rendered {
    let i = inputs(cfg);
    let mut out = Rendered::new();
    if !i.token_id.is_empty() {
        out.insert(
            "00-kubelet-bootstrapping-token".into(),
            vec![templates::bootstrap_token_secret(&i)],
        );
    }
    out.insert(
        "01-csr-node-bootstrap".into(),
        vec![templates::csr_node_bootstrap()],
    );
    out.insert(
        "01-csr-approver-role-binding".into(),
        vec![templates::csr_approver()],
    );
    out.insert(
        "01-csr-renewal-role-binding".into(),
        vec![templates::csr_renewal()],
    );
    out.insert(
        "11-kube-config-in-cluster".into(),
        vec![templates::kubeconfig_in_cluster(&i)],
    );
    out.insert(
        "11-talos-node-rbac-template".into(),
        vec![
            templates::talos_nodes_binding(),
            templates::talos_nodes_role(),
        ],
    );
    if let Some(image) = &i.coredns_image {
        out.insert("11-core-dns".into(), templates::coredns(&i, image));
        out.insert(
            "11-core-dns-svc".into(),
            vec![templates::coredns_service(&i)],
        );
    }
    if let Some(image) = &i.flannel_image {
        out.insert("05-flannel".into(), templates::flannel(&i, image));
    }
    if let Some(proxy) = &i.proxy {
        out.insert("10-kube-proxy".into(), templates::kube_proxy(proxy));
    }
    if i.talos_api_access {
        out.insert(
            "13-talos-service-account-crd".into(),
            vec![templates::talos_service_account_crd()],
        );
    }
    for (name, text) in inline_manifests(cfg) {
        out.insert(format!("99-{name}"), objects_of_yaml(&text));
    }
    out
}

/// One Manifest resource as a node's COSI state holds it.
#[derive(Clone, Debug)]
pub struct ManifestResource {
    pub version: u64,
    pub objects: Vec<Value>,
    pub updated: SystemTime,
}

/// A control plane's Manifest resources; each version goes up by one when what it renders to
/// changes, and starts at 1 each boot (COSI keeps them in memory).
#[derive(Clone, Debug, Default)]
pub struct ManifestVersions(BTreeMap<String, ManifestResource>);

impl ManifestVersions {
    pub fn boot(cfg: &StoredConfig, at: SystemTime) -> ManifestVersions {
        ManifestVersions(
            render(cfg)
                .into_iter()
                .map(|(id, objects)| {
                    let r = ManifestResource {
                        version: 1,
                        objects,
                        updated: at,
                    };
                    (id, r)
                })
                .collect(),
        )
    }

    pub fn update(&mut self, cfg: &StoredConfig) {
        let now = SystemTime::now();
        let mut next = BTreeMap::new();
        for (id, objects) in render(cfg) {
            let r = match self.0.remove(&id) {
                Some(old) if old.objects == objects => old,
                Some(old) => ManifestResource {
                    version: old.version + 1,
                    objects,
                    updated: now,
                },
                None => ManifestResource {
                    version: 1,
                    objects,
                    updated: now,
                },
            };
            next.insert(id, r);
        }
        self.0 = next;
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &ManifestResource)> {
        self.0.iter()
    }
}

#[cfg(test)]
#[path = "manifests_tests.rs"]
mod tests;
