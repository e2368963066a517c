//! The secrets bundle of a cluster that already exists, recovered from a control plane's machine
//! config, as `talosctl gen secrets --from-controlplane-config controlplane.yaml` recovers it.
//!
//! Upstream: `NewBundleFromConfig` in `pkg/machinery/config/generate/secrets/bundle.go` and the
//! accessors it calls (`types/v1alpha1/v1alpha1_clusterconfig.go`, `v1alpha1_k8s_bridge.go`,
//! `v1alpha1_discoveryidentity.go`, `container/container.go`), v1.13.9 and v1.14.0-rc.1. Which
//! config field becomes which bundle field:
//!
//! | bundle                          | config                                                     |
//! |---------------------------------|------------------------------------------------------------|
//! | `certs.os`                      | `machine.ca`                                               |
//! | `trustdinfo.token`              | `machine.token`                                            |
//! | `certs.etcd`                    | `cluster.etcd.ca`                                          |
//! | `certs.k8s`                     | `KubeAPIServerCAConfig.issuingCA`, else `cluster.ca`       |
//! | `certs.k8saggregator`           | `KubeAggregatorCAConfig.issuingCA`, else `cluster.aggregatorCA` |
//! | `certs.k8sserviceaccount`       | `KubeServiceAccountConfig.issuer.privateKey`, else `cluster.serviceAccount` |
//! | `cluster.id`, `cluster.secret`  | `cluster.id`/`cluster.secret` when either is set, else `DiscoveryIdentityConfig` |
//! | `secrets.bootstraptoken`        | `cluster.token` (`ID.SECRET`)                              |
//! | `secrets.aescbcencryptionsecret` | `cluster.aescbcEncryptionSecret`                          |
//! | `secrets.secretboxencryptionsecret` | `cluster.secretboxEncryptionSecret`, replaced (1.14) by the first key of the first provider of the first `KubeEtcdEncryptionConfig` resource list naming `secrets`, when that provider is `secretbox` |
//!
//! The typed documents (1.14) hold PEM text where the bundle holds base64 of it; the v1alpha1
//! fields hold the bundle's form already. Where upstream differs on purpose: it copies whatever is
//! there, so a worker's config (no CA keys) gives a bundle of empty or null CAs (v1.13.9) or a nil
//! dereference (v1.14.0-rc.1, `K8sAggregatorCAConfig()` is nil on a worker); here every missing
//! field is an error naming it by its config path, and the result is validated as a bundle file is.
//! Error messages never hold a value from the config.

use base64::Engine as _;
use ferro_talos_secrets::Bundle;
use ferro_talos_secrets::yaml::kind_name;
use serde_json::{Map, Value, json};

use crate::MachineConfig;
use crate::document::DocId;
use crate::error::{Error, ErrorKind, Result};

/// What to write instead when the config is a worker's.
pub const WORKER_HINT: &str =
    "a worker config holds no CA keys; use the control plane's config (controlplane.yaml)";

