//! The connection to one apid endpoint and the typed calls the modules make.
//!
//! Every call carries a deadline. Calls aimed at another node than the endpoint
//! carry single-valued `node` metadata (one-to-one proxying, api.md §3); `nodes`
//! is never sent, so replies have no proxy metadata and errors are plain statuses.

use std::future::Future;
use std::io::Read as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

use ferro_talos_proto::cluster::cluster_service_client::ClusterServiceClient;
use ferro_talos_proto::cluster::{ClusterInfo, HealthCheckRequest};
use ferro_talos_proto::common::{self, ContainerDriver, ContainerdInstance, ContainerdNamespace};
use ferro_talos_proto::cosi::resource::state_client::StateClient;
use ferro_talos_proto::cosi::resource::{GetRequest, ListRequest, ListResponse, Resource};
use ferro_talos_proto::machine::image_service_client::ImageServiceClient;
use ferro_talos_proto::machine::lifecycle_service_client::LifecycleServiceClient;
use ferro_talos_proto::machine::machine_service_client::MachineServiceClient;
use ferro_talos_proto::machine::{
    self, ApplyConfigurationRequest, BootstrapRequest, EtcdMemberListRequest,
    EtcdRemoveMemberByIdRequest, EtcdSnapshotRequest, EventsRequest, ImagePullRequest,
    ImageServicePullRequest, InstallArtifactsSource, LifecycleServiceUpgradeRequest, ReadRequest,
    RebootRequest, ResetRequest, UpgradeRequest, image_service_pull_response,
    lifecycle_service_install_progress,
};
use ferro_talos_proto::resource::config::{MachineConfigSpec, MachineType, MachineTypeSpec};
use ferro_talos_proto::resource::k8s::NodenameSpec;
use ferro_talos_proto::resource::runtime::{MachineStage, MachineStatusSpec};
use hyper_util::rt::TokioIo;
use prost::Message as _;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tonic::codegen::Service;
use tonic::transport::{Channel, Uri};
use tonic::{Request, Response, Status, Streaming};

use crate::credentials::{CredentialOrigin, Credentials, maintenance_tls_config};
use crate::endpoint::Endpoint;
use crate::error::{ClientError, ErrorKind, Result, human_duration};

/// talosctl raises the 4 MiB default to 32 MiB (api.md §1).
pub const MAX_MESSAGE_SIZE: usize = 32 * 1024 * 1024;

/// Where the kernel exposes the boot ID (changes on every boot).
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Timeouts and retry budget for one client.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// TCP connect plus TLS handshake.
    pub connect_timeout: Duration,
    /// Deadline of each unary call.
    pub call_timeout: Duration,
    /// Deadline of each streaming call, from start to end of stream.
    pub stream_timeout: Duration,
    /// Extra attempts for idempotent reads that fail with Unavailable.
    pub read_retries: u32,
    /// First retry delay; doubled per attempt, capped at 5 s.
    pub retry_backoff: Duration,
    /// Optional SPKI pin for maintenance connections (base64 SHA-256).
    pub maintenance_spki_pin: Option<String>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            stream_timeout: Duration::from_secs(600),
            read_retries: 3,
            retry_backoff: Duration::from_millis(500),
            maintenance_spki_pin: None,
        }
    }
}

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
/// Legacy upgrade reboot modes (api.md §5.3).
pub use ferro_talos_proto::machine::upgrade_request::RebootMode as UpgradeRebootMode;

/// Who we are to the node: no client certificate (maintenance mode), or one from `CredentialOrigin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Identity {
    Anonymous,
    Client(CredentialOrigin),
}

/// A connection to one apid endpoint, optionally targeting another node through it.
#[derive(Clone)]
pub struct TalosClient {
    channel: Channel,
    endpoint: Endpoint,
    /// How messages name the endpoint (`Endpoint::name`).
    endpoint_name: String,
    /// Where the credentials came from (unspecified for a maintenance connection, which has none).
    credentials: CredentialOrigin,
    node: Option<String>,
    maintenance: bool,
    opts: ConnectOptions,
}

/// Result of the installer run by `LifecycleService/Upgrade`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOutcome {
    /// Installer output lines, in order.
    pub lines: Vec<String>,
    /// Installer exit code; non-zero means the upgrade failed (the RPC still ends OK).
    pub exit_code: i32,
}

