//! Masking of secret values (config.md §7) for diffs and return values.
//!
//! Every field Talos itself redacts, plus the ones config.md recommends treating as sensitive
//! (manifest headers, inline manifest contents, machine files and env, the kubelet credential
//! provider config, extension service environment). Non-empty values become `******`, the
//! placeholder Talos also uses, so a redacted config still loads.
//!
//! For a diff, [`redacted_pair`] masks both sides and marks secrets that differ as
//! `****** (changed)`. It deliberately shows no hash of the value: a short hash of a
//! low-entropy secret (a password) could be brute-forced from the diff.

use std::collections::HashMap;

use serde_json::Value;

use crate::diff::doc_label;
use crate::document::{DocId, MachineConfig};

/// The placeholder for a masked value.
pub const MASK: &str = "******";
/// The placeholder for a masked value that differs from the other side of a diff.
pub const MASK_CHANGED: &str = "****** (changed)";

/// Secret paths in the v1alpha1 document: `[]` is any list item, `*` any map key.
const V1ALPHA1_SECRETS: &[&str] = &[
    "machine.token",
    "machine.ca.key",
    "machine.registries.config.*.auth.password",
    "machine.registries.config.*.auth.auth",
    "machine.registries.config.*.auth.identityToken",
    "machine.registries.config.*.tls.clientIdentity.key",
    "machine.network.interfaces[].wireguard.privateKey",
    "machine.network.interfaces[].wireguard.peers[].presharedKey",
    "machine.network.interfaces[].vip.equinixMetal.apiToken",
    "machine.network.interfaces[].vip.hcloud.apiToken",
    "machine.network.interfaces[].vlans[].vip.equinixMetal.apiToken",
    "machine.network.interfaces[].vlans[].vip.hcloud.apiToken",
    "machine.systemDiskEncryption.state.keys[].static.passphrase",
    "machine.systemDiskEncryption.ephemeral.keys[].static.passphrase",
    "cluster.secret",
    "cluster.token",
    "cluster.aescbcEncryptionSecret",
    "cluster.secretboxEncryptionSecret",
    "cluster.serviceAccount.key",
    "cluster.ca.key",
    "cluster.aggregatorCA.key",
    "cluster.etcd.ca.key",
    // Not redacted by Talos, sensitive in practice (config.md §7).
    "cluster.extraManifestHeaders.*",
    "cluster.inlineManifests[].contents",
    "machine.files[].content",
    "machine.env.*",
    "machine.kubelet.credentialProviderConfig",
];

/// Secret paths of multi-document kinds (1.13 and 1.14).
const KIND_SECRETS: &[(&str, &[&str])] = &[
    ("RegistryAuthConfig", &["password", "auth", "identityToken"]),
    ("RegistryTLSConfig", &["clientIdentity.key"]),
    ("VolumeConfig", &["encryption.keys[].static.passphrase"]),
    ("UserVolumeConfig", &["encryption.keys[].static.passphrase"]),
    ("RawVolumeConfig", &["encryption.keys[].static.passphrase"]),
    ("SwapVolumeConfig", &["encryption.keys[].static.passphrase"]),
    ("HCloudVIPConfig", &["apiToken"]),
    ("WireguardConfig", &["privateKey", "peers[].presharedKey"]),
    ("SideroLinkConfig", &["uniqueToken"]),
    ("KubeAPIServerCAConfig", &["issuingCA.key"]),
    ("KubeAggregatorCAConfig", &["issuingCA.key"]),
    ("KubeServiceAccountConfig", &["issuer.privateKey"]),
    ("DiscoveryIdentityConfig", &["clusterSecret"]),
    ("EnvironmentConfig", &["variables.*"]),
    // Recommended sensitive, 1.14 equivalents of the v1alpha1 fields above.
    ("KubeInlineManifestConfig", &["manifest"]),
    ("KubeExternalManifestConfig", &["headers.*"]),
    ("KubeCredentialProviderConfig", &["configuration"]),
];

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Seg {
    Key(String),
    Index(usize),
}

