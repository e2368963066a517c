//! `talos_health`: a read-only health gate. Polls a set of checks (nodes answer, etcd members
//! are the control planes, etcd and the core services run and are healthy, Talos's own cluster
//! health check) until all pass or the timeout expires, and names the first failing check.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_client::proto::cluster::ClusterInfo;
use ferro_talos_client::proto::machine::ServiceInfo;
use ferro_talos_client::{
    ClientError, ConnectOptions, Credentials, ErrorKind, NodeMode, TalosClient, probe,
};
use serde_json::{Value, json};

use crate::shared::connection::{self, Target, with_connection_options};

mod args;
pub use args::Args;
pub(crate) use args::node_list;

pub const CHECK_API: &str = "Talos API answers";
pub const CHECK_ETCD_MEMBERS: &str = "etcd members are the control planes";
pub const CHECK_ETCD_SERVICE: &str = "etcd is running and healthy";
pub const CHECK_SERVICES: &str = "core services are up";
pub const CHECK_TALOS: &str = "Talos cluster health check";

/// Services every configured node runs; control planes add [`CONTROL_PLANE_SERVICES`].
const CORE_SERVICES: &[&str] = &["apid", "containerd", "machined", "kubelet"];
const CONTROL_PLANE_SERVICES: &[&str] = &["etcd", "trustd"];

/// Pause between two rounds of checks.
const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Upper bound of one unary call, so one hung node cannot eat the whole timeout.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::int("timeout").default(300))
        .option(Opt::list("control_plane_nodes").elements(Type::Str))
        .option(Opt::list("worker_nodes").elements(Type::Str))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Failed,
    Pending,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Pending => "pending",
        }
    }
}

/// One check on one node, as reported in `checks`.
#[derive(Clone, Debug)]
pub struct Check {
    pub name: &'static str,
    pub node: String,
    pub status: Status,
    pub message: String,
    /// The message already says what to do (a translated client error), so the failure message
    /// adds no advice of its own.
    advised: bool,
    /// The client error behind a failure, when there was one.
    kind: Option<ErrorKind>,
}

impl Check {
    fn new(name: &'static str, node: &str, status: Status, message: impl Into<String>) -> Check {
        Check {
            name,
            node: node.to_string(),
            status,
            message: message.into(),
            advised: false,
            kind: None,
        }
    }

    /// A failed check from a client error; the node is left out of the text (the check names it).
    fn from_error(name: &'static str, node: &str, e: &ClientError) -> Check {
        let advised = matches!(
            e.kind,
            ErrorKind::Unreachable
                | ErrorKind::ConnectionClosed
                | ErrorKind::WrongCa
                | ErrorKind::ServerNameMismatch
                | ErrorKind::ClientCertExpired
                | ErrorKind::ClientCertRejected
                | ErrorKind::PermissionDenied
                | ErrorKind::MaintenanceMode
        );
        Check {
            advised,
            kind: Some(e.kind.clone()),
            ..Check::new(name, node, Status::Failed, client_text(e))
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "node": self.node,
            "status": self.status.as_str(),
            "message": self.message,
        })
    }
}

/// What the operator should do when a check keeps failing.
fn advice(name: &str) -> &'static str {
    match name {
        CHECK_API => {
            "check that the node is powered on, configured (not in maintenance mode) and reachable on port 50000"
        }
        CHECK_ETCD_MEMBERS => {
            "check that etcd was bootstrapped (talos_bootstrap) and that control_plane_nodes lists exactly the control planes"
        }
        CHECK_ETCD_SERVICE => {
            "inspect it with `talosctl -n <node> service etcd` and `talosctl -n <node> logs etcd`"
        }
        CHECK_SERVICES => {
            "inspect it with `talosctl -n <node> services` and the failing service's logs"
        }
        _ => "see talos_health_messages for Talos's own progress lines, or run `talosctl health`",
    }
}

/// The result of the whole gate.
struct Outcome {
    checks: Vec<Check>,
    messages: Vec<String>,
    control_planes: Vec<String>,
    workers: Vec<String>,
    rounds: u32,
    elapsed: Duration,
}

