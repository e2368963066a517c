//! `talosctl gen config`: rendering controlplane/worker configs for a version contract
//! (config.md §3), in the comment-free form.

use crate::contract::Contract;
use crate::document::MachineConfig;
use crate::error::{Error, ErrorKind, Result};
use base64::Engine as _;
use ferro_talos_secrets::Bundle;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Kubernetes version `talosctl gen config` of the newest 1.13 release (v1.13.9) uses by default
/// (`pkg/machinery/constants/constants.go` DefaultKubernetesVersion at tag v1.13.9).
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.36.3";
/// Kubernetes version `talosctl gen config` of the newest 1.14 release readable here (v1.14.1)
/// uses by default (`pkg/machinery/constants/constants.go` DefaultKubernetesVersion at tag
/// v1.14.1; v1.14.0-rc.1 had `1.37.0-rc.0`). Used for contract 1.14.
pub const DEFAULT_KUBERNETES_VERSION_1_14: &str = "1.37.0";
/// talosctl writes its own build tag as the installer's: v1.13.9 writes `installer:v1.13.9`.
pub const DEFAULT_INSTALL_IMAGE: &str = "ghcr.io/siderolabs/installer:v1.13.9";
/// talosctl v1.14.1's `--install-image` default: the Image Factory's vanilla installer with its own
/// tag (`cmd/talosctl/cmd/mgmt/gen/config.go` init, `pkg/images/images.go` @ v1.14.1). 1.14 is no
/// longer published at `ghcr.io/siderolabs/installer`.
pub const DEFAULT_INSTALL_IMAGE_1_14: &str = "factory.talos.dev/metal-installer/\
    376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1";

/// The installer a given Talos release writes into its configs: its own tag, from the
/// contract's repository (`crate::image::GHCR_INSTALLER_REPOSITORY` up to 1.13, the Image
/// Factory's vanilla installer from 1.14). `talos_version` `v1.13.9` therefore means
/// `installer:v1.13.9`, so a generated config never points a node at an older release than the
/// one asked for.
pub fn installer_for_release(contract: Contract, release: &str) -> String {
    let tag = format!("v{}", release.trim().trim_start_matches('v'));
    if contract.greater_than(1, 13) {
        format!("{}:{tag}", crate::image::FACTORY_INSTALLER_REPOSITORY)
    } else {
        format!("{}:{tag}", crate::image::GHCR_INSTALLER_REPOSITORY)
    }
}
pub const DEFAULT_INSTALL_DISK: &str = "/dev/sda";
pub const DEFAULT_DNS_DOMAIN: &str = "cluster.local";
pub const DEFAULT_POD_SUBNET: &str = "10.244.0.0/16";
pub const DEFAULT_SERVICE_SUBNET: &str = "10.96.0.0/12";
const KUBEPRISM_PORT: u16 = 7445;
const DISCOVERY_ENDPOINT: &str = "https://discovery.talos.dev/";
const EXCLUDE_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineType {
    ControlPlane,
    Worker,
}

impl MachineType {
    pub fn as_str(self) -> &'static str {
        match self {
            MachineType::ControlPlane => "controlplane",
            MachineType::Worker => "worker",
        }
    }
}

/// A CNI choice: `flannel` (the default when none is given), `custom` with manifest URLs, or
/// `none`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cni {
    pub name: String,
    pub urls: Vec<String>,
}

/// Inputs of `talosctl gen config` (config.md §3.1).
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub contract: Contract,
    pub machine_type: MachineType,
    pub cluster_name: String,
    /// `https://` URL of the Kubernetes API endpoint.
    pub endpoint: String,
    /// A leading `v` is ignored.
    pub kubernetes_version: String,
    pub install_disk: Option<String>,
    pub install_image: Option<String>,
    /// Goes into both `machine.certSANs` and the API server SANs.
    pub additional_sans: Vec<String>,
    pub dns_domain: String,
    pub pod_subnets: Vec<String>,
    pub service_subnets: Vec<String>,
    pub allow_scheduling_on_control_planes: bool,
    pub local_api_server_port: Option<u16>,
    pub install_extra_kernel_args: Vec<String>,
    pub sysctls: BTreeMap<String, String>,
    pub cni: Option<Cni>,
    /// `(registry host, mirror URL)` pairs, in flag order.
    pub registry_mirrors: Vec<(String, String)>,
    pub kubespan: bool,
}