/// The bundle `cfg` (a control plane's config, single or multi-document) was generated from.
pub fn bundle_from_config(cfg: &MachineConfig) -> Result<Bundle> {
    let Some(v1alpha1) = cfg.v1alpha1() else {
        return Err(no_bundle(
            "the config has no v1alpha1 document (the one with machine: and cluster:); \
             a control plane's machine config has one",
        ));
    };
    if v1alpha1.pointer("/machine/type").and_then(Value::as_str) == Some("worker") {
        return Err(no_bundle(format!("machine.type is worker: {WORKER_HINT}")));
    }
    let mut r = Reader::new(cfg, v1alpha1);

    let os = r.legacy_pair("machine.ca", true);
    let trustd = r.legacy("machine.token");
    let etcd = r.legacy_pair("cluster.etcd.ca", true);
    let k8s = r.issuing_ca("KubeAPIServerCAConfig", "certs.k8s", "cluster.ca");
    let aggregator = r.issuing_ca(
        "KubeAggregatorCAConfig",
        "certs.k8saggregator",
        "cluster.aggregatorCA",
    );
    let service_account = r.service_account_key();
    let (id, secret) = r.identity();
    let bootstrap = r.bootstrap_token();
    let (aescbc, secretbox) = r.encryption();

    if !r.errors.is_empty() {
        return Err(no_bundle(r.errors.join("; ")));
    }
    let mut secrets = Map::new();
    secrets.insert("bootstraptoken".into(), json!(bootstrap));
    if let Some(s) = aescbc {
        secrets.insert("aescbcencryptionsecret".into(), json!(s));
    }
    if let Some(s) = secretbox {
        secrets.insert("secretboxencryptionsecret".into(), json!(s));
    }
    let pair = |(crt, key): (String, String)| json!({"crt": crt, "key": key});
    let value = json!({
        "cluster": {"id": id, "secret": secret},
        "secrets": secrets,
        "trustdinfo": {"token": trustd},
        "certs": {
            "etcd": pair(etcd),
            "k8s": pair(k8s),
            "k8saggregator": pair(aggregator),
            "k8sserviceaccount": {"key": service_account},
            "os": pair(os),
        },
    });
    Bundle::from_value(&value).map_err(|e| {
        // The bundle's checks name bundle keys; say where each one came from in the config.
        let mut msg = format!("{e:#}");
        for (bundle_path, config_path) in &r.sources {
            msg = msg.replace(&format!("{bundle_path}:"), &format!("{config_path}:"));
        }
        no_bundle(msg.replace(
            "invalid secrets bundle: ",
            "the config does not hold a valid secrets bundle: ",
        ))
    })
}

fn no_bundle(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::NoBundleInConfig, message)
}

struct Reader<'a> {
    cfg: &'a MachineConfig,
    v1alpha1: &'a Value,
    errors: Vec<String>,
    /// Bundle key path → the config path it was read from, for the bundle's own error messages.
    sources: Vec<(String, String)>,
}

impl<'a> Reader<'a> {
    fn new(cfg: &'a MachineConfig, v1alpha1: &'a Value) -> Reader<'a> {
        Reader {
            cfg,
            v1alpha1,
            errors: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// The first document of `kind` (upstream takes the first matching document).
    fn doc(&self, kind: &str) -> Option<&'a Value> {
        self.cfg.docs.iter().find(|d| {
            let id = DocId::of(d);
            !id.is_v1alpha1() && id.kind == kind
        })
    }

    fn source(&mut self, bundle_path: &str, config_path: &str) {
        self.sources
            .push((bundle_path.to_string(), config_path.to_string()));
    }

