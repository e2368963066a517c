//! The control protocol's messages, defined once for the simulator (which parses [`Request`]s
//! and sends [`Reply`]s), the `talos-sim` subcommands and Rust tests ([`super::ControlClient`]).
//! Python tests speak the same JSON directly (`tests/integration/talos_sim.py`).
//!
//! One JSON object per line in each direction. A request is `{"op": NAME, ...}` with the op's
//! fields; a reply is `{"ok":true, ...}` with the fields of the op's reply, or
//! `{"ok":false,"error":"..."}`. `node` is an index (0-based, control planes first) or a node's
//! current address or hostname. Fields an op does not know are ignored, except in `fault`,
//! where an unknown field is an unknown fault and refused.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::NodeInfo;
use crate::fault_kind::FaultKind;
use crate::state::Faults;

/// A node of the cluster, as a request names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRef {
    /// 0-based, control planes first.
    Index(usize),
    /// The node's current address or its hostname.
    Name(String),
}

impl NodeRef {
    /// What a request's `node` expects, for messages.
    pub const EXPECTED: &'static str = "\"node\": an index or an address";
}

impl std::str::FromStr for NodeRef {
    type Err = std::convert::Infallible;

    /// `2` is an index, anything else an address or hostname.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.parse() {
            Ok(i) => NodeRef::Index(i),
            Err(_) => NodeRef::Name(s.to_string()),
        })
    }
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRef::Index(i) => write!(f, "{i}"),
            NodeRef::Name(n) => f.write_str(n),
        }
    }
}

impl Serialize for NodeRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NodeRef::Index(i) => s.serialize_u64(*i as u64),
            NodeRef::Name(n) => s.serialize_str(n),
        }
    }
}

impl<'de> Deserialize<'de> for NodeRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NodeRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(NodeRef::EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<NodeRef, E> {
                usize::try_from(v)
                    .map(NodeRef::Index)
                    .map_err(|_| E::custom(format!("no node {v}")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<NodeRef, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom("node index must be a non-negative integer"))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NodeRef, E> {
                Ok(NodeRef::Name(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One request on the control port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Every node, and the cluster's etcd and health state: [`StatusReply`].
    Status,
    /// Reboot a node as `talosctl reboot` does: [`Reply::Rebooted`].
    Reboot { node: NodeRef },
    /// Bring a node that stayed down (never_return, powered off, nothing to boot) back up.
    PowerOn { node: NodeRef },
    /// Attach or detach installation media: what a node with nothing installed boots from.
    BootMedia { node: NodeRef, attached: bool },
    /// Change a node's faults.
    Fault {
        node: NodeRef,
        #[serde(flatten)]
        change: FaultChange,
    },
    /// Clear every fault of a node.
    ClearFaults { node: NodeRef },
    /// Make the cluster's health check fail with this text; null (or no text) clears it.
    HealthFail {
        #[serde(default)]
        text: Option<String>,
    },
    /// Set a node's running Talos version right away.
    SetVersion { node: NodeRef, version: String },
    /// How long a rebooting node is away, in milliseconds.
    Downtime { ms: u64 },
    /// The Kubernetes API's Nodes, pods and log: [`KubeSnapshot`].
    Kube,
    /// A Deployment's pods on the workers, with a PodDisruptionBudget when `min_available` is
    /// given.
    Workload {
        #[serde(default = "default_namespace")]
        namespace: String,
        name: String,
        #[serde(default = "default_replicas")]
        replicas: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_available: Option<u32>,
    },
    /// The simulator exits once it has replied ([`Reply::Stopping`]).
    Stop,
}

fn default_namespace() -> String {
    "default".into()
}

fn default_replicas() -> u32 {
    2
}

impl Request {
    /// Every op, in the order of [`Request`]'s variants.
    pub const OPS: &'static [&'static str] = &[
        "status",
        "reboot",
        "power_on",
        "boot_media",
        "fault",
        "clear_faults",
        "health_fail",
        "set_version",
        "downtime",
        "kube",
        "workload",
        "stop",
    ];

    /// The request on one line of the control protocol, with an error a person can act on: the
    /// op is named, an unknown op lists the valid ones, a missing field says what it must be.
    pub fn parse(line: &str) -> Result<Request, String> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("request is not JSON: {e}"))?;
        let op = match value.get("op") {
            Some(Value::String(op)) => op.clone(),
            Some(_) => return Err("expected \"op\": a string".into()),
            None if value.is_object() => return Err("expected \"op\"".into()),
            None => return Err("expected a JSON object with \"op\"".into()),
        };
        if !Request::OPS.contains(&op.as_str()) {
            return Err(format!(
                "unknown op {op:?}; expected one of {}",
                Request::OPS.join(", ")
            ));
        }
        serde_json::from_value(value).map_err(|e| explain(&op, &e.to_string()))
    }

    /// The request as one line of the control protocol (without the newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a request always serializes")
    }

    /// The op's name.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Reboot { .. } => "reboot",
            Request::PowerOn { .. } => "power_on",
            Request::BootMedia { .. } => "boot_media",
            Request::Fault { .. } => "fault",
            Request::ClearFaults { .. } => "clear_faults",
            Request::HealthFail { .. } => "health_fail",
            Request::SetVersion { .. } => "set_version",
            Request::Downtime { .. } => "downtime",
            Request::Kube => "kube",
            Request::Workload { .. } => "workload",
            Request::Stop => "stop",
        }
    }
}

