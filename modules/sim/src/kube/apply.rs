//! Server-side apply and the merge patches, in the simulator's model of Kubernetes's structured
//! merge (sigs.k8s.io/structured-merge-diff as the API server runs it for
//! `application/apply-patch+yaml`):
//!
//! - A manager's `Apply` entry in `managedFields` owns the fields of the configuration it last
//!   applied (`fieldsV1`, `f:` keys; lists are owned whole, where Kubernetes would key list
//!   maps such as containers by name).
//! - Applying removes the fields the manager owned before and no longer sends (unless another
//!   manager owns them too), then merges the new configuration in (objects key by key, lists and
//!   scalars replaced). With one manager the object is exactly the applied configuration plus
//!   what the server owns.
//! - Without `force`, a field another manager owns with a different value is a 409 Conflict;
//!   with it, the applier takes the field from them, and a manager left owning nothing loses its
//!   entry. The same value applied by two managers is owned by both.
//! - The entry's time moves only when what it owns changes, so an apply that changes nothing
//!   leaves the object (and its resourceVersion) as it was.
//!
//! JSON merge patches (RFC 7386) and strategic merge patches (treated as JSON merge patches:
//! lists replaced) record an `Update` entry for their manager.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::model::ApiError;
use super::objects::timestamp;

/// The `fieldsV1` set of a configuration: identity (apiVersion, kind, name, namespace) and
/// status are not owned.
pub fn fields_of(config: &Value) -> Value {
    let mut out = Map::new();
    if let Some(obj) = config.as_object() {
        for (k, v) in obj {
            match k.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    let mut meta = Map::new();
                    if let Some(m) = v.as_object() {
                        for (mk, mv) in m {
                            if matches!(mk.as_str(), "labels" | "annotations" | "finalizers") {
                                meta.insert(format!("f:{mk}"), owned(mv));
                            }
                        }
                    }
                    if !meta.is_empty() {
                        out.insert("f:metadata".into(), Value::Object(meta));
                    }
                }
                _ => {
                    out.insert(format!("f:{k}"), owned(v));
                }
            }
        }
    }
    Value::Object(out)
}

fn owned(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (format!("f:{k}"), owned(v)))
                .collect(),
        ),
        _ => json!({}),
    }
}

/// Every owned leaf as a path of plain keys.
fn leaves(fields: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(m) = fields.as_object() else {
        return;
    };
    if m.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    for (k, v) in m {
        prefix.push(k.trim_start_matches("f:").to_string());
        leaves(v, prefix, out);
        prefix.pop();
    }
}

fn leaf_paths(fields: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    leaves(fields, &mut Vec::new(), &mut out);
    out
}

fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

/// Removes a field; objects it leaves empty go too.
fn remove_path(v: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        obj.remove(first);
        return;
    }
    if let Some(child) = obj.get_mut(first) {
        remove_path(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            obj.remove(first);
        }
    }
}

/// `patch` merged into `base`: objects key by key, everything else replaced; with `nulls`
/// (a JSON merge patch) a null deletes the key.
pub fn merge(base: &mut Value, patch: &Value, nulls: bool) {
    match (base.as_object_mut(), patch.as_object()) {
        (Some(b), Some(p)) => {
            for (k, v) in p {
                if nulls && v.is_null() {
                    b.remove(k);
                } else if let Some(existing) = b.get_mut(k)
                    && existing.is_object()
                    && v.is_object()
                {
                    merge(existing, v, nulls);
                } else {
                    let mut fresh = Value::Null;
                    if v.is_object() {
                        fresh = json!({});
                        merge(&mut fresh, v, nulls);
                    } else {
                        fresh.clone_from(v);
                    }
                    b.insert(k.clone(), fresh);
                }
            }
        }
        _ => *base = patch.clone(),
    }
}

fn entries(object: &Value) -> Vec<Value> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn is_entry(e: &Value, manager: &str, operation: &str) -> bool {
    e["manager"] == manager && e["operation"] == operation
}

/// `managedFields` with the manager's entry for `operation` owning `fields` (its time kept when
/// it owned exactly that already).
fn with_entry(
    existing: Vec<Value>,
    manager: &str,
    operation: &str,
    api_version: &str,
    fields: Value,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(existing.len() + 1);
    let mut placed = false;
    for e in existing {
        if is_entry(&e, manager, operation) {
            placed = true;
            if e["fieldsV1"] == fields && e["apiVersion"] == api_version {
                out.push(e);
            } else {
                out.push(entry(manager, operation, api_version, fields.clone()));
            }
        } else {
            out.push(e);
        }
    }
    if !placed {
        out.push(entry(manager, operation, api_version, fields));
    }
    out
}

fn entry(manager: &str, operation: &str, api_version: &str, fields: Value) -> Value {
    json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": timestamp(SystemTime::now()),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    })
}

/// What a client's configuration may not set and Kubernetes ignores: server-owned metadata, a
/// null creationTimestamp (typed Go objects carry one) and status.
fn client_fields(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(obj) = c.as_object_mut() {
        obj.remove("status");
    }
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(k);
        }
    }
    c
}

