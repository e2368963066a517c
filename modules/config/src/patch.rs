//! Config patches: parsing with Talos's format detection (config.md §4.1), strategic merge by
//! document identity with `$patch: delete` (§4.3–4.6), RFC 6902 on single-document configs (§4.7),
//! and duplicate detection after rendering (§4.8).
//!
//! Strategic patches append to lists, so applying one twice duplicates entries. Callers must
//! render from a pristine base and apply each patch exactly once.

use std::collections::{BTreeMap, HashSet};

use ferro_talos_secrets::yaml::kind_name;
use serde_json::{Map, Value};

use crate::diff::{doc_label, push_key};
use crate::document::{DocId, MachineConfig, mixed_identity};
use crate::error::{Error, ErrorKind, Result};
use crate::known_keys;
use crate::merge::{merge_document, parent_is_map};
use crate::normalize::Rules;

/// One parsed config patch. Its `Debug` form shows only its shape: patches can carry secrets.
#[derive(Clone, PartialEq)]
pub enum Patch {
    /// A strategic-merge machine-config stream, one `Value` per YAML document.
    Strategic(Vec<Value>),
    /// An RFC 6902 JSON patch (written as JSON or as a YAML list of operations).
    Json6902(json_patch::Patch),
}

/// Selector keys whose values are names, safe to repeat in error messages.
const IDENTIFIER_KEYS: &[&str] = &[
    "interface",
    "name",
    "vlanId",
    "mountPath",
    "device",
    "image",
    "path",
    "mountpoint",
    "destination",
    "url",
];

impl std::fmt::Debug for Patch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Patch::Strategic(docs) => {
                let ids: Vec<String> = docs.iter().map(|d| describe(&DocId::of(d))).collect();
                write!(f, "Patch::Strategic({})", ids.join(", "))
            }
            Patch::Json6902(p) => write!(f, "Patch::Json6902({} operations)", p.0.len()),
        }
    }
}

impl Patch {
    /// Parses patch text, trying a strategic-merge stream first, then a JSON patch written as
    /// JSON, then one written as YAML.
    ///
    /// Empty text (nothing but whitespace, comments or `---`) is an **error** here; use
    /// [`Patch::parse_optional`] to drop empty patches instead. Talos would turn such text into an
    /// empty JSON patch that then fails on every multi-document config (issue #13029).
    pub fn parse(text: &str) -> Result<Patch> {
        Patch::parse_optional(text)?
            .ok_or_else(|| invalid("config patch is empty: it holds no YAML document"))
    }

    /// Like [`Patch::parse`], but an empty patch gives `Ok(None)` so the caller can skip it.
    pub fn parse_optional(text: &str) -> Result<Option<Patch>> {
        let strategic_err = match parse_strategic(text) {
            Ok(docs) if docs.is_empty() => return Ok(None),
            Ok(docs) => return Ok(Some(Patch::Strategic(docs))),
            Err(e) => e,
        };
        let json_err = match serde_json::from_str::<json_patch::Patch>(text) {
            Ok(p) => return Ok(Some(Patch::Json6902(p))),
            Err(e) => e,
        };
        match raw_yaml(text) {
            Ok(docs) => {
                let [Value::Array(_)] = docs.as_slice() else {
                    // Mappings: a strategic patch, and what is wrong with it is the answer.
                    return Err(strategic_err);
                };
                if let Ok(p) = serde_json::from_value::<json_patch::Patch>(docs[0].clone()) {
                    return Ok(Some(Patch::Json6902(p)));
                }
                Err(strategic_err
                    .context("config patch is neither a strategic merge patch nor a JSON patch"))
            }
            Err(_) if text.trim_start().starts_with('[') => Err(invalid(format!(
                "config patch looks like a JSON patch but is not valid JSON: {}",
                // serde_json errors name line and column, never the input text.
                json_err
            ))),
            Err(_) => Err(strategic_err.context("config patch is not valid YAML")),
        }
    }
}

/// YAML with the same scalar typing as [`MachineConfig::parse`], kept raw (lists allowed).
fn raw_yaml(text: &str) -> Result<Vec<Value>> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        with_snippet: false,
    };
    serde_saphyr::from_multiple_with_options::<Value>(text, options)
        .map(|docs| docs.into_iter().filter(|d| !d.is_null()).collect())
        .map_err(|e| invalid(e.to_string()))
}

/// The patch itself is malformed.
fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidPatch, message)
}

/// The patch does not apply to this config.
fn failed(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::PatchFailed, message)
}

