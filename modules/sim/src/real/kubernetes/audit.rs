//! The simulator's log of what the API server accepted, read from the real API servers' audit
//! logs (the policy in `programs.rs`): a Node write that makes it unschedulable is a `cordon`,
//! one that makes it schedulable again an `uncordon`, a Node's deletion `delete_node`, an
//! eviction answered 201 an `evict` and one answered 429 `eviction_blocked`. Merged by time with
//! what the model records of the machines (`node_down`, `node_up`, `restart`), so tests read one
//! order of events whichever backend answered.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use time::format_description::well_known::Rfc3339;

use crate::control::KubeLogEntry;

/// One event as read from an audit log.
struct Seen {
    at_ms: u64,
    action: &'static str,
    node: String,
    pod: Option<String>,
}

fn millis(stamp: &str) -> u64 {
    time::OffsetDateTime::parse(stamp, &Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as u64)
        .unwrap_or(0)
}

/// The API servers' events, oldest first, with the nodes of evicted pods from `pod_nodes`.
fn from_audit(logs: &[PathBuf], pod_nodes: &BTreeMap<String, String>) -> Vec<Seen> {
    let mut entries: Vec<Value> = logs
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .filter(|e| e["stage"] == "ResponseComplete")
        .collect();
    entries.sort_by_key(|e| millis(e["stageTimestamp"].as_str().unwrap_or("")));
    let mut unschedulable: BTreeMap<String, bool> = BTreeMap::new();
    let mut out = Vec::new();
    for e in entries {
        let r = &e["objectRef"];
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
        let name = r["name"].as_str().unwrap_or("").to_string();
        let at_ms = millis(e["stageTimestamp"].as_str().unwrap_or(""));
        let verb = e["verb"].as_str().unwrap_or("");
        let action = match (r["resource"].as_str(), r["subresource"].as_str(), verb) {
            (Some("nodes"), None, "delete") if (200..300).contains(&code) => {
                unschedulable.remove(&name);
                Some(("delete_node", name.clone(), None))
            }
            (Some("nodes"), None, "update" | "patch") if (200..300).contains(&code) => {
                let now = e["responseObject"]["spec"]["unschedulable"]
                    .as_bool()
                    .unwrap_or(false);
                let was = unschedulable.insert(name.clone(), now).unwrap_or(false);
                match (was, now) {
                    (false, true) => Some(("cordon", name.clone(), None)),
                    (true, false) => Some(("uncordon", name.clone(), None)),
                    _ => None,
                }
            }
            (Some(resource), None, "create" | "update" | "patch" | "delete")
                if resource != "nodes" && (200..300).contains(&code) =>
            {
                object_write(&e, resource, verb)
                    .map(|(a, subject)| (a, String::new(), Some(subject)))
            }
            (Some("pods"), Some("eviction"), "create") => {
                let pod = format!("{}/{name}", r["namespace"].as_str().unwrap_or(""));
                let node = pod_nodes.get(&pod).cloned().unwrap_or_default();
                match code {
                    200..300 => Some(("evict", node, Some(pod))),
                    429 => Some(("eviction_blocked", node, Some(pod))),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some((action, node, pod)) = action {
            out.push(Seen {
                at_ms,
                action,
                node,
                pod,
            });
        }
    }
    out
}

/// A stored object's write as the model logs it: `apply` for a server-side apply (a patch
/// naming its field manager), and `Kind/namespace/name` (`Kind/name` when cluster-scoped).
/// Dry runs change nothing and are not writes.
fn object_write(e: &Value, resource: &str, verb: &str) -> Option<(&'static str, String)> {
    let uri = e["requestURI"].as_str().unwrap_or("");
    if uri.contains("dryRun=") {
        return None;
    }
    let r = &e["objectRef"];
    let kind = crate::kube::for_real::kind_of(r["apiGroup"].as_str().unwrap_or(""), resource)?;
    let name = r["name"].as_str()?;
    let subject = match r["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{kind}/{ns}/{name}"),
        _ => format!("{kind}/{name}"),
    };
    let action = match verb {
        "create" => "create",
        "update" => "update",
        "delete" => "delete",
        _ if uri.contains("fieldManager=") => "apply",
        _ => "patch",
    };
    Some((action, subject))
}

/// The log: the audit's events and the model's machine events, by time.
pub fn log(
    logs: &[PathBuf],
    pod_nodes: &BTreeMap<String, String>,
    model: &[KubeLogEntry],
) -> Vec<KubeLogEntry> {
    let mut all: Vec<KubeLogEntry> = from_audit(logs, pod_nodes)
        .into_iter()
        .map(|s| KubeLogEntry {
            seq: 0,
            action: s.action.to_string(),
            node: s.node,
            pod: s.pod,
            at_ms: s.at_ms,
        })
        .collect();
    all.extend(
        model
            .iter()
            .filter(|e| matches!(e.action.as_str(), "node_down" | "node_up" | "restart"))
            .cloned(),
    );
    all.sort_by_key(|e| e.at_ms);
    for (i, e) in all.iter_mut().enumerate() {
        e.seq = i as u64 + 1;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_events_become_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let line = |ts: &str,
                    verb: &str,
                    resource: &str,
                    sub: Option<&str>,
                    name: &str,
                    code: u16,
                    unsched: Option<bool>| {
            let mut e = serde_json::json!({
                "stage": "ResponseComplete", "verb": verb, "stageTimestamp": ts,
                "objectRef": {"resource": resource, "name": name, "namespace": "default"},
                "responseStatus": {"code": code},
            });
            if let Some(s) = sub {
                e["objectRef"]["subresource"] = serde_json::json!(s);
            }
            if let Some(u) = unsched {
                e["responseObject"] = serde_json::json!({"spec": {"unschedulable": u}});
            }
            e.to_string()
        };
        let node_write = |ts: &str, unschedulable: bool| {
            line(ts, "update", "nodes", None, "w1", 200, Some(unschedulable))
        };
        let eviction =
            |ts: &str, code: u16| line(ts, "create", "pods", Some("eviction"), "web-1", code, None);
        let text = [
            node_write("2026-12-07T07:00:03.000000Z", false),
            node_write("2026-12-07T07:00:01.000000Z", true),
            eviction("2026-12-07T07:00:02.000000Z", 429),
            eviction("2026-12-07T07:00:02.500000Z", 201),
            // Unschedulable already: no second cordon.
            node_write("2026-12-07T07:00:02.600000Z", true),
        ]
        .join("\n");
        std::fs::write(&path, text).unwrap();
        let pods = BTreeMap::from([("default/web-1".to_string(), "w1".to_string())]);
        let model = [KubeLogEntry {
            seq: 1,
            action: "node_down".into(),
            node: "w1".into(),
            pod: None,
            at_ms: millis("2026-12-07T07:00:02.700000Z"),
        }];
        let got: Vec<(String, String)> = log(&[path], &pods, &model)
            .into_iter()
            .map(|e| (e.action, e.node))
            .collect();
        let want: Vec<(String, String)> = [
            "cordon",
            "eviction_blocked",
            "evict",
            "node_down",
            "uncordon",
        ]
        .iter()
        .map(|a| (a.to_string(), "w1".to_string()))
        .collect();
        assert_eq!(got, want);
    }
}
