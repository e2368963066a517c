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
    /// The config resource's version (what the static pod's annotation carries).
    pub version: u64,
    /// What the resource is rendered from, to tell a change from a re-apply of the same config.
    source: Value,
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
                    image: image_of(&source),
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
    /// gets a new resource version and restarts. Returns the components that restart.
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
            let Some(state) = self.running.get_mut(name) else {
                continue;
            };
            if state.source == source {
                continue;
            }
            let image = image_of(&source);
            if image != state.image {
                state.previous_image = state.image.take();
            }
            state.image = image;
            state.source = source;
            state.version += 1;
            state.changed = Instant::now();
            state.changed_at = SystemTime::now();
            restarted.push(*name);
        }
        restarted
    }

    pub fn get(&self, name: &str) -> Option<&ComponentState> {
        self.running.get(name)
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
