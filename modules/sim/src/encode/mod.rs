//! The YAML Talos prints for a config: the simulator's own encoder.
//!
//! Talos encodes the decoded Go documents, not the bytes it was given
//! (`pkg/machinery/config/container/container.go` @ v1.13.9 / v1.14.1, `encodeToBuf`): the
//! v1alpha1 document first, then every other document in the order applied, joined by `---`.
//! With `encoder.CommentsDisabled` (`configdiff.DiffConfigs` asks for it) the encoder is plain
//! `yaml.Marshal` of each document (`pkg/machinery/config/encoder/encoder.go`, `Encode`), so:
//! struct fields in Go declaration order, `,omitempty` fields left out when go-yaml's `isZero`
//! says so (a nil pointer, an empty string, list or map, a zero number, `false`, a struct whose
//! fields are all zero), other zero fields written (`null` for a nil pointer, `[]`/`{}` for a nil
//! list/map, `""`, `0`, `false`), map keys in go-yaml's natural order. The Go types come from the
//! simulator's table (`crate::decode`); values come from the decoded documents. Types with their
//! own marshaller (PEM blocks, URLs, durations, sizes) are written as the config wrote them.

mod emit;

use serde_json::Value;

use crate::decode::{GoType, Named, Release, Shape, Table};

/// A YAML value about to be written.
#[derive(Clone, Debug, PartialEq)]
pub enum Yaml {
    Null,
    Bool(bool),
    /// An integer or float, as Go formats it.
    Number(String),
    Str(String),
    /// A string a `MarshalYAML` hands over as a `!!str` node: only a value that would read as
    /// another type is quoted (YAML 1.1 words such as `yes` stay plain).
    NodeStr(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

/// Every document of a config, as `Container.EncodeBytes(WithComments(CommentsDisabled))`.
pub fn encode_config(docs: &[Value], release: Release) -> String {
    let table = release.table();
    let mut ordered: Vec<&Value> = docs.iter().filter(|d| is_legacy(d)).collect();
    ordered.extend(docs.iter().filter(|d| !is_legacy(d)));
    let mut out = String::new();
    for doc in ordered {
        if !out.is_empty() {
            out.push_str("---\n");
        }
        out.push_str(&encode_document(doc, release, table));
    }
    out
}

/// One document as `yaml.Marshal` writes it.
pub fn encode_document(doc: &Value, release: Release, table: &Table) -> String {
    let quoting = match release {
        Release::V1_13 => emit::Quoting::Double,
        Release::V1_14 => emit::Quoting::CompatSingle,
    };
    emit::document(&typed_document(doc, table), quoting)
}

/// The v1alpha1 document has no `kind` (`decode/mod.rs` routes it the same way).
pub fn is_legacy(doc: &Value) -> bool {
    doc.get("kind").is_none()
}

/// The document's Go value, as go-yaml's representer walks it.
pub fn typed_document(doc: &Value, table: &Table) -> Yaml {
    let go_type = if is_legacy(doc) {
        Some(table.legacy.clone())
    } else {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        let version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        table.document(kind, version).map(|d| d.go_type.clone())
    };
    match go_type {
        Some(t) => {
            Typed {
                table,
                go_value: false,
            }
            .value(Some(doc), &GoType::Named(t))
            .0
        }
        None => untyped(doc),
    }
}

/// The v1alpha1 document as the Go value it decodes to, for comparing two of them the way
/// `reflect.DeepEqual` does: every field, a nil list or map (`null`) apart from an empty one.
pub fn go_value(doc: &Value, table: &Table) -> Yaml {
    Typed {
        table,
        go_value: true,
    }
    .value(Some(doc), &GoType::Named(table.legacy.clone()))
    .0
}

struct Typed<'a> {
    table: &'a Table,
    /// Build the Go value (see `go_value`) instead of what go-yaml writes.
    go_value: bool,
}

impl Typed<'_> {
    /// The YAML for `v` (absent: the Go zero value) of type `t`, and whether go-yaml's `isZero`
    /// holds for it.
    fn value(&self, v: Option<&Value>, t: &GoType) -> (Yaml, bool) {
        let v = v.filter(|v| !v.is_null());
        match t {
            GoType::Pointer(inner) => match v {
                None => (Yaml::Null, true),
                // A non-nil pointer is never zero, even to an empty struct.
                Some(_) => (self.value(v, inner).0, false),
            },
            GoType::Slice(inner) => match v.and_then(Value::as_array) {
                Some(items) => (
                    Yaml::Seq(items.iter().map(|i| self.value(Some(i), inner).0).collect()),
                    items.is_empty(),
                ),
                None => match v {
                    // `[]byte` and friends written as a scalar.
                    Some(other) => (untyped(other), false),
                    None if self.go_value => (Yaml::Null, true),
                    None => (Yaml::Seq(Vec::new()), true),
                },
            },
            GoType::Map(inner) => match v.and_then(Value::as_object) {
                Some(m) => {
                    let entries = sorted(
                        m.iter()
                            .map(|(k, v)| (k.clone(), self.value(Some(v), inner).0))
                            .collect(),
                    );
                    let zero = entries.is_empty();
                    (Yaml::Map(entries), zero)
                }
                None if self.go_value => (Yaml::Null, true),
                None => (Yaml::Map(Vec::new()), true),
            },
            GoType::Any => match v {
                None => (Yaml::Null, true),
                Some(v) => (untyped(v), false),
            },
            GoType::Basic(name) => basic(v, name),
            GoType::Named(name) => match self.table.named(name) {
                Some(named) => self.named(v, named),
                None => match v {
                    None => (Yaml::Null, true),
                    Some(v) => (untyped(v), false),
                },
            },
        }
    }

