//! `talos_upgrade`: upgrade one node's Talos OS and/or its Kubernetes components.
//!
//! Everything is decided from what the node itself reports (its Version answer and its live
//! machine config), and every refusal happens before the first call that changes the node.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec};
use ferro_talos_client::proto::common::ContainerdNamespace;
use ferro_talos_client::{
    Apply, ApplyMode, ClientError, ConnectOptions, Credentials, ErrorKind, RebootMode,
    SequenceFailure, StaticPodComponent, TalosClient, UpgradeRebootMode, containerd_system,
    sequence_failure, wait_for_reboot,
};
use ferro_talos_config::MachineConfig;
use semver::Version;
use serde_json::{Map, Value, json};

use crate::connection::{self, Target, with_connection_options};
use crate::live_config::{self, ReadError};
use crate::upgrade_drain::{
    self, DEFAULT_DRAIN_TIMEOUT_SECS, DrainOptions, KubeCredentials, KubeInputs, NoDrain,
};

/// talosctl's default installer repository for 1.13.
pub const DEFAULT_INSTALLER_REPOSITORY: &str = "ghcr.io/siderolabs/installer";

/// The Image Factory id of the empty schematic: what the plain ghcr.io installer ships.
pub const VANILLA_SCHEMATIC: &str =
    "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// Default overall timeout, talosctl's `--timeout` for upgrades.
const DEFAULT_TIMEOUT_SECS: i64 = 1800;

const POLL_INTERVAL: Duration = Duration::from_secs(1);

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("image"))
        .option(Opt::str("talos_version"))
        .option(Opt::str("installer_repository").default(DEFAULT_INSTALLER_REPOSITORY))
        .option(Opt::bool("allow_downgrade").default(false))
        .option(Opt::bool("stage").default(false))
        .option(
            Opt::str("reboot_mode")
                .choices(&["default", "powercycle"])
                .default("default"),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(DEFAULT_TIMEOUT_SECS))
        .option(Opt::str("kubernetes_version"))
        .option(Opt::bool("drain").default(true))
        .option(Opt::int("drain_timeout").default(DEFAULT_DRAIN_TIMEOUT_SECS))
        .option(Opt::path("kubeconfig"))
        .mutually_exclusive(&["image", "talos_version"])
        .required_one_of(&["image", "talos_version", "kubernetes_version"])
}

/// The Talos target: an installer image and the version its tag names.
#[derive(Debug, Clone, PartialEq)]
pub struct OsTarget {
    pub image: String,
    pub version: Version,
}

impl OsTarget {
    pub fn tag(&self) -> String {
        format!("v{}", self.version)
    }
}

/// The validated options.
#[derive(Debug, Clone)]
pub struct Request {
    pub os: Option<OsTarget>,
    pub kubernetes: Option<Version>,
    pub allow_downgrade: bool,
    pub stage: bool,
    pub powercycle: bool,
    pub wait: bool,
    pub timeout: Duration,
    pub drain: DrainOptions,
}

impl Request {
    pub fn from_params(p: &Params) -> Result<Request, ModuleError> {
        let os = match (p.str("image"), p.str("talos_version")) {
            (Some(image), _) => {
                if p.is_set("installer_repository") {
                    return Err(ModuleError::new(
                        "installer_repository only applies with talos_version; image already names the installer",
                    ));
                }
                Some(
                    parse_installer_image(image)
                        .map_err(|e| ModuleError::new(format!("image: {e}")))?,
                )
            }
            (None, Some(v)) => {
                let version = parse_version(v)
                    .map_err(|e| ModuleError::new(format!("talos_version: {e}")))?;
                let repo = p
                    .str("installer_repository")
                    .unwrap_or(DEFAULT_INSTALLER_REPOSITORY);
                check_repository(repo)
                    .map_err(|e| ModuleError::new(format!("installer_repository: {e}")))?;
                Some(OsTarget {
                    image: format!("{}:v{version}", repo.trim()),
                    version,
                })
            }
            (None, None) => None,
        };
        let kubernetes = match p.str("kubernetes_version") {
            Some(v) => Some(
                parse_version(v)
                    .map_err(|e| ModuleError::new(format!("kubernetes_version: {e}")))?,
            ),
            None => None,
        };
        let timeout = crate::options::wait_seconds(p, "timeout", DEFAULT_TIMEOUT_SECS)?;
        let wait = p.bool("wait");
        let drain_timeout =
            crate::options::wait_seconds(p, "drain_timeout", DEFAULT_DRAIN_TIMEOUT_SECS)?;
        let drain = p.bool("drain");
        if drain && !wait && os.is_some() {
            return Err(ModuleError::new(
                "wait=false cannot be combined with drain=true: the node is uncordoned once it is back and Ready,                  which needs the wait (talosctl turns --wait on for --drain too); set drain: false to upgrade without                  draining and waiting",
            ));
        }
        if !wait && os.is_some() && kubernetes.is_some() {
            return Err(ModuleError::new(
                "wait=false cannot be combined with a Talos target and kubernetes_version: the Kubernetes \
                 upgrade needs the node back from its OS upgrade; run them as two tasks",
            ));
        }
        Ok(Request {
            os,
            kubernetes,
            allow_downgrade: p.bool("allow_downgrade"),
            stage: p.bool("stage"),
            powercycle: p.str("reboot_mode") == Some("powercycle"),
            wait,
            timeout,
            drain: DrainOptions {
                enabled: drain,
                timeout: drain_timeout,
            },
        })
    }
}

/// A version such as `v1.13.6`, `1.36.1` or `v1.14.0-rc.1` (one leading `v` allowed).
pub fn parse_version(text: &str) -> Result<Version, String> {
    let t = text.trim();
    Version::parse(t.strip_prefix('v').unwrap_or(t))
        .map_err(|_| format!("expected a version like v1.13.6 or 1.36.1, got {text:?}"))
}

/// Splits an image reference into repository and tag (the digest, if any, is dropped).
pub fn split_image(image: &str) -> (&str, Option<&str>) {
    let no_digest = image.split('@').next().unwrap_or(image);
    let name_start = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[name_start..].rfind(':') {
        Some(i) => (
            &no_digest[..name_start + i],
            Some(&no_digest[name_start + i + 1..]),
        ),
        None => (no_digest, None),
    }
}

