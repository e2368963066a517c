//! Node events: the machine API's event messages as `Any`s, and the per-node buffer and
//! broadcast they are published to.

use std::time::{Instant, SystemTime};

use ferro_talos_proto::machine as pb;
use prost::Message;

use super::{Shared, Stage, State};

/// One buffered event (api.md §18).
#[derive(Clone, Debug)]
pub struct EventRec {
    pub id: String,
    pub actor_id: String,
    pub data: prost_types::Any,
    pub at: Instant,
}

fn any<M: Message>(name: &str, m: &M) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("talos/runtime/machine.{name}"),
        value: m.encode_to_vec(),
    }
}

pub fn sequence_event(seq: &str, action: pb::sequence_event::Action) -> prost_types::Any {
    any(
        "SequenceEvent",
        &pb::SequenceEvent {
            sequence: seq.into(),
            action: action as i32,
            error: None,
        },
    )
}

pub fn phase_event(phase: &str, action: pb::phase_event::Action) -> prost_types::Any {
    any(
        "PhaseEvent",
        &pb::PhaseEvent {
            phase: phase.into(),
            action: action as i32,
        },
    )
}

/// A sequence that failed or never started (upstream publishes it with action NOOP).
pub fn sequence_error_event(
    seq: &str,
    code: ferro_talos_proto::common::Code,
    message: &str,
) -> prost_types::Any {
    any(
        "SequenceEvent",
        &pb::SequenceEvent {
            sequence: seq.into(),
            action: pb::sequence_event::Action::Noop as i32,
            error: Some(ferro_talos_proto::common::Error {
                code: code as i32,
                message: message.into(),
                details: vec![],
            }),
        },
    )
}

pub fn task_event(task: &str, action: pb::task_event::Action) -> prost_types::Any {
    any(
        "TaskEvent",
        &pb::TaskEvent {
            task: task.into(),
            action: action as i32,
        },
    )
}

pub fn machine_status_event(stage: Stage, ready: bool) -> prost_types::Any {
    machine_status_event_with(stage, ready, &[])
}

/// A MachineStatus event with the unmet readiness conditions it lists.
pub fn machine_status_event_with(
    stage: Stage,
    ready: bool,
    unmet: &[crate::boot_stage::UnmetCondition],
) -> prost_types::Any {
    use pb::machine_status_event::machine_status::UnmetCondition;
    let status = pb::machine_status_event::MachineStatus {
        ready,
        unmet_conditions: unmet
            .iter()
            .map(|c| UnmetCondition {
                name: c.name.to_string(),
                reason: c.reason.clone(),
            })
            .collect(),
    };
    any(
        "MachineStatusEvent",
        &pb::MachineStatusEvent {
            stage: stage.proto() as i32,
            status: Some(status),
        },
    )
}

pub fn service_event(
    service: &str,
    action: pb::service_state_event::Action,
    msg: &str,
) -> prost_types::Any {
    any(
        "ServiceStateEvent",
        &pb::ServiceStateEvent {
            service: service.into(),
            action: action as i32,
            message: msg.into(),
            health: None,
        },
    )
}

impl State {
    /// Sortable 20-character id (like Talos's xids: time first, then a counter).
    fn next_event_id(&mut self) -> String {
        self.event_counter += 1;
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        format!(
            "{:012x}{:08x}",
            ms & 0xffff_ffff_ffff,
            self.event_counter & 0xffff_ffff
        )
    }
}

impl Shared {
    pub fn publish(&self, st: &mut State, idx: usize, actor_id: &str, data: prost_types::Any) {
        let id = st.next_event_id();
        let rec = EventRec {
            id,
            actor_id: actor_id.to_string(),
            data,
            at: Instant::now(),
        };
        if let Some(n) = st.nodes.get_mut(idx) {
            n.events.push(rec.clone());
            if n.events.len() > 1000 {
                n.events.remove(0);
            }
        }
        if let Some(tx) = self.events.get(idx) {
            let _ = tx.send(rec);
        }
    }

