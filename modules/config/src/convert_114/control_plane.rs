//! The control-plane components: `.cluster.{apiServer, controllerManager, scheduler, proxy,
//! coreDNS}` and `.machine.controlPlane` → KubeAPIServerConfig with KubeAdmissionControlConfig,
//! KubeAuditPolicyConfig and KubeAuthorizerConfig, KubeControllerManagerConfig,
//! KubeSchedulerConfig, KubeProxyConfig and KubeCoreDNSConfig (`types/k8s/*.go`, the shims in
//! `types/v1alpha1/v1alpha1_k8s_bridge.go`, and
//! `internal/app/machined/pkg/controllers/k8s/control_plane.go`, v1.14.0-rc.1).
//!
//! Every target is a control-plane-only kind: on a worker the legacy sections did nothing (their
//! controllers run on control planes only), so they are dropped with a warning.

use serde_json::{Map, Value, json};

use super::builder::{Builder, Section, is_delete_marker, named, single};
use crate::diff::push_key;

const API_SERVER: &str = "KubeAPIServerConfig";
const ADMISSION: &str = "KubeAdmissionControlConfig";
const AUDIT: &str = "KubeAuditPolicyConfig";
const AUTHORIZER: &str = "KubeAuthorizerConfig";
const CONTROLLER_MANAGER: &str = "KubeControllerManagerConfig";
const SCHEDULER: &str = "KubeSchedulerConfig";
const PROXY: &str = "KubeProxyConfig";
const COREDNS: &str = "KubeCoreDNSConfig";

pub(super) fn convert(b: &mut Builder) {
    for (path, kinds) in [
        (
            ".cluster.apiServer",
            "KubeAPIServerConfig (with KubeAdmissionControlConfig, KubeAuditPolicyConfig and \
             KubeAuthorizerConfig)",
        ),
        (".cluster.controllerManager", CONTROLLER_MANAGER),
        (".cluster.scheduler", SCHEDULER),
        (".cluster.proxy", PROXY),
        (".cluster.coreDNS", COREDNS),
        (
            ".machine.controlPlane",
            "KubeControllerManagerConfig and KubeSchedulerConfig",
        ),
    ] {
        if b.is_worker() && b.take(path).is_some() {
            b.drop_on_worker(path, kinds);
        }
    }
    api_server(b);
    component(b, ".cluster.controllerManager", CONTROLLER_MANAGER);
    component(b, ".cluster.scheduler", SCHEDULER);
    machine_control_plane(b);
    proxy(b);
    coredns(b);
}

/// kube-apiserver flags the 1.14 document refuses, and where the setting goes instead
/// (`KubeAPIServerConfigV1Alpha1.validateArgs`, k8s/apiserver.go; upstream's text says
/// "KubeAuthorizationConfig", the kind is KubeAuthorizerConfig). A mechanical mapping of OIDC
/// flags to `jwt` authenticators would change their defaults, so they are refused.
const DENIED_API_SERVER_ARGS: &[(&str, &str)] = &[
    (
        "anonymous-auth",
        "configure anonymous access in a KubeAuthenticationConfig document (anonymous)",
    ),
    (
        "authentication-config",
        "write the authentication configuration as a KubeAuthenticationConfig document",
    ),
    (
        "authorization-config",
        "write the authorizers as KubeAuthorizerConfig documents",
    ),
    (
        "authorization-mode",
        "write the authorizers as KubeAuthorizerConfig documents",
    ),
    (
        "authorization-webhook-",
        "write a Webhook authorizer as a KubeAuthorizerConfig document",
    ),
    (
        "oidc-",
        "configure OIDC as a jwt authenticator in a KubeAuthenticationConfig document",
    ),
];

