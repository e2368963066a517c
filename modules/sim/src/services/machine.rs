//! `machine.MachineService`: the methods our modules call (api.md §5, §13.2, §15, §17, §18).

use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use ferro_talos_proto::common::Data;
use ferro_talos_proto::machine::machine_service_server::MachineService;
use ferro_talos_proto::machine::*;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use crate::real::answers as real_etcd;
use crate::routing::{BoxStream, Ctx, Target};
use crate::state::{self, EtcdRefusal, Shared, new_uuid, services_for};
use crate::{apply, impl_item, pki};

impl_item!(
    ApplyConfiguration,
    Bootstrap,
    Upgrade,
    Version,
    Hostname,
    ServiceList,
    ServiceStart,
    ServiceStop,
    ServiceRestart,
    Reboot,
    Shutdown,
    EtcdMembers,
    EtcdStatus,
    EtcdRemoveMemberById,
    EtcdLeaveCluster,
    EtcdRecover,
    EtcdForfeitLeadership,
    Reset,
    Memory,
    GenerateClientConfiguration,
    ImagePull,
    Event,
    Data,
);

pub struct Machine(pub Ctx);

const P: &str = "/machine.MachineService/";

fn path(m: &str) -> String {
    format!("{P}{m}")
}

fn one<T>(item: T) -> Result<Vec<T>, Status> {
    Ok(vec![item])
}

