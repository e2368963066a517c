//! Errors translated for humans: which node, what failed, and what to do about it.
//!
//! Talos failures reach us in two shapes: TLS handshake failures (from rustls,
//! buried in the transport error chain) and gRPC statuses. Both are classified
//! into an [`ErrorKind`] here, so callers branch on the kind and users read a
//! sentence instead of `transport error`. Nothing here ever formats key material:
//! only status messages and error texts are kept.

use std::error::Error as StdError;
use std::fmt;

use rustls::{AlertDescription, CertificateError};
use tonic::Code;

use crate::credentials::CredentialOrigin;

/// What kind of failure happened, independent of the wording.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The node could not be reached (connection refused, no route, Unavailable).
    Unreachable,
    /// Something accepted the TCP connection and closed it during the TLS handshake: the address
    /// answers, but not as a Talos API that takes this client (another service on the port, a
    /// proxy, or a node still starting its API).
    ConnectionClosed,
    /// The node's server certificate is not signed by the CA we trust.
    WrongCa,
    /// A call routed through an endpoint reached a node whose certificate the endpoint does not
    /// trust: a node in maintenance mode (its own self-signed CA) or one of another cluster.
    NotInCluster,
    /// The node's certificate does not cover the address we dialled.
    ServerNameMismatch,
    /// Our client certificate has expired (checked locally or reported by the node).
    ClientCertExpired,
    /// The node refused our client certificate (unknown CA, bad usage, or none sent).
    ClientCertRejected,
    /// The node answered `PermissionDenied`: the certificate's role may not do this.
    PermissionDenied,
    /// The node has no machine config yet (maintenance mode) and cannot do this.
    MaintenanceMode,
    /// Talos rejected the machine configuration; `reason` is Talos's own text.
    InvalidConfig { reason: String },
    /// The thing already exists (e.g. etcd already bootstrapped).
    AlreadyExists,
    /// The node cannot do this yet (`FailedPrecondition`): it is still starting (Bootstrap
    /// before its CRI is up or its clock synced) or busy with another apply or upgrade. The same
    /// call may succeed later.
    NotReady,
    /// The resource or file does not exist.
    NotFound,
    /// The node does not implement this call (version, machine type or mode).
    Unimplemented,
    /// etcd has no leader (`etcdserver: no leader`): fewer than a quorum of its members run, and
    /// etcd refuses what Talos asks of it (the member list, removals, leaves) until enough are
    /// back.
    EtcdNoLeader,
    /// The call or wait ran out of time.
    Timeout,
    /// The talosconfig or credentials could not be used.
    Credentials,
    /// The endpoint string could not be parsed.
    InvalidEndpoint,
    /// Anything else; the message carries the detail.
    Other,
}

impl ErrorKind {
    /// Whether the same call may work when tried again shortly: the node is away or its API is
    /// not answering yet (a reboot), rather than refusing us for a reason that will not change.
    pub fn is_transient(&self) -> bool {
        matches!(self, ErrorKind::Unreachable | ErrorKind::ConnectionClosed)
    }
}

/// A failed Talos operation, with enough context to act on it.
#[derive(Debug, Clone)]
pub struct ClientError {
    /// The node the operation targeted (node name/IP, or the endpoint); empty when
    /// no node was involved yet (talosconfig and credential problems).
    pub node: String,
    /// What we were doing, in words (e.g. "apply configuration").
    pub operation: String,
    pub kind: ErrorKind,
    /// The gRPC status code when the failure was a gRPC status.
    pub grpc_code: Option<i32>,
    /// The underlying detail (Talos's status message or the transport error text).
    pub message: String,
    /// Where the client's credentials came from, so certificate errors name the file to check.
    pub credentials: CredentialOrigin,
}