fn parse_installer_image(image: &str) -> Result<OsTarget, String> {
    let image = image.trim();
    let example = "like ghcr.io/siderolabs/installer:v1.13.6 or factory.talos.dev/installer/<schematic>:v1.13.6";
    if image.is_empty() || image.chars().any(char::is_whitespace) || image.contains("://") {
        return Err(format!(
            "expected an installer image reference {example}, got {image:?}"
        ));
    }
    let (repo, tag) = split_image(image);
    let Some(tag) = tag.filter(|t| !t.is_empty()) else {
        return Err(format!(
            "{image:?} has no version tag; the tag tells which Talos version it installs ({example})"
        ));
    };
    if repo.is_empty() || repo.ends_with('/') {
        return Err(format!(
            "expected an installer image reference {example}, got {image:?}"
        ));
    }
    let version = parse_version(tag)
        .map_err(|_| format!("the tag of {image:?} is not a Talos version like v1.13.6"))?;
    Ok(OsTarget {
        image: image.to_string(),
        version,
    })
}

fn check_repository(repo: &str) -> Result<(), String> {
    let repo = repo.trim();
    if repo.is_empty() || repo.chars().any(char::is_whitespace) || repo.contains("://") {
        return Err(format!(
            "expected a repository like {DEFAULT_INSTALLER_REPOSITORY}, got {repo:?}"
        ));
    }
    if repo.contains('@') || split_image(repo).1.is_some() {
        return Err(format!(
            "{repo:?} already carries a tag or digest; give the repository only (the tag comes from talos_version)"
        ));
    }
    Ok(())
}

/// The Image Factory schematic an installer image installs, when the reference tells: the
/// 64-hex path segment of a factory image, or the empty schematic for the plain ghcr.io installer.
pub fn schematic_of(image: &str) -> Option<String> {
    let (repo, _) = split_image(image.trim());
    if repo == DEFAULT_INSTALLER_REPOSITORY {
        return Some(VANILLA_SCHEMATIC.to_string());
    }
    let mut segments = repo.split('/');
    let host = segments.next()?;
    if !host.contains("factory") {
        return None;
    }
    segments
        .find(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|s| s.to_ascii_lowercase())
}

/// Whether the node has LifecycleService/ImageService (talosctl's rule: >1.13.0-alpha.2, <2.0.0).
pub fn has_lifecycle_api(node: &Version) -> bool {
    let mut first = Version::new(1, 13, 0);
    first.pre = semver::Prerelease::new("alpha.2").unwrap_or(semver::Prerelease::EMPTY);
    *node > first && node.major < 2
}

/// Host versions the installer of a target minor accepts: (target minor, min host minor
/// inclusive, max host minor exclusive), api.md §13.3. All bounds are x.y.0.
const INSTALLER_RANGES: &[(u64, u64, u64)] =
    &[(11, 9, 13), (12, 10, 14), (13, 11, 15), (14, 12, 16)];

/// Kubernetes versions each Talos minor supports: (Talos minor, lowest minor, highest minor).
const KUBERNETES_SUPPORT: &[(u64, u64, u64)] =
    &[(11, 29, 34), (12, 30, 35), (13, 31, 36), (14, 32, 37)];

/// What the target's installer says about a host version.
#[derive(Debug, PartialEq)]
pub enum InstallerCheck {
    Accepts,
    /// No rules known for the target's minor: the installer itself will decide.
    Unknown,
    Refuses(String),
}

/// The installer's pre-flight check (pre-release hosts count as their release line), with the
/// intermediate versions to go through when it refuses.
pub fn installer_check(host: &Version, target: &Version) -> InstallerCheck {
    let Some(&(_, min, max)) = INSTALLER_RANGES
        .iter()
        .find(|(m, _, _)| target.major == 1 && *m == target.minor)
    else {
        return InstallerCheck::Unknown;
    };
    let accepted = format!("it accepts hosts from 1.{min}.0 up to, not including, 1.{max}.0");
    let too_old = host.major < 1 || (host.major == 1 && host.minor < min);
    let too_new = host.major > 1 || (host.major == 1 && host.minor >= max);
    if too_old {
        let steps: Vec<u64> = if host.major == 1 {
            (host.minor + 1..target.minor).collect()
        } else {
            Vec::new()
        };
        return InstallerCheck::Refuses(format!(
            "the Talos v{target} installer refuses hosts on v{host} ({accepted}): {}",
            route("upgrade", &steps)
        ));
    }
    if too_new {
        let steps: Vec<u64> = if host.major == 1 {
            (target.minor + 1..host.minor).rev().collect()
        } else {
            Vec::new()
        };
        return InstallerCheck::Refuses(format!(
            "the Talos v{target} installer refuses hosts on v{host} ({accepted}): {}",
            route("downgrade", &steps)
        ));
    }
    InstallerCheck::Accepts
}

fn route(verb: &str, minors: &[u64]) -> String {
    if minors.is_empty() {
        return format!("{verb} in smaller steps first");
    }
    let mut parts = minors.iter().map(|m| format!("1.{m}.x"));
    let mut text = format!("{verb} to the latest {}", parts.next().unwrap_or_default());
    for p in parts {
        text.push_str(", then ");
        text.push_str(&p);
    }
    text.push_str(" first");
    text
}

/// Whether the node's Talos needs to move, decided from its server version and schematic.
#[derive(Debug, PartialEq)]
pub enum OsDecision {
    UpToDate,
    /// Upgrade (or an allowed downgrade), with the reason in words.
    Change(String),
}

