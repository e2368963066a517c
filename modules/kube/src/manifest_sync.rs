//! The bootstrap manifest sync of `talosctl upgrade-k8s`: the objects Talos renders are
//! server-side applied with field manager `talos` and forced ownership, in stages, recorded in the
//! inventory ConfigMap, and what the inventory lists but Talos no longer renders is pruned.
//! Upstream: `pkg/cluster/kubernetes/talos_managed.go` `syncManifestsSSA` (Talos v1.13.9),
//! go-kubernetes v0.2.38 `kubernetes/ssa/apply.go` and `inventory_policy.go`, fluxcd/pkg `ssa`
//! `manager_apply.go` and `sort.go` (docs/research/bootstrap-manifest-sync.md has the facts).
//!
//! Every object is first applied as a dry run: the API server's own answer (with its defaults)
//! compared with the live object says whether anything would change, so an object that matches
//! is never written and a plan (check mode) is the same comparison without the writes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::core::Request;
use kube::core::params::{DeleteParams, GetParams, Patch, PatchParams};
use serde_json::Value;

use crate::access::Kube;
use crate::discovery::{ApiResource, Discovery};
use crate::error::{KubeError, KubeErrorKind, Result};
use crate::inventory::{INVENTORY_NAME, Inventory, OWNING_INVENTORY, ObjectRef};
use crate::objects::{built, get_path};
use crate::reconcile::{Reconciled, reconciled};
use crate::transport::RequestError;

/// Talos's field manager (`constants.KubernetesFieldManagerName`).
pub const FIELD_MANAGER: &str = "talos";
const POLL: Duration = Duration::from_secs(1);

/// Whether the sync writes, or only says what it would write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Apply,
    Plan,
}

/// What happens to objects the inventory lists that Talos no longer renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pruning {
    /// Delete them (talosctl's default).
    Prune,
    /// Leave them (`--manifests-no-prune`).
    Keep,
}

/// Which live objects the sync may change or delete, by the inventory annotation they carry
/// (go-kubernetes `ssa.InventoryPolicy`; talosctl's default is `AdoptIfNoInventory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InventoryPolicy {
    /// Only objects this inventory owns.
    MustMatch,
    /// Objects this inventory owns, and objects no inventory owns.
    AdoptIfNoInventory,
    /// Any object, even one another inventory owns.
    AdoptAll,
}

impl InventoryPolicy {
    fn allows(self, live: &Value) -> bool {
        let owner = live
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(OWNING_INVENTORY))
            .and_then(Value::as_str);
        matches!(
            (self, owner),
            (_, Some(INVENTORY_NAME))
                | (InventoryPolicy::AdoptAll, _)
                | (InventoryPolicy::AdoptIfNoInventory, None)
        )
    }
}

#[derive(Clone, Copy, Debug)]
pub struct SyncOptions {
    pub mode: SyncMode,
    pub pruning: Pruning,
    pub policy: InventoryPolicy,
    /// How long each stage's definitions (CRDs, namespaces, classes) may take to be ready before
    /// the objects that need them are applied.
    pub stage_timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Created,
    Configured,
    Unchanged,
    Pruned,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Pruned => "pruned",
        }
    }

    pub fn changes(self) -> bool {
        self != Action::Unchanged
    }
}

/// One object and what the sync did (or would do) to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub object: ObjectRef,
    pub action: Action,
    /// Its collection path, for the wait; empty when it could not be resolved yet (a custom
    /// resource whose definition the same sync creates, in a plan).
    pub(crate) collection: String,
}

#[derive(Clone, Debug, Default)]
pub struct SyncReport {
    pub changes: Vec<Change>,
    /// Objects the inventory listed that the sync left alone, with why (another inventory owns
    /// them).
    pub not_pruned: Vec<(ObjectRef, String)>,
}

/// An object to apply, with what the order and the inventory need to know about it.
struct Desired {
    body: Value,
    api_version: String,
    kind: String,
    group: String,
    name: String,
    /// As written; the default namespace applies to namespaced kinds without one.
    namespace: String,
}

