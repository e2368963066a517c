//! The OS move: deciding it from what the node reports (`plan_os`), then doing it
//! (`upgrade_os`): install the target through the LifecycleService or the legacy Upgrade, reboot,
//! wait for the node to come back and verify what it booted.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::proto::common::ContainerdNamespace;
use ferro_talos_client::{
    ConnectOptions, Credentials, ErrorKind, RebootDone, RebootMode, SequenceFailure, TalosClient,
    UpgradeRebootMode, containerd_system, sequence_failure, wait_for_reboot,
};
use ferro_talos_config::MachineConfig;
use semver::Version;
use serde_json::Value;

use super::POLL_INTERVAL;
use super::args::{Args, Reboot};
use super::image::OsTarget;
use super::kubernetes::kubernetes_components;
use super::report::Report;
use super::schematic::{running_schematic, schematic_of};
use super::version_policy::{
    InstallerCheck, OsDecision, decide_os, has_lifecycle_api, installer_check,
    kubernetes_supported, parse_version,
};
use crate::shared::connection::{self, Target};

/// Which API installs the new Talos.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UpgradeApi {
    /// LifecycleService and ImageService, which talosctl uses since 1.13.
    Lifecycle,
    /// MachineService's Upgrade: nodes without the LifecycleService, and staged upgrades (only
    /// the legacy API stages).
    Legacy,
}

impl UpgradeApi {
    fn for_node(current: &Version, stage: bool) -> UpgradeApi {
        if has_lifecycle_api(current) && !stage {
            UpgradeApi::Lifecycle
        } else {
            UpgradeApi::Legacy
        }
    }

    /// Its name in the result's `upgrade_path` and in the summary.
    pub(super) fn name(self) -> &'static str {
        match self {
            UpgradeApi::Lifecycle => "lifecycle",
            UpgradeApi::Legacy => "legacy",
        }
    }
}

/// An OS move decided before anything moves.
pub(super) struct OsPlan<'a> {
    pub(super) to: &'a OsTarget,
    pub(super) api: UpgradeApi,
    /// The decision in words, such as "upgrade v1.13.4 -> v1.13.6".
    pub(super) reason: String,
}

/// Whether the node's Talos moves to `args.os` and through which API, decided from the version it
/// runs (`current`), the schematic it reports and its live config; `Err` is the rule that
/// refuses the move. What the rules allow but is worth a word becomes a warning.
pub(super) async fn plan_os<'a>(
    client: &TalosClient,
    current: &Version,
    config: &MachineConfig,
    args: &'a Args,
    report: &mut Report,
) -> Result<Option<OsPlan<'a>>, String> {
    let Some(os) = &args.os else {
        return Ok(None);
    };
    let v1 = config.v1alpha1().unwrap_or(&Value::Null);
    let install_image = v1.pointer("/machine/install/image").and_then(Value::as_str);
    report.set("install_image", install_image);
    // The running schematic when the node reports it; else the one its config installs.
    let current_schematic = match running_schematic(client).await {
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
        current,
        current_schematic.as_deref(),
        os,
        args.allow_downgrade,
    )?;
    if let OsDecision::Change(_) = &decision
        && let InstallerCheck::Unknown = installer_check(current, &os.version)
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
    if args.kubernetes.is_none()
        && let OsDecision::Change(_) = &decision
        && let Ok(components) = kubernetes_components(config)
        && let Some(kubelet) = components.first()
        && let Some(Err(why)) = kubernetes_supported(&os.version, &kubelet.version)
    {
        report.warnings.push(format!(
            "{why}, and the node's kubelet is at {}: move Kubernetes into the supported range too",
            kubelet.version
        ));
    }
    let api = UpgradeApi::for_node(current, args.stage);
    report.set("upgrade_path", api.name());
    report.set("os_upgrade", matches!(decision, OsDecision::Change(_)));
    Ok(match decision {
        OsDecision::Change(reason) => {
            report.set("os_reason", reason.clone());
            Some(OsPlan {
                to: os,
                api,
                reason,
            })
        }
        OsDecision::UpToDate => None,
    })
}