    fn named(&self, v: Option<&Value>, named: &Named) -> (Yaml, bool) {
        // `FileMode.MarshalYAML` (types/v1alpha1/v1alpha1_types.go): an `!!int` node in octal.
        if named.reflect_name == "v1alpha1.FileMode" {
            let n = match v {
                Some(Value::Number(n)) => n.as_i64().map(i128::from),
                Some(Value::String(s)) => go_int(s),
                _ => Some(0),
            };
            if let Some(n) = n {
                return (Yaml::Number(format!("0o{n:o}")), n == 0);
            }
        }
        // `DiskSize.MarshalYAML`: a whole number of bytes, as humanize writes it when exact.
        if named.reflect_name == "v1alpha1.DiskSize" {
            let n = match v {
                None => Some(0),
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => parse_bytes(s),
                Some(_) => None,
            };
            if let Some(n) = n {
                return (disk_size(n), n == 0);
            }
        }
        // `ArgValue.MarshalYAML` (v1alpha1_types.go @ v1.13.9, meta/args.go @ v1.14.1): `!!str`
        // nodes for a string or a list, nothing (`null`) for an empty value.
        if matches!(
            named.reflect_name.as_str(),
            "v1alpha1.ArgValue" | "meta.ArgValue"
        ) {
            let node = |v: &Value| match v {
                Value::String(s) => Yaml::NodeStr(s.clone()),
                other => Yaml::NodeStr(other.to_string()),
            };
            return match v {
                None => (Yaml::Null, true),
                Some(Value::String(s)) if s.is_empty() => (Yaml::Null, false),
                Some(Value::Array(items)) => (Yaml::Seq(items.iter().map(node).collect()), false),
                Some(other) => (node(other), false),
            };
        }
        // `URL.MarshalYAML` (meta/url.go @ v1.14.1): an unset URL is `""`.
        if named.reflect_name == "meta.URL" && v.is_none() {
            return (Yaml::Str(String::new()), true);
        }
        // siderolabs/crypto x509 `MarshalYAML`: `crt` and `key` always written (base64).
        let pem_fields: &[&str] = match named.reflect_name.as_str() {
            "x509.PEMEncodedCertificateAndKey" => &["crt", "key"],
            "x509.PEMEncodedCertificate" => &["crt"],
            "x509.PEMEncodedKey" => &["key"],
            _ => &[],
        };
        if !pem_fields.is_empty() {
            return match v {
                None => (Yaml::Null, true),
                Some(v) => {
                    let entries = pem_fields
                        .iter()
                        .map(|k| {
                            let s = v.get(*k).and_then(Value::as_str).unwrap_or("");
                            (k.to_string(), Yaml::Str(s.to_string()))
                        })
                        .collect();
                    (Yaml::Map(entries), false)
                }
            };
        }
        // A struct embedding a self-marshalling type (`network.Addr` embeds `netip.Addr`)
        // marshals through the promoted method.
        let promoted = named.fields.iter().any(|f| {
            f.embedded
                && match &f.go_type {
                    GoType::Named(n) => self.table.named(n).is_some_and(|t| t.custom_marshal),
                    _ => false,
                }
        });
        if named.custom_marshal || promoted {
            return match v {
                None => (Yaml::Null, true),
                Some(v) => {
                    let zero = named.is_zeroer && empty(v);
                    (untyped(v), zero)
                }
            };
        }
        match &named.shape {
            Shape::Alias(underlying) => self.value(v, underlying),
            Shape::Struct { .. } => {
                let obj = v.and_then(Value::as_object);
                let mut entries = Vec::new();
                let mut all_zero = true;
                self.fields(obj, named, &mut entries, &mut all_zero);
                let zero = if named.is_zeroer {
                    v.is_none_or(empty)
                } else {
                    all_zero
                };
                (Yaml::Map(entries), zero)
            }
        }
    }

