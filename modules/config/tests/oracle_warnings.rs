//! Validation warnings against upstream's own validator (tests/oracle, machinery v1.14.1): a
//! control plane's KubeNodeConfig without the control-plane role label is warned about in the
//! same words by talos_config's `validate` and by upstream, and neither warns when the label is
//! there or the node does not register with Kubernetes.

use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::patch::Patch;
use ferro_talos_config::validate::validate;
use ferro_talos_oracle::{Oracle, Release};
use ferro_talos_secrets::Bundle;
use serde_json::json;

const ROLE_WARNING: &str =
    "KubeNodeConfig document should set the \"node-role.kubernetes.io/control-plane\" node label";

/// A 1.14 control plane with its KubeNodeConfig replaced by `node` (YAML of the document body).
fn control_plane_with(node: &str) -> String {
    let bundle = Bundle::generate((1, 14)).unwrap();
    let o = GenerateOptions::new(
        Contract::V1_14,
        MachineType::ControlPlane,
        "oracle",
        "https://oracle:6443",
    );
    let mut cfg = MachineConfig::generate(&bundle, &o).unwrap();
    cfg.docs
        .retain(|d| d.get("kind").and_then(|k| k.as_str()) != Some("KubeNodeConfig"));
    let patch = Patch::parse(&format!(
        "apiVersion: v1alpha1\nkind: KubeNodeConfig\n{node}"
    ))
    .unwrap();
    cfg.apply_patch_with(&patch, Rules::V1_14).unwrap();
    cfg.to_yaml_with(Rules::V1_14)
}

#[test]
fn a_control_plane_node_config_without_the_role_label_is_warned_about_as_upstream_does() {
    let Some(mut oracle) = Oracle::start(Release::V1_14_1) else {
        return;
    };
    let cases = [
        (
            "labels without the role",
            "labels:\n  topology.kubernetes.io/zone: a\n",
            true,
        ),
        (
            "the role label",
            "labels:\n  node-role.kubernetes.io/control-plane: \"\"\n",
            false,
        ),
        (
            "not registered",
            "skipNodeRegistration: true\nlabels:\n  a: b\n",
            false,
        ),
    ];
    for (name, node, warned) in cases {
        let text = control_plane_with(node);
        let answer = oracle.ask(&json!({"op": "validate", "config": text, "mode": "metal"}));
        assert!(answer.get("error").is_none(), "[{name}] upstream: {answer}");
        let theirs: Vec<&str> = answer["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w.as_str())
            .filter(|w| w.starts_with(ROLE_WARNING))
            .collect();
        let cfg = MachineConfig::parse(&text).unwrap();
        let ours: Vec<String> = validate(&cfg)
            .unwrap_or_else(|e| panic!("[{name}] ours refused: {e:?}"))
            .into_iter()
            .filter(|w| w.starts_with(ROLE_WARNING))
            .collect();
        assert_eq!(
            theirs.len(),
            usize::from(warned),
            "[{name}] upstream: {theirs:?}"
        );
        assert_eq!(ours, theirs, "[{name}]");
    }
}
