//! ApplyConfiguration semantics (api.md §14): mode resolution, the immediacy check, dry-run
//! text, staged/try handling and the transition out of maintenance mode.

use std::sync::Arc;
use std::time::Duration;

use ferro_talos_proto::machine::{
    ApplyConfiguration, ApplyConfigurationRequest, apply_configuration_request::Mode,
};
use tonic::Status;

use crate::mcfg::{self, StoredConfig};
use crate::routing::Target;
use crate::state::{Shared, State, new_uuid};
use crate::{tls, version};

const WITH_REBOOT: &str = "Applied configuration with a reboot";
const WITHOUT_REBOOT: &str = "Applied configuration without a reboot";
const STAGED: &str = "Staged configuration to be applied after the next reboot";
const REBOOT_UNSUPPORTED: &str =
    "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead";

/// Go's `time.Duration.String()` for the durations talosctl sends (e.g. `1m0s`, `30s`, `1.5s`).
pub fn go_duration(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms == 0 {
        return "0s".into();
    }
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let h = total_ms / 3_600_000;
    let m = (total_ms / 60_000) % 60;
    let ms = total_ms % 60_000;
    let secs = if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        let s = format!("{}.{:03}", ms / 1000, ms % 1000);
        format!("{}s", s.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// Makes `cfg` the running config (and the next boot's, unless `persist` is false), refreshing
/// the node's TLS personality so CA/SAN changes take effect for new connections.
fn activate(st: &mut State, idx: usize, cfg: StoredConfig, persist: bool) {
    let ca_key = crate::state::trustd_key(st, &cfg);
    let Some(n) = st.nodes.get_mut(idx) else {
        return;
    };
    if persist {
        n.persisted = Some(cfg.clone());
    }
    let restarted = n.components.update(&cfg);
    n.active = Some(cfg);
    n.config_version += 1;
    n.config_updated = std::time::SystemTime::now();
    // New connections get the new personality at once: a node leaving maintenance mode answers
    // with mutual TLS from here on (upstream's apid swaps its listener), before any install.
    match tls::NodeTls::build(n, ca_key) {
        Ok(t) => n.tls = Some(Arc::new(t)),
        Err(e) => eprintln!("talos-sim: node {idx}: keeping previous TLS config: {e:#}"),
    }
    // The Kubernetes side sees each component restart: tests read the order from this log.
    let name = crate::kube::node_name(&st.nodes[idx]);
    for component in restarted {
        st.kube
            .record("restart", &name, Some(component.to_string()));
    }
    crate::state::refresh_unsigned_tls(st);
}

/// Rolls a try-mode config back after `after`, unless another apply or a boot came first
/// (which bump `try_token`). A try from maintenance mode has nothing to roll back to: upstream
/// then removes the active config while the node runs on (`RollbackToConfigAfter` in
/// `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go`); the simulator keeps the
/// config until the next boot, which comes up in maintenance mode either way.
pub fn schedule_try_rollback(shared: &Arc<Shared>, idx: usize, token: u64, after: Duration) {
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let mut st = shared.lock();
        let Some(n) = st.nodes.get(idx) else {
            return;
        };
        if n.try_token == token
            && n.up
            && let Some(back) = n.persisted.clone()
        {
            st.nodes[idx].try_rollback_at = None;
            activate(&mut st, idx, back, true);
        }
    });
}

/// `CancelConfigRollbackTimeout`: a pending TRY rollback no longer happens.
fn cancel_try_rollback(st: &mut State, idx: usize) {
    st.nodes[idx].try_token += 1;
    st.nodes[idx].try_rollback_at = None;
}

