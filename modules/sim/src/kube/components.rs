//! The Kubernetes components Talos runs on a node, as the node's controllers see them: each has a
//! Talos config resource (`APIServerConfigs.kubernetes.talos.dev` and its siblings in the
//! `controlplane` namespace, the kubelet's spec in `k8s`) whose version goes up by one each time
//! what it is rendered from changes, and the component restarts when it does.
//!
//! Upstream (v1.13.9): `internal/app/machined/pkg/controllers/k8s/control_plane.go` renders the
//! config resources from the machine config; `control_plane_static_pod.go` writes the resource's
//! version into the static pod's `talos.dev/config-version` annotation, so a pod carries the
//! version of the config it runs; `pkg/cluster/kubernetes/talos_managed.go` waits for exactly that
//! (the resource's version after the patch, on a Ready pod). COSI resources live in memory, so a
//! boot starts every version again at 1.
//!
//! Talos 1.14 adds a second resource per static pod, `final-<component>`, transformed from the
//! first and the Kubernetes root secrets (`control_plane_final.go` @ v1.14.1: the API server's
//! final config also takes the service account's issuer URL, accepted issuers and audiences from
//! `KubernetesRoot`, `controllers/secrets/root.go`), and the static pod is rendered from it and
//! carries *its* version (`control_plane_static_pod.go` @ v1.14.1). Its counter is its own: COSI
//! bumps a version only when a write changes the spec (`UpdateWithConflicts` in cosi-project
//! runtime `pkg/state/wrap.go` @ v1.14.1), so a change of only the accepted issuers moves the final
//! API server config and not the plain one. Both are kept here; which one the node serves and its
//! pods carry depends on its Talos version (`services/cosi.rs`, `render.rs`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::manifests::ManifestVersions;
use crate::mcfg::StoredConfig;

/// How long a component takes to come back after its config changed: a static pod's container
/// restarting, or the kubelet service being stopped and started again.
pub const RESTART: Duration = Duration::from_millis(700);

/// The components, with where the v1alpha1 config keeps their settings and the Talos 1.14
/// document kind that can hold them instead.
pub const COMPONENTS: &[(&str, &[&str], &str)] = &[
    (
        "kube-apiserver",
        &["cluster", "apiServer"],
        "KubeAPIServerConfig",
    ),
    (
        "kube-controller-manager",
        &["cluster", "controllerManager"],
        "KubeControllerManagerConfig",
    ),
    (
        "kube-scheduler",
        &["cluster", "scheduler"],
        "KubeSchedulerConfig",
    ),
    ("kubelet", &["machine", "kubelet"], "KubeletConfig"),
];

#[derive(Clone, Debug)]
pub struct ComponentState {
    /// The config resource's version (what the static pod's annotation carries up to 1.13).
    pub version: u64,
    /// The `final-` resource's version (Talos 1.14: what the static pod's annotation carries).
    pub final_version: u64,
    /// What the resource is rendered from, to tell a change from a re-apply of the same config.
    source: Value,
    /// What the `final-` resource is rendered from: the same and the root secrets it takes.
    final_source: Value,
    /// The image it runs and, after a change of image, the one it ran before.
    pub image: Option<String>,
    pub previous_image: Option<String>,
    /// When it last (re)started.
    pub changed: Instant,
    pub changed_at: SystemTime,
}

impl ComponentState {
    /// Still restarting after its last change.
    pub fn restarting(&self) -> bool {
        self.changed.elapsed() < RESTART
    }

    /// The image changed since the node booted (a fault can keep such a component from coming up).
    pub fn image_changed(&self) -> bool {
        self.previous_image.is_some()
    }
}

/// The components of one node, and on a control plane the bootstrap manifests it renders;
/// empty in maintenance mode.
#[derive(Clone, Debug, Default)]
pub struct Components {
    running: BTreeMap<&'static str, ComponentState>,
    manifests: ManifestVersions,
}

fn manifests_of(cfg: &StoredConfig, at: SystemTime) -> ManifestVersions {
    if cfg.machine_type().is_some_and(|t| t.is_control_plane()) {
        ManifestVersions::boot(cfg, at)
    } else {
        ManifestVersions::default()
    }
}

fn source_of(cfg: &StoredConfig, path: &[&str], kind: &str) -> Value {
    let mut at = cfg.v1alpha1();
    for key in path {
        at = at.and_then(|v| v.get(*key));
    }
    let doc = cfg
        .docs()
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind));
    json!([at, doc])
}

/// The final config's inputs: the component's own and, for the API server, the service account
/// settings `KubernetesRoot` hands it (`IssuerURL`, `AcceptedIssuers`, `APIAudiences`, from
/// Talos 1.14's `KubeServiceAccountConfig`: `types/k8s/service_account.go` @ v1.14.1). The private
/// key is not among them.
fn final_source_of(cfg: &StoredConfig, name: &str, source: &Value) -> Value {
    if name != "kube-apiserver" {
        return source.clone();
    }
    let account = cfg
        .docs()
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("KubeServiceAccountConfig"));
    let issuer_url = account.and_then(|d| d.pointer("/issuer/issuerURL"));
    let accepted = account.and_then(|d| d.get("accepted"));
    json!([source, issuer_url, accepted])
}

fn image_of(source: &Value) -> Option<String> {
    source
        .as_array()?
        .iter()
        .find_map(|s| s.get("image").and_then(Value::as_str))
        .map(String::from)
}

