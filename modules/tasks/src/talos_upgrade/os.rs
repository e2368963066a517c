//! The OS upgrade itself: install the target (through the LifecycleService or the legacy
//! Upgrade), reboot, wait for the node to come back and verify what it booted.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::proto::common::ContainerdNamespace;
use ferro_talos_client::{
    ConnectOptions, Credentials, ErrorKind, RebootMode, SequenceFailure, TalosClient,
    UpgradeRebootMode, containerd_system, sequence_failure, wait_for_reboot,
};
use semver::Version;

use super::POLL_INTERVAL;
use super::image::OsTarget;
use super::report::Report;
use super::request::Request;
use super::schematic::{running_schematic, schematic_of};
use super::version_policy::parse_version;
use crate::connection::{self, Target};

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

/// Install the target, reboot, wait and verify the version. Returns how it went, in words.
#[allow(clippy::too_many_arguments)]
pub(super) async fn upgrade_os(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::talos_upgrade::test_support::v;

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
