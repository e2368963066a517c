//! Old-shape patches converted to the Talos 1.14 documents: one case per deprecated field (the
//! table in `deprecations.rs`), each checked for the converted documents, for applying cleanly to
//! a 1.14 render of `MachineConfig::generate` with no conflict left (`validate`), and, where the
//! unconverted patch collides, for the exact upstream conflict text it would get instead.

use std::sync::OnceLock;

use base64::Engine as _;
use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::convert_114::{Conversion, ConversionError, convert_patch};
use ferro_talos_config::deprecations::{DEPRECATED_FIELDS, Replacement};
use ferro_talos_config::document::DocId;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_config::known_keys;
use ferro_talos_config::patch::Patch;
use ferro_talos_config::validate;
use ferro_talos_secrets::Bundle;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use MachineType::{ControlPlane as CP, Worker};

fn bundle() -> &'static Bundle {
    static BUNDLE: OnceLock<Bundle> = OnceLock::new();
    BUNDLE.get_or_init(|| Bundle::generate((1, 14)).unwrap())
}

/// A 1.14-contract render with talosctl's CLI defaults (install disk /dev/sda, and so on).
fn base(machine: MachineType) -> MachineConfig {
    let opts = GenerateOptions::new(Contract::V1_14, machine, "c", "https://c:6443");
    MachineConfig::generate(bundle(), &opts).unwrap()
}

fn patch_docs(text: &str) -> Vec<Value> {
    match Patch::parse(text).unwrap() {
        Patch::Strategic(docs) => docs,
        other => panic!("not a strategic patch: {other:?}"),
    }
}

fn yaml_docs(text: &str) -> Vec<Value> {
    MachineConfig::parse(text).unwrap().docs
}

fn convert(old: &str, machine: MachineType) -> Result<Conversion, ConversionError> {
    convert_patch(&patch_docs(old), machine)
}

fn find<'a>(c: &'a MachineConfig, kind: &str, name: &str) -> Option<&'a Value> {
    c.docs.iter().find(|d| {
        let id = DocId::of(d);
        !id.is_v1alpha1() && id.kind == kind && id.name == name
    })
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

const CERT: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBiTCCAS+gAwIBAgIQbma43OjTpGB9\n-----END CERTIFICATE-----\n";
const CERT2: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBXjCCAQWgAwIBAgIQZsgT4Yg5qFCH\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIEYlYh75SQ6zUBEMFzzniS6n\n-----END EC PRIVATE KEY-----\n";
const SECRETBOX: &str = "45yd2Ke+sytiICojDf8aibTfgt99nzJmO53cjDqrCto=";
const AESCBC: &str = "aescbcSecretZmFrZWZha2VmYWtlZmFrZWZha2U=";

struct Case {
    name: &'static str,
    /// The table rows this case converts.
    fields: &'static [&'static str],
    machine: MachineType,
    old: String,
    /// The converted documents, as YAML.
    want: String,
    /// What Talos says about the unconverted patch on the same base.
    conflict: Option<&'static str>,
    /// Warnings the conversion must give.
    warnings: Vec<&'static str>,
    /// More checks on the patched config.
    check: Option<fn(&MachineConfig)>,
}

fn case(
    name: &'static str,
    fields: &'static [&'static str],
    machine: MachineType,
    old: impl Into<String>,
    want: impl Into<String>,
) -> Case {
    Case {
        name,
        fields,
        machine,
        old: old.into(),
        want: want.into(),
        conflict: None,
        warnings: Vec::new(),
        check: None,
    }
}

impl Case {
    fn conflict(mut self, text: &'static str) -> Case {
        self.conflict = Some(text);
        self
    }
    fn warning(mut self, text: &'static str) -> Case {
        self.warnings.push(text);
        self
    }
    fn check(mut self, f: fn(&MachineConfig)) -> Case {
        self.check = Some(f);
        self
    }
}

