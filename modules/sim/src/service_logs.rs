//! What a node's service logs hold: the service state changes it published since it booted, in
//! the words machined logs them (`[talos] service[etcd](Running): Health check successful`). The
//! machined log has every service's; a service's own log has its own. Upstream keeps these in
//! memory (`internal/app/machined/pkg/system/log`), so a reboot empties them.

use ferro_talos_proto::machine::{ServiceStateEvent, service_state_event::Action};
use prost::Message;

use crate::state::Node;

/// The log lines of service `id` on node `n`, oldest first.
pub fn lines(n: &Node, id: &str) -> Vec<String> {
    n.events
        .iter()
        .filter(|e| e.data.type_url.ends_with("ServiceStateEvent"))
        .filter_map(|e| ServiceStateEvent::decode(e.data.value.as_slice()).ok())
        .filter(|ev| id == "machined" || ev.service == id)
        .map(|ev| {
            let state = Action::try_from(ev.action)
                .map(|a| title(a.as_str_name()))
                .unwrap_or_default();
            format!("[talos] service[{}]({state}): {}", ev.service, ev.message)
        })
        .collect()
}

/// `RUNNING` as machined prints a state: `Running`.
fn title(upper: &str) -> String {
    let lower = upper.to_ascii_lowercase();
    let mut chars = lower.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}
