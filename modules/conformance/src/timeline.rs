//! What a node was seen doing over time, for the maintenance-mode run (`maintenance.rs`): each
//! distinct state once, with when it was first seen relative to the apply, as a time bucket so two
//! runs (a real machine's minutes, the simulator's seconds) still line up state by state.

use std::time::{Duration, Instant};

use ferro_talos_client::proto::resource::runtime::MachineStage;
use serde_json::{Value, json};

/// A long watch of a flapping node must not grow the report without bound.
const MAX_ENTRIES: usize = 200;

/// One observation of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// MachineStatus read with mutual TLS, and the etcd service's state beside it.
    Status {
        /// Talos's own name of the stage (`booting`, `running`, ...).
        stage: &'static str,
        ready: bool,
        /// The names of the unmet conditions, in the node's order.
        unmet: Vec<String>,
        /// The etcd service as ServiceList has it (`Preparing health unknown`), `absent`, or the
        /// code of a failed ServiceList.
        etcd: String,
    },
    /// The node answers without a client certificate: maintenance mode.
    Maintenance,
    /// Nothing answered (down, rebooting).
    Unreachable,
    /// A call failed: the gRPC code (or the client's kind in parentheses) and the normalised text.
    Failed { code: String, message: String },
}

impl Seen {
    /// The observation on one line: what the report's `ids` list and the readable summary show.
    pub fn summary(&self) -> String {
        match self {
            Seen::Status {
                stage,
                ready,
                unmet,
                etcd,
            } => {
                let ready = if *ready { "ready" } else { "not ready" };
                let unmet = if unmet.is_empty() {
                    String::new()
                } else {
                    format!(", unmet: {}", unmet.join(", "))
                };
                format!("{stage}, {ready}{unmet}; etcd {etcd}")
            }
            Seen::Maintenance => "maintenance mode".to_string(),
            Seen::Unreachable => "unreachable".to_string(),
            Seen::Failed { code, message } if message.is_empty() => code.clone(),
            Seen::Failed { code, message } => format!("{code}: {message}"),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Seen::Status {
                stage,
                ready,
                unmet,
                etcd,
            } => json!({
                "stage": stage,
                "ready": ready,
                "unmet_conditions": unmet,
                "etcd_service": etcd,
            }),
            Seen::Maintenance => json!({"mode": "maintenance"}),
            Seen::Unreachable => json!({"mode": "unreachable"}),
            Seen::Failed { code, message } => json!({"code": code, "message": message}),
        }
    }
}

/// Talos's names of the stages (`pkg/machinery/resources/runtime/machinestage_enumer.go` @
/// v1.14.1), as `talosctl get machinestatus` prints them.
pub fn stage_name(stage: MachineStage) -> &'static str {
    match stage {
        MachineStage::Unknown => "unknown",
        MachineStage::Booting => "booting",
        MachineStage::Installing => "installing",
        MachineStage::Maintenance => "maintenance",
        MachineStage::Running => "running",
        MachineStage::Rebooting => "rebooting",
        MachineStage::ShuttingDown => "shutting down",
        MachineStage::Resetting => "resetting",
        MachineStage::Upgrading => "upgrading",
    }
}

/// The distinct states of one watch, in the order they were first seen.
pub struct Timeline {
    /// The apply: every time of every timeline counts from it.
    origin: Instant,
    entries: Vec<(Duration, Seen)>,
    /// The latest observation (the last entry, unless entries were dropped).
    current: Option<Seen>,
    /// When the latest observation was seen first: how long the node has stayed in it.
    since: Instant,
    /// Entries dropped past `MAX_ENTRIES`.
    dropped: usize,
}

impl Timeline {
    pub fn new(origin: Instant) -> Timeline {
        Timeline {
            origin,
            entries: Vec::new(),
            current: None,
            since: Instant::now(),
            dropped: 0,
        }
    }

    /// Records `seen` when it differs from the last observation; whether it did.
    pub fn push(&mut self, seen: Seen) -> bool {
        if self.current.as_ref() == Some(&seen) {
            return false;
        }
        self.since = Instant::now();
        self.current = Some(seen.clone());
        if self.entries.len() >= MAX_ENTRIES {
            self.dropped += 1;
            return true;
        }
        self.entries.push((self.origin.elapsed(), seen));
        true
    }

