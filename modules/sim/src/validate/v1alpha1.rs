//! The v1alpha1 document's own checks: `(*Config).Validate` and the helpers it calls in
//! `pkg/machinery/config/types/v1alpha1/v1alpha1_validation.go`, read at v1.13.9 and v1.14.1
//! (where they differ the release decides). Each check keeps upstream's order and text, and
//! reads fields the way upstream's accessors do (`pointer.SafeDeref`: an absent flag is false;
//! an absent section is a nil pointer).
//!
//! Not simulated (a config the tests write does not reach them): bond option names and
//! wireguard peers (`checkBond`, `checkWireguard`), the logging destinations
//! (`LoggingConfig.Validate`), external cloud provider manifest URLs beyond their presence,
//! apiserver authorization/resources, `baseRuntimeSpecOverrides` as an OCI spec, and the
//! Kubernetes version compatibility of the images (1.13.9: `RuntimeValidate`, 1.14.1:
//! `ValidateKubernetesVersions`).

use serde_json::{Map, Value};

use super::goparse;
use super::multierror::{Errors, GoError};
use crate::decode::Release;

/// The runtime mode's facts for a metal node (`modeWrapper` in v1alpha1_server.go:
/// `RequiresInstall` is metal's, unless the node is already installed).
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub requires_install: bool,
}

pub(super) fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

pub(super) fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| get(v, k))
}

pub(super) fn string<'a>(v: Option<&'a Value>, key: &str) -> &'a str {
    v.and_then(|v| get(v, key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn flag(v: Option<&Value>, key: &str) -> bool {
    v.and_then(|v| get(v, key)).and_then(Value::as_bool) == Some(true)
}

pub(super) fn list<'a>(v: Option<&'a Value>, key: &str) -> &'a [Value] {
    v.and_then(|v| get(v, key))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

pub(super) fn map<'a>(v: Option<&'a Value>, key: &str) -> Option<&'a Map<String, Value>> {
    v.and_then(|v| get(v, key)).and_then(Value::as_object)
}

fn non_empty_bytes(v: Option<&Value>, key: &str) -> bool {
    !string(v, key).is_empty()
}

/// `machine.ParseType` (`pkg/machinery/config/machine/machine.go`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MachineType {
    Init,
    ControlPlane,
    Worker,
    Unknown,
}

impl MachineType {
    pub fn parse(s: &str) -> MachineType {
        match s {
            "init" => MachineType::Init,
            "controlplane" => MachineType::ControlPlane,
            "worker" | "join" | "" => MachineType::Worker,
            _ => MachineType::Unknown,
        }
    }

    pub fn is_control_plane(self) -> bool {
        matches!(self, MachineType::Init | MachineType::ControlPlane)
    }

    fn name(self) -> &'static str {
        match self {
            MachineType::Init => "init",
            MachineType::ControlPlane => "controlplane",
            MachineType::Worker => "worker",
            MachineType::Unknown => "unknown",
        }
    }
}

pub fn machine_type(doc: &Value) -> MachineType {
    MachineType::parse(string(get(doc, "machine"), "type"))
}

