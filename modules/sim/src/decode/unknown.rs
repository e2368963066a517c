//! Keys no field takes, as `xyaml.CheckUnknownKeys` of github.com/siderolabs/gen (v0.8.7, which
//! Talos 1.13.9 and 1.14 pin) finds them after the typed decode: a walk of the node beside the
//! Go type. Struct keys are the field names it sees (yaml tag names, lower-cased Go names for
//! untagged fields, promoted fields of embedded structs; the generator precomputes them); maps
//! and `any` take every key; an `,inline` map takes every key of its struct; a type with its own
//! UnmarshalYAML is trusted with a value the walk cannot descend into. The report is go-yaml's
//! encoding of a map of each unknown key to its value (keys sorted, four-space indent), nested
//! under the known keys that lead to it; sequences keep only the elements that hold unknowns.

use super::node::{Kind, Node, Style};
use super::table::{GoType, Shape, Table};

/// What the walk found below one node.
enum Unknown {
    /// An unknown key's whole value, as written.
    Value(Node),
    Map(Vec<(String, Unknown)>),
    Seq(Vec<Unknown>),
}

/// `Ok(None)` when every key is known, `Ok(Some(report))` with upstream's message otherwise,
/// `Err` for a node the walk cannot place (upstream's "unexpected type for yaml ..." errors).
pub fn check(table: &Table, root_type: &str, node: &Node) -> Result<Option<String>, String> {
    let found = walk(table, &GoType::Named(root_type.to_string()), node)?;
    Ok(found.map(|u| {
        let mut out = String::from("unknown keys found during decoding:\n");
        emit_unknown(&u, 0, &mut out);
        out
    }))
}

fn walk(table: &Table, ty: &GoType, node: &Node) -> Result<Option<Unknown>, String> {
    let ty = strip_pointers(ty);
    match (&node.kind, ty) {
        (_, GoType::Any) | (Kind::Scalar { .. }, _) => Ok(None),
        (Kind::Mapping(entries), GoType::Map(value)) => walk_map(table, entries, |_| Some(value)),
        (Kind::Sequence(items), GoType::Slice(elem)) => walk_seq(table, items, elem),
        (_, GoType::Named(name)) => {
            let Some(named) = table.named(name) else {
                return Ok(None);
            };
            match (&named.shape, &node.kind) {
                (Shape::Alias(underlying), _) => {
                    walk(table, underlying, node).or_else(|e| trust(named.unmarshal_yaml, e))
                }
                (
                    Shape::Struct {
                        inline_map: Some(value),
                        ..
                    },
                    Kind::Mapping(entries),
                ) => walk_map(table, entries, |_| Some(value)),
                (Shape::Struct { known, .. }, Kind::Mapping(entries)) => {
                    walk_map(table, entries, |k| known.get(k))
                }
                (Shape::Struct { .. }, _) => trust(
                    named.unmarshal_yaml,
                    format!("unexpected type for yaml sequence: {}", named.reflect_name),
                ),
            }
        }
        (Kind::Mapping(_), other) => Err(format!(
            "unexpected type for yaml mapping: {}",
            print(other)
        )),
        (Kind::Sequence(_), other) => Err(format!(
            "unexpected type for yaml sequence: {}",
            print(other)
        )),
    }
}

/// gen v0.8.7 lets a type with its own UnmarshalYAML take what the walk cannot place.
fn trust(unmarshal_yaml: bool, error: String) -> Result<Option<Unknown>, String> {
    if unmarshal_yaml { Ok(None) } else { Err(error) }
}

fn walk_map<'t>(
    table: &Table,
    entries: &[(Node, Node)],
    field: impl Fn(&str) -> Option<&'t GoType>,
) -> Result<Option<Unknown>, String> {
    let mut found = Vec::new();
    for (k, v) in entries {
        let Some(key) = k.scalar() else {
            return Err("unexpected mapping key type".into());
        };
        match field(key) {
            None => found.push((key.to_string(), Unknown::Value(v.clone()))),
            Some(ty) => {
                if let Some(inner) = walk(table, ty, v)? {
                    found.push((key.to_string(), inner));
                }
            }
        }
    }
    Ok((!found.is_empty()).then_some(Unknown::Map(found)))
}

fn walk_seq(table: &Table, items: &[Node], elem: &GoType) -> Result<Option<Unknown>, String> {
    let mut found = Vec::new();
    for item in items {
        if let Some(inner) = walk(table, elem, item)? {
            found.push(inner);
        }
    }
    Ok((!found.is_empty()).then_some(Unknown::Seq(found)))
}

