//! Talos's comment-free YAML encoding (config.md §3.2), reproduced byte for byte.
//!
//! Three steps: the document is first normalised the way Talos's Go encoder sees it (always
//! written fields at their zero values, empty omitempty fields dropped: `normalize.rs`), then
//! turned into an ordered tree of rendered scalars, using the Go struct field order of each known
//! document kind (see `fields.rs`), and that tree is then written the way go-yaml's emitter does
//! with a 4-space indent.

use crate::disk_size::parse_human_bytes;
use crate::document::{DocId, MachineConfig};
use crate::fields;
use crate::normalize::{Rules, normalize_document};
use ferro_talos_goyaml::emit::leaf_text;
use ferro_talos_goyaml::order::key_order;
use ferro_talos_goyaml::{Node, Release, Scalar, emit};
use serde_json::{Map, Value};
use std::cmp::Ordering;

/// How a value is laid out by Talos's typed structs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// Unknown, or a number: maps keep their existing key order.
    Leaf,
    /// Go bool: encoded as any leaf; the decoder takes only YAML booleans there
    /// (`known_keys::check_document`).
    Bool,
    /// Free-form Go `map[string]any`: go-yaml sorts keys with its natural-order comparator.
    Any,
    /// Go `map[string]string`: keys in go-yaml's natural order, scalar values become strings.
    StrMap,
    /// `extraArgs` (`Args`, a map of `ArgValue`): like [`Shape::StrMap`], values may also be lists
    /// of strings, and an empty value is written `null` (`ArgValue.MarshalYAML`).
    Args,
    /// Go string: a number or boolean found here is written as its text.
    Str,
    /// Go file mode, written as an octal literal (`0o644`).
    Octal,
    /// `machine.disks[].partitions[].size`: an SI string such as `10 GB` when that is exact,
    /// otherwise a byte count (config.md §3.2).
    DiskSize,
    /// Inline manifest contents: Talos trims leading control whitespace when decoding.
    InlineContents,
    /// Go struct: known fields in this order, unknown ones after them.
    Struct(&'static [F]),
    Seq(&'static Shape),
    /// Go map with struct values: keys in go-yaml's natural order.
    Map(&'static Shape),
}

/// A struct field: YAML key, shape, and what Go's encoder does when it is unset.
#[derive(Debug)]
pub(crate) struct F(pub &'static str, pub Shape, pub Unset);

/// What go-yaml does with a field, by its yaml tag.
#[derive(Debug)]
pub(crate) enum Unset {
    /// `omitempty`: dropped when empty in this sense.
    Omit(Empty),
    /// No `omitempty`: always written, this when unset.
    Write(Zero),
    /// The rule changed in Talos 1.14: (up to 1.13, from 1.14).
    Split(&'static Unset, &'static Unset),
}

/// How go-yaml's `isZero` judges a present value of an omitempty field.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Empty {
    /// A pointer or an interface: only nil (`null`) is empty.
    Never,
    Text,
    Bool,
    Number,
    List,
    Map,
    /// A struct value: empty when all its exported fields are.
    Struct,
    /// A type with its own `IsZero` (sizes, addresses, specs).
    Custom,
}

/// The zero value go-yaml writes for an unset always-written field.
#[derive(Debug)]
pub(crate) enum Zero {
    Null,
    Text,
    Number,
    List,
    Map,
    /// A struct value: its own always-written fields, `{}` when it has none.
    Struct,
    /// An enum's name for 0 (`none`, `accept`, ...).
    Literal(&'static str),
}

/// Header-only order for kinds this crate does not know.
const UNKNOWN_KIND: &[F] = &[
    F("apiVersion", Shape::Leaf, Unset::Omit(Empty::Never)),
    F("kind", Shape::Leaf, Unset::Omit(Empty::Never)),
    F("name", Shape::Leaf, Unset::Omit(Empty::Never)),
];

impl MachineConfig {
    /// The comment-free YAML form, as Talos 1.13 writes it: documents joined by `---` lines.
    pub fn to_yaml(&self) -> String {
        self.to_yaml_with(Rules::V1_13)
    }

    /// The comment-free YAML form under one release's encoding rules.
    pub fn to_yaml_with(&self, rules: Rules) -> String {
        let mut out = String::new();
        for (i, doc) in self.docs.iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            out.push_str(&encode_document_with(doc, rules));
        }
        out
    }

    /// The documents in Talos's key order as they are, without the zero values the encoder would
    /// add: how a patch reads.
    pub fn to_patch_yaml(&self) -> String {
        let mut out = String::new();
        for (i, doc) in self.docs.iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            let node = to_node(doc, Shape::Struct(document_fields(doc)));
            out.push_str(&emit(&node, Release::V4Rc4));
        }
        out
    }

    /// Every document as Talos compares decoded configs (see [`crate::normalize::decoded_document`]).
    pub fn decoded(&self) -> MachineConfig {
        MachineConfig {
            docs: self
                .docs
                .iter()
                .map(crate::normalize::decoded_document)
                .collect(),
        }
    }

    /// Every document as Talos's encoder sees it (see [`normalize_document`]): what to compare
    /// two configs by.
    pub fn normalized(&self, rules: Rules) -> MachineConfig {
        MachineConfig {
            docs: self
                .docs
                .iter()
                .map(|d| normalize_document(d, rules))
                .collect(),
        }
    }
}

/// Encodes one document with the key order of its kind, under Talos 1.13's rules.
pub fn encode_document(doc: &Value) -> String {
    encode_document_with(doc, Rules::V1_13)
}

/// Encodes one document with the key order of its kind, under `rules`.
pub fn encode_document_with(doc: &Value, rules: Rules) -> String {
    let fields = document_fields(doc);
    let normal = normalize_document(doc, rules);
    let node = to_node(&normal, Shape::Struct(fields));
    emit(&node, release_of(rules))
}

pub(crate) fn document_fields(doc: &Value) -> &'static [F] {
    let id = DocId::of(doc);
    if id.is_v1alpha1() {
        return fields::V1ALPHA1;
    }
    fields::KINDS
        .iter()
        .find(|(k, _)| *k == id.kind)
        .map(|(_, f)| *f)
        .unwrap_or(UNKNOWN_KIND)
}

