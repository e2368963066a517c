//! The talosconfig client file (api.md §11, config.md §2): reading, writing in talosctl's
//! layout, issuing a fresh admin identity from a bundle, and deciding when it must be renewed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::bundle::Bundle;
use crate::error::{Error, ErrorKind, Result};
use crate::pki::{self, ADMIN_VALIDITY, CertInfo};
use crate::yaml::{self, kind_name};

/// A talosconfig: the current context name and the contexts by name. Contexts sit in a sorted
/// map because talosctl writes a Go map, whose keys go-yaml sorts.
#[derive(Clone, Default, PartialEq)]
pub struct TalosConfig {
    pub context: Option<String>,
    pub contexts: BTreeMap<String, Context>,
}

/// One context. `ca`, `crt` and `key` are standard base64 of PEM text, as in the file.
/// Fields this crate does not model (`auth`, `cluster`, `proxy-url`, ...) are kept in `extra`
/// and written back after the known ones.
#[derive(Clone, Default, PartialEq)]
pub struct Context {
    pub endpoints: Vec<String>,
    pub nodes: Vec<String>,
    pub ca: String,
    pub crt: String,
    pub key: String,
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for TalosConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TalosConfig")
            .field("context", &self.context)
            .field("contexts", &self.contexts)
            .finish()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `extra` may hold basic-auth passwords, so only its keys are shown.
        f.debug_struct("Context")
            .field("endpoints", &self.endpoints)
            .field("nodes", &self.nodes)
            .field("ca", &self.ca)
            .field("crt", &self.crt)
            .field(
                "key",
                &if self.key.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .field("extra_keys", &self.extra.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Known optional fields in talosctl's struct order, written after `key`.
const KNOWN_EXTRA_ORDER: &[&str] = &["auth", "cluster", "proxy-url"];

impl TalosConfig {
    /// Parses a talosconfig. An empty file is an empty config, as talosctl treats it.
    pub fn from_yaml(text: &str) -> Result<TalosConfig> {
        let value = yaml::parse(text, "talosconfig", ErrorKind::InvalidTalosconfig)?;
        let root = match &value {
            Value::Null => return Ok(TalosConfig::default()),
            Value::Object(map) => map,
            other => {
                return Err(invalid(format!(
                    "talosconfig: expected a mapping, got {}",
                    kind_name(other)
                )));
            }
        };
        let context = match root.get("context") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(invalid(format!(
                    "talosconfig: context: expected a string, got {}",
                    kind_name(other)
                )));
            }
        };
        let mut contexts = BTreeMap::new();
        match root.get("contexts") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (name, ctx) in map {
                    contexts.insert(name.clone(), Context::from_value(name, ctx)?);
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "talosconfig: contexts: expected a mapping, got {}",
                    kind_name(other)
                )));
            }
        }
        Ok(TalosConfig { context, contexts })
    }

    /// The file as talosctl writes it: 4-space indentation, `context` then `contexts`; per
    /// context `endpoints` (always, `[]` when empty), `nodes` (omitted when empty), `ca`, `crt`,
    /// `key` (each omitted when empty), then the preserved extra fields.
    pub fn to_yaml(&self) -> String {
        let mut out = format!(
            "context: {}\n",
            yaml::scalar(self.context.as_deref().unwrap_or(""))
        );
        if self.contexts.is_empty() {
            out.push_str("contexts: {}\n");
            return out;
        }
        out.push_str("contexts:\n");
        for (name, ctx) in &self.contexts {
            out.push_str(&format!("    {}:\n", yaml::scalar(name)));
            let endpoints = Value::from(ctx.endpoints.clone());
            yaml::emit_entry(&mut out, 8, "endpoints", &endpoints);
            if !ctx.nodes.is_empty() {
                yaml::emit_entry(&mut out, 8, "nodes", &Value::from(ctx.nodes.clone()));
            }
            for (key, value) in [("ca", &ctx.ca), ("crt", &ctx.crt), ("key", &ctx.key)] {
                if !value.is_empty() {
                    out.push_str(&format!("        {key}: {}\n", yaml::scalar(value)));
                }
            }
            let known = KNOWN_EXTRA_ORDER
                .iter()
                .filter_map(|k| ctx.extra.get_key_value(*k));
            let unknown = ctx
                .extra
                .iter()
                .filter(|(k, _)| !KNOWN_EXTRA_ORDER.contains(&k.as_str()));
            for (key, value) in known.chain(unknown) {
                yaml::emit_entry(&mut out, 8, key, value);
            }
        }
        out
    }

    /// The talosconfig `gen config` writes for `cluster_name`, with a freshly issued admin
    /// certificate (Ed25519 for the default OS CA, `O=os:admin`, valid 365 days from `now`).
    pub fn for_cluster(
        bundle: &Bundle,
        cluster_name: &str,
        endpoints: &[String],
        nodes: &[String],
        now: OffsetDateTime,
    ) -> Result<TalosConfig> {
        if cluster_name.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "talosconfig: cluster name must not be empty",
            ));
        }
        let context = Context::for_bundle(bundle, endpoints, nodes, now)?;
        Ok(TalosConfig {
            context: Some(cluster_name.to_string()),
            contexts: BTreeMap::from([(cluster_name.to_string(), context)]),
        })
    }

    /// Why the client identity of `context` must be re-issued, or None when it is still good:
    /// missing context or certificate, unparseable material, a key that does not match the
    /// certificate, a certificate not signed by the bundle's OS CA, a `ca` that does not include
    /// that CA, or expiry within `renew_before` of `now`.
    pub fn needs_renewal(
        &self,
        context: &str,
        bundle_os_ca_crt_pem: &str,
        renew_before: Duration,
        now: OffsetDateTime,
    ) -> Option<String> {
        let Some(ctx) = self.contexts.get(context) else {
            return Some(format!("context {context:?} is not in the talosconfig"));
        };
        if ctx.crt.is_empty() || ctx.key.is_empty() {
            return Some(format!("context {context:?} has no client certificate"));
        }
        let (ca_pem, cert_pem, key_pem) = match ctx.admin_identity() {
            Ok(identity) => identity,
            Err(e) => return Some(format!("context {context:?}: {e:#}")),
        };
        let info = match CertInfo::parse(&cert_pem) {
            Ok(info) => info,
            Err(e) => {
                return Some(format!(
                    "context {context:?}: client certificate unparseable: {e:#}"
                ));
            }
        };
        if !info.key_matches(&key_pem) {
            return Some(format!(
                "context {context:?}: client key does not match the client certificate"
            ));
        }
        if !info.issuer_matches(bundle_os_ca_crt_pem) {
            return Some(format!(
                "context {context:?}: client certificate was not signed by the secrets bundle's OS CA"
            ));
        }
        if !ca_includes(&ca_pem, bundle_os_ca_crt_pem) {
            return Some(format!(
                "context {context:?}: ca does not contain the secrets bundle's OS CA"
            ));
        }
        let expiry = info
            .not_after
            .format(&Rfc3339)
            .unwrap_or_else(|_| info.not_after.to_string());
        if info.not_after <= now {
            return Some(format!(
                "context {context:?}: client certificate expired at {expiry}"
            ));
        }
        if info.remaining(now) <= renew_before {
            return Some(format!(
                "context {context:?}: client certificate expires at {expiry}, within the renewal window of {}h",
                renew_before.as_secs() / 3600
            ));
        }
        None
    }
}