fn api_server(b: &mut Builder) {
    let Some(mut s) = b.take_section(
        ".cluster.apiServer",
        "KubeAPIServerConfig, KubeAdmissionControlConfig, KubeAuditPolicyConfig and \
         KubeAuthorizerConfig",
    ) else {
        return;
    };
    for (key, field, carry_delete) in [
        ("image", "image", false),
        ("env", "env", true),
        ("resources", "resources", false),
        ("certSANs", "certExtraSANs", true),
    ] {
        if let Some(v) = s.take(key) {
            b.move_to(&s.at(key), v, single(API_SERVER), field, carry_delete);
        }
    }
    if let Some(v) = s.take("extraArgs") {
        let from = s.at("extraArgs");
        let mut denied = false;
        for (arg, _) in v.as_object().into_iter().flatten() {
            if let Some((_, instead)) = DENIED_API_SERVER_ARGS
                .iter()
                .find(|(prefix, _)| arg.starts_with(prefix))
            {
                let mut at = from.clone();
                push_key(&mut at, arg);
                b.refuse(
                    &at,
                    format!(
                        "kube-apiserver extra argument \"{arg}\" is not allowed in \
                         KubeAPIServerConfig; {instead}"
                    ),
                );
                denied = true;
            }
        }
        if !denied {
            b.move_to(&from, v, single(API_SERVER), "extraArgs", true);
        }
    }
    if let Some(v) = s.take("extraVolumes") {
        refuse_volumes(b, &s.at("extraVolumes"), &v, API_SERVER);
    }
    if s.take("disablePodSecurityPolicy").is_some() {
        b.warn(format!(
            "{} is dropped: PodSecurityPolicy is gone from supported Kubernetes versions",
            s.at("disablePodSecurityPolicy")
        ));
    }
    if let Some(v) = s.take("admissionControl") {
        admission_control(b, &s.at("admissionControl"), v);
    }
    if let Some(v) = s.take("auditPolicy") {
        // `merge:"replace"` in both shapes.
        b.move_to(
            &s.at("auditPolicy"),
            v,
            single(AUDIT),
            "configuration",
            false,
        );
    }
    if let Some(v) = s.take("authorizationConfig") {
        authorizers(b, &s.at("authorizationConfig"), v);
    }
    b.finish(s);
}

fn refuse_volumes(b: &mut Builder, from: &str, value: &Value, kind: &str) {
    if value.as_array().is_none_or(|l| !l.is_empty()) {
        b.refuse(
            from,
            format!(
                "{kind} has no extra volumes in Talos 1.14; mount what the component needs from \
                 a static pod (KubeStaticPodConfig) or drop the field"
            ),
        );
    }
}

/// A list item that becomes a named document: its section, and whether it is a
/// `$patch: delete` of that document.
fn named_item(b: &mut Builder, at: &str, item: Value, kind: &str) -> Option<(Section, bool)> {
    let delete = is_delete_marker(&item);
    let item = match item {
        Value::Object(mut map) => {
            map.shift_remove("$patch");
            Value::Object(map)
        }
        other => other,
    };
    b.section(at, item, kind).map(|s| (s, delete))
}

/// One KubeAdmissionControlConfig per plugin, named by the plugin. Legacy merges the list by
/// name with a deep merge (`AdmissionPluginConfigList.Merge`), the documents merge by name the
/// same way, so a plugin that the base already has (PodSecurity) is merged into.
fn admission_control(b: &mut Builder, from: &str, value: Value) {
    let Some(items) = b.list(from, value) else {
        return;
    };
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{from}[{i}]");
        let Some((mut p, delete)) = named_item(b, &at, item, ADMISSION) else {
            continue;
        };
        let name = p.take("name").and_then(|v| b.string(&p.at("name"), &v));
        let configuration = p.take("configuration");
        b.finish(p);
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            b.refuse(&at, "an admission plugin needs a name");
            continue;
        };
        let doc = named(ADMISSION, &name);
        if delete {
            b.delete(&at, doc);
        } else if let Some(c) = configuration {
            b.move_to(
                &format!("{at}.configuration"),
                c,
                doc,
                "configuration",
                true,
            );
        } else {
            b.ensure(&at, doc);
        }
    }
}

