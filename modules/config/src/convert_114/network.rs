//! The cluster network, the CNI and the manifests: `.cluster.network`,
//! `.cluster.extraManifests`, `.cluster.extraManifestHeaders` and `.cluster.inlineManifests` →
//! KubeNetworkConfig, KubeFlannelCNIConfig, KubeExternalManifestConfig and
//! KubeInlineManifestConfig (`types/k8s/{network,flannel,external_manifest,inline_manifest}.go`,
//! the shims `K8sNetworkConfig`, `K8sFlannelCNIConfig`, `K8sExternalManifestConfigs` in
//! `types/v1alpha1/v1alpha1_k8s_bridge.go`, and `generate/kubernetes.go`, v1.14.0-rc.1).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::builder::{Builder, Section, is_delete_marker, named, single};

const NETWORK: &str = "KubeNetworkConfig";
const FLANNEL: &str = "KubeFlannelCNIConfig";
const EXTERNAL: &str = "KubeExternalManifestConfig";
const INLINE: &str = "KubeInlineManifestConfig";

pub(super) fn convert(b: &mut Builder) {
    let headers = extra_manifest_headers(b);
    network(b, headers.as_ref());
    extra_manifests(b, headers.as_ref());
    if let Some((from, _)) = &headers
        && !b.converted.iter().any(|c| c.from == *from)
    {
        // On a worker the CNI URLs were dropped, and the headers with them.
        b.warn(format!(
            "{from} is dropped: no manifest of this patch takes it on this machine"
        ));
    }
    inline_manifests(b);
}

/// The legacy headers apply to every extra manifest URL and to the custom CNI URLs
/// (`K8sExternalManifestConfigs` in v1alpha1_k8s_bridge.go); in 1.14 each document carries its
/// own. The converter sees only the patch, so headers are converted onto the URLs the same patch
/// lists, and headers alone are refused.
fn extra_manifest_headers(b: &mut Builder) -> Option<(String, Value)> {
    let from = ".cluster.extraManifestHeaders";
    let has_urls = [".cluster.extraManifests", ".cluster.network.cni.urls"]
        .iter()
        .any(|p| {
            b.peek(p)
                .and_then(Value::as_array)
                .is_some_and(|l| !l.is_empty())
        });
    let headers = b.take(from)?;
    if !headers.is_object() || is_delete_marker(&headers) {
        b.refuse(
            from,
            "expected a mapping of header names to values; set the headers of each \
             KubeExternalManifestConfig document instead",
        );
        return None;
    }
    if !has_urls {
        b.refuse(
            from,
            "in Talos 1.14 each KubeExternalManifestConfig document carries its own headers, and \
             this patch lists no manifest URL to put them on; set `headers` in the \
             KubeExternalManifestConfig documents (custom-cni for the CNI) instead",
        );
        return None;
    }
    Some((from.to_string(), headers))
}

fn network(b: &mut Builder, headers: Option<&(String, Value)>) {
    let Some(mut s) = b.take_section(
        ".cluster.network",
        "KubeNetworkConfig and KubeFlannelCNIConfig",
    ) else {
        return;
    };
    for key in ["dnsDomain", "podSubnets", "serviceSubnets"] {
        if let Some(v) = s.take(key) {
            // Subnets replace the base's in both shapes (`merge:"replace"`).
            b.move_to(&s.at(key), v, single(NETWORK), key, false);
        }
    }
    if let Some(v) = s.take("cni") {
        cni(b, &s.at("cni"), v, headers);
    }
    b.finish(s);
}

