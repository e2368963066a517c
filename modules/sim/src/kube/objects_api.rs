//! The API server's REST routes for stored objects: `/api/v1/...` and
//! `/apis/{group}/{version}/...`, collections and single objects, cluster-scoped or in
//! `namespaces/{ns}/`. GET, LIST (label and field selectors), POST, PUT, DELETE and PATCH
//! (`application/apply-patch+yaml` for server-side apply with `fieldManager` and `force`,
//! `application/merge-patch+json`, `application/strategic-merge-patch+json`), `dryRun=All` on
//! writes. Status codes and bodies follow the API server's
//! (`k8s.io/apiserver/pkg/endpoints/handlers`: 201 for a create, 200 otherwise).

use serde_json::Value;

use super::api::{Request, Response, filtered, query_param};
use super::kinds::{self, ResourceType};
use super::model::ApiError;
use super::objects::{ObjectKey, check_kind, invalid, name_of, namespace_of, not_found};
use super::render;
use super::writes::Writer;
use crate::state::State;

/// Where a path points.
struct Target {
    rt: ResourceType,
    /// None for a list across all namespaces (or of a cluster-scoped kind).
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse(st: &State, segments: &[&str]) -> Option<Target> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, plural, name, sub) = match rest {
        [plural] => (None, *plural, None, None),
        ["namespaces", ns, plural] if *plural != "status" && *plural != "finalize" => {
            (Some(*ns), *plural, None, None)
        }
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
        [plural, name] => (None, *plural, Some(*name), None),
        [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    let rt = kinds::by_plural(&st.kube.objects, group, version, plural)?;
    if !rt.stored {
        return None;
    }
    // A cluster-scoped kind has no namespaced path, a namespaced one's single objects do.
    if !rt.namespaced && namespace.is_some()
        || rt.namespaced && namespace.is_none() && name.is_some()
    {
        return None;
    }
    Some(Target {
        rt,
        namespace: namespace.map(String::from),
        name: name.map(String::from),
        subresource: sub.map(String::from),
    })
}

fn ok(code: u16, body: Value) -> Response {
    Response { code, body }
}

fn method_not_allowed() -> ApiError {
    ApiError {
        code: 405,
        reason: "MethodNotAllowed",
        message: "the server does not allow this method on the requested resource".into(),
        causes: vec![],
        details_name: None,
    }
}

/// The default field manager of a write without `fieldManager`: the user agent's product
/// (what the API server derives from it), `unknown` without one.
fn manager(req: &Request<'_>) -> String {
    query_param(req.query, "fieldManager").unwrap_or_else(|| {
        req.user_agent
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string()
    })
}

fn decode_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// An apply body: YAML (of which JSON is a subset).
fn decode_yaml(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("error decoding YAML: invalid UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// The body's name and namespace must be the URL's (filled in when left out).
fn check_identity(t: &Target, name: &str, body: &mut Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    if body.get("metadata").is_none_or(|m| !m.is_object()) {
        body["metadata"] = serde_json::json!({});
    }
    let named = name_of(body);
    if named.is_empty() {
        body["metadata"]["name"] = name.into();
    } else if named != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({named}) does not match the name on the URL ({name})"
        )));
    }
    if let Some(ns) = &t.namespace {
        let in_body = namespace_of(body);
        if !in_body.is_empty() && in_body != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    Ok(())
}

pub fn handle(
    st: &mut State,
    req: &Request<'_>,
    segments: &[&str],
) -> Option<Result<Response, ApiError>> {
    let t = parse(st, segments)?;
    Some(serve(st, req, &t))
}