    /// Publishes node `idx`'s MachineStatus as it stands: its stage and unmet conditions.
    pub fn publish_stage(&self, st: &mut State, idx: usize) {
        let unmet = crate::boot_stage::unmet_conditions(st, idx);
        let stage = st.nodes[idx].stage;
        let ev = machine_status_event_with(stage, unmet.is_empty(), &unmet);
        st.nodes[idx].published_status = Some((stage, unmet));
        self.publish(st, idx, "", ev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot_stage::UnmetCondition;
    use crate::state::shared::tests::cluster;

    /// The message inside `any`, after checking it is a `machine.<name>`.
    fn decoded<M: Message + Default>(any: &prost_types::Any, name: &str) -> M {
        assert_eq!(any.type_url, format!("talos/runtime/machine.{name}"));
        M::decode(any.value.as_slice()).expect("the value decodes as its type")
    }

    #[test]
    fn a_sequence_event_names_its_sequence_and_action() {
        use pb::sequence_event::Action as A;
        let e: pb::SequenceEvent = decoded(&sequence_event("reboot", A::Stop), "SequenceEvent");
        assert_eq!(e.sequence, "reboot");
        assert_eq!(e.action, A::Stop as i32);
        assert_eq!(e.error, None);
    }

    #[test]
    fn a_failed_sequence_is_a_noop_with_its_error() {
        use ferro_talos_proto::common::Code;
        let any = sequence_error_event("upgrade", Code::Locked, "failed to acquire upgrade lock");
        let e: pb::SequenceEvent = decoded(&any, "SequenceEvent");
        assert_eq!(e.sequence, "upgrade");
        assert_eq!(e.action, pb::sequence_event::Action::Noop as i32);
        let err = e.error.expect("an error");
        assert_eq!(err.code, Code::Locked as i32);
        assert_eq!(err.message, "failed to acquire upgrade lock");
        assert!(err.details.is_empty());
    }

    #[test]
    fn phase_and_task_events_carry_their_name_and_action() {
        let p: pb::PhaseEvent = decoded(
            &phase_event("stopEverything", pb::phase_event::Action::Start),
            "PhaseEvent",
        );
        assert_eq!(p.phase, "stopEverything");
        assert_eq!(p.action, pb::phase_event::Action::Start as i32);
        let t: pb::TaskEvent = decoded(
            &task_event("stopAllServices", pb::task_event::Action::Stop),
            "TaskEvent",
        );
        assert_eq!(t.task, "stopAllServices");
        assert_eq!(t.action, pb::task_event::Action::Stop as i32);
    }

    #[test]
    fn a_machine_status_event_carries_stage_readiness_and_unmet_conditions() {
        use pb::machine_status_event::MachineStage as S;
        let e: pb::MachineStatusEvent = decoded(
            &machine_status_event(Stage::Running, true),
            "MachineStatusEvent",
        );
        assert_eq!(e.stage, S::Running as i32);
        let status = e.status.expect("a status");
        assert!(status.ready);
        assert!(status.unmet_conditions.is_empty());

        let unmet = [
            UnmetCondition {
                name: "etcd",
                reason: "service not running".into(),
            },
            UnmetCondition {
                name: "nodeReady",
                reason: "node not ready".into(),
            },
        ];
        let e: pb::MachineStatusEvent = decoded(
            &machine_status_event_with(Stage::Booting, false, &unmet),
            "MachineStatusEvent",
        );
        assert_eq!(e.stage, S::Booting as i32);
        let status = e.status.expect("a status");
        assert!(!status.ready);
        let listed: Vec<(&str, &str)> = status
            .unmet_conditions
            .iter()
            .map(|c| (c.name.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("etcd", "service not running"),
                ("nodeReady", "node not ready")
            ]
        );
    }

    #[test]
    fn a_service_event_carries_service_action_and_message_without_health() {
        use pb::service_state_event::Action as S;
        let e: pb::ServiceStateEvent = decoded(
            &service_event("etcd", S::Running, "Health check successful"),
            "ServiceStateEvent",
        );
        assert_eq!(e.service, "etcd");
        assert_eq!(e.action, S::Running as i32);
        assert_eq!(e.message, "Health check successful");
        assert_eq!(e.health, None);
    }

    #[test]
    fn event_ids_are_twenty_hex_characters_in_order() {
        let mut st = crate::state::shared::tests::state(1, 0);
        let ids: Vec<String> = (0..50).map(|_| st.next_event_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 20, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert!(ids[0].ends_with("00000001"), "{}", ids[0]);
    }

    #[test]
    fn publish_buffers_the_last_thousand_events_of_a_node() {
        let shared = cluster(1, 0);
        let mut st = shared.lock();
        for i in 0..1005 {
            let ev = task_event(&format!("t{i}"), pb::task_event::Action::Start);
            shared.publish(&mut st, 0, "someone", ev);
        }
        let events = &st.nodes[0].events;
        assert_eq!(events.len(), 1000);
        let first: pb::TaskEvent = decoded(&events[0].data, "TaskEvent");
        let last: pb::TaskEvent = decoded(&events[999].data, "TaskEvent");
        assert_eq!((first.task.as_str(), last.task.as_str()), ("t5", "t1004"));
        assert!(events.iter().all(|e| e.actor_id == "someone"));
        assert!(events.windows(2).all(|w| w[0].id < w[1].id));
        // A node that does not exist has nothing to buffer; publishing to it is no error.
        shared.publish(
            &mut st,
            7,
            "",
            task_event("x", pb::task_event::Action::Start),
        );
    }

    #[test]
    fn publish_broadcasts_what_it_buffers_to_that_node_only() {
        let shared = cluster(2, 0);
        let mut rx0 = shared.events[0].subscribe();
        let mut rx1 = shared.events[1].subscribe();
        let mut st = shared.lock();
        shared.publish(
            &mut st,
            1,
            "a",
            phase_event("p", pb::phase_event::Action::Stop),
        );
        let rec = rx1.try_recv().expect("node 1's subscriber hears it");
        let kept = st.nodes[1].events.last().unwrap();
        assert_eq!(
            (rec.id.as_str(), rec.actor_id.as_str()),
            (kept.id.as_str(), "a")
        );
        assert_eq!(rec.data, kept.data);
        assert!(rx0.try_recv().is_err(), "node 0 heard nothing");
    }

    #[test]
    fn publish_stage_says_and_remembers_the_stage_and_unmet_conditions() {
        let shared = cluster(1, 0);
        let mut st = shared.lock();
        st.nodes[0].published_status = None;
        shared.publish_stage(&mut st, 0);
        let n = &st.nodes[0];
        let (stage, unmet) = n.published_status.as_ref().expect("remembered");
        assert_eq!(*stage, Stage::Maintenance);
        let e: pb::MachineStatusEvent =
            decoded(&n.events.last().unwrap().data, "MachineStatusEvent");
        assert_eq!(e.stage, Stage::Maintenance.proto() as i32);
        let status = e.status.unwrap();
        assert_eq!(status.ready, unmet.is_empty());
        let names: Vec<&str> = status
            .unmet_conditions
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let remembered: Vec<&str> = unmet.iter().map(|c| c.name).collect();
        assert_eq!(names, remembered);
    }
}
