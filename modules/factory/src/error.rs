//! What can go wrong talking to a factory, by what a caller does about it.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FactoryErrorKind {
    /// The factory URL or a CA file is unusable.
    Config,
    /// No answer: connection refused, TLS failure, timeout.
    Unreachable,
    /// The factory refused the request (4xx), e.g. an invalid schematic.
    Refused,
    /// The factory wants credentials, or refused the ones given (401).
    Unauthenticated,
    /// The credentials are good but not for this schematic: its owner is another (403).
    Forbidden,
    /// The factory does not know what was asked for (404): a version, a schematic.
    NotFound,
    /// The factory failed (5xx) or answered something unreadable.
    Server,
}

#[derive(Clone, Debug)]
pub struct FactoryError {
    pub kind: FactoryErrorKind,
    pub message: String,
}

impl FactoryError {
    pub fn new(kind: FactoryErrorKind, message: impl Into<String>) -> FactoryError {
        FactoryError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for FactoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FactoryError {}
