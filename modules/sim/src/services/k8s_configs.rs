//! Two of the Kubernetes config resources machined renders from the machine config, which
//! upstream's cluster checks (`pkg/cluster/check/default.go` @ v1.13.9 and v1.14.1) read before
//! their Kubernetes checks: `k8s/KubeletConfigs.kubernetes.talos.dev` id `kubelet` (its absence
//! means no kubelet: `kubeletDisabled`) and, on a control plane,
//! `controlplane/BootstrapManifestsConfigs.kubernetes.talos.dev` id `manifests` (`cniDisabledStatus`
//! reads `cniName`). Upstream: `pkg/machinery/resources/k8s/kubelet_config.go`,
//! `manifests_config.go`, rendered by `internal/app/machined/pkg/controllers/k8s/kubelet_config.go`
//! and `manifests_config.go` (the latter from `cluster.network`, `cluster.proxy`,
//! `cluster.coreDNS`). Only the fields the simulator sets are served; the rest stay empty.

use std::net::Ipv4Addr;

use ferro_talos_proto::resource::k8s::{BootstrapManifestsConfigSpec, KubeletConfigSpec};
use serde_json::Value;

use crate::state::Node;

pub const KUBELET_CONFIG: (&str, &str) = ("k8s", "KubeletConfigs.kubernetes.talos.dev");
pub const KUBELET_CONFIG_ID: &str = "kubelet";
pub const MANIFESTS_CONFIG: (&str, &str) = (
    "controlplane",
    "BootstrapManifestsConfigs.kubernetes.talos.dev",
);
pub const MANIFESTS_CONFIG_ID: &str = "manifests";

fn at<'a>(doc: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, key| v.get(*key))
}

