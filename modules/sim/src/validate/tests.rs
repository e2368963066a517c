//! The validator against upstream's behaviour. Each expected text is what upstream's own
//! loader and validator return for the same bytes (`configloader.NewFromBytes` then
//! `Container.Validate` in metal mode, as `ApplyConfiguration` calls it: machinery v1.13.9 and
//! v1.14.1), pinned here; the check each line comes from is named beside it.

use super::*;

fn check(yaml: &str, release: Release, installed: bool) -> Result<Vec<String>, String> {
    let docs = crate::decode::decode(yaml, release).expect("decodes");
    validate(
        &docs,
        release,
        Mode {
            requires_install: !installed,
        },
    )
}

/// A worker with control-plane keys (`v1alpha1_validation.go` `Validate`, `ClusterConfig.Validate`,
/// labels/validate.go), wrapped as `container.go` wraps the v1alpha1 errors. `join` reads as a
/// worker with a warning; 1.14.1 no longer asks for `.machine.install`.
#[test]
fn worker_mistakes_nest_as_upstream_prints_them() {
    let yaml = include_str!("testdata/worker_mistakes.yaml");
    let common = "\t* invalid controlplane endpoint: hostname must not be blank\n\
        \t* cluster CA key is not allowed on non-controlplane nodes (.cluster.ca)\n";
    let tail = "\t* issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)\n\
        \t* issuing Kubernetes API CA key is not allowed on non-controlplane nodes (.cluster.ca)\n\
        \t* invalid machine node labels: 1 error occurred:\n\t* name \"foo_\" is invalid\n\n\n\n\n\n";
    assert_eq!(
        check(yaml, Release::V1_13, false).unwrap_err(),
        format!(
            "1 error occurred:\n\t* v1alpha1.Config: 6 errors occurred:\n{common}\
             \t* install instructions are required in \"metal\" mode\n{tail}"
        )
    );
    let five =
        format!("1 error occurred:\n\t* v1alpha1.Config: 5 errors occurred:\n{common}{tail}");
    // An installed node is not asked for install instructions (`modeWrapper`).
    assert_eq!(check(yaml, Release::V1_13, true).unwrap_err(), five);
    assert_eq!(check(yaml, Release::V1_14, false).unwrap_err(), five);
}

/// Per-document `Validate` wrapped as `Kind[/name]: ...` (hostname.go, layer2_vip.go), then the
/// conflict with the v1alpha1 hostname (hostname.go `V1Alpha1ConflictValidate`); a control
/// plane without a CA key and an unknown CNI (`ValidateCNI`).
#[test]
fn documents_and_conflicts_follow_the_v1alpha1_errors() {
    let yaml = include_str!("testdata/control_plane_documents.yaml");
    let docs = "\t* HostnameConfig: 'auto' and 'hostname' cannot be set at the same time\n\
        \t* Layer2VIPConfig/10.0.0.1: link must be specified\n\
        \t* static hostname is already set in v1alpha1 config\n\n";
    let v1 = "\t* cni name should be one of [\"flannel\", \"custom\", \"none\"]\n\
        \t* issuing CA key is required for controlplane nodes (.machine.ca.key)\n\n\n";
    assert_eq!(
        check(yaml, Release::V1_13, false).unwrap_err(),
        format!(
            "4 errors occurred:\n\t* v1alpha1.Config: 3 errors occurred:\n\
             \t* install instructions are required in \"metal\" mode\n{v1}{docs}"
        )
    );
    assert_eq!(
        check(yaml, Release::V1_14, false).unwrap_err(),
        format!("4 errors occurred:\n\t* v1alpha1.Config: 2 errors occurred:\n{v1}{docs}")
    );
}

/// 1.14.1: `nodeLabels: {}` is a non-nil map, so KubeNodeConfig conflicts (k8s/node.go); a
/// control-plane-only document on a worker (`validateContainer` in container/validate.go).
#[test]
fn a_1_14_worker_with_control_plane_documents() {
    let yaml = include_str!("testdata/worker_1_14_documents.yaml");
    assert_eq!(
        check(yaml, Release::V1_14, false).unwrap_err(),
        "2 errors occurred:\n\t* .machine.nodeLabels is already set in v1alpha1 config\n\
         \t* the following document kinds are only allowed on control plane machines: [KubeCoreDNSConfig]\n\n"
    );
}

