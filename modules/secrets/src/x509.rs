//! Certificate encoding with the layout of Go's `x509.CreateCertificate`, which is what Talos uses.
//!
//! rcgen's builder cannot express two things Talos needs: a subject with several Organization
//! values in one multi-valued RDN (Go's encoding of `O=os:admin,O=os:reader`), and Go's extension
//! order (keyUsage, extKeyUsage, basicConstraints, subjectKeyIdentifier, authorityKeyIdentifier,
//! subjectAltName; rcgen puts SAN first and SKI before basicConstraints). So the TBSCertificate is
//! written here, and rcgen only supplies keys, public key info and signatures.

use std::net::IpAddr;

use rcgen::{KeyPair, SigningKey};
use time::OffsetDateTime;

use crate::der::{self, tlv};
use crate::error::{Error, ErrorKind, Result};
use crate::keys;

const OID_ORGANIZATION: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x0a];
const OID_COMMON_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
const OID_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x0f];
const OID_EXT_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x25];
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x13];
const OID_SUBJECT_KEY_ID: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x0e];
const OID_AUTHORITY_KEY_ID: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x23];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x11];
const OID_SERVER_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const OID_CLIENT_AUTH: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

/// KeyUsage bits in Go's numbering (bit 0 = digitalSignature).
pub const KU_DIGITAL_SIGNATURE: u16 = 1 << 0;
pub const KU_CERT_SIGN: u16 = 1 << 5;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Eku {
    ServerAuth,
    ClientAuth,
}

/// Everything that goes into one certificate, in Go's terms.
pub struct Template<'a> {
    pub serial: [u8; 16],
    /// DER Name of the subject; for a leaf the issuer is copied byte for byte from the CA.
    pub subject: Vec<u8>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub key_usage: u16,
    pub ext_key_usage: &'a [Eku],
    pub is_ca: bool,
    pub subject_key_id: Option<Vec<u8>>,
    pub authority_key_id: Option<Vec<u8>>,
    pub dns_names: &'a [String],
    pub ip_addresses: &'a [IpAddr],
}

/// A DER Name as Go's `pkix.Name.ToRDNSequence` builds it: all Organization values in one RDN
/// (a DER SET OF, so sorted by encoding), then the CommonName. No attributes gives an empty
/// SEQUENCE, which is the aggregator CA's subject.
pub fn name(orgs: &[&str], common_name: Option<&str>) -> Vec<u8> {
    let mut rdns = Vec::new();
    if !orgs.is_empty() {
        let mut values: Vec<Vec<u8>> = orgs
            .iter()
            .map(|o| der::seq(&[OID_ORGANIZATION, &directory_string(o)]))
            .collect();
        values.sort();
        rdns.extend(tlv(der::TAG_SET, &values.concat()));
    }
    if let Some(cn) = common_name.filter(|cn| !cn.is_empty()) {
        rdns.extend(tlv(
            der::TAG_SET,
            &der::seq(&[OID_COMMON_NAME, &directory_string(cn)]),
        ));
    }
    tlv(der::TAG_SEQUENCE, &rdns)
}

/// Go marshals a string as PrintableString when every byte is in that set, else UTF8String.
fn directory_string(s: &str) -> Vec<u8> {
    let printable = s.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b' ' | b'\'' | b'(' | b')' | b'+' | b',' | b'-' | b'.' | b'/' | b':' | b'=' | b'?'
            )
    });
    let tag = if printable {
        der::TAG_PRINTABLE_STRING
    } else {
        der::TAG_UTF8_STRING
    };
    tlv(tag, s.as_bytes())
}

/// UTCTime for 1950..=2049, GeneralizedTime otherwise, second precision, always Zulu.
fn time(t: OffsetDateTime) -> Vec<u8> {
    let t = t.to_offset(time::UtcOffset::UTC);
    let (y, mo, d, h, mi, s) = (
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    );
    if (1950..2050).contains(&y) {
        let text = format!("{:02}{mo:02}{d:02}{h:02}{mi:02}{s:02}Z", y % 100);
        tlv(der::TAG_UTC_TIME, text.as_bytes())
    } else {
        let text = format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}Z");
        tlv(der::TAG_GENERALIZED_TIME, text.as_bytes())
    }
}

fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let critical_flag: &[u8] = if critical { &[0x01, 0x01, 0xff] } else { &[] };
    der::seq(&[oid, critical_flag, &tlv(der::TAG_OCTET_STRING, value)])
}

/// Go's marshalKeyUsage: bit-reversed bytes, trailing zero byte dropped, minimal bit length.
fn key_usage_value(usage: u16) -> Vec<u8> {
    let bytes = [
        (usage as u8).reverse_bits(),
        ((usage >> 8) as u8).reverse_bits(),
    ];
    let used = if bytes[1] == 0 {
        &bytes[..1]
    } else {
        &bytes[..]
    };
    let unused_bits = used
        .last()
        .map_or(0, |b| if *b == 0 { 0 } else { b.trailing_zeros() as u8 });
    let mut content = vec![unused_bits];
    content.extend_from_slice(used);
    tlv(der::TAG_BIT_STRING, &content)
}

