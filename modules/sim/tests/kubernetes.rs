//! The simulated Kubernetes API through the collection's own Kubernetes client (ferro-talos-kube,
//! kube-rs over rustls): admin access from the secrets bundle, Nodes that follow the Talos side,
//! cordons, and drains through the Eviction API with PodDisruptionBudgets as the API server
//! enforces them (kubernetes pkg/registry/core/pod/storage/eviction.go: 429 with a
//! DisruptionBudget cause "The disruption budget NAME needs N healthy pods and has M currently").

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferro_talos_kube::{KubeAccess, KubeErrorKind};

fn access(cluster: &ferro_talos_sim::Cluster) -> KubeAccess {
    let k8s = &SAMPLE.bundle.certs.k8s;
    let endpoint = format!("https://{}:6443", cluster.endpoint(0).unwrap().ip());
    KubeAccess::from_bundle(&k8s.crt, &k8s.key, &endpoint).unwrap()
}

async fn connect(cluster: &ferro_talos_sim::Cluster) -> ferro_talos_kube::Kube {
    let access = access(cluster);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kube = access.connect().await.unwrap();
        match kube.node(&node_name(cluster, 0)).await {
            Ok(n) if n.ready => return kube,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("the Kubernetes API does not answer: {other:?}"),
        }
    }
}

