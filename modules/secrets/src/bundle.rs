//! The secrets bundle as `talosctl gen secrets` writes it.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{self, KeyKind};
use crate::pki::{self, CA_VALIDITY};
use crate::yaml::{self, kind_name};

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

impl Bundle {
    /// Parses `secrets.yaml` (comments allowed) and validates it as Talos does (config.md §1.6).
    pub fn from_yaml(text: &str) -> Result<Bundle> {
        let value = yaml::parse(text, "secrets bundle", ErrorKind::InvalidBundle)?;
        Bundle::from_value(&value)
    }

    /// Builds a bundle from an already parsed document: the file form with lowercase keys
    /// (as an Ansible vault dict holds it) or the capitalised JSON form (config.md §1.7).
    /// Keys are matched case-insensitively. All problems are reported together, by key path.
    pub fn from_value(value: &Value) -> Result<Bundle> {
        let Some(root) = value.as_object() else {
            return Err(Error::new(
                ErrorKind::InvalidBundle,
                "invalid secrets bundle: expected a mapping with cluster, secrets, trustdinfo and certs",
            ));
        };
        let mut v = Validator::default();

        let cluster = v.section(root, "cluster");
        let cluster = ClusterSecrets {
            id: v.required(cluster, "cluster", "id"),
            secret: v.required(cluster, "cluster", "secret"),
        };

        let secrets = v.section(root, "secrets");
        let bootstrap_token = v.required(secrets, "secrets", "bootstraptoken");
        let secretbox = v.optional(secrets, "secrets", "secretboxencryptionsecret");
        let aescbc = v.optional(secrets, "secrets", "aescbcencryptionsecret");
        if secrets.is_some() {
            match (&secretbox, &aescbc) {
                (Some(_), Some(_)) => v.error(
                    "secrets: both secretboxencryptionsecret and aescbcencryptionsecret are set \
                     (expected exactly one)",
                ),
                (None, None) => v.error(
                    "secrets: expected one of secretboxencryptionsecret or aescbcencryptionsecret",
                ),
                _ => {}
            }
        }
        let secrets = Secrets {
            bootstrap_token,
            secretbox_encryption_secret: secretbox,
            aescbc_encryption_secret: aescbc,
        };

        let trustd = v.section(root, "trustdinfo");
        let trustd_info = TrustdInfo {
            token: v.required(trustd, "trustdinfo", "token"),
        };

        let certs = v.section(root, "certs");
        let mut cert_and_key = |name: &str| {
            let path = format!("certs.{name}");
            let section = certs.and_then(|c| v.section(c, &path));
            CertAndKey {
                crt: v.cert(section, &path),
                key: v.key(section, &path),
            }
        };
        let etcd = cert_and_key("etcd");
        let k8s = cert_and_key("k8s");
        let k8s_aggregator = cert_and_key("k8saggregator");
        let os = cert_and_key("os");
        let sa_section = certs.and_then(|c| v.section(c, "certs.k8sserviceaccount"));
        let k8s_service_account = KeyOnly {
            key: v.key(sa_section, "certs.k8sserviceaccount"),
        };

        if !v.errors.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidBundle,
                format!("invalid secrets bundle: {}", v.errors.join("; ")),
            ));
        }
        Ok(Bundle {
            cluster,
            secrets,
            trustd_info,
            certs: Certs {
                etcd,
                k8s,
                k8s_aggregator,
                k8s_service_account,
                os,
            },
        })
    }

    /// The file form as `talosctl gen secrets` writes it (config.md §1.1): 4-space indentation,
    /// fixed key order, empty encryption secrets omitted.
    pub fn to_yaml(&self) -> String {
        let s = yaml::scalar;
        let mut out = String::new();
        let _ = write!(
            out,
            "cluster:\n    id: {}\n    secret: {}\nsecrets:\n    bootstraptoken: {}\n",
            s(&self.cluster.id),
            s(&self.cluster.secret),
            s(&self.secrets.bootstrap_token)
        );
        // Go struct order: AESCBCEncryptionSecret before SecretboxEncryptionSecret (§1.7).
        for (key, value) in [
            (
                "aescbcencryptionsecret",
                &self.secrets.aescbc_encryption_secret,
            ),
            (
                "secretboxencryptionsecret",
                &self.secrets.secretbox_encryption_secret,
            ),
        ] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                let _ = writeln!(out, "    {key}: {}", s(value));
            }
        }
        let _ = write!(
            out,
            "trustdinfo:\n    token: {}\ncerts:\n",
            s(&self.trustd_info.token)
        );
        for (name, pair) in [
            ("etcd", &self.certs.etcd),
            ("k8s", &self.certs.k8s),
            ("k8saggregator", &self.certs.k8s_aggregator),
        ] {
            let _ = write!(
                out,
                "    {name}:\n        crt: {}\n        key: {}\n",
                s(&pair.crt),
                s(&pair.key)
            );
        }
        let _ = write!(
            out,
            "    k8sserviceaccount:\n        key: {}\n",
            s(&self.certs.k8s_service_account.key)
        );
        let _ = write!(
            out,
            "    os:\n        crt: {}\n        key: {}\n",
            s(&self.certs.os.crt),
            s(&self.certs.os.key)
        );
        out
    }

    /// The file form as a JSON value with the lowercase file keys (what an Ansible vault dict
    /// would hold). Empty encryption secrets are omitted as in the file.
    pub fn to_value(&self) -> Value {
        let mut secrets = Map::new();
        secrets.insert(
            "bootstraptoken".into(),
            self.secrets.bootstrap_token.clone().into(),
        );
        for (key, value) in [
            (
                "aescbcencryptionsecret",
                &self.secrets.aescbc_encryption_secret,
            ),
            (
                "secretboxencryptionsecret",
                &self.secrets.secretbox_encryption_secret,
            ),
        ] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                secrets.insert(key.into(), value.into());
            }
        }
        let pair = |p: &CertAndKey| serde_json::json!({"crt": p.crt, "key": p.key});
        serde_json::json!({
            "cluster": {"id": self.cluster.id, "secret": self.cluster.secret},
            "secrets": secrets,
            "trustdinfo": {"token": self.trustd_info.token},
            "certs": {
                "etcd": pair(&self.certs.etcd),
                "k8s": pair(&self.certs.k8s),
                "k8saggregator": pair(&self.certs.k8s_aggregator),
                "k8sserviceaccount": {"key": self.certs.k8s_service_account.key},
                "os": pair(&self.certs.os),
            }
        })
    }

    /// A new bundle as `talosctl gen secrets --talos-version vMAJOR.MINOR` makes it
    /// (config.md §1.2–1.4). RSA-4096 key generation dominates the cost (about a second).
    pub fn generate(contract: (u64, u64)) -> Result<Bundle> {
        Bundle::generate_at(contract, OffsetDateTime::now_utc())
    }

    /// [`Bundle::generate`] with an explicit clock reading, shared by every CA.
    pub fn generate_at(contract: (u64, u64), now: OffsetDateTime) -> Result<Bundle> {
        let std_b64 = base64::engine::general_purpose::STANDARD;
        let url_b64 = base64::engine::general_purpose::URL_SAFE;
        let id_bytes = keys::random_bytes::<32>()?;
        // 1.14 switched the cluster ID to the standard alphabet (§1.8).
        let id = if contract >= (1, 14) {
            std_b64.encode(id_bytes)
        } else {
            url_b64.encode(id_bytes)
        };
        let encryption = std_b64.encode(keys::random_bytes::<32>()?);
        let (secretbox, aescbc) = if contract <= (1, 2) {
            (None, Some(encryption))
        } else {
            (Some(encryption), None)
        };
        let ca = |kind, orgs: &[&str]| -> Result<CertAndKey> {
            let issued = pki::generate_ca(kind, orgs, now, CA_VALIDITY)?;
            Ok(CertAndKey {
                crt: pki::encode_b64_pem(&issued.cert_pem),
                key: pki::encode_b64_pem(&issued.key_pem),
            })
        };
        let sa_kind = if contract <= (1, 6) {
            KeyKind::EcdsaP256
        } else {
            KeyKind::Rsa4096
        };
        Ok(Bundle {
            cluster: ClusterSecrets {
                id,
                secret: std_b64.encode(keys::random_bytes::<32>()?),
            },
            secrets: Secrets {
                bootstrap_token: token()?,
                secretbox_encryption_secret: secretbox,
                aescbc_encryption_secret: aescbc,
            },
            trustd_info: TrustdInfo { token: token()? },
            certs: Certs {
                etcd: ca(KeyKind::EcdsaP256, &["etcd"])?,
                k8s: ca(KeyKind::EcdsaP256, &["kubernetes"])?,
                // Talos asks for CN=front-proxy, but its CA routine only copies O: empty subject.
                k8s_aggregator: ca(KeyKind::EcdsaP256, &[])?,
                k8s_service_account: KeyOnly {
                    key: pki::encode_b64_pem(&keys::generate(sa_kind)?.pem),
                },
                os: ca(KeyKind::Ed25519, &["talos"])?,
            },
        })
    }

    /// The OS (Talos API) CA as PEM text: (certificate, private key).
    pub fn os_ca_pem(&self) -> Result<(String, String)> {
        let decode = |name, value| {
            pki::decode_b64_pem(name, value).map_err(|e| e.with_kind(ErrorKind::InvalidBundle))
        };
        Ok((
            decode("certs.os.crt", &self.certs.os.crt)?,
            decode("certs.os.key", &self.certs.os.key)?,
        ))
    }
}