impl Outcome {
    fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.status == Status::Ok)
    }
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        timeout,
        control_planes,
        workers,
    } = args;
    let mut opts = connection.connect_options(CALL_TIMEOUT.min(timeout));
    // The gate polls anyway: a retry inside one round would only delay the next round.
    opts.read_retries = 0;
    let (creds, _) = connection::require_credentials(ctx, &connection)?;

    let outcome = connection::block_on(gate(
        &target,
        &creds,
        &opts,
        timeout,
        control_planes,
        workers,
    ))?;
    let checks: Vec<Value> = outcome.checks.iter().map(Check::to_json).collect();
    let elapsed = (outcome.elapsed.as_secs_f64() * 10.0).round() / 10.0;
    if outcome.passed() {
        let msg = format!(
            "cluster is healthy: {} control plane(s), {} worker(s), {} checks passed in {elapsed}s",
            outcome.control_planes.len(),
            outcome.workers.len(),
            outcome.checks.len()
        );
        return Ok(ModuleResult::unchanged()
            .msg(msg)
            .with("checks", checks)
            .with("control_plane_nodes", json!(outcome.control_planes))
            .with("worker_nodes", json!(outcome.workers))
            .with("talos_health_messages", json!(outcome.messages))
            .with("rounds", outcome.rounds)
            .with("elapsed", elapsed));
    }
    let msg = failure_message(&outcome.checks, timeout, elapsed);
    Err(ModuleError::new(msg)
        .with("checks", checks)
        .with("control_plane_nodes", json!(outcome.control_planes))
        .with("worker_nodes", json!(outcome.workers))
        .with("talos_health_messages", json!(outcome.messages))
        .with("rounds", outcome.rounds)
        .with("elapsed", elapsed))
}

fn failure_message(checks: &[Check], timeout: Duration, elapsed: f64) -> String {
    let after = format!(
        "(still failing after {elapsed}s; timeout {}s)",
        timeout.as_secs()
    );
    match checks.iter().find(|c| c.status == Status::Failed) {
        Some(c) if c.advised => format!(
            "health check '{}' failed on {}: {} {after}",
            c.name, c.node, c.message
        ),
        Some(c) => format!(
            "health check '{}' failed on {}: {}; {} {after}",
            c.name,
            c.node,
            c.message,
            advice(c.name)
        ),
        None => format!("the health checks did not finish within the timeout {after}"),
    }
}