/// One KubeAuthorizerConfig per authorizer. Legacy puts a Node authorizer first and an RBAC one
/// second when the list has none of that type (`InjectDefaultAuthorizers`, control_plane.go); the
/// 1.14 base has the `node` and `rbac` documents first. When the legacy order is not "node, rbac,
/// then the rest", both base documents are deleted and the whole list written in legacy order.
fn authorizers(b: &mut Builder, from: &str, value: Value) {
    let Some(items) = b.list(from, value) else {
        return;
    };
    // (from, type, name, webhook)
    let mut list: Vec<(String, String, String, Option<Value>)> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{from}[{i}]");
        let Some((mut a, delete)) = named_item(b, &at, item, AUTHORIZER) else {
            continue;
        };
        let kind = a.take("type").and_then(|v| b.string(&a.at("type"), &v));
        let name = a.take("name").and_then(|v| b.string(&a.at("name"), &v));
        let webhook = a.take("webhook");
        b.finish(a);
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            b.refuse(&at, "an authorizer needs a name");
            continue;
        };
        if delete {
            b.delete(&at, named(AUTHORIZER, &name));
            continue;
        }
        let Some(kind) = kind else {
            b.refuse(&at, "an authorizer needs a type (Node, RBAC or Webhook)");
            continue;
        };
        list.push((at, kind, name, webhook));
    }
    if !list.iter().any(|(_, t, _, _)| t == "Node") {
        list.insert(0, (from.to_string(), "Node".into(), "node".into(), None));
    }
    if !list.iter().any(|(_, t, _, _)| t == "RBAC") {
        let at = list.len().min(1);
        list.insert(at, (from.to_string(), "RBAC".into(), "rbac".into(), None));
    }
    let is =
        |i: usize, t: &str, n: &str| list.get(i).is_some_and(|(_, lt, ln, _)| lt == t && ln == n);
    let in_place = is(0, "Node", "node")
        && is(1, "RBAC", "rbac")
        && !list[2..]
            .iter()
            .any(|(_, _, n, _)| n == "node" || n == "rbac");
    if !in_place {
        b.delete(from, named(AUTHORIZER, "node"));
        b.delete(from, named(AUTHORIZER, "rbac"));
    }
    for (i, (at, kind, name, webhook)) in list.into_iter().enumerate() {
        // In place, the base's node and rbac documents stay as they are unless the patch lists them.
        if in_place && i < 2 && at == from {
            continue;
        }
        let doc = named(AUTHORIZER, &name);
        b.put(&at, doc, "type", json!(kind));
        if let Some(w) = webhook {
            b.move_to(&format!("{at}.webhook"), w, doc, "webhook", false);
        }
    }
}

/// The controller manager and the scheduler: the same fields in both shapes, except the extra
/// volumes, which the 1.14 documents do not have (`ExtraVolumes()` returns nil).
fn component(b: &mut Builder, path: &str, kind: &'static str) {
    let Some(mut s) = b.take_section(path, kind) else {
        return;
    };
    for (key, carry_delete) in [
        ("image", false),
        ("extraArgs", true),
        ("env", true),
        ("resources", false),
        ("config", true),
    ] {
        if let Some(v) = s.take(key) {
            b.move_to(&s.at(key), v, single(kind), key, carry_delete);
        }
    }
    if let Some(v) = s.take("extraVolumes") {
        refuse_volumes(b, &s.at("extraVolumes"), &v, kind);
    }
    b.finish(s);
}

/// `.machine.controlPlane.{controllerManager,scheduler}.disabled` → the document's `enabled`,
/// inverted (the shims' `Enabled()` in v1alpha1_k8s_bridge.go).
fn machine_control_plane(b: &mut Builder) {
    let Some(mut s) = b.take_section(
        ".machine.controlPlane",
        "KubeControllerManagerConfig and KubeSchedulerConfig",
    ) else {
        return;
    };
    for (key, kind) in [
        ("controllerManager", CONTROLLER_MANAGER),
        ("scheduler", SCHEDULER),
    ] {
        let Some(v) = s.take(key) else {
            continue;
        };
        let Some(mut c) = b.section(&s.at(key), v, kind) else {
            continue;
        };
        if let Some(v) = c.take("disabled") {
            let from = c.at("disabled");
            if let Some(disabled) = b.boolean(&from, &v) {
                b.put(&from, single(kind), "enabled", json!(!disabled));
            }
        }
        b.finish(c);
    }
    b.finish(s);
}

fn proxy(b: &mut Builder) {
    let Some(mut s) = b.take_section(".cluster.proxy", PROXY) else {
        return;
    };
    if let Some(v) = s.take("disabled") {
        let from = s.at("disabled");
        if let Some(disabled) = b.boolean(&from, &v) {
            b.put(&from, single(PROXY), "enabled", json!(!disabled));
        }
    }
    for key in ["image", "mode"] {
        if let Some(v) = s.take(key) {
            b.move_to(&s.at(key), v, single(PROXY), key, false);
        }
    }
    if let Some(v) = s.take("extraArgs") {
        proxy_args(b, &s.at("extraArgs"), v);
    }
    b.finish(s);
}

/// How a kube-proxy flag's text becomes a `KubeProxyConfiguration` value.
#[derive(Clone, Copy)]
enum FlagValue {
    Text,
    Int,
    Bool,
    /// A comma-separated list.
    List,
    /// `A=true,B=false`.
    Gates,
}

