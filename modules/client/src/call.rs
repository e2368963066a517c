//! How one call is made: the request with its deadline and `node` metadata, the deadline on the
//! client side too, retries of idempotent reads, server streams run to their end, and errors
//! named after the node and the operation.

use std::future::Future;
use std::time::Duration;

use ferro_talos_proto::cluster::HealthCheckProgress;
use ferro_talos_proto::common;
use ferro_talos_proto::machine;
use tonic::{Request, Response, Status, Streaming};

use crate::client::TalosClient;
use crate::error::{ClientError, ErrorKind, Result, human_duration};

impl TalosClient {
    pub(crate) fn request<T>(&self, msg: T, timeout: Duration) -> Result<Request<T>> {
        let mut req = Request::new(msg);
        req.set_timeout(timeout);
        if let Some(node) = &self.node {
            let value = node.parse().map_err(|_| {
                ClientError::new(
                    node,
                    "set node metadata",
                    ErrorKind::InvalidEndpoint,
                    "the node name is not valid gRPC metadata (expected an address or host name)",
                )
            })?;
            req.metadata_mut().insert("node", value);
        }
        Ok(req)
    }

    fn err(&self, op: &str, status: &Status) -> ClientError {
        ClientError::from_status(self.target(), op, status).with_credentials(self.credentials())
    }

    /// A failed call. tonic enforces the request deadline itself and usually fires just before our
    /// own timer, so its local "Timeout expired" is reported like ours, with the limit that ran out.
    /// A DeadlineExceeded sent by the node keeps the node's message: it says what was still waiting.
    pub(crate) fn call_err(&self, op: &str, status: &Status, limit: Duration) -> ClientError {
        let local_deadline = status.code() == tonic::Code::Cancelled
            && status.message().eq_ignore_ascii_case("timeout expired");
        if local_deadline {
            self.timeout_err(op, limit)
        } else {
            self.err(op, status)
        }
    }

    pub(crate) fn timeout_err(&self, op: &str, after: Duration) -> ClientError {
        ClientError::new(
            self.target(),
            op,
            ErrorKind::Timeout,
            format!("no answer within {}", human_duration(after)),
        )
    }

    /// One unary call with the client-side deadline.
    pub(crate) async fn unary<R>(
        &self,
        op: &str,
        call: impl Future<Output = std::result::Result<Response<R>, Status>>,
    ) -> Result<R> {
        self.unary_within(op, self.opts.call_timeout, call).await
    }

    /// One unary call with a longer deadline than a call's, for those the node answers only
    /// after long work (the legacy upgrade and image pull pull the image first).
    pub(crate) async fn unary_within<R>(
        &self,
        op: &str,
        limit: Duration,
        call: impl Future<Output = std::result::Result<Response<R>, Status>>,
    ) -> Result<R> {
        match tokio::time::timeout(limit, call).await {
            Err(_) => Err(self.timeout_err(op, limit)),
            Ok(Err(status)) => Err(self.call_err(op, &status, limit)),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
        }
    }

    /// Retry an idempotent read while the node is unreachable (e.g. rebooting).
    pub(crate) async fn read<R, F, Fut>(&self, op: &str, mut attempt: F) -> Result<R>
    where
        F: FnMut() -> Result<Fut>,
        Fut: Future<Output = std::result::Result<Response<R>, Status>>,
    {
        self.retrying(|| {
            let call = attempt();
            async move { self.unary(op, call?).await }
        })
        .await
    }

