//! The generic object store of the simulated API server: every object a client writes (and the
//! bootstrap manifests Talos applies) as the JSON Kubernetes would return, keyed by group, kind,
//! namespace and name. It also decides what a write does to the server-owned metadata:
//! `resourceVersion` (a string that changes with every write that changes something; a write that
//! changes nothing is no write, as etcd3's GuaranteedUpdate skips identical objects), `uid` and
//! `creationTimestamp` once, `generation` (1 on create, +1 when anything outside metadata and
//! status changes, for the kinds whose registry strategies keep it) and a Secret's `stringData`
//! folded into `data` (the API server never stores stringData).

use std::collections::BTreeMap;
use std::time::SystemTime;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::kinds::ResourceType;
use super::model::ApiError;

/// The namespaces a new cluster has.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(rt: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: rt.group.clone(),
            kind: rt.kind.clone(),
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    /// `DaemonSet/kube-system/kube-proxy` (`ClusterRole/flannel` when cluster-scoped): how the
    /// event log names a write.
    pub fn subject(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[derive(Default)]
pub struct ObjectStore {
    objects: BTreeMap<ObjectKey, Value>,
}

impl ObjectStore {
    pub fn get(&self, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(key)
    }

    pub fn insert(&mut self, key: ObjectKey, object: Value) {
        self.objects.insert(key, object);
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Value> {
        self.objects.remove(key)
    }

    /// Every object of a kind, optionally in one namespace, by namespace and name.
    pub fn list<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Value)> + 'a {
        self.objects.iter().filter(move |(k, _)| {
            k.group == group && k.kind == kind && namespace.is_none_or(|ns| k.namespace == ns)
        })
    }

    pub fn of_kind<'a>(&'a self, group: &'a str, kind: &'a str) -> impl Iterator<Item = &'a Value> {
        self.list(group, kind, None).map(|(_, v)| v)
    }

    pub fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects.contains_key(&namespace_key(namespace))
    }

    /// Removes every object of a namespace (what the namespace controller does once a Namespace
    /// is deleted; the simulator does it at once).
    pub fn remove_namespaced(&mut self, namespace: &str) -> Vec<ObjectKey> {
        let gone: Vec<ObjectKey> = self
            .objects
            .keys()
            .filter(|k| k.namespace == namespace)
            .cloned()
            .collect();
        for k in &gone {
            self.objects.remove(k);
        }
        gone
    }
}

pub fn namespace_key(name: &str) -> ObjectKey {
    ObjectKey {
        group: String::new(),
        kind: "Namespace".into(),
        namespace: String::new(),
        name: name.into(),
    }
}

pub fn timestamp(t: SystemTime) -> String {
    use time::format_description::well_known::Rfc3339;
    time::OffsetDateTime::from(t)
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
    ApiError {
        code: 404,
        reason: "NotFound",
        message: format!("{} \"{name}\" not found", rt.qualified()),
        causes: vec![],
        details_name: Some((name.to_string(), rt.plural.clone())),
    }
}

pub fn namespace_not_found(namespace: &str) -> ApiError {
    ApiError::not_found("namespaces", namespace)
}

pub fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
    ApiError {
        code: 409,
        reason: "AlreadyExists",
        message: format!("{} \"{name}\" already exists", rt.qualified()),
        causes: vec![],
        details_name: Some((name.to_string(), rt.plural.clone())),
    }
}

pub fn invalid(rt: &ResourceType, name: &str, field: &str, what: &str) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("{} \"{name}\" is invalid: {field}: {what}", rt.kind),
        causes: vec![("FieldValueInvalid", format!("{field}: {what}"))],
        details_name: Some((name.to_string(), rt.plural.clone())),
    }
}

/// The body a client sends must be the URL's kind (kube-apiserver answers 400 otherwise).
pub fn check_kind(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version != rt.api_version() || kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({}) or the kind ({kind}) does not match {}",
            rt.api_version(),
            rt.kind
        )));
    }
    Ok(())
}

fn meta_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get("metadata")?.get(key)?.as_str()
}

/// Everything but metadata and status: a change here is a new generation.
fn body_of(v: &Value) -> Map<String, Value> {
    let mut m = v.as_object().cloned().unwrap_or_default();
    m.remove("metadata");
    m.remove("status");
    m
}