/// Server-side apply of `config` by `manager` onto `live`: the candidate object (server-owned
/// metadata is settled by `objects::settle`).
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApiError> {
    let config = client_fields(config);
    let api_version = config["apiVersion"].as_str().unwrap_or("").to_string();
    let fields = fields_of(&config);
    let Some(live) = live else {
        let mut object = config;
        object["metadata"]["managedFields"] =
            json!([entry(manager, "Apply", &api_version, fields)]);
        return Ok(object);
    };
    let mut existing = entries(live);
    let new_paths = leaf_paths(&fields);
    let overlaps = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    // Fields another manager owns with a value this configuration changes.
    let mut conflicts: Vec<(String, Vec<String>)> = Vec::new();
    for e in existing.iter().filter(|e| e["manager"] != manager) {
        for theirs in leaf_paths(&e["fieldsV1"]) {
            let changed = new_paths
                .iter()
                .any(|p| overlaps(p, &theirs) && get_path(live, p) != get_path(&config, p));
            if changed {
                conflicts.push((e["manager"].as_str().unwrap_or("").to_string(), theirs));
            }
        }
    }
    if !force && !conflicts.is_empty() {
        let causes = conflicts
            .iter()
            .map(|(m, p)| {
                (
                    "FieldManagerConflict",
                    format!("conflict with \"{m}\": .{}", p.join(".")),
                )
            })
            .collect();
        return Err(ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                conflicts
                    .iter()
                    .map(|(m, p)| format!("conflict with \"{m}\": .{}", p.join(".")))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            causes,
            details_name: None,
        });
    }
    // Forced, the applier takes the conflicting fields: the others no longer own them, and a
    // manager left owning nothing loses its entry (structured-merge-diff's `Apply` with force,
    // as kube-apiserver showed: `modules/sim/tests/real_kube_api.rs`).
    for (other, path) in &conflicts {
        if let Some(e) = existing.iter_mut().find(|e| e["manager"] == other.as_str()) {
            let f_path: Vec<String> = path.iter().map(|k| format!("f:{k}")).collect();
            remove_path(&mut e["fieldsV1"], &f_path);
        }
    }
    existing.retain(|e| e["manager"] == manager || !leaf_paths(&e["fieldsV1"]).is_empty());
    let mut object = live.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    // A field the manager applied before and no longer sends goes, unless another manager
    // still owns it.
    if let Some(previous) = existing.iter().find(|e| is_entry(e, manager, "Apply")) {
        let others: Vec<Vec<String>> = existing
            .iter()
            .filter(|e| !is_entry(e, manager, "Apply"))
            .flat_map(|e| leaf_paths(&e["fieldsV1"]))
            .collect();
        for p in leaf_paths(&previous["fieldsV1"]) {
            let kept = new_paths.iter().any(|n| n == &p) || others.iter().any(|o| overlaps(o, &p));
            if !kept {
                remove_path(&mut object, &p);
            }
        }
    }
    merge(&mut object, &config, false);
    object["metadata"]["managedFields"] =
        Value::Array(with_entry(existing, manager, "Apply", &api_version, fields));
    Ok(object)
}

/// A JSON merge patch (or a strategic one, read the same way) by `manager`.
pub fn merge_patch(live: &Value, patch: &Value, manager: &str) -> Value {
    let patch = client_fields(patch);
    let mut object = live.clone();
    merge(&mut object, &patch, true);
    let api_version = live["apiVersion"].as_str().unwrap_or("").to_string();
    object["metadata"]["managedFields"] = Value::Array(with_entry(
        entries(live),
        manager,
        "Update",
        &api_version,
        fields_of(&patch),
    ));
    object
}

/// A create or a full update (PUT) by `manager`: the body as sent, owned by an `Update` entry;
/// the other managers' entries stay.
pub fn update(live: Option<&Value>, body: &Value, manager: &str) -> Value {
    let mut object = client_fields(body);
    let api_version = object["apiVersion"].as_str().unwrap_or("").to_string();
    let fields = fields_of(&object);
    let existing = live.map(entries).unwrap_or_default();
    object["metadata"]["managedFields"] = Value::Array(with_entry(
        existing,
        manager,
        "Update",
        &api_version,
        fields,
    ));
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_own_what_was_applied() {
        let f = fields_of(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k": "v"}}));
        assert_eq!(
            f,
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:k": {}}})
        );
    }

    #[test]
    fn a_field_no_longer_applied_goes_and_others_stay() {
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
        let live = apply(None, &first, "talos", false).unwrap();
        let mut with_other = merge_patch(&live, &json!({"data": {"c": "3"}}), "kubectl");
        with_other["metadata"]["uid"] = json!("u");
        let second = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"a": "1"}});
        let out = apply(Some(&with_other), &second, "talos", false).unwrap();
        assert_eq!(out["data"], json!({"a": "1", "c": "3"}));
        let conflict = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"c": "4"}});
        let e = apply(Some(&with_other), &conflict, "talos", false).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        let forced = apply(Some(&with_other), &conflict, "talos", true).unwrap();
        assert_eq!(forced["data"]["c"], "4");
    }
}
