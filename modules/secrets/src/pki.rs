//! Certificate authorities and leaf certificates as Talos issues them (config.md §1.3, §2.2;
//! api.md §9, §10), plus parsing helpers for callers that check expiry and issuers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use base64::Engine as _;
use sha2::Digest as _;
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{self, KeyKind};
use crate::x509::{self, Eku, Template};

/// Lifetime of the bundle CAs: 87600 h, exactly 3650 × 24 h.
pub const CA_VALIDITY: Duration = Duration::from_secs(87600 * 3600);
/// Lifetime of the talosconfig admin certificate: 8760 h.
pub const ADMIN_VALIDITY: Duration = Duration::from_secs(8760 * 3600);
/// Lifetime of apid's server certificate and of the maintenance-mode certificates.
pub const SERVER_VALIDITY: Duration = Duration::from_secs(24 * 3600);
/// Common name of the maintenance-mode server certificate.
pub const MAINTENANCE_CN: &str = "maintenance-service.talos.dev";

/// A certificate and its private key, both PEM text. Debug never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Talos encodes times with second precision; truncating up front keeps NotAfter - NotBefore
/// exactly equal to the requested validity.
fn whole_seconds(t: OffsetDateTime) -> OffsetDateTime {
    t.to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t)
}

fn not_after(now: OffsetDateTime, validity: Duration) -> Result<OffsetDateTime> {
    let too_long = || Error::new(ErrorKind::InvalidArgument, "validity is too long");
    let validity = Duration::from_secs(validity.as_secs());
    now.checked_add(validity.try_into().map_err(|_| too_long())?)
        .ok_or_else(too_long)
}

/// A self-signed CA exactly as `siderolabs/crypto` makes one: subject = the Organization list
/// (never a CN), random 128-bit serial, 20 random bytes of SKI, no AKI, KeyUsage
/// digitalSignature+keyCertSign, EKU serverAuth+clientAuth, basicConstraints CA:TRUE.
pub(crate) fn generate_ca(
    kind: KeyKind,
    orgs: &[&str],
    now: OffsetDateTime,
    validity: Duration,
) -> Result<Issued> {
    let key = keys::generate(kind)?;
    let now = whole_seconds(now);
    let template = Template {
        serial: keys::random_bytes::<16>()?,
        subject: x509::name(orgs, None),
        not_before: now,
        not_after: not_after(now, validity)?,
        key_usage: x509::KU_DIGITAL_SIGNATURE | x509::KU_CERT_SIGN,
        ext_key_usage: &[Eku::ServerAuth, Eku::ClientAuth],
        is_ca: true,
        subject_key_id: Some(keys::random_bytes::<20>()?.to_vec()),
        authority_key_id: None,
        dns_names: &[],
        ip_addresses: &[],
    };
    let der = x509::sign(
        &template,
        &template.subject,
        &keys::spki_der(&key.pair),
        &key.pair,
    )?;
    Ok(Issued {
        cert_pem: keys::pem_encode("CERTIFICATE", &der),
        key_pem: key.pem,
    })
}

/// A CA loaded for signing: its key, its subject bytes (copied into the leaf's issuer field so
/// that Go and webpki, which compare names byte for byte, chain the leaf) and its SKI.
struct SigningCa {
    key: rcgen::KeyPair,
    subject: Vec<u8>,
    subject_key_id: Option<Vec<u8>>,
}

fn load_ca(ca_crt_pem: &str, ca_key_pem: &str) -> Result<SigningCa> {
    let der = first_cert_der(ca_crt_pem).map_err(|e| e.context("CA certificate"))?;
    let (_, cert) = X509Certificate::from_der(&der).map_err(|_| {
        Error::new(
            ErrorKind::InvalidCertificate,
            "CA certificate: not a valid X.509 certificate",
        )
    })?;
    let key = keys::load(ca_key_pem).map_err(|e| e.context("CA private key"))?;
    if keys::spki_der(&key) != cert.public_key().raw {
        return Err(Error::new(
            ErrorKind::KeyMismatch,
            "CA private key does not belong to the CA certificate",
        ));
    }
    let subject_key_id = cert
        .extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        });
    Ok(SigningCa {
        key,
        subject: cert.subject().as_raw().to_vec(),
        subject_key_id,
    })
}

