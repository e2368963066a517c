//! What the conversion rules share: the legacy document they drain, the documents they write,
//! and the records, warnings and refusals they leave.
//!
//! Rules take a deprecated field out of the v1alpha1 patch document ([`Builder::take`],
//! [`Builder::take_section`]) and write its setting into a 1.14 document ([`Builder::put`],
//! [`Builder::ensure`], [`Builder::delete`]). Values are moved, never formatted: the texts this
//! file builds name paths and kinds only, so a key or token in a patch cannot reach a message.

use serde_json::{Map, Value, json};

use super::{Converted, Refusal};
use crate::diff::push_key;
use crate::generate::MachineType;
use crate::validate::CONTROL_PLANE_ONLY_KINDS;

/// The identity of a 1.14 document: its kind, and its name for named kinds (empty otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Doc<'a> {
    pub kind: &'static str,
    pub name: &'a str,
}

/// A singleton document (`apiVersion/kind` identifies it).
pub(super) fn single(kind: &'static str) -> Doc<'static> {
    Doc { kind, name: "" }
}

/// A named document (`apiVersion/kind/name` identifies it).
pub(super) fn named<'a>(kind: &'static str, name: &'a str) -> Doc<'a> {
    Doc { kind, name }
}

impl Doc<'_> {
    /// `Kind` or `Kind(name)`, as the crate labels documents.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}({})", self.kind, self.name)
        }
    }

    fn control_plane_only(&self) -> bool {
        CONTROL_PLANE_ONLY_KINDS.contains(&self.kind)
    }
}

/// One document the conversion writes: a merge part, or a `$patch: delete` of the document.
#[derive(Clone, Debug)]
pub(super) struct OutDoc {
    pub kind: &'static str,
    pub name: String,
    pub delete: bool,
    pub body: Map<String, Value>,
}

impl OutDoc {
    fn is(&self, doc: Doc) -> bool {
        self.kind == doc.kind && self.name == doc.name
    }

    fn new(doc: Doc, delete: bool) -> OutDoc {
        let mut body = Map::new();
        body.insert("apiVersion".into(), json!("v1alpha1"));
        body.insert("kind".into(), json!(doc.kind));
        if !doc.name.is_empty() {
            body.insert("name".into(), json!(doc.name));
        }
        if delete {
            body.insert("$patch".into(), json!("delete"));
        }
        OutDoc {
            kind: doc.kind,
            name: doc.name.to_string(),
            delete,
            body,
        }
    }
}

/// A deprecated mapping taken out of the legacy document; rules take its keys one by one, and
/// [`Builder::finish`] refuses any key no rule took.
pub(super) struct Section {
    pub path: String,
    map: Map<String, Value>,
}

impl Section {
    /// Removes `key`; a null value counts as absent.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.shift_remove(key).filter(|v| !v.is_null())
    }

    /// Whether no key is left.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The path of `key` inside this section.
    pub fn at(&self, key: &str) -> String {
        let mut p = self.path.clone();
        push_key(&mut p, key);
        p
    }
}

/// True for a `$patch: delete` marker (a mapping holding `$patch`).
pub(super) fn is_delete_marker(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key("$patch"))
}

/// True when a `$patch` marker sits anywhere inside `v`.
pub(super) fn contains_marker(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("$patch") || m.values().any(contains_marker),
        Value::Array(a) => a.iter().any(contains_marker),
        _ => false,
    }
}

pub(super) struct Builder {
    pub machine: MachineType,
    legacy: Map<String, Value>,
    out: Vec<OutDoc>,
    pub converted: Vec<Converted>,
    pub warnings: Vec<String>,
    pub refusals: Vec<Refusal>,
}

/// What the rules leave once they have all run.
pub(super) struct Drained {
    pub legacy: Map<String, Value>,
    pub out: Vec<OutDoc>,
    pub converted: Vec<Converted>,
    pub warnings: Vec<String>,
    pub refusals: Vec<Refusal>,
}

impl Builder {
    pub fn new(machine: MachineType, legacy: Map<String, Value>) -> Builder {
        Builder {
            machine,
            legacy,
            out: Vec::new(),
            converted: Vec::new(),
            warnings: Vec::new(),
            refusals: Vec::new(),
        }
    }

    pub fn is_worker(&self) -> bool {
        self.machine == MachineType::Worker
    }

    pub fn drain(self) -> Drained {
        Drained {
            legacy: self.legacy,
            out: self.out,
            converted: self.converted,
            warnings: self.warnings,
            refusals: self.refusals,
        }
    }

    /// Removes and returns the value at `path` (`.machine.kubelet`); null counts as absent.
    /// Mappings the removal leaves empty are removed too, so `machine: {}` does not linger.
    pub fn take(&mut self, path: &str) -> Option<Value> {
        let keys: Vec<&str> = path.trim_start_matches('.').split('.').collect();
        remove_path(&mut self.legacy, &keys).filter(|v| !v.is_null())
    }