pub fn decide_os(
    current: &Version,
    current_schematic: Option<&str>,
    target: &OsTarget,
    allow_downgrade: bool,
) -> Result<OsDecision, String> {
    let target_schematic = schematic_of(&target.image);
    let decision = match current.cmp(&target.version) {
        std::cmp::Ordering::Less => {
            OsDecision::Change(format!("upgrade v{current} -> v{}", target.version))
        }
        std::cmp::Ordering::Greater => {
            if !allow_downgrade {
                return Err(format!(
                    "the node runs Talos v{current}, newer than the target v{}: that is a downgrade; \
                     set allow_downgrade=true to do it anyway",
                    target.version
                ));
            }
            OsDecision::Change(format!(
                "downgrade v{current} -> v{} (allowed)",
                target.version
            ))
        }
        std::cmp::Ordering::Equal => match (current_schematic, target_schematic.as_deref()) {
            (Some(cur), Some(want)) if cur != want => {
                OsDecision::Change(format!("schematic change at v{current}: {cur} -> {want}"))
            }
            _ => OsDecision::UpToDate,
        },
    };
    if let OsDecision::Change(_) = &decision
        && let InstallerCheck::Refuses(why) = installer_check(current, &target.version)
    {
        return Err(why);
    }
    Ok(decision)
}

/// One Kubernetes component image in the machine config.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub name: &'static str,
    /// JSON pointer into the v1alpha1 document.
    pub pointer: &'static str,
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
}

const KUBELET: (&str, &str) = ("kubelet", "/machine/kubelet/image");

/// The flavours of siderolabs' kubelet images; `talosctl upgrade-k8s` keeps them
/// (`extractKubeletVersionSuffix` in `pkg/cluster/kubernetes/kubelet.go` at v1.13.9).
const KUBELET_FLAVOURS: [&str; 2] = ["-fat", "-slim"];
const CONTROL_PLANE_COMPONENTS: [(&str, &str); 4] = [
    ("kube-apiserver", "/cluster/apiServer/image"),
    (
        "kube-controller-manager",
        "/cluster/controllerManager/image",
    ),
    ("kube-scheduler", "/cluster/scheduler/image"),
    ("kube-proxy", "/cluster/proxy/image"),
];

fn config_path(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// The Kubernetes component images a node's config sets: kubelet everywhere, the control-plane
/// static pods and kube-proxy on control planes (kube-proxy only when not disabled).
pub fn kubernetes_components(v1alpha1: &Value) -> Result<Vec<Component>, String> {
    let machine_type = v1alpha1
        .pointer("/machine/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let control_plane = matches!(machine_type, "controlplane" | "init");
    let mut wanted = vec![KUBELET];
    if control_plane {
        for c in CONTROL_PLANE_COMPONENTS {
            let proxy_disabled = v1alpha1
                .pointer("/cluster/proxy/disabled")
                .and_then(Value::as_bool)
                == Some(true);
            if c.0 == "kube-proxy" && proxy_disabled {
                continue;
            }
            wanted.push(c);
        }
    }
    wanted
        .into_iter()
        .map(|(name, pointer)| {
            let image = v1alpha1
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    format!(
                        "{} is not set in the node's machine config, so the current {name} version is unknown; \
                         set it (for example with talos_config's kubernetes_version) first",
                        config_path(pointer)
                    )
                })?;
            let tag = split_image(image).1.unwrap_or("");
            let flavour = if name == KUBELET.0 {
                KUBELET_FLAVOURS.into_iter().find(|f| tag.ends_with(f)).unwrap_or("")
            } else {
                ""
            };
            let version = parse_version(&tag[..tag.len() - flavour.len()]).map_err(|_| {
                format!("{} is {image:?}, whose tag is not a Kubernetes version", config_path(pointer))
            })?;
            Ok(Component { name, pointer, image: image.to_string(), version, flavour })
        })
        .collect()
}

/// talosctl upgrade-k8s's path rule: the same minor or the next one.
pub fn kubernetes_path_ok(from: &Version, to: &Version) -> Result<(), String> {
    if from.major == to.major && (to.minor == from.minor || to.minor == from.minor + 1) {
        return Ok(());
    }
    let mut msg = format!(
        "unsupported upgrade path {}.{}->{}.{} (from {from} to {to})",
        from.major, from.minor, to.major, to.minor
    );
    if from.major == to.major && to.minor > from.minor + 1 {
        let steps: Vec<String> = (from.minor + 1..to.minor)
            .map(|m| format!("{}.{m}.x", from.major))
            .collect();
        msg.push_str(&format!(
            ": Kubernetes moves one minor version at a time; upgrade through {} first",
            steps.join(", then ")
        ));
    } else {
        msg.push_str(
            ": Kubernetes can only move to a patch of the same minor or to the next minor",
        );
    }
    Err(msg)
}

/// Whether a Talos version supports a Kubernetes version; None when no rule is known.
pub fn kubernetes_supported(talos: &Version, kubernetes: &Version) -> Option<Result<(), String>> {
    let &(_, lo, hi) = KUBERNETES_SUPPORT
        .iter()
        .find(|(m, _, _)| talos.major == 1 && *m == talos.minor)?;
    if kubernetes.major == 1 && (lo..=hi).contains(&kubernetes.minor) {
        Some(Ok(()))
    } else {
        Some(Err(format!(
            "Talos v{talos} supports Kubernetes 1.{lo}.0 to 1.{hi}.x, not {kubernetes}"
        )))
    }
}

/// `image` with its tag replaced by `v<version>` (a digest would pin the old image: dropped).
pub fn retag(image: &str, version: &Version) -> String {
    let (repo, _) = split_image(image);
    format!("{repo}:v{version}")
}

/// The result being built: fields, warnings, and whether the node was changed so far.
struct Report {
    fields: Map<String, Value>,
    warnings: Vec<String>,
    changed: bool,
}

