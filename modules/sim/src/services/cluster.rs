//! `cluster.ClusterService/HealthCheck` (api.md §7, §16): the discovered-nodes line, then the
//! checks in Talos's order, each reported as `waiting for <check>: ...` and then `OK` (or the
//! current error while it keeps failing, until `wait_timeout`).
//!
//! Upstream (tag v1.13.9): `internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go`
//! runs `pkg/cluster/check/default.go`'s checks one after another under a context with the wait
//! timeout; when it expires the handler returns the bare context error, which gRPC sends as
//! DeadlineExceeded "context deadline exceeded" (the failing check is only in the progress lines).
//! "all k8s nodes to report" (`pkg/cluster/check/kubernetes.go`, `cluster.NodesMatch`) needs the
//! listed nodes and the Kubernetes nodes to match both ways.

use std::time::Duration;

use ferro_talos_proto::cluster::cluster_service_server::ClusterService;
use ferro_talos_proto::cluster::*;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::impl_item;
use crate::real::kubernetes::health::{self as real_health, Verdict};
use crate::routing::{BoxStream, Ctx};
use crate::state::{Stage, State};

impl_item!(HealthCheckProgress);

pub struct Cluster(pub Ctx);

const CHECKS: &[&str] = &[
    "etcd to be healthy",
    "etcd members to be consistent across nodes",
    "etcd members to be control plane nodes",
    "apid to be ready",
    "all nodes memory sizes",
    "all nodes disk sizes",
    "no diagnostics",
    "kubelet to be healthy",
    "all nodes to finish boot sequence",
    "all k8s nodes to report",
    "all control plane static pods to be running",
    "all control plane components to be ready",
    "all k8s nodes to report ready",
    "kube-proxy to report ready",
    "coredns to report ready",
    "all k8s nodes to report schedulable",
];

fn unreachable(ip: &str) -> String {
    format!(
        "{ip}: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp {ip}:50000: connect: connection refused\""
    )
}

/// Ok(()) when check `i` passes right now, Err(text) otherwise.
fn evaluate(
    st: &State,
    real: Option<&crate::real::RealEtcd>,
    i: usize,
    cps: &[String],
    workers: &[String],
) -> Result<(), String> {
    let node = |ip: &str| st.nodes.iter().find(|n| n.address.to_string() == ip);
    let all = || cps.iter().chain(workers.iter());
    match i {
        0 => {
            for ip in cps {
                let n = node(ip)
                    .filter(|n| n.listening())
                    .ok_or_else(|| unreachable(ip))?;
                if let Some(why) = &n.etcd_failed {
                    return Err(format!(
                        "{ip}: service \"etcd\" not in expected state \"Running\": current state [Failed] {why}"
                    ));
                }
                if n.services_stopped || n.etcd_left {
                    return Err(format!(
                        "{ip}: service \"etcd\" not in expected state \"Running\": current state [Finished] Service finished successfully"
                    ));
                }
                if st.etcd.is_none() || !n.etcd_data {
                    return Err(format!(
                        "{ip}: service \"etcd\" not in expected state \"Running\": current state [Preparing] Running pre state"
                    ));
                }
                // With the real backend the member must answer too (just started, it does not yet).
                if n.etcd_stopped() || real.is_some_and(|r| !r.serving(n.index)) {
                    return Err(format!("{ip}: service is not healthy: etcd"));
                }
            }
            Ok(())
        }
        1 | 2 => {
            let members = st
                .etcd
                .as_ref()
                .ok_or_else(|| "etcd is not bootstrapped".to_string())?;
            for m in members {
                let Some(n) = st.nodes.get(m.node) else {
                    continue;
                };
                if i == 2 && !cps.contains(&n.address.to_string()) {
                    return Err(format!(
                        "etcd member ips [\"{}\"] are not subset of control plane node ips {cps:?}",
                        n.address
                    ));
                }
            }
            Ok(())
        }
        3 | 7 | 8 => {
            for ip in all() {
                let n = node(ip)
                    .filter(|n| n.listening())
                    .ok_or_else(|| unreachable(ip))?;
                if i == 8 && n.stage != Stage::Running {
                    return Err(format!("{ip}: unexpected stage {}", n.stage.yaml_name()));
                }
            }
            Ok(())
        }
        12 => {
            k8s_nodes_ready(st)?;
            injected_in(st, i)
        }
        9 => k8s_nodes_match(st, cps, workers),
        _ => Ok(()),
    }
}