    /// Takes the mapping at `path`. A whole-section `$patch: delete`, or a value that is not a
    /// mapping, is refused: no 1.14 document has a same-effect form for it.
    pub fn take_section(&mut self, path: &str, targets: &str) -> Option<Section> {
        let value = self.take(path)?;
        self.section(path, value, targets)
    }

    /// [`Builder::take_section`] for a mapping already taken out, such as a sub-section.
    pub fn section(&mut self, path: &str, value: Value, targets: &str) -> Option<Section> {
        match value {
            Value::Object(map) if !map.contains_key("$patch") => {
                if map.is_empty() {
                    // Still a non-nil pointer to Talos, which its 1.14 document collides with.
                    self.record(path, "nothing (an empty section)".into());
                }
                Some(Section {
                    path: path.to_string(),
                    map,
                })
            }
            Value::Object(_) => {
                self.refuse(
                    path,
                    format!(
                        "a `$patch: delete` of the whole section has no same-effect form in Talos \
                         1.14; delete or set the fields you mean in {targets} instead"
                    ),
                );
                None
            }
            _ => {
                self.refuse(path, "expected a mapping");
                None
            }
        }
    }

    /// The value at `path`, left in place.
    pub fn peek(&self, path: &str) -> Option<&Value> {
        let keys: Vec<&str> = path.trim_start_matches('.').split('.').collect();
        let (last, parents) = keys.split_last()?;
        parents
            .iter()
            .try_fold(&self.legacy, |m, k| m.get(*k)?.as_object())?
            .get(*last)
            .filter(|v| !v.is_null())
    }

    /// Takes the value at `path` when it is a `$patch: delete` marker, and says whether it was.
    pub fn take_delete_marker(&mut self, path: &str) -> bool {
        let keys: Vec<&str> = path.trim_start_matches('.').split('.').collect();
        let is_marker = keys
            .iter()
            .try_fold(&self.legacy, |m, k| m.get(*k)?.as_object())
            .is_some_and(|m| m.contains_key("$patch"));
        if is_marker {
            self.take(path);
        }
        is_marker
    }

    /// Refuses the keys of `section` that no rule took: a field the conversion does not know
    /// must not be left behind silently.
    pub fn finish(&mut self, section: Section) {
        for key in section.map.keys() {
            let path = section.at(key);
            self.refuse(
                &path,
                "the Talos 1.14 conversion does not know this field; move it by hand",
            );
        }
    }

    /// Puts a value back into the legacy document (fields that stay in v1alpha1).
    pub fn keep(&mut self, path: &str, value: Value) {
        let keys: Vec<&str> = path.trim_start_matches('.').split('.').collect();
        let (last, parents) = keys.split_last().expect("a path has a key");
        let mut cur = &mut self.legacy;
        for k in parents {
            cur = cur
                .entry(k.to_string())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("kept fields sit below mappings");
        }
        cur.insert(last.to_string(), value);
    }

    /// On a worker, a control-plane-only target has no effect in 1.13 either (its controllers
    /// run on control planes only), and Talos 1.14 refuses the document there
    /// (container/validate.go): the setting is dropped with a warning. True when dropped.
    pub fn drop_on_worker(&mut self, from: &str, kinds: &str) -> bool {
        if !self.is_worker() {
            return false;
        }
        let text = format!(
            "{from} has no effect on worker machines and is dropped: {kinds} is only allowed on \
             control plane machines in Talos 1.14"
        );
        if !self.warnings.contains(&text) {
            self.warnings.push(text);
        }
        true
    }