fn extensions(t: &Template<'_>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if t.key_usage != 0 {
        out.push(extension(
            OID_KEY_USAGE,
            true,
            &key_usage_value(t.key_usage),
        ));
    }
    if !t.ext_key_usage.is_empty() {
        let oids: Vec<&[u8]> = t
            .ext_key_usage
            .iter()
            .map(|e| match e {
                Eku::ServerAuth => OID_SERVER_AUTH,
                Eku::ClientAuth => OID_CLIENT_AUTH,
            })
            .collect();
        out.push(extension(OID_EXT_KEY_USAGE, false, &der::seq(&oids)));
    }
    if t.is_ca {
        // cA TRUE, no pathLenConstraint (Go's MaxPathLen -1 for Talos CAs)
        out.push(extension(
            OID_BASIC_CONSTRAINTS,
            true,
            &[0x30, 0x03, 0x01, 0x01, 0xff],
        ));
    }
    if let Some(ski) = &t.subject_key_id {
        out.push(extension(
            OID_SUBJECT_KEY_ID,
            false,
            &tlv(der::TAG_OCTET_STRING, ski),
        ));
    }
    if let Some(aki) = &t.authority_key_id {
        out.push(extension(
            OID_AUTHORITY_KEY_ID,
            false,
            &der::seq(&[&tlv(0x80, aki)]),
        ));
    }
    if !t.dns_names.is_empty() || !t.ip_addresses.is_empty() {
        // Go writes DNS names before IP addresses; critical only when the subject is empty.
        let mut names = Vec::new();
        for dns in t.dns_names {
            names.extend(tlv(0x82, dns.as_bytes()));
        }
        for ip in t.ip_addresses {
            match ip {
                IpAddr::V4(v4) => names.extend(tlv(0x87, &v4.octets())),
                IpAddr::V6(v6) => names.extend(tlv(0x87, &v6.octets())),
            }
        }
        let critical = t.subject == [0x30, 0x00];
        out.push(extension(
            OID_SUBJECT_ALT_NAME,
            critical,
            &tlv(der::TAG_SEQUENCE, &names),
        ));
    }
    out
}

/// The TBSCertificate bytes for `template`, with `issuer` (DER Name) and the subject's public key.
pub fn tbs(
    template: &Template<'_>,
    issuer: &[u8],
    subject_spki: &[u8],
    signature_alg: &[u8],
) -> Vec<u8> {
    let version = tlv(0xa0, &der::uint(&[2]));
    let validity = der::seq(&[&time(template.not_before), &time(template.not_after)]);
    let exts = extensions(template);
    let exts_field = if exts.is_empty() {
        Vec::new()
    } else {
        tlv(0xa3, &tlv(der::TAG_SEQUENCE, &exts.concat()))
    };
    der::seq(&[
        &version,
        &der::uint(&template.serial),
        signature_alg,
        issuer,
        &validity,
        &template.subject,
        subject_spki,
        &exts_field,
    ])
}

/// Signs `template` for the subject key `subject_spki` with `issuer_key`; returns certificate DER.
pub fn sign(
    template: &Template<'_>,
    issuer: &[u8],
    subject_spki: &[u8],
    issuer_key: &KeyPair,
) -> Result<Vec<u8>> {
    let alg = keys::signature_algorithm_der(issuer_key)?;
    let tbs = tbs(template, issuer, subject_spki, alg);
    let signature = issuer_key
        .sign(&tbs)
        .map_err(|e| Error::new(ErrorKind::Crypto, format!("sign certificate: {e}")))?;
    Ok(der::seq(&[&tbs, alg, &der::bit_string(&signature)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_usage_matches_go_encoding() {
        // Talos CAs: digitalSignature + keyCertSign => 03 02 02 84
        assert_eq!(
            key_usage_value(KU_DIGITAL_SIGNATURE | KU_CERT_SIGN),
            vec![0x03, 0x02, 0x02, 0x84]
        );
        // Admin / server leaf: digitalSignature => 03 02 07 80
        assert_eq!(
            key_usage_value(KU_DIGITAL_SIGNATURE),
            vec![0x03, 0x02, 0x07, 0x80]
        );
    }

    #[test]
    fn names_follow_go_layout() {
        assert_eq!(name(&[], None), vec![0x30, 0x00]);
        let talos = name(&["talos"], None);
        // SEQUENCE { SET { SEQUENCE { O, PrintableString "talos" } } }
        assert_eq!(
            talos,
            b"\x30\x10\x31\x0e\x30\x0c\x06\x03\x55\x04\x0a\x13\x05talos".to_vec()
        );
        // several roles share one RDN, sorted by encoding (shorter first)
        let two = name(&["os:reader", "os:admin"], None);
        let admin_pos = two.windows(8).position(|w| w == b"os:admin").unwrap();
        let reader_pos = two.windows(9).position(|w| w == b"os:reader").unwrap();
        assert!(admin_pos < reader_pos);
        assert_eq!(two.iter().filter(|b| **b == der::TAG_SET).count(), 1);
        // a non-printable character switches to UTF8String
        assert_eq!(directory_string("a_b")[0], der::TAG_UTF8_STRING);
        assert_eq!(directory_string("os:admin")[0], der::TAG_PRINTABLE_STRING);
    }

    #[test]
    fn times_switch_to_generalized_after_2049() {
        let t = time::macros::datetime!(2033-05-22 12:14:42 UTC);
        assert_eq!(time(t), b"\x17\x0d330522121442Z".to_vec());
        let t = time::macros::datetime!(2050-01-01 00:00:00 UTC);
        assert_eq!(time(t), b"\x18\x0f20500101000000Z".to_vec());
    }
}
