//! apid's `node`/`nodes` routing (api.md §3), the reply envelope metadata and the role table
//! (api.md §4). Forwarding is dispatched in-process to the target node's state, with the same
//! rules a real apid applies.

use std::pin::Pin;
use std::sync::Arc;

use ferro_talos_proto::common::Metadata;
use ferro_talos_proto::google::rpc::Status as RpcStatus;
use tokio_stream::{Stream, StreamExt, StreamMap};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use crate::state::Shared;

pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// One accepted connection: which node's apid it reached and who the peer is.
#[derive(Clone)]
pub struct Ctx {
    pub shared: Arc<Shared>,
    pub endpoint: usize,
    pub roles: Arc<Vec<String>>,
    /// The endpoint was in maintenance mode when the connection was accepted.
    pub maintenance: bool,
}

/// The node that serves a request, with the roles its machined sees.
#[derive(Clone, Debug)]
pub struct Target {
    pub idx: usize,
    pub roles: Arc<Vec<String>>,
}

impl Target {
    pub fn is_admin(&self) -> bool {
        self.roles.iter().any(|r| r == "os:admin")
    }
}

enum Route {
    Local,
    One(String),
    Many(Vec<String>),
}

const MANY_PREFIXES: &[&str] = &[
    "/machine.MachineService/",
    "/cluster.ClusterService/",
    "/inspect.InspectService/",
    "/storage.StorageService/",
    "/time.TimeService/",
];

fn values(md: &MetadataMap, key: &str) -> Vec<String> {
    md.get_all(key)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(String::from)
        .collect()
}

/// Go's `status.Error(...).Error()` text, which apid puts in `metadata.error`.
pub fn go_error_text(s: &Status) -> String {
    let code = match s.code() {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    };
    format!("rpc error: code = {code} desc = {}", s.message())
}

fn error_metadata(hostname: &str, s: &Status) -> Metadata {
    Metadata {
        hostname: hostname.to_string(),
        error: go_error_text(s),
        status: Some(RpcStatus {
            code: s.code() as i32,
            message: s.message().to_string(),
            details: vec![],
        }),
    }
}

/// Reply items that carry `metadata = 1`.
pub trait Item: Default + Send + 'static {
    fn set_metadata(&mut self, m: Metadata);
}

#[macro_export]
macro_rules! impl_item {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::routing::Item for $t {
            fn set_metadata(&mut self, m: ferro_talos_proto::common::Metadata) {
                self.metadata = Some(m);
            }
        }
    )*};
}

/// Roles allowed per method path (machined's rules, api.md §4). Unlisted paths: admin only.
fn allowed_roles(path: &str) -> &'static [&'static str] {
    const READ: &[&str] = &["os:admin", "os:operator", "os:reader"];
    const ETCD_READ: &[&str] = &["os:admin", "os:operator", "os:reader", "os:etcd:backup"];
    const OPERATE: &[&str] = &["os:admin", "os:operator"];
    const ADMIN: &[&str] = &["os:admin"];
    let method = path.rsplit('/').next().unwrap_or("");
    match path {
        p if p.starts_with("/cosi.resource.State/") => match method {
            "Get" | "List" | "Watch" => READ,
            _ => ADMIN,
        },
        "/cluster.ClusterService/HealthCheck" | "/machine.ImageService/List" => READ,
        "/machine.ImageService/Pull" => OPERATE,
        "/machine.MachineService/ApplyConfiguration" => &["os:admin", "os:reader"],
        p if p.starts_with("/machine.MachineService/") => match method {
            "Events" | "Hostname" | "Logs" | "Memory" | "ServiceList" | "Version" => READ,
            "EtcdMemberList" | "EtcdStatus" => ETCD_READ,
            "EtcdSnapshot" => &["os:admin", "os:operator", "os:etcd:backup"],
            "Reboot" | "Shutdown" | "ServiceRestart" | "ServiceStart" | "ServiceStop"
            | "ImagePull" => OPERATE,
            _ => ADMIN,
        },
        _ => ADMIN,
    }
}