    /// The latest observation as a progress line, with the seconds since the apply.
    pub fn progress(&self) -> String {
        let state = self.last().map(Seen::summary).unwrap_or_default();
        format!("+{}s {state}", self.origin.elapsed().as_secs())
    }

    /// The latest observation.
    pub fn last(&self) -> Option<&Seen> {
        self.current.as_ref()
    }

    /// How long the node has been in its last state.
    pub fn steady_for(&self) -> Duration {
        self.since.elapsed()
    }

    /// Each state on one line, in order.
    pub fn summaries(&self) -> Vec<String> {
        let mut out: Vec<String> = self.entries.iter().map(|(_, s)| s.summary()).collect();
        if self.dropped > 0 {
            out.push(format!("({} more changes not kept)", self.dropped));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let mut out: Vec<Value> = self
            .entries
            .iter()
            .map(|(at, seen)| {
                let mut entry = json!({"at": bucket(*at)});
                if let (Some(entry), Value::Object(fields)) =
                    (entry.as_object_mut(), seen.to_json())
                {
                    entry.extend(fields);
                }
                entry
            })
            .collect();
        if self.dropped > 0 {
            out.push(json!({"dropped": self.dropped}));
        }
        Value::Array(out)
    }
}

/// A time since the apply as a bucket: the order of magnitude is the evidence, the exact
/// seconds are the machine's (its disk, its network, the installer's download).
pub fn bucket(d: Duration) -> &'static str {
    const BUCKETS: [(u64, &str); 8] = [
        (1, "<1s"),
        (3, "1-3s"),
        (10, "3-10s"),
        (30, "10-30s"),
        (60, "30s-1m"),
        (180, "1-3m"),
        (600, "3-10m"),
        (1800, "10-30m"),
    ];
    BUCKETS
        .iter()
        .find(|(limit, _)| d < Duration::from_secs(*limit))
        .map_or(">30m", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booting(etcd: &str) -> Seen {
        Seen::Status {
            stage: "booting",
            ready: false,
            unmet: vec!["nodeReady".into()],
            etcd: etcd.into(),
        }
    }

    #[test]
    fn only_changes_are_kept_in_order() {
        let mut t = Timeline::new(Instant::now());
        t.push(Seen::Unreachable);
        t.push(Seen::Unreachable);
        t.push(booting("Preparing health unknown"));
        t.push(booting("Preparing health unknown"));
        t.push(Seen::Failed {
            code: "Unavailable".into(),
            message: String::new(),
        });
        assert_eq!(
            t.summaries(),
            vec![
                "unreachable",
                "booting, not ready, unmet: nodeReady; etcd Preparing health unknown",
                "Unavailable",
            ]
        );
        let json = t.to_json();
        assert_eq!(json[0], json!({"at": "<1s", "mode": "unreachable"}));
        assert_eq!(json[1]["stage"], "booting");
        assert_eq!(json[1]["unmet_conditions"], json!(["nodeReady"]));
        assert_eq!(
            json[2],
            json!({"at": "<1s", "code": "Unavailable", "message": ""})
        );
    }

    #[test]
    fn a_flapping_node_is_cut_off() {
        let mut t = Timeline::new(Instant::now());
        for i in 0..MAX_ENTRIES + 5 {
            t.push(if i % 2 == 0 {
                Seen::Unreachable
            } else {
                Seen::Maintenance
            });
        }
        assert_eq!(t.summaries().len(), MAX_ENTRIES + 1);
        assert_eq!(t.summaries().last().unwrap(), "(5 more changes not kept)");
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket(Duration::from_millis(999)), "<1s");
        assert_eq!(bucket(Duration::from_secs(1)), "1-3s");
        assert_eq!(bucket(Duration::from_secs(45)), "30s-1m");
        assert_eq!(bucket(Duration::from_secs(200)), "3-10m");
        assert_eq!(bucket(Duration::from_secs(4000)), ">30m");
    }
}