/// Decodes a strategic patch stream and checks what Talos's strict decoder would reject.
fn parse_strategic(text: &str) -> Result<Vec<Value>> {
    let docs = MachineConfig::parse(text)
        .map_err(|e| e.with_kind(ErrorKind::InvalidPatch))?
        .docs;
    let mut seen = HashSet::new();
    for (i, doc) in docs.iter().enumerate() {
        let n = i + 1;
        let map = doc
            .as_object()
            .ok_or_else(|| invalid(format!("document {n}: expected a mapping")))?;
        let id = DocId::of(doc);
        if map.contains_key("apiVersion") && !map.contains_key("kind") {
            return Err(invalid(format!("document {n}: missing kind")));
        }
        if id.is_v1alpha1() {
            if let Some(v) = map
                .get("version")
                .filter(|v| v.as_str() != Some("v1alpha1"))
            {
                return Err(invalid(format!(
                    "document {n}: unsupported v1alpha1 version {v}"
                )));
            }
        } else {
            for key in ["apiVersion", "kind"] {
                match map.get(key) {
                    Some(Value::String(s)) if !s.is_empty() => {}
                    _ => {
                        return Err(invalid(format!(
                            "document {n}: {key} is required and must be a non-empty string"
                        )));
                    }
                }
            }
        }
        // Talos decodes a patch into its Go types before merging: unknown keys or kinds fail
        // there (configpatcher/load.go), so they fail here, with the key that was meant.
        if let Err(refusal) = known_keys::check_document(doc) {
            return Err(invalid(format!("document {n}: {refusal}")));
        }
        let is_doc_delete = is_delete_marker(map);
        if !is_doc_delete && !seen.insert(id.clone()) {
            return Err(invalid(format!(
                "document {n}: duplicate document {} in one patch is not allowed",
                describe(&id)
            )));
        }
    }
    Ok(docs)
}

fn describe(id: &DocId) -> String {
    if id.is_v1alpha1() {
        "v1alpha1".into()
    } else {
        doc_label(id)
    }
}

fn is_delete_marker(map: &Map<String, Value>) -> bool {
    map.get("$patch").and_then(Value::as_str) == Some("delete")
}

/// One deletion lifted out of a patch document.
#[derive(Debug)]
enum Delete {
    /// Remove the key at this path (keys only, no list in between).
    Key(Vec<String>),
    /// Remove the first item of the list at `path` whose `key` has this string form.
    Item {
        path: Vec<String>,
        key: String,
        value: String,
    },
}

fn display(prefix: &str, path: &[String]) -> String {
    let mut s = prefix.to_string();
    for k in path {
        // List positions are stored as `[i]` segments (only ever used in messages).
        if k.starts_with('[')
            && k.ends_with(']')
            && k[1..k.len() - 1].bytes().all(|b| b.is_ascii_digit())
        {
            s.push_str(k);
        } else {
            push_key(&mut s, k);
        }
    }
    s
}

/// Splits a patch document into its merge part and its delete selectors.
/// Returns (merge part, key/item deletes, whole-document delete?).
fn split_deletes(doc: &Value, id: &DocId, label: &str) -> Result<(Value, Vec<Delete>, bool)> {
    let Value::Object(map) = doc else {
        return Err(invalid(format!("{label}: expected a mapping")));
    };
    let mut deletes = Vec::new();
    let mut doc_delete = false;
    if map.contains_key("$patch") {
        check_marker(map, label)?;
        if id.is_v1alpha1() {
            return Err(invalid("can't delete the root of the legacy document"));
        }
        doc_delete = true;
        // The whole document is the selector: anything else in it is dropped, as in Talos.
        return Ok((Value::Object(Map::new()), deletes, doc_delete));
    }
    let mut out = Map::new();
    for (k, v) in map {
        if k == "$patch" {
            continue;
        }
        if let Some(kept) = strip(v, &mut vec![k.clone()], false, label, &mut deletes)? {
            out.insert(k.clone(), kept);
        }
    }
    Ok((Value::Object(out), deletes, doc_delete))
}

fn check_marker(map: &Map<String, Value>, at: &str) -> Result<()> {
    match map.get("$patch") {
        Some(Value::String(s)) if s == "delete" => Ok(()),
        Some(other) => Err(invalid(format!(
            "{at}: unsupported $patch value {other}, only \"delete\" is supported"
        ))),
        None => Ok(()),
    }
}

