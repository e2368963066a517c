//! `talos_etcd_member`: take a member out of etcd, the way that keeps etcd whole.
//!
//! Upstream (tag v1.13.9 of siderolabs/talos, `internal/app/machined/internal/server/v1alpha1/
//! v1alpha1_server.go` and `internal/pkg/etcd/etcd.go`): EtcdLeaveCluster, called on the leaving
//! node, removes its own member, stops its etcd and wipes its data, and is what talosctl says to
//! prefer (`talosctl etcd leave`); EtcdRemoveMemberByID, called on any control plane, removes a
//! member by id and is meant for a member whose node is broken or gone (`talosctl etcd
//! remove-member`). Neither checks quorum beyond etcd's own strict reconfiguration checks. This
//! module picks: a healthy member leaves from its own node, a member that is down is removed
//! through `node`; before either it checks that etcd keeps a quorum of healthy members
//! (`etcd_members::removal_verdict`), in check mode too. A node that left joins again at its next
//! boot, so the result warns to reset it.

use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::proto::machine::EtcdMember;
use serde_json::{Value, json};

use crate::shared::connection::{self, with_connection_options};
use crate::shared::etcd_members;
use crate::shared::failure::{OrFail, client_failure};
use crate::shared::node_power;

mod args;
pub use args::Args;

/// How a member goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// EtcdLeaveCluster on the member's own node: it stops etcd and wipes its data.
    Leave,
    /// EtcdRemoveMemberByID through `node`: for a member whose node does not serve.
    RemoveById,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Leave => "leave",
            Method::RemoveById => "remove_by_id",
        }
    }
}

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("member").required())
        .option(Opt::str("state").choices(&["absent"]).default("absent"))
        .option(Opt::int("timeout").default(LEAVE_TIMEOUT_SECS))
}

/// The leave's default deadline. Talos's EtcdLeaveCluster may take 8 minutes and then some: up
/// to 3 minutes waiting for the node's own member id, up to 5 retrying the removal while etcd calls
/// the cluster unhealthy, then up to 10 s stopping etcd (`internal/pkg/etcd/local.go`
/// GetLocalMemberID, `internal/pkg/etcd/etcd.go` LeaveCluster,
/// `internal/app/machined/pkg/system/runner/runner.go` GracefulShutdownTimeout @ v1.13.9 and
/// v1.14.1). Ten minutes covers that.
const LEAVE_TIMEOUT_SECS: i64 = 600;

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        member: wanted,
        timeout,
    } = args;
    let (creds, _) = connection::require_credentials(ctx, &connection)?;
    let opts = connection.connect_options(Duration::from_secs(30));
    connection::block_on(async {
        let node = target.node.clone();
        let client = node_power::configured_client(&target, &creds, &opts, "etcd's API").await?;
        let members = client.etcd_member_list().await.or_fail()?;
        let result = ModuleResult::unchanged().with("node", node.clone());
        let Some(found) = find(&members, &wanted).cloned() else {
            let names: Vec<String> = members.iter().map(etcd_members::label).collect();
            return Ok(result.with("members", members_json(&members)).msg(format!(
                "{wanted} is not an etcd member (asked {node}: {})",
                names.join(", ")
            )));
        };
        let checked = etcd_members::check_all(&client, members).await;
        let name = etcd_members::label(&found);
        etcd_members::removal_verdict(&checked, found.id).map_err(|why| {
            ModuleError::new(format!(
                "not removing etcd member {name}: {why}; nothing was changed: bring the unhealthy \
                 members back first (talos_health names them), or, to take down the last member of \
                 a cluster you are dismantling, reset its node with graceful: false"
            ))
            .with("node", node.clone())
        })?;
        let healthy = checked
            .iter()
            .find(|c| c.member.id == found.id)
            .is_some_and(|c| c.health.is_ok());
        let method = if healthy {
            Method::Leave
        } else {
            Method::RemoveById
        };
        let host = etcd_members::host(&found).unwrap_or_default();
        let mut result = result
            .with("member", member_json(&found))
            .with("method", method.name());
        result.changed = true;
        let how = match method {
            Method::Leave => format!("{host} leaves etcd (its etcd stops and its data is wiped)"),
            Method::RemoveById => format!(
                "removed by id through {node} ({} is not healthy: {})",
                host,
                checked
                    .iter()
                    .find(|c| c.member.id == found.id)
                    .and_then(|c| c.health.as_ref().err().cloned())
                    .unwrap_or_default()
            ),
        };
        if ctx.check_mode {
            return Ok(result.msg(format!("would remove etcd member {name}: {how}")));
        }
        match method {
            Method::Leave => {
                let member_node = connection.target(&host, "member")?;
                let member_client = connection::connect(&member_node, &creds, opts.clone())
                    .await
                    .or_fail()?;
                member_client
                    .etcd_leave_cluster(timeout)
                    .await
                    .map_err(|e| leave_failed(&host, &node, timeout, e))?;
                ctx.warn(format!(
                    "{host} left etcd; as a control plane it joins again at its next boot: reset it \
                     (ferro.talos.talos_reset) to take it out of the cluster"
                ));
            }
            Method::RemoveById => {
                client.etcd_remove_member_by_id(found.id).await.or_fail()?;
            }
        }
        let after = client.etcd_member_list().await.or_fail()?;
        if after.iter().any(|m| m.id == found.id) {
            return Err(ModuleError::new(format!(
                "etcd member {name} was asked to go, but {node} still lists it; run the task again, \
                 or see `talosctl -n {node} etcd members`"
            ))
            .with("node", node.clone())
            .changed(true));
        }
        Ok(result
            .with("members", members_json(&after))
            .msg(format!("removed etcd member {name}: {how}")))
    })?
}

