//! The modules that reach Kubernetes, against a cluster of Talos 1.14 nodes whose configs are
//! rendered for the 1.14 contract: each Kubernetes component's settings in its own document
//! (`KubeletConfig`, `KubeAPIServerConfig`, `KubeControllerManagerConfig`, `KubeSchedulerConfig`,
//! `KubeProxyConfig`) and the cluster endpoint in `KubeClusterConfig`, none of them in the v1alpha1
//! document (`pkg/machinery/config/types/k8s/*.go` @ v1.14.1, whose `V1Alpha1ConflictValidate`
//! refuses both shapes at once). The modules must read and patch where the config keeps each
//! setting, as talosctl 1.14 does (`pkg/cluster/kubernetes/talos_managed.go`, `kubelet.go` and
//! `pkg/machinery/config/generate/stdpatches/` @ v1.14.1).

mod common;

use common::{Kind, Sim, four_checks, run_ok};
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const CONFIG: &Module = named("talos_config");
const APPLY: &Module = named("talos_apply");
const BOOTSTRAP: &Module = named("talos_bootstrap");
const HEALTH: &Module = named("talos_health");
const UPGRADE: &Module = named("talos_upgrade");
const KUBERNETES_UPGRADE: &Module = named("talos_kubernetes_upgrade");
const RESET: &Module = named("talos_reset");

/// The GA release the nodes run, the newest 1.14 the Go module proxy serves.
const TALOS: &str = "v1.14.1";
const KUBERNETES_BEFORE: &str = "1.36.2";
const KUBERNETES_AFTER: &str = "1.36.3";

/// talos_apply's `render` for node `index`, for the 1.14 contract.
fn render(sim: &Sim, index: usize) -> Value {
    let role = sim.cluster().nodes()[index].role.clone();
    json!({
        "machine_type": role,
        "cluster_name": "k114",
        "cluster_endpoint": format!("https://{}:6443", sim.node(0)),
        "install_disk": "/dev/vda",
        "kubernetes_version": KUBERNETES_BEFORE,
        "talos_version": "v1.14",
    })
}

/// Every node configured with its 1.14 render, etcd bootstrapped, the cluster healthy.
fn bootstrapped(sim: &Sim) -> String {
    let secrets = sim.path("secrets.yaml").display().to_string();
    run_ok(
        CONFIG,
        &json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "k114"}),
    );
    for index in 0..sim.cluster().nodes().len() {
        run_ok(
            APPLY,
            &json!({"node": sim.node(index), "secrets_file": secrets, "render": render(sim, index)}),
        );
    }
    run_ok(
        BOOTSTRAP,
        &json!({"node": sim.node(0), "secrets_file": secrets}),
    );
    run_ok(HEALTH, &health_args(sim, &secrets));
    secrets
}

fn health_args(sim: &Sim, secrets: &str) -> Value {
    let (control_planes, workers): (Vec<_>, Vec<_>) = sim
        .cluster()
        .nodes()
        .into_iter()
        .partition(|n| n.role == "controlplane");
    let addresses = |nodes: Vec<ferro_talos_sim::NodeInfo>| -> Vec<String> {
        nodes.iter().map(|n| n.address.to_string()).collect()
    };
    json!({
        "node": sim.node(0), "secrets_file": secrets, "timeout": 60,
        "control_plane_nodes": addresses(control_planes), "worker_nodes": addresses(workers),
    })
}

