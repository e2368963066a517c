//! One file per gRPC service; `routes` assembles them for one accepted connection.

pub mod block;
pub mod cluster;
pub mod cosi;
pub mod discovery;
pub mod image;
pub mod k8s_configs;
pub mod lifecycle;
pub mod machine;
pub mod members;

use ferro_talos_proto::cluster::cluster_service_server::ClusterServiceServer;
use ferro_talos_proto::cosi::resource::state_server::StateServer;
use ferro_talos_proto::machine::image_service_server::ImageServiceServer;
use ferro_talos_proto::machine::lifecycle_service_server::LifecycleServiceServer;
use ferro_talos_proto::machine::machine_service_server::MachineServiceServer;
use tonic::service::Routes;

use crate::routing::Ctx;

pub fn routes(ctx: Ctx, max: usize) -> Routes {
    Routes::new(
        MachineServiceServer::new(machine::Machine(ctx.clone())).max_decoding_message_size(max),
    )
    .add_service(
        LifecycleServiceServer::new(lifecycle::Lifecycle(ctx.clone()))
            .max_decoding_message_size(max),
    )
    .add_service(ImageServiceServer::new(image::Image(ctx.clone())).max_decoding_message_size(max))
    .add_service(
        ClusterServiceServer::new(cluster::Cluster(ctx.clone())).max_decoding_message_size(max),
    )
    .add_service(StateServer::new(cosi::Cosi(ctx)).max_decoding_message_size(max))
}