/// Every etcd API first checks the machine type (api.md §5.10).
fn etcd_node_check(shared: &Shared, t: &Target, api: &str) -> Result<(), Status> {
    let st = shared.lock();
    let n = &st.nodes[t.idx];
    match n.machine_type() {
        None => Err(Status::unimplemented(format!(
            "machine type is not set, cannot use {api} API"
        ))),
        Some(mt) if !mt.is_control_plane() => Err(Status::unimplemented(format!(
            "{api} is only available on control plane nodes"
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn etcd_refused(ip: &str) -> Status {
    Status::unavailable(format!(
        "connection error: desc = \"transport: Error while dialing: dial tcp {ip}:2379: connect: connection refused\""
    ))
}

fn sha_of(tag: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(tag.as_bytes())[..4])
}

fn ts(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

fn chunks(bytes: Vec<u8>, size: usize) -> BoxStream<Data> {
    let items: Vec<Result<Data, Status>> = bytes
        .chunks(size)
        .map(|c| {
            Ok(Data {
                metadata: None,
                bytes: c.to_vec(),
            })
        })
        .collect();
    Box::pin(tokio_stream::iter(items))
}

fn kubeconfig(shared: &Shared, t: &Target) -> Result<Vec<u8>, Status> {
    let cfg = {
        let st = shared.lock();
        let n = &st.nodes[t.idx];
        match n.machine_type() {
            None => {
                return Err(Status::unimplemented(
                    "machine type is not set, cannot use kubeconfig API",
                ));
            }
            Some(mt) if !mt.is_control_plane() => {
                return Err(Status::unimplemented(
                    "kubeconfig is only available on control plane nodes",
                ));
            }
            _ => {}
        }
        n.active
            .clone()
            .ok_or_else(|| Status::internal("no config"))?
    };
    let Some((ca_crt, ca_key)) = cfg.k8s_ca() else {
        return Err(Status::failed_precondition(
            "k8s API server CA config is not set",
        ));
    };
    let issued = pki::kubeconfig_admin_cert(&ca_crt, &ca_key)
        .map_err(|e| Status::internal(format!("failed to generate kubeconfig: {e}")))?;
    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
    };
    let name = cfg.cluster_name();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n    - name: {name}\n      cluster:\n        server: {server}\n        certificate-authority-data: {ca}\nusers:\n    - name: admin@{name}\n      user:\n        client-certificate-data: {crt}\n        client-key-data: {key}\ncontexts:\n    - context:\n        cluster: {name}\n        namespace: default\n        user: admin@{name}\n      name: admin@{name}\ncurrent-context: admin@{name}\n",
        server = cfg.endpoint(),
        ca = b64(&ca_crt),
        crt = b64(&issued.cert_pem),
        key = b64(&issued.key_pem),
    );
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    header.set_cksum();
    let archive = (|| -> std::io::Result<Vec<u8>> {
        tar.append_data(&mut header, "kubeconfig", text.as_bytes())?;
        let mut gz = tar.into_inner()?;
        gz.flush()?;
        gz.finish()
    })()
    .map_err(|e| Status::internal(format!("failed to build kubeconfig archive: {e}")))?;
    Ok(archive)
}

/// Each service of node `idx`: (id, state, health, last event's message). The ServiceList
/// answer and the `v1alpha1/Services.v1alpha1.talos.dev` resources both come from this.
pub fn service_states(
    st: &crate::state::State,
    idx: usize,
) -> Vec<(&'static str, &'static str, Option<bool>, String)> {
    let n = &st.nodes[idx];
    let ok = |s: &'static str| {
        (
            s,
            "Running",
            Some(true),
            "Health check successful".to_string(),
        )
    };
    if n.maintenance() {
        return ["apid", "containerd", "machined"]
            .into_iter()
            .map(ok)
            .collect();
    }
    services_for(n.is_control_plane())
        .into_iter()
        .map(|s| match s {
            // The upgrade sequence's stopServices phase spares only these.
            "apid" | "containerd" | "machined" if n.services_stopped => ok(s),
            _ if n.services_stopped => {
                (s, "Finished", None, "Service finished successfully".into())
            }
            "etcd" if n.etcd_failed.is_some() => {
                (s, "Failed", None, n.etcd_failed.clone().unwrap_or_default())
            }
            "etcd" if n.etcd_left => (s, "Finished", None, "Service finished successfully".into()),
            "etcd" if n.faults.etcd_down => (
                s,
                "Running",
                Some(false),
                "Health check failed: context deadline exceeded".into(),
            ),
            "etcd" if n.etcd_data && st.etcd.is_some() => ok(s),
            "etcd" => (s, "Preparing", None, "Running pre state".into()),
            _ => ok(s),
        })
        .collect()
}

fn service_info(
    id: &str,
    state: &str,
    healthy: Option<bool>,
    msg: &str,
    at: SystemTime,
) -> ServiceInfo {
    ServiceInfo {
        id: id.into(),
        state: state.into(),
        events: Some(ServiceEvents {
            events: vec![ServiceEvent {
                msg: msg.into(),
                state: state.into(),
                ts: Some(ts(at)),
            }],
        }),
        health: Some(ServiceHealth {
            unknown: healthy.is_none(),
            healthy: healthy.unwrap_or(false),
            last_message: String::new(),
            last_change: Some(ts(at)),
        }),
    }
}

impl Machine {
    fn shared(&self) -> &std::sync::Arc<Shared> {
        &self.0.shared
    }

    fn events_stream(&self, t: &Target, req: &EventsRequest) -> Result<BoxStream<Event>, Status> {
        let set = [
            req.tail_events != 0,
            !req.tail_id.is_empty(),
            req.tail_seconds != 0,
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if set > 1 {
            return Err(Status::invalid_argument(
                "only one of tail_events, tail_id, tail_seconds can be set",
            ));
        }
        let actor = req.with_actor_id.clone();
        let (past, rx) = {
            let st = self.shared().lock();
            let rx = self.shared().events[t.idx].subscribe();
            let evs = &st.nodes[t.idx].events;
            let past: Vec<state::EventRec> = if req.tail_events < 0 {
                evs.clone()
            } else if req.tail_events > 0 {
                let n = req.tail_events as usize;
                evs[evs.len().saturating_sub(n)..].to_vec()
            } else if !req.tail_id.is_empty() {
                evs.iter().filter(|e| e.id > req.tail_id).cloned().collect()
            } else if req.tail_seconds > 0 {
                let since =
                    Instant::now().checked_sub(Duration::from_secs(req.tail_seconds as u64));
                evs.iter()
                    .filter(|e| since.is_none_or(|s| e.at >= s))
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            };
            (past, rx)
        };
        let to_event = |e: state::EventRec| Event {
            metadata: None,
            data: Some(e.data),
            id: e.id,
            actor_id: e.actor_id,
        };
        let matches = {
            let actor = actor.clone();
            move |e: &state::EventRec| actor.is_empty() || e.actor_id == actor
        };
        let hello = Event {
            metadata: None,
            data: Some(prost_types::Any::default()),
            id: String::new(),
            actor_id: actor.clone(),
        };
        let replay: Vec<Result<Event, Status>> = past
            .into_iter()
            .filter(|e| matches(e))
            .map(|e| Ok(to_event(e)))
            .collect();
        let live = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |r| match r {
            Ok(e) if matches(&e) => Some(Ok(to_event(e))),
            _ => None,
        });
        Ok(Box::pin(
            tokio_stream::once(Ok(hello))
                .chain(tokio_stream::iter(replay))
                .chain(live),
        ))
    }
}

#[tonic::async_trait]
impl MachineService for Machine {
    async fn apply_configuration(
        &self,
        request: Request<ApplyConfigurationRequest>,
    ) -> Result<Response<ApplyConfigurationResponse>, Status> {
        let req = request.get_ref();
        let shared = self.shared().clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("ApplyConfiguration"), |t| {
                one(apply::apply(&shared, t, req)?)
            })?;
        Ok(Response::new(ApplyConfigurationResponse { messages }))
    }

    async fn bootstrap(
        &self,
        request: Request<BootstrapRequest>,
    ) -> Result<Response<BootstrapResponse>, Status> {
        let shared = self.shared().clone();
        let recover = *request.get_ref();
        let messages = self.0.unary(request.metadata(), &path("Bootstrap"), |t| {
            let mut st = shared.lock();
            let n = &st.nodes[t.idx];
            // Upstream's order (v1alpha1_server.go Bootstrap at v1.13.9): the CRI must be up,
            // the node a control plane, its clock synced, etcd's data directory empty. A node
            // whose services just started fails the first and the third for a while.
            let settle = st.bootstrap_settle;
            let up_for = n.running_since.map(|t| t.elapsed()).unwrap_or_default();
            if up_for < settle / 2 {
                return Err(Status::failed_precondition(
                    "bootstrap is not available yet",
                ));
            }
            match n.machine_type() {
                None => {
                    return Err(Status::unimplemented(
                        "machine type is not set, cannot use bootstrap API",
                    ));
                }
                Some(mt) if !mt.is_control_plane() => {
                    return Err(Status::unimplemented(
                        "bootstrap is only available on control plane nodes",
                    ));
                }
                _ => {}
            }
            if up_for < settle {
                return Err(Status::failed_precondition("time is not in sync yet"));
            }
            if n.etcd_data {
                return Err(Status::already_exists("etcd data directory is not empty"));
            }
            // A recovery answers at once; the etcd service restores the uploaded snapshot in its
            // pre stage, and a snapshot that does not restore leaves the service failed. With
            // the real backend, etcd's own restore decides.
            if let Some(real) = shared.real.clone() {
                let spec = real.spec(t.idx, &n.hostname, n.address);
                if recover.recover_etcd {
                    let snapshot = real.snapshot_path(t.idx);
                    let skip = recover.recover_skip_hash_check;
                    if let Err(why) = real.restore(&spec, &snapshot, skip) {
                        st.nodes[t.idx].etcd_failed = Some(why);
                        shared.end_boot_for_bootstrap(&mut st, t.idx);
                        return one(Bootstrap { metadata: None });
                    }
                } else {
                    real.request_bootstrap(t.idx);
                }
            } else if recover.recover_etcd {
                let check = crate::etcd_snapshot::restore_check(
                    n.etcd_snapshot.as_ref(),
                    recover.recover_skip_hash_check,
                );
                if let Err(why) = check {
                    st.nodes[t.idx].etcd_failed = Some(why);
                    shared.end_boot_for_bootstrap(&mut st, t.idx);
                    return one(Bootstrap { metadata: None });
                }
            }
            st.etcd = Some(vec![state::EtcdMember::voting(
                t.idx,
                rand::random::<u64>() >> 1,
            )]);
            st.nodes[t.idx].etcd_data = true;
            shared.sync_etcd(&mut st);
            let ev = state::service_event(
                "etcd",
                service_state_event::Action::Running,
                "Health check successful",
            );
            shared.publish(&mut st, t.idx, "", ev);
            one(Bootstrap { metadata: None })
        })?;
        Ok(Response::new(BootstrapResponse { messages }))
    }

    type EventsStream = BoxStream<Event>;
    async fn events(
        &self,
        request: Request<EventsRequest>,
    ) -> Result<Response<Self::EventsStream>, Status> {
        let req = request.get_ref();
        let s = self.0.streaming(request.metadata(), &path("Events"), |t| {
            self.events_stream(t, req)
        })?;
        Ok(Response::new(s))
    }

    async fn etcd_member_list(
        &self,
        request: Request<EtcdMemberListRequest>,
    ) -> Result<Response<EtcdMemberListResponse>, Status> {
        let shared = self.shared().clone();
        let query_local = request.get_ref().query_local;
        // Upstream (`EtcdMemberList` in v1alpha1_server.go, `NewClient` in internal/pkg/etcd/
        // etcd.go @ v1.14.1) asks etcd through clientv3, whose calls wait for a connection
        // (grpc.WaitForReady, as the comment of `PromoteMember` there says): with no etcd to
        // reach (before bootstrap, or locally where etcd does not run) the call blocks until the
        // caller's deadline instead of failing, and answers as soon as etcd can be reached.
        let deadline = crate::routing::grpc_deadline(request.metadata());
        loop {
            let unreachable = std::cell::Cell::new(false);
            let answer = self
                .0
                .unary(request.metadata(), &path("EtcdMemberList"), |t| {
                    etcd_node_check(&shared, t, "member list")?;
                    if let Some(real) = &shared.real {
                        let Some(members) =
                            real_etcd::member_list(&shared, real, t.idx, query_local)?
                        else {
                            unreachable.set(true);
                            return Err(Status::deadline_exceeded("context deadline exceeded"));
                        };
                        return one(EtcdMembers {
                            metadata: None,
                            legacy_members: members.iter().map(|m| m.hostname.clone()).collect(),
                            members,
                        });
                    }
                    let st = shared.lock();
                    let me = &st.nodes[t.idx];
                    let reachable =
                        st.etcd.is_some() && !(query_local && (!me.etcd_data || me.etcd_stopped()));
                    if !reachable {
                        unreachable.set(true);
                        return Err(Status::deadline_exceeded("context deadline exceeded"));
                    }
                    let any_running = st.etcd.iter().flatten().any(|m| st.etcd_active(m.node));
                    if !any_running {
                        // clientv3 waits for a member to connect to.
                        unreachable.set(true);
                        return Err(Status::deadline_exceeded("context deadline exceeded"));
                    }
                    if !st.etcd_has_leader() {
                        return Err(Status::unknown(EtcdRefusal::NoLeader.text()));
                    }
                    member_list(&st)
                });
            let waiting = unreachable.get() && deadline.is_none_or(|d| Instant::now() < d);
            if !waiting {
                return Ok(Response::new(EtcdMemberListResponse { messages: answer? }));
            }
            let nap = Duration::from_millis(100);
            let nap = deadline.map_or(nap, |d| {
                nap.min(d.saturating_duration_since(Instant::now()))
            });
            tokio::time::sleep(nap).await;
        }
    }

    /// Upstream (`v1alpha1_server.go` EtcdRemoveMemberByID @ v1.13.9): the control-plane check,
    /// then etcd's own; a member etcd does not know is NotFound, every other refusal Unknown
    /// with Talos's two prefixes, the id in decimal.
    async fn etcd_remove_member_by_id(
        &self,
        request: Request<EtcdRemoveMemberByIdRequest>,
    ) -> Result<Response<EtcdRemoveMemberByIdResponse>, Status> {
        let shared = self.shared().clone();
        let id = request.get_ref().member_id;
        let messages = self
            .0
            .unary(request.metadata(), &path("EtcdRemoveMemberByID"), |t| {
                etcd_node_check(&shared, t, "etcd remove member")?;
                if let Some(real) = &shared.real {
                    real_etcd::remove_member(&shared, real, t.idx, id)?;
                    return one(EtcdRemoveMemberById { metadata: None });
                }
                let mut st = shared.lock();
                let ip = st.nodes[t.idx].address.to_string();
                let members = st.etcd.as_ref().ok_or_else(|| etcd_refused(&ip))?;
                // The etcd client goes to any control plane, so a member that serves answers
                // even when this node's own etcd does not.
                let via = if st.nodes[t.idx].etcd_data && !st.nodes[t.idx].etcd_stopped() {
                    t.idx
                } else {
                    members
                        .iter()
                        .map(|m| m.node)
                        .find(|&n| st.nodes[n].up && !st.nodes[n].etcd_stopped())
                        .ok_or_else(|| Status::unknown("etcdserver: no leader"))?
                };
                match st.may_remove_member(via, id) {
                    Err(EtcdRefusal::MemberNotFound) => {
                        return Err(Status::not_found(format!(
                            "failed to remove member {id}: {}",
                            EtcdRefusal::MemberNotFound.text()
                        )));
                    }
                    Err(refusal) => {
                        return Err(Status::unknown(format!(
                            "failed to remove member: failed to remove member {id}: {}",
                            refusal.text()
                        )));
                    }
                    Ok(()) => {}
                }
                let node = members
                    .iter()
                    .find(|m| m.id == id)
                    .map(|m| m.node)
                    .unwrap_or(usize::MAX);
                st.leave_etcd(node);
                one(EtcdRemoveMemberById { metadata: None })
            })?;
        Ok(Response::new(EtcdRemoveMemberByIdResponse { messages }))
    }

    /// Upstream (`v1alpha1_server.go` EtcdLeaveCluster, `LeaveCluster` in
    /// `internal/pkg/etcd/etcd.go` @ v1.13.9): the node removes its own member, stops etcd and
    /// wipes its data. Without a running member it waits 3 minutes for its member id and fails;
    /// an "unhealthy cluster" refusal is retried for 5 minutes. The simulator answers those at
    /// once with the error upstream ends with.
    async fn etcd_leave_cluster(
        &self,
        request: Request<EtcdLeaveClusterRequest>,
    ) -> Result<Response<EtcdLeaveClusterResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("EtcdLeaveCluster"), |t| {
                etcd_node_check(&shared, t, "etcd leave")?;
                if let Some(real) = &shared.real {
                    real_etcd::leave(&shared, real, t.idx).map_err(|why| {
                        Status::unknown(format!("failed to leave cluster: {why}"))
                    })?;
                    return one(EtcdLeaveCluster { metadata: None });
                }
                let mut st = shared.lock();
                let me = &st.nodes[t.idx];
                let own = st
                    .etcd
                    .as_ref()
                    .and_then(|ms| ms.iter().find(|m| m.node == t.idx))
                    .map(|m| m.id);
                let Some(id) = own.filter(|_| me.etcd_data && !me.etcd_stopped()) else {
                    return Err(Status::unknown(
                        "failed to leave cluster: failed to get local etcd member ID: context deadline exceeded",
                    ));
                };
                if let Err(refusal) = st.may_remove_member(t.idx, id) {
                    return Err(Status::unknown(format!(
                        "failed to leave cluster: failed to remove member {id}: {}",
                        refusal.text()
                    )));
                }
                st.leave_etcd(t.idx);
                one(EtcdLeaveCluster { metadata: None })
            })?;
        Ok(Response::new(EtcdLeaveClusterResponse { messages }))
    }

    /// Upstream (`v1alpha1_server.go` EtcdRecover @ v1.13.9 and v1.14.1): FailedPrecondition until
    /// EPHEMERAL is mounted, and the control-plane check, both before the stream is read; then each
    /// chunk goes to disk as it comes, with no limit on the size and no deadline but the caller's.
    /// At v1.13.9 the upload truncates `/var/lib/etcd.snapshot` as it starts (and removes it when
    /// the stream breaks); at v1.14.1 it goes to a temporary file renamed over the old one once
    /// complete, so a broken upload keeps the earlier one. Nothing about the file is checked here.
    /// The `upload_bytes_per_sec` fault is a slow link: the stream is read no faster than that.
    async fn etcd_recover(
        &self,
        request: Request<tonic::Streaming<Data>>,
    ) -> Result<Response<EtcdRecoverResponse>, Status> {
        let shared = self.shared().clone();
        let md = request.metadata().clone();
        let takers = std::sync::Mutex::new(Vec::new());
        let messages = self.0.unary(&md, &path("EtcdRecover"), |t| {
            {
                let st = shared.lock();
                let n = &st.nodes[t.idx];
                if n.active.is_none() || !n.up {
                    return Err(Status::failed_precondition(
                        "etcd service is not ready for recovery yet",
                    ));
                }
            }
            etcd_node_check(&shared, t, "etcd recover")?;
            takers.lock().expect("not poisoned").push(t.idx);
            one(EtcdRecover { metadata: None })
        })?;
        let takers = takers.into_inner().unwrap_or_default();
        let rate = {
            let mut st = shared.lock();
            for &i in &takers {
                if crate::version::minor(&st.nodes[i].version) < 14 {
                    st.nodes[i].etcd_snapshot = None;
                }
            }
            takers
                .iter()
                .filter_map(|&i| st.nodes[i].faults.upload_bytes_per_sec)
                .min()
        };
        let mut stream = request.into_inner();
        let mut upload = crate::etcd_snapshot::Upload::default();
        // With the real backend the bytes are kept too, for etcd's restore: in a temporary
        // file renamed over the node's snapshot once the upload is complete.
        let mut kept = match &shared.real {
            Some(real) if !takers.is_empty() => {
                let old = {
                    let st = shared.lock();
                    takers
                        .iter()
                        .filter(|&&i| crate::version::minor(&st.nodes[i].version) < 14)
                        .map(|&i| real.snapshot_path(i))
                        .collect::<Vec<_>>()
                };
                for path in old {
                    let _ = std::fs::remove_file(path);
                }
                let tmp = real.snapshot_path(takers[0]).with_extension("upload");
                // A snapshot of a real cluster holds its secrets: owner-only, as Talos keeps it.
                let file = std::os::unix::fs::OpenOptionsExt::mode(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true),
                    0o600,
                )
                .open(&tmp)
                .map_err(|e| Status::internal(format!("keeping the snapshot: {e}")))?;
                Some((tmp, file))
            }
            _ => None,
        };
        let started = Instant::now();
        while let Some(chunk) = stream.message().await? {
            upload.push(&chunk.bytes);
            if let Some((_, file)) = kept.as_mut() {
                file.write_all(&chunk.bytes)
                    .map_err(|e| Status::internal(format!("keeping the snapshot: {e}")))?;
            }
            if let Some(rate) = rate {
                let due = Duration::from_secs_f64(upload.size() as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
        // tonic's server reads a client's reset (RST_STREAM CANCEL: a deadline that passed, a
        // file that could not be read) as the end of the stream, where grpc-go's Recv, and so
        // Talos, fails with Canceled and keeps nothing. Once this call waits, hyper sees the reset
        // and drops it, so only an upload that really ended is kept. A yield was not always
        // enough on a loaded machine (a CI run kept half an upload): the call waits 100 ms.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let uploaded = upload.finish();
        if let (Some(real), Some((tmp, file))) = (&shared.real, kept) {
            drop(file);
            // Each node's file appears whole or not at all (a copy keeps the 0600 mode).
            for &i in &takers {
                let path = real.snapshot_path(i);
                let part = path.with_extension("part");
                if std::fs::copy(&tmp, &part).is_ok() {
                    let _ = std::fs::rename(&part, &path);
                }
            }
            let _ = std::fs::remove_file(tmp);
        }
        let mut st = shared.lock();
        for i in takers {
            st.nodes[i].etcd_snapshot = Some(uploaded.clone());
        }
        Ok(Response::new(EtcdRecoverResponse { messages }))
    }

    async fn etcd_forfeit_leadership(
        &self,
        request: Request<EtcdForfeitLeadershipRequest>,
    ) -> Result<Response<EtcdForfeitLeadershipResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("EtcdForfeitLeadership"), |t| {
                etcd_node_check(&shared, t, "etcd forfeit leadership")?;
                let st = shared.lock();
                let me = &st.nodes[t.idx];
                if st.etcd.is_none() || !me.etcd_data {
                    return Err(etcd_refused("127.0.0.1"));
                }
                one(EtcdForfeitLeadership {
                    metadata: None,
                    member: me.hostname.clone(),
                })
            })?;
        Ok(Response::new(EtcdForfeitLeadershipResponse { messages }))
    }

    type EtcdSnapshotStream = BoxStream<Data>;
    async fn etcd_snapshot(
        &self,
        request: Request<EtcdSnapshotRequest>,
    ) -> Result<Response<Self::EtcdSnapshotStream>, Status> {
        let shared = self.shared().clone();
        let s = self
            .0
            .streaming(request.metadata(), &path("EtcdSnapshot"), |t| {
                etcd_node_check(&shared, t, "etcd snapshot")?;
                if let Some(real) = &shared.real {
                    return Ok(chunks(
                        real_etcd::snapshot(&shared, real, t.idx)?,
                        16 * 1024,
                    ));
                }
                let st = shared.lock();
                let me = &st.nodes[t.idx];
                let Some(members) = st.etcd.as_ref() else {
                    return Err(etcd_refused("127.0.0.1"));
                };
                if !me.etcd_data || me.etcd_stopped() {
                    return Err(etcd_refused("127.0.0.1"));
                }
                // bbolt's meta pages and the SHA-256 trailer the etcd server appends, over a
                // marker of the cluster; several chunks long.
                Ok(chunks(crate::etcd_snapshot::make(members.len()), 16 * 1024))
            })?;
        Ok(Response::new(s))
    }

    async fn etcd_status(
        &self,
        request: Request<()>,
    ) -> Result<Response<EtcdStatusResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self.0.unary(request.metadata(), &path("EtcdStatus"), |t| {
            etcd_node_check(&shared, t, "etcd status")?;
            if let Some(real) = &shared.real {
                return one(EtcdStatus {
                    metadata: None,
                    member_status: Some(real_etcd::status(&shared, real, t.idx)?),
                });
            }
            let st = shared.lock();
            let me = &st.nodes[t.idx];
            let wrap = |s: Status| {
                Status::new(
                    s.code(),
                    format!("failed to query etcd status: {}", s.message()),
                )
            };
            let Some(members) = st.etcd.as_ref() else {
                return Err(wrap(etcd_refused("127.0.0.1")));
            };
            let Some(mine) = members.iter().find(|m| m.node == t.idx) else {
                return Err(wrap(etcd_refused("127.0.0.1")));
            };
            if me.etcd_stopped() {
                return Err(wrap(etcd_refused("127.0.0.1")));
            }
            let leader = members
                .iter()
                .find(|m| st.nodes.get(m.node).is_some_and(|n| !n.etcd_stopped()));
            one(EtcdStatus {
                metadata: None,
                member_status: Some(EtcdMemberStatus {
                    protocol_version: "3.6.5".into(),
                    db_size: 20 * 1024 * 1024,
                    db_size_in_use: 8 * 1024 * 1024,
                    leader: leader.map(|m| m.id).unwrap_or(0),
                    raft_index: 1000,
                    raft_term: 2,
                    raft_applied_index: 1000,
                    errors: vec![],
                    is_learner: mine.is_learner(),
                    member_id: mine.id,
                    storage_version: "3.6.0".into(),
                }),
            })
        })?;
        Ok(Response::new(EtcdStatusResponse { messages }))
    }

    async fn hostname(&self, request: Request<()>) -> Result<Response<HostnameResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self.0.unary(request.metadata(), &path("Hostname"), |t| {
            let st = shared.lock();
            one(Hostname {
                metadata: None,
                hostname: st.nodes[t.idx].hostname.clone(),
            })
        })?;
        Ok(Response::new(HostnameResponse { messages }))
    }

    type KubeconfigStream = BoxStream<Data>;
    async fn kubeconfig(
        &self,
        request: Request<()>,
    ) -> Result<Response<Self::KubeconfigStream>, Status> {
        let shared = self.shared().clone();
        let s = self
            .0
            .streaming(request.metadata(), &path("Kubeconfig"), |t| {
                let archive = kubeconfig(&shared, t)?;
                // The whole archive in a single message (api.md §17).
                Ok(Box::pin(tokio_stream::once(Ok(Data {
                    metadata: None,
                    bytes: archive,
                }))) as BoxStream<Data>)
            })?;
        Ok(Response::new(s))
    }

    type LogsStream = BoxStream<Data>;
    /// Upstream (`v1alpha1_server.go` Logs @ v1.13.9): the system namespace, and the kubelet, read
    /// a service's log from machined's in-memory log buffers (so a reboot starts them afresh, and
    /// a service that never wrote has an empty log); `tail_lines` >= 0 keeps the last lines.
    /// Other namespaces are container logs through the CRI, which the simulator does not run.
    async fn logs(
        &self,
        request: Request<LogsRequest>,
    ) -> Result<Response<Self::LogsStream>, Status> {
        let shared = self.shared().clone();
        let req = request.get_ref().clone();
        let s = self.0.streaming(request.metadata(), &path("Logs"), |t| {
            if req.namespace != "system" && req.id != "kubelet" {
                return Err(Status::unimplemented(
                    "talos-sim serves the logs of Talos's services only, not of containers",
                ));
            }
            let st = shared.lock();
            let lines = crate::service_logs::lines(&st.nodes[t.idx], &req.id);
            let keep = if req.tail_lines >= 0 {
                lines.len().saturating_sub(req.tail_lines as usize)
            } else {
                0
            };
            let text: String = lines[keep..].iter().map(|l| format!("{l}\n")).collect();
            Ok(chunks(text.into_bytes(), 4096))
        })?;
        Ok(Response::new(s))
    }

    async fn memory(&self, request: Request<()>) -> Result<Response<MemoryResponse>, Status> {
        let messages = self.0.unary(request.metadata(), &path("Memory"), |_| {
            one(Memory {
                metadata: None,
                meminfo: Some(MemInfo {
                    memtotal: 8_148_000,
                    memfree: 6_000_000,
                    memavailable: 7_000_000,
                }),
            })
        })?;
        Ok(Response::new(MemoryResponse { messages }))
    }

    type ReadStream = BoxStream<Data>;
    async fn read(
        &self,
        request: Request<ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let shared = self.shared().clone();
        let p = request.get_ref().path.clone();
        let s = self.0.streaming(request.metadata(), &path("Read"), |t| {
            let st = shared.lock();
            let n = &st.nodes[t.idx];
            let content = match p.as_str() {
                "/proc/sys/kernel/random/boot_id" => format!("{}\n", n.boot_id).into_bytes(),
                "/etc/hostname" => format!("{}\n", n.hostname).into_bytes(),
                "/proc" | "/proc/sys" | "/etc" | "/" => {
                    return Err(Status::unknown("path must be a regular file"));
                }
                _ => {
                    return Err(Status::not_found(format!(
                        "stat {p}: no such file or directory"
                    )));
                }
            };
            Ok(chunks(content, 1024))
        })?;
        Ok(Response::new(s))
    }

    async fn reboot(
        &self,
        request: Request<RebootRequest>,
    ) -> Result<Response<RebootResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self.0.unary(request.metadata(), &path("Reboot"), |t| {
            let actor = new_uuid();
            shared.reboot(t.idx, actor.clone(), "reboot");
            one(Reboot {
                metadata: None,
                actor_id: actor,
            })
        })?;
        Ok(Response::new(RebootResponse { messages }))
    }

    async fn shutdown(
        &self,
        request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        let shared = self.shared().clone();
        let force = request.get_ref().force;
        let messages = self.0.unary(request.metadata(), &path("Shutdown"), |t| {
            let actor = new_uuid();
            crate::shutdown::run(&shared, t.idx, actor.clone(), !force);
            one(Shutdown {
                metadata: None,
                actor_id: actor,
            })
        })?;
        Ok(Response::new(ShutdownResponse { messages }))
    }

    async fn reset(
        &self,
        request: Request<ResetRequest>,
    ) -> Result<Response<ResetResponse>, Status> {
        let shared = self.shared().clone();
        let req = request.get_ref().clone();
        let messages = self.0.unary(request.metadata(), &path("Reset"), |t| {
            let plan = crate::reset::plan(&shared.lock().nodes[t.idx], &req)?;
            let actor = new_uuid();
            crate::reset::run(&shared, t.idx, plan, actor.clone());
            one(Reset {
                metadata: None,
                actor_id: actor,
            })
        })?;
        Ok(Response::new(ResetResponse { messages }))
    }

    async fn service_list(
        &self,
        request: Request<()>,
    ) -> Result<Response<ServiceListResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("ServiceList"), |t| {
                let st = shared.lock();
                let n = &st.nodes[t.idx];
                let at = n.config_updated;
                let services = service_states(&st, t.idx)
                    .into_iter()
                    .map(|(name, state, healthy, msg)| service_info(name, state, healthy, &msg, at))
                    .collect();
                one(ServiceList {
                    metadata: None,
                    services,
                })
            })?;
        Ok(Response::new(ServiceListResponse { messages }))
    }

    async fn service_restart(
        &self,
        request: Request<ServiceRestartRequest>,
    ) -> Result<Response<ServiceRestartResponse>, Status> {
        let id = request.get_ref().id.clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("ServiceRestart"), |_| {
                one(ServiceRestart {
                    metadata: None,
                    resp: format!("Service {id:?} restarted"),
                })
            })?;
        Ok(Response::new(ServiceRestartResponse { messages }))
    }

    async fn service_start(
        &self,
        request: Request<ServiceStartRequest>,
    ) -> Result<Response<ServiceStartResponse>, Status> {
        let id = request.get_ref().id.clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("ServiceStart"), |_| {
                one(ServiceStart {
                    metadata: None,
                    resp: format!("Service {id:?} started"),
                })
            })?;
        Ok(Response::new(ServiceStartResponse { messages }))
    }

    async fn service_stop(
        &self,
        request: Request<ServiceStopRequest>,
    ) -> Result<Response<ServiceStopResponse>, Status> {
        let id = request.get_ref().id.clone();
        let messages = self
            .0
            .unary(request.metadata(), &path("ServiceStop"), |_| {
                one(ServiceStop {
                    metadata: None,
                    resp: format!("Service {id:?} stopped"),
                })
            })?;
        Ok(Response::new(ServiceStopResponse { messages }))
    }

    async fn upgrade(
        &self,
        request: Request<UpgradeRequest>,
    ) -> Result<Response<UpgradeResponse>, Status> {
        let shared = self.shared().clone();
        let req = request.get_ref().clone();
        let messages = self.0.unary(request.metadata(), &path("Upgrade"), |t| {
            let actor = crate::upgrade::upgrade(&shared, t, &req)?;
            one(Upgrade {
                metadata: None,
                ack: "Upgrade request received".into(),
                actor_id: actor,
            })
        })?;
        Ok(Response::new(UpgradeResponse { messages }))
    }

    async fn version(&self, request: Request<()>) -> Result<Response<VersionResponse>, Status> {
        let shared = self.shared().clone();
        let messages = self.0.unary(request.metadata(), &path("Version"), |t| {
            let st = shared.lock();
            let n = &st.nodes[t.idx];
            one(Version {
                metadata: None,
                version: Some(VersionInfo {
                    tag: n.version.clone(),
                    sha: sha_of(&n.version),
                    built: String::new(),
                    go_version: "go1.25.5".into(),
                    os: "linux".into(),
                    arch: "amd64".into(),
                }),
                platform: Some(PlatformInfo {
                    name: "metal".into(),
                    mode: "metal".into(),
                }),
                features: (!n.maintenance()).then_some(FeaturesInfo { rbac: true }),
            })
        })?;
        Ok(Response::new(VersionResponse { messages }))
    }

    async fn generate_client_configuration(
        &self,
        request: Request<GenerateClientConfigurationRequest>,
    ) -> Result<Response<GenerateClientConfigurationResponse>, Status> {
        let shared = self.shared().clone();
        let roles = request.get_ref().roles.clone();
        let messages = self.0.unary(request.metadata(), &path("GenerateClientConfiguration"), |t| {
            let cfg = {
                let st = shared.lock();
                st.nodes[t.idx].active.clone()
            };
            let Some((ca, Some(key))) = cfg.as_ref().and_then(|c| c.os_ca()) else {
                return Err(Status::failed_precondition("client configuration is only available on control plane nodes"));
            };
            let role_refs: Vec<&str> = roles.iter().map(String::as_str).collect();
            let issued = pki::issue_client_cert(&ca, &key, &role_refs)
                .map_err(|e| Status::internal(format!("failed to generate client certificate: {e}")))?;
            let name = cfg.as_ref().map(|c| c.cluster_name()).unwrap_or_default();
            let context = match roles.as_slice() {
                [r] => format!("{}@{name}", r.trim_start_matches("os:")),
                _ => name.clone(),
            };
            let b64 = |s: &str| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
            };
            let talosconfig = format!(
                "context: {context}\ncontexts:\n    {context}:\n        endpoints: []\n        ca: {}\n        crt: {}\n        key: {}\n",
                b64(&ca),
                b64(&issued.cert_pem),
                b64(&issued.key_pem)
            );
            one(GenerateClientConfiguration {
                metadata: None,
                ca: ca.into_bytes(),
                crt: issued.cert_pem.into_bytes(),
                key: issued.key_pem.into_bytes(),
                talosconfig: talosconfig.into_bytes(),
            })
        })?;
        Ok(Response::new(GenerateClientConfigurationResponse {
            messages,
        }))
    }

    async fn image_pull(
        &self,
        request: Request<ImagePullRequest>,
    ) -> Result<Response<ImagePullResponse>, Status> {
        let shared = self.shared().clone();
        let reference = request.get_ref().reference.clone();
        let messages = self.0.unary(request.metadata(), &path("ImagePull"), |t| {
            if reference.trim().is_empty() {
                return Err(Status::invalid_argument("image reference is required"));
            }
            shared.lock().nodes[t.idx].images.insert(reference.clone());
            one(ImagePull { metadata: None })
        })?;
        Ok(Response::new(ImagePullResponse { messages }))
    }
}

/// The member list etcd answers (any reachable member answers the same).
fn member_list(st: &state::State) -> Result<Vec<EtcdMembers>, Status> {
    let Some(members) = st.etcd.as_ref() else {
        return Err(Status::deadline_exceeded("context deadline exceeded"));
    };
    let list: Vec<EtcdMember> = members
        .iter()
        .filter_map(|m| st.nodes.get(m.node).map(|n| (m, n)))
        .map(|(m, n)| EtcdMember {
            id: m.id,
            hostname: n.hostname.clone(),
            peer_urls: vec![format!("https://{}:2380", n.address)],
            client_urls: vec![format!("https://{}:2379", n.address)],
            is_learner: m.is_learner(),
        })
        .collect();
    one(EtcdMembers {
        metadata: None,
        legacy_members: list.iter().map(|m| m.hostname.clone()).collect(),
        members: list,
    })
}