fn cases() -> Vec<Case> {
    vec![
        // KubeNodeConfig
        case(
            "node labels, annotations and taints",
            &[".machine.nodeLabels", ".machine.nodeAnnotations", ".machine.nodeTaints"],
            CP,
            "machine:\n  nodeLabels:\n    rack: r1\n    node.kubernetes.io/exclude-from-external-load-balancers:\n      $patch: delete\n  nodeAnnotations:\n    a.io/x: \"y\"\n  nodeTaints:\n    gpu: \"true:NoSchedule\"\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels:\n  rack: r1\n  node.kubernetes.io/exclude-from-external-load-balancers:\n    $patch: delete\nannotations:\n  a.io/x: \"y\"\ntaints:\n  gpu: \"true:NoSchedule\"\n",
        )
        .check(|c| {
            let node = find(c, "KubeNodeConfig", "").unwrap();
            assert_eq!(
                node["labels"],
                json!({"node-role.kubernetes.io/control-plane": "", "rack": "r1"})
            );
            assert_eq!(
                node["taints"],
                json!({"node-role.kubernetes.io/control-plane": "NoSchedule", "gpu": "true:NoSchedule"})
            );
        }),
        case(
            "node labels on a worker",
            &[".machine.nodeLabels"],
            Worker,
            "machine:\n  nodeLabels:\n    rack: r1\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels:\n  rack: r1\n",
        )
        .conflict(".machine.nodeLabels is already set in v1alpha1 config"),
        case(
            "node annotations",
            &[".machine.nodeAnnotations"],
            Worker,
            "machine:\n  nodeAnnotations:\n    a.io/x: \"y\"\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\nannotations:\n  a.io/x: \"y\"\n",
        )
        .conflict(".machine.nodeAnnotations is already set in v1alpha1 config"),
        case(
            "node taints",
            &[".machine.nodeTaints"],
            CP,
            "machine:\n  nodeTaints:\n    gpu: NoSchedule\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\ntaints:\n  gpu: NoSchedule\n",
        )
        .conflict(".machine.nodeTaints is already set in v1alpha1 config"),
        case(
            "kubelet node fields",
            &[
                ".machine.kubelet.registerWithFQDN",
                ".machine.kubelet.skipNodeRegistration",
                ".machine.kubelet.nodeIP",
                ".machine.kubelet.nodeIP.validSubnets",
            ],
            Worker,
            "machine:\n  kubelet:\n    registerWithFQDN: true\n    skipNodeRegistration: false\n    nodeIP:\n      validSubnets: [10.0.0.0/8]\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\nregisterWithFQDN: true\nskipNodeRegistration: false\nnodeIP:\n  validSubnets: [10.0.0.0/8]\n",
        )
        .conflict(".machine.kubelet.skipNodeRegistration is already set in v1alpha1 config"),
        case(
            "kubelet registerWithFQDN",
            &[".machine.kubelet.registerWithFQDN"],
            CP,
            "machine:\n  kubelet:\n    registerWithFQDN: false\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\nregisterWithFQDN: false\n",
        )
        .conflict(".machine.kubelet.registerWithFQDN is already set in v1alpha1 config"),
        case(
            "kubelet nodeIP",
            &[".machine.kubelet.nodeIP.validSubnets"],
            CP,
            "machine:\n  kubelet:\n    nodeIP:\n      validSubnets: [\"!10.0.0.0/8\"]\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\nnodeIP:\n  validSubnets: [\"!10.0.0.0/8\"]\n",
        )
        .conflict(".machine.kubelet.nodeIP is already set in v1alpha1 config"),
        // KubeletConfig
        case(
            "kubelet settings",
            &[
                ".machine.kubelet",
                ".machine.kubelet.image",
                ".machine.kubelet.extraArgs",
                ".machine.kubelet.extraConfig",
                ".machine.kubelet.clusterDNS",
                ".machine.kubelet.defaultRuntimeSeccompProfileEnabled",
            ],
            CP,
            "machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.37.0\n    extraArgs:\n      rotate-server-certificates: \"true\"\n      feature-gates: [A=true, B=false]\n    extraConfig:\n      serverTLSBootstrap: true\n    clusterDNS: [169.254.2.53]\n    defaultRuntimeSeccompProfileEnabled: false\n",
            "apiVersion: v1alpha1\nkind: KubeletConfig\nimage: ghcr.io/siderolabs/kubelet:v1.37.0\nextraArgs:\n  rotate-server-certificates: \"true\"\n  feature-gates: [A=true, B=false]\nconfig:\n  serverTLSBootstrap: true\nclusterDNS: [169.254.2.53]\ndefaultRuntimeSeccompProfileEnabled: false\n",
        )
        .conflict("kubelet config is already set in v1alpha1 config (.machine.kubelet)")
        .check(|c| {
            let k = find(c, "KubeletConfig", "").unwrap();
            assert_eq!(k["image"], "ghcr.io/siderolabs/kubelet:v1.37.0");
            assert_eq!(k["config"], json!({"serverTLSBootstrap": true}));
            assert_eq!(k["defaultRuntimeSeccompProfileEnabled"], false);
        }),
        case(
            "kubelet settings on a worker",
            &[".machine.kubelet.image", ".machine.kubelet.extraArgs"],
            Worker,
            "machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.37.0\n    extraArgs:\n      max-pods: 250\n",
            "apiVersion: v1alpha1\nkind: KubeletConfig\nimage: ghcr.io/siderolabs/kubelet:v1.37.0\nextraArgs:\n  max-pods: 250\n",
        )
        .conflict("kubelet config is already set in v1alpha1 config (.machine.kubelet)")
        .check(|c| {
            // Patch values become strings when applied, in both shapes.
            assert_eq!(find(c, "KubeletConfig", "").unwrap()["extraArgs"]["max-pods"], "250");
        }),
        case(
            "an empty kubelet section",
            &[".machine.kubelet"],
            CP,
            "machine:\n  kubelet: {}\n",
            "",
        )
        .conflict("kubelet config is already set in v1alpha1 config (.machine.kubelet)"),
        case(
            "credential provider",
            &[".machine.kubelet.credentialProviderConfig"],
            Worker,
            "machine:\n  kubelet:\n    credentialProviderConfig:\n      apiVersion: kubelet.config.k8s.io/v1\n      kind: CredentialProviderConfig\n      providers:\n        - name: ecr-credential-provider\n          apiVersion: credentialprovider.kubelet.k8s.io/v1\n          matchImages: [\"*.dkr.ecr.*.amazonaws.com\"]\n          defaultCacheDuration: 12h\n",
            "apiVersion: v1alpha1\nkind: KubeCredentialProviderConfig\nconfiguration:\n  apiVersion: kubelet.config.k8s.io/v1\n  kind: CredentialProviderConfig\n  providers:\n    - name: ecr-credential-provider\n      apiVersion: credentialprovider.kubelet.k8s.io/v1\n      matchImages: [\"*.dkr.ecr.*.amazonaws.com\"]\n      defaultCacheDuration: 12h\n",
        )
        .conflict("kubelet config is already set in v1alpha1 config (.machine.kubelet)"),
        case(
            "manifests directory disabled, as it is locked",
            &[".machine.kubelet.disableManifestsDirectory"],
            CP,
            "machine:\n  kubelet:\n    disableManifestsDirectory: true\n",
            "",
        )
        .warning(".machine.kubelet.disableManifestsDirectory is dropped"),
        // Scheduling on control planes
        case(
            "scheduling allowed on control planes",
            &[".cluster.allowSchedulingOnControlPlanes"],
            CP,
            "cluster:\n  allowSchedulingOnControlPlanes: true\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\ntaints:\n  node-role.kubernetes.io/control-plane:\n    $patch: delete\n",
        )
        .conflict(".cluster.allowSchedulingOnControlPlanes is already set in v1alpha1 config")
        .check(|c| assert!(find(c, "KubeNodeConfig", "").unwrap().get("taints").is_none_or(|t| t.as_object().unwrap().is_empty()))),
        case(
            "scheduling not allowed on control planes",
            &[".cluster.allowSchedulingOnControlPlanes"],
            CP,
            "cluster:\n  allowSchedulingOnControlPlanes: false\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\ntaints:\n  node-role.kubernetes.io/control-plane: NoSchedule\n",
        )
        .conflict(".cluster.allowSchedulingOnControlPlanes is already set in v1alpha1 config"),
        case(
            "scheduling allowed on masters",
            &[".cluster.allowSchedulingOnMasters"],
            CP,
            "cluster:\n  allowSchedulingOnMasters: true\n",
            "apiVersion: v1alpha1\nkind: KubeNodeConfig\ntaints:\n  node-role.kubernetes.io/control-plane:\n    $patch: delete\n",
        )
        .conflict(".cluster.allowSchedulingOnMasters is already set in v1alpha1 config"),
        case(
            "scheduling on a worker does nothing",
            &[".cluster.allowSchedulingOnControlPlanes"],
            Worker,
            "cluster:\n  allowSchedulingOnControlPlanes: true\n",
            "",
        )
        .warning(".cluster.allowSchedulingOnControlPlanes has no effect on worker machines and is dropped"),
        // KubeStaticPodConfig
        case(
            "static pods",
            &[".machine.pods"],
            Worker,
            "machine:\n  pods:\n    - apiVersion: v1\n      kind: Pod\n      metadata:\n        name: nginx\n      spec:\n        containers:\n          - name: nginx\n            image: nginx\n    - apiVersion: v1\n      kind: Pod\n      metadata:\n        name: probe\n        namespace: monitoring\n      spec: {}\n",
            "apiVersion: v1alpha1\nkind: KubeStaticPodConfig\nname: default-nginx\npod:\n  apiVersion: v1\n  kind: Pod\n  metadata:\n    name: nginx\n  spec:\n    containers:\n      - name: nginx\n        image: nginx\n---\napiVersion: v1alpha1\nkind: KubeStaticPodConfig\nname: monitoring-probe\npod:\n  apiVersion: v1\n  kind: Pod\n  metadata:\n    name: probe\n    namespace: monitoring\n  spec: {}\n",
        ),
        // KubeClusterConfig and the API port
        case(
            "cluster name, endpoint and API port",
            &[
                ".cluster.clusterName",
                ".cluster.controlPlane",
                ".cluster.controlPlane.endpoint",
                ".cluster.controlPlane.localAPIServerPort",
            ],
            CP,
            "cluster:\n  clusterName: prod\n  controlPlane:\n    endpoint: https://vip.example:6443\n    localAPIServerPort: 7443\n",
            "apiVersion: v1alpha1\nkind: KubeClusterConfig\nclusterName: prod\nendpoint: https://vip.example:6443\n---\napiVersion: v1alpha1\nkind: KubeServiceAccountConfig\nissuer:\n  issuerURL: https://vip.example:6443\n---\napiVersion: v1alpha1\nkind: KubeAPIServerConfig\napiPort: 7443\n",
        )
        .conflict("cluster name is already set in the v1alpha1 config (.cluster.clusterName). Please remove it and use only the new KubeClusterConfig document to avoid conflicts")
        .check(|c| {
            let sa = find(c, "KubeServiceAccountConfig", "").unwrap();
            assert_eq!(sa["issuer"]["issuerURL"], "https://vip.example:6443");
            assert!(sa["issuer"]["privateKey"].as_str().unwrap().contains("PRIVATE KEY"));
        }),
        case(
            "endpoint and API port on a worker",
            &[".cluster.controlPlane.endpoint", ".cluster.controlPlane.localAPIServerPort"],
            Worker,
            "cluster:\n  controlPlane:\n    endpoint: https://vip.example:6443\n    localAPIServerPort: 7443\n",
            "apiVersion: v1alpha1\nkind: KubeClusterConfig\nendpoint: https://vip.example:6443\n",
        )
        .conflict("cluster endpoint is already set in the v1alpha1 config (.cluster.controlPlane.endpoint). Please remove it and use only the new KubeClusterConfig document to avoid conflicts")
        .warning(".cluster.controlPlane.localAPIServerPort has no effect on worker machines and is dropped: KubeAPIServerConfig is only allowed on control plane machines in Talos 1.14"),
        case(
            "API port alone",
            &[".cluster.controlPlane.localAPIServerPort"],
            CP,
            "cluster:\n  controlPlane:\n    localAPIServerPort: 7443\n",
            "apiVersion: v1alpha1\nkind: KubeAPIServerConfig\napiPort: 7443\n",
        )
        .conflict("kube-apiserver API port is already set in v1alpha1 config (.cluster.controlPlane.localAPIServerPort)"),
        // KubeNetworkConfig, the CNI
        case(
            "network",
            &[
                ".cluster.network",
                ".cluster.network.dnsDomain",
                ".cluster.network.podSubnets",
                ".cluster.network.serviceSubnets",
            ],
            Worker,
            "cluster:\n  network:\n    dnsDomain: k8s.internal\n    podSubnets: [10.200.0.0/16]\n    serviceSubnets: [10.201.0.0/16]\n",
            "apiVersion: v1alpha1\nkind: KubeNetworkConfig\ndnsDomain: k8s.internal\npodSubnets: [10.200.0.0/16]\nserviceSubnets: [10.201.0.0/16]\n",
        )
        .conflict("cluster network config is already set in the v1alpha1 config (.machine.cluster.network). Please remove it and use only the new KubeNetworkConfig document to avoid conflicts")
        .check(|c| assert_eq!(find(c, "KubeNetworkConfig", "").unwrap()["podSubnets"], json!(["10.200.0.0/16"]))),
        case(
            "a custom CNI",
            &[".cluster.network.cni", ".cluster.network.cni.name", ".cluster.network.cni.urls"],
            CP,
            "cluster:\n  network:\n    cni:\n      name: custom\n      urls: [https://x.io/cilium.yaml, https://x.io/hubble.yaml]\n",
            "apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: custom-cni\nurl: https://x.io/cilium.yaml\n---\napiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: custom-cni-1\nurl: https://x.io/hubble.yaml\n",
        )
        .conflict("cluster network config in v1alpha1 config (.machine.cluster.network) can't be used with KubeFlannelCNIConfig document, please remove it to avoid conflicts")
        .check(|c| {
            assert!(find(c, "KubeFlannelCNIConfig", "").is_none());
            assert_eq!(find(c, "KubeExternalManifestConfig", "custom-cni").unwrap()["url"], "https://x.io/cilium.yaml");
        }),
        case(
            "no CNI",
            &[".cluster.network.cni.name"],
            CP,
            "cluster:\n  network:\n    cni:\n      name: none\n",
            "apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n",
        )
        .check(|c| assert!(find(c, "KubeFlannelCNIConfig", "").is_none())),
        case(
            "flannel settings",
            &[
                ".cluster.network.cni.flannel",
                ".cluster.network.cni.flannel.extraArgs",
                ".cluster.network.cni.flannel.kubeNetworkPoliciesEnabled",
            ],
            CP,
            "cluster:\n  network:\n    cni:\n      name: flannel\n      flannel:\n        extraArgs: [--iface-can-reach=192.168.1.1]\n        kubeNetworkPoliciesEnabled: true\n",
            "apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\nbackendType: vxlan\nbackendPort: 4789\nextraArgs: [--iface-can-reach=192.168.1.1]\nkubeNetworkPoliciesEnabled: true\n",
        )
        .check(|c| assert_eq!(find(c, "KubeFlannelCNIConfig", "").unwrap()["extraArgs"], json!(["--iface-can-reach=192.168.1.1"]))),
        case(
            "a CNI on a worker does nothing",
            &[".cluster.network.cni"],
            Worker,
            "cluster:\n  network:\n    cni:\n      name: custom\n      urls: [https://x.io/cilium.yaml]\n",
            "",
        )
        .warning(".cluster.network.cni has no effect on worker machines and is dropped"),
        // KubeAPIServerConfig and its satellites
        case(
            "kube-apiserver",
            &[
                ".cluster.apiServer",
                ".cluster.apiServer.image",
                ".cluster.apiServer.extraArgs",
                ".cluster.apiServer.env",
                ".cluster.apiServer.resources",
                ".cluster.apiServer.certSANs",
                ".cluster.apiServer.admissionControl",
                ".cluster.apiServer.auditPolicy",
                ".cluster.apiServer.disablePodSecurityPolicy",
            ],
            CP,
            "cluster:\n  apiServer:\n    image: registry.k8s.io/kube-apiserver:v1.37.0\n    extraArgs:\n      audit-log-maxage: \"30\"\n    env:\n      GOGC: \"50\"\n    resources:\n      requests:\n        cpu: \"1\"\n        memory: 1Gi\n    certSANs: [api.example.com]\n    disablePodSecurityPolicy: true\n    admissionControl:\n      - name: PodSecurity\n        configuration:\n          defaults:\n            enforce: restricted\n    auditPolicy:\n      apiVersion: audit.k8s.io/v1\n      kind: Policy\n      rules:\n        - level: None\n",
            "apiVersion: v1alpha1\nkind: KubeAdmissionControlConfig\nname: PodSecurity\nconfiguration:\n  defaults:\n    enforce: restricted\n---\napiVersion: v1alpha1\nkind: KubeAuditPolicyConfig\nconfiguration:\n  apiVersion: audit.k8s.io/v1\n  kind: Policy\n  rules:\n    - level: None\n---\napiVersion: v1alpha1\nkind: KubeAPIServerConfig\nimage: registry.k8s.io/kube-apiserver:v1.37.0\nextraArgs:\n  audit-log-maxage: \"30\"\nenv:\n  GOGC: \"50\"\nresources:\n  requests:\n    cpu: \"1\"\n    memory: 1Gi\ncertExtraSANs: [api.example.com]\n",
        )
        .conflict("kube-apiserver config is already set in v1alpha1 config (.cluster.apiServer)")
        .warning(".cluster.apiServer.disablePodSecurityPolicy is dropped")
        .check(|c| {
            let ps = &find(c, "KubeAdmissionControlConfig", "PodSecurity").unwrap()["configuration"];
            assert_eq!(ps["defaults"]["enforce"], "restricted");
            assert_eq!(ps["defaults"]["warn"], "restricted");
            assert_eq!(ps["exemptions"]["namespaces"], json!(["kube-system"]));
            let audit = &find(c, "KubeAuditPolicyConfig", "").unwrap()["configuration"];
            assert_eq!(audit["rules"], json!([{"level": "None"}]));
        }),
        case(
            "admission control",
            &[".cluster.apiServer.admissionControl"],
            CP,
            "cluster:\n  apiServer:\n    admissionControl:\n      - name: EventRateLimit\n        configuration:\n          kind: Configuration\n",
            "apiVersion: v1alpha1\nkind: KubeAdmissionControlConfig\nname: EventRateLimit\nconfiguration:\n  kind: Configuration\n",
        )
        .conflict("admission control plugin config is already set in v1alpha1 config"),
        case(
            "audit policy",
            &[".cluster.apiServer.auditPolicy"],
            CP,
            "cluster:\n  apiServer:\n    auditPolicy:\n      rules: [{level: Request}]\n",
            "apiVersion: v1alpha1\nkind: KubeAuditPolicyConfig\nconfiguration:\n  rules: [{level: Request}]\n",
        )
        .conflict("audit policy config is already set in v1alpha1 config"),
        case(
            "a webhook authorizer after node and rbac",
            &[".cluster.apiServer.authorizationConfig"],
            CP,
            "cluster:\n  apiServer:\n    authorizationConfig:\n      - type: Webhook\n        name: wh\n        webhook:\n          timeout: 3s\n          subjectAccessReviewVersion: v1\n          failurePolicy: Deny\n          connectionInfo:\n            type: InClusterConfig\n",
            "apiVersion: v1alpha1\nkind: KubeAuthorizerConfig\nname: wh\ntype: Webhook\nwebhook:\n  timeout: 3s\n  subjectAccessReviewVersion: v1\n  failurePolicy: Deny\n  connectionInfo:\n    type: InClusterConfig\n",
        )
        .check(|c| assert_eq!(authorizers(c), ["node:Node", "rbac:RBAC", "wh:Webhook"])),
        case(
            "a webhook authorizer before node",
            &[".cluster.apiServer.authorizationConfig"],
            CP,
            "cluster:\n  apiServer:\n    authorizationConfig:\n      - type: Webhook\n        name: wh\n        webhook:\n          timeout: 3s\n      - type: Node\n        name: node\n",
            "apiVersion: v1alpha1\nkind: KubeAuthorizerConfig\nname: node\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeAuthorizerConfig\nname: rbac\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeAuthorizerConfig\nname: wh\ntype: Webhook\nwebhook:\n  timeout: 3s\n---\napiVersion: v1alpha1\nkind: KubeAuthorizerConfig\nname: rbac\ntype: RBAC\n---\napiVersion: v1alpha1\nkind: KubeAuthorizerConfig\nname: node\ntype: Node\n",
        )
        // Legacy order (InjectDefaultAuthorizers): the list, RBAC inserted second.
        .check(|c| assert_eq!(authorizers(c), ["wh:Webhook", "rbac:RBAC", "node:Node"])),
        // The other control-plane components
        case(
            "controller manager",
            &[
                ".cluster.controllerManager",
                ".cluster.controllerManager.image",
                ".cluster.controllerManager.extraArgs",
                ".cluster.controllerManager.env",
                ".cluster.controllerManager.resources",
            ],
            CP,
            "cluster:\n  controllerManager:\n    image: registry.k8s.io/kube-controller-manager:v1.37.0\n    extraArgs:\n      node-cidr-mask-size-ipv4: \"25\"\n    env:\n      A: b\n    resources:\n      limits:\n        memory: 1Gi\n",
            "apiVersion: v1alpha1\nkind: KubeControllerManagerConfig\nimage: registry.k8s.io/kube-controller-manager:v1.37.0\nextraArgs:\n  node-cidr-mask-size-ipv4: \"25\"\nenv:\n  A: b\nresources:\n  limits:\n    memory: 1Gi\n",
        )
        .conflict("kube-controller-manager config is already set in v1alpha1 config (.cluster.controllerManager)"),
        case(
            "scheduler",
            &[
                ".cluster.scheduler",
                ".cluster.scheduler.image",
                ".cluster.scheduler.extraArgs",
                ".cluster.scheduler.env",
                ".cluster.scheduler.resources",
                ".cluster.scheduler.config",
            ],
            CP,
            "cluster:\n  scheduler:\n    image: registry.k8s.io/kube-scheduler:v1.37.0\n    extraArgs:\n      v: \"2\"\n    env:\n      A: b\n    resources:\n      requests:\n        cpu: 100m\n    config:\n      profiles:\n        - schedulerName: default-scheduler\n",
            "apiVersion: v1alpha1\nkind: KubeSchedulerConfig\nimage: registry.k8s.io/kube-scheduler:v1.37.0\nextraArgs:\n  v: \"2\"\nenv:\n  A: b\nresources:\n  requests:\n    cpu: 100m\nconfig:\n  profiles:\n    - schedulerName: default-scheduler\n",
        )
        .conflict("kube-scheduler config is already set in v1alpha1 config (.cluster.scheduler)"),
        case(
            "disabled controller manager, enabled scheduler",
            &[
                ".machine.controlPlane",
                ".machine.controlPlane.controllerManager",
                ".machine.controlPlane.controllerManager.disabled",
                ".machine.controlPlane.scheduler",
                ".machine.controlPlane.scheduler.disabled",
            ],
            CP,
            "machine:\n  controlPlane:\n    controllerManager:\n      disabled: true\n    scheduler:\n      disabled: false\n",
            "apiVersion: v1alpha1\nkind: KubeControllerManagerConfig\nenabled: false\n---\napiVersion: v1alpha1\nkind: KubeSchedulerConfig\nenabled: true\n",
        )
        .conflict("kube-controller-manager config is already set in v1alpha1 config (.machine.controlplane.controllerManager)"),
        case(
            "disabled scheduler",
            &[".machine.controlPlane.scheduler.disabled"],
            CP,
            "machine:\n  controlPlane:\n    scheduler:\n      disabled: true\n",
            "apiVersion: v1alpha1\nkind: KubeSchedulerConfig\nenabled: false\n",
        )
        .conflict("kube-scheduler config is already set in v1alpha1 config (.machine.controlplane.scheduler)"),
        case(
            "kube-proxy",
            &[
                ".cluster.proxy",
                ".cluster.proxy.disabled",
                ".cluster.proxy.image",
                ".cluster.proxy.mode",
                ".cluster.proxy.extraArgs",
            ],
            CP,
            "cluster:\n  proxy:\n    disabled: false\n    image: registry.k8s.io/kube-proxy:v1.37.0\n    mode: ipvs\n    extraArgs:\n      metrics-bind-address: 0.0.0.0:10249\n      conntrack-max-per-core: 0\n      feature-gates: A=true,B=false\n      ipvs-strict-arp: \"true\"\n      hostname-override: node-1\n      v: \"2\"\n",
            "apiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: true\nimage: registry.k8s.io/kube-proxy:v1.37.0\nmode: ipvs\nconfig:\n  metricsBindAddress: 0.0.0.0:10249\n  conntrack:\n    maxPerCore: 0\n  featureGates:\n    A: true\n    B: false\n  ipvs:\n    strictARP: true\nextraArgs:\n  hostname-override: node-1\n  v: \"2\"\n",
        )
        .conflict("cluster proxy config in v1alpha1 config (.machine.cluster.proxy) can't be used with KubeProxyConfig document, please remove it to avoid conflicts")
        .warning("these flags may not work as expected: v;"),
        case(
            "kube-proxy disabled",
            &[".cluster.proxy.disabled"],
            CP,
            "cluster:\n  proxy:\n    disabled: true\n",
            "apiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: false\n",
        ),
        case(
            "CoreDNS",
            &[".cluster.coreDNS", ".cluster.coreDNS.disabled", ".cluster.coreDNS.image"],
            CP,
            "cluster:\n  coreDNS:\n    disabled: true\n    image: registry.k8s.io/coredns/coredns:v1.12.0\n",
            "apiVersion: v1alpha1\nkind: KubeCoreDNSConfig\nenabled: false\nimage: registry.k8s.io/coredns/coredns:v1.12.0\n",
        )
        .conflict("CoreDNS config is already set in v1alpha1 config (.cluster.coreDNS)"),
        case(
            "control-plane components on a worker do nothing",
            &[
                ".cluster.apiServer",
                ".cluster.controllerManager",
                ".cluster.scheduler",
                ".cluster.proxy",
                ".cluster.coreDNS",
                ".machine.controlPlane",
            ],
            Worker,
            "machine:\n  controlPlane:\n    scheduler:\n      disabled: true\ncluster:\n  apiServer:\n    image: a\n  controllerManager:\n    image: b\n  scheduler:\n    image: c\n  proxy:\n    image: d\n  coreDNS:\n    disabled: true\n",
            "",
        )
        .warning(".cluster.apiServer has no effect on worker machines and is dropped: KubeAPIServerConfig (with KubeAdmissionControlConfig, KubeAuditPolicyConfig and KubeAuthorizerConfig) is only allowed on control plane machines in Talos 1.14"),
        // CAs, keys and etcd encryption
        case(
            "Kubernetes CA on a control plane",
            &[".cluster.ca", ".cluster.ca.crt", ".cluster.ca.key"],
            CP,
            format!("cluster:\n  ca:\n    crt: {}\n    key: {}\n", b64(CERT), b64(KEY)),
            format!("apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\nissuingCA:\n  cert: {CERT:?}\n  key: {KEY:?}\n"),
        )
        .conflict("kube-apiserver CA is already set in v1alpha1 config (.cluster.ca)")
        .check(|c| assert_eq!(find(c, "KubeAPIServerCAConfig", "").unwrap()["issuingCA"], json!({"cert": CERT, "key": KEY}))),
        case(
            "Kubernetes CA and accepted CAs on a worker",
            &[".cluster.ca.crt", ".cluster.acceptedCAs"],
            Worker,
            format!("cluster:\n  ca:\n    crt: {}\n    key: \"\"\n  acceptedCAs:\n    - crt: {}\n", b64(CERT), b64(CERT2)),
            format!("apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\nacceptedCAs:\n  - {CERT:?}\n  - {CERT2:?}\n"),
        )
        .conflict("kube-apiserver CA is already set in v1alpha1 config (.cluster.ca)")
        .warning(".cluster.ca.crt replaces KubeAPIServerCAConfig on this worker")
        .check(|c| assert_eq!(find(c, "KubeAPIServerCAConfig", "").unwrap()["acceptedCAs"], json!([CERT, CERT2]))),
        case(
            "accepted CAs on a control plane",
            &[".cluster.acceptedCAs"],
            CP,
            format!("cluster:\n  acceptedCAs:\n    - crt: {}\n", b64(CERT2)),
            format!("apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\nacceptedCAs:\n  - {CERT2:?}\n"),
        )
        .check(|c| {
            let ca = find(c, "KubeAPIServerCAConfig", "").unwrap();
            assert_eq!(ca["acceptedCAs"], json!([CERT2]));
            assert!(ca["issuingCA"]["key"].as_str().unwrap().contains("PRIVATE KEY"));
        }),
        case(
            "aggregator CA",
            &[".cluster.aggregatorCA", ".cluster.aggregatorCA.crt", ".cluster.aggregatorCA.key"],
            CP,
            format!("cluster:\n  aggregatorCA:\n    crt: {}\n    key: {}\n", b64(CERT), b64(KEY)),
            format!("apiVersion: v1alpha1\nkind: KubeAggregatorCAConfig\nissuingCA:\n  cert: {CERT:?}\n  key: {KEY:?}\n"),
        )
        .conflict("kube-apiserver aggregator CA is already set in v1alpha1 config (.cluster.aggregatorCA), please remove it and use the new KubeAggregatorCAConfig document instead"),
        case(
            "service account key",
            &[".cluster.serviceAccount", ".cluster.serviceAccount.key"],
            CP,
            format!("cluster:\n  serviceAccount:\n    key: {}\n", b64(KEY)),
            format!("apiVersion: v1alpha1\nkind: KubeServiceAccountConfig\nissuer:\n  privateKey: {KEY:?}\n"),
        )
        .conflict("service account is already set in v1alpha1 config (.cluster.serviceAccount)")
        .check(|c| {
            let issuer = &find(c, "KubeServiceAccountConfig", "").unwrap()["issuer"];
            assert_eq!(issuer["privateKey"], KEY);
            assert_eq!(issuer["issuerURL"], "https://c:6443");
        }),
        case(
            "secretbox encryption",
            &[".cluster.secretboxEncryptionSecret"],
            CP,
            format!("cluster:\n  secretboxEncryptionSecret: {SECRETBOX}\n"),
            format!("apiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\nconfig:\n  resources:\n    - resources: [secrets]\n      providers:\n        - secretbox:\n            keys:\n              - name: key2\n                secret: {SECRETBOX}\n        - identity: {{}}\n"),
        )
        .conflict("etcd encryption config is already set in v1alpha1 config")
        .warning(".cluster.secretboxEncryptionSecret replaces KubeEtcdEncryptionConfig whole: its providers are now secretbox, identity")
        .check(|c| {
            let resources = &find(c, "KubeEtcdEncryptionConfig", "").unwrap()["config"]["resources"];
            assert_eq!(resources.as_array().unwrap().len(), 1);
            assert_eq!(resources[0]["providers"][0]["secretbox"]["keys"][0]["secret"], SECRETBOX);
        }),
        case(
            "secretbox and AES-CBC encryption",
            &[".cluster.secretboxEncryptionSecret", ".cluster.aescbcEncryptionSecret"],
            CP,
            format!("cluster:\n  secretboxEncryptionSecret: {SECRETBOX}\n  aescbcEncryptionSecret: {AESCBC}\n"),
            format!("apiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\nconfig:\n  resources:\n    - resources: [secrets]\n      providers:\n        - secretbox:\n            keys:\n              - name: key2\n                secret: {SECRETBOX}\n        - aescbc:\n            keys:\n              - name: key1\n                secret: {AESCBC}\n        - identity: {{}}\n"),
        )
        .conflict("etcd encryption config is already set in v1alpha1 config"),
        case(
            "control-plane keys on a worker do nothing",
            &[".cluster.aggregatorCA", ".cluster.serviceAccount", ".cluster.secretboxEncryptionSecret", ".cluster.aescbcEncryptionSecret"],
            Worker,
            format!("cluster:\n  aggregatorCA:\n    crt: {}\n  serviceAccount:\n    key: {}\n  secretboxEncryptionSecret: {SECRETBOX}\n  aescbcEncryptionSecret: {AESCBC}\n", b64(CERT), b64(KEY)),
            "",
        )
        .warning(".cluster.serviceAccount has no effect on worker machines and is dropped: KubeServiceAccountConfig is only allowed on control plane machines in Talos 1.14"),
        // Manifests
        case(
            "inline manifests",
            &[".cluster.inlineManifests"],
            CP,
            "cluster:\n  inlineManifests:\n    - name: ns-ci\n      contents: |\n\n        apiVersion: v1\n        kind: Namespace\n        metadata:\n          name: ci\n",
            "apiVersion: v1alpha1\nkind: KubeInlineManifestConfig\nname: ns-ci\nmanifest: |\n  apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: ci\n",
        ),
        case(
            "extra manifests with headers",
            &[".cluster.extraManifests", ".cluster.extraManifestHeaders"],
            Worker,
            "cluster:\n  extraManifests:\n    - https://example.com/deploy/app.yaml?token=abc\n  extraManifestHeaders:\n    Authorization: Bearer t0k3n\n",
            format!(
                "apiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: example-com-app-yaml-{}\nurl: https://example.com/deploy/app.yaml?token=abc\nheaders:\n  Authorization: Bearer t0k3n\n",
                &hex::encode(Sha256::digest(b"https://example.com/deploy/app.yaml?token=abc"))[..6]
            ),
        ),
        case(
            "headers on the custom CNI",
            &[".cluster.extraManifestHeaders", ".cluster.network.cni.urls"],
            CP,
            "cluster:\n  extraManifestHeaders:\n    X-Api: k\n  network:\n    cni:\n      name: custom\n      urls: [https://x.io/cilium.yaml]\n",
            "apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n---\napiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: custom-cni\nurl: https://x.io/cilium.yaml\nheaders:\n  X-Api: k\n",
        ),
        // Discovery
        case(
            "discovery service and identity",
            &[
                ".cluster.discovery",
                ".cluster.discovery.enabled",
                ".cluster.discovery.registries",
                ".cluster.discovery.registries.service",
                ".cluster.discovery.registries.service.endpoint",
                ".cluster.discovery.registries.kubernetes",
                ".cluster.discovery.registries.kubernetes.disabled",
                ".cluster.id",
                ".cluster.secret",
            ],
            Worker,
            "cluster:\n  id: 0raF93qnkMvF-FZNuvyGozXNdLiT2FOWSlyBaW4PR-w=\n  secret: pofHbABZq7VXuObsdLdy/bHmz6hlMHZ3p8+6WKrv1ic=\n  discovery:\n    enabled: true\n    registries:\n      kubernetes:\n        disabled: true\n      service:\n        endpoint: https://disco.example.com/\n",
            "apiVersion: v1alpha1\nkind: DiscoveryServiceConfig\nname: default\nendpoint: https://disco.example.com/\n---\napiVersion: v1alpha1\nkind: DiscoveryIdentityConfig\nclusterID: 0raF93qnkMvF-FZNuvyGozXNdLiT2FOWSlyBaW4PR-w=\nclusterSecret: pofHbABZq7VXuObsdLdy/bHmz6hlMHZ3p8+6WKrv1ic=\n",
        )
        .conflict("discovery service is already configured in .cluster.discovery of the v1alpha1 config"),
        case(
            "cluster identity",
            &[".cluster.id"],
            CP,
            "cluster:\n  id: abc\n",
            "apiVersion: v1alpha1\nkind: DiscoveryIdentityConfig\nclusterID: abc\n",
        )
        .conflict("cluster identity is already configured in .cluster.id/.cluster.secret of the v1alpha1 config"),
        case(
            "discovery disabled",
            &[".cluster.discovery.enabled"],
            CP,
            "cluster:\n  discovery:\n    enabled: false\n",
            "apiVersion: v1alpha1\nkind: DiscoveryServiceConfig\nname: default\n$patch: delete\n",
        )
        .check(|c| assert!(find(c, "DiscoveryServiceConfig", "default").is_none())),
        case(
            "discovery service registry disabled",
            &[".cluster.discovery.registries.service.disabled"],
            Worker,
            "cluster:\n  discovery:\n    registries:\n      service:\n        disabled: true\n",
            "apiVersion: v1alpha1\nkind: DiscoveryServiceConfig\nname: default\n$patch: delete\n",
        ),
        // Features
        case(
            "KubePrism on another port",
            &[".machine.features.kubePrism", ".machine.features.kubePrism.enabled", ".machine.features.kubePrism.port"],
            Worker,
            "machine:\n  features:\n    kubePrism:\n      enabled: true\n      port: 7446\n",
            "apiVersion: v1alpha1\nkind: KubePrismConfig\nport: 7446\n",
        )
        .conflict("KubePrism config in v1alpha1 config (.machine.features.kubePrism) can't be used with KubePrismConfig document, please remove it to avoid conflicts"),
        case(
            "KubePrism disabled",
            &[".machine.features.kubePrism.enabled"],
            CP,
            "machine:\n  features:\n    kubePrism:\n      enabled: false\n",
            "apiVersion: v1alpha1\nkind: KubePrismConfig\n$patch: delete\n",
        )
        .check(|c| assert!(find(c, "KubePrismConfig", "").is_none())),
        case(
            "Talos API access from Kubernetes",
            &[
                ".machine.features.kubernetesTalosAPIAccess",
                ".machine.features.kubernetesTalosAPIAccess.enabled",
                ".machine.features.kubernetesTalosAPIAccess.allowedRoles",
                ".machine.features.kubernetesTalosAPIAccess.allowedKubernetesNamespaces",
            ],
            CP,
            "machine:\n  features:\n    kubernetesTalosAPIAccess:\n      enabled: true\n      allowedRoles: [\"os:reader\"]\n      allowedKubernetesNamespaces: [kube-system]\n",
            "apiVersion: v1alpha1\nkind: KubeTalosAPIAccessConfig\nallowedRoles: [\"os:reader\"]\nallowedKubernetesNamespaces: [kube-system]\n",
        ),
        case(
            "host DNS",
            &[
                ".machine.features.hostDNS",
                ".machine.features.hostDNS.enabled",
                ".machine.features.hostDNS.forwardKubeDNSToHost",
                ".machine.features.hostDNS.resolveMemberNames",
            ],
            Worker,
            "machine:\n  features:\n    hostDNS:\n      enabled: true\n      forwardKubeDNSToHost: false\n      resolveMemberNames: true\n",
            "apiVersion: v1alpha1\nkind: ResolverConfig\nhostDNS:\n  enabled: true\n  forwardKubeDNSToHost: false\n  resolveMemberNames: true\n",
        )
        .conflict(".machine.features.hostDNS is already set in v1alpha1 config"),
        case(
            "image cache",
            &[".machine.features.imageCache", ".machine.features.imageCache.localEnabled"],
            CP,
            "machine:\n  features:\n    imageCache:\n      localEnabled: true\n",
            "apiVersion: v1alpha1\nkind: ImageCacheConfig\nlocal:\n  enabled: true\n",
        ),
        // Host settings
        case(
            "sysctls and sysfs",
            &[".machine.sysctls", ".machine.sysfs"],
            Worker,
            "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n  sysfs:\n    devices.system.cpu.cpu0.cpufreq.scaling_governor: performance\n",
            "apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  net.core.somaxconn: \"65535\"\n---\napiVersion: v1alpha1\nkind: SysfsConfig\nparams:\n  devices.system.cpu.cpu0.cpufreq.scaling_governor: performance\n",
        ),
        case(
            "kernel modules",
            &[
                ".machine.kernel",
                ".machine.kernel.modules",
                ".machine.kernel.modules.name",
                ".machine.kernel.modules.parameters",
            ],
            CP,
            "machine:\n  kernel:\n    modules:\n      - name: br_netfilter\n        parameters: [nf_conntrack_max=131072]\n      - name: drbd\n",
            "apiVersion: v1alpha1\nkind: KernelModuleConfig\nname: br_netfilter\nparameters: [nf_conntrack_max=131072]\n---\napiVersion: v1alpha1\nkind: KernelModuleConfig\nname: drbd\n",
        ),
        case(
            "udev rules",
            &[".machine.udev", ".machine.udev.rules"],
            Worker,
            "machine:\n  udev:\n    rules:\n      - SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", GROUP=\"44\", MODE=\"0660\"\n",
            "apiVersion: v1alpha1\nkind: UdevRulesConfig\nrules:\n  - SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", GROUP=\"44\", MODE=\"0660\"\n",
        ),
        case(
            "base runtime spec overrides",
            &[".machine.baseRuntimeSpecOverrides"],
            CP,
            "machine:\n  baseRuntimeSpecOverrides:\n    process:\n      rlimits:\n        - type: RLIMIT_NOFILE\n          hard: 1024\n          soft: 1024\n",
            "apiVersion: v1alpha1\nkind: CRIBaseRuntimeSpecConfig\noverrides:\n  process:\n    rlimits:\n      - type: RLIMIT_NOFILE\n        hard: 1024\n        soft: 1024\n",
        ),
        case(
            "machine files",
            &[".machine.files"],
            Worker,
            "machine:\n  files:\n    - path: /etc/cri/conf.d/20-customization.part\n      op: create\n      permissions: 0o644\n      content: |\n        [metrics]\n          address = \"0.0.0.0:11234\"\n    - path: /etc/nfsmount.conf\n      op: overwrite\n      permissions: 0o600\n      content: \"[NFSMount_Global_Options]\\n\"\n    - path: /var/etc/motd\n      op: create\n      permissions: 0o644\n      content: hello\n    - path: /etc/ssh_banner\n      op: append\n      content: more\n",
            "machine:\n  files:\n    - path: /var/etc/motd\n      op: create\n      permissions: 0o644\n      content: hello\n    - path: /etc/ssh_banner\n      op: append\n      content: more\n---\napiVersion: v1alpha1\nkind: CRICustomizationConfig\nname: legacy-customization\ncontent: |\n  [metrics]\n    address = \"0.0.0.0:11234\"\n---\napiVersion: v1alpha1\nkind: EtcFileConfig\nname: nfsmount.conf\nmode: 0o600\ncontents: \"[NFSMount_Global_Options]\\n\"\n",
        )
        .warning(".machine.files[2] stays in .machine.files")
        .warning(".machine.files[3] stays in .machine.files: EtcFileConfig replaces a whole file")
        .check(|c| {
            let yaml = c.to_yaml_with(ferro_talos_config::normalize::Rules::V1_14);
            assert!(yaml.contains("kind: EtcFileConfig\nname: nfsmount.conf\nmode: 0o600\n"), "{yaml}");
        }),
        // UnattendedInstallConfig
        case(
            "install disk, image and wipe",
            &[
                ".machine.install",
                ".machine.install.disk",
                ".machine.install.image",
                ".machine.install.wipe",
                ".machine.install.grubUseUKICmdline",
                ".machine.install.legacyBIOSSupport",
            ],
            CP,
            "machine:\n  install:\n    disk: /dev/nvme0n1\n    image: factory.talos.dev/metal-installer/abc:v1.14.0\n    wipe: true\n    grubUseUKICmdline: true\n    legacyBIOSSupport: false\n",
            "apiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n  image: factory.talos.dev/metal-installer/abc:v1.14.0\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == \"/dev/nvme0n1\"\n  wipe: true\n",
        )
        .conflict("UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)"),
        case(
            "install disk selector",
            &[".machine.install.diskSelector", ".machine.install.bootloader"],
            Worker,
            "machine:\n  install:\n    diskSelector:\n      size: \">= 100GB\"\n      type: ssd\n    bootloader: true\n",
            "apiVersion: v1alpha1\nkind: UnattendedInstallConfig\nprovisioning:\n  diskSelector:\n    match: \"disk.size >= 100000000000u && disk.transport != \\\"\\\" && !disk.rotational && !disk.readonly &&\\n!disk.cdrom\"\n  wipe: false\n",
        )
        .warning(".machine.install.bootloader is dropped"),
    ]
}