impl ClientError {
    pub fn new(
        node: impl Into<String>,
        operation: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> Self {
        ClientError {
            node: node.into(),
            operation: operation.into(),
            kind,
            grpc_code: None,
            message: message.into(),
            credentials: CredentialOrigin::Unspecified,
        }
    }

    /// The same error, saying where the credentials that were used came from.
    pub fn with_credentials(mut self, origin: CredentialOrigin) -> Self {
        self.credentials = origin;
        self
    }

    /// Classify a gRPC status returned by (or on the way to) `node`.
    pub fn from_status(node: &str, operation: &str, status: &tonic::Status) -> Self {
        // A status produced by the transport may hide a TLS alert in its source chain.
        if let Some(kind) = tls_kind_in_chain(status) {
            return ClientError {
                grpc_code: Some(status.code() as i32),
                ..ClientError::new(node, operation, kind, chain_text(status))
            };
        }
        let message = status.message().to_string();
        let kind = match kind_for_status(status.code(), &message) {
            ErrorKind::Unreachable if chain_has_closed_handshake(status) => {
                ErrorKind::ConnectionClosed
            }
            kind => kind,
        };
        let message = if message.is_empty() {
            chain_text(status)
        } else {
            message
        };
        ClientError {
            grpc_code: Some(status.code() as i32),
            ..ClientError::new(node, operation, kind, message)
        }
    }

    /// The error of a call that sent a machine config: Talos's ApplyConfiguration reports a config it
    /// cannot parse or validate as InvalidArgument with the reason, which is then `InvalidConfig`.
    pub fn rejected_config(self) -> Self {
        if self.kind == ErrorKind::Other && self.grpc_code == Some(Code::InvalidArgument as i32) {
            let reason = self.message.clone();
            return ClientError {
                kind: ErrorKind::InvalidConfig { reason },
                ..self
            };
        }
        self
    }

    /// Classify a connection-time failure (TCP connect, TLS handshake, HTTP/2 setup).
    pub fn from_transport(node: &str, operation: &str, err: &(dyn StdError + 'static)) -> Self {
        let kind = tls_kind_in_chain(err).unwrap_or_else(|| {
            if chain_has_timeout(err) {
                ErrorKind::Timeout
            } else if chain_has_closed_handshake(err) {
                ErrorKind::ConnectionClosed
            } else {
                ErrorKind::Unreachable
            }
        });
        ClientError::new(node, operation, kind, chain_text(err))
    }

    /// The same error re-labelled for another operation name.
    pub fn during(mut self, operation: impl Into<String>) -> Self {
        self.operation = operation.into();
        self
    }

    fn advice(&self) -> String {
        // Keep this in step with ErrorKind: each kind says what to do.
        match &self.kind {
            ErrorKind::Unreachable => "the node is unreachable; check that it is powered on, \
                 that the address and port (default 50000) are right, and that nothing blocks the connection"
                .into(),
            ErrorKind::ConnectionClosed => "the address answers but closed the connection during \
                 the TLS handshake: check that the port is the node's Talos API (apid, default 50000) and \
                 not another service or a proxy; a node still starting its API does this for a moment"
                .into(),
            ErrorKind::WrongCa => format!(
                "the node's certificate is not signed by the CA {} ({}); check that {} belongs to this cluster",
                self.credentials_ca(),
                self.credentials_wrong(),
                self.credentials_name(),
            ),
            ErrorKind::NotInCluster => "the endpoint reached the node, but the node's certificate is not \
                 from this cluster's CA: the node is in maintenance mode (its first config is applied to \
                 the node directly, never through an endpoint) or belongs to another cluster"
                .into(),
            ErrorKind::ServerNameMismatch => "the node's certificate does not list the address you \
                 connected to; connect to a node address or add this name to machine.certSANs"
                .into(),
            ErrorKind::ClientCertExpired => match self.credentials {
                // A certificate derived a moment ago is valid for the controller's clock: only a node
                // whose clock runs far ahead sees it expired.
                CredentialOrigin::SecretsBundle => "the node says the client certificate has expired, \
                     although it was just derived from the secrets bundle; check the clocks of the node \
                     and the controller (NTP)"
                    .into(),
                CredentialOrigin::Talosconfig => "the client certificate in your talosconfig has \
                     expired; generate a new talosconfig from the secrets bundle"
                    .into(),
                CredentialOrigin::Unspecified => "the client certificate has expired; generate a new \
                     one from the secrets bundle"
                    .into(),
            },
            ErrorKind::ClientCertRejected => format!(
                "the node rejected the client certificate (not signed by a CA the node accepts, or the \
                 node requires one that was not sent); check that {} belongs to this cluster, or \
                 whether the node already left maintenance mode",
                self.credentials_name()
            ),
            ErrorKind::PermissionDenied => "the client certificate's role is not allowed to do this \
                 (an os:admin talosconfig is needed; nodes in maintenance mode allow only read-only calls)"
                .into(),
            ErrorKind::MaintenanceMode => "the node is in maintenance mode (no machine config yet); \
                 apply a configuration first"
                .into(),
            ErrorKind::InvalidConfig { reason } => {
                format!(
                    "Talos rejected the configuration: {reason}; fix the config or the patch that produced it"
                )
            }
            ErrorKind::AlreadyExists => "it already exists".into(),
            ErrorKind::NotReady => "the node is not ready for this yet (still starting, or busy \
                 with another operation); try again in a moment"
                .into(),
            ErrorKind::NotFound => "not found".into(),
            ErrorKind::Unimplemented => "the node does not support this call \
                 (Talos version, machine type or mode)"
                .into(),
            ErrorKind::EtcdNoLeader => "etcd has no leader: fewer than a quorum of its members \
                 are running, and etcd refuses its member list and every change until enough are back; \
                 start the stopped members (ferro.talos.talos_health names them) or, if they are lost \
                 for good, recover etcd from a snapshot (ferro.talos.talos_etcd_recover)"
                .into(),
            ErrorKind::Timeout => "timed out: the node did not answer in time; check that it is up and \
                 not overloaded, or raise the module's timeout"
                .into(),
            ErrorKind::Credentials => "the credentials could not be used".into(),
            ErrorKind::InvalidEndpoint => "invalid endpoint".into(),
            ErrorKind::Other => String::new(),
        }
    }
}

impl ClientError {
    fn credentials_ca(&self) -> &'static str {
        match self.credentials {
            CredentialOrigin::Talosconfig => "in your talosconfig",
            CredentialOrigin::SecretsBundle => "in the secrets bundle",
            CredentialOrigin::Unspecified => "you trust",
        }
    }

    fn credentials_wrong(&self) -> &'static str {
        match self.credentials {
            CredentialOrigin::Talosconfig => "wrong CA?",
            CredentialOrigin::SecretsBundle => "a bundle of another cluster?",
            CredentialOrigin::Unspecified => "wrong CA?",
        }
    }

