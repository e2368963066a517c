//! The requests the simulated API server answers: a path and a method in, a status code and a
//! JSON body out. Authentication happened on the TLS connection (the client certificate's
//! organisations); authorisation is system:masters or nothing, which is what the admin kubeconfig
//! Talos issues carries.

use serde_json::{Value, json};

use super::model::{ApiError, KubeEvent, KubeState, PatchKind, node_name};
use super::{discovery, objects_api, render};
use crate::control::KubeSnapshot;
use crate::state::Shared;
use crate::state::State;

pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
    /// The User-Agent header: its product is a write's default field manager.
    pub user_agent: Option<&'a str>,
    /// The organisations of the client certificate; None without one.
    pub groups: Option<Vec<String>>,
    /// The control plane that serves the request.
    pub serving: usize,
}

pub struct Response {
    pub code: u16,
    pub body: Value,
}

fn ok(body: Value) -> Response {
    Response { code: 200, body }
}

fn err(e: ApiError) -> Response {
    Response {
        code: e.code,
        body: render::status_error(&e),
    }
}

fn not_found() -> Response {
    err(ApiError {
        code: 404,
        reason: "NotFound",
        message: "the server could not find the requested resource".into(),
        causes: vec![],
        details_name: None,
    })
}

/// A path under no API the server has: the Go HTTP mux's plain-text 404, not a Status
/// (kube-apiserver v1.36.3 for `/apis/nothing.example.com/v1`: modules/sim/tests/real_kube_api.rs).
fn no_such_path() -> Response {
    Response {
        code: 404,
        body: Value::String("404 page not found\n".into()),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == key).then(|| percent_decode(v))
    })
}

/// One requirement of a selector, in the grammar of apimachinery's `labels.Parse`
/// (`pkg/labels/selector.go`): `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
/// upstream's cluster checks list the control-plane pods with `k8s-app in (kube-apiserver,...)`
/// (`pkg/cluster/check/kubernetes.go` @ v1.14.1 `K8sFullControlPlaneAssertion`).
#[derive(Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn holds(&self, value: impl Fn(&str) -> Option<String>) -> bool {
        match self {
            Requirement::Equals(k, v) => value(k).as_deref() == Some(v.as_str()),
            // As upstream: a missing key also satisfies `!=` and `notin`.
            Requirement::NotEquals(k, v) => value(k).as_deref() != Some(v.as_str()),
            Requirement::In(k, vs) => value(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => value(k).is_none_or(|x| !vs.contains(&x)),
            Requirement::Exists(k) => value(k).is_some(),
            Requirement::DoesNotExist(k) => value(k).is_none(),
        }
    }
}

/// The terms of a selector: split at commas outside parentheses.
fn terms(text: &str) -> Vec<String> {
    let (mut out, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn selector(text: &str) -> Result<Vec<Requirement>, ApiError> {
    let bad = |term: &str| ApiError::bad_request(format!("unable to parse requirement: {term:?}"));
    let set = |rest: &str, term: &str| -> Result<Vec<String>, ApiError> {
        let rest = rest.trim();
        if !rest.starts_with('(') {
            // The lexer's next literal where `(` should be (`parseValues` in
            // apimachinery's pkg/labels/selector.go @ v0.36.3).
            let found: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace() && !"(),!=".contains(*c))
                .collect();
            return Err(ApiError::bad_request(format!(
                "unable to parse requirement: found '{found}' expected: '('"
            )));
        }
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| bad(term))?;
        Ok(inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect())
    };
    terms(text)
        .iter()
        .map(|term| {
            let term = term.as_str();
            if let Some((k, v)) = term.split_once("!=") {
                return Ok(Requirement::NotEquals(k.trim().into(), v.trim().into()));
            }
            if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                return Ok(Requirement::Equals(k.trim().into(), v.trim().into()));
            }
            if let Some((k, rest)) = term.split_once(" notin ") {
                return Ok(Requirement::NotIn(k.trim().into(), set(rest, term)?));
            }
            if let Some((k, rest)) = term.split_once(" in ") {
                return Ok(Requirement::In(k.trim().into(), set(rest, term)?));
            }
            if let Some(k) = term.strip_prefix('!') {
                return Ok(Requirement::DoesNotExist(k.trim().into()));
            }
            if term.contains(|c: char| c.is_whitespace() || "()".contains(c)) {
                return Err(bad(term));
            }
            Ok(Requirement::Exists(term.into()))
        })
        .collect()
}

fn field<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    let pointer = format!("/{}", path.replace('.', "/"));
    v.pointer(&pointer).and_then(Value::as_str)
}

