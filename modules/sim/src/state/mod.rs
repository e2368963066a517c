//! The simulated cluster's state: nodes, their configs, versions, boots, etcd and faults.
//!
//! All state sits behind one mutex; nothing awaits while holding it. Each node's listener task
//! watches a [`RunState`] and (re)binds or drops its socket when it changes.
//!
//! By concern: `model.rs` (the state and its nodes), `faults.rs`, `events.rs` (event messages
//! and their publishing), `etcd_membership.rs`, `persistence.rs` (the saving lock guard and
//! the restore), `lifecycle.rs` (boots, reboots, power-off), `trustd.rs` (signing workers'
//! certificates), `shared.rs` (the handle and a new cluster's layout), `ids.rs`.

mod etcd_membership;
mod events;
mod faults;
mod ids;
mod lifecycle;
mod model;
mod persistence;
mod shared;
mod trustd;

pub use etcd_membership::{EtcdMember, EtcdRefusal};
pub use events::{
    EventRec, machine_status_event, phase_event, sequence_error_event, sequence_event,
    service_event, task_event,
};
pub use faults::Faults;
use ids::default_hostname;
pub use ids::new_uuid;
pub use model::{Node, RunState, Stage, State, services_for};
pub use shared::Shared;
pub use trustd::{refresh_unsigned_tls, trustd_key};