/// The legacy CNI: flannel (the default), `none`, or `custom` with manifest URLs. The 1.14
/// generator writes KubeFlannelCNIConfig `{backendType: vxlan, backendPort: 4789}` (what the
/// legacy flannel shim hardcodes, v1alpha1_cniconfig.go) unless the CNI is custom, and one
/// KubeExternalManifestConfig per custom URL, the first named `custom-cni`. The consistency
/// rules and their texts are `ValidateCNI` in v1alpha1_validation.go.
fn cni(b: &mut Builder, path: &str, value: Value, headers: Option<&(String, Value)>) {
    if b.is_worker() {
        b.warn(format!(
            "{path} has no effect on worker machines and is dropped: control planes deploy the \
             CNI, and KubeFlannelCNIConfig is only allowed on control plane machines in Talos 1.14"
        ));
        return;
    }
    let Some(mut c) = b.section(
        path,
        value,
        "KubeFlannelCNIConfig or KubeExternalManifestConfig",
    ) else {
        return;
    };
    let name = c.take("name").and_then(|v| b.string(&c.at("name"), &v));
    let urls = c.take("urls").map(|v| (c.at("urls"), v));
    let flannel = c
        .take("flannel")
        .and_then(|v| b.section(&c.at("flannel"), v, FLANNEL));
    let name_path = c.at("name");
    b.finish(c);

    let urls: Vec<(String, String)> = match urls {
        Some((at, v)) => match b.list(&at, v) {
            Some(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, u)| {
                    let from = format!("{at}[{i}]");
                    b.string(&from, u).map(|u| (from, u))
                })
                .collect(),
            None => return,
        },
        None => Vec::new(),
    };
    match name.as_deref() {
        // No name: the patch adjusts the base's CNI, which in a 1.14 render is flannel unless
        // the render has a custom one.
        None => {
            if let Some((from, _)) = urls.first() {
                b.refuse(
                    from,
                    "CNI URLs need `name: custom` in the same patch; write the \
                     KubeExternalManifestConfig documents instead to add to an existing custom CNI",
                );
                return;
            }
            flannel_settings(b, flannel);
        }
        Some("flannel") => {
            if !urls.is_empty() {
                b.refuse(path, "\"urls\" field should be empty for \"flannel\" CNI");
                return;
            }
            b.put(&name_path, single(FLANNEL), "backendType", json!("vxlan"));
            b.put(&name_path, single(FLANNEL), "backendPort", json!(4789));
            flannel_settings(b, flannel);
        }
        Some(other @ ("none" | "custom")) => {
            if let Some(f) = flannel.as_ref().filter(|f| !f.is_empty()) {
                b.refuse(
                    &f.path,
                    format!(
                        "flannel settings are only for the flannel CNI, not \"{other}\" \
                         (\"flanneldExtraArgs\" field should be empty for \"{other}\" CNI)"
                    ),
                );
                return;
            }
            if other == "none" && !urls.is_empty() {
                b.refuse(path, "\"urls\" field should be empty for \"none\" CNI");
                return;
            }
            b.delete(&name_path, single(FLANNEL));
            if other == "custom" && urls.is_empty() {
                b.warn(format!(
                    "{path}: \"urls\" field should not be empty for \"custom\" CNI (no CNI \
                     manifest is deployed)"
                ));
            }
            for (i, (from, url)) in urls.into_iter().enumerate() {
                let name = if i == 0 {
                    "custom-cni".to_string()
                } else {
                    format!("custom-cni-{i}")
                };
                external_manifest(b, &from, &name, url, headers);
            }
        }
        Some(other) => b.refuse(
            &name_path,
            format!(
                "cni name should be one of [\"flannel\", \"custom\", \"none\"], got \"{other}\""
            ),
        ),
    }
}

fn flannel_settings(b: &mut Builder, flannel: Option<Section>) {
    let Some(mut f) = flannel else {
        return;
    };
    if let Some(v) = f.take("extraArgs") {
        // A plain list of flags in both shapes, appended.
        b.move_to(&f.at("extraArgs"), v, single(FLANNEL), "extraArgs", false);
    }
    if let Some(v) = f.take("kubeNetworkPoliciesEnabled") {
        let from = f.at("kubeNetworkPoliciesEnabled");
        b.move_to(
            &from,
            v,
            single(FLANNEL),
            "kubeNetworkPoliciesEnabled",
            false,
        );
    }
    b.finish(f);
}

/// One KubeExternalManifestConfig: `url`, and the patch's legacy headers.
fn external_manifest(
    b: &mut Builder,
    from: &str,
    name: &str,
    url: String,
    headers: Option<&(String, Value)>,
) {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        b.refuse(
            from,
            "manifest URL scheme must be http or https (KubeExternalManifestConfig refuses others)",
        );
        return;
    }
    let doc = named(EXTERNAL, name);
    b.put(from, doc, "url", json!(url));
    if let Some((headers_from, headers)) = headers {
        b.put(headers_from, doc, "headers", headers.clone());
    }
}

/// One KubeExternalManifestConfig per URL. Legacy manifests have no name (the shim uses the URL);
/// a 1.14 name must be a DNS-1123 subdomain, so it is derived from the host and the file name,
/// plus a short hash of the whole URL to keep it unique and the same on every run.
fn extra_manifests(b: &mut Builder, headers: Option<&(String, Value)>) {
    let from = ".cluster.extraManifests";
    let Some(v) = b.take(from) else {
        return;
    };
    let Some(items) = b.list(from, v) else {
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let at = format!("{from}[{i}]");
        let Some(url) = b.string(&at, item) else {
            continue;
        };
        external_manifest(b, &at, &manifest_name(&url), url, headers);
    }
}

