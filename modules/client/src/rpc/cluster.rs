//! ClusterService: the server-side health check.

use std::time::Duration;

use ferro_talos_proto::cluster::{ClusterInfo, HealthCheckRequest};

use super::proto_duration;
use crate::client::TalosClient;
use crate::error::Result;

impl TalosClient {
    /// Server-side health check; `on_message` sees each progress line as it
    /// arrives. Runs until all checks pass or `wait_timeout` (plus a margin) ends.
    pub async fn health_check(
        &self,
        wait_timeout: Duration,
        cluster_info: Option<ClusterInfo>,
        mut on_message: impl FnMut(&str),
    ) -> Result<Vec<String>> {
        let op = "health check";
        let limit = wait_timeout + Duration::from_secs(30);
        let msg = HealthCheckRequest {
            wait_timeout: Some(proto_duration(wait_timeout)),
            cluster_info,
        };
        let req = self.request(msg, limit)?;
        let mut lines = Vec::new();
        self.stream_checked(op, limit, self.cluster().health_check(req), |item| {
            on_message(&item.message);
            lines.push(item.message);
            Ok(())
        })
        .await?;
        Ok(lines)
    }
}
