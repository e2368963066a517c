//! The guard before a control plane's OS upgrade: etcd must keep its quorum while the node reboots.

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::TalosClient;

use super::report::Report;
use crate::shared::connection::Target;
use crate::shared::etcd_members;

/// Refuses to take a control plane down for an OS upgrade when etcd could lose quorum: exactly two
/// members (one down leaves one of two), or a member that is not started or not healthy. These are
/// upstream's checks (`internal/pkg/etcd/etcd.go` ValidateForUpgrade at v1.13.9), made by the
/// legacy Upgrade on the server; the LifecycleService path (`internal/app/lifecycle/lifecycle.go`)
/// that talosctl uses since 1.13 has none, so the module makes them itself, before anything moves.
pub(super) async fn etcd_quorum_guard(
    target: &Target,
    client: &TalosClient,
    report: &Report,
) -> Result<(), ModuleError> {
    let refuse = |why: String| {
        report.fail(format!(
            "{}: not upgrading this control plane: {why}; nothing was changed",
            target.node
        ))
    };
    let members = client
        .etcd_member_list()
        .await
        .map_err(|e| refuse(format!("etcd's members could not be read ({})", e.message)))?;
    if members.len() == 2 {
        return Err(refuse(
            "etcd has 2 members, and with one of them rebooting the other alone has no quorum; \
             add a third control plane first (or remove one)"
                .into(),
        ));
    }
    for m in &members {
        let name = etcd_members::label(m);
        if m.hostname.is_empty() {
            return Err(refuse(format!(
                "etcd member {name} is not started; all members must be running to upgrade a control plane"
            )));
        }
        let Some(host) = etcd_members::host(m) else {
            continue;
        };
        if let Err(problem) = etcd_members::health(client, m).await {
            return Err(refuse(format!(
                "etcd member {name} on {host} is not healthy ({problem}); all members must be healthy to \
                 upgrade a control plane: fix it first (talosctl -n {host} service etcd)"
            )));
        }
    }
    Ok(())
}