/// `(*Config).Validate`: warnings, and the `*multierror.Error` (or nil).
pub fn validate(doc: &Value, mode: Mode, release: Release) -> (Vec<String>, Option<GoError>) {
    let v14 = release == Release::V1_14;
    let mut warnings = Vec::new();
    let mut result = Errors::default();
    let Some(machine) = get(doc, "machine") else {
        result.push("machine instructions are required");
        return (warnings, result.or_nil());
    };
    let m = Some(machine);
    let cluster = get(doc, "cluster");
    let mtype = machine_type(doc);

    if v14 {
        if !list(m, "files").is_empty() {
            warnings.push(
                ".machine.files is deprecated; use dedicated configuration documents instead"
                    .into(),
            );
        }
        if map(m, "baseRuntimeSpecOverrides").is_some_and(|o| !o.is_empty()) {
            warnings.push(".machine.baseRuntimeSpecOverrides is deprecated; use a CRIBaseRuntimeSpecConfig document instead".into());
        }
    }

    result.append(validate_cluster(cluster, mtype.is_control_plane(), release));

    let install = get(machine, "install");
    if mode.requires_install {
        match install {
            // 1.14.1 no longer requires `.machine.install` (UnattendedInstallConfig replaces it).
            None if !v14 => {
                result.push("install instructions are required in \"metal\" mode");
            }
            None => {}
            Some(i) => {
                let selector = get(i, "diskSelector").is_some();
                if string(install, "disk").is_empty() && !selector {
                    result.push("either install disk or diskSelector should be defined");
                }
                if !list(Some(i), "extraKernelArgs").is_empty()
                    && flag(Some(i), "grubUseUKICmdline")
                {
                    result.push(
                        "install.extraKernelArgs and install.grubUseUKICmdline can't be used together",
                    );
                }
            }
        }
    }

    let host_dns = path(machine, &["features", "hostDNS"]);
    if flag(host_dns, "forwardKubeDNSToHost") && !flag(host_dns, "enabled") {
        result.push("feature hostDNS.forwardKubeDNSToHost requires hostDNS.enabled to be true (.machine.features.hostDNS)");
    }

    let written_type = string(m, "type");
    if mtype != MachineType::Unknown && mtype.name() != written_type {
        warnings.push(format!(
            "use {:?} instead of {:?} for machine type",
            mtype.name(),
            written_type
        ));
    }

    let ca = get(machine, "ca");
    let accepted = list(m, "acceptedCAs");
    if ca.is_none() && accepted.is_empty() {
        result.push(
            "issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)",
        );
    }

    match mtype {
        MachineType::Init | MachineType::ControlPlane => {
            // 1.13.9 validates the default CNI (flannel) when `.cluster.network` is absent;
            // 1.14.1 only a written `.cluster.network`.
            let network = cluster.and_then(|c| get(c, "network"));
            if !v14 || network.is_some() {
                let (w, e) = validate_cni(network.and_then(|n| get(n, "cni")));
                warnings.extend(w);
                result.append(e);
            }
            match ca {
                None => result.push("issuing CA is required (.machine.ca)"),
                Some(_) if !non_empty_bytes(ca, "key") => result
                    .push("issuing CA key is required for controlplane nodes (.machine.ca.key)"),
                Some(_) => {}
            }
        }
        MachineType::Worker => {
            for d in list(path(machine, &["network"]), "interfaces") {
                if get(d, "vip").is_some() {
                    result.push("virtual (shared) IP is not allowed on non-controlplane nodes");
                }
                for vlan in list(Some(d), "vlans") {
                    if get(vlan, "vip").is_some() {
                        result.push("virtual (shared) IP is not allowed on non-controlplane nodes");
                    }
                }
            }
            if ca.is_some() {
                if non_empty_bytes(ca, "key") {
                    result.push("issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)");
                }
                if !non_empty_bytes(ca, "crt") && accepted.is_empty() {
                    result.push("trusted CA certificates are required on non-controlplane nodes (.machine.ca.crt, .machine.acceptedCAs)");
                }
            }
            if non_empty_bytes(cluster.and_then(|c| get(c, "ca")), "key") {
                result.push("issuing Kubernetes API CA key is not allowed on non-controlplane nodes (.cluster.ca)");
            }
        }
        MachineType::Unknown => {
            result.push(format!("unknown machine type {written_type:?}"));
        }
    }

    if let Some(network) = get(machine, "network") {
        validate_network(network, &mut warnings, &mut result);
    }

    for (i, disk) in list(m, "disks").iter().enumerate() {
        if disk.is_null() {
            if !v14 {
                result.push(format!("machine.disks[{i}] is null"));
            }
            continue;
        }
        let parts = list(Some(disk), "partitions");
        for (j, p) in parts.iter().enumerate() {
            if partition_size_is_zero(p) && j + 1 != parts.len() {
                result.push(format!("partition for disk {:?} is set to occupy full disk, but it's not the last partition in the list", string(Some(disk), "device")));
            }
        }
    }

    if let Some(kubelet) = get(machine, "kubelet") {
        let mut e = Errors::default();
        for cidr in list(get(kubelet, "nodeIP"), "validSubnets") {
            let cidr = cidr.as_str().unwrap_or("");
            if !goparse::is_subnet_or_address(cidr.trim_start_matches('!')) {
                e.push(format!(
                    "kubelet nodeIP subnet is not valid: {:?}",
                    cidr.strip_prefix('!').unwrap_or(cidr)
                ));
            }
        }
        let extra = map(Some(kubelet), "extraConfig");
        for field in KUBELET_PROTECTED {
            if extra.is_some_and(|x| x.contains_key(*field)) {
                e.push(format!(
                    "kubelet configuration field {field:?} can't be overridden"
                ));
            }
        }
        result.append(e.or_nil());
    }

    for (label, key) in [("EPHEMERAL", "ephemeral"), ("STATE", "state")] {
        let Some(enc) = path(machine, &["systemDiskEncryption", key]) else {
            continue;
        };
        let keys = list(Some(enc), "keys");
        if keys.is_empty() {
            result.push(format!("partition {label:?}: no encryption keys provided"));
        }
        let mut slots = std::collections::HashSet::new();
        for k in keys {
            let slot = get(k, "slot").and_then(Value::as_i64).unwrap_or(0);
            if !slots.insert(slot) {
                result.push(format!(
                    "partition {label:?}: encryption key slot {slot} is already in use"
                ));
            }
            if ["nodeID", "static", "kms", "tpm"]
                .iter()
                .all(|f| get(k, f).is_none())
            {
                result.push(format!("partition {label:?}: encryption key at slot {slot} doesn't have the configuration parameters"));
            }
        }
    }

    let kubespan = path(machine, &["network", "kubespan"]);
    if flag(kubespan, "enabled") {
        if !v14 {
            let discovery = cluster.and_then(|c| get(c, "discovery"));
            if !flag(discovery, "enabled") {
                result.push(
                    ".cluster.discovery should be enabled when .machine.network.kubespan is enabled",
                );
            }
            if string(cluster, "id").is_empty() {
                result.push(".cluster.id should be set when .machine.network.kubespan is enabled");
            }
            if string(cluster, "secret").is_empty() {
                result.push(
                    ".cluster.secret should be set when .machine.network.kubespan is enabled",
                );
            }
        }
        let filters = kubespan.and_then(|k| get(k, "filters"));
        for cidr in list(filters, "endpoints") {
            let c = cidr.as_str().unwrap_or("");
            let c = c.strip_prefix('!').unwrap_or(c);
            if !goparse::is_subnet_or_address(c) {
                result.push(format!("KubeSpan endpoint filter is not valid: {c:?}"));
            }
        }
        for cidr in list(filters, "excludeAdvertisedNetworks") {
            let c = cidr.as_str().unwrap_or("");
            if !goparse::is_prefix(c) {
                result.push(format!(
                    "KubeSpan exclude advertised networks filter is not valid: {c:?}"
                ));
            }
        }
    }

    if let Some(i) = install {
        let mut seen = std::collections::HashSet::new();
        let exts = list(Some(i), "extensions");
        for ext in exts {
            let image = string(Some(ext), "image");
            if !seen.insert(image) {
                result.push(format!("duplicate system extension {image:?}"));
            }
        }
        if !seen.is_empty() {
            warnings.push(".machine.install.extensions is deprecated, please see https://docs.siderolabs.com/talos/latest/platform-specific-installations/boot-assets".into());
        }
    }

    if let Some(e) = map(m, "nodeLabels").and_then(goparse::labels) {
        result.push(e.wrap("invalid machine node labels"));
    }
    if let Some(e) = map(m, "nodeAnnotations").and_then(goparse::annotations) {
        result.push(e.wrap("invalid machine node annotations"));
    }
    if let Some(e) = map(m, "nodeTaints").and_then(goparse::taints) {
        result.push(e.wrap("invalid machine node taints"));
    }

    let api_access = path(machine, &["features", "kubernetesTalosAPIAccess"]);
    // 1.13.9 checks an enabled feature; 1.14.1 any the v1alpha1 bridge yields (an enabled one:
    // `K8sTalosAPIAccessConfig` in v1alpha1_k8s_bridge.go returns nil otherwise).
    if flag(api_access, "enabled") {
        if !mtype.is_control_plane() {
            result.push(
                "feature Kubernetes Talos API Access can only be enabled on control plane machines",
            );
        }
        for r in list(api_access, "allowedRoles") {
            let r = r.as_str().unwrap_or("");
            if !ROLES.contains(&r) {
                result.push(format!(
                    "invalid role {r:?} in allowed roles for Kubernetes Talos API Access"
                ));
            }
        }
    }

    let sort = string(get(machine, "features"), "nodeAddressSortAlgorithm");
    if !sort.is_empty() && !["v1", "v2"].contains(&sort.to_lowercase().as_str()) {
        result.push(format!(
            "invalid node address sort algorithm: {sort} does not belong to AddressSortAlgorithm values"
        ));
    }

    if get(doc, "persist").and_then(Value::as_bool) == Some(false) {
        result.push(".persist should be enabled");
    }

    if !v14 {
        let registries = get(machine, "registries");
        for (section, what) in [("config", "config"), ("mirrors", "mirrors")] {
            let mut keys: Vec<&String> = map(registries, section)
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.is_null())
                .map(|(k, _)| k)
                .collect();
            keys.sort();
            for k in keys {
                result.push(format!("registries.{what}[{k:?}] is null"));
            }
        }
    }

    (warnings, result.or_nil())
}

