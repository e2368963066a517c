//! The error of every fallible function here: what failed ([`ErrorKind`]) and a sentence for
//! humans. Messages name fields and key paths, never their values, so neither `Display` nor
//! `Debug` can show key material.
//!
//! An error may wrap the one it was built on (`CA certificate` around `no CERTIFICATE PEM
//! block`): `{}` prints the outermost message, `{:#}` the whole chain joined with ": ", as anyhow
//! prints its context chains, and [`std::error::Error::source`] walks it.

/// What failed, independent of the wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A secrets bundle that is not YAML, misses or mistypes a field, or holds a certificate or
    /// key that does not read ([`Bundle::from_yaml`](crate::Bundle::from_yaml),
    /// [`Bundle::from_value`](crate::Bundle::from_value)); also its OS CA fields when
    /// [`Bundle::os_ca_pem`](crate::Bundle::os_ca_pem) decodes them.
    InvalidBundle,
    /// A talosconfig that is not YAML or has mistyped fields, or a context whose `ca`, `crt` or
    /// `key` is not base64 of PEM text.
    InvalidTalosconfig,
    /// A field that is not standard base64 of PEM text, is empty or holds the redaction
    /// placeholder ([`pki::decode_b64_pem`](crate::pki::decode_b64_pem)).
    InvalidEncoding,
    /// A certificate that is not PEM with a CERTIFICATE block, or not X.509 (a CA certificate to
    /// sign with, or one given to [`CertInfo`](crate::CertInfo)).
    InvalidCertificate,
    /// A private key that is not PEM, not a private key, or of an algorithm this crate cannot
    /// sign with.
    InvalidKey,
    /// A CA private key that does not belong to the CA certificate it came with.
    KeyMismatch,
    /// A Talos version that is not `vMAJOR.MINOR` ([`parse_contract`](crate::parse_contract)).
    InvalidContract,
    /// An argument this crate cannot use: an empty cluster name or role list, a validity too
    /// long for a certificate.
    InvalidArgument,
    /// The operating system's random number generator failed.
    Randomness,
    /// The crypto library failed to generate a key or a signature.
    Crypto,
}

/// A failed operation of this crate: its kind and message, and the error it wraps (see
/// `ferro_talos_error` for how it prints).
pub type Error = ferro_talos_error::Error<ErrorKind>;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    /// (kind, `{}`, `{:#}`) of a failure; the texts are the ones callers printed before this type
    /// replaced anyhow, and must not change (modules and playbook tests assert them).
    fn seen<T>(r: Result<T>) -> (ErrorKind, String, String) {
        let Err(e) = r else {
            panic!("expected an error")
        };
        (e.kind(), e.to_string(), format!("{e:#}"))
    }

    fn same(kind: ErrorKind, text: &str) -> (ErrorKind, String, String) {
        (kind, text.to_string(), text.to_string())
    }

    #[test]
    fn bundle_failures_are_invalid_bundle() {
        use crate::Bundle;
        assert_eq!(
            seen(Bundle::from_yaml("cluster: {}\n")),
            same(
                ErrorKind::InvalidBundle,
                "invalid secrets bundle: cluster.id: missing or empty; cluster.secret: missing or \
                 empty; secrets: missing (expected a mapping); trustdinfo: missing (expected a \
                 mapping); certs: missing (expected a mapping)"
            )
        );
        assert_eq!(
            seen(Bundle::from_yaml("key: [\n")),
            same(
                ErrorKind::InvalidBundle,
                "secrets bundle: not valid YAML (line 1, column 6)"
            )
        );
        let mut bundle = crate::testing::bundle().clone();
        bundle.certs.os.crt = "%%%".into();
        assert_eq!(
            seen(bundle.os_ca_pem()),
            same(
                ErrorKind::InvalidBundle,
                "certs.os.crt: not valid base64 (expected standard base64 of PEM text)"
            )
        );
    }

    #[test]
    fn talosconfig_failures_are_invalid_talosconfig() {
        use crate::TalosConfig;
        assert_eq!(
            seen(TalosConfig::from_yaml("contexts:\n  a: 3\n")),
            same(
                ErrorKind::InvalidTalosconfig,
                "talosconfig: contexts.a: expected a mapping, got a number"
            )
        );
        let ctx = crate::Context {
            ca: "%%%".into(),
            ..Default::default()
        };
        assert_eq!(
            seen(ctx.admin_identity()),
            same(
                ErrorKind::InvalidTalosconfig,
                "ca: not valid base64 (expected standard base64 of PEM text)"
            )
        );
    }

    #[test]
    fn pki_failures_name_what_failed() {
        use crate::pki::{self, ADMIN_VALIDITY};
        let now = time::OffsetDateTime::now_utc();
        let bundle = crate::testing::bundle();
        let (ca_crt, ca_key) = bundle.os_ca_pem().unwrap();
        let admin = |crt: &str, key: &str, roles: &[&str]| {
            pki::issue_admin_cert(crt, key, roles, ADMIN_VALIDITY, now)
        };
        assert_eq!(
            seen(admin(&ca_crt, "junk", &["os:admin"])),
            (
                ErrorKind::InvalidKey,
                "CA private key".into(),
                "CA private key: not a PEM block".into()
            )
        );
        assert_eq!(
            seen(admin("junk", &ca_key, &["os:admin"])),
            (
                ErrorKind::InvalidCertificate,
                "CA certificate".into(),
                "CA certificate: no CERTIFICATE PEM block".into()
            )
        );
        let etcd_key = pki::decode_b64_pem("key", &bundle.certs.etcd.key).unwrap();
        assert_eq!(
            seen(admin(&ca_crt, &etcd_key, &["os:admin"])),
            same(
                ErrorKind::KeyMismatch,
                "CA private key does not belong to the CA certificate"
            )
        );
        assert_eq!(
            seen(admin(&ca_crt, &ca_key, &[])),
            same(
                ErrorKind::InvalidArgument,
                "admin certificate: expected at least one non-empty role (e.g. os:admin)"
            )
        );
        assert_eq!(
            seen(crate::CertInfo::from_der(vec![1, 2, 3])),
            same(
                ErrorKind::InvalidCertificate,
                "not a valid X.509 certificate"
            )
        );
        assert_eq!(
            seen(pki::decode_b64_pem("x", "aGVsbG8=")),
            same(
                ErrorKind::InvalidEncoding,
                "x: base64 does not decode to PEM text"
            )
        );
        assert_eq!(
            seen(crate::parse_contract("latest")),
            same(
                ErrorKind::InvalidContract,
                "talos version \"latest\": expected vMAJOR.MINOR (for example v1.13)"
            )
        );
    }

    #[test]
    fn debug_shows_no_more_than_display() {
        let bundle = crate::testing::bundle();
        let mut value = bundle.to_value();
        // A private key where a certificate belongs, and a certificate where the key belongs.
        value["certs"]["os"]["crt"] = bundle.certs.os.key.clone().into();
        value["certs"]["os"]["key"] = bundle.certs.os.crt.clone().into();
        let e = crate::Bundle::from_value(&value).unwrap_err();
        let debug = format!("{e:?}");
        assert_eq!(
            debug,
            format!(
                "Error {{ kind: InvalidBundle, message: {:?} }}",
                format!("{e:#}")
            )
        );
        let key_pem = crate::pki::decode_b64_pem("key", &bundle.certs.os.key).unwrap();
        for secret in [
            bundle.certs.os.key.as_str(),
            key_pem.lines().nth(1).unwrap(),
        ] {
            assert!(!debug.contains(secret), "{debug}");
        }
    }
}