    /// Sets `field` (dotted, below the document root) of `doc` to `value`, merging mappings and
    /// appending lists when two rules write the same place.
    pub fn put(&mut self, from: &str, doc: Doc, field: &str, value: Value) {
        if doc.control_plane_only() && self.drop_on_worker(from, doc.kind) {
            return;
        }
        let target = self.content(doc);
        let keys: Vec<&str> = field.split('.').collect();
        let (last, parents) = keys.split_last().expect("a field has a key");
        let mut cur = &mut target.body;
        for k in parents {
            let slot = cur
                .entry(k.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            cur = slot.as_object_mut().expect("just made a mapping");
        }
        match cur.get_mut(*last) {
            Some(existing) => combine(existing, value),
            None => {
                cur.insert(last.to_string(), value);
            }
        }
        self.record(from, format!("{}.{field}", doc.label()));
    }

    /// Makes sure `doc` is in the converted patch: a header-only document merges into the base's
    /// document and leaves its fields alone (presence means enabled for KubePrism, discovery).
    pub fn ensure(&mut self, from: &str, doc: Doc) {
        if doc.control_plane_only() && self.drop_on_worker(from, doc.kind) {
            return;
        }
        self.content(doc);
        self.record(from, doc.label());
    }

    /// Deletes `doc` from the config (`$patch: delete` of the whole document). The delete goes
    /// before a merge part of the same document, so a document can be replaced whole.
    pub fn delete(&mut self, from: &str, doc: Doc) {
        if doc.control_plane_only() && self.drop_on_worker(from, doc.kind) {
            return;
        }
        if !self.out.iter().any(|d| d.delete && d.is(doc)) {
            let at = self
                .out
                .iter()
                .position(|d| d.is(doc))
                .unwrap_or(self.out.len());
            self.out.insert(at, OutDoc::new(doc, true));
        }
        self.record(from, format!("{} $patch: delete", doc.label()));
    }

    /// The merge part of `doc`, created after any delete of it.
    fn content(&mut self, doc: Doc) -> &mut OutDoc {
        let at = match self.out.iter().position(|d| !d.delete && d.is(doc)) {
            Some(at) => at,
            None => {
                self.out.push(OutDoc::new(doc, false));
                self.out.len() - 1
            }
        };
        &mut self.out[at]
    }

    pub fn record(&mut self, from: &str, to: String) {
        let entry = Converted {
            from: from.to_string(),
            to,
        };
        if !self.converted.contains(&entry) {
            self.converted.push(entry);
        }
    }

    pub fn warn(&mut self, text: String) {
        if !self.warnings.contains(&text) {
            self.warnings.push(text);
        }
    }

    pub fn refuse(&mut self, path: &str, reason: impl Into<String>) {
        self.refusals.push(Refusal {
            path: path.to_string(),
            reason: reason.into(),
        });
    }

    /// Moves a value to `doc.field` as it is. A `$patch: delete` of the whole field is carried
    /// along only when `carry_delete` says the delete means the same in both shapes; otherwise
    /// it is refused. Deletes of map entries inside the value are always carried.
    pub fn move_to(&mut self, from: &str, value: Value, doc: Doc, field: &str, carry_delete: bool) {
        if is_delete_marker(&value) && !carry_delete {
            self.refuse(
                from,
                format!(
                    "a `$patch: delete` of this field has no same-effect form in Talos 1.14; set \
                     {}.{field} to what you want instead",
                    doc.label()
                ),
            );
            return;
        }
        self.put(from, doc, field, value);
    }

    /// A boolean, or a refusal naming `from`.
    pub fn boolean(&mut self, from: &str, value: &Value) -> Option<bool> {
        match value {
            Value::Bool(b) => Some(*b),
            v if is_delete_marker(v) => {
                self.refuse(
                    from,
                    "a `$patch: delete` of this field can't be converted; set the 1.14 field \
                     instead",
                );
                None
            }
            _ => {
                self.refuse(from, "expected true or false");
                None
            }
        }
    }

    /// A string, or a refusal naming `from`.
    pub fn string(&mut self, from: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(s) => Some(s.clone()),
            v if is_delete_marker(v) => {
                self.refuse(
                    from,
                    "a `$patch: delete` of this field can't be converted; set the 1.14 field \
                     instead",
                );
                None
            }
            _ => {
                self.refuse(from, "expected a string");
                None
            }
        }
    }

    /// A list, or a refusal naming `from`.
    pub fn list(&mut self, from: &str, value: Value) -> Option<Vec<Value>> {
        match value {
            Value::Array(items) => Some(items),
            v if is_delete_marker(&v) => {
                self.refuse(
                    from,
                    "a `$patch: delete` of a list that becomes documents can't be converted; \
                     delete the documents you mean instead",
                );
                None
            }
            _ => {
                self.refuse(from, "expected a list");
                None
            }
        }
    }
}

/// Two values written at the same place: mappings merge, lists append, anything else replaces.
fn combine(existing: &mut Value, value: Value) {
    match (existing, value) {
        (Value::Object(l), Value::Object(r)) => {
            for (k, v) in r {
                match l.get_mut(&k) {
                    Some(slot) => combine(slot, v),
                    None => {
                        l.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(r)) => l.extend(r),
        (slot, v) => *slot = v,
    }
}

/// Removes the value at `keys`, and then every mapping on the way that the removal left empty.
fn remove_path(map: &mut Map<String, Value>, keys: &[&str]) -> Option<Value> {
    let (first, rest) = keys.split_first()?;
    if rest.is_empty() {
        return map.shift_remove(*first);
    }
    let child = map.get_mut(*first)?.as_object_mut()?;
    let taken = remove_path(child, rest);
    if taken.is_some() && child.is_empty() {
        map.shift_remove(*first);
    }
    taken
}
