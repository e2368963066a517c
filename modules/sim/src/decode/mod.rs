//! Reading a machine config the way Talos's config loader does, so the simulator refuses what a
//! real node refuses, on its own: its own YAML parsing and scalar resolution (go-yaml v4's), its
//! own table of upstream's Go types (`table.rs`), and upstream's document routing and errors.
//!
//! Upstream (`pkg/machinery/config/configloader/internal/decoder/decoder.go` at v1.13.9, the same
//! at v1.14.0-rc.1): each YAML document is a mapping; one without `kind` whose `apiVersion` is
//! `v1alpha1`, or that has any of the legacy keys `machine`, `cluster`, `debug` or `persist`, is
//! the v1alpha1 `Config`; every other needs `kind` and `apiVersion` and a registered document
//! type (`internal/registry/registry.go`: "not registered"). Two documents with the same
//! apiVersion, kind and name are refused. Each document is decoded into its Go type (go-yaml's
//! type errors, `typed.rs`), then checked for keys no field takes (`unknown.rs`). Every error
//! names the document as `apiVersion/kind/name (line N)`, kind `v1alpha1` for the legacy one.
//! `configloader.go` then refuses an input with no document at all ("config not found"), and
//! `container.go` a second v1alpha1 document.

mod node;
mod null_elements;
mod resolve;
mod table;
mod typed;
mod unknown;

use serde_json::{Map, Number, Value};

use node::{Kind, Node};
pub use table::Release;
pub(crate) use table::{GoType, Named, Shape, Table};

/// Whether go-yaml v4 reads `s`, written plain, back as a string (`resolve.rs`).
pub(crate) fn plain_is_string(s: &str) -> bool {
    resolve::resolve_plain(s) == resolve::Resolved::Str
}

/// The documents of `text` as JSON values, or Talos's error for the first document it refuses.
pub fn decode(text: &str, release: Release) -> Result<Vec<Value>, String> {
    let table = release.table();
    let docs = node::parse(text).map_err(|e| format!("decode error: {e}"))?;
    let mut seen = std::collections::HashSet::new();
    let mut legacy_seen = false;
    let mut out = Vec::new();
    for doc in docs {
        let Some(root) = doc.root else { continue };
        let mapping = match &root.kind {
            Kind::Mapping(_) => &root,
            Kind::Scalar { .. } if resolve::resolve(&root) == resolve::Resolved::Null => continue,
            _ => return Err(format!("expected a YAML document at line {}", root.line)),
        };
        let id = DocumentId::of(mapping);
        if !seen.insert(id.clone()) {
            return Err(format!(
                "duplicate document {}/{}/{} is not allowed (line {})",
                id.api_version, id.kind, id.name, mapping.line
            ));
        }
        let go_type = decode_document(table, release, mapping).map_err(|e| {
            format!(
                "error decoding document {}/{}/{} (line {}): {e}",
                id.api_version, id.kind, id.name, mapping.line
            )
        })?;
        if go_type == table.legacy {
            if legacy_seen {
                return Err("duplicate v1alpha1.Config".into());
            }
            legacy_seen = true;
        }
        out.push(to_json(mapping));
    }
    if out.is_empty() {
        return Err("config not found".into());
    }
    Ok(out)
}

/// How the decoder names a document in its errors.
#[derive(Clone, PartialEq, Eq, Hash)]
struct DocumentId {
    api_version: String,
    kind: String,
    name: String,
}

impl DocumentId {
    fn of(doc: &Node) -> DocumentId {
        let text = |k| {
            doc.get(k)
                .and_then(Node::scalar)
                .unwrap_or_default()
                .to_string()
        };
        let kind = text("kind");
        DocumentId {
            api_version: text("apiVersion"),
            kind: if kind.is_empty() {
                "v1alpha1".into()
            } else {
                kind
            },
            name: text("name"),
        }
    }
}

/// The decoder's routing (`decode` in decoder.go): which Go type a document decodes into.
fn route<'t>(table: &'t table::Table, doc: &Node) -> Result<&'t str, String> {
    let Kind::Mapping(entries) = &doc.kind else {
        unreachable!("routed documents are mappings")
    };
    let mut kind = String::new();
    let mut version = String::new();
    for (k, v) in entries {
        match k.scalar() {
            Some("kind") => kind = scalar_text(v, "kind decode")?,
            Some("apiVersion") => version = scalar_text(v, "version decode")?,
            Some("machine" | "cluster" | "debug" | "persist") => version = "v1alpha1".into(),
            _ => {}
        }
    }
    if version == "v1alpha1" && kind.is_empty() {
        return Ok(&table.legacy);
    }
    if kind.is_empty() {
        return Err("missing kind".into());
    }
    if version.is_empty() {
        return Err("missing apiVersion".into());
    }
    table
        .document(&kind, &version)
        .map(|d| d.go_type.as_str())
        .ok_or_else(|| format!("{kind:?} {version:?}: not registered"))
}

fn scalar_text(v: &Node, what: &str) -> Result<String, String> {
    match &v.kind {
        Kind::Scalar { value, .. } => Ok(value.clone()),
        _ => Err(format!(
            "{what}: yaml: construct errors:\n  line {}: cannot construct {} into string",
            v.line,
            v.short_tag()
        )),
    }
}

/// Decodes one document; answers the Go type it decoded into.
fn decode_document<'t>(
    table: &'t table::Table,
    release: Release,
    doc: &Node,
) -> Result<&'t str, String> {
    let go_type = route(table, doc)?;
    typed::check(table, go_type, doc).map_err(|e| {
        let kind = doc.get("kind").and_then(Node::scalar).unwrap_or("");
        let printed = table
            .named(go_type)
            .map_or(go_type, |n| n.reflect_name.as_str());
        format!("error decoding {kind} to *{printed}: {}", e.message())
    })?;
    if let Some(report) = unknown::check(table, go_type, doc)? {
        return Err(report);
    }
    if release == Release::V1_14 {
        null_elements::check(table, go_type, doc)?;
    }
    Ok(go_type)
}

/// The document as the rest of the simulator reads it. Plain scalars become what go-yaml
/// resolves them to, except integers written in a form JSON cannot keep (`0644`, `0x1F`,
/// `1_000`), which stay text as written, so the config's own encoding can reproduce them.
fn to_json(node: &Node) -> Value {
    match &node.kind {
        Kind::Mapping(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(k.scalar().unwrap_or_default().to_string(), to_json(v));
            }
            Value::Object(m)
        }
        Kind::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        Kind::Scalar { value, .. } => {
            let decimal = |s: &str| {
                let digits = s.strip_prefix('-').unwrap_or(s);
                !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits == "0" || !digits.starts_with('0'))
            };
            match resolve::resolve(node) {
                resolve::Resolved::Null => Value::Null,
                resolve::Resolved::Bool(b) => Value::Bool(b),
                resolve::Resolved::Int(i) if decimal(value) => Value::Number(i.into()),
                resolve::Resolved::Uint(u) if decimal(value) => Value::Number(u.into()),
                resolve::Resolved::Float(f) if value.parse::<f64>().is_ok() => {
                    Number::from_f64(f).map_or_else(|| Value::String(value.clone()), Value::Number)
                }
                _ => Value::String(value.clone()),
            }
        }
    }
}

#[cfg(test)]
mod tests;