fn to_node(v: &Value, shape: Shape) -> Node {
    match (shape, v) {
        (Shape::Struct(fields), Value::Object(m)) => {
            let mut entries = Vec::with_capacity(m.len());
            // After normalisation a known field holding null is an always-written nil pointer.
            for F(name, fshape, _) in fields {
                if let Some(x) = m.get(*name) {
                    entries.push((Scalar::key(name), to_node(x, *fshape)));
                }
            }
            for (k, x) in m {
                if !x.is_null() && !fields.iter().any(|F(name, _, _)| name == k) {
                    entries.push((Scalar::key(k), to_node(x, Shape::Leaf)));
                }
            }
            Node::Map(entries)
        }
        // go-yaml sorts every Go map's keys with its natural-order comparator
        // (`keyList.Less`): `HTTP_PROXY` before `HTTPS_PROXY`, `eth9` before `eth10`.
        (Shape::Map(inner), Value::Object(m)) => Node::Map(
            sorted_by(m, key_order)
                .into_iter()
                .map(|(k, x)| (Scalar::key(k), to_node(x, *inner)))
                .collect(),
        ),
        (Shape::StrMap, Value::Object(m)) => Node::Map(
            sorted_by(m, key_order)
                .into_iter()
                .map(|(k, x)| (Scalar::key(k), string_value(x)))
                .collect(),
        ),
        (Shape::Args, Value::Object(m)) => Node::Map(
            sorted_by(m, key_order)
                .into_iter()
                .map(|(k, x)| (Scalar::key(k), arg_value(x)))
                .collect(),
        ),
        (Shape::Any, Value::Object(m)) => Node::Map(
            sorted_by(m, key_order)
                .into_iter()
                .map(|(k, x)| (Scalar::key(k), to_node(x, Shape::Any)))
                .collect(),
        ),
        (Shape::Seq(inner), Value::Array(a)) => {
            Node::Seq(a.iter().map(|x| to_node(x, *inner)).collect())
        }
        (Shape::Any, Value::Array(a)) => {
            Node::Seq(a.iter().map(|x| to_node(x, Shape::Any)).collect())
        }
        (Shape::Str, x @ (Value::Bool(_) | Value::Number(_))) => string_value(x),
        (Shape::DiskSize, x) => match disk_size_bytes(x) {
            Some(n) => Node::Scalar(disk_size_scalar(n)),
            None => Node::Scalar(scalar(x)),
        },
        (Shape::InlineContents, Value::String(s)) => Node::Scalar(Scalar::string(
            s.trim_start_matches(['\t', '\n', '\r', '\u{b}', '\u{c}']),
        )),
        (Shape::Octal, x) => match octal_value(x) {
            Some(mode) => Node::Scalar(Scalar::plain(format!("0o{mode:o}"))),
            None => Node::Scalar(scalar(x)),
        },
        (_, Value::Object(m)) => Node::Map(
            m.iter()
                .map(|(k, x)| (Scalar::key(k), to_node(x, Shape::Leaf)))
                .collect(),
        ),
        (_, Value::Array(a)) => Node::Seq(a.iter().map(|x| to_node(x, Shape::Leaf)).collect()),
        (_, x) => Node::Scalar(scalar(x)),
    }
}