/// `name:type` of the config's KubeAuthorizerConfig documents, in order.
fn authorizers(c: &MachineConfig) -> Vec<String> {
    c.docs
        .iter()
        .filter(|d| DocId::of(d).kind == "KubeAuthorizerConfig")
        .map(|d| {
            format!(
                "{}:{}",
                d["name"].as_str().unwrap(),
                d["type"].as_str().unwrap()
            )
        })
        .collect()
}

fn run(case: &Case) {
    let what = case.name;
    let conv = convert(&case.old, case.machine).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = yaml_docs(&case.want);
    assert_eq!(
        conv.docs,
        want,
        "{what}: converted documents differ\n got: {}\nwant: {}",
        serde_json::to_string(&conv.docs).unwrap(),
        serde_json::to_string(&want).unwrap()
    );
    for doc in &conv.docs {
        known_keys::check_document(doc).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    for w in &case.warnings {
        assert!(
            conv.warnings.iter().any(|x| x.contains(w)),
            "{what}: no warning {w:?} in {:?}",
            conv.warnings
        );
    }
    for field in case.fields {
        assert!(
            // The field itself, a field below it, or the section it moved along with.
            conv.converted
                .iter()
                .map(|c| without_indexes(&c.from))
                .any(|from| from.starts_with(field) || field.starts_with(&format!("{from}.")))
                || conv.warnings.iter().any(|w| w.contains(field)),
            "{what}: {field} is neither converted nor warned about: {:?} {:?}",
            conv.converted,
            conv.warnings
        );
    }

    let mut cfg = base(case.machine);
    cfg.apply_patch(&conv.into_patch())
        .unwrap_or_else(|e| panic!("{what}: the converted patch does not apply: {e:#}"));
    if let Err(errors) = validate::validate(&cfg) {
        panic!("{what}: the patched config does not validate: {errors:?}");
    }
    if let Some(check) = case.check {
        check(&cfg);
    }

    if let Some(text) = case.conflict {
        let mut unconverted = base(case.machine);
        unconverted
            .apply_patch(&Patch::parse(&case.old).unwrap())
            .unwrap_or_else(|e| panic!("{what}: the old patch does not apply: {e:#}"));
        let errors = validate::validate(&unconverted).unwrap_err();
        assert!(
            errors.iter().any(|e| e == text),
            "{what}: no {text:?} in {errors:?}"
        );
    }
}

#[test]
fn every_case_converts_applies_and_validates() {
    for case in cases() {
        run(&case);
    }
}

/// A converted path as the deprecation table writes it: `.machine.kernel.modules[0].name` is a
/// conversion of `.machine.kernel.modules.name`.
fn without_indexes(path: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => in_index = true,
            ']' => in_index = false,
            _ if !in_index => out.push(c),
            _ => {}
        }
    }
    out
}

