//! etcd on a control-plane node: bootstrap, membership, status and snapshots.

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use ferro_talos_proto::common;
use ferro_talos_proto::machine::{
    self, BootstrapRequest, EtcdMemberListRequest, EtcdRemoveMemberByIdRequest, EtcdSnapshotRequest,
};

use crate::client::TalosClient;
use crate::error::{ClientError, ErrorKind, Result, human_duration};
use tokio::sync::oneshot;
use tokio_stream::Stream;

/// One message of an upload. talosctl sends 4 KiB ones (`pkg/machinery/client/client.go`
/// EtcdRecover @ v1.14.1); larger ones are fewer messages, and 1 MiB stays far below what a gRPC
/// server takes by default (4 MiB; Talos takes 32 MiB, `constants.GRPCMaxMessageSize`).
const UPLOAD_CHUNK: u64 = 1 << 20;

/// How long a member list asks again while etcd says it has no leader: long enough for a new
/// election after the leader went down, short enough that a lost quorum is said soon.
const ELECTION_WAIT: Duration = Duration::from_secs(6);
const NO_LEADER_RETRY: Duration = Duration::from_millis(250);
/// How long a removal asks again while etcd calls the cluster unhealthy. etcd refuses to remove a
/// voting member while fewer than a quorum of the others have been connected for its
/// `HealthInterval` (5 s), and counts a member that just went down as connected until its peer
/// stream breaks (`mayRemoveMember` in server/etcdserver/server.go @ v3.7.1): right after a
/// control plane goes down the refusal is passing. Talos's own leave retries it the same way
/// (every 10 s for 5 minutes, `LeaveCluster` in internal/pkg/etcd/etcd.go @ v1.14.1).
const UNHEALTHY_WAIT: Duration = Duration::from_secs(12);
const UNHEALTHY_RETRY: Duration = Duration::from_secs(1);

/// A size for messages: `256.0 MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A snapshot as upload messages, each chunk read when the connection asks for the next one (a
/// local file, so a read is short enough for the runtime's thread). A read error does not end the
/// stream: a stream that ends is a complete upload to the node, which would restore a cut-off
/// snapshot. The error goes to `failed` instead, the stream stays pending, and the caller drops
/// the call, which the node sees as cancelled.
struct Chunks<R> {
    reader: R,
    failed: Option<oneshot::Sender<std::io::Error>>,
    /// Bytes handed to the connection so far.
    sent: Arc<AtomicU64>,
}

impl<R: Read + Unpin> Stream for Chunks<R> {
    type Item = common::Data;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<common::Data>> {
        let this = self.get_mut();
        if this.failed.is_none() {
            return Poll::Pending;
        }
        let mut bytes = Vec::with_capacity(UPLOAD_CHUNK as usize);
        match (&mut this.reader)
            .take(UPLOAD_CHUNK)
            .read_to_end(&mut bytes)
        {
            Ok(0) => Poll::Ready(None),
            Ok(n) => {
                this.sent.fetch_add(n as u64, Ordering::Relaxed);
                Poll::Ready(Some(common::Data {
                    metadata: None,
                    bytes,
                }))
            }
            Err(e) => {
                if let Some(failed) = this.failed.take() {
                    let _ = failed.send(e);
                }
                Poll::Pending
            }
        }
    }
}

impl TalosClient {
    /// Bootstrap etcd. `AlreadyExists` comes back as `ErrorKind::AlreadyExists`.
    pub async fn bootstrap(&self) -> Result<()> {
        let op = "bootstrap etcd";
        let req = self.request(BootstrapRequest::default(), self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().bootstrap(req)).await?;
        self.first(op, resp.messages).map(|_| ())
    }

    /// Bootstrap etcd from the snapshot uploaded with [`TalosClient::etcd_recover`]. Talos answers
    /// at once; the etcd service restores the snapshot afterwards, and a failure shows only in
    /// its state.
    pub async fn bootstrap_recover(&self, skip_hash_check: bool) -> Result<()> {
        let op = "bootstrap etcd from the snapshot";
        let req = self.request(
            BootstrapRequest {
                recover_etcd: true,
                recover_skip_hash_check: skip_hash_check,
            },
            self.opts.call_timeout,
        )?;
        let resp = self.unary(op, self.machine().bootstrap(req)).await?;
        self.first(op, resp.messages).map(|_| ())
    }