/// `kubelet.ProtectedConfigurationFields` (`pkg/machinery/kubelet`).
pub(super) const KUBELET_PROTECTED: &[&str] = &[
    "apiVersion",
    "authentication",
    "authorization",
    "cgroupRoot",
    "kind",
    "kubeletCgroups",
    "port",
    "protectKernelDefaults",
    "resolvConf",
    "rotateCertificates",
    "systemCgroups",
    "staticPodPath",
    "seccompDefault",
];

/// `role.All` (`pkg/machinery/role/role.go`).
const ROLES: &[&str] = &[
    "os:admin",
    "os:operator",
    "os:reader",
    "os:etcd:backup",
    "os:image:verifier",
    "os:meta:writer",
    "os:impersonator",
];

/// `DiskSize == 0`: absent, `0`, or a size string that parses to zero.
fn partition_size_is_zero(p: &Value) -> bool {
    match get(p, "size") {
        None => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.trim_start_matches(['0', '.']).is_empty() || s == "0B",
        Some(_) => false,
    }
}

/// `(*ClusterConfig).Validate(isControlPlane)`.
fn validate_cluster(
    cluster: Option<&Value>,
    control_plane: bool,
    release: Release,
) -> Option<GoError> {
    let v14 = release == Release::V1_14;
    let Some(c) = cluster else {
        return Some("cluster instructions are required".into());
    };
    let mut result = Errors::default();
    let control = get(c, "controlPlane");
    let endpoint = control.and_then(|cp| get(cp, "endpoint"));
    match (control, endpoint) {
        (None, _) if v14 => {}
        (_, None) if v14 => {
            return Some("cluster controlplane endpoint is required (.cluster.controlPlane.endpoint); when the endpoint is migrated to the KubeClusterConfig document, the whole .cluster.controlPlane section should be removed (.cluster.controlPlane.localAPIServerPort is migrated to the KubeAPIServerConfig document)".into());
        }
        (_, None) => return Some("cluster controlplane endpoint is required".into()),
        (_, Some(ep)) => {
            if let Err(e) = goparse::validate_endpoint_uri(ep.as_str().unwrap_or("")) {
                result.push(format!("invalid controlplane endpoint: {e}"));
            }
        }
    }
    if v14 && get(c, "serviceAccount").is_some() && endpoint.is_none() {
        result.push(".cluster.serviceAccount requires the cluster endpoint to be set in the same document (.cluster.controlPlane.endpoint); when the cluster endpoint is migrated to the KubeClusterConfig document, .cluster.serviceAccount should be migrated to the KubeServiceAccountConfig document as well");
    }
    let domain = string(get(c, "network"), "dnsDomain");
    if !domain.is_empty() && !is_valid_dns_name(domain) {
        result.push(format!("{domain:?} is not a valid DNS name"));
    }
    if let Some(ecp) = get(c, "externalCloudProvider")
        && !flag(Some(ecp), "enabled")
        && !list(Some(ecp), "manifests").is_empty()
    {
        result.push("external cloud provider is disabled, but manifests are provided");
    }
    if let Some(etcd) = get(c, "etcd") {
        if control_plane {
            let mut e = Errors::default();
            if get(etcd, "ca").is_none() {
                e.push("key/cert combination should not be empty");
            }
            let advertised = list(Some(etcd), "advertisedSubnets");
            let subnet = string(Some(etcd), "subnet");
            if !subnet.is_empty() && !advertised.is_empty() {
                e.push("etcd subnet can't be set when advertised subnets are set");
            }
            // `AdvertisedSubnets()`: the written list, else the legacy `subnet`.
            let adv: Vec<&str> = if advertised.is_empty() {
                if subnet.is_empty() {
                    vec![]
                } else {
                    vec![subnet]
                }
            } else {
                advertised.iter().filter_map(Value::as_str).collect()
            };
            for cidr in adv {
                let c = cidr.strip_prefix('!').unwrap_or(cidr);
                if !goparse::is_subnet_or_address(c) {
                    e.push(format!("etcd advertised subnet is not valid: {c:?}"));
                }
            }
            // `ListenSubnets()`: the written list, else the advertised ones (not `subnet`).
            let listen = match list(Some(etcd), "listenSubnets") {
                [] => advertised,
                l => l,
            };
            for cidr in listen {
                let cidr = cidr.as_str().unwrap_or("");
                let c = cidr.strip_prefix('!').unwrap_or(cidr);
                if !goparse::is_subnet_or_address(c) {
                    e.push(format!("etcd listen subnet is not valid: {c:?}"));
                }
            }
            result.append(e.or_nil());
        } else {
            result.push("etcd config is only allowed on control plane machines");
        }
    }
    if !control_plane && non_empty_bytes(get(c, "ca"), "key") {
        result.push("cluster CA key is not allowed on non-controlplane nodes (.cluster.ca)");
    }

    // ClusterInlineManifests.Validate
    let mut seen = std::collections::HashSet::new();
    for m in list(Some(c), "inlineManifests") {
        let name = string(Some(m), "name");
        if name.trim().is_empty() {
            result.push("inline manifest name can't be empty");
        }
        if !seen.insert(name) {
            result.push(format!("inline manifest name {name:?} is duplicate"));
        }
    }

    // ClusterDiscoveryConfig.Validate
    let discovery = get(c, "discovery");
    if flag(discovery, "enabled") {
        let service = discovery.and_then(|d| path(d, &["registries", "service"]));
        if !flag(service, "disabled") {
            let endpoint = match string(service, "endpoint") {
                "" => "https://discovery.talos.dev/",
                e => e,
            };
            match goparse::request_uri_path(endpoint) {
                Err(e) => result.push(format!(
                    "cluster discovery service registry endpoint is invalid: {e}"
                )),
                Ok(p) if !p.is_empty() && p != "/" => {
                    result.push("cluster discovery service path should be empty")
                }
                Ok(_) => {}
            }
            if string(Some(c), "id").is_empty() {
                result.push("cluster discovery service requires .cluster.id");
            }
            if string(Some(c), "secret").is_empty() {
                result.push("cluster discovery service requires .cluster.secret");
            }
        }
    }

    // APIServerConfig.Validate: authorization-mode flags next to an authorization config.
    if let Some(api) = get(c, "apiServer")
        && !list(Some(api), "authorizationConfig").is_empty()
    {
        let mut keys: Vec<&String> = map(Some(api), "extraArgs")
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        keys.sort();
        for k in keys {
            if k == "authorization-mode" {
                result.push("authorization-mode cannot be used in conjunction with AuthorizationConfig, use eitherr AuthorizationConfig or authorization-mode");
                break;
            }
            if k.starts_with("authorization-webhook-") {
                result.push("authorization-webhook-* flags cannot be used in conjunction with AuthorizationConfig, use either AuthorizationConfig or authorization-webhook-* flags");
                break;
            }
        }
    }
    result.or_nil()
}

