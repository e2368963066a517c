//! TEMPORARY: local certificate helpers until `ferro-talos-secrets::pki` provides
//! `issue_server_cert`, `self_signed_maintenance` and the kubeconfig client certificate.
//! Everything certificate-related in the simulator goes through this one file so it can be swapped.

use std::net::IpAddr;

use anyhow::{Context, Result, anyhow};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use time::{Duration, OffsetDateTime};

pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Issued { .. }")
    }
}

/// Parses a private key in any label Talos writes (`ED25519 PRIVATE KEY` is PKCS#8 under a
/// non-standard label, `EC PRIVATE KEY` is SEC1, `RSA PRIVATE KEY` is PKCS#1).
pub fn key_pair_from_pem(key_pem: &str) -> Result<KeyPair> {
    let block = pem::parse(key_pem).map_err(|_| anyhow!("private key is not valid PEM"))?;
    let der = block.contents().to_vec();
    let key = match block.tag() {
        "EC PRIVATE KEY" => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der)),
        "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der)),
        _ => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der)),
    };
    KeyPair::try_from(&key).map_err(|_| anyhow!("unsupported private key type"))
}

/// PKCS#8 PEM with the standard label, which rustls accepts.
pub fn pkcs8_pem(kp: &KeyPair) -> String {
    kp.serialize_pem()
}

fn random_serial() -> SerialNumber {
    let mut b: [u8; 16] = rand::random();
    b[0] &= 0x7f;
    SerialNumber::from_slice(&b)
}

fn leaf_params(
    cn: Option<&str>,
    orgs: &[&str],
    ips: &[IpAddr],
    dns: &[String],
    validity: Duration,
) -> Result<CertificateParams> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    if let Some(cn) = cn {
        dn.push(DnType::CommonName, cn);
    }
    p.distinguished_name = dn;
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::minutes(1);
    p.not_after = now + validity;
    p.serial_number = Some(random_serial());
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    for ip in ips {
        p.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    for d in dns {
        p.subject_alt_names
            .push(SanType::DnsName(d.clone().try_into().context("invalid DNS SAN")?));
    }
    Ok(p)
}

/// A server certificate issued by an existing CA (PEM), with a key of the CA's family.
pub fn issue_server_cert(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    cn: &str,
    ips: &[IpAddr],
    dns: &[String],
) -> Result<Issued> {
    let ca_key = key_pair_from_pem(ca_key_pem)?;
    let key = KeyPair::generate_for(ca_key.algorithm()).context("generating server key")?;
    let issuer = Issuer::from_ca_cert_pem(ca_crt_pem, ca_key).context("parsing OS CA")?;
    let mut p = leaf_params(Some(cn), &[], ips, dns, Duration::hours(24))?;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &issuer).context("signing server certificate")?;
    Ok(Issued { cert_pem: cert.pem(), key_pem: pkcs8_pem(&key) })
}

/// A client certificate (Organization = roles) issued by a CA: what `talosctl gen` gives admins.
pub fn issue_client_cert(ca_crt_pem: &str, ca_key_pem: &str, roles: &[&str]) -> Result<Issued> {
    let ca_key = key_pair_from_pem(ca_key_pem)?;
    let key = KeyPair::generate_for(ca_key.algorithm()).context("generating client key")?;
    let issuer = Issuer::from_ca_cert_pem(ca_crt_pem, ca_key).context("parsing CA")?;
    let mut p = leaf_params(None, roles, &[], &[], Duration::days(365))?;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer).context("signing client certificate")?;
    Ok(Issued { cert_pem: cert.pem(), key_pem: pkcs8_pem(&key) })
}

/// The throw-away maintenance-mode CA and server certificate (Ed25519, 24 h). Returns (ca, leaf).
pub fn self_signed_maintenance(ips: &[IpAddr], dns: &[String]) -> Result<(String, Issued)> {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
    let mut ca = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "talos");
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let now = OffsetDateTime::now_utc();
    ca.not_before = now - Duration::minutes(1);
    ca.not_after = now + Duration::hours(24);
    ca.serial_number = Some(random_serial());
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
    let mut p = leaf_params(Some("maintenance-service.talos.dev"), &[], ips, dns, Duration::hours(24))?;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), Issued { cert_pem: cert.pem(), key_pem: pkcs8_pem(&key) }))
}

/// The kubeconfig admin client certificate: ECDSA P-256, CN admin, O system:masters, one year.
pub fn kubeconfig_admin_cert(k8s_ca_crt: &str, k8s_ca_key: &str) -> Result<Issued> {
    let ca_key = key_pair_from_pem(k8s_ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(k8s_ca_crt, ca_key).context("parsing Kubernetes CA")?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut p = leaf_params(Some("admin"), &["system:masters"], &[], &[], Duration::days(365))?;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer)?;
    Ok(Issued { cert_pem: cert.pem(), key_pem: pkcs8_pem(&key) })
}

/// Organization values of a client certificate: the Talos roles it carries.
pub fn roles_of(cert_der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert_der) else {
        return Vec::new();
    };
    cert.subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .filter(|o| !o.is_empty())
        .map(String::from)
        .collect()
}

/// Talos requires every non-CA client certificate to carry exactly the ClientAuth EKU.
pub fn eku_is_exactly_client_auth(cert_der: &[u8]) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert_der) else {
        return false;
    };
    match cert.extended_key_usage() {
        Ok(Some(eku)) => {
            let e = &eku.value;
            e.client_auth
                && !e.any
                && !e.server_auth
                && !e.code_signing
                && !e.email_protection
                && !e.time_stamping
                && !e.ocsp_signing
                && e.other.is_empty()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_from_fixture_cas() {
        let cfg = crate::mcfg::StoredConfig::parse(
            include_bytes!(
                "../../../../shared/talos/fixtures/v1.13.6/stability-v1.13-base-controlplane.yaml"
            ),
        )
        .unwrap();
        let (crt, key) = cfg.os_ca().unwrap();
        let key = key.unwrap();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let s = issue_server_cert(&crt, &key, "talos-1", &[ip], &[]).unwrap();
        assert!(s.cert_pem.contains("BEGIN CERTIFICATE"));
        let c = issue_client_cert(&crt, &key, &["os:reader"]).unwrap();
        let der = pem::parse(&c.cert_pem).unwrap();
        assert_eq!(roles_of(der.contents()), vec!["os:reader".to_string()]);
        assert!(eku_is_exactly_client_auth(der.contents()));
        let sder = pem::parse(&s.cert_pem).unwrap();
        assert!(!eku_is_exactly_client_auth(sder.contents()));
        let (kc, kk) = cfg.k8s_ca().unwrap();
        kubeconfig_admin_cert(&kc, &kk).unwrap();
        self_signed_maintenance(&[ip], &[]).unwrap();
    }
}
