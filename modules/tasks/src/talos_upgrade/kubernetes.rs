//! The Kubernetes part: the component images a node's config sets, the move planned for them, and
//! the apply that moves them on this one node.

use std::time::Instant;

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::{Apply, ApplyMode, StaticPodComponent, TalosClient};
use ferro_talos_config::MachineConfig;
use ferro_talos_config::normalize::Rules;
use semver::Version;
use serde_json::{Map, Value, json};

use super::POLL_INTERVAL;
use super::image::{retag, split_image};
use super::report::Report;
use super::upgrade_node::read_config;
use super::version_policy::{kubernetes_path_ok, kubernetes_supported, parse_version};
use crate::shared::kubernetes_config::Section;

/// One Kubernetes component image in the machine config.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub name: &'static str,
    /// Where the config keeps the component's settings (its 1.14 document or v1alpha1); the
    /// image is their `image`.
    pub section: Section,
    pub image: String,
    pub version: Version,
    /// The image flavour after the version in the tag (`-fat`, `-slim`), kept when retagged.
    pub flavour: &'static str,
}

impl Component {
    /// The component's image at `version`, in the same repository and flavour.
    pub fn retagged(&self, version: &Version) -> String {
        format!("{}{}", retag(&self.image, version), self.flavour)
    }

    /// Where the image is, as a user writes it (`KubeletConfig.image`, `machine.kubelet.image`).
    pub fn image_path(&self) -> String {
        self.section.path("image")
    }
}

const KUBELET: &str = "kubelet";

/// The flavours of siderolabs' kubelet images; `talosctl upgrade-k8s` keeps them
/// (`extractKubeletVersionSuffix` in `pkg/cluster/kubernetes/kubelet.go` at v1.13.9).
const KUBELET_FLAVOURS: [&str; 2] = ["-fat", "-slim"];
const CONTROL_PLANE_COMPONENTS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
];

