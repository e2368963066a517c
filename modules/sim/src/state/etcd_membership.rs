//! etcd's membership as the model keeps it: members and learners, quorum and leader, the
//! rules for removing a member, and control planes joining.

use std::time::{Duration, Instant};

use super::{Shared, State};

#[derive(Clone, Debug, serde::Serialize)]
pub struct EtcdMember {
    pub node: usize,
    pub id: u64,
    /// A control plane that joins is a learner until then, when etcd promotes it (Talos adds it
    /// with `MemberAddAsLearner` and promotes it once it has caught up: `addMember`,
    /// `promoteMember` in services/etcd.go @ v1.14.1). None: a voting member.
    #[serde(skip)]
    pub learner_until: Option<Instant>,
}

/// How long the model keeps a joining control plane a learner. Real etcd promotes it once it has
/// caught up with the leader, and takes one learner at a time (the real backend shows both:
/// `modules/sim/tests/real_etcd.rs`); the model admits every joiner at once and keeps it a
/// learner only briefly, so tests stay fast, but a learner is there to be seen (talos_health
/// waits it out).
pub const LEARNER_CATCH_UP: Duration = Duration::from_millis(300);

impl EtcdMember {
    /// A voting member (the bootstrapped one, one restored from the state directory).
    pub fn voting(node: usize, id: u64) -> EtcdMember {
        EtcdMember {
            node,
            id,
            learner_until: None,
        }
    }

    pub fn is_learner(&self) -> bool {
        self.learner_until.is_some_and(|t| Instant::now() < t)
    }
}

/// Why etcd refuses to remove a member: its own errors (etcd v3.6.12
/// `server/etcdserver/errors/errors.go`, `api/v3rpc/rpctypes/error.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdRefusal {
    MemberNotFound,
    NotEnoughStartedMembers,
    Unhealthy,
    /// Fewer than a quorum of the voting members run, so raft has no leader.
    NoLeader,
}

impl EtcdRefusal {
    pub fn text(self) -> &'static str {
        match self {
            EtcdRefusal::MemberNotFound => "etcdserver: member not found",
            EtcdRefusal::NotEnoughStartedMembers => {
                "etcdserver: re-configuration failed due to not enough started members"
            }
            EtcdRefusal::Unhealthy => "etcdserver: unhealthy cluster",
            EtcdRefusal::NoLeader => "etcdserver: no leader",
        }
    }
}

impl State {
    /// Removes a node's etcd member and data; with no member left, etcd is back to "not
    /// bootstrapped" (a rebuilt cluster bootstraps again).
    pub fn leave_etcd(&mut self, node: usize) {
        if let Some(members) = self.etcd.as_mut() {
            members.retain(|m| m.node != node);
            if members.is_empty() {
                self.etcd = None;
                self.kube.forget_cluster();
            }
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.drop_etcd_data();
            n.etcd_left = true;
        }
    }

    /// Whether a node's etcd member serves: up, with its data, and its etcd running.
    pub fn etcd_active(&self, node: usize) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| n.up && n.etcd_data && !n.etcd_stopped())
    }

    /// Whether etcd has a leader: raft elects one only among a majority of the voting members.
    /// Talos asks etcd with `clientv3.WithRequireLeader` for the member list, a removal and a
    /// leave (`v1alpha1_server.go` @ v1.14.1), and etcd refuses every such call at once while it
    /// has none, `etcdserver: no leader` (`server/etcdserver/api/v3rpc/interceptor.go` @ v3.7.1).
    /// The real backend showed it: without the leader rule a linearizable call waits out its
    /// deadline.
    pub fn etcd_has_leader(&self) -> bool {
        let voting: Vec<&EtcdMember> = self
            .etcd
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|m| !m.is_learner())
            .collect();
        let running = voting.iter().filter(|m| self.etcd_active(m.node)).count();
        running > voting.len() / 2
    }

    /// Whether etcd lets member `id` go when a member on node `via` is asked: etcd v3.6.12's
    /// strict reconfiguration checks (`mayRemoveMember` in `server/etcdserver/server.go`,
    /// `IsReadyToRemoveVotingMember` in `server/etcdserver/api/membership/cluster.go`), which
    /// are all the quorum protection Talos has. Every simulated member has started, so the first
    /// check refuses only the removal of the last member; a member that is down may always go;
    /// removing a live one needs the live members but one to still be a quorum of the rest.
    pub fn may_remove_member(&self, via: usize, id: u64) -> Result<(), EtcdRefusal> {
        if !self.etcd_has_leader() {
            return Err(EtcdRefusal::NoLeader);
        }
        let members = self.etcd.as_deref().unwrap_or_default();
        let Some(removed) = members.iter().find(|m| m.id == id) else {
            return Err(EtcdRefusal::MemberNotFound);
        };
        let remaining = members.len() - 1;
        if remaining < remaining / 2 + 1 {
            return Err(EtcdRefusal::NotEnoughStartedMembers);
        }
        if removed.node != via && !self.etcd_active(removed.node) {
            return Ok(());
        }
        let active = members
            .iter()
            .filter(|m| m.node == via || self.etcd_active(m.node))
            .count();
        if active - 1 < 1 + (members.len() - 1) / 2 {
            return Err(EtcdRefusal::Unhealthy);
        }
        Ok(())
    }
}