/// Parses `vX.Y[.Z...]` or `X.Y` into (major, minor) the way talosctl reads `--talos-version`.
pub fn parse_contract(version: &str) -> Result<(u64, u64)> {
    let v = version.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parts = v.splitn(3, '.');
    let major = parts.next().and_then(|p| p.parse::<u64>().ok());
    let minor = parts.next().and_then(|p| {
        let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
        (digits.len() == p.len() && !digits.is_empty())
            .then(|| digits.parse::<u64>().ok())
            .flatten()
    });
    match (major, minor) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(Error::new(
            ErrorKind::InvalidContract,
            format!("talos version {version:?}: expected vMAJOR.MINOR (for example v1.13)"),
        )),
    }
}

const TOKEN_ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// `[a-z0-9]{6}.[a-z0-9]{16}`: one CSPRNG byte per character, bytes >= 252 redrawn so that
/// `% 36` is unbiased (252 = 7 × 36).
fn token() -> Result<String> {
    Ok(format!("{}.{}", random_chars(6)?, random_chars(16)?))
}

fn random_chars(n: usize) -> Result<String> {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        let [b] = keys::random_bytes::<1>()?;
        if b < 252 {
            out.push(TOKEN_ALPHABET[(b % 36) as usize] as char);
        }
    }
    Ok(out)
}