/// Every row of the deprecation table has a case that converts it, drops it with a warning, or
/// refuses it naming it.
#[test]
fn every_deprecated_field_has_a_case() {
    let mut covered: Vec<&str> = cases()
        .iter()
        .flat_map(|c| c.fields.iter().copied())
        .collect();
    covered.extend(refusals().iter().map(|(field, _, _, _)| *field));
    for field in DEPRECATED_FIELDS {
        assert!(covered.contains(&field.path), "no case for {}", field.path);
    }
}

/// (field, machine, old patch, what the refusal must say after the field's path)
fn refusals() -> Vec<(&'static str, MachineType, String, &'static str)> {
    vec![
        (
            ".machine.kubelet.extraMounts",
            Worker,
            "machine:\n  kubelet:\n    extraMounts:\n      - source: /var/opt\n        destination: /var/opt\n        type: bind\n".into(),
            ": KubeletConfig has no extra mounts",
        ),
        (
            ".machine.kubelet.disableManifestsDirectory",
            CP,
            "machine:\n  kubelet:\n    disableManifestsDirectory: false\n".into(),
            ": KubeletConfig always disables the kubelet manifests directory",
        ),
        (
            ".machine.kubelet.extraConfig",
            CP,
            "machine:\n  kubelet:\n    extraConfig:\n      port: 10251\n".into(),
            ": kubelet configuration field \"port\" can't be overridden",
        ),
        (
            ".machine.kubelet",
            CP,
            "machine:\n  kubelet:\n    $patch: delete\n".into(),
            ": a `$patch: delete` of the whole section has no same-effect form",
        ),
        (
            ".machine.nodeLabels",
            CP,
            "machine:\n  nodeLabels:\n    $patch: delete\n".into(),
            ": a `$patch: delete` of this field has no same-effect form in Talos 1.14; set KubeNodeConfig.labels",
        ),
        (
            ".cluster.apiServer.extraVolumes",
            CP,
            "cluster:\n  apiServer:\n    extraVolumes:\n      - hostPath: /var/lib/x\n        mountPath: /x\n".into(),
            ": KubeAPIServerConfig has no extra volumes",
        ),
        (
            ".cluster.apiServer.extraArgs",
            CP,
            "cluster:\n  apiServer:\n    extraArgs:\n      oidc-issuer-url: https://id.example.com\n".into(),
            ".oidc-issuer-url: kube-apiserver extra argument \"oidc-issuer-url\" is not allowed in KubeAPIServerConfig; configure OIDC as a jwt authenticator in a KubeAuthenticationConfig document",
        ),
        (
            ".cluster.controllerManager.extraVolumes",
            CP,
            "cluster:\n  controllerManager:\n    extraVolumes:\n      - hostPath: /x\n        mountPath: /x\n".into(),
            ": KubeControllerManagerConfig has no extra volumes",
        ),
        (
            ".cluster.scheduler.extraVolumes",
            CP,
            "cluster:\n  scheduler:\n    extraVolumes:\n      - hostPath: /x\n        mountPath: /x\n".into(),
            ": KubeSchedulerConfig has no extra volumes",
        ),
        (
            ".cluster.discovery.registries.kubernetes.disabled",
            Worker,
            "cluster:\n  discovery:\n    registries:\n      kubernetes:\n        disabled: false\n".into(),
            ": the Kubernetes discovery registry has no Talos 1.14 document",
        ),
        (
            ".machine.install.extraKernelArgs",
            CP,
            "machine:\n  install:\n    extraKernelArgs: [console=ttyS0]\n".into(),
            ": UnattendedInstallConfig has no kernel arguments",
        ),
        (
            ".machine.install.extensions",
            CP,
            "machine:\n  install:\n    extensions:\n      - image: ghcr.io/siderolabs/gvisor:20231214.0-v1.14.0\n".into(),
            ": UnattendedInstallConfig has no extensions",
        ),
        (
            ".machine.install.legacyBIOSSupport",
            Worker,
            "machine:\n  install:\n    legacyBIOSSupport: true\n".into(),
            ": UnattendedInstallConfig installs without legacy BIOS support",
        ),
        (
            ".machine.install.grubUseUKICmdline",
            Worker,
            "machine:\n  install:\n    grubUseUKICmdline: false\n".into(),
            ": UnattendedInstallConfig always uses the UKI command line",
        ),
        (
            ".machine.install.diskSelector",
            CP,
            "machine:\n  install:\n    diskSelector:\n      name: /dev/sda\n".into(),
            ".name: selector on name is not supported",
        ),
        (
            ".cluster.inlineManifests",
            CP,
            "cluster:\n  inlineManifests:\n    - name: My Manifest\n      contents: x\n".into(),
            "[0].name: manifest name \"My Manifest\" is not a valid DNS-1123 subdomain",
        ),
        (
            ".cluster.extraManifestHeaders",
            CP,
            "cluster:\n  extraManifestHeaders:\n    Authorization: Bearer x\n".into(),
            ": in Talos 1.14 each KubeExternalManifestConfig document carries its own headers",
        ),
        (
            ".machine.features.kubernetesTalosAPIAccess.enabled",
            Worker,
            "machine:\n  features:\n    kubernetesTalosAPIAccess:\n      enabled: true\n".into(),
            ": feature Kubernetes Talos API Access can only be enabled on control plane machines",
        ),
        (
            ".machine.files",
            Worker,
            "machine:\n  files:\n    - path: /etc/kubernetes/manifests/pod.yaml\n      op: create\n      content: x\n".into(),
            "[0]: KubeletConfig disables the kubelet manifests directory",
        ),
        (
            ".machine.files",
            Worker,
            "machine:\n  files:\n    - path: /etc/hosts\n      op: overwrite\n      content: x\n".into(),
            "[0].path: user etc file \"hosts\" is managed by Talos",
        ),
        (
            ".cluster.ca.key",
            Worker,
            format!("cluster:\n  ca:\n    crt: {}\n    key: {}\n", b64(CERT), b64(KEY)),
            ": issuing Kubernetes API CA key is not allowed on non-controlplane nodes",
        ),
        (
            ".cluster.ca.crt",
            CP,
            "cluster:\n  ca:\n    crt: not base64!\n".into(),
            ": expected base64 of a PEM block",
        ),
        (
            ".cluster.network.cni.name",
            CP,
            "cluster:\n  network:\n    cni:\n      name: calico\n".into(),
            ": cni name should be one of [\"flannel\", \"custom\", \"none\"], got \"calico\"",
        ),
        (
            ".cluster.proxy",
            CP,
            "cluster:\n  proxy:\n    $patch: delete\n".into(),
            ": a `$patch: delete` of the whole section has no same-effect form",
        ),
    ]
}