/// serde's message for a request of `op` that does not fit, with the op named; a missing field
/// says what it must hold.
fn explain(op: &str, message: &str) -> String {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|m| m.strip_suffix('`'));
    match missing {
        Some("node") => format!("{op}: expected {}", NodeRef::EXPECTED),
        Some(field) => {
            let what = match field {
                "attached" => ": a bool",
                "version" => ": a Talos version such as v1.13.6",
                "ms" => ": milliseconds",
                "name" => ": the workload's name",
                _ => "",
            };
            format!("{op}: expected {field:?}{what}")
        }
        None => format!("{op}: {message}"),
    }
}

/// What a `fault` request changes: one fault switched on by name, or fields set one by one.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FaultChange {
    /// `{"kind": NAME}` switches one fault on; `slow` takes `delay_ms`.
    Kind {
        kind: FaultKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        delay_ms: Option<u64>,
    },
    /// Only the fields given change.
    Fields(FaultFields),
}

/// A field-wise fault update: `None` leaves a fault as it is. The faults that carry a value
/// are tri-state: absent (`None`), cleared by `null` (`Some(None)`), or set (`Some(Some(v))`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub never_return: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_address: Option<Option<Ipv4Addr>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firewalled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_down: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject_config: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_ms: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_bytes_per_sec: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade_mutex_held: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub installer_fails: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apiserver_never_ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_version_stuck: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemonset_rollout_stuck: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphaned_daemon_pods: Option<bool>,
}

impl FaultFields {
    /// The field names, for messages.
    pub const NAMES: &'static [&'static str] = &[
        "never_return",
        "next_address",
        "unreachable",
        "firewalled",
        "etcd_down",
        "reject_config",
        "slow_ms",
        "upload_bytes_per_sec",
        "upgrade_mutex_held",
        "installer_fails",
        "apiserver_never_ready",
        "kubelet_version_stuck",
        "daemonset_rollout_stuck",
        "orphaned_daemon_pods",
    ];

    /// Changes the fields given.
    pub fn apply(&self, f: &mut Faults) {
        fn set<T: Clone>(field: &mut T, v: &Option<T>) {
            if let Some(v) = v {
                *field = v.clone();
            }
        }
        set(&mut f.never_return, &self.never_return);
        set(&mut f.next_address, &self.next_address);
        set(&mut f.unreachable, &self.unreachable);
        set(&mut f.firewalled, &self.firewalled);
        set(&mut f.etcd_down, &self.etcd_down);
        set(&mut f.reject_config, &self.reject_config);
        set(&mut f.slow_ms, &self.slow_ms);
        set(&mut f.upload_bytes_per_sec, &self.upload_bytes_per_sec);
        set(&mut f.upgrade_mutex_held, &self.upgrade_mutex_held);
        set(&mut f.installer_fails, &self.installer_fails);
        set(&mut f.apiserver_never_ready, &self.apiserver_never_ready);
        set(&mut f.kubelet_version_stuck, &self.kubelet_version_stuck);
        set(
            &mut f.daemonset_rollout_stuck,
            &self.daemonset_rollout_stuck,
        );
        set(&mut f.orphaned_daemon_pods, &self.orphaned_daemon_pods);
    }
}