/// How far a legacy upgrade's sequence got before it failed, from the phases it started. The
/// phases of `Upgrade` in `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`
/// (v1.13.9: `drain`, `cleanup`, `dbus`, `stopServices`, the unmounts, `upgrade`, ...; v1.14.1
/// adds `denyNewServices` first and `preShutdown`, `stopContainers`, `unmountPromotable`), with
/// their tasks in `v1alpha1_sequencer_tasks.go`: `cleanup` (`StopAllPods`) stops the kubelet and
/// every pod, `stopServices` (`StopServicesEphemeral`) stops containerd and everything that needs
/// it, etcd among them; before `cleanup` nothing is stopped. Whatever a phase stopped stays
/// stopped until the node reboots; the failed sequence leaves MachineStatus REBOOTING, which
/// changes no cordon (`controllers/k8s/node_cordoned_spec.go`), so the cordon Talos made for
/// the UPGRADING stage stays too.
#[derive(Debug, PartialEq, Eq)]
enum LegacyProgress {
    /// The node published no phases for the sequence: what it stopped is unknown.
    Unknown,
    /// Failed before `cleanup`: pods and services still run.
    NothingStopped,
    /// Failed after `cleanup` began, before `stopServices`: the kubelet and the pods are stopped.
    PodsStopped,
    /// `stopServices` began: etcd and the kubelet are stopped.
    ServicesStopped,
}

fn legacy_progress(phases: &[String]) -> LegacyProgress {
    let reached = |p: &str| phases.iter().any(|s| s == p);
    if phases.is_empty() {
        LegacyProgress::Unknown
    } else if reached("stopServices") {
        LegacyProgress::ServicesStopped
    } else if reached("cleanup") {
        LegacyProgress::PodsStopped
    } else {
        LegacyProgress::NothingStopped
    }
}

/// A legacy upgrade whose sequence failed on the node, in words that say what Talos had done
/// before the failed phase.
fn legacy_failure(
    node: &str,
    os: &OsTarget,
    current: &Version,
    failed: &SequenceFailure,
) -> String {
    let tag = os.tag();
    let message = &failed.message;
    let phase = failed.phases.last().map(String::as_str).unwrap_or("");
    let why = match phase {
        "upgrade" => "the installer failed".to_string(),
        _ => format!("its {phase} phase failed"),
    };
    let logs = format!("read its logs (talosctl -n {node} dmesg) for why {why}");
    match legacy_progress(&failed.phases) {
        LegacyProgress::Unknown => format!(
            "{node}: the upgrade to {tag} failed on the node ({message}). The node was not rebooted and still \
             runs v{current}; it did not say how far its upgrade sequence got, so some of its services may be \
             stopped: check them (talosctl -n {node} services), reboot it to start them again (talosctl -n \
             {node} reboot), then read its logs (talosctl -n {node} dmesg)"
        ),
        LegacyProgress::NothingStopped => {
            let denied = if failed.phases.iter().any(|p| p == "denyNewServices") {
                ", and starts no new service until then"
            } else {
                ""
            };
            format!(
                "{node}: the upgrade to {tag} failed on the node in its {phase} phase, before Talos had stopped \
                 anything ({message}). The node was not rebooted and still runs v{current} with its pods, etcd \
                 and the kubelet, but Talos keeps its Node cordoned until it reboots{denied}: {logs}, then run \
                 the upgrade again, or reboot the node (talosctl -n {node} reboot) to leave it at v{current} \
                 and uncordoned"
            )
        }
        LegacyProgress::PodsStopped => format!(
            "{node}: the upgrade to {tag} failed on the node in its {phase} phase, after Talos had stopped the \
             kubelet and the node's pods ({message}). The node was not rebooted and still runs v{current}, \
             with the kubelet stopped and its Node cordoned: reboot it to start them again (talosctl -n {node} \
             reboot), then {logs}"
        ),
        LegacyProgress::ServicesStopped => format!(
            "{node}: the upgrade to {tag} failed on the node in its {phase} phase, after Talos had stopped its \
             services ({message}). The node was not rebooted and still runs v{current}, with etcd and the \
             kubelet stopped: reboot it to start them again (talosctl -n {node} reboot), then {logs}"
        ),
    }
}