    fn credentials_name(&self) -> &'static str {
        match self.credentials {
            CredentialOrigin::Talosconfig => "the talosconfig",
            CredentialOrigin::SecretsBundle => "the secrets bundle (secrets_file or secrets)",
            CredentialOrigin::Unspecified => "the credentials",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Errors before any node is involved (talosconfig, credentials) have no node.
        if !self.node.is_empty() {
            write!(f, "node {}: ", self.node)?;
        }
        write!(f, "{}: ", self.operation)?;
        let advice = self.advice();
        let detail_in_advice = matches!(self.kind, ErrorKind::InvalidConfig { .. });
        match (
            advice.is_empty(),
            self.message.is_empty() || detail_in_advice,
        ) {
            (true, _) => write!(f, "{}", self.message),
            (false, true) => write!(f, "{advice}"),
            (false, false) => write!(f, "{advice} ({})", self.message),
        }
    }
}

impl StdError for ClientError {}

/// Result alias for this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

fn kind_for_status(code: Code, message: &str) -> ErrorKind {
    let lower = message.to_ascii_lowercase();
    match code {
        // etcd's refusal of a call made with clientv3.WithRequireLeader, which Talos passes on
        // (Unknown, or wrapped: `failed to remove member: ...`; v1alpha1_server.go @ v1.14.1).
        _ if lower.contains("etcdserver: no leader") => ErrorKind::EtcdNoLeader,
        // A routed call whose backend dial failed verification: the endpoint's apid trusts only the
        // cluster's OS CA (grpc-go's text for Go's x509 error).
        Code::Unavailable if lower.contains("certificate signed by unknown authority") => {
            ErrorKind::NotInCluster
        }
        Code::Unavailable => ErrorKind::Unreachable,
        Code::DeadlineExceeded => ErrorKind::Timeout,
        // tonic's own enforcement of the request deadline.
        Code::Cancelled if lower.contains("timeout expired") => ErrorKind::Timeout,
        Code::PermissionDenied => ErrorKind::PermissionDenied,
        Code::Unauthenticated => ErrorKind::ClientCertRejected,
        Code::AlreadyExists => ErrorKind::AlreadyExists,
        // Talos 1.14.1's Kubeconfig and GenerateClientConfiguration when the node's config lacks
        // what they need (`k8s API server CA config is not set`, `cluster name and endpoint are
        // not configured (...)`, v1alpha1_server.go @ v1.14.1): waiting does not help.
        Code::FailedPrecondition
            if lower.contains("config is not set") || lower.contains("are not configured") =>
        {
            ErrorKind::InvalidConfig {
                reason: message.to_string(),
            }
        }
        Code::FailedPrecondition => ErrorKind::NotReady,
        Code::NotFound => ErrorKind::NotFound,
        Code::Unimplemented if lower.contains("machine type is not set") => {
            ErrorKind::MaintenanceMode
        }
        Code::Unimplemented => ErrorKind::Unimplemented,
        // InvalidArgument means a rejected config only for an apply: `rejected_config` says so there.
        _ => ErrorKind::Other,
    }
}