impl FaultChange {
    /// Applies the change to a node's faults; `slow` without a delay is refused.
    pub fn apply(&self, faults: &mut Faults) -> Result<(), String> {
        match self {
            FaultChange::Kind { kind, delay_ms } => kind.set(faults, *delay_ms),
            FaultChange::Fields(fields) => {
                fields.apply(faults);
                Ok(())
            }
        }
    }
}

impl<'de> Deserialize<'de> for FaultChange {
    /// By hand, so that a field that is no fault is refused by name (the request's other
    /// fields are not), a bool fault's `null` is refused while a valued fault's `null` clears
    /// it, and every message names the field.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FaultChange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("fault fields, or \"kind\" (with \"delay_ms\" for slow)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultChange, A::Error> {
                fn value<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
                    map: &mut A,
                    key: &str,
                ) -> Result<T, A::Error> {
                    map.next_value()
                        .map_err(|e| de::Error::custom(format!("{key}: {e}")))
                }
                let mut kind = None;
                let mut delay_ms = None;
                let mut f = FaultFields::default();
                while let Some(key) = map.next_key::<String>()? {
                    let m = &mut map;
                    let k = key.as_str();
                    match k {
                        "kind" => kind = Some(value::<FaultKind, _>(m, k)?),
                        "delay_ms" => delay_ms = Some(value(m, k)?),
                        "never_return" => f.never_return = Some(value(m, k)?),
                        "next_address" => {
                            let a: Option<Ipv4Addr> = value(m, k)?;
                            if a.is_some_and(|a| !a.is_loopback()) {
                                return Err(de::Error::custom(
                                    "next_address must be in 127.0.0.0/8",
                                ));
                            }
                            f.next_address = Some(a);
                        }
                        "unreachable" => f.unreachable = Some(value(m, k)?),
                        "firewalled" => f.firewalled = Some(value(m, k)?),
                        "etcd_down" => f.etcd_down = Some(value(m, k)?),
                        "reject_config" => f.reject_config = Some(value(m, k)?),
                        "slow_ms" => f.slow_ms = Some(value(m, k)?),
                        "upload_bytes_per_sec" => {
                            let rate: Option<u64> = value(m, k)?;
                            if rate == Some(0) {
                                return Err(de::Error::custom(
                                    "upload_bytes_per_sec must be at least 1 (null clears it)",
                                ));
                            }
                            f.upload_bytes_per_sec = Some(rate);
                        }
                        "upgrade_mutex_held" => f.upgrade_mutex_held = Some(value(m, k)?),
                        "installer_fails" => f.installer_fails = Some(value(m, k)?),
                        "apiserver_never_ready" => f.apiserver_never_ready = Some(value(m, k)?),
                        "kubelet_version_stuck" => f.kubelet_version_stuck = Some(value(m, k)?),
                        "daemonset_rollout_stuck" => f.daemonset_rollout_stuck = Some(value(m, k)?),
                        "orphaned_daemon_pods" => f.orphaned_daemon_pods = Some(value(m, k)?),
                        other => {
                            return Err(de::Error::custom(format!(
                                "unknown fault {other:?}; a fault request sets \"kind\" (and \"delay_ms\") or any of {}",
                                FaultFields::NAMES.join(", ")
                            )));
                        }
                    }
                }
                match (kind, delay_ms) {
                    (Some(kind), delay_ms) if f == FaultFields::default() => {
                        Ok(FaultChange::Kind { kind, delay_ms })
                    }
                    (Some(_), _) => Err(de::Error::custom(
                        "give one fault by \"kind\" or set fault fields, not both",
                    )),
                    (None, Some(_)) => Err(de::Error::custom(
                        "\"delay_ms\" goes with \"kind\": \"slow\" (or set \"slow_ms\")",
                    )),
                    (None, None) => Ok(FaultChange::Fields(f)),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// The answer to `status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusReply {
    pub nodes: Vec<NodeInfo>,
    pub health_fail: Option<String>,
    pub bootstrapped: bool,
    pub etcd_members: usize,
    pub reboot_downtime_ms: u64,
    pub state_dir: Option<PathBuf>,
    pub pid: u32,
}

