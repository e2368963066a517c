//! The bootstrap manifests: the COSI resources a control plane renders, Talos's create-only
//! apply of them at bootstrap (with its inventory), server-side apply and discovery on the
//! simulated API server, and the DaemonSet and Deployment rollouts that follow the objects.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferro_talos_proto::cosi::resource::{ListRequest, state_client::StateClient};
use ferro_talos_proto::machine::apply_configuration_request::Mode;
use ferro_talos_proto::resource::k8s::ManifestSpec;
use prost::Message;
use serde_json::{Value, json};

fn get(cluster: &ferro_talos_sim::Cluster, path: &str) -> (u16, Value) {
    cluster.kube_request(0, "GET", path, None, b"")
}

fn apply(cluster: &ferro_talos_sim::Cluster, path: &str, object: &Value) -> (u16, Value) {
    cluster.kube_request(
        0,
        "PATCH",
        path,
        Some("application/apply-patch+yaml"),
        object.to_string().as_bytes(),
    )
}

fn log_subjects(cluster: &ferro_talos_sim::Cluster, action: &str) -> Vec<String> {
    cluster.kube_snapshot()["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == action)
        .filter_map(|e| e["pod"].as_str().map(String::from))
        .collect()
}

async fn manifests(
    cluster: &ferro_talos_sim::Cluster,
    roles: &[&str],
) -> Vec<(String, String, ManifestSpec)> {
    let ch = channel(cluster.endpoint(0).unwrap(), client_tls(roles))
        .await
        .unwrap();
    let mut stream = StateClient::new(ch)
        .list(ListRequest {
            namespace: "controlplane".into(),
            r#type: "Manifests.kubernetes.talos.dev".into(),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        let r = r.resource.unwrap();
        let md = r.metadata.unwrap();
        let spec = ManifestSpec::decode(r.spec.unwrap().proto_spec.as_slice()).unwrap();
        out.push((md.id, md.version, spec));
    }
    out
}

fn proxy_image(spec: &ManifestSpec) -> String {
    let ds = spec.items[0].object.as_ref().unwrap();
    let spec = match &ds.fields["spec"].kind {
        Some(prost_types::value::Kind::StructValue(s)) => s,
        _ => panic!("no spec"),
    };
    let template = match &spec.fields["template"].kind {
        Some(prost_types::value::Kind::StructValue(s)) => s,
        _ => panic!("no template"),
    };
    let pod = match &template.fields["spec"].kind {
        Some(prost_types::value::Kind::StructValue(s)) => s,
        _ => panic!("no pod spec"),
    };
    let containers = match &pod.fields["containers"].kind {
        Some(prost_types::value::Kind::ListValue(l)) => l,
        _ => panic!("no containers"),
    };
    match &containers.values[0].kind {
        Some(prost_types::value::Kind::StructValue(c)) => match &c.fields["image"].kind {
            Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
            _ => panic!("no image"),
        },
        _ => panic!("no container"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn talos_creates_its_manifests_once_and_a_config_change_does_not_update_them() {
    let cluster = bootstrapped(1, 1).await;
    // A reader sees the manifests (not sensitive), sorted by id.
    let listed = manifests(&cluster, &["os:reader"]).await;
    let ids: Vec<&str> = listed.iter().map(|(id, ..)| id.as_str()).collect();
    assert_eq!(ids.first(), Some(&"00-kubelet-bootstrapping-token"));
    assert!(ids.contains(&"10-kube-proxy"), "{ids:?}");
    let proxy = listed
        .iter()
        .find(|(id, ..)| id == "10-kube-proxy")
        .unwrap();
    assert_eq!(proxy.1, "1");
    let configured = proxy_image(&proxy.2);

    let (code, ds) = get(
        &cluster,
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
    );
    assert_eq!(code, 200, "{ds}");
    assert_eq!(
        ds["metadata"]["annotations"]["config.k8s.io/owning-inventory"],
        "talos-bootstrap-manifests-inventory"
    );
    assert_eq!(ds["metadata"]["managedFields"][0]["manager"], "talos");
    assert_eq!(ds["metadata"]["managedFields"][0]["operation"], "Apply");
    assert_eq!(ds["metadata"]["generation"], 1);
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        configured.as_str()
    );
    let (_, inventory) = get(
        &cluster,
        "/api/v1/namespaces/kube-system/configmaps/talos-bootstrap-manifests-inventory",
    );
    let data = inventory["data"].as_object().unwrap();
    for key in [
        "kube-system_kube-proxy_apps_DaemonSet",
        "kube-system_kube-proxy__ServiceAccount",
        "_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding",
        "kube-system_coredns_apps_Deployment",
    ] {
        assert_eq!(data.get(key), Some(&json!("")), "{key} in {data:?}");
    }
    let applied = log_subjects(&cluster, "apply");
    assert!(
        applied.contains(&"DaemonSet/kube-system/kube-proxy".to_string()),
        "{applied:?}"
    );

    // kube-proxy pods run the DaemonSet's image on both nodes.
    let pods = cluster.kube_snapshot()["pods"].clone();
    let proxies: Vec<&Value> = pods
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["labels"]["k8s-app"] == "kube-proxy")
        .collect();
    assert_eq!(proxies.len(), 2);
    assert!(
        proxies
            .iter()
            .all(|p| p["spec"]["containers"][0]["image"] == configured.as_str())
    );

    // A new proxy image in the config re-renders the resource, not the DaemonSet.
    let changed = CP.replace(&configured, "registry.k8s.io/kube-proxy:v1.99.0");
    assert_ne!(changed, *CP);
    let mut m = machine(cluster.endpoint(0).unwrap(), admin()).await;
    m.apply_configuration(apply_req(&changed, Mode::NoReboot, false))
        .await
        .unwrap();
    let listed = manifests(&cluster, &["os:admin"]).await;
    let proxy = listed
        .iter()
        .find(|(id, ..)| id == "10-kube-proxy")
        .unwrap();
    assert_eq!(proxy.1, "2");
    assert_eq!(proxy_image(&proxy.2), "registry.k8s.io/kube-proxy:v1.99.0");
    let (_, ds) = get(
        &cluster,
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
    );
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        configured.as_str()
    );
    assert_eq!(ds["metadata"]["generation"], 1);
    cluster.shutdown().await;
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": data})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_keeps_resource_versions_on_no_ops() {
    let cluster = bootstrapped(1, 0).await;
    let path = "/api/v1/namespaces/default/configmaps/app";
    let cm = config_map("app", json!({"a": "1"}));

    let (code, e) = apply(&cluster, path, &cm);
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")), "{e}");
    let (code, dry) = apply(
        &cluster,
        &format!("{path}?fieldManager=talos&force=true&dryRun=All"),
        &cm,
    );
    assert_eq!(code, 201, "{dry}");
    assert!(dry["metadata"].get("resourceVersion").is_none(), "{dry}");
    assert_eq!(get(&cluster, path).0, 404);

    let (code, created) = apply(
        &cluster,
        &format!("{path}?fieldManager=talos&force=true"),
        &cm,
    );
    assert_eq!(code, 201);
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, again) = apply(
        &cluster,
        &format!("{path}?fieldManager=talos&force=true"),
        &cm,
    );
    assert_eq!(code, 200);
    assert_eq!(again["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(
        again["metadata"]["managedFields"],
        created["metadata"]["managedFields"]
    );
    let (_, dry) = apply(
        &cluster,
        &format!("{path}?fieldManager=talos&force=true&dryRun=All"),
        &config_map("app", json!({"a": "2"})),
    );
    assert_eq!(dry["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(dry["data"]["a"], "2");
    let (_, changed) = apply(
        &cluster,
        &format!("{path}?fieldManager=talos&force=true"),
        &config_map("app", json!({"b": "2"})),
    );
    assert_ne!(changed["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(changed["data"], json!({"b": "2"}));

    // A namespaced object in a missing namespace; a DaemonSet's generation.
    let (code, e) = apply(
        &cluster,
        "/api/v1/namespaces/nope/configmaps/x?fieldManager=talos",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "nope"}}),
    );
    assert_eq!(
        (code, e["message"].as_str()),
        (404, Some("namespaces \"nope\" not found"))
    );
    let ds_path =
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=talos&force=true";
    let (_, live) = get(
        &cluster,
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
    );
    let mut ds = live.clone();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
    ] {
        ds["metadata"].as_object_mut().unwrap().remove(k);
    }
    ds.as_object_mut().unwrap().remove("status");
    // What Talos applied, without the server's defaults: applying those would make talos own
    // them too, a change of managedFields and so a new resourceVersion.
    ds["spec"]
        .as_object_mut()
        .unwrap()
        .remove("revisionHistoryLimit");
    ds["spec"]["updateStrategy"]["rollingUpdate"]
        .as_object_mut()
        .unwrap()
        .remove("maxSurge");
    let (_, same) = apply(&cluster, ds_path, &ds);
    assert_eq!(
        same["metadata"]["resourceVersion"],
        live["metadata"]["resourceVersion"]
    );
    assert_eq!(same["metadata"]["generation"], 1);
    ds["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.k8s.io/kube-proxy:v1.99.0");
    let (code, newer) = apply(&cluster, ds_path, &ds);
    assert_eq!(code, 200);
    assert_eq!(newer["metadata"]["generation"], 2);

    // The inventory's unconditional PUT, and DELETE.
    let inv = "/api/v1/namespaces/kube-system/configmaps/talos-bootstrap-manifests-inventory";
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "talos-bootstrap-manifests-inventory", "namespace": "kube-system"}, "data": {"x_y__Kind": ""}});
    let (code, put) = cluster.kube_request(
        0,
        "PUT",
        inv,
        Some("application/json"),
        body.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{put}");
    assert_eq!(put["data"], json!({"x_y__Kind": ""}));
    let (code, gone) = cluster.kube_request(0, "DELETE", path, None, b"");
    assert_eq!((code, gone["status"].as_str()), (200, Some("Success")));
    assert_eq!(get(&cluster, path).0, 404);
    let written = log_subjects(&cluster, "delete");
    assert_eq!(written, ["ConfigMap/default/app"]);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_groups_and_resources() {
    let cluster = bootstrapped(1, 0).await;
    let (code, core) = get(&cluster, "/api/v1");
    assert_eq!(code, 200);
    assert_eq!(core["kind"], "APIResourceList");
    let (_, groups) = get(&cluster, "/apis");
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"apps") && names.contains(&"rbac.authorization.k8s.io"),
        "{names:?}"
    );
    let (_, apps) = get(&cluster, "/apis/apps/v1");
    assert!(
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "daemonsets" && r["namespaced"] == true)
    );
    // A CRD's resources are served once it is stored.
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}});
    let (code, _) = apply(
        &cluster,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com?fieldManager=talos",
        &crd,
    );
    assert_eq!(code, 201);
    let (code, list) = get(&cluster, "/apis/example.com/v1");
    assert_eq!(code, 200, "{list}");
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1}});
    let (code, made) = apply(
        &cluster,
        "/apis/example.com/v1/namespaces/default/widgets/w?fieldManager=talos",
        &w,
    );
    assert_eq!((code, &made["metadata"]["generation"]), (201, &json!(1)));
    let (_, crd) = get(
        &cluster,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
    );
    assert_eq!(crd["status"]["conditions"][1]["type"], "Established");
    cluster.shutdown().await;
}

