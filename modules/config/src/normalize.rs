//! A document as Talos's encoder sees it. talosctl writes a config by decoding it into Talos's
//! Go structs and encoding them back with go-yaml (`yaml.Marshal` when comments are off:
//! `pkg/machinery/config/encoder/encoder.go` at v1.13.9), so what it writes depends on the Go
//! types, not on the keys the input had:
//! - a field without `omitempty` is always written, at its zero value when unset (`""`, `0`,
//!   `false`, `null` for a nil pointer, `[]`, `{}`, a struct of its own always-written fields);
//! - an `omitempty` field is dropped when go-yaml's `isZero` says it is empty (nil pointers; empty
//!   strings, lists and maps; `false`; `0`; structs whose exported fields are all empty; types with
//!   an `IsZero` method by that method). A non-nil pointer to an empty struct is still written.
//!
//! So a patch that adds a struct brings all its always-written fields along (`routes: []` under
//! a new vlan, `gateway: ""` under a new route), and two configs that differ only in such zero
//! values say the same thing. Normalising both sides before comparing is what makes a
//! talosctl-written live config and the collection's desired config compare equal.
//!
//! The rules per field come from upstream's Go types (`fields.rs`, generated); fields the table
//! does not know, and documents of unknown kinds, are left as they are.

use serde_json::{Map, Value};

use crate::contract::Contract;
use crate::encode::{Empty, F, Shape, Unset, Zero, document_fields};

/// Which release's types decide: Talos 1.14 changed one rule (`cluster.controlPlane` became
/// `omitempty`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    V1_13,
    V1_14,
}

impl Rules {
    /// The rules of the talosctl that renders for `contract`: 1.14's from 1.14 on.
    pub fn for_contract(contract: Contract) -> Rules {
        Rules::for_release(contract.major.into(), contract.minor.into())
    }

    /// The rules of a node running Talos `major.minor`: a config read from it and sent back is
    /// encoded as the node itself would, so nothing it holds changes meaning (1.14 keeps an
    /// empty `searchDomains.domains: []`, which clears the DHCP domains).
    pub fn for_release(major: u64, minor: u64) -> Rules {
        if (major, minor) >= (1, 14) {
            Rules::V1_14
        } else {
            Rules::V1_13
        }
    }
}

impl Unset {
    fn resolve(&self, rules: Rules) -> &Unset {
        match (self, rules) {
            (Unset::Split(old, _), Rules::V1_13) => old.resolve(rules),
            (Unset::Split(_, new), Rules::V1_14) => new.resolve(rules),
            (other, _) => other,
        }
    }
}

/// `doc` with every known struct's always-written fields present and its empty omitempty fields
/// gone, as go-yaml would write it.
pub fn normalize_document(doc: &Value, rules: Rules) -> Value {
    let fields = document_fields(doc);
    normalize(doc, Shape::Struct(fields), rules)
}

/// `doc` as Talos compares decoded configs (`reflect.DeepEqual` on its Go structs, as
/// `CanApplyImmediate` does in `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go` at
/// v1.13.9): a string, number or boolean field left out is its zero value, and so is a struct
/// value whose fields all are; but a nil list, map or pointer is not an empty one.
pub fn decoded_document(doc: &Value) -> Value {
    let fields = document_fields(doc);
    decoded(doc, Shape::Struct(fields))
}

fn decoded(v: &Value, shape: Shape) -> Value {
    match (shape, v) {
        (Shape::Struct(fields), Value::Object(m)) => {
            let mut out = Map::new();
            for (k, x) in m {
                let Some(F(_, inner, unset)) = fields.iter().find(|F(name, _, _)| name == k) else {
                    out.insert(k.clone(), x.clone());
                    continue;
                };
                let x = decoded(x, *inner);
                let zero = match unset.resolve(Rules::V1_13) {
                    Unset::Write(Zero::Text | Zero::Number | Zero::Literal(_))
                    | Unset::Omit(Empty::Text | Empty::Number | Empty::Bool) => {
                        is_scalar_zero(&x, unset.resolve(Rules::V1_13))
                    }
                    Unset::Write(Zero::Struct) | Unset::Omit(Empty::Struct) => {
                        x.as_object().is_some_and(Map::is_empty)
                    }
                    _ => false,
                };
                if !zero {
                    out.insert(k.clone(), x);
                }
            }
            Value::Object(out)
        }
        (Shape::Seq(inner), Value::Array(items)) => {
            Value::Array(items.iter().map(|x| decoded(x, *inner)).collect())
        }
        (Shape::Map(inner), Value::Object(m)) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), decoded(x, *inner)))
                .collect(),
        ),
        _ => v.clone(),
    }
}