/// Find a TLS failure anywhere in the chain. rustls errors reach us wrapped in
/// `io::Error` (tokio-rustls), then in hyper/h2/tonic errors; some layers keep only
/// the text, so the text of every level is checked too.
pub(crate) fn tls_kind_in_chain(err: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return tls_kind(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return tls_kind(tls);
        }
        if let Some(kind) = tls_kind_from_text(&e.to_string()) {
            return Some(kind);
        }
        cur = e.source();
    }
    None
}

fn tls_kind(err: &rustls::Error) -> Option<ErrorKind> {
    Some(match err {
        rustls::Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => ErrorKind::WrongCa,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                ErrorKind::ServerNameMismatch
            }
            _ => ErrorKind::Other,
        },
        rustls::Error::AlertReceived(alert) => match alert {
            AlertDescription::CertificateExpired => ErrorKind::ClientCertExpired,
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            // A CA with the same subject but another key fails the signature
            // check; Talos CAs all have subject O=talos, so this is common.
            | AlertDescription::DecryptError
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied => ErrorKind::ClientCertRejected,
            _ => ErrorKind::Other,
        },
        _ => return None,
    })
}

fn tls_kind_from_text(text: &str) -> Option<ErrorKind> {
    let t = text.to_ascii_lowercase();
    if t.contains("unknownissuer") || t.contains("unknown issuer") {
        Some(ErrorKind::WrongCa)
    } else if t.contains("notvalidforname") || t.contains("not valid for name") {
        Some(ErrorKind::ServerNameMismatch)
    } else if t.contains("alert") && t.contains("certificateexpired") {
        Some(ErrorKind::ClientCertExpired)
    } else if t.contains("alert")
        && (t.contains("certificaterequired")
            || t.contains("badcertificate")
            || t.contains("unknownca")
            || t.contains("decrypterror"))
    {
        Some(ErrorKind::ClientCertRejected)
    } else {
        None
    }
}

/// A peer that accepted the TCP connection and then hung up mid-handshake: tokio-rustls reports
/// a clean close as an `UnexpectedEof` I/O error ("tls handshake eof"), a close with our hello
/// still unread arrives as a reset. Layers above may keep only the text.
fn chain_has_closed_handshake(err: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            )
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("handshake eof") || text.contains("connection reset by peer") {
            return true;
        }
        cur = e.source();
    }
    false
}