impl GenerateOptions {
    /// talosctl's CLI defaults for the contract: install disk `/dev/sda`, the release installer
    /// image, `cluster.local`, IPv4 subnets and the default Kubernetes version.
    pub fn new(
        contract: Contract,
        machine_type: MachineType,
        cluster_name: impl Into<String>,
        endpoint: impl Into<String>,
    ) -> GenerateOptions {
        let is_1_14 = contract.greater_than(1, 13);
        GenerateOptions {
            contract,
            machine_type,
            cluster_name: cluster_name.into(),
            endpoint: endpoint.into(),
            kubernetes_version: if is_1_14 {
                DEFAULT_KUBERNETES_VERSION_1_14
            } else {
                DEFAULT_KUBERNETES_VERSION
            }
            .into(),
            install_disk: Some(DEFAULT_INSTALL_DISK.into()),
            install_image: Some(
                if is_1_14 {
                    DEFAULT_INSTALL_IMAGE_1_14
                } else {
                    DEFAULT_INSTALL_IMAGE
                }
                .into(),
            ),
            additional_sans: Vec::new(),
            dns_domain: DEFAULT_DNS_DOMAIN.into(),
            pod_subnets: vec![DEFAULT_POD_SUBNET.into()],
            service_subnets: vec![DEFAULT_SERVICE_SUBNET.into()],
            allow_scheduling_on_control_planes: false,
            local_api_server_port: None,
            install_extra_kernel_args: Vec::new(),
            sysctls: BTreeMap::new(),
            cni: None,
            registry_mirrors: Vec::new(),
            kubespan: false,
        }
    }
}

/// A cluster endpoint as a user may write it, made into the URL Talos wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointUrl {
    /// `https://host:port` (IPv6 hosts in brackets).
    pub url: String,
    /// A URL that names no port, so clients use https's 443 (a bare address gets 6443 instead).
    pub implicit_443: bool,
}

/// The Kubernetes API server's port, which a bare address gets.
pub const KUBERNETES_API_PORT: u16 = 6443;

/// Reads a cluster endpoint in any form users write: a URL (`https://10.0.0.10:6443`), an address
/// or name with a port (`10.0.0.10:6443`, `[fd00::10]:6443`), or without one (`10.0.0.10`,
/// `fd00::10`, `[fd00::10]`, `k8s.example.com`), which gets port 6443. Only https URLs are
/// accepted; the result passes [`validate_endpoint`].
pub fn endpoint_url(input: &str) -> Result<EndpointUrl> {
    let trimmed = input.trim();
    if trimmed.contains("://") {
        let url = validate_endpoint(trimmed)?;
        let authority = url["https://".len()..]
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let implicit_443 = split_host_port(host_port).is_ok_and(|(_, port)| port.is_none());
        return Ok(EndpointUrl { url, implicit_443 });
    }
    if trimmed.is_empty() {
        return Err(bad_endpoint(
            "invalid cluster endpoint: it is empty; write an address such as 10.0.0.10 or a URL such as https://10.0.0.10:6443".into(),
        ));
    }
    if trimmed.contains(['/', '?', '#', '@']) {
        return Err(bad_endpoint(format!(
            "invalid cluster endpoint {input:?}: write an address (10.0.0.10, 10.0.0.10:6443) or a URL (https://10.0.0.10:6443)"
        )));
    }
    // Two or more colons without brackets: a bare IPv6 address (its last group is never a port).
    let authority = if !trimmed.starts_with('[') && trimmed.matches(':').count() > 1 {
        format!("[{trimmed}]:{KUBERNETES_API_PORT}")
    } else {
        match split_host_port(trimmed) {
            Ok((_, Some(_))) => trimmed.to_string(),
            Ok((host, None)) if trimmed.starts_with('[') => {
                format!("[{host}]:{KUBERNETES_API_PORT}")
            }
            Ok((host, None)) => format!("{host}:{KUBERNETES_API_PORT}"),
            Err(why) => {
                return Err(bad_endpoint(format!(
                    "invalid cluster endpoint {input:?}: {why}"
                )));
            }
        }
    };
    let url = validate_endpoint(&format!("https://{authority}"))?;
    Ok(EndpointUrl {
        url,
        implicit_443: false,
    })
}