impl Context {
    fn from_value(name: &str, value: &Value) -> Result<Context> {
        let Some(map) = value.as_object() else {
            return Err(invalid(format!(
                "talosconfig: contexts.{name}: expected a mapping, got {}",
                kind_name(value)
            )));
        };
        let mut ctx = Context::default();
        let string = |key: &str, v: &Value| -> Result<String> {
            match v {
                Value::Null => Ok(String::new()),
                Value::String(s) => Ok(s.clone()),
                other => Err(invalid(format!(
                    "talosconfig: contexts.{name}.{key}: expected a string, got {}",
                    kind_name(other)
                ))),
            }
        };
        let list = |key: &str, v: &Value| -> Result<Vec<String>> {
            match v {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) => items.iter().map(|i| string(key, i)).collect(),
                other => Err(invalid(format!(
                    "talosconfig: contexts.{name}.{key}: expected a list of strings, got {}",
                    kind_name(other)
                ))),
            }
        };
        let mut target = String::new();
        for (key, v) in map {
            match key.as_str() {
                "endpoints" => ctx.endpoints = list(key, v)?,
                "nodes" => ctx.nodes = list(key, v)?,
                "ca" => ctx.ca = string(key, v)?,
                "crt" => ctx.crt = string(key, v)?,
                "key" => ctx.key = string(key, v)?,
                // Deprecated single endpoint: talosctl appends it to `endpoints` on load.
                "target" => target = string(key, v)?,
                _ => {
                    ctx.extra.insert(key.clone(), v.clone());
                }
            }
        }
        if !target.is_empty() {
            ctx.endpoints.push(target);
        }
        Ok(ctx)
    }

    /// A context holding a new admin identity issued from `bundle`'s OS CA.
    pub fn for_bundle(
        bundle: &Bundle,
        endpoints: &[String],
        nodes: &[String],
        now: OffsetDateTime,
    ) -> Result<Context> {
        let (ca_crt, ca_key) = bundle.os_ca_pem()?;
        let issued = pki::issue_admin_cert(&ca_crt, &ca_key, &["os:admin"], ADMIN_VALIDITY, now)?;
        Ok(Context {
            endpoints: endpoints.to_vec(),
            nodes: nodes.to_vec(),
            ca: bundle.certs.os.crt.clone(),
            crt: pki::encode_b64_pem(&issued.cert_pem),
            key: pki::encode_b64_pem(&issued.key_pem),
            extra: Map::new(),
        })
    }

    /// (ca PEM, client certificate PEM, client key PEM), decoded from the base64 fields.
    pub fn admin_identity(&self) -> Result<(String, String, String)> {
        let decode = |name, value| {
            pki::decode_b64_pem(name, value).map_err(|e| e.with_kind(ErrorKind::InvalidTalosconfig))
        };
        Ok((
            decode("ca", &self.ca)?,
            decode("crt", &self.crt)?,
            decode("key", &self.key)?,
        ))
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidTalosconfig, message)
}