/// kube-proxy flags and the `KubeProxyConfiguration` (kubeproxy.config.k8s.io/v1alpha1) fields
/// they set. In 1.13 kube-proxy runs with flags only; in 1.14 with `--config` and the document's
/// `config`, where "most flags have no effect" (k8s/proxy.go), so known flags move into `config`.
/// `proxy-mode` becomes the document's `mode`, which the controller writes into the config.
const PROXY_FLAGS: &[(&str, &str, FlagValue)] = &[
    ("bind-address", "config.bindAddress", FlagValue::Text),
    ("cluster-cidr", "config.clusterCIDR", FlagValue::Text),
    (
        "conntrack-max-per-core",
        "config.conntrack.maxPerCore",
        FlagValue::Int,
    ),
    ("conntrack-min", "config.conntrack.min", FlagValue::Int),
    ("feature-gates", "config.featureGates", FlagValue::Gates),
    (
        "healthz-bind-address",
        "config.healthzBindAddress",
        FlagValue::Text,
    ),
    ("ipvs-scheduler", "config.ipvs.scheduler", FlagValue::Text),
    ("ipvs-strict-arp", "config.ipvs.strictARP", FlagValue::Bool),
    (
        "masquerade-all",
        "config.iptables.masqueradeAll",
        FlagValue::Bool,
    ),
    (
        "metrics-bind-address",
        "config.metricsBindAddress",
        FlagValue::Text,
    ),
    (
        "nodeport-addresses",
        "config.nodePortAddresses",
        FlagValue::List,
    ),
    ("proxy-mode", "mode", FlagValue::Text),
];

/// Flags that keep working as flags in 1.14: the controller passes `hostname-override` itself
/// and lets extraArgs replace it.
const PROXY_FLAGS_STILL_FLAGS: &[&str] = &["hostname-override"];

fn proxy_args(b: &mut Builder, from: &str, value: Value) {
    let Value::Object(args) = value else {
        // A `$patch: delete` drops the flags in both shapes.
        b.move_to(from, value, single(PROXY), "extraArgs", true);
        return;
    };
    let mut kept = Map::new();
    let mut unmapped = Vec::new();
    for (flag, v) in args {
        let mut at = from.to_string();
        push_key(&mut at, &flag);
        let typed = PROXY_FLAGS
            .iter()
            .find(|(f, _, _)| *f == flag)
            .and_then(|(_, field, kind)| Some((*field, flag_value(&v, *kind)?)));
        match typed {
            Some((field, typed)) => b.put(&at, single(PROXY), field, typed),
            None => {
                if !PROXY_FLAGS_STILL_FLAGS.contains(&flag.as_str()) {
                    unmapped.push(flag.clone());
                }
                kept.insert(flag, v);
            }
        }
    }
    if !kept.is_empty() {
        b.put(from, single(PROXY), "extraArgs", Value::Object(kept));
    }
    if !unmapped.is_empty() {
        b.warn(format!(
            "{from}: kube-proxy runs with a configuration file in Talos 1.14 and these flags may \
             not work as expected: {}; they are kept in KubeProxyConfig.extraArgs, move them \
             into KubeProxyConfig.config",
            unmapped.join(", ")
        ));
    }
}

/// A flag's value as the configuration field's type; `None` when it does not read as one.
fn flag_value(v: &Value, kind: FlagValue) -> Option<Value> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    match kind {
        FlagValue::Text => Some(json!(text)),
        FlagValue::Int => text.trim().parse::<i64>().ok().map(|n| json!(n)),
        FlagValue::Bool => text.trim().parse::<bool>().ok().map(|b| json!(b)),
        FlagValue::List => Some(json!(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        )),
        FlagValue::Gates => {
            let mut gates = Map::new();
            for pair in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (name, on) = pair.split_once('=')?;
                gates.insert(
                    name.trim().to_string(),
                    json!(on.trim().parse::<bool>().ok()?),
                );
            }
            Some(Value::Object(gates))
        }
    }
}

fn coredns(b: &mut Builder) {
    let Some(mut s) = b.take_section(".cluster.coreDNS", COREDNS) else {
        return;
    };
    if let Some(v) = s.take("disabled") {
        let from = s.at("disabled");
        if let Some(disabled) = b.boolean(&from, &v) {
            b.put(&from, single(COREDNS), "enabled", json!(!disabled));
        }
    }
    if let Some(v) = s.take("image") {
        b.move_to(&s.at("image"), v, single(COREDNS), "image", false);
    }
    b.finish(s);
}