/// Waits until the DaemonSet's status satisfies `done`.
async fn wait_daemonset(
    cluster: &ferro_talos_sim::Cluster,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (_, ds) = get(
            cluster,
            "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
        );
        if done(&ds["status"]) || Instant::now() > deadline {
            return ds;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rolled_out(s: &Value) -> bool {
    let desired = s["desiredNumberScheduled"].as_u64().unwrap_or(u64::MAX);
    [
        "updatedNumberScheduled",
        "numberAvailable",
        "numberReady",
        "currentNumberScheduled",
    ]
    .iter()
    .all(|k| s[k].as_u64().unwrap_or(0) >= desired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_rollout_reports_its_progress_and_can_be_stuck() {
    let cluster = bootstrapped(1, 1).await;
    let ds = wait_daemonset(&cluster, Duration::from_secs(5), rolled_out).await;
    assert!(rolled_out(&ds["status"]), "{}", ds["status"]);
    assert_eq!(ds["status"]["desiredNumberScheduled"], 2);
    let path =
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=talos&force=true";
    let mut config = ds.clone();
    config.as_object_mut().unwrap().remove("status");
    config["metadata"] = json!({"name": "kube-proxy", "namespace": "kube-system", "labels": ds["metadata"]["labels"]});
    config["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.k8s.io/kube-proxy:v1.99.0");
    let (_, applied) = apply(&cluster, path, &config);
    assert_eq!(applied["metadata"]["generation"], 2);
    let (_, now) = get(
        &cluster,
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
    );
    assert_eq!(now["status"]["observedGeneration"], 2);
    assert_eq!(now["status"]["updatedNumberScheduled"], 2);
    assert!(
        now["status"]["numberReady"].as_u64().unwrap() < 2,
        "{}",
        now["status"]
    );
    let ds = wait_daemonset(&cluster, Duration::from_secs(5), rolled_out).await;
    assert!(rolled_out(&ds["status"]), "{}", ds["status"]);
    let pods = cluster.kube_snapshot()["pods"].clone();
    assert!(
        pods.as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["labels"]["k8s-app"] == "kube-proxy")
            .all(|p| p["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-proxy:v1.99.0")
    );

    // Under the fault the worker's new pod never becomes Ready.
    cluster
        .update_faults(1, |f| f.daemonset_rollout_stuck = true)
        .unwrap();
    config["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.k8s.io/kube-proxy:v1.99.1");
    apply(&cluster, path, &config);
    let ds = wait_daemonset(&cluster, Duration::from_secs(2), rolled_out).await;
    assert!(!rolled_out(&ds["status"]), "{}", ds["status"]);
    assert_eq!(ds["status"]["numberReady"], 1);

    // Deleted, its pods go.
    let (code, _) = cluster.kube_request(
        0,
        "DELETE",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
        None,
        b"",
    );
    assert_eq!(code, 200);
    let pods = cluster.kube_snapshot()["pods"].clone();
    assert!(
        !pods
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["labels"]["k8s-app"] == "kube-proxy")
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coredns_follows_its_deployment() {
    let cluster = bootstrapped(1, 1).await;
    let path = "/apis/apps/v1/namespaces/kube-system/deployments/coredns";
    let (_, live) = get(&cluster, path);
    let mut config = live.clone();
    config.as_object_mut().unwrap().remove("status");
    config["metadata"] = json!({"name": "coredns", "namespace": "kube-system"});
    config["spec"]["replicas"] = json!(3);
    config["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.k8s.io/coredns/coredns:v9.9.9");
    let (code, _) = apply(
        &cluster,
        &format!("{path}?fieldManager=talos&force=true"),
        &config,
    );
    assert_eq!(code, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let (_, d) = get(&cluster, path);
        let s = d["status"].clone();
        let done = s["readyReplicas"] == 3
            && s["updatedReplicas"] == 3
            && s["conditions"][1]["reason"] == "NewReplicaSetAvailable";
        if done || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        status["conditions"][1]["reason"], "NewReplicaSetAvailable",
        "{status}"
    );
    assert_eq!(status["observedGeneration"], 2);
    let pods = cluster.kube_snapshot()["pods"].clone();
    let dns: Vec<&Value> = pods
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["labels"]["k8s-app"] == "kube-dns")
        .collect();
    assert_eq!(dns.len(), 3);
    assert!(
        dns.iter().all(
            |p| p["spec"]["containers"][0]["image"] == "registry.k8s.io/coredns/coredns:v9.9.9"
        )
    );
    cluster.shutdown().await;
}
