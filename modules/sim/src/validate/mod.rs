//! What a Talos node accepts in ApplyConfiguration: the simulator's own table of upstream's
//! validation, independent of the collection's `ferro-talos-config`.
//!
//! How the server calls it (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`
//! `ApplyConfiguration` @ v1.13.9 and v1.14.1): the runtime mode of the platform (metal here)
//! wrapped so `RequiresInstall` is false once the node is installed (`modeWrapper`), no
//! `WithLocal`/`WithStrict` options; warnings go back in the reply, an error is
//! `InvalidArgument` with the error's text. 1.13.9 calls `Validate` then `RuntimeValidate`;
//! 1.14.1 `ValidateAtRuntime`, which runs the same client-side checks and then the runtime
//! ones (the runtime ones need the node's disks and volumes and are not simulated).
//!
//! `Container.Validate` (`pkg/machinery/config/container/container.go` @ v1.13.9,
//! `container/validate.go` @ v1.14.1): the v1alpha1 document's checks wrapped as
//! `v1alpha1.Config: <its list>`, each other document's own `Validate` wrapped as
//! `<Kind>[/<name>]: <errors.Join text>`, then each document's conflict with the v1alpha1
//! document (`conflicts.rs`), then (1.14.1) the whole-container checks; all gathered by
//! go-multierror (`multierror.rs`).

mod conflicts;
mod documents;
mod goparse;
mod multierror;
mod v1alpha1;

use serde_json::Value;

use crate::decode::Release;
use multierror::{Errors, GoError};
pub use v1alpha1::{MachineType, Mode};

/// `Ok(warnings)` or `Err(upstream's error text)`.
pub fn validate(docs: &[Value], release: Release, mode: Mode) -> Result<Vec<String>, String> {
    let legacy = docs.iter().find(|d| crate::encode::is_legacy(d));
    let others: Vec<&Value> = docs
        .iter()
        .filter(|d| !crate::encode::is_legacy(d))
        .collect();
    let mut warnings = Vec::new();
    let mut errs = Errors::default();
    if let Some(v1) = legacy {
        let (w, e) = v1alpha1::validate(v1, mode, release);
        warnings.extend(w);
        errs.append(e.map(|e| e.wrap("v1alpha1.Config")));
    }
    for doc in &others {
        let (w, e) = documents::validate(doc, release);
        warnings.extend(w);
        if let Some(e) = e {
            errs.push(format!("{}: {e}", doc_id(doc, release)));
        }
    }
    if let Some(v1) = legacy {
        for doc in &others {
            if let Some(e) = conflicts::conflict(doc, v1, release) {
                errs.push(e);
            }
        }
    }
    if release == Release::V1_14 {
        let (w, e) = container_checks(legacy, &others);
        warnings.extend(w);
        errs.append(e);
    }
    match errs.or_nil() {
        None => Ok(warnings),
        Some(e) => Err(e.text()),
    }
}

