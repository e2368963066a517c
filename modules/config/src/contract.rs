//! Talos version contracts: the `major.minor` that config generation targets.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};

/// A version contract such as 1.13. Ordering follows (major, minor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Contract {
    pub major: u32,
    pub minor: u32,
}

impl Contract {
    pub const V1_11: Contract = Contract::new(1, 11);
    pub const V1_12: Contract = Contract::new(1, 12);
    pub const V1_13: Contract = Contract::new(1, 13);
    pub const V1_14: Contract = Contract::new(1, 14);

    /// What `talosctl gen config` v1.13.6 targets without `--talos-version`.
    pub const CURRENT: Contract = Contract::V1_13;

    /// Contracts this crate can render.
    pub const SUPPORTED: [Contract; 4] = [Self::V1_11, Self::V1_12, Self::V1_13, Self::V1_14];

    pub const fn new(major: u32, minor: u32) -> Contract {
        Contract { major, minor }
    }

    /// Parses `v1.13`, `1.13`, `v1.13.6` or `1.14.0-rc.1`; only major and minor count.
    /// Fails for malformed input and for contracts outside [`Contract::SUPPORTED`].
    pub fn parse(text: &str) -> Result<Contract> {
        let c = Self::parse_any(text)?;
        if !Self::SUPPORTED.contains(&c) {
            return Err(Error::new(
                ErrorKind::UnsupportedContract,
                format!(
                    "unsupported Talos version contract {c} (from {text:?}); supported contracts: {}",
                    Self::SUPPORTED
                        .iter()
                        .map(Contract::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(c)
    }

    /// Like [`Contract::parse`] but without the supported-range check.
    pub fn parse_any(text: &str) -> Result<Contract> {
        let bad = || {
            Error::new(
                ErrorKind::InvalidContract,
                format!(
                    "invalid Talos version {text:?}: expected MAJOR.MINOR with an optional leading \
                     \"v\" and optional patch/pre-release suffix, e.g. \"v1.13\" or \"1.13.6\""
                ),
            )
        };
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.splitn(3, '.');
        let major = parts.next().ok_or_else(bad)?;
        let minor = parts.next().ok_or_else(bad)?;
        let number = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        // The minor may carry a pre-release suffix when there is no patch: "1.14-rc.1" is not a
        // form Talos uses, so require a clean number here.
        let (major, minor) = (
            number(major).ok_or_else(bad)?,
            number(minor).ok_or_else(bad)?,
        );
        if let Some(rest) = parts.next() {
            let patch = rest.split(['-', '+']).next().unwrap_or("");
            number(patch).ok_or_else(bad)?;
        }
        Ok(Contract { major, minor })
    }

    /// True when this contract is strictly newer than `major.minor` (the "> X" of config.md §3.8).
    pub fn greater_than(self, major: u32, minor: u32) -> bool {
        self > Contract::new(major, minor)
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for Contract {
    type Err = Error;
    fn from_str(s: &str) -> Result<Contract> {
        Contract::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_accepted_forms() {
        for t in ["v1.13", "1.13", "v1.13.6", "1.13.0-rc.1", " v1.13.6+build "] {
            assert_eq!(Contract::parse(t).unwrap(), Contract::V1_13, "{t}");
        }
        assert_eq!(Contract::parse("1.14.0-rc.1").unwrap(), Contract::V1_14);
        assert_eq!(Contract::parse("v1.11").unwrap(), Contract::V1_11);
    }

    #[test]
    fn rejects_malformed_with_expected_form() {
        for t in ["", "1", "v", "1.x", "1.13.x", "one.two", "1..3", "-1.13"] {
            let e = Contract::parse(t).unwrap_err().to_string();
            assert!(e.contains("expected MAJOR.MINOR"), "{t}: {e}");
        }
    }

    #[test]
    fn rejects_unsupported_listing_supported() {
        let e = Contract::parse("v1.10").unwrap_err().to_string();
        assert!(
            e.contains("unsupported") && e.contains("1.11, 1.12, 1.13, 1.14"),
            "{e}"
        );
        assert!(Contract::parse("2.0").is_err());
        assert_eq!(Contract::parse_any("1.2").unwrap(), Contract::new(1, 2));
    }

    #[test]
    fn ordering_and_current() {
        assert!(Contract::V1_11 < Contract::V1_12);
        assert!(Contract::V1_14 > Contract::CURRENT);
        assert!(Contract::new(1, 9) < Contract::new(1, 10));
        assert!(Contract::V1_12.greater_than(1, 11));
        assert!(!Contract::V1_11.greater_than(1, 11));
        assert_eq!(Contract::CURRENT.to_string(), "1.13");
    }
}
