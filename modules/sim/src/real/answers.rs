//! What the etcd APIs of the Talos API answer with the real backend: etcd's own answers and
//! refusals, wrapped as Talos wraps them (`EtcdMemberList`, `EtcdRemoveMemberByID`,
//! `EtcdLeaveCluster`, `EtcdStatus`, `EtcdSnapshot` in
//! `internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go` and `LeaveCluster`,
//! `RemoveMemberByMemberID` in `internal/pkg/etcd/etcd.go` @ v1.14.1).

use std::net::Ipv4Addr;

use ferro_talos_proto::machine::{EtcdMember, EtcdMemberStatus};
use tonic::Status;

use super::RealEtcd;
use super::gateway::{Gateway, GatewayError, Member};
use crate::state::Shared;

/// Runs a blocking call to etcd without stalling the runtime's other tasks (where the runtime
/// has other workers to run them).
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// What Talos says when its etcd client reaches nothing on the node.
fn refused() -> Status {
    crate::services::machine::etcd_refused("127.0.0.1")
}

/// The node's own address and, when `local_only` is false, the other control planes' whose
/// etcd runs: where Talos's client (`NewLocalClient`, or `NewClientFromControlPlaneIPs`) asks.
fn endpoints(shared: &Shared, real: &RealEtcd, idx: usize, local_only: bool) -> Vec<Ipv4Addr> {
    let st = shared.lock();
    let mut ips = Vec::new();
    if real.running(idx) {
        ips.push(st.nodes[idx].address);
    }
    if !local_only {
        ips.extend(
            st.nodes
                .iter()
                .filter(|n| n.index != idx && real.running(n.index))
                .map(|n| n.address),
        );
    }
    ips
}

fn talos_member(m: &Member) -> EtcdMember {
    EtcdMember {
        id: m.id,
        hostname: m.name.clone(),
        peer_urls: m.peer_urls.clone(),
        client_urls: m.client_urls.clone(),
        is_learner: m.is_learner,
    }
}

/// `EtcdMemberList`: Ok(None) while no member can be reached (Talos's client then waits for one
/// until the caller's deadline); etcd's refusal (`etcdserver: no leader` without a quorum) is
/// Unknown with etcd's text, as Talos passes the client's error on.
pub fn member_list(
    shared: &Shared,
    real: &RealEtcd,
    idx: usize,
    local_only: bool,
) -> Result<Option<Vec<EtcdMember>>, Status> {
    let ips = endpoints(shared, real, idx, local_only);
    match blocking(|| first_answer(&ips, Gateway::member_list)) {
        Ok(members) => Ok(Some(members.iter().map(talos_member).collect())),
        Err(GatewayError::Unreachable(_)) => Ok(None),
        Err(GatewayError::Refused { message, .. }) => Err(Status::unknown(message)),
    }
}

/// Tries each endpoint in turn, as clientv3 does, until one answers (a refusal is an answer),
/// but a learner's refusal of what it does not serve is asked again of the next endpoint
/// (`isSafeRetry` in client/v3 `retry_interceptor.go` @ v3.7.1).
pub(super) fn first_answer<T>(
    ips: &[Ipv4Addr],
    call: impl Fn(&Gateway) -> Result<T, GatewayError>,
) -> Result<T, GatewayError> {
    const LEARNER_REFUSAL: &str = "etcdserver: rpc not supported for learner";
    let mut last = GatewayError::Unreachable("no etcd member to ask".into());
    for &ip in ips {
        match call(&RealEtcd::gateway(ip)) {
            Err(GatewayError::Unreachable(why)) => last = GatewayError::Unreachable(why),
            Err(refused @ GatewayError::Refused { .. })
                if refused.to_string() == LEARNER_REFUSAL =>
            {
                last = refused;
            }
            other => return other,
        }
    }
    Err(last)
}

/// The node whose member has this id, from etcd's list.
fn node_of_member(shared: &Shared, members: &[Member], id: u64) -> Option<usize> {
    let m = members.iter().find(|m| m.id == id)?;
    let st = shared.lock();
    st.nodes
        .iter()
        .find(|n| {
            (!m.name.is_empty() && n.hostname == m.name)
                || m.peer_urls.contains(&super::process::peer_url(n.address))
        })
        .map(|n| n.index)
}

