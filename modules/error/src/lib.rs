//! The error the library crates return (`ferro-talos-config`, `ferro-talos-secrets`): what failed,
//! as the crate's own `ErrorKind`, and a sentence for humans, possibly wrapping the error it was
//! built on (`config patch 2` around why that patch failed).
//!
//! `{}` prints the outermost message, `{:#}` the whole chain joined with ": ", as anyhow prints
//! its context chains (the modules print these texts, and tests assert them), and
//! [`std::error::Error::source`] walks it. `Debug` shows the kind and exactly what `{:#}` shows,
//! nothing else, so a crate whose messages never hold a secret has no Debug output that does.

use std::fmt;

/// A failed operation, of kind `K` (a crate's `ErrorKind`).
#[derive(Clone)]
pub struct Error<K> {
    kind: K,
    message: String,
    source: Option<Box<Error<K>>>,
}

impl<K: Copy> Error<K> {
    pub fn new(kind: K, message: impl Into<String>) -> Error<K> {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// What failed.
    pub fn kind(&self) -> K {
        self.kind
    }

    /// The error this one wraps, if any.
    pub fn wrapped(&self) -> Option<&Error<K>> {
        self.source.as_deref()
    }

    /// This error under a wider message, with the same kind.
    pub fn context(self, message: impl Into<String>) -> Error<K> {
        Error {
            kind: self.kind,
            message: message.into(),
            source: Some(Box::new(self)),
        }
    }

    /// The same error (and every one it wraps) as another kind: a caller knows better what the
    /// failing text was.
    pub fn with_kind(mut self, kind: K) -> Error<K> {
        self.kind = kind;
        self.source = self.source.map(|s| Box::new(s.with_kind(kind)));
        self
    }
}

impl<K> fmt::Display for Error<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if f.alternate() {
            let mut cur = self.source.as_deref();
            while let Some(e) = cur {
                write!(f, ": {}", e.message)?;
                cur = e.source.as_deref();
            }
        }
        Ok(())
    }
}

// Not derived: Debug shows exactly what `{:#}` shows, plus the kind, and nothing else.
impl<K: fmt::Debug> fmt::Debug for Error<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &format!("{self:#}"))
            .finish()
    }
}

impl<K: fmt::Debug + 'static> std::error::Error for Error<K> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Certificate,
        Bundle,
    }

    #[test]
    fn prints_like_an_anyhow_context_chain() {
        let e = Error::new(Kind::Certificate, "no CERTIFICATE PEM block").context("CA certificate");
        assert_eq!(e.to_string(), "CA certificate");
        assert_eq!(format!("{e:#}"), "CA certificate: no CERTIFICATE PEM block");
        assert_eq!(e.kind(), Kind::Certificate);
        let source = std::error::Error::source(&e).unwrap();
        assert_eq!(source.to_string(), "no CERTIFICATE PEM block");
        assert_eq!(
            format!("{e:?}"),
            "Error { kind: Certificate, message: \"CA certificate: no CERTIFICATE PEM block\" }"
        );
        let e = e.with_kind(Kind::Bundle);
        assert_eq!(e.kind(), Kind::Bundle);
        assert_eq!(e.wrapped().map(Error::kind), Some(Kind::Bundle));
    }

    #[test]
    fn can_travel_in_anyhow_and_boxed_errors() {
        fn assert_send_sync<T: std::error::Error + Send + Sync + 'static>() {}
        assert_send_sync::<Error<Kind>>();
    }
}
