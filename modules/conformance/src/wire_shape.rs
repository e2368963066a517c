//! The shapes of the Talos API messages the client hands back, field by field as the proto subset
//! in `modules/proto` declares them. Only field names and kinds go in, never a value.

use ferro_talos_client::proto::common;
use ferro_talos_client::proto::cosi::resource::Resource;
use ferro_talos_client::proto::machine;
use serde_json::Value;

use crate::shape::Shape;

fn metadata(s: &mut Shape, path: &str, md: Option<&common::Metadata>) {
    s.message(path, md.is_some());
    if let Some(md) = md {
        s.text(&format!("{path}.hostname"), &md.hostname);
        s.text(&format!("{path}.error"), &md.error);
        s.message(&format!("{path}.status"), md.status.is_some());
    }
}

pub fn version(v: &machine::Version) -> Shape {
    let mut s = Shape::new();
    metadata(&mut s, "metadata", v.metadata.as_ref());
    s.message("version", v.version.is_some());
    if let Some(i) = &v.version {
        s.text("version.tag", &i.tag);
        s.text("version.sha", &i.sha);
        s.text("version.built", &i.built);
        s.text("version.go_version", &i.go_version);
        s.text("version.os", &i.os);
        s.text("version.arch", &i.arch);
    }
    s.message("platform", v.platform.is_some());
    if let Some(p) = &v.platform {
        s.text("platform.name", &p.name);
        s.text("platform.mode", &p.mode);
    }
    s.message("features", v.features.is_some());
    if let Some(f) = &v.features {
        s.flag("features.rbac", f.rbac);
    }
    s
}

pub fn services(list: &[machine::ServiceInfo]) -> Shape {
    let mut s = Shape::new();
    s.list("services", list.len());
    for svc in list {
        s.text("services[].id", &svc.id);
        s.text("services[].state", &svc.state);
        s.message("services[].events", svc.events.is_some());
        if let Some(events) = &svc.events {
            s.list("services[].events.events", events.events.len());
            for e in &events.events {
                s.text("services[].events.events[].msg", &e.msg);
                s.text("services[].events.events[].state", &e.state);
                s.message("services[].events.events[].ts", e.ts.is_some());
            }
        }
        s.message("services[].health", svc.health.is_some());
        if let Some(h) = &svc.health {
            s.flag("services[].health.unknown", h.unknown);
            s.flag("services[].health.healthy", h.healthy);
            s.text("services[].health.last_message", &h.last_message);
            s.message("services[].health.last_change", h.last_change.is_some());
        }
    }
    s
}

pub fn etcd_members(list: &[machine::EtcdMember]) -> Shape {
    let mut s = Shape::new();
    s.list("members", list.len());
    for m in list {
        s.number("members[].id", m.id);
        s.text("members[].hostname", &m.hostname);
        s.list("members[].peer_urls", m.peer_urls.len());
        s.list("members[].client_urls", m.client_urls.len());
        s.flag("members[].is_learner", m.is_learner);
    }
    s
}

pub fn etcd_member_status(m: &machine::EtcdMemberStatus) -> Shape {
    let mut s = Shape::new();
    s.text("protocol_version", &m.protocol_version);
    s.number("db_size", m.db_size);
    s.number("db_size_in_use", m.db_size_in_use);
    s.number("leader", m.leader);
    s.number("raft_index", m.raft_index);
    s.number("raft_term", m.raft_term);
    s.number("raft_applied_index", m.raft_applied_index);
    s.list("errors", m.errors.len());
    s.flag("is_learner", m.is_learner);
    s.number("member_id", m.member_id);
    s.text("storage_version", &m.storage_version);
    s
}

pub fn apply_configuration(a: &machine::ApplyConfiguration) -> Shape {
    let mut s = Shape::new();
    metadata(&mut s, "metadata", a.metadata.as_ref());
    s.list("warnings", a.warnings.len());
    s.number("mode", a.mode);
    s.text("mode_details", &a.mode_details);
    s
}

/// A COSI resource. `yaml_spec_shape` adds the keys of its YAML spec: only for resource types
/// whose spec holds no secrets (never a machine config).
pub fn resource(r: &Resource, yaml_spec_shape: bool) -> Shape {
    let mut s = Shape::new();
    s.message("metadata", r.metadata.is_some());
    if let Some(md) = &r.metadata {
        s.text("metadata.namespace", &md.namespace);
        s.text("metadata.type", &md.r#type);
        s.text("metadata.id", &md.id);
        s.text("metadata.version", &md.version);
        s.text("metadata.owner", &md.owner);
        s.text("metadata.phase", &md.phase);
        s.message("metadata.created", md.created.is_some());
        s.message("metadata.updated", md.updated.is_some());
        s.list("metadata.finalizers", md.finalizers.len());
        for key in md.labels.keys() {
            s.text(&format!("metadata.labels.{key}"), "set");
        }
        for key in md.annotations.keys() {
            s.text(&format!("metadata.annotations.{key}"), "set");
        }
    }
    s.message("spec", r.spec.is_some());
    if let Some(spec) = &r.spec {
        s.bytes("spec.proto_spec", &spec.proto_spec);
        s.text("spec.yaml_spec", &spec.yaml_spec);
        if yaml_spec_shape && let Some(value) = yaml_value(&spec.yaml_spec) {
            s.json("spec.yaml_spec", &value);
        }
    }
    s
}

pub fn event(e: &machine::Event) -> Shape {
    let mut s = Shape::new();
    metadata(&mut s, "metadata", e.metadata.as_ref());
    s.message("data", e.data.is_some());
    if let Some(data) = &e.data {
        s.text("data.type_url", &data.type_url);
        s.bytes("data.value", &data.value);
    }
    s.text("id", &e.id);
    s.text("actor_id", &e.actor_id);
    s
}

/// A YAML text as a JSON value, for its shape; `None` when it is not YAML.
pub fn yaml_value(text: &str) -> Option<Value> {
    if text.trim().is_empty() {
        return None;
    }
    serde_saphyr::from_str::<Value>(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_talos_client::proto::cosi::resource::{Metadata, Spec};

    #[test]
    fn a_resource_shape_lists_fields_not_values() {
        let r = Resource {
            metadata: Some(Metadata {
                namespace: "runtime".into(),
                r#type: "ExtensionStatuses.runtime.talos.dev".into(),
                id: "1".into(),
                version: "1".into(),
                ..Default::default()
            }),
            spec: Some(Spec {
                proto_spec: Vec::new(),
                yaml_spec: "image: 1.sqsh\nmetadata:\n    name: schematic\n    version: abc\n"
                    .into(),
            }),
        };
        let lines = resource(&r, true).into_lines();
        assert!(lines.contains(&"spec.yaml_spec.metadata.name: string".to_string()));
        assert!(lines.contains(&"metadata.id: string".to_string()));
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("schematic") || l.contains("abc"))
        );
        let plain = resource(&r, false).into_lines();
        assert!(!plain.iter().any(|l| l.starts_with("spec.yaml_spec.")));
    }
}