/// A failed leave, said for the user; a deadline that passed is the task's `timeout`.
fn leave_failed(
    host: &str,
    node: &str,
    timeout: Duration,
    e: ferro_talos_client::ClientError,
) -> ModuleError {
    if e.kind != ferro_talos_client::ErrorKind::Timeout {
        return client_failure(e.during(format!("{host} leave etcd")));
    }
    ModuleError::new(format!(
        "node {host}: leaving etcd did not finish within the task's timeout of {}s ({}); Talos \
         waits up to 3 minutes for the member's id and retries the removal for 5 minutes while \
         etcd calls the cluster unhealthy: see whether {node} still lists the member (`talosctl -n \
         {node} etcd members`), then run the task again, with a larger timeout if the cluster is \
         slow",
        timeout.as_secs(),
        e.message
    ))
    .with("node", host.to_string())
    .changed(true)
}

/// The member `wanted` names: its hostname, its node's address, or its id in hex (with or
/// without leading zeros or `0x`, as `talosctl etcd members` prints it).
fn find<'a>(members: &'a [EtcdMember], wanted: &str) -> Option<&'a EtcdMember> {
    members
        .iter()
        .find(|m| m.hostname == wanted)
        .or_else(|| {
            members
                .iter()
                .find(|m| etcd_members::host(m).as_deref() == Some(wanted))
        })
        .or_else(|| {
            let id = u64::from_str_radix(wanted.trim_start_matches("0x"), 16).ok()?;
            members.iter().find(|m| m.id == id)
        })
}

fn member_json(m: &EtcdMember) -> Value {
    json!({
        "id": etcd_members::id_hex(m.id),
        "hostname": m.hostname,
        "address": etcd_members::host(m),
        "is_learner": m.is_learner,
    })
}

fn members_json(members: &[EtcdMember]) -> Value {
    Value::Array(members.iter().map(member_json).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, host: &str, ip: &str) -> EtcdMember {
        EtcdMember {
            id,
            hostname: host.into(),
            peer_urls: vec![format!("https://{ip}:2380")],
            client_urls: vec![],
            is_learner: false,
        }
    }

    #[test]
    fn a_member_is_named_by_hostname_address_or_hex_id() {
        let ms = [
            member(0x1f, "cp1", "10.0.0.2"),
            member(0xabcdef, "cp2", "10.0.0.3"),
        ];
        assert_eq!(find(&ms, "cp2").map(|m| m.id), Some(0xabcdef));
        assert_eq!(find(&ms, "10.0.0.2").map(|m| m.id), Some(0x1f));
        assert_eq!(find(&ms, "0000000000abcdef").map(|m| m.id), Some(0xabcdef));
        assert_eq!(find(&ms, "0x1f").map(|m| m.id), Some(0x1f));
        assert!(find(&ms, "cp3").is_none());
        assert!(find(&ms, "10.0.0.9").is_none());
    }
}