/// `<host>-<file>-<6 hex digits of the URL's SHA-256>`, lowercase, DNS-1123. Only the host and
/// the last path segment are used: user info, query strings and the rest of the path may hold
/// tokens, and names show up in diffs.
pub(super) fn manifest_name(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority.rsplit('@').next().unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let file = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or_default();
    let mut name = String::new();
    for c in format!("{host}-{file}").chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    let name: String = name.chars().take(48).collect();
    let name = name.trim_matches('-');
    let hash = hex::encode(Sha256::digest(url.as_bytes()));
    if name.is_empty() {
        format!("manifest-{}", &hash[..6])
    } else {
        format!("{name}-{}", &hash[..6])
    }
}

/// One KubeInlineManifestConfig per manifest, `contents` → `manifest`. Legacy decoding strips
/// leading whitespace from the contents (`ClusterInlineManifests.UnmarshalYAML`), the new field
/// does not, so it is stripped here. The name is the manifest's identity and must now be a
/// DNS-1123 subdomain (`k8s/inline_manifest.go`): an invalid one is refused, not renamed.
fn inline_manifests(b: &mut Builder) {
    let from = ".cluster.inlineManifests";
    let Some(v) = b.take(from) else {
        return;
    };
    let Some(items) = b.list(from, v) else {
        return;
    };
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{from}[{i}]");
        let delete = is_delete_marker(&item);
        let Some(mut m) = (match item {
            Value::Object(mut map) => {
                map.shift_remove("$patch");
                b.section(&at, Value::Object(map), INLINE)
            }
            _ => b.section(&at, item, INLINE),
        }) else {
            continue;
        };
        let name = m.take("name").and_then(|v| b.string(&m.at("name"), &v));
        let contents = m.take("contents");
        b.finish(m);
        let Some(name) = name else {
            b.refuse(&at, "an inline manifest needs a name");
            continue;
        };
        if !is_dns_subdomain(&name) {
            b.refuse(
                &format!("{at}.name"),
                format!(
                    "manifest name {name:?} is not a valid DNS-1123 subdomain, which \
                     KubeInlineManifestConfig requires; rename the manifest (lowercase letters, \
                     digits, '-' and '.')"
                ),
            );
            continue;
        }
        let doc = named(INLINE, &name);
        if delete {
            b.delete(&at, doc);
            continue;
        }
        let manifest = match contents {
            Some(Value::String(s)) => s
                .trim_start_matches(['\t', '\n', '\u{b}', '\u{c}', '\r'])
                .to_string(),
            Some(_) => {
                b.refuse(&format!("{at}.contents"), "expected a string");
                continue;
            }
            None => String::new(),
        };
        b.put(&format!("{at}.contents"), doc, "manifest", json!(manifest));
    }
}

/// A DNS-1123 subdomain (Kubernetes `IsDNS1123Subdomain`): at most 253 characters, dot-separated
/// labels of lowercase letters, digits and '-', each starting and ending with a letter or digit.
pub(super) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_are_dns_names_without_credentials_or_queries() {
        let name = manifest_name(
            "https://user:pa55word@Raw.Example.com:8443/org/repo/deploy/App_v2.yaml?token=s3cr3t#x",
        );
        assert!(name.starts_with("raw-example-com-app-v2-yaml-"), "{name}");
        assert!(!name.contains("pa55word") && !name.contains("s3cr3t") && !name.contains("org"));
        assert!(is_dns_subdomain(&name), "{name}");
        // The same URL gives the same name; another URL another.
        assert_eq!(
            name,
            manifest_name(
                "https://user:pa55word@Raw.Example.com:8443/org/repo/deploy/App_v2.yaml?token=s3cr3t#x"
            )
        );
        assert_ne!(
            manifest_name("https://x.io/a.yaml"),
            manifest_name("https://x.io/b/a.yaml")
        );
        assert!(manifest_name("https://---/").starts_with("manifest-"));
        let long = manifest_name(&format!("https://example.com/{}.yaml", "a".repeat(300)));
        assert!(long.len() <= 63 && is_dns_subdomain(&long), "{long}");
    }

    #[test]
    fn dns_subdomains() {
        for ok in ["a", "ns-ci", "a.b-c.d1"] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", "My Manifest", "-a", "a-", "a..b", "A", "a_b"] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