/// A pull that found no such image: Talos answers NotFound, `error pulling image: …`
/// (`internal/app/images/images.go` Pull @ v1.14.1), before anything is installed.
fn missing_installer(node: &str, image: &str, from: &Version, talos_says: &str) -> String {
    format!(
        "{node}: the installer image {image} is not in its registry, so nothing was installed and the \
         node still runs v{from} ({talos_says}); check the reference: from Talos 1.14 the stock \
         installer is the Image Factory's, {}:<version>, or your schematic's",
        ferro_talos_config::image::FACTORY_INSTALLER_REPOSITORY
    )
}

/// The node an OS upgrade runs on, and how to reach it again once it has rebooted.
pub(super) struct NodeAccess<'a> {
    pub(super) target: &'a Target,
    /// The connection the upgrade starts on.
    pub(super) client: &'a TalosClient,
    pub(super) creds: &'a Credentials,
}

/// One OS upgrade: from which version to which target, how, and by when.
#[derive(Clone, Copy)]
pub(super) struct OsUpgrade<'a> {
    /// What the node runs now, and what a rollback boots back into.
    pub(super) from: &'a Version,
    pub(super) to: &'a OsTarget,
    pub(super) api: UpgradeApi,
    /// Install on the next boot (`stage`, legacy API only), which takes one more reboot.
    pub(super) stage: bool,
    pub(super) reboot: Reboot,
    /// Wait for the node to come back and verify what it booted (`wait`).
    pub(super) wait: bool,
    /// When the node must be back, verified.
    pub(super) deadline: Instant,
}

/// Install the target, reboot, wait and verify the version. Returns how it went, in words.
pub(super) async fn upgrade_os(
    node: &NodeAccess<'_>,
    upgrade: OsUpgrade<'_>,
    report: &mut Report,
) -> Result<String, ModuleError> {
    let old_boot = node
        .client
        .boot_id()
        .await
        .map_err(|e| report.client_fail(e))?;
    report.set("boot_id_before", old_boot.clone());
    // The legacy API runs its sequence after answering: its actor id is how a failure shows.
    let legacy_actor = match upgrade.api {
        UpgradeApi::Lifecycle => {
            install_and_reboot(node, &upgrade, report).await?;
            None
        }
        UpgradeApi::Legacy => start_legacy_upgrade(node, &upgrade, report).await?,
    };
    if !upgrade.wait {
        return Ok("reboot started, not waiting".into());
    }
    let reboots = wait_until_on_target(node, &upgrade, old_boot, legacy_actor, report).await?;
    verify_schematic(node, upgrade.to, report).await?;
    Ok(format!(
        "{} API, verified after {} reboot{}",
        upgrade.api.name(),
        reboots,
        if reboots == 1 { "" } else { "s" }
    ))
}

/// The LifecycleService's way: pull the installer, run it, then reboot into what it installed.
async fn install_and_reboot(
    node: &NodeAccess<'_>,
    upgrade: &OsUpgrade<'_>,
    report: &mut Report,
) -> Result<(), ModuleError> {
    pull_installer(node, upgrade, report).await?;
    run_installer(node, upgrade, report).await?;
    // The installer wrote the inactive boot slot; the node is changed from here on.
    report.changed = true;
    let mode = match upgrade.reboot {
        Reboot::Default => RebootMode::Default,
        Reboot::Powercycle => RebootMode::Powercycle,
    };
    node.client
        .reboot(mode)
        .await
        .map_err(|e| report.client_fail(e))?;
    Ok(())
}

