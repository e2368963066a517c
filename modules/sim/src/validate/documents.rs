//! The documents' own `Validate` (other than v1alpha1), each error list joined as `errors.Join`
//! prints it (one per line); `Container.Validate` prefixes it with the document's id.
//!
//! Read at v1.13.9 and v1.14.1 (the same where both have the kind): `types/network/hostname.go`,
//! `layer2_vip.go`, `hcloud_vip.go`; v1.14.1 only: `types/k8s/{kubelet,apiserver,
//! controller_manager,scheduler,proxy,node,cluster,network,flannel,kubeprism,service_account,
//! authorization,admission_control,etcd_encryption,aggregator_ca,common}.go`,
//! `types/cluster/discovery_{service,identity}.go`, `types/runtime/unattended_install.go`.
//!
//! Not simulated: the Kubernetes version of the images (`compatibility.ValidateKubernetesImageTag`,
//! run because machined validates without `WithLocal`), PEM and key parsing
//! (service account key, CA certificates), CEL parsing of disk selectors, and the kinds not named
//! above.

use serde_json::Value;

use super::goparse;
use super::v1alpha1::{get, list, map, string};
use crate::decode::Release;

/// `(warnings, joined errors)` of the document's `Validate`.
pub fn validate(doc: &Value, release: Release) -> (Vec<String>, Option<String>) {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let d = Some(doc);
    let s = |k: &str| string(d, k);
    let mut errs: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let v14 = release == Release::V1_14;
    match kind {
        "HostnameConfig" => {
            let auto = doc.get("auto").and_then(Value::as_str);
            let hostname = s("hostname");
            if auto.is_none() && hostname.is_empty() {
                errs.push("either 'auto' or 'hostname' must be set".into());
            }
            // `pointer.SafeDeref(auto)`: absent is `off`.
            let auto_kind = auto.unwrap_or("off");
            if auto_kind != "off" && !hostname.is_empty() {
                errs.push("'auto' and 'hostname' cannot be set at the same time".into());
            }
            if !matches!(auto_kind, "off" | "stable") {
                errs.push(format!("invalid value for 'auto': {auto_kind}"));
            }
            if !hostname.is_empty() {
                if hostname.len() > 253 {
                    errs.push(format!("fqdn is too long: {}", hostname.len()));
                }
                let first = hostname.split('.').next().unwrap_or("");
                if first.is_empty() || first.len() > 63 {
                    errs.push(format!("invalid hostname {first:?}"));
                }
            }
        }
        "Layer2VIPConfig" | "HCloudVIPConfig" => {
            let n = s("name");
            if n.is_empty() {
                errs.push("name must be specified".into());
            } else if !goparse::is_ip(n) {
                errs.push(format!(
                    "name must be a valid IP address: ParseAddr({n:?}): unable to parse IP"
                ));
            }
            if s("link").is_empty() {
                errs.push("link must be specified".into());
            }
            if kind == "HCloudVIPConfig" && s("apiToken").is_empty() {
                errs.push("apiToken must be specified".into());
            }
        }
        _ if !v14 => {}
        "KubeletConfig" => {
            if s("image").is_empty() {
                errs.push("kubelet image cannot be empty".into());
            }
            let config = map(d, "config");
            for field in super::v1alpha1::KUBELET_PROTECTED {
                if config.is_some_and(|c| c.contains_key(*field)) {
                    errs.push(format!(
                        "kubelet configuration field {field:?} can't be overridden"
                    ));
                }
            }
        }
        "KubeAPIServerConfig" => {
            if s("image").is_empty() {
                errs.push("kube-apiserver image cannot be empty".into());
            }
            let mut args: Vec<&String> = map(d, "extraArgs")
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
                .collect();
            args.sort();
            for arg in args {
                let denied = DENIED_APISERVER_ARGS
                    .iter()
                    .filter(|(prefix, _)| arg.starts_with(prefix))
                    .max_by_key(|(prefix, _)| prefix.len());
                if let Some((_, reason)) = denied {
                    errs.push(format!(
                        "kube-apiserver extra argument {arg:?} is not allowed: {reason}"
                    ));
                }
            }
            errs.extend(resources(doc));
        }
        "KubeControllerManagerConfig" | "KubeSchedulerConfig" => {
            if get(doc, "enabled").and_then(Value::as_bool) == Some(false) {
                return (warnings, None);
            }
            if s("image").is_empty() {
                let name = if kind == "KubeSchedulerConfig" {
                    "scheduler"
                } else {
                    "kube-controller-manager"
                };
                errs.push(format!("{name} image cannot be empty"));
            }
            errs.extend(resources(doc));
        }
        "KubeProxyConfig" => {
            if get(doc, "enabled").and_then(Value::as_bool) == Some(false) {
                return (warnings, None);
            }
            if s("image").is_empty() {
                errs.push("proxy image cannot be empty".into());
            }
            match s("mode") {
                "" | "nftables" => {}
                m @ ("iptables" | "ipvs") => warnings.push(format!(
                    "proxy mode {m:?} is not recommended, please switch to nftables if possible"
                )),
                m => errs.push(format!(
                    "invalid proxy mode {m:?}: supported modes are iptables, ipvs and nftables"
                )),
            }
            if map(d, "extraArgs").is_some_and(|a| !a.is_empty()) {
                warnings.push("extra arguments for kube-proxy may not work as expected, please use configuration instead".into());
            }
            errs.extend(resources(doc));
        }
        "KubeNodeConfig" => {
            for cidr in list(get(doc, "nodeIP"), "validSubnets") {
                let c = cidr.as_str().unwrap_or("");
                let c = c.strip_prefix('!').unwrap_or(c);
                if !goparse::is_subnet_or_address(c) {
                    errs.push(format!("nodeIP subnet is not valid: {c:?}"));
                }
            }
            if let Some(e) = map(d, "labels").and_then(goparse::labels) {
                errs.push(e.wrap("invalid node labels").text());
            }
            if let Some(e) = map(d, "annotations").and_then(goparse::annotations) {
                errs.push(e.wrap("invalid node annotations").text());
            }
            if let Some(e) = map(d, "taints").and_then(goparse::taints) {
                errs.push(e.wrap("invalid node taints").text());
            }
        }
        "KubeClusterConfig" => {
            if s("clusterName").is_empty() {
                errs.push("clusterName must be specified".into());
            }
            match get(doc, "endpoint").and_then(Value::as_str) {
                None | Some("") => errs.push("endpoint must be specified".into()),
                Some(ep) => {
                    if let Err(e) = goparse::validate_endpoint_uri(ep) {
                        errs.push(format!("cluster endpoint is invalid: {e}"));
                    }
                }
            }
        }
        "KubeNetworkConfig" => errs.extend(network(doc)),
        "KubeFlannelCNIConfig" => {
            if s("backendType").is_empty() {
                errs.push("flannel backend type must be specified".into());
            }
            errs.extend(resources(doc));
        }
        "KubePrismConfig" => {
            let port = get(doc, "port").and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&port) {
                errs.push(format!("invalid port {port}: must be in range 1-65535"));
            }
        }
        "KubeServiceAccountConfig" => {
            let issuer = get(doc, "issuer");
            if string(issuer, "privateKey").is_empty() {
                errs.push("service issuer private key is required".into());
            }
            if string(issuer, "issuerURL").is_empty() {
                errs.push("service issuer URL is required".into());
            }
        }
        "KubeAuthorizerConfig" => {
            if s("name").is_empty() {
                errs.push("authorizer name is required".into());
            }
            let t = s("type");
            if t.is_empty() {
                errs.push("authorizer type is required".into());
            }
            if !["Node", "RBAC", "Webhook"].contains(&t) {
                errs.push(format!(
                    "authorizer type {t} is not allowed, allowed types are [Node RBAC Webhook]"
                ));
            }
            let webhook = map(d, "webhook").is_some_and(|w| !w.is_empty());
            if t == "Webhook" && !webhook {
                errs.push(
                    "authorizer webhook configuration is required for Webhook authorizer type"
                        .into(),
                );
            }
            if t != "Webhook" && webhook {
                warnings.push(
                    "authorizer webhook configuration is not allowed non-Webhook authorizer types"
                        .into(),
                );
            }
        }
        "KubeAdmissionControlConfig" if s("name").is_empty() => {
            errs.push("admission control plugin name is required".into());
        }
        "KubeEtcdEncryptionConfig" if map(d, "config").is_none_or(|c| c.is_empty()) => {
            errs.push("etcd encryption config is required".into());
        }
        "KubeAggregatorCAConfig" if get(doc, "issuingCA").is_none() => {
            errs.push("issuing CA is not set".into());
        }
        // Both return at their first error.
        "DiscoveryServiceConfig" => {
            let endpoint = s("endpoint");
            let first = if s("name").is_empty() {
                Some("name is required".to_string())
            } else if endpoint.is_empty() {
                Some("endpoint is required".to_string())
            } else {
                discovery_endpoint(endpoint)
            };
            errs.extend(first);
        }
        "DiscoveryIdentityConfig" => {
            let secret = s("clusterSecret");
            let first = if s("clusterID").is_empty() {
                Some("clusterID is required".to_string())
            } else if secret.is_empty() {
                Some("clusterSecret is required".to_string())
            } else {
                use base64::Engine;
                match base64::engine::general_purpose::STANDARD.decode(secret) {
                    Err(_) => Some(format!(
                        "invalid clusterSecret: failed to decode from base64: {secret}; illegal base64 data"
                    )),
                    Ok(b) if b.len() != 32 => Some(format!(
                        "invalid clusterSecret: expected 32 bytes, got {}: {secret}",
                        b.len()
                    )),
                    Ok(_) => None,
                }
            };
            errs.extend(first);
        }
        "UnattendedInstallConfig" => {
            if string(get(doc, "installer"), "image").is_empty() {
                warnings.push("installer.image is not set, if Talos is not booted from asset built by Image Factory, installation will fail".into());
            }
            let matcher = get(doc, "provisioning")
                .and_then(|p| get(p, "diskSelector"))
                .and_then(|s| get(s, "match"));
            if matcher.is_none_or(super::empty) {
                errs.push("provisioning.diskSelector.match is required".into());
            }
        }
        _ => {}
    }
    let e = (!errs.is_empty()).then(|| errs.join("\n"));
    (warnings, e)
}

