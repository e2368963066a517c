//! The read-only RPCs the modules make, asked of one node each, plus the answers a module's error
//! handling depends on (a resource that does not exist, a client without a certificate, and in
//! `dry_runs.rs` configs Talos rejects). Nothing here changes a node.

use std::time::{Duration, Instant};

use ferro_talos_client::proto::cluster::ClusterInfo;
use ferro_talos_client::proto::machine::{EventsRequest, ServiceInfo};
use ferro_talos_client::{ClientError, ErrorKind, TalosClient, decode_machine_status, probe};
use serde_json::Value;

use crate::dry_runs;
use crate::layout::Node;
use crate::normalise::Normaliser;
use crate::record::Record;
use crate::session::Session;
use crate::shape::Shape;
use crate::wire_shape;

/// A service's state and health on one line: `Running healthy`, `Preparing health unknown`.
pub fn service_summary(s: &ServiceInfo) -> String {
    let health = s.health.clone().unwrap_or_default();
    let health = match (health.unknown, health.healthy) {
        (true, _) => "health unknown",
        (false, true) => "healthy",
        (false, false) => "unhealthy",
    };
    format!("{} {health}", s.state)
}

/// The id of a resource no node has, for Talos's NotFound answer.
const MISSING_ID: &str = "conformance-probe-missing";
/// How many buffered events to ask for.
const EVENTS_TAIL: i32 = 50;
/// The events stream stays open after the tail: a quiet gap this long ends the reading.
const EVENTS_GAP: Duration = Duration::from_millis(500);

pub struct RpcProbes<'a> {
    pub session: &'a Session,
    pub normaliser: &'a Normaliser,
    pub nodes: &'a [Node],
    pub health_timeout: Duration,
}

