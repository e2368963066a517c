//! etcd on a control-plane node: bootstrap, membership, status and snapshots.

use std::time::Duration;

use ferro_talos_proto::common;
use ferro_talos_proto::machine::{
    self, BootstrapRequest, EtcdMemberListRequest, EtcdRemoveMemberByIdRequest, EtcdSnapshotRequest,
};

use crate::client::TalosClient;
use crate::error::{ClientError, ErrorKind, Result};

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

    /// Uploads an etcd snapshot for a recovery (`talosctl bootstrap --recover-from` streams it the
    /// same way); it replaces an earlier upload.
    pub async fn etcd_recover(&self, snapshot: Vec<u8>) -> Result<()> {
        let op = "upload the etcd snapshot";
        let chunks: Vec<common::Data> = snapshot
            .chunks(1 << 20)
            .map(|c| common::Data {
                metadata: None,
                bytes: c.to_vec(),
            })
            .collect();
        let req = self.request(tokio_stream::iter(chunks), self.opts.stream_timeout)?;
        let resp = self.unary(op, self.machine().etcd_recover(req)).await?;
        self.first(op, resp.messages).map(|_| ())
    }

    /// etcd members as seen by this node. Not retried: Unavailable here usually
    /// means etcd is not running, which is an answer, not a transient failure.
    pub async fn etcd_member_list(&self) -> Result<Vec<machine::EtcdMember>> {
        let op = "list etcd members";
        let req = self.request(
            EtcdMemberListRequest { query_local: false },
            self.opts.call_timeout,
        )?;
        let resp = self.unary(op, self.machine().etcd_member_list(req)).await?;
        Ok(self.first(op, resp.messages)?.members)
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
        let req = self.request(
            EtcdRemoveMemberByIdRequest { member_id },
            self.opts.call_timeout,
        )?;
        let resp = self
            .unary(op, self.machine().etcd_remove_member_by_id(req))
            .await?;
        self.first(op, resp.messages).map(|_| ())
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