    fn fields(
        &self,
        obj: Option<&serde_json::Map<String, Value>>,
        named: &Named,
        out: &mut Vec<(String, Yaml)>,
        all_zero: &mut bool,
    ) {
        for f in &named.fields {
            if f.inline {
                // go-yaml promotes an inline struct's fields (an inline map: every extra key).
                match &f.go_type {
                    GoType::Map(inner) => {
                        let known: Vec<&str> = named
                            .fields
                            .iter()
                            .filter_map(|f| f.key.as_deref())
                            .collect();
                        let extra: Vec<(String, Yaml)> = obj
                            .into_iter()
                            .flatten()
                            .filter(|(k, _)| !known.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), self.value(Some(v), inner).0))
                            .collect();
                        let extra = sorted(extra);
                        *all_zero &= extra.is_empty();
                        out.extend(extra);
                    }
                    t => {
                        let name = match t {
                            GoType::Pointer(i) => i.as_ref(),
                            other => other,
                        };
                        if let GoType::Named(n) = name
                            && let Some(inner) = self.table.named(n)
                        {
                            self.fields(obj, inner, out, all_zero);
                        }
                    }
                }
                continue;
            }
            let Some(key) = &f.key else { continue };
            let (y, zero) = self.value(obj.and_then(|o| o.get(key)), &f.go_type);
            *all_zero &= zero;
            if f.omitempty && zero && !self.go_value {
                continue;
            }
            out.push((key.clone(), y));
        }
    }
}

fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// A Go basic type: absent is its zero value; a scalar of another YAML type was converted by
/// the decoder, so its text is the value.
fn basic(v: Option<&Value>, name: &str) -> (Yaml, bool) {
    match name {
        "string" => {
            let s = match v {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            let zero = s.is_empty();
            (Yaml::Str(s), zero)
        }
        "bool" => {
            let b = v.and_then(Value::as_bool).unwrap_or(false);
            (Yaml::Bool(b), !b)
        }
        _ => match v {
            None => (Yaml::Number("0".into()), true),
            Some(Value::Number(n)) => (
                Yaml::Number(n.to_string()),
                n.as_f64().is_some_and(|f| f == 0.0),
            ),
            Some(Value::String(s)) => match go_int(s) {
                Some(n) => (Yaml::Number(n.to_string()), n == 0),
                None => (Yaml::Str(s.clone()), s.is_empty()),
            },
            Some(other) => (untyped(other), false),
        },
    }
}

/// go-humanize `ParseBytes` for the sizes a config writes (`10GB`, `1.5 GiB`, `512`).
fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.replace(',', "").parse().ok()?;
    let unit = unit.trim().to_lowercase();
    let mult: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "p" | "pb" => 1e15,
        "e" | "eb" => 1e18,
        "ki" | "kib" => 1024f64,
        "mi" | "mib" => 1024f64.powi(2),
        "gi" | "gib" => 1024f64.powi(3),
        "ti" | "tib" => 1024f64.powi(4),
        "pi" | "pib" => 1024f64.powi(5),
        "ei" | "eib" => 1024f64.powi(6),
        _ => return None,
    };
    Some((num * mult) as u64)
}