/// `deniedArgPrefixes` (types/k8s/apiserver.go @ v1.14.1): the longest matching prefix wins.
const DENIED_APISERVER_ARGS: &[(&str, &str)] = &[
    ("anonymous-auth", "use KubeAuthenticationConfig"),
    ("oidc-", "use KubeAuthenticationConfig"),
    ("authentication-config", "use KubeAuthenticationConfig"),
    ("authorization-config", "use KubeAuthorizerConfig"),
    ("authorization-mode", "use KubeAuthorizerConfig"),
    ("authorization-webhook-", "use KubeAuthorizerConfig"),
    (
        "oidc-signing-algs",
        "not supported with KubeAuthenticationConfig: kube-apiserver rejects --oidc-* flags when structured authentication configuration is used, and the configuration has no equivalent setting (all RFC 7518 asymmetric algorithms are accepted)",
    ),
];

/// `ResourcesConfig.Validate` (types/k8s/common.go): `requests`, then `limits`, may name only
/// `cpu` and `memory`; the first other key is the error (Go map order: any of them).
fn resources(doc: &Value) -> Option<String> {
    let r = get(doc, "resources");
    for section in ["requests", "limits"] {
        let mut keys: Vec<&String> = map(r, section)
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        keys.sort();
        if let Some(k) = keys
            .into_iter()
            .find(|k| !matches!(k.as_str(), "cpu" | "memory"))
        {
            return Some(format!("unsupported pod resource {k:?}"));
        }
    }
    None
}