struct Leaf<'a> {
    subject: Vec<u8>,
    eku: Eku,
    dns_names: &'a [String],
    ip_addresses: &'a [IpAddr],
}

fn issue_leaf(
    ca: &SigningCa,
    leaf: Leaf<'_>,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<Issued> {
    let key = keys::generate(keys::family_of(&ca.key)?)?;
    let now = whole_seconds(now);
    let ekus = [leaf.eku];
    let template = Template {
        serial: keys::random_bytes::<16>()?,
        subject: leaf.subject,
        not_before: now,
        not_after: not_after(now, validity)?,
        key_usage: x509::KU_DIGITAL_SIGNATURE,
        ext_key_usage: &ekus,
        is_ca: false,
        subject_key_id: None,
        authority_key_id: ca.subject_key_id.clone(),
        dns_names: leaf.dns_names,
        ip_addresses: leaf.ip_addresses,
    };
    let der = x509::sign(&template, &ca.subject, &keys::spki_der(&key.pair), &ca.key)?;
    Ok(Issued {
        cert_pem: keys::pem_encode("CERTIFICATE", &der),
        key_pem: key.pem,
    })
}

/// The talosconfig client certificate (config.md §2.2): key family follows the CA (Ed25519 for
/// the default OS CA), subject has one O per role and no CN, KeyUsage digitalSignature,
/// EKU clientAuth only, no basic constraints, no SKI, AKI = the CA's SKI.
pub fn issue_admin_cert(
    os_ca_crt_pem: &str,
    os_ca_key_pem: &str,
    roles: &[&str],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<Issued> {
    if roles.is_empty() || roles.iter().any(|r| r.is_empty()) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "admin certificate: expected at least one non-empty role (e.g. os:admin)",
        ));
    }
    issue_client_cert(os_ca_crt_pem, os_ca_key_pem, None, roles, validity, now)
}

