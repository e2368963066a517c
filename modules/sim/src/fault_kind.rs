//! The faults a node can be given by name, one at a time: `talos-sim fault --kind NAME` and the
//! control protocol's `{"op":"fault","kind":NAME}`. One list, so the command line refuses what the
//! simulator would refuse, and both name the same choices.

use clap::ValueEnum;

use crate::state::Faults;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum FaultKind {
    NeverReturn,
    Unreachable,
    Firewalled,
    EtcdDown,
    UpgradeMutexHeld,
    InstallerFails,
    ApiserverNeverReady,
    KubeletVersionStuck,
    DaemonsetRolloutStuck,
    OrphanedDaemonPods,
    /// Every answer of the node is delayed by `delay_ms`.
    Slow,
}

impl FaultKind {
    /// The kind a name stands for.
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::from_str(name, false).ok()
    }

    /// The name the command line and the control protocol use.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    /// Every name, for messages: "never_return, unreachable, ... or slow".
    pub fn names() -> String {
        let names: Vec<String> = FaultKind::value_variants()
            .iter()
            .map(|k| k.name())
            .collect();
        let (last, rest) = names.split_last().expect("at least one kind");
        format!("{} or {last}", rest.join(", "))
    }

    /// Switches this fault on; `slow` needs the delay.
    pub(crate) fn set(self, faults: &mut Faults, delay_ms: Option<u64>) -> Result<(), String> {
        match self {
            FaultKind::NeverReturn => faults.never_return = true,
            FaultKind::Unreachable => faults.unreachable = true,
            FaultKind::Firewalled => faults.firewalled = true,
            FaultKind::EtcdDown => faults.etcd_down = true,
            FaultKind::UpgradeMutexHeld => faults.upgrade_mutex_held = true,
            FaultKind::InstallerFails => faults.installer_fails = true,
            FaultKind::ApiserverNeverReady => faults.apiserver_never_ready = true,
            FaultKind::KubeletVersionStuck => faults.kubelet_version_stuck = true,
            FaultKind::DaemonsetRolloutStuck => faults.daemonset_rollout_stuck = true,
            FaultKind::OrphanedDaemonPods => faults.orphaned_daemon_pods = true,
            FaultKind::Slow => {
                faults.slow_ms =
                    Some(delay_ms.ok_or("kind \"slow\" needs \"delay_ms\": milliseconds")?)
            }
        }
        Ok(())
    }
}

impl serde::Serialize for FaultKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for FaultKind {
    /// By name, refusing an unknown one with the list of kinds.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        FaultKind::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown fault kind {name:?}; expected {} (next_address, reject_config and upload_bytes_per_sec are set by field)",
                FaultKind::names()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for kind in FaultKind::value_variants() {
            assert_eq!(FaultKind::parse(&kind.name()), Some(*kind));
        }
        assert_eq!(FaultKind::parse("etcd_down"), Some(FaultKind::EtcdDown));
        assert_eq!(FaultKind::parse("etcd-down"), None);
        assert!(FaultKind::names().starts_with("never_return, unreachable, "));
        assert!(FaultKind::names().ends_with(" or slow"));
    }
}