/// `isValidDNSName`: at most 255 letters, labels of `[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62}`, an
/// optional trailing `.` or `_`.
fn is_valid_dns_name(name: &str) -> bool {
    if name.is_empty() || name.len() - name.matches('.').count() > 255 {
        return false;
    }
    let body = name.strip_suffix(['.', '_']).unwrap_or(name);
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
    };
    // A trailing `_` may also belong to the last label.
    body.split('.').all(label) || name.split('.').all(label)
}

/// `ValidateCNI` on the effective CNI (`ClusterConfig.CNI()`: flannel when none is written).
fn validate_cni(cni: Option<&Value>) -> (Vec<String>, Option<GoError>) {
    let mut warnings = Vec::new();
    let mut result = Errors::default();
    let name = match cni {
        None => "flannel",
        Some(c) => string(Some(c), "name"),
    };
    let urls = list(cni, "urls");
    let flannel = cni.and_then(|c| get(c, "flannel"));
    let extra_args = !list(flannel, "extraArgs").is_empty();
    let policies = flag(flannel, "kubeNetworkPoliciesEnabled");
    match name {
        "flannel" => {
            if !urls.is_empty() {
                result.push(format!("\"urls\" field should be empty for {name:?} CNI"));
            }
        }
        "none" | "custom" => {
            if name == "none" && !urls.is_empty() {
                result.push(format!("\"urls\" field should be empty for {name:?} CNI"));
            }
            if name == "custom" && urls.is_empty() {
                warnings.push(format!(
                    "\"urls\" field should not be empty for {name:?} CNI"
                ));
            }
            if extra_args {
                result.push(format!(
                    "\"flanneldExtraArgs\" field should be empty for {name:?} CNI"
                ));
            }
            if policies {
                result.push(format!(
                    "\"flannelKubeNetworkPoliciesEnabled\" should not be enabled for {name:?} CNI"
                ));
            }
            if name == "custom" {
                for u in urls {
                    if let Err(e) = goparse::validate_endpoint_uri(u.as_str().unwrap_or("")) {
                        result.push(e);
                    }
                }
            }
        }
        _ => result.push("cni name should be one of [\"flannel\", \"custom\", \"none\"]"),
    }
    (warnings, result.or_nil())
}