/// Checks a cluster endpoint the way `talosctl gen config` does and returns it re-serialised.
/// The scheme must be `https`; the error then suggests a corrected URL.
pub fn validate_endpoint(endpoint: &str) -> Result<String> {
    let trimmed = endpoint.trim();
    let (scheme, rest) = match trimmed.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, trimmed),
    };
    if !scheme.is_some_and(|s| s.eq_ignore_ascii_case("https")) {
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let fixed = if split_host_port(authority).is_ok_and(|(_, port)| port.is_some()) {
            format!("https://{authority}{tail}")
        } else {
            format!("https://{authority}:6443{tail}")
        };
        return Err(bad_endpoint(match scheme {
            Some(s) => format!(
                "invalid cluster endpoint {endpoint:?}: the scheme must be https, not {s:?}; \
                 try {fixed:?}"
            ),
            None => format!(
                "invalid cluster endpoint {endpoint:?}: it must be a URL starting with https://; \
                 try {fixed:?}"
            ),
        }));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = split_host_port(host_port)
        .map_err(|why| bad_endpoint(format!("invalid cluster endpoint {endpoint:?}: {why}")))?;
    if host.is_empty() {
        return Err(bad_endpoint(format!(
            "invalid cluster endpoint {endpoint:?}: the host name is empty"
        )));
    }
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !ok {
            return Err(bad_endpoint(format!(
                "invalid cluster endpoint {endpoint:?}: port {port:?} must be a number from 1 to 65535"
            )));
        }
    }
    Ok(format!("https://{authority}{tail}"))
}

fn bad_endpoint(message: String) -> Error {
    Error::new(ErrorKind::InvalidEndpoint, message)
}

/// Splits `host[:port]` or `[v6][:port]`. A bare IPv6 address is refused.
fn split_host_port(hp: &str) -> std::result::Result<(&str, Option<&str>), String> {
    if let Some(rest) = hp.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err("unterminated '[' in IPv6 address".into());
        };
        return match after {
            "" => Ok((host, None)),
            p => match p.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!("unexpected {p:?} after the IPv6 address")),
            },
        };
    }
    if hp.matches(':').count() > 1 {
        return Err(format!(
            "IPv6 address {hp:?} must be enclosed in brackets, e.g. \"[{hp}]\""
        ));
    }
    Ok(match hp.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (hp, None),
    })
}

fn endpoint_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let hp = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    split_host_port(hp)
        .map(|(h, _)| h.to_string())
        .unwrap_or_default()
}

fn check_kubernetes_version(v: &str) -> Result<String> {
    let v = v.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad_option(format!(
            "invalid Kubernetes version {v:?}: expected MAJOR.MINOR.PATCH, e.g. \"1.36.2\""
        )));
    }
    Ok(v.to_string())
}

/// Decodes a bundle field (base64 of PEM) to the PEM text. Never echoes the value.
fn pem_text(field: &str, b64: &str) -> Result<String> {
    let bad_bundle = |why: &str| {
        Error::new(
            ErrorKind::InvalidBundle,
            format!("secrets bundle field {field} {why}"),
        )
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| bad_bundle("is not valid base64"))?;
    String::from_utf8(bytes).map_err(|_| bad_bundle("does not hold PEM text"))
}

fn bad_option(message: String) -> Error {
    Error::new(ErrorKind::InvalidOptions, message)
}

impl MachineConfig {
    /// Renders the config `talosctl gen config` writes for one machine type (comment-free form).
    pub fn generate(bundle: &Bundle, opts: &GenerateOptions) -> Result<MachineConfig> {
        if !Contract::SUPPORTED.contains(&opts.contract) {
            // Re-use the parser's wording.
            Contract::parse(&opts.contract.to_string())?;
        }
        if opts.cluster_name.trim().is_empty() {
            return Err(bad_option("cluster name must not be empty".into()));
        }
        let endpoint = validate_endpoint(&opts.endpoint)?;
        let k8s = check_kubernetes_version(&opts.kubernetes_version)?;
        for (host, url) in &opts.registry_mirrors {
            if host.is_empty() || url.is_empty() {
                return Err(bad_option(format!(
                    "invalid registry mirror {host:?}={url:?}: expected <registry host>=<mirror URL>"
                )));
            }
        }
        if let Some(cni) = &opts.cni
            && !matches!(cni.name.as_str(), "flannel" | "custom" | "none")
        {
            return Err(bad_option(format!(
                "invalid CNI name {:?}: expected flannel, custom or none",
                cni.name
            )));
        }
        let r = Render {
            bundle,
            opts,
            endpoint,
            k8s,
        };
        let docs = if opts.contract.greater_than(1, 13) {
            r.multi_doc()?
        } else {
            r.legacy()?
        };
        Ok(MachineConfig { docs })
    }
}

struct Render<'a> {
    bundle: &'a Bundle,
    opts: &'a GenerateOptions,
    endpoint: String,
    k8s: String,
}

fn doc(kind: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!("v1alpha1"));
    m.insert("kind".into(), json!(kind));
    m
}

fn with(mut m: Map<String, Value>, fields: Value) -> Value {
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    Value::Object(m)
}

