//! Which installer images a simulated node can pull, as a real node finds them in their registries.
//!
//! Talos stopped publishing its stock installer at `ghcr.io/siderolabs/installer` with 1.14
//! (commit cf6065238, in v1.14.0-alpha.1, took it out of the `push` target of the `Makefile`; the
//! v1.14.0 release notes, "Default Installer Image", say the image "is no longer published with
//! releases"). From 1.14 the stock installer is the Image Factory's of the empty schematic,
//! `factory.talos.dev/metal-installer/<id>:<tag>` (`pkg/images/images.go` @ v1.14.1). A node asked
//! to pull a reference that does not exist answers NotFound, `error pulling image: …`
//! (`internal/app/images/images.go` Pull) around `failed to pull image "<ref>": …`
//! (`internal/pkg/containers/image/pull.go` pullInternal) @ v1.14.1; the legacy Upgrade answers
//! `error validating installer image %q: %w` (`internal/app/machined/internal/server/v1alpha1/
//! v1alpha1_server.go` Upgrade) with code Unknown. docs/talos-fidelity.md has the rows.

mod common;

use common::*;
use ferro_talos_proto::machine::image_service_client::ImageServiceClient;
use ferro_talos_proto::machine::*;
use tonic::Code;
use tonic::transport::Channel;

const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// The pull's outcome: the name it answered, or the error.
async fn pull(ch: &Channel, image: &str) -> Result<String, tonic::Status> {
    let mut stream = ImageServiceClient::new(ch.clone())
        .pull(ImageServicePullRequest {
            containerd: None,
            image_ref: image.into(),
        })
        .await?
        .into_inner();
    let mut name = String::new();
    while let Some(item) = stream.message().await? {
        if let Some(image_service_pull_response::Response::Name(n)) = item.response {
            name = n;
        }
    }
    Ok(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_published_installers_can_be_pulled() {
    let cluster = bootstrapped(1, 1).await;
    let ch = channel(cluster.endpoint(1).unwrap(), admin())
        .await
        .unwrap();

    for missing in [
        "ghcr.io/siderolabs/installer:v1.14.1",
        "ghcr.io/siderolabs/installer:v1.14.0",
        "ghcr.io/siderolabs/installer:v1.14.0-rc.1",
        "ghcr.io/siderolabs/installer:v1.15.0-alpha.0",
    ] {
        let e = pull(&ch, missing).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{missing}: {e:?}");
        assert!(
            e.message().starts_with(&format!(
                "error pulling image: failed to pull image \"{missing}\": "
            )),
            "{missing}: {}",
            e.message()
        );
    }
    let factory = format!("factory.talos.dev/metal-installer/{VANILLA}");
    for published in [
        "ghcr.io/siderolabs/installer:v1.13.9".to_string(),
        // The last 1.14 pre-release before the ghcr push was dropped.
        "ghcr.io/siderolabs/installer:v1.14.0-alpha.0".to_string(),
        format!("{factory}:v1.14.1"),
        format!("{factory}:v1.13.9"),
        format!("factory.talos.dev/installer/{VANILLA}:v1.14.1"),
        "registry.local:5000/talos/installer:v1.14.1".to_string(),
    ] {
        assert_eq!(pull(&ch, &published).await.unwrap(), published);
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_upgrade_to_an_unpublished_installer_is_refused_before_the_answer() {
    let cluster = bootstrapped(1, 1).await;
    let boot = cluster.node(1).unwrap().boot_id;
    let mut m = machine(cluster.endpoint(1).unwrap(), admin()).await;
    let image = "ghcr.io/siderolabs/installer:v1.14.1";
    let e = m
        .upgrade(UpgradeRequest {
            image: image.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown, "{e:?}");
    assert!(
        e.message().starts_with(&format!(
            "error validating installer image \"{image}\": failed to pull image \"{image}\": "
        )),
        "{}",
        e.message()
    );
    let n = cluster.node(1).unwrap();
    assert_eq!((n.boot_id, n.version.as_str()), (boot, "v1.13.6"));
    cluster.shutdown().await;
}
