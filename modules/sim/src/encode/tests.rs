//! The encoder against what upstream's own encoder printed (Talos v1.13.9's
//! `configloader.NewFromBytes` + `Container.EncodeBytes(encoder.WithComments(CommentsDisabled))`,
//! `pkg/machinery/config/container/container.go`, go.yaml.in/yaml/v4 v4.0.0-rc.4).

use super::*;

fn encode(yaml: &str) -> String {
    let docs = crate::decode::decode(yaml, Release::V1_13).expect("decodes");
    encode_config(&docs, Release::V1_13)
}

/// Field order from the Go structs, non-omitempty zero fields written (`certSANs: []`,
/// `install.wipe: null`, a VLAN's `routes: []`), a non-nil empty pointer kept (`kubelet: {}`),
/// map keys sorted, literal blocks with their chomping, `HostnameConfig` keys in struct order.
#[test]
fn a_config_as_upstream_encodes_it() {
    let input = include_str!("testdata/mixed.yaml");
    let want = include_str!("testdata/mixed.encoded.yaml");
    assert_eq!(encode(input), want);
}

/// representer.go `stringv` and emitter.go `selectScalarStyle`: strings that would read back as
/// something else are double-quoted; strings plain style cannot carry are single-quoted; map
/// keys in go-yaml's natural order (`a9` before `a10`).
#[test]
fn scalar_styles_and_key_order() {
    let got = encode(
        "version: v1alpha1\nmachine:\n  type: worker\n  token: abc\n  nodeLabels: {b: \"1\", a10: x, a9: y}\n  certSANs: [\"*\", \"\", \"yes\", \"1.0\", \"a: b\", \"-x\"]\ncluster:\n  controlPlane: {endpoint: \"https://1.2.3.4:6443\"}\n",
    );
    assert_eq!(
        got,
        "version: v1alpha1\nmachine:\n    type: worker\n    token: abc\n    certSANs:\n        - '*'\n        - \"\"\n        - \"yes\"\n        - \"1.0\"\n        - 'a: b'\n        - -x\n    nodeLabels:\n        a9: \"y\"\n        a10: x\n        b: \"1\"\ncluster:\n    controlPlane:\n        endpoint: https://1.2.3.4:6443\n"
    );
}

/// `configdiff_test.go` @ v1.13.9: a v1alpha1 document with only a type and token encodes as
/// `certSANs: []` and `cluster: null`.
#[test]
fn a_nil_cluster_is_null() {
    let got = encode("version: v1alpha1\nmachine:\n  type: controlplane\n  token: foo\n");
    assert_eq!(
        got,
        "version: v1alpha1\nmachine:\n    type: controlplane\n    token: foo\n    certSANs: []\ncluster: null\n"
    );
}

/// go.yaml.in/yaml/v4 v4.0.0-rc.6 (Talos 1.14.1) single-quotes YAML 1.1 leftovers
/// (representer.go `stringv`) and double-quotes values of another type (desolver.go); rc.4
/// (1.13.9) double-quotes both. A PEM block always has `crt` and `key` (siderolabs/crypto
/// `MarshalYAML`). Expected texts: upstream's encoder at each release.
#[test]
fn quoting_follows_each_release() {
    let input = "version: v1alpha1\nmachine:\n  type: worker\n  token: abc\n  ca: {crt: LS0t}\n  certSANs: [\"*\", \"\", \"yes\", \"1.0\", \"a: b\", \"-x\", \"12:30\", \"null\", \"2001-12-14\", \"<<\", \" lead\", \"tab\\tx\"]\ncluster:\n  controlPlane: {endpoint: \"https://1.2.3.4:6443\"}\n";
    let want = |yes: &str, base60: &str, merge: &str| {
        format!(
            "version: v1alpha1\nmachine:\n    type: worker\n    token: abc\n    ca:\n        crt: LS0t\n        key: \"\"\n    certSANs:\n        - '*'\n        - \"\"\n        - {yes}\n        - \"1.0\"\n        - 'a: b'\n        - -x\n        - {base60}\n        - \"null\"\n        - \"2001-12-14\"\n        - {merge}\n        - ' lead'\n        - \"tab\\tx\"\ncluster:\n    controlPlane:\n        endpoint: https://1.2.3.4:6443\n"
        )
    };
    for (release, q) in [(Release::V1_13, '"'), (Release::V1_14, '\'')] {
        let docs = crate::decode::decode(input, release).expect("decodes");
        assert_eq!(
            encode_config(&docs, release),
            want(
                &format!("{q}yes{q}"),
                &format!("{q}12:30{q}"),
                &format!("{q}<<{q}")
            ),
            "{release:?}"
        );
    }
}

/// 1.14 documents as upstream's v1.14.1 encoder writes them: `ArgValue`'s `!!str` nodes
/// (`oidc-signing-algs: y` stays plain, `"1"` is quoted: meta/args.go `MarshalYAML`), an
/// unset `meta.Unstructured` written as `{}` (KubeProxyConfig `config`).
#[test]
fn documents_of_1_14_encode_as_upstream() {
    let input = include_str!("../validate/testdata/documents_1_14.yaml");
    let want = include_str!("testdata/documents_1_14.encoded.yaml");
    let docs = crate::decode::decode(input, Release::V1_14).expect("decodes");
    assert_eq!(encode_config(&docs, Release::V1_14), want);
}
