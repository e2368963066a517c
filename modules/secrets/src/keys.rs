//! Private keys in the encodings Talos writes: Ed25519 as PKCS#8 under the non-standard label
//! `ED25519 PRIVATE KEY`, ECDSA as SEC1 (`EC PRIVATE KEY`, curve OID included, like Go's
//! `MarshalECPrivateKey`), RSA as PKCS#1 (`RSA PRIVATE KEY`).
//!
//! rcgen (on aws-lc-rs) does the key generation, parsing and signing. Its own serialisation is
//! always PKCS#8, so the SEC1 and PKCS#1 forms are unwrapped from that here.

use rand::TryRngCore;
use rcgen::{KeyPair, PublicKeyData};

use crate::der;
use crate::error::{Error, ErrorKind, Result};

pub const LABEL_ED25519: &str = "ED25519 PRIVATE KEY";
pub const LABEL_EC: &str = "EC PRIVATE KEY";
pub const LABEL_RSA: &str = "RSA PRIVATE KEY";
pub const LABEL_PKCS8: &str = "PRIVATE KEY";

/// DER of the Ed25519 algorithm identifier (RFC 8410) and of the P-256 curve OID.
const ED25519_ALG_ID: &[u8] = &[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];
const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Ed25519,
    EcdsaP256,
    Rsa4096,
}

/// A fresh key: its PEM text in Talos's encoding and the pair ready for signing.
pub struct GeneratedKey {
    pub pem: String,
    pub pair: KeyPair,
}

pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut buf = [0u8; N];
    rand::rngs::OsRng.try_fill_bytes(&mut buf).map_err(|e| {
        Error::new(
            ErrorKind::Randomness,
            format!("system random number generator failed: {e}"),
        )
    })?;
    Ok(buf)
}

pub fn generate(kind: KeyKind) -> Result<GeneratedKey> {
    match kind {
        KeyKind::Ed25519 => {
            // Go writes the 48-byte PKCS#8 v1 form (no embedded public key); aws-lc would emit
            // v2, so build v1 from a random seed. Every 32-byte string is a valid seed.
            let seed = random_bytes::<32>()?;
            let der = der::seq(&[
                &der::uint(&[0]),
                ED25519_ALG_ID,
                &der::tlv(
                    der::TAG_OCTET_STRING,
                    &der::tlv(der::TAG_OCTET_STRING, &seed),
                ),
            ]);
            let pair = KeyPair::try_from(der.as_slice())
                .map_err(|e| crypto(format!("load generated Ed25519 key: {e}")))?;
            Ok(GeneratedKey {
                pem: pem_encode(LABEL_ED25519, &der),
                pair,
            })
        }
        KeyKind::EcdsaP256 => {
            let pkcs8 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                .map_err(|e| crypto(format!("generate ECDSA P-256 key: {e}")))?;
            let inner = pkcs8_private_key(pkcs8.serialized_der())
                .ok_or_else(|| crypto("unexpected PKCS#8 layout for a generated ECDSA key"))?;
            let scalar = ec_private_scalar(inner)
                .ok_or_else(|| crypto("unexpected SEC1 layout for a generated ECDSA key"))?;
            let sec1 = der::seq(&[
                &der::uint(&[1]),
                &der::tlv(der::TAG_OCTET_STRING, scalar),
                &der::tlv(0xa0, P256_OID),
                &der::tlv(0xa1, &der::bit_string(pkcs8.public_key_raw())),
            ]);
            let pair = KeyPair::try_from(sec1.as_slice())
                .map_err(|e| crypto(format!("load generated ECDSA key: {e}")))?;
            if pair.public_key_raw() != pkcs8.public_key_raw() {
                return Err(crypto(
                    "re-encoded ECDSA key does not match the generated one",
                ));
            }
            Ok(GeneratedKey {
                pem: pem_encode(LABEL_EC, &sec1),
                pair,
            })
        }
        KeyKind::Rsa4096 => {
            let pkcs8 =
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_4096)
                    .map_err(|e| crypto(format!("generate RSA-4096 key: {e}")))?;
            let pkcs1 = pkcs8_private_key(pkcs8.serialized_der())
                .ok_or_else(|| crypto("unexpected PKCS#8 layout for a generated RSA key"))?;
            Ok(GeneratedKey {
                pem: pem_encode(LABEL_RSA, pkcs1),
                pair: pkcs8,
            })
        }
    }
}

/// Parses a private key PEM in any encoding Talos accepts. Errors never quote the key.
pub fn load(pem_text: &str) -> Result<KeyPair> {
    let block = private_key_block(pem_text)?;
    KeyPair::try_from(block.contents()).map_err(|_| unusable(block.tag()))
}