/// The answer to `kube`: the Kubernetes API's Nodes and pods (as the API serves them) and the
/// log of what it saw, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeSnapshot {
    pub nodes: Vec<Value>,
    pub pods: Vec<Value>,
    pub log: Vec<KubeLogEntry>,
}

/// One entry of the Kubernetes API's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeLogEntry {
    pub seq: u64,
    /// `cordon`, `uncordon`, `evict`, `eviction_blocked`, `node_down`, `node_up`, `restart` (a
    /// component restarted for a new config; `pod` names it), and for writes of stored objects
    /// `apply`, `create`, `update`, `patch` and `delete` (empty `node`, `pod` =
    /// `Kind/namespace/name`).
    pub action: String,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// A successful answer; its fields follow `"ok": true` on the wire.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `{"ok":true}`: done.
    Done,
    Status(Box<StatusReply>),
    /// `reboot`: the actor id of the reboot's events.
    Rebooted {
        actor_id: String,
    },
    Kube(Box<KubeSnapshot>),
    /// `stop`: `{"ok":true,"stopping":true}`, and the simulator exits.
    Stopping,
}

impl Serialize for Reply {
    /// `"ok": true` and the reply's fields, in one object.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Ok<'a, T> {
            ok: bool,
            #[serde(flatten)]
            body: &'a T,
        }
        /// `kube` has always sent `ok` after the snapshot.
        #[derive(Serialize)]
        struct OkLast<'a, T> {
            #[serde(flatten)]
            body: &'a T,
            ok: bool,
        }
        match self {
            Reply::Done => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("ok", &true)?;
                m.end()
            }
            Reply::Stopping => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("ok", &true)?;
                m.serialize_entry("stopping", &true)?;
                m.end()
            }
            Reply::Rebooted { actor_id } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("ok", &true)?;
                m.serialize_entry("actor_id", actor_id)?;
                m.end()
            }
            Reply::Status(r) => Ok {
                ok: true,
                body: &**r,
            }
            .serialize(s),
            Reply::Kube(k) => OkLast {
                body: &**k,
                ok: true,
            }
            .serialize(s),
        }
    }
}

/// The simulator's answer line: a [`Reply`] or the reason the request was refused.
pub fn reply_line(reply: &Result<Reply, String>) -> String {
    #[derive(Serialize)]
    struct Refused<'a> {
        ok: bool,
        error: &'a str,
    }
    match reply {
        Ok(r) => serde_json::to_string(r),
        Err(e) => serde_json::to_string(&Refused {
            ok: false,
            error: e,
        }),
    }
    .expect("a reply always serializes")
}

impl Reply {
    /// The simulator's answer line to `request`: the reply, or `Err` with the simulator's
    /// reason (or what is wrong with the line).
    pub fn parse(request: &Request, line: &str) -> Result<Reply, ReplyError> {
        let malformed = |e: serde_json::Error| ReplyError::Malformed(format!("{e}: {line:?}"));
        let value: Value = serde_json::from_str(line).map_err(malformed)?;
        if value.get("ok") != Some(&Value::Bool(true)) {
            let error = value.get("error").and_then(Value::as_str);
            return Err(ReplyError::Refused(
                error
                    .unwrap_or("the simulator refused the request")
                    .to_string(),
            ));
        }
        Ok(match request {
            Request::Status => {
                Reply::Status(Box::new(serde_json::from_value(value).map_err(malformed)?))
            }
            Request::Kube => {
                Reply::Kube(Box::new(serde_json::from_value(value).map_err(malformed)?))
            }
            Request::Reboot { .. } => {
                #[derive(Deserialize)]
                struct R {
                    actor_id: String,
                }
                let r: R = serde_json::from_value(value).map_err(malformed)?;
                Reply::Rebooted {
                    actor_id: r.actor_id,
                }
            }
            Request::Stop => Reply::Stopping,
            _ => Reply::Done,
        })
    }
}

