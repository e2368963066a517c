//! The Go library checks Talos's validation leans on, with their error texts: `net.ParseIP`,
//! `net.ParseCIDR`, `netip.ParsePrefix`, siderolabs/net v0.4.0's `ParseSubnetOrAddress` and
//! `ValidateEndpointURI` (net.go), and Talos's `pkg/machinery/labels` (validate.go @ v1.13.9,
//! unchanged at v1.14.1).

use std::net::IpAddr;

use super::multierror::{Errors, GoError};

/// `net.ParseIP(s) != nil`.
pub fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// `net.ParseCIDR`: an address, `/`, a decimal prefix length within the family's bits.
pub fn parse_cidr(s: &str) -> Result<(), String> {
    let bad = || Err(format!("invalid CIDR address: {s}"));
    let Some((ip, bits)) = s.split_once('/') else {
        return bad();
    };
    let Ok(ip) = ip.parse::<IpAddr>() else {
        return bad();
    };
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return bad();
    }
    let n: u32 = bits.parse().unwrap_or(u32::MAX);
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if n > max || (bits.len() > 1 && bits.starts_with('0')) {
        return bad();
    }
    Ok(())
}

/// `netip.ParsePrefix` accepts what `net.ParseCIDR` does (for the configs here).
pub fn is_prefix(s: &str) -> bool {
    parse_cidr(s).is_ok()
}

/// siderolabs/net `ParseSubnetOrAddress`: a prefix, or a bare address.
pub fn is_subnet_or_address(s: &str) -> bool {
    is_prefix(s) || is_ip(s)
}

/// The parts of Go's `url.Parse` that `ValidateEndpointURI` looks at: the host (`u.Host`).
fn url_host(raw: &str) -> String {
    // getScheme: a letter, then letters, digits, `+`, `-`, `.`, up to `:`.
    let mut rest = raw;
    if let Some(i) = raw.find(':') {
        let scheme = &raw[..i];
        let ok = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if ok {
            rest = &raw[i + 1..];
        }
    }
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let Some(authority) = rest.strip_prefix("//") else {
        return String::new();
    };
    let authority = authority.split('/').next().unwrap_or("");
    match authority.rfind('@') {
        Some(i) => authority[i + 1..].to_string(),
        None => authority.to_string(),
    }
}

/// Go's `url.URL.Hostname()` and `Port()` of a host.
fn split_host_port(host: &str) -> (&str, &str) {
    let (mut h, mut p) = (host, "");
    if let Some(i) = host.rfind(':') {
        let port = &host[i + 1..];
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h = &host[..i];
            p = port;
        }
    }
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    (h, p)
}