/// `ValidateDiscoveryServiceEndpoint` (types/cluster/discovery_service.go).
fn discovery_endpoint(endpoint: &str) -> Option<String> {
    let scheme = endpoint.split_once("://").map(|(s, _)| s).unwrap_or("");
    if scheme.is_empty() {
        return Some("endpoint scheme is required".into());
    }
    if !matches!(scheme, "http" | "https" | "grpc") {
        return Some("endpoint scheme must be http://, https:// or grpc://".into());
    }
    if goparse::validate_endpoint_uri(endpoint) == Err("hostname must not be blank".into()) {
        return Some("endpoint host is required".into());
    }
    None
}

/// A prefix as `netip.ParsePrefix` reads it: address, bits, whether it is IPv4.
fn prefix(s: &str) -> Option<(std::net::IpAddr, u32)> {
    let (ip, bits) = s.split_once('/')?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    let bits: u32 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

fn masked(ip: std::net::IpAddr, bits: u32) -> bool {
    match ip {
        std::net::IpAddr::V4(a) => {
            let v = u32::from(a);
            bits == 32 || v & (u32::MAX >> bits) == 0
        }
        std::net::IpAddr::V6(a) => {
            let v = u128::from(a);
            bits == 128 || v & (u128::MAX >> bits) == 0
        }
    }
}

/// `KubeNetworkConfigV1Alpha1.Validate` (types/k8s/network.go @ v1.14.1).
fn network(doc: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let mask = |k: &str, max: i64| {
        let v = get(doc, k).and_then(Value::as_i64).unwrap_or(0);
        (v, v == 0 || (1..=max).contains(&v))
    };
    let (m4, ok4) = mask("nodeCIDRMaskSizeIPv4", 32);
    let (m6, ok6) = mask("nodeCIDRMaskSizeIPv6", 128);
    if !ok4 {
        errs.push("nodeCIDRMaskSizeIPv4 must be between 1 and 32".into());
    }
    if !ok6 {
        errs.push("nodeCIDRMaskSizeIPv6 must be between 1 and 128".into());
    }
    let per_node = |v6: bool| -> (u32, bool) {
        if v6 {
            (if m6 == 0 { 64 } else { m6 as u32 }, ok6)
        } else {
            (if m4 == 0 { 24 } else { m4 as u32 }, ok4)
        }
    };
    let pod_size = |s: &str, ip: std::net::IpAddr, bits: u32| -> Option<String> {
        let (node, valid) = per_node(ip.is_ipv6());
        if !valid {
            return None;
        }
        if bits > node {
            return Some(format!(
                "invalid subnet: {s} is smaller than the per-node pod CIDR mask size /{node}"
            ));
        }
        if node - bits > 16 {
            return Some(format!(
                "invalid subnet: {s} is too large for the per-node pod CIDR mask size /{node}, the difference must be at most 16 bits"
            ));
        }
        None
    };
    let service_size = |s: &str, ip: std::net::IpAddr, bits: u32| -> Option<String> {
        let len = if ip.is_ipv4() { 32 } else { 128 };
        (len - bits > 20).then(|| {
            format!(
                "invalid subnet: {s} is too large, it must be at least /{} (at most 20 host identifier bits)",
                len - 20
            )
        })
    };
    let pods = list(Some(doc), "podSubnets");
    let services = list(Some(doc), "serviceSubnets");
    if let Some(e) = subnets(pods, &pod_size) {
        errs.push(format!("pod subnets: {e}"));
    }
    if let Some(e) = subnets(services, &service_size) {
        errs.push(format!("service subnets: {e}"));
    }
    if pods.len() != services.len() {
        errs.push("the number of pod subnets must match the number of service subnets".into());
    }
    errs
}

/// `validateSubnets` / `validateSubnet` (types/k8s/network.go).
fn subnets(
    items: &[Value],
    size: &dyn Fn(&str, std::net::IpAddr, u32) -> Option<String>,
) -> Option<String> {
    if items.is_empty() {
        return Some("at least one subnet must be specified".into());
    }
    if items.len() > 2 {
        return Some("at most two subnets can be specified for dual-stack clusters".into());
    }
    let (mut v4, mut v6) = (0, 0);
    for item in items {
        let s = item.as_str().unwrap_or("");
        let Some((ip, bits)) = prefix(s) else {
            return Some(format!("invalid subnet: {s}"));
        };
        if !masked(ip, bits) {
            return Some(format!("invalid subnet: {s} is not a valid CIDR"));
        }
        let len = if ip.is_ipv4() { 32 } else { 128 };
        if len - bits < 4 {
            return Some(format!(
                "invalid subnet: /{bits} is too small, it must be larger than /{}",
                bits as i64 - 4
            ));
        }
        if let Some(e) = size(s, ip, bits) {
            return Some(e);
        }
        if ip.is_ipv4() {
            v4 += 1;
        } else {
            v6 += 1;
        }
    }
    if v4 > 1 || v6 > 1 {
        return Some(
            "at most one IPv4 and one IPv6 subnet can be specified for dual-stack clusters".into(),
        );
    }
    None
}