impl Report {
    fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.fields.insert(key.to_string(), value.into());
    }

    /// A failure that keeps everything reported so far.
    fn fail(&self, msg: impl Into<String>) -> ModuleError {
        let mut err = ModuleError::new(msg).changed(self.changed);
        for (k, v) in &self.fields {
            err = err.with(k.clone(), v.clone());
        }
        err
    }

    fn client_fail(&self, e: ClientError) -> ModuleError {
        let mut err = self.fail(e.to_string());
        if let Some(code) = e.grpc_code {
            err = err.with("grpc_code", json!(code));
        }
        err
    }
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let req = Request::from_params(p)?;
    let target = Target::from_params(p)?;
    let mut opts = connection::connect_options(p, Duration::from_secs(30))?;
    // Pulls and installer runs are streams; they may take as long as the whole upgrade.
    opts.stream_timeout = req.timeout;
    let (creds, source) = connection::require_credentials(ctx, p)?;
    let mut report = Report {
        fields: Map::new(),
        warnings: Vec::new(),
        changed: false,
    };
    report.set("node", target.node.clone());
    report.set("credentials", source.describe());
    let check_mode = ctx.check_mode;
    let kube = KubeInputs {
        credentials: kube_credentials(ctx, p, &req)?,
        talosconfig_endpoints: connection::talosconfig_endpoints(p, &source),
    };
    let outcome = connection::block_on(upgrade_node(
        &target,
        &creds,
        opts,
        &req,
        &kube,
        check_mode,
        &mut report,
    ))?;
    for w in report.warnings.drain(..) {
        ctx.warn(w);
    }
    let msg = outcome?;
    let mut result = ModuleResult::new(report.changed).msg(msg);
    for (k, v) in report.fields {
        result = result.with(k, v);
    }
    Ok(result)
}

/// The Kubernetes credentials a drain uses: `kubeconfig`, else the secrets bundle.
fn kube_credentials(
    ctx: &mut Context,
    p: &Params,
    req: &Request,
) -> Result<KubeCredentials, ModuleError> {
    if req.os.is_none() || !req.drain.enabled {
        return Ok(KubeCredentials::Unused);
    }
    KubeCredentials::from_params(ctx, p)
}

/// The whole run against one node; returns the summary message.
async fn upgrade_node(
    target: &Target,
    creds: &Credentials,
    opts: ConnectOptions,
    req: &Request,
    kube: &KubeInputs,
    check_mode: bool,
    report: &mut Report,
) -> Result<String, ModuleError> {
    let deadline = Instant::now() + req.timeout;
    let client = connection::connect(target, creds, opts.clone())
        .await
        .map_err(|e| report.client_fail(e))?;
    let (current_tag, current) = server_version(&client, report).await?;
    report.set("current_version", current_tag.clone());
    report.set("target_version", req.os.as_ref().map(OsTarget::tag));
    report.set("upgrade_path", Value::Null);
    let config = read_config(&client, report).await?;
    let v1 = config.v1alpha1().cloned().unwrap_or(Value::Null);
    let machine_type = v1
        .pointer("/machine/type")
        .and_then(Value::as_str)
        .map(str::to_string);
    report.set("machine_type", machine_type);

    // Plan everything before touching the node, so each refusal leaves it as it was.
    let mut os_plan = None;
    if let Some(os) = &req.os {
        let install_image = v1.pointer("/machine/install/image").and_then(Value::as_str);
        report.set("install_image", install_image);
        // The running schematic when the node reports it; else the one its config installs.
        let current_schematic = match running_schematic(&client).await {
            Some(s) => {
                report.set("schematic_source", "extensions");
                Some(s)
            }
            None => {
                report.set(
                    "schematic_source",
                    if install_image.is_some() {
                        "config"
                    } else {
                        "unknown"
                    },
                );
                install_image.and_then(schematic_of)
            }
        };
        report.set("current_schematic", current_schematic.clone());
        let decision = decide_os(
            &current,
            current_schematic.as_deref(),
            os,
            req.allow_downgrade,
        )
        .map_err(|why| report.fail(format!("{}: {why}; nothing was changed", target.node)))?;
        if let OsDecision::Change(_) = &decision
            && let InstallerCheck::Unknown = installer_check(&current, &os.version)
        {
            report.warnings.push(format!(
                "no installer version rules are known for Talos v{}; the installer will decide whether it accepts v{current}",
                os.version
            ));
        }
        if let Some(img) = install_image
            && img != os.image
        {
            report.warnings.push(format!(
                "machine.install.image in the live config is {img}, not the target {}; like talosctl, this module \
                 leaves it alone, but it decides the installer of future installs (and, when the node does not report \
                 its schematic, the schematic this module compares against): update it with a config change",
                os.image
            ));
        }
        // talosctl does not check this either, but a kubelet the new Talos does not support
        // is worth a word before the node reboots into it.
        if req.kubernetes.is_none()
            && let OsDecision::Change(_) = &decision
            && let Ok(components) = kubernetes_components(&v1)
            && let Some(kubelet) = components.first()
            && let Some(Err(why)) = kubernetes_supported(&os.version, &kubelet.version)
        {
            report.warnings.push(format!(
                "{why}, and the node's kubelet is at {}: move Kubernetes into the supported range too",
                kubelet.version
            ));
        }
        let lifecycle = has_lifecycle_api(&current) && !req.stage;
        report.set(
            "upgrade_path",
            if lifecycle { "lifecycle" } else { "legacy" },
        );
        report.set("os_upgrade", matches!(decision, OsDecision::Change(_)));
        if let OsDecision::Change(reason) = decision {
            report.set("os_reason", reason.clone());
            os_plan = Some((os, lifecycle, reason));
        }
    }
    let talos_after = os_plan
        .as_ref()
        .map_or(&current, |(os, _, _)| &os.version)
        .clone();
    let mut k8s_plan = None;
    if let Some(want) = &req.kubernetes {
        let plan = plan_kubernetes(&v1, want, &talos_after)
            .map_err(|why| report.fail(format!("{}: {why}; nothing was changed", target.node)))?;
        report.set("kubernetes", plan.to_json());
        report.set("manifests_not_synced", json!([]));
        if plan.changes() {
            k8s_plan = Some(plan);
        }
    }

    let control_plane = matches!(
        report.fields.get("machine_type").and_then(Value::as_str),
        Some("controlplane" | "init")
    );
    if os_plan.is_some() && control_plane {
        etcd_quorum_guard(target, &client, report).await?;
    }
    let mut drainer = None;
    if os_plan.is_some() && req.drain.enabled {
        let endpoint = v1
            .pointer("/cluster/controlPlane/endpoint")
            .and_then(Value::as_str);
        // Without a bundle or kubeconfig Talos issues one, from a control plane: the endpoint
        // the task goes through, else the node itself, else (a worker) the talosconfig's
        // endpoint, which is where talosctl asks.
        let issuer = if target.routed() {
            Some(target.endpoint.clone())
        } else if control_plane {
            None
        } else {
            kube.talosconfig_endpoints.first().cloned()
        };
        let endpoint_client = match (issuer, &kube.credentials) {
            (Some(endpoint), KubeCredentials::TalosApi) => {
                TalosClient::connect(&endpoint, creds, opts.clone())
                    .await
                    .map_err(|e| report.client_fail(e))?
            }
            _ => client.clone(),
        };
        match upgrade_drain::connect(
            &client,
            &endpoint_client,
            &target.node,
            &kube.credentials,
            endpoint,
        )
        .await
        .map_err(|m| report.fail(m))?
        {
            Ok(d) => drainer = Some(d),
            Err(NoDrain(why)) => {
                report.warnings.push(why.clone());
                report.set("drain", json!({"skipped": why}));
            }
        }
    }

    let mut done = Vec::new();
    if check_mode {
        report.changed = os_plan.is_some() || k8s_plan.is_some();
        if let Some((_, _, reason)) = &os_plan {
            done.push(format!("would {reason}"));
        }
        if let Some(d) = &drainer {
            let preview = d.preview(&target.node).await.map_err(|m| report.fail(m))?;
            let pods = preview["evict"].as_array().map_or(0, Vec::len);
            done.push(format!(
                "would drain Node {} ({pods} pods to evict)",
                d.node_name
            ));
            report.set("drain", preview);
        }
        if let Some(plan) = &k8s_plan {
            done.push(format!(
                "would move Kubernetes {} -> {}",
                plan.current, plan.target
            ));
            report.set("manifests_not_synced", plan.unsynced_manifests());
        }
    } else {
        if let Some((os, lifecycle, reason)) = os_plan {
            if let Some(d) = drainer.as_mut() {
                let (drained, warnings) = d
                    .cordon_and_drain(&target.node, req.drain.timeout)
                    .await
                    .map_err(|m| report.fail(m))?;
                report.warnings.extend(warnings);
                report.set("drain", drained);
            }
            let upgraded = upgrade_os(
                target, &client, creds, req, os, &current, lifecycle, deadline, report,
            )
            .await;
            let summary = match (upgraded, drainer.as_mut()) {
                (Ok(summary), _) => summary,
                (Err(mut e), Some(d)) => {
                    e.msg = format!("{}; {}", e.msg, d.uncordon_if_cordoned_here().await);
                    return Err(e);
                }
                (Err(e), None) => return Err(e),
            };
            done.push(format!("{reason} ({summary})"));
            if let Some(d) = drainer.as_mut() {
                let uncordoned = d
                    .back_and_uncordon(&target.node, deadline)
                    .await
                    .map_err(|m| report.fail(m))?;
                if let Some(drain) = report.fields.get_mut("drain") {
                    drain["uncordoned"] = json!(uncordoned);
                }
                done.push(format!(
                    "Node {} drained{}",
                    d.node_name,
                    if uncordoned {
                        " and uncordoned"
                    } else {
                        ", left cordoned as it was"
                    }
                ));
            }
            if !req.wait {
                return Ok(format!("{}: {}", target.node, done.join("; ")));
            }
        }
        if let Some(want) = &req.kubernetes {
            // The OS upgrade rebooted the node: read the config it runs now.
            let client = if report.changed {
                let c = connection::connect(target, creds, opts.clone())
                    .await
                    .map_err(|e| report.client_fail(e))?;
                let config = read_config(&c, report).await?;
                let v1 = config.v1alpha1().cloned().unwrap_or(Value::Null);
                let plan = plan_kubernetes(&v1, want, &talos_after)
                    .map_err(|why| report.fail(format!("{}: {why}", target.node)))?;
                report.set("kubernetes", plan.to_json());
                k8s_plan = plan.changes().then_some(plan);
                c
            } else {
                client
            };
            if let Some(plan) = &k8s_plan {
                upgrade_kubernetes(&client, plan, deadline, report).await?;
                done.push(format!("Kubernetes {} -> {}", plan.current, plan.target));
                report.warnings.push(format!(
                    "{}: only this node's Kubernetes components moved; across a cluster a node's new kubelet must not                      run ahead of other control planes' API servers, so upgrade a cluster with                      ferro.talos.talos_kubernetes_upgrade (talosctl upgrade-k8s's order, waiting for each pod and Node)",
                    target.node
                ));
            }
        }
    }
    if done.is_empty() {
        let mut parts = Vec::new();
        if let Some(os) = &req.os {
            parts.push(format!("Talos {current_tag} is at the target {}", os.tag()));
        }
        if let Some(k) = &req.kubernetes {
            parts.push(format!("Kubernetes is at the target {k}"));
        }
        return Ok(format!("{}: up to date: {}", target.node, parts.join("; ")));
    }
    Ok(format!("{}: {}", target.node, done.join("; ")))
}