/// Collects every problem instead of stopping at the first, like Talos's bundle validation.
#[derive(Default)]
struct Validator {
    errors: Vec<String>,
}

/// Case-insensitive key lookup, so both `bootstraptoken` and `BootstrapToken` match.
fn lookup<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key)
        .or_else(|| {
            map.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

impl Validator {
    fn error(&mut self, msg: impl Into<String>) {
        self.errors.push(msg.into());
    }

    /// `path` is the parent's path for nested sections ("certs.os"); for top-level sections it
    /// is the key itself.
    fn section<'a>(
        &mut self,
        parent: &'a Map<String, Value>,
        path: &str,
    ) -> Option<&'a Map<String, Value>> {
        let key = path.rsplit('.').next().unwrap_or(path);
        match lookup(parent, key) {
            None => {
                self.error(format!("{path}: missing (expected a mapping)"));
                None
            }
            Some(Value::Object(map)) => Some(map),
            Some(other) => {
                self.error(format!(
                    "{path}: expected a mapping, got {}",
                    kind_name(other)
                ));
                None
            }
        }
    }

    fn optional(
        &mut self,
        section: Option<&Map<String, Value>>,
        path: &str,
        key: &str,
    ) -> Option<String> {
        match lookup(section?, key)? {
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.clone()),
            other => {
                self.error(format!(
                    "{path}.{key}: expected a string, got {}",
                    kind_name(other)
                ));
                None
            }
        }
    }

    /// A required non-empty string. A missing parent section was already reported.
    fn required(&mut self, section: Option<&Map<String, Value>>, path: &str, key: &str) -> String {
        let Some(map) = section else {
            return String::new();
        };
        match lookup(map, key) {
            Some(Value::String(s)) if !s.is_empty() => return s.clone(),
            Some(
                other @ (Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_)),
            ) => self.error(format!(
                "{path}.{key}: expected a string, got {}",
                kind_name(other)
            )),
            _ => self.error(format!("{path}.{key}: missing or empty")),
        }
        String::new()
    }

    fn cert(&mut self, section: Option<&Map<String, Value>>, path: &str) -> String {
        let value = self.required(section, path, "crt");
        if !value.is_empty() {
            let name = format!("{path}.crt");
            if let Err(e) = pki::decode_b64_pem(&name, &value).and_then(|pem_text| {
                pki::CertInfo::parse(&pem_text)
                    .map_err(|e| Error::new(e.kind(), format!("{name}: {e}")))
            }) {
                self.error(format!(
                    "{name}: not a valid base64 PEM certificate ({})",
                    reason(&e, &name)
                ));
            }
        }
        value
    }

    fn key(&mut self, section: Option<&Map<String, Value>>, path: &str) -> String {
        let value = self.required(section, path, "key");
        if !value.is_empty() {
            let name = format!("{path}.key");
            if let Err(e) = pki::decode_b64_pem(&name, &value).and_then(|pem_text| {
                keys::check(&pem_text).map_err(|e| Error::new(e.kind(), format!("{name}: {e}")))
            }) {
                self.error(format!(
                    "{name}: not a valid base64 PEM private key ({})",
                    reason(&e, &name)
                ));
            }
        }
        value
    }
}