    /// A string at `path` (dotted, from `root`), `None` when absent, null or empty. Another type
    /// is an error naming the path.
    fn string(&mut self, root: &Value, root_name: &str, path: &str) -> Option<String> {
        let mut v = root;
        for key in path.split('.') {
            v = v.get(key)?;
        }
        let shown = if root_name.is_empty() {
            path.to_string()
        } else {
            format!("{root_name}.{path}")
        };
        match v {
            Value::Null => None,
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.clone()),
            other => {
                self.errors.push(format!(
                    "{shown}: expected a string, got {}",
                    kind_name(other)
                ));
                None
            }
        }
    }

    /// A required string of the v1alpha1 document.
    fn legacy(&mut self, path: &str) -> String {
        match self.string(self.v1alpha1, "", path) {
            Some(s) => s,
            None => {
                self.errors.push(format!("{path} is missing"));
                String::new()
            }
        }
    }

    /// `crt` and `key` of a v1alpha1 section holding base64 of PEM. The bundle key of each
    /// section is recorded for error messages.
    fn legacy_pair(&mut self, path: &str, key_required: bool) -> (String, String) {
        let bundle_path = match path {
            "machine.ca" => "certs.os",
            "cluster.etcd.ca" => "certs.etcd",
            "cluster.ca" => "certs.k8s",
            _ => "certs.k8saggregator",
        };
        self.source(&format!("{bundle_path}.crt"), &format!("{path}.crt"));
        self.source(&format!("{bundle_path}.key"), &format!("{path}.key"));
        let crt = self.legacy(&format!("{path}.crt"));
        let key = match self.string(self.v1alpha1, "", &format!("{path}.key")) {
            Some(k) => k,
            None => {
                if key_required {
                    let hint = if path == "machine.ca" {
                        WORKER_HINT
                    } else {
                        "a control plane's config holds it"
                    };
                    self.errors.push(format!("{path}.key is missing: {hint}"));
                }
                String::new()
            }
        };
        (crt, key)
    }

    /// A Kubernetes CA: from its 1.14 document (PEM text) when the config has one, else from the
    /// v1alpha1 field (base64 of PEM), as the 1.14 container looks them up.
    fn issuing_ca(&mut self, kind: &str, bundle_path: &str, legacy: &str) -> (String, String) {
        let Some(doc) = self.doc(kind) else {
            return self.legacy_pair(legacy, true);
        };
        let mut out = Vec::new();
        for field in ["cert", "key"] {
            let path = format!("issuingCA.{field}");
            let bundle_key = if field == "cert" { "crt" } else { "key" };
            self.source(
                &format!("{bundle_path}.{bundle_key}"),
                &format!("{kind}.{path}"),
            );
            out.push(match self.string(doc, kind, &path) {
                Some(pem) => b64(&pem),
                None => {
                    self.errors.push(format!(
                        "{kind}.{path} is missing: a control plane's config holds it"
                    ));
                    String::new()
                }
            });
        }
        let key = out.pop().unwrap_or_default();
        let crt = out.pop().unwrap_or_default();
        (crt, key)
    }

    fn service_account_key(&mut self) -> String {
        const KIND: &str = "KubeServiceAccountConfig";
        const BUNDLE: &str = "certs.k8sserviceaccount.key";
        if let Some(doc) = self.doc(KIND) {
            self.source(BUNDLE, &format!("{KIND}.issuer.privateKey"));
            return match self.string(doc, KIND, "issuer.privateKey") {
                Some(pem) => b64(&pem),
                None => {
                    self.errors.push(format!(
                        "{KIND}.issuer.privateKey is missing: a control plane's config holds it"
                    ));
                    String::new()
                }
            };
        }
        self.source(BUNDLE, "cluster.serviceAccount.key");
        match self.string(self.v1alpha1, "", "cluster.serviceAccount.key") {
            Some(k) => k,
            None => {
                self.errors.push(
                    "cluster.serviceAccount.key is missing: a control plane's config holds it"
                        .into(),
                );
                String::new()
            }
        }
    }

    /// The legacy `cluster.id`/`cluster.secret` take priority when either is set
    /// (`DiscoveryIdentityConfig()` of the container), else the DiscoveryIdentityConfig document.
    fn identity(&mut self) -> (String, String) {
        let id = self.string(self.v1alpha1, "", "cluster.id");
        let secret = self.string(self.v1alpha1, "", "cluster.secret");
        if id.is_some() || secret.is_some() {
            self.source("cluster.id", "cluster.id");
            self.source("cluster.secret", "cluster.secret");
            return (
                self.required_or(id, "cluster.id"),
                self.required_or(secret, "cluster.secret"),
            );
        }
        const KIND: &str = "DiscoveryIdentityConfig";
        let Some(doc) = self.doc(KIND) else {
            self.errors.push(format!(
                "cluster.id and cluster.secret are missing, and there is no {KIND} document"
            ));
            return (String::new(), String::new());
        };
        self.source("cluster.id", &format!("{KIND}.clusterID"));
        self.source("cluster.secret", &format!("{KIND}.clusterSecret"));
        let id = self.string(doc, KIND, "clusterID");
        let secret = self.string(doc, KIND, "clusterSecret");
        (
            self.required_or(id, &format!("{KIND}.clusterID")),
            self.required_or(secret, &format!("{KIND}.clusterSecret")),
        )
    }

    fn required_or(&mut self, value: Option<String>, path: &str) -> String {
        value.unwrap_or_else(|| {
            self.errors.push(format!("{path} is missing"));
            String::new()
        })
    }

    /// `cluster.token`, which upstream splits on `.` into exactly an ID and a secret.
    fn bootstrap_token(&mut self) -> String {
        self.source("secrets.bootstraptoken", "cluster.token");
        let token = self.legacy("cluster.token");
        if !token.is_empty() && token.split('.').count() != 2 {
            self.errors
                .push("cluster.token: expected a bootstrap token, ID.SECRET".into());
        }
        token
    }

    /// (aescbc, secretbox) as `NewBundleFromConfig` reads them.
    fn encryption(&mut self) -> (Option<String>, Option<String>) {
        let aescbc = self.string(self.v1alpha1, "", "cluster.aescbcEncryptionSecret");
        let mut secretbox = self.string(self.v1alpha1, "", "cluster.secretboxEncryptionSecret");
        let mut from = "cluster.secretboxEncryptionSecret".to_string();
        const KIND: &str = "KubeEtcdEncryptionConfig";
        if let Some(doc) = self.doc(KIND) {
            let resources = doc
                .pointer("/config/resources")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let secrets = resources.iter().enumerate().find(|(_, r)| {
                r.get("resources")
                    .and_then(Value::as_array)
                    .is_some_and(|names| names.iter().any(|n| n == "secrets"))
            });
            // The first provider only: a non-secretbox first provider means no secret here.
            if let Some((i, resource)) = secrets
                && let Some(key) = resource
                    .pointer("/providers/0/secretbox/keys/0")
                    .filter(|k| k.is_object())
            {
                let path = format!("config.resources[{i}].providers[0].secretbox.keys[0].secret");
                if let Some(s) = self.string(
                    key,
                    &format!("{KIND}.config.resources[{i}].providers[0].secretbox.keys[0]"),
                    "secret",
                ) {
                    secretbox = Some(s);
                    from = format!("{KIND}.{path}");
                }
            }
        }
        self.source("secrets.secretboxencryptionsecret", &from);
        self.source(
            "secrets.aescbcencryptionsecret",
            "cluster.aescbcEncryptionSecret",
        );
        if aescbc.is_some() && secretbox.is_some() {
            self.errors.push(format!(
                "both cluster.aescbcEncryptionSecret and {from} are set; a bundle holds one \
                 etcd encryption secret"
            ));
        }
        if aescbc.is_none() && secretbox.is_none() {
            self.errors.push(format!(
                "no etcd encryption secret: cluster.secretboxEncryptionSecret, \
                 cluster.aescbcEncryptionSecret and a secretbox key in {KIND} are all missing"
            ));
        }
        (aescbc, secretbox)
    }
}