/// The `.machine.network` part of `Validate`: links shared by bonds/bridges, then each device's
/// `CheckDeviceInterface`, `CheckDeviceAddressing`, `CheckDeviceRoutes`, then KubeSpan's MTU.
fn validate_network(network: &Value, warnings: &mut Vec<String>, result: &mut Errors) {
    let devices = list(Some(network), "interfaces");
    let mut secondary: std::collections::HashMap<String, String> = Default::default();
    for d in devices.iter().filter(|d| !d.is_null()) {
        let iface = string(Some(d), "interface");
        let bond = get(d, "bond");
        let bridge = get(d, "bridge");
        if bond.is_some() && bridge.is_some() {
            result.push(format!("interface has both bridge and bond sections set {iface:?}: config sections are mutually exclusive"));
        }
        let mut members: &[Value] = &[];
        if let Some(b) = bond {
            members = list(Some(b), "interfaces");
            if !members.is_empty() && !list(Some(b), "deviceSelectors").is_empty() {
                result.push(format!("interface {iface:?} has both interfaces and selectors set: config sections are mutually exclusive"));
            }
        }
        if let Some(b) = bridge {
            members = list(Some(b), "interfaces");
        }
        for member in members.iter().filter_map(Value::as_str) {
            if let Some(other) = secondary.get(member)
                && other != iface
            {
                result.push(format!("interface {member:?} is declared as part of two separate links: {other:?} and {iface:?}"));
            }
            secondary.insert(member.to_string(), iface.to_string());
        }
    }
    for d in devices {
        if d.is_null() {
            result.push("empty device");
            continue;
        }
        if flag(Some(d), "ignore") {
            continue;
        }
        let mut e = Errors::default();
        e.append(check_device_interface(d));
        let (w, err) = check_device_addressing(d, &secondary);
        warnings.extend(w);
        e.append(err);
        e.append(check_device_routes(d));
        result.append(e.or_nil());
    }
    let kubespan = get(network, "kubespan");
    if flag(kubespan, "enabled")
        && let Some(mtu) = kubespan.and_then(|k| get(k, "mtu")).and_then(Value::as_u64)
        && mtu != 0
        && mtu < 1280
    {
        result.push("kubespan link MTU must be at least 1280");
    }
}