/// Removes `$patch` markers below `v` (at `path`), recording deletes. `None` drops the value
/// from the merge part. `in_list` is true below a list item, where deletes are not allowed.
fn strip(
    v: &Value,
    path: &mut Vec<String>,
    in_list: bool,
    label: &str,
    deletes: &mut Vec<Delete>,
) -> Result<Option<Value>> {
    match v {
        Value::Object(map) => {
            if map.contains_key("$patch") {
                let at = display(label, path);
                check_marker(map, &at)?;
                if in_list {
                    return Err(invalid(format!(
                        "cannot delete an inner key in {at}: the path goes through a list"
                    )));
                }
                // Talos removes the whole mapping that holds the marker: sibling keys are
                // dropped, not merged (decoder/delete.go at v1.13.6).
                deletes.push(Delete::Key(path.clone()));
                return Ok(None);
            }
            let mut out = Map::new();
            for (k, child) in map {
                path.push(k.clone());
                let kept = strip(child, path, in_list, label, deletes)?;
                path.pop();
                if let Some(kept) = kept {
                    out.insert(k.clone(), kept);
                }
            }
            // A mapping emptied by lifting out deletes must not re-create the parent key.
            if out.is_empty() && !map.is_empty() {
                return Ok(None);
            }
            Ok(Some(Value::Object(out)))
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            let mut removed_any = false;
            for (i, item) in items.iter().enumerate() {
                let seg = format!("[{i}]");
                let Some(map) = item.as_object().filter(|m| m.contains_key("$patch")) else {
                    path.push(seg);
                    let kept = strip(item, path, true, label, deletes)?;
                    path.pop();
                    out.push(kept.unwrap_or_else(|| item.clone()));
                    continue;
                };
                removed_any = true;
                let at = format!("{}{seg}", display(label, path));
                check_marker(map, &at)?;
                if in_list {
                    return Err(invalid(format!(
                        "cannot delete an inner key in {at}: the list is nested in another list"
                    )));
                }
                let (key, value) = map.iter().find(|(k, _)| *k != "$patch").ok_or_else(|| {
                    invalid(format!(
                        "{at}: a list item with $patch: delete needs a key to select the item by"
                    ))
                })?;
                let value = scalar_string(value).ok_or_else(|| {
                    invalid(format!("{at}: the selector key {key:?} of a $patch: delete item must have a scalar value"))
                })?;
                deletes.push(Delete::Item {
                    path: path.clone(),
                    key: key.clone(),
                    value,
                });
            }
            if out.is_empty() && removed_any {
                return Ok(None);
            }
            Ok(Some(Value::Array(out)))
        }
        other => Ok(Some(other.clone())),
    }
}

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn apply_delete(doc: &mut Value, del: &Delete, kind: &str, label: &str) -> Result<()> {
    let (path, what) = match del {
        Delete::Key(p) => (p, None),
        Delete::Item { path, key, value } => (path, Some((key, value))),
    };
    let lookup_failed = || {
        failed(format!(
            "failed to delete path '{}': lookup failed",
            display(label, path)
        ))
    };
    let (last, parents) = path.split_last().ok_or_else(lookup_failed)?;
    let mut cur = &mut *doc;
    for k in parents {
        cur = cur
            .get_mut(k.as_str())
            .filter(|v| v.is_object())
            .ok_or_else(lookup_failed)?;
    }
    let obj = cur.as_object_mut().ok_or_else(lookup_failed)?;
    match what {
        None => {
            // Deleting an absent struct field just zeroes it (no error in Talos); an absent
            // map entry is a failed lookup.
            if obj.shift_remove(last.as_str()).is_none() && parent_is_map(kind, parents) {
                return Err(lookup_failed());
            }
        }
        Some((key, value)) => {
            let list = obj
                .get_mut(last.as_str())
                .and_then(Value::as_array_mut)
                .ok_or_else(lookup_failed)?;
            let pos = list
                .iter()
                .position(|item| {
                    item.get(key.as_str()).and_then(scalar_string).as_deref()
                        == Some(value.as_str())
                })
                .ok_or_else(|| {
                    // Only identifier-like selector values are echoed: the first key of an item
                    // could be something like `content` that holds a secret.
                    let shown = if IDENTIFIER_KEYS.contains(&key.as_str()) {
                        format!("{key}={value:?}")
                    } else {
                        format!("{key}=<value>")
                    };
                    failed(format!(
                        "failed to delete item with {shown} from '{}': lookup failed",
                        display(label, path)
                    ))
                })?;
            list.remove(pos);
        }
    }
    Ok(())
}

/// Talos stores extraArgs values as strings (or lists of strings): a patch value written as
/// `true` or `30` becomes `"true"` / `"30"`, and is written back quoted.
fn stringify_extra_args(part: &mut Value, id: &DocId) {
    const V1ALPHA1: &[&str] = &[
        "/machine/kubelet/extraArgs",
        "/cluster/apiServer/extraArgs",
        "/cluster/controllerManager/extraArgs",
        "/cluster/scheduler/extraArgs",
        "/cluster/proxy/extraArgs",
        "/cluster/etcd/extraArgs",
    ];
    let pointers: &[&str] = if id.is_v1alpha1() {
        V1ALPHA1
    } else {
        &["/extraArgs"]
    };
    fn to_string(v: &mut Value) {
        match v {
            Value::Bool(b) => *v = Value::String(b.to_string()),
            Value::Number(n) => *v = Value::String(n.to_string()),
            Value::Array(items) => items.iter_mut().for_each(to_string),
            _ => {}
        }
    }
    for p in pointers {
        if let Some(Value::Object(args)) = part.pointer_mut(p) {
            args.values_mut().for_each(to_string);
        }
    }
}

/// True when a merge part carries nothing beyond the document header.
fn has_content(part: &Value, id: &DocId) -> bool {
    let header: &[&str] = if id.is_v1alpha1() {
        &["version"]
    } else {
        &["apiVersion", "kind", "name"]
    };
    part.as_object()
        .is_some_and(|m| m.keys().any(|k| !header.contains(&k.as_str())))
}

impl MachineConfig {
    /// Applies one patch in place, merging as Talos 1.13 does. On error the config is left
    /// unchanged.
    pub fn apply_patch(&mut self, patch: &Patch) -> Result<()> {
        self.apply_patch_with(patch, Rules::V1_13)
    }

    /// Applies one patch in place, merging as the release of `rules` does (1.14 replaces one more
    /// list: `merge::replaced_wholesale`). On error the config is left unchanged.
    pub fn apply_patch_with(&mut self, patch: &Patch, rules: Rules) -> Result<()> {
        let mut work = self.clone();
        match patch {
            Patch::Strategic(docs) => work.apply_strategic(docs, rules)?,
            Patch::Json6902(p) => work.apply_json6902(p)?,
        }
        *self = work;
        Ok(())
    }

    /// Applies patches in order, each exactly once, merging as Talos 1.13 does. Errors name the
    /// failing patch (1-based).
    pub fn apply_patches(&mut self, patches: &[Patch]) -> Result<()> {
        self.apply_patches_with(patches, Rules::V1_13)
    }