impl Components {
    /// Every component freshly started at `at` (a boot), each resource at version 1.
    pub fn boot(cfg: Option<&StoredConfig>, at: Instant) -> Components {
        let Some(cfg) = cfg else {
            return Components::default();
        };
        let now = SystemTime::now()
            .checked_sub(at.elapsed())
            .unwrap_or_else(SystemTime::now);
        let running = COMPONENTS
            .iter()
            .map(|(name, path, kind)| {
                let source = source_of(cfg, path, kind);
                let state = ComponentState {
                    version: 1,
                    final_version: 1,
                    image: image_of(&source),
                    final_source: final_source_of(cfg, name, &source),
                    source,
                    previous_image: None,
                    changed: at,
                    changed_at: now,
                };
                (*name, state)
            })
            .collect();
        Components {
            running,
            manifests: manifests_of(cfg, now),
        }
    }

    /// A new running config (an apply without a reboot): each component whose settings changed
    /// gets a new resource version (plain, final or both) and restarts. Returns the components
    /// that restart.
    pub fn update(&mut self, cfg: &StoredConfig) -> Vec<&'static str> {
        if self.running.is_empty() {
            *self = Components::boot(Some(cfg), Instant::now());
            return Vec::new();
        }
        if cfg.machine_type().is_some_and(|t| t.is_control_plane()) {
            self.manifests.update(cfg);
        } else {
            self.manifests = ManifestVersions::default();
        }
        let mut restarted = Vec::new();
        for (name, path, kind) in COMPONENTS {
            let source = source_of(cfg, path, kind);
            let final_source = final_source_of(cfg, name, &source);
            let Some(state) = self.running.get_mut(name) else {
                continue;
            };
            let changed = state.source != source;
            let final_changed = state.final_source != final_source;
            if !changed && !final_changed {
                continue;
            }
            state.version += u64::from(changed);
            state.final_version += u64::from(final_changed);
            state.source = source;
            state.final_source = final_source;
            let image = image_of(&state.source);
            if image != state.image {
                state.previous_image = state.image.take();
            }
            state.image = image;
            state.changed = Instant::now();
            state.changed_at = SystemTime::now();
            restarted.push(*name);
        }
        restarted
    }

    pub fn get(&self, name: &str) -> Option<&ComponentState> {
        self.running.get(name)
    }

    /// The version a node of Talos `talos_version` stamps on `name`'s static pod: the `final-`
    /// resource's from 1.14 on, the plain one's before.
    pub fn pod_config_version(&self, name: &str, talos_version: &str) -> Option<u64> {
        let state = self.get(name)?;
        Some(if has_final_configs(talos_version) {
            state.final_version
        } else {
            state.version
        })
    }

    /// The Manifest resources (`Manifests.kubernetes.talos.dev`) of a control plane.
    pub fn manifests(&self) -> &ManifestVersions {
        &self.manifests
    }

    /// The kubelet is being restarted with a new config.
    pub fn kubelet_restarting(&self) -> bool {
        self.get("kubelet").is_some_and(ComponentState::restarting)
    }
}

/// Whether a node of this Talos version keeps `final-` component configs (1.14 and later).
pub fn has_final_configs(talos_version: &str) -> bool {
    crate::version::minor(talos_version) >= 14
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcfg::Release;
    use crate::sample::SampleCluster;
    use ferro_talos_config::contract::Contract;

    fn control_plane_114() -> StoredConfig {
        let sample = SampleCluster::generate();
        let text = SampleCluster::render(&sample.bundle, Contract::V1_14).controlplane;
        StoredConfig::parse(text.as_bytes(), Release::V1_14).unwrap()
    }

    fn set_doc(cfg: &mut StoredConfig, kind: &str, key: &str, value: Value) {
        let doc = cfg.docs.iter_mut().find(|d| d["kind"] == kind).unwrap();
        doc[key] = value;
    }

    /// `control_plane_final.go` @ v1.14.1: the final API server config also takes the service
    /// account's accepted audiences (`controllers/secrets/root.go`), so changing only those moves
    /// the final resource and not the plain one; a 1.14 pod carries the final one's version
    /// (`control_plane_static_pod.go`), a 1.13 pod the plain one's.
    #[test]
    fn the_final_config_has_a_counter_of_its_own() {
        let mut cfg = control_plane_114();
        let mut components = Components::boot(Some(&cfg), Instant::now());
        let api = |c: &Components| {
            let s = c.get("kube-apiserver").unwrap();
            (s.version, s.final_version)
        };
        assert_eq!(api(&components), (1, 1));
        set_doc(
            &mut cfg,
            "KubeServiceAccountConfig",
            "accepted",
            json!({"audiences": ["https://extra.example"]}),
        );
        assert_eq!(components.update(&cfg), ["kube-apiserver"]);
        assert_eq!(api(&components), (1, 2));
        set_doc(
            &mut cfg,
            "KubeAPIServerConfig",
            "image",
            json!("registry.k8s.io/kube-apiserver:v1.28.1"),
        );
        assert_eq!(components.update(&cfg), ["kube-apiserver"]);
        assert_eq!(api(&components), (2, 3));
        assert_eq!(
            components.pod_config_version("kube-apiserver", "v1.14.1"),
            Some(3)
        );
        assert_eq!(
            components.pod_config_version("kube-apiserver", "v1.13.9"),
            Some(2)
        );
        // The other components' final configs move with their plain ones.
        let sched = components.get("kube-scheduler").unwrap();
        assert_eq!((sched.version, sched.final_version), (1, 1));
    }
}