/// A client certificate with an optional CN and one O per entry of `orgs` (e.g. the kubeconfig
/// admin: CN=admin, O=system:masters), otherwise the same profile as [`issue_admin_cert`].
pub fn issue_client_cert(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    common_name: Option<&str>,
    orgs: &[&str],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<Issued> {
    let ca = load_ca(ca_crt_pem, ca_key_pem)?;
    let leaf = Leaf {
        subject: x509::name(orgs, common_name),
        eku: Eku::ClientAuth,
        dns_names: &[],
        ip_addresses: &[],
    };
    issue_leaf(&ca, leaf, validity, now)
}

/// apid's server certificate (api.md §10.1): CN = hostname, no O, SANs, KeyUsage
/// digitalSignature, EKU serverAuth. Uses the real clock; see [`issue_server_cert_at`].
pub fn issue_server_cert(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    ips: &[IpAddr],
    dns: &[String],
    validity: Duration,
) -> Result<Issued> {
    issue_server_cert_at(
        ca_crt_pem,
        ca_key_pem,
        common_name,
        ips,
        dns,
        validity,
        OffsetDateTime::now_utc(),
    )
}

/// [`issue_server_cert`] with an explicit clock reading.
pub fn issue_server_cert_at(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    ips: &[IpAddr],
    dns: &[String],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<Issued> {
    let ca = load_ca(ca_crt_pem, ca_key_pem)?;
    let leaf = Leaf {
        subject: x509::name(&[], Some(common_name)),
        eku: Eku::ServerAuth,
        dns_names: dns,
        ip_addresses: ips,
    };
    issue_leaf(&ca, leaf, validity, now)
}

/// Maintenance-mode TLS (api.md §9): a throw-away Ed25519 CA (O=talos, 24 h; the CA's subject
/// is not documented upstream) and a 24 h server certificate with CN
/// `maintenance-service.talos.dev` whose SANs are `ips` plus 127.0.0.1 and ::1, and `dns`.
/// Returns (CA PEM, leaf).
pub fn self_signed_maintenance(ips: &[IpAddr], dns: &[String]) -> Result<(String, Issued)> {
    let now = OffsetDateTime::now_utc();
    let ca = generate_ca(KeyKind::Ed25519, &["talos"], now, SERVER_VALIDITY)?;
    let mut all_ips = ips.to_vec();
    for loopback in [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        if !all_ips.contains(&loopback) {
            all_ips.push(loopback);
        }
    }
    let leaf = issue_server_cert_at(
        &ca.cert_pem,
        &ca.key_pem,
        MAINTENANCE_CN,
        &all_ips,
        dns,
        SERVER_VALIDITY,
        now,
    )?;
    Ok((ca.cert_pem, leaf))
}

/// rustls only knows the standard `PRIVATE KEY` label for PKCS#8; Talos labels its Ed25519
/// PKCS#8 keys `ED25519 PRIVATE KEY`. The body is the same, so relabelling is enough.
pub fn normalize_key_pem_for_rustls(key_pem: &str) -> String {
    key_pem
        .replace(
            "-----BEGIN ED25519 PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----",
        )
        .replace(
            "-----END ED25519 PRIVATE KEY-----",
            "-----END PRIVATE KEY-----",
        )
}

/// Decodes a bundle/talosconfig field (standard base64 of PEM text) to the PEM text.
/// `name` is the key path used in error messages; the value itself is never quoted.
pub fn decode_b64_pem(name: &str, value: &str) -> Result<String> {
    let invalid = |why: &str| Error::new(ErrorKind::InvalidEncoding, format!("{name}: {why}"));
    if value == crate::REDACTED {
        return Err(invalid(&format!(
            "holds the redaction placeholder {}, not a real value",
            crate::REDACTED
        )));
    }
    if value.trim().is_empty() {
        return Err(invalid("missing or empty"));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|_| invalid("not valid base64 (expected standard base64 of PEM text)"))?;
    let not_pem = || invalid("base64 does not decode to PEM text");
    let text = String::from_utf8(bytes).map_err(|_| not_pem())?;
    if !text.contains("-----BEGIN ") {
        return Err(not_pem());
    }
    Ok(text)
}

/// Standard base64 of PEM text, the encoding of every crt/key/ca field.
pub fn encode_b64_pem(pem_text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem_text)
}

fn cert_ders(pem_text: &str) -> Result<Vec<Vec<u8>>> {
    let blocks = pem::parse_many(pem_text)
        .map_err(|_| Error::new(ErrorKind::InvalidCertificate, "not valid PEM"))?;
    let ders: Vec<Vec<u8>> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| b.into_contents())
        .collect();
    if ders.is_empty() {
        return Err(no_certificate());
    }
    Ok(ders)
}

fn first_cert_der(pem_text: &str) -> Result<Vec<u8>> {
    cert_ders(pem_text)?
        .into_iter()
        .next()
        .ok_or_else(no_certificate)
}

fn no_certificate() -> Error {
    Error::new(ErrorKind::InvalidCertificate, "no CERTIFICATE PEM block")
}

/// What callers need to know about a certificate: validity, names, and whether a CA signed it.
#[derive(Clone, Debug)]
pub struct CertInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub subject_orgs: Vec<String>,
    pub subject_cn: Option<String>,
    pub is_ca: bool,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// Standard base64 of SHA-256 over the SubjectPublicKeyInfo DER (talosctl `--cert-fingerprint`).
    pub spki_sha256: String,
    der: Vec<u8>,
}

impl CertInfo {
    /// Parses the first CERTIFICATE block of `cert_pem`.
    pub fn parse(cert_pem: &str) -> Result<CertInfo> {
        let der = first_cert_der(cert_pem)?;
        Self::from_der(der)
    }