    /// Run `attempt` again, with a doubling delay, while it fails because the node is
    /// unreachable and the retry budget lasts. Only for what is safe to repeat.
    pub(crate) async fn retrying<R, Fut>(&self, mut attempt: impl FnMut() -> Fut) -> Result<R>
    where
        Fut: Future<Output = Result<R>>,
    {
        let mut delay = self.opts.retry_backoff;
        let mut left = self.opts.read_retries;
        loop {
            match attempt().await {
                Err(e) if e.kind.is_transient() && left > 0 => {
                    left -= 1;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }

    /// Run a server stream to its end under the stream deadline, handing each
    /// message to `each`.
    pub(crate) async fn stream<T>(
        &self,
        op: &str,
        limit: Duration,
        start: impl Future<Output = std::result::Result<Response<Streaming<T>>, Status>>,
        mut each: impl FnMut(T) -> Result<()>,
    ) -> Result<()> {
        let work = async {
            let mut stream = start
                .await
                .map_err(|s| self.call_err(op, &s, limit))?
                .into_inner();
            while let Some(item) = stream
                .message()
                .await
                .map_err(|s| self.call_err(op, &s, limit))?
            {
                each(item)?;
            }
            Ok(())
        };
        match tokio::time::timeout(limit, work).await {
            Err(_) => Err(self.timeout_err(op, limit)),
            Ok(r) => r,
        }
    }

    /// [`Self::stream`] for replies that carry proxy metadata: a message whose metadata reports
    /// an error ends the stream with that error.
    pub(crate) async fn stream_checked<T: HasMetadata>(
        &self,
        op: &str,
        limit: Duration,
        start: impl Future<Output = std::result::Result<Response<Streaming<T>>, Status>>,
        mut each: impl FnMut(T) -> Result<()>,
    ) -> Result<()> {
        self.stream(op, limit, start, |item| {
            check_metadata(self.target(), op, item.metadata())?;
            each(item)
        })
        .await
    }

    /// Every message of a server stream, in the order the node sent them.
    pub(crate) async fn collect<T>(
        &self,
        op: &str,
        limit: Duration,
        start: impl Future<Output = std::result::Result<Response<Streaming<T>>, Status>>,
    ) -> Result<Vec<T>> {
        let mut items = Vec::new();
        self.stream(op, limit, start, |item| {
            items.push(item);
            Ok(())
        })
        .await?;
        Ok(items)
    }

    /// The bytes of a `Data` stream (a file, an archive), its chunks joined in order.
    pub(crate) async fn collect_bytes(
        &self,
        op: &str,
        limit: Duration,
        start: impl Future<Output = std::result::Result<Response<Streaming<common::Data>>, Status>>,
    ) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        self.stream_checked(op, limit, start, |chunk| {
            data.extend_from_slice(&chunk.bytes);
            Ok(())
        })
        .await?;
        Ok(data)
    }

    /// The single reply item of a one-to-one call.
    pub(crate) fn first<T: HasMetadata>(&self, op: &str, messages: Vec<T>) -> Result<T> {
        let item = messages.into_iter().next().ok_or_else(|| {
            ClientError::new(self.target(), op, ErrorKind::Other, "the reply was empty")
        })?;
        check_metadata(self.target(), op, item.metadata())?;
        Ok(item)
    }
}

/// Reply items that carry proxy metadata (field 1).
pub(crate) trait HasMetadata {
    fn metadata(&self) -> Option<&common::Metadata>;
}

macro_rules! has_metadata {
    ($($t:ty),* $(,)?) => {
        $(impl HasMetadata for $t {
            fn metadata(&self) -> Option<&common::Metadata> {
                self.metadata.as_ref()
            }
        })*
    };
}

has_metadata!(
    machine::Version,
    machine::Hostname,
    machine::ServiceList,
    machine::Memory,
    machine::ApplyConfiguration,
    machine::Bootstrap,
    machine::EtcdMembers,
    machine::EtcdStatus,
    machine::EtcdRemoveMemberById,
    machine::EtcdLeaveCluster,
    machine::Reboot,
    machine::Shutdown,
    machine::EtcdRecover,
    machine::Reset,
    machine::Upgrade,
    machine::ImagePull,
    common::Data,
    HealthCheckProgress,
);

/// A reply item whose metadata carries an error is a failure (one-to-many
/// proxying reports failures that way; harmless to check otherwise).
pub(crate) fn check_metadata(node: &str, op: &str, md: Option<&common::Metadata>) -> Result<()> {
    let Some(md) = md else { return Ok(()) };
    if md.error.is_empty() {
        return Ok(());
    }
    let code = md.status.as_ref().map(|s| s.code).unwrap_or(2);
    let status = Status::new(tonic::Code::from_i32(code), md.error.clone());
    let node = if md.hostname.is_empty() {
        node
    } else {
        &md.hostname
    };
    Err(ClientError::from_status(node, op, &status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_error_becomes_a_client_error() {
        let md = common::Metadata {
            hostname: "10.5.0.3".into(),
            error: "etcd data directory is not empty".into(),
            status: Some(ferro_talos_proto::google::rpc::Status {
                code: tonic::Code::AlreadyExists as i32,
                message: "etcd data directory is not empty".into(),
                details: vec![],
            }),
        };
        let err = check_metadata("ep", "bootstrap etcd", Some(&md)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::AlreadyExists);
        assert_eq!(err.node, "10.5.0.3");
        check_metadata("ep", "x", Some(&common::Metadata::default())).unwrap();
    }
}