/// `stringData` folded into `data` (base64), as the API server stores a Secret.
fn fold_string_data(object: &mut Value) {
    let Some(Value::Object(strings)) = object.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    let mut data = object
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        data.insert(
            k,
            json!(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    object["data"] = Value::Object(data);
}

/// What a write leaves: the candidate with the server-owned fields set from the live object
/// (or fresh on create), or the live object itself when the write changes nothing.
pub struct Written {
    pub object: Value,
    pub created: bool,
    pub changed: bool,
}

/// The defaults the API server gives a DaemonSet's and a Deployment's own spec
/// (`SetDefaults_DaemonSet`, `SetDefaults_Deployment` in k8s.io/kubernetes
/// `pkg/apis/apps/v1/defaults.go` @ v1.36.3). Their pod templates' defaults (restart and DNS
/// policy, termination message path, image pull policy...) are not modelled.
fn workload_defaults(rt: &ResourceType, object: &mut Value) {
    if rt.group != "apps" || !object["spec"].is_object() {
        return;
    }
    let spec = &mut object["spec"];
    let (strategy_key, rolling) = match rt.kind.as_str() {
        "DaemonSet" => (
            "updateStrategy",
            json!({"maxUnavailable": 1, "maxSurge": 0}),
        ),
        "Deployment" => {
            if spec.get("replicas").is_none_or(Value::is_null) {
                spec["replicas"] = json!(1);
            }
            if spec
                .get("progressDeadlineSeconds")
                .is_none_or(Value::is_null)
            {
                spec["progressDeadlineSeconds"] = json!(600);
            }
            (
                "strategy",
                json!({"maxUnavailable": "25%", "maxSurge": "25%"}),
            )
        }
        _ => return,
    };
    if spec.get(strategy_key).is_none_or(|v| !v.is_object()) {
        spec[strategy_key] = json!({});
    }
    let strategy = &mut spec[strategy_key];
    if strategy
        .get("type")
        .is_none_or(|t| t.as_str().is_none_or(str::is_empty))
    {
        strategy["type"] = json!("RollingUpdate");
    }
    if strategy["type"] == "RollingUpdate" {
        if strategy.get("rollingUpdate").is_none_or(|v| !v.is_object()) {
            strategy["rollingUpdate"] = json!({});
        }
        for (key, value) in rolling.as_object().into_iter().flatten() {
            if strategy["rollingUpdate"]
                .get(key)
                .is_none_or(Value::is_null)
            {
                strategy["rollingUpdate"][key] = value.clone();
            }
        }
    }
    if spec.get("revisionHistoryLimit").is_none_or(Value::is_null) {
        spec["revisionHistoryLimit"] = json!(10);
    }
}

/// Sets the server-owned metadata on `candidate` (which carries the client's fields and, from
/// the apply or update logic, its managedFields) and tells a real change from a no-op. `rv` is
/// the resourceVersion a change gets; None for a dry run (a dry-run create has none at all).
pub fn settle(
    rt: &ResourceType,
    live: Option<&Value>,
    mut candidate: Value,
    rv: Option<u64>,
) -> Written {
    if rt.kind == "Secret" {
        fold_string_data(&mut candidate);
    }
    workload_defaults(rt, &mut candidate);
    if let Some(obj) = candidate.as_object_mut() {
        obj.remove("status");
        obj.insert("apiVersion".into(), json!(rt.api_version()));
        obj.insert("kind".into(), json!(rt.kind));
    }
    let meta = candidate["metadata"].as_object_mut();
    let Some(meta) = meta else {
        return Written {
            object: candidate,
            created: false,
            changed: false,
        };
    };
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "selfLink",
        "deletionTimestamp",
    ] {
        meta.remove(k);
    }
    if !rt.namespaced {
        meta.remove("namespace");
    }
    for k in ["labels", "annotations"] {
        if meta
            .get(k)
            .is_some_and(|v| v.as_object().is_some_and(Map::is_empty) || v.is_null())
        {
            meta.remove(k);
        }
    }
    match live {
        Some(live) => {
            for k in ["uid", "creationTimestamp", "resourceVersion", "generation"] {
                if let Some(v) = live["metadata"].get(k) {
                    meta.insert(k.into(), v.clone());
                }
            }
            if let Some(status) = live.get("status") {
                candidate["status"] = status.clone();
            }
            if rt.generation && body_of(&candidate) != body_of(live) {
                let generation = live["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
                candidate["metadata"]["generation"] = json!(generation);
            }
            if candidate == *live {
                return Written {
                    object: live.clone(),
                    created: false,
                    changed: false,
                };
            }
            if let Some(rv) = rv {
                candidate["metadata"]["resourceVersion"] = json!(rv.to_string());
            }
            Written {
                object: candidate,
                created: false,
                changed: true,
            }
        }
        None => {
            meta.insert("uid".into(), json!(crate::state::new_uuid()));
            meta.insert(
                "creationTimestamp".into(),
                json!(timestamp(SystemTime::now())),
            );
            if rt.generation {
                meta.insert("generation".into(), json!(1));
            }
            if let Some(rv) = rv {
                meta.insert("resourceVersion".into(), json!(rv.to_string()));
            }
            Written {
                object: candidate,
                created: true,
                changed: true,
            }
        }
    }
}

/// The name and namespace an object's metadata carries.
pub fn name_of(v: &Value) -> &str {
    meta_str(v, "name").unwrap_or("")
}

pub fn namespace_of(v: &Value) -> &str {
    meta_str(v, "namespace").unwrap_or("")
}

/// A Namespace object as the API server creates it for the system namespaces.
pub fn system_namespace(name: &str, rv: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": crate::state::new_uuid(),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": timestamp(SystemTime::now()),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}