pub fn authorize(t: &Target, path: &str) -> Result<(), Status> {
    let allowed = allowed_roles(path);
    if t.roles.iter().any(|r| allowed.contains(&r.as_str())) {
        Ok(())
    } else {
        Err(Status::permission_denied("not authorized"))
    }
}

impl Ctx {
    fn route(&self, md: &MetadataMap, path: &str) -> Result<Route, Status> {
        // Maintenance mode: node routing disabled, everything local.
        if self.maintenance || md.get("proxyfrom").is_some() {
            return Ok(Route::Local);
        }
        let node = values(md, "node");
        let nodes = values(md, "nodes");
        if node.len() > 1 {
            return Err(Status::invalid_argument(
                "node metadata must be single-valued",
            ));
        }
        let can_forward = self.endpoint_is_control_plane();
        if !can_forward {
            let single = match (node.first(), nodes.as_slice()) {
                (Some(n), _) => Some(n),
                (None, [n]) => Some(n),
                _ => None,
            };
            if let Some(n) = single
                && self.shared.resolve(n) == Some(self.endpoint)
            {
                return Ok(Route::Local);
            }
        }
        if !nodes.is_empty() {
            if !MANY_PREFIXES.iter().any(|p| path.starts_with(p)) {
                return Err(Status::invalid_argument(format!(
                    "one-2-many proxying is not supported for method {path}"
                )));
            }
            if !can_forward {
                return Err(Status::permission_denied("no request forwarding"));
            }
            return Ok(Route::Many(nodes));
        }
        if let Some(n) = node.into_iter().next() {
            if !can_forward {
                return Err(Status::permission_denied("no request forwarding"));
            }
            return Ok(Route::One(n));
        }
        Ok(Route::Local)
    }

    /// Only control planes hold an apid client certificate (api.md §10.1), so only they forward.
    fn endpoint_is_control_plane(&self) -> bool {
        let st = self.shared.lock();
        st.nodes
            .get(self.endpoint)
            .is_some_and(|n| n.is_control_plane())
    }

    /// apid-to-apid forwarding passes the caller's roles in `talos-role`; only a peer holding
    /// `os:impersonator` may do that.
    fn effective(&self, md: &MetadataMap) -> Ctx {
        let forwarded = values(md, "talos-role");
        if forwarded.is_empty() || !self.roles.iter().any(|r| r == "os:impersonator") {
            return self.clone();
        }
        Ctx {
            roles: Arc::new(forwarded),
            ..self.clone()
        }
    }

    fn local(&self) -> Target {
        Target {
            idx: self.endpoint,
            roles: self.roles.clone(),
        }
    }

    fn remote(&self, name: &str) -> Result<Target, Status> {
        let port = self
            .shared
            .lock()
            .nodes
            .get(self.endpoint)
            .map(|n| n.port)
            .unwrap_or(50000);
        let refused = || {
            Status::unavailable(format!(
                "connection error: desc = \"transport: Error while dialing: dial tcp {name}:{port}: connect: connection refused\""
            ))
        };
        let Some(idx) = self.shared.resolve(name) else {
            // An address nobody listens on refuses; a name nobody knows does not resolve.
            if name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok()
            {
                return Err(refused());
            }
            return Err(Status::unavailable(format!(
                "connection error: desc = \"transport: Error while dialing: dial tcp: lookup {name}: no such host\""
            )));
        };
        let st = self.shared.lock();
        let n = &st.nodes[idx];
        if !n.listening() {
            return Err(refused());
        }
        if n.maintenance() {
            // The forwarding apid trusts only the cluster's OS CA (apid's provider.go ClientConfig,
            // WithCACertPEM, v1.13.9), and a node in maintenance mode serves a certificate of a
            // self-signed CA of its own (secrets/maintenance_root.go): the dial fails, so the
            // first config can never be routed. grpc-go reports the failed handshake like this.
            return Err(Status::unavailable(
                "connection error: desc = \"transport: authentication handshake failed: tls: failed to verify \
                 certificate: x509: certificate signed by unknown authority\"",
            ));
        }
        Ok(Target {
            idx,
            roles: self.roles.clone(),
        })
    }