/// The schematic the node runs: the Image Factory's `schematic` extension, wherever it is among the
/// node's extensions. Their IDs are indexes ("0", "1", ...) in install order
/// (`internal/app/machined/pkg/controllers/runtime/extension_status.go` at v1.13.9), so with other
/// extensions the schematic is not at "0": upstream's own test has it at "2".
async fn running_schematic(client: &TalosClient) -> Option<String> {
    let statuses = client
        .list_resources("runtime", "ExtensionStatuses.runtime.talos.dev")
        .await
        .ok()?;
    statuses
        .into_iter()
        .filter_map(|r| r.spec)
        .find_map(|spec| schematic_from_extension_yaml(&spec.yaml_spec))
}

/// `version` of an extension status whose `name` is `schematic`, from its YAML spec.
pub fn schematic_from_extension_yaml(yaml: &str) -> Option<String> {
    let field = |key: &str| {
        yaml.lines()
            .filter_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
            .next()
    };
    if field("name:")? != "schematic" {
        return None;
    }
    let id = field("version:")?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

async fn server_version(
    client: &TalosClient,
    report: &Report,
) -> Result<(String, Version), ModuleError> {
    let v = client.version().await.map_err(|e| report.client_fail(e))?;
    let tag = v.version.map(|i| i.tag).unwrap_or_default();
    let parsed = parse_version(&tag).map_err(|_| {
        report.fail(format!(
            "the node reports Talos version {tag:?}, which is not a semantic version"
        ))
    })?;
    Ok((tag, parsed))
}

async fn read_config(client: &TalosClient, report: &Report) -> Result<MachineConfig, ModuleError> {
    live_config::read(client).await.map_err(|e| match e {
        ReadError::Client(e) => report.client_fail(e),
        ReadError::Unusable(why) => {
            report.fail(format!("cannot use the node's machine config: {why}"))
        }
    })
}

/// Install the target, reboot, wait and verify the version. Returns how it went, in words.
/// Refuses to take a control plane down for an OS upgrade when etcd could lose quorum: exactly two
/// members (one down leaves one of two), or a member that is not started or not healthy. These are
/// upstream's checks (`internal/pkg/etcd/etcd.go` ValidateForUpgrade at v1.13.9), made by the
/// legacy Upgrade on the server; the LifecycleService path (`internal/app/lifecycle/lifecycle.go`)
/// that talosctl uses since 1.13 has none, so the module makes them itself, before anything moves.
async fn etcd_quorum_guard(
    target: &Target,
    client: &TalosClient,
    report: &Report,
) -> Result<(), ModuleError> {
    let refuse = |why: String| {
        report.fail(format!(
            "{}: not upgrading this control plane: {why}; nothing was changed",
            target.node
        ))
    };
    let members = client
        .etcd_member_list()
        .await
        .map_err(|e| refuse(format!("etcd's members could not be read ({})", e.message)))?;
    if members.len() == 2 {
        return Err(refuse(
            "etcd has 2 members, and with one of them rebooting the other alone has no quorum; \
             add a third control plane first (or remove one)"
                .into(),
        ));
    }
    for m in &members {
        let name = if m.hostname.is_empty() {
            format!("{:016x}", m.id)
        } else {
            format!("{} ({:016x})", m.hostname, m.id)
        };
        if m.hostname.is_empty() {
            return Err(refuse(format!(
                "etcd member {name} is not started; all members must be running to upgrade a control plane"
            )));
        }
        let Some(host) = member_host(m) else {
            continue;
        };
        let status = client.with_node(&host).etcd_status().await;
        let problem = match status {
            Ok(s) if s.errors.is_empty() => continue,
            Ok(s) => s.errors.join("; "),
            Err(e) => e.message,
        };
        return Err(refuse(format!(
            "etcd member {name} on {host} is not healthy ({problem}); all members must be healthy to \
             upgrade a control plane: fix it first (talosctl -n {host} service etcd)"
        )));
    }
    Ok(())
}

/// The address of an etcd member, from its first peer or client URL.
fn member_host(m: &ferro_talos_client::proto::machine::EtcdMember) -> Option<String> {
    let url = m.peer_urls.first().or(m.client_urls.first())?;
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// A legacy upgrade whose sequence failed on the node. Upstream's sequence stops the node's pods
/// and services before it runs the installer, and nothing brings them back but a reboot
/// (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`, Upgrade).
fn legacy_failure(
    node: &str,
    os: &OsTarget,
    current: &Version,
    failed: &SequenceFailure,
) -> String {
    format!(
        "{node}: the upgrade to {} failed on the node after it had stopped its services ({}). The node was not \
         rebooted and still runs v{current}, with etcd and the kubelet stopped: reboot it to start them again \
         (talosctl -n {node} reboot), then read its logs (talosctl -n {node} dmesg) for why the installer failed",
        os.tag(),
        failed.message
    )
}

#[allow(clippy::too_many_arguments)]
async fn upgrade_os(
    target: &Target,
    client: &TalosClient,
    creds: &Credentials,
    req: &Request,
    os: &OsTarget,
    current: &Version,
    lifecycle: bool,
    deadline: Instant,
    report: &mut Report,
) -> Result<String, ModuleError> {
    let old_boot = client.boot_id().await.map_err(|e| report.client_fail(e))?;
    report.set("boot_id_before", old_boot.clone());
    // The legacy API runs its sequence after answering: its actor id is how a failure shows.
    let mut legacy_actor = None;
    if lifecycle {
        let pulled = match client.image_pull(&os.image, containerd_system()).await {
            Err(e) if e.kind == ErrorKind::Unimplemented => {
                client
                    .image_pull_legacy(&os.image, ContainerdNamespace::NsSystem)
                    .await
            }
            other => other.map(|_| ()),
        };
        pulled.map_err(|e| report.client_fail(e))?;
        let install = client
            .lifecycle_upgrade(&os.image, containerd_system())
            .await
            .map_err(|e| report.client_fail(e))?;
        let tail: Vec<String> = install.lines.iter().rev().take(20).rev().cloned().collect();
        report.set("installer_output", tail.clone());
        if install.exit_code != 0 {
            return Err(report.fail(format!(
                "{}: the installer failed with exit code {} and the node was not rebooted; it still runs v{current}: {}",
                target.node,
                install.exit_code,
                tail.last().map(String::as_str).unwrap_or("no output")
            )));
        }
        // The installer wrote the inactive boot slot; the node is changed from here on.
        report.changed = true;
        let mode = if req.powercycle {
            RebootMode::Powercycle
        } else {
            RebootMode::Default
        };
        client
            .reboot(mode)
            .await
            .map_err(|e| report.client_fail(e))?;
    } else {
        let mode = if req.powercycle {
            UpgradeRebootMode::Powercycle
        } else {
            UpgradeRebootMode::Default
        };
        let ack = client
            .upgrade_legacy(&os.image, req.stage, false, mode)
            .await
            .map_err(|e| report.client_fail(e))?;
        report.changed = true;
        legacy_actor = Some(ack.actor_id).filter(|a| !a.is_empty());
    }
    if !req.wait {
        return Ok("reboot started, not waiting".into());
    }
    let node = target.routed().then_some(target.node.as_str());
    let mut boot = old_boot.clone();
    let mut reboots = 0;
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let reboot = wait_for_reboot(
            &target.endpoint,
            node,
            creds,
            boot.as_deref(),
            left,
            POLL_INTERVAL,
        );
        let back = match legacy_actor.take() {
            Some(actor) => tokio::select! {
                back = reboot => back,
                failed = sequence_failure(client, &actor) => {
                    return Err(report.fail(legacy_failure(&target.node, os, current, &failed)));
                }
            },
            None => reboot.await,
        }
        .map_err(|e| {
            report.fail(format!(
                "{}: the upgrade to {} was started but the node did not come back: {e}",
                target.node,
                os.tag()
            ))
        })?;
        reboots += 1;
        report.set("boot_id_after", back.boot_id.clone());
        report.set("version_after", back.version_tag.clone());
        match after_reboot(&back.version_tag, current, &os.version, req.stage, reboots) {
            AfterReboot::Done => break,
            AfterReboot::AnotherReboot => boot = back.boot_id,
            AfterReboot::RolledBack => {
                return Err(report.fail(format!(
                    "{}: the node rebooted but still runs v{current}, not the target {}: the new version did not \
                     boot and Talos rolled back to the previous one; check the node's console and logs",
                    target.node,
                    os.tag()
                )));
            }
            AfterReboot::Unexpected => {
                return Err(report.fail(format!(
                    "{}: the node came back running {:?}, expected {}",
                    target.node,
                    back.version_tag,
                    os.tag()
                )));
            }
        }
    }
    // A schematic change keeps the version: the schematic the node reports (when it does)
    // is the only evidence that the new image booted.
    if let Some(want) = schematic_of(&os.image) {
        let fresh = ConnectOptions {
            read_retries: 3,
            ..client.options().clone()
        };
        if let Ok(c) = connection::connect(target, creds, fresh).await
            && let Some(now) = running_schematic(&c).await
        {
            report.set("schematic_after", now.clone());
            if now != want {
                return Err(report.fail(format!(
                    "{}: the node rebooted into v{} but reports schematic {now}, not the target's {want}: the new \
                     image did not boot and Talos rolled back; check the node's console and logs",
                    target.node, os.version
                )));
            }
        }
    }
    Ok(format!(
        "{} API, verified after {} reboot{}",
        if lifecycle { "lifecycle" } else { "legacy" },
        reboots,
        if reboots == 1 { "" } else { "s" }
    ))
}

/// What a node's version after a reboot means.
#[derive(Debug, PartialEq)]
pub enum AfterReboot {
    Done,
    /// A staged upgrade installs on the way up and reboots once more.
    AnotherReboot,
    /// Still the old version: the new one did not boot.
    RolledBack,
    Unexpected,
}

pub fn after_reboot(
    reported: &str,
    before: &Version,
    target: &Version,
    staged: bool,
    reboots: u32,
) -> AfterReboot {
    match parse_version(reported) {
        Ok(now) if now == *target => AfterReboot::Done,
        Ok(now) if now == *before && staged && reboots == 1 => AfterReboot::AnotherReboot,
        Ok(now) if now == *before => AfterReboot::RolledBack,
        _ => AfterReboot::Unexpected,
    }
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

    fn to_json(&self) -> Value {
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
    fn unsynced_manifests(&self) -> Value {
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
    v1alpha1: &Value,
    want: &Version,
    talos: &Version,
) -> Result<KubernetesPlan, String> {
    if let Some(Err(why)) = kubernetes_supported(talos, want) {
        return Err(why);
    }
    let components = kubernetes_components(v1alpha1)?;
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
async fn upgrade_kubernetes(
    client: &TalosClient,
    plan: &KubernetesPlan,
    deadline: Instant,
    report: &mut Report,
) -> Result<(), ModuleError> {
    let mut config = read_config(client, report).await?;
    let Some(v1) = config.v1alpha1_mut() else {
        return Err(report.fail("the node's machine config has no v1alpha1 document"));
    };
    let mut expected = Vec::new();
    for c in plan.components.iter().filter(|c| c.version != plan.target) {
        let new_image = c.retagged(&plan.target);
        match v1.pointer_mut(c.pointer) {
            Some(slot) => *slot = Value::String(new_image.clone()),
            None => {
                return Err(report.fail(format!(
                    "{} vanished from the node's config",
                    config_path(c.pointer)
                )));
            }
        }
        expected.push((c.pointer, new_image));
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
    let yaml = config.to_yaml();
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
    expected: &[(&str, String)],
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
    let v1 = cfg.v1alpha1().ok_or("config has no v1alpha1 document")?;
    for (pointer, image) in expected {
        let now = v1.pointer(pointer).and_then(Value::as_str).unwrap_or("");
        if now != image {
            return Err(format!("{} is still {now:?}", config_path(pointer)));
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

    fn v(s: &str) -> Version {
        parse_version(s).unwrap()
    }

    fn target(image: &str) -> OsTarget {
        parse_installer_image(image).unwrap()
    }

    const FACTORY: &str = "factory.talos.dev/installer/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn versions_strip_one_v_and_keep_prereleases() {
        assert_eq!(v("v1.13.6"), Version::new(1, 13, 6));
        assert_eq!(v("1.36.1"), Version::new(1, 36, 1));
        assert!(v("v1.14.0-rc.1") < v("v1.14.0"));
        assert!(parse_version("1.13").is_err());
        assert!(parse_version("latest").is_err());
    }

    #[test]
    fn image_references() {
        assert_eq!(
            split_image("ghcr.io/siderolabs/installer:v1.13.6"),
            ("ghcr.io/siderolabs/installer", Some("v1.13.6"))
        );
        assert_eq!(
            split_image("localhost:5000/installer:v1.12.1@sha256:ab"),
            ("localhost:5000/installer", Some("v1.12.1"))
        );
        assert_eq!(
            split_image("localhost:5000/installer"),
            ("localhost:5000/installer", None)
        );
        let t = target(&format!("{FACTORY}:v1.13.6"));
        assert_eq!(t.version, Version::new(1, 13, 6));
        assert!(parse_installer_image("ghcr.io/siderolabs/installer").is_err());
        assert!(parse_installer_image("ghcr.io/siderolabs/installer:latest").is_err());
        assert!(parse_installer_image("has space:v1.13.6").is_err());
        assert!(check_repository("ghcr.io/siderolabs/installer:v1.13.6").is_err());
        assert!(check_repository("localhost:5000/installer").is_ok());
    }

    #[test]
    fn schematics() {
        assert_eq!(
            schematic_of("ghcr.io/siderolabs/installer:v1.13.6").as_deref(),
            Some(VANILLA_SCHEMATIC)
        );
        assert_eq!(
            schematic_of(&format!("{FACTORY}:v1.13.6")).as_deref(),
            Some("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
        );
        assert_eq!(schematic_of("registry.local/installer:v1.13.6"), None);
    }

    #[test]
    fn schematic_extension_status() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let yaml =
            format!("metadata:\n    name: schematic\n    version: {id}\n    description: x\n");
        assert_eq!(schematic_from_extension_yaml(&yaml).as_deref(), Some(id));
        assert_eq!(
            schematic_from_extension_yaml("metadata:\n    name: gvisor\n    version: 1.0\n"),
            None
        );
        assert_eq!(
            schematic_from_extension_yaml("metadata:\n    name: schematic\n    version: abc\n"),
            None
        );
    }

    #[test]
    fn the_version_after_the_reboot_tells_success_from_rollback() {
        let (old, new) = (v("1.13.4"), v("1.13.6"));
        assert_eq!(
            after_reboot("v1.13.6", &old, &new, false, 1),
            AfterReboot::Done
        );
        assert_eq!(
            after_reboot("v1.13.4", &old, &new, false, 1),
            AfterReboot::RolledBack
        );
        assert_eq!(
            after_reboot("v1.13.4", &old, &new, true, 1),
            AfterReboot::AnotherReboot
        );
        assert_eq!(
            after_reboot("v1.13.4", &old, &new, true, 2),
            AfterReboot::RolledBack
        );
        assert_eq!(
            after_reboot("v1.13.5", &old, &new, false, 1),
            AfterReboot::Unexpected
        );
        assert_eq!(
            after_reboot("", &old, &new, false, 1),
            AfterReboot::Unexpected
        );
    }

    #[test]
    fn lifecycle_api_threshold() {
        assert!(!has_lifecycle_api(&v("1.12.5")));
        assert!(!has_lifecycle_api(&v("1.13.0-alpha.2")));
        assert!(has_lifecycle_api(&v("1.13.0-alpha.3")));
        assert!(has_lifecycle_api(&v("1.13.4")));
        assert!(has_lifecycle_api(&v("1.14.2")));
        assert!(!has_lifecycle_api(&v("2.0.0")));
    }

    #[test]
    fn direction_comes_from_the_node_version() {
        let t = target("ghcr.io/siderolabs/installer:v1.13.6");
        assert_eq!(
            decide_os(&v("1.13.6"), None, &t, false),
            Ok(OsDecision::UpToDate)
        );
        assert!(matches!(
            decide_os(&v("1.13.4"), None, &t, false),
            Ok(OsDecision::Change(_))
        ));
        let err = decide_os(&v("1.14.2"), None, &t, false).unwrap_err();
        assert!(
            err.contains("downgrade") && err.contains("allow_downgrade"),
            "{err}"
        );
        assert!(matches!(
            decide_os(&v("1.14.2"), None, &t, true),
            Ok(OsDecision::Change(_))
        ));
        let t14 = target("ghcr.io/siderolabs/installer:v1.14.1");
        assert!(matches!(
            decide_os(&v("1.13.6"), None, &t14, false),
            Ok(OsDecision::Change(_))
        ));
        let rc = target("ghcr.io/siderolabs/installer:v1.14.0-rc.1");
        assert!(matches!(
            decide_os(&v("1.13.6"), None, &rc, false),
            Ok(OsDecision::Change(_))
        ));
        assert!(decide_os(&v("1.14.0"), None, &rc, false).is_err());
    }

    #[test]
    fn schematic_change_at_the_same_version_is_an_upgrade() {
        let t = target(&format!("{FACTORY}:v1.13.6"));
        assert!(matches!(
            decide_os(&v("1.13.6"), Some(VANILLA_SCHEMATIC), &t, false),
            Ok(OsDecision::Change(_))
        ));
        let same = schematic_of(&t.image);
        assert_eq!(
            decide_os(&v("1.13.6"), same.as_deref(), &t, false),
            Ok(OsDecision::UpToDate)
        );
        // Unknown current schematic: nothing to compare, the version decides.
        assert_eq!(
            decide_os(&v("1.13.6"), None, &t, false),
            Ok(OsDecision::UpToDate)
        );
    }

    #[test]
    fn installer_ranges_name_the_intermediate_versions() {
        let err = decide_os(
            &v("1.10.7"),
            None,
            &target("ghcr.io/siderolabs/installer:v1.13.6"),
            false,
        )
        .unwrap_err();
        assert!(
            err.contains("upgrade to the latest 1.11.x, then 1.12.x first"),
            "{err}"
        );
        assert!(err.contains("1.11.0 up to, not including, 1.15.0"), "{err}");
        assert_eq!(
            installer_check(&v("1.11.0"), &v("1.13.6")),
            InstallerCheck::Accepts
        );
        assert_eq!(
            installer_check(&v("1.14.9"), &v("1.13.6")),
            InstallerCheck::Accepts
        );
        let InstallerCheck::Refuses(err) = installer_check(&v("1.16.0"), &v("1.13.6")) else {
            panic!()
        };
        assert!(
            err.contains("downgrade to the latest 1.15.x, then 1.14.x first"),
            "{err}"
        );
        assert_eq!(
            installer_check(&v("1.12.0"), &v("1.15.0")),
            InstallerCheck::Unknown
        );
    }

    fn config(kubelet: &str, cp: Option<&str>) -> Value {
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
        cfg
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
        disabled["cluster"]["proxy"]["disabled"] = json!(true);
        assert_eq!(kubernetes_components(&disabled).unwrap().len(), 4);
        let missing = json!({"machine": {"type": "worker"}});
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

    #[test]
    fn retag_drops_digests() {
        assert_eq!(
            retag(
                "registry.k8s.io/kube-apiserver:v1.35.0@sha256:00",
                &v("1.36.1")
            ),
            "registry.k8s.io/kube-apiserver:v1.36.1"
        );
        assert_eq!(
            retag("localhost:5000/kubelet", &v("1.36.1")),
            "localhost:5000/kubelet:v1.36.1"
        );
    }
}
