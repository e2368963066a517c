//! Kubernetes keys and CAs: `.cluster.{ca, acceptedCAs, aggregatorCA, serviceAccount,
//! secretboxEncryptionSecret, aescbcEncryptionSecret}` → KubeAPIServerCAConfig,
//! KubeAggregatorCAConfig, KubeServiceAccountConfig and KubeEtcdEncryptionConfig
//! (`types/k8s/{apiserver_ca,aggregator_ca,service_account,etcd_encryption}.go`, the shims in
//! `types/v1alpha1/v1alpha1_k8s_bridge.go`, `generate/kubernetes.go`, and the legacy encryption
//! rendering in `internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/apiserver.go`,
//! v1.14.0-rc.1).
//!
//! The legacy fields hold base64 of PEM (`crt`/`key`); the 1.14 documents hold the PEM text
//! (`cert`/`key`). Decoding errors name the field, never the value.

use base64::Engine as _;
use serde_json::{Value, json};

use super::builder::{Builder, single};

const API_SERVER_CA: &str = "KubeAPIServerCAConfig";
const AGGREGATOR_CA: &str = "KubeAggregatorCAConfig";
const SERVICE_ACCOUNT: &str = "KubeServiceAccountConfig";
const ETCD_ENCRYPTION: &str = "KubeEtcdEncryptionConfig";

pub(super) fn convert(b: &mut Builder) {
    kubernetes_ca(b);
    for (path, kind, fields) in [
        (
            ".cluster.aggregatorCA",
            AGGREGATOR_CA,
            &[("crt", "issuingCA.cert"), ("key", "issuingCA.key")][..],
        ),
        (
            ".cluster.serviceAccount",
            SERVICE_ACCOUNT,
            &[("key", "issuer.privateKey")][..],
        ),
    ] {
        if b.is_worker() {
            if b.take(path).is_some() {
                b.drop_on_worker(path, kind);
            }
            continue;
        }
        let Some(mut s) = b.take_section(path, kind) else {
            continue;
        };
        for (key, field) in fields {
            if let Some(v) = s.take(key) {
                let from = s.at(key);
                if let Some(pem) = pem_text(b, &from, &v) {
                    b.put(&from, single(kind), field, json!(pem));
                }
            }
        }
        b.finish(s);
    }
    etcd_encryption(b);
}

/// The PEM text of a legacy base64 field; `None` (and a refusal when it is not empty) otherwise.
fn pem_text(b: &mut Builder, from: &str, v: &Value) -> Option<String> {
    let b64 = b.string(from, v)?;
    if b64.is_empty() {
        return None;
    }
    let text = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    if text.is_none() {
        b.refuse(
            from,
            "expected base64 of a PEM block, as the legacy field holds (the 1.14 documents take \
             the PEM text itself)",
        );
    }
    text
}

/// `.cluster.ca` and `.cluster.acceptedCAs`. On a control plane the CA is the issuing CA. On a
/// worker only the certificate counts (the shim's `IssuingCA()` is nil without a key) and the
/// accepted CAs are `[ca.crt] + acceptedCAs` (`K8sAPIServerCAConfig`); the 1.14 worker render
/// holds `acceptedCAs: [<the CA>]`, so a new CA replaces that list: the document is deleted and
/// written again, as `rotatepatcher` puts the new CA first "to match pre-multidoc ordering".
fn kubernetes_ca(b: &mut Builder) {
    let mut crt = None;
    if let Some(mut s) = b.take_section(".cluster.ca", API_SERVER_CA) {
        if let Some(v) = s.take("crt") {
            let from = s.at("crt");
            crt = pem_text(b, &from, &v).map(|pem| (from, pem));
        }
        if let Some(v) = s.take("key") {
            let from = s.at("key");
            if let Some(pem) = pem_text(b, &from, &v) {
                if b.is_worker() {
                    b.refuse(
                        &from,
                        "issuing Kubernetes API CA key is not allowed on non-controlplane nodes \
                         (.cluster.ca); remove the key from the worker's patch",
                    );
                } else {
                    b.put(&from, single(API_SERVER_CA), "issuingCA.key", json!(pem));
                }
            }
        }
        b.finish(s);
    }
    let mut accepted = Vec::new();
    let from = ".cluster.acceptedCAs";
    if let Some(v) = b.take(from)
        && let Some(items) = b.list(from, v)
    {
        for (i, item) in items.into_iter().enumerate() {
            let at = format!("{from}[{i}]");
            let Some(mut c) = b.section(&at, item, API_SERVER_CA) else {
                continue;
            };
            if let Some(v) = c.take("crt")
                && let Some(pem) = pem_text(b, &c.at("crt"), &v)
            {
                accepted.push(json!(pem));
            }
            b.finish(c);
        }
    }

    let doc = single(API_SERVER_CA);
    match crt {
        Some((crt_from, pem)) if b.is_worker() => {
            if !accepted.is_empty() {
                b.record(from, "KubeAPIServerCAConfig.acceptedCAs".into());
            }
            let mut list = vec![json!(pem)];
            list.append(&mut accepted);
            b.delete(&crt_from, doc);
            b.put(&crt_from, doc, "acceptedCAs", Value::Array(list));
            b.warn(format!(
                "{crt_from} replaces KubeAPIServerCAConfig on this worker (acceptedCAs: this CA, \
                 then this patch's .cluster.acceptedCAs): CAs that earlier patches accept must be \
                 in this patch too"
            ));
        }
        Some((crt_from, pem)) => b.put(&crt_from, doc, "issuingCA.cert", json!(pem)),
        None => {}
    }
    if !accepted.is_empty() {
        b.put(from, doc, "acceptedCAs", Value::Array(accepted));
    }
}

/// The legacy secrets become the providers the legacy runtime renders (k8stemplates/apiserver.go):
/// secretbox with key `key2`, then aescbc with key `key1`, then `identity`. The document's
/// `config` merges as free-form data, where lists append, so the document is deleted and written
/// whole. (Upstream's own 1.14 generator writes no identity provider and the AES-CBC secret as
/// secretbox; the legacy form is what a running cluster used.)
fn etcd_encryption(b: &mut Builder) {
    let mut providers = Vec::new();
    let mut froms = Vec::new();
    for (path, provider, key) in [
        (".cluster.secretboxEncryptionSecret", "secretbox", "key2"),
        (".cluster.aescbcEncryptionSecret", "aescbc", "key1"),
    ] {
        let Some(v) = b.take(path) else {
            continue;
        };
        if b.drop_on_worker(path, ETCD_ENCRYPTION) {
            continue;
        }
        let Some(secret) = b.string(path, &v) else {
            continue;
        };
        if secret.is_empty() {
            continue;
        }
        providers.push(json!({ provider: {"keys": [{"name": key, "secret": secret}]} }));
        froms.push((path, provider));
    }
    let Some((first, _)) = froms.first().copied() else {
        return;
    };
    providers.push(json!({"identity": {}}));
    let doc = single(ETCD_ENCRYPTION);
    b.delete(first, doc);
    b.put(
        first,
        doc,
        "config",
        json!({"resources": [{"resources": ["secrets"], "providers": providers}]}),
    );
    for (from, _) in &froms[1..] {
        b.record(from, format!("{ETCD_ENCRYPTION}.config"));
    }
    let kinds: Vec<&str> = froms.iter().map(|(_, p)| *p).collect();
    b.warn(format!(
        "{first} replaces KubeEtcdEncryptionConfig whole: its providers are now {}, identity; \
         list any older key there too, or secrets encrypted with it can no longer be read",
        kinds.join(", ")
    ));
}