/// The Kubernetes API's view: each Node's kubelet version, each static pod's image.
fn kubelet_versions(sim: &Sim) -> Vec<String> {
    sim.cluster().kube_snapshot()["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            n["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

fn static_pod_images(sim: &Sim) -> Vec<String> {
    sim.cluster().kube_snapshot()["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter(|p| p["metadata"]["annotations"]["talos.dev/config-version"].is_string())
        .map(|p| {
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// `talosctl upgrade-k8s` against 1.14 configs: each image is patched in its document
/// (`stdpatches.WithKubeletImage`, `WithKubeAPIServerImage`, ... chosen by
/// `GuessVersionContract*`, `pkg/machinery/config/generate/stdpatches/guess.go` @ v1.14.1), and
/// the Kubernetes API is found through `KubeClusterConfig.endpoint`.
///
/// A 1.14 node renders each static pod from its `final-<component>` config resource and stamps
/// that one's version on the pod (`internal/app/machined/pkg/controllers/k8s/
/// control_plane_final.go`, `control_plane_static_pod.go` @ v1.14.1); the counter is its own, so
/// talosctl 1.14.1 waits on it (`watchControlPlaneConfig` in `talos_managed.go` @ v1.14.1). A
/// change of the service account's accepted audiences before the upgrade moves only the final
/// API server config (`controllers/secrets/root.go` @ v1.14.1), so a wait on the plain resource
/// would never see the pod it expects.
#[test]
fn talos_kubernetes_upgrade_moves_a_1_14_cluster_through_its_documents() {
    let sim = Sim::start_version(1, 1, TALOS);
    let secrets = bootstrapped(&sim);
    let mut diverged =
        json!({"node": sim.node(0), "secrets_file": secrets, "render": render(&sim, 0)});
    diverged["render"]["patches"] = json!([{
        "apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig",
        "accepted": {"audiences": ["https://extra.example"]},
    }]);
    run_ok(APPLY, &diverged);
    let args = json!({
        "node": sim.node(0), "secrets_file": secrets, "kubernetes_version": KUBERNETES_AFTER,
        "control_plane_nodes": [sim.node(0)], "worker_nodes": [sim.node(1)],
        "timeout": 60, "manifests_timeout": 60,
    });
    let runs = four_checks(&sim, KUBERNETES_UPGRADE, &args, Kind::Converges);
    let moved: Vec<&str> = runs.real["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["changed"] == json!(true))
        .map(|s| s["component"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        moved,
        [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kube-proxy",
            "kubelet",
            "kubelet"
        ],
        "{}",
        runs.real
    );
    assert_eq!(kubelet_versions(&sim), ["v1.36.3", "v1.36.3"]);
    let images = static_pod_images(&sim);
    assert_eq!(images.len(), 3, "{images:?}");
    assert!(images.iter().all(|i| i.ends_with(":v1.36.3")), "{images:?}");
}

/// `talos_upgrade kubernetes_version` on one 1.14 control plane: the same documents, the same
/// place for each image as the cluster-wide upgrade (`stdpatches/stdpatches.go` @ v1.14.1).
#[test]
fn talos_upgrade_moves_the_kubernetes_of_a_1_14_node() {
    let sim = Sim::start_version(1, 0, TALOS);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(0), "secrets_file": secrets, "kubernetes_version": KUBERNETES_AFTER,
        "timeout": 60,
    });
    let runs = four_checks(&sim, UPGRADE, &args, Kind::Converges);
    let components = &runs.check["kubernetes"]["components"];
    assert_eq!(
        components["kubelet"]["target_image"], "ghcr.io/siderolabs/kubelet:v1.36.3",
        "{}",
        runs.check
    );
    assert_eq!(
        components.as_object().map(|c| c.len()),
        Some(5),
        "{components}"
    );
    // The module waits for the kubelet service, not for the Node: it reports the new version
    // once the kubelet is back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while kubelet_versions(&sim) != ["v1.36.3"] && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(kubelet_versions(&sim), ["v1.36.3"]);
    assert!(
        static_pod_images(&sim)
            .iter()
            .all(|i| i.ends_with(":v1.36.3")),
        "{:?}",
        static_pod_images(&sim)
    );
}

/// The drain before an OS upgrade reaches the API server at `KubeClusterConfig.endpoint` with an
/// admin certificate from the bundle (the 1.14 shape of `cluster.controlPlane.endpoint`:
/// `types/k8s/cluster.go` @ v1.14.1), cordons, drains and uncordons the Node.
#[test]
fn talos_upgrade_drains_a_1_14_node_through_its_cluster_endpoint() {
    let sim = Sim::start_version(1, 1, "v1.14.0");
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "talos_version": TALOS,
        "timeout": 120, "drain_timeout": 60,
    });
    let runs = four_checks(&sim, UPGRADE, &args, Kind::Converges);
    assert_eq!(sim.cluster().nodes()[1].version, TALOS);
    let drain = &runs.real["drain"];
    assert!(drain["node_name"].is_string(), "{}", runs.real);
    assert_eq!(drain["uncordoned"], json!(true), "{}", runs.real);
}

/// `delete_kubernetes_node` finds the API server of a 1.14 config in `KubeClusterConfig` and
/// deletes the reset node's Node, so the health check of the nodes that stay passes
/// (`pkg/cluster/check/kubernetes.go` @ v1.14.1 matches Nodes and nodes both ways).
#[test]
fn talos_reset_deletes_the_node_of_a_1_14_worker() {
    let sim = Sim::start_version(1, 1, TALOS);
    let secrets = bootstrapped(&sim);
    let args = json!({
        "node": sim.node(1), "secrets_file": secrets, "confirm": "reset", "timeout": 60,
        "delete_kubernetes_node": true,
    });
    let runs = four_checks(&sim, RESET, &args, Kind::Converges);
    assert_eq!(
        runs.real["kubernetes_node"]["deleted"],
        json!(true),
        "{}",
        runs.real
    );
    assert!(sim.cluster().nodes()[1].maintenance);
    let mut health = health_args(&sim, &secrets);
    health["worker_nodes"] = json!([]);
    run_ok(HEALTH, &health);
}