fn chain_has_timeout(err: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        if e.to_string().to_ascii_lowercase().contains("timed out") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// `1m30s`, `45s` or `600ms`: short and exact enough for messages.
pub(crate) fn human_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    match (secs / 3600, secs / 60 % 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// The texts of an error and its sources, deduplicated and joined with ": ".
pub(crate) fn chain_text(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_err(op: &str, code: Code, msg: &str) -> ClientError {
        ClientError::from_status("10.5.0.2", op, &tonic::Status::new(code, msg))
    }

    #[test]
    fn permission_denied_names_the_role_problem() {
        let e = status_err("bootstrap", Code::PermissionDenied, "not authorized");
        assert_eq!(e.kind, ErrorKind::PermissionDenied);
        assert_eq!(e.grpc_code, Some(Code::PermissionDenied as i32));
        let text = e.to_string();
        assert!(text.starts_with("node 10.5.0.2: bootstrap: "), "{text}");
        assert!(text.contains("role is not allowed"), "{text}");
        assert!(text.contains("not authorized"), "{text}");
    }

    #[test]
    fn invalid_argument_on_apply_is_invalid_config_with_reason() {
        let e = status_err(
            "apply configuration",
            Code::InvalidArgument,
            "unknown keys found during decoding",
        )
        .rejected_config();
        assert_eq!(
            e.kind,
            ErrorKind::InvalidConfig {
                reason: "unknown keys found during decoding".into()
            }
        );
        assert!(e.to_string().contains(
            "Talos rejected the configuration: unknown keys found during decoding; fix the config"
        ));
        // Elsewhere InvalidArgument is not a config problem.
        let e = status_err(
            "version",
            Code::InvalidArgument,
            "node metadata must be single-valued",
        );
        assert_eq!(e.kind, ErrorKind::Other);
    }

    #[test]
    fn errors_without_a_node_have_no_node_prefix() {
        let e = ClientError::new(
            "",
            "load talosconfig",
            ErrorKind::Credentials,
            "no talosconfig found",
        );
        assert_eq!(
            e.to_string(),
            "load talosconfig: the credentials could not be used (no talosconfig found)"
        );
    }

    #[test]
    fn durations_read_well() {
        use std::time::Duration;
        assert_eq!(human_duration(Duration::from_millis(600)), "600ms");
        assert_eq!(human_duration(Duration::from_secs(45)), "45s");
        assert_eq!(human_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(human_duration(Duration::from_secs(3723)), "1h2m3s");
    }

    #[test]
    fn status_codes_map_to_kinds() {
        assert_eq!(
            status_err("x", Code::Cancelled, "Timeout expired").kind,
            ErrorKind::Timeout
        );
        assert_eq!(
            status_err("x", Code::Unavailable, "down").kind,
            ErrorKind::Unreachable
        );
        // What a control plane's apid answers when the routed node's certificate is not from the
        // cluster's CA (apid pkg/provider/provider.go ClientConfig at v1.13.9).
        assert_eq!(
            status_err(
                "x",
                Code::Unavailable,
                "connection error: desc = \"transport: authentication handshake failed: tls: failed to \
                 verify certificate: x509: certificate signed by unknown authority\""
            )
            .kind,
            ErrorKind::NotInCluster
        );
        assert_eq!(
            status_err("x", Code::AlreadyExists, "etcd data directory is not empty").kind,
            ErrorKind::AlreadyExists
        );
        // v1alpha1_server.go Bootstrap (v1.13.9) answers these while a node settles.
        assert_eq!(
            status_err(
                "bootstrap",
                Code::FailedPrecondition,
                "time is not in sync yet"
            )
            .kind,
            ErrorKind::NotReady
        );
        let missing = "cluster name and endpoint are not configured (.cluster.controlPlane.endpoint or KubeClusterConfig document)";
        let e = status_err("kubeconfig", Code::FailedPrecondition, missing);
        assert_eq!(
            e.kind,
            ErrorKind::InvalidConfig {
                reason: missing.into()
            }
        );
        assert!(
            e.to_string().contains("fix the config"),
            "{e}: a config problem, not a wait"
        );
        assert_eq!(
            status_err("x", Code::NotFound, "no such file").kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            status_err("x", Code::DeadlineExceeded, "").kind,
            ErrorKind::Timeout
        );
        assert_eq!(
            status_err(
                "x",
                Code::Unimplemented,
                "machine type is not set, cannot use member list API"
            )
            .kind,
            ErrorKind::MaintenanceMode
        );
        assert_eq!(
            status_err(
                "x",
                Code::Unimplemented,
                "member list is only available on control plane nodes"
            )
            .kind,
            ErrorKind::Unimplemented
        );
        // etcd without a quorum, as Talos passes it on for a member list and wraps it for a
        // removal (v1alpha1_server.go @ v1.14.1).
        for message in [
            "etcdserver: no leader",
            "failed to remove member: failed to remove member 42: etcdserver: no leader",
        ] {
            let e = status_err("list etcd members", Code::Unknown, message);
            assert_eq!(e.kind, ErrorKind::EtcdNoLeader);
            assert!(e.to_string().contains("quorum"), "{e}");
        }
    }

    #[test]
    fn tls_errors_in_an_io_chain_are_found() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let e = ClientError::from_transport("10.5.0.2", "apply configuration", &io)
            .with_credentials(CredentialOrigin::Talosconfig);
        assert_eq!(e.kind, ErrorKind::WrongCa);
        assert!(e.to_string().starts_with(
            "node 10.5.0.2: apply configuration: the node's certificate is not signed by the CA \
             in your talosconfig (wrong CA?); check that the talosconfig belongs to this cluster"
        ));

        let alert = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(AlertDescription::CertificateExpired),
        );
        let e = ClientError::from_transport("n", "version", &alert);
        assert_eq!(e.kind, ErrorKind::ClientCertExpired);

        let alert = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        let e = ClientError::from_transport("n", "version", &alert);
        assert_eq!(e.kind, ErrorKind::ClientCertRejected);
    }

    #[test]
    fn tls_errors_are_found_by_text_when_types_are_lost() {
        #[derive(Debug)]
        struct Flat(String);
        impl fmt::Display for Flat {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl StdError for Flat {}
        let e = Flat("connection error: received fatal alert: CertificateRequired".into());
        assert_eq!(tls_kind_in_chain(&e), Some(ErrorKind::ClientCertRejected));
        let e = Flat("invalid peer certificate: UnknownIssuer".into());
        assert_eq!(tls_kind_in_chain(&e), Some(ErrorKind::WrongCa));
        let e = Flat("connection refused".into());
        assert_eq!(tls_kind_in_chain(&e), None);
        assert_eq!(
            ClientError::from_transport("n", "connect", &e).kind,
            ErrorKind::Unreachable
        );
    }
}