#[test]
fn refusals_name_the_field_and_what_to_write_instead() {
    for (field, machine, old, says) in refusals() {
        let e = convert(&old, machine).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("cannot convert the patch to the Talos 1.14 documents: "),
            "{text}"
        );
        let wanted = format!("{field}{says}");
        assert!(
            e.refusals
                .iter()
                .any(|r| r.to_string().starts_with(&wanted)),
            "{field}: no refusal starting {wanted:?} in {text}"
        );
        // Refusals also cover what the deprecation table calls NoEquivalent.
        if let Some(row) = ferro_talos_config::deprecations::lookup(field)
            && let Replacement::NoEquivalent(_) = row.replacement
        {
            assert!(row.message().contains("has no equivalent"));
        }
    }
}

#[test]
fn all_refusals_of_a_patch_are_reported_together() {
    let e = convert(
        "machine:\n  kubelet:\n    extraMounts: [{source: /a, destination: /a}]\n  install:\n    extraKernelArgs: [a=b]\ncluster:\n  apiServer:\n    extraVolumes: [{hostPath: /x, mountPath: /x}]\n",
        CP,
    )
    .unwrap_err();
    let paths: Vec<&str> = e.refusals.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            ".machine.kubelet.extraMounts",
            ".cluster.apiServer.extraVolumes",
            ".machine.install.extraKernelArgs"
        ]
    );
}