impl Desired {
    /// An API server's refusal of a Secret may quote the data it refused (a validation error's
    /// "Invalid value"), and the bootstrap token Secret is one of these objects: only the code
    /// and reason are kept.
    fn redact(&self, e: RequestError) -> RequestError {
        match e {
            RequestError::Api(mut status) if self.kind == "Secret" => {
                status.message =
                    "the API server's message is not shown: it may quote the Secret's data".into();
                RequestError::Api(status)
            }
            other => other,
        }
    }

    fn subject(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The kinds fluxcd's `ReconcileOrder` puts first, in order; unlisted kinds come after them, and
/// webhook configurations last.
const FIRST: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterClass",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "VolumeSnapshotClass",
    "IngressClass",
    "GatewayClass",
    "ClusterRoleBinding",
    "ResourceQuota",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];
const LAST: &[&str] = &[
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

fn kind_rank(kind: &str) -> usize {
    if let Some(i) = FIRST.iter().position(|k| *k == kind) {
        return i;
    }
    match LAST.iter().position(|k| *k == kind) {
        Some(i) => FIRST.len() + 1 + i,
        None => FIRST.len(),
    }
}

/// Stage 1: what other objects need to exist (definitions, namespaces, cluster roles); stage 2:
/// classes; stage 3: everything else (fluxcd `ApplyAllStaged`).
fn stage(kind: &str) -> u8 {
    match kind {
        "CustomResourceDefinition" | "Namespace" | "ClusterRole" => 1,
        k if k.ends_with("Class") => 2,
        _ => 3,
    }
}

fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or("")
}

/// Checks each object, stamps it with the inventory annotation and puts the set in apply order.
fn prepare(objects: Vec<Value>) -> Result<Vec<Desired>> {
    let invalid = |why: String| KubeError::new(KubeErrorKind::Other, why);
    let mut desired = Vec::with_capacity(objects.len());
    for (i, mut body) in objects.into_iter().enumerate() {
        let text = |p: &str| body.pointer(p).and_then(Value::as_str).map(String::from);
        let (Some(api_version), Some(kind), Some(name)) =
            (text("/apiVersion"), text("/kind"), text("/metadata/name"))
        else {
            return Err(invalid(format!(
                "bootstrap manifest object {} has no apiVersion, kind or metadata.name; fix the inline manifest Talos renders it from",
                i + 1
            )));
        };
        let namespace = text("/metadata/namespace").unwrap_or_default();
        let annotations = &mut body["metadata"]["annotations"];
        if annotations.is_null() {
            *annotations = Value::Object(Default::default());
        }
        match annotations.get(OWNING_INVENTORY).and_then(Value::as_str) {
            Some(owner) if owner != INVENTORY_NAME => {
                return Err(invalid(format!(
                    "{kind}/{name}: its annotation {OWNING_INVENTORY} names the inventory {owner:?}, not {INVENTORY_NAME:?}; remove the annotation from the manifest"
                )));
            }
            _ => {
                annotations[OWNING_INVENTORY] = Value::String(INVENTORY_NAME.into());
            }
        }
        desired.push(Desired {
            group: group_of(&api_version).to_string(),
            api_version,
            kind,
            name,
            namespace,
            body,
        });
    }
    desired.sort_by(|a, b| {
        (stage(&a.kind), kind_rank(&a.kind), &a.group, &a.kind)
            .cmp(&(stage(&b.kind), kind_rank(&b.kind), &b.group, &b.kind))
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    Ok(desired)
}

/// Whether the dry-run result differs from the live object in anything the sync manages: labels,
/// annotations, or the body outside `metadata` and `status`.
fn drifted(live: &Value, dry: &Value) -> bool {
    let meta = |v: &Value, f: &str| v.pointer(&format!("/metadata/{f}")).cloned();
    if meta(live, "labels") != meta(dry, "labels")
        || meta(live, "annotations") != meta(dry, "annotations")
    {
        return true;
    }
    let body = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    body(live) != body(dry)
}

/// The plan for one object: what the sync does to it and where it lives.
struct Planned {
    action: Action,
    object: ObjectRef,
    collection: String,
}

impl Kube {
    /// Syncs the bootstrap manifests `objects` (in Talos's order) to the cluster, or in
    /// [`SyncMode::Plan`] says what that would do. A failure names the object; objects applied
    /// before it stay applied and are recorded in the inventory.
    pub async fn sync_manifests(
        &self,
        objects: Vec<Value>,
        opts: &SyncOptions,
    ) -> Result<SyncReport> {
        let desired = prepare(objects)?;
        let mut discovery = Discovery::default();
        let mut inventory = self.read_inventory().await?;
        let mut planned = Vec::with_capacity(desired.len());
        for d in &desired {
            planned.push(self.plan(&mut discovery, d, &desired, opts.policy).await?);
        }
        let mut report = SyncReport::default();
        let mut prunes = Vec::new();
        // Listed but no longer in the cluster: dropped from the inventory, as upstream does.
        let mut gone = Vec::new();
        if opts.pruning == Pruning::Prune {
            let keep: BTreeSet<&ObjectRef> = planned.iter().map(|p| &p.object).collect();
            for stale in inventory.objects.iter().filter(|o| !keep.contains(o)) {
                match self
                    .prune_candidate(&mut discovery, stale, opts.policy)
                    .await?
                {
                    PruneCandidate::Delete(collection) => prunes.push((stale.clone(), collection)),
                    PruneCandidate::Gone => gone.push(stale.clone()),
                    PruneCandidate::NotOurs(why) => report.not_pruned.push((stale.clone(), why)),
                }
            }
        }
        if opts.mode == SyncMode::Plan {
            report.changes = planned
                .into_iter()
                .map(|p| Change {
                    object: p.object,
                    action: p.action,
                    collection: p.collection,
                })
                .chain(prunes.into_iter().map(|(object, collection)| Change {
                    object,
                    action: Action::Pruned,
                    collection,
                }))
                .collect();
            return Ok(report);
        }
        let before = inventory.objects.clone();
        let applied = self
            .apply_staged(&mut discovery, &desired, planned, opts, &mut inventory)
            .await;
        for object in &gone {
            inventory.objects.remove(object);
        }
        // Whatever was applied is recorded, even when a later object failed (as upstream does).
        if inventory.objects != before || !inventory.exists {
            self.write_inventory(&inventory).await?;
            inventory.exists = true;
        }
        report.changes = applied?;
        let pruned_any = !prunes.is_empty();
        for (object, collection) in prunes {
            self.delete(&collection, &object).await?;
            inventory.objects.remove(&object);
            report.changes.push(Change {
                object,
                action: Action::Pruned,
                collection,
            });
        }
        if pruned_any {
            self.write_inventory(&inventory).await?;
        }
        Ok(report)
    }

    async fn plan(
        &self,
        discovery: &mut Discovery,
        d: &Desired,
        all: &[Desired],
        policy: InventoryPolicy,
    ) -> Result<Planned> {
        let resource = match discovery.resolve(self, &d.api_version, &d.kind).await {
            Ok(r) => r,
            Err(e) if e.kind == KubeErrorKind::NotFound && defined_by_set(all, d) => {
                // Its CustomResourceDefinition comes with the same sync, in stage 1.
                return Ok(Planned {
                    action: Action::Created,
                    object: object_ref(d, None),
                    collection: String::new(),
                });
            }
            Err(e) => return Err(e),
        };
        let object = object_ref(d, Some(&resource));
        let collection = resource.collection(&object.namespace);
        let live = self.get_object(&collection, &object).await?;
        let created = |collection| Planned {
            action: Action::Created,
            object: object.clone(),
            collection,
        };
        let Some(live) = live else {
            return Ok(created(collection));
        };
        let dry = match self.apply(&collection, d, SyncMode::Plan).await {
            Ok(v) => v,
            Err(e) => {
                return Err(self.error(&format!("dry-run apply {}", d.subject()), d.redact(e)));
            }
        };
        let has_version = dry
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty());
        if !has_version {
            return Ok(created(collection));
        }
        if !drifted(&live, &dry) {
            return Ok(Planned {
                action: Action::Unchanged,
                object,
                collection,
            });
        }
        if !policy.allows(&live) {
            return Err(KubeError::new(
                KubeErrorKind::Conflict,
                format!(
                    "{}: the live object belongs to another inventory (annotation {OWNING_INVENTORY} is {:?}); \
                     nothing was changed; set manifests_inventory_policy: adopt_all to take it over",
                    d.subject(),
                    live.pointer("/metadata/annotations")
                        .and_then(|a| a.get(OWNING_INVENTORY))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ),
            ));
        }
        Ok(Planned {
            action: Action::Configured,
            object,
            collection,
        })
    }

    async fn apply_staged(
        &self,
        discovery: &mut Discovery,
        desired: &[Desired],
        planned: Vec<Planned>,
        opts: &SyncOptions,
        inventory: &mut Inventory,
    ) -> Result<Vec<Change>> {
        let mut changes = Vec::with_capacity(planned.len());
        for stage_no in 1..=3 {
            let mut written = Vec::new();
            for (d, p) in desired.iter().zip(&planned) {
                if stage(&d.kind) != stage_no {
                    continue;
                }
                let mut change = Change {
                    object: p.object.clone(),
                    action: p.action,
                    collection: p.collection.clone(),
                };
                if p.action.changes() {
                    if change.collection.is_empty() {
                        let resource = discovery.resolve(self, &d.api_version, &d.kind).await?;
                        change.object = object_ref(d, Some(&resource));
                        change.collection = resource.collection(&change.object.namespace);
                    }
                    self.apply(&change.collection, d, SyncMode::Apply)
                        .await
                        .map_err(|e| self.error(&format!("apply {}", d.subject()), d.redact(e)))?;
                    if d.kind == "CustomResourceDefinition" {
                        for version in defined_versions(&d.body) {
                            discovery.forget(&version);
                        }
                    }
                    written.push(change.clone());
                }
                inventory.objects.insert(change.object.clone());
                changes.push(change);
            }
            if stage_no < 3 && !written.is_empty() {
                self.wait_reconciled(&written, opts.stage_timeout).await?;
            }
        }
        Ok(changes)
    }

    async fn get_object(&self, collection: &str, object: &ObjectRef) -> Result<Option<Value>> {
        let req = built(Request::new(collection).get(&object.name, &GetParams::default()))
            .map_err(|e| self.error(&format!("read {object}"), e))?;
        match self.transport.send::<Value>(req).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(self.error(&format!("read {object}"), e)),
        }
    }

    /// A server-side apply of `d` with Talos's field manager, forcing ownership of every field
    /// it sets, as upstream does.
    async fn apply(
        &self,
        collection: &str,
        d: &Desired,
        mode: SyncMode,
    ) -> std::result::Result<Value, RequestError> {
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        if mode == SyncMode::Plan {
            params = params.dry_run();
        }
        let req = built(Request::new(collection).patch(&d.name, &params, &Patch::Apply(&d.body)))?;
        self.transport.send::<Value>(req).await
    }

    async fn delete(&self, collection: &str, object: &ObjectRef) -> Result<()> {
        let req = built(Request::new(collection).delete(&object.name, &DeleteParams::background()))
            .map_err(|e| self.error(&format!("prune {object}"), e))?;
        match self.transport.send::<Value>(req).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(404) => Ok(()),
            Err(e) => Err(self.error(&format!("prune {object}"), e)),
        }
    }

