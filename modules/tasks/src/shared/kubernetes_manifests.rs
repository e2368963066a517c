//! The last phase of `talos_kubernetes_upgrade`: the bootstrap manifests one control plane
//! renders (kube-proxy, CoreDNS, the CNI, RBAC, inline manifests) server-side applied to the
//! cluster, recorded in the inventory, pruned and waited on, as `talosctl upgrade-k8s` ends
//! (upstream `pkg/cluster/kubernetes/talos_managed.go` `PerformManifestsSync` at v1.13.9). Talos
//! itself only ever creates missing objects, so without this a new kube-proxy image in the
//! machine config never reaches the DaemonSet.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{ModuleError, Opt, Params, Spec};
use ferro_talos_client::{BootstrapManifest, TalosClient};
use ferro_talos_kube::{
    Action, Change, InventoryPolicy, Kube, Pruning, SyncMode, SyncOptions, SyncReport,
};
use serde_json::{Value, json};

/// talosctl's `--manifests-reconcile-timeout` default.
const DEFAULT_TIMEOUT_SECS: i64 = 300;
const POLL: Duration = Duration::from_secs(1);

pub fn options(spec: Spec) -> Spec {
    spec.option(Opt::bool("sync_manifests").default(true))
        .option(Opt::bool("manifests_prune").default(true))
        .option(
            Opt::str("manifests_inventory_policy")
                .choices(&["adopt_if_no_inventory", "must_match", "adopt_all"])
                .default(json!("adopt_if_no_inventory")),
        )
        .option(Opt::int("manifests_timeout").default(DEFAULT_TIMEOUT_SECS))
}

/// What the task asked of the manifests; None when `sync_manifests: false`.
#[derive(Clone, Copy, Debug)]
pub struct ManifestSettings {
    pub pruning: Pruning,
    pub policy: InventoryPolicy,
    pub timeout: Duration,
}

pub fn settings(p: &Params) -> Result<Option<ManifestSettings>, ModuleError> {
    if !p.bool("sync_manifests") {
        return Ok(None);
    }
    let policy = match p.str("manifests_inventory_policy") {
        Some("must_match") => InventoryPolicy::MustMatch,
        Some("adopt_all") => InventoryPolicy::AdoptAll,
        _ => InventoryPolicy::AdoptIfNoInventory,
    };
    Ok(Some(ManifestSettings {
        pruning: if p.bool("manifests_prune") {
            Pruning::Prune
        } else {
            Pruning::Keep
        },
        policy,
        timeout: crate::shared::options::wait_seconds(
            p,
            "manifests_timeout",
            DEFAULT_TIMEOUT_SECS,
        )?,
    }))
}

/// The kube-proxy image the sync must see: the one the upgrade patched into the configs, which
/// Talos renders into `10-kube-proxy` a moment after the apply.
#[derive(Clone, Debug)]
pub enum ProxyImage {
    /// The configs keep their image: take the manifests as they are.
    AsRendered,
    /// The upgrade patched (or, in a plan, would patch) this image.
    Patched(String),
}

/// Reads the manifests from `source` (the first control plane), then plans or applies them.
pub async fn sync(
    kube: &Kube,
    source: &TalosClient,
    node: &str,
    settings: &ManifestSettings,
    mode: SyncMode,
    proxy: &ProxyImage,
) -> Result<SyncReport, ModuleError> {
    let objects = read(source, node, settings.timeout, mode, proxy).await?;
    let opts = SyncOptions {
        mode,
        pruning: settings.pruning,
        policy: settings.policy,
        stage_timeout: settings.timeout,
    };
    let report = kube
        .sync_manifests(objects, &opts)
        .await
        .map_err(|e| ModuleError::new(format!("bootstrap manifests: {e}")))?;
    if mode == SyncMode::Apply {
        kube.wait_reconciled(&report.changes, settings.timeout)
            .await
            .map_err(|e| {
                ModuleError::new(format!(
                    "bootstrap manifests: applied, but {e}; see `kubectl -n kube-system get pods` for what does not start"
                ))
            })?;
    }
    Ok(report)
}

/// The rendered objects, in Talos's order. After a patch of kube-proxy's image the manifests are
/// read until Talos has re-rendered them with it (talosctl reads them once, racing the render);
/// a plan puts the image it would patch in their place instead.
async fn read(
    source: &TalosClient,
    node: &str,
    timeout: Duration,
    mode: SyncMode,
    proxy: &ProxyImage,
) -> Result<Vec<Value>, ModuleError> {
    let deadline = Instant::now() + timeout;
    loop {
        let manifests = source
            .bootstrap_manifests()
            .await
            .map_err(|e| ModuleError::new(format!("bootstrap manifests: {e}")))?;
        let mut objects: Vec<Value> = manifests
            .into_iter()
            .flat_map(|m: BootstrapManifest| m.objects)
            .collect();
        let ProxyImage::Patched(want) = proxy else {
            return Ok(objects);
        };
        let Some(container) = kube_proxy_container(&mut objects) else {
            // kube-proxy is disabled: nothing of it to sync.
            return Ok(objects);
        };
        if mode == SyncMode::Plan {
            container["image"] = json!(want);
            return Ok(objects);
        }
        let rendered = container["image"].as_str().unwrap_or("").to_string();
        if rendered == *want {
            return Ok(objects);
        }
        if Instant::now() + POLL > deadline {
            return Err(ModuleError::new(format!(
                "bootstrap manifests: {node} still renders kube-proxy {rendered} after its config was patched to {want}; \
                 see `talosctl -n {node} get manifests 10-kube-proxy -o yaml`"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The kube-proxy container of the `kube-system/kube-proxy` DaemonSet, if Talos renders one.
fn kube_proxy_container(objects: &mut [Value]) -> Option<&mut Value> {
    objects
        .iter_mut()
        .find(|o| {
            o["kind"] == "DaemonSet"
                && o["metadata"]["name"] == "kube-proxy"
                && o["metadata"]["namespace"] == "kube-system"
        })?
        .pointer_mut("/spec/template/spec/containers")?
        .as_array_mut()?
        .iter_mut()
        .find(|c| c["name"] == "kube-proxy")
}

/// `[{object, action}]`, in apply order, then what was pruned.
pub fn to_json(changes: &[Change]) -> Value {
    Value::Array(
        changes
            .iter()
            .map(|c| json!({"object": c.object.to_string(), "action": c.action.name()}))
            .collect(),
    )
}

/// `1 configured (DaemonSet/kube-system/kube-proxy), 2 created (...)`, or None when nothing
/// changes.
pub fn summary(changes: &[Change]) -> Option<String> {
    let parts: Vec<String> = [Action::Created, Action::Configured, Action::Pruned]
        .into_iter()
        .filter_map(|action| {
            let objects: Vec<String> = changes
                .iter()
                .filter(|c| c.action == action)
                .map(|c| c.object.to_string())
                .collect();
            (!objects.is_empty()).then(|| {
                format!(
                    "{} {} ({})",
                    objects.len(),
                    action.name(),
                    objects.join(", ")
                )
            })
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kube_proxy_container_is_found_in_its_daemon_set_only() {
        let mut objects = vec![
            json!({"kind": "ServiceAccount", "metadata": {"name": "kube-proxy", "namespace": "kube-system"}}),
            json!({"kind": "DaemonSet", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.35.2"}]}}}}),
        ];
        let c = kube_proxy_container(&mut objects).unwrap();
        assert_eq!(c["image"], "registry.k8s.io/kube-proxy:v1.35.2");
        let mut none = vec![objects.remove(0)];
        assert!(kube_proxy_container(&mut none).is_none());
    }
}
