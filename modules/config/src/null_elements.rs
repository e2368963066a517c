//! Null items Talos 1.14 refuses: from v1.14.1 its decoder fails a document with a null item in a
//! list or map of pointers (`null value is not allowed at "machine.kernel.modules[0]"`,
//! `pkg/machinery/config/configloader/internal/decoder/decoder.go` calling siderolabs/gen v0.8.8's
//! `xyaml.CheckNullElements`). Talos 1.13 takes them. The places come from upstream's types
//! (`fields::NULL_REFUSED_1_14`); a dangling `- ` in a patch is the usual way to write one.

use serde_json::Value;

use crate::document::DocId;
use crate::fields::NULL_REFUSED_1_14;

/// Where Talos 1.14 refuses a null item: a list as `path[]`, a map's values as `path.*`.
pub fn refused_places() -> &'static [&'static str] {
    NULL_REFUSED_1_14
}

/// The paths of the null items Talos 1.14 refuses in `doc`, as its message writes them:
/// `machine.kernel.modules[0]`, `machine.registries.mirrors.docker.io`.
pub fn refused_null_items(doc: &Value) -> Vec<String> {
    let id = DocId::of(doc);
    let schema = if id.is_v1alpha1() {
        String::new()
    } else {
        format!("{}.", id.kind)
    };
    let mut found = Vec::new();
    if let Value::Object(map) = doc {
        for (key, value) in map {
            walk(value, &format!("{schema}{key}"), key, &mut found);
        }
    }
    found
}

/// `schema` is the table's form of the path (`[]` for a list item, `*` for a map value);
/// `display` the message's (`[0]`, the key).
fn walk(value: &Value, schema: &str, display: &str, found: &mut Vec<String>) {
    if !leads_somewhere(schema) {
        return;
    }
    match value {
        Value::Array(items) => {
            let item_schema = format!("{schema}[]");
            for (i, item) in items.iter().enumerate() {
                let item_display = format!("{display}[{i}]");
                if item.is_null() && NULL_REFUSED_1_14.contains(&item_schema.as_str()) {
                    found.push(item_display);
                } else {
                    walk(item, &item_schema, &item_display, found);
                }
            }
        }
        Value::Object(map) => {
            let value_schema = format!("{schema}.*");
            for (key, item) in map {
                let item_display = format!("{display}.{key}");
                if item.is_null() && NULL_REFUSED_1_14.contains(&value_schema.as_str()) {
                    found.push(item_display);
                    continue;
                }
                // A struct field or a map value: whichever the table knows.
                walk(item, &format!("{schema}.{key}"), &item_display, found);
                walk(item, &value_schema, &item_display, found);
            }
        }
        _ => {}
    }
}

/// Whether some refused place lies at or under `schema`.
fn leads_somewhere(schema: &str) -> bool {
    NULL_REFUSED_1_14.iter().any(|p| {
        p.strip_prefix(schema)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MachineConfig;

    fn nulls(text: &str) -> Vec<String> {
        let cfg = MachineConfig::parse(text).unwrap();
        cfg.docs.iter().flat_map(refused_null_items).collect()
    }

    #[test]
    fn null_items_in_lists_and_maps_of_pointers_are_found() {
        assert_eq!(
            nulls("machine:\n  kernel:\n    modules:\n      - name: a\n      -\n"),
            ["machine.kernel.modules[1]"]
        );
        assert_eq!(
            nulls("machine:\n  registries:\n    mirrors:\n      docker.io: null\n"),
            ["machine.registries.mirrors.docker.io"]
        );
        assert_eq!(
            nulls(
                "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        routes:\n          - null\n"
            ),
            ["machine.network.interfaces[0].routes[0]"]
        );
    }

    #[test]
    fn null_items_of_value_lists_and_null_fields_are_fine() {
        // certSANs is a []string; a null field is not an item.
        assert!(nulls("machine:\n  certSANs:\n    - null\n  kernel: null\n").is_empty());
        // Other documents have no lists of pointers.
        assert!(
            nulls("apiVersion: v1alpha1\nkind: KubeletConfig\nclusterDNS:\n  - null\n").is_empty()
        );
    }
}
