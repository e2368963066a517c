//! Node-specific values out of every recorded text, so the answers of two clusters compare and a
//! report reveals nothing about the cluster it came from.
//!
//! Three layers, in this order:
//! 1. secret values known to the run (the talosconfig's key material, each node's config secrets)
//!    become `<secret>`: a last line of defence, since no probe records such values;
//! 2. values known to the run become named placeholders: a node's address becomes its label
//!    (`<cp1>`), its hostname `<cp1 hostname>`, the cluster name `<cluster>`, the run's temporary
//!    directory `<tmp>`;
//! 3. patterns: IPv6 addresses, then PEM blocks, timestamps, UUIDs, IPv4 addresses, versions,
//!    long hex strings, line numbers and long base64 runs become `<address>`, `<pem>`, `<time>`,
//!    `<uuid>`, `<address>`, `<version>`, `<hex>`, `line <n>` and `<base64>`.

use regex::Regex;

/// Shorter secrets are not masked: they would match ordinary words.
const MIN_SECRET_LEN: usize = 8;

pub struct Normaliser {
    secrets: Vec<String>,
    /// (pattern matching the value as a whole word, placeholder), longest value first.
    known: Vec<(String, Regex, String)>,
    /// Candidates for IPv6 addresses, checked by parsing (a pattern alone would take Rust paths
    /// like `tonic::transport` for addresses).
    ipv6: Regex,
    patterns: Vec<(Regex, &'static str)>,
    /// Candidates for base64 key material, checked by `looks_like_key_material`.
    base64: Regex,
}

impl Default for Normaliser {
    fn default() -> Self {
        Normaliser::new()
    }
}

impl Normaliser {
    pub fn new() -> Normaliser {
        let pattern = |re: &str| Regex::new(re).expect("the normaliser's patterns are valid");
        Normaliser {
            secrets: Vec::new(),
            known: Vec::new(),
            ipv6: pattern(r"(^|[^\w:.])(\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]?)($|[^\w.])"),
            patterns: vec![
                (
                    pattern(r"-----BEGIN [A-Z0-9 ]+-----[\s\S]*?(-----END [A-Z0-9 ]+-----|$)"),
                    "<pem>",
                ),
                (
                    pattern(
                        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?( [A-Z]{3,4})?",
                    ),
                    "<time>",
                ),
                (
                    pattern(
                        r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
                    ),
                    "<uuid>",
                ),
                (
                    pattern(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(/\d{1,2})?\b"),
                    "<address>",
                ),
                (
                    pattern(r"\bv?\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?(\+[0-9A-Za-z.]+)?\b"),
                    "<version>",
                ),
                (pattern(r"\b[0-9a-fA-F]{16,}\b"), "<hex>"),
                // Positions in a config differ with the config: `(line 55)`.
                (pattern(r"\bline \d+\b"), "line <n>"),
            ],
            base64: pattern(r"[A-Za-z0-9+/]{40,}={0,2}"),
        }
    }

    /// A secret value: masked wherever it appears.
    pub fn secret(&mut self, value: &str) {
        let value = value.trim();
        if value.len() >= MIN_SECRET_LEN && !self.secrets.iter().any(|s| s == value) {
            self.secrets.push(value.to_string());
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// A node-specific value with the placeholder that replaces it. The first placeholder
    /// registered for a value wins.
    pub fn known(&mut self, value: &str, placeholder: &str) {
        let value = value.trim();
        if value.is_empty() || self.known.iter().any(|(v, _, _)| v == value) {
            return;
        }
        // A whole word only, where `-` counts as part of a word: a hostname `cp1` must not change
        // `cp1-data`, nor a cluster name `prod` the word `production`.
        let re = format!(r"(^|[^\w-]){}($|[^\w-])", regex::escape(value));
        let Ok(re) = Regex::new(&re) else { return };
        self.known
            .push((value.to_string(), re, placeholder.to_string()));
        self.known
            .sort_by_key(|(v, _, _)| std::cmp::Reverse(v.len()));
    }

    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            out = out.replace(secret.as_str(), "<secret>");
        }
        for (_, re, placeholder) in &self.known {
            out = re
                .replace_all(&out, |c: &regex::Captures| {
                    format!("{}{placeholder}{}", &c[1], &c[2])
                })
                .into_owned();
        }
        out = self
            .ipv6
            .replace_all(&out, |c: &regex::Captures| {
                let bare = c[2].trim_start_matches('[').trim_end_matches(']');
                let has_digit = bare.bytes().any(|b| b.is_ascii_hexdigit());
                let address = has_digit && bare.parse::<std::net::Ipv6Addr>().is_ok();
                let middle = if address { "<address>" } else { &c[2] };
                format!("{}{middle}{}", &c[1], &c[3])
            })
            .into_owned();
        for (re, placeholder) in &self.patterns {
            out = re.replace_all(&out, *placeholder).into_owned();
        }
        self.base64
            .replace_all(&out, |c: &regex::Captures| {
                if looks_like_key_material(&c[0]) {
                    "<base64>".to_string()
                } else {
                    c[0].to_string()
                }
            })
            .into_owned()
    }
}

/// A long base64 run of random bytes mixes both cases and digits; a path of words such as
/// `/v1alpha1/ConformanceProbeUnknownKind/name` has few digits. tools/conformance's report check
/// uses the same rule.
pub fn looks_like_key_material(token: &str) -> bool {
    let has = |f: fn(&u8) -> bool| token.bytes().any(|b| f(&b));
    let digits = token.bytes().filter(u8::is_ascii_digit).count();
    has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase) && digits >= 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_labels_and_only_whole_words_match() {
        let mut n = Normaliser::new();
        n.known("10.0.0.2", "<cp1>");
        n.known("talos-abc", "<cp1 hostname>");
        assert_eq!(
            n.text("etcd on 10.0.0.2:50000 (talos-abc), not 10.0.0.20 or talos-abcd"),
            "etcd on <cp1>:50000 (<cp1 hostname>), not <address> or talos-abcd"
        );
        n.known("prod", "<cluster>");
        assert_eq!(
            n.text("prod prod-data production admin@prod"),
            "<cluster> prod-data production admin@<cluster>"
        );
    }