/// Go string maps decode any scalar as its text, so numbers and booleans come back as strings.
/// extraArgs values may also be lists of strings.
fn string_value(v: &Value) -> Node {
    match v {
        Value::Bool(_) | Value::Number(_) => Node::Scalar(Scalar::string(&leaf_text(v))),
        Value::Array(a) => Node::Seq(a.iter().map(string_value).collect()),
        // A YAML null decodes to Go's empty string.
        Value::Null => Node::Scalar(Scalar::string("")),
        other => to_node(other, Shape::Leaf),
    }
}

/// `ArgValue.MarshalYAML`: a list, a string, or `null` when it holds nothing.
fn arg_value(v: &Value) -> Node {
    match v {
        Value::Null => Node::Scalar(Scalar::plain("null")),
        Value::String(s) if s.is_empty() => Node::Scalar(Scalar::plain("null")),
        Value::String(s) => Node::Scalar(arg_scalar(s)),
        Value::Array(a) => Node::Seq(
            a.iter()
                .map(|x| match x {
                    Value::String(s) => Node::Scalar(arg_scalar(s)),
                    other => string_value(other),
                })
                .collect(),
        ),
        other => string_value(other),
    }
}

/// `ArgValue.MarshalYAML` hands go-yaml a ready `!!str` node, which skips the representer
/// (v1alpha1_types.go @ v1.13.9; found by the oracle with the kubelet arguments `yes` and "\n").
fn arg_scalar(s: &str) -> Scalar {
    Scalar::bare_string(s)
}

fn octal_value(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => {
            let digits = s
                .strip_prefix("0o")
                .or_else(|| s.strip_prefix("0O"))
                .unwrap_or(s);
            let digits = digits.replace('_', "");
            if digits.is_empty() {
                return None;
            }
            u64::from_str_radix(&digits, 8).ok()
        }
        _ => None,
    }
}

/// A partition size in bytes: an integer, or a human string like `50GiB` / `10 GB`.
fn disk_size_bytes(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_human_bytes(s),
        _ => None,
    }
}

