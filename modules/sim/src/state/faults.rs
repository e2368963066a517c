//! The faults tests inject into a node, and how status output names them.

use std::net::Ipv4Addr;

/// Faults injected from tests or the control endpoint.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// The next reboot never finishes: the node stays down.
    pub never_return: bool,
    /// After the next reboot the node listens on this address instead.
    pub next_address: Option<Ipv4Addr>,
    /// The node's listener is closed while the node itself keeps running.
    pub unreachable: bool,
    /// The controller's connections are refused, but the other nodes still reach this one: a
    /// firewall that lets only the cluster in, so the controller must route through a control plane.
    pub firewalled: bool,
    /// The node's etcd member is down (not healthy, status fails).
    pub etcd_down: bool,
    /// ApplyConfiguration on this node fails validation with this text.
    pub reject_config: Option<String>,
    /// Every RPC answer of this node (as endpoint or as routing target) is delayed this long.
    pub slow_ms: Option<u64>,
    /// The link to this node carries an upload (EtcdRecover's snapshot) at this many bytes per
    /// second.
    pub upload_bytes_per_sec: Option<u64>,
    /// etcd's upgrade mutex is held by another session (another control plane's legacy
    /// upgrade is in its pre-checks): this node's legacy Upgrade cannot take it.
    pub upgrade_mutex_held: bool,
    /// The installer exits 1 after its checks (a disk it cannot write, say): a lifecycle
    /// upgrade reports the exit code, a legacy upgrade's sequence fails.
    pub installer_fails: bool,
    /// The kube-apiserver static pod never becomes Ready once its image has changed (a new
    /// version that crash-loops on this node's flags, say).
    pub apiserver_never_ready: bool,
    /// The kubelet restarts with a new image but the Node keeps reporting the old version (the
    /// new binary failed and the old one came back).
    pub kubelet_version_stuck: bool,
    /// DaemonSet pods this node runs never become Ready once their DaemonSet's generation
    /// changed (a new image that crash-loops here), so the rollout never finishes.
    pub daemonset_rollout_stuck: bool,
    /// This node's pods of a DaemonSet stay when the DaemonSet is deleted, their controller
    /// reference naming a DaemonSet the API server no longer has: the garbage collector has not
    /// removed them (kube-controller-manager down or behind).
    pub orphaned_daemon_pods: bool,
}

impl Faults {
    /// The faults that are set, in words (`-` for none), for status output.
    pub fn describe(&self) -> String {
        let mut out = Vec::new();
        if self.never_return {
            out.push("never_return".to_string());
        }
        if let Some(a) = self.next_address {
            out.push(format!("next_address={a}"));
        }
        if self.unreachable {
            out.push("unreachable".into());
        }
        if self.firewalled {
            out.push("firewalled".into());
        }
        if self.etcd_down {
            out.push("etcd_down".into());
        }
        if self.reject_config.is_some() {
            out.push("reject_config".into());
        }
        if let Some(ms) = self.slow_ms {
            out.push(format!("slow={ms}ms"));
        }
        if let Some(rate) = self.upload_bytes_per_sec {
            out.push(format!("upload={rate}B/s"));
        }
        if self.upgrade_mutex_held {
            out.push("upgrade_mutex_held".into());
        }
        if self.installer_fails {
            out.push("installer_fails".into());
        }
        if self.apiserver_never_ready {
            out.push("apiserver_never_ready".into());
        }
        if self.kubelet_version_stuck {
            out.push("kubelet_version_stuck".into());
        }
        if self.daemonset_rollout_stuck {
            out.push("daemonset_rollout_stuck".into());
        }
        if self.orphaned_daemon_pods {
            out.push("orphaned_daemon_pods".into());
        }
        if out.is_empty() {
            "-".into()
        } else {
            out.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_faults_read_as_a_dash() {
        assert_eq!(Faults::default().describe(), "-");
    }

    #[test]
    fn every_fault_is_named_in_a_fixed_order() {
        let f = Faults {
            never_return: true,
            next_address: Some(Ipv4Addr::new(127, 0, 10, 9)),
            unreachable: true,
            firewalled: true,
            etcd_down: true,
            reject_config: Some("the text is not shown".into()),
            slow_ms: Some(250),
            upload_bytes_per_sec: Some(4096),
            upgrade_mutex_held: true,
            installer_fails: true,
            apiserver_never_ready: true,
            kubelet_version_stuck: true,
            daemonset_rollout_stuck: true,
            orphaned_daemon_pods: true,
        };
        assert_eq!(
            f.describe(),
            "never_return,next_address=127.0.10.9,unreachable,firewalled,etcd_down,\
             reject_config,slow=250ms,upload=4096B/s,upgrade_mutex_held,installer_fails,\
             apiserver_never_ready,kubelet_version_stuck,daemonset_rollout_stuck,\
             orphaned_daemon_pods"
        );
        let one = Faults {
            slow_ms: Some(0),
            ..Faults::default()
        };
        assert_eq!(one.describe(), "slow=0ms");
    }

    #[test]
    fn faults_decode_with_defaults_and_refuse_unknown_names() {
        let f: Faults = serde_json::from_str(r#"{"etcd_down":true}"#).unwrap();
        assert_eq!(
            f,
            Faults {
                etcd_down: true,
                ..Faults::default()
            }
        );
        assert_eq!(
            serde_json::from_str::<Faults>("{}").unwrap(),
            Faults::default()
        );
        let e = serde_json::from_str::<Faults>(r#"{"etcd_dwon":true}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let f = Faults {
            next_address: Some(Ipv4Addr::new(127, 0, 10, 3)),
            reject_config: Some("no".into()),
            ..Faults::default()
        };
        let back: Faults = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back, f);
    }
}