/// How a secret location is masked.
#[derive(Clone, Copy, PartialEq)]
enum Style {
    /// The whole value becomes the mask.
    Whole,
    /// `KEY=VALUE` list item: only the value part is masked.
    EnvItem,
    /// A URL: only the `jointoken` query parameter is masked.
    JoinToken,
}

struct Location {
    doc: usize,
    path: Vec<Seg>,
    style: Style,
}

/// Every non-empty secret location in the config.
fn locations(cfg: &MachineConfig) -> Vec<Location> {
    let mut out = Vec::new();
    for (i, doc) in cfg.docs.iter().enumerate() {
        let id = DocId::of(doc);
        let mut add = |pattern: &str, style: Style| {
            let segs: Vec<&str> = split_pattern(pattern);
            let mut found = Vec::new();
            walk(doc, &segs, &mut Vec::new(), &mut found);
            out.extend(found.into_iter().map(|path| Location {
                doc: i,
                path,
                style,
            }));
        };
        if id.is_v1alpha1() {
            V1ALPHA1_SECRETS.iter().for_each(|p| add(p, Style::Whole));
            continue;
        }
        for (kind, paths) in KIND_SECRETS {
            if id.kind == *kind {
                paths.iter().for_each(|p| add(p, Style::Whole));
            }
        }
        match id.kind.as_str() {
            "ExtensionServiceConfig" => add("environment[]", Style::EnvItem),
            "SideroLinkConfig" => add("apiUrl", Style::JoinToken),
            "KubeEtcdEncryptionConfig" => {
                // Every key named `secret` anywhere inside `config`.
                if let Some(config) = doc.get("config") {
                    let mut found = Vec::new();
                    find_named(
                        config,
                        "secret",
                        &mut vec![Seg::Key("config".into())],
                        &mut found,
                    );
                    out.extend(found.into_iter().map(|path| Location {
                        doc: i,
                        path,
                        style: Style::Whole,
                    }));
                }
            }
            _ => {}
        }
    }
    // Only non-empty values are secrets (as Talos does): `key: ""` on a worker stays visible.
    out.retain(|l| {
        get(&cfg.docs[l.doc], &l.path).is_some_and(|v| match (v, l.style) {
            (Value::Null, _) => false,
            (Value::String(s), Style::JoinToken) => join_token_span(s).is_some(),
            (Value::String(s), Style::EnvItem) => {
                s.split_once('=').is_some_and(|(_, v)| !v.is_empty())
            }
            (Value::String(s), _) => !s.is_empty(),
            (Value::Object(m), _) => !m.is_empty(),
            (Value::Array(a), _) => !a.is_empty(),
            _ => true,
        })
    });
    out
}

fn split_pattern(p: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for part in p.split('.') {
        match part.strip_suffix("[]") {
            Some(k) => {
                out.push(k);
                out.push("[]");
            }
            None => out.push(part),
        }
    }
    out
}