fn is_scalar_zero(v: &Value, unset: &Unset) -> bool {
    match unset {
        Unset::Write(Zero::Literal(text)) => v.as_str() == Some(text),
        _ => {
            v.is_null()
                || v.as_str() == Some("")
                || v == &Value::Bool(false)
                || v.as_f64() == Some(0.0)
        }
    }
}

fn normalize(v: &Value, shape: Shape, rules: Rules) -> Value {
    match (shape, v) {
        (Shape::Struct(fields), Value::Object(m)) => normalize_struct(m, fields, rules),
        (Shape::Seq(inner), Value::Array(items)) => {
            Value::Array(items.iter().map(|x| normalize(x, *inner, rules)).collect())
        }
        (Shape::Map(inner), Value::Object(m)) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), normalize(x, *inner, rules)))
                .collect(),
        ),
        _ => v.clone(),
    }
}

fn normalize_struct(m: &Map<String, Value>, fields: &[F], rules: Rules) -> Value {
    let mut out = Map::new();
    for F(key, shape, unset) in fields {
        let unset = unset.resolve(rules);
        match (m.get(*key), unset) {
            (None, Unset::Write(zero)) => {
                out.insert(key.to_string(), normalize(&zero_value(zero), *shape, rules));
            }
            (None, _) => {}
            (Some(x), Unset::Omit(empty)) if is_empty(x, *empty, *shape, rules) => {}
            (Some(x), _) => {
                out.insert(key.to_string(), normalize(x, *shape, rules));
            }
        }
    }
    // Keys the table does not know stay, after the known ones (the encoder orders them anyway).
    for (k, x) in m {
        if !fields.iter().any(|F(name, _, _)| name == k) {
            out.insert(k.clone(), x.clone());
        }
    }
    Value::Object(out)
}

fn zero_value(zero: &Zero) -> Value {
    match zero {
        Zero::Null => Value::Null,
        Zero::Text => Value::String(String::new()),
        Zero::Number => Value::from(0),
        Zero::List => Value::Array(Vec::new()),
        Zero::Map | Zero::Struct => Value::Object(Map::new()),
        Zero::Literal(text) => Value::String(text.to_string()),
    }
}

/// go-yaml's `isZero` for a value of an omitempty field.
fn is_empty(v: &Value, empty: Empty, shape: Shape, rules: Rules) -> bool {
    if v.is_null() {
        return true;
    }
    match empty {
        // A pointer or an interface: only nil is empty.
        Empty::Never => false,
        Empty::Text => v.as_str() == Some(""),
        Empty::Bool => v == &Value::Bool(false),
        Empty::Number => v.as_f64() == Some(0.0),
        Empty::List => v.as_array().is_some_and(Vec::is_empty),
        Empty::Map => v.as_object().is_some_and(Map::is_empty),
        Empty::Struct => match (v, shape) {
            (Value::Object(m), Shape::Struct(fields)) => struct_is_zero(m, fields, rules),
            (Value::Object(m), _) => m.is_empty(),
            _ => false,
        },
        // The type's own IsZero: a size, an address, a spec. Its written forms that mean
        // nothing are empty.
        Empty::Custom => match v {
            Value::String(s) => s.is_empty(),
            Value::Object(m) => match shape {
                Shape::Struct(fields) => struct_is_zero(m, fields, rules),
                _ => m.is_empty(),
            },
            Value::Number(n) => n.as_f64() == Some(0.0),
            _ => false,
        },
    }
}

/// A struct is zero when every exported field is (go-yaml looks at all of them, omitempty or
/// not). A key the table does not know makes it non-zero.
fn struct_is_zero(m: &Map<String, Value>, fields: &[F], rules: Rules) -> bool {
    m.iter().all(|(k, x)| {
        let Some(F(_, shape, unset)) = fields.iter().find(|F(name, _, _)| name == k) else {
            return false;
        };
        match unset.resolve(rules) {
            Unset::Omit(empty) => is_empty(x, *empty, *shape, rules),
            Unset::Write(zero) => is_zero_value(x, zero, *shape, rules),
            Unset::Split(..) => false,
        }
    })
}

/// Whether an always-written field holds its zero value.
fn is_zero_value(v: &Value, zero: &Zero, shape: Shape, rules: Rules) -> bool {
    match zero {
        Zero::Null => v.is_null(),
        Zero::Text => v.is_null() || v.as_str() == Some(""),
        Zero::Number => v.is_null() || v.as_f64() == Some(0.0),
        Zero::List => v.is_null() || v.as_array().is_some_and(Vec::is_empty),
        Zero::Map => v.is_null() || v.as_object().is_some_and(Map::is_empty),
        Zero::Struct => is_empty(v, Empty::Struct, shape, rules),
        Zero::Literal(text) => v.is_null() || v.as_str() == Some(text),
    }
}

#[cfg(test)]
mod tests;
