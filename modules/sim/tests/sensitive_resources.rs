//! Resource types upstream marks sensitive: apid serves them to os:admin only and answers every
//! other role PermissionDenied `not authorized`, for Get, List and Watch alike
//! (`internal/app/resources/access.go` `AccessPolicy` @ v1.13.9 and v1.14.1, behind the COSI
//! server machined registers in `internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`
//! `Register`). The simulator serves two such types a node has with secrets in them: the
//! discovery config (the cluster's discovery secret; `pkg/machinery/resources/cluster/config.go`)
//! and the API server's config (`pkg/machinery/resources/k8s/apiserver_config.go`).

mod common;

use base64::Engine;
use common::*;
use ferro_talos_proto::cosi::resource::{
    GetRequest, ListRequest, WatchRequest, state_client::StateClient,
};
use serde_json::Value;
use tonic::Code;

const DISCOVERY: (&str, &str, &str) = ("config", "DiscoveryConfigs.cluster.talos.dev", "cluster");
const API_SERVER: (&str, &str, &str) = (
    "controlplane",
    "APIServerConfigs.kubernetes.talos.dev",
    "kube-apiserver",
);

fn get((namespace, ty, id): (&str, &str, &str)) -> GetRequest {
    GetRequest {
        namespace: namespace.into(),
        r#type: ty.into(),
        id: id.into(),
        options: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sensitive_resources_are_served_to_admins_only() {
    let cluster = start(1, 0).await;
    configure(&cluster, 0, &CP).await;
    let ep = cluster.endpoint(0).unwrap();

    // An admin reads the discovery config, the cluster's secret in it as bytes.
    let mut admin_state = StateClient::new(channel(ep, admin()).await.unwrap());
    let got = admin_state
        .get(get(DISCOVERY))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let spec: Value = serde_saphyr::from_str(&got.spec.unwrap().yaml_spec).unwrap();
    let secret = base64::engine::general_purpose::STANDARD
        .decode(&SAMPLE.bundle.cluster.secret)
        .unwrap();
    assert_eq!(spec["serviceEncryptionKey"], serde_json::json!(secret));
    assert_eq!(spec["serviceClusterID"], SAMPLE.bundle.cluster.id.as_str());
    assert!(
        admin_state
            .get(get(API_SERVER))
            .await
            .unwrap()
            .into_inner()
            .resource
            .is_some()
    );

    // Every other role, and a client in maintenance mode (reader), is refused.
    let reader = channel(ep, client_tls(&["os:reader"])).await.unwrap();
    for which in [DISCOVERY, API_SERVER] {
        let mut state = StateClient::new(reader.clone());
        let e = state.get(get(which)).await.unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (Code::PermissionDenied, "not authorized"),
            "{}",
            which.1
        );
        let e = state
            .list(ListRequest {
                namespace: which.0.into(),
                r#type: which.1.into(),
                options: None,
            })
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (Code::PermissionDenied, "not authorized")
        );
        let e = state
            .watch(WatchRequest {
                namespace: which.0.into(),
                r#type: which.1.into(),
                id: Some(which.2.into()),
                options: None,
                api_version: 1,
            })
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (Code::PermissionDenied, "not authorized")
        );
    }
    cluster.shutdown().await;
}

/// In maintenance mode every client is a reader: refused as well (and there is no config the
/// discovery settings could come from).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_in_maintenance_refuses_them_too() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    let mut state = StateClient::new(channel(ep, insecure()).await.unwrap());
    let e = state.get(get(DISCOVERY)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not authorized")
    );
    cluster.shutdown().await;
}

/// The resource definitions say which types are sensitive, and every role may read them
/// (`ResourceDefinitions.meta.cosi.dev` is not sensitive itself; id the type in lower case:
/// cosi-project/runtime `pkg/resource/meta/resource_definition.go`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_definitions_tell_which_types_are_sensitive() {
    let cluster = start(1, 0).await;
    let ep = cluster.endpoint(0).unwrap();
    let mut state = StateClient::new(channel(ep, insecure()).await.unwrap());
    let definition = |ty: &str| get(("meta", "ResourceDefinitions.meta.cosi.dev", ty));
    for (ty, namespace, sensitive) in [
        ("discoveryconfigs.cluster.talos.dev", "config", true),
        (
            "apiserverconfigs.kubernetes.talos.dev",
            "controlplane",
            true,
        ),
        ("machineconfigs.config.talos.dev", "config", true),
        ("disks.block.talos.dev", "runtime", false),
        ("nodenames.kubernetes.talos.dev", "k8s", false),
    ] {
        let rd = state
            .get(definition(ty))
            .await
            .unwrap()
            .into_inner()
            .resource
            .unwrap();
        let spec: Value = serde_saphyr::from_str(&rd.spec.unwrap().yaml_spec).unwrap();
        assert_eq!(
            spec["type"].as_str().map(str::to_lowercase).as_deref(),
            Some(ty)
        );
        assert_eq!(spec["defaultNamespace"], namespace, "{ty}");
        assert_eq!(
            spec.get("sensitivity").and_then(Value::as_str) == Some("sensitive"),
            sensitive,
            "{ty}: {spec}"
        );
    }
    let e = state
        .get(definition("widgets.example.dev"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    cluster.shutdown().await;
}
