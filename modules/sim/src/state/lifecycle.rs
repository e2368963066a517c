//! A node's life: booting (from disk or media, or resumed from a state directory), its etcd
//! wait ending, reboots and power-off.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ferro_talos_proto::machine as pb;

use super::{
    Shared, Stage, State, machine_status_event, new_uuid, refresh_unsigned_tls, sequence_event,
    service_event, services_for, task_event, trustd_key,
};
use crate::mcfg::StoredConfig;
use crate::store::Restored;
use crate::tls;

impl Shared {
    /// Brings up the nodes of a new [`Shared`]: a fresh cluster boots every node; a stored one
    /// resumes the nodes that were up and finishes the reboots that were in flight.
    pub(super) fn boot_or_resume_all(
        self: &Arc<Self>,
        restored: Option<Restored>,
    ) -> anyhow::Result<()> {
        match restored {
            None => {
                for i in 0..self.run.len() {
                    self.boot(i)?;
                }
            }
            Some(r) => {
                for (i, n) in r.cluster.nodes.iter().enumerate() {
                    if n.up && !n.reboot_pending {
                        self.resume(i)?;
                        self.resume_try_rollback(i);
                    } else if n.faults.never_return {
                        // A reboot that never comes back stays down until power_on.
                        self.lock().nodes[i].stage = Stage::Rebooting;
                    } else {
                        // A reboot in flight when the simulator stopped finishes now.
                        self.boot(i)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A try-mode config that was running when the simulator stopped is still rolled back on
    /// time (at once if that time has passed).
    fn resume_try_rollback(self: &Arc<Self>, idx: usize) {
        let (at, token) = {
            let st = self.lock();
            let Some(n) = st.nodes.get(idx) else { return };
            let trying =
                n.active.as_ref().map(|c| &c.digest) != n.persisted.as_ref().map(|c| &c.digest);
            match n.try_rollback_at {
                Some(at) if trying => (at, n.try_token),
                _ => return,
            }
        };
        let left = at.duration_since(SystemTime::now()).unwrap_or_default();
        crate::apply::schedule_try_rollback(self, idx, token, left);
    }

    /// A stored node that was up comes back without a reboot: same boot id, same running and
    /// next-boot configs, same versions; only the TLS personality is rebuilt (from the stored
    /// config's CA, so existing client credentials keep working).
    fn resume(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let stage = come_up(&mut st, idx)?;
        // It kept running while the simulator was stopped: long past its settling time.
        let settled = Instant::now()
            .checked_sub(st.bootstrap_settle)
            .unwrap_or_else(Instant::now);
        st.nodes[idx].running_since = (stage != Stage::Maintenance).then_some(settled);
        st.nodes[idx].components =
            crate::kube::Components::boot(st.nodes[idx].active.as_ref(), settled);
        self.publish_stage(&mut st, idx);
        self.sync_etcd(&mut st);
        refresh_unsigned_tls(&mut st);
        self.notify(&st, idx);
        Ok(())
    }

    /// Finish a boot: take pending versions/addresses, new boot id, then boot from what the
    /// disks hold. An installed node boots from its system disk with the config on STATE (or
    /// into maintenance mode without one); a node with nothing installed boots from
    /// installation media into maintenance mode, or, without media, does not come up at all.
    pub fn boot(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let Some(n) = st.nodes.get_mut(idx) else {
            anyhow::bail!("no node {idx}");
        };
        if let Some(a) = n.faults.next_address.take() {
            n.address = a;
        }
        if let Some(v) = n.pending_version.take() {
            n.version = v;
        }
        if let Some(s) = n.pending_schematic.take() {
            n.schematic = Some(s);
        }
        n.services_stopped = false;
        n.etcd_left = false;
        n.etcd_failed = None;
        n.boot_id = new_uuid();
        n.events.clear();
        n.reboot_pending = false;
        n.upgrade_running = false;
        n.try_token += 1;
        n.try_rollback_at = None;
        n.running_since = None;
        if !n.installed && !n.boot_media {
            // Nothing to boot: the firmware stops at "no bootable device".
            n.unbootable = true;
            n.up = false;
            n.active = None;
            n.stage = Stage::Booting;
            self.notify(&st, idx);
            return Ok(());
        }
        n.unbootable = false;
        // From media there is no STATE partition, so no config: maintenance mode.
        n.active = if n.installed {
            n.persisted.clone()
        } else {
            None
        };
        if let Some(h) = n.active.as_ref().and_then(StoredConfig::hostname) {
            n.hostname = h;
        }
        drop(st);
        self.start(idx)
    }

    /// The rest of a boot, also run when a node leaves maintenance mode without a reboot:
    /// a TLS personality for the running config, listening, services and the stage.
    pub fn start(&self, idx: usize) -> anyhow::Result<()> {
        let mut st = self.lock();
        let stage = come_up(&mut st, idx)?;
        let n = &mut st.nodes[idx];
        // Services start with the boot whatever stage it then waits in (BOOTING until etcd is
        // up on a control plane, boot_stage.rs).
        n.running_since = (stage != Stage::Maintenance).then(Instant::now);
        n.components = crate::kube::Components::boot(n.active.as_ref(), Instant::now());
        let control_plane = n.is_control_plane();
        let configured = n.active.is_some();
        use pb::sequence_event::Action as A;
        self.publish(&mut st, idx, "", sequence_event("boot", A::Start));
        self.publish(
            &mut st,
            idx,
            "",
            machine_status_event(Stage::Booting, false),
        );
        if configured {
            use pb::service_state_event::Action as S;
            for svc in services_for(control_plane) {
                if svc != "etcd" {
                    self.publish(
                        &mut st,
                        idx,
                        "",
                        service_event(svc, S::Running, "Health check successful"),
                    );
                }
            }
        }
        if stage != Stage::Booting {
            self.publish(&mut st, idx, "", sequence_event("boot", A::Stop));
            self.publish_stage(&mut st, idx);
        }
        // A control plane that is not a member yet joins here if etcd lets it, which ends its
        // boot; otherwise it waits in BOOTING.
        self.sync_etcd(&mut st);
        refresh_unsigned_tls(&mut st);
        self.notify(&st, idx);
        Ok(())
    }

    /// Ends the boot of every control plane that waited in BOOTING for its etcd and now has it
    /// (after a bootstrap or once etcd lets it join): the boot sequence's last task finishes,
    /// and MachineStatus says RUNNING (boot_stage.rs).
    pub fn end_boots(&self, st: &mut State) {
        for idx in crate::boot_stage::boots_ended(st) {
            use pb::sequence_event::Action as A;
            self.publish(st, idx, "", sequence_event("boot", A::Stop));
            self.publish_stage(st, idx);
            self.notify(st, idx);
        }
    }

    /// Bootstrap marks the waiting etcd service finished (`BootstrapEtcd` in
    /// `internal/app/machined/pkg/system/services/etcd.go` @ v1.14.1), so the node's boot ends
    /// even when the etcd it then starts fails (a recovery whose snapshot does not restore).
    pub fn end_boot_for_bootstrap(&self, st: &mut State, idx: usize) {
        if st.nodes[idx].stage == Stage::Booting {
            st.nodes[idx].stage = Stage::Running;
            use pb::sequence_event::Action as A;
            self.publish(st, idx, "", sequence_event("boot", A::Stop));
            self.publish_stage(st, idx);
            self.notify(st, idx);
        }
    }

    /// Reboot node `idx` asynchronously: events now, down shortly after (so the RPC reply still
    /// reaches the client), back after the configured downtime unless a fault keeps it down.
    pub fn reboot(self: &Arc<Self>, idx: usize, actor_id: String, sequence: &'static str) {
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let downtime = {
                let mut st = shared.lock();
                use pb::sequence_event::Action as A;
                shared.publish(&mut st, idx, &actor_id, sequence_event(sequence, A::Start));
                shared.publish(
                    &mut st,
                    idx,
                    &actor_id,
                    task_event("stopAllServices", pb::task_event::Action::Start),
                );
                shared.publish(
                    &mut st,
                    idx,
                    "",
                    machine_status_event(Stage::Rebooting, false),
                );
                st.reboot_downtime
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            let never_return = {
                let mut st = shared.lock();
                let Some(n) = st.nodes.get_mut(idx) else {
                    return;
                };
                n.up = false;
                n.stage = Stage::Rebooting;
                n.generation += 1;
                let never = n.faults.never_return;
                let name = crate::kube::node_name(n);
                if st.kube.has_node(&name) {
                    st.kube.record("node_down", &name, None);
                }
                shared.notify(&st, idx);
                never
            };
            if never_return {
                return;
            }
            tokio::time::sleep(downtime).await;
            if *shared.shutdown.borrow() {
                return;
            }
            if let Err(e) = shared.boot(idx) {
                eprintln!("talos-sim: node {idx} failed to boot: {e:#}");
            }
        });
    }

    /// Power node `idx` off after a reset with `reboot: false`: it stays down until powered on.
    pub fn power_off(self: &Arc<Self>, idx: usize, actor_id: String) {
        let shared = self.clone();
        tokio::spawn(async move {
            let mut st = shared.lock();
            shared.publish(
                &mut st,
                idx,
                &actor_id,
                machine_status_event(Stage::ShuttingDown, false),
            );
            let Some(n) = st.nodes.get_mut(idx) else {
                return;
            };
            n.up = false;
            n.stage = Stage::ShuttingDown;
            n.generation += 1;
            let name = crate::kube::node_name(n);
            if st.kube.has_node(&name) {
                st.kube.record("node_down", &name, None);
            }
            shared.notify(&st, idx);
        });
    }
}

/// Node `idx` listens again with a TLS personality for its running config: up, a new listener
/// generation, and the stage its services reach (`boot_stage::stage_after_services`: RUNNING,
/// BOOTING while a control plane's etcd is not up, or MAINTENANCE without a config).
fn come_up(st: &mut State, idx: usize) -> anyhow::Result<Stage> {
    let ca_key = st
        .nodes
        .get(idx)
        .and_then(|n| n.active.as_ref())
        .and_then(|c| trustd_key(st, c));
    let Some(n) = st.nodes.get_mut(idx) else {
        anyhow::bail!("no node {idx}");
    };
    n.tls = Some(Arc::new(tls::NodeTls::build(n, ca_key)?));
    n.up = true;
    n.generation += 1;
    st.nodes[idx].stage = crate::boot_stage::stage_after_services(st, idx);
    Ok(st.nodes[idx].stage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::mcfg::Release;
    use crate::state::EventRec;
    use crate::state::shared::tests::cluster;
    use prost::Message;

    fn sequence(e: &EventRec) -> Option<(String, i32)> {
        (e.data.type_url == "talos/runtime/machine.SequenceEvent").then(|| {
            let s = pb::SequenceEvent::decode(e.data.value.as_slice()).unwrap();
            (s.sequence, s.action)
        })
    }

    fn machine_stage(e: &EventRec) -> Option<i32> {
        (e.data.type_url == "talos/runtime/machine.MachineStatusEvent").then(|| {
            pb::MachineStatusEvent::decode(e.data.value.as_slice())
                .unwrap()
                .stage
        })
    }

    /// Waits (up to 10 s) until `done` holds for the state.
    async fn until(shared: &Shared, what: &str, done: impl Fn(&State) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(&shared.lock()) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[test]
    fn a_fresh_cluster_boots_every_node_into_maintenance_mode() {
        use pb::sequence_event::Action as A;
        let shared = cluster(1, 1);
        let st = shared.lock();
        for (i, n) in st.nodes.iter().enumerate() {
            assert!(n.up, "node {i}");
            assert_eq!(n.stage, Stage::Maintenance);
            assert_eq!(n.generation, 1);
            assert!(n.tls.as_ref().is_some_and(|t| t.maintenance));
            assert!(n.running_since.is_none(), "no services in maintenance mode");
            assert!(shared.run[i].borrow().listening);
            let boot: Vec<(String, i32)> = n.events.iter().filter_map(sequence).collect();
            assert_eq!(
                boot,
                [
                    ("boot".to_string(), A::Start as i32),
                    ("boot".to_string(), A::Stop as i32)
                ]
            );
            assert_eq!(
                n.events.iter().filter_map(machine_stage).next_back(),
                Some(Stage::Maintenance.proto() as i32)
            );
        }
        assert!(st.etcd.is_none());
    }

    #[test]
    fn a_boot_takes_what_the_last_one_left_pending() {
        let shared = cluster(1, 0);
        let before = {
            let mut st = shared.lock();
            let n = &mut st.nodes[0];
            n.pending_version = Some("v1.14.1".into());
            n.pending_schematic = Some("abc".into());
            n.faults.next_address = Some("127.0.10.9".parse().unwrap());
            n.reboot_pending = true;
            n.etcd_left = true;
            n.etcd_failed = Some("bad snapshot".into());
            (n.boot_id.clone(), n.generation, n.try_token)
        };
        shared.boot(0).unwrap();
        let st = shared.lock();
        let n = &st.nodes[0];
        assert_eq!(n.version, "v1.14.1");
        assert_eq!(n.pending_version, None);
        assert_eq!(n.schematic.as_deref(), Some("abc"));
        assert_eq!(n.pending_schematic, None);
        assert_eq!(n.address.to_string(), "127.0.10.9");
        assert_eq!(n.faults.next_address, None, "taken once");
        assert!(!n.reboot_pending && !n.etcd_left && n.etcd_failed.is_none());
        assert_ne!(n.boot_id, before.0);
        assert_eq!(n.generation, before.1 + 1);
        assert_eq!(n.try_token, before.2 + 1);
        assert_eq!(shared.run[0].borrow().address.to_string(), "127.0.10.9");
    }

    #[test]
    fn a_node_with_nothing_to_boot_from_stays_down() {
        let shared = cluster(1, 0);
        {
            let mut st = shared.lock();
            st.nodes[0].boot_media = false;
        }
        shared.boot(0).unwrap();
        let st = shared.lock();
        let n = &st.nodes[0];
        assert!(n.unbootable && !n.up);
        assert_eq!(n.stage, Stage::Booting);
        assert!(n.events.is_empty());
        assert!(!shared.run[0].borrow().listening);
    }

    #[test]
    fn booting_from_media_ignores_the_config_on_disk() {
        let shared = cluster(1, 0);
        {
            let mut st = shared.lock();
            let c = StoredConfig::parse(
                b"version: v1alpha1\nmachine:\n  type: controlplane\n",
                Release::V1_13,
            )
            .unwrap();
            st.nodes[0].persisted = Some(c);
        }
        shared.boot(0).unwrap();
        let st = shared.lock();
        assert!(st.nodes[0].active.is_none());
        assert_eq!(st.nodes[0].stage, Stage::Maintenance);
        assert!(!st.nodes[0].unbootable);
    }

    #[test]
    fn a_node_that_does_not_exist_does_not_boot() {
        let shared = cluster(1, 0);
        assert_eq!(shared.boot(3).unwrap_err().to_string(), "no node 3");
        assert_eq!(shared.start(3).unwrap_err().to_string(), "no node 3");
    }

    #[test]
    fn a_bootstrap_ends_only_a_boot_that_waits() {
        use pb::sequence_event::Action as A;
        let shared = cluster(2, 0);
        let mut st = shared.lock();
        st.nodes[1].stage = Stage::Booting;
        let before: Vec<usize> = st.nodes.iter().map(|n| n.events.len()).collect();
        shared.end_boot_for_bootstrap(&mut st, 0);
        shared.end_boot_for_bootstrap(&mut st, 1);
        assert_eq!(st.nodes[0].stage, Stage::Maintenance);
        assert_eq!(st.nodes[0].events.len(), before[0], "nothing waited");
        assert_eq!(st.nodes[1].stage, Stage::Running);
        let new = &st.nodes[1].events[before[1]..];
        assert_eq!(sequence(&new[0]), Some(("boot".into(), A::Stop as i32)));
        assert_eq!(machine_stage(&new[1]), Some(Stage::Running.proto() as i32));
    }

    #[test]
    fn a_stored_cluster_resumes_its_nodes_finishes_reboots_and_keeps_lost_ones_down() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SimConfig {
            control_planes: 1,
            workers: 2,
            port: 0,
            ..SimConfig::default()
        };
        let open = || {
            crate::store::Store::open(dir.path(), true)
                .unwrap()
                .with_layout(&cfg)
        };
        let boot_ids: Vec<String> = {
            let shared = Shared::new(cfg.clone(), Some(open()), None).unwrap();
            let mut st = shared.lock();
            st.nodes[1].reboot_pending = true;
            st.nodes[2].up = false;
            st.nodes[2].faults.never_return = true;
            st.nodes.iter().map(|n| n.boot_id.clone()).collect()
        };
        let restored = crate::store::load(dir.path()).unwrap();
        let shared = Shared::new(cfg.clone(), Some(open()), restored).unwrap();
        let st = shared.lock();
        let n = &st.nodes;
        assert!(n[0].up && n[1].up && !n[2].up);
        assert_eq!(n[0].boot_id, boot_ids[0], "resumed without a reboot");
        assert_ne!(n[1].boot_id, boot_ids[1], "its reboot finished");
        assert!(!n[1].reboot_pending);
        assert_eq!(n[2].boot_id, boot_ids[2]);
        assert_eq!(n[2].stage, Stage::Rebooting);
        assert_eq!(n[0].stage, Stage::Maintenance);
        assert!(
            n[0].events.iter().filter_map(sequence).next().is_none(),
            "no boot"
        );
        assert!(!shared.run[2].borrow().listening);
    }

    #[tokio::test]
    async fn a_reboot_goes_down_and_comes_back_with_a_new_boot() {
        use pb::sequence_event::Action as A;
        let shared = cluster(1, 0);
        let (boot_id, generation) = {
            let mut st = shared.lock();
            st.reboot_downtime = Duration::from_millis(10);
            (st.nodes[0].boot_id.clone(), st.nodes[0].generation)
        };
        let mut rx = shared.events[0].subscribe();
        shared.reboot(0, "me".into(), "reboot");
        until(&shared, "the node to come back", |st| {
            st.nodes[0].up && st.nodes[0].boot_id != boot_id
        })
        .await;
        let mut heard = Vec::new();
        while let Ok(e) = rx.try_recv() {
            heard.push(e);
        }
        assert_eq!(
            sequence(&heard[0]),
            Some(("reboot".into(), A::Start as i32))
        );
        assert_eq!(heard[0].actor_id, "me");
        let task = pb::TaskEvent::decode(heard[1].data.value.as_slice()).unwrap();
        assert_eq!(task.task, "stopAllServices");
        assert_eq!(heard[1].actor_id, "me");
        assert_eq!(
            machine_stage(&heard[2]),
            Some(Stage::Rebooting.proto() as i32)
        );
        assert_eq!(sequence(&heard[3]), Some(("boot".into(), A::Start as i32)));
        let st = shared.lock();
        let n = &st.nodes[0];
        assert_eq!(n.generation, generation + 2, "down, then up");
        assert_eq!(n.stage, Stage::Maintenance);
        assert_eq!(
            sequence(&n.events[0]),
            Some(("boot".into(), A::Start as i32))
        );
        assert!(shared.run[0].borrow().listening);
    }

    #[tokio::test]
    async fn a_reboot_that_never_returns_or_meets_a_shutdown_stays_down() {
        let shared = cluster(2, 0);
        let boot_ids: Vec<String> = {
            let mut st = shared.lock();
            st.reboot_downtime = Duration::from_millis(10);
            st.nodes[0].faults.never_return = true;
            st.nodes.iter().map(|n| n.boot_id.clone()).collect()
        };
        shared.reboot(0, String::new(), "reboot");
        until(&shared, "node 0 to go down", |st| !st.nodes[0].up).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        {
            let st = shared.lock();
            assert!(!st.nodes[0].up);
            assert_eq!(st.nodes[0].stage, Stage::Rebooting);
            assert_eq!(st.nodes[0].boot_id, boot_ids[0]);
            assert!(!shared.run[0].borrow().listening);
        }
        shared.shutdown.send_replace(true);
        shared.reboot(1, String::new(), "reboot");
        until(&shared, "node 1 to go down", |st| !st.nodes[1].up).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let st = shared.lock();
        assert!(!st.nodes[1].up);
        assert_eq!(st.nodes[1].boot_id, boot_ids[1]);
    }

    #[tokio::test]
    async fn power_off_takes_the_node_down_until_it_is_powered_on() {
        let shared = cluster(1, 0);
        let generation = shared.lock().nodes[0].generation;
        shared.power_off(0, "reset".into());
        until(&shared, "the node to go down", |st| !st.nodes[0].up).await;
        let st = shared.lock();
        let n = &st.nodes[0];
        assert_eq!(n.stage, Stage::ShuttingDown);
        assert_eq!(n.generation, generation + 1);
        let last = n.events.last().unwrap();
        assert_eq!(last.actor_id, "reset");
        assert_eq!(
            machine_stage(last),
            Some(Stage::ShuttingDown.proto() as i32)
        );
        assert!(!shared.run[0].borrow().listening);
    }
}