    #[test]
    fn patterns_hide_ids_versions_times_and_key_material() {
        let n = Normaliser::new();
        assert_eq!(
            n.text("node runs v1.13.6 since 2026-03-01T10:00:00Z, boot 0f8c2a6e-4b7d-4c1e-9a3b-5d6e7f809a1b"),
            "node runs <version> since <time>, boot <uuid>"
        );
        assert_eq!(
            n.text("member 8e9e05c52164694d at [fd00::2]:2380 and fd00::3"),
            "member <hex> at <address>:2380 and <address>"
        );
        assert_eq!(
            n.text("tonic::transport::Error(Io) at 12:30:45"),
            "tonic::transport::Error(Io) at 12:30:45"
        );
        assert_eq!(
            n.text("key LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUxhZ2F3 end"),
            "key <base64> end"
        );
        assert_eq!(
            n.text("error decoding document /v1alpha1/ConformanceProbeUnknownKind/probe (line 55)"),
            "error decoding document /v1alpha1/ConformanceProbeUnknownKind/probe (line <n>)"
        );
        assert_eq!(
            n.text("a -----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY----- b"),
            "a <pem> b"
        );
        // Ordinary text and times of day survive.
        assert_eq!(
            n.text("waiting for etcd to be healthy: OK (12:30:45)"),
            "waiting for etcd to be healthy: OK (12:30:45)"
        );
    }

    #[test]
    fn secrets_are_masked_first_and_short_ones_ignored() {
        let mut n = Normaliser::new();
        n.secret("abc");
        n.secret("s3cr3t-token.value");
        n.known("s3cr3t", "<cp1>");
        assert_eq!(n.text("token s3cr3t-token.value abc"), "token <secret> abc");
    }
}