/// Whether the PEM bundle `ca_pem` contains the certificate `wanted_pem` (by DER equality).
fn ca_includes(ca_pem: &str, wanted_pem: &str) -> bool {
    let ders = |text: &str| -> Vec<Vec<u8>> {
        pem::parse_many(text)
            .unwrap_or_default()
            .into_iter()
            .filter(|b| b.tag() == "CERTIFICATE")
            .map(|b| b.into_contents())
            .collect()
    };
    let have = ders(ca_pem);
    let wanted = ders(wanted_pem);
    !wanted.is_empty() && wanted.iter().all(|w| have.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const DAY: Duration = Duration::from_secs(86400);

    fn fixture_bundle() -> Bundle {
        crate::testing::bundle().clone()
    }

    #[test]
    fn for_cluster_writes_talosctl_layout() {
        let bundle = fixture_bundle();
        let now = datetime!(2026-11-30 10:00:00 UTC);
        let cfg = TalosConfig::for_cluster(&bundle, "demo", &[], &[], now).unwrap();
        let text = cfg.to_yaml();
        let ctx = &cfg.contexts["demo"];
        let expected = format!(
            "context: demo\ncontexts:\n    demo:\n        endpoints: []\n        ca: {}\n        crt: {}\n        key: {}\n",
            bundle.certs.os.crt, ctx.crt, ctx.key
        );
        assert_eq!(text, expected);
        assert_eq!(TalosConfig::from_yaml(&text).unwrap(), cfg);

        let (ca, crt, key) = ctx.admin_identity().unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.starts_with("-----BEGIN ED25519 PRIVATE KEY-----"));
        let info = CertInfo::parse(&crt).unwrap();
        assert_eq!(info.subject_orgs, ["os:admin"]);
        assert_eq!(info.not_after - info.not_before, time::Duration::days(365));
        assert!(!format!("{cfg:?}").contains(&ctx.key));
    }

    #[test]
    fn endpoints_nodes_and_extra_fields_round_trip() {
        let text = "context: b\ncontexts:\n    a:\n        endpoints:\n            - 10.0.0.1\n            - 10.0.0.2\n        nodes:\n            - 10.0.0.3\n        ca: Q0E=\n        auth:\n            basic:\n                username: u\n                password: p\n        cluster: prod\n    b:\n        endpoints: []\n";
        let cfg = TalosConfig::from_yaml(text).unwrap();
        assert_eq!(cfg.contexts["a"].endpoints, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(cfg.contexts["a"].nodes, ["10.0.0.3"]);
        assert_eq!(cfg.to_yaml(), text);
        assert!(!format!("{cfg:?}").contains("password: p"));
    }

    #[test]
    fn contexts_are_sorted_and_target_moves_into_endpoints() {
        let text = "context: z\ncontexts:\n    z:\n        target: 1.1.1.1\n    a:\n        endpoints: [2.2.2.2]\n";
        let cfg = TalosConfig::from_yaml(text).unwrap();
        assert_eq!(cfg.contexts["z"].endpoints, ["1.1.1.1"]);
        assert_eq!(
            cfg.to_yaml(),
            "context: z\ncontexts:\n    a:\n        endpoints:\n            - 2.2.2.2\n    z:\n        endpoints:\n            - 1.1.1.1\n"
        );
        assert_eq!(
            TalosConfig::from_yaml("").unwrap().to_yaml(),
            "context: \"\"\ncontexts: {}\n"
        );
        let err = TalosConfig::from_yaml("contexts:\n    a:\n        endpoints: 3\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "talosconfig: contexts.a.endpoints: expected a list of strings, got a number"
        );
    }

    #[test]
    fn renewal_reasons() {
        let bundle = fixture_bundle();
        let (ca_crt, _) = bundle.os_ca_pem().unwrap();
        let now = datetime!(2026-11-30 10:00:00 UTC);
        let cfg = TalosConfig::for_cluster(&bundle, "demo", &[], &[], now).unwrap();
        assert_eq!(cfg.needs_renewal("demo", &ca_crt, 30 * DAY, now), None);

        let reason = cfg
            .needs_renewal("demo", &ca_crt, 30 * DAY, now + 340 * DAY)
            .unwrap();
        assert!(
            reason.contains("expires at 2027-11-30T10:00:00Z"),
            "{reason}"
        );
        let reason = cfg
            .needs_renewal("demo", &ca_crt, 30 * DAY, now + 400 * DAY)
            .unwrap();
        assert!(reason.contains("expired at"), "{reason}");
        let reason = cfg.needs_renewal("other", &ca_crt, 30 * DAY, now).unwrap();
        assert!(reason.contains("not in the talosconfig"), "{reason}");

        let other = Bundle::generate_at((1, 6), now).unwrap();
        let (other_ca, _) = other.os_ca_pem().unwrap();
        let reason = cfg.needs_renewal("demo", &other_ca, 30 * DAY, now).unwrap();
        assert!(reason.contains("not signed by"), "{reason}");

        // The ca field must carry the bundle CA too, or the client cannot trust the nodes.
        let mut stale_ca = cfg.clone();
        stale_ca.contexts.get_mut("demo").unwrap().ca = other.certs.os.crt.clone();
        let reason = stale_ca
            .needs_renewal("demo", &ca_crt, 30 * DAY, now)
            .unwrap();
        assert!(reason.contains("ca does not contain"), "{reason}");

        // A key from another identity.
        let mut swapped = cfg.clone();
        let fresh = TalosConfig::for_cluster(&bundle, "demo", &[], &[], now).unwrap();
        swapped.contexts.get_mut("demo").unwrap().key = fresh.contexts["demo"].key.clone();
        let reason = swapped
            .needs_renewal("demo", &ca_crt, 30 * DAY, now)
            .unwrap();
        assert!(reason.contains("does not match"), "{reason}");

        let mut broken = cfg.clone();
        broken.contexts.get_mut("demo").unwrap().crt = "%%%".into();
        let reason = broken
            .needs_renewal("demo", &ca_crt, 30 * DAY, now)
            .unwrap();
        assert!(reason.contains("crt: not valid base64"), "{reason}");

        let mut empty = cfg;
        empty.contexts.get_mut("demo").unwrap().key.clear();
        let reason = empty.needs_renewal("demo", &ca_crt, 30 * DAY, now).unwrap();
        assert!(reason.contains("no client certificate"), "{reason}");
    }
}
