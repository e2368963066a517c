//! `machine.LifecycleService/Upgrade` (api.md §6.1): runs the "installer" without rebooting;
//! the new version takes effect at the next reboot.

use ferro_talos_proto::machine::lifecycle_service_install_progress::Response as Progress;
use ferro_talos_proto::machine::lifecycle_service_server::LifecycleService;
use ferro_talos_proto::machine::*;
use tonic::{Request, Response, Status};

use crate::routing::{BoxStream, Ctx};
use crate::version;

pub struct Lifecycle(pub Ctx);

fn line(p: Progress) -> Result<LifecycleServiceUpgradeResponse, Status> {
    Ok(LifecycleServiceUpgradeResponse {
        progress: Some(LifecycleServiceInstallProgress { response: Some(p) }),
    })
}

#[tonic::async_trait]
impl LifecycleService for Lifecycle {
    type InstallStream = BoxStream<LifecycleServiceInstallResponse>;
    async fn install(
        &self,
        request: Request<LifecycleServiceInstallRequest>,
    ) -> Result<Response<Self::InstallStream>, Status> {
        self.0
            .single(request.metadata(), "/machine.LifecycleService/Install")?;
        Err(Status::failed_precondition("machine is already installed"))
    }

    type UpgradeStream = BoxStream<LifecycleServiceUpgradeResponse>;
    async fn upgrade(
        &self,
        request: Request<LifecycleServiceUpgradeRequest>,
    ) -> Result<Response<Self::UpgradeStream>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/machine.LifecycleService/Upgrade")?;
        let image = request
            .get_ref()
            .source
            .as_ref()
            .map(|s| s.image_name.trim().to_string())
            .unwrap_or_default();
        let mut st = self.0.shared.lock();
        let n = &mut st.nodes[t.idx];
        if n.maintenance() {
            return Err(Status::failed_precondition("machine is not installed"));
        }
        if n.upgrade_running {
            return Err(Status::failed_precondition(
                "another installation/upgrade is already in progress",
            ));
        }
        if image.is_empty() {
            return Err(Status::invalid_argument("installer image name is required"));
        }
        if !n.images.contains(&image) {
            return Err(Status::internal(format!(
                "upgrade failed: installer image {image:?} not found in containerd store"
            )));
        }
        let Some(target) = version::from_image(&image) else {
            return Err(Status::internal(format!(
                "upgrade failed: installer image {image:?} has no version tag"
            )));
        };
        let mut out = vec![
            line(Progress::Message(format!("running installer {image}"))),
            line(Progress::Message(format!(
                "host version {}, installer version {target}",
                n.version
            ))),
        ];
        match version::run_installer(&n.version, &target, n.faults.installer_fails) {
            Err(msg) => {
                out.push(line(Progress::Message(format!("error: {msg}"))));
                out.push(line(Progress::ExitCode(1)));
            }
            Ok(()) => {
                n.pending_version = Some(target.clone());
                // The running system keeps its schematic until it boots the new slot.
                n.pending_schematic = version::schematic_from_image(&image);
                out.push(line(Progress::Message(format!(
                    "installed Talos {target} to the inactive boot slot"
                ))));
                out.push(line(Progress::Message(
                    "upgrade complete, reboot to activate".into(),
                )));
                out.push(line(Progress::ExitCode(0)));
            }
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(out))))
    }
}