    /// [`MachineConfig::apply_patches`] with the merge rules of another release.
    pub fn apply_patches_with(&mut self, patches: &[Patch], rules: Rules) -> Result<()> {
        let mut work = self.clone();
        for (i, p) in patches.iter().enumerate() {
            work.apply_patch_with(p, rules)
                .map_err(|e| e.context(format!("config patch {}", i + 1)))?;
        }
        *self = work;
        Ok(())
    }

    fn apply_strategic(&mut self, patch_docs: &[Value], rules: Rules) -> Result<()> {
        let mut split = Vec::new();
        for pdoc in patch_docs {
            let id = DocId::of(pdoc);
            let label = doc_label(&id);
            let (mut part, deletes, doc_delete) = split_deletes(pdoc, &id, &label)?;
            stringify_extra_args(&mut part, &id);
            split.push((id, label, part, deletes, doc_delete));
        }
        // v1alpha1 deletes run before any merge (config.md §4.5).
        for (id, label, _, deletes, _) in split.iter().filter(|s| s.0.is_v1alpha1()) {
            self.run_deletes(id, label, deletes)?;
        }
        for (id, label, part, deletes, doc_delete) in &split {
            if !id.is_v1alpha1() {
                if *doc_delete {
                    let pos = self
                        .docs
                        .iter()
                        .position(|d| DocId::of(d) == *id)
                        .ok_or_else(|| {
                            // Talos 1.13 would carry the selector into the config as a stray
                            // document; 1.14 skips it. An error is the honest middle ground.
                            failed(format!(
                                "cannot delete document {label}: no such document in the config"
                            ))
                        })?;
                    self.docs.remove(pos);
                }
                self.run_deletes(id, label, deletes)?;
            }
            // A document that only carried deletes must not be merged or re-added.
            if (*doc_delete || !deletes.is_empty()) && !has_content(part, id) {
                continue;
            }
            match self.docs.iter_mut().find(|d| DocId::of(d) == *id) {
                Some(target) => {
                    let kind = if id.is_v1alpha1() {
                        ""
                    } else {
                        id.kind.as_str()
                    };
                    merge_document(target, part, kind, label, rules)?;
                }
                None if id.is_v1alpha1() => self.docs.insert(0, part.clone()),
                None => self.docs.push(part.clone()),
            }
        }
        // Keep the v1alpha1 document first even if the input had it elsewhere.
        if let Some(pos) = self.docs.iter().position(|d| DocId::of(d).is_v1alpha1())
            && pos > 0
        {
            let doc = self.docs.remove(pos);
            self.docs.insert(0, doc);
        }
        Ok(())
    }

    fn run_deletes(&mut self, id: &DocId, label: &str, deletes: &[Delete]) -> Result<()> {
        if deletes.is_empty() {
            return Ok(());
        }
        let target = self
            .docs
            .iter_mut()
            .find(|d| DocId::of(d) == *id)
            .ok_or_else(|| {
                failed(format!(
                    "failed to delete in {}: lookup failed, no such document",
                    describe(id)
                ))
            })?;
        let kind = if id.is_v1alpha1() {
            ""
        } else {
            id.kind.as_str()
        };
        for d in deletes {
            apply_delete(target, d, kind, label)?;
        }
        Ok(())
    }

    fn apply_json6902(&mut self, patch: &json_patch::Patch) -> Result<()> {
        match self.docs.len() {
            0 => {
                return Err(failed(
                    "cannot apply a JSON6902 patch to an empty machine configuration",
                ));
            }
            1 => {}
            _ => {
                return Err(failed(
                    "JSON6902 patches are not supported for multi-document machine configuration; \
                     hint: use a strategic merge patch instead, with `$patch: delete` for removals",
                ));
            }
        }
        json_patch::patch(&mut self.docs[0], patch)
            .map_err(|e| failed(format!("JSON patch failed: {e}")))?;
        if !self.docs[0].is_object() {
            return Err(failed(format!(
                "JSON patch left {} at the document root, expected a mapping",
                kind_name(&self.docs[0])
            )));
        }
        if let Some(why) = mixed_identity(&self.docs[0]) {
            return Err(failed(format!("after the JSON patch, {why}")));
        }
        Ok(())
    }
}