fn b64(pem_text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem_text)
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use super::*;
    use crate::contract::Contract;
    use crate::generate::{GenerateOptions, MachineType};

    /// A 1.6-contract bundle: today's shape with an ECDSA service-account key (milliseconds,
    /// where RSA-4096 takes a second); the renderer does not care which contract made it.
    static BUNDLE: LazyLock<Bundle> =
        LazyLock::new(|| Bundle::generate((1, 6)).expect("a bundle generates"));

    fn render(bundle: &Bundle, contract: Contract, machine_type: MachineType) -> MachineConfig {
        let opts = GenerateOptions::new(contract, machine_type, "adopt", "https://adopt:6443");
        MachineConfig::generate(bundle, &opts).expect("renders")
    }

    fn assert_same(derived: &Bundle, original: &Bundle, what: &str) {
        // Field by field first, so a failure names the field (values are never printed).
        let pairs = [
            ("cluster.id", &derived.cluster.id, &original.cluster.id),
            (
                "cluster.secret",
                &derived.cluster.secret,
                &original.cluster.secret,
            ),
            (
                "secrets.bootstraptoken",
                &derived.secrets.bootstrap_token,
                &original.secrets.bootstrap_token,
            ),
            (
                "trustdinfo.token",
                &derived.trustd_info.token,
                &original.trustd_info.token,
            ),
            (
                "certs.etcd.crt",
                &derived.certs.etcd.crt,
                &original.certs.etcd.crt,
            ),
            (
                "certs.etcd.key",
                &derived.certs.etcd.key,
                &original.certs.etcd.key,
            ),
            (
                "certs.k8s.crt",
                &derived.certs.k8s.crt,
                &original.certs.k8s.crt,
            ),
            (
                "certs.k8s.key",
                &derived.certs.k8s.key,
                &original.certs.k8s.key,
            ),
            (
                "certs.k8saggregator.crt",
                &derived.certs.k8s_aggregator.crt,
                &original.certs.k8s_aggregator.crt,
            ),
            (
                "certs.k8saggregator.key",
                &derived.certs.k8s_aggregator.key,
                &original.certs.k8s_aggregator.key,
            ),
            (
                "certs.k8sserviceaccount.key",
                &derived.certs.k8s_service_account.key,
                &original.certs.k8s_service_account.key,
            ),
            (
                "certs.os.crt",
                &derived.certs.os.crt,
                &original.certs.os.crt,
            ),
            (
                "certs.os.key",
                &derived.certs.os.key,
                &original.certs.os.key,
            ),
        ];
        for (name, a, b) in pairs {
            assert!(a == b, "{what}: {name} differs");
        }
        assert!(
            derived.secrets.secretbox_encryption_secret
                == original.secrets.secretbox_encryption_secret,
            "{what}: secretboxencryptionsecret differs"
        );
        assert!(
            derived.secrets.aescbc_encryption_secret == original.secrets.aescbc_encryption_secret,
            "{what}: aescbcencryptionsecret differs"
        );
        assert!(derived == original, "{what}: bundles differ");
        assert!(
            derived.to_yaml() == original.to_yaml(),
            "{what}: the written files differ"
        );
    }

    #[test]
    fn every_contract_derives_back_the_bundle_it_was_rendered_from() {
        for contract in [
            Contract::V1_11,
            Contract::V1_12,
            Contract::V1_13,
            Contract::V1_14,
        ] {
            let cfg = render(&BUNDLE, contract, MachineType::ControlPlane);
            let what = format!("contract {contract}");
            let derived = bundle_from_config(&cfg).unwrap_or_else(|e| panic!("{what}: {e:#}"));
            assert_same(&derived, &BUNDLE, &what);
            // And through the file a user has: the encoded YAML, parsed again.
            let reread = MachineConfig::parse(&cfg.to_yaml()).unwrap();
            assert_same(&bundle_from_config(&reread).unwrap(), &BUNDLE, &what);
        }
    }

    #[test]
    fn an_aescbc_bundle_round_trips_through_a_v1alpha1_config() {
        let mut bundle = BUNDLE.clone();
        bundle.secrets.aescbc_encryption_secret = bundle.secrets.secretbox_encryption_secret.take();
        let mut cfg = render(&bundle, Contract::V1_13, MachineType::ControlPlane);
        // The 1.13 renderer writes only the secretbox field (as talosctl does); a cluster made
        // before secretbox has the aescbc one.
        let cluster = cfg.v1alpha1_mut().unwrap()["cluster"]
            .as_object_mut()
            .unwrap();
        cluster.remove("secretboxEncryptionSecret");
        cluster.insert(
            "aescbcEncryptionSecret".into(),
            json!(bundle.secrets.aescbc_encryption_secret),
        );
        assert_same(&bundle_from_config(&cfg).unwrap(), &bundle, "aescbc");
    }

    #[test]
    fn a_worker_config_is_refused_with_what_to_use_instead() {
        for contract in [Contract::V1_13, Contract::V1_14] {
            let cfg = render(&BUNDLE, contract, MachineType::Worker);
            let e = bundle_from_config(&cfg).unwrap_err().to_string();
            assert!(e.contains(WORKER_HINT), "{e}");
            // Without machine.type the missing keys still say so.
            let mut untyped = cfg.clone();
            untyped.v1alpha1_mut().unwrap()["machine"]
                .as_object_mut()
                .unwrap()
                .remove("type");
            let e = bundle_from_config(&untyped).unwrap_err().to_string();
            assert!(
                e.contains("machine.ca.key is missing: a worker config"),
                "{e}"
            );
            assert!(e.contains("cluster.etcd.ca.key is missing"), "{e}");
        }
    }

    #[test]
    fn missing_fields_are_named_by_their_config_path() {
        let mut cfg = render(&BUNDLE, Contract::V1_13, MachineType::ControlPlane);
        let doc = cfg.v1alpha1_mut().unwrap();
        doc["cluster"]["etcd"]["ca"]
            .as_object_mut()
            .unwrap()
            .remove("key");
        doc["cluster"]["aggregatorCA"]["crt"] = json!("");
        doc["cluster"]["token"] = json!("nodot");
        doc["machine"]["token"] = json!(5);
        doc["cluster"]
            .as_object_mut()
            .unwrap()
            .remove("serviceAccount");
        let e = bundle_from_config(&cfg).unwrap_err().to_string();
        for expected in [
            "cluster.etcd.ca.key is missing",
            "cluster.aggregatorCA.crt is missing",
            "cluster.token: expected a bootstrap token, ID.SECRET",
            "machine.token: expected a string, got a number",
            "cluster.serviceAccount.key is missing",
        ] {
            assert!(e.contains(expected), "missing {expected:?} in {e}");
        }

        let mut cfg = render(&BUNDLE, Contract::V1_14, MachineType::ControlPlane);
        for d in &mut cfg.docs {
            match d.get("kind").and_then(Value::as_str) {
                Some("KubeAggregatorCAConfig") => {
                    d["issuingCA"].as_object_mut().unwrap().remove("key");
                }
                Some("KubeServiceAccountConfig") => d["issuer"]["privateKey"] = json!(""),
                _ => {}
            }
        }
        cfg.docs
            .retain(|d| d.get("kind").and_then(Value::as_str) != Some("DiscoveryIdentityConfig"));
        let e = bundle_from_config(&cfg).unwrap_err().to_string();
        for expected in [
            "KubeAggregatorCAConfig.issuingCA.key is missing",
            "KubeServiceAccountConfig.issuer.privateKey is missing",
            "there is no DiscoveryIdentityConfig document",
        ] {
            assert!(e.contains(expected), "missing {expected:?} in {e}");
        }
    }

    #[test]
    fn invalid_values_are_named_by_config_path_without_their_value() {
        let mut cfg = render(&BUNDLE, Contract::V1_13, MachineType::ControlPlane);
        let etcd_key = BUNDLE.certs.etcd.key.clone();
        // A valid certificate where the OS CA key belongs, and an etcd key as the k8s cert.
        let doc = cfg.v1alpha1_mut().unwrap();
        doc["machine"]["ca"]["key"] = json!(BUNDLE.certs.os.crt);
        doc["cluster"]["ca"]["crt"] = json!(etcd_key);
        let e = bundle_from_config(&cfg).unwrap_err().to_string();
        assert!(
            e.starts_with("the config does not hold a valid secrets bundle: "),
            "{e}"
        );
        assert!(
            e.contains("machine.ca.key: not a valid base64 PEM private key"),
            "{e}"
        );
        assert!(
            e.contains("cluster.ca.crt: not a valid base64 PEM certificate"),
            "{e}"
        );
        assert!(
            !e.contains(&etcd_key) && !e.contains(&BUNDLE.cluster.secret),
            "{e}"
        );
    }

    fn encryption(cfg: &mut MachineConfig) -> &mut Value {
        cfg.docs
            .iter_mut()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some("KubeEtcdEncryptionConfig"))
            .unwrap()
    }

    #[test]
    fn the_1_14_etcd_encryption_document_follows_upstreams_first_provider_rule() {
        let base = render(&BUNDLE, Contract::V1_14, MachineType::ControlPlane);
        // identity first: upstream stops at the first provider, so no secret is found.
        let mut cfg = base.clone();
        encryption(&mut cfg)["config"]["resources"][0]["providers"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"identity": {}}));
        let e = bundle_from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains("no etcd encryption secret"), "{e}");
        // A second resource list before the one naming secrets is skipped.
        let mut cfg = base.clone();
        encryption(&mut cfg)["config"]["resources"]
            .as_array_mut()
            .unwrap()
            .insert(
                0,
                json!({"resources": ["configmaps"], "providers": [{"secretbox": {"keys": [{"name": "x", "secret": "other"}]}}]}),
            );
        assert_same(&bundle_from_config(&cfg).unwrap(), &BUNDLE, "skipped list");
    }

    #[test]
    fn no_v1alpha1_document() {
        let cfg =
            MachineConfig::parse("apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n")
                .unwrap();
        let e = bundle_from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains("no v1alpha1 document"), "{e}");
    }
}