pub fn apply(
    shared: &Arc<Shared>,
    t: &Target,
    req: &ApplyConfigurationRequest,
) -> Result<ApplyConfiguration, Status> {
    let mut st = shared.lock();
    let idx = t.idx;
    let (release, v14, maintenance, installed, reboot_pending, reject) = {
        let n = &st.nodes[idx];
        (
            mcfg::Release::for_version(&n.version),
            version::minor(&n.version) >= 14,
            n.maintenance(),
            n.installed,
            n.reboot_pending,
            n.faults.reject_config.clone(),
        )
    };
    if !v14 && reboot_pending {
        return Err(Status::failed_precondition(
            "configuration was already applied and node is rebooting, cannot apply more configuration changes until next reboot",
        ));
    }
    if !maintenance && !t.is_admin() {
        return Err(Status::permission_denied("not authorized"));
    }
    let Ok(mode) = Mode::try_from(req.mode) else {
        return Err(Status::invalid_argument(format!(
            "incorrect mode '{}' specified for the apply config call",
            req.mode
        )));
    };
    // Any mode but TRY cancels a pending TRY rollback: 1.13.9 before it decodes the config, 1.14.1
    // only once the config validated and not on a dry run (`ApplyConfiguration` in
    // v1alpha1_server.go at v1.13.9 and v1.14.1).
    let cancels_try = mode != Mode::Try;
    if cancels_try && !v14 {
        cancel_try_rollback(&mut st, idx);
    }
    let new = StoredConfig::parse(&req.data, release).map_err(Status::invalid_argument)?;
    if let Some(reason) = reject {
        return Err(Status::invalid_argument(reason));
    }
    // 1.14.1 refuses REBOOT on a configured node right after the v1alpha1 check, before it
    // validates (`ApplyConfiguration` in v1alpha1_server.go @ v1.14.1).
    if v14 && !maintenance && mode == Mode::Reboot && new.v1alpha1().is_some() {
        return Err(Status::unimplemented(REBOOT_UNSUPPORTED));
    }
    let warnings = new
        .validate_on(maintenance, installed)
        .map_err(Status::invalid_argument)?;
    let current = st.nodes[idx].active.clone();

    // Mode resolution.
    let mut reboot_suffix = String::new();
    let resolved = if maintenance {
        // Maintenance: REBOOT and AUTO become NO_REBOOT and the immediacy check is skipped; a
        // staged config waits for the next boot; TRY stays TRY (activated, not persisted).
        match mode {
            Mode::Staged => Mode::Staged,
            Mode::Try => Mode::Try,
            _ => Mode::NoReboot,
        }
    } else if v14 {
        match mode {
            Mode::Reboot => {
                return Err(Status::unimplemented(REBOOT_UNSUPPORTED));
            }
            Mode::Auto => Mode::NoReboot,
            m => m,
        }
    } else {
        // `CanApplyImmediate` (v1alpha1_runtime.go @ v1.13.9, `crate::reboot`): its error
        // refuses NO_REBOOT/TRY and turns AUTO into a reboot with the error appended.
        let immediate = match current.as_ref() {
            Some(c) => mcfg::can_apply_immediate(c, &new),
            None => Err("no current config".to_string()),
        };
        match (mode, immediate) {
            (Mode::Auto, Ok(())) => Mode::NoReboot,
            (Mode::Auto, Err(e)) => {
                reboot_suffix = format!(": {e}");
                Mode::Reboot
            }
            (Mode::NoReboot | Mode::Try, Err(e)) => {
                return Err(Status::invalid_argument(e));
            }
            (m, _) => m,
        }
    };
    let base = match resolved {
        Mode::Reboot => WITH_REBOOT,
        Mode::Staged => STAGED,
        _ => WITHOUT_REBOOT,
    };
    if req.dry_run {
        let diff = mcfg::dry_run_diff(current.as_ref(), &new);
        return Ok(ApplyConfiguration {
            metadata: None,
            warnings: vec![],
            mode: resolved as i32,
            mode_details: format!(
                "Dry run summary:\n{base} (skipped in dry-run).\nConfig diff:\n\n{diff}"
            ),
        });
    }

    if cancels_try && v14 {
        cancel_try_rollback(&mut st, idx);
    }

    let mut details = format!("{base}{reboot_suffix}");
    match resolved {
        Mode::Reboot => {
            st.nodes[idx].persisted = Some(new);
            st.nodes[idx].reboot_pending = true;
            drop(st);
            shared.reboot(idx, new_uuid(), "reboot");
        }
        Mode::Staged => {
            st.nodes[idx].persisted = Some(new);
        }
        Mode::Try => {
            let timeout = req
                .try_mode_timeout
                .and_then(|d| Duration::try_from(d).ok())
                .filter(|d| !d.is_zero())
                .unwrap_or(Duration::from_secs(60));
            details.push_str(&format!(
                "\nThe config is applied in 'try' mode and will be automatically reverted back in {}",
                go_duration(timeout)
            ));
            activate(&mut st, idx, new, false);
            st.nodes[idx].try_rollback_at = Some(std::time::SystemTime::now() + timeout);
            let token = st.nodes[idx].try_token;
            schedule_try_rollback(shared, idx, token, timeout);
            if maintenance {
                // The active config ends maintenance as any other would; nothing is persisted,
                // so a node booted from media installs, reboots and is back in maintenance.
                drop(st);
                crate::install::leave_maintenance(shared, idx);
            }
        }
        _ => {
            activate(&mut st, idx, new, true);
            if maintenance {
                // Leaving maintenance: install and reboot, or boot on when already installed.
                drop(st);
                crate::install::leave_maintenance(shared, idx);
            }
        }
    }
    Ok(ApplyConfiguration {
        metadata: None,
        warnings,
        mode: resolved as i32,
        mode_details: details,
    })
}

#[cfg(test)]
mod tests {
    use super::go_duration;
    use std::time::Duration;

    #[test]
    fn durations_like_go() {
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    }
}