/// A failure the control protocol injected (`fault health_fail`), reported by "all k8s nodes to
/// report ready" once the nodes are.
fn injected_in(st: &State, i: usize) -> Result<(), String> {
    match &st.health_fail {
        Some(text) if CHECKS[i] == "all k8s nodes to report ready" => Err(text.clone()),
        _ => Ok(()),
    }
}

fn injected(shared: &crate::state::Shared, i: usize) -> Result<(), String> {
    injected_in(&shared.lock(), i)
}

/// The Kubernetes nodes are the nodes that run a config (a registered Node object each); every
/// one listed must be among them and none may be left over, with upstream's texts.
///
/// Upstream lists the Nodes through the Kubernetes API (`K8sAllNodesReportedAssertion`), so the
/// check fails, with client-go's dial error, while no control plane's API server listens.
fn k8s_nodes_match(st: &State, cps: &[String], workers: &[String]) -> Result<(), String> {
    if !st.nodes.iter().any(|n| n.kube_api_listening) {
        let endpoint = st
            .nodes
            .iter()
            .filter(|n| cps.contains(&n.address.to_string()))
            .find_map(|n| n.active.as_ref().map(|c| c.endpoint()))
            .unwrap_or_default();
        return Err(real_health::dial_refused(&endpoint, "/api/v1/nodes"));
    }
    // The Node objects' addresses, a Node left behind by a machine that is gone included.
    let registered: Vec<String> = st
        .kube
        .nodes
        .values()
        .filter_map(|rec| st.nodes.get(rec.index))
        .map(|n| n.address.to_string())
        .collect();
    let expected: Vec<&String> = cps.iter().chain(workers.iter()).collect();
    if let Some(missing) = expected.iter().find(|ip| !registered.contains(ip)) {
        return Err(format!("can't find expected node with IPs [{missing:?}]"));
    }
    let unexpected: Vec<String> = registered
        .iter()
        .filter(|ip| !expected.contains(ip))
        .map(|ip| format!("{ip:?}"))
        .collect();
    if !unexpected.is_empty() {
        return Err(format!(
            "unexpected nodes with IPs [{}]",
            unexpected.join(" ")
        ));
    }
    Ok(())
}

/// "all k8s nodes to report ready" (`K8sAllNodesReadyAssertion`, `pkg/cluster/check/kubernetes.go`
/// @ v1.13.9): every Node object, expected or not, must be Ready; Go prints the names as `%v`.
fn k8s_nodes_ready(st: &State) -> Result<(), String> {
    let not_ready: Vec<&str> = st
        .kube
        .nodes
        .iter()
        .filter(|(_, rec)| !st.nodes.get(rec.index).is_some_and(crate::kube::node_ready))
        .map(|(name, _)| name.as_str())
        .collect();
    if not_ready.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "some nodes are not ready: [{}]",
            not_ready.join(" ")
        ))
    }
}