    async fn prune_candidate(
        &self,
        discovery: &mut Discovery,
        stale: &ObjectRef,
        policy: InventoryPolicy,
    ) -> Result<PruneCandidate> {
        let Some(api_version) = self.preferred_version(&stale.group).await? else {
            return Ok(PruneCandidate::Gone);
        };
        let resource = match discovery.resolve(self, &api_version, &stale.kind).await {
            Ok(r) => r,
            Err(e) if e.kind == KubeErrorKind::NotFound => return Ok(PruneCandidate::Gone),
            Err(e) => return Err(e),
        };
        let collection = resource.collection(&stale.namespace);
        match self.get_object(&collection, stale).await? {
            None => Ok(PruneCandidate::Gone),
            Some(live) if policy.allows(&live) => Ok(PruneCandidate::Delete(collection)),
            Some(_) => Ok(PruneCandidate::NotOurs(format!(
                "another inventory owns it (annotation {OWNING_INVENTORY})"
            ))),
        }
    }

    /// The version the API server prefers for `group` (`v1` for the core group); None when the
    /// group is not served at all any more.
    async fn preferred_version(&self, group: &str) -> Result<Option<String>> {
        if group.is_empty() {
            return Ok(Some("v1".into()));
        }
        let what = "list the API groups";
        let req = get_path("/apis").map_err(|e| self.error(what, e))?;
        let groups: Value = self
            .transport
            .send(req)
            .await
            .map_err(|e| self.error(what, e))?;
        Ok(groups["groups"].as_array().and_then(|gs| {
            gs.iter()
                .find(|g| g["name"] == group)
                .and_then(|g| g.pointer("/preferredVersion/groupVersion"))
                .and_then(Value::as_str)
                .map(String::from)
        }))
    }

