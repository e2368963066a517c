//! `machine.ImageService` (api.md §6.2): a per-node "containerd store" of pulled references.

use std::time::Duration;

use ferro_talos_proto::machine::image_service_pull_response::Response as PullResp;
use ferro_talos_proto::machine::image_service_server::ImageService;
use ferro_talos_proto::machine::*;
use tonic::{Request, Response, Status};

use crate::registry;
use crate::routing::{BoxStream, Ctx};

pub struct Image(pub Ctx);

#[tonic::async_trait]
impl ImageService for Image {
    type ListStream = BoxStream<ImageServiceListResponse>;
    async fn list(
        &self,
        request: Request<ImageServiceListRequest>,
    ) -> Result<Response<Self::ListStream>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/machine.ImageService/List")?;
        let st = self.0.shared.lock();
        let items: Vec<Result<ImageServiceListResponse, Status>> = st.nodes[t.idx]
            .images
            .iter()
            .map(|name| {
                use sha2::Digest;
                Ok(ImageServiceListResponse {
                    name: name.clone(),
                    digest: format!(
                        "sha256:{}",
                        hex::encode(sha2::Sha256::digest(name.as_bytes()))
                    ),
                    size: 100 * 1024 * 1024,
                    created_at: None,
                    labels: Default::default(),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }

    type PullStream = BoxStream<ImageServicePullResponse>;
    async fn pull(
        &self,
        request: Request<ImageServicePullRequest>,
    ) -> Result<Response<Self::PullStream>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/machine.ImageService/Pull")?;
        let image = request.get_ref().image_ref.trim().to_string();
        if image.is_empty() {
            return Err(Status::invalid_argument("image reference is required"));
        }
        // `internal/app/images/images.go` Pull @ v1.14.1: a reference its registry does not have
        // is NotFound, before any progress is streamed.
        if registry::missing(&image) {
            return Err(Status::not_found(format!(
                "error pulling image: {}",
                registry::pull_error(&image)
            )));
        }
        self.0.shared.lock().nodes[t.idx]
            .images
            .insert(image.clone());
        let progress = |status: image_service_pull_layer_progress::Status, offset: i64| {
            Ok(ImageServicePullResponse {
                response: Some(PullResp::PullProgress(ImageServicePullProgress {
                    layer_id:
                        "sha256:0000000000000000000000000000000000000000000000000000000000000001"
                            .into(),
                    progress: Some(ImageServicePullLayerProgress {
                        status: status as i32,
                        elapsed: prost_types::Duration::try_from(Duration::from_millis(10)).ok(),
                        offset,
                        total: 1024,
                    }),
                })),
            })
        };
        use image_service_pull_layer_progress::Status as S;
        let out = vec![
            progress(S::Downloading, 0),
            progress(S::DownloadComplete, 1024),
            progress(S::Extracting, 0),
            progress(S::ExtractComplete, 1024),
            Ok(ImageServicePullResponse {
                response: Some(PullResp::Name(image)),
            }),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(out))))
    }

    async fn remove(
        &self,
        request: Request<ImageServiceRemoveRequest>,
    ) -> Result<Response<()>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/machine.ImageService/Remove")?;
        let image = request.get_ref().image_ref.trim().to_string();
        if !self.0.shared.lock().nodes[t.idx].images.remove(&image) {
            return Err(Status::not_found(format!("image {image:?}: not found")));
        }
        Ok(Response::new(()))
    }
}
