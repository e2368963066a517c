//! The deprecation table (`deprecations::DEPRECATED_FIELDS`, which drives the 1.14 converter and
//! the warnings) against upstream's own code at the GA release: the v1alpha1 fields that
//! machinery v1.14.1 marks `Deprecated:` in its Go types and v1.13.9 does not (read by the oracle
//! from the modules' source, `config/types/v1alpha1/`), and the v1alpha1 paths that v1.13.9's JSON
//! schema (`config/schemas/config.schema.json`) describes and v1.14.1's no longer does.
//!
//! Every field the GA release moved is a row, and every row is such a field or lies under one,
//! except the few listed in `NOT_MOVED_BY_1_14` with the reason.

use std::collections::BTreeSet;
use std::path::Path;

use ferro_talos_config::deprecations::DEPRECATED_FIELDS;
use ferro_talos_oracle::{Oracle, Release, machinery_source};
use serde_json::{Map, Value, json};

/// Rows that are not a 1.14 move, and why the table has them.
const NOT_MOVED_BY_1_14: &[&str] = &[
    // Deprecated since long before 1.13 (v1alpha1_types.go marks it at v1.13.9 already), and
    // 1.14's validation still refuses it next to allowSchedulingOnControlPlanes: the converter
    // warns about it with the rest.
    ".cluster.allowSchedulingOnMasters",
];

/// The v1alpha1 fields of `release` and which of them its Go types mark deprecated.
struct Fields {
    all: BTreeSet<String>,
    deprecated: BTreeSet<String>,
    schema: BTreeSet<String>,
}

fn fields(release: Release) -> Option<Fields> {
    let source = machinery_source(release)?;
    let mut oracle = Oracle::start(release)?;
    let answer = oracle.ask(&json!({"op": "v1alpha1_fields", "source": source}));
    let list = answer["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: {answer}", release.tag()));
    let path = |f: &Value| f["path"].as_str().unwrap().to_string();
    Some(Fields {
        all: list.iter().map(path).collect(),
        deprecated: list
            .iter()
            .filter(|f| f["deprecated"] == true)
            .map(path)
            .collect(),
        schema: schema_paths(&source),
    })
}

/// Every path under the v1alpha1 document that the module's JSON schema describes.
fn schema_paths(source: &Path) -> BTreeSet<String> {
    let file = source.join("config/schemas/config.schema.json");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("upstream schema {}: {e}", file.display()));
    let schema: Value = serde_json::from_str(&text).unwrap();
    let defs = schema["$defs"].as_object().expect("$defs");
    let mut paths = BTreeSet::new();
    walk(defs, &defs["v1alpha1.Config"], "", 0, &mut paths);
    paths
}

fn walk(
    defs: &Map<String, Value>,
    s: &Value,
    prefix: &str,
    depth: usize,
    out: &mut BTreeSet<String>,
) {
    if depth > 16 {
        return;
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or_default();
        if let Some(def) = defs.get(name) {
            walk(defs, def, prefix, depth + 1, out);
        }
        return;
    }
    for (key, property) in s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let path = format!("{prefix}.{key}");
        walk(defs, property, &path, depth + 1, out);
        out.insert(path);
    }
    // Lists and maps: their elements' fields sit under the same path, as upstream's messages write it.
    let elements = [s.get("items"), s.get("additionalProperties")];
    for element in elements.into_iter().flatten().filter(|e| e.is_object()) {
        walk(defs, element, prefix, depth + 1, out);
    }
    for element in s
        .get("patternProperties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
    {
        walk(defs, element, prefix, depth + 1, out);
    }
}

/// The paths of `set` whose parent is not in `set` too.
fn topmost(set: &BTreeSet<String>) -> BTreeSet<String> {
    set.iter()
        .filter(|p| !set.iter().any(|q| p.starts_with(&format!("{q}."))))
        .cloned()
        .collect()
}

fn at_or_under(path: &str, set: &BTreeSet<String>) -> bool {
    set.iter()
        .any(|q| path == q || path.starts_with(&format!("{q}.")))
}

/// What 1.14 GA moved out of v1alpha1: newly deprecated fields, and the sections its schema
/// dropped.
fn moved_by_1_14() -> Option<BTreeSet<String>> {
    let old = fields(Release::V1_13_9)?;
    let new = fields(Release::V1_14_1)?;
    // The two releases' Go types have the same fields: nothing was removed, only deprecated.
    assert_eq!(
        old.all, new.all,
        "v1alpha1 fields differ between 1.13.9 and 1.14.1"
    );
    let dropped: BTreeSet<String> = old.schema.difference(&new.schema).cloned().collect();
    // Each section the 1.14.1 schema dropped is a field its Go types mark deprecated.
    for section in topmost(&dropped) {
        assert!(
            new.deprecated.contains(&section),
            "{section}: dropped from the 1.14.1 schema but not marked deprecated"
        );
    }
    let mut moved: BTreeSet<String> = new
        .deprecated
        .difference(&old.deprecated)
        .cloned()
        .collect();
    moved.extend(topmost(&dropped));
    // A sanity floor: the GA moved dozens of fields; an empty set means the reading broke.
    assert!(
        moved.len() > 50,
        "only {} moved fields found: {moved:?}",
        moved.len()
    );
    Some(moved)
}

#[test]
fn every_field_talos_1_14_1_moved_is_a_row() {
    let Some(moved) = moved_by_1_14() else {
        return;
    };
    let rows: BTreeSet<&str> = DEPRECATED_FIELDS.iter().map(|f| f.path).collect();
    let missing: Vec<&String> = moved
        .iter()
        .filter(|p| !rows.contains(p.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "deprecated by v1.14.1 and not in deprecations::DEPRECATED_FIELDS: {missing:?}"
    );
}

#[test]
fn every_row_is_a_field_talos_1_14_1_moved_or_under_one() {
    let Some(moved) = moved_by_1_14() else {
        return;
    };
    let stray: Vec<&str> = DEPRECATED_FIELDS
        .iter()
        .map(|f| f.path)
        .filter(|p| !at_or_under(p, &moved) && !NOT_MOVED_BY_1_14.contains(p))
        .collect();
    assert!(
        stray.is_empty(),
        "rows that v1.14.1 does not deprecate: {stray:?}"
    );
    for p in NOT_MOVED_BY_1_14 {
        assert!(
            !at_or_under(p, &moved),
            "{p} is moved by 1.14 after all: drop it from the list"
        );
    }
}

#[test]
fn every_row_is_a_field_of_upstreams_types() {
    let Some(new) = fields(Release::V1_14_1) else {
        return;
    };
    let unknown: Vec<&str> = DEPRECATED_FIELDS
        .iter()
        .map(|f| f.path)
        .filter(|p| !new.all.contains(*p))
        .collect();
    assert!(
        unknown.is_empty(),
        "rows that are no v1alpha1 field at v1.14.1: {unknown:?}"
    );
}
