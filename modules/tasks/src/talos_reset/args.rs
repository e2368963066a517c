//! `talos_reset`'s options, checked once before anything connects.

use std::path::PathBuf;

use ferro_ansible_protocol::{ModuleError, Params};

use super::{KubernetesNode, Plan, Wipe};
use crate::shared::connection::{ConnectionArgs, Target, node_target};
use crate::shared::options::wait_seconds;

pub struct Args {
    pub connection: ConnectionArgs,
    pub target: Target,
    pub plan: Plan,
    /// `kubeconfig`: where the Node to delete is reached, else the secrets bundle or the Talos API.
    pub kubeconfig: Option<PathBuf>,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let plan = plan(p)?;
        let connection = ConnectionArgs::from_params(p)?;
        let target = node_target(p, &connection)?;
        Ok(Args {
            connection,
            target,
            plan,
            kubeconfig: p.path("kubeconfig"),
        })
    }
}

/// The reset the options ask for, refused when `confirm` does not match it or when options
/// contradict each other.
fn plan(p: &Params) -> Result<Plan, ModuleError> {
    let wipe = match p.str("wipe") {
        Some("system_disk") => Wipe::SystemDisk,
        Some("user_disks") => Wipe::UserDisks,
        Some("ephemeral") => Wipe::Ephemeral,
        _ => Wipe::Maintenance,
    };
    let confirm = p.str("confirm").unwrap_or_default();
    if confirm != wipe.confirmation() {
        let why = match wipe {
            Wipe::SystemDisk => {
                "wiping the whole system disk erases the bootloader too: the node then boots only \
                 from installation media"
            }
            _ => "resetting wipes the node and removes it from the cluster",
        };
        return Err(ModuleError::new(format!(
            "confirm must be {:?} for wipe={}: {why}",
            wipe.confirmation(),
            wipe.name()
        )));
    }
    let user_disks: Vec<String> = p
        .str_list("user_disks")
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect();
    match wipe {
        Wipe::UserDisks if user_disks.is_empty() => {
            return Err(ModuleError::new(
                "user_disks must name the disks to wipe (e.g. [/dev/sdb]) when wipe=user_disks; \
                 Talos wipes nothing without them",
            ));
        }
        Wipe::Maintenance | Wipe::SystemDisk | Wipe::Ephemeral if !user_disks.is_empty() => {
            return Err(ModuleError::new(format!(
                "user_disks is only used with wipe=user_disks, not wipe={}: remove user_disks, or \
                 set wipe: user_disks to wipe only those disks",
                wipe.name()
            )));
        }
        _ => {}
    }
    if let Some(bad) = user_disks.iter().find(|d| !d.starts_with("/dev/")) {
        return Err(ModuleError::new(format!(
            "user_disks: {bad:?} is not a device path; write it like /dev/sdb or /dev/nvme1n1"
        )));
    }
    let timeout = wait_seconds(p, "timeout", 600)?;
    let kubernetes_node = if p.bool("delete_kubernetes_node") {
        KubernetesNode::Delete
    } else {
        KubernetesNode::Keep
    };
    if kubernetes_node == KubernetesNode::Delete && !p.bool("wait") {
        return Err(ModuleError::new(
            "delete_kubernetes_node needs wait: true: the Node can only go once the machine has \
             left (a running kubelet registers it again); remove wait: false",
        ));
    }
    if kubernetes_node == KubernetesNode::Delete
        && matches!(wipe, Wipe::UserDisks | Wipe::Ephemeral)
    {
        return Err(ModuleError::new(
            "delete_kubernetes_node is for a node that leaves the cluster, and wipe=user_disks or \
             wipe=ephemeral keeps its config (its kubelet registers the Node again); remove \
             delete_kubernetes_node",
        ));
    }
    Ok(Plan {
        wipe,
        user_disks,
        graceful: p.bool("graceful"),
        reboot: p.bool("reboot"),
        wait: p.bool("wait"),
        timeout,
        kubernetes_node,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::shared::options::{merged, params};

    fn args(extra: serde_json::Value) -> Result<Args, ModuleError> {
        let given = merged(json!({"node": " 10.5.0.2 ", "confirm": "reset"}), extra);
        Args::from_params(&params(super::super::spec(), given))
    }

    fn refusal(extra: serde_json::Value) -> String {
        args(extra).err().expect("the options are refused").msg
    }

    #[test]
    fn defaults_return_the_node_to_maintenance_gracefully_and_wait() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.target.node, "10.5.0.2");
        let plan = &a.plan;
        assert_eq!(plan.wipe, Wipe::Maintenance);
        assert!(plan.user_disks.is_empty());
        assert!(plan.graceful && plan.reboot && plan.wait);
        assert_eq!(plan.timeout, Duration::from_secs(600));
        assert_eq!(plan.kubernetes_node, KubernetesNode::Keep);
        assert_eq!(a.kubeconfig, None);
        assert_eq!(plan.wiped(), ["STATE", "EPHEMERAL"]);
    }

    #[test]
    fn each_wipe_reads_its_options() {
        let a = args(json!({"wipe": "user_disks", "user_disks": ["/dev/sdb"], "graceful": false}))
            .unwrap();
        assert_eq!(a.plan.wipe, Wipe::UserDisks);
        assert_eq!(a.plan.user_disks, ["/dev/sdb"]);
        assert!(!a.plan.graceful);
        let a =
            args(json!({"wipe": "system_disk", "confirm": "wipe-system-disk", "reboot": false}))
                .unwrap();
        assert_eq!(a.plan.wipe, Wipe::SystemDisk);
        assert!(!a.plan.reboot);
        let a = args(json!({
            "delete_kubernetes_node": true,
            "kubeconfig": "/tmp/admin.kubeconfig",
            "timeout": 120,
        }))
        .unwrap();
        assert_eq!(a.plan.kubernetes_node, KubernetesNode::Delete);
        assert_eq!(a.kubeconfig, Some(PathBuf::from("/tmp/admin.kubeconfig")));
        assert_eq!(a.plan.timeout, Duration::from_secs(120));
        assert_eq!(
            args(json!({"wipe": "ephemeral"})).unwrap().plan.wipe,
            Wipe::Ephemeral
        );
    }

    #[test]
    fn confirm_must_match_the_wipe() {
        let e = refusal(json!({"confirm": "yes"}));
        assert!(
            e.starts_with("confirm must be \"reset\" for wipe=maintenance"),
            "{e}"
        );
        let e = refusal(json!({"wipe": "system_disk"}));
        assert!(
            e.starts_with("confirm must be \"wipe-system-disk\" for wipe=system_disk"),
            "{e}"
        );
    }

    #[test]
    fn user_disks_go_with_wipe_user_disks_only_and_are_device_paths() {
        let e = refusal(json!({"wipe": "user_disks"}));
        assert!(e.starts_with("user_disks must name the disks"), "{e}");
        let e = refusal(json!({"user_disks": ["/dev/sdb"]}));
        assert!(
            e.starts_with("user_disks is only used with wipe=user_disks, not wipe=maintenance"),
            "{e}"
        );
        let e = refusal(json!({"wipe": "user_disks", "user_disks": ["/dev/sdb", "sdc"]}));
        assert!(
            e.starts_with("user_disks: \"sdc\" is not a device path"),
            "{e}"
        );
    }

    #[test]
    fn delete_kubernetes_node_needs_the_wait_and_a_node_that_leaves() {
        let e = refusal(json!({"delete_kubernetes_node": true, "wait": false}));
        assert!(
            e.starts_with("delete_kubernetes_node needs wait: true"),
            "{e}"
        );
        for wipe in ["ephemeral", "user_disks"] {
            let e = refusal(json!({
                "delete_kubernetes_node": true,
                "wipe": wipe,
                "user_disks": if wipe == "user_disks" { json!(["/dev/sdb"]) } else { json!([]) },
            }));
            assert!(
                e.starts_with("delete_kubernetes_node is for a node that leaves"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_blank_node_or_a_timeout_out_of_range_names_the_option() {
        let e = refusal(json!({"node": ""}));
        assert!(e.starts_with("node must be the address"), "{e}");
        let e = refusal(json!({"timeout": 0}));
        assert!(e.starts_with("timeout must be between 1 and"), "{e}");
        let e = refusal(json!({"connect_timeout": 0}));
        assert!(e.starts_with("connect_timeout"), "{e}");
    }
}