    /// Waits until every created or configured object is reconciled (kstatus `Current`); stops
    /// early when one has failed. The error lists what was not ready and why.
    pub async fn wait_reconciled(&self, changes: &[Change], timeout: Duration) -> Result<()> {
        let pending: Vec<&Change> = changes
            .iter()
            .filter(|c| matches!(c.action, Action::Created | Action::Configured))
            .collect();
        let deadline = Instant::now() + timeout;
        loop {
            let mut waiting = Vec::new();
            for c in &pending {
                let state = match self.get_object(&c.collection, &c.object).await? {
                    Some(live) => reconciled(&live),
                    None => Reconciled::InProgress("not found".into()),
                };
                match state {
                    Reconciled::Current => {}
                    Reconciled::Failed(why) => {
                        return Err(KubeError::new(
                            KubeErrorKind::NotReconciled,
                            format!("{}: failed: {why}", c.object),
                        ));
                    }
                    Reconciled::InProgress(why) => waiting.push(format!("{} ({why})", c.object)),
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(KubeError::new(
                    KubeErrorKind::NotReconciled,
                    format!(
                        "not reconciled within {}s: {}",
                        timeout.as_secs(),
                        waiting.join(", ")
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

enum PruneCandidate {
    Delete(String),
    Gone,
    NotOurs(String),
}

fn object_ref(d: &Desired, resource: Option<&ApiResource>) -> ObjectRef {
    let namespace = match resource {
        Some(r) if !r.namespaced => String::new(),
        Some(_) if d.namespace.is_empty() => "default".into(),
        _ => d.namespace.clone(),
    };
    ObjectRef {
        group: d.group.clone(),
        kind: d.kind.clone(),
        namespace,
        name: d.name.clone(),
    }
}

/// The group versions a CustomResourceDefinition serves (`example.com/v1`).
fn defined_versions(crd: &Value) -> Vec<String> {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v["name"].as_str())
                .map(|v| format!("{group}/{v}"))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a CustomResourceDefinition in the same set defines `d`'s kind.
fn defined_by_set(all: &[Desired], d: &Desired) -> bool {
    all.iter().any(|c| {
        c.kind == "CustomResourceDefinition"
            && c.body.pointer("/spec/names/kind").and_then(Value::as_str) == Some(&d.kind)
            && defined_versions(&c.body).contains(&d.api_version)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace}})
    }

    #[test]
    fn objects_are_staged_then_ordered_by_kind_as_fluxcd_orders_them() {
        let set = vec![
            obj("apps/v1", "DaemonSet", "kube-system", "kube-proxy"),
            obj("apps/v1", "Deployment", "kube-system", "coredns"),
            obj("v1", "ServiceAccount", "kube-system", "kube-proxy"),
            obj(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "",
                "kube-proxy",
            ),
            obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "flannel"),
            obj("node.k8s.io/v1", "RuntimeClass", "", "gvisor"),
            obj(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                "hook",
            ),
            obj("v1", "Namespace", "", "extra"),
        ];
        let order: Vec<String> = prepare(set).unwrap().iter().map(|d| d.subject()).collect();
        assert_eq!(
            order,
            [
                "Namespace/extra",
                "ClusterRole/flannel",
                "RuntimeClass/gvisor",
                "ClusterRoleBinding/kube-proxy",
                "ServiceAccount/kube-system/kube-proxy",
                "Deployment/kube-system/coredns",
                "DaemonSet/kube-system/kube-proxy",
                "ValidatingWebhookConfiguration/hook",
            ]
        );
    }

    #[test]
    fn every_object_is_stamped_with_the_inventory_and_a_foreign_one_is_refused() {
        let d = prepare(vec![obj("v1", "ConfigMap", "kube-system", "a")]).unwrap();
        assert_eq!(
            d[0].body["metadata"]["annotations"][OWNING_INVENTORY],
            INVENTORY_NAME
        );
        let mut foreign = obj("v1", "ConfigMap", "kube-system", "b");
        foreign["metadata"]["annotations"] = json!({OWNING_INVENTORY: "someone-else"});
        let e = prepare(vec![foreign]).err().unwrap();
        assert!(e.message.contains("someone-else"), "{e}");
        let e = prepare(vec![json!({"kind": "ConfigMap"})]).err().unwrap();
        assert!(e.message.contains("object 1"), "{e}");
    }

    #[test]
    fn drift_ignores_server_metadata_and_status_but_not_labels() {
        let live = json!({"kind": "DaemonSet", "metadata": {"resourceVersion": "7", "labels": {"a": "1"}},
            "spec": {"x": 1}, "status": {"numberReady": 3}});
        let same = json!({"kind": "DaemonSet", "metadata": {"resourceVersion": "7", "labels": {"a": "1"}},
            "spec": {"x": 1}, "status": {"numberReady": 2}});
        assert!(!drifted(&live, &same));
        let mut relabelled = same.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        assert!(drifted(&live, &relabelled));
        let mut respec = same.clone();
        respec["spec"]["x"] = json!(2);
        assert!(drifted(&live, &respec));
    }

    #[test]
    fn a_refused_secret_keeps_its_code_but_not_the_api_server_s_words() {
        let secret = &prepare(vec![obj(
            "v1",
            "Secret",
            "kube-system",
            "bootstrap-token-abc",
        )])
        .unwrap()[0];
        let refusal = || {
            RequestError::Api(Box::new(kube::core::Status {
                code: 422,
                reason: "Invalid".into(),
                message: "data[token-secret]: Invalid value: \"s3cr3t\"".into(),
                ..Default::default()
            }))
        };
        let RequestError::Api(status) = secret.redact(refusal()) else {
            panic!()
        };
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert!(!status.message.contains("s3cr3t"), "{}", status.message);
        let map = &prepare(vec![obj("v1", "ConfigMap", "kube-system", "c")]).unwrap()[0];
        let RequestError::Api(status) = map.redact(refusal()) else {
            panic!()
        };
        assert!(status.message.contains("Invalid value"));
    }

    #[test]
    fn inventory_policies() {
        let ours = json!({"metadata": {"annotations": {OWNING_INVENTORY: INVENTORY_NAME}}});
        let nobody = json!({"metadata": {}});
        let theirs = json!({"metadata": {"annotations": {OWNING_INVENTORY: "other"}}});
        use InventoryPolicy::*;
        assert!(
            MustMatch.allows(&ours) && !MustMatch.allows(&nobody) && !MustMatch.allows(&theirs)
        );
        assert!(AdoptIfNoInventory.allows(&ours) && AdoptIfNoInventory.allows(&nobody));
        assert!(!AdoptIfNoInventory.allows(&theirs));
        assert!(AdoptAll.allows(&theirs));
    }

    #[test]
    fn a_custom_resource_of_a_definition_in_the_same_set() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Widget"}, "versions": [{"name": "v1"}]}});
        let cr = obj("example.com/v1", "Widget", "default", "w");
        let set = prepare(vec![cr, crd]).unwrap();
        assert_eq!(set[0].kind, "CustomResourceDefinition");
        assert!(defined_by_set(&set, &set[1]));
        let other = prepare(vec![obj("example.com/v2", "Widget", "default", "w")]).unwrap();
        assert!(!defined_by_set(&set, &other[0]));
    }
}