    /// Uploads an etcd snapshot for a recovery, replacing an earlier upload, as `talosctl bootstrap
    /// --recover-from` streams it. The snapshot is read a chunk at a time as the connection takes
    /// it, so a snapshot of hundreds of MiB costs a few chunks of memory. `limit` bounds the whole
    /// upload: Talos reads until the stream ends with no limit of its own, and talosctl sets none
    /// (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go` EtcdRecover,
    /// `pkg/machinery/client/client.go` EtcdRecover @ v1.14.1), so the caller's deadline is the
    /// only one. Returns the number of bytes sent.
    pub async fn etcd_recover<R>(&self, snapshot: R, limit: Duration) -> Result<u64>
    where
        R: Read + Send + Unpin + 'static,
    {
        let op = "upload the etcd snapshot";
        let (failed, read_failure) = oneshot::channel();
        let sent = Arc::new(AtomicU64::new(0));
        let chunks = Chunks {
            reader: snapshot,
            failed: Some(failed),
            sent: sent.clone(),
        };
        let timed_out = || {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Timeout,
                format!(
                    "{} of the snapshot sent when the deadline ({}) passed",
                    mib(sent.load(Ordering::Relaxed)),
                    human_duration(limit)
                ),
            )
        };
        let req = self.request(chunks, limit)?;
        let mut machine = self.machine();
        let upload = async {
            tokio::select! {
                reply = machine.etcd_recover(req) => reply.map_err(|s| self.call_err(op, &s, limit)),
                // The stream stays pending after a read error; dropping the call here cancels
                // it, so the node discards what it got instead of taking a cut-off snapshot.
                Ok(e) = read_failure => Err(ClientError::new(
                    self.target(),
                    op,
                    ErrorKind::Other,
                    format!(
                        "reading the snapshot failed after {} ({e}); the upload was cancelled",
                        mib(sent.load(Ordering::Relaxed))
                    ),
                )),
            }
        };
        let resp = match tokio::time::timeout(limit, upload).await {
            Err(_) => return Err(timed_out()),
            // tonic's own timer on the request's deadline, or the node's: the same deadline.
            Ok(Err(e)) if e.kind == ErrorKind::Timeout => return Err(timed_out()),
            Ok(r) => r?.into_inner(),
        };
        self.first(op, resp.messages)?;
        Ok(sent.load(Ordering::Relaxed))
    }

    /// etcd members as seen by this node. Not retried: Unavailable here usually
    /// means etcd is not running, which is an answer, not a transient failure.
    pub async fn etcd_member_list(&self) -> Result<Vec<machine::EtcdMember>> {
        self.etcd_member_list_within(self.opts.call_timeout).await
    }

    /// [`TalosClient::etcd_member_list`] with its own deadline. Talos asks etcd with a client
    /// that waits for a connection (`NewClient` in `internal/pkg/etcd/etcd.go` @ v1.14.1), so
    /// where no etcd answers (before bootstrap) the call blocks until the deadline: a short one
    /// turns that into an answer (`ErrorKind::Timeout`) instead of a long wait.
    pub async fn etcd_member_list_within(
        &self,
        limit: std::time::Duration,
    ) -> Result<Vec<machine::EtcdMember>> {
        let op = "list etcd members";
        let started = std::time::Instant::now();
        loop {
            let req = self.request(EtcdMemberListRequest { query_local: false }, limit)?;
            let answer = self
                .unary_within(op, limit, self.machine().etcd_member_list(req))
                .await;
            match answer {
                Ok(resp) => return Ok(self.first(op, resp.messages)?.members),
                // A leader that went away leaves etcd without one until the others elect anew,
                // about one election timeout (1 s by default, etcd `embed/config.go` @ v3.7.1;
                // Talos sets none); only a lost quorum lasts.
                Err(e)
                    if e.kind == ErrorKind::EtcdNoLeader
                        && started.elapsed() + NO_LEADER_RETRY < limit.min(ELECTION_WAIT) =>
                {
                    tokio::time::sleep(NO_LEADER_RETRY).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub async fn etcd_status(&self) -> Result<machine::EtcdMemberStatus> {
        let op = "read etcd status";
        let req = self.request((), self.opts.call_timeout)?;
        let resp = self.unary(op, self.machine().etcd_status(req)).await?;
        Ok(self
            .first(op, resp.messages)?
            .member_status
            .unwrap_or_default())
    }

    pub async fn etcd_remove_member_by_id(&self, member_id: u64) -> Result<()> {
        let op = "remove etcd member";
        let started = std::time::Instant::now();
        loop {
            let req = self.request(
                EtcdRemoveMemberByIdRequest { member_id },
                self.opts.call_timeout,
            )?;
            match self
                .unary(op, self.machine().etcd_remove_member_by_id(req))
                .await
            {
                Ok(resp) => return self.first(op, resp.messages).map(|_| ()),
                Err(e)
                    if e.to_string().contains("etcdserver: unhealthy cluster")
                        && started.elapsed() + UNHEALTHY_RETRY < UNHEALTHY_WAIT =>
                {
                    tokio::time::sleep(UNHEALTHY_RETRY).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The node this client targets leaves etcd. Talos may take minutes to answer: it waits up to
    /// 3 minutes for its own member's id, retries the removal every 10 s for up to 5 minutes while
    /// etcd calls the cluster unhealthy, then stops etcd (up to 10 s before it is killed) and
    /// wipes its data (`internal/pkg/etcd/etcd.go` LeaveCluster, `internal/pkg/etcd/local.go`
    /// GetLocalMemberID, `internal/app/machined/pkg/system/runner/runner.go`
    /// GracefulShutdownTimeout @ v1.13.9 and v1.14.1). So the caller gives the deadline, `limit`.
    pub async fn etcd_leave_cluster(&self, limit: Duration) -> Result<()> {
        let op = "leave etcd cluster";
        let req = self.request(machine::EtcdLeaveClusterRequest {}, limit)?;
        let resp = self
            .unary_within(op, limit, self.machine().etcd_leave_cluster(req))
            .await?;
        self.first(op, resp.messages).map(|_| ())
    }

    /// Stream an etcd snapshot into `out`; returns the number of bytes written.
    pub async fn etcd_snapshot(&self, out: &mut impl std::io::Write) -> Result<u64> {
        let op = "etcd snapshot";
        let limit = self.opts.stream_timeout;
        let req = self.request(EtcdSnapshotRequest {}, limit)?;
        let mut written = 0u64;
        self.stream_checked(
            op,
            limit,
            self.machine().etcd_snapshot(req),
            |chunk: common::Data| {
                out.write_all(&chunk.bytes).map_err(|e| {
                    ClientError::new(
                        self.target(),
                        op,
                        ErrorKind::Other,
                        format!("writing the snapshot failed: {e}"),
                    )
                })?;
                written += chunk.bytes.len() as u64;
                Ok(())
            },
        )
        .await?;
        Ok(written)
    }
}