/// The error text without the repeated "name: " prefix.
fn reason(e: &Error, name: &str) -> String {
    let text = format!("{e:#}");
    text.strip_prefix(&format!("{name}: "))
        .unwrap_or(&text)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;
    use x509_parser::prelude::{FromDer, ParsedExtension, X509Certificate};

    /// Upstream's two bundles, for the parity tests (after `ferro_talos_fixtures::available()`).
    fn upstream_bundles() -> [String; 2] {
        [
            ferro_talos_fixtures::read("v1.13.6/stability-secrets.yaml"),
            ferro_talos_fixtures::read("v1.13.6/secrets-testdata.yaml"),
        ]
    }

    /// A bundle of our own, for the tests that need any valid bundle.
    fn generated() -> String {
        crate::testing::bundle().to_yaml()
    }

    fn without_leading_comment(text: &str) -> &str {
        match text.strip_prefix('#') {
            Some(rest) => rest.split_once('\n').map_or("", |(_, body)| body),
            None => text,
        }
    }

    #[test]
    fn fixtures_round_trip_byte_for_byte() {
        if !ferro_talos_fixtures::available() {
            return;
        }
        let [stability, testdata] = upstream_bundles();
        for text in [&stability, &testdata] {
            let bundle = Bundle::from_yaml(text).unwrap();
            assert_eq!(bundle.to_yaml(), without_leading_comment(text));
            assert_eq!(Bundle::from_value(&bundle.to_value()).unwrap(), bundle);
        }
        assert!(
            stability.starts_with('#'),
            "fixture should carry its comment line"
        );
    }

    #[test]
    fn capitalised_json_form_is_accepted() {
        let bundle = Bundle::from_yaml(&generated()).unwrap();
        let pair = |p: &CertAndKey| serde_json::json!({"Crt": p.crt, "Key": p.key});
        let json = serde_json::json!({
            "Cluster": {"Id": bundle.cluster.id, "Secret": bundle.cluster.secret},
            "Secrets": {
                "BootstrapToken": bundle.secrets.bootstrap_token,
                "AESCBCEncryptionSecret": null,
                "SecretboxEncryptionSecret": bundle.secrets.secretbox_encryption_secret,
            },
            "TrustdInfo": {"Token": bundle.trustd_info.token},
            "Certs": {
                "Etcd": pair(&bundle.certs.etcd),
                "K8s": pair(&bundle.certs.k8s),
                "K8sAggregator": pair(&bundle.certs.k8s_aggregator),
                "K8sServiceAccount": {"Key": bundle.certs.k8s_service_account.key},
                "OS": pair(&bundle.certs.os),
            }
        });
        assert_eq!(Bundle::from_value(&json).unwrap(), bundle);
    }

    #[test]
    fn validation_collects_every_error_without_leaking() {
        let bundle = Bundle::from_yaml(&generated()).unwrap();
        let mut value = bundle.to_value();
        let secret_key = bundle.certs.os.key.clone();
        value["cluster"].as_object_mut().unwrap().remove("secret");
        value["secrets"]["aescbcencryptionsecret"] = "x".into();
        value["trustdinfo"]["token"] = 5.into();
        // a valid base64 PEM certificate where a key belongs, and junk where a cert belongs
        value["certs"]["os"]["key"] = bundle.certs.os.crt.clone().into();
        value["certs"]["etcd"]["crt"] = secret_key.clone().into();
        value["certs"]["k8s"]["key"] = "bm90IGEga2V5".into();
        value["certs"]
            .as_object_mut()
            .unwrap()
            .remove("k8saggregator");
        value["certs"]["k8sserviceaccount"]["key"] = "******".into();
        let err = Bundle::from_value(&value).unwrap_err().to_string();
        for expected in [
            "cluster.secret: missing or empty",
            "secrets: both secretboxencryptionsecret and aescbcencryptionsecret are set",
            "trustdinfo.token: expected a string, got a number",
            "certs.os.key: not a valid base64 PEM private key (PEM label \"CERTIFICATE\" is not a private key",
            "certs.etcd.crt: not a valid base64 PEM certificate (no CERTIFICATE PEM block)",
            "certs.k8s.key: not a valid base64 PEM private key (base64 does not decode to PEM text)",
            "certs.k8saggregator: missing (expected a mapping)",
            "certs.k8sserviceaccount.key: not a valid base64 PEM private key (holds the redaction placeholder",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in {err}");
        }
        assert!(err.starts_with("invalid secrets bundle: "));
        let pem_text = pki::decode_b64_pem("k", &secret_key).unwrap();
        for secret in [
            secret_key.as_str(),
            pem_text.lines().nth(1).unwrap(),
            bundle.cluster.secret.as_str(),
        ] {
            assert!(!err.contains(secret), "error leaks a secret: {err}");
        }

        let err = Bundle::from_yaml("cluster: {}\n").unwrap_err().to_string();
        assert!(err.contains("cluster.id: missing or empty"), "{err}");
        assert!(
            err.contains("secrets: missing (expected a mapping)"),
            "{err}"
        );
        assert!(err.contains("certs: missing (expected a mapping)"), "{err}");
        assert!(
            Bundle::from_yaml("- a\n")
                .unwrap_err()
                .to_string()
                .contains("expected a mapping")
        );
        let mut neither = bundle.to_value();
        neither["secrets"]
            .as_object_mut()
            .unwrap()
            .remove("secretboxencryptionsecret");
        let err = Bundle::from_value(&neither).unwrap_err().to_string();
        assert!(
            err.contains(
                "secrets: expected one of secretboxencryptionsecret or aescbcencryptionsecret"
            ),
            "{err}"
        );
    }

    #[test]
    fn yaml_errors_do_not_echo_values() {
        let token = &crate::testing::bundle().trustd_info.token;
        let text = generated().replace(
            &format!("    token: {token}"),
            &format!("    token: [{token}"),
        );
        let err = Bundle::from_yaml(&text).unwrap_err().to_string();
        assert!(err.starts_with("secrets bundle: not valid YAML"), "{err}");
        assert!(!err.contains(&token[..6]), "{err}");
    }

    fn cert_of(b64: &str) -> Vec<u8> {
        let pem_text = pki::decode_b64_pem("crt", b64).unwrap();
        pem::parse(pem_text).unwrap().into_contents()
    }

    fn key_label(b64: &str) -> String {
        let pem_text = pki::decode_b64_pem("key", b64).unwrap();
        pem::parse(pem_text).unwrap().tag().to_string()
    }

    fn is_token(s: &str) -> bool {
        let ok = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        };
        matches!(s.split_once('.'), Some((a, b)) if ok(a, 6) && ok(b, 16))
    }

    fn check_ca(der: &[u8], orgs: &[&str], sig_oid: &str, key_oid: &str, now: OffsetDateTime) {
        let (_, cert) = X509Certificate::from_der(der).unwrap();
        let got: Vec<&str> = cert
            .subject()
            .iter_organization()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(got, orgs);
        assert_eq!(cert.subject().iter_common_name().count(), 0);
        assert_eq!(cert.subject().as_raw(), cert.issuer().as_raw());
        if orgs.is_empty() {
            assert_eq!(
                cert.subject().as_raw(),
                &[0x30, 0x00],
                "aggregator subject must be an empty DN"
            );
        }
        assert_eq!(cert.signature_algorithm.algorithm.to_id_string(), sig_oid);
        assert_eq!(
            cert.public_key().algorithm.algorithm.to_id_string(),
            key_oid
        );
        assert_eq!(cert.validity().not_before.to_datetime(), now);
        assert_eq!(
            cert.validity().not_after.to_datetime() - now,
            time::Duration::hours(87600)
        );
        assert!(cert.tbs_certificate.serial.bits() <= 128);
        assert!(cert.verify_signature(None).is_ok());
        let oids: Vec<String> = cert
            .extensions()
            .iter()
            .map(|e| e.oid.to_id_string())
            .collect();
        assert_eq!(
            oids,
            ["2.5.29.15", "2.5.29.37", "2.5.29.19", "2.5.29.14"],
            "extension order"
        );
        let ku = cert.key_usage().unwrap().unwrap();
        assert!(ku.critical);
        assert_eq!(
            ku.value.flags, 0b10_0001,
            "digitalSignature + keyCertSign only"
        );
        let eku = cert.extended_key_usage().unwrap().unwrap();
        assert!(
            !eku.critical
                && eku.value.server_auth
                && eku.value.client_auth
                && eku.value.other.is_empty()
        );
        let bc = cert.basic_constraints().unwrap().unwrap();
        assert!(bc.critical && bc.value.ca && bc.value.path_len_constraint.is_none());
        let ski = cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.len()),
                _ => None,
            });
        assert_eq!(ski, Some(20));
        assert!(
            cert.extensions()
                .iter()
                .all(|e| e.oid.to_id_string() != "2.5.29.35"),
            "no AKI"
        );
    }

    #[test]
    fn generated_bundle_matches_talos_profile() {
        let now = datetime!(2026-11-30 10:20:30.999 UTC);
        let truncated = datetime!(2026-11-30 10:20:30 UTC);
        let started = std::time::Instant::now();
        let bundle = Bundle::generate_at((1, 13), now).unwrap();
        eprintln!("generate (RSA-4096 included) took {:?}", started.elapsed());

        assert!(is_token(&bundle.secrets.bootstrap_token));
        assert!(is_token(&bundle.trustd_info.token));
        assert_eq!(bundle.cluster.id.len(), 44);
        assert!(bundle.cluster.id.ends_with('='));
        assert!(!bundle.cluster.id.contains(['+', '/']));
        let std_b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(std_b64.decode(&bundle.cluster.secret).unwrap().len(), 32);
        let secretbox = bundle
            .secrets
            .secretbox_encryption_secret
            .as_deref()
            .unwrap();
        assert_eq!(std_b64.decode(secretbox).unwrap().len(), 32);
        assert_eq!(bundle.secrets.aescbc_encryption_secret, None);

        const ED25519: &str = "1.3.101.112";
        const ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";
        const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
        check_ca(
            &cert_of(&bundle.certs.os.crt),
            &["talos"],
            ED25519,
            ED25519,
            truncated,
        );
        check_ca(
            &cert_of(&bundle.certs.etcd.crt),
            &["etcd"],
            ECDSA_SHA256,
            EC_PUBLIC_KEY,
            truncated,
        );
        check_ca(
            &cert_of(&bundle.certs.k8s.crt),
            &["kubernetes"],
            ECDSA_SHA256,
            EC_PUBLIC_KEY,
            truncated,
        );
        check_ca(
            &cert_of(&bundle.certs.k8s_aggregator.crt),
            &[],
            ECDSA_SHA256,
            EC_PUBLIC_KEY,
            truncated,
        );

        assert_eq!(key_label(&bundle.certs.os.key), "ED25519 PRIVATE KEY");
        assert_eq!(key_label(&bundle.certs.etcd.key), "EC PRIVATE KEY");
        assert_eq!(key_label(&bundle.certs.k8s.key), "EC PRIVATE KEY");
        assert_eq!(
            key_label(&bundle.certs.k8s_aggregator.key),
            "EC PRIVATE KEY"
        );
        assert_eq!(
            key_label(&bundle.certs.k8s_service_account.key),
            "RSA PRIVATE KEY"
        );
        let sa =
            keys::load(&pki::decode_b64_pem("k", &bundle.certs.k8s_service_account.key).unwrap())
                .unwrap();
        // PKCS#1 RSAPublicKey of a 4096-bit modulus: 512 bytes of modulus (+ sign byte) inside.
        assert!(sa.public_key_raw().len() > 512 && sa.public_key_raw().len() < 530);

        // Round trip through the file form, and a fresh token set each time.
        let text = bundle.to_yaml();
        let started = std::time::Instant::now();
        assert_eq!(Bundle::from_yaml(&text).unwrap(), bundle);
        let load = started.elapsed();
        eprintln!("from_yaml with an RSA-4096 service-account key took {load:?}");
        assert!(load < std::time::Duration::from_millis(200));
        assert_eq!(Bundle::from_yaml(&text).unwrap().to_yaml(), text);
    }

    #[test]
    fn contract_switches() {
        let now = OffsetDateTime::now_utc();
        let old = Bundle::generate_at((1, 2), now).unwrap();
        assert!(old.secrets.secretbox_encryption_secret.is_none());
        assert!(old.secrets.aescbc_encryption_secret.is_some());
        assert_eq!(
            key_label(&old.certs.k8s_service_account.key),
            "EC PRIVATE KEY"
        );
        assert!(old.to_yaml().contains("\n    aescbcencryptionsecret: "));
        assert!(!old.to_yaml().contains("secretbox"));

        let v16 = Bundle::generate_at((1, 6), now).unwrap();
        assert!(v16.secrets.secretbox_encryption_secret.is_some());
        assert_eq!(
            key_label(&v16.certs.k8s_service_account.key),
            "EC PRIVATE KEY"
        );

        // 1.14: standard alphabet for the cluster id; decode proves it is std base64.
        let v14 = Bundle::generate_at((1, 14), now).unwrap();
        let std_b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(std_b64.decode(&v14.cluster.id).unwrap().len(), 32);
        assert_eq!(
            key_label(&v14.certs.k8s_service_account.key),
            "RSA PRIVATE KEY"
        );
    }

    #[test]
    fn tokens_use_the_whole_alphabet() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let t = token().unwrap();
            assert!(is_token(&t), "{t}");
            seen.extend(t.chars().filter(|c| *c != '.'));
        }
        assert_eq!(seen.len(), 36);
    }

    #[test]
    fn contract_parsing() {
        assert_eq!(parse_contract("v1.13").unwrap(), (1, 13));
        assert_eq!(parse_contract("1.14.0-rc.1").unwrap(), (1, 14));
        assert_eq!(parse_contract("v1.7.6").unwrap(), (1, 7));
        assert!(parse_contract("latest").is_err());
        assert!(parse_contract("v1").is_err());
        assert!(parse_contract("v1.x").is_err());
    }

    /// The fixture CAs were made by Talos. Re-encoding their fields with our encoder must give
    /// the very same TBSCertificate bytes, and for the Ed25519 OS CA (deterministic signatures)
    /// the very same certificate.
    #[test]
    fn ca_encoding_is_byte_identical_to_talos() {
        if !ferro_talos_fixtures::available() {
            return;
        }
        for text in upstream_bundles() {
            let bundle = Bundle::from_yaml(&text).unwrap();
            for (pair, orgs) in [
                (&bundle.certs.os, &["talos"][..]),
                (&bundle.certs.etcd, &["etcd"][..]),
                (&bundle.certs.k8s, &["kubernetes"][..]),
                (&bundle.certs.k8s_aggregator, &[][..]),
            ] {
                let der = cert_of(&pair.crt);
                let (_, cert) = X509Certificate::from_der(&der).unwrap();
                let key = keys::load(&pki::decode_b64_pem("k", &pair.key).unwrap()).unwrap();
                let ski = cert
                    .extensions()
                    .iter()
                    .find_map(|e| match e.parsed_extension() {
                        ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                        _ => None,
                    })
                    .unwrap();
                let serial_bytes = cert.tbs_certificate.raw_serial();
                let mut serial = [0u8; 16];
                let significant = serial_bytes.iter().skip_while(|b| **b == 0).count();
                serial[16 - significant..]
                    .copy_from_slice(&serial_bytes[serial_bytes.len() - significant..]);
                let template = crate::x509::Template {
                    serial,
                    subject: crate::x509::name(orgs, None),
                    not_before: cert.validity().not_before.to_datetime(),
                    not_after: cert.validity().not_after.to_datetime(),
                    key_usage: crate::x509::KU_DIGITAL_SIGNATURE | crate::x509::KU_CERT_SIGN,
                    ext_key_usage: &[crate::x509::Eku::ServerAuth, crate::x509::Eku::ClientAuth],
                    is_ca: true,
                    subject_key_id: Some(ski),
                    authority_key_id: None,
                    dns_names: &[],
                    ip_addresses: &[],
                };
                let alg = keys::signature_algorithm_der(&key).unwrap();
                let tbs =
                    crate::x509::tbs(&template, &template.subject, &keys::spki_der(&key), alg);
                assert_eq!(
                    tbs,
                    cert.tbs_certificate.as_ref(),
                    "TBS differs for O={orgs:?}"
                );
                if orgs == ["talos"] {
                    let rebuilt = crate::x509::sign(
                        &template,
                        &template.subject,
                        &keys::spki_der(&key),
                        &key,
                    )
                    .unwrap();
                    assert_eq!(rebuilt, der, "OS CA certificate differs");
                }
            }
        }
    }
}
