//! The control plane's component configs Talos renders from the machine config (COSI namespace
//! `controlplane`): their version is what a static pod's `talos.dev/config-version` annotation
//! carries, so comparing the two tells whether a pod runs the latest config. Upstream's
//! `pkg/cluster/kubernetes/talos_managed.go` (v1.13.9) waits on exactly this after each patch.
//!
//! Talos 1.14 renders the static pod from a second resource, `final-<component>`, made from the
//! first and the Kubernetes root secrets (`internal/app/machined/pkg/controllers/k8s/
//! control_plane_final.go`, `control_plane_static_pod.go` @ v1.14.0 and v1.14.1), and the pod
//! carries that one's version; the two counters diverge (a change of the service account's
//! accepted issuers moves only the final one). talosctl 1.14.1 reads `final-` first and falls back
//! to the plain id on older nodes (`watchControlPlaneConfig`, `talos_managed.go` @ v1.14.1);
//! talosctl 1.14.0 still read the plain one.

use ferro_talos_proto::resource::k8s::{
    ApiServerConfigSpec, ControllerManagerConfigSpec, SchedulerConfigSpec,
};
use prost::Message;

use crate::client::TalosClient;
use crate::error::{ClientError, ErrorKind, Result};

/// A component Talos runs as a static pod on every control plane, in the order talosctl
/// upgrades them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticPodComponent {
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl StaticPodComponent {
    pub const ALL: [StaticPodComponent; 3] = [
        StaticPodComponent::ApiServer,
        StaticPodComponent::ControllerManager,
        StaticPodComponent::Scheduler,
    ];

    /// The pod's `k8s-app` label, the service id and the config resource's id.
    pub fn name(self) -> &'static str {
        match self {
            StaticPodComponent::ApiServer => "kube-apiserver",
            StaticPodComponent::ControllerManager => "kube-controller-manager",
            StaticPodComponent::Scheduler => "kube-scheduler",
        }
    }

    fn resource_type(self) -> &'static str {
        match self {
            StaticPodComponent::ApiServer => "APIServerConfigs.kubernetes.talos.dev",
            StaticPodComponent::ControllerManager => {
                "ControllerManagerConfigs.kubernetes.talos.dev"
            }
            StaticPodComponent::Scheduler => "SchedulerConfigs.kubernetes.talos.dev",
        }
    }
}

/// One component's config resource as the node holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentConfig {
    /// The resource version, as the pod annotation spells it.
    pub version: String,
    pub image: String,
}

impl TalosClient {
    /// The node's current config for `component`, the one its static pod is rendered from:
    /// `final-<component>` where the node has it (Talos 1.14), else `<component>` (the resource
    /// is sensitive: admin only).
    pub async fn component_config(&self, component: StaticPodComponent) -> Result<ComponentConfig> {
        let op = format!("read the {} config", component.name());
        let (ns, ty) = ("controlplane", component.resource_type());
        let final_id = format!("final-{}", component.name());
        let res = match self.get_resource(ns, ty, &final_id).await {
            Err(e) if e.kind == ErrorKind::NotFound => {
                self.get_resource(ns, ty, component.name()).await
            }
            found => found,
        }
        .map_err(|e| e.during(&op))?;
        let version = res.metadata.map(|m| m.version).unwrap_or_default();
        let spec = res.spec.unwrap_or_default();
        let bytes = spec.proto_spec.as_slice();
        let image = match component {
            StaticPodComponent::ApiServer => ApiServerConfigSpec::decode(bytes).map(|s| s.image),
            StaticPodComponent::ControllerManager => {
                ControllerManagerConfigSpec::decode(bytes).map(|s| s.image)
            }
            StaticPodComponent::Scheduler => SchedulerConfigSpec::decode(bytes).map(|s| s.image),
        }
        .map_err(|e| {
            ClientError::new(
                self.target(),
                &op,
                ErrorKind::Other,
                format!("the spec is not decodable: {e}"),
            )
        })?;
        Ok(ComponentConfig { version, image })
    }
}