/// The installer image pulled into containerd's system namespace (through the legacy pull on a
/// node without the ImageService); an image its registry does not have is said in plain words.
async fn pull_installer(
    node: &NodeAccess<'_>,
    upgrade: &OsUpgrade<'_>,
    report: &Report,
) -> Result<(), ModuleError> {
    let (client, image) = (node.client, &upgrade.to.image);
    let pulled = match client.image_pull(image, containerd_system()).await {
        Err(e) if e.kind == ErrorKind::Unimplemented => {
            client
                .image_pull_legacy(image, ContainerdNamespace::NsSystem)
                .await
        }
        other => other.map(|_| ()),
    };
    pulled.map_err(|e| match e.kind {
        ErrorKind::NotFound => {
            let msg = missing_installer(&node.target.node, image, upgrade.from, &e.message);
            let mut err = report.client_fail(e);
            err.msg = msg;
            err
        }
        _ => report.client_fail(e),
    })
}

/// Runs the pulled installer, keeping the last lines of its output in `installer_output`; one
/// that fails has installed nothing the node boots, so the message says it still runs the old one.
async fn run_installer(
    node: &NodeAccess<'_>,
    upgrade: &OsUpgrade<'_>,
    report: &mut Report,
) -> Result<(), ModuleError> {
    let install = node
        .client
        .lifecycle_upgrade(&upgrade.to.image, containerd_system())
        .await
        .map_err(|e| report.client_fail(e))?;
    let tail: Vec<String> = install.lines.iter().rev().take(20).rev().cloned().collect();
    report.set("installer_output", tail.clone());
    if install.exit_code != 0 {
        return Err(report.fail(format!(
            "{}: the installer failed with exit code {} and the node was not rebooted; it still runs v{}: {}",
            node.target.node,
            install.exit_code,
            upgrade.from,
            tail.last().map(String::as_str).unwrap_or("no output")
        )));
    }
    Ok(())
}

/// MachineService's Upgrade: the node pulls, installs and reboots in one sequence it runs after
/// answering. Returns the sequence's actor id, when the node gives one.
async fn start_legacy_upgrade(
    node: &NodeAccess<'_>,
    upgrade: &OsUpgrade<'_>,
    report: &mut Report,
) -> Result<Option<String>, ModuleError> {
    let mode = match upgrade.reboot {
        Reboot::Default => UpgradeRebootMode::Default,
        Reboot::Powercycle => UpgradeRebootMode::Powercycle,
    };
    let ack = node
        .client
        .upgrade_legacy(&upgrade.to.image, upgrade.stage, false, mode)
        .await
        .map_err(|e| report.client_fail(e))?;
    report.changed = true;
    Ok(Some(ack.actor_id).filter(|a| !a.is_empty()))
}

/// Waits through the node's reboots until it runs the target version (a staged upgrade takes
/// two); returns how many it took. A rollback or another version is the failure.
async fn wait_until_on_target(
    node: &NodeAccess<'_>,
    upgrade: &OsUpgrade<'_>,
    old_boot: Option<String>,
    mut legacy_actor: Option<String>,
    report: &mut Report,
) -> Result<u32, ModuleError> {
    let OsUpgrade {
        from, to, stage, ..
    } = *upgrade;
    let mut boot = old_boot;
    let mut reboots = 0;
    loop {
        // Only the first reboot runs the legacy sequence that may fail.
        let back = next_boot(node, upgrade, boot.as_deref(), legacy_actor.take(), report).await?;
        reboots += 1;
        report.set("boot_id_after", back.boot_id.clone());
        report.set("version_after", back.version_tag.clone());
        match after_reboot(&back.version_tag, from, &to.version, stage, reboots) {
            AfterReboot::Done => return Ok(reboots),
            AfterReboot::AnotherReboot => boot = back.boot_id,
            AfterReboot::RolledBack => {
                return Err(report.fail(format!(
                    "{}: the node rebooted but still runs v{from}, not the target {}: the new version did not \
                     boot and Talos rolled back to the previous one; check the node's console and logs",
                    node.target.node,
                    to.tag()
                )));
            }
            AfterReboot::Unexpected => {
                return Err(report.fail(format!(
                    "{}: the node came back running {:?}, expected {}",
                    node.target.node,
                    back.version_tag,
                    to.tag()
                )));
            }
        }
    }
}