impl RpcProbes<'_> {
    /// Every per-node probe, in a fixed order.
    pub async fn node(&self, node: &Node) -> Vec<Record> {
        let label = node.label.as_str();
        let mut out = vec![
            self.without_certificate(node).await,
            self.node_mode(node).await,
        ];
        let started = Instant::now();
        let client = match self.session.client(&node.address).await {
            Ok(c) => c,
            Err(e) => {
                out.push(Record::new("connect", label, started).failed(&e, self.normaliser));
                return out;
            }
        };
        out.push(self.version(&client, label).await);
        out.push(self.hostname(&client, label).await);
        out.push(self.services(&client, label).await);
        out.push(self.etcd_members(&client, label).await);
        out.push(self.etcd_status(&client, label).await);
        for id in ["v1alpha1", "persistent", MISSING_ID] {
            out.push(self.machine_config_resource(&client, label, id).await);
        }
        out.push(self.machine_type(&client, label).await);
        out.push(self.machine_status(&client, label).await);
        out.push(self.extension_statuses(&client, label).await);
        out.push(self.boot_id(&client, label).await);
        out.push(self.events(&client, label).await);
        out.push(self.kubeconfig(&client, label).await);
        out.extend(dry_runs::probes(&client, node, self.normaliser).await);
        out
    }

    /// Talos's own health check, asked of the first control plane about every node.
    pub async fn health_check(&self, node: &Node) -> Record {
        let probe = "HealthCheck";
        let started = Instant::now();
        let addresses = |cp: bool| -> Vec<String> {
            self.nodes
                .iter()
                .filter(|n| n.control_plane == cp)
                .map(|n| n.address.clone())
                .collect()
        };
        let info = ClusterInfo {
            control_plane_nodes: addresses(true),
            worker_nodes: addresses(false),
            force_endpoint: String::new(),
        };
        // The progress lines are collected as they arrive, so a failed check still shows how far
        // it got.
        let mut lines = Vec::new();
        let answer = match self.session.client(&node.address).await {
            Ok(client) => {
                client
                    .health_check(self.health_timeout, Some(info), |line| {
                        lines.push(line.to_string())
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        let record = Record::new(probe, &node.label, started);
        let record = match answer {
            Ok(_) => record,
            Err(e) => record.failed(&e, self.normaliser),
        };
        record.ids(self.steps(&lines))
    }

    /// Progress lines, normalised, with repeats of the line before dropped (a wait repeats its line).
    fn steps(&self, lines: &[String]) -> Vec<String> {
        let mut steps: Vec<String> = Vec::new();
        for line in lines {
            let line = self.normaliser.text(line.trim());
            if steps.last() != Some(&line) {
                steps.push(line);
            }
        }
        steps
    }

    fn failed(&self, probe: &str, label: &str, started: Instant, e: &ClientError) -> Record {
        Record::new(probe, label, started).failed(e, self.normaliser)
    }

    /// What a client without a certificate gets from a configured node: the answer the modules'
    /// maintenance-mode probe tells configured nodes by.
    async fn without_certificate(&self, node: &Node) -> Record {
        let probe = "Version without a client certificate";
        let started = Instant::now();
        let answer = match TalosClient::connect_maintenance(
            &node.address,
            self.session.opts.clone(),
        )
        .await
        {
            Ok(client) => client.version().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(v) => Record::new(probe, &node.label, started).shape(wire_shape::version(&v)),
            Err(e) => self.failed(probe, &node.label, started, &e),
        }
    }

    /// The modules' own verdict on the node's mode (configured, maintenance, unreachable).
    async fn node_mode(&self, node: &Node) -> Record {
        let name = "node mode probe";
        let started = Instant::now();
        match probe(&node.address, &self.session.opts).await {
            Ok(mode) => Record::new(name, &node.label, started)
                .fact("mode", format!("{mode:?}").to_lowercase()),
            Err(e) => self.failed(name, &node.label, started, &e),
        }
    }

    async fn version(&self, client: &TalosClient, label: &str) -> Record {
        let started = Instant::now();
        match client.version().await {
            Ok(v) => {
                let platform = v.platform.clone().unwrap_or_default();
                Record::new("Version", label, started)
                    .shape(wire_shape::version(&v))
                    .fact("platform.name", self.normaliser.text(&platform.name))
                    .fact("platform.mode", self.normaliser.text(&platform.mode))
            }
            Err(e) => self.failed("Version", label, started, &e),
        }
    }

    async fn hostname(&self, client: &TalosClient, label: &str) -> Record {
        let started = Instant::now();
        match client.hostname().await {
            Ok(name) => {
                let mut shape = Shape::new();
                shape.text("hostname", &name);
                Record::new("Hostname", label, started).shape(shape)
            }
            Err(e) => self.failed("Hostname", label, started, &e),
        }
    }

    async fn services(&self, client: &TalosClient, label: &str) -> Record {
        let started = Instant::now();
        match client.service_list().await {
            Ok(list) => {
                let mut record = Record::new("ServiceList", label, started)
                    .shape(wire_shape::services(&list))
                    .ids(list.iter().map(|s| s.id.clone()).collect());
                for s in &list {
                    record = record.fact(&format!("service {}", s.id), service_summary(s));
                }
                record
            }
            Err(e) => self.failed("ServiceList", label, started, &e),
        }
    }

    async fn etcd_members(&self, client: &TalosClient, label: &str) -> Record {
        let started = Instant::now();
        match client.etcd_member_list().await {
            Ok(members) => Record::new("EtcdMemberList", label, started)
                .shape(wire_shape::etcd_members(&members))
                .fact("members", members.len().to_string())
                .fact(
                    "learners",
                    members.iter().filter(|m| m.is_learner).count().to_string(),
                ),
            Err(e) => self.failed("EtcdMemberList", label, started, &e),
        }
    }

    async fn etcd_status(&self, client: &TalosClient, label: &str) -> Record {
        let started = Instant::now();
        match client.etcd_status().await {
            Ok(status) => Record::new("EtcdStatus", label, started)
                .shape(wire_shape::etcd_member_status(&status))
                .ids(
                    status
                        .errors
                        .iter()
                        .map(|e| self.normaliser.text(e))
                        .collect(),
                ),
            Err(e) => self.failed("EtcdStatus", label, started, &e),
        }
    }

    /// A machine config resource: its shape only (the spec is the config, full of secrets).
    async fn machine_config_resource(&self, client: &TalosClient, label: &str, id: &str) -> Record {
        let probe = format!("COSI Get MachineConfigs.config.talos.dev config/{id}");
        let started = Instant::now();
        match client
            .get_resource("config", "MachineConfigs.config.talos.dev", id)
            .await
        {
            Ok(r) => Record::new(probe, label, started)
                .shape(wire_shape::resource(&r, false))
                .ids(vec![r.metadata.map(|m| m.id).unwrap_or_default()]),
            Err(e) => self.failed(&probe, label, started, &e),
        }
    }

    /// The node's machine type resource; its spec is a YAML scalar (`controlplane`, `worker`).
    async fn machine_type(&self, client: &TalosClient, label: &str) -> Record {
        let probe = "COSI Get MachineTypes.config.talos.dev config/machine-type";
        let started = Instant::now();
        match client
            .get_resource("config", "MachineTypes.config.talos.dev", "machine-type")
            .await
        {
            Ok(r) => {
                let spec = r.spec.clone().unwrap_or_default();
                let mut record = Record::new(probe, label, started)
                    .shape(wire_shape::resource(&r, true))
                    .ids(vec![r.metadata.map(|m| m.id).unwrap_or_default()]);
                if let Some(Value::String(scalar)) = wire_shape::yaml_value(&spec.yaml_spec) {
                    record = record.fact("yaml_spec", self.normaliser.text(&scalar));
                }
                record
            }
            Err(e) => self.failed(probe, label, started, &e),
        }
    }

    async fn machine_status(&self, client: &TalosClient, label: &str) -> Record {
        let probe = "COSI Get MachineStatuses.runtime.talos.dev runtime/machine";
        let started = Instant::now();
        match client
            .get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine")
            .await
        {
            Ok(r) => {
                let spec = r.spec.clone().unwrap_or_default();
                let record = Record::new(probe, label, started)
                    .shape(wire_shape::resource(&r, true))
                    .ids(vec![r.metadata.map(|m| m.id).unwrap_or_default()]);
                match decode_machine_status(&spec.proto_spec, &spec.yaml_spec) {
                    Ok(status) => {
                        let unmet: Vec<String> = status
                            .unmet_conditions
                            .iter()
                            .map(|(name, _)| name.clone())
                            .collect();
                        record
                            .fact("stage", format!("{:?}", status.stage))
                            .fact("ready", status.ready.to_string())
                            .fact("unmet_conditions", unmet.join(", "))
                    }
                    Err(why) => record.fact("decode", self.normaliser.text(&why)),
                }
            }
            Err(e) => self.failed(probe, label, started, &e),
        }
    }

    /// Every ExtensionStatus: their IDs (indexes in install order) and each one's extension name.
    async fn extension_statuses(&self, client: &TalosClient, label: &str) -> Record {
        let probe = "COSI List ExtensionStatuses.runtime.talos.dev runtime";
        let started = Instant::now();
        match client
            .list_resources("runtime", "ExtensionStatuses.runtime.talos.dev")
            .await
        {
            Ok(list) => {
                let mut shape = Shape::new();
                let mut record = Record::new(probe, label, started);
                let mut ids = Vec::new();
                for r in &list {
                    shape.merge(wire_shape::resource(r, true));
                    let id = r
                        .metadata
                        .as_ref()
                        .map(|m| m.id.clone())
                        .unwrap_or_default();
                    let spec = r.spec.clone().unwrap_or_default();
                    let name = wire_shape::yaml_value(&spec.yaml_spec)
                        .and_then(|v| {
                            v.pointer("/metadata/name")
                                .and_then(Value::as_str)
                                .map(str::to_string)
                        })
                        .unwrap_or_default();
                    record = record.fact(&format!("extension {id}"), self.normaliser.text(&name));
                    ids.push(id);
                }
                record.shape(shape).ids(ids)
            }
            Err(e) => self.failed(probe, label, started, &e),
        }
    }

    /// MachineService/Read of the boot ID, which the reboot waits compare.
    async fn boot_id(&self, client: &TalosClient, label: &str) -> Record {
        let probe = "Read /proc/sys/kernel/random/boot_id";
        let started = Instant::now();
        match client.read_file(ferro_talos_client::BOOT_ID_PATH).await {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let form = self.normaliser.text(&text);
                Record::new(probe, label, started).fact("content", form.replace('\n', "\\n"))
            }
            Err(e) => self.failed(probe, label, started, &e),
        }
    }

    /// The tail of the event buffer: which event types a node sends, and their fields.
    async fn events(&self, client: &TalosClient, label: &str) -> Record {
        let probe = "Events (tail)";
        let started = Instant::now();
        let request = EventsRequest {
            tail_events: EVENTS_TAIL,
            ..Default::default()
        };
        let mut stream = match client.events(request).await {
            Ok(s) => s,
            Err(e) => return self.failed(probe, label, started, &e),
        };
        let mut shape = Shape::new();
        let mut types: Vec<String> = Vec::new();
        for _ in 0..=EVENTS_TAIL {
            match stream.next(EVENTS_GAP).await {
                Ok(Some(event)) => {
                    shape.merge(wire_shape::event(&event));
                    let kind = match event.data.map(|d| d.type_url) {
                        Some(url) if !url.is_empty() => url,
                        Some(_) => "(empty type)".to_string(),
                        None => "(no data)".to_string(),
                    };
                    if !types.contains(&kind) {
                        types.push(kind);
                    }
                }
                Ok(None) => break,
                Err(e) if e.kind == ErrorKind::Timeout => break,
                Err(e) => return self.failed(probe, label, started, &e),
            }
        }
        types.sort();
        Record::new(probe, label, started).shape(shape).ids(types)
    }

    /// The admin kubeconfig: only the keys of the YAML are recorded, never a value (it holds a
    /// client key), and the bytes are dropped at once.
    async fn kubeconfig(&self, client: &TalosClient, label: &str) -> Record {
        let started = Instant::now();
        match client.kubeconfig().await {
            Ok(bytes) => {
                let mut shape = Shape::new();
                match wire_shape::yaml_value(&String::from_utf8_lossy(&bytes)) {
                    Some(value) => shape.json("", &value),
                    None => shape.text("(not YAML)", "x"),
                }
                Record::new("Kubeconfig", label, started).shape(shape)
            }
            Err(e) => self.failed("Kubeconfig", label, started, &e),
        }
    }
}
