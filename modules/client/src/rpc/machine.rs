//! MachineService calls about the node itself: what it runs, its files, its config being
//! applied, reboots and resets, and its event stream.

use std::time::Duration;

use ferro_talos_proto::machine::{
    self, ApplyConfigurationRequest, EventsRequest, LogsRequest, ReadRequest, RebootRequest,
    ResetRequest, ShutdownRequest,
};
use tonic::Streaming;

use super::proto_duration;
use crate::client::TalosClient;
use crate::decode::extract_kubeconfig;
use crate::error::{ClientError, ErrorKind, Result, human_duration};

/// Where the kernel exposes the boot ID (changes on every boot).
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Apply modes (api.md §5.1).
pub use ferro_talos_proto::machine::apply_configuration_request::Mode as ApplyMode;

/// Whether an ApplyConfiguration changes the node or only says what it would do (Talos's dry run:
/// it validates the config and reports the mode it would use and the diff, and changes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    DryRun,
    ForReal,
}

/// Reboot modes (api.md §5.7).
pub use ferro_talos_proto::machine::reboot_request::Mode as RebootMode;

impl TalosClient {
    pub async fn version(&self) -> Result<machine::Version> {
        let op = "version";
        let resp = self
            .read(op, || {
                let mut c = self.machine();
                let req = self.request((), self.opts.call_timeout)?;
                Ok(async move { c.version(req).await })
            })
            .await?;
        self.first(op, resp.messages)
    }

    pub async fn hostname(&self) -> Result<String> {
        let op = "hostname";
        let resp = self
            .read(op, || {
                let mut c = self.machine();
                let req = self.request((), self.opts.call_timeout)?;
                Ok(async move { c.hostname(req).await })
            })
            .await?;
        Ok(self.first(op, resp.messages)?.hostname)
    }

    pub async fn service_list(&self) -> Result<Vec<machine::ServiceInfo>> {
        let op = "list services";
        let resp = self
            .read(op, || {
                let mut c = self.machine();
                let req = self.request((), self.opts.call_timeout)?;
                Ok(async move { c.service_list(req).await })
            })
            .await?;
        Ok(self.first(op, resp.messages)?.services)
    }

    pub async fn memory(&self) -> Result<machine::MemInfo> {
        let op = "read memory";
        let resp = self
            .read(op, || {
                let mut c = self.machine();
                let req = self.request((), self.opts.call_timeout)?;
                Ok(async move { c.memory(req).await })
            })
            .await?;
        Ok(self.first(op, resp.messages)?.meminfo.unwrap_or_default())
    }

    /// Apply a machine configuration. `try_timeout` only matters for TRY (Talos
    /// defaults to one minute when absent). Not retried: apply is not idempotent
    /// in effect (it may reboot the node).
    pub async fn apply_configuration(
        &self,
        data: &[u8],
        mode: ApplyMode,
        apply: Apply,
        try_timeout: Option<Duration>,
    ) -> Result<machine::ApplyConfiguration> {
        let dry_run = apply == Apply::DryRun;
        let op = if dry_run {
            "apply configuration (dry run)"
        } else {
            "apply configuration"
        };
        let msg = ApplyConfigurationRequest {
            data: data.to_vec(),
            mode: mode as i32,
            dry_run,
            try_mode_timeout: try_timeout.map(proto_duration),
        };
        let req = self.request(msg, self.opts.call_timeout)?;
        let resp = self
            .unary(op, self.machine().apply_configuration(req))
            .await
            .map_err(ClientError::rejected_config)?;
        self.first(op, resp.messages)
    }

    /// Read a whole file from the node (streamed in chunks). Admin only.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let op = format!("read {path}");
        self.retrying(|| self.read_file_once(&op, path)).await
    }

    async fn read_file_once(&self, op: &str, path: &str) -> Result<Vec<u8>> {
        let limit = self.opts.call_timeout;
        let req = self.request(
            ReadRequest {
                path: path.to_string(),
            },
            limit,
        )?;
        self.collect_bytes(op, limit, self.machine().read(req))
            .await
    }

    /// The node's boot ID, or `None` when the role may not read it (the reboot
    /// check then falls back to "went away and came back").
    pub async fn boot_id(&self) -> Result<Option<String>> {
        match self.read_file(BOOT_ID_PATH).await {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).trim().to_string())),
            Err(e) if e.kind == ErrorKind::PermissionDenied => Ok(None),
            Err(e) => Err(e.during("read boot id")),
        }
    }

    /// An admin kubeconfig, freshly issued by a control-plane node.
    pub async fn kubeconfig(&self) -> Result<Vec<u8>> {
        let op = "fetch kubeconfig";
        let limit = self.opts.call_timeout;
        let req = self.request((), limit)?;
        let archive = self
            .collect_bytes(op, limit, self.machine().kubeconfig(req))
            .await?;
        extract_kubeconfig(&archive)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }

    /// Reboot the node; returns the actor ID that tags the reboot's events.
    pub async fn reboot(&self, mode: RebootMode) -> Result<String> {
        let op = "reboot";
        let req = self.request(RebootRequest { mode: mode as i32 }, self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().reboot(req)).await?;
        Ok(self.first(op, resp.messages)?.actor_id)
    }

    /// The log of Talos service `service` (`machined`, `etcd`, `kubelet`, ...): its last
    /// `tail_lines` lines, or all of it when None.
    pub async fn service_log(&self, service: &str, tail_lines: Option<u32>) -> Result<Vec<u8>> {
        let op = format!("read the {service} log");
        let limit = self.opts.stream_timeout;
        let req = self.request(
            LogsRequest {
                namespace: "system".into(),
                id: service.to_string(),
                driver: 0,
                follow: false,
                tail_lines: tail_lines.map_or(-1, |n| n.min(i32::MAX as u32) as i32),
            },
            limit,
        )?;
        self.collect_bytes(&op, limit, self.machine().logs(req))
            .await
    }

    /// Power the node off; returns the actor ID that tags the shutdown's events. Without `force`
    /// the node cordons and drains itself first.
    pub async fn shutdown(&self, force: bool) -> Result<String> {
        let op = "shut down";
        let req = self.request(ShutdownRequest { force }, self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().shutdown(req)).await?;
        Ok(self.first(op, resp.messages)?.actor_id)
    }

    /// Reset (wipe) the node; returns the actor ID. Destructive.
    pub async fn reset(&self, request: ResetRequest) -> Result<String> {
        let op = "reset";
        let req = self.request(request, self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().reset(req)).await?;
        Ok(self.first(op, resp.messages)?.actor_id)
    }

    /// Open the event stream (first message is an empty "hello" event).
    pub async fn events(&self, request: EventsRequest) -> Result<EventStream> {
        let op = "watch events";
        let req = self.request(request, self.opts.stream_timeout)?;
        let stream = self.unary(op, self.machine().events(req)).await?;
        Ok(EventStream {
            stream,
            node: self.target().to_string(),
        })
    }
}

/// A live `Events` stream.
pub struct EventStream {
    stream: Streaming<machine::Event>,
    node: String,
}

impl EventStream {
    /// The next event, `None` at the end of the stream, or a `Timeout` error
    /// when nothing arrives within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Result<Option<machine::Event>> {
        match tokio::time::timeout(wait, self.stream.message()).await {
            Err(_) => Err(ClientError::new(
                &self.node,
                "watch events",
                ErrorKind::Timeout,
                format!("no event within {}", human_duration(wait)),
            )),
            Ok(Err(s)) => Err(ClientError::from_status(&self.node, "watch events", &s)),
            Ok(Ok(ev)) => Ok(ev),
        }
    }
}
