//! `talos_kubernetes_upgrade`: move the whole cluster's Kubernetes to one version, run once, in
//! the order `talosctl upgrade-k8s` uses (upstream `pkg/cluster/kubernetes/talos_managed.go` and
//! `kubelet.go` at v1.13.9):
//!
//! 1. checks, before anything moves: every node's Talos supports the target, every component is
//!    at most one minor behind it, and nothing the next minor removes is still in use;
//! 2. pre-pull the new images on every node;
//! 3. kube-apiserver on every control plane, then kube-controller-manager, then kube-scheduler;
//!    per node, patch the image, apply without a reboot, wait until the component's config
//!    resource has its new version and the static pod carries that version and is Ready;
//! 4. kube-proxy's image on the control planes (no wait: it is a DaemonSet);
//! 5. the kubelets, control planes first, each waiting until its Node reports the new version
//!    and is Ready;
//! 6. the bootstrap manifests the first control plane renders, server-side applied, pruned and
//!    waited on (`kubernetes_manifests.rs`). This runs even when every component is at the
//!    target, as `talosctl upgrade-k8s --to <current>` does, so the task also syncs a changed
//!    inline manifest or kube-proxy setting.
//!
//! A failure stops there: the message names the component and the node, and what already moved.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_client::proto::common::ContainerdNamespace;
use ferro_talos_client::{Apply, ApplyMode, ErrorKind, StaticPodComponent, TalosClient};
use ferro_talos_config::MachineConfig;
use ferro_talos_config::normalize::Rules;
use ferro_talos_kube::{Change, Kube, SyncMode};
use semver::Version;
use serde_json::{Value, json};

use crate::shared::connection::{self, Target, with_connection_options};
use crate::shared::failure::{OrFail, client_failure};
use crate::shared::kube_access::KubeCredentials;
use crate::shared::kubernetes_config::{Section, cluster_endpoint};
use crate::shared::kubernetes_manifests::{self, ManifestSettings, ProxyImage};
use crate::shared::kubernetes_removed::{self, InUse};
use crate::shared::live_config::{self, ReadError};
use crate::talos_upgrade::{
    Component, kubernetes_components, kubernetes_path_ok, kubernetes_supported, parse_version,
};

mod args;
pub use args::Args;

/// talosctl waits 5 minutes for each static pod (`checkPodStatus`) and 3 for each kubelet.
const DEFAULT_TIMEOUT_SECS: i64 = 300;
const POLL: Duration = Duration::from_secs(1);

pub fn spec() -> Spec {
    kubernetes_manifests::options(with_connection_options(Spec::new()))
        .option(
            Opt::list("control_plane_nodes")
                .elements(Type::Str)
                .required(),
        )
        .option(
            Opt::list("worker_nodes")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::str("kubernetes_version").required())
        .option(Opt::bool("pre_pull").default(true))
        .option(Opt::bool("upgrade_kubelet").default(true))
        .option(Opt::int("timeout").default(DEFAULT_TIMEOUT_SECS))
        .option(Opt::path("kubeconfig"))
}

/// What moves, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    StaticPod(StaticPodComponent),
    KubeProxy,
    Kubelet,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::StaticPod(c) => c.name(),
            Phase::KubeProxy => "kube-proxy",
            Phase::Kubelet => "kubelet",
        }
    }
}

/// One component on one node.
#[derive(Debug, Clone)]
pub struct Step {
    pub phase: Phase,
    pub node: String,
    pub component: Component,
    pub target_image: String,
}

impl Step {
    pub fn changes(&self) -> bool {
        self.component.image != self.target_image
    }

    fn to_json(&self, state: &str) -> Value {
        json!({
            "component": self.phase.name(),
            "node": self.node,
            "image": self.component.image,
            "target_image": self.target_image,
            "version": self.component.version.to_string(),
            "changed": self.changes(),
            "state": state,
        })
    }
}

/// What the plan and the checks read of one node: plain data, so they are tested without one.
struct NodeFacts {
    address: String,
    control_plane: bool,
    talos: Version,
    config: MachineConfig,
    components: Vec<Component>,
}

/// One node as read before anything moves.
struct NodeView {
    facts: NodeFacts,
    /// The name its kubelet registers (COSI `k8s/Nodename`); None when Talos does not say.
    node_name: Option<String>,
    client: TalosClient,
}

