//! Patched output as talosctl writes it, and configs that say the same thing comparing equal.
//!
//! Each expectation follows from upstream's Go types and go-yaml's encoder (siderolabs/talos
//! v1.13.9: `pkg/machinery/config/types/v1alpha1/v1alpha1_types.go` for the yaml tags,
//! `pkg/machinery/config/encoder/encoder.go` calling `yaml.Marshal` when comments are off,
//! `pkg/machinery/config/configpatcher/strategic.go` and `pkg/machinery/config/merge/merge.go`
//! for how a patch becomes typed structs; go.yaml.in/yaml/v4 v4.0.0-rc.4 for `isZero` and map key
//! order). Upstream pins the same behaviour with `configpatcher/testdata/apply/expected.yaml`
//! (`type: ""`, `token: ""`, `certSANs: []`, `controlPlane: null`); the inputs below are our own.

use super::*;
use crate::MachineConfig;
use crate::patch::Patch;

const BASE: &str = "version: v1alpha1
machine:
    type: worker
    token: t
    certSANs: []
cluster:
    controlPlane:
        endpoint: https://a:6443
";

fn patched(patch: &str, rules: Rules) -> String {
    let mut cfg = MachineConfig::parse(BASE).unwrap();
    cfg.apply_patch(&Patch::parse(patch).unwrap()).unwrap();
    cfg.to_yaml_with(rules)
}

#[test]
fn the_base_is_already_as_talos_writes_it() {
    assert_eq!(MachineConfig::parse(BASE).unwrap().to_yaml(), BASE);
}

/// `Vlan.routes`, `Vlan.vlanId`, `Route.network`/`gateway`, `Bond.interfaces`/`mode` and
/// `DHCPOptions.routeMetric` have no omitempty; every field of `Device` has.
#[test]
fn structs_a_patch_adds_bring_their_always_written_fields() {
    let out = patched(
        "machine:
  network:
    interfaces:
      - interface: bond0
        routes:
          - network: 0.0.0.0/0
        bond:
          mode: 802.3ad
        vlans:
          - vlanId: 100
            addresses: [10.0.0.2/24]
        dhcpOptions:
          ipv4: true
      - interface: eth1
        dhcp: true
",
        Rules::V1_13,
    );
    assert_eq!(
        out,
        "version: v1alpha1
machine:
    type: worker
    token: t
    certSANs: []
    network:
        interfaces:
            - interface: bond0
              routes:
                - network: 0.0.0.0/0
                  gateway: \"\"
              bond:
                interfaces: []
                mode: 802.3ad
              vlans:
                - addresses:
                    - 10.0.0.2/24
                  routes: []
                  vlanId: 100
              dhcpOptions:
                routeMetric: 0
                ipv4: true
            - interface: eth1
              dhcp: true
cluster:
    controlPlane:
        endpoint: https://a:6443
"
    );
}

