//! What a module body returns: a result on success, an error with structured fields on failure.

use std::error::Error as StdError;

use serde_json::{Map, Value};

/// One `diff` entry, shown by `--diff` when the result has `changed: true`.
///
/// `before`/`after` are usually strings; dicts and lists are pretty-printed by Ansible before diffing.
/// `prepared` is free text printed as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diff {
    /// The old state.
    pub before: Option<Value>,
    /// The new state.
    pub after: Option<Value>,
    /// Shown as `--- before: <header>`.
    pub before_header: Option<String>,
    /// Shown as `+++ after: <header>`.
    pub after_header: Option<String>,
    /// Pre-rendered text, printed without diffing.
    pub prepared: Option<String>,
}

impl Diff {
    /// A before/after diff.
    pub fn new(before: impl Into<Value>, after: impl Into<Value>) -> Diff {
        Diff {
            before: Some(before.into()),
            after: Some(after.into()),
            ..Diff::default()
        }
    }

    /// A pre-rendered diff.
    pub fn prepared(text: impl Into<String>) -> Diff {
        Diff {
            prepared: Some(text.into()),
            ..Diff::default()
        }
    }

    /// Names for the two sides, e.g. the file or document they describe.
    pub fn headers(mut self, before: impl Into<String>, after: impl Into<String>) -> Diff {
        self.before_header = Some(before.into());
        self.after_header = Some(after.into());
        self
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut map = Map::new();
        let fields = [
            ("before", self.before.clone()),
            ("after", self.after.clone()),
            (
                "before_header",
                self.before_header.clone().map(Value::String),
            ),
            ("after_header", self.after_header.clone().map(Value::String)),
            ("prepared", self.prepared.clone().map(Value::String)),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                map.insert(key.to_string(), value);
            }
        }
        Value::Object(map)
    }
}

/// A deprecation notice: `[DEPRECATION WARNING]: <msg>. This feature will be removed ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Deprecation {
    /// What is deprecated.
    pub msg: String,
    /// The collection version that removes it.
    pub version: Option<String>,
    /// Or the date (YYYY-MM-DD) that removes it.
    pub date: Option<String>,
    /// The collection, e.g. `ferro.talos`.
    pub collection_name: Option<String>,
}

impl Deprecation {
    /// A deprecation with no removal version or date yet.
    pub fn new(msg: impl Into<String>) -> Deprecation {
        Deprecation {
            msg: msg.into(),
            version: None,
            date: None,
            collection_name: None,
        }
    }

    /// Removed in this collection version.
    pub fn version(mut self, version: impl Into<String>) -> Deprecation {
        self.version = Some(version.into());
        self
    }

    /// Removed on this date.
    pub fn date(mut self, date: impl Into<String>) -> Deprecation {
        self.date = Some(date.into());
        self
    }

    /// The collection that removes it.
    pub fn collection(mut self, name: impl Into<String>) -> Deprecation {
        self.collection_name = Some(name.into());
        self
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("msg".to_string(), Value::String(self.msg.clone()));
        let optional = [
            ("version", &self.version),
            ("date", &self.date),
            ("collection_name", &self.collection_name),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                map.insert(key.to_string(), Value::String(value.clone()));
            }
        }
        Value::Object(map)
    }
}

/// A successful module run.
///
/// `diff` is only printed when the task runs with diff mode on; otherwise it is dropped, so a
/// module may fill it unconditionally.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModuleResult {
    /// Whether the module changed (or, in check mode, would change) something.
    pub changed: bool,
    /// A one-line summary.
    pub msg: Option<String>,
    /// Zero, one or several diffs (one is printed as an object, several as a list).
    pub diff: Vec<Diff>,
    /// `[WARNING]` lines.
    pub warnings: Vec<String>,
    /// `[DEPRECATION WARNING]` lines.
    pub deprecations: Vec<Deprecation>,
    /// Report the task as skipped.
    pub skipped: bool,
    /// Module-specific return values. Keys the protocol owns (`changed`, `failed`, `msg`, `diff`,
    /// `warnings`, `deprecations`, `skipped`) are taken from the fields above instead, and
    /// `_ansible_*` keys are dropped with a warning.
    pub fields: Map<String, Value>,
}

impl ModuleResult {
    /// A result with `changed` set.
    pub fn new(changed: bool) -> ModuleResult {
        ModuleResult {
            changed,
            ..ModuleResult::default()
        }
    }