/// Checks that `pem_text` holds a private key Talos accepts, as [`load`] does, except that a
/// PKCS#1 RSA key is checked for its shape only (nine integers, version 0, an odd public
/// exponent). Loading an RSA-4096 key checks its arithmetic, which costs about a millisecond,
/// most of a module run that only copies the bundle's service-account key into a config; a key
/// that is used to sign is still loaded with [`load`].
pub fn check(pem_text: &str) -> Result<()> {
    let block = private_key_block(pem_text)?;
    if block.tag() == LABEL_RSA {
        return match is_pkcs1_shaped(block.contents()) {
            true => Ok(()),
            false => Err(unusable(block.tag())),
        };
    }
    KeyPair::try_from(block.contents())
        .map(|_| ())
        .map_err(|_| unusable(block.tag()))
}

fn private_key_block(pem_text: &str) -> Result<pem::Pem> {
    let invalid = |message: String| Error::new(ErrorKind::InvalidKey, message);
    let block = pem::parse(pem_text).map_err(|_| invalid("not a PEM block".into()))?;
    let label = block.tag();
    if ![LABEL_ED25519, LABEL_EC, LABEL_RSA, LABEL_PKCS8].contains(&label) {
        return Err(invalid(format!(
            "PEM label {label:?} is not a private key (expected {LABEL_ED25519}, {LABEL_EC}, \
             {LABEL_RSA} or {LABEL_PKCS8})"
        )));
    }
    Ok(block)
}

fn unusable(label: &str) -> Error {
    Error::new(
        ErrorKind::InvalidKey,
        format!("{label} does not hold a usable Ed25519, ECDSA or RSA key"),
    )
}

/// RFC 8017's RSAPrivateKey: SEQUENCE { version 0, n, e, d, p, q, dP, dQ, qInv }, every integer
/// positive, `e` odd, nothing after the sequence: the shape Go's `x509.ParsePKCS1PrivateKey`
/// (`crypto/x509/pkcs1.go`, Go 1.26) requires before it validates the arithmetic, which Talos's
/// and Kubernetes' Go programs do when they load the key.
fn is_pkcs1_shaped(der_bytes: &[u8]) -> bool {
    let Some((mut body, rest)) = der::expect(der_bytes, der::TAG_SEQUENCE) else {
        return false;
    };
    if !rest.is_empty() {
        return false;
    }
    for index in 0..9 {
        let Some((int, next)) = der::expect(body, der::TAG_INTEGER) else {
            return false;
        };
        let non_negative = int.first().is_some_and(|b| b & 0x80 == 0);
        let fits = match index {
            0 => int == [0],
            2 => int.last().is_some_and(|b| b & 1 == 1),
            _ => int.iter().any(|b| *b != 0),
        };
        if !non_negative || !fits {
            return false;
        }
        body = next;
    }
    body.is_empty()
}

/// The key family a certificate signed by `ca_key` should get (Talos: the leaf follows the CA).
pub fn family_of(pair: &KeyPair) -> Result<KeyKind> {
    let alg = pair.algorithm();
    if alg == &rcgen::PKCS_ED25519 {
        Ok(KeyKind::Ed25519)
    } else if alg == &rcgen::PKCS_ECDSA_P256_SHA256 || alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
        Ok(KeyKind::EcdsaP256)
    } else if alg == &rcgen::PKCS_RSA_SHA256 {
        Ok(KeyKind::Rsa4096)
    } else {
        Err(Error::new(
            ErrorKind::InvalidKey,
            "unsupported CA key algorithm",
        ))
    }
}

/// DER AlgorithmIdentifier Go uses when signing with this key.
pub fn signature_algorithm_der(pair: &KeyPair) -> Result<&'static [u8]> {
    let alg = pair.algorithm();
    if alg == &rcgen::PKCS_ED25519 {
        Ok(ED25519_ALG_ID)
    } else if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
        // ecdsa-with-SHA256, no parameters
        Ok(&[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02,
        ])
    } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
        // ecdsa-with-SHA384
        Ok(&[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03,
        ])
    } else if alg == &rcgen::PKCS_RSA_SHA256 {
        // sha256WithRSAEncryption, NULL parameters
        Ok(&[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05,
            0x00,
        ])
    } else {
        Err(Error::new(
            ErrorKind::InvalidKey,
            "unsupported signing key algorithm",
        ))
    }
}

/// A failure of the crypto library (or of our re-encoding of what it made).
fn crypto(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Crypto, message)
}

pub fn spki_der(pair: &KeyPair) -> Vec<u8> {
    pair.subject_public_key_info()
}

