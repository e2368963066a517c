//! Errors of the Kubernetes side: a kind for callers to branch on, a message for people.

use std::fmt;

use crate::transport::RequestError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeErrorKind {
    /// The credentials could not be built (a bundle without the Kubernetes CA, a bad kubeconfig).
    Credentials,
    /// No answer from the API server (connection refused, TLS, timeout).
    Unreachable,
    /// The API server refused the credentials (401) or the request (403).
    Unauthorized,
    NotFound,
    /// A drain did not finish before its deadline.
    DrainTimeout,
    /// A live object belongs to someone else (another inventory), so the sync leaves it alone.
    Conflict,
    /// Applied objects did not become ready (kstatus `Current`) in time, or failed.
    NotReconciled,
    Other,
}

#[derive(Clone, Debug)]
pub struct KubeError {
    pub kind: KubeErrorKind,
    pub message: String,
}

impl KubeError {
    pub fn new(kind: KubeErrorKind, message: impl Into<String>) -> KubeError {
        KubeError {
            kind,
            message: message.into(),
        }
    }

    /// A failed request `what` sent to `endpoint`.
    pub fn from_request(endpoint: &str, what: &str, e: RequestError) -> KubeError {
        match e {
            RequestError::Api(status) => {
                let kind = match status.code {
                    401 | 403 => KubeErrorKind::Unauthorized,
                    404 => KubeErrorKind::NotFound,
                    _ => KubeErrorKind::Other,
                };
                let advice = match status.code {
                    401 => {
                        "; the API server does not accept these credentials: check that the secrets bundle or kubeconfig belongs to this cluster"
                    }
                    403 => {
                        "; the credentials lack permission: use the cluster's admin kubeconfig (system:masters)"
                    }
                    _ => "",
                };
                KubeError::new(
                    kind,
                    format!(
                        "Kubernetes API {endpoint}: {what}: {} ({}, {}){advice}",
                        status.message, status.code, status.reason
                    ),
                )
            }
            RequestError::Transport(why) => KubeError::new(
                KubeErrorKind::Unreachable,
                format!(
                    "Kubernetes API {endpoint}: {what}: {why}; check that the cluster endpoint is reachable from the controller and that a control plane is up"
                ),
            ),
        }
    }
}

impl fmt::Display for KubeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KubeError {}

pub type Result<T> = std::result::Result<T, KubeError>;