    fn target_for(&self, name: Option<&str>, path: &str) -> Result<Target, Status> {
        let t = match name {
            None => self.local(),
            Some(n) => self.remote(n)?,
        };
        authorize(&t, path)?;
        Ok(t)
    }

    /// A unary MachineService/ClusterService call: envelope items, `nodes` fan-out with
    /// per-target metadata and error items.
    pub fn unary<I: Item>(
        &self,
        md: &MetadataMap,
        path: &str,
        f: impl Fn(&Target) -> Result<Vec<I>, Status>,
    ) -> Result<Vec<I>, Status> {
        let me = self.effective(md);
        match me.route(md, path)? {
            Route::Local => f(&me.target_for(None, path)?),
            Route::One(n) => f(&me.target_for(Some(&n), path)?),
            Route::Many(names) => {
                let mut out = Vec::new();
                for name in names {
                    match me.target_for(Some(&name), path).and_then(|t| f(&t)) {
                        Ok(items) => out.extend(items.into_iter().map(|mut i| {
                            i.set_metadata(Metadata {
                                hostname: name.clone(),
                                ..Default::default()
                            });
                            i
                        })),
                        Err(s) => {
                            let mut i = I::default();
                            i.set_metadata(error_metadata(&name, &s));
                            out.push(i);
                        }
                    }
                }
                Ok(out)
            }
        }
    }

    /// A server-streaming call with envelope items.
    pub fn streaming<I: Item>(
        &self,
        md: &MetadataMap,
        path: &str,
        f: impl Fn(&Target) -> Result<BoxStream<I>, Status>,
    ) -> Result<BoxStream<I>, Status> {
        let me = self.effective(md);
        match me.route(md, path)? {
            Route::Local => f(&me.target_for(None, path)?),
            Route::One(n) => f(&me.target_for(Some(&n), path)?),
            Route::Many(names) => {
                let mut map: StreamMap<usize, BoxStream<I>> = StreamMap::new();
                for (k, name) in names.into_iter().enumerate() {
                    let s: BoxStream<I> = match me.target_for(Some(&name), path).and_then(|t| f(&t))
                    {
                        Ok(s) => {
                            let host = name.clone();
                            Box::pin(s.map(move |r| {
                                Ok(match r {
                                    Ok(mut i) => {
                                        i.set_metadata(Metadata {
                                            hostname: host.clone(),
                                            ..Default::default()
                                        });
                                        i
                                    }
                                    Err(s) => {
                                        let mut i = I::default();
                                        i.set_metadata(error_metadata(&host, &s));
                                        i
                                    }
                                })
                            }))
                        }
                        Err(s) => {
                            let mut i = I::default();
                            i.set_metadata(error_metadata(&name, &s));
                            Box::pin(tokio_stream::once(Ok(i)))
                        }
                    };
                    map.insert(k, s);
                }
                Ok(Box::pin(map.map(|(_, r)| r)))
            }
        }
    }

    /// COSI, ImageService and LifecycleService: no envelope, `nodes` refused.
    pub fn single(&self, md: &MetadataMap, path: &str) -> Result<Target, Status> {
        let me = self.effective(md);
        match me.route(md, path)? {
            Route::Local => me.target_for(None, path),
            Route::One(n) => me.target_for(Some(&n), path),
            Route::Many(_) => Err(Status::invalid_argument(format!(
                "one-2-many proxying is not supported for method {path}"
            ))),
        }
    }
}

/// When the caller gives up: the `grpc-timeout` header gRPC clients send with a deadline
/// (`<digits><unit>`, units H M S m u n, per gRPC's HTTP/2 protocol description), as an instant
/// from now. None when the call has no deadline.
pub fn grpc_deadline(md: &MetadataMap) -> Option<std::time::Instant> {
    let value = md.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    let timeout = match unit {
        "H" => std::time::Duration::from_secs(amount.checked_mul(3600)?),
        "M" => std::time::Duration::from_secs(amount.checked_mul(60)?),
        "S" => std::time::Duration::from_secs(amount),
        "m" => std::time::Duration::from_millis(amount),
        "u" => std::time::Duration::from_micros(amount),
        "n" => std::time::Duration::from_nanos(amount),
        _ => return None,
    };
    std::time::Instant::now().checked_add(timeout)
}
