//! One probe's outcome as the JSON report holds it: what was asked of which node and what came
//! back. Every text in a record has been through the `Normaliser` before it gets here.

use std::collections::BTreeMap;
use std::time::Instant;

use ferro_talos_client::{ClientError, ErrorKind};
use serde::Serialize;

use crate::normalise::Normaliser;
use crate::shape::Shape;

#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// What was asked, e.g. `EtcdStatus` or `module talos_apply (own live config)`.
    pub probe: String,
    /// The node's label (`cp1`, `w1`), the same on both sides of a comparison.
    pub node: String,
    /// `OK`, the gRPC status code's name, or for a failure without a status the client's kind of
    /// failure in parentheses (`(Timeout)`, `(Unreachable)`). Module runs: `ok`, `failed`, `skipped`.
    pub code: String,
    /// The node's (or module's) message text, normalised; empty on success.
    pub message: String,
    /// The answer's fields and kinds (see `Shape`).
    pub shape: Vec<String>,
    /// Identifiers the answer named, in the node's order: resource IDs, service IDs, event types,
    /// health-check steps.
    pub ids: Vec<String>,
    /// Small categorical values worth comparing (a machine stage, a resolved apply mode), normalised.
    pub facts: BTreeMap<String, String>,
    /// Wall time of the call, in milliseconds.
    pub ms: u64,
}

impl Record {
    pub fn new(probe: impl Into<String>, node: &str, started: Instant) -> Record {
        Record {
            probe: probe.into(),
            node: node.to_string(),
            code: "OK".to_string(),
            message: String::new(),
            shape: Vec::new(),
            ids: Vec::new(),
            facts: BTreeMap::new(),
            ms: started.elapsed().as_millis() as u64,
        }
    }

    /// A probe that could not be made, and why (normalised).
    pub fn not_run(probe: impl Into<String>, node: &str, why: &str, n: &Normaliser) -> Record {
        let mut record = Record::new(probe, node, Instant::now());
        record.code = "(not run)".to_string();
        record.message = n.text(why);
        record
    }

    /// A failed call: its status code and the node's own text (not our advice around it).
    pub fn failed(mut self, e: &ClientError, n: &Normaliser) -> Record {
        self.code = code(e);
        self.message = n.text(&e.message);
        self.facts
            .insert("client_kind".into(), kind_name(&e.kind).into());
        self
    }

    pub fn shape(mut self, shape: Shape) -> Record {
        self.shape = shape.into_lines();
        self
    }

    pub fn ids(mut self, ids: Vec<String>) -> Record {
        self.ids = ids;
        self
    }

    pub fn fact(mut self, key: &str, value: impl Into<String>) -> Record {
        self.facts.insert(key.to_string(), value.into());
        self
    }
}

/// A failure's code as records show it: the gRPC status code's name, else the client's kind of
/// failure in parentheses.
pub fn code(e: &ClientError) -> String {
    match e.grpc_code {
        Some(code) => grpc_code_name(code).to_string(),
        None => format!("({})", kind_name(&e.kind)),
    }
}

/// The canonical gRPC code names (grpc/status codes.proto).
pub fn grpc_code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Cancelled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => "UnknownCode",
    }
}

/// The client's classification, without the details some kinds carry (a config rejection's reason
/// is already the message).
pub fn kind_name(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Unreachable => "Unreachable",
        ErrorKind::ConnectionClosed => "ConnectionClosed",
        ErrorKind::WrongCa => "WrongCa",
        ErrorKind::NotInCluster => "NotInCluster",
        ErrorKind::ServerNameMismatch => "ServerNameMismatch",
        ErrorKind::ClientCertExpired => "ClientCertExpired",
        ErrorKind::ClientCertRejected => "ClientCertRejected",
        ErrorKind::PermissionDenied => "PermissionDenied",
        ErrorKind::MaintenanceMode => "MaintenanceMode",
        ErrorKind::InvalidConfig { .. } => "InvalidConfig",
        ErrorKind::AlreadyExists => "AlreadyExists",
        ErrorKind::NotReady => "NotReady",
        ErrorKind::NotFound => "NotFound",
        ErrorKind::Unimplemented => "Unimplemented",
        ErrorKind::Timeout => "Timeout",
        ErrorKind::Credentials => "Credentials",
        ErrorKind::InvalidEndpoint => "InvalidEndpoint",
        _ => "Other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_the_code_and_the_normalised_text() {
        let status = tonic_like_error();
        let mut n = Normaliser::new();
        n.known("10.0.0.2", "<cp1>");
        let r = Record::new("EtcdStatus", "cp1", Instant::now()).failed(&status, &n);
        assert_eq!(r.code, "Unavailable");
        assert_eq!(r.message, "etcd on <cp1> is not running");
        assert_eq!(r.facts["client_kind"], "Unreachable");

        let timeout = ClientError::new("10.0.0.2", "x", ErrorKind::Timeout, "no answer within 30s");
        let r = Record::new("Version", "cp1", Instant::now()).failed(&timeout, &n);
        assert_eq!(r.code, "(Timeout)");
    }

    fn tonic_like_error() -> ClientError {
        ClientError {
            grpc_code: Some(14),
            ..ClientError::new(
                "10.0.0.2",
                "read etcd status",
                ErrorKind::Unreachable,
                "etcd on 10.0.0.2 is not running",
            )
        }
    }
}