fn walk(v: &Value, pattern: &[&str], path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    let Some((first, rest)) = pattern.split_first() else {
        out.push(path.clone());
        return;
    };
    match (*first, v) {
        ("[]", Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                walk(item, rest, path, out);
                path.pop();
            }
        }
        ("*", Value::Object(map)) => {
            for (k, child) in map {
                path.push(Seg::Key(k.clone()));
                walk(child, rest, path, out);
                path.pop();
            }
        }
        (key, Value::Object(map)) => {
            if let Some(child) = map.get(key) {
                path.push(Seg::Key(key.to_string()));
                walk(child, rest, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn find_named(v: &Value, name: &str, path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                path.push(Seg::Key(k.clone()));
                if k == name && !child.is_object() && !child.is_array() {
                    out.push(path.clone());
                } else {
                    find_named(child, name, path, out);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                find_named(child, name, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn get<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| match seg {
        Seg::Key(k) => cur.get(k.as_str()),
        Seg::Index(i) => cur.get(*i),
    })
}

fn get_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |cur, seg| match seg {
        Seg::Key(k) => cur.get_mut(k.as_str()),
        Seg::Index(i) => cur.get_mut(*i),
    })
}

/// Byte range of the `jointoken` query value inside a URL, if any and non-empty.
fn join_token_span(url: &str) -> Option<(usize, usize)> {
    let q = url.find('?')?;
    let mut pos = q + 1;
    for part in url[q + 1..].split('&') {
        if let Some(val) = part.strip_prefix("jointoken=") {
            let start = pos + "jointoken=".len();
            let end = start + val.split('#').next().unwrap_or("").len();
            return (end > start).then_some((start, end));
        }
        pos += part.len() + 1;
    }
    None
}

/// The secret text at a location (for `secret_values`), and its masked replacement.
fn secret_text(v: &Value, style: Style) -> Option<String> {
    let s = v.as_str();
    match style {
        Style::Whole => Some(match v {
            Value::String(s) => s.clone(),
            // Structured or non-string values are masked whole; there is no single secret string.
            _ => return None,
        }),
        Style::EnvItem => s
            .and_then(|s| s.split_once('='))
            .map(|(_, v)| v.to_string()),
        Style::JoinToken => s.and_then(|s| join_token_span(s).map(|(a, b)| s[a..b].to_string())),
    }
}

fn masked(v: &Value, style: Style, mask: &str) -> Value {
    match (style, v.as_str()) {
        (Style::EnvItem, Some(s)) => match s.split_once('=') {
            Some((k, _)) => Value::String(format!("{k}={mask}")),
            None => Value::String(mask.into()),
        },
        (Style::JoinToken, Some(s)) => match join_token_span(s) {
            Some((a, b)) => Value::String(format!("{}{mask}{}", &s[..a], &s[b..])),
            None => Value::String(mask.into()),
        },
        _ => Value::String(mask.into()),
    }
}

/// A copy of the config with every secret value replaced by `******`.
pub fn redacted(cfg: &MachineConfig) -> MachineConfig {
    let mut out = cfg.clone();
    for loc in locations(cfg) {
        if let Some(slot) = get_mut(&mut out.docs[loc.doc], &loc.path) {
            *slot = masked(slot, loc.style, MASK);
        }
    }
    out
}

/// Both configs masked for a diff. A secret that is new in `after` or differs from the value
/// at the same place in `before` is shown as `****** (changed)` on the `after` side, so the
/// diff still shows that it changed without revealing either value.
pub fn redacted_pair(
    before: &MachineConfig,
    after: &MachineConfig,
) -> (MachineConfig, MachineConfig) {
    // Documents are matched by identity, in order, so positions of equal IDs line up.
    let key = |cfg: &MachineConfig, doc: usize| -> (DocId, usize) {
        let id = DocId::of(&cfg.docs[doc]);
        let nth = cfg.docs[..doc]
            .iter()
            .filter(|d| DocId::of(d) == id)
            .count();
        (id, nth)
    };
    let mut before_values: HashMap<((DocId, usize), Vec<Seg>), Value> = HashMap::new();
    for loc in locations(before) {
        if let Some(v) = get(&before.docs[loc.doc], &loc.path) {
            before_values.insert((key(before, loc.doc), loc.path.clone()), v.clone());
        }
    }
    let mut a = after.clone();
    for loc in locations(after) {
        let current = get(&after.docs[loc.doc], &loc.path).cloned();
        let old = before_values.get(&(key(after, loc.doc), loc.path.clone()));
        let changed = old != current.as_ref();
        if let (Some(slot), Some(v)) = (get_mut(&mut a.docs[loc.doc], &loc.path), current) {
            *slot = masked(&v, loc.style, if changed { MASK_CHANGED } else { MASK });
        }
    }
    (redacted(before), a)
}

/// The raw secret strings in the config, longest first, for masking any output as a last
/// line of defence. Multi-line values (PEM text in 1.14 documents) also contribute each long
/// line, because an encoder may print them line by line.
pub fn secret_values(cfg: &MachineConfig) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for loc in locations(cfg) {
        let Some(text) = get(&cfg.docs[loc.doc], &loc.path).and_then(|v| secret_text(v, loc.style))
        else {
            continue;
        };
        if text.contains('\n') {
            for line in text.lines().map(str::trim) {
                if line.len() >= 16 && !line.starts_with("-----") {
                    out.push(line.to_string());
                }
            }
        }
        if !text.is_empty() {
            out.push(text);
        }
    }
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// Readable paths of the secret fields present in a config (for messages like "secrets
/// changed: cluster.token"); never the values.
pub fn secret_paths(cfg: &MachineConfig) -> Vec<String> {
    locations(cfg)
        .into_iter()
        .map(|l| {
            let mut s = doc_label(&DocId::of(&cfg.docs[l.doc]));
            for seg in &l.path {
                match seg {
                    Seg::Key(k) => crate::diff::push_key(&mut s, k),
                    Seg::Index(i) => s.push_str(&format!("[{i}]")),
                }
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> MachineConfig {
        MachineConfig {
            docs: vec![
                json!({"version": "v1alpha1", "machine": {
                    "type": "worker", "token": "tok-1234567890",
                    "ca": {"crt": "PUBLICCRT", "key": ""},
                    "env": {"HTTPS_PROXY": "http://user:pw@proxy"},
                    "files": [{"content": "filebody", "path": "/var/f", "op": "create"}],
                    "kubelet": {"credentialProviderConfig": {"apiVersion": "x"}},
                    "network": {"interfaces": [{"interface": "wg0", "wireguard": {"privateKey": "wgpriv"},
                        "vlans": [{"vlanId": 1, "vip": {"hcloud": {"apiToken": "hctoken"}}}]}]},
                    "registries": {"config": {"ghcr.io": {"auth": {"password": "regpw", "username": "me"}}}}},
                    "cluster": {"id": "public-id", "secret": "clustersecret", "token": "bt.token",
                        "ca": {"crt": "K8SCRT", "key": ""},
                        "extraManifestHeaders": {"Authorization": "Bearer abc"},
                        "inlineManifests": [{"name": "m1", "contents": "kind: Secret"}]}}),
                json!({"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}),
                json!({"apiVersion": "v1alpha1", "kind": "SideroLinkConfig",
                    "apiUrl": "https://siderolink.example:8099?jointoken=jt-secret&grpc_tunnel=true",
                    "uniqueToken": "uq-secret-1"}),
                json!({"apiVersion": "v1alpha1", "kind": "ExtensionServiceConfig", "name": "ext",
                    "environment": ["TOKEN=extsecret", "EMPTY="]}),
                json!({"apiVersion": "v1alpha1", "kind": "KubeEtcdEncryptionConfig",
                    "config": {"resources": [{"providers": [{"secretbox": {"keys": [{"name": "key2", "secret": "etcdsecret"}]}}]}]}}),
                json!({"apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig",
                    "issuer": {"privateKey": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAabcdefghijklmnop\n-----END RSA PRIVATE KEY-----\n",
                    "issuerURL": "https://base:6443"}}),
            ],
        }
    }

    const SECRETS: &[&str] = &[
        "tok-1234567890",
        "http://user:pw@proxy",
        "filebody",
        "wgpriv",
        "hctoken",
        "regpw",
        "clustersecret",
        "bt.token",
        "Bearer abc",
        "kind: Secret",
        "jt-secret",
        "uq-secret-1",
        "extsecret",
        "etcdsecret",
        "MIIEowIBAAKCAQEAabcdefghijklmnop",
    ];

    #[test]
    fn redacted_hides_every_secret_and_keeps_public_values() {
        let r = redacted(&sample());
        let text = serde_json::to_string(&r.docs).unwrap();
        for s in SECRETS {
            assert!(!text.contains(s), "{s} leaked: {text}");
        }
        for public in [
            "PUBLICCRT",
            "K8SCRT",
            "public-id",
            "\"me\"",
            "https://base:6443",
            "m1",
            "TOKEN=******",
        ] {
            assert!(text.contains(public), "{public} missing");
        }
        let v1 = r.v1alpha1().unwrap();
        assert_eq!(v1["machine"]["token"], MASK);
        // Empty secrets stay empty, as in Talos.
        assert_eq!(v1["machine"]["ca"]["key"], "");
        assert_eq!(v1["machine"]["kubelet"]["credentialProviderConfig"], MASK);
        assert_eq!(
            r.docs[2]["apiUrl"],
            "https://siderolink.example:8099?jointoken=******&grpc_tunnel=true"
        );
        assert_eq!(r.docs[3]["environment"], json!(["TOKEN=******", "EMPTY="]));
        assert_eq!(r.docs[1], sample().docs[1]);
    }

    #[test]
    fn secret_values_lists_raw_strings() {
        let vals = secret_values(&sample());
        for s in SECRETS {
            assert!(vals.iter().any(|v| v == s), "{s} not in {vals:?}");
        }
        assert!(
            !vals.iter().any(|v| v.is_empty()
                || v == "PUBLICCRT"
                || v == "-----BEGIN RSA PRIVATE KEY-----")
        );
        assert!(vals.windows(2).all(|w| w[0].len() >= w[1].len()));
    }

    #[test]
    fn redacted_pair_marks_changed_secrets_only() {
        let before = sample();
        let mut after = sample();
        after.docs[0]["cluster"]["token"] = json!("new.token");
        after.docs[0]["machine"]["env"]["NO_PROXY"] = json!("localhost");
        after.docs[2]["apiUrl"] =
            json!("https://siderolink.example:8099?jointoken=other&grpc_tunnel=true");
        let (b, a) = redacted_pair(&before, &after);
        assert_eq!(b.v1alpha1().unwrap()["cluster"]["token"], MASK);
        assert_eq!(a.v1alpha1().unwrap()["cluster"]["token"], MASK_CHANGED);
        assert_eq!(a.v1alpha1().unwrap()["cluster"]["secret"], MASK);
        assert_eq!(
            a.v1alpha1().unwrap()["machine"]["env"]["NO_PROXY"],
            MASK_CHANGED
        );
        assert_eq!(a.v1alpha1().unwrap()["machine"]["env"]["HTTPS_PROXY"], MASK);
        assert_eq!(
            a.docs[2]["apiUrl"],
            "https://siderolink.example:8099?jointoken=****** (changed)&grpc_tunnel=true"
        );
        let text = serde_json::to_string(&(b.docs, a.docs)).unwrap();
        for s in SECRETS.iter().chain(&["new.token", "other"]) {
            assert!(!text.contains(s), "{s} leaked");
        }
        // Identical configs: no change markers at all.
        let (_, same) = redacted_pair(&before, &before);
        assert!(
            !serde_json::to_string(&same.docs)
                .unwrap()
                .contains("changed")
        );
    }

    #[test]
    fn kube_114_manifest_documents_are_masked() {
        let c = MachineConfig {
            docs: vec![
                json!({"apiVersion": "v1alpha1", "kind": "KubeInlineManifestConfig", "name": "cilium", "manifest": "kind: Secret\ndata: {}"}),
                json!({"apiVersion": "v1alpha1", "kind": "KubeExternalManifestConfig", "name": "flux", "url": "https://x/y.yaml", "headers": {"Authorization": "Bearer t0k"}}),
            ],
        };
        let r = redacted(&c);
        assert_eq!(r.docs[0]["manifest"], MASK);
        assert_eq!(r.docs[1]["headers"]["Authorization"], MASK);
        assert_eq!(r.docs[1]["url"], "https://x/y.yaml");
        assert!(secret_values(&c).contains(&"Bearer t0k".to_string()));
    }

    #[test]
    fn secret_paths_are_readable() {
        let p = secret_paths(&sample());
        assert!(p.contains(&"machine.token".to_string()));
        assert!(p.contains(&"machine.registries.config[\"ghcr.io\"].auth.password".to_string()));
        assert!(p.contains(&"KubeEtcdEncryptionConfig.config.resources[0].providers[0].secretbox.keys[0].secret".to_string()));
    }
}
