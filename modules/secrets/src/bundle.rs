//! The secrets bundle as `talosctl gen secrets` writes it.

/// A Talos secrets bundle. Certificates and keys are kept as they sit in the file:
/// standard base64 of the complete PEM text (config.md §1.1).
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub cluster: ClusterSecrets,
    pub secrets: Secrets,
    pub trustd_info: TrustdInfo,
    pub certs: Certs,
}

#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecrets {
    pub id: String,
    pub secret: String,
}

#[derive(Clone, PartialEq, Eq)]
pub struct Secrets {
    pub bootstrap_token: String,
    pub secretbox_encryption_secret: Option<String>,
    pub aescbc_encryption_secret: Option<String>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct TrustdInfo {
    pub token: String,
}

#[derive(Clone, PartialEq, Eq)]
pub struct Certs {
    pub etcd: CertAndKey,
    pub k8s: CertAndKey,
    pub k8s_aggregator: CertAndKey,
    pub k8s_service_account: KeyOnly,
    pub os: CertAndKey,
}

/// Base64 (standard, padded) of the PEM certificate and of the PEM private key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertAndKey {
    pub crt: String,
    pub key: String,
}

#[derive(Clone, PartialEq, Eq)]
pub struct KeyOnly {
    pub key: String,
}

// Debug is deliberately not derived: a bundle must never reach a log line by accident.
impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bundle { .. }")
    }
}