/// The ordered steps: every static pod component across all control planes, kube-proxy, then
/// the kubelets (control planes first, as the nodes are listed).
fn plan(nodes: &[&NodeFacts], target: &Version, kubelets: bool) -> Vec<Step> {
    let mut phases: Vec<Phase> = StaticPodComponent::ALL
        .into_iter()
        .map(Phase::StaticPod)
        .collect();
    phases.push(Phase::KubeProxy);
    if kubelets {
        phases.push(Phase::Kubelet);
    }
    let mut steps = Vec::new();
    for phase in phases {
        for n in nodes {
            if let Some(c) = n.components.iter().find(|c| c.name == phase.name()) {
                steps.push(Step {
                    phase,
                    node: n.address.clone(),
                    component: c.clone(),
                    target_image: c.retagged(target),
                });
            }
        }
    }
    steps
}

/// The checks of step 1, all of them, so one run names every problem.
fn check(nodes: &[&NodeFacts], target: &Version) -> Result<(), String> {
    let mut problems = Vec::new();
    for n in nodes {
        if let Some(Err(why)) = kubernetes_supported(&n.talos, target) {
            problems.push(format!(
                "{}: {why}; upgrade Talos first (ferro.talos.upgrade with talos_upgrade_talos_version)",
                n.address
            ));
        }
        for c in &n.components {
            if let Err(why) = kubernetes_path_ok(&c.version, target) {
                problems.push(format!("{}: {}: {why}", n.address, c.name));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(problems.join("; "))
}

/// Removed feature gates, flags and admission plugins still set, for each minor move a node's
/// components make.
fn removed_in_use(nodes: &[&NodeFacts], target: &Version) -> Vec<InUse> {
    let mut out = Vec::new();
    for n in nodes {
        let Some(from) = n.components.iter().map(|c| c.version.minor).min() else {
            continue;
        };
        let Some(r) = kubernetes_removed::removals(from, target.minor) else {
            continue;
        };
        out.extend(kubernetes_removed::in_use(
            &n.address,
            &n.config,
            n.control_plane,
            &r,
        ));
    }
    out
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target: first,
        control_planes,
        workers,
        version,
        pre_pull,
        upgrade_kubelet,
        timeout,
        manifests,
        kubeconfig,
    } = args;
    let settings = Settings {
        target: version,
        pre_pull,
        kubelets: upgrade_kubelet,
        timeout,
        check_mode: ctx.check_mode,
        manifests,
    };
    let opts = connection.connect_options(Duration::from_secs(30));
    let (creds, source) = connection::require_credentials(ctx, &connection)?;
    let kube_credentials = KubeCredentials::load(ctx, kubeconfig.as_deref(), &connection.secrets)?;
    let outcome = connection::block_on(async {
        let mut nodes = Vec::new();
        for (t, control_plane) in control_planes
            .iter()
            .map(|t| (t, true))
            .chain(workers.iter().map(|t| (t, false)))
        {
            nodes.push(read_node(t, &creds, opts.clone(), control_plane).await?);
        }
        let entry = connection::connect(&first, &creds, opts.clone())
            .await
            .or_fail()?;
        let mut upgrade = Upgrade {
            settings: &settings,
            nodes,
            entry,
            kube_credentials: &kube_credentials,
            moved: Vec::new(),
            warnings: Vec::new(),
            prepulled: Vec::new(),
            manifests: Vec::new(),
        };
        let result = upgrade.run().await;
        Ok::<_, ModuleError>((
            result,
            upgrade.warnings,
            upgrade.prepulled,
            upgrade.manifests,
        ))
    })?;
    let (result, warnings, prepulled, manifests) = outcome?;
    for w in warnings {
        ctx.warn(w);
    }
    let (steps, current) = result?;
    let moving: Vec<&Step> = steps
        .iter()
        .filter(|(s, _)| s.changes())
        .map(|(s, _)| s)
        .collect();
    let manifest_summary = kubernetes_manifests::summary(&manifests);
    let changed = !moving.is_empty() || manifest_summary.is_some();
    let would = if settings.check_mode { "would " } else { "" };
    let components = if moving.is_empty() {
        format!("Kubernetes is at {} on every node", settings.target)
    } else {
        let verb = if settings.check_mode {
            "would move"
        } else {
            "moved"
        };
        format!(
            "{verb} {} component(s) from {current} to {}: {}",
            moving.len(),
            settings.target,
            summary(&moving)
        )
    };
    let manifests_part = match (&settings.manifests, &manifest_summary) {
        (None, _) => String::new(),
        (Some(_), Some(text)) => format!("; bootstrap manifests {would}change: {text}"),
        (Some(_), None) => "; the bootstrap manifests are in sync".into(),
    };
    let msg = if changed {
        format!("{components}{manifests_part}")
    } else {
        format!("{components}{manifests_part}: nothing to do")
    };
    Ok(ModuleResult::new(changed)
        .msg(msg)
        .with("credentials", json!(source.describe()))
        .with(
            "kubernetes",
            json!({"current": current.to_string(), "target": settings.target.to_string()}),
        )
        .with(
            "steps",
            Value::Array(steps.iter().map(|(s, state)| s.to_json(state)).collect()),
        )
        .with("prepulled", json!(prepulled))
        .with("manifests", kubernetes_manifests::to_json(&manifests)))
}

/// `kube-apiserver on 10.5.0.2, 10.5.0.3; kubelet on ...`, in the order of the steps.
fn summary(steps: &[&Step]) -> String {
    let mut parts: Vec<(&str, Vec<&str>)> = Vec::new();
    for s in steps {
        match parts.last_mut() {
            Some((name, nodes)) if *name == s.phase.name() => nodes.push(&s.node),
            _ => parts.push((s.phase.name(), vec![&s.node])),
        }
    }
    parts
        .iter()
        .map(|(name, nodes)| format!("{name} on {}", nodes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

struct Settings {
    target: Version,
    pre_pull: bool,
    kubelets: bool,
    timeout: Duration,
    check_mode: bool,
    manifests: Option<ManifestSettings>,
}

async fn read_node(
    t: &Target,
    creds: &ferro_talos_client::Credentials,
    opts: ferro_talos_client::ConnectOptions,
    control_plane: bool,
) -> Result<NodeView, ModuleError> {
    let client = connection::connect(t, creds, opts).await.or_fail()?;
    let version = client.version().await.or_fail()?;
    let tag = version.version.map(|v| v.tag).unwrap_or_default();
    let talos = parse_version(&tag).map_err(|_| {
        ModuleError::new(format!(
            "{}: the node reports Talos version {tag:?}, which is not a semantic version",
            t.node
        ))
    })?;
    let config = read_config(&client, &t.node).await?;
    let v1 = config.v1alpha1().cloned().unwrap_or(Value::Null);
    let machine_type = v1
        .pointer("/machine/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let is_control_plane = matches!(machine_type, "controlplane" | "init");
    if is_control_plane != control_plane {
        let (listed, is) = if control_plane {
            ("control_plane_nodes", "a worker")
        } else {
            ("worker_nodes", "a control plane")
        };
        return Err(ModuleError::new(format!(
            "{}: listed in {listed}, but its machine config makes it {is} (machine.type {machine_type:?}); \
             list it where it belongs",
            t.node
        )));
    }
    let components = kubernetes_components(&config)
        .map_err(|why| ModuleError::new(format!("{}: {why}", t.node)))?;
    // Older nodes may not serve it: the pod and the Node are then found by address.
    let node_name = client.nodename().await.ok().flatten();
    Ok(NodeView {
        facts: NodeFacts {
            address: t.node.clone(),
            control_plane,
            talos,
            config,
            components,
        },
        node_name,
        client,
    })
}

async fn read_config(client: &TalosClient, node: &str) -> Result<MachineConfig, ModuleError> {
    live_config::read(client).await.map_err(|e| match e {
        ReadError::Client(e) => client_failure(e),
        ReadError::Unusable(why) => ModuleError::new(format!(
            "{node}: cannot use the node's machine config: {why}"
        )),
    })
}

struct Upgrade<'a> {
    settings: &'a Settings,
    nodes: Vec<NodeView>,
    /// The task's `node` (through `endpoint`): where Talos issues a kubeconfig if needed.
    entry: TalosClient,
    kube_credentials: &'a KubeCredentials,
    /// Steps done so far, for the failure message.
    moved: Vec<String>,
    warnings: Vec<String>,
    prepulled: Vec<Value>,
    /// What the manifest sync did or would do.
    manifests: Vec<Change>,
}

type Planned = (Vec<(Step, &'static str)>, Version);

impl Upgrade<'_> {
    async fn run(&mut self) -> Result<Planned, ModuleError> {
        let target = self.settings.target.clone();
        let facts: Vec<&NodeFacts> = self.nodes.iter().map(|n| &n.facts).collect();
        check(&facts, &target).map_err(ModuleError::new)?;
        let steps = plan(&facts, &target, self.settings.kubelets);
        let current = steps
            .iter()
            .map(|s| s.component.version.clone())
            .min()
            .unwrap_or_else(|| target.clone());
        let in_use = removed_in_use(&facts, &target);
        if !in_use.is_empty() {
            let items: Vec<String> = in_use
                .iter()
                .map(|u| {
                    format!(
                        "{}: {} {} {} (at {})",
                        u.node, u.component, u.what, u.value, u.path
                    )
                })
                .collect();
            return Err(ModuleError::new(format!(
                "Kubernetes {target} removes what the cluster still uses: {}; remove these settings (talos_config \
                 patches) before upgrading; nothing was changed",
                items.join("; ")
            )));
        }
        let moving = steps.iter().any(Step::changes);
        if !moving && self.settings.manifests.is_none() {
            return Ok((
                steps.into_iter().map(|s| (s, "at target")).collect(),
                current,
            ));
        }
        let kube = self.kube().await?;
        if moving {
            self.removed_resources(&kube, &current, &target).await?;
        }
        let proxy = self.proxy_image(&steps);
        if self.settings.check_mode {
            self.sync_manifests(&kube, &proxy, SyncMode::Plan).await?;
            let planned = steps
                .into_iter()
                .map(|s| {
                    let state = if s.changes() {
                        "would move"
                    } else {
                        "at target"
                    };
                    (s, state)
                })
                .collect();
            return Ok((planned, current));
        }
        if moving && self.settings.pre_pull {
            self.pre_pull(&steps).await?;
        }
        let mut done = Vec::new();
        for step in steps {
            let state = self.apply_step(&kube, &step).await?;
            if step.changes() {
                self.moved
                    .push(format!("{} on {}", step.phase.name(), step.node));
            }
            done.push((step, state));
        }
        self.sync_manifests(&kube, &proxy, SyncMode::Apply)
            .await
            .map_err(|mut e| {
                let moved = if self.moved.is_empty() {
                    "no component had to move".to_string()
                } else {
                    format!("every component had moved ({})", self.moved.join(", "))
                };
                e.msg = format!("{}; {moved}; run the task again to retry the sync", e.msg);
                e.changed = !self.moved.is_empty();
                e
            })?;
        Ok((done, current))
    }

    /// The kube-proxy image the first control plane will render once its step has run.
    fn proxy_image(&self, steps: &[Step]) -> ProxyImage {
        let first = self.nodes.iter().find(|n| n.facts.control_plane);
        steps
            .iter()
            .find(|s| {
                s.phase == Phase::KubeProxy
                    && first.is_some_and(|n| n.facts.address == s.node)
                    && s.changes()
            })
            .map_or(ProxyImage::AsRendered, |s| {
                ProxyImage::Patched(s.target_image.clone())
            })
    }

    /// Step 6 (when `sync_manifests`): the first control plane's manifests, planned or applied.
    async fn sync_manifests(
        &mut self,
        kube: &Kube,
        proxy: &ProxyImage,
        mode: SyncMode,
    ) -> Result<(), ModuleError> {
        let Some(settings) = self.settings.manifests else {
            return Ok(());
        };
        let first = self
            .nodes
            .iter()
            .find(|n| n.facts.control_plane)
            .ok_or_else(|| ModuleError::new("control_plane_nodes is empty"))?;
        let report = kubernetes_manifests::sync(
            kube,
            &first.client,
            &first.facts.address,
            &settings,
            mode,
            proxy,
        )
        .await?;
        for (object, why) in &report.not_pruned {
            self.warnings.push(format!(
                "bootstrap manifests: {object} is no longer rendered by Talos but was not pruned: {why}"
            ));
        }
        self.manifests = report.changes;
        Ok(())
    }

    fn node(&self, address: &str) -> &NodeView {
        self.nodes
            .iter()
            .find(|n| n.facts.address == address)
            .expect("every step's node was read")
    }

    /// The Kubernetes API, through the first control plane's cluster endpoint.
    async fn kube(&self) -> Result<Kube, ModuleError> {
        let first = self
            .nodes
            .iter()
            .find(|n| n.facts.control_plane)
            .ok_or_else(|| ModuleError::new("control_plane_nodes is empty"))?;
        let endpoint = cluster_endpoint(&first.facts.config);
        let access = self
            .kube_credentials
            .access(
                &first.facts.address,
                &self.entry,
                endpoint,
                "point node at a control plane",
            )
            .await
            .map_err(ModuleError::new)?;
        access.connect().await.map_err(|e| {
            ModuleError::new(format!("{}: {e}; nothing was changed", first.facts.address))
        })
    }

    /// API resources the next minor no longer serves, refused while objects of them exist.
    async fn removed_resources(
        &self,
        kube: &Kube,
        current: &Version,
        target: &Version,
    ) -> Result<(), ModuleError> {
        let Some(r) = kubernetes_removed::removals(current.minor, target.minor) else {
            return Ok(());
        };
        let mut found = Vec::new();
        for resource in r.api_resources {
            let Some(path) = kubernetes_removed::api_path(resource) else {
                continue;
            };
            match kube.count(&path).await {
                Ok(Some(n)) if n > 0 => found.push(format!("{n} {resource}")),
                Ok(_) => {}
                Err(e) => {
                    return Err(ModuleError::new(format!(
                        "cannot check for removed API resources: {e}; nothing was changed"
                    )));
                }
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        Err(ModuleError::new(format!(
            "Kubernetes {target} no longer serves API resources the cluster still stores: {}; migrate them to a \
             served version first; nothing was changed",
            found.join(", ")
        )))
    }

    /// Every new image on every node that will run it, as talosctl pre-pulls them: the control
    /// plane images into the CRI namespace, the kubelet into the system namespace. A node that
    /// does not implement the legacy pull is skipped (talosctl does the same).
    async fn pre_pull(&mut self, steps: &[Step]) -> Result<(), ModuleError> {
        for s in steps.iter().filter(|s| s.changes()) {
            let namespace = match s.phase {
                Phase::StaticPod(_) => ContainerdNamespace::NsCri,
                Phase::Kubelet => ContainerdNamespace::NsSystem,
                Phase::KubeProxy => continue,
            };
            let client = &self.node(&s.node).client;
            match client
                .image_pull_legacy(&s.target_image, namespace)
                .await
            {
                Ok(_) => self
                    .prepulled
                    .push(json!({"node": s.node, "image": s.target_image})),
                Err(e) if e.kind == ErrorKind::Unimplemented => self.warnings.push(format!(
                    "{}: the node cannot pre-pull images (ImagePull is not implemented); {} is pulled when it starts",
                    s.node, s.target_image
                )),
                Err(e) => {
                    return Err(ModuleError::new(format!(
                        "{}: pre-pulling {} failed: {e}; nothing was changed",
                        s.node, s.target_image
                    )));
                }
            }
        }
        Ok(())
    }

    /// What has moved and what has not, for a failure message.
    fn progress(&self, step: &Step) -> String {
        let moved = if self.moved.is_empty() {
            "nothing had moved before".to_string()
        } else {
            format!("already moved: {}", self.moved.join(", "))
        };
        format!(
            "{moved}; {} and everything after it on the other nodes was not touched",
            step.phase.name()
        )
    }

    async fn apply_step(&mut self, kube: &Kube, step: &Step) -> Result<&'static str, ModuleError> {
        let deadline = Instant::now() + self.settings.timeout;
        match step.phase {
            Phase::StaticPod(component) => {
                let client = &self.node(&step.node).client;
                let before = client
                    .component_config(component)
                    .await
                    .map_err(|e| self.step_fail(step, &e.to_string()))?;
                let expected = if step.changes() {
                    self.patch(step).await?;
                    self.wait_config_version(step, component, &before.version, deadline)
                        .await?
                } else {
                    before.version
                };
                self.wait_static_pod(kube, step, &expected, deadline)
                    .await?;
            }
            Phase::KubeProxy => {
                if step.changes() {
                    self.patch(step).await?;
                }
            }
            Phase::Kubelet => {
                if step.changes() {
                    self.patch(step).await?;
                }
                self.wait_kubelet(kube, step, deadline).await?;
            }
        }
        Ok(if step.changes() { "moved" } else { "at target" })
    }

    fn step_fail(&self, step: &Step, why: &str) -> ModuleError {
        ModuleError::new(format!(
            "{} on {}: {why}; {}",
            step.phase.name(),
            step.node,
            self.progress(step)
        ))
        .with("node", json!(step.node))
        .with("component", json!(step.phase.name()))
    }

    /// The node's live config with the step's image where that config keeps it (its 1.14
    /// document, else v1alpha1: talosctl's `stdpatches.WithKube*Image` chosen by
    /// `GuessVersionContract*`, `pkg/cluster/kubernetes/talos_managed.go` and `kubelet.go` @
    /// v1.14.1), applied without a reboot (`patchNodeConfig`: mode NO_REBOOT).
    async fn patch(&self, step: &Step) -> Result<(), ModuleError> {
        let node = self.node(&step.node);
        let (client, rules) = (
            &node.client,
            Rules::for_release(node.facts.talos.major, node.facts.talos.minor),
        );
        let mut config = read_config(client, &step.node).await?;
        let section = Section::of(&config, step.component.name).unwrap_or(step.component.section);
        let image = Value::String(step.target_image.clone());
        if !section.set(&mut config, "image", image) {
            return Err(self.step_fail(
                step,
                &format!("{} vanished from the node's config", section.path("image")),
            ));
        }
        client
            .apply_configuration(
                config.to_yaml_with(rules).as_bytes(),
                ApplyMode::NoReboot,
                Apply::ForReal,
                None,
            )
            .await
            .map_err(|e| self.step_fail(step, &format!("applying the new image failed: {e}")))?;
        Ok(())
    }

    /// Until the component's config resource has a version other than `before` (Talos has
    /// rendered the patched config); returns it.
    async fn wait_config_version(
        &self,
        step: &Step,
        component: StaticPodComponent,
        before: &str,
        deadline: Instant,
    ) -> Result<String, ModuleError> {
        let client = &self.node(&step.node).client;
        loop {
            let last = match client.component_config(component).await {
                Ok(c) if c.version != before => return Ok(c.version),
                Ok(c) => format!("its config is still at version {}", c.version),
                Err(e) => e.to_string(),
            };
            if Instant::now() + POLL > deadline {
                return Err(self.step_fail(
                    step,
                    &format!("Talos did not render the new config in time ({last})"),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Until the node's static pod runs config `version`, or a later one, and is Ready (talosctl's
    /// `checkPodStatus`). Errors while the API server restarts are part of waiting.
    async fn wait_static_pod(
        &self,
        kube: &Kube,
        step: &Step,
        version: &str,
        deadline: Instant,
    ) -> Result<(), ModuleError> {
        let name = step.phase.name();
        let node_name = self.node(&step.node).node_name.as_deref();
        loop {
            let last = match kube.static_pod(name, node_name, &step.node).await {
                Ok(Some(pod))
                    if config_reached(pod.config_version.as_deref(), version) && pod.ready =>
                {
                    return Ok(());
                }
                Ok(Some(pod)) if config_reached(pod.config_version.as_deref(), version) => {
                    format!("pod {} runs {} but is not Ready", pod.name, pod.image)
                }
                Ok(Some(pod)) => format!(
                    "pod {} still runs config version {} (waiting for {version})",
                    pod.name,
                    pod.config_version.as_deref().unwrap_or("none")
                ),
                Ok(None) => match node_name {
                    Some(n) => format!("no {name} pod runs on Node {n}"),
                    None => format!("no {name} pod reports host IP {}", step.node),
                },
                Err(e) => e.message,
            };
            if Instant::now() + POLL > deadline {
                return Err(self.step_fail(
                    step,
                    &format!(
                        "the static pod did not become Ready with {} within {} s (last seen: {last}); see \
                         `talosctl -n {} logs {name}` and `kubectl -n kube-system describe pod`",
                        step.target_image,
                        self.settings.timeout.as_secs(),
                        step.node
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Until the kubelet service runs and the node's Node reports the target version and is
    /// Ready (talosctl's kubelet wait and `checkNodeKubeletVersion`).
    async fn wait_kubelet(
        &self,
        kube: &Kube,
        step: &Step,
        deadline: Instant,
    ) -> Result<(), ModuleError> {
        let want = format!("v{}", self.settings.target);
        let node = self.node(&step.node);
        loop {
            let last = match kubelet_state(node, kube, &want).await {
                Ok(()) => return Ok(()),
                Err(last) => last,
            };
            if Instant::now() + POLL > deadline {
                return Err(self.step_fail(
                    step,
                    &format!(
                        "the Node did not report kubelet {want} and Ready within {} s (last seen: {last}); see \
                         `talosctl -n {} logs kubelet`",
                        self.settings.timeout.as_secs(),
                        step.node
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A pod annotated with config version `pod` runs the config of version `want` or a later one:
/// COSI versions only grow, so an unrelated change that bumped the config again while the pod
/// restarted does not keep the wait going (`checkPodStatus` in
/// `pkg/cluster/kubernetes/talos_managed.go` @ v1.14.1; v1.14.0 and before required equality).
fn config_reached(pod: Option<&str>, want: &str) -> bool {
    match (pod.map(str::parse::<u64>), want.parse::<u64>()) {
        (Some(Ok(pod)), Ok(want)) => pod >= want,
        _ => false,
    }
}

async fn kubelet_state(node: &NodeView, kube: &Kube, want: &str) -> Result<(), String> {
    let services = node
        .client
        .service_list()
        .await
        .map_err(|e| e.to_string())?;
    match services.iter().find(|s| s.id == "kubelet") {
        Some(s) if s.state == "Running" => {}
        Some(s) => return Err(format!("the kubelet service is {}", s.state)),
        None => return Err("the kubelet service is not listed".into()),
    }
    let found = match &node.node_name {
        Some(name) => kube.node(name).await.map(Some),
        None => kube.node_by_address(&node.facts.address).await,
    };
    match found {
        Ok(Some(n)) if n.kubelet_version == want && n.ready => Ok(()),
        Ok(Some(n)) if n.kubelet_version == want => Err(format!("Node {} is not Ready", n.name)),
        Ok(Some(n)) => Err(format!(
            "Node {} reports kubelet {}",
            n.name, n.kubelet_version
        )),
        Ok(None) => Err(format!("no Node lists the address {}", node.facts.address)),
        Err(e) => Err(e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(text: &str) -> Version {
        parse_version(text).unwrap()
    }

    /// A node as Talos 1.13 renders it: `tag` on every component it runs, and a kubelet
    /// `extraArgs` when given.
    fn node(
        address: &str,
        control_plane: bool,
        talos: &str,
        tag: &str,
        kubelet_args: Value,
    ) -> NodeFacts {
        let mut doc = json!({
            "version": "v1alpha1",
            "machine": {
                "type": if control_plane { "controlplane" } else { "worker" },
                "kubelet": {"image": format!("ghcr.io/siderolabs/kubelet:{tag}"), "extraArgs": kubelet_args},
            },
        });
        if control_plane {
            doc["cluster"] = json!({
                "apiServer": {"image": format!("registry.k8s.io/kube-apiserver:{tag}")},
                "controllerManager": {"image": format!("registry.k8s.io/kube-controller-manager:{tag}")},
                "scheduler": {"image": format!("registry.k8s.io/kube-scheduler:{tag}")},
                "proxy": {"image": format!("registry.k8s.io/kube-proxy:{tag}")},
            });
        }
        let config = MachineConfig { docs: vec![doc] };
        NodeFacts {
            address: address.into(),
            control_plane,
            talos: version(talos),
            components: kubernetes_components(&config).unwrap(),
            config,
        }
    }

    fn cluster(tag: &str) -> Vec<NodeFacts> {
        vec![
            node("10.5.0.2", true, "v1.13.9", tag, json!({})),
            node("10.5.0.3", true, "v1.13.9", tag, json!({})),
            node("10.5.0.4", false, "v1.13.9", tag, json!({})),
        ]
    }

    fn order(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| format!("{} {}", s.phase.name(), s.node))
            .collect()
    }

    /// talosctl upgrade-k8s's order (`pkg/cluster/kubernetes/talos_managed.go` @ v1.14.1): each
    /// static pod component across every control plane, then kube-proxy, then the kubelets.
    #[test]
    fn the_plan_moves_each_component_across_the_control_planes_then_proxy_then_kubelets() {
        let nodes = cluster("v1.35.2");
        let facts: Vec<&NodeFacts> = nodes.iter().collect();
        let steps = plan(&facts, &version("1.36.3"), true);
        assert_eq!(
            order(&steps),
            [
                "kube-apiserver 10.5.0.2",
                "kube-apiserver 10.5.0.3",
                "kube-controller-manager 10.5.0.2",
                "kube-controller-manager 10.5.0.3",
                "kube-scheduler 10.5.0.2",
                "kube-scheduler 10.5.0.3",
                "kube-proxy 10.5.0.2",
                "kube-proxy 10.5.0.3",
                "kubelet 10.5.0.2",
                "kubelet 10.5.0.3",
                "kubelet 10.5.0.4",
            ]
        );
        assert!(steps.iter().all(Step::changes));
        assert_eq!(
            steps[0].target_image,
            "registry.k8s.io/kube-apiserver:v1.36.3"
        );
        assert_eq!(steps[10].target_image, "ghcr.io/siderolabs/kubelet:v1.36.3");
    }

    #[test]
    fn without_kubelets_the_plan_stops_after_kube_proxy_and_a_reached_target_changes_nothing() {
        let nodes = cluster("v1.36.3");
        let facts: Vec<&NodeFacts> = nodes.iter().collect();
        let steps = plan(&facts, &version("1.36.3"), false);
        assert_eq!(steps.len(), 8);
        assert!(steps.iter().all(|s| s.phase != Phase::Kubelet));
        assert!(!steps.iter().any(Step::changes));
    }

    #[test]
    fn the_checks_name_every_problem_at_once() {
        let mut nodes = cluster("v1.35.2");
        nodes[2] = node("10.5.0.4", false, "v1.12.5", "v1.34.1", json!({}));
        let facts: Vec<&NodeFacts> = nodes.iter().collect();
        let why = check(&facts, &version("1.36.3")).unwrap_err();
        // Talos 1.12 runs Kubernetes 1.30 to 1.35 (`KUBERNETES_SUPPORT`), and a kubelet at 1.34
        // would skip a minor.
        assert!(
            why.contains("10.5.0.4: ") && why.contains("upgrade Talos first"),
            "{why}"
        );
        assert!(
            why.contains("10.5.0.4: kubelet: unsupported upgrade path 1.34->1.36"),
            "{why}"
        );
        assert!(!why.contains("10.5.0.2"), "{why}");
        assert!(check(&facts[..2], &version("1.36.3")).is_ok());
    }

    #[test]
    fn removed_flags_still_set_are_found_per_node_for_the_minor_it_leaves() {
        let mut nodes = cluster("v1.35.2");
        nodes[2] = node(
            "10.5.0.4",
            false,
            "v1.13.9",
            "v1.35.2",
            json!({"feature-gates": "HonorPVReclaimPolicy=true"}),
        );
        let facts: Vec<&NodeFacts> = nodes.iter().collect();
        let found = removed_in_use(&facts, &version("1.36.3"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].node, "10.5.0.4");
        assert_eq!(found[0].component, "kubelet");
        assert_eq!(found[0].value, "HonorPVReclaimPolicy");
        // A patch release removes nothing.
        assert!(removed_in_use(&facts, &version("1.35.9")).is_empty());
    }

    /// `checkPodStatus` @ v1.14.1: the pod is up to date once its version reaches the one
    /// expected; an unparsable or missing annotation keeps waiting.
    #[test]
    fn a_later_config_version_counts_as_reached() {
        assert!(config_reached(Some("4"), "4"));
        assert!(config_reached(Some("5"), "4"));
        assert!(config_reached(Some("10"), "9"), "numbers, not text");
        assert!(!config_reached(Some("3"), "4"));
        assert!(!config_reached(Some("x"), "4"));
        assert!(!config_reached(None, "4"));
    }
}