/// The node's lifecycle stage and readiness (COSI MachineStatus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineStatus {
    pub stage: MachineStage,
    pub ready: bool,
    /// Unmet conditions as (name, reason).
    pub unmet_conditions: Vec<(String, String)>,
}

impl TalosClient {
    /// Connect with mutual TLS: trust only `creds.ca_pem`, verify the endpoint host
    /// (IP SAN for an IP, DNS SAN for a name), present the client certificate.
    pub async fn connect(
        endpoint: &str,
        creds: &Credentials,
        opts: ConnectOptions,
    ) -> Result<TalosClient> {
        let ep = Endpoint::parse(endpoint)?;
        let origin = creds.origin;
        creds
            .check_validity(SystemTime::now())
            .map_err(|e| relabel(e, &ep.name(), "connect").with_credentials(origin))?;
        let config = creds
            .tls_config()
            .map_err(|e| relabel(e, &ep.name(), "connect").with_credentials(origin))?;
        Self::connect_with(ep, config, Identity::Client(origin), opts).await
    }

    /// Connect to a node in maintenance mode: accept its self-signed certificate
    /// (optionally pinned), send no client certificate.
    pub async fn connect_maintenance(endpoint: &str, opts: ConnectOptions) -> Result<TalosClient> {
        let ep = Endpoint::parse(endpoint)?;
        let config = maintenance_tls_config(opts.maintenance_spki_pin.as_deref())
            .map_err(|e| relabel(e, &ep.name(), "connect"))?;
        Self::connect_with(ep, config, Identity::Anonymous, opts).await
    }

    async fn connect_with(
        ep: Endpoint,
        config: ClientConfig,
        identity: Identity,
        opts: ConnectOptions,
    ) -> Result<TalosClient> {
        let credentials = match identity {
            Identity::Client(origin) => origin,
            Identity::Anonymous => CredentialOrigin::Unspecified,
        };
        let server_name = ServerName::try_from(ep.host.clone()).map_err(|_| {
            ClientError::new(
                ep.name(),
                "connect",
                ErrorKind::InvalidEndpoint,
                "the host is neither an IP address nor a valid DNS name",
            )
        })?;
        let connector = TlsConnector {
            config: Arc::new(config),
            host: ep.host.clone(),
            port: ep.port,
            server_name,
            timeout: opts.connect_timeout,
        };
        let uri = format!("http://{}", ep.authority());
        let channel = Channel::from_shared(uri)
            .map_err(|e| {
                ClientError::new(
                    ep.name(),
                    "connect",
                    ErrorKind::InvalidEndpoint,
                    e.to_string(),
                )
            })?
            // Keepalives as talosctl uses them, so a node that vanishes during a
            // reboot is noticed instead of hanging a call until its deadline.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .connect_with_connector(connector)
            .await
            .map_err(|e| {
                ClientError::from_transport(&ep.name(), "connect", &e).with_credentials(credentials)
            })?;
        Ok(TalosClient {
            channel,
            endpoint_name: ep.name(),
            endpoint: ep,
            credentials,
            node: None,
            maintenance: identity == Identity::Anonymous,
            opts,
        })
    }

    /// A client for the same connection that targets `node` through the endpoint
    /// (`node` metadata). Passing the endpoint's own host sends no metadata.
    pub fn with_node(&self, node: &str) -> TalosClient {
        let mut c = self.clone();
        c.node = if node.is_empty() || node == self.endpoint.host {
            None
        } else {
            Some(node.to_string())
        };
        c
    }

    /// The node calls are aimed at (the `node` target, else the endpoint host).
    pub fn target(&self) -> &str {
        self.node.as_deref().unwrap_or(&self.endpoint_name)
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Whether this connection was made in maintenance mode (no client cert).
    pub fn is_maintenance(&self) -> bool {
        self.maintenance
    }

    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }

    // ---- plumbing ----

