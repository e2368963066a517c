//! The Kubernetes objects of Talos's bootstrap manifests, as Talos renders them on a control
//! plane: apiVersion, kind, names, namespaces, labels, annotations, selectors, subjects and role
//! references as upstream's templates have them, bodies reduced to what a cluster needs to run
//! them (upstream `internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/*.go` and
//! their `testdata/*.yaml` at v1.13.9; typed objects lose `status` on the way into the resource,
//! `internal/app/machined/pkg/adapters/k8s/manifest.go`).

use serde_json::{Value, json};

/// What the templates are rendered from (upstream's `BootstrapManifestsConfigSpec` and the
/// bootstrap token of `secrets.KubernetesRoot`).
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    pub token_id: String,
    pub token_secret: String,
    /// The API server address in-cluster clients use: KubePrism's when it is enabled.
    pub server: String,
    pub cluster_domain: String,
    pub pod_cidrs: Vec<String>,
    pub dns_service_ip: String,
    pub proxy: Option<Proxy>,
    pub coredns_image: Option<String>,
    pub flannel_image: Option<String>,
    pub talos_api_access: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Proxy {
    pub image: String,
    pub args: Vec<String>,
}

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// `kubelet.go` KubeletBootstrapTokenSecret.
pub fn bootstrap_token_secret(i: &Inputs) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{}", i.token_id), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "auth-extra-groups": "system:bootstrappers:nodes",
            "token-id": i.token_id,
            "token-secret": i.token_secret,
            "usage-bootstrap-authentication": "true",
        },
    })
}

fn group_binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// `csr.go`: the three bindings that let kubelets bootstrap and renew their certificates.
pub fn csr_node_bootstrap() -> Value {
    group_binding(
        "system-bootstrap-node-bootstrapper",
        "system:node-bootstrapper",
        &["system:bootstrappers:nodes", "system:nodes"],
    )
}

pub fn csr_approver() -> Value {
    group_binding(
        "system-bootstrap-approve-node-client-csr",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        &["system:bootstrappers:nodes"],
    )
}

pub fn csr_renewal() -> Value {
    group_binding(
        "system-bootstrap-node-renewal",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        &["system:nodes"],
    )
}

/// `kubeconfig.go`: the kubeconfig kube-proxy and flannel mount.
pub fn kubeconfig_in_cluster(i: &Inputs) -> Value {
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n    server: {}\n  name: local\ncontexts:\n- context:\n    cluster: local\n    user: service-account\n  name: local\ncurrent-context: local\nkind: Config\nusers:\n- name: service-account\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
        i.server
    );
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kubeconfig-in-cluster", "namespace": "kube-system"},
        "data": {"kubeconfig": kubeconfig},
    })
}

fn rbac_defaults(mut object: Value, autoupdate: bool) -> Value {
    object["metadata"]["labels"] = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    if autoupdate {
        object["metadata"]["annotations"] =
            json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
    }
    object
}

/// `talos.go`: what Talos's node service account may read.
pub fn talos_nodes_binding() -> Value {
    rbac_defaults(
        group_binding(
            "system:talos-nodes",
            "system:talos-nodes",
            &["system:nodes"],
        ),
        true,
    )
}

pub fn talos_nodes_role() -> Value {
    rbac_defaults(
        json!({
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "system:talos-nodes"},
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                       "verbs": ["get", "list", "watch"]}],
        }),
        false,
    )
}

fn service_account(name: &str, labels: Option<Value>) -> Value {
    let mut sa = json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": "kube-system"},
    });
    if let Some(labels) = labels {
        sa["metadata"]["labels"] = labels;
    }
    sa
}

fn service_account_binding(name: &str, role: &str, sa: &str) -> Value {
    json!({
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "kube-system"}],
    })
}

/// `coredns.go`: service account, role, binding, Corefile and the two-replica Deployment.
pub fn coredns(i: &Inputs, image: &str) -> Vec<Value> {
    let role = rbac_defaults(
        json!({
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                 "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": ["list", "watch"]},
            ],
        }),
        false,
    );
    let binding = rbac_defaults(
        service_account_binding("system:coredns", "system:coredns", "coredns"),
        true,
    );
    let corefile = format!(
        ".:53 {{\n    errors\n    health {{\n        lameduck 5s\n    }}\n    ready\n    log . {{\n        class error\n    }}\n    prometheus :9153\n\n    kubernetes {domain} in-addr.arpa ip6.arpa {{\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }}\n    forward . /etc/resolv.conf {{\n       max_concurrent 1000\n    }}\n    cache 30 {{\n       disable success {domain}\n       disable denial {domain}\n    }}\n    loop\n    reload\n    loadbalance\n}}\n",
        domain = i.cluster_domain
    );
    let config = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "coredns", "namespace": "kube-system"},
        "data": {"Corefile": corefile},
    });
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "coredns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "containers": [{
                        "name": "coredns",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "ports": [
                            {"containerPort": 53, "name": "dns", "protocol": "UDP"},
                            {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                            {"containerPort": 9153, "name": "metrics", "protocol": "TCP"},
                        ],
                        "volumeMounts": [{"mountPath": "/etc/coredns", "name": "config-volume", "readOnly": true}],
                    }],
                    "dnsPolicy": "Default",
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "priorityClassName": "system-cluster-critical",
                    "serviceAccountName": "coredns",
                    "tolerations": [
                        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
                        {"effect": "NoSchedule", "key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists"},
                    ],
                    "volumes": [{"name": "config-volume", "configMap": {"name": "coredns",
                                 "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                },
            },
        },
    });
    vec![
        service_account("coredns", None),
        role,
        binding,
        config,
        deployment,
    ]
}