/// Why a reply is no [`Reply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// `{"ok":false,"error":...}`: the simulator's reason.
    Refused(String),
    /// Not a reply of this protocol.
    Malformed(String),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::Refused(e) => f.write_str(e),
            ReplyError::Malformed(e) => write!(f, "not a control protocol reply: {e}"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// What the binary prints after `READY ` once every node listens.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ready {
    pub nodes: Vec<NodeInfo>,
    pub control: Option<SocketAddr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: usize) -> NodeRef {
        NodeRef::Index(i)
    }

    fn fields(f: FaultFields) -> FaultChange {
        FaultChange::Fields(f)
    }

    /// Every op, and each form of its fields.
    fn every_form() -> Vec<Request> {
        vec![
            Request::Status,
            Request::Reboot { node: node(2) },
            Request::Reboot {
                node: NodeRef::Name("talos-cp1".into()),
            },
            Request::PowerOn { node: node(0) },
            Request::BootMedia {
                node: node(0),
                attached: false,
            },
            Request::Fault {
                node: node(1),
                change: FaultChange::Kind {
                    kind: FaultKind::Slow,
                    delay_ms: Some(2000),
                },
            },
            Request::Fault {
                node: node(1),
                change: FaultChange::Kind {
                    kind: FaultKind::EtcdDown,
                    delay_ms: None,
                },
            },
            Request::Fault {
                node: NodeRef::Name("127.0.21.2".into()),
                change: fields(FaultFields {
                    never_return: Some(true),
                    next_address: Some(Some(Ipv4Addr::new(127, 0, 21, 77))),
                    unreachable: Some(false),
                    firewalled: Some(true),
                    etcd_down: Some(false),
                    reject_config: Some(Some("invalid".into())),
                    slow_ms: Some(Some(150)),
                    upload_bytes_per_sec: Some(Some(1 << 20)),
                    upgrade_mutex_held: Some(true),
                    installer_fails: Some(true),
                    apiserver_never_ready: Some(true),
                    kubelet_version_stuck: Some(true),
                    daemonset_rollout_stuck: Some(true),
                    orphaned_daemon_pods: Some(true),
                }),
            },
            // null clears.
            Request::Fault {
                node: node(0),
                change: fields(FaultFields {
                    next_address: Some(None),
                    reject_config: Some(None),
                    slow_ms: Some(None),
                    upload_bytes_per_sec: Some(None),
                    ..FaultFields::default()
                }),
            },
            Request::Fault {
                node: node(0),
                change: fields(FaultFields::default()),
            },
            Request::ClearFaults { node: node(3) },
            Request::HealthFail {
                text: Some("node x is not ready".into()),
            },
            Request::HealthFail { text: None },
            Request::SetVersion {
                node: node(0),
                version: "v1.12.4".into(),
            },
            Request::Downtime { ms: 1500 },
            Request::Kube,
            Request::Workload {
                namespace: "apps".into(),
                name: "web".into(),
                replicas: 3,
                min_available: Some(1),
            },
            Request::Workload {
                namespace: "default".into(),
                name: "solo".into(),
                replicas: 1,
                min_available: None,
            },
            Request::Stop,
        ]
    }

    #[test]
    fn every_request_form_round_trips() {
        let mut ops = Vec::new();
        for r in every_form() {
            let line = r.to_line();
            assert_eq!(Request::parse(&line), Ok(r.clone()), "{line}");
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["op"], r.op(), "{line}");
            if !ops.contains(&r.op()) {
                ops.push(r.op());
            }
        }
        assert_eq!(ops, Request::OPS, "OPS lists every op, in order");
    }

    #[test]
    fn the_requests_the_cli_sends_are_the_ones_it_sent_before() {
        let slow = Request::Fault {
            node: node(1),
            change: FaultChange::Kind {
                kind: FaultKind::Slow,
                delay_ms: Some(3000),
            },
        };
        assert_eq!(
            slow.to_line(),
            r#"{"op":"fault","node":1,"kind":"slow","delay_ms":3000}"#
        );
        let clear = Request::ClearFaults {
            node: NodeRef::Name("127.0.21.2".into()),
        };
        assert_eq!(
            clear.to_line(),
            r#"{"op":"clear_faults","node":"127.0.21.2"}"#
        );
        assert_eq!(Request::Status.to_line(), r#"{"op":"status"}"#);
        assert_eq!(Request::Stop.to_line(), r#"{"op":"stop"}"#);
    }

    /// What `tests/integration` (`Sim.control(**request)`, json.dumps) and the Molecule
    /// scenarios send, byte for byte.
    #[test]
    fn the_json_the_python_tests_send_parses_to_the_intended_request() {
        let cases: Vec<(&str, Request)> = vec![
            (r#"{"op": "status"}"#, Request::Status),
            (r#"{"op": "kube"}"#, Request::Kube),
            (
                r#"{"op": "fault", "node": 0, "never_return": true}"#,
                Request::Fault {
                    node: node(0),
                    change: fields(FaultFields {
                        never_return: Some(true),
                        ..FaultFields::default()
                    }),
                },
            ),
            (
                r#"{"op": "fault", "node": 1, "kind": "slow", "delay_ms": 2000}"#,
                Request::Fault {
                    node: node(1),
                    change: FaultChange::Kind {
                        kind: FaultKind::Slow,
                        delay_ms: Some(2000),
                    },
                },
            ),
            (
                r#"{"op": "fault", "node": 1, "kind": "daemonset_rollout_stuck"}"#,
                Request::Fault {
                    node: node(1),
                    change: FaultChange::Kind {
                        kind: FaultKind::DaemonsetRolloutStuck,
                        delay_ms: None,
                    },
                },
            ),
            (
                r#"{"op": "fault", "node": 3, "next_address": "127.0.21.77"}"#,
                Request::Fault {
                    node: node(3),
                    change: fields(FaultFields {
                        next_address: Some(Some(Ipv4Addr::new(127, 0, 21, 77))),
                        ..FaultFields::default()
                    }),
                },
            ),
            (
                r#"{"op": "fault", "node": 1, "reject_config": "machine.nodeLabels: invalid label (injected)"}"#,
                Request::Fault {
                    node: node(1),
                    change: fields(FaultFields {
                        reject_config: Some(Some(
                            "machine.nodeLabels: invalid label (injected)".into(),
                        )),
                        ..FaultFields::default()
                    }),
                },
            ),
            (
                r#"{"op": "fault", "node": 1, "firewalled": true}"#,
                Request::Fault {
                    node: node(1),
                    change: fields(FaultFields {
                        firewalled: Some(true),
                        ..FaultFields::default()
                    }),
                },
            ),
            (
                r#"{"op": "fault", "node": 0, "installer_fails": true}"#,
                Request::Fault {
                    node: node(0),
                    change: fields(FaultFields {
                        installer_fails: Some(true),
                        ..FaultFields::default()
                    }),
                },
            ),
            (
                r#"{"op":"fault","node":0,"unreachable":true}"#,
                Request::Fault {
                    node: node(0),
                    change: fields(FaultFields {
                        unreachable: Some(true),
                        ..FaultFields::default()
                    }),
                },
            ),
            (
                r#"{"op": "clear_faults", "node": 2}"#,
                Request::ClearFaults { node: node(2) },
            ),
            (
                r#"{"op": "power_on", "node": 0}"#,
                Request::PowerOn { node: node(0) },
            ),
            (
                r#"{"op": "reboot", "node": 1}"#,
                Request::Reboot { node: node(1) },
            ),
            (
                r#"{"op": "boot_media", "node": 0, "attached": true}"#,
                Request::BootMedia {
                    node: node(0),
                    attached: true,
                },
            ),
            (
                r#"{"op": "set_version", "node": 0, "version": "v1.12.4"}"#,
                Request::SetVersion {
                    node: node(0),
                    version: "v1.12.4".into(),
                },
            ),
            (
                r#"{"op":"set_version","node":"nope","version":"v1.13.6"}"#,
                Request::SetVersion {
                    node: NodeRef::Name("nope".into()),
                    version: "v1.13.6".into(),
                },
            ),
            (
                r#"{"op": "health_fail", "text": "node 127.0.99.9 is not ready (injected by the faults scenario)"}"#,
                Request::HealthFail {
                    text: Some(
                        "node 127.0.99.9 is not ready (injected by the faults scenario)".into(),
                    ),
                },
            ),
            (
                r#"{"op": "health_fail", "text": null}"#,
                Request::HealthFail { text: None },
            ),
            (
                r#"{"op": "workload", "namespace": "default", "name": "web", "replicas": 2, "min_available": 1}"#,
                Request::Workload {
                    namespace: "default".into(),
                    name: "web".into(),
                    replicas: 2,
                    min_available: Some(1),
                },
            ),
            (
                r#"{"op": "workload", "namespace": "default", "name": "web", "replicas": 2}"#,
                Request::Workload {
                    namespace: "default".into(),
                    name: "web".into(),
                    replicas: 2,
                    min_available: None,
                },
            ),
            // What the old CLI sent: an explicit null, and the defaults.
            (
                r#"{"op":"workload","name":"web","min_available":null}"#,
                Request::Workload {
                    namespace: "default".into(),
                    name: "web".into(),
                    replicas: 2,
                    min_available: None,
                },
            ),
            (
                r#"{"op":"downtime","ms":1500}"#,
                Request::Downtime { ms: 1500 },
            ),
            (r#"{"op": "stop"}"#, Request::Stop),
        ];
        for (line, want) in cases {
            assert_eq!(Request::parse(line), Ok(want), "{line}");
        }
    }

    #[test]
    fn bad_requests_are_refused_with_what_is_wrong() {
        let cases = [
            ("not json", "request is not JSON"),
            ("[1]", "expected a JSON object with \"op\""),
            (r#"{"node": 0}"#, "expected \"op\""),
            (r#"{"op": 3}"#, "expected \"op\": a string"),
            (
                r#"{"op": "explode"}"#,
                "unknown op \"explode\"; expected one of status, reboot, power_on, boot_media, fault, clear_faults, health_fail, set_version, downtime, kube, workload, stop",
            ),
            (
                r#"{"op": "reboot"}"#,
                "reboot: expected \"node\": an index or an address",
            ),
            (
                r#"{"op": "reboot", "node": true}"#,
                "expected \"node\": an index or an address",
            ),
            (
                r#"{"op": "reboot", "node": -1}"#,
                "node index must be a non-negative integer",
            ),
            (
                r#"{"op":"fault","node":0,"bogus":true}"#,
                "fault: unknown fault \"bogus\"; a fault request sets \"kind\"",
            ),
            (
                r#"{"op":"fault","node":0,"kind":"bogus"}"#,
                "unknown fault kind \"bogus\"; expected never_return, unreachable,",
            ),
            (
                r#"{"op":"fault","node":0,"never_return":null}"#,
                "never_return: invalid type: null, expected a boolean",
            ),
            (
                r#"{"op":"fault","node":0,"slow_ms":"fast"}"#,
                "slow_ms: invalid type: string \"fast\"",
            ),
            (
                r#"{"op":"fault","node":0,"next_address":"10.0.0.1"}"#,
                "next_address must be in 127.0.0.0/8",
            ),
            (
                r#"{"op":"fault","node":0,"upload_bytes_per_sec":0}"#,
                "upload_bytes_per_sec must be at least 1 (null clears it)",
            ),
            (
                r#"{"op":"fault","node":0,"next_address":"nowhere"}"#,
                "next_address: invalid IPv4 address syntax",
            ),
            (
                r#"{"op":"fault","node":0,"kind":"slow","never_return":true}"#,
                "not both",
            ),
            (
                r#"{"op":"fault","node":0,"delay_ms":5}"#,
                "\"delay_ms\" goes with \"kind\": \"slow\"",
            ),
            (
                r#"{"op":"boot_media","node":0}"#,
                "boot_media: expected \"attached\": a bool",
            ),
            (
                r#"{"op":"set_version","node":0}"#,
                "set_version: expected \"version\": a Talos version",
            ),
            (r#"{"op":"downtime"}"#, "downtime: expected \"ms\""),
            (
                r#"{"op":"workload","replicas":1}"#,
                "workload: expected \"name\"",
            ),
        ];
        for (line, want) in cases {
            let e = Request::parse(line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    fn sample_node() -> NodeInfo {
        NodeInfo {
            index: 0,
            role: "controlplane".into(),
            address: Ipv4Addr::new(127, 0, 21, 1),
            port: 50000,
            hostname: "talos-abc-def".into(),
            machine_type: None,
            maintenance: true,
            up: true,
            listening: true,
            version: "v1.13.6".into(),
            pending_version: None,
            schematic: None,
            boot_id: "b".into(),
            stage: "maintenance".into(),
            etcd_member: false,
            has_staged_config: false,
            installed: false,
            boot_media: true,
            unbootable: false,
            images: vec![],
            faults: Faults::default(),
        }
    }

    #[test]
    fn replies_on_the_wire() {
        assert_eq!(reply_line(&Ok(Reply::Done)), r#"{"ok":true}"#);
        assert_eq!(
            reply_line(&Ok(Reply::Stopping)),
            r#"{"ok":true,"stopping":true}"#
        );
        assert_eq!(
            reply_line(&Ok(Reply::Rebooted {
                actor_id: "a-1".into()
            })),
            r#"{"ok":true,"actor_id":"a-1"}"#
        );
        assert_eq!(
            reply_line(&Err("no node 9: the cluster has 4 nodes".into())),
            r#"{"ok":false,"error":"no node 9: the cluster has 4 nodes"}"#
        );

        let status = StatusReply {
            nodes: vec![sample_node()],
            health_fail: None,
            bootstrapped: false,
            etcd_members: 0,
            reboot_downtime_ms: 300,
            state_dir: None,
            pid: 7,
        };
        let line = reply_line(&Ok(Reply::Status(Box::new(status))));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["nodes"][0]["address"], "127.0.21.1");
        assert_eq!(v["nodes"][0]["role"], "controlplane");
        assert_eq!(v["nodes"][0]["faults"]["never_return"], false);
        assert_eq!(v["nodes"][0]["faults"]["slow_ms"], Value::Null);
        assert_eq!(v["reboot_downtime_ms"], 300);
        assert_eq!(v["state_dir"], Value::Null);
        let Ok(Reply::Status(back)) = Reply::parse(&Request::Status, &line) else {
            panic!("{line}");
        };
        assert_eq!(back.nodes[0].hostname, "talos-abc-def");
        assert_eq!(back.pid, 7);

        let kube = r#"{"ok":true,"nodes":[{"metadata":{"name":"n"}}],"pods":[],"log":[{"seq":1,"action":"cordon","node":"n","at_ms":5},{"seq":2,"action":"restart","node":"n","pod":"kubelet","at_ms":6}]}"#;
        let Ok(Reply::Kube(k)) = Reply::parse(&Request::Kube, kube) else {
            panic!("{kube}");
        };
        assert_eq!(k.nodes[0]["metadata"]["name"], "n");
        assert_eq!(k.log[0].pod, None);
        assert_eq!(k.log[1].pod.as_deref(), Some("kubelet"));
        // A log entry without a pod has no "pod" key, and `ok` comes last, as before.
        assert_eq!(
            reply_line(&Ok(Reply::Kube(k))),
            r#"{"nodes":[{"metadata":{"name":"n"}}],"pods":[],"log":[{"seq":1,"action":"cordon","node":"n","at_ms":5},{"seq":2,"action":"restart","node":"n","pod":"kubelet","at_ms":6}],"ok":true}"#
        );

        assert_eq!(
            Reply::parse(&Request::Status, r#"{"ok":false,"error":"no"}"#).unwrap_err(),
            ReplyError::Refused("no".into())
        );
        assert!(matches!(
            Reply::parse(&Request::Status, "garbage"),
            Err(ReplyError::Malformed(_))
        ));
    }
}