    fn machine(&self) -> MachineServiceClient<Channel> {
        MachineServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn request<T>(&self, msg: T, timeout: Duration) -> Result<Request<T>> {
        let mut req = Request::new(msg);
        req.set_timeout(timeout);
        if let Some(node) = &self.node {
            let value = node.parse().map_err(|_| {
                ClientError::new(
                    node,
                    "set node metadata",
                    ErrorKind::InvalidEndpoint,
                    "the node name is not valid gRPC metadata (expected an address or host name)",
                )
            })?;
            req.metadata_mut().insert("node", value);
        }
        Ok(req)
    }

    fn err(&self, op: &str, status: &Status) -> ClientError {
        ClientError::from_status(self.target(), op, status).with_credentials(self.credentials)
    }

    /// A failed call. tonic enforces the request deadline itself and usually fires just before our
    /// own timer, so its local "Timeout expired" is reported like ours, with the limit that ran out.
    /// A DeadlineExceeded sent by the node keeps the node's message: it says what was still waiting.
    fn call_err(&self, op: &str, status: &Status, limit: Duration) -> ClientError {
        let local_deadline = status.code() == tonic::Code::Cancelled
            && status.message().eq_ignore_ascii_case("timeout expired");
        if local_deadline {
            self.timeout_err(op, limit)
        } else {
            self.err(op, status)
        }
    }

    fn timeout_err(&self, op: &str, after: Duration) -> ClientError {
        ClientError::new(
            self.target(),
            op,
            ErrorKind::Timeout,
            format!("no answer within {}", human_duration(after)),
        )
    }

    /// One unary call with the client-side deadline.
    async fn unary<R>(
        &self,
        op: &str,
        call: impl Future<Output = std::result::Result<Response<R>, Status>>,
    ) -> Result<R> {
        let limit = self.opts.call_timeout;
        match tokio::time::timeout(limit, call).await {
            Err(_) => Err(self.timeout_err(op, limit)),
            Ok(Err(status)) => Err(self.call_err(op, &status, limit)),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
        }
    }

    /// Retry an idempotent read while the node is unreachable (e.g. rebooting).
    async fn read<R, F, Fut>(&self, op: &str, mut attempt: F) -> Result<R>
    where
        F: FnMut() -> Result<Fut>,
        Fut: Future<Output = std::result::Result<Response<R>, Status>>,
    {
        let mut delay = self.opts.retry_backoff;
        let mut left = self.opts.read_retries;
        loop {
            match self.unary(op, attempt()?).await {
                Err(e) if e.kind.is_transient() && left > 0 => {
                    left -= 1;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }

    /// Run a server stream to its end under the stream deadline, handing each
    /// message to `each`.
    async fn stream<T>(
        &self,
        op: &str,
        limit: Duration,
        start: impl Future<Output = std::result::Result<Response<Streaming<T>>, Status>>,
        mut each: impl FnMut(T) -> Result<()>,
    ) -> Result<()> {
        let work = async {
            let mut stream = start
                .await
                .map_err(|s| self.call_err(op, &s, limit))?
                .into_inner();
            while let Some(item) = stream
                .message()
                .await
                .map_err(|s| self.call_err(op, &s, limit))?
            {
                each(item)?;
            }
            Ok(())
        };
        match tokio::time::timeout(limit, work).await {
            Err(_) => Err(self.timeout_err(op, limit)),
            Ok(r) => r,
        }
    }

    /// The single reply item of a one-to-one call.
    fn first<T: HasMetadata>(&self, op: &str, messages: Vec<T>) -> Result<T> {
        let item = messages.into_iter().next().ok_or_else(|| {
            ClientError::new(self.target(), op, ErrorKind::Other, "the reply was empty")
        })?;
        check_metadata(self.target(), op, item.metadata())?;
        Ok(item)
    }

    // ---- MachineService ----

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

    /// Bootstrap etcd. `AlreadyExists` comes back as `ErrorKind::AlreadyExists`.
    pub async fn bootstrap(&self) -> Result<()> {
        let op = "bootstrap etcd";
        let req = self.request(BootstrapRequest::default(), self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().bootstrap(req)).await?;
        self.first(op, resp.messages).map(|_| ())
    }

    /// etcd members as seen by this node. Not retried: Unavailable here usually
    /// means etcd is not running, which is an answer, not a transient failure.
    pub async fn etcd_member_list(&self) -> Result<Vec<machine::EtcdMember>> {
        let op = "list etcd members";
        let req = self.request(
            EtcdMemberListRequest { query_local: false },
            self.opts.call_timeout,
        )?;
        let resp = self.unary(op, self.machine().etcd_member_list(req)).await?;
        Ok(self.first(op, resp.messages)?.members)
    }

    pub async fn etcd_status(&self) -> Result<machine::EtcdMemberStatus> {
        let op = "read etcd status";
        let req = self.request((), self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().etcd_status(req)).await?;
        Ok(self
            .first(op, resp.messages)?
            .member_status
            .unwrap_or_default())
    }

    pub async fn etcd_remove_member_by_id(&self, member_id: u64) -> Result<()> {
        let op = "remove etcd member";
        let req = self.request(
            EtcdRemoveMemberByIdRequest { member_id },
            self.opts.call_timeout,
        )?;
        let resp = self
            .unary(op, self.machine().etcd_remove_member_by_id(req))
            .await?;
        self.first(op, resp.messages).map(|_| ())
    }

    pub async fn etcd_leave_cluster(&self) -> Result<()> {
        let op = "leave etcd cluster";
        let req = self.request(machine::EtcdLeaveClusterRequest {}, self.opts.call_timeout)?;
        let resp = self
            .unary(op, self.machine().etcd_leave_cluster(req))
            .await?;
        self.first(op, resp.messages).map(|_| ())
    }

    /// Stream an etcd snapshot into `out`; returns the number of bytes written.
    pub async fn etcd_snapshot(&self, out: &mut impl std::io::Write) -> Result<u64> {
        let op = "etcd snapshot";
        let limit = self.opts.stream_timeout;
        let req = self.request(EtcdSnapshotRequest {}, limit)?;
        let target = self.target().to_string();
        let mut written = 0u64;
        self.stream(
            op,
            limit,
            self.machine().etcd_snapshot(req),
            |chunk: common::Data| {
                check_metadata(&target, op, chunk.metadata.as_ref())?;
                out.write_all(&chunk.bytes).map_err(|e| {
                    ClientError::new(
                        &target,
                        op,
                        ErrorKind::Other,
                        format!("writing the snapshot failed: {e}"),
                    )
                })?;
                written += chunk.bytes.len() as u64;
                Ok(())
            },
        )
        .await?;
        Ok(written)
    }

    /// Read a whole file from the node (streamed in chunks). Admin only.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let op = format!("read {path}");
        let mut delay = self.opts.retry_backoff;
        let mut left = self.opts.read_retries;
        loop {
            match self.read_file_once(&op, path).await {
                Err(e) if e.kind.is_transient() && left > 0 => {
                    left -= 1;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }

    async fn read_file_once(&self, op: &str, path: &str) -> Result<Vec<u8>> {
        let limit = self.opts.call_timeout;
        let req = self.request(
            ReadRequest {
                path: path.to_string(),
            },
            limit,
        )?;
        let target = self.target().to_string();
        let mut data = Vec::new();
        self.stream(
            op,
            limit,
            self.machine().read(req),
            |chunk: common::Data| {
                check_metadata(&target, op, chunk.metadata.as_ref())?;
                data.extend_from_slice(&chunk.bytes);
                Ok(())
            },
        )
        .await?;
        Ok(data)
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
        let target = self.target().to_string();
        let mut archive = Vec::new();
        self.stream(
            op,
            limit,
            self.machine().kubeconfig(req),
            |chunk: common::Data| {
                check_metadata(&target, op, chunk.metadata.as_ref())?;
                archive.extend_from_slice(&chunk.bytes);
                Ok(())
            },
        )
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

    /// Reset (wipe) the node; returns the actor ID. Destructive.
    pub async fn reset(&self, request: ResetRequest) -> Result<String> {
        let op = "reset";
        let req = self.request(request, self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().reset(req)).await?;
        Ok(self.first(op, resp.messages)?.actor_id)
    }

    /// Legacy `MachineService/Upgrade` (for nodes before 1.13): pulls, installs and
    /// reboots on its own. Returns the acknowledgement item with its actor ID.
    pub async fn upgrade_legacy(
        &self,
        image: &str,
        stage: bool,
        force: bool,
        reboot_mode: UpgradeRebootMode,
    ) -> Result<machine::Upgrade> {
        let op = "upgrade (legacy API)";
        let msg = UpgradeRequest {
            image: image.to_string(),
            preserve: false,
            stage,
            force,
            reboot_mode: reboot_mode as i32,
        };
        // The server pulls and validates the image before answering: allow a stream's time.
        let limit = self.opts.stream_timeout;
        let req = self.request(msg, limit)?;
        let mut client = self.machine();
        let resp = match tokio::time::timeout(limit, client.upgrade(req)).await {
            Err(_) => return Err(self.timeout_err(op, limit)),
            Ok(Err(s)) => return Err(self.call_err(op, &s, limit)),
            Ok(Ok(r)) => r.into_inner(),
        };
        self.first(op, resp.messages)
    }

    /// Legacy `MachineService/ImagePull` (pre-pull for Kubernetes upgrades).
    pub async fn image_pull_legacy(
        &self,
        reference: &str,
        namespace: ContainerdNamespace,
    ) -> Result<()> {
        let op = "pull image (legacy API)";
        let msg = ImagePullRequest {
            namespace: namespace as i32,
            reference: reference.to_string(),
        };
        let limit = self.opts.stream_timeout;
        let req = self.request(msg, limit)?;
        let resp = match tokio::time::timeout(limit, self.machine().image_pull(req)).await {
            Err(_) => return Err(self.timeout_err(op, limit)),
            Ok(Err(s)) => return Err(self.call_err(op, &s, limit)),
            Ok(Ok(r)) => r.into_inner(),
        };
        self.first(op, resp.messages).map(|_| ())
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

    // ---- ImageService / LifecycleService ----

    /// `ImageService/Pull`; returns the pulled image name. `Unimplemented` means
    /// the node predates the API (fall back to [`TalosClient::image_pull_legacy`]).
    pub async fn image_pull(
        &self,
        image_ref: &str,
        containerd: ContainerdInstance,
    ) -> Result<String> {
        let op = "pull image";
        let limit = self.opts.stream_timeout;
        let msg = ImageServicePullRequest {
            containerd: Some(containerd),
            image_ref: image_ref.to_string(),
        };
        let req = self.request(msg, limit)?;
        let mut client = ImageServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE);
        let mut name = None;
        self.stream(op, limit, client.pull(req), |item| {
            if let Some(image_service_pull_response::Response::Name(n)) = item.response {
                name = Some(n);
            }
            Ok(())
        })
        .await?;
        name.ok_or_else(|| {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Other,
                "the pull stream ended without naming the pulled image",
            )
        })
    }

    /// `LifecycleService/Upgrade`: run the installer (image must be pulled first).
    /// Does not reboot. A non-zero exit code is returned, not turned into an error.
    pub async fn lifecycle_upgrade(
        &self,
        image: &str,
        containerd: ContainerdInstance,
    ) -> Result<InstallOutcome> {
        let op = "upgrade";
        let limit = self.opts.stream_timeout;
        let msg = LifecycleServiceUpgradeRequest {
            containerd: Some(containerd),
            source: Some(InstallArtifactsSource {
                image_name: image.to_string(),
            }),
        };
        let req = self.request(msg, limit)?;
        let mut client = LifecycleServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE);
        let mut lines = Vec::new();
        let mut exit_code = None;
        self.stream(op, limit, client.upgrade(req), |item| {
            match item.progress.and_then(|p| p.response) {
                Some(lifecycle_service_install_progress::Response::Message(m)) => lines.push(m),
                Some(lifecycle_service_install_progress::Response::ExitCode(c)) => {
                    exit_code = Some(c)
                }
                None => {}
            }
            Ok(())
        })
        .await?;
        let exit_code = exit_code.ok_or_else(|| {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Other,
                "the installer stream ended without an exit code",
            )
        })?;
        Ok(InstallOutcome { lines, exit_code })
    }

    // ---- ClusterService ----

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
        let mut client = ClusterServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE);
        let target = self.target().to_string();
        let mut lines = Vec::new();
        self.stream(op, limit, client.health_check(req), |item| {
            check_metadata(&target, op, item.metadata.as_ref())?;
            on_message(&item.message);
            lines.push(item.message);
            Ok(())
        })
        .await?;
        Ok(lines)
    }

    // ---- COSI ----

    /// COSI `State/Get` of one resource.
    pub async fn get_resource(&self, namespace: &str, kind: &str, id: &str) -> Result<Resource> {
        let op = format!("get {kind} {namespace}/{id}");
        let resp = self
            .read(&op, || {
                let mut c = StateClient::new(self.channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_SIZE);
                let req = self.request(
                    GetRequest {
                        namespace: namespace.to_string(),
                        r#type: kind.to_string(),
                        id: id.to_string(),
                        options: None,
                    },
                    self.opts.call_timeout,
                )?;
                Ok(async move { c.get(req).await })
            })
            .await?;
        resp.resource.ok_or_else(|| {
            ClientError::new(
                self.target(),
                &op,
                ErrorKind::Other,
                "the reply has no resource",
            )
        })
    }

    /// COSI `State/List`: every resource of a type, in the order the node sends them.
    pub async fn list_resources(&self, namespace: &str, kind: &str) -> Result<Vec<Resource>> {
        let op = format!("list {kind} {namespace}");
        let limit = self.opts.call_timeout;
        let req = self.request(
            ListRequest {
                namespace: namespace.to_string(),
                r#type: kind.to_string(),
                options: None,
            },
            limit,
        )?;
        let mut client =
            StateClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let mut out = Vec::new();
        self.stream(&op, limit, client.list(req), |item: ListResponse| {
            out.extend(item.resource);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// The active machine config, byte for byte as the node stores it.
    pub async fn get_machine_config(&self) -> Result<Vec<u8>> {
        let op = "read machine config";
        let res = self
            .get_resource("config", "MachineConfigs.config.talos.dev", "v1alpha1")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        decode_machine_config(&spec.proto_spec, &spec.yaml_spec)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }

    /// The config the next boot loads (the `persistent` MachineConfig), when the node has one:
    /// ahead of the running config after a staged apply, behind it while a try runs. `None` when
    /// the node publishes none, which means the running config is the one kept.
    pub async fn get_persistent_machine_config(&self) -> Result<Option<Vec<u8>>> {
        let op = "read the persistent machine config";
        let res = match self
            .get_resource("config", "MachineConfigs.config.talos.dev", "persistent")
            .await
        {
            Ok(res) => res,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.during(op)),
        };
        let spec = res.spec.unwrap_or_default();
        decode_machine_config(&spec.proto_spec, &spec.yaml_spec)
            .map(Some)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }

    /// The node's machine type (init, controlplane, worker; unknown in maintenance).
    pub async fn machine_type(&self) -> Result<MachineType> {
        let op = "read machine type";
        let res = self
            .get_resource("config", "MachineTypes.config.talos.dev", "machine-type")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        let typed = MachineTypeSpec::decode(spec.proto_spec.as_slice()).map_err(|e| {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Other,
                format!("undecodable spec: {e}"),
            )
        })?;
        Ok(MachineType::try_from(typed.machine_type).unwrap_or(MachineType::Unknown))
    }

    /// The name the node's kubelet registers with Kubernetes (COSI `k8s/Nodename`, what talosctl's
    /// drain reads: upstream `cmd/talosctl/pkg/talos/nodedrain` at v1.13.9); None when the node
    /// skips Kubernetes registration.
    pub async fn nodename(&self) -> Result<Option<String>> {
        let op = "read the Kubernetes node name";
        let res = self
            .get_resource("k8s", "Nodenames.kubernetes.talos.dev", "nodename")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        let typed = NodenameSpec::decode(spec.proto_spec.as_slice()).map_err(|e| {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Other,
                format!("the Nodename spec is not decodable: {e}"),
            )
        })?;
        Ok((!typed.skip_node_registration && !typed.nodename.is_empty()).then_some(typed.nodename))
    }

    /// The node's stage and readiness.
    pub async fn machine_status(&self) -> Result<MachineStatus> {
        let op = "read machine status";
        let res = self
            .get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        decode_machine_status(&spec.proto_spec, &spec.yaml_spec)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }
}

/// The `system` containerd instance (talosctl's default `--namespace system`).
pub fn containerd_system() -> ContainerdInstance {
    ContainerdInstance {
        driver: ContainerDriver::Cri as i32,
        namespace: ContainerdNamespace::NsSystem as i32,
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

fn proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs().min(i64::MAX as u64) as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn relabel(mut e: ClientError, node: &str, op: &str) -> ClientError {
    e.node = node.to_string();
    e.operation = op.to_string();
    e
}

/// Reply items that carry proxy metadata (field 1).
trait HasMetadata {
    fn metadata(&self) -> Option<&common::Metadata>;
}

macro_rules! has_metadata {
    ($($t:ty),* $(,)?) => {
        $(impl HasMetadata for $t {
            fn metadata(&self) -> Option<&common::Metadata> {
                self.metadata.as_ref()
            }
        })*
    };
}

has_metadata!(
    machine::Version,
    machine::Hostname,
    machine::ServiceList,
    machine::Memory,
    machine::ApplyConfiguration,
    machine::Bootstrap,
    machine::EtcdMembers,
    machine::EtcdStatus,
    machine::EtcdRemoveMemberById,
    machine::EtcdLeaveCluster,
    machine::Reboot,
    machine::Reset,
    machine::Upgrade,
    machine::ImagePull,
);

/// A reply item whose metadata carries an error is a failure (one-to-many
/// proxying reports failures that way; harmless to check otherwise).
fn check_metadata(node: &str, op: &str, md: Option<&common::Metadata>) -> Result<()> {
    let Some(md) = md else { return Ok(()) };
    if md.error.is_empty() {
        return Ok(());
    }
    let code = md.status.as_ref().map(|s| s.code).unwrap_or(2);
    let status = Status::new(tonic::Code::from_i32(code), md.error.clone());
    let node = if md.hostname.is_empty() {
        node
    } else {
        &md.hostname
    };
    Err(ClientError::from_status(node, op, &status))
}

/// Pick the machine config out of a COSI spec: the typed `proto_spec` keeps the
/// bytes exactly; `yaml_spec` (a YAML string scalar) is the fallback.
pub fn decode_machine_config(
    proto_spec: &[u8],
    yaml_spec: &str,
) -> std::result::Result<Vec<u8>, String> {
    if !proto_spec.is_empty() {
        let spec = MachineConfigSpec::decode(proto_spec)
            .map_err(|e| format!("the MachineConfig spec is not decodable: {e}"))?;
        if !spec.yaml_marshalled.is_empty() {
            return Ok(spec.yaml_marshalled);
        }
    }
    if yaml_spec.trim().is_empty() {
        return Err("the MachineConfig resource has an empty spec".into());
    }
    match serde_saphyr::from_str::<String>(yaml_spec) {
        Ok(s) => Ok(s.into_bytes()),
        // Very old Talos rendered the config as a YAML map: that is the config itself.
        Err(_) => Ok(yaml_spec.as_bytes().to_vec()),
    }
}

/// Decode MachineStatus from `proto_spec`, else from `yaml_spec`.
pub fn decode_machine_status(
    proto_spec: &[u8],
    yaml_spec: &str,
) -> std::result::Result<MachineStatus, String> {
    if !proto_spec.is_empty() {
        let spec = MachineStatusSpec::decode(proto_spec)
            .map_err(|e| format!("the MachineStatus spec is not decodable: {e}"))?;
        let status = spec.status.unwrap_or_default();
        return Ok(MachineStatus {
            stage: MachineStage::try_from(spec.stage).unwrap_or(MachineStage::Unknown),
            ready: status.ready,
            unmet_conditions: status
                .unmet_conditions
                .into_iter()
                .map(|c| (c.name, c.reason))
                .collect(),
        });
    }
    #[derive(serde::Deserialize, Default)]
    struct YamlCondition {
        #[serde(default)]
        name: String,
        #[serde(default)]
        reason: String,
    }
    #[derive(serde::Deserialize, Default)]
    struct YamlStatus {
        #[serde(default)]
        ready: bool,
        #[serde(default, rename = "unmetConditions")]
        unmet_conditions: Vec<YamlCondition>,
    }
    #[derive(serde::Deserialize)]
    struct YamlSpec {
        stage: String,
        #[serde(default)]
        status: YamlStatus,
    }
    let spec: YamlSpec = serde_saphyr::from_str(yaml_spec).map_err(|e| {
        format!("the MachineStatus spec is neither protobuf nor YAML with `stage`: {e}")
    })?;
    let stage = match spec.stage.as_str() {
        "booting" => MachineStage::Booting,
        "installing" => MachineStage::Installing,
        "maintenance" => MachineStage::Maintenance,
        "running" => MachineStage::Running,
        "rebooting" => MachineStage::Rebooting,
        "shutting down" => MachineStage::ShuttingDown,
        "resetting" => MachineStage::Resetting,
        "upgrading" => MachineStage::Upgrading,
        _ => MachineStage::Unknown,
    };
    Ok(MachineStatus {
        stage,
        ready: spec.status.ready,
        unmet_conditions: spec
            .status
            .unmet_conditions
            .into_iter()
            .map(|c| (c.name, c.reason))
            .collect(),
    })
}

/// The `kubeconfig` file out of the gzip-compressed tar Talos sends.
pub fn extract_kubeconfig(archive: &[u8]) -> std::result::Result<Vec<u8>, String> {
    if archive.is_empty() {
        return Err("the node sent an empty kubeconfig archive".into());
    }
    let gz = flate2::read::GzDecoder::new(archive);
    let mut tar = tar::Archive::new(gz);
    let entries = tar
        .entries()
        .map_err(|e| format!("the kubeconfig archive is not a gzip tar: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("the kubeconfig archive is corrupt: {e}"))?;
        let is_kubeconfig = entry
            .path()
            .map(|p| p.file_name().is_some_and(|n| n == "kubeconfig"))
            .unwrap_or(false);
        if is_kubeconfig {
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| format!("the kubeconfig archive is corrupt: {e}"))?;
            return Ok(data);
        }
    }
    Err("the kubeconfig archive has no `kubeconfig` file".into())
}

/// Dials TCP and runs the TLS handshake ourselves, so the TLS configuration (our
/// CA only, or the maintenance verifier) and the handshake errors stay in our hands.
#[derive(Clone)]
struct TlsConnector {
    config: Arc<ClientConfig>,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    timeout: Duration,
}

type TlsIo = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl Service<Uri> for TlsConnector {
    type Response = TlsIo;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<TlsIo>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let handshake = async {
                let tcp = TcpStream::connect((this.host.as_str(), this.port)).await?;
                tcp.set_nodelay(true)?;
                tokio_rustls::TlsConnector::from(this.config.clone())
                    .connect(this.server_name.clone(), tcp)
                    .await
            };
            match tokio::time::timeout(this.timeout, handshake).await {
                Ok(stream) => stream.map(TokioIo::new),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "connection to port {} timed out after {}",
                        this.port,
                        human_duration(this.timeout)
                    ),
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_config_prefers_proto_spec_bytes() {
        let spec = MachineConfigSpec {
            yaml_marshalled: b"# comment kept\nversion: v1alpha1\n".to_vec(),
        };
        let got = decode_machine_config(&spec.encode_to_vec(), "ignored").unwrap();
        assert_eq!(got, b"# comment kept\nversion: v1alpha1\n");
    }

    #[test]
    fn machine_config_falls_back_to_yaml_string_scalar() {
        let yaml = "|\n    version: v1alpha1\n    machine:\n        type: worker\n";
        let got = decode_machine_config(&[], yaml).unwrap();
        assert_eq!(got, b"version: v1alpha1\nmachine:\n    type: worker\n");
        assert!(decode_machine_config(&[], "").is_err());
    }

    #[test]
    fn machine_status_from_proto_and_yaml() {
        use ferro_talos_proto::resource::runtime::{MachineStatusStatus, UnmetCondition};
        let spec = MachineStatusSpec {
            stage: MachineStage::Running as i32,
            status: Some(MachineStatusStatus {
                ready: false,
                unmet_conditions: vec![UnmetCondition {
                    name: "nodeReady".into(),
                    reason: "kubelet".into(),
                }],
            }),
        };
        let st = decode_machine_status(&spec.encode_to_vec(), "").unwrap();
        assert_eq!(st.stage, MachineStage::Running);
        assert!(!st.ready);
        assert_eq!(
            st.unmet_conditions,
            [("nodeReady".to_string(), "kubelet".to_string())]
        );

        let st =
            decode_machine_status(&[], "stage: rebooting\nstatus:\n    ready: true\n").unwrap();
        assert_eq!(st.stage, MachineStage::Rebooting);
        assert!(st.ready);
    }

    fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o600);
            header.set_cksum();
            builder.append_data(&mut header, name, *data).unwrap();
        }
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn kubeconfig_is_extracted_from_tar_gz() {
        let archive = tar_gz(&[("kubeconfig", b"apiVersion: v1\n")]);
        assert_eq!(extract_kubeconfig(&archive).unwrap(), b"apiVersion: v1\n");
        let other = tar_gz(&[("other", b"x")]);
        assert!(
            extract_kubeconfig(&other)
                .unwrap_err()
                .contains("no `kubeconfig`")
        );
        assert!(extract_kubeconfig(b"not gzip").is_err());
    }

    #[test]
    fn metadata_error_becomes_a_client_error() {
        let md = common::Metadata {
            hostname: "10.5.0.3".into(),
            error: "etcd data directory is not empty".into(),
            status: Some(ferro_talos_proto::google::rpc::Status {
                code: tonic::Code::AlreadyExists as i32,
                message: "etcd data directory is not empty".into(),
                details: vec![],
            }),
        };
        let err = check_metadata("ep", "bootstrap etcd", Some(&md)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::AlreadyExists);
        assert_eq!(err.node, "10.5.0.3");
        check_metadata("ep", "x", Some(&common::Metadata::default())).unwrap();
    }
}