/// The configs the collection generates pass on both releases.
#[test]
fn generated_configs_pass() {
    let s = crate::sample::SampleCluster::generate();
    for yaml in [&s.controlplane, &s.worker] {
        assert_eq!(check(yaml, Release::V1_13, false), Ok(vec![]));
    }
    let c = crate::sample::SampleCluster::render(
        &s.bundle,
        ferro_talos_config::contract::Contract::V1_14,
    );
    // The sample sets no installer image (`installer: {}`), which Talos 1.14.1 warns about
    // (types/runtime/unattended_install.go).
    for yaml in [&c.controlplane, &c.worker] {
        assert_eq!(
            check(yaml, Release::V1_14, false),
            Ok(vec!["installer.image is not set, if Talos is not booted from asset built by Image Factory, installation will fail".into()])
        );
    }
}

/// The 1.14 documents' own checks, each list joined one error per line (`errors.Join`):
/// types/k8s/network.go (mask range, a subnet that is not its own network, the counts),
/// apiserver.go (empty image, `deniedArgPrefixes`, longest prefix first), common.go (pod
/// resources), types/cluster/discovery_identity.go (32-byte secret), types/runtime/
/// unattended_install.go (a disk selector is required); a KubeProxyConfig with no machine type
/// is not a control plane's (`validateContainer`).
#[test]
fn documents_of_1_14_check_themselves() {
    let yaml = include_str!("testdata/documents_1_14.yaml");
    assert_eq!(
        check(yaml, Release::V1_14, false).unwrap_err(),
        "5 errors occurred:\n\
         \t* KubeNetworkConfig: nodeCIDRMaskSizeIPv4 must be between 1 and 32\n\
         pod subnets: invalid subnet: 10.244.0.1/16 is not a valid CIDR\n\
         service subnets: invalid subnet: 10.96.0.0/8 is not a valid CIDR\n\
         the number of pod subnets must match the number of service subnets\n\
         \t* KubeAPIServerConfig: kube-apiserver image cannot be empty\n\
         kube-apiserver extra argument \"authorization-mode\" is not allowed: use KubeAuthorizerConfig\n\
         kube-apiserver extra argument \"oidc-signing-algs\" is not allowed: not supported with KubeAuthenticationConfig: kube-apiserver rejects --oidc-* flags when structured authentication configuration is used, and the configuration has no equivalent setting (all RFC 7518 asymmetric algorithms are accepted)\n\
         unsupported pod resource \"gpu\"\n\
         \t* DiscoveryIdentityConfig: invalid clusterSecret: expected 32 bytes, got 3: YWJj\n\
         \t* UnattendedInstallConfig: provisioning.diskSelector.match is required\n\
         \t* the following document kinds are only allowed on control plane machines: [KubeAPIServerConfig KubeProxyConfig]\n\n"
    );
}

/// Warnings of the documents (types/k8s/proxy.go, types/runtime/unattended_install.go) come
/// back with an accepted config.
#[test]
fn document_warnings() {
    let yaml = "version: v1alpha1\nmachine:\n  type: controlplane\n  token: t\n  ca: {crt: LS0t, key: LS0t}\ncluster:\n  controlPlane: {endpoint: \"https://1.2.3.4:6443\"}\n---\napiVersion: v1alpha1\nkind: KubeProxyConfig\nimage: registry.k8s.io/kube-proxy:v1.37.0\nmode: ipvs\n---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller: {}\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == \"/dev/sda\"\n";
    assert_eq!(
        check(yaml, Release::V1_14, false),
        Ok(vec![
            "proxy mode \"ipvs\" is not recommended, please switch to nftables if possible".into(),
            "installer.image is not set, if Talos is not booted from asset built by Image Factory, installation will fail".into(),
        ])
    );
}