fn node_name(cluster: &ferro_talos_sim::Cluster, i: usize) -> String {
    cluster.node(i).unwrap().hostname.to_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_talos_and_cordons_stick() {
    let cluster = bootstrapped(1, 1).await;
    let kube = connect(&cluster).await;
    let worker = node_name(&cluster, 1);
    let n = kube
        .wait_node(&worker, Instant::now() + Duration::from_secs(5), |_| true)
        .await
        .unwrap();
    assert!(n.ready && !n.unschedulable);
    assert_eq!(n.boot_id, cluster.node(1).unwrap().boot_id);
    // The sample configs set no kubelet image: Talos's default kubelet for 1.13.9.
    assert!(
        n.kubelet_version.starts_with("v1."),
        "{}",
        n.kubelet_version
    );

    kube.set_unschedulable(&worker, true).await.unwrap();
    assert!(kube.node(&worker).await.unwrap().unschedulable);
    kube.set_unschedulable(&worker, false).await.unwrap();
    assert!(!kube.node(&worker).await.unwrap().unschedulable);

    // A reboot: NotReady while down, Ready again with a new boot id.
    let before = n.boot_id.clone();
    cluster.reboot(1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let back = kube
        .wait_node(&worker, deadline, |n| n.boot_id != before)
        .await
        .unwrap();
    assert!(back.ready);

    let e = kube.node("no-such-node").await.unwrap_err();
    assert_eq!(e.kind, KubeErrorKind::NotFound, "{e}");
    let log = cluster.kube_snapshot()["log"].clone();
    let actions: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        // Object writes (Talos's bootstrap manifests) concern no node.
        .filter(|e| e["node"] != "")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["cordon", "uncordon", "node_down"]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_evicts_what_it_should_and_budgets_hold() {
    let cluster = bootstrapped(1, 2).await;
    let kube = connect(&cluster).await;
    cluster.add_workload("default", "web", 2, Some(1)).unwrap();
    let snapshot = cluster.kube_snapshot();
    let web_node = snapshot["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["labels"]["app"] == "web")
        .and_then(|p| p["spec"]["nodeName"].as_str())
        .unwrap()
        .to_string();
    // Let the new pods become Ready, or the budget counts them unhealthy.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let plan = kube.drain_plan(&web_node).await.unwrap();
    let skipped: Vec<&str> = plan.skipped.iter().map(|s| s.reason).collect();
    assert!(
        skipped.iter().all(|r| r.starts_with("DaemonSet")),
        "{skipped:?}"
    );
    assert!(
        plan.evict.iter().any(|p| p.namespace == "default"),
        "{plan:?}"
    );
    assert!(plan.evict.iter().all(|p| {
        p.controller
            .as_deref()
            .is_some_and(|c| c.starts_with("ReplicaSet/"))
    }));

    kube.set_unschedulable(&web_node, true).await.unwrap();
    let report = kube
        .drain(&plan, Instant::now() + Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(report.evicted.len(), plan.evict.len());
    // Every evicted pod came back on the other worker, none on the cordoned node.
    let after = kube.drain_plan(&web_node).await.unwrap();
    assert!(after.evict.is_empty(), "{after:?}");

    // A budget that allows no disruption: the drain stops at its deadline naming pod and budget.
    kube.set_unschedulable(&web_node, false).await.unwrap();
    cluster.add_workload("default", "db", 1, Some(1)).unwrap();
    let db_node = cluster.kube_snapshot()["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["labels"]["app"] == "db")
        .and_then(|p| p["spec"]["nodeName"].as_str())
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let plan = kube.drain_plan(&db_node).await.unwrap();
    let e = kube
        .drain(&plan, Instant::now() + Duration::from_secs(3))
        .await
        .unwrap_err();
    assert_eq!(e.kind, KubeErrorKind::DrainTimeout);
    assert!(
        e.message.contains("PodDisruptionBudget default/db")
            && e.message
                .contains("The disruption budget db needs 1 healthy pods and has 1 currently"),
        "{e}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_of_another_cluster_are_refused() {
    let cluster = bootstrapped(1, 0).await;
    let other = ferro_talos_secrets::Bundle::generate((1, 13)).unwrap();
    let endpoint = format!("https://{}:6443", cluster.endpoint(0).unwrap().ip());
    let deadline = Instant::now() + Duration::from_secs(10);
    connect(&cluster).await;
    let foreign = KubeAccess::from_bundle(&other.certs.k8s.crt, &other.certs.k8s.key, &endpoint)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let e = foreign.node(&node_name(&cluster, 0)).await.unwrap_err();
    assert!(Instant::now() < deadline);
    // The server's certificate is not from the foreign CA: TLS fails before any request.
    assert_eq!(e.kind, KubeErrorKind::Unreachable, "{e}");
    cluster.shutdown().await;
}

/// Talos's `all k8s nodes to report` lists the Nodes through the Kubernetes API
/// (`pkg/cluster/check/kubernetes.go` `K8sAllNodesReportedAssertion` @ v1.13.9), so a health check
/// that passes means a control plane's API server answers: what a gate before a drain relies on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_passes_only_once_the_kubernetes_api_listens() {
    use ferro_talos_proto::cluster::{
        HealthCheckRequest, cluster_service_client::ClusterServiceClient,
    };
    let cluster = bootstrapped(1, 1).await;
    let ep = cluster.endpoint(0).unwrap();
    let mut health = ClusterServiceClient::new(channel(ep, admin()).await.unwrap());
    let mut progress = health
        .health_check(HealthCheckRequest {
            wait_timeout: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
            cluster_info: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut lines = Vec::new();
    while let Some(p) = progress.message().await.unwrap() {
        lines.push(p.message);
    }
    assert!(
        tokio::net::TcpStream::connect((ep.ip(), 6443))
            .await
            .is_ok(),
        "health passed while the Kubernetes API refuses connections: {lines:?}"
    );
}

/// A graceful reset cordons the node and evicts its pods before anything is wiped
/// (`CordonAndDrainNode` in `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`
/// Reset @ v1.13.9), so the workload runs elsewhere; the Node object stays until it is deleted,
/// as `kubectl delete node` deletes it, and the pods bound to it go with it (kubernetes
/// `pkg/controller/podgc/gc_controller.go` `gcOrphaned`). A node in maintenance mode runs no
/// kubelet, so the Node does not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_reset_drains_and_a_deleted_node_stays_deleted() {
    use ferro_talos_proto::machine::{ResetPartitionSpec, ResetRequest};
    let cluster = bootstrapped(1, 2).await;
    let kube = connect(&cluster).await;
    cluster.add_workload("default", "web", 2, None).unwrap();
    let web_nodes = |snapshot: &serde_json::Value| -> Vec<String> {
        snapshot["pods"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect()
    };
    let worker = node_name(&cluster, 1);
    assert!(web_nodes(&cluster.kube_snapshot()).contains(&worker));

    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    m.reset(ResetRequest {
        graceful: true,
        reboot: true,
        system_partitions_to_wipe: ["STATE", "EPHEMERAL"]
            .iter()
            .map(|l| ResetPartitionSpec {
                label: l.to_string(),
                wipe: true,
            })
            .collect(),
        user_disks_to_wipe: vec![],
        mode: 0,
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.node(1).unwrap().maintenance {
        assert!(Instant::now() < deadline, "the reset did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let snapshot = cluster.kube_snapshot();
    let on: Vec<String> = web_nodes(&snapshot);
    assert_eq!(on.len(), 2, "{snapshot}");
    assert!(
        !on.contains(&worker),
        "a pod stayed on the reset node: {on:?}"
    );
    let actions: Vec<(String, String)> = snapshot["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == worker.as_str())
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["pod"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let cordon = actions.iter().position(|(a, _)| a == "cordon");
    let evict = actions.iter().position(|(a, _)| a == "evict");
    let down = actions.iter().position(|(a, _)| a == "node_down");
    assert!(
        cordon < evict && evict < down && cordon.is_some(),
        "{actions:?}"
    );

    // The Node outlives the machine's reset, NotReady, until it is deleted.
    let stale = kube.node(&worker).await.unwrap();
    assert!(stale.unschedulable && !stale.ready, "{stale:?}");
    assert!(kube.delete_node(&worker).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = kube.node(&worker).await.unwrap_err();
    assert_eq!(e.kind, KubeErrorKind::NotFound, "{e}");
    assert!(!kube.delete_node(&worker).await.unwrap(), "already gone");
    cluster.shutdown().await;
}

/// The pods of workload `app` by the node each runs on.
fn pods_of(snapshot: &serde_json::Value, app: &str) -> Vec<(String, String)> {
    snapshot["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// What the API server logged about Node `name`: (action, pod).
fn log_of(cluster: &ferro_talos_sim::Cluster, name: &str) -> Vec<(String, String)> {
    cluster.kube_snapshot()["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == name)
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["pod"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Waits until the Nodes of nodes `indexes` are Ready, so workloads can be scheduled there.
async fn ready(
    kube: &ferro_talos_kube::Kube,
    cluster: &ferro_talos_sim::Cluster,
    indexes: &[usize],
) {
    for i in indexes {
        let deadline = Instant::now() + Duration::from_secs(10);
        kube.wait_node(&node_name(cluster, *i), deadline, |n| n.ready)
            .await
            .unwrap();
    }
}

fn legacy_upgrade() -> ferro_talos_proto::machine::UpgradeRequest {
    ferro_talos_proto::machine::UpgradeRequest {
        image: "ghcr.io/siderolabs/installer:v1.13.9".into(),
        ..Default::default()
    }
}

/// Talos's own drain before a legacy upgrade (`Upgrade` in
/// `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go` @ v1.14.1 and v1.13.9):
/// its controllers cordon the Node for the UPGRADING stage and mark the cordon as theirs
/// (`controllers/k8s/node_cordoned_spec.go`, `node_apply.go` `ApplyCordoned`), and
/// `CordonAndDrainNode` (`v1alpha1_sequencer_tasks.go`) evicts every pod a controller other than
/// a DaemonSet owns, all at once, asking again 5 s after each 429 a budget answers
/// (`pkg/kubernetes/kubernetes.go` `Drain` and `evict`), so a budget that lets one pod go at a
/// time still lets the node be emptied. Static and DaemonSet pods stay. Once the new version
/// runs, Talos lifts its own cordon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn talos_drains_itself_before_a_legacy_upgrade_and_asks_again_where_a_budget_refused() {
    let cluster = bootstrapped(1, 2).await;
    let kube = connect(&cluster).await;
    cluster.set_talos_drain(ferro_talos_sim::DrainTimes {
        cordon: Duration::from_secs(5),
        drain: Duration::from_secs(20),
        retry: Duration::from_millis(300),
    });
    ready(&kube, &cluster, &[1, 2]).await;
    // Four replicas on two workers, two each; the budget lets one go at a time.
    cluster.add_workload("default", "web", 4, Some(3)).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let worker = node_name(&cluster, 1);
    let on_worker: Vec<String> = pods_of(&cluster.kube_snapshot(), "web")
        .into_iter()
        .filter(|(_, node)| *node == worker)
        .map(|(pod, _)| format!("default/{pod}"))
        .collect();
    assert_eq!(on_worker.len(), 2, "{on_worker:?}");
    // The DaemonSet pods (kube-proxy, flannel) the worker runs.
    let daemon_pods: Vec<String> = cluster.kube_snapshot()["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"] == worker.as_str()
                && p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
        })
        .map(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap(),
                p["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert!(!daemon_pods.is_empty());

    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    m.upgrade(legacy_upgrade()).await.unwrap();
    wait_back(&cluster, 1).await;
    assert_eq!(cluster.node(1).unwrap().version, "v1.13.9");

    let log = log_of(&cluster, &worker);
    let at = |action: &str, pod: &str| log.iter().position(|(a, p)| a == action && p == pod);
    let cordon = at("cordon", "").expect("Talos cordoned its Node");
    let down = at("node_down", "").expect("the node rebooted");
    for pod in &on_worker {
        let evicted = at("evict", pod).unwrap_or_else(|| panic!("{pod} stayed: {log:?}"));
        assert!(cordon < evicted && evicted < down, "{log:?}");
    }
    // The second eviction was refused first, then asked for again.
    assert!(log.iter().any(|(a, _)| a == "eviction_blocked"), "{log:?}");
    assert!(
        !log.iter()
            .any(|(a, p)| a == "evict" && daemon_pods.contains(p)),
        "DaemonSet pods stay: {log:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let n = kube
        .wait_node(&worker, deadline, |n| !n.unschedulable)
        .await
        .expect("Talos lifts its own cordon once the node runs again");
    assert!(n.ready);
    let node = &cluster.kube_snapshot()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == worker.as_str())
        .unwrap()
        .clone();
    assert!(
        node["metadata"]["annotations"]
            .get("talos.dev/cordoned")
            .is_none(),
        "{node}"
    );
    cluster.shutdown().await;
}

/// A budget that never lets the pod go holds Talos's drain for `DrainTimeout` only: the
/// refused evictions are logged, asked for again every 5 s, and then the sequence goes on
/// (`Drain` in `pkg/kubernetes/kubernetes.go` @ v1.14.1 returns no error for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_talos_own_drain_for_its_time_then_the_upgrade_goes_on() {
    let cluster = bootstrapped(1, 1).await;
    let kube = connect(&cluster).await;
    cluster.set_talos_drain(ferro_talos_sim::DrainTimes {
        cordon: Duration::from_secs(5),
        drain: Duration::from_millis(1500),
        retry: Duration::from_millis(300),
    });
    ready(&kube, &cluster, &[1]).await;
    cluster.add_workload("default", "db", 1, Some(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let worker = node_name(&cluster, 1);
    let started = Instant::now();
    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    m.upgrade(legacy_upgrade()).await.unwrap();
    wait_back(&cluster, 1).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the drain did not wait for the budget"
    );
    assert_eq!(cluster.node(1).unwrap().version, "v1.13.9");
    let log = log_of(&cluster, &worker);
    let blocked = log.iter().filter(|(a, _)| a == "eviction_blocked").count();
    assert!(blocked >= 3, "asked {blocked} times: {log:?}");
    assert!(!log.iter().any(|(a, _)| a == "evict"), "{log:?}");
    cluster.shutdown().await;
}

/// A drain whose Node never gets cordoned (no API server answers the node) fails
/// `CordonAndDrainNode` after `waitForNodeCordoned`'s minute with the context's error, and with
/// it the upgrade sequence in its first phase (`v1alpha1_controller.go` Run), before anything
/// was stopped: the node keeps its version and services. Talos's wish to cordon outlives the
/// failed sequence (REBOOTING changes no cordon, `node_cordoned_spec.go`), so the Node is
/// cordoned once an API server answers again, and uncordoned when the node boots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_cannot_cordon_fails_the_upgrade_before_anything_stopped() {
    use ferro_talos_proto::machine::ShutdownRequest;
    let cluster = bootstrapped(1, 1).await;
    let kube = connect(&cluster).await;
    let worker = node_name(&cluster, 1);
    ready(&kube, &cluster, &[1]).await;
    cluster.set_talos_drain(ferro_talos_sim::DrainTimes {
        cordon: Duration::from_millis(500),
        ..ferro_talos_sim::DrainTimes::UPSTREAM
    });
    let mut cp = machine(cluster.endpoint(0).unwrap(), admin()).await;
    cp.shutdown(ShutdownRequest { force: true }).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.node(0).unwrap().up {
        assert!(Instant::now() < deadline, "the control plane is still up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let ep = cluster.endpoint(1).unwrap();
    let mut m = machine(ep, admin()).await;
    let boot = cluster.node(1).unwrap().boot_id;
    let r = m.upgrade(legacy_upgrade()).await.unwrap().into_inner();
    let actor = r.messages[0].actor_id.clone();
    let (phases, error) = sequence_outcome(&mut m, &actor).await;
    assert_eq!(
        error,
        "sequence failed: error running phase 1 in upgrade sequence: task 1/1: failed, context deadline exceeded"
    );
    assert_eq!(phases, ["drain"]);
    let n = cluster.node(1).unwrap();
    assert_eq!((n.boot_id, n.version.as_str()), (boot, "v1.13.6"));
    assert_eq!(n.stage, "rebooting");
    let services = m.service_list(()).await.unwrap().into_inner();
    let kubelet = services.messages[0]
        .services
        .iter()
        .find(|s| s.id == "kubelet")
        .unwrap();
    assert_eq!(kubelet.state, "Running");

    cluster.power_on(0).unwrap();
    let kube = connect(&cluster).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    kube.wait_node(&worker, deadline, |n| n.unschedulable)
        .await
        .expect("Talos cordons its Node once the API server answers");
    cluster.reboot(1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    kube.wait_node(&worker, deadline, |n| !n.unschedulable && n.ready)
        .await
        .expect("the next boot lifts Talos's cordon");
    cluster.shutdown().await;
}

/// The phases the sequence of `actor` started, in order, and its failure's message.
async fn sequence_outcome(
    m: &mut ferro_talos_proto::machine::machine_service_client::MachineServiceClient<
        tonic::transport::Channel,
    >,
    actor: &str,
) -> (Vec<String>, String) {
    use ferro_talos_proto::machine::{EventsRequest, PhaseEvent, SequenceEvent, phase_event};
    use prost::Message;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut events = m
            .events(EventsRequest {
                tail_events: -1,
                with_actor_id: actor.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut phases = Vec::new();
        while let Ok(Ok(Some(e))) =
            tokio::time::timeout(Duration::from_millis(200), events.message()).await
        {
            let Some(data) = e.data else { continue };
            if data.type_url.ends_with(".PhaseEvent") {
                let p = PhaseEvent::decode(data.value.as_slice()).unwrap();
                if p.action == phase_event::Action::Start as i32 {
                    phases.push(p.phase);
                }
            } else if data.type_url.ends_with(".SequenceEvent") {
                let s = SequenceEvent::decode(data.value.as_slice()).unwrap();
                if let Some(error) = s.error {
                    return (phases, error.message);
                }
            }
        }
        assert!(Instant::now() < deadline, "no failed sequence for {actor}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// talosctl's drain (`cmd/talosctl/pkg/talos/nodedrain/nodedrain.go` @ v1.13.9: `Force`,
/// `IgnoreAllDaemonSets`) runs kubectl's filters (`k8s.io/kubectl/pkg/drain/filters.go` @
/// v0.36.3, the same in v0.35.0): `daemonSetFilter` looks up the DaemonSet an unfinished pod's
/// controller reference names; one that exists keeps its pod on the node, a 404 means the pod is
/// orphaned, and with `Force` it is evicted (with a warning). Here the garbage collector has not
/// removed the pods of a deleted DaemonSet (fault `orphaned_daemon_pods`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_evicts_the_pod_of_a_daemonset_that_is_gone_and_keeps_the_others() {
    let cluster = bootstrapped(1, 1).await;
    let kube = connect(&cluster).await;
    ready(&kube, &cluster, &[1]).await;
    let worker = node_name(&cluster, 1);
    cluster
        .update_faults(1, |f| f.orphaned_daemon_pods = true)
        .unwrap();
    let agent = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1.0"}]},
            },
        },
    });
    let path = "/apis/apps/v1/namespaces/default/daemonsets/agent?fieldManager=test";
    let (code, _) = cluster.kube_request(
        0,
        "PATCH",
        path,
        Some("application/apply-patch+yaml"),
        agent.to_string().as_bytes(),
    );
    assert_eq!(code, 201);
    let agent_pod = |cluster: &ferro_talos_sim::Cluster| {
        pods_of(&cluster.kube_snapshot(), "agent")
            .into_iter()
            .find(|(_, node)| *node == worker)
            .map(|(pod, _)| pod)
    };
    let pod = agent_pod(&cluster).expect("the DaemonSet runs a pod on the worker");
    let plan = kube.drain_plan(&worker).await.unwrap();
    assert!(
        plan.skipped.iter().any(|s| s.name == pod),
        "a pod of a DaemonSet that exists stays: {plan:?}"
    );

    let (code, _) = cluster.kube_request(
        0,
        "DELETE",
        "/apis/apps/v1/namespaces/default/daemonsets/agent",
        None,
        b"",
    );
    assert_eq!(code, 200);
    assert_eq!(
        agent_pod(&cluster).as_deref(),
        Some(pod.as_str()),
        "orphaned"
    );
    let plan = kube.drain_plan(&worker).await.unwrap();
    let orphan = plan
        .evict
        .iter()
        .find(|p| p.name == pod)
        .unwrap_or_else(|| panic!("the orphaned pod is not evicted: {plan:?}"));
    assert!(orphan.orphaned);
    assert_eq!(orphan.controller.as_deref(), Some("DaemonSet/agent"));
    // kube-proxy's and flannel's DaemonSets exist: their pods stay.
    assert!(
        plan.skipped
            .iter()
            .any(|s| s.reason.starts_with("DaemonSet")),
        "{plan:?}"
    );
    assert!(
        plan.evict.iter().all(|p| p.orphaned
            || !p
                .controller
                .as_deref()
                .unwrap_or("")
                .starts_with("DaemonSet/")),
        "{plan:?}"
    );
    kube.set_unschedulable(&worker, true).await.unwrap();
    let report = kube
        .drain(&plan, Instant::now() + Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        report.evicted.contains(&format!("default/{pod}")),
        "{report:?}"
    );
    assert_eq!(agent_pod(&cluster), None, "nothing recreates it");
    cluster.shutdown().await;
}