/// Warnings about duplicated list entries after rendering (config.md §4.8 point 3): the typical
/// result of applying the same patch twice. Values shown are public (devices, SANs, names,
/// addresses); nothing secret is listed in the checked fields.
pub fn duplicate_warnings(cfg: &MachineConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v1) = cfg.v1alpha1() {
        let strings = |p: &str| -> Vec<String> {
            v1.pointer(p)
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(scalar_string).collect())
                .unwrap_or_default()
        };
        let field_of = |p: &str, key: &str| -> Vec<String> {
            v1.pointer(p)
                .and_then(Value::as_array)
                .map(|l| {
                    l.iter()
                        .filter_map(|i| i.get(key).and_then(scalar_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        report_dupes(
            &mut out,
            "machine.disks (by device)",
            field_of("/machine/disks", "device"),
        );
        let mountpoints: Vec<String> = v1
            .pointer("/machine/disks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|d| {
                d.get("partitions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .filter_map(|p| p.get("mountpoint").and_then(scalar_string))
            .collect();
        report_dupes(
            &mut out,
            "machine.disks partitions (by mountpoint)",
            mountpoints,
        );
        report_dupes(&mut out, "machine.certSANs", strings("/machine/certSANs"));
        report_dupes(
            &mut out,
            "cluster.apiServer.certSANs",
            strings("/cluster/apiServer/certSANs"),
        );
        report_dupes(
            &mut out,
            "cluster.extraManifests",
            strings("/cluster/extraManifests"),
        );
        report_dupes(
            &mut out,
            "cluster.inlineManifests (by name)",
            field_of("/cluster/inlineManifests", "name"),
        );
        report_dupes(
            &mut out,
            "cluster.apiServer.admissionControl (by name)",
            field_of("/cluster/apiServer/admissionControl", "name"),
        );
        let admission = v1
            .pointer("/cluster/apiServer/admissionControl")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, ac) in admission.iter().enumerate() {
            for list in ["namespaces", "runtimeClasses", "usernames"] {
                let items = ac
                    .pointer(&format!("/configuration/exemptions/{list}"))
                    .and_then(Value::as_array)
                    .map(|l| l.iter().filter_map(scalar_string).collect())
                    .unwrap_or_default();
                report_dupes(
                    &mut out,
                    &format!(
                        "cluster.apiServer.admissionControl[{i}].configuration.exemptions.{list}"
                    ),
                    items,
                );
            }
        }
        let interfaces = v1
            .pointer("/machine/network/interfaces")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        report_dupes(
            &mut out,
            "machine.network.interfaces (by interface)",
            interfaces
                .iter()
                .filter_map(|i| i.get("interface").and_then(scalar_string))
                .collect(),
        );
        for (i, iface) in interfaces.iter().enumerate() {
            check_addressing(&mut out, &format!("machine.network.interfaces[{i}]"), iface);
            for (j, vlan) in iface
                .get("vlans")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                check_addressing(
                    &mut out,
                    &format!("machine.network.interfaces[{i}].vlans[{j}]"),
                    vlan,
                );
            }
        }
    }
    out
}

fn check_addressing(out: &mut Vec<String>, at: &str, item: &Value) {
    let addrs = item
        .get("addresses")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(scalar_string).collect())
        .unwrap_or_default();
    report_dupes(out, &format!("{at}.addresses"), addrs);
    let routes = item
        .get("routes")
        .and_then(Value::as_array)
        .map(|l| l.iter().map(|r| r.to_string()).collect())
        .unwrap_or_default();
    report_dupes(out, &format!("{at}.routes"), routes);
}

fn report_dupes(out: &mut Vec<String>, what: &str, items: Vec<String>) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for i in items {
        let c = counts.entry(i.clone()).or_insert(0);
        *c += 1;
        if *c == 2 {
            order.push(i);
        }
    }
    for i in order {
        out.push(format!(
            "{what}: {i} appears {} times (was a patch applied twice?)",
            counts[&i]
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BASE: &str = "version: v1alpha1
debug: false
persist: true
machine:
    type: controlplane
    token: abc.def
    certSANs: []
    kubelet:
        image: ghcr.io/siderolabs/kubelet:v1.36.2
        disableManifestsDirectory: true
    install:
        disk: /dev/sda
        image: ghcr.io/siderolabs/installer:v1.13.6
        wipe: false
        grubUseUKICmdline: true
    nodeLabels:
        node.kubernetes.io/exclude-from-external-load-balancers: \"\"
cluster:
    controlPlane:
        endpoint: https://base:6443
    network:
        dnsDomain: cluster.local
        podSubnets:
            - 10.244.0.0/16
        serviceSubnets:
            - 10.96.0.0/12
    apiServer:
        extraArgs:
            feature-gates: A=true
            audit-log-maxage: \"30\"
---
apiVersion: v1alpha1
kind: HostnameConfig
auto: stable
";

    fn base() -> MachineConfig {
        MachineConfig::parse(BASE).unwrap()
    }

    fn single() -> MachineConfig {
        let mut c = base();
        c.docs.truncate(1);
        c
    }

    fn apply(cfg: &mut MachineConfig, text: &str) -> Result<()> {
        cfg.apply_patch(&Patch::parse(text)?)
    }

    const DISKS: &str = "machine:\n  disks:\n    - device: /dev/sdb\n      partitions:\n        - mountpoint: /var/mnt/data\n";

    #[test]
    fn detects_strategic_json_and_yaml_op_lists() {
        assert!(matches!(Patch::parse(DISKS).unwrap(), Patch::Strategic(d) if d.len() == 1));
        let j = Patch::parse(r#"[{"op": "add", "path": "/machine/certSANs/-", "value": "x"}]"#)
            .unwrap();
        assert!(matches!(j, Patch::Json6902(p) if p.0.len() == 1));
        let y = Patch::parse("- op: remove\n  path: /cluster/apiServer\n").unwrap();
        assert!(matches!(y, Patch::Json6902(p) if p.0.len() == 1));
    }

    #[test]
    fn empty_patch_is_error_or_none() {
        for t in ["", "  \n", "# only a comment\n", "---\n"] {
            assert!(Patch::parse_optional(t).unwrap().is_none(), "{t:?}");
            let e = Patch::parse(t).unwrap_err().to_string();
            assert!(e.contains("empty"), "{e}");
        }
    }

    #[test]
    fn parse_errors_follow_talos_reporting() {
        // Broken JSON that starts with `[`: the JSON error is reported.
        let e = format!("{:#}", Patch::parse("[{\"op\": \"add\",").unwrap_err());
        assert!(e.contains("JSON"), "{e}");
        // A list that is not a list of ops: the strategic error is reported.
        let e = format!("{:#}", Patch::parse("- a\n- b\n").unwrap_err());
        assert!(e.contains("strategic") || e.contains("mapping"), "{e}");
        // Unknown top-level v1alpha1 key.
        let e = format!(
            "{:#}",
            Patch::parse("machin:\n  type: worker\n").unwrap_err()
        );
        assert!(
            e.contains("unknown keys") && e.contains("machin (did you mean machine?)"),
            "{e}"
        );
        // At any depth, with the path (Talos decodes patches strictly: configpatcher/load.go).
        let e = format!(
            "{:#}",
            Patch::parse("machine:\n  kubelet:\n    extraArgz: {a: b}\n").unwrap_err()
        );
        assert!(
            e.contains("machine.kubelet.extraArgz (did you mean machine.kubelet.extraArgs?)"),
            "{e}"
        );
        // Non-v1alpha1 documents need apiVersion and kind.
        let e = format!(
            "{:#}",
            Patch::parse("kind: HostnameConfig\nauto: \"off\"\n").unwrap_err()
        );
        assert!(e.contains("apiVersion"), "{e}");
        let e = format!(
            "{:#}",
            Patch::parse("apiVersion: v1alpha1\nauto: \"off\"\n").unwrap_err()
        );
        assert!(e.contains("missing kind"), "{e}");
    }

    #[test]
    fn duplicate_documents_in_one_patch_fail() {
        let t = "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\n";
        let e = format!("{:#}", Patch::parse(t).unwrap_err());
        assert!(e.contains("duplicate document HostnameConfig"), "{e}");
        let t = "machine:\n  type: worker\n---\ncluster:\n  clusterName: x\n";
        assert!(format!("{:#}", Patch::parse(t).unwrap_err()).contains("duplicate"));
    }

    #[test]
    fn applying_the_same_patch_twice_duplicates_disks() {
        // Why rendering always starts from a pristine base: the append rule is not idempotent.
        let mut c = base();
        apply(&mut c, DISKS).unwrap();
        assert_eq!(
            c.v1alpha1().unwrap()["machine"]["disks"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(duplicate_warnings(&c).is_empty());
        apply(&mut c, DISKS).unwrap();
        let disks = c.v1alpha1().unwrap()["machine"]["disks"]
            .as_array()
            .unwrap();
        assert_eq!(disks.len(), 2);
        assert_eq!(disks[0], disks[1]);
        let w = duplicate_warnings(&c);
        assert!(
            w.iter()
                .any(|w| w.contains("machine.disks (by device): /dev/sdb appears 2 times")),
            "{w:?}"
        );
        assert!(w.iter().any(|w| w.contains("/var/mnt/data")), "{w:?}");
    }

    #[test]
    fn pod_subnets_are_replaced_and_extra_args_per_key() {
        let mut c = base();
        apply(
            &mut c,
            "cluster:\n  network:\n    podSubnets: [10.32.0.0/12]\n  apiServer:\n    extraArgs:\n      feature-gates: B=true\n      enable-admission-plugins: X\n",
        )
        .unwrap();
        let v1 = c.v1alpha1().unwrap();
        assert_eq!(
            v1["cluster"]["network"]["podSubnets"],
            json!(["10.32.0.0/12"])
        );
        assert_eq!(
            v1["cluster"]["network"]["serviceSubnets"],
            json!(["10.96.0.0/12"])
        );
        assert_eq!(
            v1["cluster"]["apiServer"]["extraArgs"],
            json!({"feature-gates": "B=true", "audit-log-maxage": "30", "enable-admission-plugins": "X"})
        );
    }

    #[test]
    fn interfaces_merge_by_name_across_patches() {
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n",
        )
        .unwrap();
        apply(
            &mut c,
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: false\n        addresses: [10.0.0.2/24]\n",
        )
        .unwrap();
        let ifs = &c.v1alpha1().unwrap()["machine"]["network"]["interfaces"];
        assert_eq!(
            ifs,
            &json!([{"interface": "eth0", "dhcp": false, "addresses": ["10.0.0.2/24"]}])
        );
    }

    #[test]
    fn delete_key_map_entry_and_whole_list() {
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  nodeLabels:\n    node.kubernetes.io/exclude-from-external-load-balancers:\n      $patch: delete\n  certSANs:\n    $patch: delete\n  install:\n    grubUseUKICmdline:\n      $patch: delete\n",
        )
        .unwrap();
        let m = &c.v1alpha1().unwrap()["machine"];
        assert_eq!(m["nodeLabels"], json!({}));
        assert!(m.get("certSANs").is_none());
        assert!(m["install"].get("grubUseUKICmdline").is_none());
        // The emptied parent mappings did not get re-created or clobbered.
        assert_eq!(m["install"]["disk"], "/dev/sda");
    }

    #[test]
    fn delete_then_readd_in_one_patch() {
        let mut c = base();
        apply(
            &mut c,
            "cluster:\n  apiServer:\n    extraArgs:\n      $patch: delete\n---\nmachine:\n  type: controlplane\n",
        )
        .unwrap_err(); // two v1alpha1 docs in one patch: duplicate
        apply(
            &mut c,
            "cluster:\n  network:\n    serviceSubnets:\n      $patch: delete\n  apiServer:\n    extraArgs:\n      $patch: delete\n",
        )
        .unwrap();
        assert!(
            c.v1alpha1().unwrap()["cluster"]["apiServer"]
                .get("extraArgs")
                .is_none()
        );
    }

    #[test]
    fn delete_drops_sibling_keys_and_readds_via_list_items() {
        // The mapping holding the marker is removed whole: `disk` is not merged back.
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  install:\n    $patch: delete\n    disk: /dev/vda\n",
        )
        .unwrap();
        assert!(c.v1alpha1().unwrap()["machine"].get("install").is_none());
        // Deletes run before the merge part, so an item can be deleted and re-added at once.
        apply(&mut c, "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n        mtu: 1500\n").unwrap();
        apply(
            &mut c,
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        $patch: delete\n      - interface: eth0\n        dhcp: false\n",
        )
        .unwrap();
        assert_eq!(
            c.v1alpha1().unwrap()["machine"]["network"]["interfaces"],
            json!([{"interface": "eth0", "dhcp": false}])
        );
    }

    #[test]
    fn deleting_an_absent_field_is_fine_but_an_absent_map_key_fails() {
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  install:\n    legacyBIOSSupport:\n      $patch: delete\n",
        )
        .unwrap();
        let e = apply(
            &mut c,
            "machine:\n  nodeLabels:\n    missing:\n      $patch: delete\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("machine.nodeLabels.missing") && e.contains("lookup failed"),
            "{e}"
        );
    }

    #[test]
    fn extra_args_values_become_strings() {
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: true\n      max-pods: 250\n      v: [1, x]\n",
        )
        .unwrap();
        assert_eq!(
            c.v1alpha1().unwrap()["machine"]["kubelet"]["extraArgs"],
            json!({"rotate-server-certificates": "true", "max-pods": "250", "v": ["1", "x"]})
        );
    }

    #[test]
    fn delete_list_item_by_first_key() {
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n      - interface: eth1\n        dhcp: true\n",
        )
        .unwrap();
        apply(&mut c, "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        $patch: delete\n").unwrap();
        assert_eq!(
            c.v1alpha1().unwrap()["machine"]["network"]["interfaces"],
            json!([{"interface": "eth1", "dhcp": true}])
        );
        let e = apply(&mut c, "machine:\n  network:\n    interfaces:\n      - interface: eth9\n        $patch: delete\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lookup failed") && e.contains("machine.network.interfaces"),
            "{e}"
        );
    }

    #[test]
    fn debug_and_errors_do_not_echo_patch_values() {
        let p = Patch::parse("machine:\n  token: s3cr3t.t0ken\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n").unwrap();
        let d = format!("{p:?}");
        assert_eq!(d, "Patch::Strategic(v1alpha1, HostnameConfig)");
        let j = Patch::parse(r#"[{"op": "add", "path": "/machine/token", "value": "s3cr3t"}]"#)
            .unwrap();
        assert_eq!(format!("{j:?}"), "Patch::Json6902(1 operations)");
        let mut c = base();
        apply(
            &mut c,
            "machine:\n  files:\n    - content: other\n      path: /var/f\n      op: create\n",
        )
        .unwrap();
        let e = apply(
            &mut c,
            "machine:\n  files:\n    - content: s3cr3t-body\n      $patch: delete\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            !e.contains("s3cr3t") && e.contains("content=<value>"),
            "{e}"
        );
    }

    #[test]
    fn delete_errors() {
        let mut c = base();
        let e = apply(
            &mut c,
            "machine:\n  network:\n    hostname:\n      $patch: delete\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("machine.network.hostname") && e.contains("lookup failed"),
            "{e}"
        );
        let e = apply(
            &mut c,
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          $patch: delete\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("cannot delete an inner key in machine.network.interfaces[0].vip"),
            "{e}"
        );
        let e = apply(&mut c, "version: v1alpha1\n$patch: delete\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("can't delete the root of the legacy document"),
            "{e}"
        );
        let e = apply(&mut c, "machine:\n  install:\n    $patch: replace\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unsupported $patch value"), "{e}");
        // Failed patches leave the config untouched.
        assert_eq!(c, base());
    }

    #[test]
    fn delete_and_replace_whole_documents() {
        let mut c = base();
        apply(
            &mut c,
            "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n",
        )
        .unwrap();
        assert_eq!(c.docs.len(), 1);
        let e = apply(
            &mut c,
            "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("HostnameConfig") && e.contains("no such document"),
            "{e}"
        );
        // Other keys next to a document-level marker are dropped; a second document re-adds.
        let mut c = base();
        apply(
            &mut c,
            "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\nhostname: n1\n",
        )
        .unwrap();
        assert_eq!(c.docs.len(), 1);
        let mut c = base();
        apply(
            &mut c,
            "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: n1\n",
        )
        .unwrap();
        assert_eq!(
            c.docs[1],
            json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "hostname": "n1"})
        );
    }

    #[test]
    fn multi_document_patch_merges_and_appends_in_order() {
        let mut c = base();
        apply(
            &mut c,
            "apiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: 192.168.1.100\nlink: eth0\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: node-1\n---\nmachine:\n  install:\n    wipe: true\n---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\n",
        )
        .unwrap();
        let ids: Vec<String> = c.docs.iter().map(|d| DocId::of(d).kind).collect();
        assert_eq!(
            ids,
            [
                "v1alpha1",
                "HostnameConfig",
                "Layer2VIPConfig",
                "UserVolumeConfig"
            ]
        );
        assert_eq!(c.docs[1]["auto"], "off");
        assert_eq!(c.docs[1]["hostname"], "node-1");
        assert_eq!(c.v1alpha1().unwrap()["machine"]["install"]["wipe"], true);
    }

    #[test]
    fn v1alpha1_stays_first_when_added_by_patch() {
        let mut c = MachineConfig {
            docs: vec![
                json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}),
            ],
        };
        apply(&mut c, "machine:\n  type: worker\n").unwrap();
        assert!(DocId::of(&c.docs[0]).is_v1alpha1());
    }

    #[test]
    fn json_patch_on_single_document() {
        let mut c = single();
        apply(
            &mut c,
            r#"[{"op": "add", "path": "/machine/certSANs/-", "value": "10.0.0.1"},
                {"op": "replace", "path": "/machine/install/disk", "value": "/dev/vda"},
                {"op": "remove", "path": "/cluster/apiServer"}]"#,
        )
        .unwrap();
        let v1 = c.v1alpha1().unwrap();
        assert_eq!(v1["machine"]["certSANs"], json!(["10.0.0.1"]));
        assert_eq!(v1["machine"]["install"]["disk"], "/dev/vda");
        assert!(v1["cluster"].get("apiServer").is_none());
        // Removing a missing path fails and leaves the config as it was.
        let before = c.clone();
        assert!(apply(&mut c, "- op: remove\n  path: /cluster/apiServer\n").is_err());
        assert_eq!(c, before);
        // Adding `kind` to the v1alpha1 document would give it two identities.
        let e = apply(&mut c, r#"[{"op": "add", "path": "/kind", "value": null}]"#).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("`machine`") && msg.contains("`kind`"), "{msg}");
        assert_eq!(c, before);
    }

    #[test]
    fn json_patch_on_multi_document_fails_with_hint() {
        let mut c = base();
        let e = apply(
            &mut c,
            r#"[{"op": "add", "path": "/debug", "value": true}]"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "JSON6902 patches are not supported for multi-document machine configuration"
            ),
            "{e}"
        );
        assert!(e.contains("$patch: delete"), "{e}");
        // Workaround: delete HostnameConfig strategically first, then JSON-patch.
        apply(
            &mut c,
            "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n",
        )
        .unwrap();
        apply(
            &mut c,
            r#"[{"op": "add", "path": "/debug", "value": true}]"#,
        )
        .unwrap();
        assert_eq!(c.v1alpha1().unwrap()["debug"], true);
    }

    #[test]
    fn apply_patches_names_the_failing_patch() {
        let mut c = base();
        let patches = vec![
            Patch::parse(DISKS).unwrap(),
            Patch::parse(r#"[{"op": "remove", "path": "/machine/install/disk/x"}]"#).unwrap(),
        ];
        let e = format!("{:#}", c.apply_patches(&patches).unwrap_err());
        assert!(e.starts_with("config patch 2"), "{e}");
        assert_eq!(c, base());
        // A value its field cannot take is refused when the patch is read, naming the field.
        let e = Patch::parse("machine:\n  install:\n    disk: [a]\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("machine.install.disk must be a string, not !!seq"),
            "{e}"
        );
    }

    #[test]
    fn stability_patch_lands_extra_mounts() {
        if !ferro_talos_fixtures::available() {
            return;
        }
        let text = ferro_talos_fixtures::read("v1.13.6/stability-patch.yaml");
        let mut c = base();
        c.apply_patch(&Patch::parse(&text).unwrap()).unwrap();
        let kubelet = &c.v1alpha1().unwrap()["machine"]["kubelet"];
        assert_eq!(
            kubelet["extraMounts"],
            json!([{"source": "/var/opt", "destination": "/var/opt", "type": "bind", "options": ["rshared"]}])
        );
        assert_eq!(kubelet["image"], "ghcr.io/siderolabs/kubelet:v1.36.2");
    }

    #[test]
    fn duplicate_warnings_cover_sans_manifests_admission_and_addresses() {
        let c = MachineConfig {
            docs: vec![json!({"machine": {
                "certSANs": ["a", "a"],
                "network": {"interfaces": [{"interface": "eth0", "addresses": ["10.0.0.2/24", "10.0.0.2/24"],
                    "routes": [{"network": "0.0.0.0/0", "gateway": "10.0.0.1"}, {"network": "0.0.0.0/0", "gateway": "10.0.0.1"}]}]}},
                "cluster": {"inlineManifests": [{"name": "m"}, {"name": "m"}],
                    "apiServer": {"admissionControl": [{"name": "PodSecurity", "configuration": {"exemptions": {"namespaces": ["kube-system", "kube-system"]}}}]}}})],
        };
        let w = duplicate_warnings(&c).join("\n");
        for needle in [
            "machine.certSANs: a appears 2 times",
            "machine.network.interfaces[0].addresses: 10.0.0.2/24",
            "machine.network.interfaces[0].routes",
            "cluster.inlineManifests (by name): m",
            "exemptions.namespaces: kube-system",
        ] {
            assert!(w.contains(needle), "missing {needle:?} in {w}");
        }
    }
}