/// `coredns.go` CoreDNSService: `kube-dns` at the tenth address of the service network.
pub fn coredns_service(i: &Inputs) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
                       "kubernetes.io/name": "CoreDNS"},
            "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
        },
        "spec": {
            "clusterIP": i.dns_service_ip,
            "clusterIPs": [i.dns_service_ip],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
            "selector": {"k8s-app": "kube-dns"},
        },
    })
}

fn tolerate_everything() -> Value {
    json!([{"effect": "NoSchedule", "operator": "Exists"}, {"effect": "NoExecute", "operator": "Exists"}])
}

/// `flannel.go`: role, binding, service account, net-conf and the `kube-flannel` DaemonSet.
pub fn flannel(i: &Inputs, image: &str) -> Vec<Value> {
    let labels = json!({"k8s-app": "flannel"});
    let node_labels = json!({"k8s-app": "flannel", "tier": "node"});
    let role = json!({
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": "flannel", "labels": labels},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        ],
    });
    let mut binding = service_account_binding("flannel", "flannel", "flannel");
    binding["metadata"]["labels"] = labels.clone();
    let network = i.pod_cidrs.first().cloned().unwrap_or_default();
    let config = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-flannel-cfg", "namespace": "kube-system", "labels": node_labels},
        "data": {
            "cni-conf.json": "{\n  \"name\": \"cbr0\",\n  \"cniVersion\": \"1.0.0\",\n  \"plugins\": [\n    {\n      \"type\": \"flannel\",\n      \"delegate\": {\n        \"hairpinMode\": true,\n        \"isDefaultGateway\": true\n      }\n    },\n    {\n      \"type\": \"portmap\",\n      \"capabilities\": {\n        \"portMappings\": true\n      }\n    }\n  ]\n}",
            "net-conf.json": format!("{{\n  \"Network\": \"{network}\",\n  \"Backend\": {{\n    \"Type\": \"vxlan\",\n    \"Port\": 4789\n  }}\n}}"),
        },
    });
    let daemonset = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-flannel", "namespace": "kube-system", "labels": node_labels},
        "spec": {
            "selector": {"matchLabels": node_labels},
            "template": {
                "metadata": {"labels": node_labels},
                "spec": {
                    "containers": [{
                        "name": "kube-flannel",
                        "image": image,
                        "command": ["/opt/bin/flanneld"],
                        "args": ["--ip-masq", "--kube-subnet-mgr"],
                        "volumeMounts": [{"mountPath": "/run/flannel", "name": "run"},
                                         {"mountPath": "/etc/kube-flannel/", "name": "flannel-cfg"}],
                    }],
                    "initContainers": [{
                        "name": "install-config",
                        "image": image,
                        "command": ["cp"],
                        "args": ["-f", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"],
                    }],
                    "hostNetwork": true,
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": "flannel",
                    "tolerations": tolerate_everything(),
                    "volumes": [{"name": "run", "hostPath": {"path": "/run/flannel"}},
                                {"name": "cni", "hostPath": {"path": "/etc/cni/net.d"}},
                                {"name": "flannel-cfg", "configMap": {"name": "kube-flannel-cfg"}}],
                },
            },
        },
    });
    vec![
        role,
        binding,
        service_account("flannel", Some(labels)),
        config,
        daemonset,
    ]
}

/// `kube-proxy.go`: the `kube-proxy` DaemonSet, its service account and binding.
pub fn kube_proxy(proxy: &Proxy) -> Vec<Value> {
    let labels = json!({"k8s-app": "kube-proxy", "tier": "node"});
    let mut command = vec![json!("/usr/local/bin/kube-proxy")];
    command.extend(proxy.args.iter().map(|a| json!(a)));
    let daemonset = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "kube-proxy",
                        "image": proxy.image,
                        "command": command,
                        "securityContext": {"privileged": true},
                        "volumeMounts": [{"mountPath": "/etc/kubernetes", "name": "kubeconfig", "readOnly": true}],
                    }],
                    "hostNetwork": true,
                    "priorityClassName": "system-cluster-critical",
                    "serviceAccountName": "kube-proxy",
                    "tolerations": tolerate_everything(),
                    "volumes": [{"name": "kubeconfig", "configMap": {"name": "kubeconfig-in-cluster"}}],
                },
            },
        },
    });
    vec![
        daemonset,
        service_account("kube-proxy", None),
        service_account_binding("kube-proxy", "system:node-proxier", "kube-proxy"),
    ]
}

/// `crds.go`: the `serviceaccounts.talos.dev` CRD (Talos API access from pods).
pub fn talos_service_account_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "serviceaccounts.talos.dev"},
        "spec": {
            "conversion": {"strategy": "None"},
            "group": "talos.dev",
            "names": {"kind": "ServiceAccount", "listKind": "ServiceAccountList",
                      "plural": "serviceaccounts", "shortNames": ["tsa"], "singular": "serviceaccount"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"roles": {"type": "array", "items": {"type": "string"}}}},
                    "status": {"type": "object", "properties": {"failureReason": {"type": "string"}}},
                }}},
            }],
        },
    })
}
