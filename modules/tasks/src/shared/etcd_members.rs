//! etcd's members as the modules that guard or change them read them: where each runs, what to
//! call it in a message, and whether it is healthy.

use std::time::{Duration, Instant};

use ferro_talos_client::proto::machine::EtcdMember;
use ferro_talos_client::{ConnectOptions, Credentials, ErrorKind, TalosClient};

use crate::shared::connection::{self, Target};

/// A member's id as talosctl prints it (`etcdresource.FormatMemberID`, `%016x`).
pub fn id_hex(id: u64) -> String {
    format!("{id:016x}")
}

/// A member in messages: its hostname and id, or only the id before it has started.
pub fn label(m: &EtcdMember) -> String {
    if m.hostname.is_empty() {
        id_hex(m.id)
    } else {
        format!("{} ({})", m.hostname, id_hex(m.id))
    }
}

/// The address of an etcd member, from its first peer or client URL.
pub fn host(m: &EtcdMember) -> Option<String> {
    let url = m.peer_urls.first().or(m.client_urls.first())?;
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// Whether a member serves: its node answers EtcdStatus (routed there through `client`, a
/// control plane) without errors. Err says why not.
pub async fn health(client: &TalosClient, m: &EtcdMember) -> Result<(), String> {
    if m.hostname.is_empty() {
        return Err("it has not started".into());
    }
    let Some(host) = host(m) else {
        return Err("it names no address".into());
    };
    match client.with_node(&host).etcd_status().await {
        Ok(s) if s.errors.is_empty() => Ok(()),
        Ok(s) => Err(s.errors.join("; ")),
        Err(e) => Err(e.message),
    }
}

/// How long a member list may wait where etcd does not run on the node asked: Talos's etcd
/// client waits for a connection (`NewClient`, `internal/pkg/etcd/etcd.go` @ v1.14.1), so before
/// bootstrap `EtcdMemberList` blocks until the caller's deadline instead of failing.
pub const MEMBER_LIST_PROBE: Duration = Duration::from_secs(3);

/// What asking one control plane about etcd members told us.
#[derive(Debug)]
pub enum Members {
    /// etcd answered with these members.
    Present(Vec<EtcdMember>),
    /// No etcd answered, and the node's own etcd service does not run (what it says: before
    /// bootstrap it waits to join, `Preparing: Running pre state`). Not bootstrapped, as far as
    /// this node can tell.
    NotRunning { service: String },
    /// The node is in maintenance mode: it has no config yet.
    Maintenance,
    /// We could not tell: why.
    Unknown(String),
}

/// Connects to `target` and asks it about etcd members ([`members_of`]); a node that cannot be
/// reached with mutual TLS but answers in maintenance mode is `Maintenance`.
pub async fn ask(target: &Target, creds: &Credentials, opts: &ConnectOptions) -> Members {
    let client = match connection::connect(target, creds, opts.clone()).await {
        Ok(c) => c,
        Err(e) => return maintenance_or(target, opts, e.to_string()).await,
    };
    match members_of(&client).await {
        Members::Unknown(why) => maintenance_or(target, opts, why).await,
        answer => answer,
    }
}

/// [`ask`] of every target at once: each may wait up to [`MEMBER_LIST_PROBE`] where etcd does
/// not run, so asking one after the other would add those waits up.
pub async fn ask_all(
    targets: &[Target],
    creds: &Credentials,
    opts: &ConnectOptions,
) -> Vec<Members> {
    futures_util::future::join_all(targets.iter().map(|t| ask(t, creds, opts))).await
}

async fn maintenance_or(target: &Target, opts: &ConnectOptions, why: String) -> Members {
    match ferro_talos_client::probe(target.maintenance_address(), opts).await {
        Ok(ferro_talos_client::NodeMode::Maintenance) => Members::Maintenance,
        _ => Members::Unknown(why),
    }
}

/// etcd's members as one control plane sees them, decided from what the node says of its own
/// etcd service first: where it runs, a member list that fails is an error to report; where it
/// does not (it waits to join before bootstrap), the list is asked with a short deadline
/// ([`MEMBER_LIST_PROBE`]), and no answer within it means no etcd answers there.
pub async fn members_of(client: &TalosClient) -> Members {
    let services = match client.service_list().await {
        Ok(s) => s,
        Err(e) if e.kind == ErrorKind::MaintenanceMode => return Members::Maintenance,
        Err(e) => return Members::Unknown(e.to_string()),
    };
    let etcd = services.iter().find(|s| s.id == "etcd");
    let service = etcd.map_or_else(
        || "no etcd service".to_string(),
        |s| {
            let last = s.events.as_ref().and_then(|e| e.events.last());
            match last {
                Some(ev) if !ev.msg.is_empty() => format!("etcd service {}: {}", s.state, ev.msg),
                _ => format!("etcd service {}", s.state),
            }
        },
    );
    let running = etcd.is_some_and(|s| s.state == "Running");
    let answer = if running {
        client.etcd_member_list().await
    } else {
        client.etcd_member_list_within(MEMBER_LIST_PROBE).await
    };
    match answer {
        Ok(m) if !m.is_empty() => Members::Present(m),
        Ok(_) => Members::NotRunning { service },
        Err(e) if e.kind == ErrorKind::MaintenanceMode => Members::Maintenance,
        // No etcd to reach: the wait ran out (Talos 1.14 and 1.13 block), the connection was
        // refused (a node whose etcd endpoint refuses at once), or the node knows no endpoint.
        Err(e)
            if !running
                && (e.kind == ErrorKind::Timeout
                    || (e.kind == ErrorKind::Unreachable && e.grpc_code.is_some())
                    || e.message
                        .contains("no controlplane endpoints discovered yet")) =>
        {
            Members::NotRunning { service }
        }
        Err(e) => Members::Unknown(e.to_string()),
    }
}

/// A member and what asking it found.
pub struct Checked {
    pub member: EtcdMember,
    pub health: Result<(), String>,
}

/// Every member with its health, asked through `client` (a control plane).
pub async fn check_all(client: &TalosClient, members: Vec<EtcdMember>) -> Vec<Checked> {
    let mut checked = Vec::with_capacity(members.len());
    for member in members {
        let health = health(client, &member).await;
        checked.push(Checked { member, health });
    }
    checked
}

/// Whether member `id` can go and etcd keep its quorum: what etcd itself enforces (its strict
/// reconfiguration checks, etcd v3.6.12 `mayRemoveMember` in `server/etcdserver/server.go`:
/// never the last member, and a live member only while the other live members stay a quorum)
/// and what it cannot (removing a member that is down from a cluster that has lost its quorum
/// already fails there for want of a leader). Talos and talosctl check nothing more
/// (`EtcdRemoveMemberByID`, `EtcdLeaveCluster` in `v1alpha1_server.go` @ v1.13.9), so this is
/// said here, before anything is sent. Err is the reason, in words.
pub fn removal_verdict(members: &[Checked], id: u64) -> Result<(), String> {
    let total = members.len();
    if total <= 1 {
        return Err("it is etcd's only member, and etcd refuses to remove its last member".into());
    }
    let remaining = total - 1;
    let quorum = remaining / 2 + 1;
    let healthy: Vec<&Checked> = members
        .iter()
        .filter(|c| c.member.id != id && c.health.is_ok())
        .collect();
    if healthy.len() >= quorum {
        return Ok(());
    }
    let down: Vec<String> = members
        .iter()
        .filter(|c| c.member.id != id)
        .filter_map(|c| {
            c.health
                .as_ref()
                .err()
                .map(|why| format!("{}: {why}", label(&c.member)))
        })
        .collect();
    Err(format!(
        "etcd would keep {} healthy member(s) of {remaining}, and {remaining} members need {quorum} for \
         a quorum (not healthy: {})",
        healthy.len(),
        down.join("; ")
    ))
}

/// How waiting for etcd to run on a node ended badly.
pub enum EtcdWait {
    /// The etcd service failed, with its last message (a recovery's restore that failed).
    Failed(String),
    /// It did not run in time; the last state seen.
    TimedOut(String),
}

/// Waits until the node's etcd service runs, is healthy and etcd lists members (after a
/// bootstrap or a recovery); a Failed service ends the wait at once with its message.
pub async fn wait_running(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    timeout: Duration,
) -> Result<(), EtcdWait> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        if let Ok(client) = connection::connect(target, creds, opts.clone()).await {
            match client.service_list().await {
                Ok(services) => {
                    let etcd = services.iter().find(|s| s.id == "etcd");
                    let state = etcd.map_or("missing", |s| s.state.as_str());
                    if state == "Failed" {
                        let message = etcd
                            .and_then(|s| s.events.as_ref())
                            .and_then(|e| e.events.last())
                            .map(|e| e.msg.clone())
                            .unwrap_or_default();
                        return Err(EtcdWait::Failed(message));
                    }
                    let healthy = etcd
                        .and_then(|s| s.health.as_ref())
                        .is_some_and(|h| h.healthy);
                    match client.etcd_member_list().await {
                        Ok(m) if state == "Running" && healthy && !m.is_empty() => return Ok(()),
                        Ok(m) if m.is_empty() => last = "no etcd members yet".into(),
                        Ok(_) => last = format!("etcd service is {state}"),
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(EtcdWait::TimedOut(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(peer: &str) -> EtcdMember {
        EtcdMember {
            id: 0xabc,
            hostname: "cp1".into(),
            peer_urls: vec![peer.into()],
            client_urls: vec![],
            is_learner: false,
        }
    }

    fn checked(id: u64, healthy: bool) -> Checked {
        Checked {
            member: EtcdMember {
                id,
                hostname: format!("cp{id}"),
                peer_urls: vec![format!("https://10.0.0.{id}:2380")],
                client_urls: vec![],
                is_learner: false,
            },
            health: if healthy { Ok(()) } else { Err("down".into()) },
        }
    }

    /// etcd's own rule (`mayRemoveMember`, v3.6.12) over the layouts that matter.
    #[test]
    fn a_member_goes_only_while_a_quorum_of_the_rest_stays_healthy() {
        let all_up = [checked(1, true), checked(2, true), checked(3, true)];
        assert!(removal_verdict(&all_up, 3).is_ok());
        let one_down = [checked(1, true), checked(2, true), checked(3, false)];
        // The dead one may go; a live one would leave one live member of two.
        assert!(removal_verdict(&one_down, 3).is_ok());
        let e = removal_verdict(&one_down, 2).unwrap_err();
        assert!(
            e.contains("keep 1 healthy member(s) of 2") && e.contains("need 2"),
            "{e}"
        );
        assert!(e.contains("cp3 (0000000000000003): down"), "{e}");
        // Two of three down: no quorum left, even to remove a dead one.
        let two_down = [checked(1, true), checked(2, false), checked(3, false)];
        assert!(removal_verdict(&two_down, 3).is_err());
        // Two members: either may go while the other is healthy.
        assert!(removal_verdict(&[checked(1, true), checked(2, true)], 2).is_ok());
        assert!(removal_verdict(&[checked(1, true), checked(2, false)], 2).is_ok());
        assert!(removal_verdict(&[checked(1, true), checked(2, false)], 1).is_err());
        let e = removal_verdict(&[checked(1, true)], 1).unwrap_err();
        assert!(e.contains("only member"), "{e}");
    }

    #[test]
    fn host_comes_from_the_peer_url() {
        assert_eq!(
            host(&member("https://10.0.0.2:2380")).as_deref(),
            Some("10.0.0.2")
        );
        assert_eq!(
            host(&member("https://[fd00::2]:2380")).as_deref(),
            Some("fd00::2")
        );
        assert_eq!(
            label(&member("https://10.0.0.2:2380")),
            "cp1 (0000000000000abc)"
        );
    }
}
