//! Images and installs, what Talos and Kubernetes upgrades run: `ImageService/Pull` and
//! `LifecycleService/Upgrade` (Talos 1.13 on), and the legacy `MachineService` Upgrade and
//! ImagePull for older nodes.

use ferro_talos_proto::common::{ContainerDriver, ContainerdInstance, ContainerdNamespace};
use ferro_talos_proto::machine::{
    self, ImagePullRequest, ImageServicePullRequest, InstallArtifactsSource,
    LifecycleServiceUpgradeRequest, UpgradeRequest, image_service_pull_response,
    lifecycle_service_install_progress,
};

use crate::client::TalosClient;
use crate::error::{ClientError, ErrorKind, Result};

/// Legacy upgrade reboot modes (api.md §5.3).
pub use ferro_talos_proto::machine::upgrade_request::RebootMode as UpgradeRebootMode;

/// Result of the installer run by `LifecycleService/Upgrade`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOutcome {
    /// Installer output lines, in order.
    pub lines: Vec<String>,
    /// Installer exit code; non-zero means the upgrade failed (the RPC still ends OK).
    pub exit_code: i32,
}

/// The `system` containerd instance (talosctl's default `--namespace system`).
pub fn containerd_system() -> ContainerdInstance {
    ContainerdInstance {
        driver: ContainerDriver::Cri as i32,
        namespace: ContainerdNamespace::NsSystem as i32,
    }
}

impl TalosClient {
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
        let resp = self
            .unary_within(op, limit, self.machine().upgrade(req))
            .await?;
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
        let resp = self
            .unary_within(op, limit, self.machine().image_pull(req))
            .await?;
        self.first(op, resp.messages).map(|_| ())
    }

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
        let mut client = self.images();
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
        let mut client = self.lifecycle();
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
}