/// siderolabs/net `ValidateEndpointURI`.
pub fn validate_endpoint_uri(ep: &str) -> Result<(), String> {
    let host = url_host(ep);
    if host.matches(':').count() > 2 && (!host.contains('[') || !host.contains(']')) {
        return Err("IPv6 addresses MUST be enclosed by square brackets".into());
    }
    let (hostname, port) = split_host_port(&host);
    if hostname.is_empty() {
        return Err("hostname must not be blank".into());
    }
    if !port.is_empty() {
        match port.parse::<i64>() {
            Err(_) => return Err("port number must be numeric".into()),
            Ok(n) if !(1..=65535).contains(&n) => {
                return Err("port number must be between 1 and 65535".into());
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Go's `url.ParseRequestURI` accepts an absolute URL or an absolute path; the path it yields.
pub fn request_uri_path(raw: &str) -> Result<String, String> {
    let has_scheme = raw.split_once(':').is_some_and(|(s, _)| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    if !has_scheme && !raw.starts_with('/') {
        return Err(format!("parse {raw:?}: invalid URI for request"));
    }
    let rest = if has_scheme {
        raw.split_once(':').map(|(_, r)| r).unwrap_or("")
    } else {
        raw
    };
    let rest = rest.split('?').next().unwrap_or("");
    let path = match rest.strip_prefix("//") {
        Some(a) => a.find('/').map(|i| a[i..].to_string()).unwrap_or_default(),
        None => rest.to_string(),
    };
    Ok(path)
}

fn is_dns1123_label(l: &str) -> bool {
    let b = l.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.len() > 253 {
        return Err(format!(
            "domain name length exceeds limit of 253: {value:?}"
        ));
    }
    if !value.split('.').all(is_dns1123_label) {
        return Err(format!("domain doesn't match required format: {value:?}"));
    }
    Ok(())
}

fn qualified_name_part(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `labels.ValidateQualifiedName`.
pub fn qualified_name(value: &str) -> Result<(), String> {
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return Err(format!("prefix cannot be empty: {value:?}"));
            }
            if let Err(e) = dns1123_subdomain(prefix) {
                return Err(format!("prefix {prefix:?} is invalid: {e}"));
            }
            name
        }
        _ => return Err(format!("invalid format: too many slashes: {value:?}")),
    };
    if name.is_empty() {
        Err(format!("name cannot be empty: {value:?}"))
    } else if name.len() > 63 {
        Err(format!("name is too long: {value:?} (limit is 63)"))
    } else if !qualified_name_part(name) {
        Err(format!("name {name:?} is invalid"))
    } else {
        Ok(())
    }
}

/// `labels.ValidateLabelValue`.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.len() > 63 {
        return Err(format!("label value length exceeds limit of 63: {value:?}"));
    }
    if !value.is_empty() && !qualified_name_part(value) {
        return Err(format!("label value {value:?} is invalid"));
    }
    Ok(())
}

fn sorted(map: &serde_json::Map<String, serde_json::Value>) -> Vec<(&String, String)> {
    let mut v: Vec<(&String, String)> = map
        .iter()
        .map(|(k, v)| {
            (
                k,
                v.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| v.to_string()),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// `labels.Validate`.
pub fn labels(map: &serde_json::Map<String, serde_json::Value>) -> Option<GoError> {
    let mut errs = Errors::default();
    for (k, v) in sorted(map) {
        if let Err(e) = qualified_name(k) {
            errs.push(e);
        }
        if let Err(e) = label_value(&v) {
            errs.push(e);
        }
    }
    errs.or_nil()
}

/// `labels.ValidateAnnotations`.
pub fn annotations(map: &serde_json::Map<String, serde_json::Value>) -> Option<GoError> {
    let mut errs = Errors::default();
    let mut size = 0usize;
    for (k, v) in sorted(map) {
        if let Err(e) = qualified_name(k) {
            errs.push(e);
        }
        if matches!(
            k.as_str(),
            "talos.dev/owned-annotations" | "talos.dev/owned-labels" | "talos.dev/owned-taints"
        ) {
            errs.push(format!("annotation {k:?} is reserved"));
        }
        size += k.len() + v.len();
    }
    if size > 256 * 1024 {
        errs.push("total annotation size exceeds limit of 262144 bytes");
    }
    errs.or_nil()
}

/// `labels.ValidateTaints` (`constants.ValidEffects`).
pub fn taints(map: &serde_json::Map<String, serde_json::Value>) -> Option<GoError> {
    let mut errs = Errors::default();
    for (k, v) in sorted(map) {
        if let Err(e) = qualified_name(k) {
            errs.push(e);
            continue;
        }
        let (val, effect, found) = match v.split_once(':') {
            Some((a, b)) => (a.to_string(), b.to_string(), true),
            None => (v.clone(), v.clone(), false),
        };
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect.as_str()) {
            errs.push(format!("invalid taint effect: {effect:?}"));
            continue;
        }
        if found && let Err(e) = label_value(&val) {
            errs.push(e);
        }
    }
    errs.or_nil()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `pkg/machinery/labels/validate_test.go` @ v1.13.9, TestValidate "invalid".
    #[test]
    fn labels_like_upstream() {
        let m = json!({
            "345@.345/label": "value", "foo_": "bar", "/foo": "bar", "a/b/c": "bar",
            "kubernetes.io/hostname": "hostname1_", "a".repeat(64): "bar", "bar": "a".repeat(64),
        });
        let e = labels(m.as_object().unwrap()).unwrap().text();
        let long = "a".repeat(64);
        assert_eq!(
            e,
            format!(
                "7 errors occurred:\n\t* prefix cannot be empty: \"/foo\"\n\t* prefix \"345@.345\" is invalid: domain doesn't match required format: \"345@.345\"\n\t* invalid format: too many slashes: \"a/b/c\"\n\t* name is too long: \"{long}\" (limit is 63)\n\t* label value length exceeds limit of 63: \"{long}\"\n\t* name \"foo_\" is invalid\n\t* label value \"hostname1_\" is invalid\n\n"
            )
        );
    }

    /// siderolabs/net v0.4.0 `ValidateEndpointURI`.
    #[test]
    fn endpoints() {
        assert_eq!(validate_endpoint_uri("https://1.2.3.4:6443"), Ok(()));
        assert_eq!(
            validate_endpoint_uri("https://:6443"),
            Err("hostname must not be blank".into())
        );
        assert_eq!(
            validate_endpoint_uri("https://a:70000"),
            Err("port number must be between 1 and 65535".into())
        );
        assert_eq!(validate_endpoint_uri("https://[::1]:6443"), Ok(()));
    }
}