/// go-humanize's `Bytes`: SI units, one decimal below 10.
fn human_bytes(n: u64) -> String {
    if n < 10 {
        return format!("{n} B");
    }
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let e = ((n as f64).ln() / 1000f64.ln()).floor() as usize;
    let e = e.min(UNITS.len() - 1);
    let val = ((n as f64) / 1000f64.powi(e as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 {
        format!("{val:.1} {}", UNITS[e])
    } else {
        format!("{val:.0} {}", UNITS[e])
    }
}

fn disk_size_scalar(n: u64) -> Scalar {
    if n.is_multiple_of(1000) {
        let human = human_bytes(n);
        if parse_human_bytes(&human) == Some(n) {
            return Scalar::string(&human);
        }
    }
    Scalar::plain(n.to_string())
}

fn sorted_by(
    m: &Map<String, Value>,
    cmp: impl Fn(&str, &str) -> Ordering,
) -> Vec<(&String, &Value)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| cmp(a.0, b.0));
    v
}

fn scalar(v: &Value) -> Scalar {
    Scalar::of_leaf(v)
}

/// The go-yaml release of the talosctl whose rules these are: 1.13's rc.4, 1.14's rc.6.
fn release_of(rules: Rules) -> Release {
    match rules {
        Rules::V1_13 => Release::V4Rc4,
        Rules::V1_14 => Release::V4Rc6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn enc(v: Value) -> String {
        MachineConfig { docs: vec![v] }.to_yaml()
    }

    #[test]
    fn quoting_of_ambiguous_strings() {
        let out = enc(
            json!({"kind": "X", "a": "true", "b": "off", "c": "", "d": "123",
            "e": "0o644", "f": "yes", "g": "null", "h": "1.5", "i": "~", "j": "2024-01-02",
            "k": "1:20", "l": "0x1F", "m": "plain text", "n": "y", "nn": ".5", "o": "-", "p": "- x",
            "q": "a: b", "r": "#c", "s": "it's", "t": "tab\there", "u": "1e3", "v": "+1",
            "w": "Off", "x": "NO", "yy": "10.244.0.0/16", "z": "v1.28.0"}),
        );
        let expected = "kind: X\na: \"true\"\nb: \"off\"\nc: \"\"\nd: \"123\"\ne: \"0o644\"\n\
            f: \"yes\"\ng: \"null\"\nh: \"1.5\"\ni: \"~\"\nj: \"2024-01-02\"\nk: \"1:20\"\n\
            l: \"0x1F\"\nm: plain text\n\"n\": \"y\"\nnn: \".5\"\no: '-'\np: '- x'\nq: 'a: b'\nr: '#c'\n\
            s: it's\nt: \"tab\\there\"\nu: \"1e3\"\nv: \"+1\"\nw: \"Off\"\nx: \"NO\"\n\
            yy: 10.244.0.0/16\nz: v1.28.0\n";
        assert_eq!(out, expected);
    }

    #[test]
    fn scalars_of_other_types() {
        let out = enc(json!({"kind": "X", "a": true, "b": 5443, "c": -3, "d": 1.5,
            "e": 1000000.0, "f": 0.0001, "g": 1e-5}));
        assert_eq!(
            out,
            "kind: X\na: true\nb: 5443\nc: -3\nd: 1.5\ne: 1e+06\nf: 0.0001\ng: 1e-05\n"
        );
    }

    #[test]
    fn empty_collections_are_flow() {
        let out = enc(json!({"kind": "X", "a": {}, "b": [], "c": [{}, []]}));
        assert_eq!(out, "kind: X\na: {}\nb: []\nc:\n    - {}\n    - []\n");
    }

    #[test]
    fn nested_lists_of_maps_align_after_dash() {
        let out = enc(json!({"kind": "X", "resources": [
            {"providers": [{"secretbox": {"keys": [{"name": "k", "secret": "s"}]}}],
             "resources": ["secrets"]},
            [["a", "b"], "c"]
        ]}));
        let expected = "kind: X\nresources:\n    - providers:\n        - secretbox:\n            \
            keys:\n                - name: k\n                  secret: s\n      resources:\n        \
            - secrets\n    - - - a\n        - b\n      - c\n";
        assert_eq!(out, expected);
    }

    #[test]
    fn block_scalars() {
        let out = enc(
            json!({"kind": "X", "a": "line1\nline2\n", "b": "x\n\ny", "c": ["p\nq\n"],
            "d": " lead\n", "e": "two\n\n", "f": "trailing \nspace"}),
        );
        let expected = "kind: X\na: |\n    line1\n    line2\nb: |-\n    x\n\n    y\nc:\n    - |\n      \
            p\n      q\nd: |4\n     lead\ne: |+\n    two\n\nf: \"trailing \\nspace\"\n";
        assert_eq!(out, expected);
    }

    #[test]
    fn indentation_indicator_counts_from_the_owning_key_or_dash() {
        // Found by fuzz/patch_engine: inside a sequence item the content sits 2 past the `-`, so
        // the indicator must be 2 there, or the rendered config does not parse back. go-yaml
        // writes 4 there (`- |4-`), and Talos's own loader then refuses its own output ("did not
        // find expected '-' indicator", asked of tests/oracle at v1.13.9): a deliberate
        // divergence. A leading blank line needs no indicator, and go-yaml writes none.
        let out = enc(
            json!({"kind": "X", "a": "\nF\n", "c": ["\nF\n", " lead\nx"], "l": [{"k": "\nF\n"}],
            "m": [[" x\n"]]}),
        );
        let expected = "kind: X\na: |\n\n    F\nc:\n    - |\n\n      F\n    - |2-\n       lead\n      x\n\
            l:\n    - k: |\n\n        F\nm:\n    - - |2\n         x\n";
        assert_eq!(out, expected);
        let again = MachineConfig::parse(&out).expect("the rendered text parses back");
        assert_eq!(again.to_yaml(), out);
    }

    #[test]
    fn block_scalar_in_a_list_parses_back() {
        // The smallest input the fuzzer reduced the failure to.
        let cfg = MachineConfig::parse("e:\n- |\n\n F").unwrap();
        let out = cfg.to_yaml();
        let again = MachineConfig::parse(&out).expect("the rendered text parses back");
        // The output has the v1alpha1 document's always-written fields on top of `e`.
        assert_eq!(again.normalized(Rules::V1_13), cfg.normalized(Rules::V1_13));
        assert_eq!(again.docs[0]["e"], cfg.docs[0]["e"]);
        assert_eq!(again.to_yaml(), out);
    }

    #[test]
    fn key_order_and_map_sorting() {
        let doc = json!({
            "cluster": {"clusterName": "c", "id": "i"},
            "machine": {
                "nodeLabels": {"z": "1", "a": "", "B": true},
                "type": "worker",
                "unknownField": {"yb": 1, "x": 2},
                "kubelet": {"extraArgs": {"rotate-server-certificates": true, "a": ["1", 2]},
                            "extraMounts": [{"source": "/s", "destination": "/d", "type": "bind"}]},
                "files": [{"path": "/p", "permissions": 420, "content": "c"}],
            },
            "version": "v1alpha1",
        });
        // Go's encoder writes the always-written fields the input left out: machine.token and
        // certSANs, a file's op, cluster.controlPlane (nil pointer: null) in 1.13.
        let expected = "version: v1alpha1\nmachine:\n    type: worker\n    token: \"\"\n    \
            certSANs: []\n    kubelet:\n        \
            extraArgs:\n            a:\n                - \"1\"\n                - \"2\"\n            \
            rotate-server-certificates: \"true\"\n        extraMounts:\n            \
            - destination: /d\n              type: bind\n              source: /s\n    \
            files:\n        - content: c\n          permissions: 0o644\n          path: /p\n          \
            op: \"\"\n    \
            nodeLabels:\n        B: \"true\"\n        a: \"\"\n        z: \"1\"\n    \
            unknownField:\n        yb: 1\n        x: 2\ncluster:\n    id: i\n    controlPlane: null\n    \
            clusterName: c\n";
        assert_eq!(enc(doc), expected);
    }

    #[test]
    fn multi_doc_header_first_and_free_form_natural_sort() {
        let out = enc(
            json!({"configuration": {"b10": 1, "b9": 2, "_x": 3, "A": 4},
            "kind": "KubeAuditPolicyConfig", "apiVersion": "v1alpha1"}),
        );
        assert_eq!(
            out,
            "apiVersion: v1alpha1\nkind: KubeAuditPolicyConfig\nconfiguration:\n    _x: 3\n    A: 4\n    \
             b9: 2\n    b10: 1\n"
        );
    }

    #[test]
    fn typed_string_fields_keep_numbers_as_text() {
        let c = MachineConfig::parse(
            "kind: HostnameConfig\nhostname: 123\nauto: off\napiVersion: v1alpha1\n",
        )
        .unwrap();
        assert_eq!(
            c.to_yaml(),
            "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: \"123\"\n"
        );
        let c =
            MachineConfig::parse("machine:\n  certSANs: [1.5, x]\n  install:\n    wipe: false\n")
                .unwrap();
        assert_eq!(
            c.to_yaml(),
            "version: \"\"\nmachine:\n    type: \"\"\n    token: \"\"\n    certSANs:\n        - \"1.5\"\n        \
             - x\n    install:\n        wipe: false\ncluster: null\n"
        );
    }

    #[test]
    fn disk_sizes_and_inline_manifests() {
        assert_eq!(human_bytes(10_000_000_000), "10 GB");
        assert_eq!(human_bytes(1_500_000_000), "1.5 GB");
        assert_eq!(parse_human_bytes("50GiB"), Some(53_687_091_200));
        assert_eq!(parse_human_bytes("10 GB"), Some(10_000_000_000));
        let doc = json!({"machine": {"disks": [{"device": "/dev/sdb", "partitions": [
            {"mountpoint": "/a", "size": "10GB"}, {"size": "50GiB"}, {"size": 1_234_000_000u64},
            {"size": "1.5 GB"}]}]},
            "cluster": {"inlineManifests": [{"contents": "\n\t  kind: X\n", "name": "m"}]}});
        // The kept leading spaces need an indicator counted from `contents` (2), not 4: with 4
        // the text would read back as "kind: X" and lose them.
        let expected = "version: \"\"\nmachine:\n    type: \"\"\n    token: \"\"\n    certSANs: []\n    \
            disks:\n        - device: /dev/sdb\n          partitions:\n            \
            - size: 10 GB\n              mountpoint: /a\n            - size: 53687091200\n            \
            - size: 1234000000\n            - size: 1.5 GB\ncluster:\n    controlPlane: null\n    \
            inlineManifests:\n        \
            - name: m\n          contents: |2\n              kind: X\n";
        assert_eq!(enc(doc), expected);
    }

    #[test]
    fn parsed_text_forms_are_normalised_like_talos() {
        let c = MachineConfig::parse(
            "machine:\n  files:\n    - permissions: 0644\n  nodeLabels:\n    a:\n    b: 10\n",
        )
        .unwrap();
        assert_eq!(
            c.to_yaml(),
            "version: \"\"\nmachine:\n    type: \"\"\n    token: \"\"\n    certSANs: []\n    files:\n        \
             - content: \"\"\n          permissions: 0o644\n          path: \"\"\n          op: \"\"\n    \
             nodeLabels:\n        a: \"\"\n        b: \"10\"\ncluster: null\n"
        );
    }

    #[test]
    fn documents_joined_without_leading_separator() {
        let c = MachineConfig {
            docs: vec![json!({"kind": "A"}), json!({"kind": "B"})],
        };
        assert_eq!(c.to_yaml(), "kind: A\n---\nkind: B\n");
    }
}
