//! Talos secrets: the `secrets.yaml` bundle, the PKI built on it and the talosconfig client file.
//!
//! Owns key and certificate generation (OS CA, etcd/Kubernetes/aggregator CAs, service-account key,
//! admin client certificates, node server certificates) exactly as `talosctl gen secrets` and
//! `gen config` produce them. Never prints anything and never reads module arguments; no error
//! message or Debug output contains a secret value.
//!
//! Overview: [`Bundle`] reads, validates, writes and generates `secrets.yaml`; [`pki`] issues
//! admin, client, server and maintenance certificates and inspects certificates ([`CertInfo`]);
//! [`talosconfig`] reads and writes the client file and decides when its identity needs renewal;
//! [`secret_strings`] lists what an output masker must hide; [`yaml`] parses, and writes
//! through go-yaml's rules (`ferro_talos_goyaml`, which the config crate shares). Certificates are
//! DER-encoded by this crate in Go's layout (rcgen's builder cannot express Talos's subjects and
//! extension order); rcgen on aws-lc-rs provides the keys and signatures. ring must never be
//! linked.

pub mod bundle;
mod der;
pub mod error;
mod keys;
pub mod pki;
pub mod talosconfig;
#[cfg(test)]
mod testing;
mod x509;
pub mod yaml;

pub use bundle::{
    Bundle, CertAndKey, Certs, ClusterSecrets, KeyOnly, Secrets, TrustdInfo, parse_contract,
};
pub use error::{Error, ErrorKind, Result};
pub use pki::{CertInfo, Issued};
pub use talosconfig::{Context, TalosConfig};

/// The placeholder Talos writes for redacted values; the crypto library stores it verbatim.
pub const REDACTED: &str = "******";

/// Every secret in `bundle` in each form it could leak in: the raw field strings, the decoded PEM
/// text of private keys, the key's base64 body (whole and per PEM line). Public values are left
/// out: `cluster.id` and every `crt`. Longest first, so a masker replaces whole values before
/// their parts. Lines shorter than 16 characters (a PEM's short last line, such as `Yw==`) are
/// skipped to avoid masking ordinary text.
pub fn secret_strings(bundle: &Bundle) -> Vec<String> {
    const MIN_FRAGMENT: usize = 16;
    let mut out: Vec<String> = Vec::new();
    let plain = [
        Some(&bundle.cluster.secret),
        Some(&bundle.secrets.bootstrap_token),
        bundle.secrets.secretbox_encryption_secret.as_ref(),
        bundle.secrets.aescbc_encryption_secret.as_ref(),
        Some(&bundle.trustd_info.token),
    ];
    out.extend(plain.into_iter().flatten().cloned());
    for key in [
        &bundle.certs.etcd.key,
        &bundle.certs.k8s.key,
        &bundle.certs.k8s_aggregator.key,
        &bundle.certs.k8s_service_account.key,
        &bundle.certs.os.key,
    ] {
        out.push(key.clone());
        let Ok(pem_text) = pki::decode_b64_pem("key", key) else {
            continue;
        };
        let body: Vec<&str> = pem_text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("-----"))
            .collect();
        out.push(body.concat());
        out.extend(
            body.iter()
                .filter(|l| l.len() >= MIN_FRAGMENT)
                .map(|l| l.to_string()),
        );
        out.push(pem_text.trim_end().to_string());
        out.push(pem_text);
    }
    out.retain(|s| !s.is_empty() && s != REDACTED);
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_strings_cover_every_secret_form_and_no_public_value() {
        let bundle = testing::bundle();
        let secrets = secret_strings(bundle);
        let has = |s: &str| secrets.iter().any(|x| x == s);
        assert!(has(&bundle.cluster.secret));
        assert!(has(&bundle.secrets.bootstrap_token));
        assert!(has(bundle
            .secrets
            .secretbox_encryption_secret
            .as_deref()
            .unwrap()));
        assert!(has(&bundle.trustd_info.token));
        for key in [
            &bundle.certs.etcd.key,
            &bundle.certs.k8s.key,
            &bundle.certs.k8s_aggregator.key,
            &bundle.certs.k8s_service_account.key,
            &bundle.certs.os.key,
        ] {
            assert!(has(key));
            let pem_text = pki::decode_b64_pem("key", key).unwrap();
            assert!(has(&pem_text));
            let body: Vec<&str> = pem_text
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .collect();
            assert!(has(&body.concat()));
            for line in body.iter().filter(|l| l.len() >= 16) {
                assert!(has(line), "missing PEM line");
            }
        }
        // The OS key (Ed25519) is one 64-character line: it must be there on its own.
        let os_key = pki::decode_b64_pem("key", &bundle.certs.os.key).unwrap();
        let os_body: Vec<&str> = os_key.lines().filter(|l| !l.starts_with("-----")).collect();
        assert_eq!(os_body.len(), 1);
        assert_eq!(os_body[0].len(), 64);
        assert!(has(os_body[0]));

        let public = [
            &bundle.cluster.id,
            &bundle.certs.etcd.crt,
            &bundle.certs.k8s.crt,
            &bundle.certs.k8s_aggregator.crt,
            &bundle.certs.os.crt,
        ];
        for value in public {
            assert!(!has(value));
            let pem_text = pki::decode_b64_pem("crt", value).unwrap_or_default();
            for line in pem_text.lines() {
                assert!(!has(line), "public certificate line listed as secret");
            }
        }
        assert!(
            secrets.windows(2).all(|w| w[0].len() >= w[1].len()),
            "longest first"
        );
        assert!(secrets.iter().all(|s| s.len() >= 16));
    }

    #[test]
    fn loading_is_fast() {
        let text = testing::bundle().to_yaml();
        let started = std::time::Instant::now();
        for _ in 0..20 {
            Bundle::from_yaml(&text).unwrap();
        }
        let per_load = started.elapsed() / 20;
        eprintln!("Bundle::from_yaml: {per_load:?} per load");
        assert!(per_load < std::time::Duration::from_millis(200));
    }
}
