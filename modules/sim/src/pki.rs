//! Certificates for the simulated apid, issued through `ferro-talos-secrets::pki` (so the
//! simulator signs exactly like the product does). Keys come back relabelled for rustls.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Result;
use ferro_talos_secrets::pki as sp;
use time::OffsetDateTime;

pub use ferro_talos_secrets::Issued;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

fn for_rustls(mut i: Issued) -> Issued {
    i.key_pem = sp::normalize_key_pem_for_rustls(&i.key_pem);
    i
}

/// apid's server certificate issued by the OS CA (24 h, like Talos).
pub fn issue_server_cert(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    cn: &str,
    ips: &[IpAddr],
    dns: &[String],
) -> Result<Issued> {
    let issued = sp::issue_server_cert(ca_crt_pem, ca_key_pem, cn, ips, dns, sp::SERVER_VALIDITY)?;
    Ok(for_rustls(issued))
}

/// A client certificate (Organization = roles, one year), as `talosctl gen` gives admins.
pub fn issue_client_cert(ca_crt_pem: &str, ca_key_pem: &str, roles: &[&str]) -> Result<Issued> {
    let issued = sp::issue_admin_cert(
        ca_crt_pem,
        ca_key_pem,
        roles,
        YEAR,
        OffsetDateTime::now_utc(),
    )?;
    Ok(for_rustls(issued))
}

/// The throw-away maintenance-mode CA and server certificate. Returns (CA PEM, leaf).
pub fn self_signed_maintenance(ips: &[IpAddr], dns: &[String]) -> Result<(String, Issued)> {
    let (ca, leaf) = sp::self_signed_maintenance(ips, dns)?;
    Ok((ca, for_rustls(leaf)))
}

/// The kubeconfig admin client certificate from the Kubernetes CA: CN admin, O system:masters,
/// one year; the key family follows the CA (ECDSA P-256 for Talos's Kubernetes CA).
pub fn kubeconfig_admin_cert(k8s_ca_crt: &str, k8s_ca_key: &str) -> Result<Issued> {
    Ok(sp::issue_client_cert(
        k8s_ca_crt,
        k8s_ca_key,
        Some("admin"),
        &["system:masters"],
        YEAR,
        OffsetDateTime::now_utc(),
    )?)
}

/// Organization values of a client certificate: the Talos roles it carries.
pub fn roles_of(cert_der: &[u8]) -> Vec<String> {
    ferro_talos_secrets::CertInfo::from_der(cert_der.to_vec())
        .map(|c| {
            c.subject_orgs
                .into_iter()
                .filter(|o| !o.is_empty())
                .collect()
        })
        .unwrap_or_default()
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
    fn issues_from_the_config_cas() {
        let sample = crate::sample::SampleCluster::generate();
        let cfg = crate::mcfg::StoredConfig::parse(
            sample.controlplane.as_bytes(),
            crate::mcfg::Release::V1_13,
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