fn kind(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn name(doc: &Value) -> Option<&str> {
    doc.get("name").and_then(Value::as_str)
}

/// `docID` (container.go): the kind, and `/name` for a `NamedDocument` (as the table says).
fn doc_id(doc: &Value, release: Release) -> String {
    let version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let named = release
        .table()
        .document(kind(doc), version)
        .is_some_and(|d| d.named);
    match name(doc) {
        Some(n) if named => format!("{}/{n}", kind(doc)),
        None if named => format!("{}/", kind(doc)),
        _ => kind(doc).to_string(),
    }
}

pub(super) fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(empty),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// `validateContainer` (`container/validate.go` @ v1.14.1), the checks that span documents;
/// metal mode, so not the container-mode ones. Not simulated: DNS protocols of
/// `ResolverConfig`, container `dependsOn` graphs.
fn container_checks(legacy: Option<&Value>, others: &[&Value]) -> (Vec<String>, Option<GoError>) {
    let mut warnings = Vec::new();
    let mut errs = Errors::default();
    let doc = |k: &str| others.iter().copied().find(|d| kind(d) == k);
    let get = |keys: &[&str]| legacy.and_then(|v| v1alpha1::path(v, keys));
    let text = |keys: &[&str]| get(keys).and_then(Value::as_str).unwrap_or("");

    // DiscoveryServiceConfigs(): the legacy discovery when enabled with the service registry on,
    // else the documents.
    let legacy_discovery = get(&["cluster", "discovery"]).is_some_and(|d| {
        v1alpha1::flag(Some(d), "enabled")
            && !v1alpha1::flag(v1alpha1::path(d, &["registries", "service"]), "disabled")
    });
    let discovery = legacy_discovery || doc("DiscoveryServiceConfig").is_some();
    if discovery {
        // DiscoveryIdentityConfig(): the legacy id/secret when either is set, else the document.
        let (id, secret) =
            if !text(&["cluster", "id"]).is_empty() || !text(&["cluster", "secret"]).is_empty() {
                (text(&["cluster", "id"]), text(&["cluster", "secret"]))
            } else {
                let d = doc("DiscoveryIdentityConfig");
                let f = |k: &str| {
                    d.and_then(|d| d.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                };
                (f("clusterID"), f("clusterSecret"))
            };
        if id.is_empty() {
            errs.push("cluster ID (.cluster.id or DiscoveryIdentityConfig) should be set when cluster discovery (DiscoveryServiceConfig) is enabled");
        }
        if secret.is_empty() {
            errs.push("cluster secret (.cluster.secret or DiscoveryIdentityConfig) should be set when cluster discovery (DiscoveryServiceConfig) is enabled");
        }
    }

    // NetworkKubeSpanConfig(): the legacy section, else the document.
    let kubespan_on = match get(&["machine", "network", "kubespan"]) {
        Some(k) => v1alpha1::flag(Some(k), "enabled"),
        None => v1alpha1::flag(doc("KubeSpanConfig"), "enabled"),
    };
    if kubespan_on && !discovery {
        errs.push("KubeSpan requires cluster discovery to be enabled");
    }

    let mtype = legacy.map(v1alpha1::machine_type);
    let control_plane = mtype.is_some_and(MachineType::is_control_plane);
    // K8sAPIServerCAConfig(): the document, else the legacy `.cluster.ca`/`.cluster.acceptedCAs`.
    let k8s_ca = doc("KubeAPIServerCAConfig").is_some()
        || get(&["cluster", "ca"]).is_some()
        || get(&["cluster", "acceptedCAs"]).is_some();
    if control_plane {
        if k8s_ca {
            let legacy_enc = !text(&["cluster", "secretboxEncryptionSecret"]).is_empty()
                || !text(&["cluster", "aescbcEncryptionSecret"]).is_empty();
            if !legacy_enc && doc("KubeEtcdEncryptionConfig").is_none() {
                errs.push("etcd encryption config is required for control plane machines running kube-apiserver");
            }
        }
        if let Some(node) = doc("KubeNodeConfig") {
            let labelled = node
                .get("labels")
                .and_then(Value::as_object)
                .is_some_and(|l| l.contains_key("node-role.kubernetes.io/control-plane"));
            let skip = node.get("skipNodeRegistration").and_then(Value::as_bool) == Some(true);
            if !labelled && !skip {
                warnings.push("KubeNodeConfig document should set the \"node-role.kubernetes.io/control-plane\" node label on control plane machines (and, unless scheduling on control planes is allowed, the \"node-role.kubernetes.io/control-plane: NoSchedule\" taint): unlike .machine.nodeLabels/.machine.nodeTaints, the document contents are used as-is".to_string());
            }
        }
    }
    // K8sClusterConfig(): the document, else the legacy endpoint.
    let cluster_cfg = doc("KubeClusterConfig").is_some()
        || get(&["cluster", "controlPlane", "endpoint"]).is_some();
    if k8s_ca && !cluster_cfg {
        errs.push("cluster name and endpoint are required when Kubernetes is configured: either .cluster.clusterName/.cluster.controlPlane.endpoint or the KubeClusterConfig document");
    }

    let mut cp_only: Vec<&str> = others
        .iter()
        .map(|d| kind(d))
        .filter(|k| CONTROL_PLANE_ONLY.contains(k))
        .collect();
    cp_only.sort();
    cp_only.dedup();
    if !cp_only.is_empty() && !control_plane {
        errs.push(format!(
            "the following document kinds are only allowed on control plane machines: [{}]",
            cp_only.join(" ")
        ));
    }
    (warnings, errs.or_nil())
}

/// The kinds with a `ControlplaneOnlyDocument` method (`types/k8s/*.go` @ v1.14.1).
const CONTROL_PLANE_ONLY: &[&str] = &[
    "KubeAPIServerConfig",
    "KubeAdmissionControlConfig",
    "KubeAggregatorCAConfig",
    "KubeAuditPolicyConfig",
    "KubeAuthenticationConfig",
    "KubeAuthorizerConfig",
    "KubeControllerManagerConfig",
    "KubeCoreDNSConfig",
    "KubeEtcdEncryptionConfig",
    "KubeFlannelCNIConfig",
    "KubeProxyConfig",
    "KubeSchedulerConfig",
    "KubeServiceAccountConfig",
    "KubeTalosAPIAccessConfig",
];

#[cfg(test)]
mod tests;
