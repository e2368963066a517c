//! The decoder against upstream's behaviour: each case names what it encodes.

use super::*;
use crate::sample::SampleCluster;
use std::sync::LazyLock;

static SAMPLE: LazyLock<SampleCluster> = LazyLock::new(SampleCluster::generate);

fn err(text: &str, release: Release) -> String {
    decode(text, release).unwrap_err()
}

#[test]
fn the_collections_own_configs_decode_on_both_releases() {
    for release in [Release::V1_13, Release::V1_14] {
        for cfg in [&SAMPLE.controlplane, &SAMPLE.worker] {
            let docs = decode(cfg, release).unwrap_or_else(|e| panic!("{release:?}: {e}"));
            assert!(docs[0].get("machine").is_some());
        }
    }
}

#[test]
fn upstreams_golden_configs_decode_on_both_releases() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let dir = ferro_talos_fixtures::dir();
    let mut seen = 0;
    for entry in walk(&dir) {
        let name = entry.to_string_lossy().to_string();
        if !(name.ends_with("controlplane.yaml") || name.ends_with("worker.yaml")) {
            continue;
        }
        let text = std::fs::read_to_string(&entry).unwrap();
        let release = if name.contains("1.14") || name.contains("v1.14") {
            Release::V1_14
        } else {
            Release::V1_13
        };
        decode(&text, release).unwrap_or_else(|e| panic!("{name}: {e}"));
        seen += 1;
    }
    assert!(
        seen > 0,
        "no golden machine configs under {}",
        dir.display()
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// decoder.go + gen's CheckUnknownKeys: a typo is reported with the path that leads to it.
#[test]
fn an_unknown_key_is_reported_under_its_path() {
    let cfg = SAMPLE
        .worker
        .replacen("machine:\n", "machine:\n    kubelett: {}\n", 1);
    assert_eq!(
        err(&cfg, Release::V1_13),
        "error decoding document /v1alpha1/ (line 1): unknown keys found during decoding:\nmachine:\n    kubelett: {}\n"
    );
    let patch = "machine:\n  kubelet:\n    extraArgz:\n      foo: bar\n    image: x\n";
    assert_eq!(
        err(patch, Release::V1_13),
        "error decoding document /v1alpha1/ (line 1): unknown keys found during decoding:\nmachine:\n    kubelet:\n        extraArgz:\n            foo: bar\n"
    );
    let flow = "machine: {kubelet: {extraArgz: {foo: bar}}}\n";
    assert!(err(flow, Release::V1_13).ends_with("extraArgz: {foo: bar}\n"));
}

/// gen's CheckUnknownKeys keeps only the sequence elements that hold unknown keys.
#[test]
fn unknown_keys_in_a_list_keep_only_the_offending_items() {
    let cfg = "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n      - interface: eth1\n        dhcpp: true\n";
    assert_eq!(
        err(cfg, Release::V1_13),
        "error decoding document /v1alpha1/ (line 1): unknown keys found during decoding:\nmachine:\n    network:\n        interfaces:\n            - dhcpp: true\n"
    );
}

/// Maps, `any` and inline maps take any key; certificates take `crt`/`key`.
#[test]
fn free_form_fields_take_any_key() {
    let cfg = "machine:\n  nodeLabels: {anything: goes}\n  env: {A: b}\n  kubelet:\n    extraConfig: {whatever: [1, 2]}\n    extraArgs: {feature-gates: X=true, multi: [a, b]}\n  ca: {crt: Zm9v, key: YmFy}\n";
    decode(cfg, Release::V1_13).unwrap();
    let bad = "machine:\n  ca: {crt: Zm9v, cert: YmFy}\n";
    assert!(err(bad, Release::V1_13).ends_with("machine:\n    ca:\n        cert: YmFy\n"));
}

/// registry.go: an unregistered kind, or a 1.14 kind on 1.13.
#[test]
fn unknown_kinds_are_not_registered() {
    let doc = "apiVersion: v1alpha1\nkind: Foo\n";
    assert_eq!(
        err(doc, Release::V1_13),
        "error decoding document v1alpha1/Foo/ (line 1): \"Foo\" \"v1alpha1\": not registered"
    );
    let node = "apiVersion: v1alpha1\nkind: KubeNodeConfig\n";
    assert!(err(node, Release::V1_13).ends_with("\"KubeNodeConfig\" \"v1alpha1\": not registered"));
    assert!(decode(node, Release::V1_14).is_ok());
    let version = "apiVersion: v1alpha2\nkind: HostnameConfig\nhostname: a\n";
    assert!(
        err(version, Release::V1_13).ends_with("\"HostnameConfig\" \"v1alpha2\": not registered")
    );
}

/// decoder.go: missing kind or apiVersion, duplicates, nothing at all, a non-mapping.
#[test]
fn document_identity_errors() {
    assert_eq!(
        err("apiVersion: v2\nhostname: a\n", Release::V1_13),
        "error decoding document v2/v1alpha1/ (line 1): missing kind"
    );
    assert_eq!(
        err("kind: HostnameConfig\nhostname: a\n", Release::V1_13),
        "error decoding document /HostnameConfig/ (line 1): missing apiVersion"
    );
    let twice = "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: b\n";
    assert_eq!(
        err(twice, Release::V1_13),
        "duplicate document v1alpha1/HostnameConfig/ is not allowed (line 5)"
    );
    assert_eq!(err("---\n", Release::V1_13), "config not found");
    assert_eq!(
        err("- a\n", Release::V1_13),
        "expected a YAML document at line 1"
    );
    assert!(err("machine: [\n", Release::V1_13).starts_with("decode error: yaml: "));
}

/// go-yaml's constructor: a value that cannot go into its field, with go-yaml's words; the
/// YAML 1.1 booleans a typed bool still takes.
#[test]
fn type_errors_read_like_go_yaml() {
    let cfg = "machine:\n  install:\n    wipe: maybe\n    disk: [a]\n";
    assert_eq!(
        err(cfg, Release::V1_13),
        "error decoding document /v1alpha1/ (line 1): error decoding  to *v1alpha1.Config: yaml: construct errors:\n  line 3: cannot construct !!str `maybe` into bool\n  line 4: cannot construct !!seq into string"
    );
    decode("machine:\n  install:\n    wipe: yes\n", Release::V1_13).unwrap();
    let doc = "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: {a: b}\n";
    assert!(err(doc, Release::V1_13).contains(
        "error decoding HostnameConfig to *network.HostnameConfigV1Alpha1: yaml: construct errors:\n  line 3: cannot construct !!map into string"
    ));
}

/// The JSON the rest of the simulator reads keeps what the encoder needs to write back.
#[test]
fn values_keep_their_written_form_where_json_cannot() {
    let docs = decode(
        "machine:\n  files:\n    - permissions: 0644\n      path: /a\n      op: create\n      content: x\n  install:\n    wipe: false\n",
        Release::V1_13,
    )
    .unwrap();
    assert_eq!(docs[0]["machine"]["files"][0]["permissions"], "0644");
    assert_eq!(docs[0]["machine"]["install"]["wipe"], false);
}

/// The collection's own check (`ferro_talos_config::known_keys`, from upstream's JSON schemas)
/// must accept every key upstream's Go types decode (this table, from the Go source): two
/// readings of upstream that have to agree, or talos_config would refuse a valid config.
#[test]
fn every_key_upstream_decodes_is_one_talos_config_accepts() {
    use ferro_talos_config::known_keys::{Refusal, check_document};
    let mut refused = Vec::new();
    let mut checked = 0;
    for release in [Release::V1_13, Release::V1_14] {
        let table = release.table();
        let mut docs: Vec<(String, Value)> = table
            .documents
            .iter()
            .map(|d| {
                let mut v = full_value(table, &table::GoType::Named(d.go_type.clone()), 0);
                v["apiVersion"] = Value::String(d.api_version.clone());
                v["kind"] = Value::String(d.kind.clone());
                (d.kind.clone(), v)
            })
            .collect();
        docs.push((
            "v1alpha1".into(),
            full_value(table, &table::GoType::Named(table.legacy.clone()), 0),
        ));
        for (kind, doc) in docs {
            checked += count_keys(&doc);
            if kind == "v1alpha1" {
                // The check can fail: the same document with one key no Go field has.
                let mut typo = doc.clone();
                typo["machine"]["kubelet"]["extraArgz"] = Value::Null;
                assert!(check_document(&typo).is_err());
            }
            match check_document(&doc) {
                Ok(()) => {}
                Err(Refusal::UnknownKind { kind }) => {
                    refused.push(format!("{release:?} kind {kind}"))
                }
                Err(Refusal::UnknownVersion { kind, api_version }) => {
                    refused.push(format!("{release:?} kind {kind} {api_version}"))
                }
                // Placeholder values are of no type; the keys under them are what counts here.
                Err(Refusal::WrongTypes(_)) => {
                    for k in ferro_talos_config::known_keys::unknown_keys(&doc) {
                        refused.push(format!("{release:?} {kind}: {}", k.path));
                    }
                }
                Err(Refusal::UnknownKeys(keys)) => {
                    for k in keys {
                        refused.push(format!("{release:?} {kind}: {}", k.path));
                    }
                }
            }
        }
    }
    assert!(checked > 2000, "only {checked} keys were synthesised");
    refused.sort();
    refused.dedup();
    assert!(
        refused.is_empty(),
        "{} refused:\n{}",
        refused.len(),
        refused.join("\n")
    );
}

fn count_keys(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len() + m.values().map(count_keys).sum::<usize>(),
        Value::Array(a) => a.iter().map(count_keys).sum(),
        _ => 0,
    }
}