fn matches(item: &Value, labels: &[Requirement], fields: &[Requirement]) -> bool {
    let label = |k: &str| {
        item["metadata"]["labels"]
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    // A field selector's missing field reads as the empty string (fields.Set).
    let field_value = |k: &str| Some(field(item, k).unwrap_or("").to_string());
    labels.iter().all(|r| r.holds(label)) && fields.iter().all(|r| r.holds(field_value))
}

pub(super) fn filtered(items: Vec<Value>, query: Option<&str>) -> Result<Vec<Value>, ApiError> {
    let labels = selector(&query_param(query, "labelSelector").unwrap_or_default())?;
    let fields = selector(&query_param(query, "fieldSelector").unwrap_or_default())?;
    Ok(items
        .into_iter()
        .filter(|i| matches(i, &labels, &fields))
        .collect())
}

pub fn handle(shared: &Shared, req: &Request<'_>) -> Response {
    let Some(groups) = &req.groups else {
        return Response {
            code: 401,
            body: render::status_error(&ApiError {
                code: 401,
                reason: "Unauthorized",
                message: "Unauthorized".into(),
                causes: vec![],
                details_name: None,
            }),
        };
    };
    if !groups.iter().any(|g| g == "system:masters") {
        return err(ApiError {
            code: 403,
            reason: "Forbidden",
            message: format!(
                "forbidden: User cannot {} resource at path {:?}",
                req.method.to_lowercase(),
                req.path
            ),
            causes: vec![],
            details_name: None,
        });
    }
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let mut guard = shared.lock();
    let st = &mut *guard;
    let bootstrapped = st.etcd.is_some();
    st.kube.refresh(&st.nodes, bootstrapped);
    let k = &st.kube;
    let rv = k.resource_version();
    let result: Result<Response, ApiError> = match (req.method, segments.as_slice()) {
        ("GET", ["version"]) => Ok(ok(render::version(&st.nodes[req.serving]))),
        ("GET", ["api"]) => Ok(ok(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                "serverAddress": format!("{}:6443", st.nodes[req.serving].address)}]}))),
        ("GET", ["api", "v1"]) => discovery::resource_list(&k.objects, "", "v1")
            .map(ok)
            .ok_or_else(|| ApiError::not_found("groupversion", "v1")),
        ("GET", ["apis"]) => Ok(ok(discovery::group_list(&k.objects))),
        ("GET", ["apis", group]) => {
            Ok(discovery::group(&k.objects, group).map_or_else(no_such_path, ok))
        }
        ("GET", ["apis", group, version]) => {
            Ok(discovery::resource_list(&k.objects, group, version).map_or_else(no_such_path, ok))
        }
        ("GET", ["api", "v1", "nodes"]) => {
            let items = k
                .nodes
                .iter()
                .filter_map(|(name, rec)| {
                    st.nodes.get(rec.index).map(|n| render::node(name, rec, n))
                })
                .collect();
            filtered(items, req.query).map(|items| ok(render::list("NodeList", "v1", rv, items)))
        }
        ("GET", ["api", "v1", "nodes", name]) => k
            .nodes
            .get(*name)
            .and_then(|rec| {
                st.nodes
                    .get(rec.index)
                    .map(|n| ok(render::node(name, rec, n)))
            })
            .ok_or_else(|| ApiError::not_found("nodes", name)),
        ("PATCH", ["api", "v1", "nodes", name]) => {
            let kind = match req.content_type {
                Some("application/strategic-merge-patch+json") => Some(PatchKind::Strategic),
                Some("application/merge-patch+json") => Some(PatchKind::Merge),
                _ => None,
            };
            let Some(kind) = kind else {
                return err(ApiError {
                    code: 415,
                    reason: "UnsupportedMediaType",
                    message: format!(
                        "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (the simulator's subset); got {:?}",
                        req.content_type.unwrap_or("")
                    ),
                    causes: vec![],
                    details_name: None,
                });
            };
            match serde_json::from_slice::<Value>(req.body) {
                Err(e) => Err(ApiError::bad_request(format!("error decoding patch: {e}"))),
                Ok(patch) => {
                    let name = name.to_string();
                    st.kube.patch_node(&name, &patch, kind).map(|()| {
                        let rec = &st.kube.nodes[&name];
                        ok(render::node(&name, rec, &st.nodes[rec.index]))
                    })
                }
            }
        }
        ("DELETE", ["api", "v1", "nodes", name]) => {
            let name = name.to_string();
            match st.kube.nodes.get(&name) {
                None => Err(ApiError::not_found("nodes", &name)),
                Some(rec) => {
                    // A Node's delete is answered with a Status, not the object (kube-apiserver
                    // v1.36.3: modules/sim/tests/real_kube_api.rs).
                    let uid = rec.uid.clone();
                    st.kube.delete_node(&name, &st.nodes);
                    Ok(ok(
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success",
                        "details": {"name": name, "kind": "nodes", "uid": uid}}),
                    ))
                }
            }
        }
        ("GET", ["api", "v1", "pods"]) => filtered(render::pods(k, st, None), req.query)
            .map(|items| ok(render::list("PodList", "v1", rv, items))),
        ("GET", ["api", "v1", "namespaces", ns, "pods"]) => {
            filtered(render::pods(k, st, Some(ns)), req.query)
                .map(|items| ok(render::list("PodList", "v1", rv, items)))
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => render::pods(k, st, Some(ns))
            .into_iter()
            .find(|p| p["metadata"]["name"] == *name)
            .map(ok)
            .ok_or_else(|| ApiError::not_found("pods", name)),
        ("POST", ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            let body: Value = serde_json::from_slice(req.body).unwrap_or(Value::Null);
            let named = body["metadata"]["name"].as_str().unwrap_or("");
            if named != *name {
                Err(ApiError::bad_request(format!(
                    "name in URL does not match name in Eviction object: {name:?} != {named:?}"
                )))
            } else {
                let (ns, name) = (ns.to_string(), name.to_string());
                st.kube.evict(&ns, &name, &st.nodes).map(|()| Response {
                    code: 201,
                    body: render::status_success(201),
                })
            }
        }
        ("GET", ["apis", "policy", "v1", "poddisruptionbudgets"]) => {
            Ok(ok(budget_list(k, st, rv, None)))
        }
        (
            "GET",
            [
                "apis",
                "policy",
                "v1",
                "namespaces",
                ns,
                "poddisruptionbudgets",
            ],
        ) => Ok(ok(budget_list(k, st, rv, Some(ns)))),
        (
            "GET",
            [
                "apis",
                "policy",
                "v1",
                "namespaces",
                ns,
                "poddisruptionbudgets",
                name,
            ],
        ) => k
            .budgets
            .iter()
            .find(|b| b.namespace == *ns && b.name == *name)
            .map(|b| ok(render::budget(k, b, st)))
            .ok_or_else(|| ApiError::not_found("poddisruptionbudgets.policy", name)),
        (_, _) => objects_api::handle(st, req, &segments).unwrap_or_else(|| Ok(not_found())),
    };
    result.unwrap_or_else(err)
}