#[tonic::async_trait]
impl ClusterService for Cluster {
    type HealthCheckStream = BoxStream<HealthCheckProgress>;
    async fn health_check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::HealthCheckStream>, Status> {
        let req = request.get_ref().clone();
        let shared = self.0.shared.clone();
        let s = self.0.streaming(
            request.metadata(),
            "/cluster.ClusterService/HealthCheck",
            |t| {
                let (cps, workers) = {
                    let st = shared.lock();
                    match st.nodes[t.idx].machine_type() {
                        None => {
                            return Err(Status::unimplemented(
                                "machine type is not set, cannot use cluster health check API",
                            ));
                        }
                        Some(mt) if !mt.is_control_plane() => {
                            return Err(Status::unimplemented(
                                "cluster health check is only available on control plane nodes",
                            ));
                        }
                        _ => {}
                    }
                    let info = req.cluster_info.clone().unwrap_or_default();
                    if info.control_plane_nodes.is_empty() && info.worker_nodes.is_empty() {
                        let configured = st.nodes.iter().filter(|n| n.active.is_some());
                        let (c, w): (Vec<_>, Vec<_>) =
                            configured.partition(|n| n.is_control_plane());
                        (
                            c.iter().map(|n| n.address.to_string()).collect::<Vec<_>>(),
                            w.iter().map(|n| n.address.to_string()).collect::<Vec<_>>(),
                        )
                    } else {
                        (info.control_plane_nodes, info.worker_nodes)
                    }
                };
                let timeout = req
                    .wait_timeout
                    .and_then(|d| Duration::try_from(d).ok())
                    .unwrap_or_default();
                let (tx, rx) = mpsc::channel(32);
                let shared = shared.clone();
                let asked_node = t.idx;
                tokio::spawn(async move {
                    let msg = |m: String| {
                        Ok(HealthCheckProgress {
                            metadata: None,
                            message: m,
                        })
                    };
                    let quoted: Vec<String> = cps
                        .iter()
                        .chain(workers.iter())
                        .map(|ip| format!("{ip:?}"))
                        .collect();
                    if tx
                        .send(msg(format!("discovered nodes: [{}]", quoted.join(" "))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let deadline = tokio::time::Instant::now() + timeout;
                    for (i, check) in CHECKS.iter().enumerate() {
                        if tx
                            .send(msg(format!("waiting for {check}: ...")))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        let mut last = String::new();
                        let real_check = shared
                            .real_kube
                            .clone()
                            .zip(real_health::K8sCheck::named(check));
                        loop {
                            let r = match &real_check {
                                Some((rk, k8s_check)) => {
                                    let (rk, k8s_check) = (rk.clone(), *k8s_check);
                                    let (shared, cps, workers) =
                                        (shared.clone(), cps.clone(), workers.clone());
                                    let idx = asked_node;
                                    tokio::task::spawn_blocking(move || {
                                        let asked =
                                            real_health::asked(&shared, idx, &cps, &workers);
                                        real_health::evaluate(&rk, k8s_check, &asked)
                                            .and_then(|v| injected(&shared, i).map(|()| v))
                                    })
                                    .await
                                    .unwrap_or_else(|e| Err(e.to_string()))
                                }
                                None => {
                                    // The Kubernetes checks list the Nodes through the API server,
                                    // which shows them as of now.
                                    let mut guard = shared.lock();
                                    let st = &mut *guard;
                                    let bootstrapped = st.etcd.is_some();
                                    st.kube.refresh(&st.nodes, bootstrapped);
                                    evaluate(st, shared.real.as_deref(), i, &cps, &workers)
                                        .map(|()| Verdict::Passed)
                                }
                            };
                            match r {
                                Ok(verdict) => {
                                    let word = match verdict {
                                        Verdict::Passed => "OK",
                                        Verdict::Skipped => "SKIP",
                                    };
                                    let _ =
                                        tx.send(msg(format!("waiting for {check}: {word}"))).await;
                                    break;
                                }
                                Err(e) => {
                                    if e != last {
                                        if tx
                                            .send(msg(format!("waiting for {check}: {e}")))
                                            .await
                                            .is_err()
                                        {
                                            return;
                                        }
                                        last = e;
                                    }
                                    if tokio::time::Instant::now() >= deadline {
                                        let _ = tx
                                            .send(Err(Status::deadline_exceeded(
                                                "context deadline exceeded",
                                            )))
                                            .await;
                                        return;
                                    }
                                    tokio::time::sleep(Duration::from_millis(250)).await;
                                }
                            }
                        }
                    }
                });
                Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
                    as BoxStream<HealthCheckProgress>)
            },
        )?;
        Ok(Response::new(s))
    }
}