/// The Kubernetes component images a node's config sets: kubelet everywhere, the control-plane
/// static pods and kube-proxy on control planes (kube-proxy only when not disabled). Each is read
/// where this config keeps it (`crate::shared::kubernetes_config`).
pub fn kubernetes_components(config: &MachineConfig) -> Result<Vec<Component>, String> {
    let machine_type = config
        .v1alpha1()
        .and_then(|v| v.pointer("/machine/type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let control_plane = matches!(machine_type, "controlplane" | "init");
    let mut wanted = vec![KUBELET];
    if control_plane {
        wanted.extend(CONTROL_PLANE_COMPONENTS);
    }
    let mut out = Vec::new();
    for name in wanted {
        let Some(section) = Section::of(config, name) else {
            continue;
        };
        if name == "kube-proxy" && section.disabled(config) {
            continue;
        }
        let path = section.path("image");
        let image = section.get_str(config, "image").ok_or_else(|| {
            format!(
                "{path} is not set in the node's machine config, so the current {name} version is unknown; \
                 set it (for example with talos_config's kubernetes_version) first"
            )
        })?;
        let tag = split_image(image).1.unwrap_or("");
        let flavour = if name == KUBELET {
            KUBELET_FLAVOURS
                .into_iter()
                .find(|f| tag.ends_with(f))
                .unwrap_or("")
        } else {
            ""
        };
        let version = parse_version(&tag[..tag.len() - flavour.len()])
            .map_err(|_| format!("{path} is {image:?}, whose tag is not a Kubernetes version"))?;
        out.push(Component {
            name,
            section,
            image: image.to_string(),
            version,
            flavour,
        });
    }
    Ok(out)
}

/// The Kubernetes move planned for one node.
#[derive(Debug, Clone)]
pub struct KubernetesPlan {
    pub current: Version,
    pub target: Version,
    pub components: Vec<Component>,
}

impl KubernetesPlan {
    pub fn changes(&self) -> bool {
        self.components.iter().any(|c| c.version != self.target)
    }

    pub(super) fn to_json(&self) -> Value {
        let components: Map<String, Value> = self
            .components
            .iter()
            .map(|c| {
                let after = c.retagged(&self.target);
                let changed = c.version != self.target;
                (
                    c.name.to_string(),
                    json!({
                        "current": c.version.to_string(),
                        "target": self.target.to_string(),
                        "image": c.image,
                        "target_image": if changed { after } else { c.image.clone() },
                        "changed": changed,
                    }),
                )
            })
            .collect();
        json!({
            "current": self.current.to_string(),
            "target": self.target.to_string(),
            "components": components,
        })
    }

    /// The bootstrap manifests this module leaves at the old version (they live in Kubernetes).
    pub(super) fn unsynced_manifests(&self) -> Value {
        self.components
            .iter()
            .filter(|c| c.name == "kube-proxy" && c.version != self.target)
            .map(|c| {
                json!({
                    "kind": "DaemonSet",
                    "namespace": "kube-system",
                    "name": "kube-proxy",
                    "image": c.image,
                    "config_image": c.retagged(&self.target),
                })
            })
            .collect()
    }
}

pub fn plan_kubernetes(
    config: &MachineConfig,
    want: &Version,
    talos: &Version,
) -> Result<KubernetesPlan, String> {
    if let Some(Err(why)) = kubernetes_supported(talos, want) {
        return Err(why);
    }
    let components = kubernetes_components(config)?;
    for c in &components {
        kubernetes_path_ok(&c.version, want).map_err(|why| format!("{}: {why}", c.name))?;
    }
    let current = components
        .iter()
        .map(|c| c.version.clone())
        .min()
        .unwrap_or_else(|| want.clone());
    Ok(KubernetesPlan {
        current,
        target: want.clone(),
        components,
    })
}

/// Patch the component images, apply without reboot, wait until the node serves them.
pub(super) async fn upgrade_kubernetes(
    client: &TalosClient,
    plan: &KubernetesPlan,
    talos: &Version,
    deadline: Instant,
    report: &mut Report,
) -> Result<(), ModuleError> {
    let mut config = read_config(client, report).await?;
    let mut expected = Vec::new();
    for c in plan.components.iter().filter(|c| c.version != plan.target) {
        let new_image = c.retagged(&plan.target);
        let section = Section::of(&config, c.name).unwrap_or(c.section);
        if !section.set(&mut config, "image", Value::String(new_image.clone())) {
            return Err(report.fail(format!(
                "{} vanished from the node's config",
                section.path("image")
            )));
        }
        expected.push((c.name, new_image));
    }
    // What the control plane's config resources say before the apply: after it, each moved
    // component's resource must reach a new version (Talos rendered the new image), as
    // talosctl waits for before it looks at the pod.
    let mut rendered = Vec::new();
    for component in StaticPodComponent::ALL {
        let moves = plan
            .components
            .iter()
            .any(|c| c.name == component.name() && c.version != plan.target);
        if moves && let Ok(before) = client.component_config(component).await {
            rendered.push((component, before.version));
        }
    }
    let yaml = config.to_yaml_with(Rules::for_release(talos.major, talos.minor));
    let applied = client
        .apply_configuration(yaml.as_bytes(), ApplyMode::NoReboot, Apply::ForReal, None)
        .await
        .map_err(|e| report.client_fail(e))?;
    report.changed = true;
    report.warnings.extend(applied.warnings);
    report.set("manifests_not_synced", plan.unsynced_manifests());
    loop {
        let last = match kubernetes_healthy(client, &expected, &rendered).await {
            Ok(()) => return Ok(()),
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            return Err(report.fail(format!(
                "the Kubernetes {} images were applied but the node did not report them healthy in time (last state: {last})",
                plan.target
            )));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Version answers, the control plane's component configs have new versions, the config reads
/// back with the new images, kubelet runs.
async fn kubernetes_healthy(
    client: &TalosClient,
    expected: &[(&'static str, String)],
    rendered: &[(StaticPodComponent, String)],
) -> Result<(), String> {
    for (component, before) in rendered {
        let now = client
            .component_config(*component)
            .await
            .map_err(|e| e.to_string())?;
        if &now.version == before {
            return Err(format!(
                "Talos has not rendered the new {} config yet",
                component.name()
            ));
        }
    }
    client.version().await.map_err(|e| e.to_string())?;
    let bytes = client
        .get_machine_config()
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    let cfg = MachineConfig::parse(&text).map_err(|e| format!("config unreadable: {e:#}"))?;
    for (name, image) in expected {
        let Some(section) = Section::of(&cfg, name) else {
            continue;
        };
        let now = section.get_str(&cfg, "image").unwrap_or("");
        if now != image {
            return Err(format!("{} is still {now:?}", section.path("image")));
        }
    }
    let services = client.service_list().await.map_err(|e| e.to_string())?;
    match services.iter().find(|s| s.id == "kubelet") {
        Some(s) if s.state == "Running" => Ok(()),
        Some(s) => Err(format!("kubelet is {}", s.state)),
        None => Err("kubelet is not in the service list".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::talos_upgrade::test_support::v;

    fn config(kubelet: &str, cp: Option<&str>) -> MachineConfig {
        let mut cfg = json!({"machine": {"type": if cp.is_some() { "controlplane" } else { "worker" },
                                          "kubelet": {"image": kubelet}}});
        if let Some(tag) = cp {
            cfg["cluster"] = json!({
                "apiServer": {"image": format!("registry.k8s.io/kube-apiserver:{tag}")},
                "controllerManager": {"image": format!("registry.k8s.io/kube-controller-manager:{tag}")},
                "scheduler": {"image": format!("registry.k8s.io/kube-scheduler:{tag}")},
                "proxy": {"image": format!("registry.k8s.io/kube-proxy:{tag}")},
            });
        }
        MachineConfig { docs: vec![cfg] }
    }

    /// The same settings as Talos 1.14 renders them: one document per component, the v1alpha1
    /// document holding none (`pkg/machinery/config/types/k8s/*.go` @ v1.14.1).
    fn config_114(kubelet: &str, cp: Option<&str>) -> MachineConfig {
        let doc = |kind: &str, image: String| json!({"apiVersion": "v1alpha1", "kind": kind, "image": image});
        let machine_type = if cp.is_some() {
            "controlplane"
        } else {
            "worker"
        };
        let mut docs = vec![
            json!({"version": "v1alpha1", "machine": {"type": machine_type}, "cluster": {}}),
            doc("KubeletConfig", kubelet.to_string()),
        ];
        if let Some(tag) = cp {
            docs.push(doc(
                "KubeAPIServerConfig",
                format!("registry.k8s.io/kube-apiserver:{tag}"),
            ));
            docs.push(doc(
                "KubeControllerManagerConfig",
                format!("registry.k8s.io/kube-controller-manager:{tag}"),
            ));
            docs.push(doc(
                "KubeSchedulerConfig",
                format!("registry.k8s.io/kube-scheduler:{tag}"),
            ));
            docs.push(doc(
                "KubeProxyConfig",
                format!("registry.k8s.io/kube-proxy:{tag}"),
            ));
        }
        MachineConfig { docs }
    }

    /// A 1.14-shaped config is read from its documents (`stdpatches/guess.go` @ v1.14.1), where
    /// the v1alpha1 reading found nothing ("machine.kubelet.image is not set").
    #[test]
    fn the_1_14_documents_hold_the_images() {
        let cp = config_114("ghcr.io/siderolabs/kubelet:v1.36.2", Some("v1.36.2"));
        let comps = kubernetes_components(&cp).unwrap();
        let paths: Vec<String> = comps.iter().map(Component::image_path).collect();
        assert_eq!(
            paths,
            [
                "KubeletConfig.image",
                "KubeAPIServerConfig.image",
                "KubeControllerManagerConfig.image",
                "KubeSchedulerConfig.image",
                "KubeProxyConfig.image",
            ]
        );
        let plan = plan_kubernetes(&cp, &v("1.36.3"), &v("1.14.1")).unwrap();
        assert_eq!(plan.current, v("1.36.2"));
        let mut disabled = cp.clone();
        disabled.docs[5]["enabled"] = json!(false);
        assert_eq!(kubernetes_components(&disabled).unwrap().len(), 4);
        let mut missing = config_114("", None);
        missing.docs[1].as_object_mut().unwrap().remove("image");
        assert!(
            kubernetes_components(&missing)
                .unwrap_err()
                .contains("KubeletConfig.image is not set")
        );
    }

    #[test]
    fn kubernetes_components_and_paths() {
        let worker = config("ghcr.io/siderolabs/kubelet:v1.35.2", None);
        let comps = kubernetes_components(&worker).unwrap();
        assert_eq!(comps.len(), 1);
        let cp = config("ghcr.io/siderolabs/kubelet:v1.36.1", Some("v1.35.0"));
        let plan = plan_kubernetes(&cp, &v("1.36.1"), &v("1.13.6")).unwrap();
        assert_eq!(plan.components.len(), 5);
        assert_eq!(plan.current, v("1.35.0"));
        assert!(plan.changes());
        assert_eq!(plan.unsynced_manifests().as_array().map(Vec::len), Some(1));
        let up = config("ghcr.io/siderolabs/kubelet:v1.36.1", Some("v1.36.1"));
        assert!(
            !plan_kubernetes(&up, &v("1.36.1"), &v("1.13.6"))
                .unwrap()
                .changes()
        );
        let err = plan_kubernetes(
            &config("ghcr.io/siderolabs/kubelet:v1.34.2", None),
            &v("1.36.1"),
            &v("1.13.6"),
        )
        .unwrap_err();
        assert!(
            err.contains("unsupported upgrade path 1.34->1.36") && err.contains("1.35.x"),
            "{err}"
        );
        let err = plan_kubernetes(&up, &v("1.37.0"), &v("1.13.6")).unwrap_err();
        assert!(
            err.contains("supports Kubernetes 1.31.0 to 1.36.x"),
            "{err}"
        );
        let mut disabled = up.clone();
        disabled.docs[0]["cluster"]["proxy"]["disabled"] = json!(true);
        assert_eq!(kubernetes_components(&disabled).unwrap().len(), 4);
        let missing = MachineConfig {
            docs: vec![json!({"machine": {"type": "worker"}})],
        };
        assert!(
            kubernetes_components(&missing)
                .unwrap_err()
                .contains("machine.kubelet.image")
        );
    }

    /// `pkg/cluster/kubernetes/kubelet.go` (v1.13.9) keeps a kubelet image's `-fat`/`-slim`
    /// flavour when it moves the tag; the version is read without it.
    #[test]
    fn a_kubelet_flavour_survives_the_retag() {
        let fat = config("ghcr.io/siderolabs/kubelet:v1.36.1-fat", None);
        let comps = kubernetes_components(&fat).unwrap();
        assert_eq!(comps[0].version, v("1.36.1"));
        assert_eq!(
            comps[0].retagged(&v("1.36.2")),
            "ghcr.io/siderolabs/kubelet:v1.36.2-fat"
        );
        assert!(
            !plan_kubernetes(&fat, &v("1.36.1"), &v("1.13.6"))
                .unwrap()
                .changes(),
            "same version: nothing to do"
        );
        let slim = config("ghcr.io/siderolabs/kubelet:v1.36.1-slim@sha256:00", None);
        assert_eq!(
            kubernetes_components(&slim).unwrap()[0].retagged(&v("1.36.2")),
            "ghcr.io/siderolabs/kubelet:v1.36.2-slim"
        );
    }
}