    /// Nothing changed.
    pub fn unchanged() -> ModuleResult {
        ModuleResult::new(false)
    }

    /// Something changed.
    pub fn changed() -> ModuleResult {
        ModuleResult::new(true)
    }

    /// Sets the summary.
    pub fn msg(mut self, msg: impl Into<String>) -> ModuleResult {
        self.msg = Some(msg.into());
        self
    }

    /// Adds a module-specific return value.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> ModuleResult {
        self.fields.insert(key.into(), value.into());
        self
    }

    /// Adds a diff.
    pub fn diff(mut self, diff: Diff) -> ModuleResult {
        self.diff.push(diff);
        self
    }

    /// Adds a warning.
    pub fn warn(mut self, warning: impl Into<String>) -> ModuleResult {
        self.warnings.push(warning.into());
        self
    }

    /// Adds a deprecation.
    pub fn deprecate(mut self, deprecation: Deprecation) -> ModuleResult {
        self.deprecations.push(deprecation);
        self
    }

    /// Marks the task as skipped.
    pub fn skipped(mut self) -> ModuleResult {
        self.skipped = true;
        self
    }
}

/// A failed module run: `msg` plus structured fields such as `node` or `grpc_code`.
///
/// Any error converts into it (`?` works on `anyhow::Error`, `std::io::Error`, `String`, ...); the
/// message is the error and its sources joined with `": "`, as anyhow's `{:#}` prints them.
///
/// Deliberately not a `std::error::Error` itself: that keeps the blanket conversion coherent.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleError {
    /// The message shown in Ansible's error header. Never put secrets here; they are masked, but
    /// only the ones the module knows about.
    pub msg: String,
    /// Whether something had already changed before the failure.
    pub changed: bool,
    /// Extra return values.
    pub fields: Map<String, Value>,
}

impl ModuleError {
    /// An error with a message.
    pub fn new(msg: impl Into<String>) -> ModuleError {
        ModuleError {
            msg: msg.into(),
            changed: false,
            fields: Map::new(),
        }
    }

    /// Adds a structured field.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> ModuleError {
        self.fields.insert(key.into(), value.into());
        self
    }

    /// Records that something changed before the failure.
    pub fn changed(mut self, changed: bool) -> ModuleError {
        self.changed = changed;
        self
    }

    /// The message.
    pub fn msg(&self) -> &str {
        &self.msg
    }
}

impl<E> From<E> for ModuleError
where
    E: Into<Box<dyn StdError + Send + Sync + 'static>>,
{
    fn from(error: E) -> ModuleError {
        let boxed: Box<dyn StdError + Send + Sync + 'static> = error.into();
        let mut msg = boxed.to_string();
        let mut source = boxed.source();
        while let Some(cause) = source {
            msg.push_str(": ");
            msg.push_str(&cause.to_string());
            source = cause.source();
        }
        ModuleError::new(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_json_omits_unset_fields() {
        let d = Diff::new("a\n", "b\n").headers("cfg (before)", "cfg (after)");
        assert_eq!(
            d.to_json(),
            json!({"before": "a\n", "after": "b\n", "before_header": "cfg (before)", "after_header": "cfg (after)"})
        );
        assert_eq!(
            Diff::prepared("text").to_json(),
            json!({"prepared": "text"})
        );
    }

    #[test]
    fn deprecation_json() {
        let d = Deprecation::new("option foo is deprecated")
            .version("2.0.0")
            .collection("ferro.talos");
        assert_eq!(
            d.to_json(),
            json!({"msg": "option foo is deprecated", "version": "2.0.0", "collection_name": "ferro.talos"})
        );
    }

    #[test]
    fn errors_convert_with_their_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("read talosconfig")
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e: ModuleError = Outer(std::io::Error::other("permission denied")).into();
        assert_eq!(e.msg(), "read talosconfig: permission denied");
        let e: ModuleError = "plain".into();
        assert_eq!(e.msg(), "plain");
        let e: ModuleError = format!("node {} down", "10.5.0.2").into();
        assert_eq!(e.msg(), "node 10.5.0.2 down");
        let e = ModuleError::new("apply failed")
            .with("node", "10.5.0.2")
            .with("grpc_code", 14)
            .changed(true);
        assert_eq!(e.fields.get("grpc_code"), Some(&json!(14)));
        assert!(e.changed);
    }
}