/// `LoggingDestination.endpoint` is a `*Endpoint` without omitempty: nil is written `null`;
/// `RegistryMirrorConfig.endpoints` and `MachineFile.op` are always written.
#[test]
fn nil_pointers_empty_lists_and_strings_are_written_where_go_writes_them() {
    let out = patched(
        "machine:
  logging:
    destinations:
      - format: json_lines
  registries:
    mirrors:
      docker.io:
        skipFallback: true
  files:
    - path: /var/f
      content: x
      permissions: 0o600
",
        Rules::V1_13,
    );
    assert!(
        out.contains(
            "    files:\n        - content: x\n          permissions: 0o600\n          path: /var/f\n          op: \"\"\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "    registries:\n        mirrors:\n            docker.io:\n                endpoints: []\n                skipFallback: true\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("    logging:\n        destinations:\n            - endpoint: null\n              format: json_lines\n"),
        "{out}"
    );
}

/// `$patch: delete` zeroes a field (`selector.go` `SetZero`): one without omitempty is still
/// written, at its zero value.
#[test]
fn a_deleted_always_written_field_is_written_empty() {
    let mut cfg = MachineConfig::parse(&BASE.replace("certSANs: []", "certSANs: [a]")).unwrap();
    cfg.apply_patch(&Patch::parse("machine:\n  certSANs:\n    $patch: delete\n").unwrap())
        .unwrap();
    assert!(
        cfg.to_yaml().contains("    certSANs: []\n"),
        "{}",
        cfg.to_yaml()
    );
}

/// A non-nil pointer is written even when it points to an empty struct, and `debug: false` is a
/// set `*bool`; an empty omitempty map or string is dropped.
#[test]
fn pointers_are_written_when_set_and_empty_omitempty_values_are_not() {
    let out = patched(
        "debug: false\nmachine:\n  time: {}\n  nodeLabels: {}\n  install:\n    disk: \"\"\n",
        Rules::V1_13,
    );
    assert!(
        out.starts_with("version: v1alpha1\ndebug: false\n"),
        "{out}"
    );
    assert!(out.contains("    install:\n        wipe: null\n"), "{out}");
    assert!(out.contains("    time: {}\n"), "{out}");
    assert!(!out.contains("nodeLabels"), "{out}");
}

/// go-yaml sorts map keys in natural order (`keyList.Less`), not byte order, and an empty
/// `ArgValue` marshals to `null`.
#[test]
fn map_keys_sort_naturally_and_empty_extra_args_are_null() {
    let out = patched(
        "machine:\n  env:\n    HTTPS_PROXY: b\n    HTTP_PROXY: a\n  kubelet:\n    extraArgs:\n      eth10: x\n      eth9: z\n      empty: \"\"\n",
        Rules::V1_13,
    );
    assert!(
        out.contains("    env:\n        HTTP_PROXY: a\n        HTTPS_PROXY: b\n"),
        "{out}"
    );
    assert!(
        out.contains("        extraArgs:\n            empty: null\n            eth9: z\n            eth10: x\n"),
        "{out}"
    );
}

/// A new document is encoded from its Go struct too: `DefaultActionConfig.ingress` is an
/// always-written enum whose zero value is named `accept`.
#[test]
fn a_new_document_gets_its_always_written_fields() {
    let out = patched(
        "apiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\n",
        Rules::V1_13,
    );
    assert!(
        out.ends_with(
            "---\napiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n"
        ),
        "{out}"
    );
}

/// Talos 1.14 made `cluster.controlPlane` omitempty (v1.14.0-rc.1 `v1alpha1_types.go`).
#[test]
fn cluster_control_plane_is_null_in_1_13_and_left_out_in_1_14() {
    let cfg = MachineConfig::parse("version: v1alpha1\ncluster:\n    clusterName: c\n").unwrap();
    assert!(
        cfg.to_yaml_with(Rules::V1_13)
            .contains("    controlPlane: null\n")
    );
    assert!(!cfg.to_yaml_with(Rules::V1_14).contains("controlPlane"));
}

/// A live config written by talosctl (every always-written field, zero or not) and the same
/// settings without the zero values compare equal, in any key order and quoting.
#[test]
fn configs_that_differ_only_in_zero_values_order_or_quoting_are_equal() {
    let talosctl = "version: v1alpha1
machine:
    type: worker
    token: t
    certSANs: []
    network:
        interfaces:
            - interface: eth0
              vlans:
                - routes: []
                  vlanId: 5
cluster:
    controlPlane:
        endpoint: https://a:6443
";
    let ours = "cluster:
  controlPlane: {endpoint: 'https://a:6443'}
machine:
  token: \"t\"
  type: worker
  network:
    interfaces: [{interface: eth0, vlans: [{vlanId: 5}]}]
version: v1alpha1
";
    let a = MachineConfig::parse(talosctl).unwrap();
    let b = MachineConfig::parse(ours).unwrap();
    assert_eq!(a.to_yaml(), b.to_yaml());
    assert_eq!(a.to_yaml(), talosctl);
    assert!(crate::diff::changed_paths(&a, &b).is_empty());
    assert!(!crate::live::reboot_required(&a, &b));
    // A real difference still shows.
    let c = MachineConfig::parse(&ours.replace("vlanId: 5", "vlanId: 6")).unwrap();
    assert_eq!(
        crate::diff::changed_paths(&a, &c),
        vec!["machine.network.interfaces[0].vlans[0].vlanId"]
    );
}

/// A config read from a node and sent back keeps what it said: 1.14 writes an empty
/// `searchDomains.domains` (`network.SearchDomainList`, whose `IsZero` is nil only, in
/// `types/network/resolver.go` @ v1.14.1), which clears the DHCP domains; 1.13 drops it.
#[test]
fn a_node_config_is_sent_back_in_its_release_rules() {
    assert_eq!(Rules::for_release(1, 13), Rules::V1_13);
    assert_eq!(Rules::for_release(1, 14), Rules::V1_14);
    assert_eq!(Rules::for_release(2, 0), Rules::V1_14);
    let cfg = MachineConfig::parse(
        "apiVersion: v1alpha1\nkind: ResolverConfig\nsearchDomains:\n    domains: []\n",
    )
    .unwrap();
    assert!(
        cfg.to_yaml_with(Rules::for_release(1, 14))
            .contains("domains: []")
    );
    assert!(
        !cfg.to_yaml_with(Rules::for_release(1, 13))
            .contains("domains")
    );
}
