//! The guard before a control plane's OS upgrade: etcd must keep its quorum while the node reboots.

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::TalosClient;

use super::report::Report;
use crate::connection::Target;

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
        let name = if m.hostname.is_empty() {
            format!("{:016x}", m.id)
        } else {
            format!("{} ({:016x})", m.hostname, m.id)
        };
        if m.hostname.is_empty() {
            return Err(refuse(format!(
                "etcd member {name} is not started; all members must be running to upgrade a control plane"
            )));
        }
        let Some(host) = member_host(m) else {
            continue;
        };
        let status = client.with_node(&host).etcd_status().await;
        let problem = match status {
            Ok(s) if s.errors.is_empty() => continue,
            Ok(s) => s.errors.join("; "),
            Err(e) => e.message,
        };
        return Err(refuse(format!(
            "etcd member {name} on {host} is not healthy ({problem}); all members must be healthy to \
             upgrade a control plane: fix it first (talosctl -n {host} service etcd)"
        )));
    }
    Ok(())
}

/// The address of an etcd member, from its first peer or client URL.
fn member_host(m: &ferro_talos_client::proto::machine::EtcdMember) -> Option<String> {
    let url = m.peer_urls.first().or(m.client_urls.first())?;
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}