    pub fn from_der(der: Vec<u8>) -> Result<CertInfo> {
        let (_, cert) = X509Certificate::from_der(&der).map_err(|_| {
            Error::new(
                ErrorKind::InvalidCertificate,
                "not a valid X.509 certificate",
            )
        })?;
        let subject_orgs = cert
            .subject()
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect();
        let subject_cn = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok().map(str::to_string));
        let is_ca = cert
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|bc| bc.value.ca);
        let mut dns_names = Vec::new();
        let mut ip_addresses = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                    GeneralName::IPAddress(b) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                            ip_addresses.push(IpAddr::from(v4));
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                            ip_addresses.push(IpAddr::from(v6));
                        }
                    }
                    _ => {}
                }
            }
        }
        let spki_sha256 = base64::engine::general_purpose::STANDARD
            .encode(sha2::Sha256::digest(cert.public_key().raw));
        let not_before = cert.validity().not_before.to_datetime();
        let not_after = cert.validity().not_after.to_datetime();
        Ok(CertInfo {
            not_before,
            not_after,
            subject_orgs,
            subject_cn,
            is_ca,
            dns_names,
            ip_addresses,
            spki_sha256,
            der,
        })
    }

    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// True when one of the certificates in `ca_pem` (a bundle may hold several) is named as
    /// this certificate's issuer *and* its key verifies this certificate's signature.
    pub fn issuer_matches(&self, ca_pem: &str) -> bool {
        let Ok((_, cert)) = X509Certificate::from_der(&self.der) else {
            return false;
        };
        let Ok(cas) = cert_ders(ca_pem) else {
            return false;
        };
        cas.iter().any(|ca_der| {
            let Ok((_, ca)) = X509Certificate::from_der(ca_der) else {
                return false;
            };
            ca.subject().as_raw() == cert.issuer().as_raw()
                && cert.verify_signature(Some(ca.public_key())).is_ok()
        })
    }

    /// True when `key_pem` is the private key of this certificate.
    pub fn key_matches(&self, key_pem: &str) -> bool {
        let Ok((_, cert)) = X509Certificate::from_der(&self.der) else {
            return false;
        };
        keys::load(key_pem).is_ok_and(|k| keys::spki_der(&k) == cert.public_key().raw)
    }

    /// Time left until NotAfter (zero when already expired).
    pub fn remaining(&self, now: OffsetDateTime) -> Duration {
        Duration::try_from(self.not_after - now).unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn fixture_os_ca() -> (String, String) {
        let bundle = crate::testing::bundle();
        (
            decode_b64_pem("crt", &bundle.certs.os.crt).unwrap(),
            decode_b64_pem("key", &bundle.certs.os.key).unwrap(),
        )
    }

    fn parse(der: &[u8]) -> X509Certificate<'_> {
        X509Certificate::from_der(der).unwrap().1
    }

    #[test]
    fn admin_cert_matches_talos_profile() {
        let (ca_crt, ca_key) = fixture_os_ca();
        let now = datetime!(2026-11-30 10:00:00.75 UTC);
        let issued =
            issue_admin_cert(&ca_crt, &ca_key, &["os:admin"], ADMIN_VALIDITY, now).unwrap();
        assert!(
            issued
                .key_pem
                .starts_with("-----BEGIN ED25519 PRIVATE KEY-----\n")
        );
        let info = CertInfo::parse(&issued.cert_pem).unwrap();
        assert!(info.issuer_matches(&ca_crt));
        assert!(info.key_matches(&issued.key_pem));
        assert_eq!(info.subject_orgs, vec!["os:admin"]);
        assert_eq!(info.subject_cn, None);
        assert_eq!(info.not_before, datetime!(2026-11-30 10:00:00 UTC));
        assert_eq!(
            info.not_after - info.not_before,
            time::Duration::hours(8760)
        );
        assert!(!info.is_ca);

        let cert = parse(info.der());
        assert_eq!(
            cert.public_key().algorithm.algorithm.to_id_string(),
            "1.3.101.112"
        );
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            "1.3.101.112"
        );
        assert!(cert.tbs_certificate.serial.bits() <= 128);
        let ku = cert.key_usage().unwrap().unwrap();
        assert!(ku.critical && ku.value.digital_signature() && !ku.value.key_cert_sign());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth && eku.other.is_empty());
        assert!(cert.basic_constraints().unwrap().is_none());
        assert!(cert.subject_alternative_name().unwrap().is_none());
        let oids: Vec<String> = cert
            .extensions()
            .iter()
            .map(|e| e.oid.to_id_string())
            .collect();
        assert_eq!(oids, ["2.5.29.15", "2.5.29.37", "2.5.29.35"]);
        let ca_der = first_cert_der(&ca_crt).unwrap();
        let ca = parse(&ca_der);
        let ca_ski = ca
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                _ => None,
            });
        let aki = cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0.to_vec())
                }
                _ => None,
            });
        assert_eq!(aki, ca_ski);
        assert_eq!(cert.issuer().as_raw(), ca.subject().as_raw());
        // Debug hides the key
        assert!(!format!("{issued:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn admin_cert_with_several_roles_and_foreign_ca() {
        let (ca_crt, ca_key) = fixture_os_ca();
        let issued = issue_admin_cert(
            &ca_crt,
            &ca_key,
            &["os:reader", "os:etcd:backup"],
            ADMIN_VALIDITY,
            OffsetDateTime::now_utc(),
        )
        .unwrap();
        let info = CertInfo::parse(&issued.cert_pem).unwrap();
        let mut orgs = info.subject_orgs.clone();
        orgs.sort();
        assert_eq!(orgs, vec!["os:etcd:backup", "os:reader"]);
        let other = generate_ca(
            KeyKind::Ed25519,
            &["talos"],
            OffsetDateTime::now_utc(),
            CA_VALIDITY,
        )
        .unwrap();
        assert!(!info.issuer_matches(&other.cert_pem));
        // a bundle of CAs matches if any member signed it
        assert!(info.issuer_matches(&format!("{}{}", other.cert_pem, ca_crt)));
        assert!(
            issue_admin_cert(
                &ca_crt,
                &ca_key,
                &[],
                ADMIN_VALIDITY,
                OffsetDateTime::now_utc()
            )
            .is_err()
        );
        assert!(
            issue_admin_cert(
                &ca_crt,
                &other.key_pem,
                &["os:admin"],
                ADMIN_VALIDITY,
                OffsetDateTime::now_utc()
            )
            .unwrap_err()
            .to_string()
            .contains("does not belong")
        );
    }

    #[test]
    fn ecdsa_ca_gives_ecdsa_leaf() {
        let ca = generate_ca(
            KeyKind::EcdsaP256,
            &["etcd"],
            OffsetDateTime::now_utc(),
            CA_VALIDITY,
        )
        .unwrap();
        let issued = issue_admin_cert(
            &ca.cert_pem,
            &ca.key_pem,
            &["os:admin"],
            ADMIN_VALIDITY,
            OffsetDateTime::now_utc(),
        )
        .unwrap();
        assert!(
            issued
                .key_pem
                .starts_with("-----BEGIN EC PRIVATE KEY-----\n")
        );
        let info = CertInfo::parse(&issued.cert_pem).unwrap();
        assert!(info.issuer_matches(&ca.cert_pem));
        let cert = parse(info.der());
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.10045.4.3.2"
        );
    }

    #[test]
    fn server_cert_profile() {
        let (ca_crt, ca_key) = fixture_os_ca();
        let ips: Vec<IpAddr> = vec!["10.5.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()];
        let dns = vec!["talos-cp-1".to_string()];
        let issued =
            issue_server_cert(&ca_crt, &ca_key, "talos-cp-1", &ips, &dns, SERVER_VALIDITY).unwrap();
        let info = CertInfo::parse(&issued.cert_pem).unwrap();
        assert_eq!(info.subject_cn.as_deref(), Some("talos-cp-1"));
        assert!(info.subject_orgs.is_empty());
        assert_eq!(info.ip_addresses, ips);
        assert_eq!(info.dns_names, dns);
        assert!(info.issuer_matches(&ca_crt));
        assert_eq!(info.not_after - info.not_before, time::Duration::hours(24));
        let cert = parse(info.der());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);
        let oids: Vec<String> = cert
            .extensions()
            .iter()
            .map(|e| e.oid.to_id_string())
            .collect();
        assert_eq!(oids, ["2.5.29.15", "2.5.29.37", "2.5.29.35", "2.5.29.17"]);
        assert!(!cert.subject_alternative_name().unwrap().unwrap().critical);
    }

    #[test]
    fn maintenance_certs() {
        let ips: Vec<IpAddr> = vec!["10.5.0.9".parse().unwrap()];
        let (ca_pem, leaf) = self_signed_maintenance(&ips, &["node-9".to_string()]).unwrap();
        let info = CertInfo::parse(&leaf.cert_pem).unwrap();
        assert_eq!(info.subject_cn.as_deref(), Some(MAINTENANCE_CN));
        assert_eq!(
            info.ip_addresses,
            vec![
                ips[0],
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            ]
        );
        assert!(info.issuer_matches(&ca_pem));
        assert_eq!(info.not_after - info.not_before, time::Duration::hours(24));
        let ca = CertInfo::parse(&ca_pem).unwrap();
        assert!(ca.is_ca);
        assert_eq!(ca.not_after - ca.not_before, time::Duration::hours(24));
        assert!(leaf.key_pem.contains("ED25519 PRIVATE KEY"));
        assert_eq!(info.spki_sha256.len(), 44);
    }

    #[test]
    fn relabel_for_rustls() {
        let pem_text =
            "-----BEGIN ED25519 PRIVATE KEY-----\nMC4=\n-----END ED25519 PRIVATE KEY-----\n";
        assert_eq!(
            normalize_key_pem_for_rustls(pem_text),
            "-----BEGIN PRIVATE KEY-----\nMC4=\n-----END PRIVATE KEY-----\n"
        );
        // A real Talos key still parses as PKCS#8 after relabelling.
        let (ca_crt, ca_key) = fixture_os_ca();
        let issued = issue_admin_cert(
            &ca_crt,
            &ca_key,
            &["os:admin"],
            ADMIN_VALIDITY,
            OffsetDateTime::now_utc(),
        )
        .unwrap();
        let relabelled = normalize_key_pem_for_rustls(&issued.key_pem);
        let block = pem::parse(&relabelled).unwrap();
        assert_eq!(block.tag(), "PRIVATE KEY");
        assert_eq!(
            block.contents(),
            pem::parse(&issued.key_pem).unwrap().contents()
        );
        assert!(
            CertInfo::parse(&issued.cert_pem)
                .unwrap()
                .key_matches(&relabelled)
        );
        let ec = "-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(normalize_key_pem_for_rustls(ec), ec);
    }

    #[test]
    fn decode_errors_name_the_field_not_the_value() {
        let err = decode_b64_pem("certs.os.key", "not*base64SECRET")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("certs.os.key: not valid base64"), "{err}");
        assert!(!err.contains("SECRET"));
        let err = decode_b64_pem("certs.os.crt", &encode_b64_pem("hello"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "certs.os.crt: base64 does not decode to PEM text");
        assert!(
            decode_b64_pem("x", "******")
                .unwrap_err()
                .to_string()
                .contains("placeholder")
        );
        assert_eq!(
            decode_b64_pem("x", &encode_b64_pem("-----BEGIN X-----\n")).unwrap(),
            "-----BEGIN X-----\n"
        );
    }
}