fn check_device_interface(d: &Value) -> Option<GoError> {
    let mut result = Errors::default();
    let iface = string(Some(d), "interface");
    let selector = get(d, "deviceSelector");
    const BOTH: &str = "[networking.os.device.interface], [networking.os.device.deviceSelector]";
    if iface.is_empty() && selector.is_none() {
        result.push(format!("{BOTH}: required either config section to be set"));
    } else if !iface.is_empty() && selector.is_some() {
        result.push(format!("{BOTH}: config sections are mutually exclusive"));
    }
    if selector.is_some_and(|s| s.as_object().is_none_or(|o| o.values().all(Value::is_null))) {
        result.push(
            "[networking.os.device.deviceSelector]: config section should contain at least one field",
        );
    }
    if let Some(b) = get(d, "bond") {
        let mut e = Errors::default();
        let num = |k: &str| get(b, k).and_then(Value::as_u64).unwrap_or(0);
        let (mii, up, down) = (num("miimon"), num("updelay"), num("downdelay"));
        if mii == 0 {
            if up != 0 {
                e.push("bond.upDelay can't be set if miiMon is zero");
            }
            if down != 0 {
                e.push("bond.downDelay can't be set if miiMon is zero");
            }
        } else {
            if up % mii != 0 {
                e.push("bond.upDelay should be a multiple of miiMon");
            }
            if down % mii != 0 {
                e.push("bond.downDelay should be a multiple of miiMon");
            }
        }
        if !list(Some(b), "arpIPTarget").is_empty() {
            e.push("bond.arpIPTarget is not supported");
        }
        result.append(e.or_nil());
    }
    // checkVlans
    let mut e = Errors::default();
    for vlan in list(Some(d), "vlans") {
        let id = get(vlan, "vlanId").and_then(Value::as_u64).unwrap_or(0);
        let addrs = list(Some(vlan), "addresses");
        let cidr = string(Some(vlan), "cidr");
        if !addrs.is_empty() && !cidr.is_empty() {
            e.push(format!("[networking.os.device.vlan] {iface}.{id}: vlan can't have both .cidr and .addresses set"));
        }
        if !cidr.is_empty()
            && let Err(err) = validate_ip_or_cidr(cidr)
        {
            e.push(format!(
                "[networking.os.device.vlan.CIDR] {iface}.{id}: {err}"
            ));
        }
        for a in addrs {
            if let Err(err) = validate_ip_or_cidr(a.as_str().unwrap_or("")) {
                e.push(format!(
                    "[networking.os.device.vlan.addresses] {iface}.{id}: {err}"
                ));
            }
        }
    }
    result.append(e.or_nil());
    result.or_nil()
}