/// A value that sets every field the Go type has, at every depth.
fn full_value(table: &table::Table, ty: &table::GoType, depth: usize) -> Value {
    use table::{GoType, Shape};
    if depth > 12 {
        return Value::String("x".into());
    }
    match ty {
        GoType::Pointer(inner) => full_value(table, inner, depth),
        GoType::Slice(inner) => match inner.as_ref() {
            GoType::Basic(b) if b == "byte" || b == "uint8" => Value::String("x".into()),
            _ => Value::Array(vec![full_value(table, inner, depth + 1)]),
        },
        GoType::Map(inner) => {
            let mut m = Map::new();
            m.insert("key".into(), full_value(table, inner, depth + 1));
            Value::Object(m)
        }
        // A bool gets a bool: the collection's check refuses a string there, as go-yaml does.
        GoType::Basic(b) if b == "bool" => Value::Bool(true),
        GoType::Any | GoType::Basic(_) => Value::String("x".into()),
        GoType::Named(name) => match table.named(name) {
            None => Value::String("x".into()),
            Some(n)
                if n.unmarshal_text
                    || (n.unmarshal_yaml && !matches!(n.shape, Shape::Struct { .. })) =>
            {
                Value::String("x".into())
            }
            Some(n) => match &n.shape {
                Shape::Alias(under) => full_value(table, under, depth),
                Shape::Struct {
                    inline_map: Some(_),
                    ..
                } => Value::Object(Map::new()),
                Shape::Struct { known, .. } if n.unmarshal_yaml => {
                    // Certificates and the like: their keys, plain values.
                    Value::Object(
                        known
                            .keys()
                            .map(|k| (k.clone(), Value::String("x".into())))
                            .collect(),
                    )
                }
                Shape::Struct { known, .. } => Value::Object(
                    known
                        .iter()
                        .map(|(k, t)| (k.clone(), full_value(table, t, depth + 1)))
                        .collect(),
                ),
            },
        },
    }
}

/// Talos 1.14's loader refuses a null where a list or map of pointers would get a nil entry,
/// naming every place; a null struct field is still fine, and 1.13 decodes all of it
/// (`xyaml.CheckNullElements`, called by configloader/internal/decoder/decoder.go @ v1.14.1;
/// the texts as the oracle, tests/oracle, gives them).
#[test]
fn a_null_element_is_refused_from_1_14_only() {
    let text = "version: v1alpha1\nmachine:\n  type: worker\n  files:\n    - null\n  registries:\n    mirrors:\n      docker.io: null\n  kubelet: null\n";
    assert_eq!(
        err(text, Release::V1_14),
        "error decoding document /v1alpha1/ (line 1): null value is not allowed at \"machine.files[0]\" (line 5)\nnull value is not allowed at \"machine.registries.mirrors.docker.io\" (line 8)"
    );
    assert!(decode(text, Release::V1_13).is_ok());
    assert!(
        decode(
            "version: v1alpha1\nmachine:\n  type: worker\n  kubelet: null\n",
            Release::V1_14
        )
        .is_ok()
    );
}
