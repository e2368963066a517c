//! The in-memory form of a (multi-document) machine config.

use serde_json::Value;

/// A machine config: the `v1alpha1` document (if any) first, then the other documents in order.
///
/// Every document is a JSON-like tree (`serde_json::Value` with insertion order preserved).
/// Key order inside a document does not matter here: the encoder re-orders keys the way Talos's
/// typed structs do, so merges may simply append keys.
#[derive(Clone, PartialEq, Default)]
pub struct MachineConfig {
    pub docs: Vec<Value>,
}

// Debug shows only which documents there are: a config holds secrets, and a stray `{:?}` in an
// error message must not print them.
impl std::fmt::Debug for MachineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<String> = self
            .docs
            .iter()
            .map(|d| {
                let id = DocId::of(d);
                if id.name.is_empty() {
                    id.kind
                } else {
                    format!("{}({})", id.kind, id.name)
                }
            })
            .collect();
        f.debug_struct("MachineConfig").field("docs", &ids).finish()
    }
}

/// The identity Talos matches documents by: (apiVersion, kind, name).
/// The v1alpha1 document is `("", "v1alpha1", "")`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocId {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl DocId {
    /// Identity of a document, following config.md §4.1/§4.3: a document without `kind`, or with
    /// any of `machine`, `cluster`, `debug`, `persist` or `version: v1alpha1`, is the v1alpha1 one.
    pub fn of(doc: &Value) -> DocId {
        let s = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let is_v1alpha1 = doc.get("kind").is_none()
            || ["machine", "cluster", "debug", "persist"]
                .iter()
                .any(|k| doc.get(*k).is_some())
            || doc.get("version").and_then(Value::as_str) == Some("v1alpha1");
        if is_v1alpha1 {
            DocId {
                api_version: String::new(),
                kind: "v1alpha1".into(),
                name: String::new(),
            }
        } else {
            DocId {
                api_version: s("apiVersion"),
                kind: s("kind"),
                name: s("name"),
            }
        }
    }

    pub fn is_v1alpha1(&self) -> bool {
        self.kind == "v1alpha1" && self.api_version.is_empty()
    }
}

/// Keys that make a document the v1alpha1 one whatever else it holds (config.md §4.1).
const V1ALPHA1_MARKERS: [&str; 4] = ["machine", "cluster", "debug", "persist"];

/// An error message when `doc` holds a v1alpha1 key together with `apiVersion` or `kind`.
///
/// Such a document has no single identity: it counts as v1alpha1 here, where `kind` is an unknown
/// key that Talos's strict decoding refuses, and once an empty `machine` is dropped by the encoder
/// it would read back as a typed document, so the rendered config would not survive a round trip.
pub(crate) fn mixed_identity(doc: &Value) -> Option<String> {
    let map = doc.as_object()?;
    let marker = V1ALPHA1_MARKERS.iter().find(|k| map.contains_key(**k))?;
    let typed = ["apiVersion", "kind"]
        .into_iter()
        .find(|k| map.contains_key(*k))?;
    Some(format!(
        "a document holds both `{marker}` (the v1alpha1 config) and `{typed}` (a typed document); \
         put them in separate `---` documents"
    ))
}

impl MachineConfig {
    /// The v1alpha1 document, if present.
    pub fn v1alpha1(&self) -> Option<&Value> {
        self.docs.iter().find(|d| DocId::of(d).is_v1alpha1())
    }

    pub fn v1alpha1_mut(&mut self) -> Option<&mut Value> {
        self.docs.iter_mut().find(|d| DocId::of(d).is_v1alpha1())
    }
}