/// The node's next boot, one other than `boot`, by the deadline. While the legacy sequence of
/// `legacy_actor` runs, its failure ends the wait with what it had done.
async fn next_boot(
    node: &NodeAccess<'_>,
    upgrade: &OsUpgrade<'_>,
    boot: Option<&str>,
    legacy_actor: Option<String>,
    report: &Report,
) -> Result<RebootDone, ModuleError> {
    let NodeAccess {
        target,
        client,
        creds,
    } = *node;
    let left = upgrade
        .deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    let routed = target.routed().then_some(target.node.as_str());
    let reboot = wait_for_reboot(&target.endpoint, routed, creds, boot, left, POLL_INTERVAL);
    match legacy_actor {
        Some(actor) => tokio::select! {
            back = reboot => back,
            failed = sequence_failure(client, &actor) => {
                return Err(report.fail(legacy_failure(&target.node, upgrade.to, upgrade.from, &failed)));
            }
        },
        None => reboot.await,
    }
    .map_err(|e| {
        report.fail(format!(
            "{}: the upgrade to {} was started but the node did not come back: {e}",
            target.node,
            upgrade.to.tag()
        ))
    })
}

/// A schematic change keeps the version: the schematic the node reports (when it does) is the
/// only evidence that the new image booted. A node that does not say is taken at its version.
async fn verify_schematic(
    node: &NodeAccess<'_>,
    to: &OsTarget,
    report: &mut Report,
) -> Result<(), ModuleError> {
    let Some(want) = schematic_of(&to.image) else {
        return Ok(());
    };
    let fresh = ConnectOptions {
        read_retries: 3,
        ..node.client.options().clone()
    };
    if let Ok(c) = connection::connect(node.target, node.creds, fresh).await
        && let Some(now) = running_schematic(&c).await
    {
        report.set("schematic_after", now.clone());
        if now != want {
            return Err(report.fail(format!(
                "{}: the node rebooted into v{} but reports schematic {now}, not the target's {want}: the new \
                 image did not boot and Talos rolled back; check the node's console and logs",
                node.target.node, to.version
            )));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::talos_upgrade::test_support::v;

    fn phases(list: &[&str]) -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    }

    /// The phase order of `Upgrade` in `v1alpha1_sequencer.go` @ v1.13.9 and v1.14.1: a failed
    /// drain (the first phase, the second on 1.14) has stopped nothing, `cleanup` stops the
    /// kubelet and the pods, `stopServices` etcd and the rest.
    #[test]
    fn a_failed_legacy_sequence_is_told_by_how_far_it_got() {
        use LegacyProgress::*;
        assert_eq!(legacy_progress(&[]), Unknown);
        assert_eq!(legacy_progress(&phases(&["drain"])), NothingStopped);
        assert_eq!(
            legacy_progress(&phases(&["denyNewServices", "drain"])),
            NothingStopped
        );
        assert_eq!(legacy_progress(&phases(&["drain", "cleanup"])), PodsStopped);
        let v1_13 = [
            "drain",
            "cleanup",
            "dbus",
            "stopServices",
            "unmount",
            "unmountBind",
            "unmountSystem",
            "volumeFinalize",
            "upgrade",
        ];
        assert_eq!(legacy_progress(&phases(&v1_13)), ServicesStopped);
        let v1_14 = [
            "denyNewServices",
            "drain",
            "cleanup",
            "preShutdown",
            "dbus",
            "stopContainers",
        ];
        assert_eq!(legacy_progress(&phases(&v1_14)), PodsStopped);
    }

    #[test]
    fn a_missing_installer_says_what_happened_and_what_to_check() {
        let msg = missing_installer(
            "10.0.0.5",
            "registry.local/talos/installer:v1.14.9",
            &v("1.13.9"),
            "error pulling image: failed to pull image \"registry.local/talos/installer:v1.14.9\": not found",
        );
        for words in [
            "10.0.0.5: the installer image registry.local/talos/installer:v1.14.9 is not in its registry",
            "nothing was installed and the node still runs v1.13.9 (error pulling image: ",
            "check the reference",
            "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:<version>",
        ] {
            assert!(msg.contains(words), "{words:?} missing from {msg:?}");
        }
        assert!(!msg.contains("  "), "{msg}");
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
}
