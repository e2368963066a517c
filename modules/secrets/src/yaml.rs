//! The small slice of YAML this crate needs: parsing into `serde_json::Value` without echoing
//! input on error (inputs hold keys), and writing through `ferro_talos_goyaml`, go-yaml's rules,
//! so that `secrets.yaml` and talosconfig files come out byte for byte like talosctl's.

use serde_json::Value;

use ferro_talos_goyaml::{Node, Release, Scalar, emit_entries};

use crate::error::{Error, ErrorKind, Result};

/// What a value is, in the words an error message uses ("expected a list, got a mapping").
pub fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Parses one YAML document. Parse errors report only the position: the text may be secret.
pub(crate) fn parse(text: &str, what: &str, kind: ErrorKind) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| match e.location() {
        Some(loc) => Error::new(
            kind,
            format!(
                "{what}: not valid YAML (line {}, column {})",
                loc.line(),
                loc.column()
            ),
        ),
        None => Error::new(kind, format!("{what}: not valid YAML")),
    })
}

/// A string scalar as go-yaml writes it on one line (`ferro_talos_goyaml::inline`).
pub(crate) fn scalar(s: &str) -> String {
    ferro_talos_goyaml::inline(s)
}

/// Writes `key: value` at `indent` spaces with go-yaml's block layout, the value's keys in the
/// order they were read. The quoting is v4.0.0-rc.4's (talosctl 1.13's); talosctl 1.14's rc.6
/// would single-quote a YAML 1.1 word (a context named `off`) where this writes `"off"`.
pub(crate) fn emit_entry(out: &mut String, indent: usize, key: &str, value: &Value) {
    let entry = [(Scalar::key(key), Node::in_order(value))];
    emit_entries(out, &entry, indent, Release::V4Rc4);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_values_use_four_space_steps() {
        let v: Value = serde_json::json!({"basic": {"username": "u", "password": "p"}, "list": ["a", {"x": "1", "z": []}]});
        let mut out = String::new();
        emit_entry(&mut out, 8, "auth", &v);
        assert_eq!(
            out,
            "        auth:\n            basic:\n                username: u\n                password: p\n            list:\n                - a\n                - x: \"1\"\n                  z: []\n"
        );
    }

    #[test]
    fn parse_errors_do_not_echo_the_input() {
        let err = parse(
            "key: [unclosed SECRETVALUE",
            "test",
            ErrorKind::InvalidTalosconfig,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("test: not valid YAML"), "{err}");
        assert!(!err.contains("SECRETVALUE"), "{err}");
    }
}