#[test]
fn a_worker_drops_control_plane_only_settings_with_a_warning() {
    let old = format!(
        "machine:\n  nodeLabels:\n    rack: r1\n  features:\n    kubernetesTalosAPIAccess:\n      enabled: false\ncluster:\n  allowSchedulingOnControlPlanes: true\n  controlPlane:\n    localAPIServerPort: 7443\n  apiServer:\n    certSANs: [a]\n  network:\n    dnsDomain: k8s.internal\n    cni:\n      name: none\n  aggregatorCA:\n    crt: {}\n  secretboxEncryptionSecret: {SECRETBOX}\n",
        b64(CERT)
    );
    let conv = convert(&old, Worker).unwrap();
    // What a worker uses stays; what only control planes use is gone.
    let kinds: Vec<String> = conv.docs.iter().map(|d| DocId::of(d).kind).collect();
    assert_eq!(kinds, ["KubeNodeConfig", "KubeNetworkConfig"]);
    for path in [
        ".cluster.allowSchedulingOnControlPlanes",
        ".cluster.controlPlane.localAPIServerPort",
        ".cluster.apiServer",
        ".cluster.network.cni",
        ".cluster.aggregatorCA",
        ".cluster.secretboxEncryptionSecret",
        ".machine.features.kubernetesTalosAPIAccess",
    ] {
        assert!(
            conv.warnings
                .iter()
                .any(|w| w.starts_with(path) && w.contains("dropped")),
            "no drop warning for {path}: {:?}",
            conv.warnings
        );
    }
    let mut cfg = base(Worker);
    cfg.apply_patch(&conv.into_patch()).unwrap();
    assert_eq!(validate::validate(&cfg), Ok(vec![]));
    // The same settings written as 1.14 documents directly would be refused on a worker.
    cfg.apply_patch(&Patch::parse("apiVersion: v1alpha1\nkind: KubeAPIServerConfig\ncertExtraSANs: [a]\n---\napiVersion: v1alpha1\nkind: KubeAggregatorCAConfig\nissuingCA:\n  cert: x\n").unwrap())
        .unwrap();
    assert_eq!(
        validate::validate(&cfg).unwrap_err(),
        [
            "the following document kinds are only allowed on control plane machines: [KubeAPIServerConfig KubeAggregatorCAConfig]"
        ]
    );
}