fn strip_pointers(ty: &GoType) -> &GoType {
    match ty {
        GoType::Pointer(inner) => strip_pointers(inner),
        other => other,
    }
}

fn print(ty: &GoType) -> String {
    match ty {
        GoType::Pointer(t) => format!("*{}", print(t)),
        GoType::Slice(t) => format!("[]{}", print(t)),
        GoType::Map(t) => format!("map[string]{}", print(t)),
        GoType::Any => "interface {}".into(),
        GoType::Basic(b) | GoType::Named(b) => b.clone(),
    }
}

// ---- go-yaml's block encoding of the report ----

const INDENT: usize = 4;

fn emit_unknown(u: &Unknown, indent: usize, out: &mut String) {
    match u {
        Unknown::Value(node) => emit_node(node, indent, out),
        Unknown::Map(entries) => {
            // go-yaml sorts a Go map's keys.
            let mut sorted: Vec<&(String, Unknown)> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 || !out.ends_with("- ") {
                    pad(indent, out);
                }
                out.push_str(&plain_or_quoted(k));
                out.push(':');
                value_after_key(v, indent, out);
            }
        }
        Unknown::Seq(items) => {
            for item in items {
                pad(indent, out);
                out.push_str("- ");
                emit_unknown(item, indent + 2, out);
            }
        }
    }
}

/// After `key:` a scalar or flow value follows on the line, a block one on the next lines.
fn value_after_key(v: &Unknown, indent: usize, out: &mut String) {
    match v {
        Unknown::Value(node) if is_inline(node) => {
            out.push(' ');
            emit_inline(node, out);
            out.push('\n');
        }
        Unknown::Value(node) if matches!(node.kind, Kind::Sequence(_)) => {
            out.push('\n');
            emit_node(node, indent + INDENT, out);
        }
        Unknown::Seq(_) => {
            out.push('\n');
            emit_unknown(v, indent + INDENT, out);
        }
        _ => {
            out.push('\n');
            emit_unknown(v, indent + INDENT, out);
        }
    }
}

fn is_inline(node: &Node) -> bool {
    match &node.kind {
        Kind::Scalar { style, .. } => !matches!(style, Style::Literal | Style::Folded),
        Kind::Mapping(e) => node.flow || e.is_empty(),
        Kind::Sequence(i) => node.flow || i.is_empty(),
    }
}

/// A block node at `indent` (a mapping's keys, a sequence's items).
fn emit_node(node: &Node, indent: usize, out: &mut String) {
    match &node.kind {
        Kind::Mapping(entries) if !is_inline(node) => {
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 || !out.ends_with("- ") {
                    pad(indent, out);
                }
                emit_inline(k, out);
                out.push(':');
                if is_inline(v) {
                    out.push(' ');
                    emit_inline(v, out);
                    out.push('\n');
                } else {
                    out.push('\n');
                    emit_node(v, indent + INDENT, out);
                }
            }
        }
        Kind::Sequence(items) if !is_inline(node) => {
            for item in items {
                pad(indent, out);
                out.push_str("- ");
                if is_inline(item) {
                    emit_inline(item, out);
                    out.push('\n');
                } else {
                    emit_node(item, indent + 2, out);
                }
            }
        }
        Kind::Scalar {
            value,
            style: Style::Literal | Style::Folded,
        } => {
            // Block scalars only appear as values; keep them readable.
            pad(indent, out);
            out.push_str(&go_quote(value));
            out.push('\n');
        }
        _ => {
            pad(indent, out);
            emit_inline(node, out);
            out.push('\n');
        }
    }
}

fn emit_inline(node: &Node, out: &mut String) {
    match &node.kind {
        Kind::Scalar { value, style } => match style {
            Style::Plain => out.push_str(value),
            Style::SingleQuoted => {
                out.push('\'');
                out.push_str(&value.replace('\'', "''"));
                out.push('\'');
            }
            Style::DoubleQuoted | Style::Literal | Style::Folded => out.push_str(&go_quote(value)),
        },
        Kind::Mapping(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit_inline(k, out);
                out.push_str(": ");
                emit_inline(v, out);
            }
            out.push('}');
        }
        Kind::Sequence(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit_inline(item, out);
            }
            out.push(']');
        }
    }
}

fn pad(indent: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A key as go-yaml writes a Go string: plain when that reads back as the same string.
fn plain_or_quoted(s: &str) -> String {
    let needs_quotes = s.is_empty()
        || s.starts_with([
            ' ', '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"',
            '%', '@', '`',
        ])
        || s.ends_with(' ')
        || s.contains(": ")
        || s.contains(" #")
        || s.contains('\n');
    if needs_quotes {
        go_quote(s)
    } else {
        s.to_string()
    }
}

fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}