impl Render<'_> {
    fn cp(&self) -> bool {
        self.opts.machine_type == MachineType::ControlPlane
    }

    fn c(&self) -> Contract {
        self.opts.contract
    }

    fn image(&self, repo: &str) -> Value {
        json!(format!("{repo}:v{}", self.k8s))
    }

    fn key_or_empty(&self, key: &str) -> Value {
        json!(if self.cp() { key } else { "" })
    }

    fn pod_security(&self) -> Value {
        json!({
            "apiVersion": "pod-security.admission.config.k8s.io/v1alpha1",
            "kind": "PodSecurityConfiguration",
            "defaults": {
                "enforce": "baseline", "enforce-version": "latest",
                "audit": "restricted", "audit-version": "latest",
                "warn": "restricted", "warn-version": "latest",
            },
            "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system"]},
        })
    }

    fn audit_policy(&self) -> Value {
        json!({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]})
    }

    fn cni_name(&self) -> &str {
        self.opts
            .cni
            .as_ref()
            .map_or("flannel", |c| c.name.as_str())
    }

    /// Registry mirror documents, sorted by host (config.md §3.5), mirrors grouped per host.
    fn registry_docs(&self) -> Vec<Value> {
        self.mirrors_by_host()
            .into_iter()
            .map(|(host, urls)| {
                let endpoints: Vec<Value> = urls.iter().map(|u| json!({"url": u})).collect();
                with(
                    doc("RegistryMirrorConfig"),
                    json!({"name": host, "endpoints": endpoints}),
                )
            })
            .collect()
    }

    fn mirrors_by_host(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut m: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (host, url) in &self.opts.registry_mirrors {
            m.entry(host.as_str()).or_default().push(url.as_str());
        }
        m
    }

    /// Contracts up to 1.13: the full v1alpha1 document plus a few small documents.
    fn legacy(&self) -> Result<Vec<Value>> {
        let (b, o, c) = (self.bundle, self.opts, self.c());
        let multi_doc = c.greater_than(1, 11);

        let mut machine = Map::new();
        machine.insert("type".into(), json!(o.machine_type.as_str()));
        machine.insert("token".into(), json!(b.trustd_info.token));
        machine.insert(
            "ca".into(),
            json!({"crt": b.certs.os.crt, "key": self.key_or_empty(&b.certs.os.key)}),
        );
        machine.insert("certSANs".into(), json!(o.additional_sans));
        machine.insert(
            "kubelet".into(),
            json!({
                "image": self.image("ghcr.io/siderolabs/kubelet"),
                "defaultRuntimeSeccompProfileEnabled": true,
                "disableManifestsDirectory": true,
            }),
        );
        if !c.greater_than(1, 12) {
            let mut network = Map::new();
            if o.kubespan {
                network.insert("kubespan".into(), json!({"enabled": true}));
            }
            machine.insert("network".into(), Value::Object(network));
        }
        let mut install = Map::new();
        if let Some(disk) = &o.install_disk {
            install.insert("disk".into(), json!(disk));
        }
        if !o.install_extra_kernel_args.is_empty() {
            install.insert("extraKernelArgs".into(), json!(o.install_extra_kernel_args));
        }
        if let Some(image) = &o.install_image {
            install.insert("image".into(), json!(image));
        }
        install.insert("wipe".into(), json!(false));
        if c.greater_than(1, 11) {
            install.insert("grubUseUKICmdline".into(), json!(true));
        }
        machine.insert("install".into(), Value::Object(install));
        if !o.sysctls.is_empty() {
            machine.insert("sysctls".into(), json!(o.sysctls));
        }
        if !multi_doc && !o.registry_mirrors.is_empty() {
            let mirrors: Map<String, Value> = self
                .mirrors_by_host()
                .into_iter()
                .map(|(h, urls)| (h.to_string(), json!({"endpoints": urls})))
                .collect();
            machine.insert("registries".into(), json!({"mirrors": mirrors}));
        }
        let mut features = Map::new();
        if !multi_doc {
            features.insert("rbac".into(), json!(true));
            features.insert("stableHostname".into(), json!(true));
            features.insert("apidCheckExtKeyUsage".into(), json!(true));
        }
        features.insert("diskQuotaSupport".into(), json!(true));
        features.insert(
            "kubePrism".into(),
            json!({"enabled": true, "port": KUBEPRISM_PORT}),
        );
        features.insert(
            "hostDNS".into(),
            json!({"enabled": true, "forwardKubeDNSToHost": true}),
        );
        machine.insert("features".into(), Value::Object(features));
        if self.cp() {
            machine.insert("nodeLabels".into(), json!({EXCLUDE_LB_LABEL: ""}));
        }

        let mut cluster = Map::new();
        cluster.insert("id".into(), json!(b.cluster.id));
        cluster.insert("secret".into(), json!(b.cluster.secret));
        let mut control_plane = Map::new();
        control_plane.insert("endpoint".into(), json!(self.endpoint));
        if let Some(port) = o.local_api_server_port.filter(|_| self.cp()) {
            control_plane.insert("localAPIServerPort".into(), json!(port));
        }
        cluster.insert("controlPlane".into(), Value::Object(control_plane));
        cluster.insert("clusterName".into(), json!(o.cluster_name));
        let mut network = Map::new();
        if let Some(cni) = &o.cni {
            let mut m = Map::new();
            m.insert("name".into(), json!(cni.name));
            if !cni.urls.is_empty() {
                m.insert("urls".into(), json!(cni.urls));
            }
            network.insert("cni".into(), Value::Object(m));
        }
        network.insert("dnsDomain".into(), json!(o.dns_domain));
        network.insert("podSubnets".into(), json!(o.pod_subnets));
        network.insert("serviceSubnets".into(), json!(o.service_subnets));
        cluster.insert("network".into(), Value::Object(network));
        cluster.insert("token".into(), json!(b.secrets.bootstrap_token));
        if self.cp() {
            if let Some(s) = &b.secrets.aescbc_encryption_secret {
                cluster.insert("aescbcEncryptionSecret".into(), json!(s));
            }
            if let Some(s) = &b.secrets.secretbox_encryption_secret {
                cluster.insert("secretboxEncryptionSecret".into(), json!(s));
            }
        }
        cluster.insert(
            "ca".into(),
            json!({"crt": b.certs.k8s.crt, "key": self.key_or_empty(&b.certs.k8s.key)}),
        );
        if self.cp() {
            cluster.insert(
                "aggregatorCA".into(),
                json!({"crt": b.certs.k8s_aggregator.crt, "key": b.certs.k8s_aggregator.key}),
            );
            cluster.insert(
                "serviceAccount".into(),
                json!({"key": b.certs.k8s_service_account.key}),
            );
            let mut api = Map::new();
            api.insert("image".into(), self.image("registry.k8s.io/kube-apiserver"));
            let mut sans: Vec<String> = Vec::new();
            if !multi_doc {
                // Since 1.12 Talos adds the endpoint host at runtime instead.
                sans.push(endpoint_host(&self.endpoint));
            }
            sans.extend(o.additional_sans.iter().cloned());
            if !sans.is_empty() {
                api.insert("certSANs".into(), json!(sans));
            }
            if !multi_doc {
                api.insert("disablePodSecurityPolicy".into(), json!(true));
            }
            api.insert(
                "admissionControl".into(),
                json!([{"name": "PodSecurity", "configuration": self.pod_security()}]),
            );
            api.insert("auditPolicy".into(), self.audit_policy());
            cluster.insert("apiServer".into(), Value::Object(api));
            cluster.insert(
                "controllerManager".into(),
                json!({"image": self.image("registry.k8s.io/kube-controller-manager")}),
            );
            cluster.insert(
                "proxy".into(),
                json!({"image": self.image("registry.k8s.io/kube-proxy")}),
            );
            cluster.insert(
                "scheduler".into(),
                json!({"image": self.image("registry.k8s.io/kube-scheduler")}),
            );
        }
        cluster.insert(
            "discovery".into(),
            json!({"enabled": true, "registries": {"kubernetes": {"disabled": true}, "service": {}}}),
        );
        if self.cp() {
            cluster.insert(
                "etcd".into(),
                json!({"ca": {"crt": b.certs.etcd.crt, "key": b.certs.etcd.key}}),
            );
            if o.allow_scheduling_on_control_planes {
                cluster.insert("allowSchedulingOnControlPlanes".into(), json!(true));
            }
        }

        let mut docs = vec![json!({
            "version": "v1alpha1",
            "debug": false,
            "persist": true,
            "machine": machine,
            "cluster": cluster,
        })];
        if multi_doc {
            docs.extend(self.registry_docs());
            docs.push(with(doc("HostnameConfig"), json!({"auto": "stable"})));
        }
        if o.kubespan && c.greater_than(1, 12) {
            docs.push(with(doc("KubeSpanConfig"), json!({"enabled": true})));
        }
        Ok(docs)
    }

    /// Contract 1.14: a small v1alpha1 document and one document per concern (config.md §3.10).
    fn multi_doc(&self) -> Result<Vec<Value>> {
        let (b, o) = (self.bundle, self.opts);
        let cp = self.cp();

        let mut cluster = Map::new();
        cluster.insert("token".into(), json!(b.secrets.bootstrap_token));
        if cp {
            cluster.insert(
                "etcd".into(),
                json!({"ca": {"crt": b.certs.etcd.crt, "key": b.certs.etcd.key}}),
            );
        }
        let mut docs = vec![json!({
            "version": "v1alpha1",
            "debug": false,
            "persist": true,
            "machine": {
                "type": o.machine_type.as_str(),
                "token": b.trustd_info.token,
                "ca": {"crt": b.certs.os.crt, "key": self.key_or_empty(&b.certs.os.key)},
                "certSANs": o.additional_sans,
                "features": {"diskQuotaSupport": true},
            },
            "cluster": cluster,
        })];

        docs.push(with(
            doc("DiscoveryServiceConfig"),
            json!({"name": "default", "endpoint": DISCOVERY_ENDPOINT}),
        ));
        docs.push(with(
            doc("DiscoveryIdentityConfig"),
            json!({"clusterID": b.cluster.id, "clusterSecret": b.cluster.secret}),
        ));
        if let Some(disk) = &o.install_disk {
            // Extra kernel args have no place in this document; talosctl 1.14 drops them.
            let mut installer = Map::new();
            if let Some(image) = &o.install_image {
                installer.insert("image".into(), json!(image));
            }
            let selector = format!("disk.dev_path == {}", go_quote(disk));
            docs.push(with(
                doc("UnattendedInstallConfig"),
                json!({
                    "installer": installer,
                    "provisioning": {"diskSelector": {"match": selector}, "wipe": false},
                }),
            ));
        }
        docs.push(with(
            doc("ResolverConfig"),
            json!({"hostDNS": {"enabled": true, "forwardKubeDNSToHost": true}}),
        ));
        if !o.sysctls.is_empty() {
            docs.push(with(doc("SysctlConfig"), json!({"params": o.sysctls})));
        }
        docs.push(with(
            doc("VolumeConfig"),
            json!({"name": "EPHEMERAL", "mount": {"secure": true}}),
        ));
        docs.push(with(
            doc("FilesystemTrimConfig"),
            json!({"interval": "168h0m0s"}),
        ));
        docs.push(with(
            doc("SecurityProfileConfig"),
            json!({"workloadIsolation": true}),
        ));
        docs.extend(self.registry_docs());
        docs.push(with(doc("HostnameConfig"), json!({"auto": "stable"})));
        if o.kubespan {
            docs.push(with(doc("KubeSpanConfig"), json!({"enabled": true})));
        }
        docs.push(with(
            doc("KubeClusterConfig"),
            json!({"clusterName": o.cluster_name, "endpoint": self.endpoint}),
        ));
        let mut node = Map::new();
        node.insert("nodeIP".into(), json!({}));
        if cp {
            node.insert(
                "labels".into(),
                json!({CONTROL_PLANE_ROLE: "", EXCLUDE_LB_LABEL: ""}),
            );
            if !o.allow_scheduling_on_control_planes {
                node.insert("taints".into(), json!({CONTROL_PLANE_ROLE: "NoSchedule"}));
            }
        }
        docs.push(with(doc("KubeNodeConfig"), Value::Object(node)));
        docs.push(with(
            doc("KubeletConfig"),
            json!({
                "image": self.image("ghcr.io/siderolabs/kubelet"),
                "config": {},
                "defaultRuntimeSeccompProfileEnabled": true,
            }),
        ));
        docs.push(with(
            doc("KubeNetworkConfig"),
            json!({
                "dnsDomain": o.dns_domain,
                "podSubnets": o.pod_subnets,
                "serviceSubnets": o.service_subnets,
            }),
        ));
        let k8s_crt = pem_text("certs.k8s.crt", &b.certs.k8s.crt)?;
        if cp {
            let k8s_key = pem_text("certs.k8s.key", &b.certs.k8s.key)?;
            docs.push(with(
                doc("KubeAPIServerCAConfig"),
                json!({"issuingCA": {"cert": k8s_crt, "key": k8s_key}}),
            ));
        } else {
            docs.push(with(
                doc("KubeAPIServerCAConfig"),
                json!({"acceptedCAs": [k8s_crt]}),
            ));
        }
        docs.push(with(
            doc("KubePrismConfig"),
            json!({"port": KUBEPRISM_PORT}),
        ));
        if !cp {
            return Ok(docs);
        }

        let agg_crt = pem_text("certs.k8saggregator.crt", &b.certs.k8s_aggregator.crt)?;
        let agg_key = pem_text("certs.k8saggregator.key", &b.certs.k8s_aggregator.key)?;
        docs.push(with(
            doc("KubeAggregatorCAConfig"),
            json!({"issuingCA": {"cert": agg_crt, "key": agg_key}}),
        ));
        docs.push(with(
            doc("KubeAdmissionControlConfig"),
            json!({"name": "PodSecurity", "configuration": self.pod_security()}),
        ));
        docs.push(with(
            doc("KubeAuditPolicyConfig"),
            json!({"configuration": self.audit_policy()}),
        ));
        docs.push(with(
            doc("KubeAuthenticationConfig"),
            json!({"configuration": {
                "anonymous": {
                    "enabled": true,
                    "conditions": [{"path": "/livez"}, {"path": "/readyz"}, {"path": "/healthz"}],
                },
                "jwt": [],
            }}),
        ));
        docs.push(with(
            doc("KubeAuthorizerConfig"),
            json!({"name": "node", "type": "Node"}),
        ));
        docs.push(with(
            doc("KubeAuthorizerConfig"),
            json!({"name": "rbac", "type": "RBAC"}),
        ));
        let mut providers = Vec::new();
        if let Some(s) = &b.secrets.secretbox_encryption_secret {
            providers.push(json!({"secretbox": {"keys": [{"name": "key2", "secret": s}]}}));
        }
        if let Some(s) = &b.secrets.aescbc_encryption_secret {
            providers.push(json!({"secretbox": {"keys": [{"name": "key1", "secret": s}]}}));
        }
        if !providers.is_empty() {
            docs.push(with(
                doc("KubeEtcdEncryptionConfig"),
                json!({"config": {"resources": [{"resources": ["secrets"], "providers": providers}]}}),
            ));
        }
        let sa_key = pem_text(
            "certs.k8sserviceaccount.key",
            &b.certs.k8s_service_account.key,
        )
        .map_err(|e| e.context("service account key"))?;
        docs.push(with(
            doc("KubeServiceAccountConfig"),
            json!({"issuer": {"privateKey": sa_key, "issuerURL": self.endpoint}}),
        ));
        let mut api = Map::new();
        api.insert("image".into(), self.image("registry.k8s.io/kube-apiserver"));
        if let Some(port) = o.local_api_server_port {
            api.insert("apiPort".into(), json!(port));
        }
        if !o.additional_sans.is_empty() {
            api.insert("certExtraSANs".into(), json!(o.additional_sans));
        }
        docs.push(with(doc("KubeAPIServerConfig"), Value::Object(api)));
        docs.push(with(
            doc("KubeControllerManagerConfig"),
            json!({"image": self.image("registry.k8s.io/kube-controller-manager")}),
        ));
        docs.push(with(
            doc("KubeSchedulerConfig"),
            json!({"image": self.image("registry.k8s.io/kube-scheduler"), "config": {}}),
        ));
        docs.push(with(
            doc("KubeProxyConfig"),
            json!({"image": self.image("registry.k8s.io/kube-proxy"), "config": {}}),
        ));
        if self.cni_name() == "flannel" {
            docs.push(with(
                doc("KubeFlannelCNIConfig"),
                json!({"backendType": "vxlan", "backendPort": 4789}),
            ));
        }
        docs.push(with(doc("KubeCoreDNSConfig"), json!({"enabled": true})));
        if self.cni_name() == "custom"
            && let Some(cni) = &o.cni
        {
            for (i, url) in cni.urls.iter().enumerate() {
                // Only the single-URL name is confirmed by the fixtures; further URLs get a
                // numeric suffix so names stay unique.
                let name = if i == 0 {
                    "custom-cni".to_string()
                } else {
                    format!("custom-cni-{i}")
                };
                docs.push(with(
                    doc("KubeExternalManifestConfig"),
                    json!({"name": name, "url": url}),
                ));
            }
        }
        Ok(docs)
    }
}