#[test]
fn no_secret_reaches_errors_warnings_records_or_debug() {
    let secrets = [
        "s3cr3t-t0ken-value",
        "Bearer t0k3n-s3cr3t",
        "inline-manifest-s3cr3t",
        "file-content-s3cr3t",
        "credential-s3cr3t",
        "cluster-secret-s3cr3t",
    ];
    let key_b64 = b64(KEY);
    let patch = |machine: MachineType| {
        format!(
            "machine:\n  kubelet:\n    credentialProviderConfig:\n      apiVersion: kubelet.config.k8s.io/v1\n      kind: CredentialProviderConfig\n      providers: [{{name: p, args: [credential-s3cr3t]}}]\n  files:\n    - path: /var/f\n      op: create\n      content: file-content-s3cr3t\n    - path: /etc/f.conf\n      op: append\n      content: file-content-s3cr3t\ncluster:\n  secret: cluster-secret-s3cr3t\n  secretboxEncryptionSecret: s3cr3t-t0ken-value\n  ca:\n    crt: {}\n{}  serviceAccount:\n    key: {key_b64}\n  extraManifests: [https://example.com/m.yaml]\n  extraManifestHeaders:\n    Authorization: Bearer t0k3n-s3cr3t\n  inlineManifests:\n    - name: m\n      contents: inline-manifest-s3cr3t\n",
            b64(CERT),
            // A worker may not hold the CA key (that is refused, below).
            if machine == CP {
                format!("    key: {key_b64}\n")
            } else {
                String::new()
            },
        )
    };
    let leaks = |text: &str| {
        secrets.iter().any(|s| text.contains(s))
            || text.contains(&key_b64)
            || text.contains("PRIVATE KEY")
    };
    for machine in [CP, Worker] {
        let conv = convert(&patch(machine), machine).unwrap();
        let debug = format!("{conv:?}");
        assert!(!leaks(&debug), "{debug}");
        for w in &conv.warnings {
            assert!(!leaks(w), "{w}");
        }
        for c in &conv.converted {
            assert!(!leaks(&c.from) && !leaks(&c.to), "{c:?}");
        }
        // The values themselves did move.
        let all = serde_json::to_string(&conv.docs).unwrap();
        assert!(all.contains("t0k3n-s3cr3t") && all.contains("inline-manifest-s3cr3t"));
    }
    // Refused patches: the error names fields, never their values.
    let bad = format!(
        "machine:\n  kubelet:\n    extraMounts: [{{source: /s3cr3t-t0ken-value}}]\ncluster:\n  ca:\n    crt: s3cr3t-t0ken-value\n    key: {key_b64}\n  extraManifestHeaders:\n    Authorization: Bearer t0k3n-s3cr3t\n  apiServer:\n    extraArgs:\n      oidc-client-id: s3cr3t-t0ken-value\n"
    );
    for machine in [CP, Worker] {
        let e = convert(&bad, machine).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!leaks(&text), "{text}");
        assert!(e.refusals.len() >= 3, "{text}");
    }
}

