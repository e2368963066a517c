//! Talos secrets: the `secrets.yaml` bundle, the PKI built on it and the talosconfig client file.
//!
//! Owns key and certificate generation (OS CA, etcd/Kubernetes/aggregator CAs, service-account key,
//! admin client certificates, node server certificates) exactly as `talosctl gen secrets` and
//! `gen config` produce them. Never prints anything and never reads module arguments; no error
//! message or Debug output contains a secret value.

pub mod bundle;
mod der;
mod keys;
pub mod pki;
pub mod talosconfig;
mod x509;
mod yaml;

pub use bundle::{
    Bundle, CertAndKey, Certs, ClusterSecrets, KeyOnly, Secrets, TrustdInfo, parse_contract,
};
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