/// `validateIPOrCIDR`.
fn validate_ip_or_cidr(address: &str) -> Result<(), String> {
    if address.contains('/') {
        return goparse::parse_cidr(address);
    }
    if !goparse::is_ip(address) {
        return Err(format!("failed to parse IP address {address:?}"));
    }
    Ok(())
}

fn check_device_addressing(
    d: &Value,
    secondary: &std::collections::HashMap<String, String>,
) -> (Vec<String>, Option<GoError>) {
    let mut result = Errors::default();
    let mut warnings = Vec::new();
    let iface = string(Some(d), "interface");
    let cidr = string(Some(d), "cidr");
    let addrs = list(Some(d), "addresses");
    let vip = get(d, "vip");
    if secondary.contains_key(iface)
        && (flag(Some(d), "dhcp") || !cidr.is_empty() || !addrs.is_empty() || vip.is_some())
    {
        result.push(format!("[networking.os.device] {iface:?}: bonded/bridged interface shouldn't have any addressing methods configured"));
    }
    if !addrs.is_empty() && !cidr.is_empty() {
        result.push(format!(
            "[networking.os.device] {iface:?}: interface can't have both .cidr and .addresses set"
        ));
    }
    if !cidr.is_empty() {
        if let Err(e) = validate_ip_or_cidr(cidr) {
            result.push(format!("[networking.os.device.CIDR] {iface:?}: {e}"));
        }
        warnings.push(format!("{iface:?}: machine.network.interface.cidr is deprecated, please use machine.network.interface.addresses"));
    }
    for a in addrs {
        if let Err(e) = validate_ip_or_cidr(a.as_str().unwrap_or("")) {
            result.push(format!("[networking.os.device.addresses] {iface:?}: {e}"));
        }
    }
    if vip.is_some() {
        let ip = string(vip, "ip");
        if !goparse::is_ip(ip) {
            result.push(format!(
                "[networking.os.device.vip] failed to parse {ip:?} as IP address"
            ));
        }
    }
    (warnings, result.or_nil())
}

fn check_device_routes(d: &Value) -> Option<GoError> {
    let mut result = Errors::default();
    for (idx, route) in list(Some(d), "routes").iter().enumerate() {
        let at = format!("networking.os.device.route[{idx}]");
        let network = string(Some(route), "network");
        let gateway = string(Some(route), "gateway");
        if !network.is_empty() && goparse::parse_cidr(network).is_err() {
            result.push(format!(
                "[{at}.network] {network:?}: invalid network address"
            ));
        }
        if !gateway.is_empty() && !goparse::is_ip(gateway) {
            result.push(format!(
                "[{at}.gateway] {gateway:?}: invalid network address"
            ));
        }
        if gateway.is_empty() && network.is_empty() {
            result.push(format!("[{at}]: either network or gateway should be set"));
        }
        let source = string(Some(route), "source");
        if !source.is_empty() && !goparse::is_ip(source) {
            result.push(format!("[{at}.source] {source:?}: invalid network address"));
        }
    }
    result.or_nil()
}