#[test]
fn explicit_documents_in_the_patch_go_on_top() {
    let conv = convert(
        "machine:\n  kubelet:\n    image: a\n    clusterDNS: [10.0.0.1]\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: b\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: n1\nauto: \"off\"\n",
        CP,
    )
    .unwrap();
    assert_eq!(
        conv.docs,
        yaml_docs(
            "apiVersion: v1alpha1\nkind: KubeletConfig\nimage: b\nclusterDNS: [10.0.0.1]\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: n1\nauto: \"off\"\n"
        )
    );
}

#[test]
fn a_patch_without_deprecated_fields_is_unchanged() {
    let docs = patch_docs(
        "machine:\n  certSANs: [a]\n  network:\n    interfaces: [{interface: eth0, dhcp: true}]\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: b\n",
    );
    let conv = convert_patch(&docs, CP).unwrap();
    assert_eq!(conv.docs, docs);
    assert!(conv.converted.is_empty() && conv.warnings.is_empty());
    // What stays in v1alpha1 next to converted fields stays as it was.
    let conv = convert("machine:\n  certSANs: [a]\n  nodeLabels: {x: y}\n", CP).unwrap();
    assert_eq!(
        conv.docs,
        yaml_docs(
            "machine:\n  certSANs: [a]\n---\napiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels: {x: y}\n"
        )
    );
    assert_eq!(conv.converted[0].from, ".machine.nodeLabels");
    assert_eq!(conv.converted[0].to, "KubeNodeConfig.labels");
}

// --- Upstream's golden outputs ------------------------------------------------------------------

/// The settings upstream's stability test gives the generator for its "overrides" flavour
/// (`types/v1alpha1/v1alpha1_stability_test.go`), written the 1.13 way: the difference between the
/// 1.13 base and overrides goldens, except the kernel arguments and the kubelet extra mounts,
/// which have no 1.14 form (the 1.14 run sets a kubelet `clusterDNS` instead).
const OVERRIDES_1_13_SHAPE: &str = "machine:
  certSANs: [foo, bar]
  install:
    disk: /dev/vda
  sysctls:
    foo: bar
cluster:
  controlPlane:
    localAPIServerPort: 5443
  network:
    cni:
      name: custom
      urls: [https://example.com/cni.yaml]
    dnsDomain: example.com
  apiServer:
    certSANs: [foo, bar]
  allowSchedulingOnControlPlanes: true
";

/// The control-plane settings of [`OVERRIDES_1_13_SHAPE`] that the generator never writes for a
/// worker.
const OVERRIDES_WORKER_1_13_SHAPE: &str = "machine:
  certSANs: [foo, bar]
  install:
    disk: /dev/vda
  sysctls:
    foo: bar
cluster:
  network:
    cni:
      name: custom
      urls: [https://example.com/cni.yaml]
    dnsDomain: example.com
";

fn fixture(name: &str) -> String {
    ferro_talos_fixtures::read(name)
}

fn stability_bundle() -> Bundle {
    Bundle::from_yaml(&fixture("v1.13.6/stability-secrets.yaml")).unwrap()
}

fn stability_options(contract: Contract, machine: MachineType) -> GenerateOptions {
    let mut o = GenerateOptions::new(contract, machine, "base", "https://base:6443");
    o.kubernetes_version = "1.28.0".into();
    o.install_disk = None;
    o.install_image = None;
    // Not deprecated: a RegistryMirrorConfig document in both contracts.
    o.registry_mirrors = vec![("ghcr.io".into(), "https://ghcr.io.my-mirror.com".into())];
    o
}

fn assert_same(got: &str, want: &str, what: &str) {
    if got != want {
        let diff = similar::TextDiff::from_lines(want, got);
        panic!(
            "{what} differs from the fixture:\n{}",
            diff.unified_diff().header("fixture", "rendered")
        );
    }
}

/// The 1.13-shape settings really are the overrides flavour: on the 1.13 base, with the two
/// settings 1.14 cannot take, they give upstream's 1.13 overrides goldens.
#[test]
fn the_1_13_shape_settings_give_the_1_13_overrides_goldens() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let pre14 = fixture("v1.13.6/stability-patch.yaml");
    let kernel_args = "machine:\n  install:\n    extraKernelArgs: [foo=bar, bar=baz]\n";
    for (machine, settings, file) in [
        (
            CP,
            OVERRIDES_1_13_SHAPE,
            "stability-v1.13-overrides-controlplane.yaml",
        ),
        (
            Worker,
            OVERRIDES_WORKER_1_13_SHAPE,
            "stability-v1.13-overrides-worker.yaml",
        ),
    ] {
        let mut cfg = MachineConfig::generate(
            &stability_bundle(),
            &stability_options(Contract::V1_13, machine),
        )
        .unwrap();
        let patches = [settings, kernel_args, &pre14].map(|p| Patch::parse(p).unwrap());
        cfg.apply_patches(&patches).unwrap();
        assert_same(&cfg.to_yaml(), &fixture(&format!("v1.13.6/{file}")), file);
    }
}

/// Converted, the same settings on the 1.14 base give upstream's 1.14 overrides goldens byte for
/// byte. A patch appends the documents the base lacks, while the generator writes them in place,
/// so the base is rendered with a placeholder install disk and sysctl value (the documents the
/// generator writes only for those inputs), which the converted patch then overrides.
#[test]
fn converted_settings_give_the_1_14_overrides_goldens() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    for (machine, settings, file) in [
        (
            CP,
            OVERRIDES_1_13_SHAPE,
            "stability-v1.14-overrides-controlplane.yaml",
        ),
        (
            Worker,
            OVERRIDES_1_13_SHAPE,
            "stability-v1.14-overrides-worker.yaml",
        ),
        (
            Worker,
            OVERRIDES_WORKER_1_13_SHAPE,
            "stability-v1.14-overrides-worker.yaml",
        ),
    ] {
        let mut opts = stability_options(Contract::V1_14, machine);
        opts.install_disk = Some("/dev/placeholder".into());
        opts.sysctls = [("foo".to_string(), "placeholder".to_string())].into();
        let mut cfg = MachineConfig::generate(&stability_bundle(), &opts).unwrap();
        // What the 1.14 run patches instead of the extra mounts.
        let settings = settings.replacen(
            "machine:\n",
            "machine:\n  kubelet:\n    clusterDNS: [3.3.3.3]\n",
            1,
        );
        let conv = convert(&settings, machine).unwrap();
        cfg.apply_patch(&conv.into_patch()).unwrap();
        assert_same(
            &cfg.to_yaml_with(ferro_talos_config::normalize::Rules::V1_14),
            &fixture(&format!("v1.14.0-rc.1/{file}")),
            file,
        );
        assert_eq!(validate::validate(&cfg), Ok(vec![]), "{file}");
    }
}
