//! The shape of an answer: which fields it carried and what kind of value each held, never the
//! values themselves. Two answers with the same shape have the same fields, so a shape can be
//! compared across clusters (and attached to a bug report) without revealing anything.

use std::collections::BTreeSet;

use serde_json::Value;

/// A set of `path: kind` lines, e.g. `version.tag: string` or `services[].health.healthy: bool`.
///
/// For protobuf messages only what is on the wire counts: proto3 leaves default values (an empty
/// string, zero, false, an empty list, an absent message) out, so "absent" and "default" are the
/// same thing and such a field is not listed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Shape(BTreeSet<String>);

impl Shape {
    pub fn new() -> Shape {
        Shape::default()
    }

    fn add(&mut self, path: &str, kind: &str) {
        self.0.insert(format!("{path}: {kind}"));
    }

    pub fn text(&mut self, path: &str, value: &str) {
        if !value.is_empty() {
            self.add(path, "string");
        }
    }

    pub fn bytes(&mut self, path: &str, value: &[u8]) {
        if !value.is_empty() {
            self.add(path, "bytes");
        }
    }

    /// A proto3 bool is on the wire only when true.
    pub fn flag(&mut self, path: &str, value: bool) {
        if value {
            self.add(path, "bool");
        }
    }

    pub fn number<T: Default + PartialEq>(&mut self, path: &str, value: T) {
        if value != T::default() {
            self.add(path, "number");
        }
    }

    pub fn message(&mut self, path: &str, present: bool) {
        if present {
            self.add(path, "message");
        }
    }

    pub fn list(&mut self, path: &str, len: usize) {
        if len > 0 {
            self.add(path, "list");
        }
    }

    /// Every leaf of a JSON (or YAML) value. JSON carries false, zero and empty values
    /// explicitly, so they are listed too; empty containers are listed as such.
    pub fn json(&mut self, path: &str, value: &Value) {
        match value {
            Value::Null => self.add(path, "null"),
            Value::Bool(_) => self.add(path, "bool"),
            Value::Number(_) => self.add(path, "number"),
            Value::String(_) => self.add(path, "string"),
            Value::Array(items) if items.is_empty() => self.add(path, "empty list"),
            Value::Array(items) => {
                let inner = format!("{path}[]");
                for item in items {
                    self.json(&inner, item);
                }
            }
            Value::Object(map) if map.is_empty() => self.add(path, "empty object"),
            Value::Object(map) => {
                for (key, item) in map {
                    let inner = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    self.json(&inner, item);
                }
            }
        }
    }

    /// Adds every line of another shape (for lists of resources or events: the union of theirs).
    pub fn merge(&mut self, other: Shape) {
        self.0.extend(other.0);
    }

    pub fn into_lines(self) -> Vec<String> {
        self.0.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proto_defaults_are_absent() {
        let mut s = Shape::new();
        s.text("a", "");
        s.text("b", "x");
        s.flag("c", false);
        s.flag("d", true);
        s.number("e", 0u64);
        s.number("f", 7i64);
        s.list("g", 0);
        s.list("h", 2);
        s.message("i", true);
        assert_eq!(
            s.into_lines(),
            ["b: string", "d: bool", "f: number", "h: list", "i: message"]
        );
    }

    #[test]
    fn json_leaves_and_lists_never_values() {
        let mut s = Shape::new();
        s.json(
            "",
            &json!({"users": [{"name": "admin", "user": {"client-key-data": "c2VjcmV0"}}], "e": [], "n": null}),
        );
        let lines = s.into_lines();
        assert_eq!(
            lines,
            [
                "e: empty list",
                "n: null",
                "users[].name: string",
                "users[].user.client-key-data: string"
            ]
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("c2VjcmV0") || l.contains("admin"))
        );
    }
}