fn serve(st: &mut State, req: &Request<'_>, t: &Target) -> Result<Response, ApiError> {
    if t.subresource.as_deref().is_some_and(|s| s != "status") {
        return Err(not_found(&t.rt, t.name.as_deref().unwrap_or("")));
    }
    let dry_run = query_param(req.query, "dryRun").is_some_and(|v| v == "All");
    let manager = manager(req);
    let writer = Writer {
        manager: &manager,
        dry_run,
    };
    let ns = t.namespace.clone().unwrap_or_default();
    let k = &mut st.kube;
    match (req.method, &t.name) {
        ("GET", None) => {
            let items: Vec<Value> = k
                .objects
                .list(&t.rt.group, &t.rt.kind, t.namespace.as_deref())
                .map(|(key, v)| k.with_status(key, v.clone(), &st.nodes))
                .collect();
            let items = filtered(items, req.query)?;
            Ok(ok(
                200,
                render::list(
                    &format!("{}List", t.rt.kind),
                    &t.rt.api_version(),
                    k.resource_version(),
                    items,
                ),
            ))
        }
        ("GET", Some(name)) => {
            let key = ObjectKey::new(&t.rt, &ns, name);
            let object = k
                .objects
                .get(&key)
                .cloned()
                .ok_or_else(|| not_found(&t.rt, name))?;
            Ok(ok(200, k.with_status(&key, object, &st.nodes)))
        }
        ("POST", None) => {
            if t.subresource.is_some() {
                return Err(method_not_allowed());
            }
            let mut body = decode_json(req.body)?;
            check_kind(&t.rt, &body)?;
            let name = name_of(&body).to_string();
            if name.is_empty() {
                return Err(invalid(
                    &t.rt,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
            check_identity(t, &name, &mut body)?;
            let key = ObjectKey::new(&t.rt, &ns, &name);
            let out = k.create_object(&t.rt, key.clone(), &body, &writer)?;
            Ok(ok(201, k.with_status(&key, out.object, &st.nodes)))
        }
        ("PUT", Some(name)) if t.subresource.is_none() => {
            let mut body = decode_json(req.body)?;
            check_kind(&t.rt, &body)?;
            check_identity(t, name, &mut body)?;
            let key = ObjectKey::new(&t.rt, &ns, name);
            let out = k.update_object(&t.rt, key.clone(), &body, &writer)?;
            Ok(ok(200, k.with_status(&key, out.object, &st.nodes)))
        }
        ("DELETE", Some(name)) if t.subresource.is_none() => {
            let key = ObjectKey::new(&t.rt, &ns, name);
            k.delete_object(&t.rt, key, &writer)
                .map(|body| ok(200, body))
        }
        ("PATCH", Some(name)) if t.subresource.is_none() => {
            let key = ObjectKey::new(&t.rt, &ns, name);
            let out = match req.content_type {
                Some("application/apply-patch+yaml") => {
                    if query_param(req.query, "fieldManager").is_none_or(|m| m.is_empty()) {
                        // A validation failure of the options, so 422 Invalid (kube-apiserver
                        // v1.36.3 answered so: modules/sim/tests/real_kube_api.rs).
                        return Err(ApiError {
                            code: 422,
                            reason: "Invalid",
                            message: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
                            causes: vec![(
                                "FieldValueRequired",
                                "Required value: is required for apply patch".into(),
                            )],
                            details_name: None,
                        });
                    }
                    let mut config = decode_yaml(req.body)?;
                    check_kind(&t.rt, &config)?;
                    check_identity(t, name, &mut config)?;
                    let force = query_param(req.query, "force").is_some_and(|v| v == "true");
                    k.apply_object(&t.rt, key.clone(), &config, force, &writer)?
                }
                Some("application/merge-patch+json" | "application/strategic-merge-patch+json") => {
                    let patch = decode_json(req.body)?;
                    k.patch_object(&t.rt, key.clone(), &patch, &writer)?
                }
                other => {
                    return Err(ApiError {
                        code: 415,
                        reason: "UnsupportedMediaType",
                        message: format!(
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (the simulator's subset: no json-patch); got {:?}",
                            other.unwrap_or("")
                        ),
                        causes: vec![],
                        details_name: None,
                    });
                }
            };
            let code = if out.created { 201 } else { 200 };
            Ok(ok(code, k.with_status(&key, out.object, &st.nodes)))
        }
        _ => Err(method_not_allowed()),
    }
}
