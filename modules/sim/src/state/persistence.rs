//! Keeping the state in a state directory: the lock guard that saves every change, and putting
//! a stored cluster back into freshly laid-out nodes.

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;
use std::time::Duration;

use super::{EtcdMember, Shared, State};
use crate::store::{Restored, Store};

/// The locked state. Dropping it saves the state to the state directory (if any) when it
/// changed, so no mutation anywhere can forget to persist itself. Only a guard that was used
/// mutably is compared with what is on disk; plain reads cost nothing.
pub struct StateGuard<'a> {
    guard: MutexGuard<'a, State>,
    store: Option<&'a Store>,
    mutated: bool,
}

impl Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.mutated = true;
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if let (Some(store), true) = (self.store, self.mutated) {
            store.save(&self.guard);
        }
    }
}

impl Shared {
    pub fn lock(&self) -> StateGuard<'_> {
        // A panicking handler must not take the whole simulator down with a poisoned lock.
        StateGuard {
            guard: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            store: self.store.as_ref(),
            mutated: false,
        }
    }
}

/// Puts the stored cluster's facts into freshly laid-out nodes (same count, checked by the
/// caller's layout) before anything listens.
pub(super) fn restore_into(st: &mut State, r: &Restored) -> anyhow::Result<()> {
    let c = &r.cluster;
    if c.nodes.len() != st.nodes.len() || r.configs.len() != st.nodes.len() {
        anyhow::bail!(
            "the state has {} nodes, the layout {}",
            c.nodes.len(),
            st.nodes.len()
        );
    }
    if let Some(m) = c
        .etcd_members
        .iter()
        .flatten()
        .find(|m| m.node >= st.nodes.len())
    {
        anyhow::bail!(
            "the state lists an etcd member on node {}, which does not exist",
            m.node
        );
    }
    for ((n, s), (running, next)) in st.nodes.iter_mut().zip(&c.nodes).zip(&r.configs) {
        for v in std::iter::once(&s.version).chain(&s.pending_version) {
            crate::version::parse(v).map_err(|e| anyhow::anyhow!("node {}: {e:#}", s.index))?;
        }
        n.hostname = s.hostname.clone();
        n.address = s.address;
        n.port = s.port;
        n.version = s.version.clone();
        n.pending_version = s.pending_version.clone();
        n.pending_schematic = s.pending_schematic.clone();
        n.schematic = s.schematic.clone();
        n.images = s.images.iter().cloned().collect();
        n.boot_id = s.boot_id.clone();
        n.active = running.clone();
        n.persisted = next.clone();
        n.etcd_data = s.etcd_data;
        n.reboot_pending = s.reboot_pending;
        n.config_version = s.config_version;
        n.config_updated = crate::store::from_unix_ms(s.config_updated_unix_ms);
        n.try_rollback_at = s.try_rollback_unix_ms.map(crate::store::from_unix_ms);
        n.faults = s.faults.clone();
        n.installed = s
            .installed
            .unwrap_or(s.running_config.is_some() || s.next_boot_config.is_some());
        n.boot_media = s.boot_media;
    }
    st.etcd = c
        .etcd_members
        .as_ref()
        .map(|m| m.iter().map(EtcdMember::from_stored).collect());
    st.health_fail = c.health_fail.clone();
    st.reboot_downtime = Duration::from_millis(c.reboot_downtime_ms);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Arc;

    use crate::config::SimConfig;
    use crate::mcfg::{Release, StoredConfig};
    use crate::state::shared::tests::state;
    use crate::store::{STATE_FILE, StoredMember};

    /// A booted cluster of one control plane and one worker kept in `dir`.
    fn stored_cluster(dir: &Path) -> Arc<Shared> {
        let cfg = SimConfig {
            control_planes: 1,
            workers: 1,
            port: 0,
            ..SimConfig::default()
        };
        let store = Store::open(dir, true).unwrap().with_layout(&cfg);
        Shared::new(cfg, Some(store), None).unwrap()
    }

    #[test]
    fn a_guard_saves_on_release_after_a_mutable_use_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let shared = stored_cluster(dir.path());
        let file = dir.path().join(STATE_FILE);
        assert!(file.exists(), "the first boots were saved");
        std::fs::remove_file(&file).unwrap();
        // A change behind the guard's back: only a guard that was used mutably writes it out.
        shared.state.lock().unwrap().health_fail = Some("disk full".into());
        {
            let st = shared.lock();
            assert_eq!(st.health_fail.as_deref(), Some("disk full"));
        }
        assert!(!file.exists(), "a read saves nothing");
        {
            let mut st = shared.lock();
            let _used_mutably: &mut State = &mut st;
            assert!(!file.exists(), "nothing is written while the lock is held");
        }
        let saved = std::fs::read_to_string(&file).expect("saved when the guard went");
        assert!(saved.contains("disk full"), "{saved}");
    }

    #[test]
    fn a_saved_cluster_is_put_back_into_fresh_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let shared = stored_cluster(dir.path());
        {
            let mut st = shared.lock();
            st.reboot_downtime = Duration::from_millis(42);
            st.health_fail = Some("etcd is sad".into());
            st.etcd = Some(vec![EtcdMember::voting(0, 77)]);
            let n = &mut st.nodes[1];
            n.pending_version = Some("v1.14.1".into());
            n.schematic = Some("s1".into());
            n.pending_schematic = Some("s2".into());
            n.images.insert("registry.k8s.io/pause:3.10".into());
            n.faults.slow_ms = Some(5);
            n.etcd_data = true;
            n.reboot_pending = true;
            n.installed = true;
            n.boot_media = false;
            n.config_version = 3;
            n.persisted = Some(
                StoredConfig::parse(
                    b"version: v1alpha1\nmachine:\n  type: worker\n",
                    Release::V1_13,
                )
                .unwrap(),
            );
        }
        let restored = crate::store::load(dir.path())
            .unwrap()
            .expect("a stored cluster");
        let mut fresh = state(1, 1);
        restore_into(&mut fresh, &restored).unwrap();
        let st = shared.lock();
        let ms = |t: std::time::SystemTime| {
            t.duration_since(std::time::SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        for (a, b) in st.nodes.iter().zip(&fresh.nodes) {
            assert_eq!(a.hostname, b.hostname);
            assert_eq!(a.address, b.address);
            assert_eq!(a.port, b.port);
            assert_eq!(a.version, b.version);
            assert_eq!(a.pending_version, b.pending_version);
            assert_eq!(a.schematic, b.schematic);
            assert_eq!(a.pending_schematic, b.pending_schematic);
            assert_eq!(a.images, b.images);
            assert_eq!(a.boot_id, b.boot_id);
            assert_eq!(a.etcd_data, b.etcd_data);
            assert_eq!(a.reboot_pending, b.reboot_pending);
            assert_eq!(a.config_version, b.config_version);
            assert_eq!(ms(a.config_updated), ms(b.config_updated));
            assert_eq!(a.faults, b.faults);
            assert_eq!(a.installed, b.installed);
            assert_eq!(a.boot_media, b.boot_media);
            let digest = |c: &Option<StoredConfig>| c.as_ref().map(|c| c.digest.clone());
            assert_eq!(digest(&a.active), digest(&b.active));
            assert_eq!(digest(&a.persisted), digest(&b.persisted));
        }
        assert!(fresh.nodes[1].persisted.is_some());
        let members: Vec<(usize, u64, bool)> = fresh
            .etcd
            .iter()
            .flatten()
            .map(|m| (m.node, m.id, m.learner_until.is_some()))
            .collect();
        assert_eq!(members, [(0, 77, false)]);
        assert_eq!(fresh.health_fail.as_deref(), Some("etcd is sad"));
        assert_eq!(fresh.reboot_downtime, Duration::from_millis(42));
    }

    #[test]
    fn a_stored_cluster_must_fit_the_layout_and_name_real_nodes_and_versions() {
        let dir = tempfile::tempdir().unwrap();
        let _shared = stored_cluster(dir.path());
        let mut r = crate::store::load(dir.path()).unwrap().unwrap();
        let e = restore_into(&mut state(1, 0), &r).unwrap_err();
        assert_eq!(e.to_string(), "the state has 2 nodes, the layout 1");
        r.cluster.etcd_members = Some(vec![StoredMember { node: 2, id: 1 }]);
        let e = restore_into(&mut state(1, 1), &r).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the state lists an etcd member on node 2, which does not exist"
        );
        r.cluster.etcd_members = None;
        r.cluster.nodes[1].pending_version = Some("banana".into());
        let e = restore_into(&mut state(1, 1), &r).unwrap_err();
        assert!(e.to_string().starts_with("node 1: "), "{e}");
    }
}
