//! The writes the API server accepts on stored objects (create, update, server-side apply,
//! merge patches, delete), each giving the object its server-owned metadata, taking a new
//! resourceVersion when it changes something, and going into the event log (`apply`, `create`,
//! `update`, `patch`, `delete`, with `pod` = `Kind/namespace/name`) unless it is a dry run.

use serde_json::{Value, json};

use super::apply;
use super::kinds::ResourceType;
use super::model::{ApiError, KubeState};
use super::objects::{
    self, ObjectKey, SYSTEM_NAMESPACES, already_exists, namespace_key, namespace_not_found,
    not_found,
};

/// Who writes and how. The event log's entries for object writes have an empty `node`: they
/// concern no node (and tests that follow one node's cordons and reboots skip them).
pub struct Writer<'a> {
    pub manager: &'a str,
    pub dry_run: bool,
}

pub struct Outcome {
    pub object: Value,
    pub created: bool,
}

impl KubeState {
    fn check_namespace(&self, rt: &ResourceType, namespace: &str) -> Result<(), ApiError> {
        if rt.namespaced && !self.objects.namespace_exists(namespace) {
            return Err(namespace_not_found(namespace));
        }
        Ok(())
    }

    /// Stores what `objects::settle` made of the candidate and logs the write.
    fn commit(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        mut candidate: Value,
        w: &Writer<'_>,
        action: &'static str,
    ) -> Outcome {
        if rt.kind == "Namespace" {
            candidate["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(key.name);
        }
        if rt.namespaced {
            candidate["metadata"]["namespace"] = json!(key.namespace);
        }
        candidate["metadata"]["name"] = json!(key.name);
        let live = self.objects.get(&key);
        let rv = (!w.dry_run).then(|| self.resource_version() + 1);
        let written = objects::settle(rt, live, candidate, rv);
        if !w.dry_run {
            if written.changed {
                self.bump();
                self.objects.insert(key.clone(), written.object.clone());
            }
            self.record(action, "", Some(key.subject()));
        }
        Outcome {
            object: written.object,
            created: written.created,
        }
    }

    /// POST: a new object; 409 when it exists.
    pub fn create_object(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        body: &Value,
        w: &Writer<'_>,
    ) -> Result<Outcome, ApiError> {
        self.check_namespace(rt, &key.namespace)?;
        if self.objects.get(&key).is_some() {
            return Err(already_exists(rt, &key.name));
        }
        let candidate = apply::update(None, body, w.manager);
        Ok(self.commit(rt, key, candidate, w, "create"))
    }

    /// PUT: the whole object replaced; without a resourceVersion unconditionally, with one only
    /// if it is still the live one (409 Conflict otherwise).
    pub fn update_object(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        body: &Value,
        w: &Writer<'_>,
    ) -> Result<Outcome, ApiError> {
        let Some(live) = self.objects.get(&key) else {
            return Err(not_found(rt, &key.name));
        };
        let wanted = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        let current = live
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if wanted.is_some_and(|v| !v.is_empty()) && wanted != current {
            return Err(ApiError {
                code: 409,
                reason: "Conflict",
                message: format!(
                    "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                    rt.qualified(),
                    key.name
                ),
                causes: vec![],
                details_name: Some((key.name.clone(), rt.plural.clone())),
            });
        }
        let candidate = apply::update(Some(live), body, w.manager);
        Ok(self.commit(rt, key, candidate, w, "update"))
    }

    /// PATCH `application/apply-patch+yaml`: creates the object when it does not exist.
    pub fn apply_object(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        config: &Value,
        force: bool,
        w: &Writer<'_>,
    ) -> Result<Outcome, ApiError> {
        self.check_namespace(rt, &key.namespace)?;
        let candidate = apply::apply(self.objects.get(&key), config, w.manager, force)?;
        Ok(self.commit(rt, key, candidate, w, "apply"))
    }

    /// PATCH with a JSON or strategic merge patch.
    pub fn patch_object(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        patch: &Value,
        w: &Writer<'_>,
    ) -> Result<Outcome, ApiError> {
        let Some(live) = self.objects.get(&key) else {
            return Err(not_found(rt, &key.name));
        };
        let candidate = apply::merge_patch(live, patch, w.manager);
        Ok(self.commit(rt, key, candidate, w, "patch"))
    }

    /// DELETE: the object goes at once (no finalizers in the simulator), a Namespace with
    /// everything in it; the system namespaces may not be deleted (kube-apiserver's namespace
    /// lifecycle admission). The pods of a deleted DaemonSet or Deployment go with it at the
    /// next reconcile (propagation Background).
    pub fn delete_object(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        w: &Writer<'_>,
    ) -> Result<Value, ApiError> {
        if rt.kind == "Namespace" && SYSTEM_NAMESPACES.contains(&key.name.as_str()) {
            return Err(ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "namespaces \"{}\" is forbidden: this namespace may not be deleted",
                    key.name
                ),
                causes: vec![],
                details_name: Some((key.name.clone(), "namespaces".into())),
            });
        }
        let Some(live) = self.objects.get(&key).cloned() else {
            return Err(not_found(rt, &key.name));
        };
        if !w.dry_run {
            self.objects.remove(&key);
            if rt.kind == "Namespace" {
                self.objects.remove_namespaced(&key.name);
            }
            self.bump();
            self.record("delete", "", Some(key.subject()));
        }
        if rt.kind == "Namespace" {
            let mut gone = live;
            gone["status"] = json!({"phase": "Terminating"});
            return Ok(gone);
        }
        Ok(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": key.name,
                "group": rt.group,
                "kind": rt.plural,
                "uid": live["metadata"]["uid"],
            },
        }))
    }

    /// The namespaces every cluster has, once.
    pub fn seed_namespaces(&mut self) {
        for ns in SYSTEM_NAMESPACES {
            let key = namespace_key(ns);
            if self.objects.get(&key).is_none() {
                let rv = self.bump();
                self.objects.insert(key, objects::system_namespace(ns, rv));
            }
        }
    }
}
