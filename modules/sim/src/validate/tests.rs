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

/// The configs the collection generates pass on both releases (warnings none).
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
    for yaml in [&c.controlplane, &c.worker] {
        assert_eq!(check(yaml, Release::V1_14, false), Ok(vec![]));
    }
}