/// go-humanize `Bytes` (SI units), used by `DiskSize.MarshalYAML` when it reads back exactly.
fn disk_size(n: u64) -> Yaml {
    if n.is_multiple_of(1000) {
        let text = if n < 10 {
            format!("{n} B")
        } else {
            let sizes = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
            let e = ((n as f64).ln() / 1000f64.ln()).floor() as i32;
            let val = ((n as f64) / 1000f64.powi(e) * 10.0 + 0.5).floor() / 10.0;
            let unit = sizes[e as usize];
            if val < 10.0 {
                format!("{val:.1} {unit}")
            } else {
                format!("{val:.0} {unit}")
            }
        };
        if parse_bytes(&text) == Some(n) {
            return Yaml::Str(text);
        }
    }
    Yaml::Number(n.to_string())
}

/// An integer the way go-yaml read it (`0x10`, `0o17`, `0b1`, `1_000`).
fn go_int(s: &str) -> Option<i128> {
    let t = s.replace('_', "");
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r.to_string()),
        None => (false, t.trim_start_matches('+').to_string()),
    };
    let n = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()?
    } else if let Some(o) = t.strip_prefix("0o").or_else(|| t.strip_prefix("0O")) {
        i128::from_str_radix(o, 8).ok()?
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        i128::from_str_radix(b, 2).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        i128::from_str_radix(&t[1..], 8).ok()?
    } else {
        t.parse().ok()?
    };
    Some(if neg { -n } else { n })
}

/// A value of no known Go type (`any`, `Unstructured`, a self-marshalling type): maps sorted
/// as go-yaml sorts a Go map.
pub fn untyped(v: &Value) -> Yaml {
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Bool(*b),
        Value::Number(n) => Yaml::Number(n.to_string()),
        Value::String(s) => Yaml::Str(s.clone()),
        Value::Array(a) => Yaml::Seq(a.iter().map(untyped).collect()),
        Value::Object(o) => Yaml::Map(sorted(
            o.iter().map(|(k, v)| (k.clone(), untyped(v))).collect(),
        )),
    }
}

fn sorted(mut entries: Vec<(String, Yaml)>) -> Vec<(String, Yaml)> {
    entries.sort_by(|a, b| key_order(&a.0, &b.0));
    entries
}

/// go-yaml's `keyList.Less` for string keys (representer.go): letters before other runes,
/// digit runs compared as numbers.
pub fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let less = |a: &str, b: &str| -> bool {
        let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut digits = false;
        let n = ar.len().min(br.len());
        for i in 0..n {
            if ar[i] == br[i] {
                digits = ar[i].is_numeric();
                continue;
            }
            let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
            if al && bl {
                return ar[i] < br[i];
            }
            if al || bl {
                return if digits { al } else { bl };
            }
            let (mut an, mut bn): (i64, i64) = (0, 0);
            if ar[i] == '0' || br[i] == '0' {
                let mut j = i;
                while j > 0 && ar[j - 1].is_ascii_digit() {
                    j -= 1;
                    if ar[j] != '0' {
                        an = 1;
                        bn = 1;
                        break;
                    }
                }
            }
            let mut ai = i;
            while ai < ar.len() && ar[ai].is_ascii_digit() {
                an = an.wrapping_mul(10).wrapping_add(ar[ai] as i64 - '0' as i64);
                ai += 1;
            }
            let mut bi = i;
            while bi < br.len() && br[bi].is_ascii_digit() {
                bn = bn.wrapping_mul(10).wrapping_add(br[bi] as i64 - '0' as i64);
                bi += 1;
            }
            if an != bn {
                return an < bn;
            }
            if ai != bi {
                return ai < bi;
            }
            return ar[i] < br[i];
        }
        ar.len() < br.len()
    };
    if less(a, b) {
        Ordering::Less
    } else if less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

#[cfg(test)]
mod tests;