/// Go's `%q` for the plain strings used in disk selectors (also cel-go's string literals).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_needs_https_and_suggests_a_fix() {
        let e = validate_endpoint("base:6443").unwrap_err().to_string();
        assert!(
            e.contains("https://") && e.contains("\"https://base:6443\""),
            "{e}"
        );
        let e = validate_endpoint("10.0.0.1").unwrap_err().to_string();
        assert!(e.contains("\"https://10.0.0.1:6443\""), "{e}");
        let e = validate_endpoint("http://base:6443")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not \"http\"") && e.contains("\"https://base:6443\""),
            "{e}"
        );
        let e = validate_endpoint("http://base").unwrap_err().to_string();
        assert!(e.contains("\"https://base:6443\""), "{e}");
    }

    #[test]
    fn endpoint_host_and_port_checks() {
        assert_eq!(
            validate_endpoint("https://base:6443").unwrap(),
            "https://base:6443"
        );
        assert_eq!(validate_endpoint("https://base").unwrap(), "https://base");
        assert_eq!(
            validate_endpoint("HTTPS://[fd00::1]:6443").unwrap(),
            "https://[fd00::1]:6443"
        );
        let e = validate_endpoint("https://fd00::1:6443")
            .unwrap_err()
            .to_string();
        assert!(e.contains("brackets"), "{e}");
        let e = validate_endpoint("https://:6443").unwrap_err().to_string();
        assert!(e.contains("host name is empty"), "{e}");
        for bad in ["https://base:0", "https://base:65536", "https://base:http"] {
            let e = validate_endpoint(bad).unwrap_err().to_string();
            assert!(e.contains("1 to 65535"), "{bad}: {e}");
        }
    }

    #[test]
    fn kubernetes_version_strips_v_and_validates() {
        assert_eq!(check_kubernetes_version("v1.28.0").unwrap(), "1.28.0");
        assert_eq!(
            check_kubernetes_version("1.37.0-rc.0").unwrap(),
            "1.37.0-rc.0"
        );
        assert!(
            check_kubernetes_version("1.28")
                .unwrap_err()
                .to_string()
                .contains("MAJOR.MINOR.PATCH")
        );
    }

    #[test]
    fn defaults_follow_the_contract() {
        let o = GenerateOptions::new(Contract::V1_13, MachineType::Worker, "c", "https://c:6443");
        assert_eq!(o.kubernetes_version, "1.36.3");
        assert_eq!(o.install_image.as_deref(), Some(DEFAULT_INSTALL_IMAGE));
        assert_eq!(o.install_disk.as_deref(), Some("/dev/sda"));
        // talosctl v1.14.1's defaults (constants.go DefaultKubernetesVersion, gen/config.go
        // --install-image @ v1.14.1), not rc.1's pre-releases.
        let o = GenerateOptions::new(Contract::V1_14, MachineType::Worker, "c", "https://c:6443");
        assert_eq!(
            o.install_image.as_deref(),
            Some(
                "factory.talos.dev/metal-installer/\
                 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1"
            )
        );
        assert_eq!(o.kubernetes_version, "1.37.0");
    }

    #[test]
    fn endpoints_in_every_form_users_write() {
        let url = |s: &str| endpoint_url(s).unwrap();
        for (input, want, implicit_443) in [
            ("10.0.0.10", "https://10.0.0.10:6443", false),
            ("10.0.0.10:6443", "https://10.0.0.10:6443", false),
            ("127.0.10.1:7445", "https://127.0.10.1:7445", false),
            ("fd00::10", "https://[fd00::10]:6443", false),
            ("[fd00::10]", "https://[fd00::10]:6443", false),
            ("[fd00::10]:6443", "https://[fd00::10]:6443", false),
            ("k8s.example.com", "https://k8s.example.com:6443", false),
            ("https://10.0.0.10:6443", "https://10.0.0.10:6443", false),
            ("https://[fd00::10]:6443", "https://[fd00::10]:6443", false),
            ("https://lb.example.com", "https://lb.example.com", true),
            (" 10.0.0.10 ", "https://10.0.0.10:6443", false),
        ] {
            assert_eq!(url(input).url, want, "{input}");
            assert_eq!(url(input).implicit_443, implicit_443, "{input}");
        }
        for bad in [
            "",
            "http://10.0.0.10:6443",
            "10.0.0.10:http",
            "[fd00::10",
            "10.0.0.10/api",
        ] {
            assert!(endpoint_url(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(
            endpoint_url("http://10.0.0.10:6443")
                .unwrap_err()
                .to_string()
                .contains("https")
        );
    }

    #[test]
    fn a_release_names_its_own_installer() {
        assert_eq!(
            installer_for_release(Contract::V1_13, "v1.13.9"),
            "ghcr.io/siderolabs/installer:v1.13.9"
        );
        assert_eq!(
            installer_for_release(Contract::V1_13, "1.13.4"),
            "ghcr.io/siderolabs/installer:v1.13.4"
        );
        assert_eq!(
            installer_for_release(Contract::V1_14, "v1.14.1"),
            DEFAULT_INSTALL_IMAGE_1_14
        );
        assert_eq!(
            installer_for_release(Contract::V1_14, "1.14.0"),
            format!(
                "factory.talos.dev/metal-installer/{}:v1.14.0",
                crate::image::VANILLA_SCHEMATIC
            )
        );
        assert_eq!(
            installer_for_release(Contract::V1_13, "v1.13.9"),
            DEFAULT_INSTALL_IMAGE
        );
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("/dev/sda"), "\"/dev/sda\"");
        assert_eq!(go_quote("a\"b"), "\"a\\\"b\"");
    }
}