/// `EtcdRemoveMemberByID`: etcd's own checks decide; NotFound for a member etcd does not know,
/// Unknown for every other refusal.
pub fn remove_member(shared: &Shared, real: &RealEtcd, idx: usize, id: u64) -> Result<(), Status> {
    let ips = endpoints(shared, real, idx, false);
    let outcome = blocking(|| {
        let members = first_answer(&ips, Gateway::member_list)?;
        first_answer(&ips, |gw| gw.member_remove(id)).map(|()| members)
    });
    match outcome {
        Ok(members) => {
            if let Some(node) = node_of_member(shared, &members, id) {
                shared.lock().leave_etcd(node);
            }
            Ok(())
        }
        Err(GatewayError::Refused { code: 5, message }) => Err(Status::not_found(format!(
            "failed to remove member {id}: {message}"
        ))),
        Err(GatewayError::Refused { message, .. }) => Err(Status::unknown(format!(
            "failed to remove member: failed to remove member {id}: {message}"
        ))),
        Err(GatewayError::Unreachable(_)) => Err(Status::unknown(
            "failed to remove member: context deadline exceeded",
        )),
    }
}

/// How long a leave asks again while etcd answers "unhealthy cluster" or "server stopped".
/// Upstream retries for 5 minutes, every 10 s; etcd says "unhealthy" of a healthy cluster while a
/// member's peers have been connected for less than its `HealthInterval` (5 s, etcd
/// `server/etcdserver/server.go`), as right after a join or a reboot, which this covers.
const LEAVE_RETRY: std::time::Duration = std::time::Duration::from_secs(15);

/// `LeaveCluster` (`internal/pkg/etcd/etcd.go` @ v1.14.1): the node's own member id from its
/// own etcd, then its removal, asked again while etcd refuses as unhealthy or stopping; a member
/// already gone is a success. Err is the text after Talos's "failed to leave cluster: ".
pub fn leave(shared: &Shared, real: &RealEtcd, idx: usize) -> Result<(), String> {
    let own = endpoints(shared, real, idx, true);
    let ips = endpoints(shared, real, idx, false);
    let outcome = blocking(|| {
        let id = first_answer(&own, Gateway::status)
            .map_err(|_| {
                "failed to get local etcd member ID: context deadline exceeded".to_owned()
            })?
            .member_id;
        let deadline = std::time::Instant::now() + LEAVE_RETRY;
        loop {
            match first_answer(&ips, |gw| gw.member_remove(id)) {
                Ok(()) | Err(GatewayError::Refused { code: 5, .. }) => return Ok(()),
                Err(GatewayError::Refused { message, .. })
                    if (message.ends_with("unhealthy cluster")
                        || message.ends_with("server stopped"))
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
                Err(e) => return Err(format!("failed to remove member {id}: {e}")),
            }
        }
    });
    outcome?;
    shared.lock().leave_etcd(idx);
    Ok(())
}

/// `EtcdStatus`: the node's own member's status.
pub fn status(shared: &Shared, real: &RealEtcd, idx: usize) -> Result<EtcdMemberStatus, Status> {
    let own = endpoints(shared, real, idx, true);
    let wrap = |s: Status| {
        Status::new(
            s.code(),
            format!("failed to query etcd status: {}", s.message()),
        )
    };
    let s = blocking(|| first_answer(&own, Gateway::status)).map_err(|e| match e {
        GatewayError::Unreachable(_) => wrap(refused()),
        GatewayError::Refused { message, .. } => wrap(Status::unknown(message)),
    })?;
    Ok(EtcdMemberStatus {
        storage_version: s.storage_version,
        member_id: s.member_id,
        protocol_version: s.version,
        db_size: s.db_size,
        db_size_in_use: s.db_size_in_use,
        leader: s.leader,
        raft_index: s.raft_index,
        raft_term: s.raft_term,
        raft_applied_index: s.raft_applied_index,
        errors: s.errors,
        is_learner: s.is_learner,
    })
}

/// `EtcdSnapshot`: the node's own member's database, as etcd streams it.
pub fn snapshot(shared: &Shared, real: &RealEtcd, idx: usize) -> Result<Vec<u8>, Status> {
    let own = endpoints(shared, real, idx, true);
    blocking(|| first_answer(&own, Gateway::snapshot)).map_err(|e| match e {
        GatewayError::Unreachable(_) => refused(),
        GatewayError::Refused { message, .. } => Status::unknown(message),
    })
}