async fn gate(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    timeout: Duration,
    control_planes: Option<Vec<String>>,
    workers: Vec<String>,
) -> Outcome {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let round = one_round(
            target,
            creds,
            opts,
            deadline,
            control_planes.as_deref(),
            &workers,
        )
        .await;
        let done = round.checks.iter().all(|c| c.status == Status::Ok);
        let certain = certain_failure(&round.checks, target, opts).await;
        let now = Instant::now();
        if done || certain || now + POLL_INTERVAL >= deadline {
            return Outcome {
                rounds,
                elapsed: now - start,
                ..round
            };
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A failure that waiting cannot fix, so the gate stops at once instead of retrying until its
/// timeout: our credentials are expired or unusable, or a configured node (not one that still shows
/// its maintenance certificate while it boots) presents a certificate from another CA.
async fn certain_failure(checks: &[Check], target: &Target, opts: &ConnectOptions) -> bool {
    for c in checks.iter().filter(|c| c.status == Status::Failed) {
        match c.kind {
            Some(ErrorKind::ClientCertExpired | ErrorKind::Credentials) => return true,
            Some(ErrorKind::WrongCa) => {
                // Only the node itself can be probed without routing; through an endpoint the
                // endpoint's certificate is the one that did not match.
                let endpoint = if target.routed() {
                    target.endpoint.as_str()
                } else {
                    c.node.as_str()
                };
                if probe(endpoint, opts).await.ok() == Some(NodeMode::Configured) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

fn client_for(base: &TalosClient, target: &Target, node: &str) -> TalosClient {
    let t = Target {
        node: node.to_string(),
        endpoint: target.endpoint.clone(),
    };
    if t.routed() {
        base.with_node(node)
    } else {
        base.clone()
    }
}

/// One round of every check, from a fresh connection to the endpoint.
async fn one_round(
    target: &Target,
    creds: &Credentials,
    opts: &ConnectOptions,
    deadline: Instant,
    given_cps: Option<&[String]>,
    workers: &[String],
) -> Outcome {
    let base = match TalosClient::connect(&target.endpoint, creds, opts.clone()).await {
        Ok(c) => c,
        Err(e) => return unreachable_round(target, &e, given_cps, workers),
    };
    let asked = client_for(&base, target, &target.node);
    let members = etcd_members(&asked).await;
    let cps = control_planes(given_cps, &members, &target.node);
    let all: Vec<String> = cps.iter().chain(workers.iter()).cloned().collect();
    let (mut checks, answering) = api_checks(&base, target, &all).await;
    checks.push(match &members {
        Ok(m) => members_check(&target.node, &cps, m, given_cps.is_some()),
        Err(e) => Check::new(
            CHECK_ETCD_MEMBERS,
            &target.node,
            Status::Failed,
            format!("cannot list etcd members: {e}"),
        ),
    });
    let services = service_lists(&answering).await;
    checks.extend(etcd_service_checks(&cps, &services));
    checks.extend(core_service_checks(&all, &cps, &services));
    // Talos's own check waits on its own, up to the time left; it runs only once ours pass so
    // its wait is not spent on a failure we already know about.
    let mut messages = Vec::new();
    let talos = if checks.iter().all(|c| c.status == Status::Ok) {
        talos_check(
            &asked,
            &target.node,
            deadline,
            given_cps,
            workers,
            &mut messages,
        )
        .await
    } else {
        Check::new(
            CHECK_TALOS,
            &target.node,
            Status::Pending,
            "waits for the other checks to pass",
        )
    };
    checks.push(talos);
    round(checks, cps, messages, workers)
}

/// A round's outcome; `gate` counts the rounds and the time.
fn round(
    checks: Vec<Check>,
    control_planes: Vec<String>,
    messages: Vec<String>,
    workers: &[String],
) -> Outcome {
    Outcome {
        checks,
        messages,
        control_planes,
        workers: workers.to_vec(),
        rounds: 0,
        elapsed: Duration::ZERO,
    }
}

/// The round when the endpoint does not answer at all: nothing else can be asked.
fn unreachable_round(
    target: &Target,
    e: &ClientError,
    given_cps: Option<&[String]>,
    workers: &[String],
) -> Outcome {
    let checks = vec![
        Check::from_error(CHECK_API, &target.node, e),
        Check::new(
            CHECK_TALOS,
            &target.node,
            Status::Pending,
            "waits for the node to answer",
        ),
    ];
    let cps = given_cps.map(<[String]>::to_vec).unwrap_or_default();
    round(checks, cps, Vec::new(), workers)
}

/// The control planes: as given, else discovered from the etcd members the asked node sees,
/// else (when it cannot list them) the asked node alone.
fn control_planes(
    given: Option<&[String]>,
    members: &Result<Vec<Member>, String>,
    asked: &str,
) -> Vec<String> {
    match (given, members) {
        (Some(given), _) => given.to_vec(),
        (None, Ok(m)) => m.iter().map(|m| m.ips[0].clone()).collect(),
        (None, Err(_)) => vec![asked.to_string()],
    }
}

/// Every node answers Version over mutual TLS, i.e. it is configured for this cluster: a check
/// per node, and a client for each node that answered.
async fn api_checks(
    base: &TalosClient,
    target: &Target,
    all: &[String],
) -> (Vec<Check>, BTreeMap<String, TalosClient>) {
    let mut checks = Vec::new();
    let mut answering = BTreeMap::new();
    for node in all {
        let client = client_for(base, target, node);
        match client.version().await {
            Ok(v) => {
                let tag = v.version.map(|i| i.tag).unwrap_or_default();
                checks.push(Check::new(
                    CHECK_API,
                    node,
                    Status::Ok,
                    format!("Talos {tag}"),
                ));
                answering.insert(node.clone(), client);
            }
            Err(e) => checks.push(Check::from_error(CHECK_API, node, &e)),
        }
    }
    (checks, answering)
}

/// Each answering node's services, or why they could not be listed.
type ServiceLists = BTreeMap<String, Result<Vec<ServiceInfo>, String>>;

async fn service_lists(answering: &BTreeMap<String, TalosClient>) -> ServiceLists {
    let mut services = ServiceLists::new();
    for (node, client) in answering {
        services.insert(
            node.clone(),
            client.service_list().await.map_err(|e| client_text(&e)),
        );
    }
    services
}

const NOT_ANSWERING: &str = "not checked: the node does not answer";

/// etcd runs and is healthy on every control plane.
fn etcd_service_checks(cps: &[String], services: &ServiceLists) -> Vec<Check> {
    cps.iter()
        .map(|node| match services.get(node) {
            None => Check::new(CHECK_ETCD_SERVICE, node, Status::Pending, NOT_ANSWERING),
            Some(Err(e)) => Check::new(CHECK_ETCD_SERVICE, node, Status::Failed, e.clone()),
            Some(Ok(list)) => match service_problem(list, "etcd") {
                None => Check::new(CHECK_ETCD_SERVICE, node, Status::Ok, "Running and healthy"),
                Some(why) => Check::new(CHECK_ETCD_SERVICE, node, Status::Failed, why),
            },
        })
        .collect()
}

/// The core services run and are healthy on every node, the control planes' own ones too.
fn core_service_checks(all: &[String], cps: &[String], services: &ServiceLists) -> Vec<Check> {
    let mut checks = Vec::new();
    for node in all {
        let required: Vec<&str> = if cps.contains(node) {
            CORE_SERVICES
                .iter()
                .chain(CONTROL_PLANE_SERVICES)
                .copied()
                .collect()
        } else {
            CORE_SERVICES.to_vec()
        };
        checks.push(match services.get(node) {
            None => Check::new(CHECK_SERVICES, node, Status::Pending, NOT_ANSWERING),
            Some(Err(e)) => Check::new(CHECK_SERVICES, node, Status::Failed, e.clone()),
            Some(Ok(list)) => {
                let problems: Vec<String> = required
                    .iter()
                    .filter_map(|s| service_problem(list, s))
                    .collect();
                if problems.is_empty() {
                    Check::new(
                        CHECK_SERVICES,
                        node,
                        Status::Ok,
                        format!("{} Running and healthy", required.join(", ")),
                    )
                } else {
                    Check::new(CHECK_SERVICES, node, Status::Failed, problems.join("; "))
                }
            }
        });
    }
    checks
}

/// Talos's own cluster health check, asked of `node` for the time left; its progress lines go
/// to `messages`. Given control planes, it is told the cluster's nodes; else it finds them.
async fn talos_check(
    asked: &TalosClient,
    node: &str,
    deadline: Instant,
    given_cps: Option<&[String]>,
    workers: &[String],
    messages: &mut Vec<String>,
) -> Check {
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    let info = given_cps.map(|cps| ClusterInfo {
        control_plane_nodes: cps.to_vec(),
        worker_nodes: workers.to_vec(),
        force_endpoint: String::new(),
    });
    let result = asked
        .health_check(remaining, info, |m| messages.push(m.to_string()))
        .await;
    match result {
        Ok(_) => Check::new(
            CHECK_TALOS,
            node,
            Status::Ok,
            "all Talos health checks passed",
        ),
        Err(e) => Check::new(
            CHECK_TALOS,
            node,
            Status::Failed,
            talos_check_failure(&e, messages),
        ),
    }
}

/// Why Talos's own check failed. When its wait runs out, Talos ends the stream with the bare
/// DeadlineExceeded "context deadline exceeded" (`v1alpha1_cluster.go` at v1.13.9 returns the
/// context's error); which check was still failing, and why, is only in the last progress line
/// ("waiting for <check>: <error>"), so that line is the reason given.
fn talos_check_failure(e: &ferro_talos_client::ClientError, progress: &[String]) -> String {
    let failing = progress.iter().rev().find_map(|line| {
        let rest = line.strip_prefix("waiting for ")?;
        let (check, state) = rest.split_once(": ")?;
        (state != "OK" && state != "..." && state != "SKIP").then(|| format!("{check}: {state}"))
    });
    // "all k8s nodes to report" needs the listed nodes to be exactly the cluster's
    // (pkg/cluster/check/kubernetes.go, cluster.NodesMatch at v1.13.9).
    // A Node left behind by a machine that was reset or is gone fails both (every Node must be
    // Ready, `K8sAllNodesReadyAssertion`): it goes with kubectl delete node, or with talos_reset's
    // delete_kubernetes_node.
    let advice = match &failing {
        Some(f) if f.starts_with("all k8s nodes to report: ") => {
            "; list every node of the cluster in control_plane_nodes and worker_nodes (or neither, \
             to let Talos find them); a Node of a machine that left the cluster stays until it is \
             deleted (kubectl delete node, or talos_reset's delete_kubernetes_node)"
        }
        Some(f) if f.starts_with("all k8s nodes to report ready: ") => {
            "; a Node of a machine that left the cluster stays NotReady until it is deleted \
             (kubectl delete node, or talos_reset's delete_kubernetes_node)"
        }
        _ => "",
    };
    match (e.kind == ErrorKind::Timeout, failing) {
        (true, Some(failing)) => {
            format!("{failing} (Talos's check did not pass in time){advice}")
        }
        (_, Some(failing)) if !e.message.contains(&failing) => {
            format!("{}; last progress: {failing}", e.message)
        }
        _ => e.message.clone(),
    }
}

/// An etcd member as the gate sees it: every address of its peer URLs (several on a dual-stack
/// node: upstream's "etcd members to be control plane nodes" check takes every peer URL of every
/// member, `pkg/cluster/check/etcd.go` at v1.13.9) and whether it is still a learner.
#[derive(Debug)]
struct Member {
    ips: Vec<String>,
    learner: bool,
}

impl Member {
    fn is(&self, ip: &str) -> bool {
        self.ips.iter().any(|i| i == ip)
    }
    fn name(&self) -> String {
        self.ips.join("/")
    }
}

async fn etcd_members(client: &TalosClient) -> Result<Vec<Member>, String> {
    let members = client
        .etcd_member_list()
        .await
        .map_err(|e| client_text(&e))?;
    members
        .into_iter()
        .map(|m| {
            let mut ips: Vec<String> = m.peer_urls.iter().filter_map(|u| url_host(u)).collect();
            ips.dedup();
            if ips.is_empty() {
                return Err(format!(
                    "etcd member {} ({:x}) has no usable peer URL: {:?}",
                    m.hostname, m.id, m.peer_urls
                ));
            }
            Ok(Member {
                ips,
                learner: m.is_learner,
            })
        })
        .collect()
}

fn members_check(node: &str, cps: &[String], members: &[Member], given: bool) -> Check {
    let mut problems: Vec<String> = Vec::new();
    for cp in cps {
        if !members.iter().any(|m| m.is(cp)) {
            problems.push(format!("member {cp} missing"));
        }
    }
    if given {
        for m in members {
            if !cps.iter().any(|c| m.is(c)) {
                problems.push(format!(
                    "{} is an etcd member but not in control_plane_nodes",
                    m.name()
                ));
            }
        }
    }
    for m in members {
        if m.learner {
            problems.push(format!("member {} is still a learner", m.name()));
        }
    }
    if members.is_empty() {
        problems.push("etcd has no members".into());
    }
    if problems.is_empty() {
        let names: Vec<String> = members.iter().map(Member::name).collect();
        Check::new(
            CHECK_ETCD_MEMBERS,
            node,
            Status::Ok,
            format!("members: {}", names.join(", ")),
        )
    } else {
        Check::new(
            CHECK_ETCD_MEMBERS,
            node,
            Status::Failed,
            problems.join("; "),
        )
    }
}

/// None when service `id` is Running and healthy, else why not.
fn service_problem(list: &[ServiceInfo], id: &str) -> Option<String> {
    let Some(s) = list.iter().find(|s| s.id == id) else {
        return Some(format!("service {id} is not present"));
    };
    let health = s.health.clone().unwrap_or_default();
    let last_event = s
        .events
        .as_ref()
        .and_then(|e| e.events.last())
        .map(|e| e.msg.clone())
        .unwrap_or_default();
    let detail = [health.last_message.as_str(), last_event.as_str()]
        .into_iter()
        .find(|m| !m.is_empty())
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    if s.state != "Running" {
        return Some(format!("service {id} is {}, not Running{detail}", s.state));
    }
    if health.unknown {
        return Some(format!(
            "service {id} is Running but its health is not known yet{detail}"
        ));
    }
    if !health.healthy {
        return Some(format!("service {id} is Running but not healthy{detail}"));
    }
    None
}

/// A client error's text without its `node X: ` prefix.
fn client_text(e: &ClientError) -> String {
    let text = e.to_string();
    match text.strip_prefix(&format!("node {}: ", e.node)) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// The host of a URL such as `https://10.5.0.2:2380` or `https://[fd00::1]:2380`.
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next()?;
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        match authority.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => authority,
        }
    };
    (!host.is_empty()).then(|| host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_talos_client::proto::machine::ServiceHealth;

    fn svc(id: &str, state: &str, healthy: Option<bool>) -> ServiceInfo {
        ServiceInfo {
            id: id.into(),
            state: state.into(),
            health: Some(ServiceHealth {
                unknown: healthy.is_none(),
                healthy: healthy.unwrap_or(false),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn hosts_of_peer_urls() {
        assert_eq!(
            url_host("https://10.5.0.2:2380").as_deref(),
            Some("10.5.0.2")
        );
        assert_eq!(
            url_host("https://[fd00::1]:2380").as_deref(),
            Some("fd00::1")
        );
        assert_eq!(url_host("http://cp1/").as_deref(), Some("cp1"));
        assert_eq!(url_host("https://:2380"), None);
    }

    fn member(ips: &[&str], learner: bool) -> Member {
        Member {
            ips: ips.iter().map(|s| s.to_string()).collect(),
            learner,
        }
    }

    #[test]
    fn members_must_equal_control_planes() {
        let cps = vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()];
        let ok = members_check(
            "10.0.0.1",
            &cps,
            &[member(&["10.0.0.1"], false), member(&["10.0.0.2"], false)],
            true,
        );
        assert_eq!(ok.status, Status::Ok);
        let missing = members_check("10.0.0.1", &cps, &[member(&["10.0.0.1"], false)], true);
        assert_eq!(missing.status, Status::Failed);
        assert!(
            missing.message.contains("member 10.0.0.2 missing"),
            "{}",
            missing.message
        );
        let extra = members_check(
            "10.0.0.1",
            &cps,
            &[
                member(&["10.0.0.1"], false),
                member(&["10.0.0.2"], false),
                member(&["10.0.0.9"], true),
            ],
            true,
        );
        assert!(
            extra.message.contains("10.0.0.9 is an etcd member"),
            "{}",
            extra.message
        );
        assert!(extra.message.contains("learner"), "{}", extra.message);
    }

    /// A dual-stack member advertises an IPv6 and an IPv4 peer URL; either may be listed first.
    #[test]
    fn a_member_with_several_peer_urls_matches_any_of_them() {
        let cps = vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()];
        let dual = members_check(
            "10.0.0.1",
            &cps,
            &[
                member(&["fd00::1", "10.0.0.1"], false),
                member(&["10.0.0.2", "fd00::2"], false),
            ],
            true,
        );
        assert_eq!(dual.status, Status::Ok, "{}", dual.message);
        assert!(
            dual.message.contains("fd00::1/10.0.0.1"),
            "{}",
            dual.message
        );
    }

    #[test]
    fn services_must_run_and_be_healthy() {
        let list = vec![
            svc("etcd", "Preparing", None),
            svc("apid", "Running", Some(true)),
            svc("kubelet", "Running", Some(false)),
        ];
        assert!(
            service_problem(&list, "etcd")
                .unwrap()
                .contains("Preparing")
        );
        assert_eq!(service_problem(&list, "apid"), None);
        assert!(
            service_problem(&list, "kubelet")
                .unwrap()
                .contains("not healthy")
        );
        assert!(
            service_problem(&list, "trustd")
                .unwrap()
                .contains("not present")
        );
    }

    #[test]
    fn failure_names_the_first_failing_check_and_node() {
        let checks = vec![
            Check::new(CHECK_API, "10.0.0.1", Status::Ok, "Talos v1.13.6"),
            Check::new(
                CHECK_ETCD_MEMBERS,
                "10.0.0.1",
                Status::Failed,
                "member 10.0.0.3 missing",
            ),
            Check::new(
                CHECK_SERVICES,
                "10.0.0.3",
                Status::Failed,
                "service etcd is Preparing",
            ),
        ];
        let msg = failure_message(&checks, Duration::from_secs(30), 30.1);
        assert!(msg.starts_with("health check 'etcd members are the control planes' failed on 10.0.0.1: member 10.0.0.3 missing; "), "{msg}");
        assert!(msg.contains("timeout 30s"), "{msg}");
    }

    #[test]
    fn translated_client_errors_are_not_advised_twice() {
        let e = ClientError::new(
            "10.0.0.4",
            "version",
            ErrorKind::Unreachable,
            "connection refused",
        );
        let c = Check::from_error(CHECK_API, "10.0.0.4", &e);
        assert!(!c.message.starts_with("node 10.0.0.4"), "{}", c.message);
        let msg = failure_message(&[c], Duration::from_secs(5), 5.0);
        assert!(
            msg.starts_with("health check 'Talos API answers' failed on 10.0.0.4: version: "),
            "{msg}"
        );
        assert_eq!(msg.matches("powered on").count(), 1, "{msg}");
    }
}
