//! Talos 1.14's refusal of a null where the decoded value would be a nil pointer inside a list or
//! a map (`- null` in a `[]*T`, `key: null` in a `map[string]*T`): code iterating such a list does
//! not expect nil entries. A null for a struct field stays allowed (it unsets the field).
//! `xyaml.CheckNullElements` (siderolabs/gen v0.8.8 `xyaml/null.go`), which
//! `configloader/internal/decoder/decoder.go` calls after the unknown-keys check at v1.14.1 (not
//! at v1.13.9). Every offending place is reported, joined as Go's `errors.Join` joins them.

use super::node::{Kind, Node};
use super::resolve::{Resolved, resolve};
use super::table::{GoType, Shape, Table};

pub fn check(table: &Table, root_type: &str, node: &Node) -> Result<(), String> {
    let mut errors = Vec::new();
    walk(
        table,
        &GoType::Named(root_type.to_string()),
        node,
        "",
        &mut errors,
    );
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn is_null(node: &Node) -> bool {
    matches!(node.kind, Kind::Scalar { .. }) && resolve(node) == Resolved::Null
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Records the error when `node` is a null decoded into a pointer; true then.
fn null_pointer(ty: &GoType, node: &Node, path: &str, errors: &mut Vec<String>) -> bool {
    if !matches!(ty, GoType::Pointer(_)) || !is_null(node) {
        return false;
    }
    errors.push(format!(
        "null value is not allowed at {path:?} (line {})",
        node.line
    ));
    true
}

fn walk(table: &Table, ty: &GoType, node: &Node, path: &str, errors: &mut Vec<String>) {
    let mut ty = ty;
    while let GoType::Pointer(inner) = ty {
        ty = inner;
    }
    match (ty, &node.kind) {
        (GoType::Any | GoType::Basic(_), _) => {}
        (GoType::Named(name), _) => {
            let Some(named) = table.named(name) else {
                return;
            };
            match &named.shape {
                Shape::Struct { decoded, .. } => {
                    if let Kind::Mapping(entries) = &node.kind {
                        for (k, v) in entries {
                            let Some(key) = k.scalar() else { continue };
                            // Unknown keys are the unknown-keys check's business.
                            if let Some(field) = decoded.get(key) {
                                walk(table, field, v, &join(path, key), errors);
                            }
                        }
                    }
                }
                // A custom unmarshaler takes whatever it is given.
                Shape::Alias(_) if named.unmarshal_yaml => {}
                Shape::Alias(under) => walk(table, under, node, path, errors),
            }
        }
        (GoType::Map(value), Kind::Mapping(entries)) => {
            for (k, v) in entries {
                let Some(key) = k.scalar() else { continue };
                let at = join(path, key);
                if !null_pointer(value, v, &at, errors) {
                    walk(table, value, v, &at, errors);
                }
            }
        }
        (GoType::Slice(elem), Kind::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                if !null_pointer(elem, item, &at, errors) {
                    walk(table, elem, item, &at, errors);
                }
            }
        }
        _ => {}
    }
}