/// The PodDisruptionBudgetList of one namespace, or of all.
fn budget_list(k: &KubeState, st: &State, rv: u64, namespace: Option<&str>) -> Value {
    let items = k
        .budgets
        .iter()
        .filter(|b| namespace.is_none_or(|ns| b.namespace == ns))
        .map(|b| render::budget(k, b, st))
        .collect();
    render::list("PodDisruptionBudgetList", "policy/v1", rv, items)
}

/// A request as an admin without TLS (`Cluster::kube_request`, for tests).
pub fn request(
    shared: &Shared,
    serving: usize,
    method: &str,
    path_and_query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let r = handle(
        shared,
        &Request {
            method,
            path,
            query,
            content_type,
            body,
            user_agent: Some("talos-sim-test/1"),
            groups: Some(vec!["system:masters".into()]),
            serving,
        },
    );
    (r.code, r.body)
}

/// The control protocol's view: nodes, pods and the log, for tests.
pub fn snapshot(shared: &Shared) -> KubeSnapshot {
    if let Some(real) = &shared.real_kube {
        return crate::real::kubernetes::snapshot(real, shared);
    }
    let mut guard = shared.lock();
    let st = &mut *guard;
    let bootstrapped = st.etcd.is_some();
    st.kube.refresh(&st.nodes, bootstrapped);
    let k = &st.kube;
    let nodes: Vec<Value> = k
        .nodes
        .iter()
        .filter_map(|(name, rec)| {
            let n = st.nodes.get(rec.index)?;
            (node_name(n) == *name).then(|| render::node(name, rec, n))
        })
        .collect();
    KubeSnapshot {
        nodes,
        pods: render::pods(k, st, None),
        log: k.log.iter().map(KubeEvent::to_entry).collect(),
    }
}

#[cfg(test)]
mod selector_tests {
    use super::{Requirement, matches, selector};
    use serde_json::json;

    #[test]
    fn set_based_selectors_parse_and_match_as_apimachinery_does() {
        let parsed =
            selector("k8s-app in (kube-apiserver, kube-scheduler),tier!=node,!gone,app").unwrap();
        assert_eq!(
            parsed,
            vec![
                Requirement::In(
                    "k8s-app".into(),
                    vec!["kube-apiserver".into(), "kube-scheduler".into()]
                ),
                Requirement::NotEquals("tier".into(), "node".into()),
                Requirement::DoesNotExist("gone".into()),
                Requirement::Exists("app".into()),
            ]
        );
        let pod = |app: &str| json!({"metadata": {"labels": {"k8s-app": app, "app": "x"}}});
        assert!(matches(&pod("kube-scheduler"), &parsed, &[]));
        assert!(!matches(&pod("kube-proxy"), &parsed, &[]));
        let not_in = selector("k8s-app notin (kube-proxy)").unwrap();
        assert!(matches(&json!({"metadata": {}}), &not_in, &[]));
        assert!(!matches(&pod("kube-proxy"), &not_in, &[]));
        assert!(selector("k8s-app in kube-proxy").is_err());
    }
}