impl Shared {
    /// Control planes with a config join an existing etcd cluster automatically, while it has a
    /// quorum: joining is a member change (`addMember` in
    /// `internal/app/machined/pkg/system/services/etcd.go` @ v1.13.9), which etcd makes only with a
    /// leader, so a node whose EPHEMERAL was wiped after etcd lost its quorum waits, empty, for a
    /// recovery.
    pub fn sync_etcd(&self, st: &mut State) {
        Self::join_etcd(st);
        self.end_boots(st);
    }

    /// The etcd half of [`Shared::sync_etcd`]: control planes that are up join while etcd has
    /// a quorum.
    fn join_etcd(st: &mut State) {
        let Some(members) = st.etcd.as_ref() else {
            return;
        };
        let live = members
            .iter()
            .filter(|m| {
                st.nodes
                    .get(m.node)
                    .is_some_and(|n| n.up && n.etcd_data && !n.etcd_stopped())
            })
            .count();
        if live < members.len() / 2 + 1 {
            return;
        }
        let Some(members) = st.etcd.as_mut() else {
            return;
        };
        for n in st.nodes.iter_mut() {
            if n.up && n.is_control_plane() && !n.etcd_left {
                // A node joining with no data first removes a member of its own hostname (one a
                // reset without leaving etcd left registered), then joins under a new id
                // (`addMember` in internal/app/machined/pkg/system/services/etcd.go @ v1.14.1;
                // real etcd showed it: modules/sim/tests/real_etcd.rs).
                if !n.etcd_data {
                    members.retain(|m| m.node != n.index);
                }
                if !members.iter().any(|m| m.node == n.index) {
                    members.push(EtcdMember {
                        node: n.index,
                        id: rand::random::<u64>() >> 1,
                        learner_until: Some(Instant::now() + LEARNER_CATCH_UP),
                    });
                }
                n.etcd_data = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcfg::{Release, StoredConfig};
    use crate::state::shared::tests::state;

    /// `up.len()` nodes with their etcd data, each a voting member (id 10 + node) and up as
    /// `up` says.
    fn members(up: &[bool]) -> State {
        let mut st = state(up.len(), 0);
        for (n, &up) in st.nodes.iter_mut().zip(up) {
            n.up = up;
            n.etcd_data = true;
        }
        st.etcd = Some(
            (0..up.len())
                .map(|i| EtcdMember::voting(i, 10 + i as u64))
                .collect(),
        );
        st
    }

    #[test]
    fn refusals_read_as_etcds_errors() {
        assert_eq!(
            EtcdRefusal::MemberNotFound.text(),
            "etcdserver: member not found"
        );
        assert_eq!(
            EtcdRefusal::NotEnoughStartedMembers.text(),
            "etcdserver: re-configuration failed due to not enough started members"
        );
        assert_eq!(
            EtcdRefusal::Unhealthy.text(),
            "etcdserver: unhealthy cluster"
        );
        assert_eq!(EtcdRefusal::NoLeader.text(), "etcdserver: no leader");
    }

    #[test]
    fn a_learner_is_one_until_its_catch_up_time() {
        let mut m = EtcdMember::voting(0, 1);
        assert!(!m.is_learner());
        m.learner_until = Some(Instant::now() + Duration::from_secs(3600));
        assert!(m.is_learner());
        m.learner_until = Some(Instant::now() - Duration::from_millis(1));
        assert!(!m.is_learner());
    }

    #[test]
    fn a_member_serves_only_up_with_its_data_and_its_etcd_running() {
        let mut st = members(&[true, false]);
        assert!(st.etcd_active(0));
        assert!(!st.etcd_active(1), "down");
        assert!(!st.etcd_active(5), "no such node");
        st.nodes[0].faults.etcd_down = true;
        assert!(!st.etcd_active(0));
        st.nodes[0].faults.etcd_down = false;
        st.nodes[0].etcd_data = false;
        assert!(!st.etcd_active(0));
    }

    #[test]
    fn etcd_has_a_leader_with_a_majority_of_the_voting_members_running() {
        assert!(!state(1, 0).etcd_has_leader(), "not bootstrapped");
        assert!(members(&[true]).etcd_has_leader());
        assert!(members(&[true, true, false]).etcd_has_leader());
        assert!(!members(&[true, false, false]).etcd_has_leader());
        assert!(!members(&[true, false]).etcd_has_leader());
        // Learners do not vote: two of three running, but only one of the two voters.
        let mut st = members(&[true, false, true]);
        st.etcd.as_mut().unwrap()[2].learner_until =
            Some(Instant::now() + Duration::from_secs(3600));
        assert!(!st.etcd_has_leader());
    }

    #[test]
    fn removing_a_member_follows_etcds_strict_reconfiguration_checks() {
        use EtcdRefusal::*;
        assert_eq!(state(1, 0).may_remove_member(0, 10), Err(NoLeader));
        assert_eq!(
            members(&[true]).may_remove_member(0, 10),
            Err(NotEnoughStartedMembers)
        );
        let all_up = members(&[true, true, true]);
        assert_eq!(all_up.may_remove_member(0, 99), Err(MemberNotFound));
        assert_eq!(all_up.may_remove_member(0, 11), Ok(()));
        assert_eq!(all_up.may_remove_member(0, 10), Ok(()), "itself");
        let one_down = members(&[true, true, false]);
        assert_eq!(
            one_down.may_remove_member(0, 12),
            Ok(()),
            "a member that is down"
        );
        assert_eq!(one_down.may_remove_member(0, 11), Err(Unhealthy));
        assert_eq!(
            members(&[true, false, false]).may_remove_member(0, 12),
            Err(NoLeader)
        );
    }

    #[test]
    fn leaving_drops_the_member_and_its_data_and_the_last_one_unbootstraps() {
        let mut st = members(&[true, true]);
        st.leave_etcd(1);
        let left: Vec<usize> = st.etcd.as_ref().unwrap().iter().map(|m| m.node).collect();
        assert_eq!(left, [0]);
        let n = &st.nodes[1];
        assert!(!n.etcd_data && n.etcd_left);
        assert_eq!(n.etcd_data_drops, 1);
        assert!(st.nodes[0].etcd_data && !st.nodes[0].etcd_left);
        st.leave_etcd(0);
        assert!(st.etcd.is_none());
        assert!(st.nodes[0].etcd_left);
    }

    fn control_plane() -> StoredConfig {
        StoredConfig::parse(
            b"version: v1alpha1\nmachine:\n  type: controlplane\n",
            Release::V1_13,
        )
        .expect("a minimal config decodes")
    }

    #[test]
    fn a_control_plane_joins_as_a_learner_while_etcd_has_a_quorum() {
        let mut st = members(&[true, true, true, true]);
        st.etcd.as_mut().unwrap().truncate(3);
        for n in &mut st.nodes {
            n.active = Some(control_plane());
        }
        // Node 1 was reset without leaving: its old member goes, it joins under a new id.
        st.nodes[1].etcd_data = false;
        // Node 3 is new.
        st.nodes[3].etcd_data = false;
        Shared::join_etcd(&mut st);
        let list = st.etcd.as_ref().unwrap();
        assert_eq!(list.len(), 4);
        for (node, id) in [(0, 10), (2, 12)] {
            let m = list.iter().find(|m| m.node == node).unwrap();
            assert_eq!(m.id, id);
            assert!(!m.is_learner());
        }
        for node in [1, 3] {
            let m = list.iter().find(|m| m.node == node).expect("joined");
            assert!(m.is_learner(), "node {node}");
            assert_ne!(m.id, 11);
            assert!(m.id < 1 << 63);
            assert!(st.nodes[node].etcd_data);
        }
    }

    #[test]
    fn nothing_joins_without_a_quorum_or_once_a_node_left() {
        let mut st = members(&[true, false, true]);
        st.etcd.as_mut().unwrap().truncate(2);
        for n in &mut st.nodes {
            n.active = Some(control_plane());
        }
        st.nodes[2].etcd_data = false;
        Shared::join_etcd(&mut st);
        assert_eq!(
            st.etcd.as_ref().unwrap().len(),
            2,
            "one of two members runs"
        );
        assert!(!st.nodes[2].etcd_data);

        st.nodes[1].up = true;
        st.nodes[2].etcd_left = true;
        Shared::join_etcd(&mut st);
        assert_eq!(st.etcd.as_ref().unwrap().len(), 2, "node 2 left etcd");
        st.nodes[2].etcd_left = false;
        st.nodes[2].active = None;
        Shared::join_etcd(&mut st);
        assert_eq!(st.etcd.as_ref().unwrap().len(), 2, "maintenance mode");
    }
}
