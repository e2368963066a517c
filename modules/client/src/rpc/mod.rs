//! The typed calls, as `impl TalosClient` blocks grouped by topic: the machine itself
//! (`machine.rs`), etcd (`etcd.rs`), images and installs for upgrades (`upgrade.rs`), the
//! cluster health check (`cluster.rs`) and COSI resources (`resources.rs`). Each states its
//! request, its deadline and what it keeps of the reply; `call.rs` does the rest.

mod cluster;
mod etcd;
mod machine;
mod resources;
mod upgrade;

use std::time::Duration;

use ferro_talos_proto::cluster::cluster_service_client::ClusterServiceClient;
use ferro_talos_proto::cosi::resource::state_client::StateClient;
use ferro_talos_proto::machine::image_service_client::ImageServiceClient;
use ferro_talos_proto::machine::lifecycle_service_client::LifecycleServiceClient;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use tonic::transport::Channel;

use crate::client::{MAX_MESSAGE_SIZE, TalosClient};

pub use machine::{Apply, ApplyMode, BOOT_ID_PATH, EventStream, RebootMode};
pub use upgrade::{InstallOutcome, UpgradeRebootMode, containerd_system};

/// The service stubs on this connection's channel.
impl TalosClient {
    fn machine(&self) -> MachineServiceClient<Channel> {
        MachineServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn lifecycle(&self) -> LifecycleServiceClient<Channel> {
        LifecycleServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn cluster(&self) -> ClusterServiceClient<Channel> {
        ClusterServiceClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn state(&self) -> StateClient<Channel> {
        StateClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE_SIZE)
    }
}

fn proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs().min(i64::MAX as u64) as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