fn text(doc: &Value, path: &[&str]) -> String {
    at(doc, path)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn flag(doc: &Value, path: &[&str]) -> bool {
    at(doc, path).and_then(Value::as_bool).unwrap_or(false)
}

fn list(doc: &Value, path: &[&str]) -> Vec<String> {
    at(doc, path)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn dns_domain(v1: &Value) -> String {
    let d = text(v1, &["cluster", "network", "dnsDomain"]);
    if d.is_empty() {
        "cluster.local".into()
    } else {
        d
    }
}

/// The DNS service address: the tenth of the first service subnet (upstream `DNSServiceIPs`,
/// `pkg/machinery/config/types/v1alpha1/v1alpha1_provider.go`; default 10.96.0.0/12).
fn dns_service_ip(v1: &Value) -> String {
    let subnets = list(v1, &["cluster", "network", "serviceSubnets"]);
    let first = subnets
        .first()
        .cloned()
        .unwrap_or_else(|| "10.96.0.0/12".into());
    first
        .split('/')
        .next()
        .and_then(|a| a.parse::<Ipv4Addr>().ok())
        .map(|a| Ipv4Addr::from(u32::from(a) + 10).to_string())
        .unwrap_or_default()
}

/// (proto spec, YAML spec) of the kubelet config, for a node running a config.
pub fn kubelet(n: &Node) -> Option<KubeletConfigSpec> {
    let v1 = n.active.as_ref()?.v1alpha1()?;
    Some(KubeletConfigSpec {
        image: text(v1, &["machine", "kubelet", "image"]),
        cluster_dns: vec![dns_service_ip(v1)],
        cluster_domain: dns_domain(v1),
    })
}

pub fn kubelet_yaml(spec: &KubeletConfigSpec) -> String {
    format!(
        "image: {}\nclusterDNS:\n    - {}\nclusterDomain: {}\n",
        spec.image,
        spec.cluster_dns.join("\n    - "),
        spec.cluster_domain
    )
}

/// The bootstrap manifests' config, on a control plane running a config.
pub fn manifests(n: &Node) -> Option<BootstrapManifestsConfigSpec> {
    if !n.is_control_plane() {
        return None;
    }
    let v1 = n.active.as_ref()?.v1alpha1()?;
    let cni = {
        let name = text(v1, &["cluster", "network", "cni", "name"]);
        if name.is_empty() {
            "flannel".to_string()
        } else {
            name
        }
    };
    let pods = {
        let p = list(v1, &["cluster", "network", "podSubnets"]);
        if p.is_empty() {
            vec!["10.244.0.0/16".to_string()]
        } else {
            p
        }
    };
    Some(BootstrapManifestsConfigSpec {
        server: text(v1, &["cluster", "controlPlane", "endpoint"]),
        cluster_domain: dns_domain(v1),
        pod_cid_rs: pods,
        proxy_enabled: !flag(v1, &["cluster", "proxy", "disabled"]),
        proxy_image: text(v1, &["cluster", "proxy", "image"]),
        core_dns_enabled: !flag(v1, &["cluster", "coreDNS", "disabled"]),
        core_dns_image: text(v1, &["cluster", "coreDNS", "image"]),
        dns_service_ip: dns_service_ip(v1),
        flannel_enabled: cni == "flannel",
        flannel_image: String::new(),
        talos_api_service_enabled: false,
        cni_name: cni,
    })
}

pub fn manifests_yaml(spec: &BootstrapManifestsConfigSpec) -> String {
    format!(
        "string: {}\nclusterDomain: {}\npodCIDRs:\n    - {}\nproxyEnabled: {}\nproxyImage: {}\nproxyArgs: []\n\
         coreDNSEnabled: {}\ncoreDNSImage: {}\ndnsServiceIP: {}\ndnsServiceIPv6: \"\"\nflannelEnabled: {}\n\
         flannelImage: \"\"\nflannelExtraArgs: []\nflannelKubeServiceHost: \"\"\nflannelKubeServicePort: \"\"\n\
         flannelKubeNetworkPoliciesEnabled: false\nflannelKubeNetworkPoliciesImage: \"\"\n\
         podSecurityPolicyEnabled: false\ntalosAPIServiceEnabled: false\ncniName: {}\n",
        spec.server,
        spec.cluster_domain,
        spec.pod_cid_rs.join("\n    - "),
        spec.proxy_enabled,
        spec.proxy_image,
        spec.core_dns_enabled,
        spec.core_dns_image,
        spec.dns_service_ip,
        spec.flannel_enabled,
        spec.cni_name
    )
}

/// `k8s/StaticPodStatuses.kubernetes.talos.dev`: the status the node's kubelet reports of each
/// static pod it runs, id `namespace/name` (upstream `pkg/machinery/resources/k8s/static_pod_status.go`,
/// written by `internal/app/machined/pkg/controllers/k8s/kubelet_static_pod.go` from the kubelet's
/// pod list). upstream's `K8sControlPlaneStaticPods` check (`pkg/cluster/check/kubernetes.go`)
/// wants one per control-plane component whose config resource the node has.
pub const STATIC_POD_STATUS: (&str, &str) = ("k8s", "StaticPodStatuses.kubernetes.talos.dev");

/// (id, pod status) of the static pods of node `idx`, as the simulated Kubernetes API has them.
pub fn static_pods(
    st: &crate::state::State,
    idx: usize,
) -> Vec<(String, serde_json::Map<String, Value>)> {
    let n = &st.nodes[idx];
    if n.active.is_none() {
        return vec![];
    }
    let name = crate::kube::node_name(n);
    crate::kube::cluster_pods(&st.kube, st, Some("kube-system"))
        .into_iter()
        .filter(|p| {
            p["spec"]["nodeName"] == name.as_str()
                && p["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
        })
        .filter_map(|p| {
            let id = format!("kube-system/{}", p["metadata"]["name"].as_str()?);
            Some((id, p["status"].as_object()?.clone()))
        })
        .collect()
}

/// `k8s/KubeletSpecs.kubernetes.talos.dev` id `kubelet` (upstream `kubelet_spec.go`, rendered by
/// `internal/app/machined/pkg/controllers/k8s/kubelet_spec.go`): the image the kubelet runs, the
/// node name it registers, and its KubeletConfiguration. talosctl's `upgrade-k8s` reads the
/// current kubelet image from it (`pkg/cluster/kubernetes/kubelet.go`, `talos_managed.go`). The
/// simulator leaves the command-line arguments out and keeps the configuration to its DNS.
pub const KUBELET_SPEC: (&str, &str) = ("k8s", "KubeletSpecs.kubernetes.talos.dev");

pub fn kubelet_spec(
    n: &Node,
) -> Option<(ferro_talos_proto::resource::k8s::KubeletSpecSpec, String)> {
    let cfg = n.active.as_ref()?;
    let kubelet = kubelet(n)?;
    let image = crate::kube::kubelet_image(cfg);
    let name = crate::kube::node_name(n);
    let mut config = serde_json::Map::new();
    config.insert("apiVersion".into(), "kubelet.config.k8s.io/v1beta1".into());
    config.insert("kind".into(), "KubeletConfiguration".into());
    config.insert(
        "clusterDomain".into(),
        kubelet.cluster_domain.clone().into(),
    );
    config.insert(
        "clusterDNS".into(),
        Value::Array(
            kubelet
                .cluster_dns
                .iter()
                .cloned()
                .map(Value::from)
                .collect(),
        ),
    );
    let yaml = format!(
        "image: {image}\nexpectedNodename: {name}\nconfig:\n    apiVersion: kubelet.config.k8s.io/v1beta1\n    \
         kind: KubeletConfiguration\n    clusterDomain: {}\n    clusterDNS:\n        - {}\n",
        kubelet.cluster_domain,
        kubelet.cluster_dns.join("\n        - ")
    );
    let spec = ferro_talos_proto::resource::k8s::KubeletSpecSpec {
        image,
        args: vec![],
        expected_nodename: name,
        config: Some(crate::kube::to_struct(&config)),
    };
    Some((spec, yaml))
}