/// PEM exactly as Go's `pem.EncodeToMemory` writes it: 64-column base64 lines, LF endings.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        // base64 output is ASCII, so any byte boundary is a char boundary.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The `privateKey` OCTET STRING content of a PKCS#8 PrivateKeyInfo.
fn pkcs8_private_key(pkcs8: &[u8]) -> Option<&[u8]> {
    let (body, _) = der::expect(pkcs8, der::TAG_SEQUENCE)?;
    let (_version, rest) = der::expect(body, der::TAG_INTEGER)?;
    let (_alg, rest) = der::expect(rest, der::TAG_SEQUENCE)?;
    let (key, _) = der::expect(rest, der::TAG_OCTET_STRING)?;
    Some(key)
}

/// The private scalar of a SEC1 ECPrivateKey.
fn ec_private_scalar(sec1: &[u8]) -> Option<&[u8]> {
    let (body, _) = der::expect(sec1, der::TAG_SEQUENCE)?;
    let (_version, rest) = der::expect(body, der::TAG_INTEGER)?;
    let (scalar, _) = der::expect(rest, der::TAG_OCTET_STRING)?;
    Some(scalar)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn der_of(pem_text: &str) -> (String, Vec<u8>) {
        let block = pem::parse(pem_text).unwrap();
        (block.tag().to_string(), block.contents().to_vec())
    }

    #[test]
    fn check_accepts_what_load_accepts_and_refuses_a_misshapen_rsa_key() {
        for kind in [KeyKind::Ed25519, KeyKind::EcdsaP256, KeyKind::Rsa4096] {
            let key = generate(kind).unwrap();
            assert!(
                load(&key.pem).is_ok() && check(&key.pem).is_ok(),
                "{kind:?}"
            );
        }
        let rsa = generate(KeyKind::Rsa4096).unwrap();
        let (_, der) = der_of(&rsa.pem);
        // One integer short, a trailing byte (Go refuses it; aws-lc, under load, does not),
        // version 1 without its extra primes: each refused with load's words.
        let mut short = der.clone();
        short.truncate(der.len() - 3);
        let mut trailing = der.clone();
        trailing.push(0);
        let mut version_1 = der.clone();
        let at = der
            .windows(3)
            .position(|w| w == [0x02, 0x01, 0x00])
            .unwrap();
        version_1[at + 2] = 1;
        for (what, bad) in [
            ("short", short),
            ("trailing", trailing),
            ("version 1", version_1),
        ] {
            let text = pem_encode(LABEL_RSA, &bad);
            let e = check(&text).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidKey, "{what}");
            assert!(
                format!("{e}").contains("does not hold a usable"),
                "{what}: {e}"
            );
        }
        assert!(check("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }

    #[test]
    fn ed25519_is_pkcs8_v1_under_talos_label() {
        let key = generate(KeyKind::Ed25519).unwrap();
        let (label, der) = der_of(&key.pem);
        assert_eq!(label, LABEL_ED25519);
        assert_eq!(der.len(), 48);
        assert_eq!(
            &der[..16],
            &[
                0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
                0x04, 0x20
            ]
        );
        assert_eq!(
            family_of(&load(&key.pem).unwrap()).unwrap(),
            KeyKind::Ed25519
        );
    }

    #[test]
    fn ecdsa_is_sec1_with_curve_and_public_key() {
        let key = generate(KeyKind::EcdsaP256).unwrap();
        let (label, der) = der_of(&key.pem);
        assert_eq!(label, LABEL_EC);
        // Go's MarshalECPrivateKey for P-256 is always 121 bytes: 30 77 02 01 01 04 20 ...
        assert_eq!(der.len(), 121);
        assert_eq!(&der[..7], &[0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20]);
        assert_eq!(
            &der[39..51],
            &[
                0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07
            ]
        );
        let reloaded = load(&key.pem).unwrap();
        assert_eq!(reloaded.public_key_raw(), key.pair.public_key_raw());
    }

    #[test]
    fn pem_lines_are_64_columns_with_lf() {
        let pem_text = pem_encode("X", &[0u8; 100]);
        let lines: Vec<&str> = pem_text.lines().collect();
        assert_eq!(lines[0], "-----BEGIN X-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2].len(), 64);
        assert_eq!(lines[3].len(), 136 - 128);
        assert_eq!(lines[4], "-----END X-----");
        assert!(pem_text.ends_with("-----\n") && !pem_text.contains('\r'));
    }

    #[test]
    fn wrong_label_and_garbage_are_rejected_without_echo() {
        let err = load("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a private key"), "{err}");
        let secretish = pem_encode(LABEL_EC, b"supersecretmaterial");
        let err = load(&secretish).unwrap_err().to_string();
        assert!(!err.contains("c3VwZXJzZWNyZXRtYXRlcmlhbA"), "{err}");
    }
}
